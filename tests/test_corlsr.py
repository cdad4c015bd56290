"""coRLSR (thesis chapter 4): kernels, the OP 4.1 / 4.2 objectives, every solver against a
direct minimisation by autograd (float64), the RLSR special cases, the estimator API, and the
distributed Algorithm 4.1 in 2-3 local processes against the centralised closed form."""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from structssl.regression import (
    CoRLSR,
    CoRLSRProblem,
    GaussianKernel,
    LinearKernel,
    RLSR,
    bandwidth_heuristic,
    block_coordinate_descent,
    build_problem,
    eta_heuristic,
    make_multiview_regression,
    random_views,
    scaled_rmse,
    solve_block,
    solve_reduced,
    solve_two_view,
)

D = torch.float64


# ----------------------------------------------------------------------------- helpers
def _views_data(sizes, m, dims, seed=0):
    g = torch.Generator().manual_seed(seed)
    xls = [torch.randn(n, d, generator=g, dtype=D) for n, d in zip(sizes, dims)]
    ys = [torch.randn(n, generator=g, dtype=D) for n in sizes]
    xus = [torch.randn(m, d, generator=g, dtype=D) for d in dims]
    return xls, ys, xus


def _problem(sizes, m, mode, lam=0.3, etas=None, seed=0, bandwidth=1.0):
    dims = [2 + (v % 2) for v in range(len(sizes))]
    xls, ys, xus = _views_data(sizes, m, dims, seed)
    etas = etas or [0.5 + 0.25 * v for v in range(len(sizes))]
    kernels = [GaussianKernel(bandwidth)] * len(sizes)
    return build_problem(kernels, xls, ys, xus, etas, lam, mode)[0]


def _direct_minimiser(problem: CoRLSRProblem) -> list[torch.Tensor]:
    """The minimiser of the quadratic Q by autograd: alpha* = -H^-1 grad Q(0)."""
    total = sum(problem.sizes)

    def q(flat):
        return problem.objective(list(torch.split(flat, problem.sizes)))

    zero = torch.zeros(total, dtype=D)
    hess = torch.autograd.functional.hessian(q, zero)
    grad0 = torch.autograd.functional.jacobian(q, zero)
    return problem.split(-torch.linalg.solve(hess, grad0))


def _close(a, b, tol=1e-7):
    for x, y in zip(a, b):
        assert torch.allclose(x, y, atol=tol, rtol=tol), float((x - y).abs().max())


# ----------------------------------------------------------------------------- kernels
def test_gaussian_kernel_matches_formula():
    g = torch.Generator().manual_seed(1)
    x1, x2 = torch.randn(4, 3, generator=g, dtype=D), torch.randn(5, 3, generator=g, dtype=D)
    k = GaussianKernel(0.7)(x1, x2)
    for i in range(4):
        for j in range(5):
            expect = math.exp(-float(((x1[i] - x2[j]) ** 2).sum()) / 0.49)
            assert abs(float(k[i, j]) - expect) < 1e-12
    assert k.dtype == D
    assert torch.allclose(LinearKernel()(x1, x2), x1 @ x2.T)


@given(n=st.integers(2, 7), d=st.integers(1, 4), seed=st.integers(0, 1000))
def test_heuristics_match_brute_force(n, d, seed):
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=D)
    sigma2 = sum(float(((x[i] - x[j]) ** 2).sum()) for i in range(n) for j in range(n)) / n**2
    assert math.isclose(bandwidth_heuristic(x) ** 2, sigma2, rel_tol=1e-9)
    mean_norm = sum(float(x[i].norm()) for i in range(n)) / n
    assert math.isclose(eta_heuristic(x), 1.0 / mean_norm, rel_tol=1e-12)
    fitted = GaussianKernel().fit(x)
    assert math.isclose(fitted.bandwidth, math.sqrt(sigma2), rel_tol=1e-9)
    assert GaussianKernel(2.0).fit(x).bandwidth == 2.0


