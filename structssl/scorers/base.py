"""Shared pieces of the scorers: the :class:`Scorer` base, linear input maps, argument checks.

A *scorer* is an ``nn.Module`` that turns inputs into potentials in a structure's layout. It
owns the parameters; structures own none. Linear scorers compute ``<w, Psi(x, y)>`` part by
part: every potential is ``w_part . phi(x)`` for an input feature vector ``phi(x)``, so that
``structure.score(scorer(x), y) == <w, Psi(x, y)>`` for the joint feature map ``Psi`` (thesis,
seed 001, eq. 3.18 and 3.23).

:class:`LinearInputs` is the one input map ``phi(x) -> W^T phi(x) (+ b)`` of all linear scorers.
It reads three kinds of input, chosen by the constructor argument given:

=================  ==========================  ================================================
argument           input                       map
=================  ==========================  ================================================
``num_features``   (..., F) long indices,      sum of the rows ``W[f]`` of the features present
                   0 = padding                 (binary sparse features of
                                               :class:`~structssl.data.features.FeatureExtractor`)
``num_words``      (...) long word indices     ``W[word]``: one row per word (no padding
                   (every index is a word)     index: word 0 is a real word)
``input_dim``      (..., D) floating point     ``x @ W`` (dense features, e.g. the synthetic
                                               HMM's emissions, ARFF or COIL vectors)
=================  ==========================  ================================================

plus an optional ``bias`` (out,): the weight of a constant feature. ``W`` is one parameter
``weight`` (rows, out). The sparse map is :func:`sparse_feature_sum`, a custom autograd function
over the *active* feature slots (non-zero indices) of the (items x features) binary matrix in
CSR form (:class:`SparseLayout`): its forward is one ``embedding_bag(mode="sum")`` of the weight
rows over each item's slots, and its weight gradient one ``embedding_bag`` of the output
gradient rows over each feature's items, the transposed CSR, copied into the rows of the active
features; both cost O(#active feature slots * out). The layout and its transpose (one sort of
the active slots) are built once per index tensor and cached while the tensor lives
(:func:`sparse_layout`), so the chunks of a full batch that L-BFGS evaluates 20+ times per step
pay them once (``embedding_bag``'s own dense backward sorts every slot on every call, measured
46 % of a CRF evaluation on CoNLL-2002 Spanish; the ``index_add`` of the gradient rows that
came next, 30 %). The padding row 0 gets exactly zero gradient and, never read, stays whatever
it is (0 after :meth:`LinearInputs.reset_parameters`). It equals ``nn.EmbeddingBag(num_features,
out, mode="sum", padding_idx=0)``. Time O(#inputs * out) per call (sparse: O(#active feature
slots * out)), memory O(#rows * out) for the weights and O(#active feature slots) for a cached
layout; the gradient of ``W`` is dense.

The regulariser: :func:`weight_norm_squared` returns ``||w||^2``, the sum of squares of **every
parameter** of a module (the whole ``w`` of ``<w, Psi(x, y)>``: feature weights, transition,
start, end, rule, root and shared pairwise weights, and biases, which are weights of a constant
feature exactly like the ``bias`` template of the sparse features). ``include_bias=False``
leaves out the parameters whose own name starts with ``bias`` (``LinearInputs.bias``,
``nn.Linear.bias``, the LSTM's ``bias_ih_l0``...). The padding row of a sparse map is zero and
never trained, so it adds nothing.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from structssl.memo import TensorMemo, value_range
from structssl.structures.base import positive_int

__all__ = [
    "Scorer", "LinearInputs", "weight_norm_squared", "check_lengths", "sparse_feature_sum",
    "SparseLayout", "sparse_layout",
]


def weight_norm_squared(module: nn.Module, include_bias: bool = True) -> Tensor:
    """``||w||^2``: the sum of squares of the parameters of ``module`` (see the module docstring).

    Args:
        module: any ``nn.Module``.
        include_bias: also count parameters whose own name starts with ``bias``.

    Returns:
        A 0-dim tensor (differentiable), in the dtype of the first parameter (float32 zero if the
        module has no parameters).
    """
    total: Optional[Tensor] = None
    for name, p in module.named_parameters():
        if not include_bias and name.rsplit(".", 1)[-1].startswith("bias"):
            continue
        term = p.pow(2).sum()
        total = term if total is None else total + term.to(total.dtype)
    return torch.zeros(()) if total is None else total


class SparseLayout:
    """The active slots of a (*lead, F) feature-index tensor as the two CSR matrices of the
    sparse map: items x features (the forward) and its transpose features x items (the weight
    gradient). Built by :func:`sparse_layout`, which caches it per index tensor.

    Attributes:
        num_items: M, the number of items (bags), the product of ``lead``.
        index: (A,) the active feature ids, item by item (row-major); int32 where they fit.
        offsets: (M,) the start of each item's slots in ``index`` (same dtype).

    The transpose (:meth:`transpose`) is built on first use and kept: the distinct active
    features ``features`` (U,) long, ascending, ``feature_items`` (A,) the item of every slot
    sorted by feature (ascending item within a feature) and ``feature_offsets`` (U,) the start
    of each feature's items. Building costs one sort of the A slots; every use after that is a
    gather-sum of O(A * out).
    """

    __slots__ = ("num_items", "index", "offsets", "_counts", "_transpose", "_slot_items")

    def __init__(self, indices: Tensor) -> None:
        self.num_items = math.prod(indices.shape[:-1])
        flat = indices.reshape(self.num_items, indices.shape[-1])  # (M, F)
        active = flat != 0
        counts = active.sum(1)  # (M,)
        small = flat.numel() < 2**31 and (flat.numel() == 0 or int(flat.max()) < 2**31)
        dtype = torch.int32 if small else torch.long
        self.index = flat[active].to(dtype)  # (A,)
        self.offsets = (torch.cumsum(counts, 0) - counts).to(dtype)  # (M,)
        self._counts = counts
        self._transpose: Optional[tuple[Tensor, Tensor, Tensor]] = None
        self._slot_items: Optional[Tensor] = None

    def slot_items(self) -> Tensor:
        """(A,) the item of every slot of ``index``, in its dtype: kept after the first call
        (the GPU's scatter-add weight gradient reads it at every backward)."""
        if self._slot_items is None:
            self._slot_items = self._items_of_slots()
        return self._slot_items

    def _items_of_slots(self) -> Tensor:
        items = torch.arange(self.num_items, device=self.index.device, dtype=self.index.dtype)
        return torch.repeat_interleave(items, self._counts)

    def transpose(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(features (U,), feature_items (A,), feature_offsets (U,))`` (see the class)."""
        if self._transpose is None:
            order = torch.sort(self.index, stable=True)  # ascending feature, then item
            features, per_feature = torch.unique_consecutive(order.values, return_counts=True)
            # not kept: on the CPU, where only the transpose needs them, A more stored ids per chunk
            feature_items = self._items_of_slots()[order.indices]
            feature_offsets = (torch.cumsum(per_feature, 0) - per_feature).to(self.index.dtype)
            self._transpose = (features.long(), feature_items, feature_offsets)
        return self._transpose


#: layouts of the index tensors seen, held while the tensor lives unchanged (a full batch's
#: chunks are evaluated many times per L-BFGS step)
_LAYOUTS: TensorMemo[SparseLayout] = TensorMemo()


def sparse_layout(indices: Tensor) -> SparseLayout:
    """The :class:`SparseLayout` of ``indices`` (*lead, F) long, built once per tensor while
    it lives unchanged (:class:`~structssl.memo.TensorMemo`)."""
    return _LAYOUTS.get(indices, lambda: SparseLayout(indices))


class _SparseFeatureSum(torch.autograd.Function):
    """``out[m] = sum_{a in bag m} weight[index[a]]`` over the active slots of a
    :class:`SparseLayout` (see :func:`sparse_feature_sum`)."""

    generate_vmap_rule = True  # backward is out-of-place torch ops (is_grads_batched works)

    @staticmethod
    def forward(weight: Tensor, layout: SparseLayout) -> Tensor:
        if layout.index.numel() == 0:
            return weight.new_zeros(layout.num_items, weight.shape[1])
        return F.embedding_bag(layout.index, weight, layout.offsets, mode="sum")

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
        weight, layout = inputs
        ctx.layout = layout
        ctx.rows = weight.shape[0]

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # type: ignore[no-untyped-def]
        grad_weight = None
        if ctx.needs_input_grad[0]:
            scatter = grad_out.is_cuda and not torch.are_deterministic_algorithms_enabled()
            grad_weight = (sparse_weight_grad_scatter if scatter else sparse_weight_grad)(
                ctx.layout, grad_out, ctx.rows)
        return grad_weight, None


def sparse_weight_grad(layout: SparseLayout, grad_out: Tensor, rows: int) -> Tensor:
    """The weight gradient of :func:`sparse_feature_sum` by the transposed CSR: per active
    feature, the sum of its items' output gradients (a gather-sum, deterministic).

    Shape:
        grad_out: (M, out) -> (rows, out).
    """
    grad_weight = grad_out.new_zeros(rows, grad_out.shape[-1])
    if layout.index.numel():
        features, items, offsets = layout.transpose()
        sums = F.embedding_bag(items, grad_out, offsets, mode="sum")  # (U, out)
        if _is_batched(sums):  # under vmap (is_grads_batched): out of place
            grad_weight = grad_weight.index_copy(0, features, sums)
        else:  # in place: no copy of the (rows, out) zeros, a third of a chunk's backward
            grad_weight.index_copy_(0, features, sums)
    return grad_weight


def _is_batched(x: Tensor) -> bool:
    """Whether ``x`` is a tensor batched by ``vmap`` (whose values may not be written into an
    unbatched tensor in place)."""
    return bool(torch._C._functorch.is_batchedtensor(x))


def sparse_weight_grad_scatter(layout: SparseLayout, grad_out: Tensor, rows: int) -> Tensor:
    """The same gradient as :func:`sparse_weight_grad` by a scatter-add of every slot's item
    gradient onto its feature: the GPU path (atomic adds, so the summation order, and the last
    bits, may change between runs; with ``torch.use_deterministic_algorithms(True)`` the
    gather-sum is used). On an H100, for one CoNLL-2002 chunk (19,992 tokens, 286,421 active
    slots, 105,614 features) 0.12 ms against 1.65 ms for the gather-sum over the transpose's
    uneven bags.

    Shape:
        grad_out: (M, out) -> (rows, out).
    """
    grad_weight = grad_out.new_zeros(rows, grad_out.shape[-1])
    if layout.index.numel():  # out of place: the backward must stay vmap-able
        grad_weight = grad_weight.index_add(0, layout.index, grad_out.index_select(0, layout.slot_items()))
    return grad_weight


def sparse_feature_sum(indices: Tensor, weight: Tensor) -> Tensor:
    """Sum of the rows of ``weight`` named by each item's non-zero feature indices.

    Equals ``F.embedding_bag(indices, weight, mode="sum", padding_idx=0)`` per item; its
    forward and weight gradient cost O(#non-zero indices * out): padding slots (index 0) are
    dropped, get no gradient, and row 0 of the gradient is exactly zero. The active slots and
    their transpose (:func:`sparse_layout`) are found once per index tensor, so evaluating the
    same batch again (a full-batch L-BFGS step) costs one gather-sum forward and one backward.

    Shape:
        indices: (*lead, F) long, 0 = padding; weight: (rows, out) -> (*lead, out).
    """
    out = _SparseFeatureSum.apply(weight, sparse_layout(indices))  # (M, out)
    return out.view(*indices.shape[:-1], weight.shape[1])


class Scorer(nn.Module):
    """Base class of the scorers: an ``nn.Module`` whose ``forward`` returns potentials.

    Any ``nn.Module`` that returns potentials in a structure's layout can be used with the
    structures and losses; this base adds :meth:`weight_norm_squared`, and loads the buffers a
    scorer registered as ``None`` at construction and filled from the data at setup (e.g. a
    grammar's masks) from a checkpoint, so that the checkpoint alone rebuilds the model.
    """

    def weight_norm_squared(self, include_bias: bool = True) -> Tensor:
        """``||w||^2`` over this scorer's parameters (see :func:`weight_norm_squared`)."""
        return weight_norm_squared(self, include_bias)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        for name, value in list(self._buffers.items()):
            saved = state_dict.get(prefix + name)
            if value is None and isinstance(saved, Tensor):  # set from the data at setup
                self._buffers[name] = torch.empty_like(saved)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def _shape(x: object) -> object:
    return tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__


def check_lengths(
    lengths: Optional[Tensor],
    batch_size: int,
    max_length: int,
    device: torch.device,
    validate: bool,
) -> Tensor:
    """``lengths`` as a (B,) long tensor in ``[1, N]`` (all N when ``None``).

    Raises:
        TypeError: ``lengths`` is not a tensor.
        ValueError: wrong shape, non-integer dtype, or (with ``validate``) values out of range.
    """
    if lengths is None:
        return torch.full((batch_size,), max_length, dtype=torch.long, device=device)
    if not isinstance(lengths, Tensor):
        raise TypeError(f"lengths must be a torch.Tensor; got {type(lengths).__name__}")
    if lengths.shape != (batch_size,):
        raise ValueError(
            f"lengths must have shape (B,) = ({batch_size},) (B from the inputs); got "
            f"{tuple(lengths.shape)}"
        )
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must have an integer dtype; got {lengths.dtype}")
    if validate and batch_size:
        lo, hi = int(lengths.min()), int(lengths.max())
        if lo < 1 or hi > max_length:
            raise ValueError(
                f"lengths must be in [1, N] = [1, {max_length}] (N from the inputs); got values in "
                f"[{lo}, {hi}]"
            )
    return lengths.to(device=device, dtype=torch.long)


def _one_kind(
    num_features: Optional[int], num_words: Optional[int], input_dim: Optional[int]
) -> tuple[str, int]:
    given = [
        (kind, size)
        for kind, size in (
            ("num_features", num_features),
            ("num_words", num_words),
            ("input_dim", input_dim),
        )
        if size is not None
    ]
    if len(given) != 1:
        names = [k for k, _ in given] or "none"
        raise ValueError(
            f"exactly one of num_features, num_words, input_dim must be given; got {names}"
        )
    kind, size = given[0]
    if (
        not isinstance(size, int)
        or isinstance(size, bool)
        or size < (2 if kind == "num_features" else 1)
    ):
        least = 2 if kind == "num_features" else 1
        raise ValueError(
            f"{kind} must be an int >= {least}"
            + (" (index 0 is padding)" if kind == "num_features" else "")
            + f"; got {size!r}"
        )
    return kind, size


def adopt_input_size(options: dict, sizes: dict, owner: str) -> list[str]:
    """Fill a lazily sized scorer's input size from the data's ``sizes`` (``resolve_sizes``).

    ``options`` holds the scorer's ``num_features`` / ``num_words`` / ``input_dim`` (``None``
    where left out); the data's value of the kind already given (or, with none given, of the
    first kind the data has) is taken, and a given size that differs is an error naming both.

    Returns:
        The input kinds now set (at most one; empty when neither side gives one).
    """
    input_keys = ("num_features", "num_words", "input_dim")
    mine = [k for k in input_keys if options[k] is not None]
    for key in input_keys:
        value = sizes.get(key)
        if value is None or (mine and key not in mine):
            continue
        if options[key] is not None and options[key] != value:
            raise ValueError(
                f"{owner} {key} = {options[key]} does not match the data's {key} = {value} "
                f"(leave {key} out to take it from the data)"
            )
        options[key] = value
        mine = [key]
    return mine


def check_init_std(init_std: float) -> float:
    """``init_std`` if it is a float >= 0, else a ``ValueError``."""
    if isinstance(init_std, bool) or not isinstance(init_std, (int, float)) or not init_std >= 0:
        raise ValueError(f"init_std must be a float >= 0; got {init_std!r}")
    return float(init_std)


def init_(weight: Tensor, init_std: float) -> None:
    """Zeros (``init_std == 0``) or N(0, init_std^2) from the global torch RNG, in place."""
    with torch.no_grad():
        if init_std == 0.0:
            weight.zero_()
        else:
            weight.normal_(0.0, init_std)


class LinearInputs(nn.Module):
    """The linear input map ``W^T phi(x) + b`` of the linear scorers (see the module docstring).

    Exactly one of ``num_features``, ``num_words``, ``input_dim`` is given.

    Args:
        out_features: number of outputs (one weight column per output).
        num_features: size of a sparse feature index space (index 0 = padding).
        num_words: size of a word vocabulary (no padding index).
        input_dim: D of dense inputs.
        bias: add a learned bias (the weight of a constant feature).
        init_std: weights ~ N(0, init_std^2) from the global torch RNG; 0 gives zeros (the
            default: the optimum of a convex objective does not depend on it). The bias and the
            padding row start at 0.
        validate: check index ranges (a device sync); shapes and dtypes are always checked.

    Attributes:
        kind: ``"num_features"``, ``"num_words"`` or ``"input_dim"``.
        size: the value of that argument.
        input_ndim: trailing dims of the input read per item (1 for features and dense, 0 for
            words).
    """

    def __init__(
        self,
        out_features: int,
        num_features: Optional[int] = None,
        num_words: Optional[int] = None,
        input_dim: Optional[int] = None,
        bias: bool = True,
        init_std: float = 0.0,
        validate: bool = True,
    ) -> None:
        super().__init__()
        positive_int(out_features, "out_features")
        self.kind, self.size = _one_kind(num_features, num_words, input_dim)
        self.out_features = out_features
        self.init_std = check_init_std(init_std)
        self.validate = bool(validate)
        self.input_ndim = 0 if self.kind == "num_words" else 1
        #: (rows, out_features): one row per feature / word / input dimension
        self.weight = nn.Parameter(torch.zeros(self.size, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-initialise (see ``init_std``); deterministic given the torch seed."""
        init_(self.weight, self.init_std)
        with torch.no_grad():
            if self.kind == "num_features":
                self.weight[0].zero_()
            if self.bias is not None:
                self.bias.zero_()

    def extra_repr(self) -> str:
        bias = self.bias is not None
        return f"{self.kind}={self.size}, out_features={self.out_features}, bias={bias}"

    def check(self, inputs: Tensor, lead: str, name: str = "inputs") -> None:
        """Validate ``inputs`` whose leading dims are described by ``lead`` (e.g. ``"B, N"``).

        Raises:
            TypeError: ``inputs`` is not a tensor.
            ValueError: wrong number of dims, dtype or size, or indices out of range.
        """
        if not isinstance(inputs, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(inputs).__name__}")
        lead_dims = len([d for d in lead.split(",") if d.strip()])
        if self.kind == "num_features":
            expected = f"({lead}, F) long feature indices"
        elif self.kind == "num_words":
            expected = f"({lead}) long word indices"
        else:
            expected = f"({lead}, D) floating point with D = input_dim = {self.size}"
        if inputs.dim() != lead_dims + self.input_ndim:
            raise ValueError(f"{name} must have shape {expected}; got shape {tuple(inputs.shape)}")
        if self.kind == "input_dim":
            if not inputs.is_floating_point():
                raise ValueError(f"{name} must be {expected}; got dtype {inputs.dtype}")
            if inputs.shape[-1] != self.size:
                raise ValueError(
                    f"{name} must have shape {expected}; got shape {tuple(inputs.shape)}"
                )
            dtype = self.weight.dtype
            if inputs.dtype != dtype:
                raise ValueError(
                    f"{name} must have the dtype of the scorer's parameters ({dtype}); got "
                    f"{inputs.dtype} (convert the inputs or the scorer with .to(dtype))"
                )
            return
        if inputs.dtype != torch.long:
            raise ValueError(f"{name} must be {expected}; got dtype {inputs.dtype}")
        if self.validate and inputs.numel():
            lo, hi = value_range(inputs)
            if lo < 0 or hi >= self.size:  # a size too small for the data: one line on the CLI
                from structssl.data.modules.base import user_error

                what = "feature indices" if self.kind == "num_features" else "word indices"
                raise user_error(
                    f"{name} ({what}) must be in [0, {self.kind}) = [0, {self.size}); got "
                    f"values in [{lo}, {hi}]"
                )

    def forward(self, inputs: Tensor) -> Tensor:
        """``W^T phi(x) + b`` per item (inputs checked by the caller with :meth:`check`).

        Shape:
            inputs: (*lead, F) long (sparse), (*lead,) long (words) or (*lead, D) float (dense)
            -> (*lead, out_features).
        """
        if self.kind == "num_features":
            out = sparse_feature_sum(inputs, self.weight)  # (*lead, out)
        elif self.kind == "num_words":
            out = F.embedding(inputs, self.weight)  # (*lead, out)
        else:
            out = torch.matmul(inputs, self.weight)  # (*lead, out)
        return out if self.bias is None else out + self.bias
