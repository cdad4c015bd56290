"""QP and perceptron baselines: feature maps, cutting planes vs the enumerated QP, perceptrons."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
import torch

pytest.importorskip("qpsolvers")

from structssl.baselines import (  # noqa: E402
    ChainFeatureMap,
    CuttingPlaneSSVM,
    FeatureMapScorer,
    ScorerFeatureMap,
    hinge_objective,
    solve_box_qp,
)
from structssl.baselines.cosvm import CoSVM  # noqa: E402
from structssl.baselines.oracle import solve_blocks_qp  # noqa: E402
from structssl.baselines.perceptron import CoPerceptron, StructuredPerceptron  # noqa: E402
from structssl.baselines.synthetic import hmm_chain  # noqa: E402
from structssl.losses import StructuredHingeLoss  # noqa: E402
from structssl.scorers import LinearChainScorer  # noqa: E402
from structssl.structures import LinearChain  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    # the learners run many tiny per-example ops; intra-op threads only add overhead there (and
    # spin badly on a loaded machine)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_chain(seed: int = 0, b: int = 4, n: int = 3, c: int = 2, d: int = 3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, c, (b, n), generator=g)
    lengths = torch.tensor([n, n - 1, 1, n][:b])
    y = torch.where(torch.arange(n) < lengths.unsqueeze(1), y, 0)
    return x, y, lengths


def enumerate_constraints(fmap, x, y, lengths, rescaling):
    """Every constraint of the n-slack QP: vectors (m, d), offsets (m,), groups (m,)."""
    c = fmap.num_labels
    psi_gold = fmap.psi(x, y, lengths).toarray()
    vecs, offs, groups = [], [], []
    for i in range(x.shape[0]):
        ni = int(lengths[i])
        for ys in itertools.product(range(c), repeat=ni):
            yb = torch.zeros_like(y[i : i + 1])
            yb[0, :ni] = torch.tensor(ys)
            delta = float((yb[0, :ni] != y[i, :ni]).sum())
            if delta == 0:
                continue
            a = psi_gold[i] - fmap.psi(x[i : i + 1], yb, lengths[i : i + 1]).toarray()[0]
            scale = delta if rescaling == "slack" else 1.0
            vecs.append(scale * a)
            offs.append(delta)
            groups.append(i)
    return np.array(vecs), np.array(offs), np.array(groups)


def enumerated_optimum(fmap, x, y, lengths, C, rescaling):
    vecs, offs, groups = enumerate_constraints(fmap, x, y, lengths, rescaling)
    gram = vecs @ vecs.T
    alpha = solve_box_qp(gram, offs, groups, np.full(x.shape[0], C))
    w = vecs.T @ alpha
    dual = float(offs @ alpha - 0.5 * alpha @ gram @ alpha)
    slack = np.zeros(x.shape[0])
    np.maximum.at(slack, groups, offs - vecs @ w)
    primal = 0.5 * float(w @ w) + C * float(slack.sum())
    return w, primal, dual


# ---------------------------------------------------------------------------- feature maps
@pytest.mark.parametrize("sparse", [False, True])
def test_chain_feature_map_score_is_linear(sparse: bool) -> None:
    x, y, lengths = tiny_chain(1, b=4, n=5, c=3, d=4)
    if sparse:
        x = torch.randint(0, 7, (4, 5, 3))
        fmap = ChainFeatureMap(3, num_features=7)
    else:
        fmap = ChainFeatureMap(3, input_dim=4)
    y = torch.randint(0, 3, (4, 5)) * (torch.arange(5) < lengths.unsqueeze(1))
    w = torch.randn(fmap.dim, dtype=torch.float64)
    pot = fmap.potentials(w, x, lengths)
    score = LinearChain(3).score(pot, y, lengths)
    psi = fmap.psi(x, y, lengths)
    assert sp.issparse(psi) and psi.shape == (4, fmap.dim)
    torch.testing.assert_close(torch.from_numpy(psi @ w.numpy()), score)


def test_scorer_feature_map_matches_autograd() -> None:
    x, y, lengths = tiny_chain(2, b=3, n=4, c=3, d=2)
    y = torch.randint(0, 3, (3, 4)) * (torch.arange(4) < lengths.unsqueeze(1))
    scorer = LinearChainScorer(num_labels=3, input_dim=2, start_end=True, validate=False).double()
    fmap = ScorerFeatureMap(scorer, LinearChain(3))
    w = torch.randn(fmap.dim, dtype=torch.float64)
    score = LinearChain(3).score(fmap.potentials(w, x, lengths), y, lengths)
    psi = fmap.psi(x, y, lengths)
    torch.testing.assert_close(torch.from_numpy(psi @ w.numpy()), score)


def test_scorer_feature_map_rows_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """psi in blocks of examples (bounded memory: one batched backward over a whole OCR fold
    took 22 GB) equals psi in one block, whatever the block size."""
    x, y, lengths = tiny_chain(4, b=4, n=5, c=3, d=2)
    x, y = torch.cat([x, x.flip(0)]), torch.randint(0, 3, (8, 5))
    lengths = torch.cat([lengths, torch.tensor([2, 5, 3, 4])])
    y = y * (torch.arange(5) < lengths.unsqueeze(1))
    scorer = LinearChainScorer(num_labels=3, input_dim=2, start_end=True, validate=False).double()
    fmap = ScorerFeatureMap(scorer, LinearChain(3))
    monkeypatch.setattr(ScorerFeatureMap, "MAX_BLOCK", 8)
    whole = fmap.psi(x, y, lengths).toarray()  # one block of 8
    per_example = 5 * 3 * 3 + 2 * 3 + 2 * 3  # the (1, N, C, C) edges, start and end of one example
    for k in (1, 3, 5):  # blocks of k examples: k^2 * per_example elements
        monkeypatch.setattr(ScorerFeatureMap, "BLOCK_ELEMENTS", k * k * per_example)
        np.testing.assert_allclose(fmap.psi(x, y, lengths).toarray(), whole, rtol=0, atol=1e-12)
    monkeypatch.undo()  # the default: blocks of at most MAX_BLOCK (4) examples
    np.testing.assert_allclose(fmap.psi(x, y, lengths).toarray(), whole, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("flags", list(itertools.product([False, True], repeat=3)),
                         ids=lambda f: "bias{}-trans{}-startend{}".format(*map(int, f)))
def test_scorer_feature_map_closed_form_equals_autograd(kind: str, flags: tuple) -> None:
    """A LinearChainScorer's Psi in closed form (sparse rows at any d: CoNLL's 950,625 weights
    took 1.1 s a call by autograd's dense rows) equals the autograd rows, for every layout of
    its parameters, dense and sparse inputs, ragged lengths (1 included) and no lengths."""
    bias, transitions, start_end = flags
    gen = torch.Generator().manual_seed(3)
    b, n, c = 6, 5, 3
    lengths = torch.tensor([5, 1, 3, 4, 2, 5])
    if kind == "dense":
        x = torch.randn(b, n, 4, generator=gen, dtype=torch.float64)
        sizes = dict(input_dim=4)
    else:
        x = torch.randint(0, 7, (b, n, 3), generator=gen)  # 0 = padding
        sizes = dict(num_features=7)
    y = torch.randint(0, c, (b, n), generator=gen) * (torch.arange(n) < lengths.unsqueeze(1))
    scorer = LinearChainScorer(num_labels=c, bias=bias, transitions=transitions,
                               start_end=start_end, **sizes).double()
    fmap = ScorerFeatureMap(scorer, LinearChain(c))
    assert fmap._closed is not None
    for given in (lengths, None):
        closed = fmap.psi(x, y, given).toarray()
        generic = ScorerFeatureMap(scorer, LinearChain(c))
        generic._closed = None  # Psi by autograd
        np.testing.assert_allclose(closed, generic.psi(x, y, given).toarray(), rtol=0, atol=1e-12)
        w = torch.randn(fmap.dim, generator=gen, dtype=torch.float64)
        score = LinearChain(c).score(fmap.potentials(w, x, given), y, given)
        np.testing.assert_allclose(closed @ w.numpy(), score.numpy(), rtol=1e-12, atol=1e-12)


def test_hinge_objective_matches_structured_hinge_loss() -> None:
    x, y, lengths = tiny_chain(3, b=4, n=4, c=3, d=3)
    y = torch.randint(0, 3, (4, 4)) * (torch.arange(4) < lengths.unsqueeze(1))
    fmap = ChainFeatureMap(3, input_dim=3)
    w = torch.randn(fmap.dim, dtype=torch.float64)
    pot = fmap.potentials(w, x, lengths)
    for rescaling in ("margin", "slack"):
        loss = StructuredHingeLoss(rescaling=rescaling, k=81, reduction="sum")
        expected = 0.5 * float(w @ w) + 0.3 * float(loss(LinearChain(3), pot, y, lengths))
        got = hinge_objective(fmap, w, x, y, lengths, C=0.3, rescaling=rescaling, k=81)
        assert got == pytest.approx(expected, rel=1e-9)


def test_feature_map_scorer_gives_a_procedure_the_qp_objective() -> None:
    """FeatureMapScorer: <w, Psi(x, y)> as potentials, and a procedure's objective on it is the
    QP's primal P(w) / n (what bench_qp_vs_nabla compares the methods on)."""
    from structssl.training import SupervisedModule

    x, y, lengths = tiny_chain(5, b=4, n=4, c=3, d=3)
    y = torch.randint(0, 3, (4, 4), generator=torch.Generator().manual_seed(1))
    y = y * (torch.arange(4) < lengths.unsqueeze(1))
    fmap = ChainFeatureMap(3, input_dim=3)
    scorer = FeatureMapScorer(fmap, init_std=0.5, seed=3)
    assert scorer.weight.dtype == torch.float64 and scorer.weight.shape == (fmap.dim,)
    assert torch.equal(scorer.weight, FeatureMapScorer(fmap, init_std=0.5, seed=3).weight)
    assert not torch.equal(scorer.weight, FeatureMapScorer(fmap, init_std=0.5, seed=4).weight)
    w = scorer.weight.detach()
    scores = LinearChain(3).score(scorer(x, lengths), y, lengths)
    expected = torch.from_numpy(fmap.psi(x, y, lengths) @ w.numpy())
    torch.testing.assert_close(scores.detach(), expected)
    assert float(scorer.weight_norm_squared().detach()) == pytest.approx(float(w @ w))
    module = SupervisedModule(structure=fmap.structure, scorer=scorer,
                              loss=StructuredHingeLoss(k=81), C=0.3, num_labeled=4)
    terms = module.objective_terms({"inputs": x, "labels": y, "lengths": lengths})
    primal = hinge_objective(fmap, w, x, y, lengths, C=0.3, k=81)
    assert 4 * float(terms.objective.detach()) == pytest.approx(primal, rel=1e-9)
    assert not FeatureMapScorer(fmap).weight.detach().any()  # init_std 0: w = 0
    with pytest.raises(TypeError, match="feature_map must be a JointFeatureMap; got LinearChain"):
        FeatureMapScorer(LinearChain(3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="init_std must be a finite number >= 0; got -1"):
        FeatureMapScorer(fmap, init_std=-1)


# ---------------------------------------------------------------------------- cutting planes
@pytest.mark.parametrize("formulation", ["one_slack", "n_slack"])
@pytest.mark.parametrize("rescaling", ["margin", "slack"])
def test_cutting_plane_equals_enumerated_qp(formulation: str, rescaling: str) -> None:
    x, y, lengths = tiny_chain(4, b=4, n=3, c=2, d=3)
    fmap = ChainFeatureMap(2, input_dim=3)
    C, eps = 2.0, 1e-6
    w_ref, p_ref, d_ref = enumerated_optimum(fmap, x, y, lengths, C, rescaling)
    assert p_ref == pytest.approx(d_ref, abs=1e-6)
    model = CuttingPlaneSSVM(
        fmap, C=C, formulation=formulation, rescaling=rescaling, epsilon=eps, k=8
    ).fit(x, y, lengths)
    assert model.converged_
    last = model.history_[-1]
    n = x.shape[0]
    assert last["primal"] - model.dual_ <= C * n * eps + 1e-7
    assert model.objective(x, y, lengths) == pytest.approx(p_ref, abs=C * n * eps + 1e-6)
    assert model.dual_ == pytest.approx(d_ref, abs=C * n * eps + 1e-6)
    np.testing.assert_allclose(model.w_, w_ref, atol=1e-3)
    # the dual never exceeds the optimum, the primal never goes below it
    for h in model.history_:
        assert h["dual"] <= p_ref + 1e-7
        assert h["primal"] >= p_ref - 1e-7


@pytest.mark.parametrize("rescaling", ["margin", "slack"])
def test_enumerated_primal_qp_solved_directly_matches_cutting_planes(rescaling: str) -> None:
    # the n-slack primal with every constraint enumerated, min_{w, xi} 1/2||w||^2 + C sum xi
    # s.t. <w, a_c> + xi_i >= b_c, xi >= 0, handed to qpsolvers as it is (no baseline code)
    from qpsolvers import solve_qp

    x, y, lengths = tiny_chain(7, b=4, n=3, c=2, d=3)
    fmap = ChainFeatureMap(2, input_dim=3)
    C, eps, n = 0.5, 1e-6, x.shape[0]
    vecs, offs, groups = enumerate_constraints(fmap, x, y, lengths, rescaling)
    d = vecs.shape[1]
    P = np.diag(np.r_[np.ones(d), np.full(n, 1e-12)])
    q = np.r_[np.zeros(d), np.full(n, C)]
    slack_rows = np.zeros((len(offs), n))
    slack_rows[np.arange(len(offs)), groups] = 1.0
    G = np.vstack([-np.hstack([vecs, slack_rows]), np.hstack([np.zeros((n, d)), -np.eye(n)])])
    h = np.r_[-offs, np.zeros(n)]
    z = solve_qp(P, q, G, h, solver="daqp")
    assert z is not None
    w_direct = z[:d]
    p_direct = 0.5 * float(w_direct @ w_direct) + C * float(z[d:].sum())
    _, p_dual, d_dual = enumerated_optimum(fmap, x, y, lengths, C, rescaling)
    assert p_direct == pytest.approx(p_dual, abs=1e-6)
    assert p_direct == pytest.approx(d_dual, abs=1e-6)
    for formulation in ("one_slack", "n_slack"):
        model = CuttingPlaneSSVM(
            fmap, C=C, formulation=formulation, rescaling=rescaling, epsilon=eps, k=8
        ).fit(x, y, lengths)
        # primal and dual of the cutting-plane run agree within the tolerance C n epsilon
        assert model.history_[-1]["primal"] - model.dual_ <= C * n * eps + 1e-7
        assert model.objective(x, y, lengths, C=C) == pytest.approx(p_direct, abs=C * n * eps + 1e-6)
        np.testing.assert_allclose(model.w_, w_direct, atol=1e-3)


@pytest.mark.parametrize("qp", ["full", "blocks", "primal"])
def test_n_slack_qp_methods_agree(qp: str) -> None:
    x, y, lengths = tiny_chain(5, b=4, n=3, c=2, d=3)
    fmap = ChainFeatureMap(2, input_dim=3)
    _, p_ref, _ = enumerated_optimum(fmap, x, y, lengths, 1.0, "margin")
    model = CuttingPlaneSSVM(fmap, C=1.0, formulation="n_slack", epsilon=1e-7, qp=qp).fit(
        x, y, lengths
    )
    assert model.objective(x, y, lengths) == pytest.approx(p_ref, abs=1e-5)


def test_blocks_qp_equals_full_qp() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(12, 4))
    gram, offs = a @ a.T, rng.uniform(0.5, 2.0, 12)
    groups = np.repeat(np.arange(4), 3)
    caps = np.array([1.0, 0.5, 2.0, 1.0])
    full = solve_box_qp(gram, offs, groups, caps)
    blocks, gap, _ = solve_blocks_qp(gram, offs, groups, caps, np.zeros(12), tol=1e-10)
    d = lambda al: offs @ al - 0.5 * al @ gram @ al  # noqa: E731
    assert gap <= 1e-10
    assert d(blocks) == pytest.approx(d(full), abs=1e-8)


