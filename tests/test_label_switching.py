from __future__ import annotations

import itertools

import pytest
import pytorch_lightning as pl
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structssl.constraints import (
    AllowedFirst,
    AtMostOnce,
    ConsecutiveFields,
    ConstraintSet,
    LabelProportion,
    PunctuationTransitions,
    TransitionFraction,
    WordLabels,
)
from structssl.data import GrammarScorer, SemiSupervisedDataModule
from structssl.inference.label_switching import (
    SymbolProportion,
    _ChainEvaluator,
    _GenericEvaluator,
    _Terms,
    label_switching,
    leaf_rule_switching,
    switching_objective,
    unlabeled_hinge,
)
from structssl.scorers.chain import LinearChainScorer
from structssl.semirings import LOG_ZERO
from structssl.structures import CKY, GrammarCKY
from structssl.structures.linear_chain import LinearChain
from structssl.training.label_switching import (
    LabelSwitchingAnnealing,
    LabelSwitchingModule,
    plot_label_switching,
)

NAMES = ["a", "b", "c"]
WORDS = ["x", "y", ",", "z"]


def _constraints(hard: bool = True) -> ConstraintSet:
    cons = [
        AtMostOnce("a", weight=2.0),
        WordLabels(words=["x"], labels=["b"]),
        ConsecutiveFields(),
        LabelProportion("a", 0.3),
        TransitionFraction(0.1),
    ]
    if hard:
        cons.append(AllowedFirst(["a", "b"], hard=True))
    return ConstraintSet(cons, labels=NAMES)


def _problem(seed: int, b: int, n: int, c: int = 3):
    g = torch.Generator().manual_seed(seed)
    pot = torch.randn(b, n, c, c, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, n + 1, (b,), generator=g)
    lengths[0] = n
    tokens = [[WORDS[int(i)] for i in torch.randint(0, 4, (n,), generator=g)] for _ in range(b)]
    labels = torch.randint(0, c, (b, n), generator=g) * (torch.arange(n) < lengths[:, None])
    return pot, lengths, tokens, labels


def test_chain_candidates_match_explicit_evaluation():
    pot, lengths, tokens, labels = _problem(0, 4, 5)
    terms = _Terms(_constraints(), tokens)
    chain = _ChainEvaluator(pot, lengths, terms, 1.0)
    generic = _GenericEvaluator(LinearChain(3), pot, lengths, terms, 1.0, 3, "hamming")
    state: dict[str, torch.Tensor] = {}
    chain.refresh(labels, state, torch.arange(4))
    idx = torch.arange(4)
    m = torch.minimum(torch.tensor([4, 2, 0, 3]), lengths - 1)
    base = terms.counts(labels, lengths)
    h1, c1 = chain.step(labels, idx, m, state, base)
    h2, c2 = generic.step(labels, idx, m, state, base)
    assert torch.allclose(h1, h2, atol=1e-9)
    assert torch.allclose(c1, c2)


