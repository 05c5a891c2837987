"""``python -m specops``: the ``specops`` command (:func:`specops.cli.main`)."""

from __future__ import annotations

import sys

from specops.cli import main

if __name__ == "__main__":
    sys.exit(main())
