"""Tests of structssl.clustering (thesis chapter 8) against brute force and hand counts."""

from __future__ import annotations

import itertools
import mailbox
from email.message import EmailMessage
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structssl.clustering import (
    CompactLPSVM,
    Message,
    NablaSequentialLoss,
    NablaSequentialSVM,
    PairwiseFeatures,
    PairwiseSVM,
    SequentialClustering,
    SequentialSVM,
    batch_windows,
    canonical_labels,
    cluster_labels,
    collate_windows,
    greedy_agglomerative,
    joint_features,
    lp_decode,
    read_mail,
    synthetic_stream,
    cross_validation_windows,
)

S = SequentialClustering()
F64 = torch.float64


# ------------------------------------------------------------------ brute force
def partitions(n: int) -> list[list[int]]:
    """All clusterings of n items as canonical label lists (restricted growth strings)."""
    out: list[list[int]] = []

    def rec(prefix: list[int], k: int) -> None:
        if len(prefix) == n:
            out.append(list(prefix))
            return
        for c in range(k + 1):
            rec(prefix + [c], max(k, c + 1))

    rec([], 0)
    return out


def score(sim: torch.Tensor, labels: list[int]) -> float:
    return sum(
        float(sim[j, k]) for j in range(len(labels)) for k in range(j) if labels[j] == labels[k]
    )


def delta_total_loops(y: list[int], z: list[int]) -> float:
    """Delta_total by its definition: sum_{j,k<j} |y_jk - z_jk| / sum_{k' != j} y_k'k."""
    n = len(y)
    total = 0.0
    for j in range(n):
        for k in range(j):
            yjk, zjk = int(y[j] == y[k]), int(z[j] == z[k])
            d = sum(int(y[kp] == y[k]) for kp in range(n) if kp != j)  # includes y_kk = 1
            total += abs(yjk - zjk) / d
    return total


def rand_sim(n: int, seed: int, b: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, n, n, generator=g, dtype=F64)


# ------------------------------------------------------------------ structure basics
def test_canonical_labels_and_parts():
    labels = torch.tensor([[3, 3, 1, 0, 1, 5]])
    can = canonical_labels(labels, torch.tensor([6]))
    assert can.tolist() == [[0, 0, 1, 2, 1, 3]]
    padded = canonical_labels(torch.tensor([[2, 2, 4]]), torch.tensor([2]))
    assert padded.tolist() == [[0, 0, 0]]
    parts = S.to_parts(torch.tensor([[0, 0, 1, 0]]))
    expected = torch.zeros(1, 4, 4)
    expected[0, 1, 0] = expected[0, 3, 0] = expected[0, 3, 1] = 1
    assert torch.equal(parts, expected)
    assert S.from_parts(parts).tolist() == [[0, 0, 1, 0]]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 7), st.integers(0, 10_000))
def test_from_parts_roundtrip(n, seed):
    g = torch.Generator().manual_seed(seed)
    labels = canonical_labels(torch.randint(0, n, (2, n), generator=g), torch.tensor([n, n]))
    assert torch.equal(S.from_parts(S.to_parts(labels)), labels)


def test_joint_features_hand_count():
    # psi(j, k) = (1, j + k): Phi = sum over same-cluster pairs
    n = 4
    feats = torch.zeros(1, n, n, 2, dtype=F64)
    for j in range(n):
        for k in range(n):
            feats[0, j, k] = torch.tensor([1.0, j + k])
    labels = torch.tensor([[0, 1, 0, 0]])  # same-cluster pairs (2,0), (3,0), (3,2)
    phi = joint_features(feats, labels)
    assert phi.tolist() == [[3.0, 2 + 3 + 5]]
    # score of the similarity <w, psi> is <w, Phi>
    w = torch.tensor([0.5, -1.0], dtype=F64)
    assert torch.allclose(S.score(feats @ w, labels), phi @ w)


