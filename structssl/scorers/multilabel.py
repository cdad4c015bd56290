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

from structssl.scorers.base import LinearInputs, Scorer, check_init_std, init_
from structssl.structures.base import positive_int
from structssl.structures.multilabel import MultiLabelPotentials, PairwiseMultiLabel

__all__ = ["MultiLabelScorer", "PAIRWISE_KINDS"]

PairwiseKind = Literal["linear", "shared", "none"]
PAIRWISE_KINDS: tuple[str, ...] = ("linear", "shared", "none")


class MultiLabelScorer(Scorer):
    """Pairwise multi-label scorer ``x -> MultiLabelPotentials`` (see the module docstring).

    Exactly one of ``num_features``, ``input_dim`` is given.

    Args:
        num_labels: K.
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
        num_labels: int,
        num_features: Optional[int] = None,
        input_dim: Optional[int] = None,
        pairwise: PairwiseKind = "shared",
        bias: bool = True,
        init_std: float = 0.0,
        validate: bool = True,
    ) -> None:
        super().__init__()
        self.num_labels = k = positive_int(num_labels, "num_labels")
        if pairwise not in PAIRWISE_KINDS:
            raise ValueError(f"pairwise must be one of {PAIRWISE_KINDS}; got {pairwise!r}")
        self.pairwise = pairwise
        self.init_std = check_init_std(init_std)
        self.node = LinearInputs(2 * k, num_features, None, input_dim, bias, init_std, validate)
        rows, cols = torch.triu_indices(k, k, offset=1)
        self.register_buffer("pair_rows", rows, persistent=False)
        self.register_buffer("pair_cols", cols, persistent=False)
        num_pairs = rows.numel()
        self.edge: Optional[LinearInputs] = None
        self.edge_table: Optional[nn.Parameter] = None
        if pairwise == "linear":
            self.edge = LinearInputs(
                4 * num_pairs, num_features, None, input_dim, bias, init_std, validate
            )
        elif pairwise == "shared":
            self.edge_table = nn.Parameter(torch.zeros(num_pairs, 2, 2))
        self.reset_parameters()

    def resolve_sizes(self, sizes: dict[str, Any]) -> None:
        """Check the configured sizes against the data's (``num_labels``, ``input_dim``; a data
        module's ``model_sizes()``): this scorer is sized at construction, so a difference is
        an error naming the option to set."""
        mine = {"num_labels": self.num_labels, self.node.kind: self.node.size}
        differ = [f"{key} = {mine[key]}, the data's {sizes[key]}" for key in mine
                  if sizes.get(key) is not None and sizes[key] != mine[key]]
        if differ:
            fix = " ".join(f"--model.init_args.scorer.init_args.{key} {sizes[key]}" for key in mine
                           if sizes.get(key) is not None and sizes[key] != mine[key])
            raise ValueError(f"MultiLabelScorer {'; '.join(differ)}: set {fix} (and the "
                             "structure's num_labels)")

    def reset_parameters(self) -> None:
        """Re-initialise (deterministic given the torch seed)."""
        self.node.reset_parameters()
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
        self.node.check(inputs, "B")
        b, k = inputs.shape[0], self.num_labels
        unary = self.node(inputs).view(b, k, 2)  # (B, K, 2)
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
