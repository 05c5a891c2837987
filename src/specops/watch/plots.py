"""One PNG per instance: the report's dashboard panels over the window, alerts that fired shaded on every panel.

Same conventions as the soak's plots (:mod:`specops.soak.plots`): Agg backend, stacked panels sharing the time
axis, a "no data" note in an empty panel instead of an empty frame, dpi 90.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from specops.watch.query import Watch, shown

# targets drawn as a dashed reference line (the speed gate's figures), by panel title -> target index
REFERENCES = {"Draft acceptance vs this host's break-even": 1, "Decode speed vs plain decoding on this host": 1}
UNIT_SCALE = {"bytes": (2**20, "MiB"), "percentunit": (1.0, "ratio"), "s": (1.0, "s")}


def slug(instance: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", instance).strip("_") or "instance"


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def plot_instance(watch: Watch, instance: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    n = len(watch.panels)
    fig, axes = plt.subplots(n, 1, figsize=(11, 2.4 * n + 1), sharex=True, squeeze=False)
    alerts = [a for a in watch.alerts if a.instance in (instance, "?")]
    for ax, pd in zip(axes[:, 0], watch.panels, strict=True):
        scale, unit = UNIT_SCALE.get(pd.panel.unit, (1.0, ""))
        ref = REFERENCES.get(pd.panel.title)
        drawn = 0
        keep, folded = shown([s for s in pd.series if s.instance == instance])
        if folded:
            ax.plot([], [], ls="none", label=f"{folded} more series at 0 throughout")
        for s in keep:
            xs = [_utc(t) for t, _ in s.points]
            ys = [v / scale for _, v in s.points]
            if s.target == ref:
                ax.plot(xs, ys, ls="--", lw=1.2, color="gray", label=s.name)
            else:
                ax.plot(xs, ys, lw=1.2, marker="o" if len(xs) < 30 else None, ms=3, label=s.name)
            drawn += 1
        if drawn or folded:
            ax.legend(loc="lower left", fontsize=7, ncol=3)
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="gray")
        ax.set_title(pd.panel.title, fontsize=9, loc="left")
        ax.set_ylabel(unit, fontsize=8)
        for a in alerts:
            ax.axvspan(_utc(a.start), _utc(max(a.end, a.start + watch.step / 2)), color="tab:red", alpha=0.15)
    ax_last = axes[-1, 0]
    ax_last.set_xlim(_utc(watch.start), _utc(watch.end))
    ax_last.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M", tz=UTC))
    ax_last.set_xlabel("UTC (red: alerts firing)")
    fig.suptitle(f"{instance} — {_utc(watch.start):%Y-%m-%d %H:%M} to {_utc(watch.end):%Y-%m-%d %H:%M} UTC",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
