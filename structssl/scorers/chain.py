"""Linear-chain scorers: unary potentials from inputs, learned transition / start / end.

:class:`LinearChainScorer` is the linear joint-feature model of a chain CRF / chain structural
SVM. With ``phi(x_t)`` the features of position ``t`` (sparse indices, a word index or a dense
vector, see :class:`~structssl.scorers.base.LinearInputs`), its score of labels ``y`` of an
example of length ``n`` is

    <w, Psi(x, y)> = sum_{t < n} (W[:, y_t] . phi(x_t) + b[y_t])          (emissions)
                   + sum_{1 <= t < n} T[y_{t-1}, y_t]                        (transitions)
                   + S[y_0] + E[y_{n-1}]                                     (start, end)

With ``start_end=False`` and ``bias=False`` this is exactly the thesis's joint feature map
(seed 001, eq. 3.23: label-label indicators and label-observation products). The potentials are
built by :meth:`LinearChain.potentials_from <structssl.structures.LinearChain.potentials_from>`,
so ``LinearChain(C).score(scorer(x, lengths), y, lengths)`` is the score above; positions
``>= lengths`` are exactly 0.

:class:`ChainHead` holds the transition / start / end weights and folds any unary potentials
into the chain layout; :class:`~structssl.scorers.neural.NeuralChainScorer` reuses it on top of
a neural encoder.

Shapes: inputs (B, N, F) long, (B, N) long words or (B, N, D) float; potentials (B, N, C, C),
or with ``factored=True`` a :class:`~structssl.structures.ChainPotentials` (emissions (B, N, C),
the shared transitions expanded to (B, C, C), start and end (B, C)), which every LinearChain
operation and loss accepts without the (B, N, C, C) tensor.
Time O(B N (F + C^2)) (sparse) or O(B N (D C + C^2)) (dense); memory O(B N C^2), factored
O(B N C).
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import Tensor, nn

from structssl.scorers.base import (
    LinearInputs,
    Scorer,
    adopt_input_size,
    check_init_std,
    check_lengths,
    init_,
)
from structssl.structures.base import adopt_num_labels, positive_int
from structssl.structures.linear_chain import ChainPotentials, LinearChain

__all__ = ["ChainHead", "LinearChainScorer"]


class ChainHead(Scorer):
    """Transition, start and end weights that turn unary potentials into chain potentials.

    Args:
        num_labels: C.
        transitions: learn a (C, C) transition matrix ``[previous, next]`` (else none).
        start_end: learn (C,) start and end weights (else none).
        init_std: weights ~ N(0, init_std^2) from the global torch RNG; 0 gives zeros.
        factored: return :class:`~structssl.structures.ChainPotentials` instead of the
            (B, N, C, C) edge potentials (same scores, C times less memory).
    """

    def __init__(
        self,
        num_labels: int,
        transitions: bool = True,
        start_end: bool = True,
        init_std: float = 0.0,
        factored: bool = False,
    ) -> None:
        super().__init__()
        self.num_labels = positive_int(num_labels, "num_labels")
        self.factored = bool(factored)
        self.init_std = check_init_std(init_std)
        c = self.num_labels
        self.transition = nn.Parameter(torch.zeros(c, c)) if transitions else None
        self.start = nn.Parameter(torch.zeros(c)) if start_end else None
        self.end = nn.Parameter(torch.zeros(c)) if start_end else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-initialise (see ``init_std``); deterministic given the torch seed."""
        for p in (self.transition, self.start, self.end):
            if p is not None:
                init_(p, self.init_std)

    def forward(self, unary: Tensor, lengths: Tensor) -> Union[Tensor, ChainPotentials]:
        """Chain potentials from unary potentials; positions ``>= lengths`` are zeroed.

        Args:
            unary: (B, N, C) per-position label potentials.
            lengths: (B,) long, already checked.

        Shape:
            unary: (B, N, C), lengths: (B,) -> (B, N, C, C), or factored (see the class).
        """
        if unary.dim() != 3 or unary.shape[2] != self.num_labels:
            raise ValueError(
                f"unary must have shape (B, N, C) with C = num_labels = {self.num_labels}; got "
                f"{tuple(unary.shape)}"
            )
        b, n, _ = unary.shape
        if self.factored:
            valid = LinearChain.valid_mask(lengths, n).unsqueeze(2)
            emissions = torch.where(valid, unary, torch.zeros((), dtype=unary.dtype, device=unary.device))
            return ChainPotentials.from_factors(emissions, self.transition, self.start, self.end)
        pot = LinearChain.potentials_from(unary, self.transition, self.start, self.end, lengths)
        valid = LinearChain.valid_mask(lengths, n).view(b, n, 1, 1)
        return torch.where(valid, pot, torch.zeros((), dtype=pot.dtype, device=pot.device))


