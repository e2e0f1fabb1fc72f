"""The promotion policy (`study/promotion.py`) as a pure state machine: asynchronous promotion
hands out work before a rung ends, only from the top 1/eta of what finished there, waits for the
baseline's result and for PASHA's agreement where it could stop; synchronous promotion waits for
the rung. No Ray."""

from __future__ import annotations

import random

import pytest

from autotune import space as sp
from autotune.study import promotion as pm
from autotune.study import rungs as rg

OBJ = [{"metric": "loss_cv", "direction": "minimize"}]
PLAN = [10, 30, 90]


def res(n: int, value: float, *, feasible: bool = True) -> rg.RungResult:
    return rg.RungResult(
        number=n,
        steps=0,
        baseline=n == 0,
        outcome="complete",
        values=[value],
        feasible=feasible,
        violation=0.0 if feasible else 1.0,
    )


def ladder(n: int = 12, *, early: bool = True, **settings: object) -> pm.Ladder:
    """A ladder over trials 0..n-1 (0 the baseline) screened with value = trial number (lower
    is better: trial 1 the best)."""
    lad = pm.Ladder(
        PLAN,
        list(range(n)),
        baseline=0,
        objectives=OBJ,
        settings=pm.Settings(**settings),  # type: ignore[arg-type]
        early=early,
    )
    for i in range(n):
        lad.done(0, res(i, float(i)))
    return lad


def drain(lad: pm.Ladder) -> list[tuple[int, int]]:
    out = []
    while (job := lad.next()) is not None:
        out.append(job)
    return out


def test_the_first_rung_takes_the_screens_synchronous_quota_baseline_first() -> None:
    lad = ladder()
    # max(2, ceil(12/3)) = 4 best feasible and the baseline
    assert drain(lad) == [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)]


def test_async_promotes_from_the_top_third_of_what_finished_before_the_rung_ends() -> None:
    lad = ladder()
    drain(lad)
    lad.done(1, res(0, 5.0))
    # the baseline goes on at once (agree_rungs 2: one rung pair cannot stop the study)
    assert lad.next() == (0, 2)
    lad.done(1, res(3, 1.0))
    lad.done(1, res(4, 2.0))
    # 3 finished at rung 1: floor(3/3) = 1 searched one may go on, the best: trial 3
    assert lad.next() == (3, 2)
    assert lad.next() is None, "trial 4 is not in the top third of the 3 finished"
    assert not lad.rungs[1].ended  # trials 1 and 2 are still running at rung 1
    lad.done(1, res(1, 9.0))
    lad.done(1, res(2, 0.5))
    # the rung has ended: its synchronous quota max(2, ceil(5/3)) = 2 (trials 2 and 3) is
    # owed; trial 3 went on already, so trial 2 is handed out; trial 4 never
    assert drain(lad) == [(2, 2)]
    assert lad.table[0]["numbers"] == [0, 1, 2, 3, 4]
    for n, v in ((0, 3.0), (3, 1.0), (2, 2.0)):
        lad.done(2, res(n, v))
    # 3 configurations ran both rungs: too few to show agreement (tau None), said so
    assert lad.decided == {"steps": 90, "rung": 2, "reason": "target", "tau": None}
    assert lad.table[1]["numbers"] == [0, 2, 3]  # what ran there, in the agreement too
    assert lad.table[1]["agreement"]["n"] == 3


def test_sync_waits_for_the_whole_rung() -> None:
    lad = ladder(early=False)
    drain(lad)
    for n, v in ((0, 5.0), (3, 1.0), (4, 2.0), (1, 9.0)):
        lad.done(1, res(n, v))
        assert lad.next() is None, "a synchronous rung promoted before its last probe ended"
    lad.done(1, res(2, 0.5))
    assert drain(lad) == [(0, 2), (2, 2), (3, 2)]


def test_searched_trials_wait_for_the_baselines_result_and_infeasible_ones_never_go() -> None:
    lad = ladder(n=30)
    first = drain(lad)
    assert len(first) == 11  # ceil(30/3) = 10 and the baseline
    for n in (1, 2, 3, 4, 5, 6):
        lad.done(1, res(n, float(n), feasible=n > 3))
    assert lad.next() is None, "promoted before the baseline's result at the rung was in"
    lad.done(1, res(0, 0.0))
    # 7 finished: the baseline, then floor(7/3) = 2 of the feasible (4, 5, 6): 4 and 5
    assert drain(lad) == [(0, 2), (4, 2), (5, 2)]


