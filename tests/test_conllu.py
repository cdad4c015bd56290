"""CoNLL-U / CoNLL-X files (Universal Dependencies) as own data: detection, the skipped lines,
the UPOS / XPOS columns, fit and predict through the README's commands."""

from __future__ import annotations

import random
import re
from pathlib import Path
from unittest import mock

import pytest

from structssl.cli import main as _main
from structssl.data import CoNLLDataModule
from structssl.data.formats.conll import looks_conllu
from structssl.data.tagging import TaggingFormat
from structssl.predict import Tagger

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "tagger.yaml"

_HEAD = "# newdoc id = d1\n# sent_id = s1\n# text = Del perro ladra.\n"
# a multiword token (1-2) whose words follow, and an empty node (3.1): neither is a word
_SENTENCE = (
    "1-2\tDel\t_\t_\t_\t_\t_\t_\t_\t_\n"
    "1\tDe\tde\tADP\tSPREP\t_\t3\tcase\t_\t_\n"
    "2\tel\tel\tDET\tDA\t_\t3\tdet\t_\t_\n"
    "3\tperro\tperro\tNOUN\tNC\t_\t4\tnsubj\t_\t_\n"
    "3.1\tcome\t_\t_\t_\t_\t_\t_\t_\t_\n"
    "4\tladra\tladrar\tVERB\tVMI\t_\t0\troot\t_\tSpaceAfter=No\n"
    "5\t.\t.\tPUNCT\tFp\t_\t4\tpunct\t_\t_\n"
)


def _write_conllu(path: Path, sentences: list[list[tuple[str, str, str]]]) -> None:
    """(form, upos, xpos) sentences, each with comments and one multiword token line."""
    out = []
    for k, sent in enumerate(sentences):
        out.append(f"# sent_id = {k}\n# text = {' '.join(w for w, _, _ in sent)}\n")
        for i, (form, upos, xpos) in enumerate(sent, start=1):
            if i == 2:
                out.append(f"{i}-{i + 1}\t{form}x\t_\t_\t_\t_\t_\t_\t_\t_\n")
            out.append(f"{i}\t{form}\t{form.lower()}\t{upos}\t{xpos}\t_\t0\tdep\t_\t_\n")
        out.append("\n")
    path.write_text("".join(out), encoding="utf-8")


_WORDS = {"DET": ["el", "la", "un"], "NOUN": ["perro", "gato", "casa", "pan"],
          "VERB": ["come", "ve", "tiene"], "ADJ": ["grande", "rojo"], "PUNCT": ["."]}


def _sentence(rng: random.Random) -> list[tuple[str, str, str]]:
    pattern = rng.choice([["DET", "NOUN", "VERB", "DET", "NOUN"], ["DET", "NOUN", "ADJ", "VERB"]])
    return [(rng.choice(_WORDS[t]), t, t[:2].lower()) for t in pattern] + [(".", "PUNCT", "fp")]


def main(args: list[str]) -> int:
    with mock.patch("sys.argv", ["structssl"]):
        return _main(args)


def test_looks_conllu(tmp_path: Path) -> None:
    (tmp_path / "a.conllu").write_text(_HEAD + _SENTENCE + "\n")
    (tmp_path / "b.conllx").write_text(_SENTENCE.split("\n", 1)[1])  # CoNLL-X: no comments
    # a CoNLL NER file whose first token is '#' is not CoNLL-U
    (tmp_path / "c.conll").write_text("# O\nhashtag O\n\n")
    (tmp_path / "d.conll").write_text(" ".join(["1"] + ["x"] * 9) + "\n\n")  # 10 columns, spaces
    assert looks_conllu(tmp_path / "a.conllu") and looks_conllu(tmp_path / "b.conllx")
    assert not looks_conllu(tmp_path / "c.conll") and not looks_conllu(tmp_path / "d.conll")


def test_read_skips_comments_multiword_tokens_and_empty_nodes(tmp_path: Path) -> None:
    path = tmp_path / "t.conllu"
    path.write_text(_HEAD + _SENTENCE + "\n" + _SENTENCE + "\n")
    fmt = TaggingFormat()
    sentences = fmt.read_labeled(path)
    assert fmt.layout == "conllu"
    assert [s.tokens for s in sentences] == [("De", "el", "perro", "ladra", ".")] * 2
    assert sentences[0].labels == ("ADP", "DET", "NOUN", "VERB", "PUNCT")
    assert [s.line for s in sentences] == [5, 13]  # the first word line, after the comments
    xpos = TaggingFormat(tag_column=4).read_labeled(path)
    assert xpos[0].labels == ("SPREP", "DA", "NC", "VMI", "Fp")


