"""Write the saturation soak's report: ``saturation-<id>.md`` (verdict and reasons first) and ``.json``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specops.knobs import knob
from specops.saturation_verdict import at_concurrency, level_verdicts, meaning  # noqa: F401 (re-exported)
from specops.soak.saturation import ARMS, PLAIN, SPEC, SaturationResult

MB = 2**20


def _f(v: Any, nd: int = 1, scale: float = 1.0) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) or scale != 1.0:
        return f"{v / scale:.{nd}f}"
    return str(v)


def _title(data: dict[str, Any], plot_name: str | None) -> list[str]:
    """The verdict, what it means, the plot, why it failed, and the run's notes."""
    out = [f"# Saturation soak {data['run_id']}: {data['verdict'].upper()}\n", f"**What it means:** {meaning(data)}\n"]
    if plot_name:
        out.append(f"![throughput and latency against N]({plot_name})\n")
    if data["problems"]:
        out.append("**Why it failed:**\n")
        out += [f"- {p}" for p in data["problems"]]
        out.append("")
    out += [f"> {n}\n" for n in data["notes"]]
    return out


def _setup(data: dict[str, Any]) -> list[str]:
    """Host, build, load, design and faults: what was run."""
    plan, setup = data["plan"], data["setup"]
    faults = ", ".join(plan["faults"]) or "none"
    return [
        f"- host: {setup.get('hostname', '?')}, {setup.get('cpus', '?')} CPUs; from {data['started_at']} to "
        f"{data['ended_at']} ({data['duration_s'] / 60:.1f} min)",
        f"- build: `{setup.get('build', '?')}`; target `{setup.get('target', '?')}`, draft `{setup.get('draft', '?')}`"
        f", speculative arm `{setup.get('spec_args', '?')}`, plain arm `{knob('spec_type').flag} none`",
        f"- load: N clients against `{knob('parallel').flag} N` for N = "
        f"{', '.join(str(n) for n in plan['levels'])}; client i "
        f"pinned to slot i (`id_slot`); {plan['max_tokens']} tokens per request, greedy, streamed, no prompt cache",
        f"- design: both servers resident, load alternating in {plan['phase']:.0f} s phases, ABBA order, "
        f"{plan['blocks']} blocks per N ({plan['duration'] / 60:.1f} min of load per N); same tasks in the same "
        "order for both arms of a block",
        f"- faults: {faults}, every {plan['fault_every']} block(s), {plan['fault_at']:.0%} into the phase, in both "
        "arms of the block; a supervisor restarts a killed server on the same port",
        "",
    ]


