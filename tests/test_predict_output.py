"""What ``structssl predict`` writes (found by a user test): ``-DOCSTART-`` lines come back at
their place, inputs without the training layout's tag column are tagged without a "not scored"
note, and ``--output -`` is standard output.

Every test writes its own small files; nothing here needs ``../shared``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

pytest.importorskip("pytorch_lightning")

from structssl.cli import main as _main  # noqa: E402
from structssl.data.tagging import TagColumnError  # noqa: E402
from structssl.predict import Tagger  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:.*isinstance\(treespec, LeafSpec\)` is deprecated.*:FutureWarning"
    ),
]

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "tagger.yaml"
DOCSTART = "-DOCSTART- -X- -X- O"

# token, POS, chunk, tag: the CoNLL-2003 layout, on a toy task (drugs and doses)
_DRUGS = ["aspirina", "ibuprofeno", "paracetamol", "morfina"]
_DOSES = ["5mg", "10mg", "20mg"]
_FILLER = ["tomar", "cada", "dia", "el", "paciente", "con", "y", "no"]

Row = tuple[str, str, str, str]


def _sentence(rng: random.Random) -> list[Row]:
    out: list[Row] = []
    for _ in range(rng.randint(3, 8)):
        r = rng.random()
        if r < 0.2:
            out.append((rng.choice(_DRUGS).capitalize(), "NP", "B-NP", "B-DRUG"))
        elif r < 0.3:
            out.append((rng.choice(_DOSES), "CD", "I-NP", "B-DOSE"))
        else:
            out.append((rng.choice(_FILLER), "XX", "O", "O"))
    return out


def _text(documents: list[list[list[Row]]], columns: int = 4) -> str:
    """CoNLL-2003 style: each document a ``-DOCSTART-`` line and a blank line, then its
    sentences; ``columns`` 4 (the training layout), 3 (without the tag) or 1 (the token)."""
    lines = []
    for doc in documents:
        lines += [" ".join(DOCSTART.split()[:columns]), ""]
        for sent in doc:
            lines += [" ".join(row[:columns]) for row in sent] + [""]
    return "\n".join(lines) + "\n"


def main(args: list[str]) -> int:
    """``structssl ARGS`` (pytest's own argv must not reach the CLI)."""
    with mock.patch("sys.argv", ["structssl"]):
        return _main(args)


def _fit(root: Path, run: str, *extra: str) -> Path:
    out = root / run
    assert main([
        "fit", f"--config={CONFIG}", f"--data.train_file={root / 'TRAIN.conll'}",
        f"--data.dev_file={root / 'DEV.conll'}", f"--trainer.default_root_dir={out}",
        "--trainer.max_epochs=2", "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false", *extra,
    ]) in (0, None)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two models trained on 4-column files with ``-DOCSTART-`` lines, one of them with
    ``--data.feature_columns [1,2]``, and a file to tag in three layouts."""
    root = tmp_path_factory.mktemp("predict_output")
    rng = random.Random(0)
    train = [[_sentence(rng) for _ in range(15)] for _ in range(4)]
    dev = [[_sentence(rng) for _ in range(5)] for _ in range(2)]
    new = [[_sentence(rng) for _ in range(4)], [_sentence(rng) for _ in range(3)]]
    (root / "TRAIN.conll").write_text(_text(train), encoding="utf-8")
    (root / "DEV.conll").write_text(_text(dev), encoding="utf-8")
    (root / "NEW.conll").write_text(_text(new), encoding="utf-8")
    (root / "NEW_notag.conll").write_text(_text(new, columns=3), encoding="utf-8")
    (root / "NEW.txt").write_text(_text(new, columns=1), encoding="utf-8")
    return {"root": root, "new": new, "run": _fit(root, "RUN_DIR"),
            "features": _fit(root, "RUN_FEATURES", "--data.feature_columns=[1,2]")}


def _predict(corpus: dict[str, Any], name: str, output: str, *extra: str,
             model: str = "run") -> int:
    return main(["predict", "--model", str(corpus[model]), "--input", str(corpus["root"] / name),
                 "--output", output, *extra])


# ------------------------------------------------------------------------------ A: -DOCSTART-
@pytest.mark.parametrize("model, name", [("run", "NEW.conll"), ("run", "NEW_notag.conll"),
                                         ("run", "NEW.txt"), ("features", "NEW.conll"),
                                         ("features", "NEW_notag.conll")])
def test_docstart_lines_come_back_at_their_place(
    corpus: dict[str, Any], model: str, name: str
) -> None:
    """They used to vanish (a 623-line CoNLL-2003 file gave 619 lines): now the output has the
    input's lines, each token's at its line, ``-DOCSTART-<TAB>O`` at each -DOCSTART- line."""
    out = corpus["root"] / f"{model}_{name}.out"
    assert _predict(corpus, name, str(out), model=model) == 0
    given = (corpus["root"] / name).read_text(encoding="utf-8").split("\n")
    got = out.read_text(encoding="utf-8").split("\n")
    assert len(got) == len(given)
    for a, b in zip(given, got):
        if a.startswith("-DOCSTART-"):
            assert b == "-DOCSTART-\tO"
        else:
            assert b.split("\t")[0] == a.split(" ")[0]  # the token, or both blank
            assert (b == "") == (a == "") and (not b or len(b.split("\t")) == 2)


def test_docstart_columns_with_confidence_and_kbest(corpus: dict[str, Any]) -> None:
    """A -DOCSTART- line has every column of a token line; its confidence and k-best columns
    are ``-`` (it is no prediction), not a probability."""
    out = corpus["root"] / "conf.out"
    assert _predict(corpus, "NEW.txt", str(out), "--confidence=true", "--kbest=3") == 0
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").split("\n") if line]
    assert all(len(r) == 5 for r in rows)
    docstarts = [r for r in rows if r[0] == "-DOCSTART-"]
    assert docstarts == [["-DOCSTART-", "O", "-", "-", "-"]] * 2
    assert all(0.0 <= float(r[2]) <= 1.0 for r in rows if r[0] != "-DOCSTART-")


def test_docstart_lines_anywhere_in_the_file(corpus: dict[str, Any], tmp_path: Path) -> None:
    """Through the Python API: two -DOCSTART- lines in a row, one without a blank line after
    it, one inside a sentence and one at the end all come back in the input's order (a
    missing blank line after one is added); the predictions are those of the bare sentences."""
    tagger = Tagger.load(corpus["run"])
    (tmp_path / "in.txt").write_text(
        "-DOCSTART-\n\n-DOCSTART-\n\nTomar\naspirina\n\n-DOCSTART-\ncada\ndia\n-DOCSTART-\n"
        "con\n5mg\n\n-DOCSTART-\n\n", encoding="utf-8")
    summary = tagger.tag_file(tmp_path / "in.txt", tmp_path / "out.conll", confidence=True)
    assert summary == {"sentences": 3, "tokens": 6}
    got = (tmp_path / "out.conll").read_text(encoding="utf-8").split("\n")
    tokens = [line.split("\t")[0] for line in got]
    assert tokens == ["-DOCSTART-", "", "-DOCSTART-", "", "Tomar", "aspirina", "", "-DOCSTART-",
                      "", "cada", "dia", "", "-DOCSTART-", "", "con", "5mg", "", "-DOCSTART-",
                      "", ""]
    assert all(line == "-DOCSTART-\tO\t-" for line in got if line.startswith("-DOCSTART-"))
    tags = [line.split("\t")[1] for line in got if line and not line.startswith("-DOCSTART-")]
    assert tags == [t for s in tagger.tag([["Tomar", "aspirina"], ["cada", "dia"], ["con", "5mg"]])
                    for t in s]


# ------------------------------------------------------------------------------ B: no tag column
def test_the_training_layout_without_its_tag_column_is_tagged_without_a_note(
    corpus: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Trained with feature_columns [1, 2] on 4 columns, the 3 columns without the tag are a
    documented input: tagged, no "not scored ... feature_columns=2 is the label column" note;
    the training layout is still scored, and one whose tag column holds words refused."""
    capsys.readouterr()
    assert _predict(corpus, "NEW_notag.conll", str(corpus["root"] / "notag.out"),
                    model="features") == 0
    printed = capsys.readouterr().out
    assert "not scored" not in printed and "against the input's tags" not in printed, printed
    tagger = Tagger.load(corpus["features"])
    summary = tagger.tag_file(corpus["root"] / "NEW_notag.conll", corpus["root"] / "n.out")
    assert set(summary) == {"sentences", "tokens"}
    assert (corpus["root"] / "n.out").read_text() == (corpus["root"] / "notag.out").read_text()
    scored = tagger.tag_file(corpus["root"] / "NEW.conll", corpus["root"] / "s.out")
    assert "span_f1" in scored and "not_scored" not in scored
    assert (corpus["root"] / "s.out").read_text() == (corpus["root"] / "n.out").read_text()
    words = corpus["root"] / "words.conll"
    words.write_text("Tomar XX O aspirina\ncada XX O dia\ncon XX O paciente\n", encoding="utf-8")
    with pytest.raises(TagColumnError, match="words.conll:1: read in the training file's layout"):
        tagger.tag_file(words, corpus["root"] / "w.out")


