"""A :class:`ConstraintSet`: constraints evaluated together: counts side by side, penalties of
instance-level constraints per example and of corpus-level ones on summed counts, hard
violations, and one feature map for constrained decoding."""

from __future__ import annotations

from typing import Any, Literal, Optional, Sequence

import torch
from torch import Tensor

from structssl.constraints.base import Constraint
from structssl.constraints.features import ConcatFeatures
from structssl.constraints.labelings import Tokens
from structssl.losses.gamma import ConstraintFeatures
from structssl.structures.base import as_tuple

__all__ = ["ConstraintSet"]


class ConstraintSet:
    """A list of constraints evaluated together (YAML: see the module docstring).

    Args:
        constraints: the constraints (instance and corpus level, any mix).
        labels: the task's label names in index order; binds every constraint now (else call
            :meth:`bind`).

    Raises:
        TypeError: an entry that is not a :class:`Constraint`.
        ValueError: an unknown label (when ``labels`` is given).
    """

    def __init__(self, constraints: Sequence[Constraint], labels: Optional[Sequence[str]] = None) -> None:
        if isinstance(constraints, Constraint) or not isinstance(constraints, (list, tuple)):
            raise TypeError(f"constraints must be a list of Constraint; got {type(constraints).__name__}")
        for i, con in enumerate(constraints):
            if not isinstance(con, Constraint):
                raise TypeError(f"constraints[{i}] must be a Constraint; got {type(con).__name__}")
        self.constraints: list[Constraint] = list(constraints)
        self.label_names: Optional[tuple[str, ...]] = None
        if labels is not None:
            self.constraints = [c.bind(labels) for c in self.constraints]
            self.label_names = tuple(labels)

    def bind(self, labels: Sequence[str]) -> "ConstraintSet":
        """A copy with every constraint bound to ``labels``."""
        return ConstraintSet(self.constraints, labels)

    @property
    def pending_targets(self) -> list[str]:
        """Names of the constraints whose target is to be estimated from the labeled examples
        (``target="labeled"``, see :meth:`with_targets_from`)."""
        return [c.name for c in self.constraints if getattr(c, "target_from", None) == "labeled"]

    def with_targets_from(self, labels: Any, lengths: Any, tokens: Any = None) -> "ConstraintSet":
        """A copy in which every constraint with ``target="labeled"`` has its target estimated
        from the given labeled examples (``with_target_from``: one batch, or lists of chunks);
        the others are kept as they are."""
        out = ConstraintSet([])
        out.label_names = self.label_names
        out.constraints = [
            c.with_target_from(labels, lengths, tokens)  # type: ignore[attr-defined]
            if getattr(c, "target_from", None) == "labeled" else c
            for c in self.constraints
        ]
        return out

    def __len__(self) -> int:
        return len(self.constraints)

    def __iter__(self):
        return iter(self.constraints)

    def __repr__(self) -> str:
        return f"ConstraintSet({self.constraints!r})"

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.constraints]

    def select(self, level: Optional[str] = None, hard: Optional[bool] = None) -> "ConstraintSet":
        """The constraints of one level and/or hardness (same binding)."""
        out = ConstraintSet([])
        out.label_names = self.label_names
        out.constraints = [
            c for c in self.constraints
            if (level is None or c.level == level) and (hard is None or c.hard == hard)
        ]
        return out

    @property
    def count_slices(self) -> list[slice]:
        """Where each constraint's counts sit in :meth:`counts`' last dimension."""
        out, start = [], 0
        for c in self.constraints:
            out.append(slice(start, start + c.num_counts))
            start += c.num_counts
        return out

    @property
    def num_counts(self) -> int:
        return sum(c.num_counts for c in self.constraints)

    def counts(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """All counts side by side. Shape: (B, num_counts)."""
        b = labels.shape[0] if isinstance(labels, Tensor) else 0
        if not self.constraints:
            return torch.zeros(b, 0, device=labels.device if isinstance(labels, Tensor) else None)
        return torch.cat([c.counts(labels, lengths, tokens) for c in self.constraints], dim=1)

    def penalties_from_counts(self, instance_counts: Tensor, corpus_totals: Optional[Tensor] = None) -> Tensor:
        """Per-constraint penalties from counts.

        Args:
            instance_counts: (..., num_counts) counts of one or more examples; instance-level
                constraints are scored on them.
            corpus_totals: (..., num_counts) counts summed over the corpus; corpus-level
                constraints are scored on them (default: ``instance_counts``).

        Returns:
            (..., len(self)) penalties.
        """
        totals = instance_counts if corpus_totals is None else corpus_totals
        cols = [
            c.penalty_from_counts((totals if c.level == "corpus" else instance_counts)[..., s])
            for c, s in zip(self.constraints, self.count_slices)
        ]
        return torch.stack(cols, dim=-1) if cols else instance_counts.new_zeros(instance_counts.shape[:-1] + (0,))

    def penalty(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """Total penalty: sum over examples of the instance-level penalties plus the
        corpus-level penalties of the summed counts (a scalar)."""
        counts = self.counts(labels, lengths, tokens)
        total = counts.new_zeros(())
        for c, s in zip(self.constraints, self.count_slices):
            if c.level == "corpus":
                total = total + c.penalty_from_counts(counts[:, s].sum(0))
            else:
                total = total + c.penalty_from_counts(counts[:, s]).sum()
        return total

    def instance_penalty(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """Sum of the instance-level penalties per example. Shape (B,)."""
        counts = self.counts(labels, lengths, tokens)
        total = counts.new_zeros(counts.shape[0])
        for c, s in zip(self.constraints, self.count_slices):
            if c.level == "instance":
                total = total + c.penalty_from_counts(counts[:, s])
        return total

    def fold_penalties(
        self, potentials: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None, scale: float = 1.0
    ) -> tuple[Tensor, "ConstraintSet"]:
        """Fold the constraints that are linear in the parts of a chain into its potentials.

        A constraint whose penalty is ``weight`` times a count that :meth:`features` maps
        (:attr:`~structssl.constraints.base.Constraint.linear_penalty`) goes into the
        potentials: a soft one is subtracted (``scale * weight`` per violation), a hard one
        sets the parts that would break it to ``-inf``. A Viterbi or k-best pass over the
        result then scores ``s(y) - scale * penalty(y)`` for the soft ones exactly (up to a
        per-example constant) and never breaks the hard ones (an example where no labeling
        meets them has every labeling at ``-inf``). The others (non-linear, corpus level) are
        returned for a search to evaluate on candidates.

        Args:
            potentials: (B, N, C, C) chain edge potentials, N = ``lengths.max()``.
            lengths: (B,).
            tokens: B token lists (for constraints that need them).
            scale: the multiplier of the soft penalties, >= 0.

        Returns:
            (folded potentials (B, N, C, C), the constraints not folded).
        """
        c_dim = int(potentials.shape[-1])
        soft, rest = [], []
        out = potentials
        for c in self.constraints:
            if not c.linear_penalty:
                rest.append(c)
            elif not c.hard:
                soft.append(c)
            else:  # parts with a positive count weight break it (no offset, no negative weight)
                feats = c.features(tokens, lengths, c_dim, dtype=potentials.dtype)
                w = as_tuple(feats.weights)[0][:, 0]  # (B, N, C, C) count 0
                offset = feats.offset
                if offset is not None and bool((offset.reshape(-1, offset.shape[-1])[:, 0] != 0).any()) \
                        or bool((w < 0).any()):
                    rest.append(c)
                else:
                    out = out.masked_fill(w > 0, float("-inf"))
        left = ConstraintSet([])
        left.label_names, left.constraints = self.label_names, rest
        if not soft or scale == 0:
            return out, left
        part = ConstraintSet([])
        part.label_names, part.constraints = self.label_names, soft
        feats = part.features(tokens, lengths, c_dim, dtype=potentials.dtype)
        v = potentials.new_zeros(potentials.shape[0], part.num_counts)
        for c, s in zip(soft, part.count_slices):
            v[:, s.start] = -scale * c.weight  # penalty = weight * count 0
        extra = feats.adjoint(v, out)
        assert isinstance(extra, Tensor)
        return out + extra, left

    def violations(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> dict[str, Tensor]:
        """Violation per constraint name: (B,) for instance level, a scalar for corpus level."""
        return {c.name: c.violation(labels, lengths, tokens) for c in self.constraints}

    def hard_violated(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """(B,) bool: the labeling violates an instance-level hard constraint."""
        out = torch.zeros(labels.shape[0], dtype=torch.bool, device=labels.device)
        for c in self.constraints:
            if c.hard and c.level == "instance":
                out = out | (c.violation(labels, lengths, tokens) > 0)
        return out

    # -- seed 000 binary encoding
    def instance_constraints(self) -> list[Constraint]:
        return [c for c in self.constraints if c.level == "instance"]

    def indicators(self, labels: Tensor, lengths: Tensor, tokens: Optional[Tokens] = None) -> Tensor:
        """Binary indicators of all instance-level constraints, linear ones first then the
        global non-linear ones (the order of :meth:`indicator_features` then
        :meth:`nonlinear_indicators`). Shape (B, d_ind)."""
        lin = [c for c in self.instance_constraints() if c.linear_indicators]
        non = [c for c in self.instance_constraints() if not c.linear_indicators]
        parts = [c.indicators(labels, lengths, tokens) for c in lin + non]
        return torch.cat(parts, dim=1) if parts else torch.zeros(labels.shape[0], 0, device=labels.device)

    def indicator_features(
        self, tokens: Optional[Tokens], lengths: Tensor, num_labels: Optional[int] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> Optional[ConstraintFeatures]:
        """Binary features of the instance-level constraints whose indicators are linear
        (None if there are none); the others are in :meth:`nonlinear_indicators`."""
        lin = [c for c in self.instance_constraints() if c.linear_indicators]
        if not lin:
            return None
        feats = [c.indicator_features(tokens, lengths, num_labels, dtype) for c in lin]
        return feats[0] if len(feats) == 1 else ConcatFeatures(feats)

    def nonlinear_indicators(self) -> list[Constraint]:
        """Instance-level constraints with a global, non-linear indicator (kbest_search)."""
        return [c for c in self.instance_constraints() if not c.linear_indicators]

    def features(
        self, tokens: Optional[Tokens], lengths: Tensor, num_labels: Optional[int] = None,
        structure: Literal["chain", "multiclass"] = "chain", dtype: Optional[torch.dtype] = None,
    ) -> ConstraintFeatures:
        """``counts`` of every constraint as one feature map linear in parts.

        Raises:
            NotImplementedError: a constraint whose counts are not linear (named).
        """
        non = [c.name for c in self.constraints if not c.linear_counts]
        if non:
            raise NotImplementedError(
                f"counts of {non} are not linear in the parts; use select()/kbest_search"
            )
        if not self.constraints:
            raise ValueError("the constraint set is empty")
        feats = [c.features(tokens, lengths, num_labels, structure, dtype) for c in self.constraints]
        return feats[0] if len(feats) == 1 else ConcatFeatures(feats)