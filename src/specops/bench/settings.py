"""A bench run's settings: every choice ``specops bench``'s command line makes, as one frozen value (its defaults
are the command's; ``specops tune`` sets the fields it needs and leaves the rest)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specops.bench import arms as armsmod
from specops.bench import ceiling as ceil
from specops.bench.design import STOPS
from specops.bench.identity import DEFAULT_RULE
from specops.bench.inventory import DEFAULT_VARS_FILE
from specops.fetch import catalog
from specops.paths import cache_dir

DEFAULT_TARGET = "qwen2.5-coder-1.5b"  # the catalog's models the command defaults to
DEFAULT_DRAFT = "qwen2.5-coder-0.5b"


def default_model(name: str) -> Path | None:
    """Where ``specops fetch-model`` puts catalog model ``name`` (None: not in the catalog)."""
    try:
        return cache_dir() / "models" / catalog()[name].file
    except KeyError:
        return None


@dataclass(frozen=True)
class BenchSettings:
    """What a bench run measures and how (one field per ``specops bench`` option, same name and default; the
    ``--report-only`` and ``--apply`` options are the command's own)."""

    # models and build
    target: Path | None = None
    draft: Path | None = None
    llama_prefix: Path | None = None
    # tasks
    tasks: tuple[Path, ...] = ()
    workloads: tuple[str, ...] = ()
    limit_per_workload: int | None = None
    sample_every: int | None = None
    # arms
    arms: str = "standard"  # a comma list of arm names, or "standard"
    list_arms: bool = False  # say the arms that would run, and stop
    plain: str = armsmod.PLAIN_UNIT
    draft_n_max: tuple[int, ...] = (4,)
    exact_n_max: tuple[int, ...] = (2,)
    ngram: tuple[str, ...] = ("ngram-simple", "ngram-mod")
    p_min: tuple[float, ...] = ()
    n_min: tuple[int, ...] = ()
    quants: tuple[str, ...] = ()
    quant_n_max: int = 4
    # method
    budget: float | None = None  # minutes (None: 20, none with exhaustive)
    fixed_set: bool = False
    request_guess: float | None = None  # seconds per request, for the budget's check of the first block
    min_tasks: int = 4
    stop_on: tuple[str, ...] = STOPS  # the stops that may end an arm's workload early (specops tune: futility)
    # specops tune: each workload's share (the traffic's mix, or the task set's own shares): a workload without one
    # is not measured, the blocks follow share × spread and the stops look at the whole figure (bench.design)
    shares: tuple[tuple[str, float], ...] = ()
    whole_level: float = 0.99  # the whole figure's level for a futility stop (its faster stop: the error budget's)
    reserve: tuple[str, ...] = ()  # with shares: arms held back until a measured one is on course to clear the margin
    half_width: float = 0.05
    aa_precision: float = 0.025
    exhaustive: bool = False
    run_anyway: bool = False
    interleave: str = "slices"
    slice: float = 0.5  # seconds
    recycle: int = 8  # blocks
    reps: int | None = None
    max_tokens: int = 192
    seed: int = 42
    threads: int | None = None
    draft_threads: int | None = None
    ctx_size: int = 4096
    memory_mib: float | None = None
    synth_rates: tuple[float, ...] = ()
    # hardware ceiling
    no_ceiling: bool = False
    ceiling_margin: float = 0.05
    ceiling_depth: int = 256
    ceiling_reps: int = 3
    ceiling_k: tuple[int, ...] = ceil.KS
    # results
    work_dir: Path | None = None  # default: $SPECOPS_CACHE/bench/<run_name>
    run_name: str = "default"
    fresh: bool = False
    report: Path = Path("reports/speculative_benchmark.md")
    assets: Path = Path("reports/bench")
    reference_run: Path | None = None
    quiet: bool = False
    # recommendation
    rule: str = DEFAULT_RULE
    vars_file: Path = DEFAULT_VARS_FILE
    no_vars: bool = False

    def work(self) -> Path:
        """The work dir: results as they happen (a run resumes from it)."""
        return self.work_dir or cache_dir() / "bench" / self.run_name

    def arm_names(self) -> list[str]:
        """The arms asked for: the standard line-up of the given lengths and types, or the names listed."""
        if self.arms.strip() == "standard":
            return armsmod.standard_arm_names(
                n_max=self.draft_n_max, p_min=self.p_min, n_min=self.n_min, quants=self.quants,
                quant_n_max=self.quant_n_max, exact_n_max=self.exact_n_max, ngram=self.ngram,
            )
        return [a for a in self.arms.split(",") if a.strip()]
