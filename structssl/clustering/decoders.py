"""The other two clustering decoders of thesis chapter 8: LP relaxation and greedy merging.

- :func:`lp_decode`: correlation clustering relaxed to ``z in [0, 1]`` under the triangle
  inequalities ``z_jk + z_kl - z_jl <= 1`` (section 8.2, "LP decoding"), solved exactly with
  HiGHS through :func:`scipy.optimize.linprog`. 3 C(N, 3) constraints and C(N, 2) variables:
  cubic in the window size (Figure 8.4). The fractional solution is rounded by taking the
  connected components of ``z > threshold``; when the LP optimum is integral this is the exact
  correlation-clustering argmax. One LP per window (a Python loop over the batch: the LP
  solver is not batched).
- :func:`greedy_agglomerative`: Finley and Joachims (2005), as read in thesis-digest 8.4: start
  from singletons and repeatedly merge the two clusters with the largest positive total
  inter-cluster similarity until none is positive. Batched over windows, at most N - 1 merges.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import numpy as np
import scipy.sparse as sp
import torch
from scipy.optimize import linprog
from torch import Tensor

from structssl.clustering.structure import (
    SequentialClustering,
    canonical_labels,
    labels_from_adjacency,
    pair_mask,
)

__all__ = ["LPResult", "lp_decode", "greedy_agglomerative", "triangle_constraints"]


class LPResult(NamedTuple):
    """Output of :func:`lp_decode`.

    Attributes:
        labels: rounded clustering (B, N).
        parts: the LP solution z, strict lower triangle (B, N, N), float64.
        objective: LP optimum ``<potentials, z> (+ offset)`` (B,), an upper bound of the best
            clustering's score.
        integral: whether every ``z`` is within 1e-6 of 0 or 1 (then ``labels`` is exact).
    """

    labels: Tensor
    parts: Tensor
    objective: Tensor
    integral: Tensor


@functools.lru_cache(maxsize=64)
def triangle_constraints(n: int) -> tuple[np.ndarray, np.ndarray, sp.csr_matrix]:
    """Pair indices and the triangle-inequality matrix of an n-message window.

    Returns:
        ``(rows, cols, A)``: pair ``p`` is ``(rows[p], cols[p])`` with ``rows > cols``, in
        row-major order; ``A`` is the (3 C(n, 3), C(n, 2)) sparse matrix of
        ``z_ab + z_bc - z_ac <= 1`` over every triple and every choice of the subtracted edge.
    """
    rows, cols = np.tril_indices(n, -1)
    index = np.full((n, n), -1, dtype=np.int64)
    index[rows, cols] = np.arange(len(rows))
    index = np.maximum(index, index.T)
    if n < 3:
        return rows, cols, sp.csr_matrix((0, len(rows)))
    a, b, c = (x.ravel() for x in np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij"))
    keep = (a < b) & (b < c)
    a, b, c = a[keep], b[keep], c[keep]
    ab, bc, ac = index[a, b], index[b, c], index[a, c]
    t = len(a)
    data, ri, ci = [], [], []
    for k, (p, q, r) in enumerate(((ab, bc, ac), (ab, ac, bc), (ac, bc, ab))):
        row = np.arange(t) + k * t
        ri += [row, row, row]
        ci += [p, q, r]
        data += [np.ones(t), np.ones(t), -np.ones(t)]
    mat = sp.csr_matrix(
        (np.concatenate(data), (np.concatenate(ri), np.concatenate(ci))), shape=(3 * t, len(rows))
    )
    return rows, cols, mat


def lp_decode(
    potentials: Tensor,
    lengths: Optional[Tensor] = None,
    target: Optional[Tensor] = None,
    threshold: float = 0.5,
) -> LPResult:
    """LP-relaxed correlation clustering (optionally loss-augmented with ``Delta_total``).

    Args:
        potentials: similarities (B, N, N), strict lower triangle used.
        lengths: (B,) window sizes (default: N).
        target: if given, maximise ``<potentials, z> + Delta_total(target, z)`` instead (the
            loss-augmented LP of section 8.2).
        threshold: rounding threshold in (0, 1) for the connected components.

    Shape:
        potentials: (B, N, N); lengths, target: (B,), (B, N).

    Raises:
        ValueError: on bad shapes or ``threshold`` outside (0, 1); RuntimeError if HiGHS fails.
    """
    structure = SequentialClustering()
    potentials, lengths = structure.check(potentials, lengths)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold < 1:
        raise ValueError(f"threshold must be a number in (0, 1); got {threshold!r}")
    weights = potentials.detach().to(torch.float64)
    offset = torch.zeros(weights.shape[0], dtype=torch.float64)
    if target is not None:
        cost, off = structure.delta_total_terms(target, lengths, torch.float64)
        weights = weights + cost.to(weights.device)
        offset = off.cpu()
    b, n = weights.shape[0], weights.shape[1]
    w_np = weights.cpu().numpy()
    z = np.zeros((b, n, n))
    objective = np.zeros(b)
    for i, t in enumerate(lengths.tolist()):
        rows, cols, mat = triangle_constraints(t)
        if len(rows) == 0:
            continue
        c = -w_np[i, rows, cols]
        res = linprog(
            c, A_ub=mat if mat.shape[0] else None, b_ub=np.ones(mat.shape[0]) if mat.shape[0] else None,
            bounds=(0.0, 1.0), method="highs",
        )
        if res.status != 0:
            raise RuntimeError(f"HiGHS failed on window {i} (N = {t}): {res.message}")
        z[i, rows, cols] = np.clip(res.x, 0.0, 1.0)
        objective[i] = -res.fun
    parts = torch.from_numpy(z).to(potentials.device)
    integral = ((parts - parts.round()).abs() <= 1e-6).flatten(1).all(1)
    labels = labels_from_adjacency(parts, lengths, threshold)
    return LPResult(labels, parts, torch.from_numpy(objective + offset.numpy()), integral)


def greedy_agglomerative(potentials: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
    """Greedy agglomerative correlation clustering (Finley and Joachims 2005), batched.

    Args:
        potentials: similarities (B, N, N), strict lower triangle used.
        lengths: (B,) window sizes.

    Shape:
        Returns canonical labels (B, N).
    """
    structure = SequentialClustering()
    potentials, lengths = structure.check(potentials, lengths)
    with torch.no_grad():
        b, n = potentials.shape[0], potentials.shape[1]
        pm = pair_mask(lengths, n)
        low = torch.where(pm, potentials.detach(), torch.zeros_like(potentials))
        m = low + low.transpose(1, 2)  # cluster-to-cluster totals; cluster i = its root i
        valid = torch.arange(n, device=m.device).view(1, n) < lengths.view(-1, 1)
        alive = valid.clone()
        root = torch.arange(n, device=m.device).expand(b, n).clone()
        eye = torch.eye(n, dtype=torch.bool, device=m.device)
        batch = torch.arange(b, device=m.device)
        for _ in range(max(n - 1, 0)):
            ok = alive.unsqueeze(2) & alive.unsqueeze(1) & ~eye
            scores = m.masked_fill(~ok, float("-inf")).flatten(1)
            best, idx = scores.max(1)
            merge = best > 0
            if not bool(merge.any()):
                break
            i, j = idx // n, idx % n
            keep, gone = torch.minimum(i, j), torch.maximum(i, j)
            # row/column `gone` folds into `keep` where merging
            add_row = m[batch, gone] * merge.view(-1, 1).to(m.dtype)  # (B, N)
            m[batch, keep] = m[batch, keep] + add_row
            m[batch, :, keep] = m[batch, :, keep] + add_row
            m[batch, keep, keep] = 0.0
            alive[batch, gone] = alive[batch, gone] & ~merge
            m = m.masked_fill(~(alive.unsqueeze(2) & alive.unsqueeze(1)), 0.0)
            moved = (root == gone.view(-1, 1)) & merge.view(-1, 1)
            root = torch.where(moved, keep.view(-1, 1).expand(b, n), root)
        return canonical_labels(root, lengths)
