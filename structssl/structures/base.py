"""The :class:`Structure` base class: what every structure offers, derived from a few primitives.

A structure is a stateless algorithm over *potentials* (log-potentials over parts). A subclass
implements

- :meth:`Structure._check` (validate and normalise ``potentials`` and ``lengths``),
- :meth:`Structure._inside` (the inside pass over any semiring of :mod:`structssl.semirings`),
- :meth:`Structure._argmax` and :meth:`Structure._kbest` (decoding with tensor backtracking),
- :meth:`Structure.check_labels` (validate labels and zero their padding),
- :meth:`Structure.to_parts` / :meth:`Structure.from_parts`,
- :meth:`Structure.hamming_potentials` (the Hamming cost written linearly in parts),

and the base class derives log-partition, marginals (autograd of the log-partition), scores,
smoothed max, cost-augmented decoding (Hamming, and 0/1 through the 2-best decoder) and
masking. ``potentials`` is a tensor or, for structures with several kinds of parts (CKY,
multi-label), a tuple of tensors; ``parts`` always has the same layout as ``potentials``. All
tensors are batch first.
"""

from __future__ import annotations

from typing import Literal, Optional, Sequence, Union

import torch
from torch import Tensor

from structssl.memo import value_range
from structssl.semirings import LOG_ZERO, KMax, Log, Max, Semiring, SmoothMax

Potentials = Union[Tensor, tuple[Tensor, ...]]
Cost = Literal["hamming", "zero_one"]
COSTS: tuple[str, ...] = ("hamming", "zero_one")

__all__ = [
    "Structure",
    "Potentials",
    "Cost",
    "as_tuple",
    "like",
    "as_detached",
    "positive_int",
    "safe_logsumexp",
    "semiring_sum",
    "component_names",
    "resolve_sizes",
]


def safe_logsumexp(x: Tensor, dim: int) -> Tensor:
    """``torch.logsumexp(x, dim)`` whose gradient is finite where every entry is ``-inf``.

    A cell with only ``-inf`` entries (no valid structure through it) gives ``-inf`` and a zero
    gradient (``torch.logsumexp`` gives a NaN gradient there, which poisons the gradient of the
    valid cells through the chain rule). ``x`` must hold no ``+inf`` or NaN.
    """
    shift = x.detach().amax(dim, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros((), dtype=x.dtype, device=x.device))
    total = (x - shift).exp().sum(dim)
    empty = total == 0  # only -inf entries (the max entry contributes exp(0) = 1 otherwise)
    out = torch.where(empty, float("-inf"), total.masked_fill(empty, 1.0).log())
    return out + shift.squeeze(dim)


def semiring_sum(semiring: Semiring, x: Tensor, dim: int) -> Tensor:
    """``semiring.sum(x, dim)`` with the ``-inf``-safe log-sum-exp for Log and SmoothMax."""
    if type(semiring) is Log:
        return safe_logsumexp(x, dim)
    if isinstance(semiring, SmoothMax):
        return semiring.temperature * safe_logsumexp(x / semiring.temperature, dim)
    return semiring.sum(x, dim)


def component_names(potentials: Potentials) -> list[str]:
    """Argument names of the tensors of ``potentials`` for error messages:
    ``potentials`` for a tensor, ``potentials.<field>`` for a named tuple, else
    ``potentials[i]``."""
    if isinstance(potentials, Tensor):
        return ["potentials"]
    fields = getattr(potentials, "_fields", None)
    if fields is not None:
        return [f"potentials.{f}" for f in fields]
    return [f"potentials[{i}]" for i in range(len(potentials))]