def _write_conllu(path: Path, sentences: list[list[tuple[str, str]]]) -> None:
    out = []
    for k, sent in enumerate(sentences):
        out.append(f"# sent_id = {k}\n")
        for i, (form, upos) in enumerate(sent, start=1):
            out.append(f"{i}\t{form}\t{form.lower()}\t{upos}\t_\t_\t0\tdep\t_\t_\n")
        out.append("\n")
    path.write_text("".join(out), encoding="utf-8")


def test_conllu_model_tags_the_token_alone_without_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CoNLL-U model given the token alone per line (documented) used to print "not scored
    against the input's tags: ... expected a CoNLL-U file ... got 'el'"; a CoNLL-U file is
    still scored against its UPOS."""
    rng = random.Random(1)
    words = {"DET": ["el", "la"], "NOUN": ["perro", "gato", "casa"], "VERB": ["come", "ve"]}

    def sentence() -> list[tuple[str, str]]:
        return [(rng.choice(words[t]), t) for t in ("DET", "NOUN", "VERB", "DET", "NOUN")]

    _write_conllu(tmp_path / "train.conllu", [sentence() for _ in range(20)])
    dev = [sentence() for _ in range(4)]
    _write_conllu(tmp_path / "dev.conllu", dev)
    (tmp_path / "new.txt").write_text("".join("".join(f"{w}\n" for w, _ in s) + "\n" for s in dev),
                                      encoding="utf-8")
    main([
        "fit", f"--config={CONFIG}", f"--data.train_file={tmp_path / 'train.conllu'}",
        f"--trainer.default_root_dir={tmp_path / 'run'}", "--trainer.max_epochs=1",
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
    ])
    capsys.readouterr()
    assert main(["predict", "--model", str(tmp_path / "run"), "--input", str(tmp_path / "new.txt"),
                 "--output", str(tmp_path / "new.out")]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("tagged 4 sentences (20 tokens)") and "not scored" not in printed, printed
    assert main(["predict", "--model", str(tmp_path / "run"), "--input", str(tmp_path / "dev.conllu"),
                 "--output", str(tmp_path / "dev.out")]) == 0
    assert "against the input's tags: token_accuracy" in capsys.readouterr().out
    # the same tags: one token<TAB>tag line per word, and the CoNLL-U file's UPOS column
    tagged = [line.split("\t") for line in (tmp_path / "new.out").read_text().splitlines() if line]
    conllu = [line.split("\t") for line in (tmp_path / "dev.out").read_text().splitlines()
              if line and not line.startswith("#") and "-" not in line.split("\t")[0]]
    assert [(w, t) for w, t in tagged] == [(c[1], c[3]) for c in conllu]


# ------------------------------------------------------------------------------ C: --output -
def test_output_dash_is_standard_output(
    corpus: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--output -`` used to create a file named ``-``: the predictions now go to standard
    output, alone, and the summary line to standard error."""
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "file.out"
    assert _predict(corpus, "NEW.conll", str(file), "--kbest=2") == 0
    to_file = capsys.readouterr()
    assert _predict(corpus, "NEW.conll", "-", "--kbest=2") == 0
    printed = capsys.readouterr()
    assert not (tmp_path / "-").exists()
    assert printed.out == file.read_text(encoding="utf-8")
    assert printed.err.strip() == to_file.out.strip().replace(str(file), "standard output")
    assert "span_f1" in printed.err
    # --output must still differ from --input
    same = corpus["root"] / "NEW.conll"
    assert main(["predict", "--model", str(corpus["run"]), "--input", str(same),
                 "--output", str(same)]) == 2
    assert "--output must differ from --input" in capsys.readouterr().err