def test_kernel_errors():
    x = torch.randn(3, 2, dtype=D)
    with pytest.raises(ValueError, match="bandwidth must be a finite float > 0; got 0"):
        GaussianKernel(0.0)
    with pytest.raises(ValueError, match="bandwidth must be a finite float > 0; got nan"):
        GaussianKernel(float("nan"))
    with pytest.raises(TypeError, match="bandwidth must be a float or None; got str"):
        GaussianKernel("1")
    with pytest.raises(ValueError, match="has no bandwidth yet; call kernel.fit"):
        GaussianKernel()(x, x)
    with pytest.raises(ValueError, match="same number of features; got 2 and 3"):
        GaussianKernel(1.0)(x, torch.randn(2, 3, dtype=D))
    with pytest.raises(ValueError, match=r"x1 must be 2-d \(num_points, num_features\); got shape \(3,\)"):
        GaussianKernel(1.0)(x[:, 0], x)
    with pytest.raises(TypeError, match="x2 must have a floating-point dtype; got torch.int64"):
        LinearKernel()(x, torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="x must be a torch.Tensor; got list"):
        bandwidth_heuristic([[1.0]])
    with pytest.raises(ValueError, match="needs at least 2 points; got x with 1"):
        bandwidth_heuristic(x[:1])
    with pytest.raises(ValueError, match="all rows of x are equal"):
        bandwidth_heuristic(torch.ones(4, 2, dtype=D))
    with pytest.raises(ValueError, match="all rows of x are zero"):
        eta_heuristic(torch.zeros(4, 2, dtype=D))
    with pytest.raises(ValueError, match="needs at least 1 point; got x with 0 rows"):
        eta_heuristic(torch.zeros(0, 2, dtype=D))


# ----------------------------------------------------------------------------- the objective
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    m=st.integers(0, 4),
    mode=st.sampled_from(["exact", "semiparametric"]),
    seed=st.integers(0, 100),
)
def test_objective_matches_function_space_brute_force(sizes, m, mode, seed):
    """Q(alpha) of OP 4.1 / 4.2 equals (4.2) evaluated with f_v = sum_i alpha_i k(z_i, .)."""
    dims = [2] * len(sizes)
    xls, ys, xus = _views_data(sizes, m, dims, seed)
    kern = GaussianKernel(1.3)
    lam, etas = 0.7, [0.4 + v for v in range(len(sizes))]
    problem, points = build_problem([kern] * len(sizes), xls, ys, xus, etas, lam, mode)
    g = torch.Generator().manual_seed(seed + 1)
    alphas = [torch.randn(p, generator=g, dtype=D) for p in problem.sizes]

    def f(v, x):
        return sum(float(alphas[v][i]) * math.exp(-float(((points[v][i] - x) ** 2).sum()) / 1.69)
                   for i in range(points[v].shape[0]))

    expect = 0.0
    for v in range(len(sizes)):
        expect += sum((float(ys[v][i]) - f(v, xls[v][i])) ** 2 for i in range(sizes[v]))
        pts = points[v]
        norm2 = sum(float(alphas[v][i] * alphas[v][j])
                    * math.exp(-float(((pts[i] - pts[j]) ** 2).sum()) / 1.69)
                    for i in range(pts.shape[0]) for j in range(pts.shape[0]))
        expect += etas[v] * norm2
    for u in range(len(sizes)):
        for v in range(len(sizes)):
            expect += lam * sum((f(u, xus[u][j]) - f(v, xus[v][j])) ** 2 for j in range(m))
    assert math.isclose(float(problem.objective(alphas)), expect, rel_tol=1e-9, abs_tol=1e-9)


@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    m=st.integers(0, 4),
    mode=st.sampled_from(["exact", "semiparametric"]),
)
def test_thesis_gradient_matches_autograd(sizes, m, mode):
    problem = _problem(sizes, m, mode)
    alphas = [torch.randn(p, dtype=D, requires_grad=True) for p in problem.sizes]
    grads = torch.autograd.grad(problem.objective(alphas), alphas)
    _close(problem.gradient([a.detach() for a in alphas]), grads, 1e-9)