def _throughput(data: dict[str, Any]) -> list[str]:
    out = [
        "## Throughput, speculative vs plain\n",
        "Tokens per second = generated tokens of successful requests / wall time under load (all slots together). "
        "Paired ratio: geometric mean of the per-block speculative/plain ratios.\n",
        "| N | speculative tok/s | plain tok/s | ratio | paired ratio [min–max] | acceptance | lost | failed |",
        "|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for lv in data["levels"]:
        s, p = lv["arms"][SPEC], lv["arms"][PLAIN]
        br = lv["block_ratios"]
        rng = f"{_f(lv['ratio_geomean'], 2)}× [{min(br):.2f}–{max(br):.2f}]" if br else "–"
        out.append(f"| {lv['level']} | {_f(s['tokens_per_s'])} | {_f(p['tokens_per_s'])} | {_f(lv['ratio'], 2)}× "
                   f"| {rng} | {_f(s['acceptance'], 3)} | {s['lost'] + p['lost']} | {s['failed'] + p['failed']} |")
    out.append("")
    return out


def _per_slot(data: dict[str, Any]) -> list[str]:
    out = ["## Per slot\n",
           "tok/s = the slot's tokens / the arm's wall time under load; decode tok/s = the server's own "
           "`predicted_n / predicted_ms` for that slot's requests; acceptance = accepted / drafted tokens of that "
           "slot's requests (`timings.draft_n_accepted / draft_n`: `/slots` has no per-slot draft counters at this "
           "commit); \"server\" = the same from llama-server's own `draft acceptance` log lines for that slot id. "
           "\"/slots busy\" = polls that saw the slot processing; \"spec\" = its `speculative` flag.\n",
           "| N | arm | slot | requests | tok/s | decode tok/s | acceptance | acceptance (server) | /slots busy "
           "| spec |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for lv in data["levels"]:
        for arm in ARMS:
            a = lv["arms"][arm]
            for sid, v in a["slots"].items():
                seen = a["slots_seen"].get(str(sid), {"processing_seen": 0, "speculative": []})
                server = a["server_acceptance"].get(str(sid), {}).get("acceptance")
                out.append(f"| {lv['level']} | {arm} | {sid} | {v['requests']} | {_f(v['tokens_per_s'], 2)} "
                           f"| {_f(v['decode_tokens_per_s'])} | {_f(v['acceptance'], 3)} | {_f(server, 3)} "
                           f"| {seen['processing_seen']} "
                           f"| {'/'.join(str(x).lower() for x in seen['speculative']) or '–'} |")
    out.append("")
    return out


def _latency(data: dict[str, Any]) -> list[str]:
    out = ["## Latency (seconds)\n",
           "TTFT = from sending to the first streamed content token, measured at the client; total = from the "
           "first attempt to the end of the successful one (retries after a fault included).\n",
           "| N | arm | requests | TTFT p50 | TTFT p95 | TTFT p99 | total p50 | total p95 | total p99 |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for lv in data["levels"]:
        for arm in ARMS:
            a = lv["arms"][arm]
            t, w = a["ttft_s"], a["total_s"]
            out.append(f"| {lv['level']} | {arm} | {a['ok']} | {_f(t['p50'], 2)} | {_f(t['p95'], 2)} "
                       f"| {_f(t['p99'], 2)} | {_f(w['p50'], 2)} | {_f(w['p95'], 2)} | {_f(w['p99'], 2)} |")
    out.append("")
    return out


def _memory(data: dict[str, Any]) -> list[str]:
    out = ["## Memory\n",
           "Per server process (both stay resident for the whole level). RSS includes the mmapped weights, "
           "shared by all slots; anonymous memory (RSS minus file-backed pages) holds the KV cache, compute buffers "
           "and prompt cache, so \"anon / slot\" is anonymous memory divided by N. \"KV / slot\" is the KV cache "
           "one slot holds (context per slot × the models' layers and KV heads, target and draft, at the cache "
           "types in use; computed from the GGUF headers as `specops fit` does: llama-server logs its own "
           "figure only at higher verbosity).\n",
           "| N | arm | RSS max MB | anon max MB | anon / slot MB | KV / slot MiB | restarts |",
           "|---:|---|---:|---:|---:|---:|---:|"]
    for lv in data["levels"]:
        for arm in ARMS:
            a = lv["arms"][arm]
            out.append(f"| {lv['level']} | {arm} | {_f(a['rss_max_bytes'], 0, MB)} | {_f(a['anon_max_bytes'], 0, MB)} "
                       f"| {_f(a['anon_per_slot_bytes'], 0, MB)} | {_f(a['kv_per_slot_bytes'], 1, MB)} "
                       f"| {a['restarts']} |")
    out.append("")
    return out


def _requests_and_faults(data: dict[str, Any]) -> list[str]:
    out = ["## Requests and faults\n",
           "| N | arm | requests | ok | retried, then ok | failed | lost |", "|---:|---|---:|---:|---:|---:|---:|"]
    for lv in data["levels"]:
        for arm in ARMS:
            a = lv["arms"][arm]
            out.append(f"| {lv['level']} | {arm} | {a['requests']} | {a['ok']} | {a['retried']} | {a['failed']} "
                       f"| {a['lost']} |")
    faults = [(lv["level"], arm, f) for lv in data["levels"] for arm in ARMS for f in lv["arms"][arm]["faults"]]
    out.append("")
    if faults:
        out += ["Time to recovery = from the fault to the end of the first successful request after it "
                "(seconds into the phase).\n",
                "| N | arm | fault | at (s) | time to recovery (s) | detail |", "|---:|---|---|---:|---:|---|"]
        out += [f"| {n} | {arm} | {f['label']} | {f['t']:.1f} | {_f(f['time_to_recovery'], 2)} "
                f"| {f['error'] or f['detail']} |" for n, arm, f in faults]
    else:
        out.append("No faults were injected.")
    out.append("")
    return out


_SECTIONS: tuple[Callable[[dict[str, Any]], list[str]], ...] = (
    _setup, _throughput, _per_slot, _latency, _memory, _requests_and_faults,
)


def render_markdown(data: dict[str, Any], plot_name: str | None = None) -> str:
    out = _title(data, plot_name)
    out += [line for section in _SECTIONS for line in section(data)]
    return "\n".join(out)


def plot(data: dict[str, Any], path: Path) -> Path:
    """Total and per-slot tokens/s and total-latency percentiles against N, speculative against plain."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = [int(lv["level"]) for lv in data["levels"]]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for arm, colour in ((SPEC, "tab:orange"), (PLAIN, "tab:blue")):
        arms = [lv["arms"][arm] for lv in data["levels"]]
        axes[0].plot(levels, [a["tokens_per_s"] for a in arms], "o-", color=colour, label=arm)
        per_slot = [a["tokens_per_s"] / n if a["tokens_per_s"] is not None else None for a, n in zip(arms, levels,
                                                                                                      strict=True)]
        axes[1].plot(levels, per_slot, "o-", color=colour, label=arm)
        for q, style in (("p50", "o-"), ("p95", "s--"), ("p99", "^:")):
            axes[2].plot(levels, [a["total_s"][q] for a in arms], style, color=colour, label=f"{arm} {q}")
    for ax, title, unit in ((axes[0], "all slots together", "tokens/s"), (axes[1], "per slot", "tokens/s"),
                            (axes[2], "request latency (total)", "seconds")):
        ax.set_title(title)
        ax.set_xlabel(f"N (clients = {knob('parallel').flag})")
        ax.set_ylabel(unit)
        ax.set_xticks(levels)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Saturation soak {data['run_id']}: speculative vs plain")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_data(data: dict[str, Any], out: Path, stem: str) -> dict[str, Path]:
    """The report from the run's data: ``<stem>.md``, ``.png`` (when matplotlib is installed) and ``.json``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"{stem}.json", "md": out / f"{stem}.md"}
    paths["json"].write_text(json.dumps(data, indent=1, default=str) + "\n")
    with contextlib.suppress(ImportError):  # matplotlib is the bench extra; the tables say everything without it
        paths["png"] = plot(data, out / f"{stem}.png")
    paths["md"].write_text(render_markdown(data, paths["png"].name if "png" in paths else None))
    return paths


def write(result: SaturationResult, out_dir: str | Path) -> dict[str, Path]:
    return write_data(result.to_dict(), Path(out_dir), f"saturation-{result.run_id}")


def main(argv: list[str] | None = None) -> int:
    """``python -m specops.soak.saturation_report reports/saturation-<id>.json``: rebuild its .md and .png."""
    import sys

    paths = [Path(a) for a in (argv if argv is not None else sys.argv[1:])]
    if not paths:
        sys.stderr.write("usage: python -m specops.soak.saturation_report reports/saturation-<id>.json ...\n")
        return 2
    for path in paths:
        done = write_data(json.loads(path.read_text()), path.parent, path.stem)
        print(" ".join(str(p) for p in done.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
