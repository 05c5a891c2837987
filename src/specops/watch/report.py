"""The morning report's markdown, and writing it with its PNGs (nothing is written until all is in hand)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from specops.watch.plots import plot_instance, slug
from specops.watch.query import (
    TUNE_DRAFT_N_MAX,
    TUNE_LIVE,
    TUNE_SPEEDUP,
    TUNE_SPEEDUP_HIGH,
    TUNE_SPEEDUP_LOW,
    Series,
    Tuned,
    Watch,
    legend,
    shown,
)

NO_DATA = "no data"


def utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt(value: float, unit: str) -> str:
    if unit == "percentunit":
        return f"{value * 100:.1f} %"
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB"
    return f"{value:.3g}"


def _row(name: str, s: Series | None, unit: str) -> str:
    if s is None:
        return f"| {name} | {NO_DATA} | | | | |"
    vals = [v for _, v in s.points]
    cells = [fmt(vals[-1], unit), fmt(min(vals), unit), fmt(sum(vals) / len(vals), unit), fmt(max(vals), unit)]
    return f"| {s.name} | " + " | ".join(cells) + f" | {len(vals)} |"


def tuned_line(t: Tuned | None) -> str:
    """The deploy's tuned profile at the end of the window: chosen, draft length, measured speedup with its
    interval, when, reused, and what the tune's cost model predicts on the live traffic (mean over the window);
    what the series do not say is not said, and an absent live prediction is never a 0."""
    if t is None:
        return f"Tuned profile (the deploy's auto-tune): {NO_DATA}"
    f = t.figures
    parts = [t.labels.get("chosen", "?")]
    if TUNE_DRAFT_N_MAX in f:
        parts.append(f"draft length {f[TUNE_DRAFT_N_MAX]:g}")
    if TUNE_SPEEDUP in f:
        ci = (f" [{f[TUNE_SPEEDUP_LOW]:.2f}, {f[TUNE_SPEEDUP_HIGH]:.2f}]"
              if TUNE_SPEEDUP_LOW in f and TUNE_SPEEDUP_HIGH in f else " (no interval)")
        parts.append(f"measured {f[TUNE_SPEEDUP]:.2f}×{ci} vs plain decoding")
    else:
        parts.append("not measured")
    parts.append(f"tuned {t.labels.get('when', 'unknown')}")
    if t.labels.get("tasks", "unknown") != "unknown":  # a record from before the tune named its tasks says nothing
        parts.append(f"on {t.labels['tasks']} ({t.labels.get('mix', 'unknown')})")
    parts.append("reused: " + {"true": "yes", "false": "no"}.get(t.labels.get("reused", ""), "unknown"))
    line = "Tuned profile (the deploy's auto-tune): " + ", ".join(parts)
    if TUNE_LIVE in f:
        return line + f"; live traffic predicts {f[TUNE_LIVE]:.2f}× (mean over the window)"
    if TUNE_SPEEDUP in f:
        return line + ("; live traffic: no prediction (plain decoding served, no traffic, or a record without the "
                       "tune's model)")
    return line


def instance_section(watch: Watch, instance: str, png: str) -> list[str]:
    restarts = watch.restarts.get(instance)
    lines = [f"## {instance}", "",
             f"Restarts in the window: {NO_DATA if restarts is None else f'{restarts:.0f}'}", "",
             tuned_line(watch.tuned.get(instance)), "",
             f"![{instance}]({png})", "",
             "| panel / series | last | min | mean | max | points |", "|---|---|---|---|---|---|"]
    for pd in watch.panels:
        lines.append(f"| **{pd.panel.title}** | | | | | |")
        for i, target in enumerate(pd.panel.targets):
            mine = [s for s in pd.series if s.target == i and s.instance == instance]
            if not mine:
                lines.append(_row(legend(target.legend, {"instance": instance}), None, pd.panel.unit))
            keep, folded = shown(mine)
            lines.extend(_row(s.name, s, pd.panel.unit) for s in keep)
            if folded:
                lines.append(f"| {folded} more series | 0 throughout | | | | |")
    return [*lines, ""]


def alerts_section(watch: Watch) -> list[str]:
    lines = ["## Alerts that fired", ""]
    if not watch.alerts:
        return [*lines, "None in the window (`ALERTS{alertstate=\"firing\"}` has no samples).", ""]
    lines += ["| alert | instance | severity | from | to |", "|---|---|---|---|---|"]
    for a in watch.alerts:
        end = f"still firing at {utc(a.end)}" if a.ongoing else utc(a.end)
        lines.append(f"| {a.name} | {a.instance} | {a.severity} | {utc(a.start)} | {end} |")
    note = (f"Times are those of the samples at the report's step ({watch.step:g} s): "
            "an alert's true start and end are within one step of them.")
    return [*lines, "", note, ""]


def render(watch: Watch, pngs: dict[str, str], dashboard: str) -> str:
    lines = [f"# Watch report {utc(watch.start)} → {utc(watch.end)}", "",
             f"Prometheus {watch.url}, step {watch.step:g} s. Panels and PromQL from `{dashboard}` "
             "(the Grafana dashboard); a series with no samples in the window says \"no data\".", ""]
    if not watch.instances:
        lines += [f"No instance has data in this window: {NO_DATA}.", ""]
    for inst in watch.instances:
        lines += instance_section(watch, inst, pngs[inst])
    lines += alerts_section(watch)
    return "\n".join(lines)


def write(watch: Watch, out_dir: Path, stamp: str, dashboard: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    base = f"watch-{stamp}"
    pngs = {inst: f"{base}-{slug(inst)}.png" for inst in watch.instances}
    written = [plot_instance(watch, inst, out_dir / name) for inst, name in pngs.items()]
    md = out_dir / f"{base}.md"
    md.write_text(render(watch, pngs, dashboard))
    return [md, *written]
