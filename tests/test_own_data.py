"""Your own data, end to end: any tag set, train, save, predict (README "Your own data").

Every test writes its own small files; nothing here needs ``../shared``.
"""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch

pytest.importorskip("pytorch_lightning")

from fit_configs import QUIET, constrained_fit_config  # noqa: E402

from structssl.cli import cli_main  # noqa: E402
from structssl.cli import main as _main  # noqa: E402
from structssl.data import CoNLLDataModule  # noqa: E402
from structssl.data.tag_schemes import detect_scheme, from_bio, to_bio  # noqa: E402
from structssl.data.tagging import TagColumnError  # noqa: E402
from structssl.predict import Tagger, load_model  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning"
    ),
]

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "tagger.yaml"

# a toy "language" with a tag set the project has never seen: drugs and doses
_DRUGS = ["aspirina", "ibuprofeno", "paracetamol", "morfina"]
_DOSES = ["5mg", "10mg", "20mg"]
_FILLER = ["tomar", "cada", "dia", "el", "paciente", "con", "y", "no"]


def _sentence(rng: random.Random) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for _ in range(rng.randint(3, 9)):
        r = rng.random()
        if r < 0.2:
            name = rng.choice(_DRUGS)
            out += [(name.capitalize(), "B-DRUG"), ("Forte", "I-DRUG")] if rng.random() < 0.3 \
                else [(name.capitalize(), "B-DRUG")]
        elif r < 0.3:
            out.append((rng.choice(_DOSES), "B-DOSE"))
        else:
            out.append((rng.choice(_FILLER), "O"))
    return out


def main(args: list[str]) -> int:
    """``structssl ARGS`` (pytest's own argv must not reach the CLI)."""
    with mock.patch("sys.argv", ["structssl"]):
        return _main(args)


def _write(path: Path, sentences: list[list[tuple[str, str]]], tags: bool = True,
           scheme: str = "bio") -> None:
    lines = []
    for sent in sentences:
        converted = from_bio([t for _, t in sent], scheme)
        for (token, _), tag in zip(sent, converted):
            lines.append(f"{token} {tag}" if tags else token)
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("own")
    rng = random.Random(0)
    train = [_sentence(rng) for _ in range(60)]
    dev = [_sentence(rng) for _ in range(20)]
    new = [_sentence(rng) for _ in range(25)]
    _write(root / "TRAIN.conll", train)
    _write(root / "DEV.conll", dev)
    _write(root / "NEW.conll", new)
    _write(root / "NEW.txt", new, tags=False)
    _write(root / "UNLABELED.txt", [_sentence(rng) for _ in range(30)], tags=False)
    return {"root": root, "new": new}


def _fit(root: Path, run: str, *extra: str) -> Path:
    out = root / run
    main([
        "fit", f"--config={CONFIG}", f"--data.train_file={root / 'TRAIN.conll'}",
        f"--data.dev_file={root / 'DEV.conll'}", f"--trainer.default_root_dir={out}",
        "--trainer.max_epochs=3", "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false", *extra,
    ])
    return out


@pytest.fixture(scope="module")
def run_dir(corpus: dict[str, Any]) -> Path:
    return _fit(corpus["root"], "RUN_DIR")


# ------------------------------------------------------------------------------ tag schemes
_BIO = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "O", "B-PER"]


@pytest.mark.parametrize("scheme", ["bio", "iob1", "bioes", "bilou", "plain"])
def test_tag_scheme_round_trip(scheme: str) -> None:
    assert to_bio(from_bio(_BIO, scheme), scheme) == _BIO


def test_tag_scheme_conversions_by_hand() -> None:
    assert from_bio(_BIO, "bioes") == ["B-PER", "E-PER", "O", "S-LOC", "B-LOC", "E-LOC", "O",
                                       "S-PER"]
    assert from_bio(_BIO, "iob1") == ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "O",
                                      "I-PER"]
    assert from_bio(_BIO, "bilou")[3] == "U-LOC"


@pytest.mark.parametrize(
    "tags, scheme",
    [
        (["O", "B-X", "I-X"], "bio"),
        (["O", "I-X", "I-X", "B-X"], "iob1"),
        (["S-X", "B-Y", "E-Y"], "bioes"),
        (["U-X", "B-Y", "L-Y"], "bilou"),
        (["NN", "VB", "O"], "plain"),
        (["O", "O"], "bio"),
    ],
)
def test_detect_scheme(tags: list[str], scheme: str) -> None:
    assert detect_scheme([tags]) == scheme


# ------------------------------------------------------------------------------ data module
def test_any_tag_set_is_learned(corpus: dict[str, Any]) -> None:
    root = corpus["root"]
    dm = CoNLLDataModule(train_file=str(root / "TRAIN.conll"), dev_file=None, test_file=None)
    dm.setup()
    assert dm.tags == ("O", "B-DOSE", "I-DOSE", "B-DRUG", "I-DRUG")
    assert dm.model_sizes()["task"] == "bio" and dm.num_labeled_examples == 60
    assert dm.num_unlabeled_examples == 0


@pytest.mark.parametrize("scheme", ["iob1", "bioes"])
def test_other_schemes_train_as_bio(tmp_path: Path, scheme: str) -> None:
    rng = random.Random(1)
    _write(tmp_path / "t.conll", [_sentence(rng) for _ in range(10)], scheme=scheme)
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None)
    dm.setup()
    assert dm.format.scheme == scheme
    assert set(dm.tags) <= {"O", "B-DOSE", "I-DOSE", "B-DRUG", "I-DRUG"}


def test_io_tags_train_as_spans_and_come_back_without_prefixes(tmp_path: Path) -> None:
    """IO files (entity types without prefixes, e.g. Stanford NER's, Few-NERD's): detected as
    plain with a hint; given as ``io`` they train on BIO spans (span F1) and predict back in IO."""
    assert to_bio(["O", "DRUG", "DRUG", "O", "DOSE"], "io") == ["O", "B-DRUG", "I-DRUG", "O", "B-DOSE"]
    assert from_bio(["B-DRUG", "B-DRUG", "I-DRUG", "O"], "io") == ["DRUG", "DRUG", "DRUG", "O"]
    rng = random.Random(2)
    train = [_sentence(rng) for _ in range(40)]
    _write(tmp_path / "t.io", train, scheme="io")
    _write(tmp_path / "new.txt", train[:5], tags=False)
    with mock.patch("pytorch_lightning.utilities.rank_zero.rank_zero_info") as info:
        CoNLLDataModule(train_file=str(tmp_path / "t.io")).setup()
    assert info.call_args_list[0].args[0].endswith(
        "--data.tag_scheme io reads them as spans, scored by span F1")
    out = tmp_path / "run"
    assert main(["fit", f"--config={CONFIG}", f"--data.train_file={tmp_path / 't.io'}",
                 "--data.tag_scheme=io", f"--trainer.default_root_dir={out}",
                 "--trainer.max_epochs=2", "--trainer.enable_progress_bar=false"]) == 0
    tagger = Tagger.load(out)
    assert set(tagger.model.data_format["tags"]) <= {"O", "B-DOSE", "I-DOSE", "B-DRUG", "I-DRUG"}
    predicted = {t for sent in tagger.tag([[w for w, _ in s] for s in train[:5]]) for t in sent}
    assert predicted and predicted <= {"O", "DRUG", "DOSE"}
    (tmp_path / "bad.io").write_text("Aspirina B-DRUG\ncada O\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.io:1: expected an IO tag .*got 'B-DRUG'"):
        CoNLLDataModule(train_file=str(tmp_path / "bad.io"), tag_scheme="io").setup()


def _fit_then_predict_agree(
    tmp_path: Path, scheme: str, more_test: list
) -> tuple[Any, Any, float]:
    """Fit configs/tagger.yaml 2 epochs on 40 drug sentences written in ``scheme`` (no two drugs
    or doses side by side: the model learns B- for every drug name) and tested on two sentences
    of adjacent drugs, ``more_test`` and 5 more; ``structssl predict`` of the test file gives
    the same token accuracy and span F1 as fit's test. Returns the CLI, the tagger and the F1."""
    rng = random.Random(0)
    train = [s for s in (_sentence(rng) for _ in range(80))
             if all(a != b or a[0] != "B" for (_, a), (_, b) in itertools.pairwise(s))][:40]
    _write(tmp_path / "t.conll", train, scheme=scheme)
    test = [[("tomar", "O"), ("Aspirina", "B-DRUG"), ("Morfina", "I-DRUG"), ("cada", "O")],
            [("Ibuprofeno", "B-DRUG"), ("Paracetamol", "I-DRUG"), ("10mg", "B-DOSE")],
            *more_test]
    test += [_sentence(rng) for _ in range(5)]
    _write(tmp_path / "e.conll", test, scheme=scheme)
    out = tmp_path / "run"
    with mock.patch("sys.argv", ["structssl"]):
        cli = cli_main(["fit", f"--config={CONFIG}", f"--data.train_file={tmp_path / 't.conll'}",
                        f"--data.test_file={tmp_path / 'e.conll'}", f"--data.tag_scheme={scheme}",
                        f"--trainer.default_root_dir={out}", "--trainer.max_epochs=2",
                        "--trainer.enable_progress_bar=false",
                        "--trainer.enable_model_summary=false"])
    tagger = Tagger.load(out)
    summary = tagger.tag_file(tmp_path / "e.conll", tmp_path / "pred.conll")
    metrics = cli.trainer.callback_metrics
    for key in ("token_accuracy", "span_f1"):
        assert float(metrics[f"test/{key}"]) == pytest.approx(summary[key], abs=1e-6), key
    return cli, tagger, float(metrics["test/span_f1"])


def test_io_fit_scores_spans_as_predict_does(tmp_path: Path) -> None:
    """An IO model predicts BIO, and ``B-DRUG B-DRUG`` (two spans in BIO) is written back as
    ``DRUG DRUG``, one span in IO: fit's test span F1 scores the spans as the IO output reads
    them, so it equals ``structssl predict``'s on the same checkpoint and file (it counted two
    spans, a lower score, while predict counted one)."""
    from structssl.metrics import SpanF1

    test = [[("el", "O"), ("5mg", "B-DOSE"), ("20mg", "I-DOSE")]]
    # token accuracy too: B-X and I-X are one IO tag (the BIO ids differ where the model's
    # B-DRUG B-DRUG stands for the gold's DRUG DRUG)
    cli, tagger, fit_f1 = _fit_then_predict_agree(tmp_path, "io", test)
    # the case at stake: the BIO prediction has adjacent spans of one type, which BIO scoring
    # (the other schemes') counts apart, below the IO score
    dm = cli.datamodule
    batch = dm.collate(dm.splits["test"])
    with torch.no_grad():
        predicted = tagger.model.decode(batch)
    assert predicted[0, 1:3].tolist() == [dm.tags.index("B-DRUG")] * 2
    bio = SpanF1(dm.tags)
    bio.update(predicted, batch["labels"], batch["lengths"])
    assert float(bio.compute()) < fit_f1


