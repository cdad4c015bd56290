"""First-order linear chains (HMM / CRF / chain structural SVM).

Factorisation: the score of labels ``y_0 .. y_{n-1}`` of an example of length ``n`` is
``sum_t potentials[t, y_{t-1}, y_t]`` where ``y_{-1} = 0`` is a virtual start state. Parts are
edges: ``parts[t, i, j] = 1`` iff ``y_{t-1} = i`` and ``y_t = j``. At ``t = 0`` only row 0 is a
part (rows 1.. are never used and get zero marginals); positions ``t >= n`` are padding.
Unary, transition, start and end potentials fold into this layout with
:meth:`LinearChain.potentials_from` (end potentials go to each example's last edge).

Potentials: (B, N, C, C), or factored: :class:`ChainPotentials` (emissions (B, N, C),
transitions (B, C, C) (a shared (C, C) matrix expanded), start and end (B, C)), which every
operation accepts without building the (B, N, C, C) tensor. Labels: (B, N) long, 0 at padded
positions.
Time O(B N C^2); memory O(B N C^2) for edge potentials, O(B N C + B C^2) factored
(backpointers are O(B N C)). k-best enumerates sidetracks of the backward max-plus tree (both
layouts): time O(B N C^2 + k B N C), memory O(B N C + k B N) (factored) or O(B N C^2) (edges).

References: Rabiner (1989) for Viterbi and forward-backward; Eppstein (1998), "Finding the k
shortest paths", for the heap-ordered tree of sidetracks behind the k-best.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Sequence, Union

import torch
from torch import Tensor

from structssl.memo import TensorMemo
from structssl.semirings import Log, Semiring, SmoothMax
from structssl.structures._chain_factored import (
    ChainPotentials,
    Plan,
    edge_kbest,
    exp_space_exact,
    factored_kbest,
    factored_log_partition,
    factored_viterbi,
)
from structssl.structures.base import (
    Potentials,
    Structure,
    adopt_num_labels,
    positive_int,
    semiring_sum,
)

__all__ = ["LinearChain", "ChainPotentials", "bio_allowed_transitions"]


class LinearChain(Structure):
    """First-order linear chain over ``C`` labels (see the module docstring for the layout).

    Args:
        num_labels: C, the number of labels.
        validate: check values at the public entry points (see :class:`Structure`).
        log_kernel: how the Log-semiring forward pass (log-partition, marginals) combines a
            step: ``"logsumexp"`` (exact in log space) or ``"expmm"`` (one batched matrix
            product of exponentiated, rescaled factors per step; entries whose mass falls
            below ``C * tiny / eps``, including exactly zero mass, are recomputed in log space,
            so it is exact at any scale). Both run inside a fused autograd function: the
            backward computes the edge marginals by one outside recursion over the stored
            forward variables (no autograd graph through the per-step ops).

    Factored potentials (:class:`ChainPotentials`): log Z and marginals run in exp space (one
    matrix product with the shared transitions per step, per-step rescaling, the beta recursion
    in the backward) when that is provably exact (every potential finite and a bounded range,
    see :func:`~structssl.structures._chain_factored.exp_space_exact`); otherwise (``-inf``
    masks, extreme scales) they go through the edge layout and ``log_kernel``. Viterbi and
    k-best always run on the factors. The marginals of factored potentials are factored:
    node marginals (B, N, C), expected transition counts (B, C, C), first / last label (B, C).

    Infinities: ``-inf`` forbids a part (exact, at any scale); positions ``>= lengths`` may hold
    anything; ``+inf`` / NaN at valid positions and examples with no valid structure raise
    ``ValueError`` naming the example (see :class:`~structssl.structures.base.Structure`).
    """

    event_shape_doc = "(N, C, C)"
    mask_value = float("-inf")  # exact exclusion (see Structure.mask_potentials)

    def __init__(
        self,
        num_labels: Optional[int] = None,
        validate: bool = True,
        log_kernel: Literal["logsumexp", "expmm"] = "logsumexp",
    ) -> None:
        super().__init__(validate)
        self.num_labels: int = 0 if num_labels is None else positive_int(num_labels, "num_labels")
        if log_kernel not in ("logsumexp", "expmm"):
            raise ValueError(f"log_kernel must be one of 'logsumexp', 'expmm'; got {log_kernel!r}")
        self.log_kernel = log_kernel

    def __repr__(self) -> str:
        return f"LinearChain(num_labels={self.num_labels or None})"

    def resolve_sizes(self, sizes: dict[str, Any]) -> None:
        """Take ``num_labels`` from the data when it was left out (``LinearChain()``).

        Called by the training procedures at setup with the data module's sizes.

        Raises:
            ValueError: ``num_labels`` was given and differs from the data's.
        """
        self.num_labels = adopt_num_labels(self.num_labels, sizes, "LinearChain")

    # ------------------------------------------------------------------ building potentials
    @staticmethod
    def potentials_from(
        unary: Tensor,
        transition: Optional[Tensor] = None,
        start: Optional[Tensor] = None,
        end: Optional[Tensor] = None,
        lengths: Optional[Tensor] = None,
    ) -> Tensor:
        """Fold unary, transition, start and end log-potentials into edge potentials.

        Args:
            unary: (B, N, C) per-position label potentials.
            transition: (C, C) or (B, C, C) or (B, N - 1, C, C) potentials of ``y_{t-1} = i ->
                y_t = j`` (default zero).
            start: (C,) or (B, C) potentials of the first label (default zero).
            end: (C,) or (B, C) potentials of the last label, added at position
                ``lengths - 1`` of each example (default zero).
            lengths: (B,) lengths, needed only with ``end`` (default: all N).

        Returns:
            (B, N, C, C) potentials.
        """
        if unary.dim() != 3:
            raise ValueError(f"unary must have shape (B, N, C); got {tuple(unary.shape)}")
        b, n, c = unary.shape
        dev = unary.device
        if end is not None:
            if end.shape[-1] != c or end.dim() > 2:
                raise ValueError(f"end must have shape (C,) or (B, C); got {tuple(end.shape)}")
            if lengths is None:
                lengths = torch.full((b,), n, dtype=torch.long, device=dev)
            elif lengths.shape != (b,) or (
                lengths.numel() and (int(lengths.min()) < 1 or int(lengths.max()) > n)
            ):
                got = f"values in [{int(lengths.min())}, {int(lengths.max())}]" if lengths.numel() and lengths.shape == (b,) else f"shape {tuple(lengths.shape)}"
                raise ValueError(
                    f"lengths must have shape (B,) = ({b},) with values in [1, N] = [1, {n}] "
                    f"(the end potentials go to position lengths - 1); got {got}"
                )
            last = torch.arange(n, device=dev) == (lengths.view(b, 1) - 1)  # (B, N)
            # where, not a product: a -inf end potential must not give 0 * -inf = NaN elsewhere
            unary = unary + torch.where(last.unsqueeze(2), end.view(-1, 1, c), 0.0)  # (B, N, C)
        # edge: (B or 1, N, C, C) potentials that do not depend on the position's own label
        # score: transitions for t >= 1, start on row 0 (the virtual start state) at t = 0
        if transition is None:
            rest = unary.new_zeros(1, n - 1, c, c)
        elif transition.shape[-2:] != (c, c):
            raise ValueError(f"transition must end in ({c}, {c}); got {tuple(transition.shape)}")
        elif transition.dim() == 2:
            rest = transition.expand(1, n - 1, c, c)
        elif transition.dim() == 3 and transition.shape[0] == b:
            rest = transition.unsqueeze(1).expand(b, n - 1, c, c)
        elif transition.dim() == 4 and transition.shape[:2] == (b, n - 1):
            rest = transition
        else:
            raise ValueError(
                "transition must have shape (C, C), (B, C, C) or (B, N - 1, C, C) = "
                f"({b}, {n - 1}, {c}, {c}); got {tuple(transition.shape)}"
            )
        row0 = (torch.arange(c, device=dev) == 0).view(c, 1)  # (C, 1)
        if start is None:
            first = unary.new_zeros(1, 1, c, c)
        elif start.shape[-1] != c or start.dim() > 2:
            raise ValueError(f"start must have shape (C,) or (B, C); got {tuple(start.shape)}")
        else:
            first = torch.where(row0, start.view(-1, 1, c), 0.0).unsqueeze(1)  # (B or 1, 1, C, C)
        rows = max(first.shape[0], rest.shape[0])
        edge = torch.cat([first.expand(rows, 1, c, c), rest.expand(rows, n - 1, c, c)], dim=1)
        return unary.unsqueeze(2) + edge  # (B, N, C, C): [t, i, j] = u[t, j] + edge[t, i, j]

    def edge_potentials(self, potentials: Potentials, lengths: Optional[Tensor] = None) -> Tensor:
        """The (B, N, C, C) edge layout of ``potentials`` (returned as is when already edges).

        Differentiable; for the operations that need the edge layout (constraint features,
        per-position transitions), and the reference the factored path is tested against.
        """
        potentials, lengths = self.check(potentials, lengths)
        return self._edges(potentials, lengths)

    @staticmethod
    def _edges(potentials: Potentials, lengths: Tensor) -> Tensor:
        if isinstance(potentials, Tensor):
            return potentials
        assert isinstance(potentials, ChainPotentials)
        return LinearChain.potentials_from(*potentials, lengths=lengths)

    # ------------------------------------------------------------------ checks
    def _check(self, potentials: Potentials, lengths: Optional[Tensor]) -> tuple[Potentials, Tensor]:
        c = self.num_labels
        if not isinstance(potentials, (Tensor, ChainPotentials)):
            raise TypeError(
                f"LinearChain potentials must be a tensor (B, N, C, C) or ChainPotentials; got a "
                f"{type(potentials).__name__}"
            )
        if not c:
            raise ValueError(
                "LinearChain num_labels is not set: pass num_labels=C, or train it through a "
                "procedure whose data module gives it"
            )
        if isinstance(potentials, ChainPotentials):
            return self._check_factored(potentials, lengths)
        if potentials.dim() != 4 or potentials.shape[-2:] != (c, c):
            raise ValueError(
                f"potentials must have shape (B, N, C, C) with C = num_labels = {c}; got "
                f"{tuple(potentials.shape)}"
            )
        b, n = potentials.shape[:2]
        if n == 0:
            raise ValueError(f"potentials must have N >= 1 positions; got shape {tuple(potentials.shape)}")
        return potentials, self.check_lengths(lengths, b, n, potentials.device)

    def _check_factored(
        self, potentials: ChainPotentials, lengths: Optional[Tensor]
    ) -> tuple[ChainPotentials, Tensor]:
        c = self.num_labels
        emissions = potentials.emissions
        if emissions.dim() != 3 or emissions.shape[2] != c or emissions.shape[1] == 0:
            raise ValueError(
                f"potentials.emissions must have shape (B, N, C) with N >= 1 and C = num_labels = "
                f"{c}; got {tuple(emissions.shape)}"
            )
        b, n, _ = emissions.shape
        for name, x, shape in (
            ("transitions", potentials.transitions, (b, c, c)),
            ("start", potentials.start, (b, c)),
            ("end", potentials.end, (b, c)),
        ):
            if tuple(x.shape) != shape:
                raise ValueError(
                    f"potentials.{name} must have shape {shape} (B = {b} from the emissions, "
                    f"C = {c}; a shared factor is expanded, see ChainPotentials.from_factors); got "
                    f"{tuple(x.shape)}"
                )
            if x.dtype != emissions.dtype:
                raise ValueError(
                    f"potentials.{name} must have the dtype of potentials.emissions "
                    f"({emissions.dtype}); got {x.dtype}"
                )
        return potentials, self.check_lengths(lengths, b, n, emissions.device)

    def valid_masks(self, potentials: Potentials, lengths: Tensor) -> tuple[Optional[Tensor], ...]:
        """(B, N, 1, 1): positions ``< lengths`` (padding may hold anything, even +inf / NaN);
        for factored potentials (B, N, 1) on the emissions (the other fields have no padding)."""
        if isinstance(potentials, ChainPotentials):
            n = potentials.emissions.shape[1]
            mask = self.valid_mask(lengths, n).unsqueeze(2) if _ragged(lengths, n) else None
            return (mask, None, None, None)
        assert isinstance(potentials, Tensor)
        n = potentials.shape[1]
        if not _ragged(lengths, n):
            return (None,)
        return (self.valid_mask(lengths, n).view(-1, n, 1, 1),)

    def check_labels(self, labels: Tensor, lengths: Tensor, name: str = "labels") -> Tensor:
        canonical, _ = self._position_labels(labels, lengths, name)
        if self.validate and canonical.numel():
            # kept per labels and lengths tensor: a full batch's chunks come again at every
            # objective evaluation
            lo, hi = _LABEL_RANGES.get(
                labels, lambda: (int(canonical.min()), int(canonical.max())), also=(lengths,))
            if lo < 0 or hi >= self.num_labels:
                raise ValueError(
                    f"{name} must be in [0, C) = [0, {self.num_labels}) at valid positions; got "
                    f"values in [{lo}, {hi}]"
                )
        return canonical

    # ------------------------------------------------------------------ dynamic programs
    def _check_values(self, potentials: Potentials, lengths: Tensor) -> Potentials:
        # The dynamic programs below ignore padded positions themselves (per-step masks), so the
        # padding is zeroed (one full pass, by the base class) only when some entry is not
        # finite: -inf masks, or +inf / NaN that must be rejected at valid positions.
        # the verdict is kept per tensor (a loss checks its potentials, then score and
        # log_partition check them again)
        if isinstance(potentials, ChainPotentials):
            finite = _FINITE.get(potentials.emissions, lambda: _finite_factors(potentials),
                                 also=tuple(potentials[1:]))
        else:
            assert isinstance(potentials, Tensor)
            finite = _FINITE.get(potentials, lambda: bool(torch.isfinite(potentials.detach().sum())))
        if not self.validate or finite:
            return potentials
        return super()._check_values(potentials, lengths)

    def _inside(self, potentials: Potentials, lengths: Tensor, semiring: Semiring) -> Tensor:
        if isinstance(potentials, ChainPotentials):
            return self._inside_factored(potentials, lengths, semiring)
        assert isinstance(potentials, Tensor)
        if isinstance(semiring, Log):
            return _ChainLogPartition.apply(potentials, lengths, self.log_kernel)
        if isinstance(semiring, SmoothMax):
            temperature = semiring.temperature
            scaled = potentials / temperature
            return temperature * _ChainLogPartition.apply(scaled, lengths, self.log_kernel)
        return _inside_loop(potentials, lengths, semiring)

    def _inside_factored(self, potentials: ChainPotentials, lengths: Tensor, semiring: Semiring) -> Tensor:
        if isinstance(semiring, (Log, SmoothMax)):
            temperature = semiring.temperature if isinstance(semiring, SmoothMax) else 1.0
            scaled = potentials if temperature == 1.0 else ChainPotentials(
                *(x / temperature for x in potentials)
            )
            plan = Plan(lengths)
            with torch.no_grad():
                emissions_lm = plan.label_major(scaled.emissions.detach())
            if exp_space_exact(as_detached_chain(scaled), plan, emissions_lm):
                return temperature * factored_log_partition(scaled, lengths, plan, emissions_lm)
            return self._inside(self._edges(potentials, lengths), lengths, semiring)
        # Max / KMax inside passes (differentiable scores) on the edge layout
        return _inside_loop(self._edges(potentials, lengths), lengths, semiring)

    def _argmax(self, potentials: Potentials, lengths: Tensor) -> Tensor:
        if isinstance(potentials, ChainPotentials):
            return factored_viterbi(potentials, Plan(lengths), potentials.emissions.shape[1])
        assert isinstance(potentials, Tensor)
        b, n, c, _ = potentials.shape
        steps = potentials.unbind(1)
        active = _active_steps(lengths, n)
        identity = torch.arange(c, device=potentials.device).expand(b, c)
        alpha = steps[0][:, 0, :]  # (B, C)
        backpointers = []
        for t in range(1, n):
            step, arg = (alpha.unsqueeze(2) + steps[t]).max(dim=1)  # (B, C), (B, C)
            if active is not None:  # past the length: alpha and labels carry over
                alpha = torch.where(active[t], step, alpha)
                arg = torch.where(active[t], arg, identity)
            else:
                alpha = step
            backpointers.append(arg)
        current = alpha.argmax(dim=1)  # (B,) the label at each example's last position
        labels = [current]
        for arg in reversed(backpointers):
            current = arg.gather(1, current.unsqueeze(1)).squeeze(1)
            labels.append(current)
        out = torch.stack(labels[::-1], dim=1)  # (B, N)
        # padded positions repeat the last label (identity backpointers): zero them
        return out if active is None else torch.where(self.valid_mask(lengths, n), out, 0)

    def _kbest(self, potentials: Potentials, k: int, lengths: Tensor) -> tuple[Tensor, Tensor]:
        if isinstance(potentials, ChainPotentials):
            return factored_kbest(potentials, k, Plan(lengths), potentials.emissions.shape[1])
        assert isinstance(potentials, Tensor)
        return edge_kbest(potentials, k, Plan(lengths), potentials.shape[1])

    # ------------------------------------------------------------------ parts
    def to_parts(
        self, labels: Tensor, lengths: Optional[Tensor] = None, factored: bool = False
    ) -> Potentials:
        """Labels (B, N) to one-hot edge parts (B, N, C, C); padded positions are all zero.

        With ``factored=True``, parts in the :class:`ChainPotentials` layout (so that
        ``score(potentials, y) = <to_parts(y, factored=True), potentials>`` for factored
        potentials): label indicators (B, N, C), transition counts (B, C, C), the first and the
        last label one-hot (B, C).
        """
        labels, lengths = self._position_labels_and_lengths(labels, lengths)
        b, n = labels.shape
        c = self.num_labels
        if factored:
            valid = self.valid_mask(lengths, n)
            nodes = torch.nn.functional.one_hot(labels, c).float() * valid.unsqueeze(2)
            pairs = (labels[:, :-1] * c + labels[:, 1:])  # (B, N - 1)
            trans = torch.zeros(b, c * c, device=labels.device)
            trans.scatter_add_(1, pairs, valid[:, 1:].float())
            last = labels.gather(1, (lengths - 1).unsqueeze(1)).squeeze(1)
            return ChainPotentials(
                nodes, trans.view(b, c, c), nodes[:, 0].clone(),
                torch.nn.functional.one_hot(last, c).float(),
            )
        prev = torch.cat([labels.new_zeros(b, 1), labels[:, :-1]], dim=1)  # (B, N), y_{-1} = 0
        index = prev * c + labels  # (B, N)
        parts = torch.zeros(b, n, c * c, device=labels.device)
        parts.scatter_(2, index.unsqueeze(2), 1.0)
        parts = parts * self.valid_mask(lengths, n).unsqueeze(2)
        return parts.view(b, n, c, c)

    def from_parts(self, parts: Potentials, lengths: Optional[Tensor] = None) -> Tensor:
        """Edge parts or marginals (B, N, C, C), or factored marginals (:class:`ChainPotentials`),
        to labels (B, N): the most likely label per position (exact for 0/1 parts)."""
        if isinstance(parts, ChainPotentials):
            nodes = parts.emissions
            if not isinstance(nodes, Tensor) or nodes.dim() != 3:
                raise ValueError("parts.emissions must be a tensor of shape (B, N, C)")
        elif not isinstance(parts, Tensor) or parts.dim() != 4:
            raise ValueError("parts must be a tensor of shape (B, N, C, C) or ChainPotentials")
        else:
            nodes = self.node_parts(parts)
        b, n = nodes.shape[:2]
        lengths = self.check_lengths(lengths, b, n, nodes.device)
        labels = nodes.argmax(dim=2)
        return torch.where(self.valid_mask(lengths, n), labels, 0)

    @staticmethod
    def node_parts(parts: Tensor) -> Tensor:
        """Per-position label indicators (or node marginals) (B, N, C) from edge parts."""
        return parts.sum(dim=2)

    def hamming_potentials(self, target: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """(B, N, C, C) cost: 1 on every edge into a valid position whose label differs."""
        target, lengths = self._position_labels_and_lengths(target, lengths, "target")
        b, n = target.shape
        c = self.num_labels
        wrong = 1.0 - torch.nn.functional.one_hot(target, c).float()  # (B, N, C)
        wrong = wrong * self.valid_mask(lengths, n).unsqueeze(2)
        return wrong.unsqueeze(2).expand(b, n, c, c)  # same cost from every previous label

    def hamming(self, target: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Number of valid positions where ``labels`` differ from ``target``. Shape (B,)."""
        target, lengths = self._position_labels_and_lengths(target, lengths, "target")
        labels, _ = self._position_labels_and_lengths(labels, lengths)
        if labels.shape != target.shape:
            raise ValueError(
                f"labels must have the shape of target {tuple(target.shape)}; got {tuple(labels.shape)}"
            )
        return (target != labels).sum(1)


    def cost_augmented_potentials(
        self,
        potentials: Potentials,
        target: Tensor,
        lengths: Optional[Tensor] = None,
        scale: Union[float, Tensor] = 1.0,
    ) -> Potentials:
        """``potentials + scale * Delta_hamming(target, .)``. The cost does not depend on the
        previous label: on factored potentials it goes to the emissions, on (B, N, C, C) edges
        it is broadcast over the previous label (no (B, N, C, C) cost tensor is built).

        ``scale``: a number, or (B,) per-example factors."""
        emissions = potentials.emissions if isinstance(potentials, ChainPotentials) else potentials
        n, c = emissions.shape[1], emissions.shape[-1]
        target, lengths = self._position_labels_and_lengths(target, lengths, "target")
        wrong = 1.0 - torch.nn.functional.one_hot(target, c).to(emissions.dtype)  # (B, N, C)
        wrong = wrong * self.valid_mask(lengths, n).unsqueeze(2)
        if isinstance(scale, Tensor):
            wrong = wrong * scale.to(emissions.dtype).view(-1, 1, 1)
        else:
            wrong = wrong * scale
        if isinstance(potentials, ChainPotentials):
            return potentials._replace(emissions=emissions + wrong)
        return potentials + wrong.unsqueeze(2)

    def _score_k(self, potentials: Potentials, labels: Tensor, lengths: Tensor) -> Tensor:
        if isinstance(potentials, ChainPotentials):
            return _factored_score_k(potentials, labels, lengths)
        assert isinstance(potentials, Tensor)
        return _edge_score_k(potentials, labels, lengths)

    def _score(self, potentials: Potentials, labels: Tensor, lengths: Tensor) -> Tensor:
        if isinstance(potentials, ChainPotentials):
            return _factored_score(potentials, labels, lengths)
        assert isinstance(potentials, Tensor)
        b, n = potentials.shape[:2]
        if labels.shape != (b, n):
            raise ValueError(f"labels must have shape (B, N) = ({b}, {n}); got {tuple(labels.shape)}")
        return _edge_score_k(potentials, labels.unsqueeze(1), lengths).squeeze(1)

    # ------------------------------------------------------------------ constrained decoding
    def constrain(
        self,
        potentials: Tensor,
        lengths: Optional[Tensor] = None,
        allowed_transitions: Optional[Tensor] = None,
        allowed_labels: Optional[Tensor] = None,
        allowed_start: Optional[Tensor] = None,
        allowed_end: Optional[Tensor] = None,
        observed: Optional[Tensor] = None,
    ) -> Tensor:
        """Mask potentials so that only structures meeting hard constraints keep their score.

        Forbidden parts get ``-inf`` (an exclusion that no finite score can beat, at any
        scale); the result can go to any operation (argmax, kbest,
        marginals, log-partition). Linear part costs (Lagrange multipliers) need no method:
        add them to the potentials.

        Args:
            potentials: (B, N, C, C), or :class:`ChainPotentials` (the result is then factored
                too: label masks go to the emissions, transition masks to the transitions).
            lengths: (B,).
            allowed_transitions: (C, C) bool, ``[i, j]`` True iff label i may precede label j.
            allowed_labels: (B, N, C) or (N, C) or (C,) bool, labels allowed per position.
            allowed_start: (C,) bool, labels allowed at the first position.
            allowed_end: (C,) bool, labels allowed at each example's last position.
            observed: (B, N) long, partially observed labels: a label in [0, C) fixes that
                position, -1 leaves it free.

        Raises:
            ValueError: on wrong shapes, or when the masks leave a valid position of some example
                with no allowed label (e.g. a masked-out first token).
        """
        potentials, lengths = self.check(potentials, lengths)
        ref = potentials.emissions if isinstance(potentials, ChainPotentials) else potentials
        assert isinstance(ref, Tensor)
        b, n, c = ref.shape[0], ref.shape[1], self.num_labels
        dev = ref.device
        nodes = torch.ones(b, n, c, dtype=torch.bool, device=dev)
        if allowed_transitions is not None:
            _expect_bool(allowed_transitions, (c, c), "allowed_transitions")
        if allowed_labels is not None:
            if allowed_labels.dtype != torch.bool or allowed_labels.shape[-1] != c:
                raise ValueError(
                    f"allowed_labels must be a bool tensor ending in C = {c}; got dtype "
                    f"{allowed_labels.dtype}, shape {tuple(allowed_labels.shape)}"
                )
            nodes &= allowed_labels.expand(b, n, c)
        if allowed_start is not None:
            _expect_bool(allowed_start, (c,), "allowed_start")
            nodes[:, 0] &= allowed_start
        if allowed_end is not None:
            _expect_bool(allowed_end, (c,), "allowed_end")
            last = torch.arange(n, device=dev).view(1, n) == (lengths.view(b, 1) - 1)  # (B, N)
            nodes &= ~last.unsqueeze(2) | allowed_end
        if observed is not None:
            if observed.shape != (b, n):
                raise ValueError(f"observed must have shape (B, N) = ({b}, {n}); got {tuple(observed.shape)}")
            if self.validate and observed.numel() and (int(observed.min()) < -1 or int(observed.max()) >= c):
                raise ValueError(
                    f"observed must be in [-1, C) = [-1, {c}) (-1 = unobserved); got values in "
                    f"[{int(observed.min())}, {int(observed.max())}]"
                )
            fixed = torch.nn.functional.one_hot(observed.clamp(min=0).long(), c).bool()
            nodes &= torch.where((observed >= 0).unsqueeze(2), fixed, True)
        if self.validate:
            empty = ~nodes.any(dim=2) & self.valid_mask(lengths, n)  # (B, N)
            if bool(empty.any()):
                where = empty.nonzero()[0].tolist()
                raise ValueError(
                    "constraints leave no allowed label at a valid position: example "
                    f"{where[0]}, position {where[1]} (expected at least one allowed label per "
                    "position within lengths)"
                )
        if self.validate:
            self._check_reachable(nodes, allowed_transitions, lengths)
        if isinstance(potentials, ChainPotentials):
            every = torch.ones((), dtype=torch.bool, device=dev)
            trans = every if allowed_transitions is None else allowed_transitions.to(dev)
            return self.mask_potentials(potentials, ChainPotentials(nodes, trans, every, every))
        allowed = nodes.unsqueeze(2).expand(b, n, c, c).clone()
        if allowed_transitions is not None:
            allowed[:, 1:] &= allowed_transitions.to(dev)
        return self.mask_potentials(potentials, allowed)

    def _check_reachable(self, nodes: Tensor, transitions: Optional[Tensor], lengths: Tensor) -> None:
        """Raise when the allowed labels (B, N, C) and transitions (C, C) leave some example
        with no complete labelling (a forward pass over the allowed graph)."""
        b, n = nodes.shape[:2]
        reach = nodes[:, 0]  # (B, C): labels reachable at t = 0
        dead = torch.zeros(b, dtype=torch.bool, device=nodes.device)
        trans = None if transitions is None else transitions.to(nodes.device)
        for t in range(n):
            if t:
                if trans is None:
                    step = reach.any(dim=1, keepdim=True) & nodes[:, t]
                else:
                    step = (reach.unsqueeze(2) & trans).any(dim=1) & nodes[:, t]
                reach = torch.where((t < lengths).view(b, 1), step, reach)
            dead |= ~reach.any(dim=1) & (t < lengths)
        if bool(dead.any()):
            which = dead.nonzero().flatten().tolist()
            raise ValueError(
                f"constraints leave no valid labelling for example {which[0]} (examples: "
                f"{which[:10]}{' ...' if len(which) > 10 else ''}): no sequence of allowed labels "
                "and allowed transitions covers its length"
            )


