"""Write the soak report: ``soak-<id>.md`` (reason for failure first), ``.json`` (everything) and ``.png``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specops.soak.runner import SoakResult

log = logging.getLogger(__name__)


def _fmt(v: Any, nd: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _title(data: dict[str, Any]) -> list[str]:
    """The verdict, why it failed, and the run's notes."""
    out: list[str] = []
    verdict = data["verdict"].upper()
    out.append(f"# Soak {data['run_id']}: {verdict}\n")
    if data["failures"]:
        out.append("**Why it failed:**\n")
        out += [f"- {reason}" for reason in data["failures"]]
        out.append("")
    for note in data.get("notes", []):
        out.append(f"> {note}\n")
    return out


def _setup(data: dict[str, Any]) -> list[str]:
    """Server, host, load, faults and retries: what was run."""
    cfg = data["config"]
    bound = []
    if cfg["duration"] is not None:
        bound.append(f"{cfg['duration']:.0f}s")
    if cfg["max_requests"] is not None:
        bound.append(f"{cfg['max_requests']} requests")
    plan = cfg["faults"]
    fault_plan = (f"{', '.join(plan['faults'])} from {plan['first']:.0f}s every {plan['interval']:.0f}s"
                  if plan["faults"] else "none")
    return [
        f"- server: `{cfg['url']}`" + (f", unit `{cfg['unit']}`" if cfg.get("unit") else ""),
        f"- host: {data['hostname']}; from {data['started_at']} to {data['ended_at']} "
        f"({data['duration_s']:.0f}s; bound: {' or '.join(bound)})",
        f"- load: concurrency {cfg['concurrency']}, max_tokens {cfg['max_tokens']}, greedy, no prompt cache; "
        f"task set {data['task_set']['tasks']} tasks ({', '.join(data['task_set']['workloads'])}), "
        f"sha256 `{data['task_set']['digest'][:12]}`",
        f"- faults: {fault_plan}",
        f"- retries: backoff {cfg['backoff']['initial']}s ×{cfg['backoff']['factor']} up to "
        f"{cfg['backoff']['max_delay']}s, give up after {cfg['backoff']['give_up_after']:.0f}s",
        "",
    ]


def _requests(data: dict[str, Any]) -> list[str]:
    s = data["summary"]
    out = [
        "## Requests\n",
        "| issued | succeeded | retried, then succeeded | failed | lost | attempts |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {s['issued']} | {s['succeeded']} | {s['retried_then_succeeded']} | {s['failed']} | {s['lost']} "
        f"| {s['attempts']} |",
        "",
    ]
    if s["failed_reasons"]:
        out.append("Failed requests by reason:\n")
        out += [f"- {n} × {reason}" for reason, n in s["failed_reasons"].items()]
        out.append("")
    if s["attempt_errors"]:
        out.append("Failed attempts by kind: " + ", ".join(f"{k} {n}" for k, n in s["attempt_errors"].items()) + "\n")
    return out


def _checks(data: dict[str, Any]) -> list[str]:
    out = ["## Checks\n", "| check | result | detail |", "|---|---|---|"]
    out += [f"| {c['name']} | {c['status'].upper()} | {c['detail']} |" for c in data["checks"]]
    out.append("")
    return out


def _faults(data: dict[str, Any]) -> list[str]:
    out = ["## Faults and recovery\n"]
    if data["faults"]:
        out += ["Time to recovery = from the fault to the end of the first successful request after it.\n",
                "| # | fault | at (s) | PID before | recovered at (s) | time to recovery (s) | detail |",
                "|---:|---|---:|---:|---:|---:|---|"]
        for i, f in enumerate(data["faults"], 1):
            detail = f["error"] or f["detail"]
            out.append(f"| {i} | {f['label']} | {f['t']:.1f} | {_fmt(f['pid_before'])} | {_fmt(f['recovered_at'])} "
                       f"| {_fmt(f['time_to_recovery'], 2)} | {detail} |")
    else:
        out.append("No faults were injected.")
    missed = data.get("faults_missed") or []
    if missed:
        out += ["", f"Promised (--fault-count {missed[0]['of']}) but not run:\n"]
        out += [f"- fault {m['index']} ({m['kind']}, due at {m['scheduled']:.1f}s): {m['why']}" for m in missed]
    out.append("")
    return out


def _buckets(data: dict[str, Any]) -> list[str]:
    """Per minute (or per bucket of another width): successes, errors, speed, acceptance, faults."""
    width = float(data.get("bucket_s") or 60.0)
    title = "Per minute" if width == 60.0 else f"Per {width:g} s"
    col = "minute" if width == 60.0 else "bucket"
    out = [f"## {title}\n", f"| {col} | ok | failed attempts | decode tok/s | acceptance | faults |",
           "|---:|---:|---:|---:|---:|---:|"]
    for m in data["minutes"]:
        out.append(f"| {m['index']} | {m['requests_ok']} | {m['attempt_errors']} | {_fmt(m['decode_tps'])} "
                   f"| {_fmt(m['acceptance'], 3)} | {m['faults'] or ''} |")
    out.append("")
    return out


