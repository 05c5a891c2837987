"""What changes for a deployment between two llama-server builds, read from their own ``--help``.

The upgrade guard (``specops capabilities diff OLD NEW``): flags removed, renamed (the new build says so in its
"the argument has been removed. use ..." line, both builds name the same environment variable, or the knob table
knows both spellings), added, spellings dropped from an option that stays, defaults that changed, speculative
types added or removed, and whether a service profile still renders for the new build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from specops.argv import FlagError, build_argv
from specops.capabilities import Capabilities, Option, parse_help, parse_options
from specops.knobs import KNOBS
from specops.profile import ProfileError, ServerProfile

_DEFAULT = re.compile(r"\(default:\s*((?:[^()]|\([^()]*\))*)\)")
_USE = re.compile(r"\buse\s+(--?[A-Za-z][\w.-]*)")


@dataclass(frozen=True)
class Renamed:
    old: tuple[str, ...]
    new: tuple[str, ...]
    how: str  # how the rename is known


@dataclass(frozen=True)
class DefaultChange:
    names: tuple[str, ...]
    old: str
    new: str


@dataclass
class CapDiff:
    removed: list[tuple[str, ...]] = field(default_factory=list)
    renamed: list[Renamed] = field(default_factory=list)
    added: list[tuple[str, ...]] = field(default_factory=list)
    spellings_dropped: list[tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)  # (option, gone)
    defaults: list[DefaultChange] = field(default_factory=list)
    spec_types_added: list[str] = field(default_factory=list)
    spec_types_removed: list[str] = field(default_factory=list)
    old_era: str = ""
    new_era: str = ""

    @property
    def empty(self) -> bool:
        return not (self.removed or self.renamed or self.added or self.spellings_dropped or self.defaults
                    or self.spec_types_added or self.spec_types_removed)

    def to_dict(self) -> dict[str, object]:
        return {
            "era": {"old": self.old_era, "new": self.new_era},
            "removed": [list(n) for n in self.removed],
            "renamed": [{"old": list(r.old), "new": list(r.new), "how": r.how} for r in self.renamed],
            "added": [list(n) for n in self.added],
            "spellings_dropped": [{"option": list(o), "gone": list(g)} for o, g in self.spellings_dropped],
            "defaults": [{"option": list(d.names), "old": d.old, "new": d.new} for d in self.defaults],
            "spec_types": {"added": self.spec_types_added, "removed": self.spec_types_removed},
        }


def default_of(option: Option) -> str | None:
    """The ``(default: ...)`` of an option's description, if it states one."""
    match = _DEFAULT.search(option.description)
    return " ".join(match.group(1).split()) if match else None


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")


def same_default(before: str, after: str) -> bool:
    """Whether two stated defaults say the same, numbers compared as numbers ("0.8" = "0.80", "1.0" = "1.00"):
    builds print the same default with another number of decimals."""
    def norm(text: str) -> str:
        return _NUMBER.sub(lambda m: repr(float(m.group(0))), text)
    return norm(before) == norm(after)


def _changed(before: str | None, after: str | None) -> bool:
    return before is not None and after is not None and not same_default(before, after)


def _live(options: list[Option]) -> list[Option]:
    return [o for o in options if not o.removed]


def _by_name(options: list[Option]) -> dict[str, Option]:
    return {name: o for o in options for name in o.names}


def _knob_rename(names: tuple[str, ...], new_by_name: dict[str, Option]) -> Option | None:
    """A knob whose spellings on one era include ``names`` and whose other era's spelling the new build has."""
    for k in KNOBS:
        for group in (k.flags, k.legacy or ()):
            if set(names) & set(group):
                for other in (k.flags, k.legacy or (), k.aliases):
                    for flag in other:
                        if flag not in names and flag in new_by_name and not new_by_name[flag].removed:
                            return new_by_name[flag]
    return None


