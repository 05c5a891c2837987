"""Every llama-server setting specops knows, declared once: the knob table.

One entry per setting: its name (the profile key, the ``llama_server_<name>`` role variable, the fit's
and the bench's name), type, our default (the service role's) and llama.cpp's, its flag spellings per
llama.cpp era, whether the memory fit depends on it, whether the bench tunes it, how the command line writes it
(``render``: always given, valued, a switch, a speculative setting, the extra arguments; in the table's order) and
one line of documentation. Everything else derives from this table: :func:`specops.argv.build_argv` renders it,
:func:`specops.exporter.process.parse_launch` reads a running server's command line with it,
``specops fit`` takes its options and defaults from it, the bench's inventory writer its keys, the bench's ceiling
llama.cpp's per-type draft lengths, and the role's defaults, argument specs and README settings table are generated
from it (``specops knobs --update``).

**This is the only module that spells llama-server flags** (``tests/unit/test_knobs.py`` fails when
another one does). Eras: ``spec`` is llama.cpp from April 2026 on (the pinned 0c1e57098, with
``--spec-draft-n-max``); ``legacy`` is an older build (``--draft-max``). Defaults of llama.cpp are those
of 0c1e57098's ``--help`` (``tests/fixtures/llama-server-0c1e57098/llama-server_help.txt``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SPEC = "spec"  # April 2026 on: --spec-draft-n-max, --spec-type (the pinned commit 0c1e57098)
LEGACY = "legacy"  # before April 2026: --draft-max, no --spec-type
NO_SPEC = "none"  # a build without speculative flags
ERAS = (SPEC, LEGACY)

DRAFT_TYPES = ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
# the types that draft with a separate draft model (-md). draft-mtp drafts with the target's own multi-token-prediction
# head (the pinned tree builds its draft context from the target: common/speculative.cpp, "creating MTP draft context
# against the target model"); the n-gram types draft from the text itself
DRAFT_MODEL_TYPES = ("draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark")
# ours (auto), an explicit baseline (none), llama.cpp's own config (default: --spec-default, ngram-mod at 0c1e57098):
# each stands alone, never in a list
SPEC_TYPE_WORDS = ("auto", "none", "default")
SPEC_TYPES = (*SPEC_TYPE_WORDS, *DRAFT_TYPES, *NGRAM_TYPES)
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FLASH_ATTN = ("on", "off", "auto")
SPLIT_MODES = ("none", "layer", "row", "tensor")  # --split-mode at 0c1e57098
# the settings that place the models on devices (a build that lists no device refuses them)
PLACEMENT = ("device", "draft_device", "tensor_split", "split_mode", "main_gpu")

# llama-server invocations that are not settings
HELP_FLAG = "--help"
VERSION_FLAG = "--version"
LIST_DEVICES_FLAG = "--list-devices"

# How specops.argv.build_argv writes a knob (Knob.render). The command line's order: the general settings (the first
# five kinds) in the table's order (a knob's ``argv_after`` moves it), then the speculation (the draft model and the
# type, the draft settings, the n-gram types' own spellings of any knob with ``per_spec_type``, then the speculative
# extras), then the extra arguments.
ALWAYS = "always"  # FLAG VALUE on every command line (the model, the listen address, the context shape)
VALUED = "valued"  # FLAG VALUE where the profile sets it; unset (None) leaves llama.cpp's default
SWITCH = "switch"  # a bool: its flag when true, its off flag when false, nothing when unset
SWITCH_ON = "on"  # a bool: its flag when true; false and unset write nothing
SWITCH_OFF = "off"  # a bool: its off flag when false; true and unset write nothing (llama.cpp's default is on)
SPECULATION = "speculation"  # the draft model and the type themselves: the speculation's frame (specops.argv)
DRAFT = "draft"  # a draft setting: FLAG VALUE after the type, for the draft-* types (draft-mtp alone: the ``mtp`` ones)
NGRAM = "ngram"  # no flag of its own: only the n-gram types' spellings (per_spec_type), under those types
SPECULATIVE = "speculative"  # FLAG VALUE last of the speculation, where a build with --spec-type runs a type
EXTRA = "extra"  # further arguments as given, each flag checked against the build
SWITCHES = (SWITCH, SWITCH_ON, SWITCH_OFF)
GENERAL = (ALWAYS, VALUED, *SWITCHES)
RENDERS = (*GENERAL, SPECULATION, DRAFT, NGRAM, SPECULATIVE, EXTRA)


@dataclass(frozen=True)
class Knob:
    """One llama-server setting. ``None`` as a default means "flag omitted: llama.cpp decides"."""

    name: str
    # argument_specs type: int, float, str, bool, list, raw (int or a word). Host paths are str: argument_specs'
    # `path` would expand ~ and $VARS on the controller, not on the host that reads them
    type: str
    doc: str
    flags: tuple[str, ...] = ()  # spellings at 0c1e57098, the preferred one first
    legacy: tuple[str, ...] | None = None  # spellings on legacy builds where they differ (() = none there)
    aliases: tuple[str, ...] = ()  # further spellings some build accepts: read from command lines, never written
    off_flags: tuple[str, ...] = ()  # booleans: the spellings that turn it off
    per_spec_type: tuple[tuple[str, str], ...] = ()  # (spec_type, flag): its spelling under an n-gram type
    # (spec_type, default): llama.cpp's own default of that spelling at 0c1e57098 (``--spec-ngram-mod-n-max``: 64)
    llama_per_type: tuple[tuple[str, object], ...] = ()
    value_flags: tuple[tuple[str, str], ...] = ()  # (value, flag): a value that is written as a flag of its own
    render: str = VALUED  # how build_argv writes it: one of RENDERS (above)
    if_built: bool = False  # written only where the build has the flag, silently left out elsewhere (older builds)
    mtp: bool = False  # a draft setting draft-mtp takes without a draft model (the target's own head drafts)
    # written right after that knob instead of at its own place in the table: where the unit always had it (a flag
    # that moves rewrites every host's unit, and the upgrade restarts every service)
    argv_after: str | None = None
    default: object = None  # ours: what the service role deploys
    llama_default: object = None  # llama-server's own at 0c1e57098 (None: unset, auto or the model's)
    choices: tuple[str, ...] = ()
    # the value is a comma-separated list of choices (llama.cpp's own list syntax): the role's argument specs carry
    # no choices for it (Ansible would refuse a list), the first play checks each member (specops.deploycheck)
    listed: bool = False
    fit: bool = False  # the memory fit depends on it
    bench: bool = False  # specops bench tunes it: its recommendation writes llama_server_<name>
    role: bool = True  # roles/llama_server exposes it as llama_server_<name>
    llama_bench: str | None = None  # llama-bench's spelling of the same setting
    low: float | None = None  # the smallest value llama-server takes (None: no bound); checked at preflight
    high: float | None = None  # the largest
    role_unset: object = None  # how the role writes "not set" when there is no default of ours (null, or '')
    # (backend, default) where a backend must differ from ``default`` (which every other backend takes): the role
    # writes null for such a knob and the profile takes the host's backend's value from here
    backend_defaults: tuple[tuple[str, object], ...] = ()
    # the server profile's default (specops.profile.ServerProfile): None = leave llama.cpp's; set only where a profile
    # must say something (the listen address, the context shape, the endpoints the proof reads)
    profile_default: object = None

    def __post_init__(self) -> None:
        problem = self.render_problem()
        if problem:
            raise ValueError(f"knob {self.name}: {problem}")

    def render_problem(self) -> str | None:
        """Why build_argv could not write this knob as declared, or None."""
        if self.render not in RENDERS:
            return f"render {self.render!r} is none of {', '.join(RENDERS)}"
        if (self.render in SWITCHES) != (self.type == "bool"):
            return f"a bool knob is rendered as one of {', '.join(SWITCHES)}, and only a bool knob (type {self.type})"
        if (self.render == NGRAM) != (not self.flags and bool(self.per_spec_type)):
            return "a knob with no flag of its own but the n-gram types' (per_spec_type) is rendered ngram"
        if self.render in (ALWAYS, VALUED, SWITCH, SWITCH_ON, SPECULATION, DRAFT, SPECULATIVE) and not self.flags:
            return f"render {self.render} needs its flags"
        if self.render in (SWITCH, SWITCH_OFF) and not self.off_flags:
            return f"render {self.render} needs off_flags"
        if (self.render == EXTRA) != (self.type == "list"):
            return "a list knob is rendered extra (further arguments), and only a list knob"
        if self.mtp and self.render != DRAFT:
            return "mtp marks a draft setting (render draft)"
        types = {t for t, _f in self.per_spec_type}
        stray = sorted({t for t, _v in self.llama_per_type} - types) + sorted(types - set(NGRAM_TYPES))
        return f"{', '.join(stray)}: no n-gram type it has a spelling under" if stray else None

    def spellings(self, era: str = SPEC) -> tuple[str, ...]:
        """The spellings to try, preferred first, on a build of ``era``."""
        if era == LEGACY and self.legacy is not None:
            return self.legacy
        return self.flags

    @property
    def flag(self) -> str:
        """The preferred spelling at the pinned commit."""
        return self.flags[0]

    def short(self, era: str = SPEC) -> str:
        """The short spelling (``-fa``) where there is one, else the preferred: for prose such as
        "-fa on -ctv q8_0"."""
        spellings = self.spellings(era)
        return min((f for f in spellings if not f.startswith("--")), key=len, default=spellings[0])

    @property
    def low_high(self) -> tuple[float | None, float | None]:
        return (self.low, self.high)

    def for_spec_type(self, spec_type: str) -> str | None:
        return dict(self.per_spec_type).get(spec_type)

    def llama_default_for(self, spec_type: str) -> object:
        """llama.cpp's own default of the setting under the n-gram type ``spec_type`` (its spelling there), or None."""
        return dict(self.llama_per_type).get(spec_type)

    def for_value(self, value: str) -> str | None:
        return dict(self.value_flags).get(value)

    @property
    def own_spellings(self) -> tuple[str, ...]:
        """The setting's own spellings in every era (not the n-gram types' nor value flags)."""
        return tuple(dict.fromkeys((*self.flags, *(self.legacy or ()), *self.aliases)))

    @property
    def all_spellings(self) -> tuple[str, ...]:
        """Every spelling of any era, in declaration order: what a command-line reader must know."""
        found = [*self.flags, *(self.legacy or ()), *self.aliases, *self.off_flags,
                 *(f for _t, f in self.per_spec_type), *(f for _v, f in self.value_flags)]
        return tuple(dict.fromkeys(found))

    @property
    def effective_default(self) -> object:
        """What a server deployed with our defaults runs with: ours, else llama.cpp's (on a CPU build)."""
        return self.deployed_for(None)

    def default_for(self, backend: str | None, spec_type: object = None) -> object:
        """Our default on a build of ``backend`` (cpu, cuda, vulkan, ...): its own where the table has one. Under a
        ``spec_type`` of n-gram types only, a setting they spell with a flag of their own (the draft length as
        ``--spec-ngram-mod-n-max``) keeps llama.cpp's default for that type (None): ours is a draft model's."""
        members = spec_type_members(spec_type)
        if members and all(m in NGRAM_TYPES for m in members) and any(self.for_spec_type(m) for m in members):
            return None
        return dict(self.backend_defaults).get((backend or "cpu").lower(), self.default)

    def deployed_for(self, backend: str | None) -> object:
        """What a server deployed with our defaults on ``backend`` runs with: ours there, else llama.cpp's."""
        ours = self.default_for(backend)
        return self.llama_default if ours is None else ours

    @property
    def role_var(self) -> str:
        """The service role's variable: ``llama_server_<name>`` (a few still wait for their rename)."""
        return ROLE_NAMES_PENDING.get(self.name, f"llama_server_{self.name}")