def test_unlabeled_hinge_matches_brute_force():
    pot, lengths, _, labels = _problem(1, 2, 3)
    lengths = torch.tensor([3, 3])
    hinge = unlabeled_hinge(LinearChain(3), pot, labels, lengths)
    for i in range(2):
        best = max(
            float(LinearChain(3).score(pot[i : i + 1], torch.tensor([y])))
            + sum(a != b for a, b in zip(y, labels[i].tolist()))
            for y in itertools.product(range(3), repeat=3)
        )
        own = float(LinearChain(3).score(pot[i : i + 1], labels[i : i + 1]))
        assert abs(float(hinge[i]) - (best - own)) < 1e-9


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    b=st.integers(1, 4),
    n=st.integers(1, 5),
    cu=st.sampled_from([0.0, 0.3, 1.0]),
    block=st.sampled_from([1, 2, None]),
    method=st.sampled_from(["chain", "generic"]),
)
def test_switching_never_increases_objective_nor_violates_hard(seed, b, n, cu, block, method):
    torch.set_default_dtype(torch.float64)
    try:
        pot, lengths, tokens, labels = _problem(seed, b, n)
        cs = _constraints()
        labels[:, 0] = 0  # satisfies the hard AllowedFirst(a, b)
        structure = LinearChain(3)
        before, hard0 = switching_objective(structure, pot, labels, lengths, cs, tokens, cu)
        assert float(hard0) == 0
        out = label_switching(
            structure, pot, labels, lengths, cs, tokens, cu, block_size=block, method=method,
            generator=torch.Generator().manual_seed(seed),
        )
        after, hard = switching_objective(structure, pot, out.labels, lengths, cs, tokens, cu)
        assert float(after) <= float(before) + 1e-9
        assert abs(out.objective - float(after)) < 1e-6
        assert abs(out.initial_objective - float(before)) < 1e-6
        assert float(hard) == 0 and out.hard_violations == 0
        assert not bool(cs.hard_violated(out.labels, lengths, tokens).any())
        assert out.switches == sum(out.switches_per_pass)
        assert torch.equal(out.labels * (torch.arange(n) < lengths[:, None]), out.labels)
        if out.switches_per_pass and out.switches_per_pass[-1] == 0:  # a local optimum
            again = label_switching(structure, pot, out.labels, lengths, cs, tokens, cu, max_passes=1)
            assert again.switches == 0
    finally:
        torch.set_default_dtype(torch.float32)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), target=st.floats(0.0, 1.0), block=st.sampled_from([1, None]))
def test_corpus_proportions_only_reach_the_brute_force_optimum(seed, target, block):
    torch.set_default_dtype(torch.float64)
    try:
        b, n, c = 2, 3, 3
        pot, _, _, labels = _problem(seed, b, n, c)
        lengths = torch.tensor([3, 2])
        labels = labels * (torch.arange(n) < lengths[:, None])
        cs = ConstraintSet(
            [LabelProportion("a", target), LabelProportion("b", 1.0 - target, bound="le")],
            labels=NAMES,
        )
        out = label_switching(
            LinearChain(c), pot, labels, lengths, cs, None, cu=0.0, block_size=block,
            generator=torch.Generator().manual_seed(seed),
        )
        best = float("inf")
        for y in itertools.product(range(c), repeat=5):
            cand = torch.tensor([[y[0], y[1], y[2]], [y[3], y[4], 0]])
            best = min(best, float(cs.penalty(cand, lengths)))
        assert abs(out.objective - best) < 1e-9
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("method", ["chain", "generic"])
def test_factored_potentials_switch_like_their_edge_layout(method):
    """A LinearChainScorer(factored=True) model (configs/tagger_ssl.yaml) label-switches the
    same labels as the (B, N, C, C) potentials they stand for."""
    from structssl.structures import ChainPotentials

    g = torch.Generator().manual_seed(7)
    b, n, c = 4, 5, 3
    _, lengths, tokens, labels = _problem(7, b, n)
    factored = ChainPotentials.from_factors(
        torch.randn(b, n, c, generator=g, dtype=torch.float64),
        torch.randn(c, c, generator=g, dtype=torch.float64),
        torch.randn(c, generator=g, dtype=torch.float64),
        torch.randn(c, generator=g, dtype=torch.float64),
    )
    structure = LinearChain(c)
    edges = structure.edge_potentials(factored, lengths)
    outs = [
        label_switching(structure, pot, labels, lengths, _constraints(False), tokens, 0.5,
                        method=method, generator=torch.Generator().manual_seed(0))
        for pot in (factored, edges)
    ]
    assert outs[0].switches > 0
    assert torch.equal(outs[0].labels, outs[1].labels)
    assert outs[0].objective == pytest.approx(outs[1].objective, abs=1e-9)


def _chunked(pot, lengths, tokens, labels, index, cuts, order):
    """The examples ``index`` as chunks cut at ``cuts`` (after sorting by length), each padded
    to its own longest example only, the chunks listed in ``order``."""
    by_len = lengths[index].argsort(stable=True)
    groups = [index[by_len[a:b]] for a, b in zip([0] + cuts, cuts + [len(index)])]
    groups = [groups[i] for i in order]
    widths = [int(lengths[g].max()) for g in groups]
    return (
        [pot[g, :w] for g, w in zip(groups, widths)],
        [lengths[g] for g in groups],
        [[tokens[i][:w] for i in g.tolist()] for g, w in zip(groups, widths)],
        [labels[g, :w] for g, w in zip(groups, widths)],
        groups,
    )


