"""Distributed coRLSR: Algorithm 4.1 (thesis Table 4.1) on ``torch.distributed``.

One process ("site") per view. A site holds its own labeled data privately and its view of
the shared unlabeled points; the only numbers that leave a site are its predictions on the
unlabeled data (m numbers per sweep), plus two scalars at start-up (the number of unlabeled
points, to check that all sites agree, and the sum and count of the targets when
``center_targets=True``, for a common target offset). Block coordinate descent::

    yhat_u = 0 at every site
    repeat
        for v = 0 .. V-1 (sequentially):
            site v: alpha_v <- G_v^-1 [L_v^T y_v + 2 lam U_v^T sum_{u != v} yhat_u]
                    yhat_v  <- U_v alpha_v
                    broadcast yhat_v to all sites
    until max |yhat_new - yhat_old| <= tol * max(1, max |yhat_new|)

converges to the global optimum of OP 4.1 / 4.2 (Props. 4.3, 4.4): the same coefficients as
the centralised closed form. Every site holds every prediction vector, so all sites evaluate
the same stopping rule and stop together with no extra message.

Three ways in:

* :func:`distributed_corlsr` inside an initialised process group (``torchrun`` on several
  machines, rank ``v`` = view ``v``; ``gloo`` for CPU tensors, ``nccl`` for CUDA tensors with
  one GPU per process);
* :func:`spawn_local` starts V processes on this machine (a free localhost port, ``gloo``)
  and returns every site's result;
* the command line: ``python -m structssl.regression.distributed --world-size 3`` runs a
  synthetic problem through :func:`spawn_local` and compares with the centralised solve;
  launched by ``torchrun`` (``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` set) each rank takes its
  own view of the same seeded synthetic data instead.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import Tensor

from structssl.regression.problem import (
    Mode,
    _check_dtype,
    _check_kernel,
    _check_mode,
    _check_vector,
    _nonneg_float,
    _positive_int,
    build_problem,
)
from structssl.regression.solvers import ViewUpdate, converged_change
from structssl.regression.kernels import GaussianKernel, Kernel, check_matrix, eta_heuristic

__all__ = ["Site", "SiteModel", "distributed_corlsr", "free_port", "main", "spawn_local"]


@dataclass(frozen=True)
class Site:
    """The data one site (view) holds.

    Attributes:
        labeled_inputs: this view's labeled points (private to the site).
        targets: their labels (private to the site).
        unlabeled_inputs: the shared unlabeled points in this view's features, in the order
            every site uses.

    Shape:
        labeled_inputs: (n_v, d_v); targets: (n_v,); unlabeled_inputs: (m, d_v).
    """

    labeled_inputs: Tensor
    targets: Tensor
    unlabeled_inputs: Tensor


@dataclass(frozen=True)
class SiteModel:
    """What a site knows after :func:`distributed_corlsr`.

    Attributes:
        alpha: its coefficients ``alpha_v`` (p_v,).
        expansion_points: the points of ``f_v`` (p_v, d_v).
        kernel: its fitted kernel; eta: its ``eta_v``; offset: the common target offset.
        predictions: (V, m) every view's last predictions on the unlabeled data (each
            without the offset).
        num_iterations: sweeps run; converged: whether the stopping rule was met.
    """

    alpha: Tensor
    expansion_points: Tensor
    kernel: Kernel
    eta: float
    offset: float
    predictions: Tensor
    num_iterations: int
    converged: bool

    def predict(self, x: Tensor) -> Tensor:
        """This view's prediction ``f_v(x) + offset``. Shape: x (k, d_v) -> (k,)."""
        check_matrix(x, "x")
        x = x.to(device=self.alpha.device, dtype=self.alpha.dtype)
        return self.kernel(x, self.expansion_points) @ self.alpha + self.offset

    def predict_joint(self, x: Tensor, group: Optional[dist.ProcessGroup] = None) -> Tensor:
        """The averaged prediction ``1/V sum_v f_v(x)``: a collective, every site calls it
        with its own view of the same query points.

        Shape:
            x: (k, d_v); returns (k,) on every site.
        """
        local = self.predict(x) - self.offset
        dist.all_reduce(local, op=dist.ReduceOp.SUM, group=group)
        return local / dist.get_world_size(group) + self.offset


