"""``StructuredModule(valid_spans=True)``: span taggers decode only valid BIO sequences.

Checked against enumeration of every tagging (argmax, marginals, k-best over the valid ones),
on factored and edge-layout potentials, with ragged lengths; and end to end through
:class:`~structssl.predict.Tagger` in the IOB1 scheme, where invalid BIO sequences used to
come back as duplicate k-best taggings."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from structssl.data.records import Sequence
from structssl.data.tagging import TaggingFormat
from structssl.losses import CRFNLLLoss
from structssl.predict import Tagger
from structssl.scorers import LinearChainScorer
from structssl.structures import ChainPotentials, LinearChain

pytest.importorskip("pytorch_lightning")

from structssl.training import SupervisedModule  # noqa: E402

F64 = torch.float64
TAGS = ("O", "B-A", "I-A", "B-B", "I-B")


def _module(task: str = "bio", valid_spans: bool = True) -> SupervisedModule:
    return SupervisedModule(
        structure=LinearChain(len(TAGS)), scorer=LinearChainScorer(len(TAGS), num_features=3),
        loss=CRFNLLLoss(), task=task, tags=TAGS if task == "bio" else None, valid_spans=valid_spans,
    )


def _valid(seq: tuple[int, ...]) -> bool:
    prev = "O"
    for tag in (TAGS[i] for i in seq):
        if tag.startswith("I-") and prev[2:] != tag[2:]:
            return False
        prev = tag
    return True


def _potentials(b: int, n: int) -> ChainPotentials:
    """Random factored potentials whose best taggings are mostly invalid (I- favoured)."""
    g = torch.Generator().manual_seed(0)
    emissions = torch.randn(b, n, len(TAGS), generator=g, dtype=F64)
    emissions[..., 2] += 2.0  # I-A
    emissions[..., 4] += 1.5  # I-B
    transitions = torch.randn(len(TAGS), len(TAGS), generator=g, dtype=F64)
    start = torch.randn(len(TAGS), generator=g, dtype=F64)
    return ChainPotentials.from_factors(emissions, transitions, start, torch.randn(b, len(TAGS), generator=g, dtype=F64))


def _enumerate(pot: ChainPotentials, row: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every tagging of example ``row`` (its first ``n`` positions) and its score."""
    e, t, s, end = (x[row].double() for x in pot)
    seqs = torch.tensor(list(itertools.product(range(len(TAGS)), repeat=n)))
    score = e[torch.arange(n), seqs].sum(1) + s[seqs[:, 0]] + end[seqs[:, -1]]
    score = score + t[seqs[:, :-1], seqs[:, 1:]].sum(1)
    return seqs, score


@pytest.mark.parametrize("layout", ["factored", "edges"])
def test_decoding_matches_enumeration_of_the_valid_taggings(layout: str) -> None:
    lengths = torch.tensor([4, 1, 3])
    module, structure = _module(), LinearChain(len(TAGS))
    pot = _potentials(3, 4)
    plain_labels = structure.argmax(pot, lengths)[0]
    if layout == "edges":
        pot = structure.edge_potentials(pot, lengths)
    constrained = module.span_constrained(pot, lengths)
    labels = structure.argmax(constrained, lengths)[0]
    marginals = structure.marginals(constrained, lengths)
    if isinstance(marginals, ChainPotentials):
        nodes = marginals.emissions
    else:
        nodes = structure.node_parts(marginals)
    kbest, kscores = structure.kbest(constrained, 3, lengths)
    factored = _potentials(3, 4)
    some_invalid = False
    for row, n in enumerate(lengths.tolist()):
        seqs, score = _enumerate(factored, row, n)
        ok = torch.tensor([_valid(tuple(s.tolist())) for s in seqs])
        some_invalid |= not _valid(tuple(plain_labels[row, :n].tolist()))
        valid_scores = score.masked_fill(~ok, float("-inf"))
        assert torch.equal(labels[row, :n], seqs[valid_scores.argmax()])
        probs = torch.softmax(valid_scores, 0)
        expected = torch.stack([(probs.unsqueeze(1) * (seqs[:, t : t + 1] == torch.arange(len(TAGS)))).sum(0)
                                for t in range(n)])
        torch.testing.assert_close(nodes[row, :n].double(), expected, rtol=0, atol=1e-10)
        top = valid_scores.topk(3)
        for r in range(3):
            assert torch.equal(kbest[row, r, :n], seqs[top.indices[r]])
            torch.testing.assert_close(kscores[row, r].double(), top.values[r], rtol=0, atol=1e-10)
    assert some_invalid  # the unconstrained argmax is invalid somewhere: the test can fail


def test_shared_transitions_stay_shared_and_other_tasks_are_unchanged() -> None:
    pot = _potentials(2, 3)
    constrained = _module().span_constrained(pot)
    assert constrained.transitions.stride(0) == 0  # one (C, C) matrix for the batch
    assert bool(torch.isinf(constrained.transitions[0, 0, 2]))  # O -> I-A
    assert bool(torch.isinf(constrained.start[0, 4]))  # I-B first
    assert _module(valid_spans=False).span_constrained(pot) is pot
    assert _module(task="sequence").span_constrained(pot) is pot


_IOB1 = """Juan I-PER
vive O
en O
Madrid I-LOC

La I-ORG
ONU I-ORG
habla O

Ana I-PER
Lopez I-PER
Madrid B-PER
"""


@pytest.mark.parametrize("valid_spans", [True, False])
def test_iob1_predictions_are_well_formed_and_kbest_distinct(tmp_path: Path, valid_spans: bool) -> None:
    path = tmp_path / "train.conll"
    path.write_text(_IOB1, encoding="utf-8")
    fmt = TaggingFormat()
    sents = fmt.read_labeled(path)
    fmt.fit(sents, sents)
    assert fmt.scheme == "iob1"
    torch.manual_seed(3)
    model = SupervisedModule(
        structure=LinearChain(), scorer=LinearChainScorer(factored=True, init_std=1.0),
        loss=CRFNLLLoss(), valid_spans=valid_spans,
    )
    model.adopt_sizes(fmt.sizes())
    with torch.no_grad():
        for p in model.scorer.head.parameters():
            p.normal_(0.0, 1.0)
    tagger = Tagger(model.double().eval(), fmt)
    words = ["Juan", "vive", "en", "Madrid", "La", "ONU", "habla", "Ana", "zzz"]
    records = [Sequence(tokens=(w,), features=((),)) for w in words]
    records += [Sequence(tokens=tuple(words[i : i + 3]), features=((),) * 3) for i in range(len(words) - 2)]
    problems = 0
    for sent in tagger.predict(records, kbest=4):
        taggings = [sent.tags] + [a for a in sent.alternatives if a is not None]
        problems += len(set(taggings)) < len(taggings)  # duplicates after the scheme conversion
        for tags in taggings:  # IOB1: B-X only right after an X
            problems += any(t.startswith("B-") and (i == 0 or tags[i - 1][2:] != t[2:])
                            for i, t in enumerate(tags))
    if valid_spans:
        assert problems == 0
    else:
        assert problems > 0  # what valid_spans prevents