def test_delta_total_hand_counts():
    y = torch.tensor([[0, 0, 1, 1, 2, 0]])  # {0,1,5} {2,3} {4}
    together = torch.zeros(1, 6, dtype=torch.long)
    # wrong pairs: (2|3, 0|1) 4 x 1/3, (4, 0|1) 2 x 1/3, (4, 2|3) 2 x 1/2, (5, 2|3) 2 x 1/2, (5, 4) 1
    assert S.delta_total(y, together).item() == pytest.approx(4 / 3 + 2 / 3 + 1 + 1 + 1)
    assert S.delta_total(y, y).item() == 0.0
    # {0,1},{2}: merging all misplaces one object; splitting all misplaces one object
    y2 = torch.tensor([[0, 0, 1]])
    assert S.delta_total(y2, torch.tensor([[0, 0, 0]])).item() == pytest.approx(1.0)
    assert S.delta_total(y2, torch.tensor([[0, 1, 2]])).item() == pytest.approx(1.0)
    assert S.hamming(y2, torch.tensor([[0, 1, 2]])).item() == 1.0


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(0, 10_000))
def test_delta_total_matches_definition_and_is_affine(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, n, (1, n), generator=g)
    z = torch.randint(0, n, (1, n), generator=g)
    want = delta_total_loops(y[0].tolist(), z[0].tolist())
    assert S.delta_total(y, z).item() == pytest.approx(want)
    cost, offset = S.delta_total_terms(y)
    assert (offset + (cost * S.to_parts(z)).sum()).item() == pytest.approx(want)


# ------------------------------------------------------------------ sequential decoder
@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(0, 10_000))
def test_extend_is_the_best_extension(n, seed):
    sim = rand_sim(n, seed)
    g = torch.Generator().manual_seed(seed + 1)
    prefix = torch.randint(0, n, (1, n), generator=g)
    labels, sc = S.extend(sim, prefix)
    fixed = canonical_labels(prefix, torch.tensor([n]))[0, : n - 1].tolist()
    best = max(score(sim[0], fixed + [c]) for c in range(max(fixed, default=-1) + 2))
    assert sc.item() == pytest.approx(best)
    assert score(sim[0], labels[0].tolist()) == pytest.approx(best)
    assert labels[0, : n - 1].tolist() == fixed


def test_assign_matches_extend():
    sim = rand_sim(6, 11, b=2)
    labels, _ = S.decode(sim)
    ext, _ = S.extend(sim, labels)
    got = S.assign(sim[:, 5, :], labels, torch.tensor([5, 5]))
    assert got.tolist() == ext[:, 5].tolist()
    assert S.assign(sim[:, 0, :], labels, torch.tensor([0, 0])).tolist() == [0, 0]
    with pytest.raises(ValueError, match=r"row must be a floating tensor of shape \(B, N\)"):
        S.assign(torch.zeros(6), labels)
    with pytest.raises(ValueError, match=r"labels must have shape \(B, N\) = \(2, 6\)"):
        S.assign(sim[:, 0, :], labels[:, :3])


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 7), st.integers(0, 10_000))
def test_decode_is_a_chain_of_best_extensions(n, seed):
    sims = rand_sim(n, seed, b=3)
    lengths = torch.tensor([n, max(1, n - 2), 1])
    labels, scores = S.decode(sims, lengths)
    for b in range(3):
        t = int(lengths[b])
        lab = labels[b, :t].tolist()
        assert lab == canonical_labels(labels[b : b + 1, :t], torch.tensor([t]))[0].tolist()
        assert labels[b, t:].eq(0).all()
        for j in range(t):
            ext, _ = S.extend(sims[b : b + 1, : j + 1, : j + 1], labels[b : b + 1, : j + 1])
            assert ext[0].tolist() == lab[: j + 1]
        assert scores[b].item() == pytest.approx(score(sims[b, :t, :t], lab))


def test_decode_new_cluster_rule_and_inference_mode():
    # message 2 has total similarity -0.5 to cluster {0, 1}: a new cluster (Table 8.2 line 4)
    sim = torch.zeros(1, 3, 3)
    sim[0, 1, 0] = 1.0
    sim[0, 2, 0], sim[0, 2, 1] = 1.0, -1.5
    with torch.inference_mode():
        labels, _ = S.argmax(sim)
    assert labels.tolist() == [[0, 0, 1]]
    sim[0, 2, 1] = -1.0  # total exactly 0: joins (the thesis opens a cluster only for < 0)
    assert S.decode(sim)[0].tolist() == [[0, 0, 0]]


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 6), st.integers(0, 10_000))
def test_loss_augmented_extend_brute_force(n, seed):
    sim = rand_sim(n, seed)
    g = torch.Generator().manual_seed(seed + 2)
    target = canonical_labels(torch.randint(0, n, (1, n), generator=g), torch.tensor([n]))
    labels, aug = S.loss_augmented_extend(sim, target)
    fixed = target[0, : n - 1].tolist()
    cands = [fixed + [c] for c in range(max(fixed) + 2)]
    best = max(score(sim[0], z) + delta_total_loops(target[0].tolist(), z) for z in cands)
    assert aug.item() == pytest.approx(best)
    full, full_aug = S.loss_augmented_decode(sim, target)
    z = full[0].tolist()
    assert full_aug.item() == pytest.approx(score(sim[0], z) + delta_total_loops(target[0].tolist(), z))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(0, 10_000))
