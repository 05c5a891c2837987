"""Record real answers that differ from plain decoding's (issue 78's fixture, tests/fixtures/identity/): every task
of the bench's standard set answered by a plain llama-server and by a speculative one (fresh servers, greedy,
``cache_prompt: false``, one request at a time), and each answer that differs kept with its task id and both texts.

  python -m specops_lab.record_differences LLAMA_SERVER MODEL OUT.json [--spec-type ngram-mod] [--threads 2]
      [--max-tokens 96]

Lab equipment (never shipped): run it with the project's venv and ``PYTHONPATH=lab``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import httpx

from specops.bench.tasks import load_tasks
from specops.capabilities import probe
from specops.profile import ServerProfile
from specops.server import ServerProcess


def answers(binary: Path, model: str, extra: dict[str, object], threads: int, max_tokens: int,
            log: Path) -> dict[str, str]:
    prof = ServerProfile.from_dict({"model": model, "ctx_size": 2048, "parallel": 1, "threads": threads, **extra})
    out: dict[str, str] = {}
    with ServerProcess(binary, prof, probe(binary), log) as server:
        http = httpx.Client(base_url=server.base_url, timeout=600)
        for task in load_tasks():
            r = http.post("/v1/chat/completions", json={"messages": task.chat_messages(), "max_tokens": max_tokens,
                                                        "temperature": 0, "cache_prompt": False})
            r.raise_for_status()
            out[task.id] = r.json()["choices"][0]["message"]["content"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("server", type=Path)
    p.add_argument("model")
    p.add_argument("out", type=Path)
    p.add_argument("--spec-type", default="ngram-mod")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=96)
    a = p.parse_args()
    plain = answers(a.server, a.model, {"spec_type": "none"}, a.threads, a.max_tokens, a.out.with_suffix(".plain.log"))
    spec = answers(a.server, a.model, {"spec_type": a.spec_type}, a.threads, a.max_tokens, a.out.with_suffix(".log"))
    diffs = [{"task": t, "plain": plain[t], "other": spec[t]} for t in plain if plain[t] != spec[t]]
    a.out.write_text(json.dumps({"spec_type": a.spec_type, "threads": a.threads, "max_tokens": a.max_tokens,
                                 "model": Path(a.model).name, "answers": len(plain), "differences": diffs},
                                indent=1, ensure_ascii=False) + "\n")
    print(f"{a.spec_type}: {len(diffs)} of {len(plain)} answers differ: {', '.join(d['task'] for d in diffs)}")


if __name__ == "__main__":
    main()
