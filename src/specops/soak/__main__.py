"""``python3 -m specops.soak``: the soak alone, importing none of the other specops commands.

``playbooks/soak.yml`` runs it this way on the host, so the host needs only the soak's own dependencies
(httpx, prometheus-client, psutil; matplotlib for the plots, PyYAML for ``--alert-rules``).
"""

from __future__ import annotations

import argparse
import sys

from specops.commands import soak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specops-soak", description=soak.HELP)
    soak.add_arguments(parser)
    try:
        return soak.run(parser.parse_args(argv))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
