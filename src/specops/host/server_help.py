"""What an installed llama-server says of itself, in one run on the builder (standard library only; run by
roles/llama_cpp/tasks/capabilities.yml): its ``--help`` and ``--version``, each run as before, and the
capabilities.json saved beside it by an earlier run (the role writes it again only when the new one differs).

  server_help.py --bin PATH [--saved PATH]

It prints {"help": TEXT, "version": TEXT, "saved": TEXT | null}, each command's stdout then its stderr (each
without its last newline) joined by a newline (llama-server prints some of both on either stream). A command that
fails (exit status, or no such file) is said on stderr in one line with its exit status, and this exits 1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from specops.host.files import read


def run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False, timeout=120)
    except OSError as exc:
        raise SystemExit(f"server_help: {' '.join(argv)}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        raise SystemExit(f"server_help: {' '.join(argv)} exited {done.returncode}: {tail[0]}")
    # as ansible.builtin.command's stdout and stderr (their last line without its newline)
    return done.stdout.rstrip("\r\n") + "\n" + done.stderr.rstrip("\r\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--saved", help="the capabilities.json an earlier run saved")
    args = ap.parse_args()
    saved = read(args.saved) if args.saved else None
    print(json.dumps({"help": run([args.bin, "--help"]), "version": run([args.bin, "--version"]),
                      "saved": None if saved is None else saved.decode("utf-8", "replace")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