@pytest.mark.parametrize("method", ["chain", "generic"])
@pytest.mark.parametrize("block", [None, 3, 1])
def test_chunks_switch_like_one_batch(method, block):
    """Label switching of the unlabeled set as length chunks (each padded to its own longest
    example; chunks listed in any order) gives the switches, labels and objective of one padded
    batch in any example order: the random choices follow the examples' index, the corpus
    counts (LabelProportion, TransitionFraction) are summed over the chunks. Potentials with
    -inf (forbidden transitions into label c at some positions) and a hard constraint."""
    torch.set_default_dtype(torch.float64)
    try:
        b, n, c = 13, 9, 3
        pot, lengths, tokens, _ = _problem(11, b, n, c)
        g = torch.Generator().manual_seed(5)
        forbid = torch.rand(b, n, generator=g) < 0.3
        pot[..., 2] = pot[..., 2].masked_fill(forbid.unsqueeze(-1), float("-inf"))
        structure = LinearChain(c)
        labels, _ = structure.argmax(pot, lengths)  # finite scores: switches into -inf are refused
        labels[:, 0] = 0  # the hard AllowedFirst holds
        cs = _constraints()
        kw = dict(cu=0.4, block_size=block, method=method, max_passes=4)
        shuffled = torch.randperm(b, generator=g)  # one batch, examples in another order
        one = label_switching(structure, pot[shuffled], labels[shuffled], lengths[shuffled], cs,
                              [tokens[i] for i in shuffled.tolist()], index=shuffled,
                              generator=torch.Generator().manual_seed(3), **kw)
        one_labels = torch.empty_like(labels)
        one_labels[shuffled] = one.labels
        assert one.switches > 3 and len(one.switches_per_pass) > 1
        for cuts, order in (([4, 9], [2, 0, 1]), ([1, 2, 3, 5, 8, 12], [6, 5, 4, 3, 2, 1, 0])):
            p, ln, tk, y, ids = _chunked(pot, lengths, tokens, labels, torch.arange(b), cuts, order)
            assert min(x.shape[1] for x in y) < n  # chunks padded to their own length
            out = label_switching(structure, p, y, ln, cs, tk, index=ids,
                                  generator=torch.Generator().manual_seed(3), **kw)
            assert isinstance(out.labels, list) and [x.shape for x in out.labels] == [x.shape for x in y]
            got = torch.zeros_like(labels)
            for ids_k, y_k in zip(ids, out.labels):
                got[ids_k, : y_k.shape[1]] = y_k
            assert torch.equal(got, one_labels)
            assert out.switches_per_pass == one.switches_per_pass
            assert out.objective == pytest.approx(one.objective, rel=1e-12, abs=1e-12)
            assert out.initial_objective == pytest.approx(one.initial_objective, rel=1e-12, abs=1e-12)
            assert out.hard_violations == one.hard_violations == 0
            value, _ = switching_objective(structure, p, out.labels, ln, cs, tk, 0.4)
            assert float(value) == pytest.approx(out.objective, rel=1e-12)
    finally:
        torch.set_default_dtype(torch.float32)


def test_chunk_errors():
    pot, lengths, tokens, labels = _problem(4, 4, 3)
    structure = LinearChain(3)
    with pytest.raises(ValueError, match="with labels given as 2 chunks, potentials must be a list of 2; got Tensor"):
        label_switching(structure, pot, [labels[:2], labels[2:]], None)
    with pytest.raises(ValueError, match="with labels given as 2 chunks, lengths must be a list of 2; got a list of 1"):
        label_switching(structure, [pot[:2], pot[2:]], [labels[:2], labels[2:]], [lengths])
    with pytest.raises(ValueError, match="lengths must be one batch like labels"):
        label_switching(structure, pot, labels, [lengths])
    with pytest.raises(ValueError, match="index must hold 4 distinct example ids; got 2 distinct"):
        label_switching(structure, [pot[:2], pot[2:]], [labels[:2], labels[2:]],
                        [lengths[:2], lengths[2:]], index=[torch.tensor([0, 1]), torch.tensor([1, 0])])
    with pytest.raises(ValueError, match=r"index must be a \(4,\) tensor of example ids; got \(3,\)"):
        label_switching(structure, pot, labels, lengths, index=torch.arange(3))


