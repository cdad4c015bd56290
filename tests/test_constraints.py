"""Constraints: counts / indicators against pure-Python references on enumerated labelings,
feature maps against counts, constraint-guided decoding and k-best search against brute force,
YAML construction and error messages."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structssl.constraints import (
    AllowedFirst,
    AtMostOnce,
    ConcatFeatures,
    ConsecutiveFields,
    Constraint,
    ConstraintSet,
    ExpectedCount,
    LabelProportion,
    MustAppear,
    MustNotAppear,
    PunctuationTransitions,
    TransitionFraction,
    WordLabels,
    kbest_search,
    runs_per_label,
)
from structssl.losses.gamma import QuadraticPenaltyGammaLoss, L1Penalty, constraint_guided_argmax
from structssl.structures import LinearChain, MultiClass

D = torch.float64
LABELS = ["a", "b", "c"]
C = 3
VOCAB = ["x", "y", ",", "ca", "1999", "."]


# ---------------------------------------------------------------------- references
def ref_runs(y: list[int], c: int) -> int:
    return sum(1 for t in range(len(y)) if y[t] == c and (t == 0 or y[t - 1] != c))


def ref_allowed(tokens: list[str], t: int) -> bool:
    punct = {",", "."}
    return tokens[t - 1] in punct or tokens[t] in punct


def reference_counts(name: str, y: list[int], tokens: list[str]) -> list[float]:
    n = len(y)
    if name == "must_appear":
        return [sum(v == 1 for v in y)]
    if name == "must_not":
        return [sum(v in (0, 2) for v in y)]
    if name == "at_most_once":
        return [ref_runs(y, 0)]
    if name == "words":
        return [sum(1 for t in range(n) if tokens[t] in ("ca", "1999") and y[t] != 2)]
    if name == "first":
        return [int(n > 0 and y[0] not in (0, 1))]
    if name == "punct":
        return [sum(1 for t in range(1, n) if y[t] != y[t - 1] and not ref_allowed(tokens, t))]
    if name == "consecutive":
        return [sum(max(ref_runs(y, c) - 1, 0) for c in range(C))]
    if name == "proportion":
        return [sum(v == 0 for v in y), n]
    if name == "expected":
        return [sum(v == 2 for v in y), 1]
    if name == "fraction":
        changes = [t for t in range(1, n) if y[t] != y[t - 1]]
        return [sum(not ref_allowed(tokens, t) for t in changes), len(changes)]
    raise AssertionError(name)


def reference_indicators(name: str, y: list[int], tokens: list[str], n_max: int) -> list[float]:
    n = len(y)
    pad = [1.0] * (n_max - n)
    if name == "must_not":
        return [float(v not in (0, 2)) for v in y] + pad
    if name == "words":
        return [float(tokens[t] not in ("ca", "1999") or y[t] == 2) for t in range(n)] + pad
    if name == "first":
        return [float(n == 0 or y[0] in (0, 1))]
    if name == "punct":
        return [1.0] + [
            float(y[t] == y[t - 1] or ref_allowed(tokens, t)) for t in range(1, n)
        ] + pad[: max(n_max - max(n, 1), 0)] if n > 0 else [1.0] * n_max
    if name == "must_appear":
        return [float(any(v == 1 for v in y))]
    if name == "at_most_once":
        return [float(ref_runs(y, 0) <= 1)]
    if name == "consecutive":
        return [float(all(ref_runs(y, c) <= 1 for c in range(C)))]
    raise AssertionError(name)


def make(name: str):
    return {
        "must_appear": MustAppear("b"),
        "must_not": MustNotAppear(["a", "c"]),
        "at_most_once": AtMostOnce("a"),
        "words": WordLabels(labels=["c"], words=["CA"], pattern=r"(19|20)\d\d"),
        "first": AllowedFirst(["a", "b"]),
        "punct": PunctuationTransitions(punctuation=[",", "."]),
        "consecutive": ConsecutiveFields(),
        "proportion": LabelProportion("a", 0.3),
        "expected": ExpectedCount("c", 1.5),
        "fraction": TransitionFraction(0.01, punctuation=[",", "."]),
    }[name].bind(LABELS)


NAMES = ["must_appear", "must_not", "at_most_once", "words", "first", "punct", "consecutive",
         "proportion", "expected", "fraction"]  # fmt: skip
LINEAR_COUNTS = [n for n in NAMES if n != "consecutive"]
LINEAR_INDICATORS = ["must_not", "words", "first", "punct"]


def all_labelings(n: int) -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(C), repeat=n)), dtype=torch.long).view(-1, n)


def random_tokens(n: int, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    return [VOCAB[int(i)] for i in torch.randint(len(VOCAB), (n,), generator=g)]


# ---------------------------------------------------------------------- counts and features
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [1, 2, 4])
def test_counts_match_reference_on_all_labelings(name, n):
    con = make(name)
    tokens = random_tokens(n, seed=n)
    ys = all_labelings(n)
    lengths = torch.full((len(ys),), n)
    counts = con.counts(ys, lengths, [tokens] * len(ys))
    expected = torch.tensor([reference_counts(name, y.tolist(), tokens) for y in ys], dtype=counts.dtype)
    torch.testing.assert_close(counts, expected)


@pytest.mark.parametrize("name", LINEAR_COUNTS)
def test_count_features_equal_counts_with_ragged_lengths(name):
    con = make(name)
    n = 4
    lengths = torch.tensor([4, 2, 3, 1])
    token_lists = [random_tokens(n, seed=s) for s in range(4)]
    features = con.features(token_lists, lengths, C, dtype=D)
    structure = LinearChain(C)
    for ys in all_labelings(n)[::7]:
        labels = ys.expand(4, n).clone() * (torch.arange(n) < lengths.view(-1, 1))
        phi = features.phi(structure.to_parts(labels, lengths).to(D))
        expected = torch.tensor(
            [reference_counts(name, labels[i, : lengths[i]].tolist(), token_lists[i]) for i in range(4)],
            dtype=D,
        )
        torch.testing.assert_close(phi, expected)


@pytest.mark.parametrize("name", LINEAR_INDICATORS)
def test_indicator_features_equal_indicators(name):
    con = make(name)
    n = 4
    lengths = torch.tensor([4, 2, 3])
    token_lists = [random_tokens(n, seed=10 + s) for s in range(3)]
    features = con.indicator_features(token_lists, lengths, C, dtype=D)
    assert features.binary
    structure = LinearChain(C)
    for ys in all_labelings(n)[::5]:
        labels = ys.expand(3, n).clone() * (torch.arange(n) < lengths.view(-1, 1))
        phi = features.phi(structure.to_parts(labels, lengths).to(D))
        ind = con.indicators(labels, lengths, token_lists).to(D)
        torch.testing.assert_close(phi, ind)
        expected = torch.tensor(
            [reference_indicators(name, labels[i, : lengths[i]].tolist(), token_lists[i], n) for i in range(3)],
            dtype=D,
        )
        torch.testing.assert_close(ind, expected)


@pytest.mark.parametrize("name", ["must_appear", "at_most_once", "consecutive"])
def test_global_indicators_and_no_linear_indicator_features(name):
    con = make(name)
    tokens = random_tokens(3, 0)
    ys = all_labelings(3)
    ind = con.indicators(ys, torch.full((len(ys),), 3), [tokens] * len(ys))
    expected = torch.tensor([reference_indicators(name, y.tolist(), tokens, 3) for y in ys], dtype=ind.dtype)
    torch.testing.assert_close(ind, expected)
    with pytest.raises(NotImplementedError, match="not linear in the parts"):
        con.indicator_features([tokens], torch.tensor([3]), C)


def test_consecutive_has_no_count_features():
    with pytest.raises(NotImplementedError, match="not linear in the parts"):
        make("consecutive").features([["x"]], torch.tensor([1]), C)


def test_multiclass_features():
    con = ConstraintSet([MustNotAppear("b"), LabelProportion("a", 0.5)], labels=LABELS)
    lengths = torch.ones(3, dtype=torch.long)
    features = con.features(None, lengths, C, structure="multiclass", dtype=D)
    labels = torch.tensor([0, 1, 2])
    phi = features.phi(MultiClass(C).to_parts(labels).to(D))
    torch.testing.assert_close(phi, con.counts(labels.view(3, 1), lengths).to(D))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.integers(0, 10_000))
def test_set_features_match_counts_hypothesis(n, b, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, n + 1, (b,), generator=g)
    lengths[0] = n
    labels = torch.randint(C, (b, n), generator=g) * (torch.arange(n) < lengths.view(-1, 1))
    tokens = [random_tokens(n, seed + i) for i in range(b)]
    cset = ConstraintSet([make(x) for x in LINEAR_COUNTS])
    feats = cset.features(tokens, lengths, C, dtype=D)
    phi = feats.phi(LinearChain(C).to_parts(labels, lengths).to(D))
    torch.testing.assert_close(phi, cset.counts(labels, lengths, tokens).to(D))
    ind = cset.indicator_features(tokens, lengths, C, dtype=D)
    assert ind is not None
    lin_ind = ind.phi(LinearChain(C).to_parts(labels, lengths).to(D))
    full = cset.indicators(labels, lengths, tokens).to(D)
    torch.testing.assert_close(lin_ind, full[:, : lin_ind.shape[1]])


# ---------------------------------------------------------------------- penalties
def test_penalties_and_violations():
    labels = torch.tensor([[0, 0, 1, 0], [2, 2, 2, 0]])
    lengths = torch.tensor([4, 3])
    once = AtMostOnce("a", weight=2.0).bind(LABELS)
    torch.testing.assert_close(once.penalty(labels, lengths), torch.tensor([2.0, 0.0]))
    torch.testing.assert_close(once.violation(labels, lengths), torch.tensor([1.0, 0.0]))
    appear = MustAppear("b", min_count=2).bind(LABELS)
    torch.testing.assert_close(appear.penalty(labels, lengths), torch.tensor([1.0, 2.0]))
    prop = LabelProportion("a", 0.5).bind(LABELS)  # 3 of 7 tokens
    torch.testing.assert_close(prop.penalty(labels, lengths), torch.tensor(abs(3 / 7 - 0.5)))
    ge = LabelProportion("a", 0.5, bound="ge").bind(LABELS)
    torch.testing.assert_close(ge.violation(labels, lengths), torch.tensor(0.5 - 3 / 7))
    le = LabelProportion("a", 0.5, bound="le").bind(LABELS)
    torch.testing.assert_close(le.violation(labels, lengths), torch.tensor(0.0))


def test_corpus_penalty_incremental_update():
    """Label switching: the corpus penalty depends only on summed counts."""
    cset = ConstraintSet([LabelProportion("a", 0.3), AtMostOnce("b")], labels=LABELS)
    labels = torch.tensor([[0, 1, 1, 2], [1, 2, 0, 0], [0, 0, 0, 2]])
    lengths = torch.tensor([4, 4, 3])
    counts = cset.counts(labels, lengths)
    totals = counts.sum(0)
    new = labels.clone()
    new[1] = torch.tensor([0, 0, 0, 0])
    new_counts = cset.counts(new[1:2], lengths[1:2])
    moved = totals - counts[1] + new_counts[0]
    pen = cset.penalties_from_counts(counts, moved.expand_as(counts))
    full = cset.penalty(new, lengths)
    inc = pen[:, 0][0] + cset.penalties_from_counts(cset.counts(new, lengths))[:, 1].sum()
    torch.testing.assert_close(inc, full)
    # many candidate totals at once
    cands = torch.stack([totals, moved])
    out = cset.constraints[0].penalty_from_counts(cands[:, :2])
    assert out.shape == (2,)


def test_set_violations_and_hard():
    cset = ConstraintSet([AllowedFirst("a", hard=True), LabelProportion("c", 0.2)], labels=LABELS)
    labels = torch.tensor([[0, 1], [1, 1]])
    lengths = torch.tensor([2, 2])
    v = cset.violations(labels, lengths)
    assert set(v) == {"AllowedFirst(a)", "LabelProportion(c)"}
    assert v["AllowedFirst(a)"].tolist() == [0.0, 1.0]
    assert cset.hard_violated(labels, lengths).tolist() == [False, True]
    assert len(cset.select(level="corpus")) == 1
    assert len(cset.select(hard=True)) == 1


# ---------------------------------------------------------------------- decoding
def test_constraint_guided_argmax_with_indicator_features_brute_force():
    torch.manual_seed(3)
    n = 4
    structure = LinearChain(C)
    tokens = [random_tokens(n, 21), random_tokens(n, 22)]
    lengths = torch.tensor([4, 3])
    cset = ConstraintSet([make(x) for x in LINEAR_INDICATORS])
    features = cset.indicator_features(tokens, lengths, C, dtype=D)
    pot = torch.randn(2, n, C, C, dtype=D)
    v = torch.rand(2, features.num_constraints, dtype=D) * 2
    mu = 1.7
    guided = constraint_guided_argmax(structure, pot, v, features, mu, lengths)
    for i in range(2):
        ln = int(lengths[i])
        ys = all_labelings(ln)
        full = torch.zeros(len(ys), n, dtype=torch.long)
        full[:, :ln] = ys
        lens = torch.full((len(ys),), ln)
        s = structure.score(pot[i : i + 1].expand(len(ys), -1, -1, -1), full, lens)
        phi = cset.indicators(full, lens, [tokens[i]] * len(ys)).to(D)
        phi = torch.cat([phi, torch.ones(len(ys), n - phi.shape[1], dtype=D)], 1) if phi.shape[1] < v.shape[1] else phi
        obj = s - mu / 4 * ((v[i] - phi) ** 2).sum(1)
        best = obj.argmax()
        got = (full == guided[i]).all(1).nonzero()[0, 0]
        torch.testing.assert_close(obj[got], obj[best])


def test_gamma_loss_runs_on_indicator_features():
    n = 3
    structure = LinearChain(C)
    tokens = [random_tokens(n, 1), random_tokens(n, 2)]
    lengths = torch.tensor([3, 2])
    cset = ConstraintSet([make("punct"), make("words")])
    features = cset.indicator_features(tokens, lengths, C, dtype=D)
    pot = torch.randn(2, n, C, C, dtype=D, requires_grad=True)
    v = torch.ones(2, features.num_constraints, dtype=D, requires_grad=True)
    loss = QuadraticPenaltyGammaLoss(1.0, L1Penalty(torch.ones(features.num_constraints, dtype=D)))
    out = loss(structure, pot, v, features, lengths)
    out.backward()
    assert torch.isfinite(out) and pot.grad is not None and v.grad is not None


@pytest.mark.parametrize("hard", [False, True])
def test_kbest_search_matches_brute_force(hard):
    torch.manual_seed(0)
    n = 4
    structure = LinearChain(C)
    con = ConsecutiveFields(hard=hard).bind(LABELS)
    pot = torch.randn(3, n, C, C, dtype=D)
    lengths = torch.tensor([4, 4, 3])
    coef = torch.tensor([2.0, 0.5, 1.0], dtype=D)

    def bonus(labels, lens):
        rep = coef.repeat_interleave(labels.shape[0] // 3)
        return rep * con.indicators(labels, lens).view(-1).to(D)

    reject = (lambda y, ln: con.violation(y, ln) > 0) if hard else None
    res = kbest_search(structure, pot, lengths, bonus, coef.clamp(min=0), k=C**n, reject=reject)
    assert bool(res.certified.all()) and bool(res.feasible.all())
    for i in range(3):
        ln = int(lengths[i])
        ys = all_labelings(ln)
        full = torch.zeros(len(ys), n, dtype=torch.long)
        full[:, :ln] = ys
        lens = torch.full((len(ys),), ln)
        s = structure.score(pot[i : i + 1].expand(len(ys), -1, -1, -1), full, lens)
        ind = con.indicators(full, lens).view(-1).to(D)
        obj = s + coef[i] * ind
        if hard:
            obj = obj.masked_fill(ind == 0, float("-inf"))
        torch.testing.assert_close(res.value[i], obj.max())


def test_kbest_search_small_k_certificate_is_sound():
    torch.manual_seed(1)
    n, structure = 5, LinearChain(C)
    con = ConsecutiveFields().bind(LABELS)
    pot = torch.randn(4, n, C, C, dtype=D) * 3
    lengths = torch.full((4,), n)
    coef = torch.full((4,), 1.0, dtype=D)

    def bonus(labels, lens):
        return con.indicators(labels, lens).view(-1).to(D)

    small = kbest_search(structure, pot, lengths, bonus, coef, k=3)
    exact = kbest_search(structure, pot, lengths, bonus, coef, k=C**n)
    assert bool((small.value <= exact.value + 1e-9).all())
    certified = small.certified
    torch.testing.assert_close(small.value[certified], exact.value[certified])


def test_runs_per_label():
    labels = torch.tensor([[0, 0, 1, 0, 2], [1, 1, 1, 0, 0]])
    lengths = torch.tensor([5, 3])
    assert runs_per_label(labels, lengths, 3).tolist() == [[2, 1, 1], [0, 1, 0]]


# ---------------------------------------------------------------------- construction
def test_yaml_construction_via_jsonargparse():
    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_argument("--constraints", type=ConstraintSet)
    yaml = """