@pytest.mark.parametrize("scheme", ["bioes", "bilou", "iob1"])
def test_fit_token_accuracy_is_predicts_in_other_schemes(tmp_path: Path, scheme: str) -> None:
    """A BIOES / BILOU / IOB1 model tags in BIO and writes its tags back in the file's scheme;
    fit's test token accuracy and exact match compare the written tags, as ``structssl
    predict`` does (a predicted ``B-DRUG`` where the gold is ``B-DRUG I-DRUG`` is ``S-DRUG``
    against ``B-DRUG`` in BIOES: an error that BIO ids counted right)."""
    from structssl.metrics import TokenAccuracy

    cli, tagger, _ = _fit_then_predict_agree(tmp_path, scheme, [])
    assert cli.datamodule.format.scheme == scheme
    fit_acc = float(cli.trainer.callback_metrics["test/token_accuracy"])
    if scheme != "iob1":  # the case at stake: the BIO ids score B-DRUG B-DRUG higher
        dm = cli.datamodule
        batch = dm.collate(dm.splits["test"])
        with torch.no_grad():
            predicted = tagger.model.decode(batch)
        bio = TokenAccuracy()
        bio.update(predicted, batch["labels"], batch["lengths"])
        assert float(bio.compute()) > fit_acc


def test_a_file_in_another_scheme_than_the_models_is_named(tmp_path: Path) -> None:
    """IOB1 dev tags for a BILOU training file are ill-formed BILOU: the warning says the file's
    own tags read as IOB1 (a user test gave a BILOU model an IOB1 file: only 'ill-formed')."""
    (tmp_path / "t.bilou").write_text("Ana U-PER\nvive O\nen O\nSan B-LOC\nJosé L-LOC\n\n"
                                      "Luis U-PER\nlee O\n\n", encoding="utf-8")
    (tmp_path / "d.iob1").write_text("Eva I-PER\nvive O\nen O\nSan I-LOC\nJosé I-LOC\n\n",
                                     encoding="utf-8")
    with pytest.warns(UserWarning, match=r"d.iob1: 1 sentence\(s\) with ill-formed BILOU tags.*; "
                      r"the file's own tags read as IOB1: is it in another scheme than the model's "
                      r"BILOU\?"):
        CoNLLDataModule(train_file=str(tmp_path / "t.bilou"),
                        dev_file=str(tmp_path / "d.iob1")).setup()


def test_plain_tags_give_token_accuracy(tmp_path: Path) -> None:
    (tmp_path / "pos.txt").write_text("El DA\nperro NC\ncome VM\n\nLa DA\ngata NC\n\n")
    dm = CoNLLDataModule(train_file=str(tmp_path / "pos.txt"), dev_file=None, test_file=None)
    dm.setup()
    assert dm.format.scheme == "plain" and dm.model_sizes()["task"] == "sequence"
    assert dm.tags == ("DA", "NC", "VM")


def test_feature_columns_and_unlabeled_file(tmp_path: Path) -> None:
    (tmp_path / "t.conll").write_text("El DA O\nGrupo NC B-ORG\n\nAna NC B-PER\nrie VM O\n\n")
    (tmp_path / "u.txt").write_text("Pedro NC\nvive VM\n\n")
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                         unlabeled_file=str(tmp_path / "u.txt"), feature_columns=[1])
    dm.setup()
    assert dm.num_unlabeled_examples == 1
    names = set(dm.format.extractor.feature_names)
    assert "given0[0]=NC" in names and "given0[-1]=DA" in names


@pytest.mark.parametrize(
    "text, match",
    [
        ("El\nGrupo\n\n", r"t\.conll:1: expected a token and a label column"),
        ("El O\nGrupo NC B-ORG\n\n", r"t\.conll:2: expected 2 columns"),
        ("El O\nGrupo X-ORG\n\n", r"t\.conll:2: expected a BIO tag .*got 'X-ORG'"),
        ("", r"t\.conll: expected tagged sentences .* the file has none"),
        ("El O\nla O\n\n", r"at least two different tags; got \['O'\]"),
    ],
)
def test_bad_training_files(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "t.conll").write_text(text)
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                         tag_scheme="auto" if "X-ORG" not in text else "bio")
    with pytest.raises(ValueError, match=match):
        dm.setup()


def test_unknown_scheme_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"tag_scheme must be one of .*got 'bilu'"):
        CoNLLDataModule(train_file="x", tag_scheme="bilu")  # type: ignore[arg-type]
    dm = CoNLLDataModule(train_file=str(tmp_path / "absent.conll"), dev_file=None,
                         test_file=None)
    with pytest.raises(FileNotFoundError, match=r"absent.conll \(the train file, --data.train_file"):
        dm.setup()


def test_a_relative_file_that_is_nowhere_names_its_option(tmp_path: Path) -> None:
    """A config's placeholder (``UNLABELED.txt``) or a mistyped relative name: the message
    names the option that gives the file and where it was looked for."""
    _write(tmp_path / "t.conll", [[("Madrid", "B-LOC"), ("vive", "O")]])
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), unlabeled_file="UNLABELED.txt",
                         data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError) as err:
        dm.setup()
    message = str(err.value)
    assert "UNLABELED.txt (the unlabeled file, --data.unlabeled_file / unlabeled_file=)" in message
    assert f"in the current directory {Path.cwd()}, nor in the data directory" in message
    assert "missing data file" in message  # what tests/test_configs.py skips on


def test_the_summary_line_counts_sentences_outside_the_length_bounds(tmp_path: Path) -> None:
    sentences = [[("Madrid", "B-LOC")] + [("w", "O")] * (n - 1) for n in (2, 3, 5, 8, 9)]
    _write(tmp_path / "t.conll", sentences)
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), min_length=3, max_length=8)
    with mock.patch("pytorch_lightning.utilities.rank_zero.rank_zero_info") as info:
        dm.setup()
    assert len(dm.splits["labeled"]) == 3
    summary = info.call_args_list[0].args[0]
    assert summary.endswith(
        "; 2 training sentences outside the length bounds (min_length=3, max_length=8) left out"
    )


def test_dev_and_test_tags_outside_the_training_file_join_the_tag_set(tmp_path: Path) -> None:
    """A rare tag that only the dev / test files hold (small training sets miss some) does not
    stop fit: it joins the tag set with a warning naming it, is encoded, and scores as an
    error (the model never predicts a tag no training sentence holds)."""
    (tmp_path / "t.conll").write_text("El O\nAna B-PER\n\nLa O\nAna B-PER\n\n")
    (tmp_path / "d.conll").write_text("El O\nMadrid B-LOC\n\n")
    (tmp_path / "e.conll").write_text("Ana B-PER\nvio O\nla O\nONU B-ORG\n\n")
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=str(tmp_path / "d.conll"),
                         test_file=str(tmp_path / "e.conll"))
    with pytest.warns(UserWarning, match=r"2 tag\(s\) of the dev / test files are not in the "
                      r"training file .*t\.conll: 'B-LOC' at .*d\.conll:2, 'B-ORG' at .*e\.conll:4; "
                      r"they join the tag set \(B-LOC, I-LOC, B-ORG, I-ORG in BIO\)"):
        dm.setup()
    assert dm.tags == ("O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER")
    assert dm.format.untrained_tags == ("B-LOC", "I-LOC", "B-ORG", "I-ORG")
    assert dm.splits["dev"][0]["labels"].tolist() == [0, 1]
    assert dm.splits["test"][0]["labels"].tolist() == [5, 0, 0, 3]


def test_plain_dev_tags_outside_the_training_file(tmp_path: Path) -> None:
    (tmp_path / "t.conll").write_text("El DT\nperro NN\ncome VB\n\n")
    (tmp_path / "d.conll").write_text("El DT\nperro NN\n! SYM\n\n")
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=str(tmp_path / "d.conll"),
                         test_file=None)
    with pytest.warns(UserWarning, match=r"1 tag\(s\) .*: 'SYM' at .*d\.conll:3; they join the tag "
                      r"set \(SYM\)"):
        dm.setup()
    assert dm.tags == ("DT", "NN", "SYM", "VB") and dm.format.untrained_tags == ("SYM",)


def test_dev_tags_outside_the_training_file_are_named_in_the_file_scheme(tmp_path: Path) -> None:
    """A BIOES dev file's new tag is named as the file writes it, at its line (not only by the
    BIO tags it becomes)."""
    (tmp_path / "t.conll").write_text("El O\nAna S-PER\n\nLa O\nAna B-PER\nRuiz E-PER\n\n")
    (tmp_path / "d.conll").write_text("El O\nMadrid S-LOC\n\nLa O\nONU S-ORG\n\n")
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=str(tmp_path / "d.conll"),
                         test_file=None)
    with pytest.warns(UserWarning, match=r": 'S-LOC' at .*d\.conll:2, 'S-ORG' at .*d\.conll:5; "
                      r"they join the tag set \(B-LOC, I-LOC, B-ORG, I-ORG in BIO\)"):
        dm.setup()


def test_a_few_stray_tags_in_a_span_file_are_named_not_read_as_plain(tmp_path: Path) -> None:
    """One typo (``PER``, ``b-LOC``) among BIO tags made the whole file "plain" (no span F1, no
    well-formed decoding) with no word said; now fit stops at the first one, and
    ``tag_scheme="plain"`` still reads such a file on purpose."""
    sentences = "".join("Ana B-PER\nRuiz I-PER\nvive O\nen O\nMadrid B-LOC\n\n" for _ in range(10))
    for typo in ("PER", "b-LOC"):
        (tmp_path / "t.conll").write_text(sentences + f"Ana {typo}\nvive O\n\n")
        dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None)
        with pytest.raises(ValueError, match=rf"t\.conll:61: expected a span tag \(O, B-X, I-X, E-X, "
                           rf"S-X, L-X or U-X\) like the file's other tags; got '{typo}', one of 1 .*"
                           r"--data\.tag_scheme plain"):
            dm.setup()
        dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                             tag_scheme="plain")
        dm.setup()
        assert dm.format.scheme == "plain" and typo in dm.tags


@pytest.mark.parametrize(
    "tags, stray",
    [
        ([["B-PER", "I-PER", "O"] * 10, ["PER", "O"]], [(1, 0)]),
        ([["O", "b-LOC"], ["B-LOC", "I-LOC", "S-ORG"] * 7], [(0, 1)]),
        ([["B-PER", "I-PER", "O"] * 9, ["PER", "O"]], []),  # 1 in 18 span tags: a plain tag set
        ([["DT", "NN", "VB"], ["DT", "B-X"]], []),  # part-of-speech tags with one B-like tag
        ([["O", "KEY", "O"]], []),  # plain tags that are O and one other: no span tag at all
        ([["B-PER", "I-PER"]], []),
    ],
)
def test_stray_tags(tags: list[list[str]], stray: list[tuple[int, int]]) -> None:
    from structssl.data.tag_schemes import stray_tags

    assert stray_tags(tags) == stray


def test_a_backslash_t_separator_is_a_tab_and_tab_files_get_a_hint(tmp_path: Path) -> None:
    """``--data.separator '\\t'`` reaches the module as backslash + t; tokens with a space in a
    tab-separated file read on whitespace get a hint at the separator option."""
    (tmp_path / "t.conll").write_text("Los Angeles\tB-LOC\nvive\tO\n\nAna\tB-PER\n\n")
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None)
    with pytest.raises(ValueError, match=r"t\.conll:2: expected 3 columns separated by whitespace; got "
                       r"2: .* \(the line holds tabs: .*separator='\\t'"):
        dm.setup()
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                         separator="\\t")
    dm.setup()
    assert dm.format.separator == "\t" and dm.tags == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")