def as_detached_chain(potentials: ChainPotentials) -> ChainPotentials:
    return ChainPotentials(*(x.detach() for x in potentials))


def _factored_score(potentials: ChainPotentials, labels: Tensor, lengths: Tensor) -> Tensor:
    """Scores (B,) of labels (B, N) under factored potentials, by gathers (differentiable)."""
    b, n, _ = potentials.emissions.shape
    if labels.shape != (b, n):
        raise ValueError(f"labels must have shape (B, N) = ({b}, {n}); got {tuple(labels.shape)}")
    return _factored_score_k(potentials, labels.unsqueeze(1), lengths).squeeze(1)


def _edge_score_k(potentials: Tensor, labels: Tensor, lengths: Tensor) -> Tensor:
    """Scores (B, k) of k labelings (B, k, N) of each example under edge potentials
    (B, N, C, C), by one gather: O(B N k), not the dense dot product with one-hot parts, and
    no copy of the potentials per labeling."""
    b, k, n = labels.shape
    c = potentials.shape[-1]
    prev = torch.cat([labels.new_zeros(b, k, 1), labels[:, :, :-1]], dim=2)  # y_{-1} = 0
    index = (prev * c + labels).transpose(1, 2)  # (B, N, k)
    edge = potentials.reshape(b, n, c * c).gather(2, index)  # (B, N, k)
    # where, not a product: padding may hold -inf
    return torch.where(LinearChain.valid_mask(lengths, n).unsqueeze(2), edge, 0.0).sum(1)


