"""What ``specops bench`` recommends is the tune's choice (issue 80 item 3: one chooser): the same function
(:func:`specops.tune.rule.decision`) read on the bench's blocks: never an arm that is not confidently faster at the
run's error budget, the cheapest member of the best arm's tie, an identity rule that leaves out differing output,
undecided where the intervals reach both sides; the A/A check decides only whether the choice may be applied."""

from __future__ import annotations

import math

from specops.bench.analysis import ALL, ArmWorkload
from specops.bench.arms import AA, BASELINE, parse_arm
from specops.bench.design import conclusion
from specops.bench.recommend import aa_gate, candidates, decision, recommend
from specops.bench.stats import Interval
from specops.bench.tasks import STANDARD_SET
from specops.kinds import PLAIN
from specops.tune import choose, decide, rule

WLS = ["code", "prose"]
NOISE = (0.03, -0.03, 0.02, -0.02, 0.01, -0.01, 0.025, -0.025, 0.015, -0.015)


def raw(ratios: dict[str, dict[str, float]], tasks: int = 10, differs: dict[str, int] | None = None,
        noise: float = 1.0, arms: list[str] | None = None) -> dict:
    """The bench's results.json for a run whose every block paired each arm with the baseline and its A/A twin:
    ``ratios[arm][workload]`` the arm's speedup, each task off it by a fixed spread (``noise`` scales it);
    ``differs[arm]``: how many of its answers differ from its reference's (unexplained)."""
    names = arms or list(ratios)
    blocks = []
    for wl in WLS:
        for t in range(tasks):
            res = {BASELINE: {"decode_tps": 10.0}, AA: {"decode_tps": 10.0}}
            for i, arm in enumerate(names):  # each arm off its figure by the spread, in an order of its own
                if wl in ratios.get(arm, {}):
                    off = noise * NOISE[(t + 3 * i) % len(NOISE)]
                    res[arm] = {"decode_tps": 10.0 * ratios[arm][wl] * math.exp(off)}
            blocks.append({"index": len(blocks), "rep": 0, "workload": wl, "task": f"{wl}-{t}", "arms": list(res),
                           "results": res})
    compared = tasks * len(WLS)
    summary = {a: {"all": {"compared": compared, "identical": compared - (differs or {}).get(a, 0),
                           "divergences": [{"task_id": f"code-{i}", "rep": 0, "byte_pos": 3, "kind": "text"}
                                           for i in range((differs or {}).get(a, 0))]}} for a in names}
    plan = {"design": {"arms": names, "half_width": 0.05, "shares": None},
            "arm_defs": [parse_arm(n).to_dict() for n in (BASELINE, AA, *names)],
            "task_set": STANDARD_SET, "workload_counts": {wl: tasks for wl in WLS}}
    return {"plan": plan, "blocks": blocks, "summary": summary, "outcome": {"blocks": len(blocks), "elapsed_s": 60}}


def aw(arm: str, wl: str, est: float, lo: float | None, hi: float | None) -> ArmWorkload:
    a = ArmWorkload(arm, wl)
    a.speedup = Interval(est, lo, hi, 10)
    a.conclusion = conclusion(a.speedup, 0.05)
    return a


def analysed(ratios: dict[str, dict[str, float]], aa: tuple[float, float, float] = (1.0, 0.98, 1.02)) -> dict:
    """The bench's own analysis (what the A/A check and the report read): the A/A twin and each arm's estimate."""
    out = {AA: {wl: aw(AA, wl, *aa) for wl in [*WLS, ALL]}}
    for arm, per in ratios.items():
        rows = {wl: aw(arm, wl, r, r * 0.97, r * 1.03) for wl, r in per.items()}
        rows[ALL] = aw(arm, ALL, *(3 * [math.prod(per.values()) ** (1 / len(per))]))
        out[arm] = rows
    return out


def picks(ratios: dict[str, dict[str, float]], rule: str = "identical", aa=(1.0, 0.98, 1.02), **kw):
    return recommend(raw(ratios, **kw), analysed(ratios, aa), WLS, rule)


def test_nothing_faster_means_the_baseline_settled() -> None:
    p = picks({"draft-n8": {"code": 0.7, "prose": 0.65}})
    assert all(pk.arm == BASELINE and pk.choice.chosen == PLAIN and pk.confident for pk in p.values())
    assert p[ALL].reason.startswith("nothing pays") and p[ALL].valid
    assert p[ALL].figure.startswith("best draft-n8 0.")


def test_an_interval_that_reaches_both_sides_is_undecided_never_a_win() -> None:
    """A point estimate above 1 inside the spread: the baseline is served, and the pick says it is undecided."""
    p = picks({"ngram-mod": {"code": 1.03, "prose": 1.0}}, noise=4.0)
    assert p[ALL].arm == BASELINE and not p[ALL].confident
    assert p[ALL].reason.startswith("undecided")


