"""coSVM: two-view structural SVM with slack rescaling (thesis chapter 6, Tables 6.1, 6.2).

Each view ``v`` has its own weights ``w^v`` over its own feature map; both views decode the same
structure. Per view the primal is OP 6.5 with r = 1::

    min 1/2 ||w^v||^2 + C [ sum_{i<=n} xi_i^v + C_u sum_{i>n} min(gamma_i^{peer}, 1) xi_i^v ]
    s.t. <w^v, Psi^v(x_i, t_i) - Psi^v(x_i, ybar)> >= 1 - xi_i^v / Delta(t_i, ybar)

with targets ``t_i = y_i`` on labeled and ``t_i = yhat_i^{peer}`` (the peer view's prediction,
eq. 6.4) on unlabeled examples. The dual (OP 6.6) decomposes into per-example subspaces, and
the optimiser visits the examples in turn (section 6.4):

* labeled example, view v (Table 6.1): up to ``r_max`` times, find the slack-rescaled most
  violated output; if it violates by more than ``epsilon`` beyond the current slack, add it to
  the example's working set, solve the example's dual QP exactly with all other examples fixed
  (box ``sum alpha / Delta <= C``), and drop outputs whose alpha is 0;
* unlabeled example (Table 6.2): both views decode; the confidence of a view is its top-1 score
  minus its best other score (``gamma``); if the views disagree, each view gets the peer's
  prediction as target and its own prediction as the violating output; if they agree but a
  margin is violated, the slack-rescaled runner-up is added; the box is
  ``min(gamma^{peer}, 1) C_u C``. Stops at consensus or after ``r_max`` repetitions.

Documented choices (the thesis leaves them open, thesis-digest X5 and [AMBIG] notes):

* ``gamma`` is the plain score gap to the best *other* output (2-best), not to the
  slack-rescaled runner-up.
* A change of an unlabeled example's target resets that example's working set (the old
  constraints refer to the old target).
* ``reset_on_visit=True`` follows the thesis's "all former outputs of that example are removed"
  when an example is visited again; the default keeps them (warm start, monotone dual).
* The C_u schedule is ``C_u 2^{e - E}`` for epochs ``e < E = cu_warmup`` (the thesis gives none).
* Slack-rescaled separation uses the k-best union of :func:`~structssl.baselines.oracle.separate`.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from structssl.baselines.base import Clock, TwoViewBaseline, check_time_limit
from structssl.baselines.feature_maps import JointFeatureMap
from structssl.baselines.oracle import _f64, _lengths, separate, solve_box_qp
from structssl.structures.base import positive_int

__all__ = ["CoSVM"]


class _Block:
    """The working set of one example in one view: constraint rows, offsets, alphas, target."""

    def __init__(self, dim: int) -> None:
        self.vecs = sp.csr_matrix((0, dim))
        self.offsets = np.zeros(0)
        self.alpha = np.zeros(0)
        self.target: Optional[Tensor] = None

    def contribution(self) -> np.ndarray:
        return np.asarray(self.vecs.T @ self.alpha).ravel()

    def slack(self, w: np.ndarray) -> float:
        if not len(self.offsets):
            return 0.0
        return max(0.0, float(np.max(self.offsets - self.vecs @ w)))


class CoSVM(TwoViewBaseline):
    """Two-view coSVM, slack rescaling, per-example working-set dual QPs (see module docstring).

    Args:
        feature_map: view 1's joint feature map.
        feature_map2: view 2's joint feature map (same structure).
        C: loss weight, > 0.
        cu: unlabeled weight C_u >= 0 (multiplies C).
        epsilon: violation tolerance, > 0.
        epochs: maximum passes over the examples.
        r_max: repetitions per visit of an example.
        k: k-best depth of the slack-rescaled separation.
        cu_warmup: epochs E of the C_u schedule (0: constant C_u).
        reset_on_visit: drop an example's working set when it is visited again.
        solver: QP solver (``"daqp"`` or ``"quadprog"``).
        seed: numpy seed of the visiting order.
        time_limit: stop (after the current example) once this many seconds of
            :class:`~structssl.baselines.base.Clock` time have passed (None: no limit).

    Attributes (after ``fit``): ``w1_``, ``w2_``, ``w_`` (= ``w1_``), ``history_`` per epoch
    ``{"epoch", "time", "added", "disagreements", "change"}``, ``timed_out_``. Training stops
    after an epoch that added no constraint and changed no alpha by more than
    ``1e-3 epsilon``, or at the time limit.
    """

    def __init__(
        self,
        feature_map: JointFeatureMap,
        feature_map2: JointFeatureMap,
        C: float = 1.0,
        cu: float = 1.0,
        epsilon: float = 1e-3,
        epochs: int = 50,
        r_max: int = 10,
        k: int = 4,
        cu_warmup: int = 0,
        reset_on_visit: bool = False,
        solver: str = "daqp",
        seed: int = 0,
        time_limit: Optional[float] = None,
    ) -> None:
        super().__init__(feature_map, feature_map2)
        self.time_limit = check_time_limit(time_limit)
        for value, name in ((C, "C"), (epsilon, "epsilon")):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a number > 0; got {value!r}")
        if isinstance(cu, bool) or not isinstance(cu, (int, float)) or not cu >= 0:
            raise ValueError(f"cu must be a number >= 0; got {cu!r}")
        for value, name in ((epochs, "epochs"), (r_max, "r_max"), (k, "k")):
            positive_int(value, name)
        if not isinstance(cu_warmup, int) or cu_warmup < 0:
            raise ValueError(f"cu_warmup must be an int >= 0; got {cu_warmup!r}")
        self.C, self.cu, self.epsilon = float(C), float(cu), float(epsilon)
        self.epochs, self.r_max, self.k, self.cu_warmup = epochs, r_max, k, cu_warmup
        self.reset_on_visit = bool(reset_on_visit)
        self.solver = solver
        self.seed = int(seed)

    # ------------------------------------------------------------------ pieces
    def _solve(self, v: int, block: _Block, cap: float) -> None:
        """Re-optimise one example's alphas with all other examples fixed; prune zeros."""
        w = self._w[v]
        w_rest = w - block.contribution()
        gram = (block.vecs @ block.vecs.T).toarray()
        lin = block.offsets - block.vecs @ w_rest
        m = len(block.offsets)
        if m == 0:
            return
        alpha = solve_box_qp(gram, lin, np.zeros(m, dtype=np.int64), np.array([cap]), self.solver)
        self._change = max(self._change, float(np.abs(alpha - block.alpha).max()))
        keep = alpha > 1e-12 * max(cap, 1e-300)
        block.vecs, block.offsets, block.alpha = block.vecs[keep], block.offsets[keep], alpha[keep]
        self._w[v] = w_rest + block.contribution()

    def _add(
        self, v: int, block: _Block, x: Tensor, target: Tensor, ybar: Tensor, delta: float,
        ln: Tensor,
    ) -> None:
        fmap = self._maps[v]
        a = delta * (fmap.psi(x, target, ln) - fmap.psi(x, ybar, ln))
        block.vecs = sp.vstack([block.vecs, a], format="csr")
        block.offsets = np.append(block.offsets, delta)
        block.alpha = np.append(block.alpha, 0.0)

    def _reset(self, v: int, block: _Block) -> None:
        self._w[v] = self._w[v] - block.contribution()
        block.vecs = sp.csr_matrix((0, self._maps[v].dim))
        block.offsets, block.alpha = np.zeros(0), np.zeros(0)

    def _labeled_step(self, v: int, block: _Block, x: Tensor, y: Tensor, ln: Tensor) -> int:
        added = 0
        self._solve(v, block, self.C)  # the other examples moved since the last visit
        for _ in range(self.r_max):
            sep = separate(self._maps[v], torch.from_numpy(self._w[v]), x, y, ln, "slack", "hamming", self.k)
            if float(sep.violation[0]) <= block.slack(self._w[v]) + self.epsilon:
                break
            self._add(v, block, x, y, sep.labels, float(sep.delta[0]), ln)
            self._solve(v, block, self.C)
            added += 1
        return added

    def _decode(self, v: int, x: Tensor, ln: Tensor) -> tuple[Tensor, float]:
        """Top-1 output of view v and its confidence gamma (top-1 minus best other score)."""
        st = self._maps[v].structure
        pot = self._maps[v].potentials(torch.from_numpy(self._w[v]), x, ln)
        labels, scores = st.kbest(pot, 2, ln)
        gap = float(scores[0, 0] - scores[0, 1]) if torch.isfinite(scores[0, 1]) else 1.0
        return labels[:, 0], gap

    def _unlabeled_step(self, blocks: tuple[_Block, _Block], xs: list[Tensor], ln: Tensor, cu: float) -> tuple[int, bool]:
        st = self._maps[0].structure
        added, disagreed = 0, False
        for _ in range(self.r_max):
            with torch.no_grad():
                dec = [self._decode(v, xs[v], ln) for v in range(2)]
            yhat = [d[0] for d in dec]
            gamma = [d[1] for d in dec]
            disagree = not bool(st.same(yhat[0].unsqueeze(1), yhat[1].unsqueeze(1)).all())
            disagreed = disagreed or disagree
            seps = [
                separate(self._maps[v], torch.from_numpy(self._w[v]), xs[v], yhat[v], ln, "slack", "hamming", self.k)
                for v in range(2)
            ]
            violated = [
                float(seps[v].violation[0]) > blocks[v].slack(self._w[v]) + self.epsilon for v in range(2)
            ]
            if not disagree and not any(violated):
                break
            for v in range(2):
                peer = 1 - v
                target = yhat[peer]
                block = blocks[v]
                cap = min(gamma[peer], 1.0) * cu * self.C
                if block.target is None or not torch.equal(block.target, target):
                    self._reset(v, block)
                    block.target = target
                else:
                    self._solve(v, block, cap)
                if disagree:
                    neg = yhat[v]
                    delta = float(st.hamming(target, neg, ln)[0])
                else:
                    if not violated[v]:
                        continue
                    neg, delta = seps[v].labels, float(seps[v].delta[0])
                if delta <= 0 or cap <= 0:
                    continue
                self._add(v, block, xs[v], target, neg, delta, ln)
                self._solve(v, block, cap)
                added += 1
        return added, disagreed

    # ------------------------------------------------------------------ fit
    def fit(
        self,
        inputs: Tensor,
        inputs2: Tensor,
        labels: Tensor,
        lengths: Optional[Tensor] = None,
        unlabeled: Optional[Tensor] = None,
        unlabeled2: Optional[Tensor] = None,
        unlabeled_lengths: Optional[Tensor] = None,
    ) -> "CoSVM":
        """Train on labeled examples (two views) and optional unlabeled examples.

        Shape:
            inputs: (B, *in1); inputs2: (B, *in2); labels: (B, *label_shape); lengths: (B,);
            unlabeled: (U, *in1); unlabeled2: (U, *in2); unlabeled_lengths: (U,).
        """
        inputs, labels, lengths = self._prepare(inputs, labels, lengths)
        assert labels is not None
        inputs2 = _f64(inputs2)
        if inputs2.shape[0] != inputs.shape[0]:
            raise ValueError(f"inputs2 must have B = {inputs.shape[0]} rows; got {tuple(inputs2.shape)}")
        m = 0
        if unlabeled is not None:
            if unlabeled2 is None or unlabeled2.shape[0] != unlabeled.shape[0]:
                raise ValueError("unlabeled2 must be given with as many rows as unlabeled")
            unlabeled, unlabeled2 = _f64(unlabeled), _f64(unlabeled2)
            unlabeled_lengths = _lengths(self.feature_map, unlabeled, unlabeled_lengths)
            m = unlabeled.shape[0]
        n = labels.shape[0]
        self._maps = (self.feature_map, self.feature_map2)
        self._w = [np.zeros(self.feature_map.dim), np.zeros(self.feature_map2.dim)]
        blocks = [[_Block(mp.dim) for _ in range(n + m)] for mp in self._maps]
        rng = np.random.default_rng(self.seed)
        clock = Clock()
        self.history_: list[dict[str, float]] = []
        self.timed_out_ = False
        for epoch in range(self.epochs):
            cu = self.cu * (2.0 ** (epoch - self.cu_warmup) if epoch < self.cu_warmup else 1.0)
            added = disagreements = 0
            self._change = 0.0
            for j in rng.permutation(n + m):
                j = int(j)
                if j < n:
                    sl = slice(j, j + 1)
                    for v, x in enumerate((inputs[sl], inputs2[sl])):
                        if self.reset_on_visit:
                            self._reset(v, blocks[v][j])
                        added += self._labeled_step(v, blocks[v][j], x, labels[sl], lengths[sl])
                else:
                    sl = slice(j - n, j - n + 1)
                    assert unlabeled is not None and unlabeled2 is not None
                    assert unlabeled_lengths is not None
                    if self.reset_on_visit:
                        for v in range(2):
                            self._reset(v, blocks[v][j])
                    a, d = self._unlabeled_step(
                        (blocks[0][j], blocks[1][j]), [unlabeled[sl], unlabeled2[sl]],
                        unlabeled_lengths[sl], cu,
                    )
                    added += a
                    disagreements += int(d)
                if self.time_limit is not None and clock.elapsed() > self.time_limit:
                    self.timed_out_ = True
                    break
            self.w1_, self.w2_ = self._w[0].copy(), self._w[1].copy()
            self.w_ = self.w1_
            self.history_.append(
                {"epoch": epoch, "time": clock.elapsed(), "added": added, "disagreements": disagreements,
                 "change": self._change}
            )
            if self.timed_out_:
                break
            if added == 0 and self._change <= self.epsilon * 1e-3 and epoch >= self.cu_warmup:
                break
        return self