def test_cutting_plane_learns_synthetic_chain() -> None:
    data = hmm_chain(num_sequences=60, length=8, dim=5, seed=1)
    fmap = ChainFeatureMap(5, input_dim=6, bias=False)
    model = CuttingPlaneSSVM(fmap, C=0.1, epsilon=1e-2).fit(data.inputs[:40], data.labels[:40])
    acc = (model.predict(data.inputs[40:]) == data.labels[40:]).double().mean()
    assert model.converged_ and acc > 0.5
    for h in model.history_:
        assert h["primal"] >= model.history_[-1]["dual"] - 1e-8


def test_cutting_plane_errors() -> None:
    fmap = ChainFeatureMap(2, input_dim=3)
    with pytest.raises(ValueError, match="formulation must be one of"):
        CuttingPlaneSSVM(fmap, formulation="two_slack")
    with pytest.raises(ValueError, match="rescaling must be one of"):
        CuttingPlaneSSVM(fmap, rescaling="both")
    with pytest.raises(ValueError, match="C must be a number > 0"):
        CuttingPlaneSSVM(fmap, C=0)
    with pytest.raises(ValueError, match="epsilon must be a number > 0"):
        CuttingPlaneSSVM(fmap, epsilon=-1.0)
    with pytest.raises(ValueError, match="solver must be one of"):
        CuttingPlaneSSVM(fmap, solver="cvxopt")
    with pytest.raises(ValueError, match="max_iter must be an int >= 1"):
        CuttingPlaneSSVM(fmap, max_iter=0)
    with pytest.raises(TypeError, match="feature_map must be a JointFeatureMap"):
        CuttingPlaneSSVM("chain")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="not fitted"):
        CuttingPlaneSSVM(fmap).predict(torch.zeros(1, 2, 3))
    x, y, lengths = tiny_chain()
    with pytest.raises(ValueError, match="labels must have B = 4 rows"):
        CuttingPlaneSSVM(fmap).fit(x, y[:2], lengths)