# role variables not yet called llama_server_<name> (the role side renames them; a test keeps this honest)
ROLE_NAMES_PENDING = {"model": "llama_server_target_model"}


# the n-gram types that take a lookup size N, a drafted m-gram size M and min hits, each under a flag of its own
_SIZED = ("ngram-simple", "ngram-map-k", "ngram-map-k4v")


def _ngram(kind: str) -> tuple[tuple[str, str], ...]:
    return tuple((t, f"--spec-{t}-{kind}") for t in _SIZED)


def _each_sized(default: object) -> tuple[tuple[str, object], ...]:
    """The same llama.cpp default under each of :data:`_SIZED`."""
    return tuple((t, default) for t in _SIZED)


KNOBS: tuple[Knob, ...] = (
    # ---- models --------------------------------------------------------------------------------------
    Knob("model", "str", "target model GGUF path (default: the models role's target, in llama_server_models_dir)",
         ("--model", "-m"), fit=True, llama_bench="-m", render=ALWAYS),
    Knob("draft_model", "str", "draft model GGUF path (default: the models role's draft); empty = no draft model",
         ("--spec-draft-model", "-md", "--model-draft"), fit=True, render=SPECULATION),
    # ---- speculation ---------------------------------------------------------------------------------
    Knob("spec_type", "str", "auto (draft-simple with a draft model, else none), none, default "
         "(llama.cpp's own) or a speculative type, or a comma-separated list of them (draft-mtp,ngram-mod); "
         "n-gram types and draft-mtp load no draft model", ("--spec-type",), legacy=(),
         value_flags=(("default", "--spec-default"),), default="auto", llama_default="none",
         choices=SPEC_TYPES, listed=True, bench=True, profile_default="auto", fit=True, render=SPECULATION),
    # CPU 2: byte-identical output and the cheapest verification on a 2-core CPU (reports/speculative_benchmark.md);
    # CUDA 16: a verification batch costs ~2 steps from 8 to 17 tokens on an H100, the 14B target paid 1.39x at 16
    # against 1.13x at 8 and 0.95x at 2 (reports/gpu-h100.md). Other GPU backends are not measured yet: the CPU's.
    Knob("draft_n_max", "int", "max drafted tokens per step (see reports/speculative_benchmark.md and "
         "reports/gpu-h100.md)",
         ("--spec-draft-n-max",), legacy=("--draft-max", "--draft"), aliases=("--draft-n",),
         per_spec_type=(("ngram-mod", "--spec-ngram-mod-n-max"), ("ngram-cache", "--spec-draft-n-max")),
         llama_per_type=(("ngram-mod", 64), ("ngram-cache", 3)), default=2, llama_default=3, fit=True, bench=True,
         low=0, backend_defaults=(("cuda", 16),), render=DRAFT, mtp=True),
    Knob("draft_n_min", "int", "min drafted tokens per step", ("--spec-draft-n-min",),
         legacy=("--draft-min",), aliases=("--draft-n-min",),
         per_spec_type=(("ngram-mod", "--spec-ngram-mod-n-min"),), llama_per_type=(("ngram-mod", 48),),
         llama_default=0, bench=True, low=0, render=DRAFT, mtp=True),
    Knob("draft_p_min", "float", "min draft probability (0..1; legacy builds default to 0.8)",
         ("--spec-draft-p-min", "--draft-p-min"), legacy=("--draft-p-min",), llama_default=0.0, bench=True,
         low=0, high=1, render=DRAFT, mtp=True),
    Knob("draft_p_split", "float", "draft tree split probability", ("--spec-draft-p-split", "--draft-p-split"),
         legacy=(), llama_default=0.1, low=0, high=1, render=DRAFT),
    Knob("draft_ngl", "raw", "draft layers on the GPU (a number, auto or all)",
         ("--spec-draft-ngl", "-ngld", "--gpu-layers-draft"), aliases=("--n-gpu-layers-draft",),
         llama_default="auto", fit=True, render=DRAFT),
    Knob("draft_device", "str", "the draft model's devices, comma-separated as llama-server --list-devices names "
         "them (CUDA0), or none (the draft stays on the CPU); llama.cpp: the target's devices, split like the target. "
         "specops fit, left open on more than one device: the device with the most room after the target",
         ("--spec-draft-device", "-devd", "--device-draft"), fit=True, render=DRAFT),
    Knob("draft_threads", "int", "draft model threads (llama.cpp: same as threads)",
         ("--spec-draft-threads", "-td", "--threads-draft"), bench=True, low=1, render=DRAFT),
    Knob("draft_threads_batch", "int", "draft model prompt-processing threads (llama.cpp: same as draft_threads)",
         ("--spec-draft-threads-batch", "-tbd", "--threads-batch-draft"), legacy=(), low=1, render=DRAFT),
    Knob("draft_cache_type_k", "str", "draft KV cache type K", ("--spec-draft-type-k", "-ctkd"),
         aliases=("--cache-type-k-draft",), llama_default="f16", choices=CACHE_TYPES, fit=True, render=DRAFT),
    Knob("draft_cache_type_v", "str", "draft KV cache type V", ("--spec-draft-type-v", "-ctvd"),
         aliases=("--cache-type-v-draft",), llama_default="f16", choices=CACHE_TYPES, fit=True, render=DRAFT),
    Knob("ngram_size_n", "int", "n-gram size N (ngram-mod: its match length)",
         per_spec_type=(("ngram-mod", "--spec-ngram-mod-n-match"), *_ngram("size-n")),
         llama_per_type=(("ngram-mod", 24), *_each_sized(12)), aliases=("--spec-ngram-size-n",), low=1, render=NGRAM),
    Knob("ngram_size_m", "int", "n-gram size M (drafted m-gram)", per_spec_type=_ngram("size-m"),
         llama_per_type=_each_sized(48), aliases=("--spec-ngram-size-m",), low=1, render=NGRAM),
    Knob("ngram_min_hits", "int", "n-gram min hits", per_spec_type=_ngram("min-hits"),
         llama_per_type=_each_sized(1), aliases=("--spec-ngram-min-hits",), llama_default=1, low=1, render=NGRAM),
    # ---- server --------------------------------------------------------------------------------------
    Knob("host", "str", "listen address", ("--host",), default="127.0.0.1", llama_default="127.0.0.1",
         profile_default="127.0.0.1", render=ALWAYS),
    Knob("port", "int", "listen port (always passed: newer builds moved the default)", ("--port",),
         default=8080, llama_default=8080, low=1, high=65535, profile_default=8080, render=ALWAYS),
    Knob("ctx_size", "int", "total context over all slots (0 = the model's)", ("--ctx-size", "-c"),
         default=4096, llama_default=0, fit=True, low=0, profile_default=4096, render=ALWAYS),
    Knob("parallel", "int", "server slots", ("--parallel", "-np"), default=1, llama_default=-1, fit=True, low=1,
         profile_default=1, render=ALWAYS),
    Knob("ubatch_size", "int", "physical batch size (the compute buffers scale with it)",
         ("--ubatch-size", "-ub"), llama_default=512, fit=True, role=False, low=1),
    Knob("kv_unified", "bool", "one KV buffer shared by all slots (llama.cpp: only when the slots are auto)",
         ("--kv-unified", "-kvu"), off_flags=("--no-kv-unified", "-no-kvu"), llama_default=False, fit=True,
         role=False, render=SWITCH, argv_after="cache_type_v"),
    Knob("spec_synth_rates", "raw", "benchmarking only: imposed acceptance, one unconditional rate per draft position "
         "(P0,P1,...; specops bench/tune --synth-rates)", ("--spec-synth-rates",), legacy=(), role=False,
         render=SPECULATIVE),
    Knob("ngl", "raw", "target layers on the GPU (a number, auto or all)",
         ("--gpu-layers", "-ngl", "--n-gpu-layers"), llama_default="auto", fit=True),
    # ---- placement over devices (specops fit checks each device against its own free memory) -----------------------
    # before the device lists: llama-server reads its arguments in order, and --device RPC0 names a device that
    # --rpc registers (common/arg.cpp at 0c1e57098: "invalid device" otherwise). The endpoints: specops.rpc
    Knob("rpc", "str", "comma-separated host:port of ggml-rpc-server processes whose devices this server adds "
         "(named RPC0, RPC1, ... in that order in --list-devices)", ("--rpc",)),
    Knob("device", "str", "the target's devices, comma-separated as llama-server --list-devices names them "
         "(CUDA0,CUDA1), or none (no offload); unset: every GPU the build finds", ("--device", "-dev"), fit=True),
    Knob("split_mode", "str", "how the target is split over its devices: layer (whole layers per device), row, "
         "tensor, or none (main_gpu alone)", ("--split-mode", "-sm"), llama_default="layer",
         choices=SPLIT_MODES, fit=True),
    Knob("tensor_split", "str", "the target's share of each device, comma-separated proportions, one per device "
         "(3,1); unset: proportional to each device's free memory (llama.cpp's default)",
         ("--tensor-split", "-ts"), fit=True),
    Knob("main_gpu", "int", "the device (an index into the target's devices) of split_mode none; of row's "
         "intermediate results", ("--main-gpu", "-mg"), llama_default=0, low=0, fit=True),
    Knob("threads", "int", "generation threads", ("--threads", "-t"), llama_default=-1, bench=True,
         llama_bench="-t", low=1),
    Knob("threads_batch", "int", "prompt-processing threads (llama.cpp: same as threads)",
         ("--threads-batch", "-tb"), low=1),
    Knob("flash_attn", "str", "flash attention; with cache_type_v q8_0: byte-identical greedy output on CPU",
         ("--flash-attn", "-fa"), default="on", llama_default="auto", choices=FLASH_ATTN, fit=True, bench=True,
         llama_bench="-fa"),
    Knob("cache_type_k", "str", "KV cache type K", ("--cache-type-k", "-ctk"), llama_default="f16",
         choices=CACHE_TYPES, fit=True, bench=True, llama_bench="-ctk"),
    Knob("cache_type_v", "str", "KV cache type V", ("--cache-type-v", "-ctv"), default="q8_0",
         llama_default="f16", choices=CACHE_TYPES, fit=True, bench=True, llama_bench="-ctv"),
    Knob("repack", "bool", "CPU weight repacking; false adds the off flag", ("--repack",),
         off_flags=("--no-repack", "-nr"), llama_default=True, bench=True, llama_bench="--repack", render=SWITCH_OFF),
    Knob("cache_ram_mib", "int", "MiB of host RAM the prompt cache may fill, counted by the memory fit "
         "(0 disables, -1 unbounded)", ("--cache-ram", "-cram"), default=1024, llama_default=8192, fit=True, low=-1,
         if_built=True),
    Knob("metrics", "bool", "the /metrics endpoint (always on: the exporter and the proof read it)",
         ("--metrics",), default=True, llama_default=False, role=False, profile_default=True, render=SWITCH_ON),
    Knob("slots", "bool", "the /slots endpoint, where the build has the flag", ("--slots",),
         off_flags=("--no-slots",), default=True, llama_default=True, role=False, profile_default=True,
         render=SWITCH_ON, if_built=True),
    Knob("reuse_port", "bool", "SO_REUSEPORT on the listening socket, where the build has the flag: a restart "
         "then holds new requests from its first moment (the drain listens beside the server) and waits only for "
         "those in flight; false: it waits for a moment with every slot idle first, which under steady traffic may "
         "take its whole llama_server_drain_timeout and then cut", ("--reuse-port",), default=True,
         llama_default=False, render=SWITCH_ON, if_built=True),
    Knob("alias", "str", "model name in the API", ("--alias", "-a")),
    Knob("api_key_file", "str", "API key file on the host: absolute, owned by root, not readable by group or "
         "others (preflight refuses anything else with the chown/chmod to run); the unit hands it over with "
         "LoadCredential=, so it stays root-only; read by the probes too, never logged",
         ("--api-key-file",), role_unset=""),
    Knob("jinja", "bool", "adds the jinja flag when true (llama.cpp enables jinja by default here)",
         ("--jinja",), off_flags=("--no-jinja",), llama_default=True, role=False, profile_default=False,
         render=SWITCH_ON),
    Knob("extra_args", "list", "further arguments; each flag must exist in the build (removed or unknown "
         "ones fail preflight)", default=(), profile_default=(), render=EXTRA),
)

