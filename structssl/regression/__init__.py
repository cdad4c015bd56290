"""Co-regularized least squares regression (thesis chapter 4): exact, semi-parametric and
distributed coRLSR, RLSR, and Gaussian kernels with the thesis's heuristics.

Modules: :mod:`~structssl.regression.corlsr` (the estimators :class:`CoRLSR`, :class:`RLSR`
and the objective), :mod:`~structssl.regression.problem` (OP 4.1 / 4.2 as one
:class:`CoRLSRProblem`), :mod:`~structssl.regression.solvers` (block system, two-view closed
form, reduced system, block coordinate descent), :mod:`~structssl.regression.protocol`
(random views, scaled RMSE, synthetic data), :mod:`~structssl.regression.kernels`.

The distributed variant lives in :mod:`structssl.regression.distributed` (import it by its
full path; it pulls in ``torch.distributed``).
"""

from __future__ import annotations

from structssl.regression.corlsr import RLSR, CoRLSR
from structssl.regression.problem import CoRLSRProblem, build_problem
from structssl.regression.protocol import make_multiview_regression, random_views, scaled_rmse
from structssl.regression.solvers import (
    BCDResult,
    ViewUpdate,
    block_coordinate_descent,
    solve_block,
    solve_reduced,
    solve_two_view,
)
from structssl.regression.kernels import (
    GaussianKernel,
    Kernel,
    LinearKernel,
    bandwidth_heuristic,
    eta_heuristic,
    squared_distances,
)

__all__ = [
    "BCDResult",
    "CoRLSR",
    "CoRLSRProblem",
    "GaussianKernel",
    "Kernel",
    "LinearKernel",
    "RLSR",
    "ViewUpdate",
    "bandwidth_heuristic",
    "block_coordinate_descent",
    "build_problem",
    "eta_heuristic",
    "make_multiview_regression",
    "random_views",
    "scaled_rmse",
    "solve_block",
    "solve_reduced",
    "solve_two_view",
    "squared_distances",
]
