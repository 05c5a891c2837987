"""Cross-check with llama.cpp's own ``llama-speculative`` binary (the reference implementation).

This is **not** llama-server and not a server flag list: ``llama-speculative`` is an example
program with its own command line (``-m``, ``-md``, ``-f PROMPT_FILE``, ``-n``, ``--temp``,
``--spec-draft-n-max``, ``--no-escape`` so code in prompts stays verbatim, …) that generates
once and prints ``decoded N tokens in S seconds`` and
``n_drafted``/``n_accept`` to stderr. Its argv is built here and checked against the binary's own
``--help``. The prompts are the task messages rendered with the target's chat template by the
server's ``/apply-template`` so both see the same tokens. The text it prints is the prompt followed
by the generation; the generation is recovered by stripping the echoed prompt (when the echo does
not match the prompt exactly, the text is kept but marked, and identity is not judged).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from specops.bench.arms import Arm
from specops.bench.runner import ArmFailure, BenchConfig, Progress, RssSampler
from specops.bench.store import ResultStore
from specops.bench.tasks import Task
from specops.capabilities import Capabilities, parse_help
from specops.client import LlamaServerClient

_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
_ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
# log lines may carry a timestamp/level prefix: "0.25.406.467 I n_drafted = 16"
_FIELD = re.compile(r"^(?:.*\s)?(n_draft|n_predict|n_drafted|n_accept)\s*=\s*(\d+)\s*$", re.M)

# profile key -> llama-speculative flag spellings (first accepted wins)
_FLAGS: dict[str, tuple[str, ...]] = {
    "draft_n_max": ("--spec-draft-n-max", "--draft-max"),
    "draft_n_min": ("--spec-draft-n-min", "--draft-min"),
    "draft_p_min": ("--spec-draft-p-min", "--draft-p-min"),
    "flash_attn": ("--flash-attn", "-fa"),
    "cache_type_k": ("--cache-type-k", "-ctk"),
    "cache_type_v": ("--cache-type-v", "-ctv"),
    "draft_threads": ("--spec-draft-threads", "-td", "--threads-draft"),
}


class CliError(RuntimeError):
    pass


def probe_help(binary: Path) -> Capabilities:
    proc = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60, check=False)
    return parse_help(proc.stdout + "\n" + proc.stderr)


def _flag(caps: Capabilities, key: str) -> str:
    for f in _FLAGS[key]:
        if caps.has(f):
            return f
    raise CliError(f"llama-speculative accepts none of {_FLAGS[key]} (for {key})")


def speculative_argv(
    binary: Path,
    caps: Capabilities,
    target: Path,
    draft: Path,
    prompt_file: Path,
    max_tokens: int,
    seed: int,
    ctx_size: int,
    threads: int | None,
    profile: dict[str, Any],
) -> list[str]:
    argv = [
        str(binary),
        "-m",
        str(target),
        "-md",
        str(draft),
        "-f",
        str(prompt_file),
        "-n",
        str(max_tokens),
        "--no-escape",
        "--temp",
        "0",
        "--seed",
        str(seed),
        "-c",
        str(ctx_size),
    ]
    if threads:
        argv += ["-t", str(threads)]
    for key in (
        "draft_n_max",
        "draft_n_min",
        "draft_p_min",
        "flash_attn",
        "cache_type_k",
        "cache_type_v",
        "draft_threads",
    ):
        value = profile.get(key)
        if value is not None:
            argv += [_flag(caps, key), f"{value:g}" if isinstance(value, float) else str(value)]
    if profile.get("repack") is False:
        argv.append("--no-repack")
    for tok in argv[1:]:
        if tok.startswith("-") and not tok.lstrip("-").replace(".", "").isdigit() and not caps.has(tok):
            raise CliError(f"llama-speculative does not accept {tok}")
    return argv


def parse_output(stdout: str, stderr: str, prompt: str) -> dict[str, Any]:
    """Numbers and text from one llama-speculative run."""
    dec = _DECODED.search(stderr)
    if not dec:
        raise CliError(f"llama-speculative printed no 'decoded … tokens' line:\n{stderr[-1500:]}")
    fields = {k: int(v) for k, v in _FIELD.findall(stderr)}
    enc = _ENCODED.search(stderr)
    text = stdout
    echo_ok = False
    body = stdout[2:] if stdout.startswith("\n\n") else stdout
    if body.startswith(prompt):
        text, echo_ok = body[len(prompt) :], True
    if text.endswith("\n\n"):
        text = text[:-2]
    n_dec, secs = int(dec.group(1)), float(dec.group(2))
    drafted, accepted = fields.get("n_drafted", 0), fields.get("n_accept", 0)
    return {
        "text": text,
        "text_exact": echo_ok,
        "n_predicted": n_dec,
        "decode_s": secs,
        "decode_tps": float(dec.group(3)),
        "prompt_n": int(enc.group(1)) if enc else None,
        "prompt_s": float(enc.group(2)) if enc else None,
        "draft_n": drafted,
        "draft_n_accepted": accepted,
        "n_draft_max": fields.get("n_draft"),
    }


def render_prompts(client: LlamaServerClient, tasks: list[Task]) -> dict[str, str]:
    """Chat messages → prompt text with the target's template (llama-server ``/apply-template``)."""
    out: dict[str, str] = {}
    for task in tasks:
        data = client._post_json("/apply-template", {"messages": task.chat_messages()})
        prompt = data.get("prompt") if isinstance(data, dict) else None
        if not isinstance(prompt, str):
            raise CliError(f"/apply-template gave no prompt for {task.id}: {str(data)[:200]}")
        out[task.id] = prompt
    return out