class LinearChainScorer(Scorer):
    """Linear chain scorer ``x -> (B, N, C, C)`` potentials (see the module docstring).

    At most one of ``num_features``, ``num_words``, ``input_dim`` is given. Sizes left out
    (``num_labels``, or all three input sizes) are taken from the data when a training
    procedure sets up (:meth:`resolve_sizes` with the data module's ``num_labels`` and
    ``num_features`` / ``input_dim``); the weights exist from then on.

    Args:
        num_labels: C (default: from the data).
        num_features: sparse feature index space (inputs (B, N, F) long, 0 = padding).
        num_words: word vocabulary (inputs (B, N) long word ids).
        input_dim: D of dense inputs (B, N, D).
        transitions: learn a transition matrix.
        start_end: learn start and end weights.
        bias: learn a per-label emission bias (the weight of a constant feature).
        init_std: weights ~ N(0, init_std^2) from the global torch RNG; 0 (default) gives zeros.
        validate: check value ranges of inputs and lengths (device syncs).
        factored: emit :class:`~structssl.structures.ChainPotentials` (emissions, shared
            transitions, start, end) instead of (B, N, C, C) potentials: the same scores, C
            times less memory, and the fast factored dynamic programs of ``LinearChain``
            (every LinearChain operation and the likelihood / hinge / nabla losses take them).
            Code that reads parts in the edge layout (constraint features, the Gamma-SSVM and
            CCCP procedures) needs the default (B, N, C, C) potentials.

    Example:
        >>> scorer = LinearChainScorer(num_labels=3, input_dim=2)
        >>> scorer(torch.zeros(4, 5, 2), torch.tensor([5, 3, 1, 2])).shape
        torch.Size([4, 5, 3, 3])
    """

    def __init__(
        self,
        num_labels: Optional[int] = None,
        num_features: Optional[int] = None,
        num_words: Optional[int] = None,
        input_dim: Optional[int] = None,
        transitions: bool = True,
        start_end: bool = True,
        bias: bool = True,
        init_std: float = 0.0,
        validate: bool = True,
        factored: bool = False,
    ) -> None:
        super().__init__()
        self.num_labels = 0 if num_labels is None else positive_int(num_labels, "num_labels")
        self.validate = bool(validate)
        self.factored = bool(factored)
        self._options = dict(
            num_features=num_features, num_words=num_words, input_dim=input_dim,
            transitions=transitions, start_end=start_end, bias=bias, init_std=init_std,
        )
        given = [k for k in ("num_features", "num_words", "input_dim") if self._options[k] is not None]
        if len(given) > 1:
            raise ValueError(
                f"at most one of num_features, num_words, input_dim may be given; got {given}"
            )
        self.emission: Optional[LinearInputs] = None
        self.head: Optional[ChainHead] = None
        if self.num_labels and any(
            self._options[k] is not None for k in ("num_features", "num_words", "input_dim")
        ):
            self._build()

    def _build(self) -> None:
        o = self._options
        self.emission = LinearInputs(
            self.num_labels, o["num_features"], o["num_words"], o["input_dim"], o["bias"],
            o["init_std"], self.validate,
        )
        self.head = ChainHead(
            self.num_labels, o["transitions"], o["start_end"], o["init_std"], self.factored
        )

    def resolve_sizes(self, sizes: dict[str, Any]) -> None:
        """Take the sizes left out from the data, and build the weights.

        Args:
            sizes: the data module's sizes: ``num_labels`` and the input size it provides
                (``num_features`` for sparse features, ``input_dim`` for dense inputs).

        Raises:
            ValueError: a size given to the constructor differs from the data's, or the data
                gives no input size where none was given.
        """
        o = self._options
        self.num_labels = adopt_num_labels(self.num_labels, sizes, "LinearChainScorer")
        mine = adopt_input_size(o, sizes, "LinearChainScorer")
        if self.emission is None:
            if not self.num_labels or not mine:
                raise ValueError(
                    "LinearChainScorer needs num_labels and one of num_features, num_words, "
                    f"input_dim; got num_labels={self.num_labels or None}, sizes from the data "
                    f"{sorted(sizes)}"
                )
            self._build()

    def _built(self) -> tuple[LinearInputs, ChainHead]:
        if self.emission is None or self.head is None:
            raise ValueError(
                "LinearChainScorer has no weights yet: give num_labels and num_features / "
                "num_words / input_dim, or train it through a procedure whose data module gives "
                "them"
            )
        return self.emission, self.head

    def reset_parameters(self) -> None:
        """Re-initialise all weights (deterministic given the torch seed)."""
        emission, head = self._built()
        emission.reset_parameters()
        head.reset_parameters()

    def unary(self, inputs: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Per-position label potentials ``W^T phi(x_t) + b``, zero at padded positions.

        Shape:
            inputs: (B, N, F) / (B, N) / (B, N, D), lengths: (B,) -> (B, N, C).
        """
        unary, lengths = self._unary(inputs, lengths)
        valid = LinearChain.valid_mask(lengths, unary.shape[1]).unsqueeze(2)  # (B, N, 1)
        return torch.where(valid, unary, torch.zeros((), dtype=unary.dtype, device=unary.device))

    def _unary(self, inputs: Tensor, lengths: Optional[Tensor]) -> tuple[Tensor, Tensor]:
        """The unary potentials (B, N, C), not yet zeroed at padded positions (the head does
        that once), and the checked lengths."""
        emission, _ = self._built()
        emission.check(inputs, "B, N")
        b, n = inputs.shape[:2]
        if n == 0:
            raise ValueError(f"inputs must have N >= 1 positions; got shape {tuple(inputs.shape)}")
        lengths = check_lengths(lengths, b, n, inputs.device, self.validate)
        return emission(inputs), lengths

    def forward(
        self, inputs: Tensor, lengths: Optional[Tensor] = None
    ) -> Union[Tensor, ChainPotentials]:
        """Chain potentials of a batch.

        Args:
            inputs: sparse feature indices (B, N, F) long, word ids (B, N) long, or dense
                (B, N, D), as chosen in the constructor.
            lengths: (B,) long in [1, N] (default: all N).

        Returns:
            (B, N, C, C) potentials in the :class:`~structssl.structures.LinearChain` layout,
            0 at positions ``>= lengths``; with ``factored=True`` a
            :class:`~structssl.structures.ChainPotentials` (emissions 0 at those positions).

        Raises:
            ValueError: wrong input shape, dtype or values, or ``lengths`` not matching.
        """
        unary, lengths = self._unary(inputs, lengths)
        return self._built()[1](unary, lengths)