def _factored_score_k(potentials: ChainPotentials, labels: Tensor, lengths: Tensor) -> Tensor:
    """Scores (B, k) of k labelings (B, k, N) of each example under factored potentials, by
    gathers from the potentials broadcast over k (no copy of them per labeling)."""
    emissions, transitions, start, end = potentials
    b, k, n = labels.shape
    c = emissions.shape[2]
    valid = LinearChain.valid_mask(lengths, n).unsqueeze(1)  # (B, 1, N)
    node = emissions.unsqueeze(1).expand(b, k, n, c).gather(3, labels.unsqueeze(3)).squeeze(3)
    # where, not a product: padding may hold -inf
    total = torch.where(valid, node, 0.0).sum(2)  # (B, k)
    if n > 1:
        pairs = labels[..., :-1] * c + labels[..., 1:]  # (B, k, N - 1)
        trans = transitions.reshape(b, 1, c * c).expand(b, k, c * c).gather(2, pairs)
        total = total + torch.where(valid[..., 1:], trans, 0.0).sum(2)
    first = start.unsqueeze(1).expand(b, k, c).gather(2, labels[..., :1]).squeeze(2)
    last = labels.gather(2, (lengths - 1).view(b, 1, 1).expand(b, k, 1))  # (B, k, 1)
    return total + first + end.unsqueeze(1).expand(b, k, c).gather(2, last).squeeze(2)