def test_reassignments_brute_force(n, seed):
    sim = rand_sim(n, seed)
    g = torch.Generator().manual_seed(seed + 3)
    target = canonical_labels(torch.randint(0, n, (1, n), generator=g), torch.tensor([n]))
    r = S.reassignments(sim, target)
    y = target[0].tolist()
    for j in range(n):
        seen = set()
        for c in range(n + 1):
            if not r.mask[0, j, c]:
                continue
            z = list(y)
            z[j] = n + 10 if c == n else c  # a fresh id = singleton
            key = tuple(canonical_labels(torch.tensor([z]), torch.tensor([n]))[0].tolist())
            assert key != tuple(y)
            seen.add(key)
            assert r.margins[0, j, c].item() == pytest.approx(score(sim[0], y) - score(sim[0], list(key)))
            assert r.delta[0, j, c].item() == pytest.approx(delta_total_loops(y, list(key)))
        # Y_j: every distinct clustering that differs from y only in the placement of j
        want = set()
        for c in list(range(max(y) + 1)) + [n + 10]:
            z = list(y)
            z[j] = c
            key = tuple(canonical_labels(torch.tensor([z]), torch.tensor([n]))[0].tolist())
            if key != tuple(y):
                want.add(key)
        assert seen == want


# ------------------------------------------------------------------ LP and greedy decoders
@settings(max_examples=15, deadline=None)
@given(st.integers(1, 6), st.integers(0, 10_000))
def test_lp_decoder_triangles_and_bound(n, seed):
    sim = rand_sim(n, seed)
    res = lp_decode(sim)
    z = res.parts[0]
    zs = z + z.T
    for a, b, c in itertools.permutations(range(n), 3):
        assert zs[a, b] + zs[b, c] - zs[a, c] <= 1 + 1e-7
    assert (z >= -1e-9).all() and (z <= 1 + 1e-9).all()
    best = max(score(sim[0], p) for p in partitions(n))
    assert res.objective.item() >= best - 1e-7  # a relaxation
    if bool(res.integral[0]):
        assert res.objective.item() == pytest.approx(best, abs=1e-7)
        assert score(sim[0], res.labels[0].tolist()) == pytest.approx(best, abs=1e-7)


def test_lp_decoder_integral_on_clear_clusters_and_loss_augmented():
    truth = [0, 0, 1, 1, 1, 2]
    sim = torch.full((1, 6, 6), -1.0, dtype=F64)
    for j in range(6):
        for k in range(j):
            if truth[j] == truth[k]:
                sim[0, j, k] = 2.0
    res = lp_decode(sim)
    assert bool(res.integral[0]) and res.labels[0].tolist() == truth
    target = torch.tensor([truth])
    aug = lp_decode(sim, target=target)
    best = max(score(sim[0], p) + delta_total_loops(truth, p) for p in partitions(6))
    assert aug.objective.item() >= best - 1e-7


def test_lp_decoder_batch_with_lengths():
    sim = rand_sim(5, 3, b=2)
    res = lp_decode(sim, torch.tensor([5, 2]))
    one = lp_decode(sim[1:, :2, :2])
    assert res.objective[1].item() == pytest.approx(one.objective.item())
    assert res.labels[1, 2:].eq(0).all()


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 7), st.integers(0, 10_000))
def test_greedy_agglomerative_stops_at_no_positive_merge(n, seed):
    sim = rand_sim(n, seed, b=2)
    labels = greedy_agglomerative(sim, torch.tensor([n, 1]))
    lab = labels[0].tolist()
    sym = sim[0].tril(-1) + sim[0].tril(-1).T
    ids = sorted(set(lab))
    for a, b in itertools.combinations(ids, 2):
        ia = [i for i in range(n) if lab[i] == a]
        ib = [i for i in range(n) if lab[i] == b]
        assert sym[ia][:, ib].sum() <= 1e-9
    assert labels[1].tolist() == [0] * n


def test_greedy_agglomerative_hand_case():
    sim = torch.full((1, 4, 4), -1.0)
    sim[0, 1, 0], sim[0, 3, 2] = 3.0, 2.0
    sim[0, 2, 0] = 0.5  # {0,1} vs {2,3} total 0.5 - 3 < 0
    assert greedy_agglomerative(sim).tolist() == [[0, 0, 1, 1]]


