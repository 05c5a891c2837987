"""A bench run's fourth step: its plan, what the work dir records (a resumed run must match it) and the report
reads, and the paired, sequential design it runs."""

from __future__ import annotations

import os
import platform
import socket
import time
from pathlib import Path
from typing import Any

from specops.bench import arms as armsmod
from specops.bench.design import Design
from specops.bench.identity import IDENTITY_RULES
from specops.bench.lineup import Ceiling, Lineup
from specops.bench.resolve import Inputs
from specops.bench.settings import BenchSettings
from specops.bench.tasks import STANDARD_SET, task_set_digest


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    os_name = ""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "mem_bytes": mem,
        "os": os_name or platform.platform(),
        "kernel": platform.release(),
        "gpu": "none",
    }


def design_def(opts: BenchSettings, by_wl: dict[str, list[str]], lineup: Lineup) -> dict[str, Any]:
    """The design as the plan records it (the report replays it)."""
    return {
        "arms": lineup.spec_arms, "tasks": by_wl, "min_tasks": None if opts.exhaustive else opts.min_tasks,
        "half_width": opts.half_width, "references": lineup.refs, "exhaustive": opts.exhaustive,
        "run_anyway": lineup.run_anyway, "fpc": opts.fixed_set, "aa_precision": opts.aa_precision,
        "identity_stop": opts.rule in IDENTITY_RULES and not opts.exhaustive, "stop_on": list(opts.stop_on),
        "allow_near_ties": opts.rule == "equivalent",
        "shares": dict(opts.shares) if opts.shares else None, "whole_level": opts.whole_level,
        "reserve": list(opts.reserve),
    }


def design(opts: BenchSettings, inputs: Inputs, lineup: Lineup, by_wl: dict[str, list[str]],
           dz: dict[str, Any]) -> Design:
    """The paired, sequential design the recorded ``dz`` describes."""
    return Design(lineup.spec_arms, by_wl, reps=inputs.reps, min_tasks=dz["min_tasks"], half_width=opts.half_width,
                  seed=opts.seed, references=lineup.refs, aa_precision=opts.aa_precision, fpc=dz["fpc"],
                  identity_stop=dz["identity_stop"], stop_on=dz["stop_on"], shares=dz["shares"],
                  allow_near_ties=dz.get("allow_near_ties", False),
                  whole_level=dz["whole_level"], reserve=dz["reserve"])


def plan(opts: BenchSettings, inputs: Inputs, lineup: Lineup, dz: dict[str, Any], counts: dict[str, int],
         ceiling: Ceiling, cap: int, cap_note: str) -> dict[str, Any]:
    """The plan the work dir records (a resumed run must match it) and the report reads."""
    tasks, cfg, derived, caps, prefix = inputs.tasks, inputs.cfg, inputs.derived, inputs.caps, inputs.prefix
    reps, running, selected, cannot = inputs.reps, lineup.running, inputs.selected, lineup.cannot
    target, draft = Path(str(opts.target)), opts.draft
    return {
        "plain": opts.plain, "plain_reference": armsmod.plain_description(opts.plain),
        "task_set": STANDARD_SET if not opts.tasks else ",".join(str(p) for p in opts.tasks),
        "task_set_digest": task_set_digest(tasks), "workload_counts": counts,
        "limited": opts.limit_per_workload is not None or bool(opts.workloads), "sample_every": opts.sample_every,
        "max_tokens": opts.max_tokens, "seed": opts.seed, "reps": reps, "threads": opts.threads,
        "draft_threads": cfg.draft_threads, "ctx_size": opts.ctx_size, "target": str(opts.target),
        "target_size": target.stat().st_size, "draft": str(draft) if draft else None,
        "draft_size": Path(draft).stat().st_size if draft and Path(draft).exists() else 0,
        "derived_drafts": {q: {"path": str(p), "size": p.stat().st_size} for q, p in derived.items()},
        "build_commit": caps.commit, "compiler": caps.compiler, "llama_prefix": str(prefix.resolve()),
        "arms": [a.name for a in running], "arm_defs": [a.to_dict() for a in selected],
        "design": dz, "budget_s": cfg.budget_s, "interleave": opts.interleave, "slice_s": opts.slice,
        "recycle": opts.recycle,
        "ceiling_margin": opts.ceiling_margin,
        "ceiling_s": round(ceiling.seconds, 1), "ceiling_note": ceiling.note, "arm_ceilings": lineup.arm_ceilings,
        "pruned": {n: c.to_dict() for n, c in cannot.items()}, "capacity": cap, "capacity_note": cap_note,
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine_info(),
        "tasks": [t.to_dict() for t in tasks],
    }
