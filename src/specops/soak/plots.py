"""PNG over time: decode tokens/s, acceptance, server RSS, errors; faults marked on every panel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FAULT_COLORS = {"kill9": "tab:red", "stop": "tab:orange", "restart": "tab:purple"}


def plot(data: dict[str, Any], path: Path) -> Path:
    """Draw from the report's JSON dict (so a fetched JSON can be re-plotted anywhere)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = data["minutes"]
    width = float(data.get("bucket_s") or 60.0)
    mx = [(m["start"] + width / 2) / 60.0 for m in minutes]
    fig, axes = plt.subplots(4, 1, figsize=(11, 10), sharex=True)
    ax_tps, ax_acc, ax_rss, ax_err = axes

    tps = [(x, m["decode_tps"]) for x, m in zip(mx, minutes, strict=True) if m["decode_tps"] is not None]
    if tps:
        per = "per minute" if width == 60.0 else f"per {width:g} s"
        ax_tps.plot(*zip(*tps, strict=True), marker="o", ms=3, label=per)
    req = [((r["end"]) / 60.0, r["predicted_n"] / r["predicted_ms"] * 1000.0) for r in data["requests"]
           if r["outcome"] != "failed" and r["predicted_ms"]]
    if req:
        ax_tps.scatter(*zip(*req, strict=True), s=4, alpha=0.3, color="gray", label="per request")
    ax_tps.set_ylabel("decode tok/s")
    if tps or req:
        ax_tps.legend(loc="lower left", fontsize=8)

    acc = [(x, m["acceptance"]) for x, m in zip(mx, minutes, strict=True) if m["acceptance"] is not None]
    if acc:
        ax_acc.plot(*zip(*acc, strict=True), marker="o", ms=3, color="tab:green")
        ax_acc.set_ylim(0, 1.05)
    else:
        ax_acc.text(0.5, 0.5, "no draft tokens reported", transform=ax_acc.transAxes, ha="center")
    ax_acc.set_ylabel("draft acceptance")

    by_pid: dict[int, list[tuple[float, float]]] = {}
    anon_by_pid: dict[int, list[tuple[float, float]]] = {}
    for t, pid, rss, *rest in data["rss_samples"]:
        by_pid.setdefault(pid, []).append((t / 60.0, rss / 2**20))
        if rest and rest[0] is not None:
            anon_by_pid.setdefault(pid, []).append((t / 60.0, rest[0] / 2**20))
    for pid, pts in by_pid.items():
        line = ax_rss.plot(*zip(*pts, strict=True), lw=1.2, label=f"PID {pid} RSS")
        if pid in anon_by_pid:
            ax_rss.plot(*zip(*anon_by_pid[pid], strict=True), lw=1.0, ls="--", color=line[0].get_color(),
                        label=f"PID {pid} anon")
    if by_pid:
        ax_rss.legend(loc="lower right", fontsize=7, ncol=4)
    else:
        ax_rss.text(0.5, 0.5, "no RSS samples (server PID unknown)", transform=ax_rss.transAxes, ha="center")
    ax_rss.set_ylabel("server memory (MB)")

    ax_err.bar(mx, [m["attempt_errors"] for m in minutes], width=0.8 * width / 60.0, color="tab:red",
               label="failed attempts")
    ax_ok = ax_err.twinx()
    ax_ok.plot(mx, [m["requests_ok"] for m in minutes], color="tab:blue", lw=1, label="requests ok")
    ax_err.set_ylim(bottom=0, top=max([1, *(m["attempt_errors"] for m in minutes)]) * 1.15)
    ax_ok.set_ylim(bottom=0)
    per = "min" if width == 60.0 else f"{width:g}s"
    ax_err.set_ylabel(f"failed attempts / {per}")
    ax_ok.set_ylabel(f"ok / {per}")
    ax_err.set_xlabel("minutes since start")

    for f in data["faults"]:
        color = FAULT_COLORS.get(f["kind"], "black")
        for ax in axes:
            ax.axvline(f["t"] / 60.0, color=color, ls="--", lw=1)
            if f.get("recovered_at") is not None:
                ax.axvspan(f["t"] / 60.0, f["recovered_at"] / 60.0, color=color, alpha=0.12)
        ax_tps.annotate(f["label"], (f["t"] / 60.0, 1.0), xycoords=("data", "axes fraction"),
                        fontsize=7, color=color, rotation=90, va="top", ha="right")
    verdict = data.get("verdict", "?").upper()
    fig.suptitle(f"soak {data['run_id']} — {verdict} — {data['config']['url']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
