#!/usr/bin/env python3
"""Lab equipment (not shipped): ``specops fit``'s prediction beside nvidia-smi's measured use, per served profile.

Reads the ``vram.json`` of GPU runs (measure.py serve) and re-runs the fit for each profile on local copies
of the same synthetic GGUFs (the fit reads only headers, and synth_gguf.py writes identical headers for a
shape), so a change to the fit is checked against the measurements without a GPU. Writes a list of
{name, measured_mib, predicted_mib, error_pct} (error = (predicted - measured) / measured).

    python3 scripts/gpu/fitcheck.py --models DIR reports/gpu-h100/vram.json [more vram.json] -o fit-check.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from specops.fit import MIB, FitParams, Memory, estimate

FILES = {"qwen2.5-0.5b": "0.5b.gguf", "qwen2.5-1.5b": "1.5b.gguf", "qwen2.5-7b": "7b.gguf", "qwen2.5-14b": "14b.gguf"}
DRAFT = "qwen2.5-0.5b"


def profile_of(name: str) -> tuple[str, str | None, int]:
    """(target, draft or None, draft n_max) from a measure.py profile name such as 'qwen2.5-14b draft-n8 c4096'."""
    target, kind = name.split()[:2]
    if kind in ("plain", "target"):
        return target, None, 0
    if kind.startswith("self-n"):
        return target, target, int(kind.removeprefix("self-n"))
    if kind.startswith("draft-n"):
        return target, DRAFT, int(kind.removeprefix("draft-n"))
    if kind == "target+draft":
        return target, DRAFT, 4
    raise ValueError(f"unknown profile name {name!r}")


def check(entries: list[dict[str, Any]], models: Path, label: str) -> list[dict[str, Any]]:
    out = []
    gpu = Memory("GPU", 81559 * MIB, 81559 * MIB, "H100 (given)")
    for e in entries:
        if e.get("measured_mib") is None:
            continue
        target, draft, n_max = profile_of(e["name"])
        params = FitParams(ctx_size=int(e["ctx_size"]), parallel=1, flash_attn=True, cache_type_k="f16",
                           cache_type_v="q8_0", cache_ram_mib=0, draft_n_max=n_max or 3)
        rep = estimate(models / FILES[target], models / FILES[draft] if draft else None, params, gpu)
        pred = rep.needed / MIB
        # before the GPU accounting the fit counted a GPU like host RAM: every weight, 128 MiB overhead
        old = estimate(models / FILES[target], models / FILES[draft] if draft else None, params,
                       Memory("host RAM", gpu.available, gpu.total, "as before"))
        before = round(old.needed / MIB, 1)
        out.append({"name": e["name"], "run": label, "measured_mib": e["measured_mib"], "predicted_mib": round(pred, 1),
                    "error_pct": round(100 * (pred - e["measured_mib"]) / e["measured_mib"], 2),
                    "predicted_before_fix_mib": before,
                    "error_before_fix_pct": round(100 * (before - e["measured_mib"]) / e["measured_mib"], 2)
                    if before else None})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("vram", type=Path, nargs="+", help="vram.json of a run (label = its parent folder's name)")
    p.add_argument("--models", type=Path, required=True, help="holds 0.5b.gguf, 1.5b.gguf, 7b.gguf, 14b.gguf")
    p.add_argument("-o", "--out", type=Path, required=True)
    a = p.parse_args(argv)
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, float]] = set()
    for path in a.vram:
        for r in check(json.loads(path.read_text()), a.models, path.stem):
            key = (r["name"], r["measured_mib"])
            if key not in seen:
                seen.add(key)
                rows.append(r)
    a.out.write_text(json.dumps(rows, indent=1))
    worst = max(rows, key=lambda r: abs(r["error_pct"]))
    print(f"fitcheck: {len(rows)} profiles, worst {worst['name']} {worst['error_pct']:+.1f}%")
    for r in rows:
        print(f"  {r['name']:40} measured {r['measured_mib']:8.0f}  predicted {r['predicted_mib']:8.0f}  "
              f"{r['error_pct']:+6.1f}%  (before {r['error_before_fix_pct']}%)")
    return 0 if abs(worst["error_pct"]) <= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
