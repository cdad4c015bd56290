"""Two-view scorer for co-training: one scorer per feature view, and their sum.

Multi-view learning (thesis, seed 001, chapters 5-7) keeps one weight vector per view,
``f^v(x, y) = <w^v, Psi^v(x, y)>``, and decides with the joint function ``f = f^1 + f^2``.
The co-training losses need each view's potentials separately (each view is trained on the
other view's predictions, e.g. :class:`~structssl.losses.NablaCoSVMLoss`), and joint decoding
needs their sum. Because potentials are linear in parts, the sum of the two views' potentials
scores every structure with ``f^1 + f^2`` (thesis Prop. B.2: transition and emission scores add
across views), so any structure decodes the joint function directly.

The views' inputs come from a feature split such as
:class:`~structssl.data.features.ViewSplit` (``view_a_inputs, view_b_inputs =
split(batch.indices)``), done in the data pipeline.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from torch import Tensor, nn

from structssl.scorers.base import Scorer
from structssl.structures.base import Potentials, as_tuple, like

__all__ = ["TwoViewScorer", "TwoViewPotentials"]


class TwoViewPotentials(NamedTuple):
    """Potentials of both views and of the joint decision function.

    Attributes:
        view_a: potentials of the first view's scorer.
        view_b: potentials of the second view's scorer (same layout).
        joint: ``view_a + view_b`` component by component (same layout).
    """

    view_a: Potentials
    view_b: Potentials
    joint: Potentials


def _layout(potentials: Potentials) -> list[tuple[int, ...]]:
    return [tuple(x.shape) for x in as_tuple(potentials)]


class TwoViewScorer(Scorer):
    """Two scorers over two feature views (see the module docstring).

    Args:
        view_a: the first view's scorer (any ``nn.Module`` returning potentials).
        view_b: the second view's scorer, returning potentials of the same layout.

    :meth:`weight_norm_squared` is ``||w^a||^2 + ||w^b||^2``; each view's own is
    ``scorer.view_a.weight_norm_squared()``.
    """

    def __init__(self, view_a: nn.Module, view_b: nn.Module) -> None:
        super().__init__()
        for name, view in (("view_a", view_a), ("view_b", view_b)):
            if not isinstance(view, nn.Module):
                raise TypeError(f"{name} must be an nn.Module; got {type(view).__name__}")
        self.view_a = view_a
        self.view_b = view_b

    def resolve_sizes(self, sizes: dict[str, Any]) -> None:
        """Pass the data's sizes to the views: ``view_num_features[v]`` is view v's
        ``num_features`` (``view_input_dims[v]`` its ``input_dim``); ``num_labels`` to both."""
        for v, view in enumerate((self.view_a, self.view_b)):
            resolve = getattr(view, "resolve_sizes", None)
            if resolve is None:
                continue
            own = {"num_labels": sizes.get("num_labels")}
            for whole, part in (("view_num_features", "num_features"),
                                ("view_input_dims", "input_dim")):
                if sizes.get(whole) is not None:
                    own[part] = sizes[whole][v]
            resolve(own)

    def forward(
        self, inputs_a: Tensor, inputs_b: Tensor, lengths: Optional[Tensor] = None
    ) -> TwoViewPotentials:
        """Both views' potentials and their sum.

        Args:
            inputs_a: inputs of the first view (what ``view_a`` reads).
            inputs_b: inputs of the second view.
            lengths: (B,) passed to both views when given (sequence and tree scorers); left out
                of the calls when ``None`` (multi-class and multi-label scorers take none).

        Returns:
            :class:`TwoViewPotentials` ``(view_a, view_b, joint)``.

        Raises:
            ValueError: the two views' potentials have different layouts.
        """
        if lengths is None:
            pot_a, pot_b = self.view_a(inputs_a), self.view_b(inputs_b)
        else:
            pot_a, pot_b = self.view_a(inputs_a, lengths), self.view_b(inputs_b, lengths)
        a, b = as_tuple(pot_a), as_tuple(pot_b)
        if type(pot_a) is not type(pot_b) or _layout(pot_a) != _layout(pot_b):
            raise ValueError(
                "view_a and view_b must return potentials of the same layout; got "
                f"{type(pot_a).__name__} {_layout(pot_a)} and "
                f"{type(pot_b).__name__} {_layout(pot_b)}"
            )
        joint = like(pot_a, [x + y for x, y in zip(a, b)])
        return TwoViewPotentials(pot_a, pot_b, joint)