def test_a_rung_that_could_stop_the_study_is_not_grown_past_before_its_agreement() -> None:
    # agree_rungs 1: rung 1's agreement alone can stop the study, so rung 2 waits for it
    lad = ladder(n=12, agree_rungs=1, agreement=-1.0, min_promote=6)
    drain(lad)
    for n in range(0, 6):
        lad.done(1, res(n, float(n)))
        assert lad.next() is None, "work handed out above a rung that may be the last"
    lad.done(1, res(6, 6.0))
    # the agreement of 7 configurations at -1 is met: decided at rung 1, nothing ran above
    assert lad.decided is not None and lad.decided["rung"] == 1
    assert lad.decided["reason"].startswith("rankings agree")
    assert lad.next() is None and not lad.rungs[2].entrants


def test_nothing_feasible_the_closest_go_on_and_the_ladder_says_so() -> None:
    lad = pm.Ladder(
        PLAN, [0, 1, 2, 3], baseline=0, objectives=OBJ, settings=pm.Settings(), early=True
    )
    for n, viol in ((0, 5.0), (1, 3.0), (2, 1.0), (3, 2.0)):
        r = res(n, float(n), feasible=False)
        lad.done(0, rg.RungResult(**{**r.__dict__, "violation": viol}))
    assert drain(lad) == [(0, 1), (2, 1), (3, 1)]  # the baseline always, as in sync
    assert "the 2 closest to feasible go on" in lad.notes[0]


def test_nothing_to_promote_decides_at_the_rung_that_ran() -> None:
    lad = pm.Ladder(PLAN, [1, 2], baseline=None, objectives=OBJ, settings=pm.Settings(), early=True)
    lad.done(0, rg.RungResult(1, 10, False, "failed", None, False))
    lad.done(0, rg.RungResult(2, 10, False, "diverged", None, False))
    assert lad.next() is None
    assert lad.decided == {
        "steps": 10,
        "rung": 0,
        "reason": "no feasible configuration to promote",
        "tau": None,
    }


@pytest.mark.parametrize("seed", range(20))
def test_no_worker_waits_while_promotable_work_exists(seed: int) -> None:
    """A random study on 4 workers: whenever `next` says there is nothing, every trial the
    rule allows at a rung not yet ended (the top floor(m/eta) of its m finished) has gone on,
    and every promotion handed out before a rung ended was within that top third then."""
    rnd = random.Random(seed)
    n = 24
    quality = {i: rnd.random() for i in range(n)}
    lad = pm.Ladder(
        [10, 30, 90, 270],
        list(range(n)),
        baseline=0,
        objectives=OBJ,
        settings=pm.Settings(),
        early=True,
    )
    for i in range(n):
        lad.done(0, res(i, quality[i]))
    running: list[tuple[int, int]] = []
    while True:
        while len(running) < 4:
            job = lad.next()
            if job is None:
                break
            i, k = job
            below = lad.rungs[k - 1]
            if not below.ended:
                got = sorted(below.results.values(), key=lambda r: r.values[0])  # type: ignore[index]
                top = [r.number for r in got if not r.baseline][: len(got) // 3]
                assert i == 0 or i in top, (i, k, top)
            running.append(job)
        if job is None:
            for k in range(len(lad.rungs) - 1):
                r = lad.rungs[k]
                if lad.is_open(k + 1) and not r.ended:
                    assert (
                        set(
                            pm.early(
                                list(r.results.values()),
                                OBJ,
                                eta=3,
                                baseline_entered=0 in r.entrants,
                            )
                        )
                        <= r.promoted
                    )
        if not running:
            break
        i, k = running.pop(rnd.randrange(len(running)))
        lad.done(k, res(i, quality[i] + rnd.gauss(0, 0.2)))
    assert lad.decided is not None and lad.decided["rung"] >= 2


def test_the_settings_come_from_the_spaces_rungs_section() -> None:
    r = sp.RungSettings(eta=4, agree_rungs=3, grow="always", promotion="async")
    assert pm.settings_of(r) == pm.Settings(
        eta=4, min_promote=2, agreement=0.7, min_agreement_n=4, agree_rungs=3, grow="always"
    )


def test_a_ladder_told_the_recorded_results_again_is_where_the_first_one_was() -> None:
    """A driver stopped mid-rung resumes: every result recorded is adopted, in whatever order,
    and the new ladder hands out only what the first had not run."""
    rnd = random.Random(3)
    n = 18
    quality = {i: rnd.random() for i in range(n)}
    first = ladder(n)
    ran: list[tuple[int, int]] = []
    running: list[tuple[int, int]] = []
    while len(ran) < 10:  # stopped after 10 rung probes, 2 of them still running
        while len(running) < 3 and (job := first.next()) is not None:
            running.append(job)
        i, k = running.pop(rnd.randrange(len(running)))
        first.done(k, res(i, quality[i] + 0.1 * k))
        ran.append((i, k))
    again = ladder(n)
    for i, k in sorted(ran, key=lambda x: (x[1], -x[0])):  # another order than they finished in
        again.adopt(k, res(i, quality[i] + 0.1 * k))
    again.settle()
    for k in range(1, 3):
        assert sorted(again.rungs[k].entrants) == sorted(i for i, r in ran if r == k)
    assert [r["numbers"] for r in again.table] == [r["numbers"] for r in first.table]
    redo = drain(again)
    assert not set(redo) & set(ran), "a recorded probe handed out again"


def test_fill_hands_an_idle_worker_the_next_best_of_a_running_rung_below_the_top() -> None:
    """`rungs.fill_idle`: with nothing the quota allows, a free worker takes the best finished,
    feasible configuration not yet promoted of a rung still running, into the rung above, once
    the baseline's result there is in; never from a rung that has ended (the screen), never
    into the top rung, never an infeasible one, never with `sync`."""
    plan = [10, 30, 90, 270]
    always = pm.Settings(grow="always")  # no rung waits for an agreement
    lad = pm.Ladder(plan, list(range(12)), baseline=0, objectives=OBJ, settings=always, early=True)
    for i in range(12):
        lad.done(0, res(i, float(i)))
    assert drain(lad) == [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)]  # the quota and the baseline
    assert lad.fill() is None, "the screen has ended: nothing is filled from it"
    lad.done(1, res(3, 1.0))
    lad.done(1, res(4, 2.0))
    lad.done(1, res(2, 3.0, feasible=False))
    assert lad.next() is None and lad.fill() is None, "no baseline result at rung 1 yet"
    lad.done(1, res(0, 0.5))
    assert lad.next() == (0, 2)  # the baseline first, then floor(4/3) = 1: trial 3
    assert lad.next() == (3, 2)
    assert lad.next() is None
    assert lad.fill() == (4, 2), "the next best finished at rung 1 goes on into rung 2"
    assert lad.fill() is None, "trial 2 is infeasible; trial 1 is still running"
    for n, v in ((0, 0.5), (3, 1.0), (4, 2.0)):
        lad.done(2, res(n, v))
    assert lad.next() == (0, 3)
    assert lad.fill() is None, "rung 3 is the top: not filled"
    lad.done(1, res(1, 9.0))  # rung 1 ends; its quota max(2, ceil(5/3)) went on already
    assert lad.rungs[1].ended and lad.table[0]["numbers"] == [0, 1, 2, 3, 4]
    assert lad.rungs[2].entrants == [0, 3, 4]

    sync = pm.Ladder(
        plan, list(range(12)), baseline=0, objectives=OBJ, settings=pm.Settings(), early=False
    )
    for i in range(12):
        sync.done(0, res(i, float(i)))
    drain(sync)
    for n, v in ((0, 0.5), (3, 1.0)):
        sync.done(1, res(n, v))
    assert sync.fill() is None, "sync: no fill"