# ----------------------------------------------------------------------------- solvers
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    m=st.integers(0, 6),
    mode=st.sampled_from(["exact", "semiparametric"]),
    lam=st.sampled_from([0.0, 0.1, 1.0]),
    seed=st.integers(0, 100),
)
def test_solvers_match_direct_minimisation(sizes, m, mode, lam, seed):
    problem = _problem(sizes, m, mode, lam=lam, seed=seed)
    expect = _direct_minimiser(problem)
    _close(solve_block(problem), expect)
    if mode == "exact":
        _close(solve_reduced(problem), expect)
    if len(sizes) == 2:
        _close(solve_two_view(problem), expect)
    result = block_coordinate_descent(problem, tol=1e-13, max_iter=5000)
    assert result.converged
    _close(result.alphas, expect, 1e-6)
    for v, a in enumerate(expect):
        assert torch.allclose(result.predictions[v], problem.unlabeled[v] @ a, atol=1e-6)
    # the gradient vanishes at the solution
    for g in problem.gradient(expect):
        assert float(g.abs().max()) < 1e-7


def test_closed_form_matches_generic_solver():
    """scipy's L-BFGS on Q (autograd gradient) reaches the closed form (two views, both modes)."""
    scipy_optimize = pytest.importorskip("scipy.optimize")
    for mode in ("exact", "semiparametric"):
        problem = _problem([4, 3], 5, mode, lam=0.5)

        def fun(flat):
            t = torch.tensor(flat, dtype=D, requires_grad=True)
            q = problem.objective(problem.split(t))
            (g,) = torch.autograd.grad(q, t)
            return float(q.detach()), g.numpy()

        res = scipy_optimize.minimize(
            fun, [0.0] * sum(problem.sizes), jac=True, method="L-BFGS-B",
            options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10000},
        )
        closed = solve_two_view(problem)
        assert res.fun == pytest.approx(float(problem.objective(closed)), rel=1e-8, abs=1e-10)
        _close(problem.split(torch.tensor(res.x, dtype=D)), closed, 1e-4)


def test_reduced_system_factorises_the_block_system():
    problem = _problem([3, 2, 4], 5, "exact", lam=0.4)
    a, b = problem.block_system()
    ar, br = problem.reduced_system()
    k = torch.block_diag(*problem.regularizer)
    assert torch.allclose(a, k @ ar, atol=1e-12)
    assert torch.allclose(b, k @ br, atol=1e-12)
    assert torch.allclose(a, a.T, atol=1e-12)
    assert float(torch.linalg.eigvalsh(a).min()) > 0


def test_problem_and_solver_errors():
    problem = _problem([3, 2, 2], 4, "semiparametric")
    with pytest.raises(ValueError, match="solve_two_view needs exactly 2 views; got 3"):
        solve_two_view(problem)
    with pytest.raises(ValueError, match="reduced_system needs mode='exact'; got mode='semiparametric'"):
        solve_reduced(problem)
    with pytest.raises(ValueError, match=r"labeled\[0\] must have shape \(3, 7\) in exact mode"):
        CoRLSRProblem(problem.labeled, problem.unlabeled, problem.regularizer, problem.targets,
                      problem.etas, 0.1, "exact")
    with pytest.raises(ValueError, match="etas must have one entry per view \\(3\\); got 2"):
        CoRLSRProblem(problem.labeled, problem.unlabeled, problem.regularizer, problem.targets,
                      problem.etas[:2], 0.1, "semiparametric")
    with pytest.raises(ValueError, match="lam must be a finite float >= 0; got -1"):
        CoRLSRProblem(problem.labeled, problem.unlabeled, problem.regularizer, problem.targets,
                      problem.etas, -1.0, "semiparametric")
    with pytest.raises(ValueError, match=r"alphas\[1\] must have shape \(2,\); got \(3,\)"):
        problem.objective([torch.zeros(3, dtype=D)] * 3)
    with pytest.raises(ValueError, match="max_iter must be an int >= 1; got 0"):
        block_coordinate_descent(problem, max_iter=0)


