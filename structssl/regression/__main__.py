"""``python -m structssl.regression``: an alias of ``structssl regression`` (see
:mod:`structssl.regression.cli`)."""

import sys

from structssl.regression.cli import main

if __name__ == "__main__":
    sys.exit(main())