constraints:
  class_path: structssl.constraints.ConstraintSet
  init_args:
    labels: [a, b, c]
    constraints:
      - class_path: structssl.constraints.AtMostOnce
        init_args: {label: a}
      - class_path: structssl.constraints.WordLabels
        init_args: {words: [ca], labels: [c]}
      - class_path: structssl.constraints.LabelProportion
        init_args: {label: b, target: 0.3}
"""
    cfg = parser.parse_string(yaml)
    cset = parser.instantiate(cfg).constraints
    assert isinstance(cset, ConstraintSet) and len(cset) == 3
    assert cset.names == ["AtMostOnce(a)", "WordLabels(ca -> c)", "LabelProportion(b)"]
    counts = cset.counts(torch.tensor([[0, 1, 0]]), torch.tensor([3]), [["ca", "x", "y"]])
    assert counts.tolist() == [[2.0, 1.0, 1.0, 3.0]]


def test_concat_features_shapes():
    tokens, lengths = [random_tokens(3, 5)], torch.tensor([3])
    a = make("punct").indicator_features(tokens, lengths, C, dtype=D)
    b = make("first").indicator_features(tokens, lengths, C, dtype=D)
    cat = ConcatFeatures([a, b])
    assert cat.num_constraints == 4 and cat.binary
    out = cat.adjoint(torch.ones(1, 4, dtype=D), torch.zeros(1, 3, C, C, dtype=D))
    assert out.shape == (1, 3, C, C)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: AtMostOnce("zzz").bind(LABELS), "unknown label 'zzz'"),
        (lambda: ConstraintSet([MustAppear("nope")], labels=LABELS), "unknown label 'nope'"),
        (lambda: AllowedFirst(7).bind(LABELS), "label index 7 out of range"),
        (lambda: WordLabels(labels=["a"], words=[]), "words must be a non-empty list"),
        (lambda: WordLabels(labels=["a"]), "needs words or a pattern"),
        (lambda: WordLabels(labels=["a"], pattern="("), "pattern is not a valid regular expression"),
        (lambda: WordLabels(labels=[], words=["x"]), "labels must be a non-empty list"),
        (lambda: LabelProportion("a", 1.5), r"target must be a proportion in \[0, 1\]"),
        (lambda: LabelProportion("a", -0.1), r"target must be a proportion in \[0, 1\]"),
        (lambda: LabelProportion("a", 0.3, bound="gt"), "bound must be one of"),
        (lambda: TransitionFraction(2.0), r"target must be a fraction in \[0, 1\]"),
        (lambda: ExpectedCount("a", -1.0), "target must be an expected count >= 0"),
        (lambda: MustAppear("a", min_count=0), "min_count must be an int >= 1"),
        (lambda: MustAppear("a", weight=-1.0), "weight must be a number >= 0"),
        (lambda: AtMostOnce(["a", "b"]), "label must be one label name"),
        (lambda: PunctuationTransitions(punctuation=[]), "punctuation must be a non-empty list"),
        (lambda: PunctuationTransitions(side="middle"), "side must be one of"),
        (lambda: MustAppear("a").bind([]), "labels must be a non-empty list of label names"),
    ],
)
def test_bad_specs(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_bad_calls():
    con = AtMostOnce("a")
    with pytest.raises(ValueError, match="not bound to a label list"):
        con.counts(torch.zeros(1, 2, dtype=torch.long), torch.tensor([2]))
    bound = con.bind(LABELS)
    with pytest.raises(ValueError, match="labels must be a long tensor of shape"):
        bound.counts(torch.zeros(2), torch.tensor([2]))
    with pytest.raises(ValueError, match=r"lengths must have shape \(B,\)"):
        bound.counts(torch.zeros(1, 2, dtype=torch.long), torch.tensor([2, 2]))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, N\]"):
        bound.counts(torch.zeros(1, 2, dtype=torch.long), torch.tensor([3]))
    words = make("words")
    with pytest.raises(ValueError, match="tokens are required"):
        words.counts(torch.zeros(1, 2, dtype=torch.long), torch.tensor([2]))
    with pytest.raises(ValueError, match="tokens must hold B = 1"):
        words.counts(torch.zeros(1, 2, dtype=torch.long), torch.tensor([2]), [["x"], ["y"]])
    with pytest.raises(ValueError, match="has 1 tokens, fewer than its length 2"):
        words.counts(torch.zeros(1, 2, dtype=torch.long), torch.tensor([2]), [["x"]])
    with pytest.raises(ValueError, match="num_labels must equal"):
        words.features([["x"]], torch.tensor([1]), 5)
    with pytest.raises(TypeError, match="constraints must be a list of Constraint"):
        ConstraintSet(AtMostOnce("a"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"constraints\[0\] must be a Constraint"):
        ConstraintSet(["x"])  # type: ignore[list-item]
    with pytest.raises(NotImplementedError, match="are not linear in the parts"):
        ConstraintSet([make("consecutive")]).features(None, torch.tensor([1]), C)
    with pytest.raises(TypeError, match="hard must be a bool"):
        AtMostOnce("a", hard="yes")  # type: ignore[arg-type]


# ---------------------------------------------------------------- label patterns
_SCHEME_NAMES = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC", "L-ORG", "U-ORG"]


def test_label_patterns_expand_over_the_bound_tag_set():
    """``fnmatch`` patterns resolve to every matching name in label order, each once, mixed
    with plain names; the same configuration binds to BIO and BIOES tag sets."""
    inside = WordLabels(labels=["O", "[!BSU]-*", "O"], pattern="[a-z].*", lowercase=False)
    assert inside.bind(_SCHEME_NAMES).indices == [0, 2, 4, 5, 7]
    assert inside.bind(["O", "B-X", "I-X"]).indices == [0, 2]
    assert LabelProportion(label="B-*", target=0.1).bind(_SCHEME_NAMES).indices == [1, 3]
    assert ConsecutiveFields(labels=["*-LOC"]).bind(_SCHEME_NAMES).indices == [3, 4, 5, 6]
    # a name that looks like a pattern is taken literally when it is a label
    assert WordLabels(labels=["[x]"], words=["a"]).bind(["O", "[x]", "x"]).indices == [1]


def test_label_pattern_matching_nothing_is_an_error_naming_the_labels():
    con = WordLabels(labels=["X-*"], words=["a"])
    with pytest.raises(ValueError, match=r"pattern 'X-\*' matches no label of \['O', 'B-PER'"):
        con.bind(_SCHEME_NAMES)


def test_label_pattern_constraint_counts_like_the_explicit_list():
    """A pattern and the explicit list it expands to give the same counts on every labeling."""
    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    tokens = [["ana", "Vive", "en", "la", "Paz"]]
    lengths = torch.tensor([5])
    by_pattern = WordLabels(labels=["O", "I-*"], pattern="[a-z].*", lowercase=False).bind(names)
    explicit = WordLabels(labels=["O", "I-PER", "I-LOC"], pattern="[a-z].*", lowercase=False).bind(names)
    for labels in itertools.product(range(len(names)), repeat=5):
        y = torch.tensor([labels])
        assert torch.equal(by_pattern.counts(y, lengths, tokens), explicit.counts(y, lengths, tokens))


def test_a_label_ratio_over_every_label_is_refused_at_bind():
    """'[!O]*' on a tag set without O matches every label: the ratio is always 1, so the
    constraint could do nothing; bind says so instead of estimating a target of 1."""
    from structssl.constraints import ExpectedCount, LabelProportion

    with pytest.raises(ValueError, match=r"LabelProportion\(\[!O\]\*\): the label spec \['\[!O\]\*'\] "
                                         r"matches every label \['NUM', 'CITY'\]"):
        LabelProportion("[!O]*", target=0.3).bind(["NUM", "CITY"])
    with pytest.raises(ValueError, match="matches every label"):
        ExpectedCount(["a", "b"], target=2.0).bind(["a", "b"])
    assert LabelProportion("[!O]*", target=0.3).bind(["O", "B-X", "I-X"]).indices == [1, 2]


def test_a_users_constraint_with_counts_only_is_searched_not_linearised() -> None:
    """A subclass that implements only ``_counts`` (the minimal protocol) is not linear:
    ConstraintSet searches rerank k-best labelings for it (it crashed with a bare
    NotImplementedError when linear_counts defaulted to True); one that declares
    linear_counts without weights is told what is missing."""

    class NoLabelTwice(Constraint):
        def __init__(self, labels: object) -> None:
            super().__init__()
            self._set_labels(labels)

        def _counts(self, labels, lengths, tokens):  # type: ignore[no-untyped-def]
            hits = (labels == self.indices[0]) & (torch.arange(labels.shape[1]) < lengths[:, None])
            return (hits.sum(1) > 1).view(-1, 1)

    class Declared(NoLabelTwice):
        linear_counts = True

    assert NoLabelTwice.linear_counts is False and Declared.linear_counts is True
    rule = ConstraintSet([NoLabelTwice("b")]).bind(["a", "b", "c"])
    potentials = torch.zeros(1, 3, 3, 3)
    lengths = torch.tensor([3])
    folded, left = rule.fold_penalties(potentials, lengths)  # not folded: left to a search
    assert torch.equal(folded, potentials) and left.names == rule.names
    assert rule.counts(torch.tensor([[1, 0, 1]]), lengths).tolist() == [[1.0]]
    with pytest.raises(NotImplementedError, match=r"linear_counts is set, but neither "
                       r"_count_node_weights nor _count_weights gives the counts as weights"):
        Declared("b").bind(["a", "b", "c"]).features(None, lengths)
    # CoDL takes it (its guided search reranks k-best labelings with the counts)
    from structssl.scorers import LinearChainScorer
    from structssl.training import CoDLModule

    CoDLModule(LinearChain(3), LinearChainScorer(3, input_dim=2), ConstraintSet([NoLabelTwice("b")]))
