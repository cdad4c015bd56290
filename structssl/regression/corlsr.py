"""Co-regularized least squares regression, coRLSR (thesis, seed 001, chapter 4).

V views; view ``v`` has its own labeled points ``L_v`` (the labeled sets may differ between
views) and all views share ``m`` unlabeled points. The objective (4.2) over ``f_v`` in the RKHS
of kernel ``k_v`` is::

    Q(f) = sum_v [ sum_{x in L_v} (y(x) - f_v(x))^2 + eta_v ||f_v||^2 ]
           + lam sum_{u,v=1}^V sum_{x in U} (f_u(x) - f_v(x))^2            (ordered pairs)

and the model predicts the average ``f = 1/V sum_v f_v``.

* **Exact (non-parametric) coRLSR, OP 4.1.** ``f_v`` expands over the labeled *and* the
  unlabeled points: ``alpha_v`` has ``n_v + m`` entries, ``L_v`` (n_v, n_v + m) and ``U_v``
  (m, n_v + m) are the labeled and unlabeled rows of the kernel matrix ``K_v`` and the
  regularizer is ``alpha_v^T K_v alpha_v``. O(V^3 (n + m)^3).
* **Semi-parametric coRLSR, OP 4.2.** ``f_v`` expands over the labeled points only: ``L_v``
  is the (n_v, n_v) labeled kernel matrix, ``U_v`` the (m, n_v) unlabeled-labeled one and the
  regularizer is ``alpha_v^T L_v alpha_v``. O(V^3 n^3 + V^2 n^2 m): linear in ``m``.

Both share one form (:class:`CoRLSRProblem`, with ``R_v`` the regularizer matrix):
``G_v = L_v^T L_v + eta_v R_v + 2 lam (V - 1) U_v^T U_v``, the gradient
``2 G_v alpha_v - 2 L_v^T y_v - 4 lam sum_{u != v} U_v^T U_u alpha_u`` and the block system
``A alpha = b`` with ``A_vv = G_v``, ``A_vu = -2 lam U_v^T U_u``, ``b_v = L_v^T y_v``
(Propositions 4.1, 4.2), solved by

* :func:`solve_block`: the thesis's block system as printed;
* :func:`solve_two_view`: the two-view closed form (partitioned inverse);
* :func:`solve_reduced`: exact mode only. Since ``L_v``, ``U_v`` are rows of ``K_v``,
  ``G_v = K_v (D_v K_v + eta_v I)`` and ``U_v^T U_u = K_v S_v^T U_u`` (``D_v`` = diag(1 on
  labeled, ``2 lam (V-1)`` on unlabeled), ``S_v`` selects the unlabeled rows), so
  ``A = blockdiag(K_v) A'`` with the *reduced* system
  ``A'_vv = [L_v; 2 lam (V-1) U_v] + eta_v I``, ``A'_vu = [0; -2 lam U_u]``,
  ``b'_v = [y_v; 0]``. Every solution of ``A' alpha = b'`` solves ``A alpha = b``, and ``A'``
  has the conditioning of ``K + eta I`` where ``A`` has that of ``K^2``: Gaussian kernel
  matrices with the thesis's bandwidth are numerically singular already at a few hundred
  points, so this is the default for exact mode;
* :func:`block_coordinate_descent`: Algorithm 4.1 (Table 4.1) on one machine; the
  multi-process version that exchanges only predictions on the unlabeled data is
  :mod:`structssl.regression.distributed`. Its per-view update is :class:`ViewUpdate`.

RLSR (kernel ridge regression, appendix A) is the special case ``V = 1`` or ``m = 0``
(:class:`RLSR`). The user-facing estimator is :class:`CoRLSR`. Everything is plain torch:
float64 by default, on the device of the inputs.
"""

from __future__ import annotations

import warnings
from typing import Optional, Sequence, Union

import torch
from torch import Tensor

from structssl.regression.kernels import GaussianKernel, Kernel, check_matrix, eta_heuristic
from structssl.regression.problem import (
    EtaArg,
    KernelArg,
    Mode,
    Solver,
    build_problem,
    SOLVERS,
    _check_dtype,
    _check_kernel,
    _check_mode,
    _check_vector,
    _nonneg_float,
    _per_view,
    _positive_int,
)
from structssl.regression.solvers import (
    block_coordinate_descent,
    solve_block,
    solve_reduced,
    solve_two_view,
)