def test_feature_map_errors() -> None:
    with pytest.raises(ValueError, match="exactly one of input_dim and num_features"):
        ChainFeatureMap(3)
    fmap = ChainFeatureMap(3, input_dim=4)
    with pytest.raises(ValueError, match=r"w must have shape \(d,\)"):
        fmap.potentials(torch.zeros(5), torch.zeros(1, 2, 4))
    with pytest.raises(ValueError, match="inputs must be \\(B, N, D\\) floating point with D = 4"):
        fmap.potentials(torch.zeros(fmap.dim), torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="inputs must be \\(B, N, K\\) long feature indices"):
        ChainFeatureMap(3, num_features=9).psi(torch.zeros(1, 2, 3), torch.zeros(1, 2).long())


# ---------------------------------------------------------------------------- perceptrons
def separable_chain(seed: int = 0, b: int = 30, n: int = 6, c: int = 3, d: int = 4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, d, generator=g, dtype=torch.float64)
    fmap = ChainFeatureMap(c, input_dim=d)
    w_true = torch.randn(fmap.dim, generator=g, dtype=torch.float64) * 3
    y = LinearChain(c).argmax(fmap.potentials(w_true, x))[0]
    return fmap, x, y


def test_perceptron_separates_separable_data() -> None:
    fmap, x, y = separable_chain()
    model = StructuredPerceptron(fmap, epochs=200, averaged=False).fit(x, y)
    assert model.mistakes_[-1] == 0
    assert torch.equal(model.predict(x), y)