def test_a_clear_win_is_chosen_and_its_figure_said() -> None:
    p = picks({"ngram-mod": {"code": 1.3, "prose": 1.25}})
    assert p[ALL].arm == "ngram-mod" and p[ALL].confident and p[ALL].valid
    assert p[ALL].figure.startswith("1.2") and p[ALL].to_dict()["arm"] == "ngram-mod"
    assert p["code"].arm == "ngram-mod" and p["prose"].arm == "ngram-mod"


def test_the_identity_rule_leaves_out_differing_output_and_fastest_does_not() -> None:
    ratios = {"draft-n4": {"code": 1.4, "prose": 1.3}, "ngram-mod": {"code": 1.15, "prose": 1.12}}
    ident = picks(ratios, "identical", differs={"draft-n4": 4})
    assert ident[ALL].arm == "ngram-mod"
    why = ident[ALL].rejected["draft-n4"]
    assert "output differs" in why and "(rule identical: " in why, why
    fastest = picks(ratios, "fastest", differs={"draft-n4": 4})
    assert fastest[ALL].arm == "draft-n4" and "draft-n4" not in fastest[ALL].rejected


def test_the_whole_mix_is_weighed_by_time_and_each_workload_reads_its_own_blocks() -> None:
    """The bench once refused the mix to an arm slower on any workload; the one rule weighs the workloads by time
    (the standard set: each the same): an arm far faster on code and a little slower on prose may serve the mix,
    and prose's own row keeps the baseline."""
    p = picks({"ngram-simple": {"code": 1.8, "prose": 0.92}}, "fastest")
    assert p["code"].arm == "ngram-simple" and p["prose"].arm == BASELINE
    assert p[ALL].arm == "ngram-simple", p[ALL].reason
    assert "weighted by time" in p[ALL].reason


def test_no_interval_never_wins_and_references_are_no_candidates() -> None:
    r = raw({"draft-n4": {"code": 3.0, "prose": 3.0}, "exact-baseline": {"code": 1.5, "prose": 1.5}}, tasks=1)
    assert candidates(r["plan"]) == ["draft-n4"]
    d = decision(r, "fastest")
    assert d.choice.chosen == PLAIN
    assert any(line.startswith("draft-n4: 2 task(s)") for line in d.choice.left_out), d.choice.left_out


def test_the_cheapest_of_a_tie_is_chosen_over_the_fastest() -> None:
    """The highest estimate no longer wins by itself: a draft model the paired ratio cannot tell faster than an n-gram
    type loses the tie to it (it loads nothing beside the target); one confidently faster, paired, is served."""
    tie = picks({"draft-n4": {"code": 1.26, "prose": 1.26}, "ngram-mod": {"code": 1.25, "prose": 1.25}}, noise=3.0)
    assert tie[ALL].arm == "ngram-mod" and "draft-n4" in tie[ALL].choice.tie, tie[ALL].reason
    clear = picks({"draft-n4": {"code": 1.6, "prose": 1.6}, "ngram-mod": {"code": 1.2, "prose": 1.2}})
    assert clear[ALL].arm == "draft-n4", clear[ALL].reason


def test_bench_arms_outside_the_tunes_kinds_are_ranked_by_their_profile() -> None:
    assert decide.tie_rank("ngram-mod") == (1, 0, 0)
    assert decide.tie_rank("draft-n8-p0.5") == (4, 8, 1)
    assert decide.tie_rank("draft-q4_0-n4") == (4, 4, 1)
    assert decide.tie_rank("ngram-mod-n8")[0] == 1 and decide.tie_rank("no-such-arm")[0] > 4
    p = picks({"draft-n8-p0.5": {"code": 1.3, "prose": 1.3}})
    assert p[ALL].arm == "draft-n8-p0.5"


def test_an_aa_check_that_excludes_one_keeps_the_choice_from_being_applied() -> None:
    """The second baseline ran 6% faster than the first: the run cannot tell the baseline from itself. The choice is
    said, marked not valid to apply (no variables, --apply refuses), whatever it is."""
    p = picks({"ngram-mod": {"code": 1.3, "prose": 1.3}}, aa=(1.06, 1.03, 1.09))
    assert all(not pk.valid for pk in p.values())
    assert p[ALL].arm == "ngram-mod" and "cannot tell the baseline from itself" in p[ALL].gate.reason
    assert p[ALL].to_dict()["valid"] is False and p[ALL].to_dict()["arm"] == "ngram-mod"
    slow = picks({"ngram-mod": {"code": 0.7, "prose": 0.7}}, aa=(1.06, 1.03, 1.09))
    assert not slow["code"].valid and slow["code"].arm == BASELINE


