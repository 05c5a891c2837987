"""The kinds of speculation the tune chooses among, declared once (in the manner of the knob table,
:mod:`specops.knobs`): plain decoding, a draft model at length k, EAGLE-3 at length k, the target's own MTP head at
n-max k, the type list of that head with ngram-mod, each n-gram type, and llama.cpp's default config.

Each :class:`Kind` declares

* its **name grammar**: the candidate names (``pattern``, ``name(k)``), which are bench arm names
  (:func:`specops.bench.arms.parse_arm` builds a kind's arm from this table);
* its **argv**, through the knob table: the profile of knob values it sets (``profile``);
* whether it **needs a file**, and which (``needs``, checked against :class:`Files`);
* its **cost model's inputs** (``priced``): the target's step alone, or the target's and the draft model's;
* its **probe** (``probe``): one probe at the longest and the shortest length, whose per-position acceptance
  predicts every length of the kind (``LENGTHS``), or each candidate its own probe (``OWN``);
* what a **cheaper tie member** means (``tier`` and :func:`tie_rank`): plain decoding, then what loads nothing beside
  the target (n-gram types, llama.cpp's default), then the target's MTP head (extra layers), then a type list of it
  with ngram-mod, then what loads a draft model; within a kind the shorter draft, and llama.cpp's own default type
  first.

Every step of the tune reads this table (:func:`candidates`, :func:`probe_names`, :func:`essential`, :func:`of`,
:func:`tie_rank`, :func:`fit_spec_types`): adding a kind is one entry here plus its cost terms
(:mod:`specops.bench.costmodel`); ``tests/unit/test_kinds.py`` adds a made-up kind and follows it through every step,
and fails where a tune step names a kind by hand.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# the numerics every tune candidate runs with: the service's (flash attention on, V cache q8_0), so that identity is
# judged against a plain server of the same numerics (the bench's ``exact-`` arms)
EXACT_NUMERICS: dict[str, Any] = {"flash_attn": "on", "cache_type_v": "q8_0"}

# how a kind is priced (its cost model's inputs)
TARGET = "target"  # the target's verification step alone (llama-bench): no draft model, or one llama-bench cannot run
TARGET_DRAFT = "target+draft"  # the target's step and the draft model's (both priced by llama-bench)
# how a kind is probed
NONE, LENGTHS, OWN = "none", "lengths", "own"

PLAIN = "plain"  # the tune's name for plain decoding (its choice when nothing pays)
EAGLE3_ARCH = "eagle3"  # general.architecture of an EAGLE-3 draft GGUF (src/models/eagle3.cpp)
# the n-gram types in the order they are probed when the budget is short: llama.cpp's own default type first
NGRAM_ORDER = ("ngram-mod", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-cache")
# the n-gram types held back for the measurement in llama.cpp's per-type order (specops.tune.predict.reserve)
RESERVE_ORDER = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-cache")
ENGINE_DEFAULT_TYPES = frozenset({"ngram-mod"})  # llama.cpp's own default type (--spec-default at 0c1e57098)
# what llama.cpp's --spec-default is, per build commit it was read from: at 0c1e57098 (common/arg.cpp) it pushes
# ngram-mod with n_match 24, n_min 48, n_max 64, which are ngram-mod's own defaults (common/common.h): the same
# server as ``exact-ngram-mod``, so the tune probes and measures it once, under that name
DEFAULT_IS = {"0c1e57098": "ngram-mod"}


@dataclass(frozen=True)
class Files:
    """What the tune was given and what the build has: the kinds that can run here follow from it."""

    lengths: tuple[int, ...] = ()  # the draft lengths (n-max) asked for
    draft_arch: str | None = None  # general.architecture of --draft (None: no draft model given)
    target_mtp: bool = False  # the target carries MTP layers (<arch>.nextn_predict_layers > 0)
    spec_types: tuple[str, ...] = ()  # the build's --spec-type values (capabilities.json)
    ngram: tuple[str, ...] | None = None  # the n-gram types asked for (None: every one the build lists)
    with_default: bool = True  # llama.cpp's default config as a candidate (where the build has it)
    commit: str | None = None  # the build's commit (what --spec-default is there)
    only: frozenset[str] | None = None  # --kinds: only these kinds (None: every kind the files allow)


@dataclass(frozen=True)
class Kind:
    key: str
    grammar: str  # the candidate names, for people (``exact-n<K>``)
    # a candidate name of this kind (the tune's, ``exact-``: the service's numerics; the bench's spelling without it
    # runs llama.cpp's numerics); group 1, where there is one, is K or the type
    pattern: re.Pattern[str]
    spec_type: str | None  # llama.cpp's --spec-type (None: the name says it, the n-gram kind)
    needs: str  # the file it needs, for people ('' : nothing beside the target)
    available: Callable[[Files], bool]  # can it run with these files and this build
    priced: str  # TARGET or TARGET_DRAFT
    probe: str  # NONE, LENGTHS or OWN
    tier: int  # 0 plain, 1 nothing loaded beside the target, 2 extra layers of the target, 3 those and an n-gram
    # drafter beside them (a type list), 4 a draft model
    draft_model: bool = False  # the server loads --draft (-md)
    # named in the tune record's key where a candidate is of this kind (the kinds measured since this table; a record
    # written before, whose candidates were all of the earlier kinds, keeps its key)
    keyed: bool = False
    length_name: str = ""  # what its K is called, for people ("draft length", "MTP n-max")
    description: str = ""
    names: Callable[[Files], list[str]] = field(default=lambda f: [])  # its candidates here (``available`` checked)

    def matches(self, name: str) -> re.Match[str] | None:
        return self.pattern.match(name)

    def length(self, name: str) -> int | None:
        """K of a LENGTHS kind's candidate (None for the others)."""
        m = self.matches(name)
        return int(m.group(1)) if m and self.probe == LENGTHS else None

    def name(self, k: int) -> str:
        """The candidate of a LENGTHS kind at length ``k``."""
        if self.probe != LENGTHS:
            raise ValueError(f"{self.key} has no lengths")
        return self.grammar.replace("<K>", str(k))

    def profile(self, name: str) -> dict[str, Any]:
        """The knob values candidate ``name`` sets (its argv, rendered by the knob table)."""
        m = self.matches(name)
        if m is None:
            raise ValueError(f"{name!r} is not a {self.key} candidate ({self.grammar})")
        numerics = EXACT_NUMERICS if name.startswith("exact-") else {}
        if self.key == PLAIN:
            return {"spec_type": "none"}
        spec = self.spec_type or m.group(1)
        prof: dict[str, Any] = {"spec_type": spec, **numerics}
        if self.probe == LENGTHS:
            prof["draft_n_max"] = int(m.group(1))
        return prof