# ----------------------------------------------------------------------------- RLSR special cases
def _data(n=12, m=9, dims=(3, 2), seed=0):
    x, y, views = make_multiview_regression(n + m + 6, view_dims=dims, seed=seed)
    return x[:n], y[:n], x[n:n + m], x[n + m:], views


def test_rlsr_is_kernel_ridge():
    xl, y, _, xt, _ = _data()
    model = RLSR(eta=0.3, kernel=GaussianKernel(1.5)).fit(xl, y)
    k = GaussianKernel(1.5)(xl, xl)
    alpha = torch.linalg.solve(k + 0.3 * torch.eye(xl.shape[0], dtype=D), y - y.mean())
    assert torch.allclose(model.alpha_, alpha, atol=1e-10)
    assert torch.allclose(model.predict(xt), GaussianKernel(1.5)(xt, xl) @ alpha + y.mean())
    # with a linear kernel and no centering: primal ridge regression
    lin = RLSR(eta=0.5, kernel=LinearKernel(), center_targets=False).fit(xl, y)
    w = torch.linalg.solve(xl.T @ xl + 0.5 * torch.eye(xl.shape[1], dtype=D), xl.T @ y)
    assert torch.allclose(lin.predict(xt), xt @ w, atol=1e-10)
    # heuristics are the thesis's
    default = RLSR().fit(xl, y)
    assert default.eta_ == pytest.approx(eta_heuristic(xl))
    assert default.kernel_.bandwidth == pytest.approx(bandwidth_heuristic(xl))


@pytest.mark.parametrize("mode", ["exact", "semiparametric"])
def test_single_view_is_rlsr(mode):
    xl, y, xu, xt, _ = _data()
    cols = list(range(xl.shape[1]))
    co = CoRLSR(views=[cols], lam=0.4, mode=mode).fit(xl, y, xu)
    ref = RLSR().fit(xl, y)
    assert torch.allclose(co.predict(xt), ref.predict(xt), atol=1e-8)
    if mode == "exact":  # the representer theorem forces the unlabeled coefficients to 0
        assert float(co.alphas_[0][xl.shape[0]:].abs().max()) < 1e-10


@pytest.mark.parametrize("mode", ["exact", "semiparametric"])
def test_no_unlabeled_data_averages_view_rlsrs(mode):
    xl, y, xu, xt, views = _data()
    co = CoRLSR(views=views, mode=mode).fit(xl, y)
    refs = [RLSR().fit(xl[:, c], y).predict(xt[:, c]) for c in views]
    assert torch.allclose(co.predict(xt), torch.stack(refs).mean(0), atol=1e-8)
    if mode == "semiparametric":  # lam = 0 decouples the views too
        co0 = CoRLSR(views=views, lam=0.0, mode=mode).fit(xl, y, xu)
        assert torch.allclose(co0.predict(xt), torch.stack(refs).mean(0), atol=1e-8)


# ----------------------------------------------------------------------------- estimator
def test_estimator_solvers_agree_and_api():
    xl, y, xu, xt, views = _data(n=15, m=30)
    xl32, y32, xu32 = xl.float(), y.float(), xu.float()
    before = [t.clone() for t in (xl32, y32, xu32)]
    for mode in ("exact", "semiparametric"):
        preds = {}
        for solver in ("direct", "block", "two_view", "bcd"):
            model = CoRLSR(views=views, mode=mode, solver=solver, tol=1e-13).fit(xl32, y32, xu32)
            assert model.alphas_[0].dtype == D
            out = model.predict(xt)
            assert out.shape == (xt.shape[0],) and out.dtype == D
            assert torch.allclose(out, model.predict_views(xt).mean(0))
            preds[solver] = out
        for solver in ("block", "two_view", "bcd"):
            assert torch.allclose(preds[solver], preds["direct"], atol=1e-6), solver
    for t, b in zip((xl32, y32, xu32), before):
        assert torch.equal(t, b)
    # per-view inputs give the same model; predict accepts per-view matrices
    model = CoRLSR(views=views).fit(xl, y, xu)
    per_view = CoRLSR().fit_views([xl[:, c] for c in views], y, [xu[:, c] for c in views])
    assert torch.allclose(per_view.predict([xt[:, c] for c in views]), model.predict(xt))
    assert model.objective() == pytest.approx(per_view.objective())