def _ragged(lengths: Tensor, max_length: int) -> bool:
    """Whether some example is shorter than ``max_length`` (else the DPs skip masking)."""
    return bool((lengths != max_length).any())


def _active_steps(lengths: Tensor, n: int) -> Optional[Tensor]:
    """(N, B, 1) bool: ``t < lengths``, or ``None`` when every example has length N."""
    if not _ragged(lengths, n):
        return None
    return (torch.arange(n, device=lengths.device).view(n, 1) < lengths.view(1, -1)).unsqueeze(2)


def _inside_loop(p: Tensor, lengths: Tensor, semiring: Semiring) -> Tensor:
    """Inside pass by autograd-able ops (Max, KMax; double backward of Log)."""
    b, n = p.shape[:2]
    steps = p.unbind(1)  # N x (B, C_prev, C_next); unbind once (no per-step full-size gradients)
    active = _active_steps(lengths, n)
    alpha = semiring.lift(steps[0][:, 0, :])  # (B, C, *S)
    for t in range(1, n):
        # alpha (B, C_prev, 1, *S) ⊗ potentials (B, C_prev, C_next) -> sum over C_prev
        step = semiring_sum(semiring, semiring.mul_potentials(alpha.unsqueeze(2), steps[t]), 1)
        if active is None:
            alpha = step
        else:
            alpha = torch.where(active[t].view((b,) + (1,) * (step.dim() - 1)), step, alpha)
    return semiring_sum(semiring, alpha, 1)  # (B, *S)


