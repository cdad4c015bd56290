"""Bad-input catalogue (issue 19): every case must fail at the public entry point with the
expected error type and a message naming the argument (or file and line) with the expected
and the actual values. Fixtures are written here into ``tmp_path``; nothing reads the real
data. After the catalogue: oracle tests of the infinity policy (``-inf`` masks, ``-inf``
padding, extreme scales) against brute-force enumeration in float64.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from oracle import check_structure
from structssl.constraints import AllowedFirst, MustAppear, WordLabels, runs_per_label
from structssl.data.formats.arff import read_arff
from structssl.data.formats.citations import read_citations
from structssl.data.formats.ocr import read_ocr
from structssl.data.formats.treebank import parse_trees
from structssl.losses import CRFNLLLoss, StructuredHingeLoss
from structssl.regression import cli as regression_cli
from structssl.regression import scaled_rmse
from structssl.regression.kernels import eta_heuristic
from structssl.structures import CKY, CKYPotentials, GrammarCKY, LinearChain, MultiClass
from structssl.structures.multilabel import MultiLabelPotentials, PairwiseMultiLabel

F64 = torch.float64
INF = float("inf")
NAN = float("nan")


@dataclass
class Case:
    id: str
    run: Callable[[Path], Any]
    error: type
    fragments: tuple[str, ...]
    marks: tuple = field(default=())


CASES: list[Case] = []


def case(id: str, error: type, *fragments: str, marks: tuple = ()) -> Callable:
    def register(fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
        CASES.append(Case(id, fn, error, fragments, marks))
        return fn

    return register


def _with(x: torch.Tensor, index: tuple, value: float) -> torch.Tensor:
    x = x.clone()
    x[index] = value
    return x


# ---------------------------------------------------------------------- MultiClass
MC = MultiClass(3)


def _mc(b: int = 2) -> torch.Tensor:
    return torch.randn(b, 3, dtype=F64, generator=torch.Generator().manual_seed(0))


case("multiclass/+inf", ValueError, "potentials contain +inf", "example 1", "potentials[1, 2]")(
    lambda p: MC.log_partition(_with(_mc(), (1, 2), INF))
)
case("multiclass/nan", ValueError, "potentials contain NaN", "example 0", "finite or -inf")(
    lambda p: MC.marginals(_with(_mc(), (0, 1), NAN))
)
for _op in ("log_partition", "marginals", "argmax", "max"):
    case(f"multiclass/no-valid-structure/{_op}", ValueError, "example 1 has no valid structure", "-inf")(
        lambda p, _op=_op: getattr(MC, _op)(_with(_mc(), (1, slice(None)), -INF))
    )
case("multiclass/no-valid-structure/kbest", ValueError, "example 0 has no valid structure")(
    lambda p: MC.kbest(_with(_mc(), (0, slice(None)), -INF), 2)
)
case("multiclass/labels-out-of-range", ValueError, "labels must be in [0, C) = [0, 3)", "got values in [0, 5]")(
    lambda p: MC.score(_mc(), torch.tensor([0, 5]))
)
case("multiclass/meta-potentials", ValueError, "potentials", "meta tensor", "(2, 3)")(
    lambda p: MC.log_partition(torch.empty(2, 3, device="meta"))
)
case("multiclass/integer-potentials", ValueError, "potentials must be floating point", "torch.int64")(
    lambda p: MC.log_partition(torch.zeros(2, 3, dtype=torch.long))
)
case("multiclass/wrong-shape", ValueError, "shape (B, C) with C = num_labels = 3", "(2, 4)")(
    lambda p: MC.log_partition(torch.zeros(2, 4))
)
case("multiclass/lengths-not-one", ValueError, "lengths of a MultiClass structure must all be 1")(
    lambda p: MC.log_partition(_mc(), torch.tensor([1, 2]))
)
case("multiclass/k-zero", ValueError, "k must be an int >= 1", "got 0")(lambda p: MC.kbest(_mc(), 0))
case("multiclass/mask-not-bool", ValueError, "allowed[0] must be a bool tensor", "torch.float32")(
    lambda p: MC.mask_potentials(_mc(), torch.ones(2, 3))
)
case("multiclass/mask-not-broadcastable", ValueError, "allowed[0] must be broadcastable", "(2, 3)", "(4,)")(
    lambda p: MC.mask_potentials(_mc(), torch.ones(4, dtype=torch.bool))
)
case("multiclass/unknown-cost", ValueError, "cost must be one of", "'hinge'")(
    lambda p: MC.cost_augmented_argmax(_mc(), torch.tensor([0, 1]), cost="hinge")
)
case("multiclass/meta-lengths", ValueError, "lengths must hold data", "meta tensor")(
    lambda p: MC.log_partition(_mc(), torch.ones(2, dtype=torch.long, device="meta"))
)

# ---------------------------------------------------------------------- CKY
CK = CKY(2)


def _cky(b: int = 2, n: int = 3, nt: int = 2) -> CKYPotentials:
    g = torch.Generator().manual_seed(1)
    return CKYPotentials(
        torch.randn(b, n, nt, generator=g, dtype=F64),
        torch.randn(b, nt, nt, nt, generator=g, dtype=F64),
        torch.randn(b, nt, generator=g, dtype=F64),
        torch.randn(b, n, n, nt, generator=g, dtype=F64),
    )


def _cky_with(name: str, index: tuple, value: float) -> CKYPotentials:
    p = _cky()
    return p._replace(**{name: _with(getattr(p, name), index, value)})


case("cky/+inf-rules", ValueError, "potentials contain +inf", "potentials.rules", "example 1")(
    lambda p: CK.log_partition(_cky_with("rules", (1, 0, 1, 1), INF))
)
case("cky/nan-terms-valid-position", ValueError, "potentials contain NaN", "potentials.terms[0, 1, 0]")(
    lambda p: CK.marginals(_cky_with("terms", (0, 1, 0), NAN), torch.tensor([3, 1]))
)
case("cky/nan-roots", ValueError, "potentials contain NaN", "potentials.roots", "example 0")(
    lambda p: CK.argmax(_cky_with("roots", (0, 1), NAN))
)
for _op in ("log_partition", "marginals", "argmax", "max"):
    case(f"cky/no-valid-structure/{_op}", ValueError, "example 1 has no valid structure")(
        lambda p, _op=_op: getattr(CK, _op)(_cky_with("roots", (1, slice(None)), -INF))
    )
case("cky/no-valid-structure/kbest", ValueError, "example 0 has no valid structure")(
    lambda p: CK.kbest(_cky_with("terms", (0, 1, slice(None)), -INF), 3)
)
case("grammar-cky/no-valid-structure", ValueError, "example 1 has no valid structure")(
    lambda p: GrammarCKY(2).argmax(_cky_with("rules", (1,), -INF))
)
case("cky/lengths-out-of-range", ValueError, "lengths must be in [1, N] = [1, 3]", "got values in [1, 5]")(
    lambda p: CK.log_partition(_cky(), torch.tensor([1, 5]))
)
case("cky/lengths-float", ValueError, "lengths must have an integer dtype", "torch.float32")(
    lambda p: CK.log_partition(_cky(), torch.tensor([1.0, 2.0]))
)
case("cky/lengths-meta", ValueError, "lengths must hold data", "meta tensor")(
    lambda p: CK.argmax(_cky(), torch.ones(2, dtype=torch.long, device="meta"))
)
case("cky/spans-shape", ValueError, "potentials.spans must have shape (2, 3, 3, 2)", "(2, 3, 2, 2)")(
    lambda p: CK.log_partition(_cky()._replace(spans=torch.zeros(2, 3, 2, 2, dtype=F64)))
)
case("cky/rules-dtype", ValueError, "potentials.rules must have the dtype and device of terms", "torch.float32")(
    lambda p: CK.log_partition(_cky()._replace(rules=torch.zeros(2, 2, 2, 2)))
)
case("cky/labels-not-a-tree", ValueError, "labels must be a binary tree", "example 0, row 0")(
    lambda p: CK.score(_cky(), torch.tensor([[[0, 2, 0], [0, 0, 1], [2, 2, 1], [0, 0, 0], [0, 0, 0]]] * 2))
)
case("cky/bracketed-unknown-symbol", ValueError, "strings[0]", "unknown symbol 'X'", "position 1")(
    lambda p: CKY.from_bracketed(["(X (A a) (B b))"], ["A", "B"])
)

# ---------------------------------------------------------------------- PairwiseMultiLabel
ML = PairwiseMultiLabel(3)


def _ml(b: int = 2, k: int = 3) -> MultiLabelPotentials:
    g = torch.Generator().manual_seed(2)
    return MultiLabelPotentials(
        torch.randn(b, k, 2, generator=g, dtype=F64), torch.randn(b, k, k, 2, 2, generator=g, dtype=F64)
    )


case("multilabel/+inf-unary", ValueError, "potentials contain +inf", "potentials.unary[1, 2, 0]")(
    lambda p: ML.log_partition(_ml()._replace(unary=_with(_ml().unary, (1, 2, 0), INF)))
)
case("multilabel/nan-pairwise-part", ValueError, "potentials contain NaN", "potentials.pairwise[0, 0, 1, 1, 1]")(
    lambda p: ML.marginals(_ml()._replace(pairwise=_with(_ml().pairwise, (0, 0, 1, 1, 1), NAN)))
)
for _op in ("log_partition", "marginals", "argmax"):
    case(f"multilabel/no-valid-structure/{_op}", ValueError, "example 1 has no valid structure")(
        lambda p, _op=_op: getattr(ML, _op)(_ml()._replace(unary=_with(_ml().unary, (1, 0), -INF)))
    )
case("multilabel/no-valid-structure/kbest", ValueError, "example 0 has no valid structure")(
    lambda p: ML.kbest(_ml()._replace(unary=_with(_ml().unary, (0, 2), -INF)), 4)
)
case("multilabel/labels-not-binary", ValueError, "labels must be 0 or 1", "got values in [0, 2]")(
    lambda p: ML.score(_ml(), torch.tensor([[0, 2, 0], [0, 0, 1]]))
)
case("multilabel/lengths-not-k", ValueError, "lengths of a PairwiseMultiLabel structure must all be K = num_labels = 3")(
    lambda p: ML.log_partition(_ml(), torch.tensor([3, 2]))
)
case("multilabel/pairwise-shape", ValueError, "potentials.pairwise must have shape (B, K, K, 2, 2) = (2, 3, 3, 2, 2)")(
    lambda p: ML.log_partition(MultiLabelPotentials(_ml().unary, torch.zeros(2, 3, 3, 2, dtype=F64)))
)

# ---------------------------------------------------------------------- LinearChain (entry checks)
LC = LinearChain(3)


def _chain(b: int = 2, n: int = 4) -> torch.Tensor:
    return torch.randn(b, n, 3, 3, dtype=F64, generator=torch.Generator().manual_seed(3))


case("chain/+inf", ValueError, "potentials contain +inf", "example 1")(
    lambda p: LC.log_partition(_with(_chain(), (1, 2, 0, 0), INF))
)
case("chain/nan", ValueError, "potentials contain NaN", "example 0")(
    lambda p: LC.marginals(_with(_chain(), (0, 1, 1, 1), NAN))
)
case("chain/lengths-out-of-range", ValueError, "lengths must be in [1, N] = [1, 4]", "got values in [0, 2]")(
    lambda p: LC.log_partition(_chain(), torch.tensor([0, 2]))
)
case("chain/meta-potentials", ValueError, "meta tensor")(
    lambda p: LC.log_partition(torch.empty(2, 4, 3, 3, device="meta"))
)
case("chain/no-valid-structure", ValueError, "example 1 has no valid structure")(lambda p: LC.log_partition(_with(_chain(), (1, 2), -INF)))
case("chain/potentials-from-end-beyond-n", ValueError, "lengths")(lambda p: LC.potentials_from(torch.randn(1, 4, 3), torch.randn(3, 3), end=torch.randn(3), lengths=torch.tensor([9])))

# ---------------------------------------------------------------------- losses
case("loss/crf-target-out-of-range", ValueError, "target must be in [0, C) = [0, 3)", "[0, 7]")(
    lambda p: CRFNLLLoss()(MC, _mc(), torch.tensor([7, 0]))
)
case("loss/crf-+inf-potentials", ValueError, "potentials contain +inf", "example 0")(
    lambda p: CRFNLLLoss()(MC, _with(_mc(), (0, 0), INF), torch.tensor([1, 0]))
)
case("loss/crf-no-valid-structure", ValueError, "example 1 has no valid structure")(
    lambda p: CRFNLLLoss()(MC, _with(_mc(), (1, slice(None)), -INF), torch.tensor([1, 0]))
)
case("loss/hinge-target-shape", ValueError, "target must have shape (B,) = (2,)", "(3,)")(
    lambda p: StructuredHingeLoss()(MC, _mc(), torch.tensor([0, 1, 2]))
)
case("loss/hinge-cky-nan", ValueError, "potentials contain NaN", "potentials.spans")(
    lambda p: StructuredHingeLoss()(CK, _cky_with("spans", (1, 0, 2, 1), NAN), CK.argmax(_cky())[0])
)

# ---------------------------------------------------------------------- constraints
LABELS4 = ["A", "B", "C", "D"]
LAB_LEN = torch.tensor([3, 2])

case("constraints/counts-label-out-of-range", ValueError, "label ids in [0, 4)", "example 0, position 1 has 9")(
    lambda p: MustAppear("A").bind(LABELS4).counts(torch.tensor([[0, 9, 1], [1, 1, 0]]), LAB_LEN)
)
case("constraints/counts-negative-label", ValueError, "label ids in [0, 4)", "example 1, position 0 has -1")(
    lambda p: MustAppear("B").bind(LABELS4).violation(torch.tensor([[0, 1, 1], [-1, 1, 0]]), LAB_LEN)
)
case("constraints/runs-per-label-out-of-range", ValueError, "label ids in [0, 2)", "has 3")(
    lambda p: runs_per_label(torch.tensor([[0, 3, 1]]), torch.tensor([3]), 2)
)
case("constraints/bind-unknown-label", ValueError, "unknown label 'E'", "['A', 'B', 'C', 'D']")(
    lambda p: MustAppear("E").bind(LABELS4)
)
case("constraints/bind-index-out-of-range", ValueError, "label index 7 out of range [0, 4)")(
    lambda p: AllowedFirst([7]).bind(LABELS4)
)
case("constraints/negative-weight", ValueError, "weight must be a number >= 0", "-1.0")(
    lambda p: MustAppear("A", weight=-1.0)
)
case("constraints/lengths-beyond-n", ValueError, "lengths must lie in [0, N] = [0, 3]", "[4, 2]")(
    lambda p: MustAppear("A").bind(LABELS4).counts(torch.zeros(2, 3, dtype=torch.long), torch.tensor([4, 2]))
)
case("constraints/lengths-float", ValueError, "lengths must have an integer dtype", "torch.float32")(
    lambda p: MustAppear("A").bind(LABELS4).counts(torch.zeros(2, 3, dtype=torch.long), torch.tensor([3.0, 2.0]))
)
case("constraints/tokens-missing", ValueError, "tokens are required", "got None")(
    lambda p: WordLabels("A", words=["x"]).bind(LABELS4).counts(torch.zeros(2, 3, dtype=torch.long), LAB_LEN)
)


# ---------------------------------------------------------------------- readers
def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


_CIT_OK = "Smith\tauthor\tsmith|<s>|j|true|false|false|NNP\n"


def _citations(tmp: Path, second: str) -> Any:
    return read_citations(_write(tmp / "cit.txt", _CIT_OK + second + "\n"))


case("citations/token-whitespace", ValueError, "cit.txt:2", "token without surrounding whitespace", "' J.'")(
    lambda p: _citations(p, " J.\tauthor\tj|smith|.|true|false|false|NNP\n")
)
case("citations/feature-whitespace", ValueError, "cit.txt:2", "feature fields without whitespace", "'N NP'")(
    lambda p: _citations(p, "J.\tauthor\tj|smith|.|true|false|false|N NP\n")
)
case("citations/column-count", ValueError, "cit.txt:2", "expected 3 columns", "got 2")(
    lambda p: _citations(p, "J.\tauthor\n")
)
case("citations/unknown-label", ValueError, "cit.txt:2", "'autor'")(
    lambda p: _citations(p, "J.\tautor\tj|smith|.|true|false|false|NNP\n")
)
case("citations/feature-count", ValueError, "cit.txt:2", "expected 7 '|'-separated features")(
    lambda p: _citations(p, "J.\tauthor\tj|smith|.|true|false|NNP\n")
)

_ARFF_HEAD = "@relation t\n@attribute w0 numeric\n@attribute w1 numeric\n@attribute A {0,1}\n@attribute B {0,1}\n@data\n"


def _arff(tmp: Path, row: str) -> Any:
    return read_arff(_write(tmp / "t.arff", _ARFF_HEAD + "{0 1.5,2 1}\n" + row + "\n"), labels=("A", "B"))


case("arff/duplicate-sparse-index", ValueError, "t.arff:8", "index 1 ('w1') appears twice")(
    lambda p: _arff(p, "{1 2.0,1 3.0,3 1}")
)
case("arff/sparse-index-out-of-range", ValueError, "t.arff:8", "attribute index in 0..3", "got 9")(
    lambda p: _arff(p, "{9 2.0}")
)
case("arff/nan-value", ValueError, "t.arff:8", "finite number for attribute 'w0'", "'nan'")(
    lambda p: _arff(p, "nan,1,0,1")
)
case("arff/inf-sparse-value", ValueError, "t.arff:8", "finite number for attribute 'w1'", "'inf'")(
    lambda p: _arff(p, "{1 inf}")
)
case("arff/value-count", ValueError, "t.arff:8", "expected 4 comma-separated values", "got 3")(
    lambda p: _arff(p, "1,0,1")
)
case("arff/missing-value", ValueError, "t.arff:8", "missing value '?'", "'w1'")(lambda p: _arff(p, "1,?,0,1"))


def _ocr_line(i: int, letter: str, nxt: int, word: int, pos: int, fold: int, pixel: str = "0") -> str:
    return "\t".join([str(i), letter, str(nxt), str(word), str(pos), str(fold)] + [pixel] * 128)


def _ocr(tmp: Path, *lines: str) -> Any:
    return read_ocr(_write(tmp / "letter.data", "\n".join(lines) + "\n"))


case("ocr/duplicate-id", ValueError, "letter.data:2", "expected distinct ids; id 1 also on line 1")(
    lambda p: _ocr(p, _ocr_line(1, "a", -1, 1, 1, 0), _ocr_line(1, "b", -1, 2, 1, 0))
)
case("ocr/bad-letter", ValueError, "letter.data:1", "expected a letter a-z", "'A'")(
    lambda p: _ocr(p, _ocr_line(1, "A", -1, 1, 1, 0))
)
case("ocr/bad-pixel", ValueError, "letter.data:1", "128 pixels 0 or 1")(
    lambda p: _ocr(p, _ocr_line(1, "a", -1, 1, 1, 0, pixel="2"))
)
case("ocr/next-id-out-of-range", ValueError, "letter.data:1", "next_id -1 or the id of a letter", "got 7")(
    lambda p: _ocr(p, _ocr_line(1, "a", 7, 1, 1, 0))
)
case("treebank/unbalanced", ValueError, "ptb.mrg:1", "expected ')' closing the tree")(
    lambda p: parse_trees("( (S (NP (D the) (N dog))\n (VP (V ran))", source="ptb.mrg")
)


# ---------------------------------------------------------------------- regression CLI
def _regression(tmp: Path, text: str, target: str = "y") -> None:
    path = _write(tmp / "r.csv", text)
    code = regression_cli.main(["--data", str(path), "--target", target, "--folds", "2"])
    assert code == 2  # the CLI prints "error: ..." and exits 2; the message is checked below
    x, y, _, _ = regression_cli.load_data(regression_cli.parse_args(["--data", str(path), "--target", target]))


case("regression/nan-target", ValueError, "r.csv:3", "target column 'y' must be a finite number", "'nan'")(
    lambda p: _regression(p, "a,b,y\n1,2,3\n2,3,nan\n4,5,6\n")
)
case("regression/nan-attribute", ValueError, "r.csv:2", "attribute column 'b' must be a finite number", "'NaN'")(
    lambda p: _regression(p, "a,b,y\n1,NaN,3\n2,3,4\n4,5,6\n")
)
case("regression/inf-attribute", ValueError, "r.csv:4", "attribute column 'a'", "'-inf'")(
    lambda p: _regression(p, "a,b,y\n1,2,3\n2,3,4\n-inf,5,6\n")
)
case("regression/ragged-row", ValueError, "r.csv:3", "expected 3 comma-separated values", "got 2")(
    lambda p: _regression(p, "a,b,y\n1,2,3\n2,3\n4,5,6\n")
)
case("regression/duplicate-column", ValueError, "r.csv:1", "distinct column names", "'a'")(
    lambda p: _regression(p, "a,a,y\n1,2,3\n2,3,4\n")
)
case("regression/non-numeric", ValueError, "r.csv:3", "column 'a' must be numeric", "'x'")(
    lambda p: _regression(p, "a,b,y\n1,2,3\nx,3,4\n")
)
case("regression/unknown-target", ValueError, "--target 'z' is not a column", "['a', 'b', 'y']")(
    lambda p: _regression(p, "a,b,y\n1,2,3\n2,3,4\n", target="z")
)
case("regression/inverse-cv-nan", ValueError, "x must be finite", "x[1, 0]")(
    lambda p: regression_cli.inverse_cv(
        torch.tensor([[1.0, 2.0], [NAN, 1.0], [3.0, 1.0]], dtype=F64), torch.ones(3, dtype=F64), None, ["rlsr"], folds=2
    )
)
case("regression/scaled-rmse-nan-target", ValueError, "targets must be finite", "targets[1]")(
    lambda p: scaled_rmse(torch.ones(3, dtype=F64), torch.tensor([1.0, NAN, 2.0], dtype=F64))
)
case("regression/eta-heuristic-nan", ValueError, "x must be finite", "nan")(
    lambda p: eta_heuristic(torch.tensor([[NAN, 1.0]], dtype=F64))
)


@pytest.mark.parametrize("c", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_bad_input(c: Case, tmp_path: Path) -> None:
    with pytest.raises(c.error) as info:
        c.run(tmp_path)
    message = str(info.value)
    missing = [f for f in c.fragments if f not in message]
    assert not missing, f"message {message!r} lacks {missing}"


def test_catalogue_size() -> None:
    assert len(CASES) >= 60


def test_regression_cli_reports_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _write(tmp_path / "r.csv", "a,b,y\n1,2,3\n2,3,nan\n4,5,6\n")
    assert regression_cli.main(["--data", str(path), "--target", "y"]) == 2
    err = capsys.readouterr().err
    assert "r.csv:3" in err and "scaled RMSE" not in err


# ---------------------------------------------------------------------- documented normalisations
def test_citation_trailing_whitespace_is_dropped(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.txt", "Smith\tauthor\tsmith|<s>|j|true|false|false|NNP  \n\n")
    (seq,) = read_citations(path).sequences
    assert seq.features == (("smith", "<s>", "j", "true", "false", "false", "NNP"),)


def test_ocr_crlf_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "letter.data"
    path.write_bytes((_ocr_line(1, "a", -1, 1, 1, 0) + "\r\n").encode())
    words = read_ocr(path)
    assert len(words) == 1


# ---------------------------------------------------------------------- the -inf policy, exact
def _only_valid(structure, potentials, lengths, labels):
    """Enumerated labels with a finite score (structures without a forbidden part)."""

    def enumerate_labels(b: int):
        ex = type(potentials)(*[x[b : b + 1] for x in potentials]) if isinstance(potentials, tuple) else potentials[b : b + 1]
        ln = None if lengths is None else lengths[b : b + 1]
        return iter([y for y in labels(b) if torch.isfinite(structure.score(ex, y.unsqueeze(0), ln))[0]])

    return enumerate_labels


def _all_trees(n: int, nt: int, max_length: int) -> list[torch.Tensor]:
    sys.path.insert(0, str(Path(__file__).parent))
    from test_cky import _all_trees as trees

    return list(trees(n, nt, max_length))


def test_cky_neg_inf_masks_and_padding_match_enumeration() -> None:
    p = _cky(3, 3, 2)
    lengths = torch.tensor([3, 1, 2])
    terms = p.terms.clone()
    terms[0, 0, 1] = -INF  # forbidden leaf symbol
    terms[1, 1:] = NAN  # padding may hold anything
    terms[2, 2] = -INF
    spans = p.spans.clone()
    spans[1, :, 1:] = INF  # padding
    spans[0, 1, 0] = NAN  # i > j: not a part
    rules = p.rules.clone()
    rules[0, 0, 1] = -INF
    rules[0, 1] = -INF
    roots = p.roots.clone()
    roots[2, 0] = -INF
    pot = CKYPotentials(terms, rules, roots, spans)
    check_structure(CK, pot, lengths, _only_valid(CK, pot, lengths, lambda b: _all_trees(int(lengths[b]), 2, 3)), k=5)
    marg = CK.marginals(pot, lengths)
    assert all(torch.isfinite(m).all() for m in marg)
    assert (marg.terms[0, 0, 1] == 0).all() and (marg.rules[0, 1] == 0).all() and (marg.roots[2, 0] == 0).all()
    inputs = [x.clone().requires_grad_() for x in pot]
    CK.log_partition(CKYPotentials(*inputs), lengths).sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in inputs)


def test_multilabel_neg_inf_masks_match_enumeration() -> None:
    un, pw = _ml(3, 4)
    un, pw = un.clone(), pw.clone()
    un[0, 1, 1] = -INF
    pw[1, 0, 2, 1, 1] = -INF
    pw[1, 2, 0] = NAN  # k > l: not a part
    pw[2, 0, 1, 0, :] = -INF
    un[2, 2, 0] = -INF
    pot = MultiLabelPotentials(un, pw)
    s = PairwiseMultiLabel(4)
    every = [torch.tensor(y) for y in itertools.product((0, 1), repeat=4)]
    check_structure(s, pot, None, _only_valid(s, pot, None, lambda b: every), k=6)


def test_multiclass_neg_inf_matches_enumeration() -> None:
    p = _mc(3).clone()
    p[0, :2] = -INF
    p[2, 2] = -INF
    every = [torch.tensor(c) for c in range(3)]
    check_structure(MC, p, None, _only_valid(MC, p, None, lambda b: every), k=4)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_masks_stay_hard_at_extreme_scale(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(5)
    # multi-label: scores of 1e8 per part would beat a LOG_ZERO = -1e9 mask
    un, pw = 1e8 * torch.randn(2, 4, 2, generator=g), 1e8 * torch.randn(2, 4, 4, 2, 2, generator=g)
    allowed = MultiLabelPotentials(torch.ones(2, 4, 2, dtype=torch.bool), torch.ones(2, 4, 4, 2, 2, dtype=torch.bool))
    allowed.unary[:, 0, 1] = False
    allowed.unary[:, 1, 0] = False
    s = PairwiseMultiLabel(4)
    masked = s.mask_potentials(MultiLabelPotentials(un.to(dtype), pw.to(dtype)), allowed)
    labels, scores = s.argmax(masked)
    assert (labels[:, 0] == 0).all() and (labels[:, 1] == 1).all() and torch.isfinite(scores).all()
    assert all(torch.isfinite(m).all() for m in s.marginals(masked))
    # CKY: scale 1e6, leaf symbol 1 forbidden everywhere
    p = CKYPotentials(*[(1e6 * x).to(dtype) for x in _cky(2, 5, 2)])
    ok = CKYPotentials(
        torch.tensor([True, False]).expand(2, 5, 2), torch.ones(2, 2, 2, 2, dtype=torch.bool),
        torch.ones(2, 2, dtype=torch.bool), torch.ones(2, 5, 5, 2, dtype=torch.bool),
    )
    masked = CK.mask_potentials(p, ok)
    labels, scores = CK.argmax(masked)
    leaves = labels[labels[..., 0] == labels[..., 1]]
    assert (leaves[:, 2] == 0).all() and torch.isfinite(scores).all()
    assert all(torch.isfinite(m).all() for m in CK.marginals(masked))
    # MultiClass
    p = (1e6 * torch.randn(4, 5, generator=g)).to(dtype)
    ok = torch.rand(4, 5, generator=g) > 0.5
    ok[:, 0] = True
    labels, _ = MC5.argmax(MC5.mask_potentials(p, ok))
    assert ok.gather(1, labels.unsqueeze(1)).all()


MC5 = MultiClass(5)


def test_marginals_under_inference_mode() -> None:
    p = _cky(2, 3, 2)
    expected = CK.marginals(p)
    with torch.inference_mode():
        got = CK.marginals(p)
        got_mc = MC.marginals(_mc())
        got_ml = ML.marginals(_ml())
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(got_mc, MC.marginals(_mc()))
    torch.testing.assert_close(got_ml.unary, ML.marginals(_ml()).unary)


def test_no_valid_structure_without_validation_is_minus_inf_with_zero_marginals() -> None:
    mc = MultiClass(3, validate=False)
    p = _with(_mc(), (1, slice(None)), -INF)
    assert torch.isneginf(mc.log_partition(p)[1])
    m = mc.marginals(p)
    assert torch.isfinite(m).all() and (m[1] == 0).all()
    cky = CKY(2, validate=False)
    m = cky.marginals(_cky_with("roots", (1, slice(None)), -INF))
    assert all(torch.isfinite(x).all() and (x[1] == 0).all() for x in m)