def run_cli_arm(arm: Arm, rep: int, cfg: BenchConfig, store: ResultStore, progress: Progress) -> dict[str, Any]:
    if cfg.speculative_binary is None or not cfg.speculative_binary.exists():
        raise ArmFailure(f"arm {arm.name}: llama-speculative binary not found ({cfg.speculative_binary})")
    missing = [t.id for t in cfg.tasks if t.id not in cfg.prompts]
    if missing:
        raise ArmFailure(f"arm {arm.name}: no rendered prompt for tasks {missing[:5]}")
    caps = probe_help(cfg.speculative_binary)
    draft = cfg.draft_for(arm)
    assert draft is not None
    record: dict[str, Any] = {
        "arm": arm.name,
        "rep": rep,
        "arm_def": arm.to_dict(),
        "started": time.time(),
        "requests": [],
        "env": arm.env,
    }
    progress.note(f"rep {rep} arm {arm.name}: llama-speculative per task ({arm.description})")
    peak = 0
    tot = {"draft_tokens": 0, "accepted": 0}
    with tempfile.TemporaryDirectory(prefix="specops-cli-") as tmp:
        for i, task in enumerate(cfg.tasks, 1):
            pf = Path(tmp) / f"{task.id}.txt"
            # -f drops one trailing newline of the file (the chat prompt ends in one): add it back
            pf.write_text(cfg.prompts[task.id] + "\n")
            profile = {**arm.profile, "draft_threads": cfg.draft_threads}
            argv = speculative_argv(
                cfg.speculative_binary,
                caps,
                cfg.target,
                draft,
                pf,
                cfg.max_tokens,
                cfg.seed,
                cfg.ctx_size,
                cfg.threads,
                profile,
            )
            record["argv"] = argv
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **arm.env}
            )
            sampler = RssSampler(proc.pid).start()
            out, err = proc.communicate()
            peak = max(peak, sampler.stop()["peak"])
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                record["error"] = f"llama-speculative exited {proc.returncode} on {task.id}: {err[-800:]}"
                path = store.save_partial(arm.name, rep, {**record, "status": "failed"})
                raise ArmFailure(f"{record['error']}\npartial results kept in {path}")
            try:
                res = parse_output(out, err, cfg.prompts[task.id])
            except CliError as exc:
                path = store.save_partial(arm.name, rep, {**record, "status": "failed", "error": str(exc)})
                raise ArmFailure(f"arm {arm.name} task {task.id}: {exc}\npartial results kept in {path}") from exc
            tot["draft_tokens"] += res["draft_n"]
            tot["accepted"] += res["draft_n_accepted"]
            req = {
                "task": task.id,
                "workload": task.workload,
                "text": res.pop("text"),
                "e2e_s": wall,
                "ttft_s": None,
                "finish_reason": None,
                **res,
                "timings": {
                    "predicted_n": res["n_predicted"],
                    "predicted_per_second": res["decode_tps"],
                    "draft_n": res["draft_n"],
                    "draft_n_accepted": res["draft_n_accepted"],
                },
            }
            record["requests"].append(req)
            store.save_partial(arm.name, rep, record)
            progress.request(
                arm.name,
                rep,
                i,
                len(cfg.tasks),
                task.id,
                f"{res['n_predicted']} tok, {res['decode_tps']:.1f} tok/s, "
                f"acc {res['draft_n_accepted']}/{res['draft_n']}",
            )
    record["spec"] = {
        "draft_tokens": tot["draft_tokens"],
        "accepted": tot["accepted"],
        "drafts": None,
        "per_pos": {},
    }
    record["rss"] = {"peak": peak}
    record["finished"] = time.time()
    record["machine"] = {**cfg.machine, "loadavg_after": os.getloadavg()}
    store.save(arm.name, rep, record)
    return record