def test_conllu_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "t.conllu"
    path.write_text(_HEAD + _SENTENCE.replace("2\tel\tel\tDET", "2\tel el\tDET") + "\n")
    with pytest.raises(ValueError, match=r"t\.conllu:6: expected 10 columns separated by '\\t'; "
                                         r"got 9"):
        TaggingFormat().read_labeled(path)
    # forced to plain columns, the comment line is not silently read as a token
    (tmp_path / "u.conllu").write_text(_HEAD + _SENTENCE + "\n")
    with pytest.raises(ValueError, match=r"u\.conllu:2: expected 5 columns"):
        TaggingFormat(layout="columns").read_labeled(tmp_path / "u.conllu")
    # a tag error after a skipped empty-node line names the tag's own line (9, not 8)
    tagged = _SENTENCE
    for upos in ("ADP", "DET", "NOUN"):
        tagged = tagged.replace(f"\t{upos}\t", "\tO\t")
    (tmp_path / "v.conllu").write_text(_HEAD + tagged + "\n")
    with pytest.raises(ValueError, match=r"v\.conllu:9: .*'VERB'"):
        TaggingFormat(tag_scheme="bio").read_labeled(tmp_path / "v.conllu")
    # a tagged file of a CoNLL-U model in another layout is named as such
    (tmp_path / "w.conll").write_text("El DET\nperro NOUN\n\n")
    fmt = TaggingFormat()
    fmt.read_labeled(tmp_path / "u.conllu")
    with pytest.raises(ValueError, match=r"w\.conll:1: expected a CoNLL-U file like the training "
                                         r"file \(ten tab-separated columns, a word index first\); "
                                         r"got 'El DET'"):
        fmt.read_labeled(tmp_path / "w.conll")
    with pytest.raises(ValueError, match=r"layout must be one of \['auto', 'columns', 'conllu'\]; "
                                         r"got 'conll-u'"):
        TaggingFormat(layout="conll-u")


def test_a_file_of_another_format_is_named(tmp_path: Path) -> None:
    """A CoNLL-U dev file beside a plain-columns training file, and an ARFF file given to a
    tagger, stop on a column count that says which format the file is."""
    (tmp_path / "train.conll").write_text("El DET\nperro NOUN\n\n")
    (tmp_path / "dev.conllu").write_text(_HEAD + _SENTENCE + "\n")
    fmt = TaggingFormat(layout="columns")
    fmt.read_labeled(tmp_path / "train.conll")
    with pytest.raises(ValueError, match=r"dev\.conllu:1: expected the training file.s 2 columns; got 5 \(this is "
                                         r"CoNLL-U: ten tab-separated columns, a word index first; "
                                         r"the other files are plain columns"):
        fmt.read_labeled(tmp_path / "dev.conllu")
    arff = tmp_path / "x.arff"
    arff.write_text("@relation r\n@attribute a numeric\n@attribute b {0,1}\n@data\n1,0\n")
    with pytest.raises(ValueError, match=r"x\.arff:\d: expected .* \(this is an ARFF file: "
                                         r"multi-label data is read by structssl\.data\.ArffDataModule"):
        TaggingFormat().read_labeled(arff)


