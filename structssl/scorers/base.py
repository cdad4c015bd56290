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
that reads only the *active* feature slots (non-zero indices): its forward is one
``embedding_bag(mode="sum")`` over the active indices with per-item offsets, and its weight
gradient is one ``index_add`` of the output gradient rows into a zero (rows, out) tensor, so
both cost O(#active feature slots * out) plus one pass over the index tensor to find the
active slots; no sort over the vocabulary (``embedding_bag``'s dense backward sorts every slot,
measured 46 % of a CRF evaluation on CoNLL-2002 Spanish). The padding row 0 gets exactly zero
gradient and, never read, stays whatever it is (0 after :meth:`LinearInputs.reset_parameters`).
It equals ``nn.EmbeddingBag(num_features, out, mode="sum", padding_idx=0)``. Time O(#inputs *
out) per call (sparse: O(#active feature slots * out)), memory O(#rows * out) for the weights;
the gradient of ``W`` is dense.

The regulariser: :func:`weight_norm_squared` returns ``||w||^2``, the sum of squares of **every
parameter** of a module (the whole ``w`` of ``<w, Psi(x, y)>``: feature weights, transition,
start, end, rule, root and shared pairwise weights, and biases, which are weights of a constant
feature exactly like the ``bias`` template of the sparse features). ``include_bias=False``
leaves out the parameters whose own name starts with ``bias`` (``LinearInputs.bias``,
``nn.Linear.bias``, the LSTM's ``bias_ih_l0``...). The padding row of a sparse map is zero and
never trained, so it adds nothing.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from structssl.structures.base import positive_int

__all__ = ["Scorer", "LinearInputs", "weight_norm_squared", "check_lengths", "sparse_feature_sum"]


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


class _SparseFeatureSum(torch.autograd.Function):
    """``out[m] = sum_{a in bag m} weight[index[a]]`` over active slots only (see
    :func:`sparse_feature_sum`). Inputs are already compacted: ``index`` (A,) the active
    feature ids, ``offsets`` (M,) the start of each item's bag in ``index``, ``bag`` (A,) the
    item of each active slot."""

    generate_vmap_rule = True  # backward is out-of-place torch ops (is_grads_batched works)

    @staticmethod
    def forward(weight: Tensor, index: Tensor, offsets: Tensor, bag: Tensor) -> Tensor:
        m = offsets.shape[0]
        if index.numel() == 0:
            return weight.new_zeros(m, weight.shape[1])
        return F.embedding_bag(index, weight, offsets, mode="sum")

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
        weight, index, _, bag = inputs
        ctx.save_for_backward(index, bag)
        ctx.rows = weight.shape[0]

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # type: ignore[no-untyped-def]
        index, bag = ctx.saved_tensors
        grad_weight = None
        if ctx.needs_input_grad[0]:
            zero = grad_out.new_zeros(ctx.rows, grad_out.shape[-1])
            grad_weight = zero.index_add(0, index, grad_out.index_select(0, bag))
        return grad_weight, None, None, None


def sparse_feature_sum(indices: Tensor, weight: Tensor) -> Tensor:
    """Sum of the rows of ``weight`` named by each item's non-zero feature indices.

    Equals ``F.embedding_bag(indices, weight, mode="sum", padding_idx=0)``; its forward and
    weight gradient cost O(#non-zero indices * out): padding slots (index 0) are dropped before
    the sum, get no gradient, and row 0 of the gradient is exactly zero.

    Shape:
        indices: (M, F) long, 0 = padding; weight: (rows, out) -> (M, out).
    """
    m, width = indices.shape
    active = indices != 0  # (M, F)
    index = indices[active]  # (A,) row-major: the slots of item 0, then item 1, ...
    counts = active.sum(1)  # (M,)
    offsets = torch.cumsum(counts, 0) - counts  # (M,) start of each bag
    bag = torch.repeat_interleave(torch.arange(m, device=indices.device), counts)  # (A,)
    return _SparseFeatureSum.apply(weight, index, offsets, bag)


class Scorer(nn.Module):
    """Base class of the scorers: an ``nn.Module`` whose ``forward`` returns potentials.

    Any ``nn.Module`` that returns potentials in a structure's layout can be used with the
    structures and losses; this base only adds :meth:`weight_norm_squared`.
    """

    def weight_norm_squared(self, include_bias: bool = True) -> Tensor:
        """``||w||^2`` over this scorer's parameters (see :func:`weight_norm_squared`)."""
        return weight_norm_squared(self, include_bias)


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
            lo, hi = int(inputs.min()), int(inputs.max())
            if lo < 0 or hi >= self.size:
                what = "feature indices" if self.kind == "num_features" else "word indices"
                raise ValueError(
                    f"{name} ({what}) must be in [0, {self.kind}) = [0, {self.size}); got "
                    f"values in [{lo}, {hi}]"
                )

    def forward(self, inputs: Tensor) -> Tensor:
        """``W^T phi(x) + b`` per item (inputs checked by the caller with :meth:`check`).

        Shape:
            inputs: (*lead, F) long (sparse), (*lead,) long (words) or (*lead, D) float (dense)
            -> (*lead, out_features).
        """
        lead = inputs.shape[: inputs.dim() - self.input_ndim]
        if self.kind == "num_features":
            width = inputs.shape[-1]
            if width == 0 or inputs.numel() == 0:  # no feature anywhere (an empty view)
                out = self.weight.new_zeros(*lead, self.out_features)
            else:
                flat = inputs.reshape(-1, width)  # (M, F): one bag per item
                out = sparse_feature_sum(flat, self.weight).view(*lead, self.out_features)
        elif self.kind == "num_words":
            out = F.embedding(inputs, self.weight)  # (*lead, out)
        else:
            out = torch.matmul(inputs, self.weight)  # (*lead, out)
        return out if self.bias is None else out + self.bias