def test_estimator_matches_problem_with_different_labeled_sets():
    """fit_views with a different labeled set per view solves OP 4.1 on those sets."""
    sizes, dims = [4, 6, 3], [2, 3, 2]
    xls, ys, xus = _views_data(sizes, 7, dims, seed=3)
    model = CoRLSR(lam=0.2, eta=[0.5, 0.6, 0.7], kernel=GaussianKernel(1.0),
                   center_targets=False).fit_views(xls, ys, xus)
    problem, _ = build_problem([GaussianKernel(1.0)] * 3, xls, ys, xus, [0.5, 0.6, 0.7], 0.2,
                               "exact")
    _close(model.alphas_, _direct_minimiser(problem))


def test_bcd_warns_when_not_converged():
    xl, y, xu, _, views = _data()
    with pytest.warns(RuntimeWarning, match=r"did not converge in max_iter=1 sweeps"):
        model = CoRLSR(views=views, solver="bcd", max_iter=1).fit(xl, y, xu)
    assert model.n_iter_ == 1 and model.converged_ is False


def test_estimator_errors():
    xl, y, xu, xt, views = _data()
    with pytest.raises(ValueError, match="mode must be 'exact' or 'semiparametric'; got 'fast'"):
        CoRLSR(views, mode="fast")
    with pytest.raises(ValueError, match="solver must be one of 'direct', 'block', 'two_view', 'bcd'; got 'qr'"):
        CoRLSR(views, solver="qr")
    with pytest.raises(ValueError, match="lam must be a finite float >= 0; got -0.1"):
        CoRLSR(views, lam=-0.1)
    with pytest.raises(ValueError, match=r"eta\[1\] must be a finite float >= 0; got -1"):
        CoRLSR(views, eta=[1.0, -1.0])
    with pytest.raises(TypeError, match="kernel must be a structssl.regression.kernels.Kernel"):
        CoRLSR(views, kernel="rbf")
    with pytest.raises(TypeError, match="dtype must be a floating-point torch.dtype; got torch.int64"):
        CoRLSR(views, dtype=torch.int64)
    with pytest.raises(TypeError, match="center_targets must be a bool; got int"):
        CoRLSR(views, center_targets=1)
    with pytest.raises(ValueError, match=r"views\[1\] must be a non-empty sequence of ints; got \[\]"):
        CoRLSR([[0], []])
    with pytest.raises(ValueError, match=r"views\[0\] must hold ints >= 0; got -1"):
        CoRLSR([[-1]])
    with pytest.raises(TypeError, match="views must be a sequence of column-index sequences; got int"):
        CoRLSR(3)
    with pytest.raises(ValueError, match="views refer to column 9 but x_labeled has 5 columns"):
        CoRLSR([[0], [9]]).fit(xl, y)
    with pytest.raises(ValueError, match=r"y must have shape \(12,\); got \(11,\)"):
        CoRLSR(views).fit(xl, y[:-1])
    with pytest.raises(ValueError, match="x_unlabeled must have 5 columns like x_labeled; got 4"):
        CoRLSR(views).fit(xl, y, xu[:, :4])
    with pytest.raises(ValueError, match="solver='two_view' needs exactly 2 views; got 3"):
        CoRLSR([[0], [1], [2]], solver="two_view").fit(xl, y, xu)
    with pytest.raises(ValueError, match="not fitted yet; call fit or fit_views first"):
        CoRLSR(views).predict(xt)
    with pytest.raises(ValueError, match="the model has views=None"):
        CoRLSR().fit(xl, y)
    with pytest.raises(ValueError, match=r"unlabeled_inputs must hold the same points in every view; got 9 rows in view 0 and 8 in view 1"):
        CoRLSR().fit_views([xl[:, :2], xl[:, 2:]], y, [xu[:, :2], xu[:-1, 2:]])
    with pytest.raises(ValueError, match=r"labeled_inputs must have one matrix per view \(2\); got 1"):
        CoRLSR(views).fit_views([xl], y)
    model = CoRLSR(views).fit(xl, y, xu)
    with pytest.raises(ValueError, match=r"x\[0\] must have 3 columns \(view 0\); got 2"):
        model.predict([xt[:, :2], xt[:, 3:]])
    with pytest.raises(ValueError, match="x must have one matrix per view \\(2\\); got 1"):
        model.predict([xt])
    with pytest.raises(ValueError, match="not fitted yet; call fit first"):
        RLSR().predict(xt)
    with pytest.raises(ValueError, match="eta must be a finite float >= 0; got -2"):
        RLSR(eta=-2.0)


