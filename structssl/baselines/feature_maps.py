"""Joint feature maps ``Psi(x, y)`` of linear structured models, for the QP baselines.

A QP-based structural SVM works with explicit vectors: the dual variables weight the
differences ``Psi(x_i, y_i) - Psi(x_i, ybar)`` of the working-set constraints, the QP needs
their Gram matrix, and ``w = sum_c alpha_c a_c``. A :class:`JointFeatureMap` provides

* ``potentials(w, inputs, lengths)``: the structure's potentials of a flat weight vector ``w``
  (torch, differentiable in ``w``), so that ``structure.score(potentials, y) = <w, Psi(x, y)>``;
* ``psi(inputs, labels, lengths)``: ``Psi`` of a batch as a ``scipy.sparse.csr_matrix`` (B, d)
  in float64 (the gradient of ``structure.score(potentials(w), y)`` with respect to ``w``);
* ``dim``: d, and ``structure``.

:class:`ChainFeatureMap` is the closed form for :class:`~structssl.structures.LinearChain`
(dense or sparse-index inputs: unary weights over features incl. an optional bias, a transition
matrix, no start/end weights; thesis seed 001 eq. 3.23). :class:`ScorerFeatureMap` turns any
*linear* scorer (an ``nn.Module`` whose potentials are linear in its parameters, e.g. every
linear scorer of :mod:`structssl.scorers` with ``init_std=0`` and no nonlinearity) into a
feature map for any structure: ``Psi`` rows are per-example gradients computed with
one batched backward pass (``torch.autograd.grad(..., is_grads_batched=True)``). It is generic but materialises dense (B, d) rows, so
it is meant for small d; large sparse problems use a closed form such as
:class:`ChainFeatureMap`.

Time: ``psi`` O(B N (F + C^2)) for chains; ``potentials`` as the scorer.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn import functional as F

from structssl.data.modules.base import user_error
from structssl.scorers.base import Scorer
from structssl.structures.base import Potentials, Structure, as_tuple, positive_int
from structssl.structures.linear_chain import LinearChain

__all__ = ["JointFeatureMap", "ChainFeatureMap", "ScorerFeatureMap", "FeatureMapScorer"]


class JointFeatureMap:
    """Interface of a linear joint feature map (see the module docstring).

    Attributes:
        structure: the :class:`~structssl.structures.base.Structure` decoded over.
        dim: d, the length of ``w``.
    """

    structure: Structure
    dim: int

    def potentials(self, w: Tensor, inputs: Tensor, lengths: Optional[Tensor] = None) -> Potentials:
        """Potentials of weights ``w`` (d,) for a batch of inputs (differentiable in ``w``)."""
        raise NotImplementedError

    def psi(self, inputs: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> sp.csr_matrix:
        """``Psi(x_i, y_i)`` of a batch: a float64 CSR matrix (B, d)."""
        raise NotImplementedError

    def check_weights(self, w: Tensor) -> Tensor:
        """``w`` as a (d,) tensor (raises ``ValueError`` on a wrong shape)."""
        if not isinstance(w, Tensor):
            w = torch.as_tensor(np.asarray(w))
        if w.shape != (self.dim,):
            raise ValueError(f"w must have shape (d,) = ({self.dim},); got {tuple(w.shape)}")
        return w


class ChainFeatureMap(JointFeatureMap):
    """Closed-form joint feature map of a linear chain (emissions, bias, transitions).

    ``<w, Psi(x, y)> = sum_{t<n} (W[:, y_t] . phi(x_t) + b[y_t]) + sum_{1<=t<n} T[y_{t-1}, y_t]``;
    ``w = [W (F x C, row-major), b (C) if bias, T (C x C, [previous, next]) if transitions]``.
    ``phi(x_t)`` is a dense vector (inputs (B, N, D) float, F = D) or the 0/1 indicator of
    sparse feature indices (inputs (B, N, K) long, 0 = padding, F = ``num_features``).

    Args:
        num_labels: C.
        input_dim: D of dense inputs (exactly one of ``input_dim`` and ``num_features``).
        num_features: size of the sparse index space (index 0 is padding, never used).
        bias: a per-label bias (the weight of a constant feature).
        transitions: a transition matrix.
    """

    def __init__(
        self,
        num_labels: int,
        input_dim: Optional[int] = None,
        num_features: Optional[int] = None,
        bias: bool = True,
        transitions: bool = True,
    ) -> None:
        if (input_dim is None) == (num_features is None):
            raise ValueError(
                "exactly one of input_dim and num_features must be given; got "
                f"input_dim={input_dim!r}, num_features={num_features!r}"
            )
        self.num_labels = positive_int(num_labels, "num_labels")
        self.sparse = num_features is not None
        self.num_inputs = positive_int(
            num_features if self.sparse else input_dim,  # type: ignore[arg-type]
            "num_features" if self.sparse else "input_dim",
        )
        self.bias = bool(bias)
        self.transitions = bool(transitions)
        self.structure = LinearChain(self.num_labels)
        c = self.num_labels
        self._emit = self.num_inputs * c
        self._bias_at = self._emit
        self._trans_at = self._emit + (c if self.bias else 0)
        self.dim = self._trans_at + (c * c if self.transitions else 0)

    def __repr__(self) -> str:
        kind = f"num_features={self.num_inputs}" if self.sparse else f"input_dim={self.num_inputs}"
        return f"ChainFeatureMap(num_labels={self.num_labels}, {kind}, dim={self.dim})"

    def _check_inputs(self, inputs: Tensor, lengths: Optional[Tensor]) -> Tensor:
        if not isinstance(inputs, Tensor):
            raise TypeError(f"inputs must be a torch.Tensor; got {type(inputs).__name__}")
        if self.sparse:
            if inputs.dim() != 3 or inputs.is_floating_point():
                raise ValueError(
                    f"inputs must be (B, N, K) long feature indices; got shape "
                    f"{tuple(inputs.shape)}, dtype {inputs.dtype}"
                )
        elif inputs.dim() != 3 or inputs.shape[2] != self.num_inputs or not inputs.is_floating_point():
            raise ValueError(
                f"inputs must be (B, N, D) floating point with D = {self.num_inputs}; got shape "
                f"{tuple(inputs.shape)}, dtype {inputs.dtype}"
            )
        b, n = inputs.shape[:2]
        return self.structure.check_lengths(lengths, b, n, inputs.device)

    def unary(self, w: Tensor, inputs: Tensor, lengths: Tensor) -> Tensor:
        """(B, N, C) emission + bias potentials, zero at padded positions."""
        c = self.num_labels
        weight = w[: self._emit].view(self.num_inputs, c)
        if self.sparse:
            b, n, k = inputs.shape
            flat = inputs.reshape(b * n, k)
            unary = F.embedding_bag(
                flat, weight, mode="sum", per_sample_weights=(flat != 0).to(weight.dtype)
            ).view(b, n, c)
        else:
            unary = inputs.to(weight.dtype) @ weight
        if self.bias:
            unary = unary + w[self._bias_at : self._bias_at + c]
        valid = LinearChain.valid_mask(lengths, inputs.shape[1]).unsqueeze(2)
        return unary * valid.to(unary.dtype)

    def potentials(self, w: Tensor, inputs: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """(B, N, C, C) chain potentials of ``w`` (0 at padded positions).

        Shape:
            w: (d,); inputs: (B, N, D) or (B, N, K); lengths: (B,) -> (B, N, C, C).
        """
        w = self.check_weights(w)
        lengths = self._check_inputs(inputs, lengths)
        c = self.num_labels
        unary = self.unary(w, inputs, lengths)
        trans = w[self._trans_at :].view(c, c) if self.transitions else None
        pot = LinearChain.potentials_from(unary, trans, None, None, lengths)
        valid = LinearChain.valid_mask(lengths, inputs.shape[1]).view(*lengths.shape, -1, 1, 1)
        return pot * valid.to(pot.dtype)

    def psi(self, inputs: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> sp.csr_matrix:
        """``Psi(x_i, y_i)`` rows (B, d), float64 CSR.

        Shape:
            inputs: (B, N, D) or (B, N, K); labels: (B, N); lengths: (B,) -> (B, d).
        """
        lengths = self._check_inputs(inputs, lengths)
        labels = self.structure.check_labels(labels, lengths)
        b, n = labels.shape
        c = self.num_labels
        valid = LinearChain.valid_mask(lengths, n)  # (B, N)
        yv = labels.cpu().numpy()
        vm = valid.cpu().numpy()
        rows_l, cols_l, data_l = [], [], []
        ex = np.broadcast_to(np.arange(b)[:, None], (b, n))
        if self.sparse:
            idx = inputs.cpu().numpy()  # (B, N, K)
            keep = (idx != 0) & vm[:, :, None]
            cols = idx * c + yv[:, :, None]
            rows_l.append(np.broadcast_to(ex[:, :, None], idx.shape)[keep])
            cols_l.append(cols[keep])
            data_l.append(np.ones(int(keep.sum())))
        else:
            x = inputs.detach().to(torch.float64).cpu().numpy() * vm[:, :, None]
            onehot = np.zeros((b, n, c))
            np.put_along_axis(onehot, yv[:, :, None], 1.0, axis=2)
            onehot *= vm[:, :, None]
            emit = np.einsum("bnd,bnc->bdc", x, onehot).reshape(b, -1)
            r, q = np.nonzero(emit)
            rows_l.append(r)
            cols_l.append(q)
            data_l.append(emit[r, q])
        if self.bias:
            rows_l.append(ex[vm])
            cols_l.append(self._bias_at + yv[vm])
            data_l.append(np.ones(int(vm.sum())))
        if self.transitions and n > 1:
            tv = vm[:, 1:]
            rows_l.append(ex[:, 1:][tv])
            cols_l.append(self._trans_at + (yv[:, :-1] * c + yv[:, 1:])[tv])
            data_l.append(np.ones(int(tv.sum())))
        out = sp.coo_matrix(
            (np.concatenate(data_l), (np.concatenate(rows_l), np.concatenate(cols_l))),
            shape=(b, self.dim),
        ).tocsr()
        out.sum_duplicates()
        return out


class ScorerFeatureMap(JointFeatureMap):
    """The joint feature map of any linear scorer, for any structure: ``Psi`` by autograd
    (dense rows, small d), or in closed form for a ``LinearChainScorer`` over sparse or dense
    inputs (sparse rows at any d).

    ``w`` is the concatenation of the scorer's parameters in ``named_parameters()`` order
    (flattened). The scorer must be linear in its parameters (``potentials(a w) = a
    potentials(w)``, no nonlinearity); this is not checked.

    Args:
        scorer: an ``nn.Module`` called as ``scorer(inputs, lengths)`` (or ``scorer(inputs)``
            with ``pass_lengths=False``) returning potentials of ``structure``.
        structure: the structure.
        pass_lengths: whether the scorer takes ``lengths``.
    """

    def __init__(self, scorer: nn.Module, structure: Structure, pass_lengths: bool = True) -> None:
        if not isinstance(scorer, nn.Module):
            raise TypeError(f"scorer must be an nn.Module; got {type(scorer).__name__}")
        if not isinstance(structure, Structure):
            raise TypeError(f"structure must be a Structure; got {type(structure).__name__}")
        self.scorer = scorer
        self.structure = structure
        self.pass_lengths = bool(pass_lengths)
        self._names = [name for name, _ in scorer.named_parameters()]
        self._shapes = [p.shape for _, p in scorer.named_parameters()]
        self._sizes = [p.numel() for _, p in scorer.named_parameters()]
        self.dim = int(sum(self._sizes))
        if self.dim == 0:
            raise ValueError("scorer must have parameters; got none")
        self._closed = self._closed_form(scorer, structure)

    @staticmethod
    def _closed_form(
        scorer: nn.Module, structure: Structure
    ) -> Optional[tuple[ChainFeatureMap, bool]]:
        """For a :class:`~structssl.scorers.LinearChainScorer` over sparse or dense inputs on a
        :class:`LinearChain`: its Psi in closed form, a :class:`ChainFeatureMap` (the same
        layout: emission weights (F, C) row-major, bias, transitions [previous, next]) and
        whether the start and end columns follow; else None (Psi by autograd)."""
        from structssl.scorers import LinearChainScorer

        if type(scorer) is not LinearChainScorer or not isinstance(structure, LinearChain):
            return None
        emission, head = scorer.emission, scorer.head
        if emission is None or head is None or emission.kind == "num_words":
            return None
        names = [name for name, _ in scorer.named_parameters()]
        layout = ["emission.weight", "emission.bias", "head.transition", "head.start", "head.end"]
        if names != [name for name in layout if name in names]:
            return None
        sizes = {emission.kind: emission.size}
        fmap = ChainFeatureMap(scorer.num_labels, bias=emission.bias is not None,
                               transitions=head.transition is not None, **sizes)
        return fmap, head.start is not None

    def _params(self, w: Tensor) -> dict[str, Tensor]:
        return {
            name: chunk.view(shape)
            for name, chunk, shape in zip(self._names, torch.split(w, self._sizes), self._shapes)
        }

    def _call(self, params: dict[str, Tensor], inputs: Tensor, lengths: Optional[Tensor]) -> Potentials:
        args = (inputs, lengths) if self.pass_lengths else (inputs,)
        return functional_call(self.scorer, params, args)

    def potentials(self, w: Tensor, inputs: Tensor, lengths: Optional[Tensor] = None) -> Potentials:
        """The scorer's potentials with its parameters replaced by ``w`` (d,)."""
        return self._call(self._params(self.check_weights(w)), inputs, lengths)

    def check_linear(self, inputs: Tensor, lengths: Optional[Tensor] = None) -> None:
        """Refuse a scorer that is not linear in its parameters (the QP's ``w . Psi`` would be
        another model than the scorer's): ``potentials(a + b) = potentials(a) +
        potentials(b)`` and ``potentials(2 a) = 2 potentials(a)`` for two random weight
        vectors, on ``inputs`` (a few examples suffice; float64).

        Raises:
            ValueError: naming the largest relative difference.
        """
        gen = torch.Generator().manual_seed(0)
        a, b = (torch.randn(self.dim, generator=gen, dtype=torch.float64) for _ in range(2))
        if inputs.is_floating_point():
            inputs = inputs.to(torch.float64)
        with torch.no_grad():
            pa, pb, pab, p2a = (
                torch.cat([t.reshape(-1) for t in as_tuple(self.potentials(w, inputs, lengths))])
                for w in (a, b, a + b, 2 * a)
            )
        worst = 0.0
        for got, want in ((pab, pa + pb), (p2a, 2 * pa)):
            finite = torch.isfinite(got)
            if not torch.equal(finite, torch.isfinite(want)):
                worst = math.inf  # an -inf mask that moves with the weights
                break
            if bool(finite.any()):
                diff, scale = (got - want)[finite].abs().max(), want[finite].abs().max()
                worst = max(worst, float(diff / scale.clamp(min=1e-12)))
        if worst > 1e-6:
            raise user_error(
                f"scorer {type(self.scorer).__name__} must be linear in its parameters (the QP "
                "learns w . Psi(x, y) with Psi its gradient at w = 0); its potentials are not: "
                f"relative difference {worst:.3g} between potentials(a + b) and potentials(a) + "
                "potentials(b), or potentials(2 a) and 2 potentials(a); use a linear scorer "
                "(e.g. structssl.scorers.LinearChainScorer) for the baselines"
            )

    #: elements of the per-example potential gradients one batched backward may hold (float64:
    #: 256 MB); blocks of examples keep ``psi`` under it
    BLOCK_ELEMENTS = 2**25
    #: the most examples of one batched backward: each of its k gradients runs back through the
    #: whole block, so a block costs k^2 examples' backward (100 OCR words, 4,082 weights: one
    #: block of 100 took 4.7 s a call, blocks of 4 0.05 s; CoNLL-2002, 100 sentences, 950,625
    #: weights: 2.0 s -> 1.1 s)
    MAX_BLOCK = 4

    def psi(self, inputs: Tensor, labels: Tensor, lengths: Optional[Tensor] = None) -> sp.csr_matrix:
        """``Psi(x_i, y_i)`` rows (B, d): the gradients of each example's score in ``w``.

        The per-example gradients of a block of k examples come from one batched backward pass
        (``is_grads_batched``), so the scorer's forward may check its inputs (no ``vmap`` runs
        through it); that pass holds k gradients of the block's potentials (k^2 examples'
        worth) and costs as many examples' backward, so k is at most :attr:`MAX_BLOCK` and
        keeps it under :attr:`BLOCK_ELEMENTS` (a whole OCR training fold at once took 22 GB).
        Float64 CSR.
        """
        if self._closed is not None:
            return self._closed_psi(inputs, labels, lengths)
        b = labels.shape[0]
        with torch.no_grad():
            first = as_tuple(self._call(self._params(torch.zeros(self.dim, dtype=torch.float64)),
                                        inputs[:1], None if lengths is None else lengths[:1]))
        per_example = max(sum(int(t.numel()) for t in first), 1)
        k = max(1, min(b, self.MAX_BLOCK, math.isqrt(self.BLOCK_ELEMENTS // per_example)))
        blocks = []
        for start in range(0, b, k):
            part = slice(start, start + k)
            blocks.append(self._psi_block(inputs[part], labels[part],
                                          None if lengths is None else lengths[part]))
        return blocks[0] if len(blocks) == 1 else sp.vstack(blocks, format="csr")

    def _closed_psi(
        self, inputs: Tensor, labels: Tensor, lengths: Optional[Tensor]
    ) -> sp.csr_matrix:
        """Psi of a :class:`~structssl.scorers.LinearChainScorer` in closed form: the chain's
        emission, bias and transition counts, then a one-hot of the first and of the last label
        (start and end weights)."""
        assert self._closed is not None
        fmap, start_end = self._closed
        rows = fmap.psi(inputs, labels, lengths)
        if not start_end:
            return rows
        b, n = labels.shape
        lengths = torch.full((b,), n, dtype=torch.long) if lengths is None else lengths.cpu().long()
        y = labels.cpu().long()
        ends = (lengths - 1).clamp(min=0)
        some = (lengths > 0).numpy()
        c = fmap.num_labels
        first = y[:, 0].numpy() if n else np.zeros(b, dtype=np.int64)
        last = y.gather(1, ends.view(-1, 1)).flatten().numpy() if n else np.zeros(b, dtype=np.int64)
        examples = np.arange(b)[some]
        extra = sp.csr_matrix(
            (np.ones(2 * len(examples)),
             (np.concatenate([examples, examples]), np.concatenate([first[some], c + last[some]]))),
            shape=(b, 2 * c),
        )
        return sp.hstack([rows, extra], format="csr")

    def _psi_block(self, inputs: Tensor, labels: Tensor, lengths: Optional[Tensor]) -> sp.csr_matrix:
        b = labels.shape[0]
        w0 = torch.zeros(self.dim, dtype=torch.float64, requires_grad=True)
        potentials = self._call(self._params(w0), inputs, lengths)
        potentials, lengths = self.structure.check(potentials, lengths)
        scores = self.structure.score(potentials, labels, lengths)  # (B,)
        eye = torch.eye(b, dtype=scores.dtype, device=scores.device)
        with warnings.catch_warnings():
            # torch.func has no batching rule for embedding_bag's backward (a performance note)
            warnings.filterwarnings("ignore", message=".*performance drop.*", category=UserWarning)
            (rows,) = torch.autograd.grad(scores, w0, grad_outputs=eye, is_grads_batched=True)
        assert rows.shape == (b, self.dim)
        return sp.csr_matrix(rows.detach().cpu().numpy())


class FeatureMapScorer(Scorer):
    """A joint feature map's linear model as a scorer: ``w`` (d,) as its one parameter.

    The other direction of :class:`ScorerFeatureMap`: it lets the training procedures
    (:mod:`structssl.training`, e.g. ``SupervisedModule`` with ``NablaSVMLoss``) fit exactly
    the model and weight vector a QP baseline fits with the same ``feature_map``, so the two
    are compared on one parametrisation (``benchmarks/bench_qp_vs_nabla.py``). Its potentials
    are ``feature_map.potentials(weight, inputs, lengths)``, so ``structure.score(scorer(x),
    y) = <weight, Psi(x, y)>`` and ``weight_norm_squared()`` is ``||w||^2`` (the feature map's
    bias weights included, as in the QP's objective).

    Args:
        feature_map: the joint feature map (its ``structure`` is the procedure's).
        init_std: the initial ``w`` ~ N(0, init_std^2) (0: ``w = 0``).
        seed: seed of the initial draw (the same ``w`` for the same seed, whatever the
            global RNG state).
        dtype: dtype of ``w``.
    """

    def __init__(
        self,
        feature_map: JointFeatureMap,
        init_std: float = 0.0,
        seed: int = 0,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        super().__init__()
        if not isinstance(feature_map, JointFeatureMap):
            raise TypeError(f"feature_map must be a JointFeatureMap; got {type(feature_map).__name__}")
        if not (isinstance(init_std, (int, float)) and math.isfinite(init_std) and init_std >= 0):
            raise ValueError(f"init_std must be a finite number >= 0; got {init_std!r}")
        self.feature_map = feature_map
        generator = torch.Generator().manual_seed(int(seed))
        weight = float(init_std) * torch.randn(feature_map.dim, generator=generator, dtype=torch.float64)
        self.weight = nn.Parameter(weight.to(dtype))

    def forward(self, inputs: Tensor, lengths: Optional[Tensor] = None) -> Potentials:
        """The potentials of ``inputs`` under the current ``w``."""
        return self.feature_map.potentials(self.weight, inputs, lengths)
