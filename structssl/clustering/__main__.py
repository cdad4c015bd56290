"""``python -m structssl.clustering``: an alias of ``structssl clustering`` (see
:mod:`structssl.clustering.cli`)."""

import sys

from structssl.clustering.cli import main

if __name__ == "__main__":
    sys.exit(main())
