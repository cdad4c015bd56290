"""Multi-class scorer: one linear score per class, ``(B, C)`` potentials for ``MultiClass``.

Score of class ``y`` for input ``x``: ``<w, Psi(x, y)> = W[:, y] . phi(x) + b[y]``, the joint
feature map ``Psi(x, y) = e_y (x) phi(x)`` of the thesis (seed 001, eq. 3.18), plus an optional
per-class bias (the weight of a constant feature). Inputs: dense (B, D) (ARFF, COIL), sparse
feature indices (B, F) long with 0 = padding, or one word id per example (B,) long.
Time O(B D C) (dense) or O(B F C) (sparse); memory O(B C).
"""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from structssl.scorers.base import LinearInputs, Scorer
from structssl.structures.base import positive_int

__all__ = ["MultiClassScorer"]


class MultiClassScorer(Scorer):
    """Linear multi-class scorer ``x -> (B, C)`` potentials.

    Exactly one of ``num_features``, ``num_words``, ``input_dim`` is given.

    Args:
        num_labels: C, the number of classes.
        num_features: sparse feature index space (inputs (B, F) long, 0 = padding).
        num_words: vocabulary of a single id per example (inputs (B,) long).
        input_dim: D of dense inputs (B, D).
        bias: learn a per-class bias.
        init_std: weights ~ N(0, init_std^2) from the global torch RNG; 0 (default) gives zeros.
        validate: check index ranges (a device sync).
    """

    def __init__(
        self,
        num_labels: int,
        num_features: Optional[int] = None,
        num_words: Optional[int] = None,
        input_dim: Optional[int] = None,
        bias: bool = True,
        init_std: float = 0.0,
        validate: bool = True,
    ) -> None:
        super().__init__()
        self.num_labels = positive_int(num_labels, "num_labels")
        self.linear = LinearInputs(
            self.num_labels, num_features, num_words, input_dim, bias, init_std, validate
        )

    def reset_parameters(self) -> None:
        """Re-initialise (deterministic given the torch seed)."""
        self.linear.reset_parameters()

    def forward(self, inputs: Tensor) -> Tensor:
        """Class potentials.

        Shape:
            inputs: (B, D) float, (B, F) long or (B,) long -> (B, C).

        Raises:
            ValueError: wrong input shape, dtype or index values.
        """
        self.linear.check(inputs, "B")
        return self.linear(inputs)
