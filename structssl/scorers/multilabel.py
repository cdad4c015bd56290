"""Multi-label scorer: node and edge potentials of the fully connected pairwise MRF.

The feature map of seed 004 (section 5, after Finley and Joachims 2008): for ``K`` binary labels
with one-hot states ``z_p`` (2 states) and ``z_pq`` (4 joint states),

    s(x, y) = sum_p theta_p(z_p) . x + sum_{p < q} theta_pq(z_pq) . x,

i.e. node potentials ``unary[p, a] = W_p[:, a] . phi(x) (+ b_p[a])`` and, with
``pairwise="linear"``, edge potentials ``pairwise[p, q, a, c] = W_pq[:, a, c] . phi(x)
(+ b_pq[a, c])`` linear in the input. ``pairwise="shared"`` learns one input-independent
(2, 2) table per edge (the usual CRF edge weights; far fewer parameters), ``"none"`` gives
independent labels (zero edge potentials). Edge weights exist only for the ``P = K (K - 1) / 2``
pairs ``p < q`` (the parts of :class:`~structssl.structures.multilabel.PairwiseMultiLabel`).

Potentials: :class:`~structssl.structures.multilabel.MultiLabelPotentials` ``(unary (B, K, 2),
pairwise (B, K, K, 2, 2))``, built with ``PairwiseMultiLabel.potentials_from`` (entries with
``p >= q`` are 0). Inputs: dense (B, D), or sparse feature indices (B, F) long (0 = padding).
Parameters: ``2 K rows`` node weights, plus ``4 P rows`` (linear) or ``4 P`` (shared) edge
weights, ``rows`` = D or the number of features. Time O(B rows K^2) with linear edges.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

import torch
from torch import Tensor, nn

from structssl.scorers.base import (
    LinearInputs,
    Scorer,
    _one_kind,
    adopt_input_size,
    check_init_std,
    init_,
)
from structssl.structures.base import adopt_num_labels, positive_int
from structssl.structures.multilabel import MultiLabelPotentials, PairwiseMultiLabel

__all__ = ["MultiLabelScorer", "PAIRWISE_KINDS"]

PairwiseKind = Literal["linear", "shared", "none"]
PAIRWISE_KINDS: tuple[str, ...] = ("linear", "shared", "none")


class MultiLabelScorer(Scorer):
    """Pairwise multi-label scorer ``x -> MultiLabelPotentials`` (see the module docstring).

    At most one of ``num_features``, ``input_dim`` is given. Sizes left out (``num_labels``, or
    both input sizes) are taken from the data when a training procedure sets up
    (:meth:`resolve_sizes` with the data module's ``num_labels`` and ``input_dim``); the weights
    exist from then on.

    Args:
        num_labels: K (default: from the data).
        num_features: sparse feature index space (inputs (B, F) long, 0 = padding).
        input_dim: D of dense inputs (B, D).
        pairwise: ``"linear"`` (edge potentials linear in x, seed 004), ``"shared"`` (one
            learned (2, 2) table per edge) or ``"none"``.
        bias: learn node (and, with linear edges, edge) biases.
        init_std: weights ~ N(0, init_std^2) from the global torch RNG; 0 (default) gives zeros.
        validate: check index ranges (a device sync).
    """

    def __init__(
        self,
        num_labels: Optional[int] = None,
        num_features: Optional[int] = None,
        input_dim: Optional[int] = None,
        pairwise: PairwiseKind = "shared",
        bias: bool = True,
        init_std: float = 0.0,
        validate: bool = True,
    ) -> None:
        super().__init__()
        self.num_labels = 0 if num_labels is None else positive_int(num_labels, "num_labels")
        if pairwise not in PAIRWISE_KINDS:
            raise ValueError(f"pairwise must be one of {PAIRWISE_KINDS}; got {pairwise!r}")
        if num_features is not None and input_dim is not None:
            raise ValueError(
                "at most one of num_features, input_dim may be given; got "
                f"num_features={num_features!r}, input_dim={input_dim!r}"
            )
        if num_features is not None or input_dim is not None:
            _one_kind(num_features, None, input_dim)  # a valid size, checked now
        self.pairwise = pairwise
        self.init_std = check_init_std(init_std)
        self.validate = bool(validate)
        self._options: dict[str, Any] = dict(
            num_features=num_features, num_words=None, input_dim=input_dim, bias=bias
        )
        self.node: Optional[LinearInputs] = None
        self.edge: Optional[LinearInputs] = None
        self.edge_table: Optional[nn.Parameter] = None
        if self.num_labels and (num_features is not None or input_dim is not None):
            self._build()

    def _build(self) -> None:
        k, o = self.num_labels, self._options
        self.node = LinearInputs(
            2 * k, o["num_features"], None, o["input_dim"], o["bias"], self.init_std, self.validate
        )
        rows, cols = torch.triu_indices(k, k, offset=1)
        self.register_buffer("pair_rows", rows, persistent=False)
        self.register_buffer("pair_cols", cols, persistent=False)
        num_pairs = rows.numel()
        if self.pairwise == "linear":
            self.edge = LinearInputs(
                4 * num_pairs, o["num_features"], None, o["input_dim"], o["bias"], self.init_std,
                self.validate,
            )
        elif self.pairwise == "shared":
            self.edge_table = nn.Parameter(torch.zeros(num_pairs, 2, 2))
        self.reset_parameters()

    def resolve_sizes(self, sizes: dict[str, Any]) -> None:
        """Take the sizes left out from the data (``num_labels``, ``input_dim``; a data module's
        ``model_sizes()``), and build the weights.

        Raises:
            ValueError: a size given to the constructor differs from the data's, or the data
                gives no input size where none was given.
        """
        self.num_labels = adopt_num_labels(self.num_labels, sizes, "MultiLabelScorer")
        mine = adopt_input_size(self._options, sizes, "MultiLabelScorer")
        if self.node is None:
            if not self.num_labels or not mine:
                raise ValueError(
                    "MultiLabelScorer needs num_labels and one of num_features, input_dim; got "
                    f"num_labels={self.num_labels or None}, sizes from the data {sorted(sizes)}"
                )
            self._build()

    def _built(self) -> LinearInputs:
        if self.node is None:
            raise ValueError(
                "MultiLabelScorer has no weights yet: give num_labels and num_features / "
                "input_dim, or train it through a procedure whose data module gives them"
            )
        return self.node

    def reset_parameters(self) -> None:
        """Re-initialise (deterministic given the torch seed)."""
        self._built().reset_parameters()
        if self.edge is not None:
            self.edge.reset_parameters()
        if self.edge_table is not None:
            init_(self.edge_table, self.init_std)

    def forward(self, inputs: Tensor) -> MultiLabelPotentials:
        """Node and edge potentials.

        Shape:
            inputs: (B, D) float or (B, F) long -> ``MultiLabelPotentials(unary (B, K, 2),
            pairwise (B, K, K, 2, 2))``.

        Raises:
            ValueError: wrong input shape, dtype or index values.
        """
        node = self._built()
        node.check(inputs, "B")
        b, k = inputs.shape[0], self.num_labels
        unary = node(inputs).view(b, k, 2)  # (B, K, 2)
        if self.pairwise == "none":
            return PairwiseMultiLabel.potentials_from(unary)
        if self.edge is not None:
            pair = self.edge(inputs).view(b, -1, 2, 2)  # (B, P, 2, 2)
        else:
            assert self.edge_table is not None
            pair = self.edge_table.to(unary.dtype).expand(b, -1, 2, 2)
        full = unary.new_zeros(b, k, k, 2, 2)
        full[:, self.pair_rows, self.pair_cols] = pair  # upper triangle p < q (a fresh tensor)
        return PairwiseMultiLabel.potentials_from(unary, full)
