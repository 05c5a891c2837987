"""The bench report's PNG plots (matplotlib, Agg): the speedups with their intervals, the per-position acceptance,
the hardware ceiling; none where matplotlib is not installed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specops.bench.analysis import ALL, ArmWorkload
from specops.bench.arms import AA


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or None where matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plots(
    results: Mapping[str, Mapping[str, ArmWorkload]],
    arms: Sequence[str],
    workloads: list[str],
    ceiling: Mapping[str, Any] | None,
    arm_ceilings: Mapping[str, Mapping[str, Any]],
    out_dir: Path,
) -> list[Path]:
    """The report's PNG plots; none where matplotlib is not installed (the tune on a deployed host measures with
    the bench but ships without it: its result is the JSON, not the pictures)."""
    plt = _pyplot()
    if plt is None:
        return []

    out_dir.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []

    # 1. speedup per arm and workload with its interval; the A/A check first
    shown = [a for a in [AA, *arms] if a in results]
    cols = [*workloads, ALL]
    fig, axes = plt.subplots(1, len(cols), figsize=(3.2 * len(cols), 0.45 * len(shown) + 1.6), sharey=True)
    for ax, wl in zip(list(getattr(axes, "flat", [axes])), cols, strict=False):
        for y, arm in enumerate(shown):
            aw = results.get(arm, {}).get(wl)
            if not aw or not aw.speedup:
                continue
            iv = aw.speedup
            lo = iv.estimate - (iv.low if iv.low is not None else iv.estimate)
            hi = (iv.high if iv.high is not None else iv.estimate) - iv.estimate
            color = "grey" if arm == AA else ("tab:red" if aw.conclusion == "slower" else
                                             "tab:green" if aw.conclusion == "faster" else "tab:blue")
            ax.errorbar([iv.estimate], [y], xerr=[[lo], [hi]], fmt="o", color=color, capsize=3)
        ax.axvline(1.0, color="black", lw=1)
        ax.set_title(wl)
        ax.set_xlabel("speedup vs baseline")
    first = next(iter(getattr(axes, "flat", [axes])))
    first.set_yticks(range(len(shown)))
    first.set_yticklabels(shown, fontsize=8)
    first.invert_yaxis()
    fig.suptitle("Decode speed against baseline, paired inside blocks (95% intervals; grey: A/A check)")
    made.append(_save(fig, out_dir / "speedup_by_workload.png"))

    # 2. per-position acceptance (unconditional: accepted at position i / drafts)
    lines = [(a, aw) for a in arms if (aw := results.get(a, {}).get(ALL)) and aw.drafts and aw.per_pos]
    if lines:
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, aw in lines:
            pos = sorted(aw.per_pos, key=int)
            ax.plot([int(x) + 1 for x in pos], [aw.per_pos[x] / aw.drafts for x in pos], marker=".", label=name)
        ax.set_xlabel("draft position")
        ax.set_ylabel("share of drafts accepted up to here")
        ax.set_ylim(0, 1.05)
        ax.set_xscale("log", base=2)
        ax.set_title("Per-position acceptance (all tasks)")
        ax.legend(fontsize=6, ncol=2)
        made.append(_save(fig, out_dir / "acceptance_per_position.png"))

    # 3. the hardware ceiling and each arm's best case
    if ceiling and ceiling.get("target"):
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        for num, t in ceiling["target"].items():
            rel = {int(k): float(v) for k, v in t["relative"].items()}
            ks = sorted(rel)
            a1.plot(ks, [rel[k] for k in ks], marker=".", label=num)
        a1.plot(ks, ks, color="grey", ls=":", label="linear (no batching gain)")
        a1.axhline(1, color="black", lw=1)
        a1.set_xlabel("tokens verified in one batch (k)")
        a1.set_ylabel("cost in decode steps c(k)")
        a1.legend(fontsize=6)
        names = list(arm_ceilings)
        best = [float(arm_ceilings[n]["best"]) for n in names]
        a2.barh(range(len(names)), best, color=["tab:red" if b < 1 else "tab:blue" for b in best])
        a2.set_yticks(range(len(names)))
        a2.set_yticklabels(names, fontsize=7)
        a2.invert_yaxis()
        a2.axvline(1, color="black", lw=1)
        a2.set_xlabel("speedup at perfect acceptance (best draft length)")
        fig.suptitle("Hardware ceiling (llama-bench): what each arm could gain at best on this host")
        made.append(_save(fig, out_dir / "hardware_ceiling.png"))
    return made
