"""``python3 -m specops.exporter``: the exporter alone, importing none of the other specops commands.

The exporter unit runs this way so the host needs only httpx, prometheus-client and psutil.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from specops.commands import exporter


class OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line on stderr, exit status 2 (the unit's journal gets no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="specops-exporter", description=exporter.HELP)
    exporter.add_arguments(parser)
    try:
        return exporter.run(parser.parse_args(argv))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