def _forward_logsumexp(p: Tensor, active: Optional[Tensor]) -> Tensor:
    """Forward variables ``alpha[:, t, j]`` = log-sum of the scores of prefixes ending in j at t
    (carried over unchanged past each length). Exact in log space; ``-inf`` entries give
    ``-inf`` (never NaN). Shape (B, N, C)."""
    steps = p.unbind(1)
    alpha = steps[0][:, 0, :]
    alphas = [alpha]
    for t in range(1, len(steps)):
        step = torch.logsumexp(alpha.unsqueeze(2) + steps[t], dim=1)
        alpha = step if active is None else torch.where(active[t], step, alpha)
        alphas.append(alpha)
    return torch.stack(alphas, dim=1)


def _forward_expmm(p: Tensor, active: Optional[Tensor]) -> Tensor:
    """Forward variables by one batched matrix product per step, rescaled at every step.

    ``alpha'_j = m + M_j + log sum_i exp(alpha_i - m) exp(p_ij - M_j)`` with ``m = max_i alpha_i``
    and ``M_j = max_i p_ij``: both factors are in [0, 1]. Where a column's mass falls below
    ``C * tiny / eps`` (underflow could have dropped terms, or the mass is exactly zero) that
    entry is recomputed exactly in log space, so the result equals :func:`_forward_logsumexp`
    up to rounding whatever the scale. Shape (B, N, C).
    """
    b, n, c, _ = p.shape
    info = torch.finfo(p.dtype)
    floor = c * info.tiny / info.eps
    col_max = p.amax(dim=2, keepdim=True)  # (B, N, 1, C), -inf for an all -inf column
    col_max = torch.where(torch.isfinite(col_max), col_max, 0.0)  # +inf only in padding
    weights = (p - col_max).exp().unbind(1)  # N x (B, C_prev, C_next) in [0, 1]
    col_max = col_max.squeeze(2).unbind(1)  # N x (B, C)
    steps = p.unbind(1)
    alpha = steps[0][:, 0, :]
    alphas = [alpha]
    for t in range(1, n):
        shift = alpha.amax(dim=1, keepdim=True)  # (B, 1)
        shift = torch.where(torch.isneginf(shift), 0.0, shift)
        mass = torch.bmm((alpha - shift).exp().unsqueeze(1), weights[t]).squeeze(1)  # (B, C)
        step = mass.log() + shift + col_max[t]
        low = ~(mass >= floor)  # also NaN (only from garbage in padding)
        if bool(low.any()):
            exact = torch.logsumexp(alpha.unsqueeze(2) + steps[t], dim=1)
            step = torch.where(low, exact, step)
        alpha = step if active is None else torch.where(active[t], step, alpha)
        alphas.append(alpha)
    return torch.stack(alphas, dim=1)