def test_switch_budget_is_respected():
    pot, lengths, tokens, labels = _problem(3, 4, 5)
    out = label_switching(LinearChain(3), pot, labels, lengths, _constraints(False), tokens, 1.0, max_switches=2)
    assert out.switches <= 2
    assert out.budget_exhausted or out.switches < 2


def test_label_switching_errors():
    pot, lengths, tokens, labels = _problem(4, 2, 3)
    structure = LinearChain(3)
    with pytest.raises(ValueError, match="cu must be a finite float >= 0"):
        label_switching(structure, pot, labels, lengths, cu=-1.0)
    with pytest.raises(ValueError, match="max_passes must be an int >= 1"):
        label_switching(structure, pot, labels, lengths, max_passes=0)
    with pytest.raises(ValueError, match="block_size must be an int >= 1 or None"):
        label_switching(structure, pot, labels, lengths, block_size=0)
    with pytest.raises(ValueError, match="method must be one of"):
        label_switching(structure, pot, labels, lengths, method="fast")
    with pytest.raises(ValueError, match=r"labels must have shape \(B, N\)"):
        label_switching(structure, pot, labels[0], lengths)
    with pytest.raises(ValueError, match="tokens must hold B = 2 token lists"):
        label_switching(structure, pot, labels, lengths, tokens=tokens[:1])
    with pytest.raises(NotImplementedError, match="hard corpus-level constraints"):
        cs = ConstraintSet([LabelProportion("a", 0.3, hard=True)], labels=NAMES)
        label_switching(structure, pot, labels, lengths, cs)
    with pytest.raises(ValueError, match="is not bound to a label list"):
        label_switching(structure, pot, labels, lengths, ConstraintSet([AtMostOnce("a")]))


# ---------------------------------------------------------------------------------- trees
def _tree_problem(seed: int):
    g = torch.Generator().manual_seed(seed)
    b, n, nt = 3, 4, 3
    terms = torch.randn(b, n, nt, generator=g, dtype=torch.float64)
    rules = torch.randn(nt, nt, nt, generator=g, dtype=torch.float64)
    pot = CKY.potentials_from(terms, rules)
    lengths = torch.tensor([4, 3, 1])
    return pot, lengths


@pytest.mark.parametrize("cost", ["zero_one", "hamming"])
def test_leaf_rule_switching_never_increases_objective(cost):
    torch.set_default_dtype(torch.float64)
    try:
        pot, lengths = _tree_problem(0)
        structure = CKY(3)
        labels, _ = structure.argmax(pot, lengths)
        cons = [SymbolProportion([1], 0.8, nodes="internal", weight=5.0)]
        before, _ = switching_objective(structure, pot, labels, lengths, cons, None, 0.1, cost)
        out = leaf_rule_switching(structure, pot, labels, lengths, cons, 0.1, num_trials=6, cost=cost)
        after, _ = switching_objective(structure, pot, out.labels, lengths, cons, None, 0.1, cost)
        assert float(after) <= float(before) + 1e-9
        assert abs(out.objective - float(after)) < 1e-6
        structure.check_labels(out.labels, lengths)  # valid trees
        assert len(out.switches_per_pass) == 6
    finally:
        torch.set_default_dtype(torch.float32)