# ------------------------------------------------------------------ losses and training
def _tiny_batch(seed: int, n: int = 5, d: int = 3, b: int = 2):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(b, n, n, d, generator=g, dtype=F64)
    labels = torch.randint(0, 3, (b, n), generator=g)
    return feats, labels


def test_nabla_loss_gradcheck_and_formula():
    feats, labels = _tiny_batch(0)
    lengths = torch.tensor([5, 3])
    loss = NablaSequentialLoss(epsilon=0.3, rho=2.0, reduction="sum")
    sim = (feats @ torch.tensor([0.3, -0.2, 0.5], dtype=F64)).requires_grad_()
    assert torch.autograd.gradcheck(lambda s: loss(S, s, labels, lengths), (sim,))
    # value: sum_j smax over Y_j of huber(margin, Delta)
    r = S.reassignments(sim.detach(), labels, lengths)
    total = 0.0
    for b in range(2):
        for j in range(5):
            terms = []
            for c in range(6):
                if r.mask[b, j, c]:
                    t, dlt = r.margins[b, j, c].item(), r.delta[b, j, c].item()
                    h = dlt - t if t <= dlt - 0.3 else (max(dlt + 0.3 - t, 0) ** 2) / 1.2
                    terms.append(h)
            total += np.log(1 + sum(np.expm1(2.0 * h) for h in terms)) / 2.0
    assert loss(S, sim.detach(), labels, lengths).item() == pytest.approx(total)


def test_nabla_loss_tends_to_op82_slack():
    feats, labels = _tiny_batch(1)
    sim = feats @ torch.tensor([0.2, 0.1, -0.4], dtype=F64)
    r = S.reassignments(sim, labels)
    hinge = torch.where(r.mask, (r.delta - r.margins).clamp(min=0), torch.zeros_like(sim[:, :, :1]))
    want = hinge.amax(2).sum()
    got = NablaSequentialLoss(epsilon=1e-6, rho=1e5, reduction="sum")(S, sim, labels)
    assert got.item() == pytest.approx(want.item(), abs=1e-3)


def _op82_all_constraints(feats, labels, C):
    """OP 8.2 with every constraint at once (quadprog on the primal), the reference."""
    from structssl.baselines.oracle import solve_primal_qp

    r = S.reassignments(feats, labels)
    b, n, c, d = r.margins.shape
    m = r.mask.reshape(-1, c)
    a = r.margins.reshape(-1, c, d)[m].numpy()
    off = r.delta.reshape(-1, c)[m].numpy()
    groups = np.nonzero(m.numpy())[0]
    alpha = solve_primal_qp(a, off, groups, np.full(b * n, C), "quadprog")
    return a.T @ alpha


def test_sequential_svm_matches_full_qp():
    feats, labels = _tiny_batch(2, n=6, d=4)
    model = SequentialSVM(C=2.0, epsilon=1e-7).fit(feats, labels)
    assert model.converged_
    ref = _op82_all_constraints(feats, labels, 2.0)
    assert np.allclose(model.w_.numpy(), ref, atol=1e-5)


def test_nabla_sequential_svm_approaches_op82():
    feats, labels = _tiny_batch(3, n=6, d=4)
    ref = _op82_all_constraints(feats, labels, 1.0)
    nab = NablaSequentialSVM(C=1.0, epsilon=1e-3, rho=200.0, max_iter=500).fit(feats, labels)
    assert np.allclose(nab.w_.numpy(), ref, atol=0.05)


def test_compact_lp_svm_slack_is_the_loss_augmented_lp():
    feats, labels = _tiny_batch(4, n=5, d=3)
    model = CompactLPSVM(C=1.0, max_window=5).fit(feats, labels)
    sim = model.similarities(feats)
    lp = lp_decode(sim, target=labels)
    xi = (lp.objective - S.score(sim, labels)).clamp(min=0)
    assert torch.allclose(model.xi_, xi, atol=1e-5)
    # the quadprog route (with a tiny ridge) agrees
    other = CompactLPSVM(C=1.0, max_window=5, solver="quadprog").fit(feats, labels)
    assert torch.allclose(other.w_, model.w_, atol=1e-4)


