"""Co-regularized least squares regression (thesis chapter 4): exact, semi-parametric and
distributed coRLSR, RLSR, and Gaussian kernels with the thesis's heuristics.

The distributed variant lives in :mod:`structssl.regression.distributed` (import it by its
full path; it pulls in ``torch.distributed``).
"""

from __future__ import annotations

from structssl.regression.corlsr import (
    BCDResult,
    CoRLSR,
    CoRLSRProblem,
    RLSR,
    ViewUpdate,
    block_coordinate_descent,
    build_problem,
    make_multiview_regression,
    random_views,
    scaled_rmse,
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
