"""CKY against brute-force enumeration of all labelled binary trees, torch-struct; errors."""

from __future__ import annotations

import itertools
import warnings
from functools import cache

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from oracle import check_structure
from structssl.semirings import LOG_ZERO
from structssl.structures.cky import CKY, CKYPotentials

F64 = torch.float64


# ---------------------------------------------------------------------- brute force
@cache
def _bracketings(i: int, j: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Every binary bracketing of [i, j] as its spans in pre-order."""
    if i == j:
        return (((i, i),),)
    out = []
    for k in range(i, j):
        for left in _bracketings(i, k):
            for right in _bracketings(k + 1, j):
                out.append(((i, j),) + left + right)
    return tuple(out)


def _all_trees(n: int, num_symbols: int, max_length: int) -> torch.Tensor:
    """All labelled trees of length n, padded to 2 * max_length - 1 rows. (T, 2N - 1, 3)"""
    trees = []
    for spans in _bracketings(0, n - 1):
        for syms in itertools.product(range(num_symbols), repeat=len(spans)):
            rows = [[i, j, a] for (i, j), a in zip(spans, syms)]
            rows += [[0, 0, 0]] * (2 * max_length - 1 - len(rows))
            trees.append(rows)
    return torch.tensor(trees, dtype=torch.long)


def _expand(potentials: CKYPotentials, b: int, t: int) -> CKYPotentials:
    return CKYPotentials(*[x[b : b + 1].expand(t, *x.shape[1:]) for x in potentials])


def _span_set(tree: torch.Tensor, n: int) -> set[tuple[int, int, int]]:
    return {tuple(r) for r in tree[: 2 * n - 1].tolist()}


def _random_potentials(
    batch: int, n: int, nt: int, g: torch.Generator, scale: float = 1.0
) -> CKYPotentials:
    return CKYPotentials(
        scale * torch.randn(batch, n, nt, generator=g, dtype=F64),
        scale * torch.randn(batch, nt, nt, nt, generator=g, dtype=F64),
        scale * torch.randn(batch, nt, generator=g, dtype=F64),
        scale * torch.randn(batch, n, n, nt, generator=g, dtype=F64),
    )


def _close(a: torch.Tensor, b: torch.Tensor, msg: str = "") -> None:
    torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7, msg=msg)


def _check_against_enumeration(
    cky: CKY, pot: CKYPotentials, lengths: torch.Tensor, k: int, seed: int
) -> None:
    batch, n_max, nt = pot.terms.shape
    log_z = cky.log_partition(pot, lengths)
    marg = cky.marginals(pot, lengths)
    best_labels, best_scores = cky.argmax(pot, lengths)
    kb_labels, kb_scores = cky.kbest(pot, k, lengths)
    kmax = cky.kmax(pot, k, lengths)
    smooth = cky.smoothed_max(pot, 0.5, lengths)
    g = torch.Generator().manual_seed(seed)
    for b in range(batch):
        n = int(lengths[b])
        where = f"example {b}, length {n}"
        trees = _all_trees(n, nt, n_max)
        t = trees.shape[0]
        pot_b = _expand(pot, b, t)
        len_b = torch.full((t,), n)
        scores = cky.score(pot_b, trees, len_b)
        parts = cky.to_parts(trees, len_b)
        # score is the dot product of potentials and parts
        dot = sum((p.to(F64) * x).flatten(1).sum(1) for p, x in zip(parts, pot_b))
        _close(scores, dot, f"score vs dot, {where}")
        _close(log_z[b], torch.logsumexp(scores, 0), f"log_partition, {where}")
        _close(smooth[b], 0.5 * torch.logsumexp(scores / 0.5, 0), f"smoothed_max, {where}")
        probs = torch.softmax(scores, 0)
        for i, m in enumerate(marg):
            expected = (probs.view(-1, *[1] * (m.dim() - 1)) * parts[i].to(F64)).sum(0)
            _close(m[b], expected, f"marginals[{CKYPotentials._fields[i]}], {where}")
        order = scores.sort(descending=True)
        _close(best_scores[b], order.values[0], f"max, {where}")
        _close(cky.max(pot, lengths)[b], order.values[0], f"max, {where}")
        assert torch.equal(best_labels[b], trees[order.indices[0]]), f"argmax labels, {where}"
        top = torch.full((k,), float("-inf"), dtype=F64)
        top[: min(k, t)] = order.values[:k]
        _close(kb_scores[b], top, f"kbest scores, {where}")
        _close(kmax[b], top, f"kmax, {where}")
        real = kb_labels[b, : min(k, t)]
        _close(
            cky.score(_expand(pot, b, real.shape[0]), real, len_b[: real.shape[0]]),
            top[: real.shape[0]],
        )
        assert len({tuple(y.flatten().tolist()) for y in real}) == real.shape[0], (
            f"kbest distinct, {where}"
        )
        # round trips on every tree: parts and bracketed strings
        assert torch.equal(cky.from_parts(parts, len_b), trees), f"from_parts(to_parts), {where}"
        assert torch.equal(cky.from_parts(parts), trees), f"from_parts without lengths, {where}"
        symbols = [f"X{a}" for a in range(nt)]
        strings = CKY.to_bracketed(trees, len_b, symbols)
        back, back_len = CKY.from_bracketed(strings, symbols)
        assert torch.equal(back, trees[:, : 2 * n - 1]) and torch.equal(back_len, len_b)
        # cost-augmented decoding against enumeration, Hamming counted on span sets
        target = trees[int(torch.randint(0, t, (1,), generator=g))].unsqueeze(0)
        gold = _span_set(target[0], n)
        ham = torch.tensor([2 * n - 1 - len(_span_set(y, n) & gold) for y in trees], dtype=F64)
        _close(
            cky.hamming(target.expand(t, -1, -1), trees, len_b).to(F64), ham, f"hamming, {where}"
        )
        one = _expand(pot, b, 1)
        lab, aug = cky.cost_augmented_argmax(one, target, len_b[:1], cost="hamming")
        _close(aug[0], (scores + ham).max(), f"hamming cost-augmented argmax, {where}")
        assert torch.equal(lab[0], trees[(scores + ham).argmax()])
        zero_one = (ham > 0).to(F64)
        lab01, aug01 = cky.cost_augmented_argmax(one, target, len_b[:1], cost="zero_one")
        _close(aug01[0], (scores + zero_one).max(), f"0/1 cost-augmented argmax, {where}")
        _close(
            cky.score(one, lab01, len_b[:1])[0] + zero_one[(trees == lab01).flatten(1).all(1)][0],
            aug01[0],
        )
        _, augk = cky.cost_augmented_kbest(one, target, 2, len_b[:1], cost="zero_one")
        others = (scores[zero_one > 0] + 1).sort(descending=True).values
        expect = torch.full((2,), float("-inf"), dtype=F64)
        expect[: min(2, len(others))] = others[:2]
        _close(augk[0], expect, f"0/1 cost-augmented kbest, {where}")


@given(
    batch=st.integers(1, 3),
    max_length=st.integers(1, 4),
    num_symbols=st.integers(1, 3),
    seed=st.integers(0, 10_000),
)
def test_cky_matches_enumeration(batch: int, max_length: int, num_symbols: int, seed: int) -> None:
    if max_length == 4:
        num_symbols = min(num_symbols, 2)  # keep the enumeration small (5 * 2^7 trees)
    g = torch.Generator().manual_seed(seed)
    pot = _random_potentials(batch, max_length, num_symbols, g)
    lengths = torch.randint(1, max_length + 1, (batch,), generator=g)
    _check_against_enumeration(CKY(num_symbols), pot, lengths, k=6, seed=seed)


def test_cky_with_project_oracle() -> None:
    g = torch.Generator().manual_seed(3)
    pot = _random_potentials(3, 3, 2, g)
    lengths = torch.tensor([3, 1, 2])

    def labels_of(b: int):
        return iter(_all_trees(int(lengths[b]), 2, 3))

    check_structure(CKY(2), pot, lengths, labels_of, k=5)


def test_length_one_is_a_single_leaf_root() -> None:
    cky = CKY(3)
    g = torch.Generator().manual_seed(0)
    pot = _random_potentials(2, 3, 3, g)
    lengths = torch.tensor([1, 1])
    expected = torch.logsumexp(pot.terms[:, 0] + pot.spans[:, 0, 0] + pot.roots, dim=1)
    _close(cky.log_partition(pot, lengths), expected)
    labels, _ = cky.argmax(pot, lengths)
    assert labels.shape == (2, 5, 3) and (labels[:, 1:] == 0).all()
    assert torch.equal(
        labels[:, 0, 2], (pot.terms[:, 0] + pot.spans[:, 0, 0] + pot.roots).argmax(1)
    )


def test_kbest_beyond_the_number_of_trees_is_minus_inf() -> None:
    cky = CKY(1)  # one symbol: the trees are the 5 bracketings of 4 words
    pot = CKYPotentials(
        *[torch.zeros(s, dtype=F64) for s in [(2, 4, 1), (2, 1, 1, 1), (2, 1), (2, 4, 4, 1)]]
    )
    labels, scores = cky.kbest(pot, 8, torch.tensor([4, 2]))
    assert (scores[0, :5] == 0).all() and torch.isneginf(scores[0, 5:]).all()
    assert (scores[1, :1] == 0).all() and torch.isneginf(scores[1, 1:]).all()
    assert len({tuple(y.flatten().tolist()) for y in labels[0, :5]}) == 5
    _close(cky.kmax(pot, 8, torch.tensor([4, 2])), scores)


def test_inference_mode_and_no_input_mutation() -> None:
    cky = CKY(3)
    g = torch.Generator().manual_seed(1)
    pot = _random_potentials(3, 5, 3, g)
    copies = [x.clone() for x in pot]
    lengths = torch.tensor([5, 2, 4])
    expected, expected_scores = cky.argmax(pot, lengths)
    with torch.inference_mode():
        labels, scores = cky.argmax(pot, lengths)
        kb, _ = cky.kbest(pot, 3, lengths)
    assert torch.equal(labels, expected) and torch.equal(kb[:, 0], expected)
    _close(scores, expected_scores)
    _close(scores, cky.max(pot, lengths))
    for x, c in zip(pot, copies):
        assert torch.equal(x, c) and not x.requires_grad


def test_argmax_scores_are_differentiable() -> None:
    cky = CKY(2)
    g = torch.Generator().manual_seed(2)
    pot = CKYPotentials(*[x.requires_grad_() for x in _random_potentials(2, 4, 2, g)])
    labels, scores = cky.argmax(pot)
    grads = torch.autograd.grad(scores.sum(), list(pot))
    parts = cky.to_parts(labels)
    for gr, p in zip(grads, parts):
        _close(gr, p.to(F64))


def test_masked_parts_get_zero_marginals_and_finite_gradients() -> None:
    cky = CKY(3)
    g = torch.Generator().manual_seed(4)
    pot = _random_potentials(2, 4, 3, g)
    # grammar: symbol 0 is the only root and never a leaf; symbol 2 is never a left child
    rules_ok = torch.ones(3, 3, 3, dtype=torch.bool)
    rules_ok[:, 2, :] = False
    allowed = CKYPotentials(
        torch.tensor([False, True, True]).expand(2, 4, 3),
        rules_ok.expand(2, 3, 3, 3),
        torch.tensor([True, False, False]).expand(2, 3),
        torch.ones(2, 4, 4, 3, dtype=torch.bool),
    )
    masked = cky.mask_potentials(pot, allowed)
    lengths = torch.tensor([4, 3])
    marg = cky.marginals(masked, lengths)
    for m, a in zip(marg, allowed):
        assert torch.isfinite(m).all()
        assert (m[~a.expand_as(m)] == 0).all()
    inputs = [x.clone().requires_grad_() for x in masked]
    cky.log_partition(CKYPotentials(*inputs), lengths).sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in inputs)
    # padding (past lengths) and spans with i > j get zero marginals
    assert (marg.spans[1, 3:] == 0).all() and (marg.spans[1, :, 3:] == 0).all()
    assert (marg.spans[:, torch.ones(4, 4).tril(-1).bool()] == 0).all()
    # a fully masked grammar for some length still gives finite values
    labels, _ = cky.argmax(masked, lengths)
    assert (labels[:, 0, 2] == 0).all()


def test_marginals_are_twice_differentiable() -> None:
    cky = CKY(2)
    g = torch.Generator().manual_seed(6)
    pot = _random_potentials(2, 3, 2, g)
    lengths = torch.tensor([3, 2])

    def log_z(terms: torch.Tensor, rules: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        return cky.log_partition(CKYPotentials(terms, rules, pot.roots, spans), lengths)

    inputs = (
        pot.terms.clone().requires_grad_(),
        pot.rules.clone().requires_grad_(),
        pot.spans.clone().requires_grad_(),
    )
    assert torch.autograd.gradgradcheck(log_z, inputs)
    marg = cky.marginals(
        CKYPotentials(inputs[0], inputs[1], pot.roots, inputs[2]), lengths, create_graph=True
    )
    (second,) = torch.autograd.grad(marg.spans[:, 0, 2].sum(), inputs[0])
    assert torch.isfinite(second).all()


def test_potentials_from_broadcasts_and_fills_zeros() -> None:
    g = torch.Generator().manual_seed(5)
    terms = torch.randn(2, 3, 4, generator=g, dtype=F64)
    rules = torch.randn(4, 4, 4, generator=g, dtype=F64)
    roots = torch.randn(4, generator=g, dtype=F64)
    pot = CKY.potentials_from(terms, rules, roots)
    assert pot.rules.shape == (2, 4, 4, 4) and torch.equal(pot.rules[1], rules)
    assert torch.equal(pot.roots[0], roots) and torch.equal(
        pot.spans, torch.zeros(2, 3, 3, 4, dtype=F64)
    )
    full = CKY.potentials_from(
        terms, rules.expand(2, 4, 4, 4).clone(), spans=torch.ones(2, 3, 3, 4, dtype=F64)
    )
    assert torch.equal(full.roots, torch.zeros(2, 4, dtype=F64))
    cky = CKY(4)
    _close(cky.log_partition(pot), cky.log_partition(CKYPotentials(*[x.contiguous() for x in pot])))
    with pytest.raises(ValueError, match=r"terms must have shape \(B, N, NT\); got \(3, 4\)"):
        CKY.potentials_from(terms[0], rules)
    with pytest.raises(
        ValueError, match=r"rules must have shape \(NT, NT, NT\) or \(B, NT, NT, NT\)"
    ):
        CKY.potentials_from(terms, rules[:3])
    with pytest.raises(ValueError, match=r"rules must have batch size B = 2"):
        CKY.potentials_from(terms, rules.expand(3, 4, 4, 4))
    with pytest.raises(
        ValueError, match=r"roots must have shape \(NT,\) or \(B, NT\) = \(2, 4\); got \(5,\)"
    ):
        CKY.potentials_from(terms, rules, torch.zeros(5))
    with pytest.raises(ValueError, match=r"spans must have shape \(B, N, N, NT\) = \(2, 3, 3, 4\)"):
        CKY.potentials_from(terms, rules, spans=torch.zeros(2, 3, 4))


def test_hamming_cost_counts_unmatched_labelled_spans() -> None:
    symbols = ["S", "NP", "VP", "D", "N", "V"]
    cky = CKY(len(symbols))
    gold, lengths = CKY.from_bracketed(["(S (NP (D the) (N dog)) (V ran))"], symbols)
    other, _ = CKY.from_bracketed(["(S (D the) (VP (N dog) (V ran)))"], symbols)
    assert int(cky.hamming(gold, other, lengths)[0]) == 1  # 5 spans, 4 shared (all but NP)
    assert int(cky.hamming(gold, gold, lengths)[0]) == 0
    cost = cky.hamming_potentials(gold, lengths)
    assert cost.spans.sum() == 6 * 6 - 5  # 6 spans i <= j times 6 symbols, minus the 5 of gold
    assert (cost.terms == 0).all() and (cost.rules == 0).all() and (cost.roots == 0).all()


def test_bracketed_round_trip_and_words() -> None:
    symbols = ["S", "NP", "VP", "D", "N", "V"]
    strings = ["(S (NP (D the) (N dog)) (V ran))", "(N dogs)", "(S (N dogs) (V ran))"]
    labels, lengths = CKY.from_bracketed(strings, symbols)
    assert labels.shape == (3, 5, 3) and lengths.tolist() == [3, 1, 2]
    assert labels[0].tolist() == [[0, 2, 0], [0, 1, 1], [0, 0, 3], [1, 1, 4], [2, 2, 5]]
    assert (labels[1, 1:] == 0).all()
    words = CKY.words_from_bracketed(strings, symbols)
    assert words[0] == ["the", "dog", "ran"]
    assert CKY.to_bracketed(labels, lengths, symbols, words) == strings
    assert CKY.to_bracketed(labels, None, symbols)[0] == "(S (NP (D 0) (N 1)) (V 2))"
    cky = CKY(len(symbols))
    parts = cky.to_parts(labels)
    assert parts.rules[0, 0, 1, 5] == 1 and parts.rules[0, 1, 3, 4] == 1 and parts.rules.sum() == 3
    assert parts.terms[1, 0, 4] == 1 and parts.roots[1, 4] == 1 and parts.terms.sum() == 6


@pytest.mark.parametrize(
    "text, message",
    [
        ("", r"strings\[0\]: expected a tree"),
        ("(S (D the) (N dog)", r"strings\[0\]: unbalanced '\(': missing '\)' at position 18"),
        ("(S (D the) (N dog)))", r"strings\[0\]: unbalanced '\)' at position 19"),
        ("(S (D the))", r"node 'S' opened at position 0 has 1 child\(ren\) \(expected 2"),
        (
            "(S (D a) (N b) (V c))",
            r"node 'S' opened at position 0 has more than 2 children.* at position 15",
        ),
        ("(S (X the) (N dog))", r"unknown symbol 'X' \(not in symbols\) at position 4"),
        ("(S (D the dog) (N dog))", r"expected '\)' after the word of leaf 'D' at position 10"),
        ("((D the) (N dog))", r"expected a symbol after '\(' at position 1"),
        ("(S)", r"node 'S' has no children or word at position 2"),
        ("(N dog) (N cat)", r"unexpected text after the end of the tree at position 8"),
        ("S (N dog)", r"expected '\(' but found 'S' at position 0"),
    ],
)
def test_from_bracketed_errors(text: str, message: str) -> None:
    symbols = ["S", "NP", "VP", "D", "N", "V"]
    with pytest.raises(ValueError, match=message):
        CKY.from_bracketed(["(N ok)", text][1:], symbols)
    with pytest.raises(ValueError, match=r"strings\[1\]"):
        CKY.from_bracketed(["(N ok)", text], symbols)


def test_from_bracketed_argument_errors() -> None:
    with pytest.raises(ValueError, match="strings must contain at least one tree"):
        CKY.from_bracketed([], ["S"])
    with pytest.raises(ValueError, match="symbols must be distinct"):
        CKY.from_bracketed(["(S a)"], ["S", "S"])
    with pytest.raises(TypeError, match="strings must be a sequence of strings"):
        CKY.from_bracketed("(S a)", ["S"])


# ---------------------------------------------------------------------- torch-struct
def _torch_struct():
    return pytest.importorskip("torch_struct")


def test_log_partition_and_max_match_torch_struct_sentcfg() -> None:
    ts = _torch_struct()
    g = torch.Generator().manual_seed(7)
    b, n, nt_ts, t = 3, 5, 2, 3
    terms = torch.randn(b, n, t, generator=g, dtype=F64)
    rules = torch.randn(b, nt_ts, nt_ts + t, nt_ts + t, generator=g, dtype=F64)
    roots = torch.randn(b, nt_ts, generator=g, dtype=F64)
    lengths = torch.tensor([5, 3, 2])
    # our symbols: torch-struct's nonterminals, then its preterminals (the only leaves)
    nt = nt_ts + t
    ours_terms = torch.cat([torch.full((b, n, nt_ts), LOG_ZERO, dtype=F64), terms], dim=2)
    ours_rules = torch.cat([rules, torch.full((b, t, nt, nt), LOG_ZERO, dtype=F64)], dim=1)
    ours_roots = torch.cat([roots, torch.full((b, t), LOG_ZERO, dtype=F64)], dim=1)
    pot = CKY.potentials_from(ours_terms, ours_rules, ours_roots)
    cky = CKY(nt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist = ts.SentCFG((terms.clone(), rules.clone(), roots.clone()), lengths=lengths)
        expected_z, expected_max = dist.partition.detach(), dist.max.detach()
    _close(cky.log_partition(pot, lengths), expected_z)
    _close(cky.max(pot, lengths), expected_max)


def test_span_potentials_match_torch_struct_treecrf() -> None:
    ts = _torch_struct()
    g = torch.Generator().manual_seed(8)
    b, n, nt = 3, 6, 3
    spans = torch.randn(b, n, n, nt, generator=g, dtype=F64)
    lengths = torch.tensor([6, 4, 1])
    pot = CKYPotentials(
        torch.zeros(b, n, nt, dtype=F64),
        torch.zeros(b, nt, nt, nt, dtype=F64),
        torch.zeros(b, nt, dtype=F64),
        spans,
    )
    cky = CKY(nt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist = ts.TreeCRF(spans.clone(), lengths=lengths)
        expected_z, expected_max = dist.partition.detach(), dist.max.detach()
        expected_marg = dist.marginals.detach()
    _close(cky.log_partition(pot, lengths), expected_z)
    _close(cky.max(pot, lengths), expected_max)
    marg = cky.marginals(pot, lengths).spans
    upper = torch.ones(n, n).triu().bool()
    _close(marg[:, upper], expected_marg[:, upper])


# ---------------------------------------------------------------------- errors
def _pot(b: int = 2, n: int = 3, nt: int = 2) -> CKYPotentials:
    return CKYPotentials(
        torch.zeros(b, n, nt),
        torch.zeros(b, nt, nt, nt),
        torch.zeros(b, nt),
        torch.zeros(b, n, n, nt),
    )


def test_constructor_errors() -> None:
    with pytest.raises(ValueError, match="num_symbols must be an int >= 1; got 0"):
        CKY(0)
    assert repr(CKY(3)) == "CKY(num_symbols=3)"


def test_potential_shape_errors() -> None:
    cky = CKY(2)
    with pytest.raises(TypeError, match="CKY potentials must be a CKYPotentials"):
        cky.log_partition(torch.zeros(2, 3, 2))
    with pytest.raises(TypeError, match="got 3 tensors"):
        cky.log_partition(tuple(_pot())[:3])
    p = _pot()
    with pytest.raises(
        ValueError,
        match=r"potentials.terms must have shape \(B, N, NT\) with NT = num_symbols = 2; "
        r"got \(2, 3, 3\)",
    ):
        cky.log_partition(p._replace(terms=torch.zeros(2, 3, 3)))
    with pytest.raises(
        ValueError, match=r"potentials.rules must have shape \(2, 2, 2, 2\).*got \(2, 2, 2\)"
    ):
        cky.log_partition(p._replace(rules=torch.zeros(2, 2, 2)))
    with pytest.raises(
        ValueError, match=r"potentials.roots must have shape \(2, 2\).*got \(1, 2\)"
    ):
        cky.log_partition(p._replace(roots=torch.zeros(1, 2)))
    with pytest.raises(
        ValueError, match=r"potentials.spans must have shape \(2, 3, 3, 2\).*got \(2, 3, 2, 2\)"
    ):
        cky.log_partition(p._replace(spans=torch.zeros(2, 3, 2, 2)))
    with pytest.raises(
        ValueError, match=r"potentials.roots must have the dtype and device of terms"
    ):
        cky.log_partition(p._replace(roots=torch.zeros(2, 2, dtype=F64)))
    with pytest.raises(ValueError, match="potentials.terms must have N >= 1 positions"):
        cky.log_partition(
            CKYPotentials(torch.zeros(2, 0, 2), p.rules, p.roots, torch.zeros(2, 0, 0, 2))
        )
    with pytest.raises(ValueError, match="non-empty batch dimension"):
        cky.log_partition(_pot(b=0))
    with pytest.raises(ValueError, match="potentials contain NaN"):
        cky.argmax(p._replace(rules=torch.full((2, 2, 2, 2), float("nan"))))


def test_lengths_errors() -> None:
    cky = CKY(2)
    with pytest.raises(
        ValueError, match=r"lengths must be in \[1, N\] = \[1, 3\].*got values in \[0, 2\]"
    ):
        cky.log_partition(_pot(), torch.tensor([0, 2]))
    with pytest.raises(
        ValueError, match=r"lengths must be in \[1, N\] = \[1, 3\].*got values in \[1, 4\]"
    ):
        cky.argmax(_pot(), torch.tensor([1, 4]))
    with pytest.raises(ValueError, match=r"lengths must have shape \(B,\) = \(2,\); got \(3,\)"):
        cky.log_partition(_pot(), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="lengths must have an integer dtype"):
        cky.log_partition(_pot(), torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="lengths must be a torch.Tensor"):
        cky.log_partition(_pot(), [1, 2])


def test_label_errors() -> None:
    cky = CKY(2)
    pot = _pot()
    good, _ = CKY.from_bracketed(
        ["(X0 (X1 a) (X0 (X1 b) (X1 c)))", "(X0 (X1 a) (X0 b))"], ["X0", "X1"]
    )
    lengths = torch.tensor([3, 2])
    cky.score(pot, good, lengths)
    with pytest.raises(
        ValueError, match=r"labels must have shape \(B, 2N - 1, 3\) with B = 2; got \(2, 5\)"
    ):
        cky.score(pot, good[..., 0], lengths)
    with pytest.raises(ValueError, match="labels must have an integer dtype"):
        cky.score(pot, good.double(), lengths)
    with pytest.raises(ValueError, match=r"at least 2 \* max\(lengths\) - 1 = 5 rows"):
        cky.score(pot, good[:, :4], lengths)
    bad = good.clone()
    bad[0, 1, 2] = 2
    with pytest.raises(ValueError, match=r"symbol in \[0, 2\); example 0, row 1 is \(0, 0, 2\)"):
        cky.score(pot, bad, lengths)
    bad = good.clone()
    bad[1, 0, 1] = 2
    with pytest.raises(ValueError, match=r"0 <= start <= end < length .* example 1, row 0"):
        cky.score(pot, bad, lengths)
    bad = good.clone()
    bad[0, 0] = torch.tensor([0, 1, 0])
    with pytest.raises(ValueError, match=r"row 0 must be the root span .* example 0"):
        cky.score(pot, bad, lengths)
    bad = good.clone()
    bad[0, 3] = torch.tensor([2, 2, 1])  # children of (1, 2) swapped: not pre-order
    bad[0, 4] = torch.tensor([1, 1, 1])
    with pytest.raises(
        ValueError, match=r"binary tree of labelled spans in pre-order.*example 0, row 2"
    ):
        cky.score(pot, bad, lengths)
    with pytest.raises(ValueError, match=r"target must have 2N - 1 = 5 rows"):
        short, _ = CKY.from_bracketed(["(X0 (X1 a) (X0 b))"] * 2, ["X0", "X1"])  # 3 rows
        cky.cost_augmented_argmax(pot, short, torch.tensor([2, 2]))
    with pytest.raises(
        ValueError,
        match=r"labels row 0 must be the root span .* length in \[1, 3\]; got lengths in \[8, 8\]",
    ):
        cky.to_parts(torch.full((1, 5, 3), 7))
    with pytest.raises(ValueError, match=r"parts must be a CKYPotentials"):
        cky.from_parts(torch.zeros(2, 3, 3, 2))
    with pytest.raises(
        ValueError, match=r"parts.spans must have shape \(B, N, N, NT\) with NT = 2"
    ):
        cky.from_parts(pot._replace(spans=torch.zeros(2, 3, 3, 3)))
    with pytest.raises(ValueError, match=r"words\[0\] must have length 3; got 2"):
        CKY.to_bracketed(good, lengths, ["X0", "X1"], [["a", "b"], ["a", "b"]])
    # with validate=False the value checks are skipped, shapes are still checked
    CKY(2, validate=False).log_partition(_pot(), torch.tensor([1, 3]))