def test_compact_lp_svm_retries_daqp_with_larger_eps_prox(monkeypatch):
    import qpsolvers

    feats, labels = _tiny_batch(4, n=5, d=3)
    ref = CompactLPSVM(C=1.0, max_window=5, eps_prox=0.1).fit(feats, labels)
    solve = qpsolvers.solve_problem
    seen: list[float] = []

    def failing_below(limit):
        def fake(problem, solver, **settings):
            seen.append(settings["eps_prox"])
            sol = solve(problem, solver=solver, **settings)
            if settings["eps_prox"] < limit:
                sol.found = False
            return sol
        return fake

    monkeypatch.setattr(qpsolvers, "solve_problem", failing_below(0.05))
    model = CompactLPSVM(C=1.0, max_window=5, eps_prox_fallbacks=(0.1, 1.0)).fit(feats, labels)
    assert seen == [1e-2, 0.1] and model.eps_prox_failed_ == [1e-2]
    assert torch.allclose(model.w_, ref.w_)
    monkeypatch.setattr(qpsolvers, "solve_problem", failing_below(10.0))
    with pytest.raises(RuntimeError, match=r"eps_prox in \[0.01, 0.1\]"):
        CompactLPSVM(C=1.0, max_window=5, eps_prox_fallbacks=(0.1,)).fit(feats, labels)
    with pytest.raises(ValueError, match="eps_prox_fallbacks"):
        CompactLPSVM(eps_prox_fallbacks=(0.1, -1.0))


def test_pairwise_svm_is_optimal():
    feats, labels = _tiny_batch(5, n=6, d=3)
    model = PairwiseSVM(C=0.5, epsilon=1e-8).fit(feats, labels)
    pm = torch.tril(torch.ones(6, 6, dtype=torch.bool), -1)
    x = feats[:, pm]  # (B, P, d)
    y = torch.where(labels.unsqueeze(2) == labels.unsqueeze(1), 1.0, -1.0)[:, pm].to(F64)

    def obj(w):
        return 0.5 * float(w @ w) + 0.5 * float((1 - y * (x @ w)).clamp(min=0).sum())

    best = obj(model.w_)
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        assert obj(model.w_ + 1e-3 * torch.randn(3, generator=g, dtype=F64)) >= best - 1e-7


def test_training_learns_synthetic_batches():
    stream = synthetic_stream(400, seed=3)
    (trains, test), = cross_validation_windows(stream, size=20, num_train=3, num_tests=1, seed=1)
    f = PairwiseFeatures()
    feats, labels, lengths = collate_windows([f(w) for w in trains], [cluster_labels(w) for w in trains])
    model = SequentialSVM(C=1.0).fit(feats, labels, lengths)
    t_feats = f(test).unsqueeze(0)
    t_labels = cluster_labels(test).unsqueeze(0)
    pred, _ = S.decode(model.similarities(t_feats))
    singletons = torch.arange(20).unsqueeze(0)
    assert S.delta_total(t_labels, pred) < S.delta_total(t_labels, singletons)


# ------------------------------------------------------------------ data
def test_synthetic_stream_shape():
    a = synthetic_stream(300, seed=5)
    assert a == synthetic_stream(300, seed=5)
    assert len(a) == 300
    times = [m.time for m in a]
    assert times == sorted(times)
    singles = sum(m.batch is None for m in a)
    assert singles == 60
    labels = cluster_labels(a)
    assert labels[0] == 0 and labels.max() < 300
    windows = batch_windows(a, 50)
    assert len(windows) == 6 and all(len(w) == 50 for w in windows)
    cv = cross_validation_windows(a, size=30, num_train=2, num_tests=3, seed=0)
    assert len(cv) == 3
    for trains, test in cv:
        assert len(test) == 30 and len(trains) == 2
        test_batches = {m.batch for m in test if m.batch is not None}
        assert test_batches  # holds a test batch


def test_pairwise_features_properties():
    msgs = [
        Message("a@x.com", "cheap loan", "Hello, cheap loan at http://x.com/a now", "text/plain", 300, "b1"),
        Message("b@x.com", "cheap loan", "Hello, cheap lo an at http://x.com/a now", "text/plain", 310, "b1"),
        Message("c@y.org", "lunch", "see you at lunch tomorrow", "text/html", 800, None),
    ]
    f = PairwiseFeatures()
    x = f(msgs)
    assert x.shape == (3, 3, f.dim) and f.dim == len(f.names)
    assert torch.allclose(x, x.transpose(0, 1))
    assert (x >= 0).all() and (x <= 1 + 1e-12).all()
    assert x.diagonal(dim1=0, dim2=1).abs().sum() == 0
    names = list(f.names)
    assert x[1, 0, names.index("subject_equal")] == 1 and x[2, 0, names.index("subject_equal")] == 0
    assert x[1, 0, names.index("sender_domain_equal")] == 1 and x[1, 0, names.index("sender_equal")] == 0
    assert x[2, 1, names.index("mime_type_equal")] == 0
    assert x[1, 0, names.index("url_jaccard")] == 1
    assert x[1, 0, names.index("body_tfidf_cosine")] > x[2, 0, names.index("body_tfidf_cosine")]
    fitted = f.fit(msgs)
    assert fitted.idf is not None and fitted(msgs).shape == x.shape


