"""``python3 -m specops.exporter``: the exporter alone, importing none of the other specops commands.

The exporter unit runs this way so the host needs only httpx, prometheus-client and psutil.
"""

from __future__ import annotations

import sys

from specops.commands import exporter
from specops.oneline import OneLineParser


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python3 -m specops.exporter", description=exporter.HELP)
    exporter.add_arguments(parser)
    try:
        return exporter.run(parser.parse_args(argv))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