# ------------------------------------------------------------------------------ user test round 5
def test_token_accuracy_is_on_the_files_own_tags() -> None:
    """BILOU gold ``B-G L-G`` against the written ``U-G U-G``: one of three tokens right (as
    conlleval counts it), where their BIO forms (``B-G I-G`` / ``B-G B-G``) agree on two; the
    spans differ, so span F1 is 0."""
    from types import SimpleNamespace

    from structssl.data.records import Sequence as Record
    from structssl.predict import TaggedSentence

    tagger = SimpleNamespace(tags=("O", "B-G", "I-G"), format=SimpleNamespace(scheme="bilou", task="bio"),
                             batch_size=256)
    gold = [Record(tokens=("a", "b", "c"), labels=("B-G", "L-G", "O"))]
    pred = [TaggedSentence(("a", "b", "c"), ("U-G", "U-G", "O"))]
    score = Tagger._score(tagger, pred, gold)  # type: ignore[arg-type]
    assert score["token_accuracy"] == pytest.approx(1 / 3)
    assert score["span_f1"] == 0.0
    right = [TaggedSentence(("a", "b", "c"), ("B-G", "L-G", "O"))]
    assert Tagger._score(tagger, right, gold) == {"token_accuracy": 1.0, "span_f1": 1.0}  # type: ignore[arg-type]


