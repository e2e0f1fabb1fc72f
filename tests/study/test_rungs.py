"""The rung logic as pure functions: lengths, promotion, Kendall tau-b, the growth rule; and the
space keys that drive it (target_steps, rungs, batch)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune import space as sp
from autotune.errors import SpaceError
from autotune.study import rungs as rg

OBJ = [
    {"metric": "loss_cv", "direction": "minimize"},
    {"metric": "throughput", "direction": "maximize"},
]


@pytest.mark.parametrize(
    ("screen", "target", "eta", "max_rungs", "expected"),
    [
        (150, 750, 3, 4, [150, 340, 750]),
        (150, 1500, 3, 4, [150, 320, 700, 1500]),
        (100, 300, 3, 4, [100, 300]),
        (30, 120, 3, 4, [30, 60, 120]),
        (150, 150, 3, 4, [150]),
        (100, 100_000, 3, 2, [100, 3160, 100_000]),  # capped at max_rungs, rounded to 10
    ],
)
def test_rung_steps(
    screen: int, target: int, eta: int, max_rungs: int, expected: list[int]
) -> None:
    assert rg.rung_steps(screen, target, eta, max_rungs) == expected


@given(
    screen=st.integers(10, 1000),
    ratio=st.floats(1.0, 200.0),
    eta=st.integers(2, 10),
    max_rungs=st.integers(1, 8),
)
@settings(max_examples=200, deadline=None)
def test_rung_steps_grow_to_exactly_the_target(
    screen: int, ratio: float, eta: int, max_rungs: int
) -> None:
    target = int(screen * ratio)
    steps = rg.rung_steps(screen, target, eta, max_rungs)
    assert steps[0] == screen and steps[-1] == max(screen, target)
    assert all(a < b for a, b in itertools.pairwise(steps))
    assert len(steps) - 1 <= max_rungs


def res(
    number: int, cv: float, tp: float = 100.0, *, feasible: bool = True, baseline: bool = False
) -> rg.RungResult:
    return rg.RungResult(
        number=number,
        steps=150,
        baseline=baseline,
        outcome="complete" if feasible else "diverged",
        values=[cv, tp],
        feasible=feasible,
    )


def test_promote_takes_the_best_third_by_layer_and_always_the_baseline() -> None:
    results = [res(0, 0.9, baseline=True)] + [res(i, 0.1 * i) for i in range(1, 9)]
    # 9 ran the rung: ceil(9 / 3) = 3 best (same throughput: loss_cv orders), plus the baseline
    assert rg.promote(results, OBJ, eta=3, min_promote=2) == [0, 1, 2, 3]


def test_promote_never_takes_an_infeasible_one_and_the_baseline_is_outside_the_quota() -> None:
    results = [
        res(0, 0.01, baseline=True),
        res(1, 0.001, feasible=False),
        res(2, 0.5),
        res(3, 0.2),
        res(4, 0.3, feasible=False),
    ]
    # q = max(min_promote 2, ceil(5/3) = 2) = 2 of the feasible non-baseline {2, 3}
    assert rg.promote(results, OBJ, eta=3, min_promote=2) == [0, 2, 3]
    # fewer feasible than the quota: all of them
    assert rg.promote(results, OBJ, eta=2, min_promote=5) == [0, 2, 3]
    # nothing feasible but the baseline: the baseline alone
    assert rg.promote(
        [res(0, 1.0, baseline=True), res(1, 0.1, feasible=False)], OBJ, eta=3, min_promote=2
    ) == [0]


def test_promote_ranks_pareto_layers_then_knee_then_number() -> None:
    results = [
        res(1, 0.1, 50.0),
        res(2, 0.3, 60.0),
        res(3, 0.35, 40.0),  # dominated
        res(4, 0.1, 50.0),
        res(5, 0.2, 58.0),  # the knee of the front {1, 2, 4, 5}
    ]
    # q = max(1, ceil(5 / 3)) = 2: the knee 5, then 1 (ties with 2 and 4 at distance 1: number)
    assert rg.promote(results, OBJ, eta=3, min_promote=1) == [1, 5]


def test_kendall_tau_b_hand_cases() -> None:
    assert rg.kendall_tau_b([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert rg.kendall_tau_b([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert rg.kendall_tau_b([1, 1, 1], [1, 2, 3]) is None
    assert rg.kendall_tau_b([1], [1]) is None
    # one tie in x: concordant 3, discordant 2, tied in x only 1 -> (3 - 2) / sqrt(6 * 5)
    got = rg.kendall_tau_b([1, 2, 2, 3], [1, 3, 4, 2])
    assert got == pytest.approx(1 / math.sqrt(30))


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=2, max_size=12))
@settings(max_examples=150, deadline=None)
def test_kendall_tau_b_matches_scipy_on_tie_heavy_vectors(pairs: list[tuple[int, int]]) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    x, y = [p[0] for p in pairs], [p[1] for p in pairs]
    ours = rg.kendall_tau_b(x, y)
    theirs = scipy_stats.kendalltau(x, y, variant="b").statistic
    if ours is None:
        assert math.isnan(theirs)
    else:
        assert ours == pytest.approx(theirs, abs=1e-12)


def test_agreement_is_measured_on_the_configs_of_both_rungs() -> None:
    prev = [res(0, 0.5, baseline=True), res(1, 0.1), res(2, 0.2), res(3, 0.3), res(4, 0.9)]
    cur = [
        rg.RungResult(n, 340, n == 0, "complete", [cv, 100.0], True)
        for n, cv in [(0, 0.05), (1, 0.3), (2, 0.2), (3, 0.1)]
    ]
    ag = rg.agreement(prev, cur, OBJ)
    assert ag["n"] == 4 and ag["vs_steps"] == 150
    # prev order of {0,1,2,3}: 1,2,3,0; cur: 0,3,2,1 -> reversed
    assert ag["tau"] == pytest.approx(-1.0)


def test_agreement_ranks_on_the_stability_objective_not_on_throughput() -> None:
    # loss_cv orders 1 < 2 < 3 < 0 at both rungs; throughput reverses between them (noise on a
    # shared CPU): the rankings agree. 4 is infeasible at both rungs: tied last in each.
    prev = [res(0, 0.4, 10.0, baseline=True), res(1, 0.1, 1.0), res(2, 0.2, 2.0), res(3, 0.3, 3.0)]
    prev.append(res(4, 0.01, 99.0, feasible=False))
    cur = [
        rg.RungResult(n, 340, n == 0, "complete", [cv, tp], n != 4)
        for n, cv, tp in [(0, 0.3, 1.0), (1, 0.05, 10.0), (2, 0.1, 3.0), (3, 0.2, 2.0)]
    ]
    cur.append(rg.RungResult(4, 340, False, "diverged", [0.001, 99.0], False))
    ag = rg.agreement(prev, cur, OBJ)
    assert ag["metric"] == "loss_cv" and ag["n"] == 5
    assert ag["tau"] == pytest.approx(1.0)


def test_agreement_in_a_speed_space_ranks_on_its_first_objective() -> None:
    # No objective outside the hardware metrics: the first one (throughput, higher is better)
    speed = [
        {"metric": "throughput", "direction": "maximize"},
        {"metric": "peak_mem_mb", "direction": "minimize"},
    ]
    prev = [res(n, tp, mem) for n, tp, mem in [(0, 30.0, 1.0), (1, 20.0, 2.0), (2, 10.0, 3.0)]]
    prev.append(res(3, 5.0, 4.0))
    cur = [res(n, tp, mem) for n, tp, mem in [(0, 33.0, 4.0), (1, 22.0, 3.0), (2, 11.0, 2.0)]]
    cur.append(res(3, 6.0, 1.0))
    ag = rg.agreement(prev, cur, speed)
    assert ag["metric"] == "throughput" and ag["tau"] == pytest.approx(1.0)
    reversed_ = [res(n, tp) for n, tp in [(0, 5.0), (1, 10.0), (2, 20.0), (3, 30.0)]]
    assert rg.agreement(prev, reversed_, speed)["tau"] == pytest.approx(-1.0)


def timed(number: int, cv: float, tp: float, half: float, **kw: bool) -> rg.RungResult:
    """A rung result whose throughput was measured +-`half` (its probe's timing interval)."""
    r = res(number, cv, tp, **kw)
    return rg.RungResult(
        **{**r.__dict__, "metrics": {"throughput_low": tp - half, "throughput_high": tp + half}}
    )


def test_promotion_does_not_follow_throughput_within_its_noise() -> None:
    # 1 is the stablest; 2, 3 and 6 are up to 15% faster, but each probe's throughput is +-15%
    # from its own step timings: all of them tied on throughput. On the point values the knee
    # of the front {1, 2, 3, 6} takes 3 and 2 (fast, middling stability); within noise 1
    # dominates 2, 3 and 6 (stabler, tied on speed): the promotion goes by stability.
    results = [
        timed(0, 0.9, 100.0, 15.0, baseline=True),
        timed(1, 0.10, 100.0, 15.0),
        timed(2, 0.12, 112.0, 15.0),
        timed(3, 0.13, 114.0, 15.0),
        timed(4, 0.40, 90.0, 15.0),
        timed(5, 0.50, 95.0, 15.0),
        timed(6, 0.30, 115.0, 15.0),
    ]
    # q = max(2, ceil(7 / 4)) = 2, plus the baseline
    assert rg.promote(results, OBJ, eta=4, min_promote=2) == [0, 1, 2]
    points = [res(r.number, r.values[0], r.values[1], baseline=r.baseline) for r in results]
    assert rg.promote(points, OBJ, eta=4, min_promote=2) == [0, 2, 3]
    # a difference beyond the noise still counts: 3 at 200 +-15 beats every other's speed
    faster = [*results[:3], timed(3, 0.13, 200.0, 15.0), *results[4:]]
    assert rg.promote(faster, OBJ, eta=4, min_promote=2) == [0, 1, 3]


def test_the_minimum_n_of_agreement_comes_from_the_permutation_distribution() -> None:
    assert rg.ALPHA == 0.05 and rg.MIN_AGREEMENT_N == 4  # 1/3! = 17%, 1/4! = 4.2%
    assert rg.min_agreement_n(0.01) == 5  # 1/5! = 0.83%
    # perfect agreement of n distinct configurations happens by chance with probability 1/n!
    for n in range(2, 8):
        ranks = [float(k) for k in range(n)]
        assert rg.chance(ranks, ranks) == pytest.approx(1 / math.factorial(n))
    assert rg.chance(list(range(8)), list(range(8))) < 0.001  # normal approximation beyond 7


def test_agreement_from_too_few_configurations_is_not_reported() -> None:
    # three configurations ranked alike at both rungs: "tau +1.00 (3 configs)" says nothing
    prev = [res(1, 0.1), res(2, 0.2), res(3, 0.3)]
    cur = [res(1, 0.01), res(2, 0.02), res(3, 0.03)]
    ag = rg.agreement(prev, cur, OBJ)
    assert ag["tau"] is None and ag["p"] is None and ag["n"] == 3
    assert ag["note"] == "too few configurations to tell (n=3, at least 4)"
    grow, why = rg.should_grow(
        [ag, ag], threshold=0.7, min_n=4, grow="pasha", at_target=False, pairs=1
    )
    assert grow and "too few configurations to tell (n=3" in why
    # four: reported, with its chance
    prev.append(res(4, 0.4))
    cur.append(res(4, 0.04))
    ag = rg.agreement(prev, cur, OBJ)
    assert ag["tau"] == pytest.approx(1.0) and ag["p"] == pytest.approx(1 / 24)
    assert ag["note"] is None
    grow, why = rg.should_grow([ag], threshold=0.7, min_n=4, grow="pasha", at_target=False)
    assert not grow and "4 configurations, chance p 0.042" in why
    # a space asking for more than the minimum gets it
    assert rg.agreement(prev, cur, OBJ, min_n=5)["tau"] is None


def test_infeasible_configurations_tie_last_in_the_agreement_not_first() -> None:
    # 4 is infeasible at the screen (it diverged with the best loss_cv so far) and feasible but
    # the least stable at the next rung: last in both rankings. Ranked first where it was
    # infeasible, it would turn an agreement (+1) into a disagreement.
    prev = [res(1, 0.1), res(2, 0.2), res(3, 0.3), res(5, 0.5), res(4, 0.001, feasible=False)]
    cur = [res(1, 0.01), res(2, 0.02), res(3, 0.03), res(5, 0.05), res(4, 0.09)]
    ranks = rg.stability_ranks(prev, OBJ[0], 0)
    assert ranks[4] == 5.0 and max(v for n, v in ranks.items() if n != 4) == 3.0
    ag = rg.agreement(prev, cur, OBJ)
    assert ag["n"] == 5 and ag["tau"] == pytest.approx(1.0)
    # a maximised objective: infeasible still last, whatever its value
    speed = [{"metric": "throughput", "direction": "maximize"}]
    fast = [
        rg.RungResult(n, 150, False, "complete", [tp], n != 9)
        for n, tp in [(1, 30.0), (2, 20.0), (9, 1000.0)]
    ]
    assert rg.stability_ranks(fast, speed[0], 0) == {1: 0.0, 2: 1.0, 9: 3.0}


def test_infeasible_ties_that_leave_too_few_distinct_ranks_cannot_show_agreement() -> None:
    # 4 configurations, two infeasible at both rungs (tied last): at best the two feasible
    # ones agree, which a random dealing matches 2 times in 24 (8% > 5%)
    prev = [res(1, 0.1), res(2, 0.2), res(3, 0.3, feasible=False), res(4, 0.4, feasible=False)]
    cur = [res(1, 0.01), res(2, 0.02), res(3, 0.03, feasible=False), res(4, 0.04, feasible=False)]
    ag = rg.agreement(prev, cur, OBJ)
    assert ag["n"] == 4 and ag["tau"] is None
    assert ag["note"] == "too few configurations to tell (n=4, too many tied)"
    assert rg.best_chance([0.0, 1.0, 2.0, 2.0], [0.0, 1.0, 2.0, 2.0]) == pytest.approx(2 / 24)


def test_agreement_on_throughput_treats_differences_within_noise_as_ties() -> None:
    # a speed space: 5 configurations whose throughputs overlap pairwise at the second rung
    speed = [{"metric": "throughput", "direction": "maximize"}]

    def run(n: int, tp: float, half: float, steps: int) -> rg.RungResult:
        m = {"throughput_low": tp - half, "throughput_high": tp + half}
        return rg.RungResult(n, steps, False, "complete", [tp], True, m)

    prev = [run(n, 100.0 * n, 5.0, 150) for n in range(1, 6)]  # far apart: 1 < 2 < ... < 5
    cur = [run(n, 100.0 + n, 5.0, 340) for n in range(1, 6)]  # 101..105 +-5: all tied
    ranks = rg.stability_ranks(cur, speed[0], 0)
    assert set(ranks.values()) == {0.0}
    ag = rg.agreement(prev, cur, speed)
    assert ag["tau"] is None and "too many tied" in ag["note"]
    # measured without noise, the same points would agree perfectly
    bare = [rg.RungResult(r.number, 340, False, "complete", r.values, True) for r in cur]
    assert rg.agreement(prev, bare, speed)["tau"] == pytest.approx(1.0)


@given(st.permutations(list(range(6))), st.integers(6, 10))
@settings(max_examples=40, deadline=None)
def test_chance_matches_scipys_exact_test_without_ties(perm: list[int], n: int) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    y = [float(v) for v in perm] + [float(v) for v in range(6, n)]
    x = [float(v) for v in range(n)]
    theirs = scipy_stats.kendalltau(x, y, alternative="greater", method="exact").pvalue
    ours = rg.chance(x, y)
    # exact up to 7 configurations; the normal approximation beyond
    assert ours == pytest.approx(theirs, abs=1e-9 if n <= 7 else 0.03)


@pytest.mark.parametrize(
    ("ag", "grow", "at_target", "expected"),
    [
        ({"tau": 0.9, "n": 5}, "pasha", True, False),  # at the target: stop
        ({"tau": 0.9, "n": 3}, "pasha", False, True),  # too few to judge
        ({"tau": 0.69, "n": 5}, "pasha", False, True),  # disagree
        ({"tau": 0.7, "n": 4}, "pasha", False, False),  # agree
        ({"tau": None, "n": 5}, "pasha", False, True),  # constant ranking: undefined
        ({"tau": 1.0, "n": 5}, "always", False, True),
    ],
)
def test_should_grow(ag: dict[str, float], grow: str, at_target: bool, expected: bool) -> None:
    got, why = rg.should_grow([ag], threshold=0.7, min_n=4, grow=grow, at_target=at_target)
    assert got is expected and why


AGREE, DISAGREE, FEW = {"tau": 1.0, "n": 5}, {"tau": 0.2, "n": 5}, {"tau": 1.0, "n": 3}


@pytest.mark.parametrize(
    ("history", "pairs", "expected"),
    [
        ([AGREE], 2, True),  # one pair agreeing is not enough (tiny_gpt: +1.00 then -1.00)
        ([DISAGREE, AGREE], 2, True),
        ([FEW, AGREE], 2, True),  # the earlier pair was too small to judge
        ([AGREE, AGREE], 2, False),
        ([DISAGREE, AGREE, AGREE], 2, False),
        ([AGREE, AGREE], 3, True),
        ([AGREE], 1, False),  # the plain PASHA rule
        ([AGREE, DISAGREE], 2, True),
    ],
)
def test_stopping_below_the_target_takes_agreement_over_rung_pairs_in_a_row(
    history: list[dict[str, float]], pairs: int, expected: bool
) -> None:
    got, why = rg.should_grow(
        history, threshold=0.7, min_n=4, grow="pasha", at_target=False, pairs=pairs
    )
    assert got is expected, why
    if not got and pairs > 1:
        assert f"over {pairs} rung pairs" in why
    if got and history[-1] is AGREE:
        assert "rungs.agree_rungs" in why


BASE = "name: x\nworkload: mlp\n"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("probe: {steps: 100}\nbudget: {target_steps: 50}\n", "budget.target_steps"),
        ("rungs: {eta: 1}\n", "rungs.eta"),
        ("rungs: {agreement: 1.5}\n", "rungs.agreement"),
        ("rungs: {min_agreement_n: 2}\n", "rungs.min_agreement_n"),
        ("rungs: {min_agreement_n: 3}\n", "rungs.min_agreement_n"),  # 1/3! = 17% by chance
        ("rungs: {agree_rungs: 0}\n", "rungs.agree_rungs"),
        ("rungs: {grow: sometimes}\n", "rungs.grow"),
        ("rungs: {promotion: asha}\n", "rungs.promotion"),
        ("rungs: {typo: 1}\n", "rungs"),
        ("probe: {batch: 16}\nknobs: {accum_steps: {choices: [1, 3]}}\n", "probe.batch"),
        (
            "probe: {micro_batch: 16}\nknobs: {accum_steps: {choices: [1, 2]}}\n",
            "probe.micro_batch",
        ),
        ("probe: {micro_batch: 16}\nknobs: {accum_steps: 4}\n", "probe.micro_batch"),
    ],
)
def test_bad_rung_and_batch_keys_are_one_line_naming_the_key(text: str, where: str) -> None:
    with pytest.raises(SpaceError) as e:
        sp.loads(BASE + text, source="s.yaml")
    msg = str(e.value)
    assert msg.startswith("s.yaml: " + where) and "\n" not in msg