def test_fit_names_the_encoding_option_on_a_decoding_error(tmp_path: Path) -> None:
    (tmp_path / "t.conll").write_bytes("El O\nMálaga B-LOC\n\n".encode("latin-1"))
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None)
    with pytest.raises(ValueError, match=r"t\.conll:2: expected utf-8 text; .*\(pass the files' "
                       r"encoding: --data\.encoding / encoding=\)"):
        dm.setup()
    (tmp_path / "u.conll").write_text("El O\nMálaga B-LOC\n\nAna B-PER\n\n", encoding="utf-16")
    dm = CoNLLDataModule(train_file=str(tmp_path / "u.conll"), dev_file=None, test_file=None,
                         encoding="utf-16")
    dm.setup()
    assert dm.tags == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")


def test_dev_file_in_another_layout_is_refused(tmp_path: Path) -> None:
    """A dev file whose tag column holds words (a sentence per line in the training layout)
    must not turn its words into tags."""
    (tmp_path / "t.conll").write_text("El DT\nperro NN\ncome VB\n\n")
    (tmp_path / "d.conll").write_text("El perro\nun gato\n\n")
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=str(tmp_path / "d.conll"),
                         test_file=None)
    with pytest.raises(TagColumnError, match=r"d\.conll:1: read in the training file's layout"):
        dm.setup()


def test_full_batch_that_cannot_be_padded_is_refused(tmp_path: Path) -> None:
    rng = random.Random(2)
    _write(tmp_path / "t.conll", [_sentence(rng) for _ in range(20)])
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                         batch_size=None, max_full_batch_positions=10)
    dm.setup()  # no procedure that takes chunks is attached: one padded batch, refused
    with pytest.raises(ValueError, match=r"full-batch training .* set batch_size"):
        dm.train_dataloader()


def test_default_chunk_size_follows_the_tag_count(tmp_path: Path) -> None:
    """Few tags: long chunks (fewer sequential steps); many tags: the chunk's (positions, C, C)
    edge tensor stays bounded; a given ``max_chunk_positions`` wins; the chunk loader uses it."""
    from structssl.data.modules.conll import (
        CHUNK_EDGE_BUDGET,
        MAX_CHUNK_POSITIONS,
        MIN_CHUNK_POSITIONS,
        default_chunk_positions,
    )

    assert default_chunk_positions(9) == MAX_CHUNK_POSITIONS
    assert default_chunk_positions(45) == MIN_CHUNK_POSITIONS
    assert default_chunk_positions(15) == CHUNK_EDGE_BUDGET // 15**2
    sizes = [default_chunk_positions(c) for c in range(1, 60)]
    assert sizes == sorted(sizes, reverse=True)
    dm = _tagged_and_untagged(tmp_path, 0)
    assert len(dm.tags) == 5 and dm.chunk_positions() == MAX_CHUNK_POSITIONS
    given = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), max_chunk_positions=30,
                            batch_size=None)
    assert given.chunk_positions() == 30
    given.setup("fit")
    with mock.patch.object(CoNLLDataModule, "_wants_chunks", return_value=True):
        chunks = next(iter(given.train_dataloader().iterables["labeled"]))
    assert len(chunks) > 1
    assert all(c["inputs"].shape[0] * c["inputs"].shape[1] <= 30 for c in chunks)
    with pytest.raises(ValueError, match="max_chunk_positions"):
        CoNLLDataModule(train_file=str(tmp_path / "t.conll"), max_chunk_positions=0)


def test_chunked_full_batch_equals_one_batch(tmp_path: Path) -> None:
    """SupervisedModule's chunk-by-chunk objective and gradient equal the padded batch's."""
    from structssl.data import length_chunks
    from structssl.losses import CRFNLLLoss
    from structssl.scorers import LinearChainScorer
    from structssl.structures import LinearChain
    from structssl.training import SupervisedModule

    rng = random.Random(3)
    _write(tmp_path / "t.conll", [_sentence(rng) for _ in range(30)])
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None)
    dm.setup()
    torch.manual_seed(0)
    model = SupervisedModule(LinearChain(), LinearChainScorer(init_std=0.3), CRFNLLLoss(),
                             num_labeled=30).double()
    model.adopt_sizes(dm.model_sizes())
    model.double()
    model.manual_backward = lambda loss: loss.backward()  # type: ignore[method-assign]
    examples = dm.splits["labeled"]
    chunks = [dm.collate(c) for c in length_chunks(examples, 40)]
    assert len(chunks) > 3 and sum(len(c["lengths"]) for c in chunks) == 30
    whole = model.backward_objective({"labeled": dm.collate(examples)})
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    parts = model.backward_objective({"labeled": chunks})
    torch.testing.assert_close(parts.objective, whole.objective.detach())
    for p, g in zip(model.parameters(), grads):
        torch.testing.assert_close(p.grad, g)


def _tagged_and_untagged(root: Path, seed: int, two_view: bool = False) -> CoNLLDataModule:
    """20 tagged and 30 untagged random sentences (set up)."""
    rng = random.Random(seed)
    sentences = [_sentence(rng) for _ in range(50)]
    _write(root / "t.conll", sentences[:20])
    _write(root / "u.txt", sentences[20:], tags=False)
    dm = CoNLLDataModule(train_file=str(root / "t.conll"), dev_file=None, test_file=None,
                         unlabeled_file=str(root / "u.txt"), two_view=two_view)
    dm.setup()
    return dm


def _assert_chunks_equal_one_batch(
    model: Any, dm: CoNLLDataModule, evaluate: Any = None
) -> None:
    """``evaluate(batch)`` (default ``model.backward_objective``) on length chunks of the
    tagged and untagged sentences gives the objective, unlabeled loss and gradient of the two
    padded batches (float64), with several untagged chunks and a non-zero unlabeled term."""
    from structssl.data import length_chunks

    evaluate = evaluate or model.backward_objective
    model.manual_backward = lambda loss: loss.backward()
    labeled, unlabeled = dm.splits["labeled"], dm.splits["unlabeled"]
    whole = evaluate({"labeled": dm.collate(labeled), "unlabeled": dm.collate(unlabeled)})
    assert whole.unlabeled_loss.item() > 0
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    chunks = {name: [dm.collate(c) for c in length_chunks(part, 40)]
              for name, part in (("labeled", labeled), ("unlabeled", unlabeled))}
    assert len(chunks["unlabeled"]) > 3
    parts = evaluate(chunks)
    torch.testing.assert_close(parts.objective, whole.objective.detach())
    torch.testing.assert_close(parts.unlabeled_loss, whole.unlabeled_loss.detach())
    for p, g in zip(model.parameters(), grads):
        torch.testing.assert_close(p.grad, g)


def test_chunked_transductive_objective_equals_one_batch(tmp_path: Path) -> None:
    """nabla-TSVM's objective evaluated on length chunks of the labeled and the unlabeled
    sentences (e.g. a 1,000-token table in the untagged file pads one chunk, not the whole
    unlabeled batch) has the value and gradient of the two padded batches."""
    from structssl.losses import NablaTSVMLoss
    from structssl.scorers import LinearChainScorer
    from structssl.structures import LinearChain
    from structssl.training import TransductiveModule

    dm = _tagged_and_untagged(tmp_path, 4)
    torch.manual_seed(0)
    model = TransductiveModule(LinearChain(), LinearChainScorer(init_std=0.3), Cu=0.7,
                               unlabeled_loss=NablaTSVMLoss(), num_labeled=20, num_unlabeled=30)
    model.adopt_sizes(dm.model_sizes())
    model.double()
    assert model.supports_chunks
    _assert_chunks_equal_one_batch(model, dm)
    # the balance penalty is not additive over examples: no chunks then
    assert not TransductiveModule(LinearChain(), LinearChainScorer(),
                                  balance_weight=1.0).supports_chunks


def test_chunked_cosvm_objective_equals_one_batch(tmp_path: Path) -> None:
    """nabla-coSVM with a CRF labeled loss (configs/tagger_ssl_cosvm.yaml) on length chunks of
    two-view batches: the value and gradient of the padded batches; its labeled term is the CRF
    likelihood of the joint potentials."""
    from structssl.losses import CRFNLLLoss, NablaCoSVMLoss
    from structssl.scorers import LinearChainScorer, TwoViewScorer
    from structssl.structures import LinearChain
    from structssl.training import CoTrainingModule

    dm = _tagged_and_untagged(tmp_path, 5, two_view=True)
    torch.manual_seed(0)
    views = [LinearChainScorer(factored=True, init_std=0.3) for _ in range(2)]
    model = CoTrainingModule(LinearChain(), TwoViewScorer(*views), NablaCoSVMLoss(),
                             labeled_loss=CRFNLLLoss(), Cu=0.7, num_labeled=20, num_unlabeled=30)
    model.adopt_sizes(dm.model_sizes())
    model.double()
    assert model.supports_chunks
    batch = dm.collate(dm.splits["labeled"])
    expected = CRFNLLLoss()(model.structure, model.potentials(batch).joint, batch["labels"],
                            batch["lengths"])
    torch.testing.assert_close(model.labeled_term(batch), expected)
    _assert_chunks_equal_one_batch(model, dm)
    with pytest.raises(TypeError, match="labeled_loss must be an nn.Module; got str"):
        CoTrainingModule(LinearChain(), TwoViewScorer(*views), labeled_loss="crf")  # type: ignore[arg-type]


def test_chunked_cccp_objective_equals_one_batch(tmp_path: Path) -> None:
    """Gamma-SSVM (CCCP, closed-form v) with the tag-set-agnostic constraints of
    configs/tagger_ssl_cccp.yaml on length chunks: each unlabeled chunk keeps its own
    linearisation point, and value and gradient equal those of the padded batches."""
    from structssl.constraints import ConstraintSet, WordLabels
    from structssl.losses import CRFNLLLoss
    from structssl.scorers import LinearChainScorer
    from structssl.structures import LinearChain
    from structssl.training.cccp import CCCPModule

    dm = _tagged_and_untagged(tmp_path, 6)
    constraints = ConstraintSet([
        WordLabels(labels=["O", "[!BSU]-*"], pattern="[a-z0-9].*", lowercase=False),
        WordLabels(labels=["O"], pattern=r"[^\w]+", lowercase=False),
    ]).bind(list(dm.tags))
    torch.manual_seed(0)
    model = CCCPModule(LinearChain(), LinearChainScorer(factored=True, init_std=0.3), constraints,
                       loss=CRFNLLLoss(), C1=20.0, C2=5.0, num_labeled=20, num_unlabeled=30)
    model.adopt_sizes(dm.model_sizes())
    model.setup("validate")
    model.double()
    assert model.supports_chunks

    def evaluate(batch: dict[str, Any]) -> Any:  # linearised at each part's guided labels
        part = batch["unlabeled"]
        points = ([model.constraint_guided_labels(c) for c in part] if isinstance(part, list)
                  else model.constraint_guided_labels(part))
        return model._evaluate(batch, 0, points)

    _assert_chunks_equal_one_batch(model, dm, evaluate)
    # v as a parameter per example, or the labeling formulation: one batch
    assert not CCCPModule(LinearChain(), LinearChainScorer(), formulation="labeling").supports_chunks