_BY_NAME = {k.name: k for k in KNOBS}


def knob(name: str) -> Knob:
    """The knob called ``name``; a KeyError that lists the known names otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no llama-server knob {name!r}; known: {', '.join(_BY_NAME)}") from None


def spec_type_members(spec_type: object) -> tuple[str, ...]:
    """The members of a spec type as ``--spec-type`` takes it, a comma-separated list: ``"draft-mtp, ngram-mod"`` ->
    ``("draft-mtp", "ngram-mod")`` (blanks around a member dropped: llama-server would not)."""
    return tuple(m.strip() for m in ("" if spec_type is None else str(spec_type)).split(",") if m.strip())


def spec_type_problem(spec_type: object) -> str | None:
    """Why ``spec_type`` is no spec type (text to follow the value), or None: each member one of :data:`SPEC_TYPES`,
    auto/none/default only alone, no member twice."""
    members = spec_type_members(spec_type)
    if not isinstance(spec_type, str) or not members:
        return f"not one of {', '.join(SPEC_TYPES)}, nor a comma-separated list of speculative types"
    unknown = [m for m in members if m not in SPEC_TYPES]
    if unknown:
        return (f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not one of {', '.join(SPEC_TYPES)}"
                + (" (a list takes the speculative types only)" if len(members) > 1 else ""))
    alone = [m for m in members if m in SPEC_TYPE_WORDS]
    if alone and len(members) > 1:
        return (f"{alone[0]} stands alone, not in a list; list speculative types only "
                f"({', '.join(DRAFT_TYPES + NGRAM_TYPES)})")
    twice = sorted({m for m in members if members.count(m) > 1})
    if twice:
        return f"{', '.join(twice)} listed twice; name each type once"
    return None


def uses_draft_model(spec_type: object) -> bool:
    """Does a server of ``spec_type`` (one type or a comma-separated list) load a separate draft model (``-md``)?
    ``auto`` does (draft-simple, when one is given), and so does a list with a member of :data:`DRAFT_MODEL_TYPES`;
    ``none``, ``default`` (``--spec-default``: ngram-mod at 0c1e57098), the n-gram types and draft-mtp (the target's
    own MTP head) do not. The one rule for the models role (which draft to fetch, check and install), the service
    role (whether the unit gets the draft), the first play's refusals and ``specops fit``."""
    members = spec_type_members(spec_type)
    return members == ("auto",) or any(m in DRAFT_MODEL_TYPES for m in members)