def test_micro_batch_alone_still_works_with_accumulation_one() -> None:
    s = sp.loads(BASE + "probe: {micro_batch: 32}\nknobs: {accum_steps: 1}\n")
    assert s.probe.samples_per_step == 32 and s.probe.micro_for(1) == 32
    s = sp.loads(BASE + "probe: {batch: 16}\nknobs: {accum_steps: {choices: [1, 2, 4]}}\n")
    assert [s.probe.micro_for(a) for a in (1, 2, 4)] == [16, 8, 4]
    assert sp.loads(BASE, overrides=["budget.target_steps=400"]).budget.target_steps == 400


@pytest.mark.parametrize("name", sp.builtin_names())
def test_every_shipped_space_has_a_target_and_a_batch_its_accumulation_divides(name: str) -> None:
    s = sp.load(name)
    assert s.budget.target_steps is not None and s.budget.target_steps >= s.probe.steps
    assert s.probe.batch is not None
    for a in sp.accum_values(s.knobs.get("accum_steps")):
        assert s.probe.batch % a == 0


# ----- every probe of a study schedules the LR over the target -------------------------------

TARGET_SPACE = """\
name: t
workload: mlp
probe: {steps: 30, batch: 16, device: cpu}
budget: {trials: 2, target_steps: 120}
knobs:
  schedule: {choices: [linear, cosine]}
  batch: {choices: [16, 32]}
"""


