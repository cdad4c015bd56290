"""structssl: semi-supervised structured prediction on batched semiring dynamic programs."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("structssl")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = ["__version__"]