def _edge_marginals(
    p: Tensor, alphas: Tensor, grad: Tensor, active: Optional[Tensor], clamp: bool = False
) -> Tensor:
    """Edge marginals times ``grad`` (B,) by the outside recursion over the stored alphas.

    With ``P_t[i, j] = exp(alpha[t-1, i] + p[t, i, j] - alpha[t, j])`` (the probability of
    label i at t - 1 given label j at t) and ``g_t`` the node marginals at t (``g`` at the last
    position is ``softmax(alpha[N-1])``), ``marg[t] = P_t * g_t[None, :]`` and
    ``g_{t-1} = marg[t].sum(j)``; at t = 0 only row 0 holds ``g_0``. The exponent is recomputed
    exactly as the forward pass computed its log-sum-exp, so it never exceeds 0: finite results
    at any scale. Positions past each length get 0 and pass ``g`` through. Exact zeros for parts
    with a ``-inf`` factor and for examples with ``log Z = -inf``.
    """
    b, n, c, _ = p.shape
    steps = p.unbind(1)
    # a -inf alpha[t, j] (label j unreachable) has only -inf terms: exp(-inf - 0) = 0, no NaN
    safe = torch.where(torch.isneginf(alphas), 0.0, alphas)
    out = torch.empty_like(p)
    zero = p.new_zeros(())
    g = torch.softmax(alphas[:, -1], dim=1)  # (B, C)
    g = torch.where(torch.isnan(g), 0.0, g) * grad.view(b, 1)  # all -inf: no structure
    for t in range(n - 1, 0, -1):
        cond = alphas[:, t - 1].unsqueeze(2) + steps[t]  # as in the forward pass
        cond = cond.sub_(safe[:, t].unsqueeze(1))
        if clamp:
            cond = cond.clamp_(max=0.0)
        cond = cond.exp_().mul_(g.unsqueeze(1))  # (B, C_prev, C_next)
        if active is None:
            out[:, t] = cond
            g = cond.sum(dim=2)
        else:
            torch.where(active[t].unsqueeze(2), cond, zero, out=out[:, t])
            g = torch.where(active[t], out[:, t].sum(dim=2), g)
    out[:, 0] = 0.0
    out[:, 0, 0] = g
    return out