def _lengths(key: str) -> Callable[[Files], list[str]]:
    return lambda f: [of_key(key).name(k) for k in sorted(set(f.lengths))]


def _ngram_names(f: Files) -> list[str]:
    types = [t for t in NGRAM_ORDER if t in f.spec_types] if f.ngram is None else list(f.ngram)
    return [f"exact-{t}" for t in types]


def default_candidate(commit: str | None) -> str:
    """The candidate that stands for llama.cpp's own default speculative config on a build: the n-gram type it is
    known to be on that commit, else ``exact-spec-default`` itself."""
    same = DEFAULT_IS.get((commit or "")[:9])
    return f"exact-{same}" if same else "exact-spec-default"


def _default_names(f: Files) -> list[str]:
    return [default_candidate(f.commit)]


KINDS: list[Kind] = [
    Kind(PLAIN, PLAIN, re.compile(r"^plain$"), "none", "", lambda f: False, TARGET, NONE, 0,
         description="plain decoding: no speculation (the reference every ratio is taken against)"),
    Kind("draft", "exact-n<K>", re.compile(r"^(?:exact|draft)-n(\d+)$"), "draft-simple",
         "a draft model (specops tune's draft model, any architecture but eagle3)",
         lambda f: f.draft_arch not in (None, EAGLE3_ARCH), TARGET_DRAFT, LENGTHS, 4, draft_model=True,
         names=_lengths("draft"), length_name="draft length", description="a draft model drafts K tokens a round"),
    Kind("eagle3", "exact-eagle3-n<K>", re.compile(r"^(?:exact-)?eagle3-n(\d+)$"), "draft-eagle3",
         "an EAGLE-3 draft (specops tune's draft model, of architecture eagle3)",
         lambda f: f.draft_arch == EAGLE3_ARCH and "draft-eagle3" in f.spec_types, TARGET, LENGTHS, 4,
         draft_model=True, names=_lengths("eagle3"), keyed=True,
         length_name="EAGLE-3 draft length",
         description="an EAGLE-3 head over the target's hidden states drafts K tokens a round (its step is not "
                     "priced apart: llama-bench cannot run it without the target)"),
    Kind("mtp", "exact-mtp-n<K>", re.compile(r"^(?:exact-)?mtp-n(\d+)$"), "draft-mtp",
         "a target with MTP layers (<arch>.nextn_predict_layers > 0)",
         lambda f: f.target_mtp and "draft-mtp" in f.spec_types, TARGET, LENGTHS, 2, names=_lengths("mtp"), keyed=True,
         length_name="MTP n-max",
         description="the target's own multi-token-prediction head drafts, n-max K (its step is not priced apart: "
                     "llama-bench cannot run the head alone)"),
    Kind("mtp-ngram", "exact-mtp-n<K>-ngram-mod", re.compile(r"^(?:exact-)?mtp-n(\d+)-ngram-mod$"),
         "draft-mtp,ngram-mod", "a target with MTP layers",
         lambda f: f.target_mtp and {"draft-mtp", "ngram-mod"} <= set(f.spec_types)
         and (f.ngram is None or "ngram-mod" in f.ngram), TARGET, LENGTHS, 3, names=lambda f: [
             f"exact-mtp-n{k}-ngram-mod" for k in sorted(set(f.lengths))], keyed=True,
         length_name="MTP n-max (with ngram-mod)",
         description="a type list: the target's MTP head and ngram-mod both draft (spec type "
                     "draft-mtp,ngram-mod), n-max K"),
    Kind("ngram", "exact-<ngram type>", re.compile(r"^(?:exact-)?(ngram-(?:simple|map-k|map-k4v|mod|cache))$"), None,
         "", lambda f: True, TARGET, OWN, 1, names=_ngram_names,
         description="an n-gram type: drafts from the context's own n-grams, no model beside the target"),
    Kind("default", "exact-spec-default", re.compile(r"^(?:exact-)?spec-(default)$"), "default", "",
         lambda f: f.with_default, TARGET, OWN, 1, names=_default_names,
         description="llama.cpp's own default speculative config (spec type default)"),
]


