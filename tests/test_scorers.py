"""Scorers: layouts, hand-computed joint-feature scores, padding, gradients, training, errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structssl.data.synthetic import correlated_multilabel, hmm_sequences, pcfg_treebank
from structssl.scorers import (
    BiLSTMEncoder,
    CKYScorer,
    LinearChainScorer,
    LinearInputs,
    MultiClassScorer,
    MultiLabelScorer,
    NeuralChainScorer,
    TwoViewPotentials,
    TwoViewScorer,
    grammar_masks,
    weight_norm_squared,
)
from structssl.semirings import LOG_ZERO
from structssl.structures import LinearChain, MultiClass
from structssl.structures.cky import CKY, CKYPotentials
from structssl.structures.multilabel import MultiLabelPotentials, PairwiseMultiLabel

F64 = torch.float64


def _sparse(b: int, n: int, f: int, num_features: int) -> torch.Tensor:
    """Random feature indices (B, N, F) with some 0 (padding) slots."""
    idx = torch.randint(1, num_features, (b, n, f))
    return torch.where(torch.rand(b, n, f) < 0.3, 0, idx)


def _phi_rows(weight: torch.Tensor, kind: str, x: torch.Tensor) -> torch.Tensor:
    """Hand-computed ``W^T phi(x)`` of one item (a row of indices, a word id or a vector)."""
    if kind == "num_features":
        return sum(
            (weight[int(f)] for f in x.tolist() if f != 0), torch.zeros(weight.shape[1], dtype=F64)
        )
    if kind == "num_words":
        return weight[int(x)]
    return x @ weight


def _chain_inputs(kind: str, b: int, n: int) -> tuple[torch.Tensor, dict[str, int]]:
    if kind == "num_features":
        return _sparse(b, n, 3, 7), {"num_features": 7}
    if kind == "num_words":
        return torch.randint(0, 5, (b, n)), {"num_words": 5}
    return torch.randn(b, n, 2, dtype=F64), {"input_dim": 2}


# ---------------------------------------------------------------------- linear chain
@pytest.mark.parametrize("kind", ["num_features", "num_words", "input_dim"])
def test_chain_score_is_hand_computed_joint_feature_score(kind: str) -> None:
    b, n, c = 3, 4, 3
    inputs, size = _chain_inputs(kind, b, n)
    lengths = torch.tensor([4, 2, 1])
    scorer = LinearChainScorer(c, **size, init_std=0.5).double()
    pot = scorer(inputs, lengths)
    assert pot.shape == (b, n, c, c) and pot.dtype == F64
    labels = torch.randint(0, c, (b, n))
    got = LinearChain(c).score(pot, labels, lengths)
    w, bias = scorer.emission.weight, scorer.emission.bias
    tr, start, end = scorer.head.transition, scorer.head.start, scorer.head.end
    for i in range(b):
        m, y = int(lengths[i]), labels[i].tolist()
        want = start[y[0]] + end[y[m - 1]]
        for t in range(m):
            want = want + _phi_rows(w, kind, inputs[i, t])[y[t]] + bias[y[t]]
            if t:
                want = want + tr[y[t - 1], y[t]]
        torch.testing.assert_close(got[i], want)
    assert bool((pot[1, 2:] == 0).all()) and bool((pot[2, 1:] == 0).all())  # padding is exactly 0


@settings(max_examples=20, deadline=None)
@given(
    b=st.integers(1, 3), n=st.integers(1, 4), c=st.integers(1, 3), f=st.integers(0, 3),
    transitions=st.booleans(), start_end=st.booleans(), bias=st.booleans(), seed=st.integers(0, 99),
)  # fmt: skip
def test_chain_hand_score_random_sizes(
    b: int, n: int, c: int, f: int, transitions: bool, start_end: bool, bias: bool, seed: int
) -> None:
    torch.manual_seed(seed)
    scorer = LinearChainScorer(
        c, num_features=6, transitions=transitions, start_end=start_end, bias=bias, init_std=1.0
    ).double()
    inputs = _sparse(b, n, f, 6)
    lengths = torch.randint(1, n + 1, (b,))
    labels = torch.randint(0, c, (b, n))
    got = LinearChain(c).score(scorer(inputs, lengths), labels, lengths)
    w = scorer.emission.weight
    for i in range(b):
        m, y = int(lengths[i]), labels[i].tolist()
        want = torch.zeros((), dtype=F64)
        for t in range(m):
            want = want + _phi_rows(w, "num_features", inputs[i, t])[y[t]]
            if bias:
                want = want + scorer.emission.bias[y[t]]
            if transitions and t:
                want = want + scorer.head.transition[y[t - 1], y[t]]
        if start_end:
            want = want + scorer.head.start[y[0]] + scorer.head.end[y[m - 1]]
        torch.testing.assert_close(got[i], want)


def test_padding_features_contribute_nothing_and_get_no_gradient() -> None:
    scorer = LinearChainScorer(3, num_features=9, init_std=1.0).double()
    inputs = _sparse(2, 4, 3, 9)
    wider = torch.cat([inputs, torch.zeros(2, 4, 5, dtype=torch.long)], dim=2)  # more padding slots
    shuffled = inputs.flip(2)  # order of the slots does not matter
    pot = scorer(inputs)
    torch.testing.assert_close(scorer(wider), pot)
    torch.testing.assert_close(scorer(shuffled), pot)
    empty = torch.zeros(2, 4, 0, dtype=torch.long)  # no feature at all: only the bias is left
    torch.testing.assert_close(scorer.unary(empty), scorer.emission.bias.expand(2, 4, 3))
    assert bool((scorer.emission.weight[0] == 0).all())
    bag = torch.nn.EmbeddingBag.from_pretrained(
        scorer.emission.weight.detach(), mode="sum", padding_idx=0
    )
    unary = bag(inputs.view(-1, 3)).view(2, 4, 3) + scorer.emission.bias
    torch.testing.assert_close(scorer.unary(inputs), unary)  # the nn.EmbeddingBag it replaces
    scorer(inputs).sum().backward()
    assert bool((scorer.emission.weight.grad[0] == 0).all())



@pytest.mark.parametrize("shape", [(6, 5), (1, 1), (4, 0), (3, 4)])
def test_sparse_feature_sum_equals_embedding_bag_and_gradchecks(shape: tuple[int, int]) -> None:
    """The sparse-cost map against the dense embedding_bag it replaces, in float64."""
    from structssl.scorers.base import sparse_feature_sum

    g = torch.Generator().manual_seed(sum(shape))
    idx = torch.randint(0, 7, shape, generator=g)
    if shape == (3, 4):
        idx.zero_()  # all padding: zero output, zero gradient
    elif idx.numel():
        idx[0] = 0  # an item with no feature
        idx[-1, 0] = idx[-1, -1] = 5  # a repeated feature counts twice
    weight = torch.randn(7, 3, dtype=torch.float64, generator=g)
    weight[0] = 1e3  # the padding row is never read
    w = weight.clone().requires_grad_()
    got = sparse_feature_sum(idx, w)
    ref_w = weight.clone().requires_grad_()
    ref = torch.nn.functional.embedding_bag(
        idx, ref_w, mode="sum", per_sample_weights=(idx != 0).double()
    ) if idx.shape[1] else torch.zeros(shape[0], 3, dtype=torch.float64)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-12)
    up = torch.randn(got.shape, dtype=torch.float64, generator=g)
    (grad,) = torch.autograd.grad(got, w, up)
    if idx.shape[1]:
        (ref_grad,) = torch.autograd.grad(ref, ref_w, up)
        torch.testing.assert_close(grad, ref_grad, rtol=0, atol=1e-12)
    assert bool((grad[0] == 0).all())  # padding row: exactly zero gradient
    assert torch.autograd.gradcheck(lambda x: sparse_feature_sum(idx, x), (w,))
    assert torch.autograd.gradgradcheck(lambda x: sparse_feature_sum(idx, x).pow(2), (w,))
    # per-example gradients through vmap (the QP baselines' psi rows)
    ups = torch.randn((4,) + tuple(got.shape), dtype=torch.float64, generator=g)
    (rows,) = torch.autograd.grad(
        sparse_feature_sum(idx, w), w, grad_outputs=ups, is_grads_batched=True
    )
    expected = torch.stack([torch.autograd.grad(sparse_feature_sum(idx, w), w, u)[0] for u in ups])
    torch.testing.assert_close(rows, expected)

def test_padded_positions_do_not_change_valid_potentials() -> None:
    scorer = LinearChainScorer(3, input_dim=2, init_std=1.0).double()
    x = torch.randn(2, 5, 2, dtype=F64)
    lengths = torch.tensor([3, 5])
    y = x.clone()
    y[0, 3:] = 100.0  # garbage in the padding
    torch.testing.assert_close(scorer(x, lengths), scorer(y, lengths))


def test_gradients_flow_to_every_weight() -> None:
    data = hmm_sequences(
        6, 5, num_states=3, emission="gaussian", dim=2, min_length=2, seed=1, dtype=F64
    )
    scorers = [
        LinearChainScorer(3, input_dim=2).double(),
        LinearChainScorer(3, num_features=5),
        LinearChainScorer(3, num_words=5),
    ]
    inputs = [data.inputs, _sparse(6, 5, 2, 5), torch.randint(0, 5, (6, 5))]
    chain = LinearChain(3)
    for scorer, x in zip(scorers, inputs):
        pot = scorer(x, data.lengths)
        nll = chain.log_partition(pot, data.lengths) - chain.score(pot, data.labels, data.lengths)
        nll.sum().backward()
        for name, p in scorer.named_parameters():
            assert p.grad is not None and bool(p.grad.abs().sum() > 0), name


def test_lbfgs_with_crf_nll_lowers_the_loss() -> None:
    data = hmm_sequences(
        40, 8, num_states=3, emission="gaussian", dim=3, min_length=3, seed=0, dtype=F64
    )
    scorer = LinearChainScorer(3, input_dim=3).double()
    chain = LinearChain(3)
    opt = torch.optim.LBFGS(scorer.parameters(), max_iter=5, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        pot = scorer(data.inputs, data.lengths)
        nll = chain.log_partition(pot, data.lengths) - chain.score(pot, data.labels, data.lengths)
        return nll.mean() + 1e-3 * scorer.weight_norm_squared()

    def closure() -> torch.Tensor:
        opt.zero_grad()
        value = loss()
        value.backward()
        return value

    before = float(loss().detach())
    for _ in range(3):
        opt.step(closure)
    after = float(loss().detach())
    assert after < 0.5 * before  # from log(3) per token towards the HMM's separable states
    pred, _ = chain.argmax(scorer(data.inputs, data.lengths), data.lengths)
    valid = LinearChain.valid_mask(data.lengths, 8)
    assert float((pred == data.labels)[valid].double().mean()) > 0.8


# ---------------------------------------------------------------------- multi-class
@pytest.mark.parametrize("kind", ["num_features", "input_dim"])
def test_multiclass_score_is_hand_computed(kind: str) -> None:
    size = {"num_features": 6} if kind == "num_features" else {"input_dim": 3}
    scorer = MultiClassScorer(4, **size, init_std=1.0).double()
    x = _sparse(5, 1, 3, 6)[:, 0] if kind == "num_features" else torch.randn(5, 3, dtype=F64)
    pot = scorer(x)
    assert pot.shape == (5, 4)
    labels = torch.randint(0, 4, (5,))
    got = MultiClass(4).score(pot, labels)
    for i in range(5):
        want = (
            _phi_rows(scorer.linear.weight, kind, x[i])[labels[i]] + scorer.linear.bias[labels[i]]
        )
        torch.testing.assert_close(got[i], want)


# ---------------------------------------------------------------------- multi-label
@pytest.mark.parametrize("pairwise", ["linear", "shared", "none"])
def test_multilabel_score_is_seed_004_feature_map(pairwise: str) -> None:
    k, d, b = 4, 3, 5
    scorer = MultiLabelScorer(k, input_dim=d, pairwise=pairwise, init_std=1.0)  # type: ignore[arg-type]
    scorer = scorer.double()
    x = torch.randn(b, d, dtype=F64)
    pot = scorer(x)
    assert isinstance(pot, MultiLabelPotentials)
    assert pot.unary.shape == (b, k, 2) and pot.pairwise.shape == (b, k, k, 2, 2)
    lower = torch.ones(k, k, dtype=torch.bool).tril()
    assert bool((pot.pairwise[:, lower] == 0).all())  # only p < q are parts
    labels = torch.randint(0, 2, (b, k))
    got = PairwiseMultiLabel(k).score(pot, labels)
    node_w = scorer.node.weight.view(d, k, 2)
    node_b = scorer.node.bias.view(k, 2)
    pairs = [(p, q) for p in range(k) for q in range(p + 1, k)]
    for i in range(b):
        y = labels[i].tolist()
        want = sum(x[i] @ node_w[:, p, y[p]] + node_b[p, y[p]] for p in range(k))
        for e, (p, q) in enumerate(pairs):
            if pairwise == "linear":
                w = scorer.edge.weight.view(d, len(pairs), 2, 2)
                want = (
                    want
                    + x[i] @ w[:, e, y[p], y[q]]
                    + scorer.edge.bias.view(len(pairs), 2, 2)[e, y[p], y[q]]
                )
            elif pairwise == "shared":
                want = want + scorer.edge_table[e, y[p], y[q]]
        torch.testing.assert_close(got[i], want)


def test_multilabel_sparse_inputs_and_training_signal() -> None:
    data = correlated_multilabel(
        30, num_labels=4, num_features=5, method="pairwise", seed=2, dtype=F64
    )
    scorer = MultiLabelScorer(4, input_dim=5, pairwise="linear").double()
    structure = PairwiseMultiLabel(4)
    pot = scorer(data.inputs)
    nll = structure.log_partition(pot) - structure.score(pot, data.labels)
    nll.mean().backward()
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in scorer.parameters())
    sparse = MultiLabelScorer(4, num_features=8, pairwise="linear", init_std=1.0)
    out = sparse(_sparse(3, 1, 4, 8)[:, 0])
    assert out.unary.shape == (3, 4, 2) and out.pairwise.shape == (3, 4, 4, 2, 2)


# ---------------------------------------------------------------------- CKY
def _tree_score(scorer: CKYScorer, words: torch.Tensor, rows: list[list[int]]) -> torch.Tensor:
    """Hand-computed rule-count score of one tree (rows in pre-order)."""
    label = {(i, j): a for i, j, a in rows}
    w, bias = scorer.terms.weight, scorer.terms.bias
    total = scorer.roots[rows[0][2]]
    for i, j, a in rows:
        if i == j:
            total = total + w[int(words[i]), a] + bias[a]
            continue
        split = max(e for (s, e) in label if s == i and e < j)
        total = total + scorer.rules[a, label[(i, split)], label[(split + 1, j)]]
    return total


def test_cky_score_is_hand_computed_rule_count_score() -> None:
    bank = pcfg_treebank(
        6, num_nonterminals=2, num_preterminals=3, vocab_size=7, min_length=1, max_length=4, seed=3
    )
    scorer = CKYScorer(5, num_words=7, init_std=1.0).double()
    pot = scorer(bank.words, bank.lengths)
    assert isinstance(pot, CKYPotentials)
    n = bank.words.shape[1]
    assert [tuple(x.shape) for x in pot] == [(6, n, 5), (6, 5, 5, 5), (6, 5), (6, n, n, 5)]
    got = CKY(5).score(pot, bank.spans, bank.lengths)
    for i in range(6):
        m = int(bank.lengths[i])
        rows = bank.spans[i, : 2 * m - 1].tolist()
        torch.testing.assert_close(got[i], _tree_score(scorer, bank.words[i], rows))
    valid = torch.arange(n) < bank.lengths.unsqueeze(1)
    assert bool((pot.terms[~valid] == 0).all())


def test_cky_grammar_masks_fit_the_synthetic_treebank() -> None:
    bank = pcfg_treebank(
        8, num_nonterminals=2, num_preterminals=3, vocab_size=6, min_length=1, max_length=4, seed=5
    )
    terms, rules, roots = grammar_masks(2, 3)
    assert terms.tolist() == [False, False, True, True, True]
    assert roots.tolist() == [True, False, True, True, True]
    assert bool(rules[:2].all()) and not bool(rules[2:].any())
    scorer = CKYScorer(
        5, num_words=6, allowed_terms=terms, allowed_rules=rules, allowed_roots=roots, init_std=0.1
    ).double()
    pot = scorer(bank.words, bank.lengths)
    assert (
        float(pot.terms[0, 0, 0].detach()) == LOG_ZERO
        and float(pot.rules[0, 3, 0, 0].detach()) == LOG_ZERO
    )
    cky = CKY(5)
    gold = cky.score(pot, bank.spans, bank.lengths)
    assert bool((gold > LOG_ZERO / 2).all())  # every gold tree is allowed
    log_z = cky.log_partition(pot, bank.lengths)
    assert bool((log_z >= gold).all()) and bool((log_z < -LOG_ZERO / 2).all())
    pred, _ = cky.argmax(pot, bank.lengths)
    assert bool(
        (cky.score(pot, pred, bank.lengths) > LOG_ZERO / 2).all()
    )  # the best tree is allowed
    (log_z - gold).sum().backward()
    assert bool((scorer.rules.grad[2:] == 0).all())  # forbidden rules get no gradient


def test_cky_scorer_word_features_and_dense() -> None:
    scorer = CKYScorer(3, num_features=6, rules=False, roots=False, init_std=1.0)
    pot = scorer(_sparse(2, 3, 2, 6), torch.tensor([3, 1]))
    assert (
        pot.terms.shape == (2, 3, 3)
        and bool((pot.rules == 0).all())
        and bool((pot.roots == 0).all())
    )
    dense = CKYScorer(3, input_dim=4)
    assert dense(torch.randn(2, 3, 4)).terms.shape == (2, 3, 3)


# ---------------------------------------------------------------------- two views
def test_two_view_scorer_returns_each_view_and_their_sum() -> None:
    chain_a = LinearChainScorer(3, num_features=6, init_std=1.0)
    chain_b = LinearChainScorer(3, num_features=4, init_std=1.0)
    two = TwoViewScorer(chain_a, chain_b)
    xa, xb, lengths = _sparse(2, 4, 3, 6), _sparse(2, 4, 2, 4), torch.tensor([4, 2])
    out = two(xa, xb, lengths)
    assert isinstance(out, TwoViewPotentials)
    torch.testing.assert_close(out.view_a, chain_a(xa, lengths))
    torch.testing.assert_close(out.joint, out.view_a + out.view_b)
    labels = torch.randint(0, 3, (2, 4))
    chain = LinearChain(3)
    torch.testing.assert_close(  # joint score = f^1 + f^2 (thesis Prop. B.2)
        chain.score(out.joint, labels, lengths),
        chain.score(out.view_a, labels, lengths) + chain.score(out.view_b, labels, lengths),
    )
    torch.testing.assert_close(
        two.weight_norm_squared(), chain_a.weight_norm_squared() + chain_b.weight_norm_squared()
    )
    ml = TwoViewScorer(
        MultiLabelScorer(3, input_dim=2, init_std=1.0),
        MultiLabelScorer(3, input_dim=5, init_std=1.0),
    )
    out = ml(torch.randn(4, 2), torch.randn(4, 5))
    assert isinstance(out.joint, MultiLabelPotentials)
    torch.testing.assert_close(out.joint.pairwise, out.view_a.pairwise + out.view_b.pairwise)


def test_two_view_layout_mismatch_raises() -> None:
    two = TwoViewScorer(LinearChainScorer(3, input_dim=2), LinearChainScorer(4, input_dim=2))
    with pytest.raises(
        ValueError, match="view_a and view_b must return potentials of the same layout"
    ):
        two(torch.randn(2, 3, 2), torch.randn(2, 3, 2))
    with pytest.raises(TypeError, match="view_b must be an nn.Module; got str"):
        TwoViewScorer(LinearChainScorer(3, input_dim=2), "x")  # type: ignore[arg-type]


# ---------------------------------------------------------------------- neural
@pytest.mark.parametrize("kind", ["num_features", "num_words", "input_dim"])
def test_bilstm_valid_outputs_do_not_depend_on_padding(kind: str) -> None:
    size = {
        "num_features": {"num_features": 7},
        "num_words": {"num_words": 5},
        "input_dim": {"input_dim": 2},
    }[kind]
    encoder = BiLSTMEncoder(4, **size, embedding_dim=3).double()
    scorer = NeuralChainScorer(encoder, encoder.output_dim, 3, init_std=0.5).double()
    scorer.eval()
    inputs, _ = _chain_inputs(kind, 3, 5)
    lengths = torch.tensor([5, 2, 3])
    pot = scorer(inputs, lengths)
    assert pot.shape == (3, 5, 3, 3)
    states = encoder(inputs, lengths)
    assert states.shape == (3, 5, 8) and bool((states[1, 2:] == 0).all())
    garbage = inputs.clone()
    garbage[1, 2:] = 1 if kind != "input_dim" else 50.0  # change the padding only
    torch.testing.assert_close(scorer(garbage, lengths), pot)
    for i in range(3):  # each sentence alone, unpadded
        m = int(lengths[i])
        alone = scorer(inputs[i : i + 1, :m], lengths[i : i + 1])
        torch.testing.assert_close(alone[0], pot[i, :m])


def test_neural_chain_trains_and_checks_encoder_output() -> None:
    encoder = BiLSTMEncoder(4, num_words=6, embedding_dim=3, num_layers=2, dropout=0.1)
    scorer = NeuralChainScorer(encoder, encoder.output_dim, 2)
    words, lengths = torch.randint(0, 6, (3, 4)), torch.tensor([4, 3, 1])
    labels = (words % 2).long()
    chain = LinearChain(2)
    pot = scorer(words, lengths)
    (chain.log_partition(pot, lengths) - chain.score(pot, labels, lengths)).sum().backward()
    assert all(p.grad is not None for p in scorer.parameters())
    bad = NeuralChainScorer(encoder, 5, 2)
    with pytest.raises(
        ValueError,
        match=r"encoder output must have shape \(B, N, H\) with H = encoder_dim = 5; got \(3, 4, 8\)",
    ):
        bad(words, lengths)


# ---------------------------------------------------------------------- norms, init
def test_weight_norm_squared_counts_all_weights_and_optionally_biases() -> None:
    scorer = LinearChainScorer(3, input_dim=4, init_std=1.0).double()
    with torch.no_grad():
        scorer.emission.bias.fill_(2.0)
    w = scorer.emission.weight.pow(2).sum()
    structural = sum(
        p.pow(2).sum() for p in (scorer.head.transition, scorer.head.start, scorer.head.end)
    )
    torch.testing.assert_close(scorer.weight_norm_squared(), w + structural + 12.0)
    torch.testing.assert_close(scorer.weight_norm_squared(include_bias=False), w + structural)
    encoder = BiLSTMEncoder(2, num_words=3, embedding_dim=2)
    no_bias = weight_norm_squared(encoder, include_bias=False)
    biases = sum(p.pow(2).sum() for n, p in encoder.named_parameters() if "bias" in n)
    torch.testing.assert_close(weight_norm_squared(encoder), no_bias + biases)


def test_initialisation_is_deterministic_given_the_seed() -> None:
    def make() -> list[torch.Tensor]:
        torch.manual_seed(7)
        return [p.detach().clone() for p in CKYScorer(3, num_words=4, init_std=0.3).parameters()]

    assert all(torch.equal(a, b) for a, b in zip(make(), make()))
    zero = LinearChainScorer(3, num_features=5)
    assert all(bool((p == 0).all()) for p in zero.parameters())  # default: zeros


# ---------------------------------------------------------------------- errors
def test_input_errors() -> None:
    sparse = LinearChainScorer(3, num_features=5)
    dense = LinearChainScorer(3, input_dim=2)
    deferred = LinearChainScorer(3)  # the input size comes from the data at setup
    with pytest.raises(ValueError, match="LinearChainScorer has no weights yet"):
        deferred(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="LinearChainScorer needs num_labels and one of"):
        deferred.resolve_sizes({"num_labels": 3})
    deferred.resolve_sizes({"num_labels": 3, "input_dim": 4})
    assert deferred(torch.zeros(2, 3, 4)).shape == (2, 3, 3, 3)
    with pytest.raises(ValueError, match=r"input_dim = 4 does not match the data's input_dim = 5"):
        deferred.resolve_sizes({"num_labels": 3, "input_dim": 5})
    with pytest.raises(ValueError, match=r"got \['num_features', 'input_dim'\]"):
        LinearChainScorer(3, num_features=5, input_dim=2)
    with pytest.raises(
        ValueError, match=r"num_features must be an int >= 2 \(index 0 is padding\); got 1"
    ):
        LinearChainScorer(3, num_features=1)
    with pytest.raises(
        ValueError,
        match=r"inputs must have shape \(B, N, F\) long feature indices; got shape \(2, 3\)",
    ):
        sparse(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(
        ValueError, match="inputs must be .* long feature indices; got dtype torch.float32"
    ):
        sparse(torch.zeros(2, 3, 1))
    with pytest.raises(
        ValueError,
        match=r"inputs \(feature indices\) must be in \[0, num_features\) = \[0, 5\); got values in \[1, 5\]",
    ):
        sparse(torch.tensor([[[1, 5]]]))
    with pytest.raises(
        ValueError,
        match=r"inputs must have shape \(B, N, D\) floating point with D = input_dim = 2; got shape \(2, 3, 4\)",
    ):
        dense(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="inputs must have the dtype of the scorer's parameters"):
        dense(torch.zeros(2, 3, 2, dtype=F64))
    with pytest.raises(ValueError, match="inputs must have N >= 1 positions"):
        dense(torch.zeros(2, 0, 2))
    with pytest.raises(TypeError, match="inputs must be a torch.Tensor; got list"):
        dense([[0.0]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"inputs must have shape \(B, D\)"):
        MultiClassScorer(3, input_dim=2)(torch.zeros(4, 5, 2))
    with pytest.raises(
        ValueError,
        match=r"inputs \(word indices\) must be in \[0, num_words\) = \[0, 4\); got values in \[-1, 2\]",
    ):
        CKYScorer(3, num_words=4)(torch.tensor([[2, -1]]))


def test_lengths_errors() -> None:
    dense = LinearChainScorer(3, input_dim=2)
    x = torch.zeros(2, 3, 2)
    with pytest.raises(
        ValueError,
        match=r"lengths must have shape \(B,\) = \(2,\) \(B from the inputs\); got \(3,\)",
    ):
        dense(x, torch.tensor([1, 2, 3]))
    with pytest.raises(
        ValueError,
        match=r"lengths must be in \[1, N\] = \[1, 3\] \(N from the inputs\); got values in \[0, 4\]",
    ):
        dense(x, torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="lengths must have an integer dtype; got torch.float32"):
        dense(x, torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="lengths must be a torch.Tensor; got list"):
        dense(x, [1, 2])  # type: ignore[arg-type]
    encoder = BiLSTMEncoder(2, input_dim=2)
    with pytest.raises(ValueError, match=r"lengths must have shape \(B,\) = \(2,\)"):
        encoder(x, torch.tensor([3]))


def test_option_errors() -> None:
    with pytest.raises(
        ValueError, match=r"pairwise must be one of \('linear', 'shared', 'none'\); got 'full'"
    ):
        MultiLabelScorer(3, input_dim=2, pairwise="full")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="init_std must be a float >= 0; got -1.0"):
        LinearChainScorer(3, input_dim=2, init_std=-1.0)
    with pytest.raises(ValueError, match="num_labels must be an int >= 1; got 0"):
        MultiClassScorer(0, input_dim=2)
    with pytest.raises(
        ValueError, match=r"allowed_rules must be a bool tensor of shape \(3, 3, 3\)"
    ):
        CKYScorer(3, num_words=4, allowed_rules=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(
        ValueError,
        match=r"start_symbols must be nonterminals in \[0, 2\) \(at least one\); got \[2\]",
    ):
        grammar_masks(2, 3, start_symbols=(2,))
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\); got 1.0"):
        BiLSTMEncoder(2, num_words=3, dropout=1.0)
    with pytest.raises(ValueError, match="out_features must be an int >= 1; got 0"):
        LinearInputs(0, input_dim=2)


# ---------------------------------------------------------------------- core rule
def test_scorers_import_without_lightning_or_torchmetrics() -> None:
    code = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("lightning", "pytorch_lightning", "torchmetrics"):
                    raise ImportError("blocked: " + name)
                return None
        sys.meta_path.insert(0, Block())
        import structssl.scorers
        print(sorted(m for m in sys.modules if m.startswith("structssl")))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "structssl.scorers" in out.stdout and "structssl.data" not in out.stdout


@pytest.mark.gpu
def test_scorers_on_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    dev = torch.device("cuda")
    scorer = LinearChainScorer(3, num_features=9, init_std=1.0).to(dev)
    x, lengths = _sparse(4, 5, 3, 9).to(dev), torch.tensor([5, 1, 3, 2], device=dev)
    pot = scorer(x, lengths)
    assert pot.device.type == "cuda"
    encoder = BiLSTMEncoder(4, num_features=9, embedding_dim=3).to(dev)
    assert NeuralChainScorer(encoder, 8, 3).to(dev)(x, lengths).shape == (4, 5, 3, 3)
    ml = MultiLabelScorer(4, input_dim=3, pairwise="linear").to(dev)
    assert ml(torch.randn(2, 3, device=dev)).pairwise.device.type == "cuda"


@pytest.mark.parametrize("shape", [(6, 5), (1, 1), (4, 0), (3, 4), (50, 9)])
def test_sparse_weight_grad_scatter_equals_the_gather_sum(shape: tuple[int, int]) -> None:
    """The GPU path of the sparse map's weight gradient (scatter-add per slot) equals the CPU
    path (gather-sum over the transposed CSR) in float64, repeated features, items without a
    feature and all-padding included, also under vmap (the QP baselines' per-example rows)."""
    from structssl.scorers.base import sparse_layout, sparse_weight_grad, sparse_weight_grad_scatter

    g = torch.Generator().manual_seed(sum(shape))
    idx = torch.randint(0, 11, shape, generator=g)
    if shape == (3, 4):
        idx.zero_()
    elif idx.numel():
        idx[0] = 0
        idx[-1, 0] = idx[-1, -1] = 5
    layout = sparse_layout(idx)
    up = torch.randn(shape[0], 3, dtype=torch.float64, generator=g)
    want = sparse_weight_grad(layout, up, 11)
    torch.testing.assert_close(sparse_weight_grad_scatter(layout, up, 11), want, rtol=0, atol=1e-12)
    ups = torch.randn(4, shape[0], 3, dtype=torch.float64, generator=g)
    batched = torch.func.vmap(lambda u: sparse_weight_grad_scatter(layout, u, 11))(ups)
    for i in range(4):
        torch.testing.assert_close(batched[i], sparse_weight_grad(layout, ups[i], 11), rtol=0, atol=1e-12)


def test_masks_set_from_the_data_after_construction_load_from_a_checkpoint() -> None:
    """A grammar's masks are buffers registered as None and filled at setup (adopt_grammar):
    a scorer built from the config alone must take them from the state dict (load_model on a
    treebank run failed with "Unexpected key(s) in state_dict: scorer.allowed_terms, ...")."""
    from structssl.scorers import CKYScorer

    trained = CKYScorer(3, num_words=5, init_std=0.1)
    trained.allowed_terms = torch.tensor([True, False, True])
    trained.allowed_rules = torch.rand(3, 3, 3, generator=torch.Generator().manual_seed(0)) > 0.3
    fresh = CKYScorer(3, num_words=5)
    assert fresh.allowed_terms is None
    fresh.load_state_dict(trained.state_dict())
    assert torch.equal(fresh.allowed_terms, trained.allowed_terms)
    assert torch.equal(fresh.allowed_rules, trained.allowed_rules) and fresh.allowed_roots is None
    words = torch.tensor([[0, 4, 2]])
    for got, want in zip(fresh(words), trained(words)):
        torch.testing.assert_close(got, want)
