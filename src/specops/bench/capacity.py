"""A bench run's third step: how many of its servers fit side by side in memory (the paired design needs the
baseline, its A/A twin and one arm at least)."""

from __future__ import annotations

from pathlib import Path

import psutil

from specops.bench import ceiling as ceil
from specops.bench.arms import Arm
from specops.bench.lineup import Lineup
from specops.bench.runner import BenchConfig, BenchError, Progress
from specops.bench.voice import Stop
from specops.fit import FitError, FitParams, Memory, estimate, measure_memory
from specops.ggufmeta import GGUFError

MIN_SERVERS = 3  # baseline, its A/A twin, one arm


def capacity(cfg: BenchConfig, arms: list[Arm], memory_mib: float | None = None) -> tuple[int, str]:
    """How many of the servers fit side by side (the memory fit of each, shared model pages counted once);
    ``memory_mib``: the memory they may use (default: what the host, or the GPU of a CUDA/ROCm build, has)."""
    if cfg.gpu:  # every server holds its own copy of the weights on the GPU
        try:
            memory = measure_memory(cfg.backend, memory_mib=memory_mib)
        except FitError as exc:
            raise BenchError(f"GPU memory: {exc}") from exc
    else:
        vm = psutil.virtual_memory()
        memory = Memory("host RAM", int(memory_mib * 2**20) if memory_mib else int(vm.available),
                        int(vm.total), "given" if memory_mib else "psutil (available)")
    avail = memory.available
    needs: list[int] = []
    files: dict[str, int] = {}
    for arm in arms:
        prof = cfg.profile_for(arm)
        draft = cfg.draft_for(arm)
        params = FitParams(ctx_size=cfg.ctx_size, cache_type_k=prof.cache_type_k or "f16",
                           cache_type_v=prof.cache_type_v or "f16", flash_attn=prof.flash_attn != "off",
                           draft_n_max=prof.draft_n_max or ceil.DEFAULT_DRAFT_N_MAX)
        try:
            rep = estimate(cfg.target, draft, params, memory)
        except (FitError, GGUFError) as exc:
            raise BenchError(f"memory fit for {arm.name}: {exc}") from exc
        needs.append(rep.needed)  # its weights stand for its private (repacked) copy
        for path in (cfg.target, draft):
            if path is not None and not cfg.gpu:
                files[str(path)] = Path(path).stat().st_size  # page cache, shared by all servers
    room = avail - sum(files.values()) - max(512 * 2**20, avail // 10)
    n, used = 0, 0
    for need in sorted(needs, reverse=True):  # the largest first: a bound that holds for any order
        if used + need > room:
            break
        used, n = used + need, n + 1
    per = max(needs) / 2**20
    note = (f"memory fit: {n} of {len(arms)} servers fit side by side in {avail / 2**30:.1f} GiB of {memory.kind} "
            f"(largest {per:,.0f} MiB each, model files {sum(files.values()) / 2**30:.1f} GiB shared)")
    return n, note


def fit_servers(cfg: BenchConfig, lineup: Lineup, memory_mib: float | None, progress: Progress) -> tuple[int, str]:
    """How many servers run side by side (set as ``cfg.capacity``); too few for the paired design ends the run."""
    try:
        cap, cap_note = capacity(cfg, lineup.running, memory_mib)
    except BenchError as exc:
        raise Stop(2, str(exc)) from None
    if lineup.spec_arms and cap < MIN_SERVERS:
        raise Stop(2, f"{cap_note}: the paired design needs at least {MIN_SERVERS} (baseline, its A/A twin, one "
                   "arm). Free memory, use smaller models or a smaller --ctx-size")
    cfg.capacity = cap
    if cap < len(lineup.running):
        cap_note += "; the others wait for room (fewer run at once)"
        progress.note(cap_note)
    return cap, cap_note