def test_fit_and_predict_on_conllu_files(tmp_path: Path) -> None:
    """The README's commands on UD files: the layout is detected and saved with the model,
    and predict takes the CoNLL-U dev file (scored against its UPOS) or the token alone."""
    rng = random.Random(0)
    _write_conllu(tmp_path / "train.conllu", [_sentence(rng) for _ in range(40)])
    dev = [_sentence(rng) for _ in range(10)]
    _write_conllu(tmp_path / "dev.conllu", dev)
    (tmp_path / "new.txt").write_text("".join(
        "".join(f"{w}\n" for w, _, _ in s) + "\n" for s in dev), encoding="utf-8")
    main([
        "fit", f"--config={CONFIG}", f"--data.train_file={tmp_path / 'train.conllu'}",
        f"--data.dev_file={tmp_path / 'dev.conllu'}", f"--trainer.default_root_dir={tmp_path / 'run'}",
        "--trainer.max_epochs=2", "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
    ])
    tagger = Tagger.load(tmp_path / "run")
    assert tagger.format.layout == "conllu" and tagger.tags == ("ADJ", "DET", "NOUN", "PUNCT", "VERB")
    main(["predict", "--model", str(tmp_path / "run"), "--input", str(tmp_path / "new.txt"),
          "--output", str(tmp_path / "new.txt.out")])
    lines = (tmp_path / "new.txt.out").read_text(encoding="utf-8").split("\n\n")
    got = [[row.split("\t") for row in block.split("\n") if row] for block in lines if block]
    assert [[w for w, _ in s] for s in got] == [[w for w, _, _ in s] for s in dev]
    assert [[t for _, t in s] for s in got] == [[t for _, t, _ in s] for s in dev]
    # a CoNLL-U input comes back as CoNLL-U, line for line, UPOS predicted (here the gold one)
    main(["predict", "--model", str(tmp_path / "run"), "--input", str(tmp_path / "dev.conllu"),
          "--output", str(tmp_path / "dev.out"), "--confidence", "true", "--kbest", "2"])
    source = (tmp_path / "dev.conllu").read_text(encoding="utf-8").splitlines()
    out = (tmp_path / "dev.out").read_text(encoding="utf-8").splitlines()
    assert len(out) == len(source)
    for a, b in zip(source, out):
        if not a or a.startswith("#") or "-" in a.split("\t")[0] or "." in a.split("\t")[0]:
            assert a == b  # comments, blank lines, multiword ranges, empty nodes as they were
            continue
        x, y = a.split("\t"), b.split("\t")
        assert y[:9] == x[:9]  # the gold UPOS, predicted right
        assert re.fullmatch(r"Confidence=\d\.\d{4}\|KBest=[A-Z_]+", y[9]), y[9]


def test_data_module_takes_the_layout(tmp_path: Path) -> None:
    rng = random.Random(1)
    _write_conllu(tmp_path / "train.conllu", [_sentence(rng) for _ in range(5)])
    dm = CoNLLDataModule(train_file=str(tmp_path / "train.conllu"), layout="conllu",
                         tag_column=4)
    dm.setup()
    assert dm.tags == ("ad", "de", "fp", "no", "ve")
    assert dm.saved_format()["layout"] == "conllu"


def test_a_conllu_file_with_blank_tags_is_tagged_not_refused(tmp_path: Path) -> None:
    """UPOS '_' (not annotated) is the usual file to tag: it was refused as "no tags of the
    model"; partly '_' is tagged, not scored (user test round 7)."""
    rng = random.Random(2)
    _write_conllu(tmp_path / "train.conllu", [_sentence(rng) for _ in range(30)])
    dev = [_sentence(rng) for _ in range(4)]
    _write_conllu(tmp_path / "dev.conllu", dev)
    main(["fit", f"--config={CONFIG}", f"--data.train_file={tmp_path / 'train.conllu'}",
          f"--trainer.default_root_dir={tmp_path / 'run'}", "--trainer.max_epochs=1",
          "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"])
    lines = (tmp_path / "dev.conllu").read_text(encoding="utf-8").splitlines()

    def blanked(keep: int) -> list[str]:
        out, n = [], 0
        for line in lines:
            cols = line.split("\t")
            if len(cols) == 10 and cols[0].isdigit():
                n += 1
                if n > keep:
                    cols[3] = "_"
            out.append("\t".join(cols))
        return out

    tagger = Tagger.load(tmp_path / "run")
    for name, keep, expected in (("blank", 0, {}), ("part", 5, {"not_scored": "some words"})):
        path = tmp_path / f"{name}.conllu"
        path.write_text("\n".join(blanked(keep)) + "\n", encoding="utf-8")
        summary = tagger.tag_file(path, tmp_path / f"{name}.out")
        assert "token_accuracy" not in summary
        assert all(str(summary.get(k, "")).startswith(v) for k, v in expected.items()), summary
        out = (tmp_path / f"{name}.out").read_text(encoding="utf-8").splitlines()
        assert len(out) == len(lines) and all(
            c.split("\t")[3] != "_" for c in out if len(c.split("\t")) == 10 and c.split("\t")[0].isdigit())