def _eml(sender: str, subject: str, body: str, date: str, html: bool = False) -> bytes:
    msg = EmailMessage()
    msg["From"] = sender
    msg["Subject"] = subject
    msg["Date"] = date
    msg["Message-ID"] = f"<{subject.replace(' ', '')}@test>"
    if html:
        msg.set_content(f"<html><body><p>{body}</p></body></html>", subtype="html")
    else:
        msg.set_content(body)
    return bytes(msg)


def _mail_folder(tmp_path: Path) -> Path:
    d = tmp_path / "mail"
    d.mkdir()
    (d / "a.eml").write_bytes(_eml("Spam <x@spam.biz>", "win now", "you win", "Tue, 02 Jan 2024 10:00:00 +0000"))
    (d / "b.eml").write_bytes(_eml("y@spam.biz", "win now 2", "you win big", "Mon, 01 Jan 2024 10:00:00 +0000", html=True))
    (d / "c.eml").write_bytes(_eml("bob@home.org", "lunch", "lunch?", "Wed, 03 Jan 2024 10:00:00 +0000"))
    return d


def test_read_mail_folder(tmp_path):
    d = _mail_folder(tmp_path)
    batch = tmp_path / "batches.txt"
    batch.write_text("# file batch\na.eml spam1\nb.eml spam1\n\n<lunch@test> -\n")
    msgs = read_mail(d, batch)
    assert [m.name for m in msgs] == ["b.eml", "a.eml", "c.eml"]  # by Date
    assert [m.batch for m in msgs] == ["spam1", "spam1", None]
    assert msgs[0].sender == "y@spam.biz" and msgs[1].sender == "x@spam.biz"
    assert msgs[0].mime_type == "text/html" and "you win big" in msgs[0].body and "<p>" not in msgs[0].body
    assert msgs[1].subject == "win now" and msgs[1].header_size > 0
    assert cluster_labels(msgs).tolist() == [0, 0, 1]
    by_name = read_mail(d, batch, order="name")
    assert [m.name for m in by_name] == ["a.eml", "b.eml", "c.eml"]
    assert all(m.batch is None for m in read_mail(d))


def test_read_mail_mbox(tmp_path):
    path = tmp_path / "box.mbox"
    box = mailbox.mbox(str(path))
    box.add(_eml("x@spam.biz", "offer", "cheap", "Tue, 02 Jan 2024 10:00:00 +0000"))
    box.add(_eml("y@spam.biz", "offer again", "cheap!", "Tue, 02 Jan 2024 11:00:00 +0000"))
    box.flush()
    box.close()
    batch = tmp_path / "b.txt"
    batch.write_text("0 s\n1 s\n")
    msgs = read_mail(path, batch)
    assert [m.batch for m in msgs] == ["s", "s"] and msgs[0].subject == "offer"


def test_read_mail_errors(tmp_path):
    d = _mail_folder(tmp_path)
    bad = tmp_path / "bad.txt"
    bad.write_text("a.eml spam1\nb.eml\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: expected 2 fields"):
        read_mail(d, bad)
    twice = tmp_path / "twice.txt"
    twice.write_text("a.eml s\na.eml t\n")
    with pytest.raises(ValueError, match=r"twice.txt:2: message 'a.eml' is listed twice"):
        read_mail(d, twice)
    unknown = tmp_path / "unknown.txt"
    unknown.write_text("zzz.eml s\n")
    with pytest.raises(ValueError, match=r"not found in"):
        read_mail(d, unknown)
    partial = tmp_path / "partial.txt"
    partial.write_text("a.eml s\n")
    with pytest.raises(ValueError, match=r"message 'b.eml' .* is not listed in the batch file"):
        read_mail(d, partial)
    assert len(read_mail(d, partial, unlisted="singleton")) == 3
    with pytest.raises(FileNotFoundError, match="no such mail folder"):
        read_mail(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no such batch file"):
        read_mail(d, tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="unlisted must be"):
        read_mail(d, unlisted="drop")
    with pytest.raises(ValueError, match="order must be"):
        read_mail(d, order="size")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"holds no \*.eml files"):
        read_mail(empty)