# ----------------------------------------------------------------------------- helpers
def test_random_views_scaled_rmse_and_synthetic_data():
    g = torch.Generator().manual_seed(0)
    views = random_views(7, 2, g)
    assert sorted(views[0] + views[1]) == list(range(7)) and {len(v) for v in views} == {3, 4}
    with pytest.raises(ValueError, match="num_views must be <= num_features; got num_views=3, num_features=2"):
        random_views(2, 3)
    assert scaled_rmse(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 4.0])) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="all targets are 0"):
        scaled_rmse(torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError, match=r"non-empty 1-d tensors of the same shape; got \(2,\) and \(3,\)"):
        scaled_rmse(torch.zeros(2), torch.zeros(3))
    x, y, cols = make_multiview_regression(20, view_dims=(2, 3), seed=4)
    x2, y2, _ = make_multiview_regression(20, view_dims=(2, 3), seed=4)
    assert x.shape == (20, 5) and y.shape == (20,) and cols == [[0, 1], [2, 3, 4]]
    assert torch.equal(x, x2) and torch.equal(y, y2) and x.dtype == D
    with pytest.raises(ValueError, match=r"view_dims\[1\] must be an int >= 1; got 0"):
        make_multiview_regression(5, view_dims=(2, 0))


# ----------------------------------------------------------------------------- distributed
needs_fork = pytest.mark.skipif(sys.platform == "win32", reason="uses the fork start method")


def _sites(sizes, m, dims, seed=0):
    from structssl.regression.distributed import Site

    xls, ys, xus = _views_data(sizes, m, dims, seed)
    return [Site(xl, y + 2.0, xu) for xl, y, xu in zip(xls, ys, xus)]


@needs_fork
@pytest.mark.parametrize(
    "sizes,mode", [([5, 7, 4], "exact"), ([6, 4], "semiparametric")], ids=["3-sites-exact", "2-sites-semi"]
)
def test_distributed_equals_centralised_closed_form(sizes, mode):
    from structssl.regression.distributed import spawn_local

    dims = [2 + (v % 2) for v in range(len(sizes))]
    sites = _sites(sizes, 12, dims)
    models = spawn_local(sites, lam=0.3, mode=mode, tol=1e-13, start_method="fork")
    assert all(m.converged for m in models)
    assert len({m.num_iterations for m in models}) == 1
    central = CoRLSR(lam=0.3, mode=mode).fit_views(
        [s.labeled_inputs for s in sites], [s.targets for s in sites],
        [s.unlabeled_inputs for s in sites],
    )
    expected_offset = float(torch.cat([s.targets for s in sites]).mean())
    xt = [torch.randn(5, d, dtype=D) for d in dims]
    for v, model in enumerate(models):
        assert model.offset == pytest.approx(expected_offset)
        assert model.eta == pytest.approx(central.etas_[v])
        assert torch.allclose(model.alpha, central.alphas_[v], atol=1e-8)
        assert torch.allclose(model.predict(xt[v]), central.predict_views(xt)[v], atol=1e-8)
        # every site ends with every view's predictions on the unlabeled data
        for u in range(len(sizes)):
            expect = central.problem_.unlabeled[u] @ central.alphas_[u]
            assert torch.allclose(model.predictions[u], expect, atol=1e-8)
    # the closed form as printed in the thesis agrees too
    _close(solve_block(central.problem_), [m.alpha for m in models], 1e-6)