def test_symbol_proportion_counts_and_errors():
    labels = torch.tensor([[[0, 1, 2], [0, 0, 1], [1, 1, 2]]])
    sp = SymbolProportion([2], 0.5, nodes="all")
    assert sp.counts(labels, torch.tensor([2])).tolist() == [[2.0, 3.0]]
    assert SymbolProportion([2], 0.5).counts(labels, torch.tensor([2])).tolist() == [[1.0, 1.0]]
    assert abs(float(sp.penalty_from_counts(torch.tensor([2.0, 3.0]))) - (2 / 3 - 0.5)) < 1e-6
    assert float(SymbolProportion([2], 0.5, bound="le").violation_from_counts(torch.tensor([1.0, 4.0]))) == 0
    with pytest.raises(ValueError, match=r"target must be a proportion in \[0, 1\]"):
        SymbolProportion([1], 1.5)
    with pytest.raises(ValueError, match="symbols must be a non-empty list"):
        SymbolProportion([], 0.5)
    with pytest.raises(ValueError, match="bound must be one of"):
        SymbolProportion([1], 0.5, bound="gt")
    with pytest.raises(ValueError, match="nodes must be one of"):
        SymbolProportion([1], 0.5, nodes="roots")
    with pytest.raises(ValueError, match=r"labels must have shape \(B, 2N - 1, 3\)"):
        sp.counts(labels[0], torch.tensor([2]))
    with pytest.raises(ValueError, match="num_trials must be an int >= 1"):
        pot, lengths = _tree_problem(1)
        leaf_rule_switching(CKY(3), pot, CKY(3).argmax(pot, lengths)[0], lengths, num_trials=0)
    with pytest.raises(TypeError, match="structure must be a CKY"):
        leaf_rule_switching(LinearChain(3), pot, labels, lengths)


# ---------------------------------------------------------------------------------- module
class _TinyData(SemiSupervisedDataModule):
    label_names = ("a", "b", "c")
    num_labels = 3

    def build(self):
        g = torch.Generator().manual_seed(0)

        def ex(i: int, labeled: bool):
            n = 4 + i % 3
            y = torch.randint(0, 3, (n,), generator=g)
            x = torch.nn.functional.one_hot(y, 3).double() * 2 + 0.5 * torch.randn(n, 3, generator=g, dtype=torch.float64)
            out = {"inputs": x.float(), "index": torch.tensor(i), "tokens": tuple("x" for _ in range(n))}
            if labeled:
                out["labels"] = y
            return out

        return {
            "labeled": [ex(i, True) for i in range(4)],
            "unlabeled": [ex(i, False) for i in range(12)],
            "dev": [ex(i, True) for i in range(4)],
            "test": [ex(i, True) for i in range(4)],
        }


def _fit(max_epochs: int, tmp_path, ckpt=None, save=False):
    pl.seed_everything(0)
    module = LabelSwitchingModule(
        LinearChain(3), LinearChainScorer(3, input_dim=3, init_std=0.01),
        constraints=ConstraintSet([AtMostOnce("a"), LabelProportion("b", 0.3)]),
        C=1.0, supervised_epochs=1, max_passes=2, lbfgs_max_iter=3,
    )
    cb = LabelSwitchingAnnealing(start=0.25, factor=2.0, max_alternations=2, restore_best=False)
    callbacks = [cb]
    if save:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0))
    trainer = pl.Trainer(
        max_epochs=max_epochs, callbacks=callbacks, logger=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, enable_checkpointing=save,
        accelerator="cpu",
    )
    trainer.fit(module, datamodule=_TinyData(), ckpt_path=ckpt)
    return module, cb


@pytest.mark.filterwarnings("ignore")
def test_module_anneals_and_resumes_from_checkpoint(tmp_path):
    full, cb_full = _fit(4, tmp_path)
    assert [h["Cu"] for h in full.history][:1] == [0.0]
    assert all(h["Cu"] > 0 for h in full.history[1:])
    assert cb_full.records and cb_full.records[0]["Cu"] == pytest.approx(0.25)
    _fit(2, tmp_path, save=True)
    resumed, cb_res = _fit(4, tmp_path, ckpt=str(tmp_path / "last.ckpt"))
    assert cb_res.step == cb_full.step and cb_res.records == cb_full.records
    assert float(resumed.current_Cu) == float(full.current_Cu)
    assert torch.equal(resumed.pseudo_labels, full.pseudo_labels)
    assert [h["switches"] for h in resumed.history] == [h["switches"] for h in full.history]


