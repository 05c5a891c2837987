"""Recommendation rules: identical-by-default, never a loser, baseline when nothing wins, nothing at all when
the A/A check says the run cannot tell the baseline from itself."""

from __future__ import annotations

from specops.bench.analysis import ALL, ArmWorkload
from specops.bench.arms import parse_arm
from specops.bench.design import conclusion
from specops.bench.recommend import aa_gate, pick, recommend
from specops.bench.stats import Interval

WLS = ["code", "prose"]


def aw(
    arm: str, wl: str, est: float, lo: float | None, hi: float | None, ident: tuple[int, int] = (10, 10)
) -> ArmWorkload:
    a = ArmWorkload(arm, wl)
    a.speedup = Interval(est, lo, hi, 10)
    a.conclusion = conclusion(a.speedup, 0.05)
    a.identical, a.compared = ident
    return a


def table(rows: dict[str, dict[str, tuple]]) -> dict[str, dict[str, ArmWorkload]]:
    return {arm: {wl: aw(arm, wl, *v) for wl, v in per.items()} for arm, per in rows.items()}


def defs(*names: str) -> dict[str, dict]:
    return {n: parse_arm(n).to_dict() for n in ("baseline", "baseline-again", *names)}


BASE = {
    "baseline": {wl: (1.0, 1.0, 1.0, (0, 0)) for wl in [*WLS, ALL]},
    "baseline-again": {wl: (1.0, 0.98, 1.02) for wl in [*WLS, ALL]},
}


def test_nothing_wins_means_baseline() -> None:
    res = table({**BASE, "draft-n8": {"code": (0.7, 0.6, 0.8), "prose": (0.65, 0.6, 0.7), ALL: (0.68, 0.6, 0.75)}})
    picks = recommend(res, defs("draft-n8"), WLS)
    assert all(p.arm == "baseline" for p in picks.values())
    assert "not faster" in picks[ALL].rejected["draft-n8"]


def test_point_estimate_above_one_inside_noise_is_not_a_win() -> None:
    res = table({**BASE, "ngram-mod": {"code": (1.05, 0.97, 1.13), "prose": (1.0, 0.9, 1.1), ALL: (1.03, 0.98, 1.08)}})
    p = pick(res, defs("ngram-mod"), ALL, WLS)
    assert p.arm == "baseline" and p.valid
    assert not p.confident and "unsettled" in p.reason, "an interval that straddles 1.0 by ±8% settles nothing"


def test_identical_rule_excludes_faster_but_different_output() -> None:
    res = table(
        {
            **BASE,
            "draft-n4": {
                "code": (1.4, 1.2, 1.6, (6, 10)),
                "prose": (1.1, 1.02, 1.2, (5, 10)),
                ALL: (1.25, 1.1, 1.4, (11, 20)),
            },
            "exact-baseline": {wl: (0.99, 0.97, 1.01) for wl in [*WLS, ALL]},
            "exact-n2": {"code": (1.15, 1.05, 1.25), "prose": (1.02, 0.95, 1.1), ALL: (1.08, 1.02, 1.14)},
        }
    )
    d = defs("draft-n4", "exact-baseline", "exact-n2")
    ident = recommend(res, d, WLS, "identical")
    assert ident[ALL].arm == "exact-n2"
    assert ident["code"].arm == "exact-n2"
    assert ident["prose"].arm == "baseline"  # exact-n2's CI on prose includes 1
    assert "output differs" in ident[ALL].rejected["draft-n4"]
    fastest = recommend(res, d, WLS, "fastest")
    assert fastest[ALL].arm == "draft-n4" and fastest["prose"].arm == "draft-n4"


def test_mix_pick_must_not_lose_on_any_workload() -> None:
    res = table(
        {
            **BASE,
            "ngram-simple": {"code": (1.8, 1.5, 2.1), "prose": (0.85, 0.8, 0.9), ALL: (1.25, 1.05, 1.45)},
        }
    )
    picks = recommend(res, defs("ngram-simple"), WLS, "fastest")
    assert picks["code"].arm == "ngram-simple"
    assert picks[ALL].arm == "baseline"
    assert "slower than baseline on prose" in picks[ALL].rejected["ngram-simple"]