# ------------------------------------------------------------------ errors
def test_structure_errors():
    with pytest.raises(ValueError, match=r"shape \(B, N, N\); got \(2, 3\)"):
        S.decode(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"shape \(B, N, N\); got \(1, 3, 4\)"):
        S.decode(torch.zeros(1, 3, 4))
    with pytest.raises(TypeError, match=r"potentials\[0\] must be a torch.Tensor; got list"):
        S.decode([[0.0]])
    with pytest.raises(ValueError, match=r"lengths must be in \[1, N\] = \[1, 3\]"):
        S.decode(torch.zeros(1, 3, 3), torch.tensor([4]))
    with pytest.raises(ValueError, match=r"labels must be cluster ids in \[0, N\) = \[0, 3\); got values in \[0, 3\]"):
        S.extend(torch.zeros(1, 3, 3), torch.tensor([[0, 3, 1]]))
    with pytest.raises(ValueError, match="labels must have an integer dtype"):
        S.extend(torch.zeros(1, 3, 3), torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"target must have shape \(B, N\)"):
        S.delta_total_terms(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"values must have shape \(B, N, N, \*F\)"):
        S.reassignments(torch.zeros(1, 3), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"parts must be a tensor of shape \(B, N, N\); got \(3,\)"):
        S.from_parts(torch.zeros(3))
    with pytest.raises(NotImplementedError, match="intractable"):
        S.log_partition(torch.zeros(1, 3, 3))
    with pytest.raises(NotImplementedError, match="k-best"):
        S.kbest(torch.zeros(1, 3, 3), 2)
    with pytest.raises(ValueError, match=r"threshold must be a number in \(0, 1\)"):
        lp_decode(torch.zeros(1, 3, 3), threshold=1.5)


