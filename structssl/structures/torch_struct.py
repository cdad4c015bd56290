"""torch-struct distributions as structssl structures: :class:`TorchStructAdapter`.

Any of torch-struct's ``LinearChainCRF``, ``SemiMarkovCRF``, ``DependencyCRF``, ``TreeCRF`` and
``AlignmentCRF`` becomes a :class:`~structssl.structures.base.Structure`, so every loss and
training procedure of structssl runs on it (structural SVMs, nabla-TSVM, CRF likelihood, ...).

Potentials are in **torch-struct's own layout** (``(B, *event_shape)``, see the table), and so
are the labels: a structure is its 0/1 parts, a long tensor shaped like the potentials (the
"event" of torch-struct's ``argmax`` / ``topk``; torch-struct's ``to_event`` / ``from_event``
convert compact forms). ``lengths`` follow torch-struct's convention:

================  ==========================  =============  ===================================
distribution      event shape                 lengths        one structure
================  ==========================  =============  ===================================
LinearChainCRF    (N - 1, C, C)               N (>= 2)       N labels, edges [n, z_{n+1}, z_n]
SemiMarkovCRF     (N - 1, K, C, C)            N (>= 2)       segments [start, width, z, z_prev]
DependencyCRF     (N, N)                      N              projective tree, root arcs on the
                                                             diagonal (``multiroot`` option)
TreeCRF           (N, N, NT)                  N              binary tree of labelled spans
AlignmentCRF      (N, M, 3)                   N              monotone alignment (``local``,
                                                             ``max_gap`` options)
================  ==========================  =============  ===================================

Entries beyond an example's length may hold anything (they are cut off before torch-struct
sees them); entries within it are potentials (``-inf`` forbids a part; ``+inf`` / NaN are
rejected).

Operations: log Z (``partition``), max, smoothed max (log Z at a temperature), k-best scores
(``kmax``, torch-struct's KMax semiring), argmax (``argmax``), k-best structures (``topk``),
marginals (autograd of log Z by the base class), score (dot product with the parts), and the
Hamming cost ``Delta(t, y) = <y, 1 - t>``: the number of parts of ``y`` that are not parts of
``t`` (for structures with a fixed number of parts, chains, trees and dependency trees, the
usual Hamming distance over parts; zero only for ``y = t``).

The torch-struct 0.5 faults this adapter hides (each has a test in
``tests/test_torch_struct_adapter.py``):

- ``argmax``, ``marginals`` and ``topk`` differentiate the inside pass, so they fail under
  ``torch.inference_mode`` (Lightning's evaluation) and ignore ``no_grad``: the adapter runs
  torch-struct on normal tensors with gradients enabled and returns detached results.
- It mutates its input: ``requires_grad_(True)`` on the caller's tensor (and ``DependencyCRF``
  fails with "a view of a leaf Variable ... in-place" on any leaf tensor): the adapter hands it
  a non-leaf copy, never the caller's tensor.
- ``SemiMarkovCRF`` masks a ragged batch with the batch's shortest length (wrong log Z for the
  longer examples), and chains assert that some example has the full length: the adapter runs
  torch-struct once per distinct length on potentials cut to that length, with no ``lengths``.
- Its semiring zeros are finite (-1e9, KMax -1e5): missing k-best ranks come back as finite
  scores with garbage parts, and an example with no valid structure gets a finite log Z. The
  adapter finds which ranks exist from a KMax pass over 0 / -inf indicator potentials (a real
  structure scores exactly 0 there) and reports ``-inf`` for the others.
- ``AlignmentCRF`` needs the CUDA-only ``genbmm`` package: without it the adapter raises an
  ``ImportError`` saying so at construction.

torch-struct is imported lazily (``pip install torch-struct``; an ``ImportError`` naming the
package when it is missing). Cost: torch-struct's own (its parallel-scan chains and CKY), once
per distinct length in the batch, plus one KMax pass for k-best (and for log Z / max when some
potential is ``-inf``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor

from structssl.semirings import KMax, Log, Max, Semiring, SmoothMax
from structssl.structures.base import Potentials, Structure

__all__ = [
    "TorchStructAdapter",
    "TORCH_STRUCT_KINDS",
    "semi_markov_to_torch_struct",
    "dependency_to_torch_struct",
]


@dataclass(frozen=True)
class _Kind:
    event: str  # the event shape, for messages
    event_dims: int
    length_dims: int  # leading event dims that scale with the length
    offset: int  # their size is length + offset
    min_length: int
    options: tuple[str, ...]


#: the wrapped distributions (torch-struct class names) and their layouts
TORCH_STRUCT_KINDS: dict[str, _Kind] = {
    "LinearChainCRF": _Kind("(N - 1, C, C)", 3, 1, -1, 2, ()),
    "SemiMarkovCRF": _Kind("(N - 1, K, C, C)", 4, 1, -1, 2, ()),
    "DependencyCRF": _Kind("(N, N)", 2, 2, 0, 1, ("multiroot",)),
    "TreeCRF": _Kind("(N, N, NT)", 3, 2, 0, 1, ()),
    "AlignmentCRF": _Kind("(N, M, 3)", 3, 1, 0, 1, ("local", "max_gap")),
}


def _torch_struct() -> Any:
    try:
        import torch_struct
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "TorchStructAdapter needs the torch-struct package (pip install torch-struct)"
        ) from error
    return torch_struct


class TorchStructAdapter(Structure):
    """A torch-struct distribution as a structssl structure (see the module docstring).

    Args:
        distribution: the torch-struct class or its name: ``"LinearChainCRF"``,
            ``"SemiMarkovCRF"``, ``"DependencyCRF"``, ``"TreeCRF"`` or ``"AlignmentCRF"``.
        validate: check values at the public entry points (see :class:`Structure`).
        **options: constructor options of the distribution (``multiroot`` for
            ``DependencyCRF``; ``local``, ``max_gap`` for ``AlignmentCRF``).

    Example:
        >>> chain = TorchStructAdapter("LinearChainCRF")
        >>> chain.log_partition(torch.zeros(2, 3, 2, 2)).shape  # 4 positions, 2 labels
        torch.Size([2])
    """

    mask_value = float("-inf")

    def __init__(
        self, distribution: Union[str, type], validate: bool = True, **options: Any
    ) -> None:
        super().__init__(validate)
        ts = _torch_struct()
        name = distribution if isinstance(distribution, str) else getattr(distribution, "__name__", "")
        if name not in TORCH_STRUCT_KINDS:
            raise ValueError(
                f"distribution must be one of {sorted(TORCH_STRUCT_KINDS)} (a torch-struct class "
                f"or its name); got {distribution!r}"
            )
        kind = TORCH_STRUCT_KINDS[name]
        unknown = sorted(set(options) - set(kind.options))
        if unknown:
            raise ValueError(
                f"{name} takes the options {list(kind.options)}; got unknown options {unknown}"
            )
        if name == "AlignmentCRF":
            try:
                import genbmm  # noqa: F401
            except ImportError:
                raise ImportError(
                    "torch-struct 0.5's AlignmentCRF needs the genbmm package (CUDA banded "
                    "matrix kernels: pip install genbmm on a machine with CUDA); it is not "
                    "installed"
                ) from None
        self.name = name
        self.kind = kind
        self.options = dict(options)
        self.distribution = getattr(ts, name)
        self.event_shape_doc = kind.event

    def __repr__(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"TorchStructAdapter({self.name!r}{options})"

    # ------------------------------------------------------------------ checks
    def _check(self, potentials: Potentials, lengths: Optional[Tensor]) -> tuple[Tensor, Tensor]:
        kind = self.kind
        if not isinstance(potentials, Tensor):
            raise TypeError(
                f"{self.name} potentials must be a single tensor (B, *{kind.event}); got a "
                f"{type(potentials).__name__}"
            )
        shape = tuple(potentials.shape)
        event = shape[1:]
        wrong = potentials.dim() != 1 + kind.event_dims
        if not wrong and self.name in ("LinearChainCRF", "SemiMarkovCRF"):
            wrong = event[-1] != event[-2]
        elif not wrong and self.name in ("DependencyCRF", "TreeCRF"):
            wrong = event[0] != event[1]
        elif not wrong and self.name == "AlignmentCRF":
            wrong = event[2] != 3 or event[1] < event[0]
        if wrong:
            extra = " with M >= N" if self.name == "AlignmentCRF" else ""
            raise ValueError(
                f"{self.name} potentials must have shape (B, *{kind.event}){extra} "
                f"(torch-struct's layout); got {shape}"
            )
        max_length = event[0] - kind.offset
        if max_length < kind.min_length:
            raise ValueError(
                f"{self.name} potentials must cover at least {kind.min_length} positions "
                f"(N >= {kind.min_length} in (B, *{kind.event})); got {shape}"
            )
        lengths = self.check_lengths(lengths, shape[0], max_length, potentials.device)
        if self.validate and int(lengths.min()) < kind.min_length:
            raise ValueError(
                f"{self.name} lengths must be >= {kind.min_length} (torch-struct's N); got "
                f"{int(lengths.min())}"
            )
        return potentials, lengths

    def valid_masks(self, potentials: Potentials, lengths: Tensor) -> tuple[Optional[Tensor], ...]:
        """Entries within each example's length (the rest is cut off before torch-struct)."""
        assert isinstance(potentials, Tensor)
        return (self._inside_length(lengths, tuple(potentials.shape[1:])),)

    def _inside_length(self, lengths: Tensor, event: tuple[int, ...]) -> Tensor:
        """(B, *event) bool, broadcastable: entries within the length."""
        kind = self.kind
        size = (lengths + kind.offset).view(-1, *([1] * len(event)))
        mask: Optional[Tensor] = None
        for d in range(kind.length_dims):
            shape = [1] * len(event)
            shape[d] = event[d]
            index = torch.arange(event[d], device=lengths.device).view(1, *shape)
            inside = index < size
            mask = inside if mask is None else mask & inside
        assert mask is not None
        return mask

    def check_labels(self, labels: Tensor, lengths: Tensor, name: str = "labels") -> Tensor:
        """0/1 parts shaped like the potentials; returns them as long with padding zeroed."""
        b = lengths.shape[0]
        kind = self.kind
        if not isinstance(labels, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(labels).__name__}")
        if labels.dim() != 1 + kind.event_dims or labels.shape[0] != b:
            raise ValueError(
                f"{name} must be 0/1 parts of shape (B, *{kind.event}) with B = {b} (the "
                f"structure's parts, shaped like the potentials); got {tuple(labels.shape)}"
            )
        if labels.is_floating_point() or labels.dtype == torch.bool:
            raise ValueError(f"{name} must have an integer dtype (0/1 parts); got {labels.dtype}")
        reach = labels.shape[1] - kind.offset
        if reach < int(lengths.max()):
            raise ValueError(
                f"{name} must cover max(lengths) = {int(lengths.max())} positions; got shape "
                f"{tuple(labels.shape)}"
            )
        inside = self._inside_length(lengths, tuple(labels.shape[1:]))
        labels = torch.where(inside, labels.long(), 0)
        if self.validate and labels.numel():
            lo, hi = int(labels.min()), int(labels.max())
            if lo < 0 or hi > 1:
                raise ValueError(f"{name} must be 0/1 parts; got values in [{lo}, {hi}]")
        return labels

    # ------------------------------------------------------------------ running torch-struct
    def _groups(self, lengths: Tensor) -> list[tuple[int, Tensor]]:
        """``(length, example indices)`` per distinct length."""
        return [(int(n), (lengths == n).nonzero().flatten()) for n in torch.unique(lengths)]

    def _cut(self, x: Tensor, n: int) -> Tensor:
        size = n + self.kind.offset
        index = (slice(None),) + (slice(0, size),) * self.kind.length_dims
        return x[index]

    def _pad(self, x: Tensor, event: tuple[int, ...], lead: int = 1) -> Tensor:
        """Pad the cut event dims of ``x`` (``lead`` batch-like dims first) back to ``event``."""
        pads: list[int] = []
        for d in reversed(range(len(event))):
            pads += [0, event[d] - x.shape[lead + d]]
        return torch.nn.functional.pad(x, pads)

    def _dist(self, x: Tensor) -> Any:
        with warnings.catch_warnings():  # torch-struct 0.5 warns on every construction
            warnings.filterwarnings("ignore", message=".*arg_constraints.*")
            return self.distribution(x, **self.options)

    def _each_length(
        self, potentials: Tensor, lengths: Tensor, fn: Callable[[Any, Tensor], Tensor], lead: int
    ) -> Tensor:
        """``fn(distribution, cut potentials)`` per distinct length, reassembled in batch order.

        ``fn`` returns (k?, b, ...) with the batch at dim ``lead - 1`` ... callers give results
        batch first: ``lead`` is the number of leading dims before the event (batch included)
        for event-shaped results, 0 for per-example results.
        """
        outputs, order = [], []
        for n, idx in self._groups(lengths):
            sub = self._cut(potentials.index_select(0, idx), n)
            out = fn(self._dist(_handoff(sub)), sub)
            if lead:
                out = self._pad(out, tuple(potentials.shape[1:]), lead)
            outputs.append(out)
            order.append(idx)
        merged = torch.cat(outputs, dim=0)
        inverse = torch.argsort(torch.cat(order))
        return merged.index_select(0, inverse)

    def _existing(self, potentials: Tensor, lengths: Tensor, k: int) -> Tensor:
        """(B, k) bool: whether rank r has a structure of finite score (exact, see module)."""
        indicator = torch.where(torch.isneginf(potentials.detach()), float("-inf"), 0.0).to(
            potentials.dtype
        )
        with _grad_enabled():
            best = self._each_length(
                indicator, lengths, lambda d, _: _kmax(d, k), lead=0
            )
        return best.detach() > -0.5  # real structures score exactly 0, missing ones <= -1e4

    def _inside(self, potentials: Tensor, lengths: Tensor, semiring: Semiring) -> Tensor:
        needs_graph = potentials.requires_grad and torch.is_grad_enabled()
        with _grad_enabled():
            if isinstance(semiring, KMax):
                value = self._each_length(potentials, lengths, lambda d, _: _kmax(d, semiring.k), 0)
                exists = self._existing(potentials, lengths, semiring.k)
            elif type(semiring) is Log or isinstance(semiring, (Max, SmoothMax)):
                scale = semiring.temperature if isinstance(semiring, SmoothMax) else 1.0
                attr = "max" if isinstance(semiring, Max) else "partition"
                pot = potentials / scale if scale != 1.0 else potentials
                value = scale * self._each_length(pot, lengths, lambda d, _: getattr(d, attr), 0)
                exists = None
                if bool(torch.isneginf(potentials.detach()).any()):
                    exists = self._existing(potentials, lengths, 1)[:, 0]
            else:
                raise NotImplementedError(
                    f"TorchStructAdapter runs the Log, Max, SmoothMax and KMax semirings; got "
                    f"{semiring!r}"
                )
        if exists is not None:
            value = torch.where(exists, value, float("-inf"))
        return value if needs_graph else value.detach()

    def _argmax(self, potentials: Tensor, lengths: Tensor) -> Tensor:
        with _grad_enabled():
            parts = self._each_length(potentials, lengths, lambda d, _: d.argmax, lead=1)
        return parts.detach().round().long()

    def _kbest(self, potentials: Tensor, k: int, lengths: Tensor) -> tuple[Tensor, Tensor]:
        with _grad_enabled():
            parts = self._each_length(
                potentials, lengths, lambda d, _: d.topk(k).transpose(0, 1), lead=2
            )  # (B, k, *event)
            scores = self._each_length(potentials, lengths, lambda d, _: _kmax(d, k), lead=0)
        exists = self._existing(potentials, lengths, k)
        labels = parts.detach().round().long()
        shape = exists.shape + (1,) * (labels.dim() - 2)
        labels = torch.where(exists.view(shape), labels, 0)
        return labels, torch.where(exists, scores.detach(), float("-inf"))

    # ------------------------------------------------------------------ parts
    def to_parts(self, labels: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """0/1 parts (the labels) as floats, zero beyond each length."""
        labels, _ = self._labels_lengths(labels, lengths)
        return labels.float()

    def _labels_lengths(
        self, labels: Tensor, lengths: Optional[Tensor], name: str = "labels"
    ) -> tuple[Tensor, Tensor]:
        if not isinstance(labels, Tensor) or labels.dim() != 1 + self.kind.event_dims:
            got = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
            raise ValueError(f"{name} must have shape (B, *{self.kind.event}); got {got}")
        max_length = labels.shape[1] - self.kind.offset
        lengths = self.check_lengths(lengths, labels.shape[0], max_length, labels.device)
        return self.check_labels(labels, lengths, name), lengths

    def from_parts(self, parts: Potentials, lengths: Optional[Tensor] = None) -> Tensor:
        """Parts to labels: 0/1 parts as they are; fractional parts (marginals) to the
        structure with the largest sum of them (minimum Bayes risk decoding)."""
        if not isinstance(parts, Tensor) or parts.dim() != 1 + self.kind.event_dims:
            got = tuple(parts.shape) if isinstance(parts, Tensor) else type(parts).__name__
            raise ValueError(f"parts must be a tensor of shape (B, *{self.kind.event}); got {got}")
        if bool(((parts == 0) | (parts == 1)).all()):
            return parts.long()
        labels, _ = self.argmax(parts.to(torch.float64), lengths)
        return labels

    def hamming_potentials(self, target: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """``1 - target`` on the parts within each length: ``<cost, y> = |y minus target|``."""
        target, lengths = self._labels_lengths(target, lengths, "target")
        inside = self._inside_length(lengths, tuple(target.shape[1:]))
        return inside.float() - target.float()

    def _score(self, potentials: Potentials, labels: Tensor, lengths: Tensor) -> Tensor:
        assert isinstance(potentials, Tensor)
        if labels.shape != potentials.shape:
            raise ValueError(
                f"labels must be parts shaped like the potentials {tuple(potentials.shape)}; "
                f"got {tuple(labels.shape)}"
            )
        picked = torch.where(labels.bool(), potentials, 0.0)  # where: -inf times 0 is NaN
        return picked.flatten(1).sum(1)


def _kmax(dist: Any, k: int) -> Tensor:
    """torch-struct's k best scores, batch first: (b, k)."""
    return dist.kmax(k).transpose(0, 1)


def _handoff(x: Tensor) -> Tensor:
    """A non-leaf copy of ``x`` for torch-struct: it calls ``requires_grad_(True)`` on its input
    and writes into views of it (an error on leaves); gradients still reach ``x``."""
    if x.requires_grad:
        return x.clone()
    return x.detach().clone().requires_grad_().clone()


class _grad_enabled:
    """Normal tensors and gradients on, whatever the caller's mode (torch-struct differentiates
    its inside pass for argmax, marginals and k-best)."""

    def __enter__(self) -> None:
        self._inference = torch.inference_mode(False)
        self._grad = torch.enable_grad()
        self._inference.__enter__()
        self._grad.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._grad.__exit__(*exc)
        self._inference.__exit__(*exc)


# ---------------------------------------------------------------------- layouts
def semi_markov_to_torch_struct(potentials: Tensor) -> Tensor:
    """:class:`~structssl.structures.SemiMarkov` potentials in ``SemiMarkovCRF``'s layout.

    Native ``[b, s, k, i, j]`` (segment of label j on tokens s .. s + k after label i; only
    row 0 at s = 0) becomes ``[b, s, k + 1, j, i]`` over the N + 1 token boundaries, with
    width 0 and the other first labels at s = 0 forbidden (``-inf``): both give the same
    log Z, marginals and argmax (an example of n tokens has torch-struct length n + 1).

    Shape:
        (B, N, K, C, C) -> (B, N, K + 1, C, C).
    """
    b, n, k, c, _ = potentials.shape
    out = potentials.new_full((b, n, k + 1, c, c), float("-inf"))
    out[:, :, 1:] = potentials.transpose(-1, -2)
    out[:, 0, :, :, 1:] = float("-inf")
    return out


def dependency_to_torch_struct(potentials: Tensor) -> Tensor:
    """:class:`~structssl.structures.DependencyTree` arc scores in ``DependencyCRF``'s layout:
    ``[b, h, m]`` with root row 0 becomes ``[b, h - 1, m - 1]`` with the root arcs on the
    diagonal (the same trees, log Z and marginals; lengths unchanged).

    Shape:
        (B, N + 1, N + 1) -> (B, N, N).
    """
    n = potentials.shape[1] - 1
    out = potentials[:, 1:, 1:].clone()
    out[:, torch.arange(n), torch.arange(n)] = potentials[:, 0, 1:]
    return out
