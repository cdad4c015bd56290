"""Metrics: hand-computed values, a plain-Python conlleval port, accumulation, merging, reset."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structssl.data.synthetic import pcfg_treebank
from structssl.metrics import (
    BracketF1,
    ExactMatch,
    MicroF1,
    LabelProportions,
    SpanF1,
    TokenAccuracy,
    task_metrics,
)
from structssl.structures.cky import CKY

TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


# ---------------------------------------------------------------------- conlleval port
def _split(tag: str) -> tuple[str, str]:
    return (tag, "") if tag == "O" else (tag[0], tag[2:])


def _end_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    end = (prev_tag, tag) in (("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"))
    return end or (prev_tag != "O" and prev_tag != "." and prev_type != type_)


def _start_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    start = (prev_tag, tag) in (("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"))
    return start or (tag != "O" and tag != "." and prev_type != type_)


def conlleval_counts(gold: list[list[str]], guess: list[list[str]]) -> tuple[int, int, int]:
    """(correct, guessed, gold) chunk counts: a line-by-line port of conlleval.pl's main loop.

    Sentences are separated by boundary lines, which read as ``O O``.
    """
    correct_chunk = found_guessed = found_correct = 0
    in_correct = False
    last_c, last_g, last_ct, last_gt = "O", "O", "", ""
    lines: list[tuple[str, str]] = []
    for g_sent, p_sent in zip(gold, guess):
        lines.extend(zip(g_sent, p_sent))
        lines.append(("O", "O"))  # the boundary
    for c_tag, g_tag in lines:
        (c, ct), (g, gt) = _split(c_tag), _split(g_tag)
        if in_correct:
            end_c = _end_of_chunk(last_c, c, last_ct, ct)
            end_g = _end_of_chunk(last_g, g, last_gt, gt)
            if end_c and end_g and last_gt == last_ct:
                in_correct = False
                correct_chunk += 1
            elif end_c != end_g or gt != ct:
                in_correct = False
        start_c = _start_of_chunk(last_c, c, last_ct, ct)
        start_g = _start_of_chunk(last_g, g, last_gt, gt)
        if start_c and start_g and gt == ct:
            in_correct = True
        found_correct += start_c
        found_guessed += start_g
        last_c, last_g, last_ct, last_gt = c, g, ct, gt
    if in_correct:
        correct_chunk += 1
    return correct_chunk, found_guessed, found_correct


def _f1(tp: int, n_pred: int, n_gold: int) -> tuple[float, float, float]:
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def _tags(ids: torch.Tensor, lengths: torch.Tensor) -> list[list[str]]:
    return [[TAGS[i] for i in row[: int(m)].tolist()] for row, m in zip(ids, lengths)]


# ---------------------------------------------------------------------- token accuracy
def test_token_accuracy_hand_values_accumulation_and_reset() -> None:
    preds = torch.tensor([[1, 2, 0, 9], [1, 1, 1, 1]])
    target = torch.tensor([[1, 2, 1, 0], [1, 0, 5, 5]])
    lengths = torch.tensor([3, 2])  # valid: (1,2,0 vs 1,2,1) and (1,1 vs 1,0)
    metric = TokenAccuracy()
    metric.update(preds, target, lengths)
    assert float(metric.compute()) == pytest.approx(3 / 5)
    metric.update(preds[:1], target[:1])  # all 4 positions: 2 of 4 right
    assert float(metric.compute()) == pytest.approx(5 / 9)
    metric.reset()
    metric.update(preds, target, torch.tensor([0, 0]))  # no valid position
    assert int(metric.total) == 0 and float(metric.compute()) == 0.0  # 0 / 0 reads as 0
    metric.reset()
    other = TokenAccuracy()
    metric.update(preds[:1], target[:1], lengths[:1])
    other.update(preds[1:], target[1:], lengths[1:])
    metric.merge_state(other)  # what the distributed sum-reduction does
    assert float(metric.compute()) == pytest.approx(3 / 5)


# ---------------------------------------------------------------------- span F1
def test_span_f1_hand_example() -> None:
    # gold: PER(0,1) LOC(3,4) | PER(0,1) from a stray I-PER I-PER
    gold = torch.tensor([[1, 2, 0, 3, 4, 0], [2, 2, 0, 0, 0, 0]])
    # pred: PER(0,1) LOC(3,3) | PER(0,0) (stray I-PER) LOC(1,1) (I-LOC after I-PER)
    pred = torch.tensor([[1, 2, 0, 3, 0, 0], [2, 4, 0, 0, 0, 0]])
    metric = SpanF1(TAGS, output="all")
    metric.update(pred, gold, torch.tensor([6, 3]))
    out = metric.compute()
    assert isinstance(out, dict)
    assert float(out["precision"]) == pytest.approx(1 / 4)
    assert float(out["recall"]) == pytest.approx(1 / 3)
    assert float(out["f1"]) == pytest.approx(2 / 7)
    assert float(out["f1/PER"]) == pytest.approx(0.5) and float(out["f1/LOC"]) == 0.0
    assert conlleval_counts(
        _tags(gold, torch.tensor([6, 3])), _tags(pred, torch.tensor([6, 3]))
    ) == (1, 4, 3)
    assert metric.entity_types == ("PER", "LOC")


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_span_f1_matches_conlleval_port(data: st.DataObject) -> None:
    b = data.draw(st.integers(1, 4))
    n = data.draw(st.integers(1, 8))
    gold = torch.tensor(
        data.draw(
            st.lists(st.lists(st.integers(0, 4), min_size=n, max_size=n), min_size=b, max_size=b)
        )
    )
    noise = torch.tensor(
        data.draw(
            st.lists(st.lists(st.integers(0, 4), min_size=n, max_size=n), min_size=b, max_size=b)
        )
    )
    flip = torch.tensor(
        data.draw(st.lists(st.lists(st.booleans(), min_size=n, max_size=n), min_size=b, max_size=b))
    )
    pred = torch.where(flip, noise, gold)
    lengths = torch.tensor(data.draw(st.lists(st.integers(0, n), min_size=b, max_size=b)))
    tp, n_pred, n_gold = conlleval_counts(_tags(gold, lengths), _tags(pred, lengths))
    metric = SpanF1(TAGS, output="all")
    metric.update(pred, gold, lengths)
    out = metric.compute()
    assert (int(metric.tp.sum()), int(metric.n_pred.sum()), int(metric.n_gold.sum())) == (
        tp,
        n_pred,
        n_gold,
    )
    p, r, f = _f1(tp, n_pred, n_gold)
    assert float(out["precision"]) == pytest.approx(p, abs=1e-6)
    assert float(out["recall"]) == pytest.approx(r, abs=1e-6)
    assert float(out["f1"]) == pytest.approx(f, abs=1e-6)
    split = SpanF1(TAGS)  # one example per update = one big update
    for i in range(b):
        split.update(pred[i : i + 1], gold[i : i + 1], lengths[i : i + 1])
    assert float(split.compute()) == pytest.approx(f, abs=1e-6)


def test_span_f1_errors() -> None:
    with pytest.raises(
        ValueError, match="tags must be 'O', 'B-X' or 'I-X' \\(BIO / IOB2\\); got 'PER'"
    ):
        SpanF1(["O", "PER"])
    with pytest.raises(TypeError, match="tags must be strings; got 3"):
        SpanF1(["O", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="tags must be distinct"):
        SpanF1(["O", "B-A", "O"])
    with pytest.raises(
        ValueError, match="output must be one of 'f1', 'precision', 'recall', 'all'; got 'auc'"
    ):
        SpanF1(TAGS, output="auc")  # type: ignore[arg-type]
    metric = SpanF1(TAGS)
    with pytest.raises(
        ValueError,
        match=r"preds must be tag ids in \[0, 5\) at valid positions; got values in \[0, 7\]",
    ):
        metric.update(torch.tensor([[7, 0]]), torch.tensor([[0, 0]]))
    metric.update(torch.tensor([[1, 7]]), torch.tensor([[1, 0]]), torch.tensor([1]))  # 7 is padding
    assert float(metric.compute()) == 1.0
    with pytest.raises(
        ValueError, match=r"preds and target must have the same shape; got \(1, 2\) and \(1, 3\)"
    ):
        metric.update(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(
        ValueError, match=r"lengths must be in \[0, 2\] \(N from preds\); got values in \[3, 3\]"
    ):
        metric.update(
            torch.zeros(1, 2, dtype=torch.long),
            torch.zeros(1, 2, dtype=torch.long),
            torch.tensor([3]),
        )
    with pytest.raises(
        ValueError, match=r"lengths must have shape \(B,\) = \(1,\) \(B from preds\); got \(2,\)"
    ):
        metric.update(
            torch.zeros(1, 2, dtype=torch.long),
            torch.zeros(1, 2, dtype=torch.long),
            torch.tensor([1, 1]),
        )
    with pytest.raises(
        ValueError, match="preds must have an integer or bool dtype; got torch.float32"
    ):
        metric.update(torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.long))


# ---------------------------------------------------------------------- micro F1
def test_micro_f1_hand_values_and_alternative() -> None:
    preds = torch.tensor([[1, 0, 1], [0, 0, 1], [1, 1, 1]])
    target = torch.tensor([[1, 1, 0], [0, 0, 1], [0, 1, 1]])
    metric = MicroF1()
    metric.update(preds, target)
    tp, fp, fn = 4, 2, 1
    assert float(metric.compute()) == pytest.approx(2 * tp / (2 * tp + fp + fn))
    g = torch.Generator().manual_seed(0)
    big_p, big_t = (
        torch.randint(0, 2, (50, 6), generator=g),
        torch.randint(0, 2, (50, 6), generator=g),
    )
    one, many = MicroF1(), MicroF1()
    one.update(big_p.bool(), big_t)
    for chunk in range(0, 50, 7):
        many.update(big_p[chunk : chunk + 7], big_t[chunk : chunk + 7])
    p = (big_p & big_t).sum() / big_p.sum()
    r = (big_p & big_t).sum() / big_t.sum()
    assert float(one.compute()) == pytest.approx(float(2 * p * r / (p + r)), abs=1e-6)
    assert float(many.compute()) == pytest.approx(float(one.compute()))
    with pytest.raises(
        ValueError, match=r"target must hold 0/1 label indicators; got values in \[0, 2\]"
    ):
        metric.update(preds, target + target)
    with pytest.raises(ValueError, match=r"preds must have 2 dims; got shape \(3,\)"):
        metric.update(preds[0], target[0])


# ---------------------------------------------------------------------- exact match
def test_exact_match_layouts() -> None:
    metric = ExactMatch()
    preds = torch.tensor([[1, 2, 9], [1, 2, 3], [0, 0, 0]])
    target = torch.tensor([[1, 2, 0], [1, 2, 0], [0, 1, 0]])
    metric.update(preds, target, torch.tensor([2, 3, 1]))  # padding differences do not count
    assert float(metric.compute()) == pytest.approx(2 / 3)
    metric.update(preds, target)  # no lengths: everything counts -> 0 of 3 more
    assert float(metric.compute()) == pytest.approx(2 / 6)
    classes = ExactMatch()
    classes.update(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 0, 3, 0]))
    assert float(classes.compute()) == 0.5
    trees = ExactMatch(tree=True)
    a = torch.tensor([[[0, 1, 0], [0, 0, 1], [1, 1, 1]], [[0, 0, 2], [5, 5, 5], [5, 5, 5]]])
    b = a.clone()
    b[1, 1:] = 0
    trees.update(a, b, torch.tensor([2, 1]))
    assert float(trees.compute()) == 1.0
    with pytest.raises(
        ValueError,
        match=r"lengths must be in \[0, 2\] \(\(rows \+ 1\) / 2 from preds\); got values in \[2, 3\]",
    ):
        trees.update(a, b, torch.tensor([2, 3]))
    with pytest.raises(
        ValueError, match=r"lengths needs preds with a dim 1 to mask; got shape \(4,\)"
    ):
        classes.update(
            torch.zeros(4, dtype=torch.long),
            torch.zeros(4, dtype=torch.long),
            torch.ones(4, dtype=torch.long),
        )


# ---------------------------------------------------------------------- bracket F1
def _brackets(spans: torch.Tensor, m: int, labelled: bool, pre: bool, root: bool) -> Counter:
    out: Counter = Counter()
    for s, e, a in spans[: 2 * m - 1].tolist():
        if pre and s == e:
            continue
        if root and (s, e) == (0, m - 1):
            continue
        out[(s, e, a if labelled else 0)] += 1
    return out


def test_bracket_f1_hand_example() -> None:
    # gold (S (A x y) z): S(0,2) A(0,1) leaves; pred (S x (A y z)): S(0,2) A(1,2) leaves
    gold = torch.tensor([[[0, 2, 0], [0, 1, 1], [0, 0, 2], [1, 1, 2], [2, 2, 3]]])
    pred = torch.tensor([[[0, 2, 0], [0, 0, 2], [1, 2, 1], [1, 1, 2], [2, 2, 2]]])
    lengths = torch.tensor([3])
    metric = BracketF1()
    metric.update(pred, gold, lengths)
    assert float(metric.compute()) == pytest.approx(0.5)  # S matches, A does not
    with_leaves = BracketF1(exclude_preterminals=False, output="all")
    with_leaves.update(pred, gold, lengths)
    out = with_leaves.compute()
    assert isinstance(out, dict) and float(out["f1"]) == pytest.approx(3 / 5)  # S, (0,0,2), (1,1,2)
    no_root = BracketF1(exclude_root=True)
    no_root.update(pred, gold, lengths)
    assert float(no_root.compute()) == 0.0


@pytest.mark.parametrize(
    "labelled,pre,root",
    [(True, True, False), (False, True, False), (True, False, True), (False, False, False)],
)
def test_bracket_f1_matches_brute_force(labelled: bool, pre: bool, root: bool) -> None:
    bank = pcfg_treebank(
        12, num_nonterminals=2, num_preterminals=2, vocab_size=5, min_length=1, max_length=5, seed=4
    )
    cky = CKY(4)
    g = torch.Generator().manual_seed(1)
    n = bank.words.shape[1]
    pot = CKY.potentials_from(
        torch.randn(12, n, 4, generator=g, dtype=torch.float64),
        torch.randn(4, 4, 4, generator=g, dtype=torch.float64),
    )
    pred, _ = cky.argmax(pot, bank.lengths)
    metric = BracketF1(labelled=labelled, exclude_preterminals=pre, exclude_root=root, output="all")
    for i in range(0, 12, 5):  # several updates
        metric.update(pred[i : i + 5], bank.spans[i : i + 5], bank.lengths[i : i + 5])
    tp = n_pred = n_gold = 0
    for i in range(12):
        m = int(bank.lengths[i])
        p = _brackets(pred[i], m, labelled, pre, root)
        t = _brackets(bank.spans[i], m, labelled, pre, root)
        tp += sum((p & t).values())
        n_pred += sum(p.values())
        n_gold += sum(t.values())
    out = metric.compute()
    assert isinstance(out, dict)
    assert (int(metric.tp), int(metric.n_pred), int(metric.n_gold)) == (tp, n_pred, n_gold)
    want = _f1(tp, n_pred, n_gold)
    assert [float(out[k]) for k in ("precision", "recall", "f1")] == pytest.approx(
        list(want), abs=1e-6
    )
    perfect = BracketF1()
    perfect.update(bank.spans, bank.spans, bank.lengths)
    assert float(perfect.compute()) == 1.0


def test_bracket_f1_errors() -> None:
    metric = BracketF1()
    spans = torch.zeros(2, 3, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="lengths must be given"):
        metric.update(spans, spans, None)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"preds and target must have shape \(B, 2N - 1, 3\) with the same B"
    ):
        metric.update(spans, spans[:1], torch.tensor([2, 2]))
    with pytest.raises(ValueError, match=r"lengths must be in \[0, 2\]"):
        metric.update(spans, spans, torch.tensor([2, 3]))


# ---------------------------------------------------------------------- collections
def test_task_metrics_names_prefix_and_kwargs_filtering() -> None:
    val = task_metrics("bio", "val/", TAGS)
    gold = torch.tensor([[1, 2, 0, 3]])
    val.update(gold, gold, lengths=torch.tensor([4]))
    out = val.compute()
    scores = {"val/token_accuracy", "val/span_f1", "val/exact_match", "val/span_precision",
              "val/span_recall"}
    scores |= {f"val/span_{m}/{t}" for m in ("precision", "recall", "f1") for t in ("PER", "LOC")}
    fractions = {f"val/{w}_fraction/{t}" for w in ("pred", "gold") for t in TAGS + ("entity",)}
    assert set(out) == scores | fractions
    assert all(float(out[k]) == 1.0 for k in scores)
    assert float(out["val/pred_fraction/entity"]) == 0.75 == float(out["val/gold_fraction/O"]) * 3
    ml = task_metrics("multilabel", "test/")
    ml.update(torch.tensor([[1, 0]]), torch.tensor([[1, 1]]))
    assert set(ml.compute()) == {"test/micro_f1", "test/exact_match"}
    tree = task_metrics("tree", "train/")
    assert set(tree.keys()) == {"train/bracket_f1", "train/exact_match"}
    assert set(task_metrics("multiclass").keys()) == {"accuracy"}
    assert set(task_metrics("sequence").keys()) == {"token_accuracy", "exact_match"}
    with pytest.raises(ValueError, match="task must be one of"):
        task_metrics("ner")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tags must be given for task 'bio' and only for it"):
        task_metrics("bio")


def test_states_are_sum_reduced_and_reset() -> None:
    metrics = (TokenAccuracy(), SpanF1(TAGS), MicroF1(), ExactMatch(), BracketF1(),
               LabelProportions(TAGS))
    for metric in metrics:
        assert set(metric._reductions) == set(metric._defaults)
        for name, fn in metric._reductions.items():
            assert fn is not None and fn.__name__ == "dim_zero_sum", (type(metric).__name__, name)
        metric.reset()
        assert all(int(getattr(metric, name).sum()) == 0 for name in metric._defaults)


# ---------------------------------------------------------------------- collapse in the logs
def test_an_all_o_collapse_shows_in_the_bio_metrics() -> None:
    # gold: 2 entities in 8 tokens; the all-O model has 75 % token accuracy but no entity
    gold = torch.tensor([[0, 1, 2, 0], [3, 0, 0, 0]])
    lengths = torch.tensor([4, 4])
    val = task_metrics("bio", "val/", TAGS)
    val.update(torch.zeros_like(gold), gold, lengths=lengths)
    out = {k: float(v) for k, v in val.compute().items()}
    assert out["val/token_accuracy"] == 0.625
    assert out["val/span_f1"] == out["val/span_precision"] == out["val/span_recall"] == 0.0
    assert out["val/pred_fraction/O"] == 1.0 and out["val/pred_fraction/entity"] == 0.0
    assert out["val/gold_fraction/O"] == 0.625 and out["val/gold_fraction/entity"] == 0.375
    assert out["val/gold_fraction/B-PER"] == 0.125 == out["val/gold_fraction/B-LOC"]


def test_span_precision_recall_per_type_by_hand() -> None:
    # gold PER(0..1), LOC(3), PER(5); predicted PER(0..1) right, LOC(3..4) wrong span,
    # LOC(6) spurious: PER P = 1/1, R = 1/2; LOC P = 0/2, R = 0/1; micro P = 1/3, R = 1/3
    gold = torch.tensor([[1, 2, 0, 3, 0, 1, 0]])
    pred = torch.tensor([[1, 2, 0, 3, 4, 0, 3]])
    metric = SpanF1(TAGS, output="all", key_prefix="span_")
    metric.update(pred, gold)
    out = {k: float(v) for k, v in metric.compute().items()}
    assert out["span_precision/PER"] == 1.0 and out["span_recall/PER"] == 0.5
    assert out["span_precision/LOC"] == 0.0 and out["span_recall/LOC"] == 0.0
    assert out["span_precision"] == pytest.approx(1 / 3) == out["span_recall"]
    assert out["span_f1/PER"] == pytest.approx(2 / 3)
    plain = SpanF1(TAGS, output="all")
    plain.update(pred, gold)
    assert set(plain.compute()) == {
        "precision", "recall", "f1", "precision/PER", "recall/PER", "f1/PER",
        "precision/LOC", "recall/LOC", "f1/LOC",
    }


def test_span_f1_io_scheme_reads_spans_as_the_io_output() -> None:
    """A model of IO files predicts BIO, written back in IO, where adjacent spans of one type
    are one run (``B-PER B-PER`` -> ``PER PER``): with ``scheme="io"`` SpanF1 scores them as
    that one span (as ``structssl predict`` scores its IO output); with ``"bio"`` (and the
    other schemes) they stay two spans."""
    gold = torch.tensor([[1, 2, 0, 3, 4, 3, 0]])  # PER(0..1), LOC(3..5): IO's PER PER O LOC LOC LOC
    pred = torch.tensor([[1, 1, 0, 3, 4, 3, 1]])  # B-PER B-PER O B-LOC I-LOC B-LOC B-PER
    bio = SpanF1(TAGS, output="all")
    bio.update(pred, gold)
    out = {k: float(v) for k, v in bio.compute().items()}
    # BIO spans: pred PER(0) PER(1) LOC(3..4) LOC(5) PER(6), gold PER(0..1) LOC(3..4) LOC(5)
    assert out["precision"] == pytest.approx(2 / 5) and out["recall"] == pytest.approx(2 / 3)
    assert out["f1/PER"] == 0.0
    bio_f1 = out["f1"]
    io = SpanF1(TAGS, output="all", scheme="io")
    io.update(pred, gold)
    out = {k: float(v) for k, v in io.compute().items()}
    # IO spans: pred PER(0..1) LOC(3..5) PER(6), gold PER(0..1) LOC(3..5)
    assert out["precision"] == pytest.approx(2 / 3) and out["recall"] == 1.0
    assert out["f1/PER"] == pytest.approx(2 / 3) and out["f1/LOC"] == 1.0
    assert (int(io.n_pred.sum()), int(io.n_gold.sum())) == (3, 2)
    for scheme in ("iob1", "bioes", "bilou"):
        other = SpanF1(TAGS, scheme=scheme)
        other.update(pred, gold)
        assert float(other.compute()) == pytest.approx(bio_f1)
    # adjacent spans of different types stay apart; a stray I-X after O still starts one
    one = SpanF1(TAGS, scheme="io")
    one.update(torch.tensor([[1, 3, 0, 2, 1]]), torch.tensor([[1, 3, 0, 1, 2]]))
    assert float(one.compute()) == 1.0
    metrics = task_metrics("bio", "test/", TAGS, scheme="io")
    metrics.update(pred, gold, lengths=torch.tensor([7]))
    assert float(metrics.compute()["test/span_f1"]) == pytest.approx(0.8)
    with pytest.raises(ValueError, match=r"scheme must be one of \[.*'io'\]; got 'plain'"):
        SpanF1(TAGS, scheme="plain")


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_span_f1_io_scheme_equals_scoring_the_io_round_trip(data: st.DataObject) -> None:
    """``scheme="io"`` counts what plain BIO span F1 counts on the tags written in IO and read
    back (``to_bio(from_bio(tags, "io"), "io")``, how ``structssl predict`` scores IO files)."""
    from structssl.data.tag_schemes import from_bio, to_bio

    b = data.draw(st.integers(1, 3))
    n = data.draw(st.integers(1, 8))
    rows = st.lists(st.lists(st.integers(0, 4), min_size=n, max_size=n), min_size=b, max_size=b)
    pred, gold = torch.tensor(data.draw(rows)), torch.tensor(data.draw(rows))
    lengths = torch.tensor(data.draw(st.lists(st.integers(0, n), min_size=b, max_size=b)))

    def round_trip(ids: torch.Tensor) -> torch.Tensor:
        out = ids.clone()
        for row, tags in zip(out, _tags(ids, lengths)):
            back = to_bio(from_bio(tags, "io"), "io")
            row[: len(back)] = torch.tensor([TAGS.index(t) for t in back], dtype=torch.long)
        return out

    io = SpanF1(TAGS, output="all", scheme="io")
    io.update(pred, gold, lengths)
    reference = SpanF1(TAGS, output="all")
    reference.update(round_trip(pred), round_trip(gold), lengths)
    assert (io.tp.tolist(), io.n_pred.tolist(), io.n_gold.tolist()) == (
        reference.tp.tolist(), reference.n_pred.tolist(), reference.n_gold.tolist()
    )


def test_label_proportions_counts_valid_positions_and_accumulates() -> None:
    metric = LabelProportions(3)
    metric.update(torch.tensor([[0, 1, 2, 2]]), torch.tensor([[0, 0, 0, 1]]), torch.tensor([3]))
    metric.update(torch.tensor([[2]]), torch.tensor([[2]]))
    out = {k: float(v) for k, v in metric.compute().items()}
    assert out == {
        "pred_fraction/0": 0.25, "pred_fraction/1": 0.25, "pred_fraction/2": 0.5,
        "gold_fraction/0": 0.75, "gold_fraction/1": 0.0, "gold_fraction/2": 0.25,
    }  # not BIO names: no entity fraction
    empty = LabelProportions(2)
    zeros = torch.zeros(1, 3, dtype=torch.long)
    empty.update(zeros, zeros, torch.tensor([0]))
    assert float(empty.compute()["pred_fraction/0"]) == 0.0  # no token: 0, as the other ratios


def test_label_proportions_errors() -> None:
    with pytest.raises(ValueError, match="labels must be >= 1"):
        LabelProportions(0)
    with pytest.raises(ValueError, match="labels must be distinct"):
        LabelProportions(["O", "O"])
    with pytest.raises(ValueError, match="labels must be a non-empty sequence"):
        LabelProportions("O")
    with pytest.raises(ValueError, match=r"preds must be label ids in \[0, 2\)"):
        LabelProportions(2).update(torch.tensor([[0, 2]]), torch.tensor([[0, 1]]))


def test_multiset_overlap_matches_counting_rows() -> None:
    """The shared rows of two multisets and how often each is shared, by one integer key per
    row and, where the keys could overflow, by unique over rows: both equal plain counting."""
    from structssl.metrics import _multiset_overlap, _row_keys

    g = torch.Generator().manual_seed(3)
    for high in (3, 40, 2**20):  # 2**20 in 4 columns: keys would overflow, rows compared
        a = torch.randint(0, high, (300, 4), generator=g)
        b = torch.cat([a[torch.randperm(300, generator=g)[:150]],
                       torch.randint(0, high, (100, 4), generator=g)])
        rows, count = _multiset_overlap(a, b)
        want = Counter(map(tuple, a.tolist())) & Counter(map(tuple, b.tolist()))
        got = {tuple(r): int(c) for r, c in zip(rows.tolist(), count.tolist()) if c > 0}
        assert got == dict(want)
        assert (_row_keys(torch.cat([a, b])) is None) == (high == 2**20)
        assert rows.tolist() == sorted(rows.tolist())  # lexicographic, as unique(dim=0)


@pytest.mark.parametrize("scheme", ["bio", "iob1", "bioes", "bilou", "io"])
def test_scheme_token_metrics_compare_the_written_tags(scheme: str) -> None:
    """Token accuracy and exact match with a scheme equal the counts over the tags
    ``from_bio`` writes (what structssl predict scores), on random BIO tag sequences with
    stray I-X, adjacent entities and padding."""
    from structssl.data.tag_schemes import from_bio
    from structssl.metrics import ExactMatch, TokenAccuracy, task_metrics

    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    gen = torch.Generator().manual_seed(0)
    b, n = 64, 7
    preds = torch.randint(0, 5, (b, n), generator=gen)
    other = torch.randint(0, 5, (b, n), generator=gen)
    gold = torch.where(torch.rand(b, n, generator=gen) < 0.6, preds, other)
    lengths = torch.randint(0, n + 1, (b,), generator=gen)
    correct = total = exact = 0
    for p, g, m in zip(preds.tolist(), gold.tolist(), lengths.tolist()):
        wp = from_bio([tags[i] for i in p[:m]], scheme)
        wg = from_bio([tags[i] for i in g[:m]], scheme)
        correct += sum(x == y for x, y in zip(wp, wg))
        total += m
        exact += wp == wg
    acc, match = TokenAccuracy(tags, scheme), ExactMatch(tags=tags, scheme=scheme)
    acc.update(preds, gold, lengths)
    match.update(preds, gold, lengths)
    assert float(acc.compute()) == pytest.approx(correct / total)
    assert float(match.compute()) == pytest.approx(exact / b)
    values = task_metrics("bio", "test/", tags, scheme=scheme)
    values.update(preds, gold, lengths=lengths)
    got = values.compute()
    assert float(got["test/token_accuracy"]) == pytest.approx(correct / total)
    assert float(got["test/exact_match"]) == pytest.approx(exact / b)


def test_scheme_token_metrics_cases() -> None:
    """BIOES: ``S-X`` against ``B-X`` is an error although both are ``B-X`` in BIO; IO: ``B-X``
    against ``I-X`` is not; the scheme needs the tags and is refused for trees."""
    from structssl.metrics import ExactMatch, TokenAccuracy

    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    preds = torch.tensor([[1, 0, 3, 4]])  # B-PER O B-LOC I-LOC: S-PER O B-LOC E-LOC
    gold = torch.tensor([[1, 2, 3, 4]])  # B-PER I-PER B-LOC I-LOC: B-PER E-PER B-LOC E-LOC
    plain, bioes = TokenAccuracy(), TokenAccuracy(tags, "bioes")
    plain.update(preds, gold)
    bioes.update(preds, gold)
    assert float(plain.compute()) == 0.75 and float(bioes.compute()) == 0.5
    io = TokenAccuracy(tags, "io")
    io.update(torch.tensor([[1, 1, 0, 3]]), torch.tensor([[1, 2, 0, 4]]))  # PER PER O LOC both
    assert float(io.compute()) == 1.0
    with pytest.raises(ValueError, match="needs the BIO tags"):
        TokenAccuracy(scheme="bioes")
    with pytest.raises(ValueError, match="scheme must be one of"):
        ExactMatch(tags=tags, scheme="bies")
    with pytest.raises(ValueError, match="not trees"):
        ExactMatch(tree=True, tags=tags, scheme="io")