def test_averaged_perceptron_fits_separable_data() -> None:
    fmap, x, y = separable_chain(1)
    model = StructuredPerceptron(fmap, epochs=200).fit(x, y)
    assert (model.predict(x) == y).double().mean() > 0.95


def test_coperceptron_without_unlabeled_is_two_perceptrons() -> None:
    fmap, x, y = separable_chain(2)
    model = CoPerceptron(fmap, fmap, cu=0.5, epochs=200, averaged=False).fit(x, x, y)
    assert torch.equal(model.predict(x, x), y)
    single = StructuredPerceptron(fmap, epochs=200, averaged=False, seed=0).fit(x, y)
    assert single.mistakes_[-1] == 0


def test_coperceptron_uses_unlabeled_data() -> None:
    fmap, x, y = separable_chain(3, b=40)
    model = CoPerceptron(fmap, fmap, cu=1.0, epochs=20).fit(
        x[:10], x[:10], y[:10], unlabeled=x[10:], unlabeled2=x[10:]
    )
    assert model.history_ and model.w1_.shape == (fmap.dim,)
    assert model.objective(x, x, y) >= 0
    with pytest.raises(ValueError, match="cu must be a number in"):
        CoPerceptron(fmap, fmap, cu=2.0)
    with pytest.raises(ValueError, match="epochs must be an int >= 1"):
        StructuredPerceptron(fmap, epochs=0)