def ranges() -> dict[str, tuple[float | None, float | None]]:
    """(low, high) of every knob with a bound, by knob name: the preflight's and the profile's range checks."""
    return {k.name: (k.low, k.high) for k in KNOBS if k.low is not None or k.high is not None}


def argv_order(kinds: tuple[str, ...] = RENDERS) -> tuple[Knob, ...]:
    """The knobs rendered as one of ``kinds``, in the order specops.argv writes them: the table's, a knob with
    ``argv_after`` moved to right after the one it names."""
    placed = [k for k in KNOBS if k.argv_after is None]
    for k in (k for k in KNOBS if k.argv_after is not None):
        names = [p.name for p in placed]
        if k.argv_after not in names:
            raise KeyError(f"knob {k.name}: argv_after {k.argv_after!r} is no knob placed before it")
        placed.insert(names.index(k.argv_after) + 1, k)
    return tuple(k for k in placed if k.render in kinds)


def fit_knobs() -> tuple[Knob, ...]:
    return tuple(k for k in KNOBS if k.fit)


def bench_knobs() -> tuple[Knob, ...]:
    return tuple(k for k in KNOBS if k.bench)


def era_of(has: Callable[[str], bool]) -> str:
    """``spec``, ``legacy`` or ``none`` for a build whose flag test is ``has``."""
    n_max = knob("draft_n_max")
    if has(n_max.flag):
        return SPEC
    if has(n_max.spellings(LEGACY)[0]):
        return LEGACY
    return NO_SPEC