class KindError(ValueError):
    """A name no kind claims, or a kind key not in the table."""


def keys() -> list[str]:
    return [k.key for k in KINDS]


def of_key(key: str) -> Kind:
    for k in KINDS:
        if k.key == key:
            return k
    raise KindError(f"unknown kind {key!r} (known: {', '.join(keys())})")


def of(name: str) -> Kind:
    """The kind of candidate ``name``."""
    for k in KINDS:
        if k.matches(name):
            return k
    raise KindError(f"{name!r} is no tune candidate (the kinds' names: {', '.join(k.grammar for k in KINDS)})")


def claims(name: str) -> bool:
    return any(k.matches(name) for k in KINDS)


def candidates(files: Files) -> list[str]:
    """Every candidate the files and the build allow, kind by kind in the table's order (plain decoding is the
    reference, never a candidate); llama.cpp's default once: where it is one of the n-gram types on this build's
    commit, that type stands for it."""
    out: list[str] = []
    for k in KINDS:
        if k.key == PLAIN or (files.only is not None and k.key not in files.only) or not k.available(files):
            continue
        out += [n for n in k.names(files) if n not in out]
    return out


def parse_only(text: str) -> frozenset[str] | None:
    """``--kinds``: a comma list of kind keys ('auto' or empty: None, every kind the files allow)."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words or words == ["auto"]:
        return None
    bad = [w for w in words if w not in keys() or w == PLAIN]
    if bad:
        raise KindError(f"--kinds: unknown kind {', '.join(bad)} (known: {', '.join(k for k in keys() if k != PLAIN)})")
    return frozenset(words)


def lengths_of(kind: Kind, names: Iterable[str]) -> list[int]:
    return sorted({n for n in (kind.length(x) for x in names if kind.matches(x)) if n is not None})


def probe_names(names: Sequence[str], own_probes: bool = True) -> list[str]:
    """What the probes run, kind by kind: each LENGTHS kind at its longest and its shortest length (the per-position
    acceptance of the longest predicts every length), each OWN kind's candidates where ``own_probes`` (a CPU build
    measures those side by side instead of probing each)."""
    out: list[str] = []
    for k in KINDS:
        mine = [n for n in names if k.matches(n)]
        if not mine:
            continue
        if k.probe == LENGTHS:
            ls = lengths_of(k, mine)
            out += [k.name(x) for x in dict.fromkeys((ls[-1], ls[0]))]
        elif k.probe == OWN and own_probes:
            out += mine
    return out


def essential(names: Sequence[str]) -> list[str]:
    """The probes run whatever the budget: each LENGTHS kind at its longest length (nothing of the kind can be
    predicted without it)."""
    return [k.name(lengths_of(k, names)[-1]) for k in KINDS
            if k.probe == LENGTHS and any(k.matches(n) for n in names)]


def longest(kind: Kind, names: Sequence[str]) -> str | None:
    ls = lengths_of(kind, names)
    return kind.name(ls[-1]) if ls else None


def tie_rank(name: str) -> tuple[int, int, int]:
    """How much a profile costs to serve, for breaking ties: the kind's tier (plain decoding, nothing loaded beside
    the target, extra layers of the target, a draft model), then the shorter draft, then llama.cpp's own default
    type first among equals (what a later llama.cpp keeps tuning for)."""
    k = of(name)
    prof = k.profile(name)
    default = 0 if prof.get("spec_type") in ENGINE_DEFAULT_TYPES else 1
    return (k.tier, int(prof.get("draft_n_max") or 0), default)


def fit_spec_types(names: Sequence[str]) -> list[tuple[str, bool, int]]:
    """What the memory fit checks for the candidates: each kind's spec type, whether it loads the draft model, and
    its longest length (0: none), one per kind present."""
    out = []
    for k in KINDS:
        mine = [n for n in names if k.matches(n)]
        if mine and k.key != PLAIN:
            spec = k.spec_type or str(k.profile(mine[0])["spec_type"])
            out.append((spec, k.draft_model, max(lengths_of(k, mine), default=0)))
    return out