# ---------------------------------------------------------------------------- coSVM
def _cosvm_supervised(epochs: int) -> tuple[float, float, float]:
    x, y, lengths = tiny_chain(6, b=4, n=3, c=2, d=3)
    fmap = ChainFeatureMap(2, input_dim=3)
    _, p_ref, _ = enumerated_optimum(fmap, x, y, lengths, 1.0, "slack")
    model = CoSVM(fmap, fmap, C=1.0, k=8, epsilon=1e-6, epochs=epochs).fit(x, x, y, lengths)
    # without unlabeled data each view is an n-slack slack-rescaled SVM (r = 1)
    p0 = model.objective_view(0, x, y, lengths, 1.0, "slack", 8)
    p1 = model.objective_view(1, x, y, lengths, 1.0, "slack", 8)
    return p_ref, p0, p1


def test_cosvm_supervised_approaches_the_slack_rescaled_optimum() -> None:
    p_ref, p0, p1 = _cosvm_supervised(40)
    for p in (p0, p1):
        assert p_ref - 1e-9 <= p <= 1.1 * p_ref


@pytest.mark.slow
def test_cosvm_supervised_reaches_the_slack_rescaled_optimum() -> None:
    p_ref, p0, p1 = _cosvm_supervised(300)
    assert p0 == pytest.approx(p_ref, rel=1e-3)
    assert p1 == pytest.approx(p_ref, rel=1e-3)


