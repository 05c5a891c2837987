#!/usr/bin/env python3
"""Lab equipment (not shipped): what speculation pays on a GPU host, measured with the project's own code.

Phases, each writing JSON into OUT as it finishes (a run cut short keeps what it measured):

* ``ceiling``  c(k) for k = 1..17 and the draft's step cost r, with the bench's ceiling code
               (:func:`specops.bench.ceiling.measure`, llama-bench batches at depth 256), per target.
* ``serve``    per target: the proof (the deploy's own probe (specops.host.probe) + summarize_probe) and paired arms
               (plain and speculative servers both loaded, requests alternating between them, the bench's
               request body and streaming client), VRAM of every served profile from nvidia-smi beside
               ``specops fit``'s prediction for the same profile.
* ``acceptance`` the real pair's per-position acceptance (greedy: it does not depend on the hardware),
               measured on whatever host holds the real models, for --spec-synth-rates.

Every server's argv comes from :func:`specops.argv.build_argv` for a profile (the same path as
``specops argv --profile P --format shell``); the synthetic-acceptance flags (benchmarking only) travel in
the profile's ``extra_args``, which build_argv checks against the binary's own --help.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from specops.argv import build_argv, shell_line
from specops.bench import ceiling
from specops.bench.request import RequestFailed, chat_body, stream_chat
from specops.bench.tasks import load_tasks
from specops.capabilities import probe
from specops.client import (
    SPEC_ACCEPTED_PER_POS,
    SPEC_ACCEPTED_TOKENS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    metric_value,
    parse_metrics,
)
from specops.probe import summarize_probe
from specops.profile import ServerProfile
from specops.server import ServerProcess

KS = tuple(range(1, 18))  # verification batches of 1..16 drafted tokens + the last accepted one
DRAFT_LENGTHS = (2, 4, 8, 16)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def dump(out: Path, name: str, data: Any) -> None:
    tmp = out / (name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(out / name)


# ---------------------------------------------------------------- profiles and servers
def base_profile(model: Path, ctx: int = 4096, gpu: bool = True) -> dict[str, Any]:
    """The service's own defaults (fa on, V cache q8_0, one slot, 4096 context) with every layer on the GPU."""
    p: dict[str, Any] = {"model": str(model), "ctx_size": ctx, "parallel": 1, "flash_attn": "on",
                         "cache_type_v": "q8_0", "cache_ram_mib": 0}
    if gpu:
        p["ngl"] = "all"
    return p


def spec_profile(model: Path, draft: Path, n_max: int, synth: list[float] | None, ctx: int = 4096,
                 gpu: bool = True) -> dict[str, Any]:
    p = base_profile(model, ctx, gpu)
    p.update(draft_model=str(draft), spec_type="draft-simple", draft_n_max=n_max)
    if gpu:
        p["draft_ngl"] = "all"
    if synth is not None:
        p["extra_args"] = ["--spec-synth-rates", ",".join(f"{x:.4f}" for x in synth[:n_max])]
    return p


class Servers:
    def __init__(self, binary: Path, out: Path) -> None:
        self.binary = binary
        self.caps = probe(str(binary))
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def start(self, name: str, profile: dict[str, Any]) -> Iterator[ServerProcess]:
        srv = ServerProcess(self.binary, ServerProfile.from_dict(profile), self.caps, self.logs / f"{name}.log")
        t0 = time.monotonic()
        try:
            srv.start(timeout=600)
            srv.load_s = time.monotonic() - t0  # type: ignore[attr-defined]
            yield srv
        finally:
            srv.stop()

    def shell(self, profile: dict[str, Any]) -> str:
        return shell_line(build_argv(ServerProfile.from_dict(profile), self.caps, binary=str(self.binary)))