def diff_help(old_help: str, new_help: str) -> CapDiff:
    old_opts, new_opts = parse_options(old_help), parse_options(new_help)
    new_all = _by_name(new_opts)
    new_live = _live(new_opts)
    new_by_env = {o.env: o for o in new_live if o.env}
    result = CapDiff(old_era=parse_help(old_help).spec_era, new_era=parse_help(new_help).spec_era)
    matched: set[int] = set()  # ids of new live options that continue an old one
    for old in _live(old_opts):
        same = [new_all[n] for n in old.names if n in new_all]
        live_same = [o for o in same if not o.removed]
        if live_same:
            new = live_same[0]
            matched.add(id(new))
            gone = tuple(n for n in old.names if n not in new.names)
            if gone:
                result.spellings_dropped.append((old.names, gone))
            before, after = default_of(old), default_of(new)
            if _changed(before, after):
                result.defaults.append(DefaultChange(new.names, before, after))
            continue
        target: Option | None = None
        how = ""
        removed_there = same[0] if same else None
        if removed_there is not None and (use := _USE.search(removed_there.description)):
            target, how = new_all.get(use.group(1)), f"the new build says: use {use.group(1)}"
        if target is None and old.env and old.env in new_by_env:
            target, how = new_by_env[old.env], f"same environment variable {old.env}"
        if target is None and (found := _knob_rename(old.names, new_all)) is not None:
            target, how = found, "the knob table's spellings for its era"
        if target is not None and not target.removed:
            matched.add(id(target))
            result.renamed.append(Renamed(old.names, target.names, how))
            before, after = default_of(old), default_of(target)
            if _changed(before, after):
                result.defaults.append(DefaultChange(target.names, before, after))
        else:
            result.removed.append(old.names)
    old_names = {n for o in old_opts for n in o.names}
    result.added = [o.names for o in new_live if id(o) not in matched and not set(o.names) & old_names]
    old_types, new_types = parse_help(old_help).spec_types, parse_help(new_help).spec_types
    result.spec_types_added = [t for t in new_types if t not in old_types]
    result.spec_types_removed = [t for t in old_types if t not in new_types]
    return result


def profile_renders(profile: ServerProfile, caps: Capabilities) -> tuple[bool, str]:
    """Whether ``profile`` renders to a command line for a build with ``caps``, and the line or the reason."""
    try:
        argv = build_argv(profile, caps)
    except (FlagError, ProfileError) as exc:
        return False, str(exc)
    return True, " ".join(argv[1:])


def render_text(d: CapDiff, old_label: str, new_label: str, list_added: bool = True) -> str:
    """The diff for a person, one finding per line; the added flags one per line too, or only counted
    (``list_added=False``: the deploy's upgrade guard, where a major upgrade adds hundreds)."""
    def names(n: tuple[str, ...]) -> str:
        return ", ".join(n)

    lines = [f"llama-server {old_label} -> {new_label}: flag dialect {d.old_era} -> {d.new_era}"]
    for r in d.renamed:
        lines.append(f"renamed:  {names(r.old)} -> {names(r.new)}  ({r.how})")
    for n in d.removed:
        lines.append(f"removed:  {names(n)}")
    for option, gone in d.spellings_dropped:
        stays = tuple(x for x in option if x not in gone)
        lines.append(f"spelling dropped: {names(gone)} (the option stays as {names(stays)})")
    for c in d.defaults:
        lines.append(f"default:  {names(c.names)}: {c.old} -> {c.new}")
    if list_added:
        lines.extend(f"added:    {names(n)}" for n in d.added)
    elif d.added:
        lines.append(f"added:    {len(d.added)} flags (`specops capabilities diff OLD NEW` lists them)")
    if d.spec_types_added:
        lines.append(f"speculative types added: {', '.join(d.spec_types_added)}")
    if d.spec_types_removed:
        lines.append(f"speculative types removed: {', '.join(d.spec_types_removed)}")
    if d.empty:
        lines.append("no difference in flags, defaults or speculative types")
    return "\n".join(lines) + "\n"