def _index_text(index: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def positive_int(value: int, name: str) -> int:
    """``value`` if it is an int >= 1, else a ``ValueError`` naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an int >= 1; got {value!r}")
    return value


def adopt_num_labels(current: int, sizes: dict, owner: str) -> int:
    """The ``num_labels`` a structure or scorer keeps from the data's ``sizes`` (its
    ``resolve_sizes``): the data's when it gives one, else ``current`` (0: not set).

    Raises:
        ValueError: ``current`` was given and differs from the data's.
    """
    given = sizes.get("num_labels")
    if given is None:
        return current
    if current and current != given:
        raise ValueError(
            f"{owner} num_labels = {current} does not match the data's num_labels = {given} "
            "(leave num_labels out to take it from the data)"
        )
    return positive_int(given, "num_labels")


def resolve_sizes(sizes: dict, *parts: object) -> None:
    """Let each part (a structure, a scorer) that defines ``resolve_sizes`` take the sizes the
    data gives (a data module's ``model_sizes()``) that its configuration left out."""
    for part in parts:
        resolve = getattr(part, "resolve_sizes", None)
        if resolve is not None:
            resolve(sizes)


def as_tuple(potentials: Potentials) -> tuple[Tensor, ...]:
    """``potentials`` as a tuple of tensors (a tensor becomes a 1-tuple)."""
    return (potentials,) if isinstance(potentials, Tensor) else tuple(potentials)


def like(template: Potentials, tensors: Sequence[Tensor]) -> Potentials:
    """Re-pack ``tensors`` in the container type of ``template`` (tensor or tuple)."""
    if isinstance(template, Tensor):
        (only,) = tensors
        return only
    return type(template)(*tensors) if hasattr(template, "_fields") else tuple(tensors)


def _batch_dot(a: Potentials, b: Potentials) -> Tensor:
    """Sum over every non-batch dimension of ``a * b``, summed over components. Shape (B,)."""
    total = None
    for x, y in zip(as_tuple(a), as_tuple(b)):
        term = (x * y).flatten(1).sum(1)
        total = term if total is None else total + term
    assert total is not None
    return total


class Structure:
    """Base class of all structures (stateless; owns no parameters).

    Infinities (one policy for every structure): ``-inf`` is a legal "forbidden" value in
    potentials (masks, padding, forbidden parts) and every result is exact and finite wherever
    a valid structure exists (zero marginals on forbidden parts); ``+inf`` and NaN at valid
    positions are rejected by :meth:`check`; padded positions may hold anything. An example
    with no valid structure (log Z = -inf) raises ``ValueError`` naming the example; with
    ``validate=False`` it yields ``-inf`` (log Z, max, scores) and zero marginals instead.

    Args:
        validate: check values (``lengths`` in range, ``labels`` in range, no NaN or +inf
            potentials, every example has a valid structure) at the public entry points. Shape and dtype checks are always on; value checks
            synchronise with the device and can be switched off in hot loops once inputs are
            known to be valid.
    """

    #: the layout of one example's potentials, for documentation and error messages
    event_shape_doc: str = ""
    #: the value :meth:`mask_potentials` gives forbidden parts. ``-inf`` (an exact exclusion)
    #: for structures whose dynamic programs are exact with ``-inf``; ``LOG_ZERO`` is kept only
    #: for a structure that has not moved to the ``-inf`` policy yet.
    mask_value: float = LOG_ZERO

    def __init__(self, validate: bool = True) -> None:
        self.validate = bool(validate)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # ------------------------------------------------------------------ primitives
    def _check(self, potentials: Potentials, lengths: Optional[Tensor]) -> tuple[Potentials, Tensor]:
        """Validate inputs; return potentials and ``lengths`` as a (B,) long tensor."""
        raise NotImplementedError

    def _inside(self, potentials: Potentials, lengths: Tensor, semiring: Semiring) -> Tensor:
        """Inside pass: semiring sum over all structures. Shape (B, *S)."""
        raise NotImplementedError

    def _argmax(self, potentials: Potentials, lengths: Tensor) -> Tensor:
        """Best labels by tensor backtracking (no autograd)."""
        raise NotImplementedError

    def _kbest(self, potentials: Potentials, k: int, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """The k best distinct labels, best first: ``(labels (B, k, ...), scores (B, k))``.

        Scores come from the decoder's own dynamic program (not differentiated); ranks that
        do not exist (fewer than k structures) must have score ``-inf``.
        """
        raise NotImplementedError

    def to_parts(self, labels: Tensor, lengths: Optional[Tensor] = None) -> Potentials:
        """Labels to 0/1 parts shaped like potentials."""
        raise NotImplementedError

    def from_parts(self, parts: Potentials, lengths: Optional[Tensor] = None) -> Tensor:
        """0/1 (or fractional: the most likely label per position) parts to labels."""
        raise NotImplementedError

    def hamming_potentials(self, target: Tensor, lengths: Optional[Tensor] = None) -> Potentials:
        """Hamming cost Delta(target, .) written linearly in parts.

        Returns ``cost`` shaped like potentials with ``score(cost, y) == hamming(target, y)``
        for every structure ``y``.
        """
        raise NotImplementedError

    def hamming(self, target: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Hamming distance between two label tensors of the same shape. Shape (B,)."""
        cost = self.hamming_potentials(target, lengths)
        return _batch_dot(cost, self.to_parts(labels, lengths))

    @staticmethod
    def valid_mask(lengths: Tensor, max_length: int) -> Tensor:
        """(B, N) bool: which positions are within each example's length."""
        return torch.arange(max_length, device=lengths.device) < lengths.unsqueeze(1)

    def _position_labels(
        self, labels: Tensor, lengths: Tensor, name: str = "labels"
    ) -> tuple[Tensor, Tensor]:
        """The checks shared by structures whose labels are (B, N) integers, one per position
        (tags of a chain or segments, heads of a tree): a tensor with B rows, an integer dtype
        and at least ``max(lengths)`` positions. The range is the structure's own check.

        Returns:
            ``(labels, valid)``: the labels as a new long tensor with padded positions set to 0,
            and the (B, N) bool mask of positions within each example's length.
        """
        b = lengths.shape[0]
        if not isinstance(labels, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(labels).__name__}")
        if labels.dim() != 2 or labels.shape[0] != b:
            raise ValueError(f"{name} must have shape (B, N) with B = {b}; got {tuple(labels.shape)}")
        if labels.is_floating_point() or labels.dtype == torch.bool:
            raise ValueError(f"{name} must have an integer dtype; got {labels.dtype}")
        n = labels.shape[1]
        if n < int(lengths.max()):
            raise ValueError(
                f"{name} must have at least max(lengths) = {int(lengths.max())} positions; got "
                f"shape {tuple(labels.shape)}"
            )
        valid = self.valid_mask(lengths, n)
        return torch.where(valid, labels.long(), 0), valid

    def _position_labels_and_lengths(
        self, labels: Tensor, lengths: Optional[Tensor], name: str = "labels"
    ) -> tuple[Tensor, Tensor]:
        """``(check_labels(labels), lengths)`` for (B, N) position labels, the lengths checked
        (default: every example spans all N positions)."""
        if not isinstance(labels, Tensor) or labels.dim() != 2:
            got = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
            raise ValueError(f"{name} must have shape (B, N); got {got}")
        lengths = self.check_lengths(lengths, labels.shape[0], labels.shape[1], labels.device)
        return self.check_labels(labels, lengths, name), lengths

    def check_labels(self, labels: Tensor, lengths: Tensor, name: str = "labels") -> Tensor:
        """Validate ``labels`` against ``lengths`` (as returned by :meth:`check`).

        Returns:
            The labels as a long tensor with padded positions set to 0 (a new tensor; the
            input is not modified).

        Raises:
            ValueError: naming ``name`` with the expected and actual shape or value range.
        """
        raise NotImplementedError

    # ------------------------------------------------------------------ derived operations
    def check(
        self, potentials: Potentials, lengths: Optional[Tensor] = None
    ) -> tuple[Potentials, Tensor]:
        """Validate ``potentials`` and ``lengths`` as every entry point does.

        Policy on infinities (the same for every structure): ``-inf`` is a legal "forbidden"
        value (masks, padding, forbidden parts); ``+inf`` and NaN are rejected at valid
        positions. Padded positions (beyond ``lengths``, and entries that are not parts such
        as CKY spans with ``i > j``) may hold anything: they are replaced by 0 here so that no
        value there reaches a result or a gradient.

        All tensors must be on one device; ``lengths`` on the CPU are moved to the device of
        the potentials (the data-loader habit), ``lengths`` on another accelerator or meta
        tensors are rejected.

        Returns:
            The potentials (padding set to 0 where the structure has padding, else unchanged)
            and ``lengths`` as a (B,) long tensor on their device.

        Raises:
            ValueError: naming the argument with the expected and actual values (and the
                example index for values).
        """
        tensors = as_tuple(potentials)
        names = component_names(potentials)
        device: Optional[torch.device] = None
        for i, x in enumerate(tensors):
            name = names[i] if i < len(names) else f"potentials[{i}]"
            if not isinstance(x, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
            if not x.is_floating_point():
                raise ValueError(f"{name} must be floating point; got dtype {x.dtype}")
            if x.is_meta:
                raise ValueError(
                    f"{name} must hold data on a real device (cpu, cuda, ...); got a meta tensor "
                    f"of shape {tuple(x.shape)}"
                )
            if x.dim() == 0 or x.shape[0] == 0:
                raise ValueError(
                    f"{name} must have a non-empty batch dimension; got shape {tuple(x.shape)}"
                )
            if device is None:
                device = x.device
            elif x.device != device:
                raise ValueError(
                    f"{name} must be on the device of {names[0]} ({device}); got {x.device}"
                )
        if isinstance(lengths, Tensor) and device is not None:
            if lengths.is_meta:
                raise ValueError(
                    f"lengths must hold data on a real device (cpu or {device}); got a meta tensor"
                )
            if lengths.device != device and lengths.device.type != "cpu":
                raise ValueError(
                    f"lengths must be on the device of the potentials ({device}) or on the cpu; "
                    f"got {lengths.device}"
                )
        potentials, checked = self._check(potentials, lengths)
        return self._check_values(potentials, checked), checked

    def valid_masks(self, potentials: Potentials, lengths: Tensor) -> tuple[Optional[Tensor], ...]:
        """Where each potentials tensor holds parts of some structure within ``lengths``.

        One bool tensor broadcastable to each component (True = valid) or ``None`` (all valid).
        The default: every entry is valid. Structures with padding override it.
        """
        return (None,) * len(as_tuple(potentials))

    def _check_values(self, potentials: Potentials, lengths: Tensor) -> Potentials:
        """Zero the padding and reject ``+inf`` / NaN at valid positions (see :meth:`check`)."""
        tensors = list(as_tuple(potentials))
        masks = self.valid_masks(potentials, lengths)
        names = component_names(potentials)
        changed = False
        for i, (x, mask) in enumerate(zip(tensors, masks)):
            if mask is not None:
                x = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))
                tensors[i] = x
                changed = True
            if not self.validate:
                continue
            # one reduction: a sum that is finite or -inf rules out NaN and +inf (a NaN or a
            # +inf makes the sum NaN or +inf); otherwise confirm elementwise (overflow)
            total = x.detach().sum()
            if bool(torch.isfinite(total) | torch.isneginf(total)):
                continue
            bad = torch.isnan(x) | torch.isposinf(x)
            if bool(bad.any()):
                index = bad.nonzero()[0].tolist()
                value = x[tuple(index)].item()
                kind = "NaN" if value != value else "+inf"
                raise ValueError(
                    f"potentials contain {kind}: {names[i]} must be finite or -inf (-inf forbids "
                    f"a part) at valid positions; example {index[0]} has {value} at "
                    f"{names[i]}{_index_text(index)}"
                )
        return like(potentials, tensors) if changed else potentials

    def _require_structures(self, best: Tensor, what: str) -> None:
        """Raise if an example has no valid structure (``best`` (B,) is ``-inf`` there)."""
        if not self.validate:
            return
        empty = torch.isneginf(best.detach())
        if bool(empty.any()):
            examples = empty.nonzero().flatten().tolist()
            raise ValueError(
                f"example {examples[0]} has no valid structure ({what} = -inf: every structure "
                "uses a part whose potential is -inf, i.e. the masks or constraints of this "
                f"example cannot all be satisfied); examples without one: {examples[:10]}"
            )

    def check_lengths(
        self, lengths: Optional[Tensor], batch_size: int, max_length: int, device: torch.device
    ) -> Tensor:
        """Validate per-example ``lengths`` in ``[1, max_length]``; ``None`` means all full.

        Returns:
            (B,) long tensor on ``device``.
        """
        if lengths is None:
            return torch.full((batch_size,), max_length, dtype=torch.long, device=device)
        if not isinstance(lengths, Tensor):
            raise TypeError(f"lengths must be a torch.Tensor; got {type(lengths).__name__}")
        if lengths.shape != (batch_size,):
            raise ValueError(
                f"lengths must have shape (B,) = ({batch_size},); got {tuple(lengths.shape)}"
            )
        if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
            raise ValueError(f"lengths must have an integer dtype; got {lengths.dtype}")
        if self.validate:
            lo, hi = value_range(lengths)
            if lo < 1 or hi > max_length:
                raise ValueError(
                    f"lengths must be in [1, N] = [1, {max_length}] (N from the potentials); got "
                    f"values in [{lo}, {hi}]"
                )
        return lengths.to(device=device, dtype=torch.long)

    def log_partition(self, potentials: Potentials, lengths: Optional[Tensor] = None) -> Tensor:
        """log Z: log-sum-exp of the scores of all structures. Shape (B,)."""
        potentials, lengths = self.check(potentials, lengths)
        log_z = self._inside(potentials, lengths, Log())
        self._require_structures(log_z, "log Z")
        return log_z

    def smoothed_max(
        self, potentials: Potentials, temperature: float, lengths: Optional[Tensor] = None
    ) -> Tensor:
        """``temperature * log Z(potentials / temperature)``, a smooth upper bound of the max.

        Shape (B,).
        """
        potentials, lengths = self.check(potentials, lengths)
        value = self._inside(potentials, lengths, SmoothMax(temperature))
        self._require_structures(value, "smoothed max")
        return value

    def max(self, potentials: Potentials, lengths: Optional[Tensor] = None) -> Tensor:
        """Score of the best structure (Max semiring inside pass). Shape (B,)."""
        potentials, lengths = self.check(potentials, lengths)
        value = self._inside(potentials, lengths, Max())
        self._require_structures(value, "max")
        return value

    def kmax(self, potentials: Potentials, k: int, lengths: Optional[Tensor] = None) -> Tensor:
        """Scores of the k best structures by the KMax semiring (no labels). Shape (B, k)."""
        potentials, lengths = self.check(potentials, lengths)
        value = self._inside(potentials, lengths, KMax(k))
        self._require_structures(value[:, 0], "max")
        return value

    def marginals(
        self,
        potentials: Potentials,
        lengths: Optional[Tensor] = None,
        create_graph: bool = False,
    ) -> Potentials:
        """Part marginals: the gradient of the log-partition. Shaped like ``potentials``.

        The caller's tensors are never modified (no ``requires_grad_`` on them). Works under
        ``torch.inference_mode``: the gradient is then taken on normal (non-inference) copies
        of the inputs, and the marginals come back as normal tensors.

        Args:
            create_graph: keep the graph so that the marginals can be differentiated again.
        """
        potentials, lengths = self.check(potentials, lengths)
        inference = torch.is_inference_mode_enabled() or any(
            x.is_inference() for x in as_tuple(potentials)
        )
        if inference:
            with torch.inference_mode(False), torch.enable_grad():
                copies = like(potentials, [x.detach().clone() for x in as_tuple(potentials)])
                return self._marginals(copies, lengths.clone(), False)
        with torch.enable_grad():
            return self._marginals(potentials, lengths, create_graph)

    def _marginals(self, potentials: Potentials, lengths: Tensor, create_graph: bool) -> Potentials:
        # the gradient of each input is read: a view of its own when the graph is kept (a
        # structure may send an expansion in the graph its gradient summed over the batch)
        inputs = tuple(
            x.view_as(x) if x.requires_grad and create_graph else x.detach().requires_grad_()
            for x in as_tuple(potentials)
        )
        log_z = self._inside(like(potentials, inputs), lengths, Log())
        self._require_structures(log_z, "log Z")
        # parts no structure uses (e.g. CKY rules when N = 1) get exact zero marginals
        grads = torch.autograd.grad(
            log_z.sum(), inputs, create_graph=create_graph, allow_unused=True,
            materialize_grads=True,
        )
        return like(potentials, grads)

    def argmax(
        self, potentials: Potentials, lengths: Optional[Tensor] = None
    ) -> tuple[Tensor, Tensor]:
        """The best structure by tensor backtracking; works under ``torch.inference_mode``.

        Returns:
            ``(labels, scores)``: labels in the structure's compact form and their scores (B,).
            The scores are differentiable with respect to ``potentials``.
        """
        potentials, lengths = self.check(potentials, lengths)
        with torch.no_grad():
            labels = self._argmax(as_detached(potentials), lengths)
        scores = self._score(potentials, labels, lengths)
        self._require_structures(scores, "the best score")
        return labels, scores

    def kbest(
        self, potentials: Potentials, k: int, lengths: Optional[Tensor] = None
    ) -> tuple[Tensor, Tensor]:
        """The ``k`` best distinct structures, best first.

        Returns:
            ``(labels, scores)`` of shapes (B, k, ...) and (B, k). Where fewer than ``k``
            structures exist, the missing ranks have score ``-inf`` and arbitrary labels.
        """
        positive_int(k, "k")
        potentials, lengths = self.check(potentials, lengths)
        with torch.no_grad():
            labels, dp_scores = self._kbest(as_detached(potentials), k, lengths)
        self._require_structures(dp_scores[:, 0], "the best score")
        scores = self._score_k(potentials, labels, lengths)  # (B, k), differentiable
        return labels, scores.masked_fill(torch.isneginf(dp_scores), float("-inf"))

    def _score_k(self, potentials: Potentials, labels: Tensor, lengths: Tensor) -> Tensor:
        """Scores of (B, k, ...) labels. Shape (B, k)."""
        b, k = labels.shape[:2]
        flat = labels.flatten(0, 1)
        rep = like(
            potentials,
            [x.repeat_interleave(k, dim=0) for x in as_tuple(potentials)],
        )
        return self._score(rep, flat, lengths.repeat_interleave(k)).view(b, k)

    def score(
        self, potentials: Potentials, labels: Tensor, lengths: Optional[Tensor] = None
    ) -> Tensor:
        """Score (sum of potentials of the parts) of the given labels. Shape (B,)."""
        potentials, lengths = self.check(potentials, lengths)
        labels = self.check_labels(labels, lengths)
        return self._score(potentials, labels, lengths)

    def _score(self, potentials: Potentials, labels: Tensor, lengths: Tensor) -> Tensor:
        return _batch_dot(potentials, self.to_parts(labels, lengths))

    def cost_augmented_potentials(
        self,
        potentials: Potentials,
        target: Tensor,
        lengths: Optional[Tensor] = None,
        scale: Union[float, Tensor] = 1.0,
    ) -> Potentials:
        """``potentials + scale * Delta_hamming(target, .)`` written in parts.

        ``scale``: a number, or a (B,) tensor of per-example factors."""
        cost = self.hamming_potentials(target, lengths)

        def scaled(p: Tensor, c: Tensor) -> Tensor:
            if isinstance(scale, Tensor):
                return scale.to(p.dtype).view((-1,) + (1,) * (p.dim() - 1)) * c.to(p.dtype)
            return scale * c.to(p.dtype)

        return like(
            potentials, [p + scaled(p, c) for p, c in zip(as_tuple(potentials), as_tuple(cost))]
        )

    def cost_augmented_argmax(
        self,
        potentials: Potentials,
        target: Tensor,
        lengths: Optional[Tensor] = None,
        cost: Cost = "hamming",
    ) -> tuple[Tensor, Tensor]:
        """``argmax_y s(y) + Delta(target, y)`` (loss-augmented decoding, margin rescaling).

        Hamming cost folds into the potentials; 0/1 cost uses the 2-best decoder: the answer is
        the best structure other than ``target`` when its score + 1 beats the target's score.

        Returns:
            ``(labels, augmented_scores)``: the maximiser and ``s(y) + Delta(target, y)`` (B,).
        """
        if cost not in COSTS:
            raise ValueError(f"cost must be one of {COSTS}; got {cost!r}")
        potentials, lengths = self.check(potentials, lengths)
        target = self.check_labels(target, lengths, "target")
        if cost == "hamming":
            aug = self.cost_augmented_potentials(potentials, target, lengths)
            return self.argmax(aug, lengths)
        others, other_scores = self.cost_augmented_kbest(potentials, target, 1, lengths, "zero_one")
        target_score = self._score(potentials, target, lengths)
        take_other = other_scores[:, 0] > target_score  # ties go to the target (cost 0)
        shape = (-1,) + (1,) * (target.dim() - 1)
        best = torch.where(take_other.view(shape), others[:, 0], target)
        return best, torch.where(take_other, other_scores[:, 0], target_score)

    def cost_augmented_kbest(
        self,
        potentials: Potentials,
        target: Tensor,
        k: int,
        lengths: Optional[Tensor] = None,
        cost: Cost = "hamming",
    ) -> tuple[Tensor, Tensor]:
        """The ``k`` best structures under ``s(y) + Delta(target, y)``, best first.

        For 0/1 cost, the ``k`` best structures other than ``target`` (each with cost 1), so
        the target itself (cost 0) is never among them; this is the candidate set of the
        runner-up decoders. Returns ``(labels (B, k, ...), augmented_scores (B, k))``.
        """
        if cost not in COSTS:
            raise ValueError(f"cost must be one of {COSTS}; got {cost!r}")
        potentials, lengths = self.check(potentials, lengths)
        target = self.check_labels(target, lengths, "target")
        if cost == "hamming":
            aug = self.cost_augmented_potentials(potentials, target, lengths)
            return self.kbest(aug, k, lengths)
        labels, scores = self.kbest(potentials, k + 1, lengths)  # (B, k+1, ...)
        same = self.same(labels, target.unsqueeze(1))  # (B, k+1)
        # stable order: non-target ranks first, keeping their order
        order = torch.sort(same.to(torch.int8), dim=1, stable=True).indices[:, :k]
        idx = order.view(order.shape + (1,) * (labels.dim() - 2)).expand(
            (-1, -1) + labels.shape[2:]
        )
        others = scores.masked_fill(same, float("-inf")) + 1.0  # the target is no candidate
        return labels.gather(1, idx), others.gather(1, order)

    def same(self, a: Tensor, b: Tensor) -> Tensor:
        """Whether labels ``a`` (B, k, ...) equal ``b`` (B, 1, ...). Shape (B, k).

        Padded label values are always 0 (decoders write 0 there and ``check_labels`` zeroes
        them), so a plain equality over all positions is exact.
        """
        equal = a == b  # (B, k, ...)
        return equal.flatten(2).all(-1) if equal.dim() > 2 else equal

    def mask_potentials(self, potentials: Potentials, allowed: Potentials) -> Potentials:
        """Constrained decoding by masking: parts where ``allowed`` is False get ``-inf``
        (:attr:`mask_value`).

        ``-inf`` is an exact exclusion at any scale (a finite value such as ``LOG_ZERO`` can be
        beaten by large scores). ``allowed`` is a bool tensor (or tuple) broadcastable to
        ``potentials``. An example whose masks leave no valid structure is reported (with its
        index) by the operation it goes to. Linear part costs (e.g. Lagrange multipliers) are
        applied by plain addition to the potentials.
        """
        tensors, masks = as_tuple(potentials), as_tuple(allowed)
        names = component_names(potentials)
        if len(masks) != len(tensors):
            raise ValueError(
                f"allowed must have one mask per potentials tensor ({len(tensors)}); got "
                f"{len(masks)}"
            )
        out = []
        for i, (p, a) in enumerate(zip(tensors, masks)):
            if not isinstance(a, Tensor) or a.dtype != torch.bool:
                got = a.dtype if isinstance(a, Tensor) else type(a).__name__
                raise ValueError(f"allowed[{i}] must be a bool tensor; got dtype {got}")
            if a.device != p.device:
                raise ValueError(
                    f"allowed[{i}] must be on the device of {names[i]} ({p.device}); got {a.device}"
                )
            try:
                torch.broadcast_shapes(a.shape, p.shape)
            except RuntimeError:
                raise ValueError(
                    f"allowed[{i}] must be broadcastable to {names[i]} of shape {tuple(p.shape)}; "
                    f"got {tuple(a.shape)}"
                ) from None
            fill = torch.full((), self.mask_value, dtype=p.dtype, device=p.device)
            out.append(torch.where(a, p, fill))
        return like(potentials, out)


def as_detached(potentials: Potentials) -> Potentials:
    """``potentials`` with every tensor detached (for decoders that need no autograd)."""
    return like(potentials, [x.detach() for x in as_tuple(potentials)])