def test_a_conllu_file_for_a_model_of_columns_is_named(
    corpus: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    conllu = corpus["root"] / "ud.conllu"
    conllu.write_text("# sent_id = 1\n# text = Tomar aspirina\n"
                      "1\tTomar\ttomar\tVERB\t_\t_\t0\troot\t_\t_\n"
                      "2\taspirina\taspirina\tNOUN\t_\t_\t1\tobj\t_\t_\n\n", encoding="utf-8")
    assert _predict(corpus, "ud.conllu", str(corpus["root"] / "ud.pred")) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"structssl predict: {conllu}: a CoNLL-U file (ten tab-separated columns, '#' "
                   "comment lines); the model was trained on files of 4 columns: give the input in "
                   "that layout, or the token alone per line")


def test_a_missing_required_option_is_named_as_an_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["predict", "--model", "RUN_DIR", "--input", "NEW.txt"])
    assert stop.value.code == 2
    assert "structssl predict: error: missing required option(s): --output" in capsys.readouterr().err


def test_binary_and_compressed_files(tmp_path: Path) -> None:
    """A file of NUL bytes is named as binary (it was read as one column); gzip data is read
    whatever the file's name (it was "expected utf-8 text")."""
    import gzip

    from structssl.data.paths import DecodingError, iter_lines

    zeros = tmp_path / "zeros.bin"
    zeros.write_bytes(b"\x00" * 3000)
    with pytest.raises(DecodingError, match=f"{zeros}:1: expected utf-8 text; the line holds NUL bytes"):
        list(iter_lines(zeros))
    packed = tmp_path / "train.dat"
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.write("El O\nGrupo B-ORG\n")
    assert list(iter_lines(packed)) == [(1, "El O"), (2, "Grupo B-ORG")]