def distributed_corlsr(
    site: Site,
    lam: float = 0.1,
    mode: Mode = "exact",
    kernel: Optional[Kernel] = None,
    eta: Optional[float] = None,
    center_targets: bool = True,
    tol: float = 1e-10,
    max_iter: int = 1000,
    dtype: torch.dtype = torch.float64,
    group: Optional[dist.ProcessGroup] = None,
) -> SiteModel:
    """Run Algorithm 4.1 as one site of an initialised process group (rank ``v`` = view ``v``).

    All sites must call it with the same ``lam``, ``mode``, ``center_targets``, ``tol``,
    ``max_iter`` and ``dtype``; ``kernel`` and ``eta`` are the site's own (``None``: the
    thesis's heuristics on the site's labeled points).

    Args:
        site: this site's data.
        lam: the co-regularization weight.
        mode: ``"exact"`` or ``"semiparametric"``.
        kernel: this view's kernel (fitted here on its labeled points).
        eta: this view's ``eta_v``.
        center_targets: subtract the mean of all sites' targets (one all-reduce of a sum and a
            count).
        tol, max_iter: the stopping rule (module docstring).
        dtype: the floating dtype of the computation.
        group: the process group (default: the world).

    Returns:
        this site's :class:`SiteModel`; ``alpha`` equals view ``v``'s block of the
        centralised closed form up to ``tol``.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("distributed_corlsr needs an initialised torch.distributed process group")
    if not isinstance(site, Site):
        raise TypeError(f"site must be a Site; got {type(site).__name__}")
    lam = _nonneg_float(lam, "lam")
    _check_mode(mode)
    kernel = GaussianKernel() if kernel is None else _check_kernel(kernel, "kernel")
    tol = _nonneg_float(tol, "tol")
    max_iter = _positive_int(max_iter, "max_iter")
    dtype = _check_dtype(dtype)
    xl = check_matrix(site.labeled_inputs, "site.labeled_inputs")
    xu = check_matrix(site.unlabeled_inputs, "site.unlabeled_inputs")
    if xl.shape[0] < 1:
        raise ValueError("site.labeled_inputs must have at least one row; got 0")
    if xu.shape[1] != xl.shape[1]:
        raise ValueError(
            f"site.unlabeled_inputs must have {xl.shape[1]} columns like site.labeled_inputs; "
            f"got {xu.shape[1]}"
        )
    device = xl.device
    xl = xl.to(dtype=dtype)
    xu = xu.to(device=device, dtype=dtype)
    y = _check_vector(site.targets, "site.targets", xl.shape[0]).to(device=device, dtype=dtype)

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    m = xu.shape[0]
    sizes = torch.tensor([m, -m], dtype=torch.float64, device=device)
    dist.all_reduce(sizes, op=dist.ReduceOp.MAX, group=group)
    if int(sizes[0]) != m or int(-sizes[1]) != m:
        raise ValueError(
            "all sites must hold the same number of unlabeled points; got between "
            f"{int(-sizes[1])} and {int(sizes[0])} (this site: {m})"
        )
    if center_targets:
        stats = torch.stack([y.sum(), y.new_tensor(float(y.shape[0]))])
        dist.all_reduce(stats, op=dist.ReduceOp.SUM, group=group)
        offset = float(stats[0] / stats[1])
    else:
        offset = 0.0

    fitted = kernel.fit(xl)
    eta_v = eta_heuristic(xl) if eta is None else _nonneg_float(eta, "eta")
    problem, points = build_problem([fitted], [xl], [y - offset], [xu], [eta_v], lam, mode)
    update = ViewUpdate(
        problem.labeled[0], problem.unlabeled[0], problem.regularizer[0], problem.targets[0],
        eta_v, lam, world, mode,
    )
    preds = y.new_zeros(world, m)
    alpha = y.new_zeros(problem.sizes[0])
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        old = preds.clone()
        for v in range(world):
            if v == rank:
                alpha = update(preds.sum(0) - preds[v])
                buffer = update.predict_unlabeled(alpha).contiguous()
            else:
                buffer = y.new_empty(m)
            src = v if group is None else dist.get_global_rank(group, v)
            dist.broadcast(buffer, src=src, group=group)
            preds[v] = buffer
        if converged_change(preds, old, tol):
            converged = True
            break
    return SiteModel(alpha, points[0], fitted, eta_v, offset, preds, it, converged)


# ----------------------------------------------------------------------------- local spawning
def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker(
    rank: int, world: int, port: int, sites: Sequence[Site], kwargs: dict, out_dir: str
) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        model = distributed_corlsr(sites[rank], **kwargs)
        torch.save(
            {
                "alpha": model.alpha, "expansion_points": model.expansion_points,
                "kernel": model.kernel, "eta": model.eta, "offset": model.offset,
                "predictions": model.predictions, "num_iterations": model.num_iterations,
                "converged": model.converged,
            },
            Path(out_dir) / f"site{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


def spawn_local(
    sites: Sequence[Site],
    lam: float = 0.1,
    mode: Mode = "exact",
    kernels: Optional[Sequence[Optional[Kernel]]] = None,
    etas: Optional[Sequence[Optional[float]]] = None,
    center_targets: bool = True,
    tol: float = 1e-10,
    max_iter: int = 1000,
    dtype: torch.dtype = torch.float64,
    start_method: str = "spawn",
) -> list[SiteModel]:
    """Run :func:`distributed_corlsr` in ``len(sites)`` processes on this machine (``gloo``
    over a free localhost port; process ``v`` gets ``sites[v]``) and collect their results.

    Args:
        sites: one :class:`Site` per view (CPU tensors).
        lam, mode, center_targets, tol, max_iter, dtype: as in :func:`distributed_corlsr`.
        kernels, etas: per site, or ``None`` for the defaults.
        start_method: ``"spawn"`` (safe everywhere; each process imports torch anew) or
            ``"fork"`` (POSIX; much faster start, for callers that have not initialised CUDA).

    Returns:
        per site its :class:`SiteModel`.
    """
    if isinstance(sites, Site) or len(sites) < 1:
        raise ValueError("sites must be a non-empty sequence of Site; got none")
    for v, s in enumerate(sites):
        if not isinstance(s, Site):
            raise TypeError(f"sites[{v}] must be a Site; got {type(s).__name__}")
    world = len(sites)
    kernels = [None] * world if kernels is None else list(kernels)
    etas = [None] * world if etas is None else list(etas)
    if len(kernels) != world or len(etas) != world:
        raise ValueError(
            f"kernels and etas must have one entry per site ({world}); got {len(kernels)} and "
            f"{len(etas)}"
        )
    base = {
        "lam": lam, "mode": mode, "center_targets": center_targets, "tol": tol,
        "max_iter": max_iter, "dtype": dtype,
    }
    # validate the shared arguments here, in the parent, so mistakes raise before spawning
    _nonneg_float(lam, "lam")
    _check_mode(mode)
    _nonneg_float(tol, "tol")
    _positive_int(max_iter, "max_iter")
    _check_dtype(dtype)
    if start_method not in ("spawn", "fork", "forkserver"):
        raise ValueError(
            f"start_method must be 'spawn', 'fork' or 'forkserver'; got {start_method!r}"
        )
    with tempfile.TemporaryDirectory(prefix="corlsr-") as out_dir:
        per_site = [dict(base, kernel=kernels[v], eta=etas[v]) for v in range(world)]
        mp.start_processes(
            _site_entry,
            args=(world, free_port(), list(sites), per_site, out_dir),
            nprocs=world,
            join=True,
            start_method=start_method,
        )
        results = [
            torch.load(Path(out_dir) / f"site{v}.pt", weights_only=False) for v in range(world)
        ]
    return [SiteModel(**r) for r in results]


def _site_entry(
    rank: int, world: int, port: int, sites: Sequence[Site], per_site: list, out_dir: str
) -> None:
    _worker(rank, world, port, sites, per_site[rank], out_dir)


# ----------------------------------------------------------------------------- command line
def _synthetic_sites(
    world: int, num_labeled: int, num_unlabeled: int, dim: int, seed: int
) -> list[Site]:
    """Seeded synthetic sites: view ``v`` sees its own ``dim`` columns and its own labeled
    subset of the labeled pool (labeled sets differ between views, as the thesis allows)."""
    from structssl.regression.protocol import make_multiview_regression

    x, y, views = make_multiview_regression(
        2 * num_labeled + num_unlabeled, view_dims=[dim] * world, seed=seed
    )
    g = torch.Generator().manual_seed(seed + 1)
    pool = 2 * num_labeled
    sites = []
    for cols in views:
        idx = torch.randperm(pool, generator=g)[:num_labeled]
        sites.append(Site(x[idx][:, cols], y[idx], x[pool:][:, cols]))
    return sites


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m structssl.regression.distributed``: see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m structssl.regression.distributed",
        description="Distributed coRLSR (thesis Algorithm 4.1) on a seeded synthetic problem.",
    )
    parser.add_argument("--world-size", type=int, default=2, help="number of views / processes")
    parser.add_argument("--mode", choices=["exact", "semiparametric"], default="exact")
    parser.add_argument("--lam", type=float, default=0.1)
    parser.add_argument("--num-labeled", type=int, default=20)
    parser.add_argument("--num-unlabeled", type=int, default=200)
    parser.add_argument("--dim", type=int, default=4, help="features per view")
    parser.add_argument("--tol", type=float, default=1e-10)
    parser.add_argument("--max-iter", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start-method", choices=["spawn", "fork", "forkserver"], default="spawn")
    args = parser.parse_args(argv)
    under_torchrun = all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))
    if under_torchrun:
        dist.init_process_group("gloo", init_method="env://")
        try:
            world, rank = dist.get_world_size(), dist.get_rank()
            sites = _synthetic_sites(
                world, args.num_labeled, args.num_unlabeled, args.dim, args.seed
            )
            model = distributed_corlsr(
                sites[rank], lam=args.lam, mode=args.mode, tol=args.tol, max_iter=args.max_iter
            )
            print(
                f"rank {rank}/{world}: {model.num_iterations} sweeps, converged="
                f"{model.converged}, |alpha|={float(model.alpha.norm()):.6g}"
            )
        finally:
            dist.destroy_process_group()
        return 0

    from structssl.regression.solvers import solve_block, solve_reduced

    world = _positive_int(args.world_size, "--world-size")
    sites = _synthetic_sites(world, args.num_labeled, args.num_unlabeled, args.dim, args.seed)
    models = spawn_local(
        sites, lam=args.lam, mode=args.mode, tol=args.tol, max_iter=args.max_iter,
        start_method=args.start_method,
    )
    problem, _ = build_problem(
        [m.kernel for m in models],
        [s.labeled_inputs for s in sites],
        [s.targets - models[0].offset for s in sites],
        [s.unlabeled_inputs for s in sites],
        [m.eta for m in models],
        args.lam,
        args.mode,
    )
    central = solve_reduced(problem) if args.mode == "exact" else solve_block(problem)
    gap = max(float((m.alpha - a).abs().max()) for m, a in zip(models, central))
    pred_gap = max(
        float((m.predictions[v] - problem.unlabeled[v] @ central[v]).abs().max())
        for v, m in enumerate(models)
    )
    print(
        f"{world} sites, mode={args.mode}: {models[0].num_iterations} sweeps, converged="
        f"{models[0].converged}; max |alpha_dist - alpha_central| = {gap:.3e}, max "
        f"|yhat_dist - yhat_central| = {pred_gap:.3e}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
