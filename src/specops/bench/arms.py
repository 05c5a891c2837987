"""Bench arms: named server settings (or the reference CLI) to compare against the baseline.

An arm is *what differs* from the common base profile (target model, context, threads): profile
keys of :class:`specops.profile.ServerProfile`, optional environment variables, and which draft
model it uses. Flags are never spelled here; :func:`specops.argv.build_argv` renders the profile.

Names are also a small grammar so users can ask for arms not in the standard list:

``draft-n<K>``            draft model, ``draft_n_max`` K
``draft-n<K>-p<P>``       … and ``draft_p_min`` P (e.g. ``draft-n8-p0.8``)
``draft-n<K>-nmin<M>``    … and ``draft_n_min`` M
``draft-<type>-n<K>``     a draft re-quantised to TYPE with the built llama-quantize (``draft-q4_0-n4``)
``exact-n<K>``            the exact profile (``-fa on -ctv q8_0``) with draft n-max K
``exact-nr-n<K>``         exact + ``--no-repack`` + ``GGML_CPU_TILED_MM=0``
``ngram-<type>``          n-gram speculation without a draft model (llama.cpp's defaults for it)
``ngram-mod-n<K>``        ngram-mod drafting at most K tokens (its default is 48..64)
``ngram-simple-m<M>``     ngram-simple / ngram-map-k with an M-token draft (default 48)
``exact-ngram-…``         any of the two above with the exact profile's numerics
``exact-<type>``          an n-gram type or ``spec-default`` (no draft model) with the exact profile's numerics
``exact-eagle3-n<K>``     an EAGLE-3 draft (the draft model given, architecture eagle3) drafting K tokens
                          (and any other candidate kind of :mod:`specops.kinds` the grammar here does not spell)
``mtp-n<K>``              the target's own MTP head drafts (``draft-mtp``, no draft model), draft n-max K; the
                          target's GGUF must carry ``<arch>.nextn_predict_layers``; ``exact-mtp-n<K>`` with the exact
                          profile's numerics
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from specops import kinds
from specops.knobs import LEGACY, knob, spell
from specops.profile import NGRAM_TYPES

BASELINE = "baseline"
AA = "baseline-again"
EXACT_CACHE = kinds.EXACT_NUMERICS
NO_TILED_ENV = {"GGML_CPU_TILED_MM": "0"}
# which plain decoding every ratio is taken against: the unit's (spec_type none with the service role's numerics,
# the default) or llama.cpp's defaults (the bench's older baseline; never a decision's denominator in the tune)
PLAIN_UNIT, PLAIN_DEFAULTS = "unit", "defaults"
NUMERICS_KNOBS = ("flash_attn", "cache_type_k", "cache_type_v")
DEFAULT_QUANTS = ("Q4_0", "Q3_K_M", "IQ4_XS")


class ArmError(ValueError):
    """An arm name or option the bench does not understand."""


@dataclass(frozen=True)
class Arm:
    """One bench arm.

    ``draft``: ``None`` (no draft), ``"draft"`` (the draft
    model given to the bench) or a llama-quantize type such as ``"Q4_0"`` (a derived draft).
    ``reference``: the arm whose output this arm must reproduce byte for byte (a non-speculative run
    with the same numerics settings). ``family`` groups arms in tables and plots.
    """

    name: str
    description: str
    profile: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    draft: str | None = None
    reference: str = BASELINE
    family: str = "draft"

    @property
    def speculative(self) -> bool:
        return self.profile.get("spec_type", "auto") != "none"

    @property
    def is_reference(self) -> bool:
        """A non-speculative arm (baseline or an exact baseline)."""
        return self.profile.get("spec_type") == "none"

    @property
    def n_max(self) -> int | None:
        value = self.profile.get("draft_n_max")
        return int(value) if value is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "profile": dict(self.profile),
            "env": dict(self.env),
            "draft": self.draft,
            "reference": self.reference,
            "family": self.family,
        }


def _none(name: str, description: str, family: str, reference: str, **profile: Any) -> Arm:
    return Arm(name, description, {"spec_type": "none", **profile}, family=family, reference=reference)


_DRAFT = re.compile(r"^draft-n(\d+)(?:-p(0(?:\.\d+)?|1(?:\.0+)?))?(?:-nmin(\d+))?$")
_QUANT = re.compile(r"^draft-(i?q\d[a-z0-9_]*)-n(\d+)$", re.IGNORECASE)
_EXACT = re.compile(r"^exact-(nr-)?n(\d+)$")
_MTP = re.compile(r"^(exact-)?mtp-n(\d+)$")
_NGRAM = re.compile(r"^(exact-)?(ngram-mod)-n(\d+)$|^(exact-)?(ngram-simple|ngram-map-k|ngram-map-k4v)-m(\d+)$")


def parse_arm(name: str) -> Arm:
    """Build an arm from its name (fixed names and the grammar in the module docstring)."""
    fixed = _fixed_arms()
    if name in fixed:
        return fixed[name]
    plain = fixed.get(name.removeprefix("exact-"))
    if name.startswith("exact-") and plain is not None and plain.draft is None and plain.speculative:
        return Arm(name, f"exact profile ({spell(**EXACT_CACHE)}), {plain.description}",
                   {**plain.profile, **EXACT_CACHE}, reference="exact-baseline", family="exact")
    m = _DRAFT.match(name)
    if m:
        k, p, nmin = int(m.group(1)), m.group(2), m.group(3)
        prof: dict[str, Any] = {"spec_type": "draft-simple", "draft_n_max": k}
        desc = f"draft model, draft n-max {k}"
        if p is not None:
            prof["draft_p_min"] = float(p)
            desc += f", p-min {float(p):g}"
        if nmin is not None:
            prof["draft_n_min"] = int(nmin)
            desc += f", n-min {int(nmin)}"
        return Arm(name, desc, prof, draft="draft", family="draft")
    m = _QUANT.match(name)
    if m:
        qtype, k = m.group(1).upper(), int(m.group(2))
        return Arm(
            name,
            f"draft re-quantised to {qtype} with llama-quantize, draft n-max {k}",
            {"spec_type": "draft-simple", "draft_n_max": k},
            draft=qtype,
            family="quant",
        )
    m = _MTP.match(name)
    if m:
        return _mtp_arm(name, m)
    m = _NGRAM.match(name)
    if m:
        return _ngram_arm(name, m)
    m = _EXACT.match(name)
    if m:
        nr, k = bool(m.group(1)), int(m.group(2))
        if nr:
            return Arm(
                name,
                f"exact profile + {spell(repack=False)} + GGML_CPU_TILED_MM=0, draft n-max {k}",
                {"spec_type": "draft-simple", "draft_n_max": k, "repack": False, **EXACT_CACHE},
                env=dict(NO_TILED_ENV),
                draft="draft",
                reference="exact-nr-baseline",
                family="exact",
            )
        return Arm(
            name,
            f"exact profile ({spell(**EXACT_CACHE)}), draft n-max {k}",
            {"spec_type": "draft-simple", "draft_n_max": k, **EXACT_CACHE},
            draft="draft",
            reference="exact-baseline",
            family="exact",
        )
    arm = _kind_arm(name)
    if arm is not None:
        return arm
    raise ArmError(
        f"unknown arm {name!r}. Known arms: {', '.join(sorted(fixed))}; "
        "or the patterns draft-n<K>[-p<P>][-nmin<M>], q<TYPE>-n<K>, exact-n<K>, exact-nr-n<K>, [exact-]mtp-n<K>"
    )


def _ngram_arm(name: str, m: re.Match[str]) -> Arm:
    exact = bool(m.group(1) or m.group(4))
    if m.group(2):
        k = int(m.group(3))
        prof = {"spec_type": "ngram-mod", "draft_n_max": k, "draft_n_min": 1}
        desc = f"n-gram speculation ngram-mod, at most {k} tokens per draft (n-min 1)"
    else:
        k = int(m.group(6))
        prof = {"spec_type": m.group(5), "ngram_size_m": k}
        desc = f"n-gram speculation {m.group(5)}, draft m-gram of {k} tokens"
    if exact:
        return Arm(
            name,
            f"exact profile ({spell(**EXACT_CACHE)}), {desc}",
            {**prof, **EXACT_CACHE},
            reference="exact-baseline",
            family="exact",
        )
    return Arm(name, desc, prof, family="ngram")


def _kind_arm(name: str) -> Arm | None:
    """A tune candidate of a kind (:mod:`specops.kinds`) the grammar above does not spell (``exact-eagle3-n<K>``)."""
    kind = next((k for k in kinds.KINDS if k.key != kinds.PLAIN and k.matches(name)), None)
    if kind is None:
        return None
    k = kind.length(name)
    return Arm(name, f"exact profile ({spell(**EXACT_CACHE)}), {kind.description}" + (f"; K = {k}" if k else ""),
               kind.profile(name), draft="draft" if kind.draft_model else None, reference="exact-baseline",
               family="exact")


def _mtp_arm(name: str, m: re.Match[str]) -> Arm:
    k = int(m.group(2))
    prof = {"spec_type": "draft-mtp", "draft_n_max": k}
    desc = f"the target's MTP head drafts ({spell(spec_type='draft-mtp')}), draft n-max {k}"
    if m.group(1):
        return Arm(name, f"exact profile ({spell(**EXACT_CACHE)}), {desc}", {**prof, **EXACT_CACHE},
                   reference="exact-baseline", family="exact")
    return Arm(name, desc, prof, family="mtp")


def _fixed_arms() -> dict[str, Arm]:
    arms = [
        _none(BASELINE, f"no speculation ({spell(spec_type='none')})", "baseline", BASELINE),
        _none(AA, "a second baseline server, loaded beside the first: the A/A check (and determinism)", "baseline",
              BASELINE),
        Arm(
            "draft-plain",
            "draft model with llama.cpp's own draft limits (no n-max/n-min/p-min given)",
            {"spec_type": "draft-simple"},
            draft="draft",
            family="default",
        ),
        Arm(
            "spec-default",
            f"llama.cpp's {spell(spec_type='default')} (its default speculative config, no draft model)",
            {"spec_type": "default"},
            family="default",
        ),
        Arm(
            "seeds",
            f"the seeds' setting {spell(LEGACY, draft_n_max=8, draft_n_min=1)}, translated to draft n-max 8 / n-min 1",
            {"spec_type": "draft-simple", "draft_n_max": 8, "draft_n_min": 1},
            draft="draft",
            family="draft",
        ),
        _none(
            "exact-baseline",
            f"no speculation with the exact profile's numerics ({spell(**EXACT_CACHE)})",
            "exact",
            "exact-baseline",
            **EXACT_CACHE,
        ),
        Arm(
            "exact-nr-baseline",
            f"no speculation, exact numerics + {spell(repack=False)} + GGML_CPU_TILED_MM=0",
            {"spec_type": "none", "repack": False, **EXACT_CACHE},
            env=dict(NO_TILED_ENV),
            reference="exact-nr-baseline",
            family="exact",
        ),
    ]
    for t in NGRAM_TYPES:
        arms.append(
            Arm(
                t,
                f"n-gram speculation {t} (no draft model, llama.cpp's defaults for it)",
                {"spec_type": t},
                family="ngram",
            )
        )
    return {a.name: a for a in arms}


def standard_arm_names(
    n_max: tuple[int, ...] = (4,),
    p_min: tuple[float, ...] = (),
    n_min: tuple[int, ...] = (),
    quants: tuple[str, ...] = (),
    quant_n_max: int = 4,
    exact_n_max: tuple[int, ...] = (2,),
    exact_nr_n_max: tuple[int, ...] = (),
    ngram: tuple[str, ...] = ("ngram-simple", "ngram-mod"),
    ngram_short: tuple[str, ...] = (),
    exact_ngram: tuple[str, ...] = (),
) -> list[str]:
    """The standard arms: the service's default profile (``exact-n2``: draft n-max 2 with the numerics that keep
    greedy output identical), a longer draft (``draft-n4``) and llama.cpp's n-gram types ngram-simple and
    ngram-mod (its ``--spec-default``). Kept small so that the exhaustive reference run (every arm, every task,
    three repetitions) stays a few hours on a 2-core CPU.
    The baseline and its A/A twin are always added by :func:`select_arms`. More on request: p-min,
    n-min, re-quantised drafts, the ``exact-nr`` numerics, short n-gram drafts.
    """
    names: list[str] = []
    names += [f"draft-n{k}" for k in n_max]
    names += [f"draft-n8-p{p:g}" for p in p_min]
    names += [f"draft-n8-nmin{m}" for m in n_min]
    names += [f"draft-{q.lower()}-n{quant_n_max}" for q in quants]
    names += [f"exact-n{k}" for k in exact_n_max]
    names += [f"exact-nr-n{k}" for k in exact_nr_n_max]
    names += list(ngram)
    names += list(ngram_short)
    names += list(exact_ngram)
    return names


NGRAM_TYPES_STANDARD = ("ngram-simple", "ngram-mod", "ngram-map-k", "ngram-cache")


def unit_numerics() -> dict[str, Any]:
    """The numerics the service role deploys (its knob defaults: flash attention, KV cache types), with or without
    speculation: what "the unit's plain decoding" runs with besides ``spec_type none``."""
    return {k: knob(k).default for k in NUMERICS_KNOBS if knob(k).default is not None}


def plain_description(plain: str) -> str:
    """One line naming the reference every ratio is taken against."""
    if plain == PLAIN_UNIT:
        return (f"the unit's plain decoding ({spell(spec_type='none', **unit_numerics())}: speculation off, the "
                "service role's numerics, the same threads, context and slots as every arm)")
    return f"plain decoding at llama.cpp's defaults ({spell(spec_type='none')}), not the unit's numerics"


def on_unit(arm: Arm) -> Arm:
    """``arm`` with the unit's numerics under its own settings (an arm that sets numerics keeps them): the baselines
    become the unit's plain decoding and an arm whose identity reference was ``exact-baseline`` (the same numerics)
    is judged against the baseline itself."""
    profile = {**unit_numerics(), **arm.profile}
    ref = BASELINE if arm.reference == "exact-baseline" else arm.reference
    desc = arm.description if arm.name not in (BASELINE, AA) else \
        f"{arm.description.split(':')[0]}: {plain_description(PLAIN_UNIT)}"
    return replace(arm, profile=profile, reference=ref, description=desc)


def select_arms(names: list[str], plain: str = PLAIN_DEFAULTS) -> list[Arm]:
    """Arms for ``names`` (deduplicated, order kept), plus the references they need.

    ``baseline`` and ``baseline-again`` (its A/A twin) are always included: every speedup is relative to
    them. A reference an arm needs for the identity check (``exact-baseline``) comes right after it.
    ``plain``: ``unit`` runs every server with the unit's numerics (:func:`on_unit`), so the baseline is the unit's
    plain decoding and ``exact-baseline`` is the baseline itself (not loaded twice); ``defaults`` as they are named.
    """
    if plain not in (PLAIN_UNIT, PLAIN_DEFAULTS):
        raise ArmError(f"plain decoding must be {PLAIN_UNIT} or {PLAIN_DEFAULTS}, got {plain!r}")
    out: list[Arm] = []
    seen: set[str] = set()

    def add(arm: Arm) -> None:
        if plain == PLAIN_UNIT:
            if arm.name == "exact-baseline":
                return
            arm = on_unit(arm)
        if arm.name not in seen:
            seen.add(arm.name)
            out.append(arm)

    parsed = [parse_arm(n.strip()) for n in names if n.strip()]
    if not parsed:
        raise ArmError("no arms selected")
    add(parse_arm(BASELINE))
    add(parse_arm(AA))
    for arm in parsed:
        if arm.reference not in seen and arm.reference != arm.name:
            add(parse_arm(arm.reference))
        add(arm)
    return out