def test_screen_rung_and_verification_probes_schedule_over_the_target(tmp_path: Path) -> None:
    import optuna

    from autotune.cli.probe import probe_config
    from autotune.study.adapter import Driver
    from autotune.study.options import StudyOptions
    from autotune.study.progress import Progress

    s = sp.loads(TARGET_SPACE)
    driver = Driver(
        StudyOptions(space=s, quiet=True),
        optuna.create_study(),
        {},
        1,
        [],
        None,
        Progress(s, 1, 0, 1, True),
        tmp_path,
    )
    screen = driver.next_config()
    assert screen is not None
    batch = screen.probe.knobs["batch"]
    assert screen.probe.schedule_steps == 120 * 16 // batch  # the screen, as Ray runs it
    knobs = {**s.fixed_knobs(), "batch": 16}
    rung = sp.probe_config(s, knobs=knobs, steps=60)  # as rung_phase builds it
    verify = sp.probe_config(s, knobs=knobs, seed=3, steps=60)  # as verification does
    assert (rung.steps, rung.schedule_steps) == (60, 120)
    assert (verify.steps, verify.schedule_steps) == (60, 120)
    at_32 = sp.probe_config(s, knobs={**knobs, "batch": 32}, steps=60)
    assert (at_32.steps, at_32.schedule_steps) == (30, 60)  # equal samples, same curve
    assert probe_config(s, "defaults").schedule_steps == 120  # `autotune probe --space`
    no_target = sp.loads(TARGET_SPACE.replace(", target_steps: 120", ""))
    assert sp.probe_config(no_target).schedule_steps is None  # its own steps


