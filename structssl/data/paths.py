"""Where the real data lives, and opening (possibly gzip-compressed) text files.

The data directory is resolved in this order:

1. the ``data_dir`` argument of a loader, if given;
2. the environment variable ``STRUCTSSL_DATA`` (:data:`ENV_VAR`), if set and non-empty;
3. ``../shared/data`` relative to the current working directory, if that folder exists.

A loader asks for a file *relative* to the data directory (``"conll2002/esp.train"``) together
with a short description of what is expected there. When the file is missing, the error names
the full path it looked at, how the data directory was chosen and what belongs there, so a user
knows exactly which file to put where.

Compressed files: :func:`open_text` and :func:`open_binary` decompress gzip data transparently
(decided by the gzip magic bytes, whatever the file's name; a ``.gz`` file without them is an
error).
"""

from __future__ import annotations

import codecs
import gzip
import io
import os
from pathlib import Path
from typing import IO, Iterator, Optional, Union

__all__ = [
    "ENV_VAR",
    "DEFAULT_RELATIVE_DATA_DIR",
    "PathLike",
    "resolve_data_dir",
    "data_file",
    "split_file",
    "open_binary",
    "open_text",
    "iter_lines",
    "DecodingError",
]

#: Environment variable naming the data directory.
ENV_VAR = "STRUCTSSL_DATA"
#: Fallback data directory, relative to the current working directory.
DEFAULT_RELATIVE_DATA_DIR = Path("..") / "shared" / "data"

PathLike = Union[str, "os.PathLike[str]"]

_GZIP_MAGIC = b"\x1f\x8b"


def resolve_data_dir(data_dir: Optional[PathLike] = None) -> Path:
    """The data directory: ``data_dir``, else ``$STRUCTSSL_DATA``, else ``../shared/data``.

    Args:
        data_dir: an explicit directory (it must exist).

    Returns:
        The directory as a :class:`~pathlib.Path`.

    Raises:
        FileNotFoundError: the chosen directory does not exist, or no directory was given, the
            environment variable is unset and ``../shared/data`` does not exist.
    """
    if data_dir is not None:
        path = Path(data_dir)
        source = "the data_dir argument"
    elif os.environ.get(ENV_VAR):
        path = Path(os.environ[ENV_VAR])
        source = f"the environment variable {ENV_VAR}"
    else:
        path = Path.cwd() / DEFAULT_RELATIVE_DATA_DIR
        if not path.is_dir():
            raise FileNotFoundError(
                "no data directory: pass data_dir=..., or set the environment variable "
                f"{ENV_VAR}, or run from a directory next to which {DEFAULT_RELATIVE_DATA_DIR} "
                f"exists (looked for {path.resolve()})"
            )
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"data directory {path} (from {source}) does not exist")
    return path


def data_file(relative: PathLike, expected: str, data_dir: Optional[PathLike] = None) -> Path:
    """Path of a file under the data directory, checked to exist.

    Args:
        relative: the file's path relative to the data directory (``"conll2002/esp.train"``).
        expected: a short description of the file, used in the error message
            (``"CoNLL-2002 Spanish training file (word POS tag per line)"``).
        data_dir: the data directory (see :func:`resolve_data_dir`).

    Returns:
        The absolute-or-relative path of the existing file.

    Raises:
        FileNotFoundError: naming the full path and what is expected there.
    """
    root = resolve_data_dir(data_dir)
    path = root / relative
    if not path.is_file():
        raise FileNotFoundError(f"missing data file {path}: expected {expected} there")
    return path


def split_file(name: PathLike, split: str, expected: str, data_dir: Optional[PathLike] = None) -> Path:
    """The file a data module's ``{split}_file`` option names: the path as given (relative to
    the current directory), else relative to the data directory.

    Args:
        name: the option's value.
        split: the split (``"train"``, ``"unlabeled"``, ...), for the option's name.
        expected: what the file holds, for the error message.
        data_dir: the data directory (see :func:`resolve_data_dir`).

    Raises:
        FileNotFoundError: naming the option and both places looked in.
    """
    option = f"--data.{split}_file / {split}_file="
    path = Path(name)
    if path.is_file():
        return path
    if path.is_absolute():
        raise FileNotFoundError(f"no such file: {name} (the {split} file, {option})")
    try:
        return data_file(path, expected, data_dir)
    except FileNotFoundError as err:  # neither here nor in the data directory
        raise FileNotFoundError(
            f"no such file: {name} (the {split} file, {option}) in the current directory "
            f"{Path.cwd()}, nor in the data directory: {err}"
        ) from None