def counters(url: str) -> dict[str, Any]:
    samples = parse_metrics(httpx.get(url + "/metrics", timeout=30).text)
    per_pos = {int(s.labels["position"]): s.value for s in samples
               if s.name == SPEC_ACCEPTED_PER_POS and "position" in s.labels}
    return {"drafts": metric_value(samples, SPEC_DRAFTS) or 0.0,
            "drafted": metric_value(samples, SPEC_DRAFT_TOKENS) or 0.0,
            "accepted": metric_value(samples, SPEC_ACCEPTED_TOKENS) or 0.0,
            "per_pos": per_pos}


def counter_delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    d = {k: b[k] - a[k] for k in ("drafts", "drafted", "accepted")}
    d["per_pos"] = {p: b["per_pos"].get(p, 0.0) - a["per_pos"].get(p, 0.0) for p in b["per_pos"]}
    return d


def gpu_mib_by_pid() -> dict[int, float]:
    try:
        text = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    out: dict[int, float] = {}
    for line in text.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            with contextlib.suppress(ValueError):
                out[int(parts[0])] = float(parts[1])
    return out


def fit_prediction(profile: dict[str, Any], out: Path, name: str, memory_mib: float) -> dict[str, Any]:
    """``specops fit TARGET [DRAFT] --profile P --backend cuda --json``: the fit the deploy runs."""
    prof = {k: v for k, v in profile.items() if k != "model"}
    path = out / "logs" / f"{name}.profile.json"
    path.write_text(json.dumps(prof))
    argv = [sys.executable, "-c", "import sys; from specops.cli import main; sys.exit(main())", "fit",
            profile["model"], *([profile["draft_model"]] if profile.get("draft_model") else []),
            "--profile", str(path), "--backend", "cuda", "--memory-mib", str(memory_mib), "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    try:
        return {"rc": proc.returncode, **json.loads(proc.stdout)}
    except json.JSONDecodeError:
        return {"rc": proc.returncode, "error": (proc.stderr or proc.stdout)[-800:]}


def prove(url: str) -> dict[str, Any]:
    """The deploy's proof: its probe script on the host, judged by summarize_probe."""
    proc = subprocess.run([sys.executable, "-m", "specops.host.probe", "--url", url, "--prompt",
                           "Write a Python function that returns the n-th Fibonacci number.", "--tokens", "64"],
                          capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        return {"error": proc.stderr[-800:], "rc": proc.returncode}
    s = summarize_probe(json.loads(proc.stdout))
    s.pop("content", None)
    s["speculating"] = s["draft_tokens_delta"] > 0 and s["slots_speculative"]
    return s


# ---------------------------------------------------------------- phases
def phase_ceiling(a: argparse.Namespace) -> None:
    out = a.out
    for tname, tpath in a.targets:
        log(f"ceiling {tname}")
        t0 = time.monotonic()
        prof = base_profile(tpath)
        numerics = [ceiling.Numerics.of_profile(prof, {}), ceiling.Numerics("default")]
        res = ceiling.measure(a.bench, tpath, numerics, {a.draft_name: a.draft}, depth=256, reps=a.reps,
                              threads=a.threads, progress=log, ks=KS, draft_k_max=max(KS))
        res["elapsed_s"] = time.monotonic() - t0
        rel = ceiling.relative_for(res, numerics[0].name) or {}
        r = ceiling.draft_cost_ratio(res, a.draft_name, numerics[0].name)
        drel = ceiling.draft_relative_for(res, a.draft_name)
        res["summary"] = {
            "numerics": numerics[0].name, "r": r,
            "c": {k: rel[k] for k in sorted(rel)},
            "perfect_ceiling_draft": {k: ceiling.perfect_ceiling(rel, k, r, drel) for k in range(1, 17)},
            "perfect_ceiling_free": {k: ceiling.perfect_ceiling(rel, k) for k in range(1, 17)},
        }
        dump(out, f"ceiling-{tname}.json", res)
        log(f"ceiling {tname}: r={r:.3f} c(2)={rel.get(2, 0):.2f} c(5)={rel.get(5, 0):.2f} c(17)={rel.get(17, 0):.2f}")


def request(url: str, task: Any, tokens: int) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=900) as http:
        r = stream_chat(http, chat_body(task.chat_messages(), tokens, seed=42))
    return {"tps": r.decode_tps, "n": r.n_predicted, "text": r.text, "draft_n": r.timings.get("draft_n"),
            "draft_n_accepted": r.timings.get("draft_n_accepted")}


def paired(plain: ServerProcess, spec: ServerProcess, tasks: list[Any], tokens: int) -> dict[str, Any]:
    """Requests alternate between the two loaded servers (order flipped every task): drift hits both."""
    request(plain.base_url, tasks[0], 16)  # warm-up, both
    request(spec.base_url, tasks[0], 16)
    c0 = counters(spec.base_url)
    rows = []
    for i, task in enumerate(tasks):
        order = (plain, spec) if i % 2 == 0 else (spec, plain)
        got = {}
        for srv in order:
            got[srv is spec] = request(srv.base_url, task, tokens)
        p, s = got[False], got[True]
        rows.append({"task": task.id, "plain_tps": p["tps"], "spec_tps": s["tps"], "n_plain": p["n"], "n_spec": s["n"],
                     "ratio": s["tps"] / p["tps"] if p["tps"] and s["tps"] else None,
                     "identical": p["text"] == s["text"], "draft_n": s["draft_n"],
                     "draft_n_accepted": s["draft_n_accepted"]})
    c1 = counters(spec.base_url)
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    return {"rows": rows, "counters": counter_delta(c0, c1),
            "speedup_geomean": math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else None,
            "speedup_min": min(ratios, default=None), "speedup_max": max(ratios, default=None),
            "plain_tps_median": statistics.median(r["plain_tps"] for r in rows),
            "spec_tps_median": statistics.median(r["spec_tps"] for r in rows),
            "identical": sum(r["identical"] for r in rows), "tasks": len(rows),
            "n_tokens": sum(r["n_spec"] for r in rows)}


def predicted(res: dict[str, Any], ceil: dict[str, Any] | None, draft_name: str | None) -> dict[str, Any] | None:
    if not ceil:
        return None
    num = ceil["summary"]["numerics"]
    rel = ceiling.relative_for(ceil, num)
    c = res["counters"]
    if rel is None:
        return None
    r = ceiling.draft_cost_ratio(ceil, draft_name, num) if draft_name else 0.0
    pred = ceiling.predict(res["n_tokens"], c["drafts"], c["drafted"], c["accepted"], rel, r,
                           ceiling.draft_relative_for(ceil, draft_name) if draft_name else None)
    return pred.to_dict() if pred else None


def record_vram(srv: ServerProcess, profile: dict[str, Any], name: str, out: Path, memory_mib: float,
                vram: list[dict[str, Any]]) -> None:
    used = gpu_mib_by_pid().get(srv.pid or -1)
    fit = fit_prediction(profile, out, name, memory_mib)
    vram.append({"name": name, "ctx_size": profile["ctx_size"], "draft": bool(profile.get("draft_model")),
                 "measured_mib": used, "fit": fit, "load_s": getattr(srv, "load_s", None)})
    dump(out, "vram.json", vram)


def phase_serve(a: argparse.Namespace) -> None:
    out, servers = a.out, Servers(a.server, a.out)
    tasks = load_tasks(sample_every=a.sample_every)[: a.tasks]
    rates = json.loads(Path(a.rates).read_text())["rates"] if a.rates and Path(a.rates).exists() else None
    vram: list[dict[str, Any]] = json.loads((out / "vram.json").read_text()) if (out / "vram.json").exists() else []
    memory = a.memory_mib
    for tname, tpath in a.targets:
        ceil_path = out / f"ceiling-{tname}.json"
        ceil = json.loads(ceil_path.read_text()) if ceil_path.exists() else None
        result: dict[str, Any] = {"target": tname, "tasks": [t.id for t in tasks], "tokens": a.tokens, "arms": {}}
        fname = f"serve-{tname}.json"
        plain_prof = base_profile(tpath, gpu=a.gpu)
        with servers.start(f"{tname}-plain", plain_prof) as plain:
            result["plain_argv"] = servers.shell(plain_prof)
            record_vram(plain, plain_prof, f"{tname} plain c4096", out, memory, vram)
            arms: list[tuple[str, dict[str, Any], str | None]] = []
            self_prof = spec_profile(tpath, tpath, 4, None, gpu=a.gpu)
            arms.append(("self-n4 (draft = target, acceptance ~1)", self_prof, None))
            for n in a.draft_lengths:
                if rates:
                    arms.append((f"draft-n{n} synth=real-pair", spec_profile(tpath, a.draft, n, rates, gpu=a.gpu),
                                 a.draft_name))
                arms.append((f"draft-n{n} synth=1 (upper bound)", spec_profile(tpath, a.draft, n, [1.0] * n,
                                                                             gpu=a.gpu), a.draft_name))
                arms.append((f"draft-n{n} natural (random draft, lower bound)",
                             spec_profile(tpath, a.draft, n, None, gpu=a.gpu), a.draft_name))
            if a.aa:
                arms.insert(0, ("A/A (a second plain server)", dict(plain_prof), None))
            for i, (arm, prof, dname) in enumerate(arms):
                if a.arm_limit and i >= a.arm_limit:
                    break
                log(f"serve {tname}: {arm}")
                try:
                    with servers.start(f"{tname}-arm{i}", prof) as spec:
                        entry: dict[str, Any] = {"argv": servers.shell(prof), "load_s": getattr(spec, "load_s", None)}
                        if prof.get("draft_model"):
                            entry["proof"] = prove(spec.base_url)
                            if i <= 2 or "n4 synth=real" in arm:
                                record_vram(spec, prof, f"{tname} {arm.split(' ')[0]} c4096", out, memory, vram)
                        entry.update(paired(plain, spec, tasks, a.tokens))
                        entry["predicted"] = predicted(entry, ceil, dname if prof.get("draft_model") != str(tpath)
                                                       else None)
                        if prof.get("draft_model") == str(tpath) and ceil:  # self-speculation: r from c(1) = 1
                            rel = ceiling.relative_for(ceil, ceil["summary"]["numerics"])
                            c = entry["counters"]
                            p = ceiling.predict(entry["n_tokens"], c["drafts"], c["drafted"], c["accepted"],
                                                rel or {}, 1.0, rel)
                            entry["predicted"] = p.to_dict() if p else None
                except (RequestFailed, RuntimeError, httpx.HTTPError) as exc:
                    entry = {"error": str(exc)[-1500:]}
                result["arms"][arm] = entry
                dump(out, fname, result)
                sp = entry.get("speedup_geomean")
                log(f"  -> {sp and round(sp, 3)} (plain {entry.get('plain_tps_median')}, spec "
                    f"{entry.get('spec_tps_median')}, identical {entry.get('identical')}/{entry.get('tasks')}, "
                    f"accepted/drafted {entry.get('counters', {}).get('accepted')}/"
                    f"{entry.get('counters', {}).get('drafted')})")
        for ctx in a.vram_ctx:
            for with_draft in (False, True):
                prof = spec_profile(tpath, a.draft, 4, None, ctx=ctx, gpu=a.gpu) if with_draft \
                    else base_profile(tpath, ctx=ctx, gpu=a.gpu)
                name = f"{tname} {'target+draft' if with_draft else 'target'} c{ctx}"
                try:
                    with servers.start(name.replace(" ", "-"), prof) as srv:
                        request(srv.base_url, tasks[0], 8)
                        record_vram(srv, prof, name, out, memory, vram)
                except RuntimeError as exc:
                    vram.append({"name": name, "error": str(exc)[-600:]})
                    dump(out, "vram.json", vram)


def phase_acceptance(a: argparse.Namespace) -> None:
    """Per-position unconditional acceptance of the real pair at draft length n: P(position i accepted)."""
    servers = Servers(a.server, a.out)
    tasks = load_tasks(limit_per_workload=a.per_workload) if a.per_workload else \
        load_tasks(sample_every=a.sample_every)[: a.tasks]
    n = max(a.draft_lengths)
    prof = spec_profile(a.targets[0][1], a.draft, n, None, gpu=a.gpu)
    with servers.start("acceptance", prof) as srv:
        c0 = counters(srv.base_url)
        texts = []
        for t in tasks:
            r = request(srv.base_url, t, a.tokens)
            texts.append({"task": t.id, "n": r["n"], "draft_n": r["draft_n"], "accepted": r["draft_n_accepted"]})
            log(f"acceptance {t.id}: {r['draft_n_accepted']}/{r['draft_n']}")
        d = counter_delta(c0, counters(srv.base_url))
    drafts = d["drafts"]
    uncond = [d["per_pos"].get(i, 0.0) / drafts for i in range(n)] if drafts else []
    # past the measured length: the last conditional rate, held (labelled as extrapolated)
    cond_tail = uncond[-1] / uncond[-2] if len(uncond) >= 2 and uncond[-2] > 0 else 0.0
    rates = list(uncond)
    while len(rates) < 16:
        rates.append(rates[-1] * cond_tail if rates else 0.0)
    dump(a.out, "pair-acceptance.json", {
        "profile": prof, "argv": servers.shell(prof), "draft_n_max": n, "tasks": texts, "counters": d,
        "acceptance": d["accepted"] / d["drafted"] if d["drafted"] else None,
        "mean_acceptance_length": 1 + d["accepted"] / drafts if drafts else None,
        "rates": rates, "measured_positions": n, "extrapolated_from": n})
    log(f"acceptance: {d['accepted']}/{d['drafted']} drafts {drafts}; rates {[round(x, 3) for x in rates]}")


def named(value: str) -> tuple[str, Path]:
    name, _, path = value.partition("=")
    if not path:
        raise argparse.ArgumentTypeError(f"{value!r}: want NAME=PATH")
    return name, Path(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("phase", choices=("ceiling", "serve", "acceptance"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--bin-dir", type=Path, required=True, help="holds llama-server and llama-bench")
    p.add_argument("--target", dest="targets", type=named, action="append", required=True, help="NAME=GGUF")
    p.add_argument("--draft", type=named, required=True, help="NAME=GGUF")
    p.add_argument("--rates", help="pair-acceptance.json whose per-position rates feed --spec-synth-rates")
    p.add_argument("--tasks", type=int, default=6)
    p.add_argument("--sample-every", type=int, default=4)
    p.add_argument("--per-workload", type=int, help="acceptance: the first N tasks of every workload")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int)
    p.add_argument("--draft-lengths", type=int, nargs="+", default=list(DRAFT_LENGTHS))
    p.add_argument("--vram-ctx", type=int, nargs="*", default=[4096, 32768])
    p.add_argument("--memory-mib", type=float, default=81559.0, help="GPU memory the fit checks against")
    p.add_argument("--arm-limit", type=int, default=0)
    p.add_argument("--aa", action="store_true", help="add an A/A arm (plain against plain)")
    p.add_argument("--cpu", dest="gpu", action="store_false", help="no -ngl (a CPU rehearsal)")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    a.server, a.bench = a.bin_dir / "llama-server", a.bin_dir / "llama-bench"
    a.draft_name, a.draft = a.draft
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    {"ceiling": phase_ceiling, "serve": phase_serve, "acceptance": phase_acceptance}[a.phase](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
