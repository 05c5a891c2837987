"""What a built llama-server binary can do, read from its own ``--help`` and ``--version``.

Flags come and go between llama.cpp releases (``--draft-max`` was removed in April 2026 and now
makes the server exit 1). Everything that renders server arguments asks a :class:`Capabilities`
object, parsed from the binary that will actually run, instead of trusting a hand-written list.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specops.knobs import HELP_FLAG, VERSION_FLAG, era_of, knob

REMOVED_MARKER = "the argument has been removed"

# An option line starts at column 0 with a dash; its description starts after 2+ spaces
# (or on the next, indented line when the names are too long).
_OPTION_LINE = re.compile(r"^-")
_NAMES_END = re.compile(r"\s{2,}(?=[^\s-])")
_FLAG = re.compile(r"(?:^|[\s,])(--?[A-Za-z][\w.-]*)")
_DEFAULT_PORT = re.compile(r"port to listen \(default:\s*(\d+)\)")
# "version: 0.5.0-dev (build 0, commit 0c1e57098)" (2026) or "version: 4567 (0c1e570)" (older)
_VERSION = re.compile(r"version:\s*(\S+)\s*\((?:build\s+\S+,\s*commit\s+)?([0-9a-fA-F]{6,40})\)")
_BUILT_WITH = re.compile(r"built with (.+)")


@dataclass(frozen=True)
class Option:
    """One entry of ``--help``: all its spellings, its argument placeholder and description."""

    names: tuple[str, ...]
    arg: str
    description: str
    env: str | None = None

    @property
    def removed(self) -> bool:
        return REMOVED_MARKER in self.description


@dataclass
class Capabilities:
    """The speculative-decoding relevant facts about one llama-server binary."""

    flags: set[str] = field(default_factory=set)
    removed_flags: set[str] = field(default_factory=set)
    # flags that take no argument in this build: older builds had `-fa` as a switch, newer ones `-fa on|off|auto`
    switches: set[str] = field(default_factory=set)
    spec_types: list[str] = field(default_factory=list)
    default_port: int | None = None
    version: str | None = None
    commit: str | None = None
    compiler: str | None = None

    # ---- derived facts -------------------------------------------------------------------
    def has(self, flag: str) -> bool:
        return flag in self.flags and flag not in self.removed_flags

    @property
    def spec_era(self) -> str:
        """``spec`` for builds with ``--spec-draft-n-max`` (April 2026 on), ``legacy`` for
        builds that take ``--draft-max``, ``none`` for builds without speculative flags."""
        return era_of(self.has)

    @property
    def has_spec_type(self) -> bool:
        return self.has(knob("spec_type").flag)

    @property
    def has_metrics(self) -> bool:
        return self.has(knob("metrics").flag)

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["flags"] = sorted(self.flags)
        data["removed_flags"] = sorted(self.removed_flags)
        data["switches"] = sorted(self.switches)
        data["spec_era"] = self.spec_era
        data["has_metrics"] = self.has_metrics
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Capabilities:
        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["flags"] = set(kwargs.get("flags") or [])  # type: ignore[arg-type]
        kwargs["removed_flags"] = set(kwargs.get("removed_flags") or [])  # type: ignore[arg-type]
        kwargs["switches"] = set(kwargs.get("switches") or [])  # type: ignore[arg-type]
        kwargs["spec_types"] = list(kwargs.get("spec_types") or [])  # type: ignore[arg-type]
        return cls(**kwargs)  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: str | Path) -> Capabilities:
        return cls.from_dict(json.loads(Path(path).read_text()))


def parse_options(help_text: str) -> list[Option]:
    """Split ``llama-server --help`` output into options."""
    options: list[Option] = []
    names: tuple[str, ...] | None = None
    arg = ""
    desc: list[str] = []

    def flush() -> None:
        if names:
            text = " ".join(" ".join(desc).split())
            env_match = re.search(r"\(env:\s*([A-Z0-9_]+)\)", text)
            options.append(Option(names, arg, text, env_match.group(1) if env_match else None))

    for line in help_text.splitlines():
        if _OPTION_LINE.match(line) and not line.startswith("-----"):
            flush()
            head, _, rest = _split_names(line)
            found = tuple(_FLAG.findall(head))
            names = found or None
            arg = _placeholder(head)
            desc = [rest] if rest else []
        elif names is not None and line.startswith(" "):
            desc.append(line.strip())
        else:
            flush()
            names = None
            desc = []
    flush()
    return options


def _split_names(line: str) -> tuple[str, str, str]:
    match = _NAMES_END.search(line)
    if not match:
        return line, "", ""
    return line[: match.start()], match.group(0), line[match.end() :]


def _placeholder(head: str) -> str:
    tokens = [t for t in head.split() if not t.startswith("-")]
    return tokens[-1] if tokens else ""


def parse_help(help_text: str) -> Capabilities:
    """Parse ``--help`` text into :class:`Capabilities`."""
    caps = Capabilities()
    for opt in parse_options(help_text):
        caps.flags.update(opt.names)
        if not opt.arg:
            caps.switches.update(opt.names)
        if opt.removed:
            caps.removed_flags.update(opt.names)
        if knob("spec_type").flag in opt.names and not opt.removed:
            caps.spec_types = [t for t in opt.arg.split(",") if t]
        if knob("port").flag in opt.names:
            port = _DEFAULT_PORT.search(opt.description)
            if port:
                caps.default_port = int(port.group(1))
    return caps


def parse_version(version_text: str, caps: Capabilities) -> Capabilities:
    """Add ``--version`` facts (``version: 1 (0c1e570)`` / ``built with ...``)."""
    match = _VERSION.search(version_text)
    if match:
        caps.version = match.group(1)
        caps.commit = match.group(2)
    built = _BUILT_WITH.search(version_text)
    if built:
        caps.compiler = built.group(1).strip()
    return caps


def parse(help_text: str, version_text: str = "") -> Capabilities:
    """A build's capabilities from its ``--help`` text and (when given) its ``--version`` text."""
    return parse_version(version_text or "", parse_help(help_text))


def probe(binary: str | Path, timeout: float = 30.0) -> Capabilities:
    """Run the binary's ``--help`` and ``--version`` and parse both."""
    help_run = subprocess.run(
        [str(binary), HELP_FLAG], capture_output=True, text=True, timeout=timeout, check=False
    )
    if help_run.returncode != 0 or knob("port").flag not in help_run.stdout + help_run.stderr:
        raise RuntimeError(
            f"{binary} {HELP_FLAG} failed (exit {help_run.returncode}); is it a llama-server binary?\n"
            f"{help_run.stderr[-2000:]}"
        )
    caps = parse_help(help_run.stdout + "\n" + help_run.stderr)
    version_run = subprocess.run(
        [str(binary), VERSION_FLAG], capture_output=True, text=True, timeout=timeout, check=False
    )
    return parse_version(version_run.stdout + "\n" + version_run.stderr, caps)