def test_cosvm_with_unlabeled_data_runs() -> None:
    fmap, x, y = separable_chain(4, b=30)
    model = CoSVM(fmap, fmap, C=1.0, cu=0.5, epochs=5).fit(
        x[:10], x[:10], y[:10], unlabeled=x[10:], unlabeled2=x[10:]
    )
    assert (model.predict(x, x) == y).double().mean() > 0.5
    with pytest.raises(ValueError, match="cu must be a number >= 0"):
        CoSVM(fmap, fmap, cu=-1.0)


# ---------------------------------------------------------------------------- command line
def test_config_runner_trains_on_a_data_module() -> None:
    # the runner behind `structssl baselines --config`: both QP formulations reach the same
    # optimum of the same objective on a data module's labeled split
    from structssl.baselines.__main__ import run
    from structssl.data import SyntheticHMMDataModule
    from structssl.scorers import LinearChainScorer
    from structssl.structures import LinearChain

    def data() -> SyntheticHMMDataModule:
        return SyntheticHMMDataModule(num_train=20, num_labeled=10, num_dev=5, num_test=10,
                                      num_states=3, length=6, dim=4, seed=1)

    results = [
        run(data(), LinearChain(3), LinearChainScorer(3, input_dim=4), method, C=1.0, epsilon=1e-4)
        for method in ("one_slack", "n_slack")
    ]
    assert all(r["converged"] for r in results)
    assert results[0]["primal"] == pytest.approx(results[1]["primal"], rel=1e-3)
    assert set(results[0]["test"]) == {"token_accuracy", "exact_match"}
    # stopped by the time limit before epsilon: said, not only "converged": false in the JSON
    with pytest.warns(UserWarning, match=r"the cutting-plane QP stopped at --time_limit 1e-09 s "
                      r"before meeting --epsilon 0.0001 \(primal .*, dual .*\): the weights are not"):
        stopped = run(data(), LinearChain(3), LinearChainScorer(3, input_dim=4), "one_slack",
                      C=1.0, epsilon=1e-4, time_limit=1e-9)
    assert stopped["converged"] is False
    empty = data()
    empty.setup()
    empty.splits["labeled"].clear()  # a data module whose labeled split came out empty
    with pytest.raises(ValueError, match="labeled split must not be empty"):
        run(empty, LinearChain(3), LinearChainScorer(3, input_dim=4))