def test_module_errors():
    with pytest.raises(ValueError, match="supervised_epochs must be an int >= 0"):
        LabelSwitchingModule(LinearChain(3), LinearChainScorer(3, input_dim=3), supervised_epochs=-1)
    with pytest.raises(TypeError, match="constraints of a CKY structure must be SymbolProportion"):
        LabelSwitchingModule(CKY(3), LinearChainScorer(3, input_dim=3), constraints=[AtMostOnce("a")])
    with pytest.raises(ValueError, match=r"start must be in \(0, 1\]"):
        LabelSwitchingAnnealing(start=0.0)
    with pytest.raises(ValueError, match="factor must be > 1"):
        LabelSwitchingAnnealing(factor=1.0)
    with pytest.raises(ValueError, match="mode must be 'max' or 'min'"):
        LabelSwitchingAnnealing(mode="best")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_guided_start_is_the_brute_force_penalised_argmax(seed):
    """With ``guide`` the first labels maximise s(y) - sum_k weight_k * violations_k(y) (every
    labeling enumerated), per example of a ragged batch; without it they are the argmax."""
    pot, lengths, tokens, _ = _problem(seed, 4, 4)
    guide = ConstraintSet([PunctuationTransitions(weight=1.5), WordLabels(words=["x"], labels=["b"], weight=0.7),
                           AllowedFirst(["a"], weight=2.0)], labels=NAMES)
    module = LabelSwitchingModule(LinearChain(3), LinearChainScorer(3, input_dim=3), guide=guide)
    chunk = {"lengths": lengths, "tokens": tokens}
    got = module.start_labels(pot, chunk)
    chain = LinearChain(3)
    for i in range(4):
        n = int(lengths[i])
        cands = torch.tensor(list(itertools.product(range(3), repeat=n)))
        k = cands.shape[0]
        scores = chain.score(pot[i : i + 1, :n].expand(k, -1, -1, -1), cands, torch.full((k,), n))
        penalty = guide.instance_penalty(cands, torch.full((k,), n), [tokens[i][:n]] * k)
        best = cands[int((scores - penalty).argmax())]
        assert torch.equal(got[i, :n], best)
    plain = LabelSwitchingModule(LinearChain(3), LinearChainScorer(3, input_dim=3))
    assert torch.equal(plain.start_labels(pot, chunk), chain.argmax(pot, lengths)[0])


def test_guide_errors():
    scorer = LinearChainScorer(3, input_dim=3)
    with pytest.raises(TypeError, match="guide must be a ConstraintSet or None; got list"):
        LabelSwitchingModule(LinearChain(3), scorer, guide=[PunctuationTransitions()])
    with pytest.raises(ValueError, match=r"guide: AtMostOnce\(a\) must be an instance-level constraint whose penalty"):
        LabelSwitchingModule(LinearChain(3), scorer, guide=ConstraintSet([AtMostOnce("a")]))
    with pytest.raises(ValueError, match="guide: .* level='corpus'"):
        LabelSwitchingModule(LinearChain(3), scorer, guide=ConstraintSet([TransitionFraction(0.1)]))
    with pytest.raises(ValueError, match="guide: PunctuationTransitions is hard; the guide weighs violations"):
        LabelSwitchingModule(LinearChain(3), scorer, guide=ConstraintSet([PunctuationTransitions(hard=True)]))
    with pytest.raises(ValueError, match="guide needs a LinearChain structure .*; got CKY"):
        LabelSwitchingModule(CKY(3), scorer, guide=ConstraintSet([PunctuationTransitions()]))


