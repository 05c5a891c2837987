"""``python3 host-scripts-ID.pyz drain ARGS`` (specops.host's dispatch runs this) or ``python -m specops.host.drain
ARGS``: the drain (:mod:`specops.host.drain.cli`)."""

from __future__ import annotations

import sys

from specops.host.drain.cli import main

if __name__ == "__main__":
    sys.exit(main())