def test_config_runner_scores_tagging_data_as_fit_does(tmp_path) -> None:
    """On tagging data the runner takes the task, the tags and the tag scheme from the data
    module (as structssl fit does): a BIOES file gets span F1 and its tags compared as BIOES
    writes them."""
    from unittest import mock

    import structssl.baselines.__main__ as runner
    from structssl.data import CoNLLDataModule
    from structssl.scorers import LinearChainScorer
    from structssl.structures import LinearChain

    lines = ["Juan S-PER\nvive O\nen O\nSan B-LOC\nJosé E-LOC\n. O\n",
             "Ana S-PER\ncome O\n. O\n", "Pedro B-PER\nLuis E-PER\nduerme O\n"] * 4
    (tmp_path / "t.bioes").write_text("\n".join(lines), encoding="utf-8")
    path = str(tmp_path / "t.bioes")
    data = CoNLLDataModule(train_file=path, test_file=path)
    seen: list[tuple] = []
    real = runner.task_metrics

    def record(task, prefix="", tags=None, scheme="bio"):
        seen.append((task, tuple(tags or ()), scheme))
        return real(task, prefix, tags, scheme)

    with mock.patch.object(runner, "task_metrics", record):
        out = runner.run(data, LinearChain(), LinearChainScorer(), "perceptron", epochs=3)
    assert seen == [("bio", ("O", "B-LOC", "I-LOC", "B-PER", "I-PER"), "bioes")]
    assert {"span_f1", "token_accuracy", "exact_match"} <= set(out["test"])


# ---------------------------------------------------------------------------- time limits, clocks
def test_clock_can_count_process_time_and_pause() -> None:
    import time

    from structssl.baselines import Clock

    ticks = iter([0.0, 1.0, 1.5, 4.0, 10.0])
    with Clock.use(lambda: next(ticks)):
        clock = Clock()  # starts at 0
        assert clock.elapsed() == 1.0
        with clock.paused():  # 1.5 -> 4.0 not counted
            pass
        assert clock.elapsed() == pytest.approx(10.0 - 2.5)
    assert Clock.default_timer is time.perf_counter
    with pytest.raises(TypeError, match="timer must be callable"):
        with Clock.use(3.0):  # type: ignore[arg-type]
            pass


def test_two_view_learners_stop_at_the_time_limit() -> None:
    fmap, x, y = separable_chain(5, b=20)
    for model in (
        CoPerceptron(fmap, fmap, epochs=50, time_limit=1e-9),
        CoSVM(fmap, fmap, epochs=50, time_limit=1e-9),
    ):
        model.fit(x[:10], x[:10], y[:10], unlabeled=x[10:], unlabeled2=x[10:])
        assert model.timed_out_ and len(model.history_) == 1
        assert model.predict(x, x).shape == y.shape
    for cls in (CoPerceptron, CoSVM):
        with pytest.raises(ValueError, match="time_limit must be a number > 0 or None"):
            cls(fmap, fmap, time_limit=0)
    with pytest.raises(ValueError, match="time_limit must be a number > 0 or None"):
        CuttingPlaneSSVM(fmap, time_limit=-1.0)


def test_a_scorer_that_is_not_linear_is_refused() -> None:
    """The QP learns w . Psi with Psi the scorer's gradient at w = 0: a non-linear scorer
    would be fitted as another model, silently."""
    from structssl.baselines import ScorerFeatureMap

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = torch.nn.Linear(3, 4)
            self.out = torch.nn.Linear(4, 2)

        def forward(self, inputs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            unary = self.out(torch.relu(self.hidden(inputs)))
            return LinearChain(2).potentials_from(unary, torch.zeros(2, 2, dtype=unary.dtype))

    inputs, lengths = torch.randn(2, 5, 3), torch.tensor([5, 3])
    with pytest.raises(ValueError, match=r"scorer Mlp must be linear in its parameters"):
        ScorerFeatureMap(Mlp().double(), LinearChain(2)).check_linear(inputs, lengths)
    linear = LinearChainScorer(2, input_dim=3).double()
    ScorerFeatureMap(linear, LinearChain(2)).check_linear(inputs, lengths)  # passes