def spell(era: str = SPEC, **settings: object) -> str:
    """Settings as llama-server would be given them, shortest spellings: ``spell(flash_attn="on")`` ->
    ``-fa on``; ``True`` gives the bare flag, ``False`` the off flag, a value flag stands alone."""
    words: list[str] = []
    for name, value in settings.items():
        k = knob(name)
        if value is False and k.off_flags:
            words.append(k.off_flags[0])
        elif isinstance(value, str) and k.for_value(value):
            words.append(str(k.for_value(value)))
        elif value is True:
            words.append(k.spellings(era)[0])
        else:
            words += [k.short(era), str(value)]
    return " ".join(words)


def markdown_table() -> str:
    """The role README's settings table (between the ``knobs`` markers)."""
    def cell(value: object) -> str:
        if value is None:
            return "—"
        if isinstance(value, bool):
            return f"`{str(value).lower()}`"
        if isinstance(value, tuple):
            return f"`{list(value)}`"
        return f"`{value}`"

    def default_cell(k: Knob) -> str:
        each = "".join(f", {b}: {cell(v)}" for b, v in k.backend_defaults)
        return cell(k.default) + (f" (per backend{each})" if each else "")

    lines = [
        "| variable | default | llama.cpp | flag (0c1e57098 / legacy) | fit | bench | meaning |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for k in KNOBS:
        name = f"`{k.role_var}`" if k.role else f"`{k.name}` (profile only)"
        spec = ", ".join(f"`{f}`" for f in k.flags) or ", ".join(
            f"`{f}` ({t})" for t, f in k.per_spec_type) or "—"
        if k.off_flags:
            spec += " (off: " + ", ".join(f"`{f}`" for f in k.off_flags) + ")"
        if k.legacy is not None and k.legacy != k.flags:
            spec += " / " + (", ".join(f"`{f}`" for f in k.legacy) or "none")
        lines.append(f"| {name} | {default_cell(k)} | {cell(k.llama_default)} | {spec} | "
                     f"{'yes' if k.fit else ''} | {'yes' if k.bench else ''} | {k.doc} |")
    return "\n".join(lines) + "\n"