__all__ = ["CoRLSR", "RLSR"]



class CoRLSR:
    """Co-regularized least squares regression (exact OP 4.1 or semi-parametric OP 4.2).

    Args:
        views: per view the column indices of the full attribute matrix it sees (views may
            overlap), or ``None`` to use only :meth:`fit_views` / per-view inputs.
        lam: the co-regularization weight ``lam >= 0`` (the thesis uses 1/10).
        eta: ``eta_v >= 0`` per view (a float for all, a sequence per view), or ``None`` for
            the thesis's heuristic ``(mean ||x_i||)^-1`` over each view's labeled points.
        kernel: a :class:`Kernel` for every view or one per view, fitted per view on its
            labeled points; ``None`` is ``GaussianKernel()`` with the thesis's bandwidth.
        mode: ``"exact"`` (cubic in the unlabeled count) or ``"semiparametric"`` (linear).
        solver: ``"direct"`` (exact: :func:`solve_reduced`; semi: :func:`solve_block`),
            ``"block"`` (:func:`solve_block`, the thesis's system as printed), ``"two_view"``
            (:func:`solve_two_view`; needs two views) or ``"bcd"``
            (:func:`block_coordinate_descent`, Algorithm 4.1 on one machine).
        center_targets: fit ``y - mean(y)`` (mean over all labeled targets) and add the mean
            back in :meth:`predict`; the kernels have no bias term. ``False`` fits ``y``.
        dtype: the floating dtype inputs are converted to (float64 by default).
        tol, max_iter: stopping rule of ``solver="bcd"``.

    Attributes (after fit):
        alphas_: per view ``alpha_v``; expansion_points_: per view the points of ``f_v``;
        kernels_: the fitted kernels; etas_: the ``eta_v`` used; offset_: the target mean
        (0 without centering); n_iter_, converged_: set by ``solver="bcd"``.

    Example::

        model = CoRLSR(views=[[0, 1, 2], [3, 4, 5]], mode="semiparametric")
        model.fit(x_labeled, y, x_unlabeled)
        y_hat = model.predict(x_test)
    """

    def __init__(
        self,
        views: Optional[Sequence[Sequence[int]]] = None,
        lam: float = 0.1,
        eta: EtaArg = None,
        kernel: KernelArg = None,
        mode: Mode = "exact",
        solver: Solver = "direct",
        center_targets: bool = True,
        dtype: torch.dtype = torch.float64,
        tol: float = 1e-10,
        max_iter: int = 1000,
    ) -> None:
        self.views = None if views is None else self._check_views(views)
        self.lam = _nonneg_float(lam, "lam")
        self.eta = eta
        if eta is not None:
            for i, e in enumerate(eta if isinstance(eta, (list, tuple)) else [eta]):
                _nonneg_float(e, f"eta[{i}]" if isinstance(eta, (list, tuple)) else "eta")
        if kernel is not None:
            for i, k in enumerate(kernel if isinstance(kernel, (list, tuple)) else [kernel]):
                _check_kernel(k, f"kernel[{i}]" if isinstance(kernel, (list, tuple)) else "kernel")
        self.kernel = kernel
        self.mode = _check_mode(mode)
        if solver not in SOLVERS:
            raise ValueError(
                f"solver must be one of 'direct', 'block', 'two_view', 'bcd'; got {solver!r}"
            )
        self.solver = solver
        if not isinstance(center_targets, bool):
            raise TypeError(f"center_targets must be a bool; got {type(center_targets).__name__}")
        self.center_targets = center_targets
        self.dtype = _check_dtype(dtype)
        self.tol = _nonneg_float(tol, "tol")
        self.max_iter = _positive_int(max_iter, "max_iter")
        self.alphas_: Optional[list[Tensor]] = None

    def __repr__(self) -> str:
        return (
            f"CoRLSR(views={self.views}, lam={self.lam}, eta={self.eta}, kernel={self.kernel}, "
            f"mode={self.mode!r}, solver={self.solver!r})"
        )

    @staticmethod
    def _check_views(views: object) -> tuple[tuple[int, ...], ...]:
        if isinstance(views, (str, bytes)) or not isinstance(views, Sequence):
            raise TypeError(
                f"views must be a sequence of column-index sequences; got {type(views).__name__}"
            )
        if len(views) < 1:
            raise ValueError("views must contain at least one view; got none")
        out = []
        for v, cols in enumerate(views):
            if isinstance(cols, Tensor):
                cols = cols.tolist()
            if isinstance(cols, (str, bytes)) or not isinstance(cols, Sequence) or len(cols) < 1:
                raise ValueError(f"views[{v}] must be a non-empty sequence of ints; got {cols!r}")
            for c in cols:
                if isinstance(c, bool) or not isinstance(c, int) or c < 0:
                    raise ValueError(f"views[{v}] must hold ints >= 0; got {c!r}")
            out.append(tuple(cols))
        return tuple(out)

    @property
    def num_views(self) -> Optional[int]:
        return None if self.views is None else len(self.views)

    # ------------------------------------------------------------------ inputs
    def _slice(self, x: Tensor, name: str) -> list[Tensor]:
        if self.views is None:
            raise ValueError(
                f"{name} is one attribute matrix but the model has views=None; pass per-view "
                "matrices (fit_views / a list to predict) or set views"
            )
        check_matrix(x, name)
        top = max(max(cols) for cols in self.views)
        if top >= x.shape[1]:
            raise ValueError(
                f"views refer to column {top} but {name} has {x.shape[1]} columns"
            )
        return [x[:, list(cols)] for cols in self.views]

    def fit(self, x_labeled: Tensor, y: Tensor, x_unlabeled: Optional[Tensor] = None) -> CoRLSR:
        """Fit on one labeled set shared by all views and (optionally) unlabeled points.

        Args:
            x_labeled: the labeled points, all attributes (views select columns).
            y: their real-valued targets.
            x_unlabeled: the unlabeled points, or ``None`` for none (then coRLSR is the
                average of per-view RLSRs).

        Shape:
            x_labeled: (n, d); y: (n,); x_unlabeled: (m, d).
        """
        views_l = self._slice(x_labeled, "x_labeled")
        if x_unlabeled is None:
            views_u = [xl[:0] for xl in views_l]
        else:
            check_matrix(x_unlabeled, "x_unlabeled")
            if x_unlabeled.shape[1] != x_labeled.shape[1]:
                raise ValueError(
                    f"x_unlabeled must have {x_labeled.shape[1]} columns like x_labeled; got "
                    f"{x_unlabeled.shape[1]}"
                )
            views_u = self._slice(x_unlabeled, "x_unlabeled")
        return self.fit_views(views_l, y, views_u)

    def fit_views(
        self,
        labeled_inputs: Sequence[Tensor],
        targets: Union[Tensor, Sequence[Tensor]],
        unlabeled_inputs: Optional[Sequence[Tensor]] = None,
    ) -> CoRLSR:
        """Fit on per-view data; the labeled sets may differ between views (thesis 4.2).

        Args:
            labeled_inputs: per view its labeled points in its own features.
            targets: one target vector shared by all views (same labeled points), or per view
                the targets of its labeled points.
            unlabeled_inputs: per view the shared unlabeled points in its own features (the
                same points, in the same order, in every view), or ``None``.

        Shape:
            labeled_inputs[v]: (n_v, d_v); targets: (n,) or targets[v]: (n_v,);
            unlabeled_inputs[v]: (m, d_v).
        """
        if isinstance(labeled_inputs, Tensor) or not isinstance(labeled_inputs, Sequence):
            raise TypeError("labeled_inputs must be a sequence of per-view tensors")
        num = len(labeled_inputs)
        if num < 1:
            raise ValueError("labeled_inputs must hold at least one view; got none")
        if self.views is not None and num != len(self.views):
            raise ValueError(
                f"labeled_inputs must have one matrix per view ({len(self.views)}); got {num}"
            )
        for v, xl in enumerate(labeled_inputs):
            check_matrix(xl, f"labeled_inputs[{v}]")
        device = labeled_inputs[0].device
        xls = [xl.to(device=device, dtype=self.dtype) for xl in labeled_inputs]
        if isinstance(targets, Tensor):
            ys = [targets] * num
        else:
            if len(targets) != num:
                raise ValueError(f"targets must have one vector per view ({num}); got {len(targets)}")
            ys = list(targets)
        ys = [
            _check_vector(y, f"targets[{v}]" if not isinstance(targets, Tensor) else "y",
                          xls[v].shape[0]).to(device=device, dtype=self.dtype)
            for v, y in enumerate(ys)
        ]
        for v, xl in enumerate(xls):
            if xl.shape[0] < 1:
                raise ValueError(f"labeled_inputs[{v}] must have at least one row; got 0")
        if unlabeled_inputs is None:
            xus = [xl[:0] for xl in xls]
        else:
            if len(unlabeled_inputs) != num:
                raise ValueError(
                    f"unlabeled_inputs must have one matrix per view ({num}); got "
                    f"{len(unlabeled_inputs)}"
                )
            xus = []
            for v, xu in enumerate(unlabeled_inputs):
                check_matrix(xu, f"unlabeled_inputs[{v}]")
                if xu.shape[1] != xls[v].shape[1]:
                    raise ValueError(
                        f"unlabeled_inputs[{v}] must have {xls[v].shape[1]} columns like "
                        f"labeled_inputs[{v}]; got {xu.shape[1]}"
                    )
                if xu.shape[0] != unlabeled_inputs[0].shape[0]:
                    raise ValueError(
                        "unlabeled_inputs must hold the same points in every view; got "
                        f"{unlabeled_inputs[0].shape[0]} rows in view 0 and {xu.shape[0]} in "
                        f"view {v}"
                    )
                xus.append(xu.to(device=device, dtype=self.dtype))
        if self.solver == "two_view" and num != 2:
            raise ValueError(f"solver='two_view' needs exactly 2 views; got {num}")

        kernels = [
            _check_kernel(k, "kernel").fit(xl)
            for k, xl in zip(_per_view(self.kernel if self.kernel is not None else GaussianKernel(),
                                       num, "kernel"), xls)
        ]
        etas = [
            eta_heuristic(xl) if e is None else _nonneg_float(e, "eta")
            for e, xl in zip(_per_view(self.eta, num, "eta"), xls)
        ]
        offset = float(torch.cat(ys).mean()) if self.center_targets else 0.0
        problem, points = build_problem(
            kernels, xls, [y - offset for y in ys], xus, etas, self.lam, self.mode
        )
        self.n_iter_: Optional[int] = None
        self.converged_: Optional[bool] = None
        if self.solver == "direct":
            alphas = solve_reduced(problem) if self.mode == "exact" else solve_block(problem)
        elif self.solver == "block":
            alphas = solve_block(problem)
        elif self.solver == "two_view":
            alphas = solve_two_view(problem)
        else:
            result = block_coordinate_descent(problem, self.tol, self.max_iter)
            alphas = result.alphas
            self.n_iter_, self.converged_ = result.num_iterations, result.converged
            if not result.converged:
                warnings.warn(
                    f"CoRLSR(solver='bcd') did not converge in max_iter={self.max_iter} sweeps "
                    f"(tol={self.tol})",
                    RuntimeWarning,
                    stacklevel=2,
                )
        self.alphas_ = alphas
        self.expansion_points_ = points
        self.kernels_ = kernels
        self.etas_ = etas
        self.offset_ = offset
        self.problem_ = problem
        return self

    # ------------------------------------------------------------------ prediction
    def predict_views(self, x: Union[Tensor, Sequence[Tensor]]) -> Tensor:
        """Each view's prediction ``f_v(x) + offset``.

        Args:
            x: the points with all attributes (needs ``views``) or per view in its features.

        Shape:
            x: (k, d) or x[v]: (k, d_v); returns (V, k).
        """
        if self.alphas_ is None:
            raise ValueError("this CoRLSR is not fitted yet; call fit or fit_views first")
        num = len(self.alphas_)
        if isinstance(x, Tensor):
            xs = self._slice(x, "x")
        else:
            xs = list(x)
            if len(xs) != num:
                raise ValueError(f"x must have one matrix per view ({num}); got {len(xs)}")
        outs = []
        for v, xv in enumerate(xs):
            check_matrix(xv, f"x[{v}]")
            pts = self.expansion_points_[v]
            if xv.shape[1] != pts.shape[1]:
                raise ValueError(
                    f"x[{v}] must have {pts.shape[1]} columns (view {v}); got {xv.shape[1]}"
                )
            if v and xv.shape[0] != xs[0].shape[0]:
                raise ValueError(
                    f"x must hold the same points in every view; got {xs[0].shape[0]} and "
                    f"{xv.shape[0]} rows"
                )
            xv = xv.to(device=pts.device, dtype=self.dtype)
            outs.append(self.kernels_[v](xv, pts) @ self.alphas_[v] + self.offset_)
        return torch.stack(outs)

    def predict(self, x: Union[Tensor, Sequence[Tensor]]) -> Tensor:
        """The averaged prediction ``1/V sum_v f_v(x)`` (thesis 4.2.3).

        Shape:
            x: (k, d) or x[v]: (k, d_v); returns (k,).
        """
        return self.predict_views(x).mean(0)

    def objective(self) -> float:
        """The value of OP 4.1 / 4.2 at the fitted coefficients (on centred targets)."""
        if self.alphas_ is None:
            raise ValueError("this CoRLSR is not fitted yet; call fit or fit_views first")
        return float(self.problem_.objective(self.alphas_))


