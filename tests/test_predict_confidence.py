"""``structssl predict --confidence`` with factored chain potentials: the per-token marginal of
the predicted tag equals the edge layout's for the same weights, and enumeration's."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from structssl.data.batch import collate_sequences
from structssl.data.records import Sequence
from structssl.data.tagging import TaggingFormat
from structssl.losses import CRFNLLLoss
from structssl.predict import Tagger
from structssl.scorers import LinearChainScorer
from structssl.structures import LinearChain

pytest.importorskip("pytorch_lightning")

from structssl.training import SupervisedModule  # noqa: E402

F64 = torch.float64

_TRAIN = """Juan B-PER
vive O
en O
Madrid B-LOC

La B-ORG
ONU I-ORG
habla O

Ana B-PER
Lopez I-PER
y O
Madrid B-LOC
"""


def _tagger(tmp_path: Path) -> Tagger:
    path = tmp_path / "train.conll"
    path.write_text(_TRAIN, encoding="utf-8")
    fmt = TaggingFormat()
    sents = fmt.read_labeled(path)
    fmt.fit(sents, sents)
    torch.manual_seed(0)
    model = SupervisedModule(
        structure=LinearChain(), scorer=LinearChainScorer(factored=True, init_std=0.7),
        loss=CRFNLLLoss(), C=1.0, optimizer="lbfgs",
    )
    model.adopt_sizes(fmt.sizes())
    with torch.no_grad():  # transitions, start and end away from zero too
        for p in model.scorer.head.parameters():
            p.normal_(0.0, 0.7)
    return Tagger(model.double().eval(), fmt)


def _edges(tagger: Tagger) -> None:
    tagger.model.scorer.factored = tagger.model.scorer.head.factored = False


def test_factored_confidence_equals_the_edge_layout_and_enumeration(tmp_path: Path) -> None:
    tagger = _tagger(tmp_path)
    sentences = [["Juan", "y", "Ana", "Madrid"], ["ONU"], ["La", "zzz", "habla", "en", "Madrid"]]
    records = [Sequence(tokens=tuple(s), features=tuple(() for _ in s)) for s in sentences]
    factored = tagger.predict(records, confidence=True, kbest=2)
    _edges(tagger)
    edges = tagger.predict(records, confidence=True, kbest=2)
    for a, b in zip(factored, edges, strict=True):
        assert a.tags == b.tags and a.alternatives == b.alternatives
        assert a.confidence is not None and b.confidence is not None
        torch.testing.assert_close(
            torch.tensor(a.confidence, dtype=F64), torch.tensor(b.confidence, dtype=F64),
            rtol=0, atol=1e-12,
        )
    # enumeration over every tagging of the first sentence, on its edge potentials
    batch = collate_sequences(
        [tagger.format.encode(records[0], with_labels=False)], sequence_keys=("inputs", "inputs_b")
    )
    with torch.no_grad():
        pot = tagger.model.decode_potentials(batch)[0]  # (N, C, C), y_{-1} = 0 at t = 0
    n, c = pot.shape[0], pot.shape[1]
    every = torch.tensor(list(itertools.product(range(c), repeat=n)))  # (C^N, N)
    prev = torch.cat([torch.zeros_like(every[:, :1]), every[:, :-1]], 1)
    scores = pot[torch.arange(n), prev, every].sum(1)  # (C^N,)
    index = {t: i for i, t in enumerate(tagger.format.tags)}
    predicted = torch.tensor([index[t] for t in factored[0].tags])  # BIO tags here
    assert torch.equal(every[scores.argmax()], predicted)
    expected = (torch.softmax(scores, 0).unsqueeze(1) * (every == predicted)).sum(0)
    torch.testing.assert_close(
        torch.tensor(factored[0].confidence, dtype=F64), expected, rtol=0, atol=1e-10
    )