# ------------------------------------------------------------------------------ end to end
def test_fit_writes_fixed_name_checkpoints(run_dir: Path) -> None:
    assert (run_dir / "checkpoints" / "best.ckpt").is_file()
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


def test_predict_command_matches_test_metric(corpus: dict[str, Any], run_dir: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    root = corpus["root"]
    out = root / "PREDICTIONS.conll"
    assert main(["predict", "--model", str(run_dir), "--input", str(root / "NEW.txt"),
                 "--output", str(out)]) == 0
    lines = out.read_text(encoding="utf-8").split("\n")
    sentences = corpus["new"]
    assert sum(1 for line in lines if line == "") == len(sentences) + 1  # + the final newline
    first = [line.split("\t") for line in lines[: len(sentences[0])]]
    assert [tok for tok, _ in first] == [tok for tok, _ in sentences[0]]
    # the model learned the toy task; the command's score equals `structssl test`'s
    main(["predict", "--model", str(run_dir), "--input", str(root / "NEW.conll"),
          "--output", str(root / "scored.conll")])
    printed = capsys.readouterr().out
    span_f1 = float(printed.split("span_f1 ")[1].split(",")[0])
    assert span_f1 > 0.8
    main([
        "test", f"--config={CONFIG}", f"--data.train_file={root / 'TRAIN.conll'}",
        f"--data.dev_file={root / 'DEV.conll'}", f"--data.test_file={root / 'NEW.conll'}",
        f"--ckpt_path={run_dir / 'checkpoints' / 'best.ckpt'}",
        f"--trainer.default_root_dir={root / 'test_run'}", "--trainer.enable_progress_bar=false",
    ])
    printed = capsys.readouterr().out
    tested = float(printed.split("test/span_f1 ")[1].split()[0]) if "test/span_f1 " in printed \
        else None
    if tested is not None:
        assert abs(tested - span_f1) < 0.01


def test_predict_names_a_class_of_the_saved_config_that_cannot_be_imported(
    corpus: dict[str, Any], run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model whose saved config names a class of the user's own (a constraint, a scorer) that
    is not importable where predict runs: one line naming the class and PYTHONPATH, not a
    270-line traceback (a user test)."""
    ckpt = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)
    ckpt["hyper_parameters"]["scorer"]["class_path"] = "mymodule_not_there.MyScorer"
    torch.save(ckpt, tmp_path / "moved.ckpt")
    assert main(["predict", "--model", str(tmp_path / "moved.ckpt"), "--input",
                 str(corpus["root"] / "NEW.txt"), "--output", str(tmp_path / "p.conll")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.endswith("the model's configuration names 'mymodule_not_there.MyScorer', which "
                        "cannot be imported (ModuleNotFoundError: No module named "
                        "'mymodule_not_there'); put its module on PYTHONPATH, as for the fit")


def test_predict_scores_in_batches_and_sets_threads(corpus: dict[str, Any], run_dir: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """predict's score is the same whatever its batch size (the spans are scored in
    length-sorted batches, not one padded corpus), and --num_threads sets torch's threads
    (default 1, as the configs)."""
    import torch

    root = corpus["root"]
    threads = torch.get_num_threads()
    scores = []
    try:
        for extra in ([], ["--batch_size", "2", "--num_threads", "2"]):
            assert main(["predict", "--model", str(run_dir), "--input", str(root / "NEW.conll"),
                         "--output", str(root / "scored.conll"), *extra]) == 0
            printed = capsys.readouterr().out
            scores.append(printed.split("against the input's tags: ")[1].strip())
            assert torch.get_num_threads() == (2 if extra else 1)
        assert scores[0] == scores[1]
        with pytest.raises(SystemExit):
            main(["predict", "--model", str(run_dir), "--input", str(root / "NEW.conll"),
                  "--output", str(root / "scored.conll"), "--num_threads", "0"])
        assert "--num_threads must be an int >= 1; got 0" in capsys.readouterr().err
    finally:
        torch.set_num_threads(threads)


def test_test_applies_model_options_of_the_command_line(
    corpus: dict[str, Any], run_dir: Path, tmp_path: Path
) -> None:
    """Lightning rebuilds the model from the checkpoint's hyper-parameters over the command
    line's, so ``--model.init_args.X`` did nothing, silently (a label-switching model's
    ``constrained_decoding=true`` scored as without it): the command line's value is put back,
    and named."""
    root = corpus["root"]
    args = ["test", f"--config={CONFIG}", f"--data.train_file={root / 'TRAIN.conll'}",
            f"--data.dev_file={root / 'DEV.conll'}", f"--data.test_file={root / 'NEW.conll'}",
            f"--ckpt_path={run_dir / 'checkpoints' / 'best.ckpt'}",
            f"--trainer.default_root_dir={tmp_path}", "--trainer.enable_progress_bar=false"]
    with mock.patch("sys.argv", ["structssl"]), \
            mock.patch("pytorch_lightning.utilities.rank_zero.rank_zero_info") as info:
        cli = cli_main([*args, "--model.init_args.valid_spans=false", "--model.init_args.C=5"])
    assert cli.model.valid_spans is False and cli.model.C == 5.0
    said = [c.args[0] for c in info.call_args_list if "rebuilt" in str(c.args[0])]
    assert len(said) == 1 and said[0].endswith(
        "with the command line's --model.init_args.C=5.0 (saved: 1.0), "
        "--model.init_args.valid_spans=False (saved: True)")
    with mock.patch("sys.argv", ["structssl"]):
        assert cli_main(args).model.valid_spans is True  # the checkpoint's


def test_test_and_validate_refuse_what_would_give_a_silent_or_wrong_score(
    corpus: dict[str, Any], run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``structssl test|validate`` rebuild the features from the files given: other files than
    the fit's gave another encoding and a wrong score (exit 0); no ``--ckpt_path`` scored an
    untrained model, no test / dev file printed nothing. Each is one line now, status 2."""
    root = corpus["root"]
    best = run_dir / "checkpoints" / "best.ckpt"
    few = tmp_path / "few.conll"
    few.write_text("\n\n".join((root / "TRAIN.conll").read_text().split("\n\n")[:3]) + "\n\n")
    common = [f"--config={CONFIG}", f"--trainer.default_root_dir={tmp_path / 'run'}",
              "--trainer.enable_progress_bar=false"]
    cases = [
        (["test", f"--data.train_file={few}", f"--data.dev_file={root / 'DEV.conll'}",
          f"--data.test_file={root / 'NEW.conll'}", f"--ckpt_path={best}"],
         f"structssl test: --ckpt_path {best}: the tags and features built now from the data files "
         "differ from the checkpoint's"),
        (["test", f"--data.train_file={root / 'TRAIN.conll'}", f"--data.test_file={root / 'NEW.conll'}"],
         "structssl test: `structssl test` evaluates a trained model: pass --ckpt_path"),
        (["validate", f"--data.train_file={root / 'TRAIN.conll'}", f"--ckpt_path={best}"],
         "structssl validate: the data module has no dev examples to evaluate: pass --data.dev_file FILE"),
        # the fit's files read in another scheme (a user test: IOB1 files for a BILOU model)
        (["test", f"--data.train_file={root / 'TRAIN.conll'}", f"--data.dev_file={root / 'DEV.conll'}",
          f"--data.test_file={root / 'NEW.conll'}", "--data.tag_scheme=iob1", f"--ckpt_path={best}"],
         f"structssl test: --ckpt_path {best}: the files are read as tag scheme 'iob1' and the "
         "checkpoint's as 'bio' (--data.tag_scheme); the tags and features built now"),
    ]
    for args, message in cases:
        assert main([args[0], *common, *args[1:]]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith(message), err


def test_predict_scores_tags_the_model_never_saw_as_errors(
    corpus: dict[str, Any], run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from structssl.predict import Tagger

    root, new = corpus["root"], corpus["new"]
    tagger = Tagger.load(run_dir)
    known = tagger.tag_file(root / "NEW.conll", root / "known.conll")
    # the doses of the test file become a type the model never saw (one gold span each)
    renamed = [[(w, t.replace("DOSE", "AMOUNT")) for w, t in s] for s in new]
    _write(root / "RENAMED.conll", renamed)
    summary = tagger.tag_file(root / "RENAMED.conll", root / "renamed.conll")
    assert summary["unseen_tags"] == ["B-AMOUNT"]
    # same predictions; every AMOUNT span is missed and every predicted DOSE span is wrong
    assert (root / "renamed.conll").read_text() == (root / "known.conll").read_text()
    gold = sum(t.startswith("B-") for s in new for _, t in s)
    doses = sum(t == "B-DOSE" for s in new for _, t in s)
    assert 0 < doses < gold
    assert summary["span_f1"] < known["span_f1"] - 0.05
    assert summary["token_accuracy"] < known["token_accuracy"]
    main(["predict", "--model", str(run_dir), "--input", str(root / "RENAMED.conll"),
          "--output", str(root / "r2.conll")])
    assert "never saw, counted as errors: ['B-AMOUNT']" in capsys.readouterr().out
    # tags of another scheme cannot be scored: the reason is named, the file is still tagged
    _write(root / "BIOES.conll", new, scheme="bioes")
    summary = tagger.tag_file(root / "BIOES.conll", root / "bioes.conll")
    assert "span_f1" not in summary and "expected a BIO tag" in summary["not_scored"]
    assert (root / "bioes.conll").read_text() == (root / "known.conll").read_text()
    # an untagged input is neither scored nor reported as unscorable
    assert set(tagger.tag_file(root / "NEW.txt", root / "plain.conll")) == {"sentences", "tokens"}


def test_predict_reads_an_input_in_another_encoding(
    corpus: dict[str, Any], run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = corpus["root"]
    text = (root / "NEW.txt").read_text(encoding="utf-8").replace("dia", "día")
    (root / "utf8.txt").write_text(text, encoding="utf-8")
    (root / "latin1.txt").write_text(text, encoding="latin-1")
    assert main(["predict", "--model", str(run_dir), "--input", str(root / "latin1.txt"),
                 "--output", str(root / "l.conll")]) == 2
    err = capsys.readouterr().err
    assert "expected utf-8 text" in err and "--encoding" in err
    assert main(["predict", "--model", str(run_dir), "--input", str(root / "latin1.txt"),
                 "--output", str(root / "l.conll"), "--encoding", "latin-1"]) == 0
    assert main(["predict", "--model", str(run_dir), "--input", str(root / "utf8.txt"),
                 "--output", str(root / "u.conll")]) == 0
    assert (root / "l.conll").read_text(encoding="utf-8") == (root / "u.conll").read_text(
        encoding="utf-8") and "día" in (root / "u.conll").read_text(encoding="utf-8")
    assert main(["predict", "--model", str(run_dir), "--input", str(root / "utf8.txt"),
                 "--output", str(root / "u.conll"), "--encoding", "klingon"]) == 2
    assert "encoding must name a text encoding" in capsys.readouterr().err


def test_predict_confidence_and_kbest_columns(corpus: dict[str, Any], run_dir: Path) -> None:
    root = corpus["root"]
    out = root / "conf.conll"
    main(["predict", "--model", str(run_dir), "--input", str(root / "NEW.txt"), "--output",
          str(out), "--confidence=true", "--kbest=3"])
    rows = [line.split("\t") for line in out.read_text().split("\n") if line]
    assert all(len(r) == 5 for r in rows)
    assert all(0.0 <= float(r[2]) <= 1.0 for r in rows)


def test_python_api_tags_token_lists(run_dir: Path) -> None:
    tagger = Tagger.load(run_dir)
    (tags,) = tagger.tag([["el", "paciente", "con", "Aspirina", "10mg", "zzz-unseen"]])
    assert len(tags) == 6 and tags[3] == "B-DRUG" and tags[4] == "B-DOSE"
    assert tagger.tags == ("O", "B-DOSE", "I-DOSE", "B-DRUG", "I-DRUG")
    with pytest.raises(TypeError, match=r"sentences\[0\] must be a list of tokens"):
        tagger.tag(["el paciente"])


def test_checkpoint_alone_rebuilds_the_model(run_dir: Path) -> None:
    from structssl.training import SupervisedModule

    model = SupervisedModule.load_from_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    assert model.scorer.num_labels == 5 and model.tags[0] == "O"
    assert model.data_format is not None and model.data_format["kind"] == "tagging"


def test_bad_checkpoints_get_clear_errors(
    tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.ckpt: not a readable checkpoint"):
        load_model(empty)
    truncated = tmp_path / "cut.ckpt"
    truncated.write_bytes((run_dir / "checkpoints" / "last.ckpt").read_bytes()[:500])
    with pytest.raises(ValueError, match=r"cut\.ckpt: not a readable checkpoint"):
        load_model(truncated)
    text = tmp_path / "notes.txt"  # e.g. --model given the file to tag: torch's advice left out
    text.write_text("El O\nGrupo B-ORG\n")
    with pytest.raises(ValueError, match=r"notes\.txt: not a readable checkpoint \(17 bytes; "
                                         r".*expected a checkpoint written by `structssl fit`") as info:
        load_model(text)
    assert "\n" not in str(info.value) and len(str(info.value)) < 400, str(info.value)
    with pytest.raises(FileNotFoundError, match="no checkpoint in"):
        load_model(tmp_path)
    assert main(["predict", "--model", str(tmp_path), "--input", "x", "--output", "y"]) == 2
    assert "structssl predict: no checkpoint in" in capsys.readouterr().err


def test_checkpoint_of_another_task_is_refused(tmp_path: Path) -> None:
    main([
        "fit", f"--config={CONFIG.parent / 'quickstart.yaml'}", "--trainer.max_epochs=1",
        "--data.init_args.num_train=30", "--data.init_args.num_dev=5",
        "--data.init_args.num_test=5", f"--trainer.default_root_dir={tmp_path}",
        "--trainer.enable_progress_bar=false", "--test_after_fit=false",
    ])
    with pytest.raises(ValueError, match="structssl predict applies sequence taggers .* and multi-label classifiers"):
        Tagger.load(tmp_path)


def test_sizes_given_in_the_config_must_match_the_data(
    corpus: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A size the config gives that differs from the data's stops at setup, on one line."""
    out = _fit(corpus["root"], "mismatch", "--model.init_args.scorer.init_args.num_labels=9")
    err = capsys.readouterr().err
    assert re.search(r"structssl fit: .*num_labels = 9 does not match the data's num_labels", err), err
    assert "Traceback" not in err and not (out / "checkpoints").exists()


def test_unlabeled_file_feeds_a_semi_supervised_procedure(corpus: dict[str, Any]) -> None:
    root = corpus["root"]
    out = _fit(
        root, "ssl", f"--data.unlabeled_file={root / 'UNLABELED.txt'}",
        "--model.class_path=structssl.training.TransductiveModule",
        "--data.unlabeled_batch_size=16", "--trainer.max_epochs=2",
    )
    model = load_model(out)
    assert type(model).__name__ == "TransductiveModule"
    assert torch.isfinite(model.scorer.emission.weight).all()


def test_a_semi_supervised_procedure_without_unlabeled_data_says_so(corpus: dict[str, Any]) -> None:
    """``configs/tagger_ssl.yaml`` without ``--data.unlabeled_file`` (its default is none) and
    every tagged sentence kept: the procedure would train on the tagged ones alone, silently."""
    with pytest.warns(UserWarning, match=r"TransductiveModule is a semi-supervised procedure, but "
                      r"the data has no unlabeled examples.*--data.unlabeled_file FILE"):
        _fit(corpus["root"], "ssl_none", "--model.class_path=structssl.training.TransductiveModule",
             "--trainer.max_epochs=1")


def test_transductive_full_batch_trains_on_chunks(corpus: dict[str, Any]) -> None:
    """nabla-TSVM with full batches on both sides gets the labeled and the unlabeled sentences
    as length chunks (``max_chunk_positions``) and trains on the unlabeled term."""
    from structssl.data.modules.conll import CoNLLDataModule as Module
    from structssl.training import TransductiveModule

    root = corpus["root"]
    seen: list[tuple[int, int]] = []
    scored: list[int] = []
    loader_of, term_of = Module.train_dataloader, TransductiveModule.unlabeled_term

    def loader_spy(self: Module) -> Any:
        loader = loader_of(self)
        batch = next(iter(loader))[0]
        seen.append((len(batch["labeled"]), len(batch["unlabeled"])))
        return loader

    def term_spy(self: TransductiveModule, batch: Any) -> Any:
        scored.append(int(batch["inputs"].shape[0]))
        return term_of(self, batch)

    with mock.patch.object(Module, "train_dataloader", loader_spy), \
            mock.patch.object(TransductiveModule, "unlabeled_term", term_spy):
        _fit(
            root, "ssl_chunks", f"--data.unlabeled_file={root / 'UNLABELED.txt'}",
            "--model.class_path=structssl.training.TransductiveModule",
            "--data.max_chunk_positions=60", "--trainer.max_epochs=2",
        )
    assert seen and all(n_l > 1 and n_u > 1 for n_l, n_u in seen)  # lists of chunks
    # every evaluation after the warm start scores all 30 untagged sentences, chunk by chunk
    assert max(scored) < 30 and sum(scored) % 30 == 0 and sum(scored) // 30 >= 2


def test_label_switching_runs_on_tagging_data(corpus: dict[str, Any], tmp_path: Path) -> None:
    """Label switching with a corpus-level prior (entity proportion) on CoNLLDataModule:
    unlabeled examples carry index and tokens, constraints bind to the learned tags."""
    root = corpus["root"]
    config = constrained_fit_config(
        tmp_path / "ls.yaml", "structssl.training.LabelSwitchingModule",
        [("LabelProportion", {"label": "B-DRUG", "target": 0.1, "weight": 10.0})],
        {"dev_file": None, "test_file": None},
        trainer={"max_epochs": 2, "enable_progress_bar": False, "enable_model_summary": False,
                 "log_every_n_steps": 1},
        supervised_epochs=1, lbfgs_max_iter=5,
    )
    main([
        "fit", f"--config={config}", f"--data.train_file={root / 'TRAIN.conll'}",
        f"--data.dev_file={root / 'DEV.conll'}", f"--data.unlabeled_file={root / 'UNLABELED.txt'}",
        f"--trainer.default_root_dir={tmp_path / 'run'}",
    ])
    model = load_model(tmp_path / "run")
    assert type(model).__name__ == "LabelSwitchingModule" and model.history
    with pytest.raises(ValueError, match="needs the whole unlabeled set in one batch"):
        main([
            "fit", f"--config={config}", f"--data.train_file={root / 'TRAIN.conll'}",
            f"--data.unlabeled_file={root / 'UNLABELED.txt'}", "--data.unlabeled_batch_size=4",
            f"--trainer.default_root_dir={tmp_path / 'run2'}",
        ])


_SSL_CONFIGS = {
    # config -> (the option that ends the supervised start, the procedure's class)
    "tagger_ssl_label_switching.yaml": ("supervised_epochs", "LabelSwitchingModule"),
    "tagger_ssl_cccp.yaml": ("supervised_epochs", "CCCPModule"),
    "tagger_ssl_cosvm.yaml": ("warm_start_epochs", "CoTrainingModule"),
    "tagger_ssl_codl.yaml": ("supervised_epochs", "CoDLModule"),
}


def test_the_tokens_a_pattern_rule_matches_are_logged(tmp_path: Path) -> None:
    """The NER configs' "a lower-case word does not begin an entity" pattern lists Latin
    letters: on Cyrillic text it matches nothing, and the run says so at setup."""
    words = [("Иван", "B-PER"), ("живёт", "O"), ("в", "O"), ("Москве", "B-LOC"), (".", "O")]
    sentences = [words] * 25  # 125 tokens
    train = tmp_path / "train.conll"
    _write(train, sentences)
    unlabeled = tmp_path / "unlabeled.txt"
    _write(unlabeled, sentences[:5], tags=False)
    with mock.patch("sys.argv", ["structssl"]), \
            mock.patch("pytorch_lightning.utilities.rank_zero.rank_zero_info") as info:
        cli_main([
            "fit", f"--config={CONFIG.parent / 'tagger_ssl_label_switching.yaml'}",
            f"--data.train_file={train}", f"--data.unlabeled_file={unlabeled}",
            f"--trainer.default_root_dir={tmp_path / 'run'}", "--trainer.max_epochs=1",
            "--model.init_args.lbfgs_max_iter=2", "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false", "--num_threads=1",
        ])
    (line,) = [c.args[0] for c in info.call_args_list if "each pattern rule matches" in c.args[0]]
    assert re.search(r"WordLabels\(\[a-z[^)]* -> O, \[!BSU\]-\*\) 0 of 125; "
                     r"WordLabels\(\[\^\\w\]\+ -> O\) 25 of 125$", line), line


@pytest.mark.parametrize("name", sorted(_SSL_CONFIGS))
def test_semi_supervised_configs_on_a_tag_set_never_seen(
    corpus: dict[str, Any], tmp_path: Path, name: str
) -> None:
    """The alternatives to configs/tagger_ssl.yaml train as the README says on a tag set they
    were not written for (DRUG / DOSE): their constraints' tag patterns bind to it, the
    unlabeled part enters after the supervised start, and the model tags new text."""
    root = corpus["root"]
    option, procedure = _SSL_CONFIGS[name]
    out = tmp_path / "run"
    with mock.patch("sys.argv", ["structssl"]), \
            mock.patch("pytorch_lightning.utilities.rank_zero.rank_zero_info") as info:
        cli = cli_main([
            "fit", f"--config={CONFIG.parent / name}", f"--data.train_file={root / 'TRAIN.conll'}",
            f"--data.dev_file={root / 'DEV.conll'}", f"--data.unlabeled_file={root / 'UNLABELED.txt'}",
            f"--trainer.default_root_dir={out}", "--trainer.max_epochs=3",
            f"--model.init_args.{option}=1", "--model.init_args.lbfgs_max_iter=5",
            "--data.word_clusters=[2, 4]", "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false", "--num_threads=1",
        ])
    model = cli.model
    assert type(model).__name__ == procedure
    metrics = cli.trainer.callback_metrics
    if procedure == "CCCPModule":  # linearised at the constraint-guided taggings (0 when all hold)
        assert "train/cccp_objective" in metrics and float(metrics["train/cccp_outer"]) == 1
        assert 0 <= float(metrics["train/cccp_guided_changed"]) <= 1
        (line,) = [c.args[0] for c in info.call_args_list if "CCCP outer iterations" in c.args[0]]
        assert line.startswith("CCCPModule: 2 CCCP outer iterations, J = ")  # outer 0 and 1
        assert line.endswith("of the 30 constraint examples")  # the untagged sentences
    else:
        assert float(metrics["train/unlabeled_loss"]) > 0
    if procedure != "CoTrainingModule":  # constraints bound to the file's tags by pattern
        bound = model._bound if procedure == "CCCPModule" else model.constraints
        assert bound.label_names == tuple(cli.datamodule.tags)
        lower = next(iter(bound))
        inside = {t for t in cli.datamodule.tags if t == "O" or t.startswith("I-")}
        assert {bound.label_names[i] for i in lower.indices} == inside and "I-DRUG" in inside
    tagged = Tagger.load(out).tag([["Tomar", "aspirina", "10mg"]])
    assert len(tagged[0]) == 3


def _fit_with_constrained_decoding(config: str, root: Path, out: Path) -> Any:
    """A 2-epoch ``structssl fit`` of a constraint recipe (``configs/<config>``) on the toy
    corpus with ``constrained_decoding=true``; the CLI object."""
    with mock.patch("sys.argv", ["structssl"]):
        return cli_main([
            "fit", f"--config={CONFIG.parent / config}",
            f"--data.train_file={root / 'TRAIN.conll'}", f"--data.dev_file={root / 'DEV.conll'}",
            f"--data.unlabeled_file={root / 'UNLABELED.txt'}", f"--trainer.default_root_dir={out}",
            "--trainer.max_epochs=2", "--model.init_args.supervised_epochs=1",
            "--model.init_args.lbfgs_max_iter=5", "--model.init_args.constrained_decoding=true",
            "--data.word_clusters=[2, 4]", "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false", "--num_threads=1",
        ])


def test_codl_decodes_dev_with_its_constraints(corpus: dict[str, Any], tmp_path: Path) -> None:
    """CoNLL dev / test sentences carry their tokens, so CoDL's constraint-guided decoding
    ("CODL (I)") runs on own files: validation decodes with the search."""
    root = corpus["root"]
    cli = _fit_with_constrained_decoding("tagger_ssl_codl.yaml", root, tmp_path)
    dm, model = cli.datamodule, cli.model
    dev = dm.splits["dev"]
    assert all(len(ex["tokens"]) == ex["inputs"].shape[0] for ex in dev)
    batch = dm.collate(dev)
    with torch.no_grad():
        guided = model.guided_argmax(batch)
        assert torch.equal(model.decode(batch), guided)
    assert "val/span_f1" in cli.trainer.callback_metrics
    # structssl predict decodes with the same search (its tags, not the Viterbi path's)
    tagger = Tagger.load(tmp_path)
    sentences = tagger.format.read_tokens(root / "DEV.conll")
    predicted = [list(s.tags) for s in tagger.predict(sentences)]
    expected = [tagger.format.decode(guided[i, : len(s.tokens)].tolist()) for i, s in enumerate(sentences)]
    assert predicted == [list(t) for t in expected]
    # with the weights moved (unit noise) so that the Viterbi path breaks the hard rule (a
    # lowercase word begins an entity), predict's tags keep it
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in tagger.model.scorer.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype))

    def begins_on_lowercase(tagged: list[list[str]]) -> int:
        return sum(tok[0].islower() and tag[:2] in ("B-", "S-", "U-")
                   for s, tags in zip(sentences, tagged) for tok, tag in zip(s.tokens, tags))

    # the rules are soft (a unit penalty each), and the search keeps to well-formed BIO
    # (valid_spans: an entity may not start with I- on a lowercase word): against the noisy
    # weights a large penalty and more than the config's 16 candidates make them hold
    tagger.model.penalty_scale, tagger.model.search_k = 100.0, 64
    constrained = [list(s.tags) for s in tagger.predict(sentences)]
    tagger.model.constrained_decoding = False
    viterbi = [list(s.tags) for s in tagger.predict(sentences)]
    assert begins_on_lowercase(viterbi) > 0 and begins_on_lowercase(constrained) == 0
    # `structssl predict --constraints false` switches the saved model's search off, `true` on
    # (the noisy weights saved, so that the two decodings differ)
    for ckpt in tmp_path.rglob("*.ckpt"):
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        state["state_dict"] = {k: v.clone() for k, v in tagger.model.state_dict().items()}
        torch.save(state, ckpt)
    saved, outputs = Tagger.load(tmp_path), {}
    for flag, want in (("false", False), ("true", True)):
        out = tmp_path / f"pred_{flag}.conll"
        assert main(["predict", "--model", str(tmp_path), "--input", str(root / "DEV.conll"),
                     "--output", str(out), "--constraints", flag]) == 0
        saved.model.constrained_decoding = want
        expected_tags = [list(s.tags) for s in saved.predict(sentences)]
        written = [[line.split("\t")[1] for line in block.splitlines()]
                   for block in out.read_text().strip().split("\n\n")]
        assert written == expected_tags
        outputs[flag] = written
    assert outputs["false"] != outputs["true"]  # the search changes some tags here


def test_label_switching_decodes_with_its_constraints(corpus: dict[str, Any], tmp_path: Path) -> None:
    """The constraint-guided decoding is label switching's too (``constrained_decoding``, the
    config's instance-level NER rules; its corpus-level ones are not per sentence), and
    ``structssl predict --constraints false|true`` switches it."""
    root = corpus["root"]
    cli = _fit_with_constrained_decoding("tagger_ssl_label_switching.yaml", root, tmp_path)
    model, batch = cli.model, cli.datamodule.collate(cli.datamodule.splits["dev"])
    with torch.no_grad():
        assert torch.equal(model.decode(batch), model.guided_argmax(batch))
    for flag in ("false", "true"):
        assert main(["predict", "--model", str(tmp_path), "--input", str(root / "DEV.conll"),
                     "--output", str(tmp_path / f"p_{flag}.conll"), "--constraints", flag]) == 0
    # structssl test applies the command line's constrained_decoding over the checkpoint's
    for flag in (False, True):
        with mock.patch("sys.argv", ["structssl"]):
            tested = cli_main([
                "test", f"--config={CONFIG.parent / 'tagger_ssl_label_switching.yaml'}",
                f"--data.train_file={root / 'TRAIN.conll'}",
                f"--data.dev_file={root / 'DEV.conll'}",
                f"--data.unlabeled_file={root / 'UNLABELED.txt'}",
                f"--data.test_file={root / 'DEV.conll'}", "--data.word_clusters=[2, 4]",
                f"--ckpt_path={tmp_path / 'checkpoints' / 'best.ckpt'}",
                f"--model.init_args.constrained_decoding={str(flag).lower()}",
                f"--trainer.default_root_dir={tmp_path / 'test'}",
                "--trainer.enable_progress_bar=false",
            ])
        assert tested.model.constrained_decoding is flag


@pytest.mark.parametrize("which", ["train", "dev", "missing"])
def test_fit_reports_a_bad_data_file_without_traceback(
    tmp_path: Path, which: str, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.conll", tmp_path / "bad.conll"
    good.write_text("El O\nGrupo B-ORG\n\nAna B-PER\nrie O\n\n")
    bad.write_text("El O\nGrupo NC B-ORG\n\n")
    train = {"train": bad, "dev": good, "missing": tmp_path / "absent.conll"}[which]
    dev = bad if which == "dev" else good
    status = main(["fit", "--config", str(CONFIG), "--data.train_file",
                    str(train), "--data.dev_file", str(dev), "--trainer.default_root_dir",
                    str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 2
    assert "Traceback" not in err
    expected = "absent.conll (the train file, --data.train_file" if which == "missing" else "bad.conll:2: expected 2 columns"
    assert "structssl fit: " in err and expected in err, err


def test_fit_still_raises_errors_that_are_not_data_errors(tmp_path: Path) -> None:
    (tmp_path / "t.conll").write_text("El O\nGrupo B-ORG\n\n")
    with mock.patch("structssl.cli.cli_main", side_effect=ValueError("a bug")):
        with pytest.raises(ValueError, match="a bug"):
            main(["fit", "--config", str(CONFIG)])


def _pos_files(root: Path) -> None:
    """Plain part-of-speech tags (no entity scheme, no O tag) and untagged sentences."""
    rng = random.Random(3)
    words = {"DT": ["the", "a"], "NN": ["dog", "cat", "house"], "VB": ["runs", "sees"],
             "JJ": ["big", "red"], ".": ["."]}
    patterns = [["DT", "NN", "VB", "DT", "JJ", "NN", "."], ["DT", "JJ", "NN", "VB", "."]]

    def write(path: Path, count: int, tags: bool) -> None:
        lines = []
        for _ in range(count):
            for tag in rng.choice(patterns):
                word = rng.choice(words[tag])
                lines.append(f"{word}\t{tag}" if tags else word)
            lines.append("")
        path.write_text("\n".join(lines) + "\n")

    write(root / "t.conll", 12, True)
    write(root / "u.txt", 30, False)


@pytest.mark.parametrize("procedure", ["label_switching", "cccp"])
def test_constraint_procedures_bind_plain_tags_and_estimate_targets(
    tmp_path: Path, procedure: str
) -> None:
    """Label switching and CCCP bind their constraints to a plain tag set (the data module's
    tags: before, label switching left them unbound and failed after an epoch) and estimate a
    target='labeled' from the tagged sentences at setup (before: only CCCP did)."""
    _pos_files(tmp_path)
    module = {"label_switching": "structssl.training.LabelSwitchingModule",
              "cccp": "structssl.training.cccp.CCCPModule"}[procedure]
    options = ({"max_passes": 1} if procedure == "label_switching"
               else {"inner_epochs": 1, "C2": 1.0})
    config = constrained_fit_config(
        tmp_path / "c.yaml", module,
        [("WordLabels", {"words": ["the", "a"], "labels": ["DT"]}),
         ("LabelProportion", {"label": "NN", "target": "labeled", "bound": "ge"})],
        {"train_file": str(tmp_path / "t.conll"), "dev_file": None, "test_file": None,
         "unlabeled_file": str(tmp_path / "u.txt")},
        trainer={**QUIET, "max_epochs": 2, "default_root_dir": str(tmp_path / "run")},
        supervised_epochs=1, lbfgs_max_iter=3, **options,
    )
    with mock.patch("sys.argv", ["structssl"]):
        cli = cli_main(["fit", "--config", str(config)])
    bound = cli.model.constraints if procedure == "label_switching" else cli.model._bound
    assert bound.label_names == (".", "DT", "JJ", "NN", "VB")
    (proportion,) = [c for c in bound if type(c).__name__ == "LabelProportion"]
    tagged = (tmp_path / "t.conll").read_text().split()
    nn, tokens = tagged.count("NN"), len(tagged) // 2
    assert proportion.target == pytest.approx(nn / tokens)


def test_predict_constraints_is_refused_for_a_tagger_without_a_constrained_search(
    tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = tmp_path / "in.txt"
    text.write_text("La\nCoruna\n\n")
    assert main(["predict", "--model", str(run_dir), "--input", str(text), "--output",
                 str(tmp_path / "out.conll"), "--constraints", "true"]) == 2
    err = capsys.readouterr().err
    assert "--constraints applies to multi-label classifiers and to taggers trained by CoDL or label switching" in err
    assert "this tagger was trained by SupervisedModule" in err


def test_predict_input_with_a_sentence_per_line_gets_a_hint(
    tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file to tag that holds a sentence per line (a common slip) stops with its file and
    line, the column counts and a hint, exit status 2, and writes nothing."""
    text = tmp_path / "sentences.txt"
    text.write_text("La Coruna es bonita hoy .\nEl Grupo Magenta vive en Madrid desde 1990 .\n")
    out = tmp_path / "pred.conll"
    assert main(["predict", "--model", str(run_dir), "--input", str(text), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"structssl predict: {text}:1: expected 1 (the token alone) or the training "
                          "file's 2 columns; got 6")
    assert err.endswith("is this a sentence per line?)") and "\n" not in err
    assert not out.exists()


def test_best_checkpoint_is_the_model_alone(run_dir: Path) -> None:
    """``best.ckpt`` (what predict and test read) has no optimizer state; ``last.ckpt``, the
    file a run resumes from, keeps it."""
    best, last = (torch.load(run_dir / "checkpoints" / f"{name}.ckpt", map_location="cpu",
                             weights_only=False) for name in ("best", "last"))
    assert "optimizer_states" not in best and "callbacks" not in best
    assert last["optimizer_states"] and last["callbacks"]
    assert best["structssl"]["data_format"] is not None and best["hyper_parameters"]


def test_predict_input_of_one_line_per_sentence_with_equal_lengths_is_refused(
    tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lines that all hold the same number of words used to be read as one token plus "other
    columns" (five of six words dropped, exit 0); the checkpoint knows the training file's
    layout (2 columns), so 1 or 2 columns are accepted and anything else is an error."""
    text = tmp_path / "one.txt"
    text.write_text("La Coruna es bonita hoy .\n")
    out = tmp_path / "pred.conll"
    assert main(["predict", "--model", str(run_dir), "--input", str(text), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"structssl predict: {text}:1: expected 1 (the token alone) or the training "
                   "file's 2 columns; got 6 (files hold one token per line; is this a sentence per "
                   "line?)")
    assert not out.exists()


def test_predict_input_whose_tag_column_holds_words_is_refused(
    tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two-word sentences, one per line, have the training layout (token, tag): they used to
    be tagged as one sentence of their first words with exit status 0 (found by a user test);
    the tag column holds no tags of the model, so the file is refused and nothing written."""
    text = tmp_path / "pairs.txt"
    text.write_text("tomar aspirina\ncada dia\nel paciente\n")
    out = tmp_path / "pred.conll"
    assert main(["predict", "--model", str(run_dir), "--input", str(text), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"structssl predict: {text}:1: read in the training file's layout (2 columns, the tag "
        "last), but 3 of its 3 tag-column values are no tags of the model (here 'aspirina'"
    ), err
    assert err.endswith("(is this a sentence per line?)") and "\n" not in err
    assert not out.exists()
    # tags of the model's types in another scheme are tags: scored or named, never refused
    other = tmp_path / "bioes.conll"
    other.write_text("Aspirina S-DRUG\ncada O\ndia O\n")
    summary = Tagger.load(run_dir).tag_file(other, tmp_path / "other.conll")
    assert summary["sentences"] == 1 and summary["tokens"] == 3


def test_layout_without_the_tag_column_is_read_as_untagged(tmp_path: Path) -> None:
    """Trained on token POS TAG, a file to tag may hold token POS (not scored: the POS column
    must not be read as gold tags); a dev file must have the training columns."""
    rows = [[("El", "DT", "O"), ("Grupo", "NC", "B-ORG"), ("Magenta", "NC", "I-ORG")],
            [("Ana", "NP", "B-PER"), ("vive", "VB", "O")]] * 3
    train, dev, new = (tmp_path / n for n in ("t.conll", "d.conll", "new.txt"))
    train.write_text("\n\n".join("\n".join(" ".join(r) for r in s) for s in rows) + "\n")
    dev.write_text("El O\nGrupo B-ORG\n")
    new.write_text("Ana NP\nvive VB\n")
    dm = CoNLLDataModule(train_file=str(train), dev_file=str(dev), test_file=None)
    with pytest.raises(ValueError, match=r"d\.conll:1: expected the training file's 3 columns with "
                                         r"the tag last; got 2: no tag column"):
        dm.setup()
    dm = CoNLLDataModule(train_file=str(train), dev_file=None, test_file=None)
    dm.setup()
    fmt = dm.format
    assert fmt.num_columns == 3
    assert Tagger._gold(fmt, new) == (None, None)  # untagged: nothing to score against
    assert [s.tokens for s in fmt.read_tokens(new)] == [("Ana", "vive")]


def test_feature_column_that_is_the_tag_column_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t.conll").write_text("El DT O\nGrupo NC B-ORG\n\n")
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                         feature_columns=[2])
    with pytest.raises(ValueError, match=r"t\.conll:1: feature_columns=2 is the label column "
                                         r"\(tag_column=-1 of this line's 3 columns\)"):
        dm.setup()


@pytest.mark.parametrize(
    "tags, scheme, first, bio",
    [
        (["O", "I-X", "I-X"], "bio", 1, ["O", "B-X", "I-X"]),
        (["B-X", "I-Y"], "bio", 1, ["B-X", "B-Y"]),
        (["O", "B-X"], "iob1", 1, ["O", "B-X"]),
        (["B-P", "E-P", "I-P"], "bioes", 1, ["B-P", "I-P", "I-P"]),
        (["O", "E-P"], "bioes", 1, ["O", "B-P"]),
        (["I-X", "B-X", "O"], "iob1", None, ["B-X", "B-X", "O"]),
        (["B-P", "L-P", "U-P"], "bilou", None, ["B-P", "I-P", "B-P"]),
        (["NN", "I-X"], "plain", None, ["NN", "I-X"]),
    ],
)
def test_ill_formed_tag_sequences(tags: list[str], scheme: str, first: Any, bio: list[str]) -> None:
    from structssl.data.tag_schemes import ill_formed

    assert ill_formed(tags, scheme) == first
    assert to_bio(tags, scheme) == bio


def test_ill_formed_training_tags_warn_with_count_and_line(tmp_path: Path) -> None:
    (tmp_path / "t.conll").write_text("El O\nGrupo I-ORG\n\nAna B-PER\n\nLa O\nONU I-ORG\n\n")
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                         tag_scheme="bio")
    with pytest.warns(UserWarning, match=r"t\.conll: 2 sentence\(s\) with ill-formed BIO tags, the "
                                         r"first at line 2 \('I-ORG' where a well-formed sequence of the same spans has "
                                         r"'B-ORG'\)"):
        dm.setup()
    labels = dm.splits["labeled"][0]["labels"].tolist()
    assert [dm.format.tags[i] for i in labels] == ["O", "B-ORG"]


def test_input_that_is_utf8_read_as_latin1_warns(tmp_path: Path, run_dir: Path) -> None:
    tagger = Tagger.load(run_dir)
    tagger.format.encoding = "latin-1"  # as if trained on latin-1 files
    new = tmp_path / "new.txt"
    new.write_text("José\nvive\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"valid UTF-8 with non-ASCII characters, but is read as "
                                         r"latin-1"):
        tagger.tag_file(new, tmp_path / "p.conll")
    new.write_text("Jose\nvive\n", encoding="utf-8")
    import warnings as _warnings

    with _warnings.catch_warnings():
        _warnings.simplefilter("error", UserWarning)
        tagger.tag_file(new, tmp_path / "p.conll")  # ASCII: no warning


def test_command_line_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from structssl.cli import short_parse_error

    with pytest.raises(SystemExit) as done:
        main(["fit", f"--config={CONFIG}", "--data.train_file=x", "--data.tag_scheme=bioul"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("structssl fit: error: --data.tag_scheme: Expected a typing.Literal[")
    assert "Got value: bioul" in err and "\n" not in err
    nested = ('Parser key "data":\n  Does not validate against any of the Union subtypes\n  Errors:\n'
              "    - Problem with given class_path 'structssl.data.CoNLLDataModule':\n"
              "        Option 'train_fil' is not accepted\n    - Expected a <class 'NoneType'>\n")
    assert short_parse_error(nested) == "--data: Option 'train_fil' is not accepted"
    assert short_parse_error("something else") == "something else"
    inner = ('Parser key "model":\n  Does not validate against any of the Union subtypes\n  Errors:\n'
             "    - Problem with given class_path 'structssl.training.TransductiveModule':\n"
             '        Parser key "scorer":\n'
             "          Problem with given class_path 'mymodule.MLPChainScorer':\n"
             "            No module named 'mymodule'\n    - Expected a <class 'NoneType'>\n")
    assert short_parse_error(inner) == (
        "--model.scorer: Problem with given class_path 'mymodule.MLPChainScorer': No module "
        "named 'mymodule'"
    )
    union = ('Parser key "data":\n  Does not validate against any of the Union subtypes\n  Errors:\n'
             "    - Problem with given class_path 'structssl.data.CoNLLDataModule':\n"
             '        Parser key "max_length":\n'
             "          Does not validate against any of the Union subtypes\n"
             "          Subtypes: [<class 'int'>, <class 'NoneType'>]\n          Errors:\n"
             "            - Expected a <class 'int'>\n            - Expected a <class 'NoneType'>\n"
             "          Given value type: <class 'str'>\n    - Expected a <class 'NoneType'>\n")
    assert short_parse_error(union) == (
        "--data.max_length: Expected a <class 'int'>; Expected a <class 'NoneType'> (given "
        "value type: <class 'str'>)"
    )
    # a value a class refuses when the CLI builds it: its own message, one line, status 2
    assert main(["fit", f"--config={CONFIG}", "--data.train_file=x", "--data.num_labeled=0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "structssl fit: CoNLLDataModule: num_labeled must be an int >= 1 or None; got 0"
    )
    with pytest.raises(SystemExit):  # options are not abbreviated
        main(["fit", f"--config={CONFIG}", "--data.train_file=x", "--trainer.max_epoch=1"])
    assert "unrecognized arguments: --trainer.max_epoch=1" in capsys.readouterr().err


def test_unlabeled_file_with_a_sentence_per_line_is_refused(tmp_path: Path) -> None:
    """The unlabeled file is read before the format is fitted; it gets the layout check too."""
    (tmp_path / "t.conll").write_text("El O\nGrupo B-ORG\n\nAna B-PER\nvive O\n\n")
    (tmp_path / "u.txt").write_text("La ONU habla hoy\nAna vive en Madrid\n")
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                         unlabeled_file=str(tmp_path / "u.txt"))
    with pytest.raises(ValueError, match=r"u\.txt:1: expected 1 \(the token alone\) or the training "
                                         r"file's 2 columns; got 4"):
        dm.setup()


def test_a_sentence_per_line_is_named_at_its_first_line(tmp_path: Path) -> None:
    """Lines of different lengths: the error names the allowed layouts at line 1, not "expected
    N columns" with N the first sentence's word count."""
    (tmp_path / "t.conll").write_text("El DT O\nGrupo NC B-ORG\n\n")
    (tmp_path / "u.txt").write_text("La ONU habla hoy de nuevo\nAna vive en Madrid\n")
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"), dev_file=None, test_file=None,
                         unlabeled_file=str(tmp_path / "u.txt"))
    with pytest.raises(ValueError, match=r"u\.txt:1: expected 1 \(the token alone\) or the training "
                                         r"file's 3 \(or 2 without its tag column\) columns; got 6 "
                                         r"\(files hold one token per line"):
        dm.setup()


def test_fit_without_dev_into_an_earlier_run_replaces_its_best_checkpoint(
    corpus: dict[str, Any], capsys: pytest.CaptureFixture[str],
) -> None:
    """A run without dev used to leave the earlier run's ``best.ckpt``, which ``predict`` then
    read; now ``best.ckpt`` is the last epoch's model, and fit says which model it holds."""
    root = corpus["root"]
    out = _fit(root, "NODEV", "--trainer.max_epochs=1")
    assert "best dev val/span_f1 " in capsys.readouterr().out
    with pytest.warns(UserWarning, match="holds best.ckpt, last.ckpt of an earlier run; this fit replaces them"):
        main(["fit", f"--config={CONFIG}", f"--data.train_file={root / 'TRAIN.conll'}",
              f"--trainer.default_root_dir={out}", "--trainer.max_epochs=2",
              "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"])
    assert f"no dev examples: {out / 'checkpoints' / 'best.ckpt'} holds the last epoch's model " \
        "(epoch 1)" in capsys.readouterr().out
    best, last = (torch.load(out / "checkpoints" / f"{name}.ckpt", map_location="cpu", weights_only=False)
                  for name in ("best", "last"))
    assert best["epoch"] == last["epoch"] == 1
    torch.testing.assert_close(best["state_dict"], last["state_dict"], rtol=0, atol=0, equal_nan=True)


def test_cosvm_decodes_well_formed_bio(tmp_path: Path) -> None:
    """Two-view models decode the joint potentials under the same BIO restriction."""
    from structssl.scorers import LinearChainScorer, TwoViewScorer
    from structssl.structures import LinearChain
    from structssl.training import CoTrainingModule

    dm = _tagged_and_untagged(tmp_path, 5, two_view=True)
    views = [LinearChainScorer(factored=True, init_std=0.3) for _ in range(2)]
    model = CoTrainingModule(LinearChain(), TwoViewScorer(*views), num_labeled=20, num_unlabeled=30)
    model.adopt_sizes(dm.model_sizes())
    batch = dm.collate(dm.splits["labeled"])
    pot = model.decode_potentials(batch)
    tags = list(dm.format.tags)
    o, inside = tags.index("O"), next(i for i, t in enumerate(tags) if t.startswith("I-"))
    assert bool(torch.isinf(pot.transitions[0, o, inside])) and bool(torch.isinf(pot.start[0, inside]))
    assert torch.equal(pot.emissions, model.potentials(batch).joint.emissions)


def test_best_checkpoint_selects_on_span_f1_for_span_tags(run_dir: Path) -> None:
    """``best.ckpt`` of a BIO run is chosen on ``val/span_f1`` (the callback asks for the
    monitor before the module has adopted the data's task; it used to get token accuracy)."""
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    (key,) = [k for k in last["callbacks"] if k.startswith("BestCheckpoint")]
    assert "'monitor': 'val/span_f1'" in key
    assert last["callbacks"][key]["monitor"] == "val/span_f1"


def test_data_module_has_no_dev_or_test_file_unless_given(tmp_path: Path) -> None:
    """``CoNLLDataModule(train_file=MINE)`` used to evaluate on CoNLL-2002 Spanish's dev and
    test files (their defaults) when ../shared was present; now only the files given."""
    (tmp_path / "t.conll").write_text("El O\nGrupo B-ORG\n\nAna B-PER\nvive O\n\n")
    dm = CoNLLDataModule(train_file=str(tmp_path / "t.conll"))
    dm.setup()
    assert dm.files["dev"] is None and dm.files["test"] is None
    assert dm.splits["dev"] == [] and dm.splits["test"] == []


def test_resuming_from_best_ckpt_is_one_line(corpus: dict[str, Any], run_dir: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    best = run_dir / "checkpoints" / "best.ckpt"
    assert main(["fit", f"--config={CONFIG}", f"--data.train_file={corpus['root'] / 'TRAIN.conll'}",
                 f"--trainer.default_root_dir={run_dir}", f"--ckpt_path={best}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"structssl fit: --ckpt_path {best}: the checkpoint holds the model alone")
    assert err.endswith("or evaluate it with `structssl test --ckpt_path`") and "\n" not in err


def test_a_checkpoint_of_another_procedure_is_refused_by_name(
    corpus: dict[str, Any], run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """run_dir was trained by configs/tagger.yaml (SupervisedModule): resuming or scoring it
    under a recipe of another procedure would go on as that procedure with these weights."""
    root = corpus["root"]
    last, best = run_dir / "checkpoints" / "last.ckpt", run_dir / "checkpoints" / "best.ckpt"
    common = [f"--config={CONFIG.parent / 'tagger_ssl.yaml'}", f"--data.train_file={root / 'TRAIN.conll'}",
              f"--data.dev_file={root / 'DEV.conll'}", f"--data.unlabeled_file={root / 'UNLABELED.txt'}"]
    assert main(["fit", *common, f"--trainer.default_root_dir={run_dir}", f"--ckpt_path={last}"]) == 2
    assert main(["validate", *common, f"--ckpt_path={best}"]) == 2
    fit_err, validate_err = capsys.readouterr().err.strip().splitlines()
    said = ("the checkpoint was written by structssl.training.SupervisedModule, and this config's "
            "model is structssl.training.TransductiveModule; give the config of the run that wrote it")
    assert fit_err.startswith(f"structssl fit: --ckpt_path {last}: {said}")
    assert fit_err.endswith("or start a new run without --ckpt_path")
    assert validate_err.startswith(f"structssl validate: --ckpt_path {best}: {said}")


def test_test_refuses_other_data_options_than_the_fits_where_no_format_is_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Data modules other than CoNLL rebuild features and splits from their options: a test run
    with another split seed scored the model on other data (a treebank's bracket F1 went from
    1.0 to 0.18), silently; the evaluation-only options may differ."""
    quick = [f"--config={CONFIG.parent / 'quickstart.yaml'}", "--data.init_args.num_train=30",
             "--data.init_args.num_dev=5", "--data.init_args.num_test=5"]
    assert main(["fit", *quick, "--trainer.max_epochs=1", f"--trainer.default_root_dir={tmp_path}",
                 "--trainer.enable_progress_bar=false", "--test_after_fit=false"]) == 0
    best = tmp_path / "checkpoints" / "best.ckpt"
    capsys.readouterr()
    assert main(["test", *quick, f"--ckpt_path={best}", "--data.init_args.eval_batch_size=2"]) == 0
    assert main(["test", *quick, f"--ckpt_path={best}", "--data.init_args.split_seed=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"structssl test: --ckpt_path {best}: --data.split_seed 3 (the fit's: 0): "
        "SyntheticHMMDataModule builds its examples (features, splits) from these options, so the "
        "score would not be of the fit's data and features; give the fit's "
        "(RUN_DIR/lightning_logs/version_*/config.yaml)"
    )


def test_predict_takes_token_lists(run_dir: Path) -> None:
    tagger = Tagger.load(run_dir)
    sentences = [["Aspirina", "cada", "dia"], ["Morfina"]]
    out = tagger.predict(sentences, confidence=True, kbest=2)
    assert [list(s.tags) for s in out] == tagger.tag(sentences)
    assert all(s.confidence is not None and len(s.alternatives) == 1 for s in out)
    with pytest.raises(TypeError, match=r"sentences\[0\] must be a list of tokens; got a str"):
        tagger.predict(["Aspirina cada dia"])


def test_lbfgs_on_mini_batches_warns(corpus: dict[str, Any], tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match=r"optimizer='lbfgs' on mini-batches \(batch_size=8\)"):
        assert main(["fit", f"--config={CONFIG}", f"--data.train_file={corpus['root'] / 'TRAIN.conll'}",
                     "--data.batch_size=8", "--trainer.max_epochs=1", f"--trainer.default_root_dir={tmp_path}",
                     "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]) == 0


def test_constraints_that_do_not_fit_the_tags_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The NER recipes' constraints name an O tag; on part-of-speech tags the fit stops with
    one line naming the constraints and the labels (it was a traceback)."""
    (tmp_path / "t.conll").write_text("She PRP\nsleeps VBZ\n. .\n\nHe PRP\nran VBD\n\n")
    (tmp_path / "u.txt").write_text("They\nsleep\n\n")
    assert main(["fit", f"--config={CONFIG.parent / 'tagger_ssl_codl.yaml'}",
                 f"--data.train_file={tmp_path / 't.conll'}", f"--data.unlabeled_file={tmp_path / 'u.txt'}",
                 f"--trainer.default_root_dir={tmp_path}", "--trainer.max_epochs=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("structssl fit: CoDLModule: the constraints ['WordLabels(")
    assert "do not fit the data's labels ['.', 'PRP', 'VBD', 'VBZ']" in err and "unknown label 'O'" in err


def test_constraints_the_gold_tags_break_are_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The NER recipes' rule "a lower-case word does not begin an entity" on lower-case drug
    names: fit logs how many tagged sentences break each constraint and warns above 25 %."""
    (tmp_path / "t.conll").write_text(
        "take O\naspirina B-DRUG\n\nthe O\nmorfina B-DRUG\n.\tO\n\nEl O\nAspirina B-DRUG\n\n"
    )
    (tmp_path / "u.txt").write_text("take\nmorfina\n\n")
    with pytest.warns(UserWarning, match=r"CoDLModule: the gold labels of the labeled examples "
                                         r"break WordLabels\(\[a-z.* \(67 %\)"):
        assert main(["fit", f"--config={CONFIG.parent / 'tagger_ssl_codl.yaml'}",
                     f"--data.train_file={tmp_path / 't.conll'}", f"--data.unlabeled_file={tmp_path / 'u.txt'}",
                     f"--trainer.default_root_dir={tmp_path}", "--trainer.max_epochs=1",
                     "--model.init_args.supervised_epochs=1", "--trainer.enable_progress_bar=false",
                     "--trainer.enable_model_summary=false"]) == 0


def test_a_fit_into_an_earlier_run_dir_warns_once_and_a_resume_does_not(
    corpus: dict[str, Any],
) -> None:
    """Lightning warned twice ("Checkpoint directory ... exists and is not empty"), also when
    resuming from that very folder; now one line says what a new fit replaces."""
    import warnings

    root = corpus["root"]
    _fit(root, "REFIT", "--trainer.max_epochs=1")

    def fit_warnings(*extra: str) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _fit(root, "REFIT", *extra)
        return [str(w.message) for w in caught
                if "earlier run" in str(w.message) or "not empty" in str(w.message)]

    again = fit_warnings("--trainer.max_epochs=1")
    assert len(again) == 1 and "holds best.ckpt, last.ckpt of an earlier run; this fit " \
        "replaces them (to continue that run instead: --ckpt_path" in again[0], again
    last = root / "REFIT" / "checkpoints" / "last.ckpt"
    assert fit_warnings("--trainer.max_epochs=2", f"--ckpt_path={last}") == []