class _ChainLogPartition(torch.autograd.Function):
    """log Z of chains, fused: the forward recursion in the forward; the backward (beta)
    recursion and the edge marginals times the output gradient in the backward; no autograd
    graph through the per-step ops. Positions ``>= lengths`` are skipped (they get zero
    gradient whatever they hold).

    Double backward (``create_graph=True``, e.g. the Gamma penalty of the marginals) recomputes
    the marginals through the autograd-able loop so that they are differentiable.
    """

    @staticmethod
    def forward(ctx, potentials: Tensor, lengths: Tensor, kernel: str) -> Tensor:  # type: ignore[override]
        p = potentials.detach()
        active = _active_steps(lengths, p.shape[1])
        alphas = _forward_expmm(p, active) if kernel == "expmm" else _forward_logsumexp(p, active)
        log_z = torch.logsumexp(alphas[:, -1], dim=1)
        ctx.save_for_backward(potentials, lengths, alphas)
        ctx.kernel = kernel
        return log_z

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[no-untyped-def, override]
        potentials, lengths, alphas = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: differentiable marginals
            with torch.enable_grad():
                again = _inside_loop(potentials, lengths, Log())
                (marg,) = torch.autograd.grad(again, potentials, grad, create_graph=True)
            return marg, None, None
        p = potentials.detach()
        active = _active_steps(lengths, p.shape[1])
        return _edge_marginals(p, alphas, grad, active, clamp=ctx.kernel == "expmm"), None, None


