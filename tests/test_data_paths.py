"""Data directory resolution and transparent gzip reading."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from structssl.data.paths import (
    ENV_VAR, DecodingError, data_file, iter_lines, open_text, resolve_data_dir,
)


def test_resolve_argument_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "elsewhere"))
    assert resolve_data_dir(tmp_path) == tmp_path


def test_resolve_env_then_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "env").mkdir()
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env"))
    assert resolve_data_dir() == tmp_path / "env"
    monkeypatch.delenv(ENV_VAR)
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "shared" / "data").mkdir(parents=True)
    monkeypatch.chdir(project)
    assert resolve_data_dir().resolve() == (tmp_path / "shared" / "data").resolve()


def test_resolve_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        FileNotFoundError, match="no data directory: pass data_dir=.*STRUCTSSL_DATA"
    ):
        resolve_data_dir()
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nope"))
    with pytest.raises(
        FileNotFoundError,
        match=r"nope \(from the environment variable STRUCTSSL_DATA\) does not exist",
    ):
        resolve_data_dir()
    with pytest.raises(FileNotFoundError, match=r"nope \(from the data_dir argument\)"):
        resolve_data_dir(tmp_path / "nope")


def test_data_file_names_path_and_expectation(tmp_path: Path) -> None:
    (tmp_path / "conll2002").mkdir()
    expected = re.escape(
        f"missing data file {tmp_path / 'conll2002' / 'esp.train'}: expected the Spanish file there"
    )
    with pytest.raises(FileNotFoundError, match=expected):
        data_file("conll2002/esp.train", "the Spanish file", tmp_path)
    (tmp_path / "conll2002" / "esp.train").write_text("x\n")
    assert data_file("conll2002/esp.train", "the Spanish file", tmp_path).is_file()


def test_gzip_is_transparent(tmp_path: Path) -> None:
    plain = tmp_path / "a.txt"
    plain.write_text("héllo\nworld\n", encoding="utf-8")
    packed = tmp_path / "a.txt.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    with open_text(plain) as f, open_text(packed) as g:
        assert f.read() == g.read() == "héllo\nworld\n"
    assert list(iter_lines(packed)) == [(1, "héllo"), (2, "world")]


def test_gzip_and_encoding_errors(tmp_path: Path) -> None:
    fake = tmp_path / "b.txt.gz"
    fake.write_text("not gzip")
    with pytest.raises(ValueError, match=re.escape(f"{fake}: expected gzip data")):
        open_text(fake)
    bad = tmp_path / "c.txt"
    bad.write_bytes(b"fine\n\xff\xfe\n")
    with pytest.raises(DecodingError, match=re.escape(f"{bad}:2: expected utf-8 text")):
        list(iter_lines(bad))
    with pytest.raises(FileNotFoundError, match="no such file"):
        open_text(tmp_path / "missing.txt")


@pytest.mark.parametrize("encoding", ["utf-8", "UTF8", "utf_8"])
def test_utf8_byte_order_mark_is_not_part_of_the_first_line(tmp_path: Path, encoding: str) -> None:
    marked = tmp_path / "bom.txt"
    marked.write_bytes("\ufeffKyoto\tU-LOC\r\n.\tO\r\n".encode("utf-8"))
    assert list(iter_lines(marked, encoding)) == [(1, "Kyoto\tU-LOC"), (2, ".\tO")]
    with open_text(marked, encoding) as f:
        assert f.read() == "Kyoto\tU-LOC\n.\tO\n"
    # only at the start of a file; elsewhere U+FEFF is text and stays
    inner = tmp_path / "inner.txt"
    inner.write_bytes("a\n\ufeffb\n".encode("utf-8"))
    assert list(iter_lines(inner, encoding)) == [(1, "a"), (2, "\ufeffb")]


def test_utf16_files_are_read_and_named_when_read_as_utf8(tmp_path: Path) -> None:
    """UTF-16 writes a newline in two bytes: lines cannot be split before decoding (every line
    after the first failed with "truncated data"). Read as UTF-8, the error says which encoding
    the byte-order mark names."""
    path = tmp_path / "u.txt"
    path.write_text("Málaga B-LOC\r\n\nAna O\n", encoding="utf-16")
    assert list(iter_lines(path, "utf-16")) == [(1, "Málaga B-LOC"), (2, ""), (3, "Ana O")]
    with pytest.raises(DecodingError, match=re.escape(
            f"{path}:1: expected utf-8 text; invalid start byte at byte 0 (the file starts with a "
            "UTF-16 byte-order mark: its encoding is utf-16)")):
        list(iter_lines(path))
    broken = tmp_path / "b.txt"
    broken.write_bytes("a\nb\n".encode("utf-16-le") + b"\x00\xd8")  # a lone surrogate at the end
    with pytest.raises(DecodingError, match=re.escape(f"{broken}:")):
        list(iter_lines(broken, "utf-16-le"))