def test_training_and_data_errors():
    feats, labels = _tiny_batch(6, n=6)
    with pytest.raises(ValueError, match="max_window = 4 messages"):
        CompactLPSVM(max_window=4).fit(feats, labels)
    with pytest.raises(ValueError, match=r"features must be a tensor of shape \(B, N, N, d\)"):
        SequentialSVM().fit(feats[:, :, 0], labels)
    with pytest.raises(ValueError, match="C must be a finite number > 0"):
        SequentialSVM(C=0.0)
    with pytest.raises(ValueError, match="solver must be"):
        PairwiseSVM(solver="cplex")
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
        NablaSequentialLoss(epsilon=-1.0)
    with pytest.raises(ValueError, match="reduction must be one of"):
        NablaSequentialLoss(reduction="max")
    with pytest.raises(TypeError, match="structure must be a SequentialClustering"):
        NablaSequentialLoss()(object(), torch.zeros(1, 2, 2), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(RuntimeError, match="not fitted"):
        SequentialSVM().similarities(feats)
    with pytest.raises(ValueError, match=r"labels\[1\] must have shape \(2,\)"):
        collate_windows([torch.zeros(3, 3, 2), torch.zeros(2, 2, 2)], [torch.zeros(3), torch.zeros(3)])
    with pytest.raises(ValueError, match="num_messages must be an int >= 1"):
        synthetic_stream(0)
    with pytest.raises(ValueError, match=r"singleton_fraction \+ newsletter_fraction must be <= 1"):
        synthetic_stream(10, singleton_fraction=0.8, newsletter_fraction=0.5)
    with pytest.raises(ValueError, match="size must be an int >= 1"):
        batch_windows([], 0)
    with pytest.raises(ValueError, match="messages must hold at least one Message"):
        PairwiseFeatures()([])
    with pytest.raises(TypeError, match=r"messages\[0\] must be a Message"):
        PairwiseFeatures()(["hello"])


# ------------------------------------------------------------------ command line
CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "clustering"


def test_cli_evaluates_and_clusters_synthetic(tmp_path, capsys):
    import json

    from structssl.clustering.cli import evaluate, main

    out, clusters = tmp_path / "res.json", tmp_path / "clusters.txt"
    assert main(["--num-messages", "120", "--window", "12", "--num-train", "2", "--folds", "2",
                 "--strategy", "pairwise", "--out", str(out), "--cluster-out", str(clusters)]) == 0
    res = json.loads(out.read_text())["results"]
    assert set(res) == {"sequential", "lp", "greedy"}
    for r in res.values():
        assert len(r["folds"]) == 2 and 0.0 <= r["delta_total_per_message"]
    direct = evaluate(synthetic_stream(120, seed=0), "pairwise", ["lp"], 12, 2, 2)
    assert direct["lp"] == pytest.approx(res["lp"]["folds"])
    lines = clusters.read_text().split()
    assert len(lines) == 2 * 120  # "<name> <window>:<cluster>" per message
    assert "Delta_total / T" in capsys.readouterr().out


def test_cli_on_a_mail_folder_with_config(tmp_path):
    from structssl.clustering.cli import main, parse_args

    d = tmp_path / "mail"
    d.mkdir()
    batch_lines = []
    for i in range(12):
        kind = i % 3  # two batches and singletons, interleaved
        if kind == 2:
            sender, subj, batch = f"p{i}@home.org", f"note {i}", "-"
            body = f"private words {i} x{i}"
        else:
            sender = f"offer{kind}@spam{kind}.biz"
            subj, body, batch = f"offer {kind} now", f"buy cheap item {kind} today only", f"b{kind}"
        (d / f"m{i:02d}.eml").write_bytes(
            _eml(sender, subj, body, f"Mon, 01 Jan 2024 10:{i:02d}:00 +0000"))
        batch_lines.append(f"m{i:02d}.eml {batch}")
    batches = tmp_path / "batches.txt"
    batches.write_text("\n".join(batch_lines) + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"data: mail\nmail: {d}\nbatches: {batches}\nwindow: 6\nnum_train: 2\n"
                   "folds: 1\nstrategy: sequential\ndecoders: [sequential]\n")
    assert parse_args(["--config", str(cfg), "--window", "4"]).window == 4
    clusters = tmp_path / "out.txt"
    assert main(["--config", str(cfg), "--cluster-out", str(clusters)]) == 0
    rows = [line.split() for line in clusters.read_text().splitlines()]
    assert [r[0] for r in rows] == [f"m{i:02d}.eml" for i in range(12)]


def test_cli_errors(tmp_path, capsys):
    from structssl.clustering.cli import main

    assert main(["--data", "mail"]) == 2
    assert "needs --mail" in capsys.readouterr().err
    assert main(["--mail", str(tmp_path)]) == 2  # not the synthetic stream, silently
    assert "--mail read a mail stream: add --data mail" in capsys.readouterr().err
    assert main(["--data", "mail", "--mail", str(tmp_path / "none")]) == 2
    assert "no such mail folder" in capsys.readouterr().err
    assert main(["--window", "1"]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("windows: 3\n")
    with pytest.raises(SystemExit):
        main(["--config", str(bad)])
    assert "Option 'windows' is not accepted" in capsys.readouterr().err
    assert main(["--config", str(CONFIGS / "synthetic.yaml"), "--window", "1"]) == 2
    with pytest.raises(SystemExit):
        main(["--config", str(tmp_path / "missing.yaml")])
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("config", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_configs_parse(config):
    from structssl.clustering.cli import parse_args

    args = parse_args(["--config", str(config)])
    assert args.strategy == "sequential" and args.window >= 50


def test_cli_config_values_are_typed_and_checked(tmp_path, capsys):
    from structssl.clustering.cli import parse_args

    cfg = tmp_path / "c.yaml"
    cfg.write_text("cluster_out: out.txt\nwindow: '12'\ndecoders: [lp]\n")
    args = parse_args(["--config", str(cfg)])
    assert args.cluster_out == Path("out.txt") and args.window == 12 and args.decoders == ["lp"]
    cfg.write_text("strategy: iterative\n")
    with pytest.raises(SystemExit):
        parse_args(["--config", str(cfg)])
    err = capsys.readouterr().err
    assert 'key "strategy"' in err and "iterative" in err and "pairwise" in err


def test_structssl_clustering_subcommand(tmp_path, capsys):
    """``structssl clustering`` is the same command (``python -m structssl.clustering`` too)."""
    from structssl.cli import main as structssl_main

    clusters = tmp_path / "clusters.txt"
    assert structssl_main(["clustering", "--num-messages", "40", "--window", "10", "--num-train",
                           "1", "--folds", "0", "--strategy", "pairwise", "--decoders",
                           "greedy", "--cluster-out", str(clusters)]) == 0
    assert len(clusters.read_text().splitlines()) == 40
    with pytest.raises(SystemExit):
        structssl_main(["clustering", "--decoders", "kmeans"])
    assert "kmeans" in capsys.readouterr().err