def _joint_worker(rank, world, port, sites, out_dir):
    import torch.distributed as dist

    from structssl.regression.distributed import distributed_corlsr

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        model = distributed_corlsr(sites[rank], lam=0.2, mode="semiparametric", tol=1e-13)
        xt = sites[rank].unlabeled_inputs[:4]
        torch.save(model.predict_joint(xt), Path(out_dir) / f"joint{rank}.pt")
    finally:
        dist.destroy_process_group()


@needs_fork
def test_distributed_joint_prediction(tmp_path):
    import torch.multiprocessing as mp

    from structssl.regression.distributed import free_port

    sites = _sites([4, 5], 6, [2, 3], seed=5)
    mp.start_processes(_joint_worker, args=(2, free_port(), sites, str(tmp_path)), nprocs=2,
                       join=True, start_method="fork")
    central = CoRLSR(lam=0.2, mode="semiparametric").fit_views(
        [s.labeled_inputs for s in sites], [s.targets for s in sites],
        [s.unlabeled_inputs for s in sites],
    )
    expect = central.predict([s.unlabeled_inputs[:4] for s in sites])
    for rank in range(2):
        assert torch.allclose(torch.load(tmp_path / f"joint{rank}.pt"), expect, atol=1e-8)


@needs_fork
def test_distributed_errors():
    from structssl.regression.distributed import Site, distributed_corlsr, spawn_local

    site = _sites([3], 4, [2])[0]
    with pytest.raises(ValueError, match="needs an initialised torch.distributed process group"):
        distributed_corlsr(site)
    with pytest.raises(ValueError, match="mode must be 'exact' or 'semiparametric'; got 'x'"):
        spawn_local([site, site], mode="x")
    with pytest.raises(TypeError, match=r"sites\[1\] must be a Site; got int"):
        spawn_local([site, 3])
    with pytest.raises(ValueError, match="start_method must be 'spawn', 'fork' or 'forkserver'; got 'thread'"):
        spawn_local([site, site], start_method="thread")
    short = Site(site.labeled_inputs, site.targets, site.unlabeled_inputs[:3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match="all sites must hold the same number of unlabeled points"):
            spawn_local([site, short], start_method="fork")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    xl, y, xu, xt, views = _data(n=20, m=40)
    for mode in ("exact", "semiparametric"):
        cpu = CoRLSR(views, mode=mode).fit(xl, y, xu).predict(xt)
        gpu = CoRLSR(views, mode=mode).fit(xl.cuda(), y.cuda(), xu.cuda()).predict(xt.cuda())
        assert gpu.device.type == "cuda"
        assert torch.allclose(gpu.cpu(), cpu, atol=1e-8)


# ----------------------------------------------------------------------------- command line
CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "corlsr"


def test_cli_runs_the_protocol_and_writes_json(tmp_path, capsys):
    import json

    from structssl.regression.cli import inverse_cv, main

    out = tmp_path / "res.json"
    assert main(["--data", "synthetic", "--num-samples", "40", "--folds", "4", "--runs", "2",
                 "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["results"]) == {"rlsr", "view-average", "corlsr-exact", "corlsr-semiparametric"}
    assert all(len(r["runs"]) == 2 and r["scaled_rmse"] > 0 for r in res["results"].values())
    assert "corlsr-exact" in capsys.readouterr().out
    # the same numbers as the library call of the protocol
    x, y, views = make_multiview_regression(40, view_dims=[5, 5], noise=0.5, seed=0)
    direct = inverse_cv(x, y + 3.0, views, ["corlsr-exact"], folds=4, runs=2)
    assert direct["corlsr-exact"] == pytest.approx(res["results"]["corlsr-exact"]["runs"])


def test_cli_config_csv_and_bcd(tmp_path):
    import json

    from structssl.regression.cli import main, parse_args

    # a CSV file with a header row; the YAML supplies defaults, flags override them
    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 4, generator=g, dtype=D)
    y = x[:, 0] - x[:, 3] + 5.0
    csv = tmp_path / "data.csv"
    csv.write_text("a,b,c,d,t\n" + "".join(
        ",".join(f"{v:.6f}" for v in row) + f",{t:.6f}\n"
        for row, t in zip(x.tolist(), y.tolist())))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"data: {csv}\ntarget: t\nscaling: zscored\nfolds: 3\nruns: 1\n"
                   "methods: [corlsr-exact]\nlam: 0.5\n")
    args = parse_args(["--config", str(cfg), "--lam", "0.2"])
    assert args.lam == 0.2 and args.folds == 3 and args.methods == ["corlsr-exact"]
    out_direct, out_bcd = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["--config", str(cfg), "--out", str(out_direct)]) == 0
    assert main(["--config", str(cfg), "--solver", "bcd", "--out", str(out_bcd)]) == 0
    a = json.loads(out_direct.read_text())["results"]["corlsr-exact"]["scaled_rmse"]
    b = json.loads(out_bcd.read_text())["results"]["corlsr-exact"]["scaled_rmse"]
    assert a == pytest.approx(b, rel=1e-6)