def test_nondeterministic_reference_voids_identity() -> None:
    res = table({**BASE, "draft-n4": {wl: (1.3, 1.2, 1.4) for wl in [*WLS, ALL]}})
    res["baseline-again"][ALL].identical = 8
    res["baseline-again"][ALL].compared = 10
    p = pick(res, defs("draft-n4"), ALL, WLS, "identical")
    assert p.arm == "baseline" and "not deterministic" in p.rejected["draft-n4"]


def test_no_interval_never_wins_and_baselines_are_not_candidates() -> None:
    res = table({**BASE, "draft-n4": {ALL: (3.0, None, None)}, "exact-baseline": {ALL: (1.5, 1.4, 1.6)}})
    p = pick(res, defs("draft-n4", "exact-baseline"), ALL, WLS, "fastest")
    assert p.arm == "baseline"
    assert "inconclusive" in p.rejected["draft-n4"]
    assert "exact-baseline" not in p.rejected and "baseline-again" not in p.rejected


def test_highest_qualifying_estimate_wins() -> None:
    res = table(
        {
            **BASE,
            "ngram-mod": {wl: (1.2, 1.1, 1.3) for wl in [*WLS, ALL]},
            "ngram-simple": {wl: (1.3, 1.05, 1.55) for wl in [*WLS, ALL]},
        }
    )
    assert pick(res, defs("ngram-mod", "ngram-simple"), ALL, WLS).arm == "ngram-simple"


def test_aa_check_excluding_one_makes_the_pick_invalid() -> None:
    """The second baseline ran 6% faster than the first: the run cannot tell the baseline from itself."""
    res = table({**BASE, "ngram-mod": {wl: (1.3, 1.2, 1.4) for wl in [*WLS, ALL]}})
    res["baseline-again"] = {wl: aw("baseline-again", wl, 1.06, 1.03, 1.09) for wl in [*WLS, ALL]}
    picks = recommend(res, defs("ngram-mod"), WLS)
    assert all(not p.valid for p in picks.values())
    assert "cannot tell the baseline from itself" in picks[ALL].reason
    assert picks[ALL].to_dict()["arm"] is None
    # with no winner the verdict (baseline) is just as untrustworthy: nothing either
    slow = table({**BASE, "ngram-mod": {wl: (0.7, 0.6, 0.8) for wl in [*WLS, ALL]}})
    slow["baseline-again"] = res["baseline-again"]
    assert not pick(slow, defs("ngram-mod"), "code", WLS).valid


def test_a_win_within_the_aa_noise_is_no_win() -> None:
    """+4% with an A/A check of ±6%: the run cannot tell that gain from noise, so the arm is not picked (and the
    baseline verdict stands, the A/A interval holding 1.0)."""
    res = table({**BASE, "ngram-mod": {wl: (1.04, 1.01, 1.07) for wl in [*WLS, ALL]}})
    res["baseline-again"] = {wl: aw("baseline-again", wl, 1.0, 0.94, 1.06) for wl in [*WLS, ALL]}
    p = pick(res, defs("ngram-mod"), "code", WLS)
    assert p.arm == "baseline" and p.valid
    assert "within the A/A check's noise" in p.rejected["ngram-mod"]
    # the same A/A check is fine for a large effect
    big = table({**BASE, "ngram-mod": {wl: (1.5, 1.3, 1.7) for wl in [*WLS, ALL]}})
    big["baseline-again"] = res["baseline-again"]
    assert pick(big, defs("ngram-mod"), "code", WLS).arm == "ngram-mod"


def test_gate_says_why_a_claim_is_not_supported() -> None:
    res = table(BASE)
    res["baseline-again"] = {wl: aw("baseline-again", wl, 1.0, 0.94, 1.06) for wl in [*WLS, ALL]}
    g = aa_gate(res, "code", 1.04)
    assert not g.valid and "wider than the effect claimed" in g.reason
    assert aa_gate(res, "code", None).valid and aa_gate(res, "code", 1.5).valid
    res["baseline-again"]["code"].speedup = None
    assert not aa_gate(res, "code", None).valid