def _check_exists(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")


def open_binary(path: PathLike) -> IO[bytes]:
    """Open a file for reading bytes, decompressing ``.gz`` files transparently.

    Args:
        path: the file (gzip data, ``.gz`` or not, is decompressed).

    Returns:
        A binary file object (use it as a context manager).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a ``.gz`` file that is not gzip data.
    """
    path = Path(path)
    _check_exists(path)
    with open(path, "rb") as f:
        magic = f.read(2)
    if path.suffix == ".gz" and magic != _GZIP_MAGIC:
        raise ValueError(f"{path}: expected gzip data (name ends in .gz); got other bytes")
    # gzip data is decompressed whatever the file's name (a .dat that is gzip is not text)
    return gzip.open(path, "rb") if magic == _GZIP_MAGIC else open(path, "rb")


class DecodingError(ValueError):
    """A file's bytes are not text in the encoding it was read with (:func:`iter_lines`; the
    message names the file, the line and the encoding)."""


def _without_bom(encoding: str) -> str:
    """The codec that drops a leading UTF-8 byte-order mark where ``encoding`` is UTF-8.

    Editors on Windows start UTF-8 files with U+FEFF; read as plain ``utf-8`` it would become
    part of the first token (an unknown word, copied into every output written from it).
    """
    return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


def open_text(path: PathLike, encoding: str = "utf-8") -> IO[str]:
    """Open a text file (gzip data transparently), strict decoding, universal newlines.

    A UTF-8 byte-order mark at the start of the file is dropped.

    Args:
        path: the file.
        encoding: its encoding.

    Returns:
        A text file object.
    """
    return io.TextIOWrapper(open_binary(path), encoding=_without_bom(encoding), newline=None)


def _ascii_lines(encoding: str) -> bool:
    """Whether ``encoding`` writes a newline as the single byte ``\\n`` (UTF-8, Latin-1, cp1252,
    ...: lines can be split on bytes before decoding, so an error names its exact line);
    UTF-16 / UTF-32 do not."""
    return "\n".encode(encoding) == b"\n"


#: byte-order marks that tell a file's encoding when it is read as something else
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _bom_hint(path: PathLike, encoding: str) -> str:
    """`` (the file starts with a UTF-16 byte-order mark: ...)`` when it does and ``encoding``
    is another one, else ``""``."""
    with open_binary(path) as f:
        head = f.read(4)
    for bom, name in _BOMS:
        if head.startswith(bom) and not codecs.lookup(encoding).name.startswith(name):
            return f" (the file starts with a {name.upper()} byte-order mark: its encoding is {name})"
    return ""


def iter_lines(path: PathLike, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` with 1-based line numbers and the newline removed.

    Decoding errors are reported as :class:`DecodingError` (a ``ValueError``) naming the
    file and the line. A UTF-8 byte-order mark at the start of the file is dropped. Encodings
    whose newline is not the byte ``\\n`` (UTF-16, UTF-32) are decoded as a stream (their
    byte-order mark is dropped by the codec); an error there names the line after the last one
    read.

    Args:
        path: the file (``.gz`` transparently).
        encoding: its encoding.

    Yields:
        ``(line_number, line)`` pairs.
    """
    first_codec = _without_bom(encoding)
    by_bytes = _ascii_lines(encoding)
    number = 0
    try:
        if not by_bytes:
            with open_text(path, encoding) as text:
                for number, line in enumerate(text, start=1):
                    yield number, line.rstrip("\r\n")
            return
        with open_binary(path) as f:
            for number, raw in enumerate(f, start=1):
                line = raw.decode(first_codec if number == 1 else encoding)
                if "\x00" in line:  # valid UTF-8, never text
                    raise DecodingError(
                        f"{path}:{number}: expected {encoding} text; the line holds NUL bytes (a "
                        "binary file, or text in another encoding such as UTF-16?)"
                    )
                yield number, line.rstrip("\r\n")
    except UnicodeDecodeError as err:
        where = number if by_bytes else number + 1
        raise DecodingError(
            f"{path}:{where}: expected {encoding} text; {err.reason} at byte {err.start}"
            f"{_bom_hint(path, encoding)}"
        ) from None
