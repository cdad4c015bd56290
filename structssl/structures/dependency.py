"""Projective dependency trees, first order (arc-factored), by Eisner's algorithm.

A structure is a projective tree over the ``n`` words of an example rooted at a virtual root
node 0: every word ``m`` in ``1 .. n`` has one head ``h`` in ``0 .. n`` (``h != m``), the heads
form no cycle and no two arcs cross (projectivity, the root's arcs included). With
``multiroot=True`` (the default, as torch-struct's ``DependencyCRF``) the root may have several
children; with ``multiroot=False`` exactly one.

Potentials: (B, N + 1, N + 1) arc scores, ``potentials[b, h, m]`` the score of the arc from
head ``h`` to modifier ``m`` (node 0 is the root, words are 1 .. N). Parts are those arcs with
``m`` in ``1 .. lengths``, ``h`` in ``0 .. lengths`` and ``h != m``; every other entry (arcs
into the root, self-loops, padding) is not a part and may hold anything. Parts have the same
layout (one-hot arcs).

Labels: (B, N) long heads, ``labels[b, m - 1]`` the head of word ``m`` (0 = the root); 0 at
padded positions. Gold trees are checked: heads in range, no self-loop, no cycle, projective
(and one root child with ``multiroot=False``); a non-projective tree is an error naming the
crossing arcs.

Hamming cost: the number of words with a wrong head (linear in arcs).

Algorithm: Eisner (1996) with complete and incomplete spans, batched over the spans of each
width (charts stored by start and by end so that each width is a few tensor slices); any
semiring of :mod:`structssl.semirings`. Log Z, max and the smoothed max run fused: the charts
are filled without an autograd graph and the backward is one outside pass over them (the arc
marginals: split weights are softmaxes of the stored terms); the argmax is the same outside pass
over the Max charts with one-hot splits (it marks exactly the arcs of one best tree: tensor
backtracking, no autograd). Double backward (``create_graph``) recomputes through the
autograd-able pass. Each projective tree has exactly one derivation, so the k-best derivations
of the KMax semiring are the k best trees: k-best differentiates the KMax inside pass once per
rank (the gradient of a rank's score is the 0/1 arc indicator of its tree, since top-k routes
each rank to one derivation). Time O(B N^3) (O(B N^3 k log k) for k-best), memory O(B N^2)
charts (times k).

References: Eisner (1996), "Three new probabilistic models for dependency parsing"; McDonald
et al. (2005) for arc-factored training.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from structssl.semirings import KMax, Log, Max, Semiring, SmoothMax
from structssl.structures.base import Potentials, Structure, semiring_sum

__all__ = ["DependencyTree"]


class DependencyTree(Structure):
    """Projective first-order dependency trees (module docstring).

    Args:
        multiroot: allow several children of the root (else exactly one).
        validate: check values at the public entry points (see :class:`Structure`).

    Infinities: ``-inf`` forbids an arc (exact, at any scale); entries that are not parts may
    hold anything; ``+inf`` / NaN on parts and examples with no valid tree raise
    ``ValueError`` naming the example.
    """

    event_shape_doc = "(N + 1, N + 1)"
    mask_value = float("-inf")

    def __init__(self, multiroot: bool = True, validate: bool = True) -> None:
        super().__init__(validate)
        self.multiroot = bool(multiroot)

    def __repr__(self) -> str:
        return f"DependencyTree(multiroot={self.multiroot})"

    # ------------------------------------------------------------------ checks
    def _check(self, potentials: Potentials, lengths: Optional[Tensor]) -> tuple[Tensor, Tensor]:
        if not isinstance(potentials, Tensor):
            raise TypeError(
                "DependencyTree potentials must be a single tensor (B, N + 1, N + 1); got a "
                f"{type(potentials).__name__}"
            )
        if potentials.dim() != 3 or potentials.shape[1] != potentials.shape[2]:
            raise ValueError(
                "potentials must have shape (B, N + 1, N + 1) (arc scores head x modifier, node "
                f"0 the root); got {tuple(potentials.shape)}"
            )
        b, n1 = potentials.shape[:2]
        if n1 < 2:
            raise ValueError(
                "potentials must cover the root and at least one word, (B, N + 1, N + 1) with "
                f"N >= 1; got {tuple(potentials.shape)}"
            )
        return potentials, self.check_lengths(lengths, b, n1 - 1, potentials.device)

    def valid_masks(self, potentials: Potentials, lengths: Tensor) -> tuple[Optional[Tensor], ...]:
        """(B, N + 1, N + 1): arcs ``h -> m`` with ``1 <= m <= n``, ``h <= n``, ``h != m``."""
        assert isinstance(potentials, Tensor)
        return (self.arc_mask(lengths, potentials.shape[1] - 1),)

    def arc_mask(self, lengths: Tensor, max_length: int) -> Tensor:
        """(B, N + 1, N + 1) bool: which entries are arcs (parts) within each length."""
        nodes = torch.arange(max_length + 1, device=lengths.device)
        inside = nodes.view(1, -1) <= lengths.view(-1, 1)  # (B, N + 1)
        mask = inside.unsqueeze(2) & inside.unsqueeze(1)
        mask = mask & (nodes.view(-1, 1) != nodes.view(1, -1))  # no self-loop
        mask[:, :, 0] = False  # nothing heads the root
        return mask

    def check_labels(self, labels: Tensor, lengths: Tensor, name: str = "labels") -> Tensor:
        """Validate heads: range, self-loops, cycles, projectivity (and one root child).

        Returns:
            (B, N) long heads, 0 at padded positions.

        Raises:
            ValueError: naming the example (and the crossing arcs of a non-projective tree).
        """
        heads, valid = self._position_labels(labels, lengths, name)
        if self.validate:
            self._check_trees(heads, lengths, valid, name)
        return heads

    def _check_trees(self, heads: Tensor, lengths: Tensor, valid: Tensor, name: str) -> None:
        b, n = heads.shape
        words = torch.arange(1, n + 1, device=heads.device).expand(b, n)
        bad = valid & ((heads < 0) | (heads > lengths.view(b, 1)))
        if bool(bad.any()):
            i, m = bad.nonzero()[0].tolist()
            raise ValueError(
                f"{name} must be heads in [0, n] (0 = the root) for each word; example {i} "
                f"(n = {int(lengths[i])}) gives word {m + 1} the head {int(heads[i, m])}"
            )
        loop = valid & (heads == words)
        if bool(loop.any()):
            i, m = loop.nonzero()[0].tolist()
            raise ValueError(f"{name} has a self-loop: example {i}, word {m + 1} is its own head")
        # cycles: follow the heads by pointer doubling; every word must reach the root
        parent = torch.cat([heads.new_zeros(b, 1), heads], dim=1)  # (B, N + 1), root -> root
        for _ in range(max(1, (n + 1).bit_length()) + 1):
            parent = parent.gather(1, parent)
        cyclic = (parent[:, 1:] != 0) & valid
        if bool(cyclic.any()):
            i, m = cyclic.nonzero()[0].tolist()
            raise ValueError(
                f"{name} is not a tree: example {i} has a cycle through word {m + 1} (its heads "
                f"never reach the root 0)"
            )
        lo = torch.minimum(heads, words)
        hi = torch.maximum(heads, words)
        cross = (lo.unsqueeze(2) < lo.unsqueeze(1)) & (lo.unsqueeze(1) < hi.unsqueeze(2)) & (
            hi.unsqueeze(2) < hi.unsqueeze(1)
        )  # (B, N, N): arc of word a starts outside, ends inside arc of word c
        cross &= valid.unsqueeze(2) & valid.unsqueeze(1)
        if bool(cross.any()):
            i, a, c = cross.nonzero()[0].tolist()
            raise ValueError(
                f"{name} is not projective (DependencyTree is the projective structure): example "
                f"{i} has crossing arcs {int(heads[i, a])} -> {a + 1} and {int(heads[i, c])} -> "
                f"{c + 1}"
            )
        if not self.multiroot:
            roots = ((heads == 0) & valid).sum(1)
            several = roots != 1
            if bool(several.any()):
                i = int(several.nonzero()[0])
                raise ValueError(
                    f"{name} must have exactly one word headed by the root (multiroot=False); "
                    f"example {i} has {int(roots[i])}"
                )

    # ------------------------------------------------------------------ dynamic programs
    def _inside(self, potentials: Tensor, lengths: Tensor, semiring: Semiring) -> Tensor:
        if type(semiring) is Log or isinstance(semiring, Max):
            mode = "max" if isinstance(semiring, Max) else "log"
            return _EisnerFused.apply(potentials, lengths, mode, self.multiroot)
        if isinstance(semiring, SmoothMax):
            t = semiring.temperature
            return t * _EisnerFused.apply(potentials / t, lengths, "log", self.multiroot)
        return self._inside_autograd(potentials, lengths, semiring)

    def _inside_autograd(self, potentials: Tensor, lengths: Tensor, semiring: Semiring) -> Tensor:
        """Eisner over any semiring by differentiable tensor ops (KMax; double backward)."""
        b, n1 = potentials.shape[:2]
        size = (semiring.size,) if semiring.size else ()
        zero = semiring.lift(potentials.new_full((b, n1, n1), float("-inf")))
        one = semiring.lift(potentials.new_zeros(b, n1))
        # charts by start [b, i, width] (spans i .. i + width) and by end [b, j, width]
        c_right_s, c_left_s, c_right_e, c_left_e = (zero.clone() for _ in range(4))
        i_right_s, i_left_e = zero.clone(), zero.clone()
        for chart in (c_right_s, c_left_s, c_right_e, c_left_e):
            chart[:, :, 0] = one
        arcs = potentials
        if not self.multiroot:  # the root's one child is attached at the end
            arcs = potentials.clone()
            arcs[:, 0, :] = float("-inf")
        for w in range(1, n1):
            m = n1 - w
            # incomplete spans: C->[i, r] (x) C<-[r + 1, j], r = i .. j - 1
            core = _combine(semiring, c_right_s[:, :m, :w], c_left_e[:, w:, :w].flip(2))
            right = semiring.mul_potentials(core, torch.diagonal(arcs, w, 1, 2))  # i -> j
            left = semiring.mul_potentials(core, torch.diagonal(arcs, -w, 1, 2))  # j -> i
            i_right_s[:, :m, w] = right
            i_left_e[:, w:, w] = left
            # complete spans: I->[i, r] (x) C->[r, j], r = i + 1 .. j
            c_right = _combine(semiring, i_right_s[:, :m, 1 : w + 1], c_right_e[:, w:, :w].flip(2))
            # C<-[i, r] (x) I<-[r, j], r = i .. j - 1
            c_left = _combine(semiring, c_left_s[:, :m, :w], i_left_e[:, w:, 1 : w + 1].flip(2))
            c_right_s[:, :m, w] = c_right
            c_right_e[:, w:, w] = c_right
            c_left_s[:, :m, w] = c_left
            c_left_e[:, w:, w] = c_left
        index = lengths.view((b, 1) + (1,) * len(size)).expand((b, 1) + size)
        if self.multiroot:
            return c_right_s[:, 0].gather(1, index).squeeze(1)  # C->[0, n]
        # one root child r: C<-[1, r] (x) C->[r, n] (x) s[0, r], r = 1 .. n
        n = n1 - 1
        left = c_left_s[:, 1, :n]  # (B, N, *S): C<-[1, r] has width r - 1
        ends = c_right_e.gather(1, index.unsqueeze(2).expand((b, 1, n1) + size)).squeeze(1)
        widths = (lengths.view(b, 1) - torch.arange(1, n1, device=lengths.device)).clamp(min=0)
        right = ends.gather(1, widths.view((b, n) + (1,) * len(size)).expand((b, n) + size))
        total = semiring.mul_potentials(semiring.mul(left, right), potentials[:, 0, 1:])
        inside = (torch.arange(1, n1, device=lengths.device).view(1, n) <= lengths.view(b, 1))
        total = torch.where(inside.view((b, n) + (1,) * len(size)), total, float("-inf"))
        return semiring_sum(semiring, total, 1)

    def _argmax(self, potentials: Tensor, lengths: Tensor) -> Tensor:
        # the outside pass of the max charts with one-hot splits marks the best tree's arcs
        charts = _eisner_charts(potentials, lengths, "max", self.multiroot)
        ones = potentials.new_ones(potentials.shape[0])
        arcs = _eisner_outside(potentials, lengths, charts, ones, "max", self.multiroot)
        # max's indices, not argmax (the same first index, several times faster on the CPU over
        # a dimension that is not the last)
        heads = arcs[:, :, 1:].max(1).indices
        return torch.where(self.valid_mask(lengths, heads.shape[1]), heads, 0)

    def _kbest(self, potentials: Tensor, k: int, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """k best trees: the gradient of each rank of the KMax inside pass is its tree's arcs."""
        n = potentials.shape[1] - 1
        with torch.inference_mode(False), torch.enable_grad():
            x = potentials.detach().clone().requires_grad_()
            scores = self._inside(x, lengths.clone(), KMax(k))  # (B, k)
            heads = []
            for r in range(k):
                (arcs,) = torch.autograd.grad(scores[:, r].sum(), x, retain_graph=r < k - 1)
                heads.append(arcs[:, :, 1:].max(1).indices)  # (B, N): the head of each word
        labels = torch.stack(heads, dim=1)  # (B, k, N)
        valid = self.valid_mask(lengths, n).unsqueeze(1)
        return torch.where(valid, labels, 0), scores.detach()

    # ------------------------------------------------------------------ parts

    def to_parts(self, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Heads (B, N) to one-hot arcs (B, N + 1, N + 1); padding is all zero."""
        heads, lengths = self._position_labels_and_lengths(labels, lengths)
        b, n = heads.shape
        parts = torch.zeros(b, n + 1, n + 1, device=heads.device)
        valid = self.valid_mask(lengths, n).float()
        parts[:, :, 1:].scatter_(1, heads.unsqueeze(1), valid.unsqueeze(1))
        return parts

    def from_parts(self, parts: Potentials, lengths: Optional[Tensor] = None) -> Tensor:
        """Arcs (B, N + 1, N + 1) to heads (B, N): exact for one-hot arcs; for marginals, the
        most likely head of each word (which need not form a tree)."""
        if not isinstance(parts, Tensor) or parts.dim() != 3:
            got = tuple(parts.shape) if isinstance(parts, Tensor) else type(parts).__name__
            raise ValueError(f"parts must be a tensor of shape (B, N + 1, N + 1); got {got}")
        heads = parts[:, :, 1:].max(1).indices
        if lengths is None:
            return heads
        return torch.where(self.valid_mask(lengths.to(heads.device), heads.shape[1]), heads, 0)

    def hamming_potentials(self, target: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """Wrong-head count in arcs (B, N + 1, N + 1): 1 on every arc but the target's."""
        heads, lengths = self._position_labels_and_lengths(target, lengths, "target")
        return self.arc_mask(lengths, heads.shape[1]).float() - self.to_parts(heads, lengths)

    def _score(self, potentials: Potentials, labels: Tensor, lengths: Tensor) -> Tensor:
        assert isinstance(potentials, Tensor)
        b, n1 = potentials.shape[:2]
        if labels.shape != (b, n1 - 1):
            raise ValueError(
                f"labels must have shape (B, N) = ({b}, {n1 - 1}); got {tuple(labels.shape)}"
            )
        picked = potentials[:, :, 1:].gather(1, labels.unsqueeze(1)).squeeze(1)  # (B, N)
        return torch.where(self.valid_mask(lengths, n1 - 1), picked, 0.0).sum(1)


def _combine(semiring: Semiring, left: Tensor, right: Tensor) -> Tensor:
    """``sum_r left[:, :, r] (x) right[:, :, r]``: (B, M, W, *S) twice -> (B, M, *S)."""
    return semiring_sum(semiring, semiring.mul(left, right), 2)


# ---------------------------------------------------------------------- fused Eisner (Log, Max)
def _reduce(terms: Tensor, mode: str) -> Tensor:
    if mode == "max":
        return terms.amax(2)
    return torch.logsumexp(terms, 2)


def _split_weights(terms: Tensor, result: Tensor, mode: str) -> Tensor:
    """d result / d terms: softmax weights (log) or a one-hot first argmax (max); 0 where
    ``result`` is -inf (no derivation)."""
    dead = torch.isneginf(result).unsqueeze(2)
    if mode == "max":
        hot = torch.zeros_like(terms)
        hot.scatter_(2, terms.argmax(2, keepdim=True), 1.0)
        return hot.masked_fill(dead, 0.0)
    safe = result.masked_fill(torch.isneginf(result), 0.0).unsqueeze(2)
    return (terms - safe).exp().masked_fill(dead, 0.0)


def _eisner_charts(pot: Tensor, lengths: Tensor, mode: str, multiroot: bool) -> dict[str, Any]:
    """The Log or Max charts of Eisner's algorithm, no autograd: complete / incomplete spans
    by start ``[b, i, width]`` and by end ``[b, j, width]``, and the final value (B,)."""
    b, n1 = pot.shape[:2]
    with torch.no_grad():
        arcs = pot if multiroot else pot.clone().index_fill_(1, pot.new_zeros(1, dtype=torch.long), float("-inf"))
        names = ("c_right_s", "c_left_s", "c_right_e", "c_left_e", "i_right_s", "i_left_e")
        ch: dict[str, Any] = {k: pot.new_full((b, n1, n1), float("-inf")) for k in names}
        for k in names[:4]:
            ch[k][:, :, 0] = 0.0
        cores = [None]
        for w in range(1, n1):
            m = n1 - w
            core = _reduce(ch["c_right_s"][:, :m, :w] + ch["c_left_e"][:, w:, :w].flip(2), mode)
            cores.append(core)
            ch["i_right_s"][:, :m, w] = core + torch.diagonal(arcs, w, 1, 2)
            ch["i_left_e"][:, w:, w] = core + torch.diagonal(arcs, -w, 1, 2)
            right = _reduce(ch["i_right_s"][:, :m, 1 : w + 1] + ch["c_right_e"][:, w:, :w].flip(2), mode)
            left = _reduce(ch["c_left_s"][:, :m, :w] + ch["i_left_e"][:, w:, 1 : w + 1].flip(2), mode)
            ch["c_right_s"][:, :m, w] = right
            ch["c_right_e"][:, w:, w] = right
            ch["c_left_s"][:, :m, w] = left
            ch["c_left_e"][:, w:, w] = left
        ch["cores"] = cores
        if multiroot:
            ch["value"] = ch["c_right_s"][:, 0].gather(1, lengths.view(b, 1)).squeeze(1)
        else:
            ch["root_terms"] = _root_terms(pot, lengths, ch)
            ch["value"] = _reduce(ch["root_terms"].unsqueeze(1), mode).squeeze(1)
    return ch


def _root_terms(pot: Tensor, lengths: Tensor, ch: dict[str, Any]) -> Tensor:
    """(B, N): C<-[1, r] + C->[r, n] + s[0, r] for the one root child r (-inf past n)."""
    b, n1 = pot.shape[:2]
    n = n1 - 1
    r = torch.arange(1, n1, device=pot.device).view(1, n)
    ends = ch["c_right_e"][torch.arange(b, device=pot.device).view(b, 1), lengths.view(b, 1)]  # (B, 1, N + 1)
    widths = (lengths.view(b, 1) - r).clamp(min=0)
    right = ends.squeeze(1).gather(1, widths)
    terms = ch["c_left_s"][:, 1, :n] + right + pot[:, 0, 1:]
    return terms.masked_fill(r > lengths.view(b, 1), float("-inf"))


def _eisner_outside(
    pot: Tensor, lengths: Tensor, ch: dict[str, Any], grad: Tensor, mode: str, multiroot: bool
) -> Tensor:
    """d value / d arcs times ``grad`` (B,): the arc marginals (log) or the best tree's arcs
    (max), by one outside pass over the stored charts (adjoints, no autograd)."""
    b, n1 = pot.shape[:2]
    with torch.no_grad():
        g = {k: torch.zeros_like(ch[k]) for k in ("c_right_s", "c_left_s", "c_right_e", "c_left_e", "i_right_s", "i_left_e")}
        g_arc = torch.zeros_like(pot)
        rows = torch.arange(b, device=pot.device)
        if multiroot:
            g["c_right_s"][rows, 0, lengths] = grad
        else:
            terms = ch["root_terms"]
            weights = _split_weights(terms.unsqueeze(1), ch["value"].unsqueeze(1), mode).squeeze(1)
            contrib = weights * grad.view(b, 1)  # (B, N) over the root child r
            n = n1 - 1
            g["c_left_s"][:, 1, :n] += contrib
            widths = (lengths.view(b, 1) - torch.arange(1, n1, device=pot.device).view(1, n)).clamp(min=0)
            g["c_right_e"][rows.view(b, 1), lengths.view(b, 1), widths] += contrib
            g_arc[:, 0, 1:] += contrib
        for w in range(n1 - 1, 0, -1):
            m = n1 - w
            g_right = g["c_right_s"][:, :m, w] + g["c_right_e"][:, w:, w]
            g_left = g["c_left_s"][:, :m, w] + g["c_left_e"][:, w:, w]
            terms = ch["i_right_s"][:, :m, 1 : w + 1] + ch["c_right_e"][:, w:, :w].flip(2)
            contrib = _split_weights(terms, ch["c_right_s"][:, :m, w], mode) * g_right.unsqueeze(2)
            g["i_right_s"][:, :m, 1 : w + 1] += contrib
            g["c_right_e"][:, w:, :w] += contrib.flip(2)
            terms = ch["c_left_s"][:, :m, :w] + ch["i_left_e"][:, w:, 1 : w + 1].flip(2)
            contrib = _split_weights(terms, ch["c_left_s"][:, :m, w], mode) * g_left.unsqueeze(2)
            g["c_left_s"][:, :m, :w] += contrib
            g["i_left_e"][:, w:, 1 : w + 1] += contrib.flip(2)
            g_inc_right = g["i_right_s"][:, :m, w]
            g_inc_left = g["i_left_e"][:, w:, w]
            torch.diagonal(g_arc, w, 1, 2).add_(g_inc_right)
            torch.diagonal(g_arc, -w, 1, 2).add_(g_inc_left)
            terms = ch["c_right_s"][:, :m, :w] + ch["c_left_e"][:, w:, :w].flip(2)
            g_core = (g_inc_right + g_inc_left).unsqueeze(2)
            contrib = _split_weights(terms, ch["cores"][w], mode) * g_core
            g["c_right_s"][:, :m, :w] += contrib
            g["c_left_e"][:, w:, :w] += contrib.flip(2)
        # arcs forbidden (-inf) never get weight; with multiroot=False the root row of the
        # charts was -inf, only the root-child term above reaches row 0
        return g_arc


class _EisnerFused(torch.autograd.Function):
    """log Z (or max) of projective trees with the outside pass as its backward: no autograd
    graph through the charts. Double backward recomputes through the autograd-able Eisner."""

    @staticmethod
    def forward(ctx, potentials: Tensor, lengths: Tensor, mode: str, multiroot: bool) -> Tensor:  # type: ignore[override]
        pot = potentials.detach()
        charts = _eisner_charts(pot, lengths, mode, multiroot)
        ctx.save_for_backward(potentials, lengths)
        ctx.charts, ctx.mode, ctx.multiroot = charts, mode, multiroot
        return charts["value"].clone()

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[no-untyped-def, override]
        potentials, lengths = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: differentiable marginals
            semiring = Max() if ctx.mode == "max" else Log()
            tree = DependencyTree(multiroot=ctx.multiroot, validate=False)
            with torch.enable_grad():
                again = tree._inside_autograd(potentials, lengths, semiring)
                (marg,) = torch.autograd.grad(again, potentials, grad, create_graph=True)
            return marg, None, None, None
        marg = _eisner_outside(potentials.detach(), lengths, ctx.charts, grad, ctx.mode, ctx.multiroot)
        return marg, None, None, None