def test_random_studies_with_fill_decide_and_fill_only_below_the_top() -> None:
    """Random studies on 6 workers with `fill_idle`: a fill is asked for only when `next` has
    nothing; each fill is the best finished, feasible, not yet promoted configuration of a
    rung still running, never into the top rung; the ladder still decides, and every rung's
    row lists every trial that ran it. Most studies fill at least once."""
    filled = [fill_study(seed) for seed in range(20)]
    assert sum(f > 0 for f in filled) >= 15, filled


def fill_study(seed: int) -> int:
    rnd = random.Random(seed)
    n = 30
    quality = {i: rnd.random() for i in range(n)}
    plan = [10, 30, 90, 270]
    lad = pm.Ladder(
        plan, list(range(n)), baseline=0, objectives=OBJ, settings=pm.Settings(), early=True
    )
    for i in range(n):
        lad.done(0, res(i, quality[i], feasible=rnd.random() > 0.2 or i == 0))
    running: list[tuple[int, int]] = []
    fills = 0
    while True:
        while len(running) < 6:
            job = lad.next()
            if job is None:
                before = {
                    k: sorted(
                        (x.values[0], x.number)  # type: ignore[index]
                        for x in r.results.values()
                        if x.feasible and not x.baseline and x.number not in r.promoted
                    )
                    for k, r in enumerate(lad.rungs)
                }
                job = lad.fill()
                if job is None:
                    break
                i, k = job
                fills += 1
                assert k < len(plan) - 1, "filled into the top rung"
                assert not lad.rungs[k - 1].ended, "filled from a rung that had ended"
                assert before[k - 1][0][1] == i, (i, k, before[k - 1])
            running.append(job)
        if not running:
            break
        i, k = running.pop(rnd.randrange(len(running)))
        lad.done(k, res(i, quality[i] + rnd.gauss(0, 0.2), feasible=rnd.random() > 0.1 or i == 0))
    assert lad.decided is not None
    for row in lad.table:
        assert row["numbers"] == sorted(lad.rungs[row["rung"]].entrants)
    return fills