def test_a_choice_within_the_aa_noise_is_not_applied() -> None:
    """+6% chosen with an A/A check of ±8%: the run cannot tell that gain from noise, so it is not applied; the same
    A/A check backs a large effect."""
    small = picks({"ngram-mod": {"code": 1.06, "prose": 1.06}}, aa=(1.0, 0.92, 1.08), noise=0.1)
    assert small[ALL].arm == "ngram-mod" and not small[ALL].valid
    assert "wider than the effect chosen" in small[ALL].gate.reason
    big = picks({"ngram-mod": {"code": 1.5, "prose": 1.5}}, aa=(1.0, 0.92, 1.08))
    assert big[ALL].arm == "ngram-mod" and big[ALL].valid


def test_gate_says_why_a_choice_is_not_backed() -> None:
    res = {AA: {wl: aw(AA, wl, 1.0, 0.94, 1.06) for wl in [*WLS, ALL]}}
    g = aa_gate(res, "code", 1.04)
    assert not g.valid and "wider than the effect chosen" in g.reason
    assert aa_gate(res, "code", None).valid and aa_gate(res, "code", 1.5).valid
    res[AA]["code"].speedup = None
    assert not aa_gate(res, "code", None).valid


def test_the_bench_and_the_tune_read_the_same_blocks_to_the_same_choice() -> None:
    """One chooser: the bench's recommendation is the tune's decision on the same results, and a decision given (the
    tune's, for the report of its own measurement) is stated as it is."""
    r = raw({"ngram-mod": {"code": 1.3, "prose": 1.1}, "draft-n4": {"code": 1.1, "prose": 1.0}})
    names = candidates(r["plan"])
    tune = rule.decision(r, names, names, "identical", 0.05, standard=True)
    bench = recommend(r, analysed({}), WLS, "identical")
    assert bench[ALL].choice == tune.choice and bench["code"].choice == tune.workloads["code"]
    given = rule.Decision([], decide.Choice("draft-n4", None, "the tune's own reading", {}), {})
    stated = recommend(r, analysed({}), WLS, "identical", decided=given)
    assert stated[ALL].arm == "draft-n4" and stated[ALL].reason == "the tune's own reading"
    assert stated["code"].arm == BASELINE and not stated["code"].confident


def test_arms_that_ran_and_none_compared_are_undecided() -> None:
    r = raw({"ngram-mod": {"code": 1.3, "prose": 1.3}})
    r["blocks"] = [{**b, "results": {k: v for k, v in b["results"].items() if k != "ngram-mod"}} for b in r["blocks"]]
    d = decision(r, "identical")
    assert d.choice.chosen == PLAIN and not d.choice.settled
    assert "none measured" in d.choice.reason and "a run with more time" in d.choice.reason


def test_the_report_of_the_tunes_measurement_states_the_tunes_choice() -> None:
    """The tune's measurement report names the tune's choice (given), not a second reading of the same blocks."""
    from specops.bench import report

    r = raw({"ngram-mod": {"code": 1.3, "prose": 1.3}})
    given = rule.Decision([], decide.Choice("ngram-mod", None, "the tune's own reading", {"ngram-mod": "1.30×"}),
                            {})
    p = recommend(r, analysed({"ngram-mod": {"code": 1.3, "prose": 1.3}}), WLS, "identical", decided=given)
    plan = {**r["plan"], "arms": [BASELINE, AA, "ngram-mod"]}
    md = report.markdown(plan, r["outcome"], analysed({"ngram-mod": {"code": 1.3, "prose": 1.3}}),
                         {a["name"]: a for a in plan["arm_defs"]}, WLS, p, None, {}, {}, [], "identical", None,
                         "results.json", None, tune=True)
    assert "**Run `ngram-mod` on this host**" in md and "The tune's choice: the tune's own reading." in md
    assert "| all | `ngram-mod` | 1.30× |" in md


def test_the_tune_restates_its_measurement_report_with_its_choice(monkeypatch, tmp_path) -> None:
    """After choosing, the tune rebuilds the measurement's report with its decision; results without a work dir (a
    test's) are left alone, and a report that cannot be rebuilt is said in one line."""
    from specops.bench import summary
    from specops.bench.store import StoreError

    calls = []
    monkeypatch.setattr(summary, "build", lambda *a, **kw: calls.append((a, kw)))
    d = rule.Decision([], decide.Choice(PLAIN, None, "nothing pays", {}), {})
    assert choose.restate({"blocks": []}, d) == [] and calls == []
    where = {"work_dir": str(tmp_path / "measure"), "report": str(tmp_path / "measure.md"),
             "assets": str(tmp_path / "measure-assets"), "rule": "equivalent"}
    assert choose.restate(where, d) == []
    (args, kw), = calls
    assert args[1] == tmp_path / "measure.md" and args[3] == "equivalent" and kw == {"decided": d}

    def broken(*a, **kw):
        raise StoreError("run.json is damaged")

    monkeypatch.setattr(summary, "build", broken)
    said = choose.restate(where, d)
    assert len(said) == 1 and "run.json is damaged" in said[0] and "not the tune's choice" in said[0]