def _expect_bool(x: Tensor, shape: tuple[int, ...], name: str) -> None:
    if not isinstance(x, Tensor) or x.dtype != torch.bool or tuple(x.shape) != shape:
        got = (x.dtype, tuple(x.shape)) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name} must be a bool tensor of shape {shape}; got {got}")


#: whether the potentials checked were all finite (see ``LinearChain._check_values``)
_FINITE: TensorMemo[bool] = TensorMemo()
#: (min, max) of the labels checked at valid positions (see ``LinearChain.check_labels``)
_LABEL_RANGES: TensorMemo[tuple[int, int]] = TensorMemo()


def _finite_factors(potentials: ChainPotentials) -> bool:
    """Whether every entry of the four factors is finite (one synchronisation)."""
    # a shared factor is a stride-0 expand: sum its one copy, not B of them
    sums = torch.stack([_one_copy(x.detach()).sum().to(potentials.emissions.dtype)
                        for x in potentials])
    return bool(torch.isfinite(sums).all())


def _one_copy(x: Tensor) -> Tensor:
    """``x`` without its broadcast dimensions (stride 0, e.g. an expanded shared factor): the
    distinct entries once."""
    index = tuple(0 if stride == 0 and size > 1 else slice(None)
                  for stride, size in zip(x.stride(), x.shape))
    return x[index]


def bio_allowed_transitions(tags: Sequence[str]) -> tuple[Tensor, Tensor]:
    """Allowed transitions and first labels of the BIO scheme.

    ``I-X`` may only follow ``B-X`` or ``I-X``, and may not start a sequence.

    Args:
        tags: label names such as ``["O", "B-PER", "I-PER"]``.

    Returns:
        ``(allowed_transitions (C, C) bool, allowed_start (C,) bool)`` for
        :meth:`LinearChain.constrain`.
    """
    c = len(tags)
    for tag in tags:
        if tag != "O" and not (tag.startswith("B-") or tag.startswith("I-")):
            raise ValueError(f"tags must be 'O', 'B-X' or 'I-X'; got {tag!r}")
    allowed = torch.ones(c, c, dtype=torch.bool)
    start = torch.ones(c, dtype=torch.bool)
    for j, to in enumerate(tags):
        if to.startswith("I-"):
            start[j] = False
            for i, frm in enumerate(tags):
                allowed[i, j] = frm in ("B-" + to[2:], to)
    return allowed, start