def test_the_growth_rule_says_why_in_so_many_words() -> None:
    """The reason the study prints (and stores in `decided.reason`) for each branch."""

    def ag(tau: float | None, n: int = 5, p: float | None = 0.01, note: str | None = None):
        return {"tau": tau, "n": n, "p": p, "note": note}

    kw = {"threshold": 0.7, "min_n": 4, "grow": "auto"}
    assert rg.should_grow([ag(1.0)], at_target=True, **kw) == (False, "target")
    assert rg.should_grow([], at_target=False, threshold=0.7, min_n=4, grow="always") == (
        True,
        "grow: always",
    )
    assert rg.should_grow([], at_target=False, **kw) == (True, "no agreement measured yet")
    assert rg.should_grow([None], at_target=False, **kw) == (True, "no agreement measured yet")
    assert rg.should_grow([ag(1.0, n=3)], at_target=False, **kw) == (
        True,
        "too few configurations to tell (n=3, at least 4)",
    )
    tied = ag(None, note="too few configurations to tell (n=5, too many tied)")
    assert rg.should_grow([tied], at_target=False, **kw) == (True, tied["note"])
    assert rg.should_grow([ag(0.2)], at_target=False, **kw) == (
        True,
        "rankings disagree (tau +0.20 < 0.7)",
    )
    assert rg.should_grow([ag(None, p=None)], at_target=False, **kw) == (
        True,
        "rankings disagree (tau undefined < 0.7)",
    )
    assert rg.should_grow([ag(0.2), ag(0.8)], at_target=False, pairs=2, **kw) == (
        True,
        "rankings agree (tau +0.80 >= 0.7) at this rung only; 2 rung pairs in a row must "
        "(rungs.agree_rungs)",
    )
    assert rg.should_grow([ag(0.9), ag(0.8)], at_target=False, pairs=2, **kw) == (
        False,
        "rankings agree over 2 rung pairs (tau +0.90, +0.80 >= 0.7, 5 configurations, "
        "chance p 0.01)",
    )
    assert rg.should_grow([ag(0.8, p=None)], at_target=False, **kw) == (
        False,
        "rankings agree (tau +0.80 >= 0.7, 5 configurations)",
    )