# ---------------------------------------------------------------------------------- grammar CKY
def _sparse_grammar(seed: int, nt: int = 6):
    g = torch.Generator().manual_seed(seed)
    allowed = torch.rand(nt, nt, nt, generator=g) < 0.15
    allowed[0, 1, 1] = allowed[0, 0, 1] = allowed[0, 1, 0] = allowed[0, 0, 0] = True  # every sentence parses
    rules = torch.randn(nt, nt, nt, generator=g, dtype=torch.float64)
    rules = torch.where(allowed, rules, torch.full((), LOG_ZERO, dtype=torch.float64))
    terms = torch.randn(3, 5, nt, generator=g, dtype=torch.float64)
    return CKY.potentials_from(terms, rules, torch.randn(nt, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grammar_cky_argmax_matches_dense_cky(seed):
    pot = _sparse_grammar(seed)
    lengths = torch.tensor([5, 3, 1])
    y1, s1 = CKY(6).argmax(pot, lengths)
    y2, s2 = GrammarCKY(6).argmax(pot, lengths)
    assert torch.equal(y1, y2) and torch.allclose(s1, s2)
    a1, _ = CKY(6).cost_augmented_argmax(pot, y1, lengths, cost="hamming")
    a2, _ = GrammarCKY(6).cost_augmented_argmax(pot, y1, lengths, cost="hamming")
    assert torch.equal(a1, a2)


def test_grammar_cky_falls_back_when_nothing_parses():
    nt = 3
    rules = torch.full((nt, nt, nt), LOG_ZERO, dtype=torch.float64)
    rules[0, 1, 2] = 0.0  # only A -> B C; a sentence of leaves that cannot be B C has no parse
    terms = torch.zeros(1, 2, nt, dtype=torch.float64)
    terms[0, 1, 2] = LOG_ZERO
    terms[0, 0, 1] = LOG_ZERO
    pot = CKY.potentials_from(terms, rules)
    y1, _ = CKY(nt).argmax(pot)
    y2, _ = GrammarCKY(nt).argmax(pot)
    assert torch.equal(y1, y2)


def test_symbol_proportion_names_bind_and_module_binds_them():
    sp = SymbolProportion(["S", 2], 0.5)
    assert sp.label_names is None
    with pytest.raises(ValueError, match="names symbols; call bind"):
        sp.counts(torch.zeros(1, 1, 3, dtype=torch.long), torch.tensor([1]))
    bound = sp.bind(["NP", "S", "VP"])
    assert bound.symbols == [1, 2] and bound.label_names == [1, 2]
    with pytest.raises(ValueError, match=r"symbols \['X'\] are not in the grammar"):
        SymbolProportion(["X"], 0.5).bind(["NP"])
    pot, lengths = _tree_problem(0)
    labels, _ = CKY(3).argmax(pot, lengths)
    with pytest.raises(ValueError, match="is not bound to a label list"):
        leaf_rule_switching(CKY(3), pot, labels, lengths, [sp])


def test_grammar_scorer_adopts_the_data_module_grammar():
    class _Grammar:
        lexicon = torch.tensor([[False, False], [True, False], [False, True]])
        allowed_terms = torch.tensor([True, True])
        allowed_rules = torch.zeros(2, 2, 2, dtype=torch.bool)
        allowed_roots = torch.tensor([True, False])

    scorer = GrammarScorer(3, 4)
    scorer.adopt_grammar(_Grammar())
    assert scorer.lexicon.shape == (4, 3) and not bool(scorer.lexicon[3].any())
    assert scorer.allowed_rules.shape == (3, 3, 3) and not bool(scorer.allowed_terms[2])
    with pytest.raises(ValueError, match="set num_symbols >= 2 and num_words >= 3"):
        GrammarScorer(1, 4).adopt_grammar(_Grammar())
    with pytest.raises(ValueError, match="needs a set-up TreebankDataModule"):
        GrammarScorer(3, 4).adopt_grammar(object())


def test_plot_label_switching_writes_the_three_figures(tmp_path):
    hist = [
        {"epoch": 0, "Cu": 0.0, "switches": 0, "objective": 3.0, "test_accuracy": 50.0},
        {"epoch": 1, "Cu": 0.5, "switches": 7, "objective": 2.0, "test_accuracy": 60.0, "selected": True},
        {"epoch": 2, "Cu": 1.0, "switches": 1, "objective": 2.5, "test_accuracy": 58.0},
    ]
    paths = plot_label_switching({"run": hist, "other": hist[:2]}, str(tmp_path / "ls"), title="t")
    assert [p.rsplit("_", 1)[-1] for p in paths] == ["objective.png", "accuracy.png", "switches.png"]
    assert all((tmp_path / p.rsplit("/", 1)[-1]).stat().st_size > 0 for p in paths)