def _memory(data: dict[str, Any]) -> list[str]:
    out = ["## Memory (server RSS and anonymous memory)\n"]
    out.append("RSS includes the mmapped model weights, which page in as new tokens touch the embedding table; "
               "anonymous memory (RSS minus file-backed pages: heap, KV and prompt caches) is where a leak shows, "
               "and is what the rss_growth check judges when it is known.\n")
    for title, trend in (("RSS", data["rss_trend"]), ("Anonymous memory", data.get("anon_trend"))):
        if trend is None:
            continue
        out.append(f"**{title}**\n")
        out += _trend_table(trend)
    gpu = [e["values"].get("gpu_memory_bytes") for e in (data["exporter"] or []) if e.get("values")]
    gpu = [g for g in gpu if g is not None]
    out.append(f"\nGPU memory: {max(gpu) / 2**20:.0f} MB max (exporter)." if gpu
               else "\nGPU memory: none reported (no GPU, or no exporter).")
    out.append("")
    return out


def _restarts(data: dict[str, Any]) -> list[str]:
    out = ["## Restarts\n"]
    changes = data["pid_changes"]
    out.append("PID changes: " + (", ".join(f"{c['t']:.1f}s {c['old']}→{c['new']}" for c in changes) or "none"))
    if data["nrestarts"]:
        seq = " → ".join(str(v) for _t, v in data["nrestarts"])
        out.append(f"\nsystemd NRestarts: {seq} (a manual `systemctl restart` resets it to 0)")
    out.append("")
    return out


def _exporter(data: dict[str, Any]) -> list[str]:
    if data["exporter"] is None:
        return []
    up = sum(1 for e in data["exporter"] if e["up"])
    return ["## Exporter\n", f"Answered {up}/{len(data['exporter'])} scrapes.", ""]


def _alerts(data: dict[str, Any]) -> list[str]:
    if not data.get("alerts"):
        return []
    a = data["alerts"]
    out = ["## Alert rules (Prometheus)\n", f"Queried `{a['url']}` over the run window (step {a['step']}s).", ""]
    if a.get("alerts_error"):
        out.append(f"ALERTS query failed: {a['alerts_error']}\n")
    out += ["| alert | for | condition held (s) | recorded states | would have fired |", "|---|---:|---:|---|---|"]
    out += [f"| {r['alert']} | {r['for_s']:.0f}s | {r['condition_true_s']:.0f} | "
            f"{', '.join(r['recorded_states']) or '–'} | {'YES' if r['would_fire'] else 'no'}"
            f"{' (' + r['error'] + ')' if r['error'] else ''} |" for r in a["rules"]]
    out.append("")
    return out


def _references(data: dict[str, Any]) -> list[str]:
    refs = data["references"]
    out = ["## Greedy references\n"]
    out.append(f"{len(refs['texts'])} recorded ({', '.join(refs['ids'])}), {refs['checks']} re-checks, "
               f"{len(refs['drifts'])} drifts.")
    for d in refs["drifts"][:10]:
        out.append(f"- {d['task_id']} at {d['t']:.1f}s (#{d['seq']}): first difference at char {d['position']}: "
                   f"expected `{d['expected']!r}`, got `{d['got']!r}`")
    out.append("")
    return out


_SECTIONS: tuple[Callable[[dict[str, Any]], list[str]], ...] = (
    _title, _setup, _requests, _checks, _faults, _buckets, _memory, _restarts, _exporter, _alerts, _references,
)


def render_markdown(data: dict[str, Any], png_name: str | None) -> str:
    out = [line for section in _SECTIONS for line in section(data)]
    if png_name:
        out.append(f"![tokens/s, acceptance, RSS and errors over time]({png_name})\n")
    return "\n".join(out)


def write(result: SoakResult, out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"soak-{result.run_id}"
    data = result.to_dict()
    paths = {"json": out / f"{stem}.json", "md": out / f"{stem}.md"}
    png: Path | None = out / f"{stem}.png"
    try:
        from specops.soak.plots import plot

        plot(data, png)  # type: ignore[arg-type]
        paths["png"] = png  # type: ignore[assignment]
    except ImportError as exc:  # the report must be written even without matplotlib
        data["notes"].append(f"no plot: {exc}")
        png = None
    paths["json"].write_text(json.dumps(data, indent=1, default=str) + "\n")
    paths["md"].write_text(render_markdown(data, png.name if png else None))
    return paths


def _trend_table(trend: dict[str, Any]) -> list[str]:
    if not trend["segments"]:
        return ["No samples.", ""]
    out = ["| PID | from (s) | to (s) | samples | first MB | last MB | max MB | slope MB/h |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    out += [f"| {g['pid']} | {g['start']} | {g['end']} | {g['samples']} | {g['first_mb']} | {g['last_mb']} "
            f"| {g['max_mb']} | {_fmt(g['slope_mb_per_hour'], 2)} |" for g in trend["segments"]]
    j = trend["judged"]
    if j:
        out.append(f"\nJudged: PID {j['pid']} after {trend['warmup_s']:.0f}s warm-up, "
                   f"{_fmt(j['slope_mb_per_hour'], 2)} MB/h over {j['span_s']:.0f}s.")
    out.append("")
    return out