def test_cli_errors(tmp_path, capsys):
    from structssl.regression.cli import main

    assert main(["--data", str(tmp_path / "missing.csv"), "--target", "t"]) == 2
    assert "no such data set" in capsys.readouterr().err
    assert main(["--data", "synthetic", "--num-samples", "10", "--folds", "20"]) == 2
    assert "folds must be in" in capsys.readouterr().err
    assert main(["--target", "price"]) == 2  # a CSV column, without --data FILE.csv: not diabetes
    assert "--target 'price' names a column of a CSV file (--data FILE.csv)" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("lambda: 0.1\n")
    with pytest.raises(SystemExit):
        main(["--config", str(bad)])
    assert "Option 'lambda' is not accepted" in capsys.readouterr().err


@pytest.mark.parametrize("config", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_configs_parse(config):
    from structssl.regression.cli import parse_args

    args = parse_args(["--config", str(config)])
    assert args.data in ("diabetes", "synthetic") and args.lam == 0.1


def test_structssl_regression_subcommand(tmp_path, capsys):
    """``structssl regression`` is the same command (``python -m structssl.regression`` too)."""
    import json

    from structssl.cli import main as structssl_main

    out = tmp_path / "res.json"
    assert structssl_main(["regression", "--data", "synthetic", "--num-samples", "30", "--folds",
                           "3", "--methods", "rlsr", "corlsr-exact", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["results"]) == {"rlsr", "corlsr-exact"}
    assert res["options"]["num_samples"] == 30 and res["options"]["out"] == str(out)
    assert structssl_main(["regression", "--data", "synthetic", "--folds", "1"]) == 2
    with pytest.raises(SystemExit):
        structssl_main(["regression", "--solver", "newton"])
    assert "solver" in capsys.readouterr().err


@needs_fork
def test_cli_distributed_matches_direct(tmp_path):
    """``--solver distributed`` (one process per view) gives the closed form's numbers."""
    import json

    from structssl.regression.cli import main

    outs = []
    for solver in ("direct", "distributed"):
        out = tmp_path / f"{solver}.json"
        assert main(["--data", "synthetic", "--num-samples", "24", "--folds", "2",
                     "--methods", "corlsr-semiparametric", "--solver", solver,
                     "--out", str(out)]) == 0
        outs.append(json.loads(out.read_text())["results"]["corlsr-semiparametric"]["scaled_rmse"])
    assert outs[0] == pytest.approx(outs[1], rel=1e-6)