class RLSR:
    """Regularized least squares regression (kernel ridge regression, thesis appendix A): the
    minimiser of ``sum_i (y_i - f(x_i))^2 + eta ||f||^2``, ``alpha = (K + eta I)^-1 y``. The
    coRLSR special case ``V = 1`` (or ``m = 0`` per view).

    Args:
        eta: ``eta >= 0`` or ``None`` for the thesis's heuristic.
        kernel: a :class:`Kernel`; ``None`` is ``GaussianKernel()`` with the thesis's bandwidth.
        center_targets: as in :class:`CoRLSR`.
        dtype: the dtype inputs are converted to (float64 by default).
    """

    def __init__(
        self,
        eta: Optional[float] = None,
        kernel: Optional[Kernel] = None,
        center_targets: bool = True,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        self.eta = None if eta is None else _nonneg_float(eta, "eta")
        self.kernel = GaussianKernel() if kernel is None else _check_kernel(kernel, "kernel")
        if not isinstance(center_targets, bool):
            raise TypeError(f"center_targets must be a bool; got {type(center_targets).__name__}")
        self.center_targets = center_targets
        self.dtype = _check_dtype(dtype)
        self.alpha_: Optional[Tensor] = None

    def __repr__(self) -> str:
        return f"RLSR(eta={self.eta}, kernel={self.kernel})"

    def fit(self, x: Tensor, y: Tensor) -> RLSR:
        """Fit on labeled points.

        Shape:
            x: (n, d); y: (n,).
        """
        check_matrix(x, "x")
        if x.shape[0] < 1:
            raise ValueError("x must have at least one row; got 0")
        _check_vector(y, "y", x.shape[0])
        x = x.to(dtype=self.dtype)
        y = y.to(device=x.device, dtype=self.dtype)
        self.kernel_ = self.kernel.fit(x)
        self.eta_ = eta_heuristic(x) if self.eta is None else self.eta
        self.offset_ = float(y.mean()) if self.center_targets else 0.0
        gram = self.kernel_(x, x)
        gram = 0.5 * (gram + gram.T)
        eye = torch.eye(x.shape[0], dtype=x.dtype, device=x.device)
        self.alpha_ = torch.linalg.solve(gram + self.eta_ * eye, y - self.offset_)
        self.points_ = x
        return self

    def predict(self, x: Tensor) -> Tensor:
        """Predictions ``f(x)``. Shape: x (k, d) -> (k,)."""
        if self.alpha_ is None:
            raise ValueError("this RLSR is not fitted yet; call fit first")
        check_matrix(x, "x")
        if x.shape[1] != self.points_.shape[1]:
            raise ValueError(f"x must have {self.points_.shape[1]} columns; got {x.shape[1]}")
        x = x.to(device=self.points_.device, dtype=self.dtype)
        return self.kernel_(x, self.points_) @ self.alpha_ + self.offset_