# ------------------------------------------------------------------------------ line for line
def test_blank_line_runs_and_comments_come_back_line_for_line(
    corpus: dict[str, Any], tmp_path: Path
) -> None:
    """Runs of blank lines used to collapse into one (1,960 input lines gave 1,860); comment
    lines (``comment_prefix``) come back as they were, inside a sentence too, and a sentence
    without a blank line after it at the end of the file gets one."""
    tagger = Tagger.load(corpus["run"])
    text = ("# doc 1\n\n\nTomar\naspirina\n\n\n\n# a comment\ncada\n# inside\ndia\n\n"
            "-DOCSTART-\n\n\ncon\n5mg")
    (tmp_path / "in.txt").write_text(text, encoding="utf-8")
    summary = tagger.tag_file(tmp_path / "in.txt", tmp_path / "out.txt", comments=True)
    assert summary == {"sentences": 3, "tokens": 6}
    given = text.split("\n")
    got = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    assert got[: len(given)] == [
        line if not line or line.startswith("#") else got[i] for i, line in enumerate(given)
    ]
    assert got[len(given):] == ["", ""]  # the last sentence's blank line, then the file's end
    assert [line.split("\t")[0] for line in got if line and not line.startswith("#")] == [
        "Tomar", "aspirina", "cada", "dia", "-DOCSTART-", "con", "5mg"]
    tags = [line.split("\t")[1] for line in got if "\t" in line and not line.startswith("-DOCSTART-")]
    assert tags == [t for s in tagger.tag([["Tomar", "aspirina"], ["cada", "dia"], ["con", "5mg"]])
                    for t in s]


def test_a_comment_line_without_comment_prefix_gets_a_hint(
    corpus: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to be taken as the file's first token line (3 columns: a tagged file), and the
    error named line 2, a correct line, without saying why."""
    path = corpus["root"] / "commented.txt"
    path.write_text("# doc 1\nTomar\naspirina\n\n", encoding="utf-8")
    assert _predict(corpus, "commented.txt", str(corpus["root"] / "c.out")) == 2
    err = capsys.readouterr().err
    assert "commented.txt:2:" in err and "line 1, '# doc 1', set the column count" in err, err
    assert "--comments true to predict" in err
    assert _predict(corpus, "commented.txt", str(corpus["root"] / "c.out"), "--comments", "true") == 0
    assert (corpus["root"] / "c.out").read_text(encoding="utf-8").split("\n")[0] == "# doc 1"


def test_a_token_with_a_non_breaking_space_is_tagged(corpus: dict[str, Any], tmp_path: Path) -> None:
    """Python's ``str.split()`` splits on U+00A0, so such a token was two columns and the file
    was refused; blanks are ASCII now."""
    tagger = Tagger.load(corpus["run"])
    (tmp_path / "nbsp.txt").write_text("Tomar\nSan\u00a0José\n\n", encoding="utf-8")
    assert tagger.tag_file(tmp_path / "nbsp.txt", tmp_path / "o.txt") == {"sentences": 1, "tokens": 2}
    assert (tmp_path / "o.txt").read_text(encoding="utf-8").split("\n")[1].split("\t")[0] == "San\u00a0José"


def test_fit_with_comments_from_the_command_line(corpus: dict[str, Any], tmp_path: Path) -> None:
    """``--data.comments true`` (not a prefix option: jsonargparse reads a bare ``'#'`` as a
    YAML comment, None): the comment lines are no tokens or tags, and the model skips them when
    it predicts; ``comments=False`` switches that off for one file."""
    train = "# newdoc\n" + (corpus["root"] / "TRAIN.conll").read_text(encoding="utf-8").replace(
        "\n\n", "\n\n# sent\n", 3)
    (tmp_path / "TRAIN.conll").write_text(train, encoding="utf-8")
    assert main([
        "fit", f"--config={CONFIG}", f"--data.train_file={tmp_path / 'TRAIN.conll'}",
        "--data.comments", "true", f"--trainer.default_root_dir={tmp_path / 'run'}",
        "--trainer.max_epochs=1", "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
    ]) in (0, None)
    tagger = Tagger.load(tmp_path / "run")
    assert tagger.format.comment_prefix == "#"
    assert not {"newdoc", "sent"} & set(tagger.tags)
    (tmp_path / "new.txt").write_text("# doc\nTomar\naspirina\n\n", encoding="utf-8")
    assert tagger.tag_file(tmp_path / "new.txt", tmp_path / "o.txt") == {"sentences": 1, "tokens": 2}
    (tmp_path / "hash.txt").write_text("#\nTomar\naspirina\n\n", encoding="utf-8")
    assert tagger.tag_file(tmp_path / "hash.txt", tmp_path / "o.txt")["tokens"] == 2
    with pytest.warns(UserWarning, match="begin with a line whose first column is '#'"):
        assert tagger.tag_file(tmp_path / "hash.txt", tmp_path / "o.txt", comments=False)["tokens"] == 3
