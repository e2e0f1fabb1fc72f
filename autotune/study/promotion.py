"""Who runs next at which rung: the promotion policy of `rungs.promotion`, pure (no Ray, no
Optuna), run by the study (`autotune.study.rung_async`) and by benchmarks/rung_idle_sim.py.

A `Ladder` is told each probe's result at its rung (`done`) and asked for the next probe to run
(`next`: a trial number and the rung to run it at, or None: nothing may run now).

- `sync` (`early=False`): a rung's promotions are chosen once every probe of the rung has ended
  (`rungs.promote`: the best `max(min_promote, ceil(n / eta))` feasible in the pick's order, the
  baseline always, the closest to feasible when nothing is), and the next rung runs only if
  PASHA's growth rule (`rungs.should_grow`) says so: the study's synchronous successive halving.
- `async` (`early=True`, ASHA, Li et al. 2020): besides those, a free worker takes, from the top
  rung down, a trial in the top `floor(m / eta)` of the `m` probes finished at its rung (the
  same feasibility and order: `pick.ranked` over the feasible ones, the baseline outside the
  quota and promoted as soon as it finished) and not yet promoted. The non-baselines of a rung
  wait for the baseline's own result there (their relative constraints are judged against it).
  When the rung has ended the synchronous quota is promoted too (what an early promotion did not
  already take): a rung holds every configuration the synchronous rule would have put there,
  plus those promoted early that the final ranking would not have.

PASHA's growth and `agree_rungs` with `async`: a rung's agreement with the rung below is judged
when the rung has ended, that is when every promotion into it is done and every probe of it has
ended, over all the configurations that ran both (what ran, not what was planned). Rung `k + 1`
takes early promotions only while the growth rule would grow past rung `k` whatever rung `k`'s
still unmeasured agreement turns out to be (`grow: always`; fewer than `agree_rungs` rung pairs
measured; a pair of the last `agree_rungs` already disagreeing); otherwise it waits for that
agreement, and the study never runs a rung above the one it decides at.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.study import pick
from autotune.study import rungs as rg

#: A rung pair's agreement as if it agreed: what an unmeasured pair is taken for when asking
#: whether the growth rule would grow whatever it turns out to be.
AGREES: dict[str, Any] = {"tau": 1.0, "n": 1 << 30, "p": 0.0, "note": None}


@dataclass(frozen=True)
class Settings:
    """The `rungs` settings the policy reads (`space.RungSettings` has them all)."""

    eta: int = 3
    min_promote: int = 2
    agreement: float = 0.7
    min_agreement_n: int = 4
    agree_rungs: int = 2
    grow: str = "pasha"


@dataclass
class Rung:
    """One rung's state: who entered it, their results, who went on from it."""

    steps: int
    entrants: list[int] = field(default_factory=list)
    results: dict[int, rg.RungResult] = field(default_factory=dict)
    promoted: set[int] = field(default_factory=set)
    todo: list[int] = field(default_factory=list)  # chosen at its end, not yet handed out
    ended: bool = False
    growth: bool | None = None  # whether the study goes above it (None: not judged yet)


def settings_of(r: Any) -> Settings:
    """The policy's settings from a space's `rungs` section (or any object with those names)."""
    return Settings(
        eta=int(r.eta),
        min_promote=int(r.min_promote),
        agreement=float(r.agreement),
        min_agreement_n=int(r.min_agreement_n),
        agree_rungs=int(r.agree_rungs),
        grow=str(r.grow),
    )


def early_quota(results: Sequence[rg.RungResult], eta: int) -> int:
    """How many non-baselines of a rung not yet ended may have gone on: `floor(m / eta)` of
    the `m` finished there (the baseline counted in `m`, as `rungs.promote` counts it)."""
    return len(results) // eta


def early(
    results: Sequence[rg.RungResult],
    objectives: Sequence[Mapping[str, Any]],
    *,
    eta: int,
    baseline_entered: bool,
) -> list[int]:
    """The trials of a rung not yet ended that may go on now, in the order to hand them out:
    the baseline once it finished, then the top `early_quota` feasible ones in the pick's order
    (none before the baseline's result is in, when it runs this rung)."""
    base = [r.number for r in results if r.baseline]
    if baseline_entered and not base:
        return []
    feasible = [r for r in results if r.feasible and not r.baseline and r.values is not None]
    q = min(len(feasible), early_quota(results, eta))
    return base + ranked(feasible, objectives)[:q]


def ranked(results: Sequence[rg.RungResult], objectives: Sequence[Mapping[str, Any]]) -> list[int]:
    """Trial numbers in the pick's order (`pick.ranked`: Pareto layers, knee, noise ties)."""
    cands = [
        pick.Candidate(
            number=r.number,
            values=list(r.values or []),
            metrics=dict(r.metrics),
            knobs={},
            env={},
            params={},
        )
        for r in results
    ]
    return [c.number for c in pick.ranked(cands, objectives)]


def final(
    results: Sequence[rg.RungResult], objectives: Sequence[Mapping[str, Any]], s: Settings
) -> list[int]:
    """A rung's promotions once it has ended (`rungs.promote`, and `rungs.closest` when nothing
    is feasible), the baseline first, then in the pick's order."""
    chosen = set(rg.promote(results, objectives, eta=s.eta, min_promote=s.min_promote))
    near = rg.closest(results, eta=s.eta, min_promote=s.min_promote)
    by = {r.number: r for r in results}
    base = [n for n in sorted(chosen) if by[n].baseline]
    rest = [n for n in ranked([by[n] for n in chosen if not by[n].baseline], objectives)]
    return base + rest + [n for n in near if n not in chosen]


class Ladder:
    """The rungs of one study: `plan` the lengths (the screen first), `screen` the trials
    screened (rung 0's entrants), `baseline` its trial number (None: none), `early` True for
    `async`. Feed it results with `done`, ask it `next`; `decided` once it has decided, `table`
    the ended rungs above the screen (the study's `autotune.rungs`), `notes` what to say."""

    def __init__(
        self,
        plan: Sequence[int],
        screen: Sequence[int],
        *,
        baseline: int | None,
        objectives: Sequence[Mapping[str, Any]],
        settings: Settings,
        early: bool,
    ) -> None:
        self.rungs = [Rung(steps=int(s)) for s in plan]
        self.rungs[0].entrants = list(screen)
        self.baseline, self.objectives, self.s, self.early = baseline, objectives, settings, early
        self.top = len(plan) - 1
        self.table: list[dict[str, Any]] = []
        self.decided: dict[str, Any] | None = None
        self.notes: list[str] = []
        self.running: set[tuple[int, int]] = set()
        self._early: dict[int, tuple[Any, list[int]]] = {}  # rung -> (its results, early list)
        if self.top == 0:
            self.decided = {"steps": plan[0], "rung": 0, "reason": "target", "tau": None}

    def done(self, rung: int, result: rg.RungResult) -> None:
        """Trial `result.number`'s result at `rung` (again: judged anew, it replaces it)."""
        self.rungs[rung].results[result.number] = result
        self.running.discard((result.number, rung))
        self.settle()

    def adopt(self, rung: int, result: rg.RungResult) -> None:
        """A result an earlier run recorded at `rung` (above the screen): promoted then, taken
        as such (whatever order its probes finished in); call `settle` once all are told."""
        n = result.number
        self.rungs[rung - 1].promoted.add(n)
        if n not in self.rungs[rung].entrants:
            self.rungs[rung].entrants.append(n)
        self.rungs[rung].results[n] = result

    def next(self) -> tuple[int, int] | None:
        """The next probe to run, (trial number, rung), from the top rung down; None: none now
        (every promotion that may run has been handed out, or the study has decided)."""
        if self.decided is not None:
            return None
        for k in range(self.top - 1, -1, -1):
            if not self.is_open(k + 1):
                continue
            r = self.rungs[k]
            chosen = r.todo if r.ended else self._early_of(k)
            for n in chosen:
                if n not in r.promoted:
                    return self._promote(n, k)
        return None

    def _promote(self, n: int, k: int) -> tuple[int, int]:
        """Trial `n` goes on from rung `k` to rung `k + 1` (handed out now)."""
        self.rungs[k].promoted.add(n)
        self.rungs[k + 1].entrants.append(n)
        self.running.add((n, k + 1))
        return n, k + 1

    def fill(self) -> tuple[int, int] | None:
        """A promotion beyond the quota for a worker that would otherwise idle
        (`rungs.fill_idle`, `early` only): from the highest rung down, the best finished,
        feasible configuration not yet promoted of a rung `k` that is still running (a probe
        of it has not finished), into rung `k + 1` below the top, once the baseline's result at
        rung `k` is in (feasibility is judged against it). None: none now. It adds probes
        (samples) on workers that would idle while a rung's slowest probes finish; a filled
        entrant counts in its rung's ranking and agreement like any other. Not from a rung that
        has ended (its ranking is final and its quota chosen: filling from it, the screen
        above all, adds many probes and holds the rung above open), and not into the top rung
        (its probes are the study's longest: one started late would hold the decision);
        benchmarks/rung_idle_sim.py measured both."""
        if not self.early or self.decided is not None:
            return None
        for k in range(self.top - 2, -1, -1):
            r, above = self.rungs[k], self.rungs[k + 1]
            if r.ended or above.ended or not self.is_open(k + 1):
                continue
            if self.baseline in r.entrants and self.baseline not in r.results:
                continue
            waiting = [
                x
                for x in r.results.values()
                if x.feasible
                and not x.baseline
                and x.values is not None
                and x.number not in r.promoted
            ]
            if waiting:
                return self._promote(ranked(waiting, self.objectives)[0], k)
        return None

    def is_open(self, j: int) -> bool:
        """Whether rung `j` may take promotions now: the rung below is ended and the growth
        rule grew past it, or (`early`) the rule would grow past it whatever its agreement."""
        if self.decided is not None or j > self.top or j < 1:
            return False
        below = self.rungs[j - 1]
        if below.ended:
            return bool(below.growth)
        if not self.early or (j > 1 and not self.is_open(j - 1)):
            return False
        known = [row["agreement"] for row in self.table][: j - 1]
        assumed = known + [AGREES] * (j - 1 - len(known))
        return self._grows(assumed, at_target=False)[0]

    def _grows(self, agreements: list[Any], *, at_target: bool) -> tuple[bool, str]:
        s = self.s
        return rg.should_grow(
            agreements,
            threshold=s.agreement,
            min_n=s.min_agreement_n,
            grow=s.grow,
            at_target=at_target,
            pairs=s.agree_rungs,
        )

    def _early_of(self, k: int) -> list[int]:
        """Rung `k`'s early promotions (`early`), ranked again only when its results changed."""
        if not self.early:
            return []
        r = self.rungs[k]
        version = tuple((n, x.feasible, tuple(x.values or ())) for n, x in r.results.items())
        seen = self._early.get(k)
        if seen is None or seen[0] != version:
            entered = self.baseline is not None and self.baseline in r.entrants
            got = early(
                list(r.results.values()), self.objectives, eta=self.s.eta, baseline_entered=entered
            )
            self._early[k] = (version, got)
        return self._early[k][1]

    def settle(self) -> None:
        """End every rung whose entrants are final and finished, bottom up."""
        for k, r in enumerate(self.rungs):
            if r.ended:
                continue
            below = self.rungs[k - 1] if k else None
            final_entrants = below is None or (
                below.ended and all(n in below.promoted for n in below.todo)
            )
            if not final_entrants or any(n not in r.results for n in r.entrants):
                return
            self._end(k)
            if self.decided is not None:
                return

    def _end(self, k: int) -> None:
        """Rung `k` has ended: its agreement with the rung below, the growth rule, and the
        promotions still owed to the rung above (or the decision)."""
        r = self.rungs[k]
        r.ended = True
        results = [r.results[n] for n in r.entrants]
        tau = None
        if k > 0:
            below = list(self.rungs[k - 1].results.values())
            ag = rg.agreement(below, results, self.objectives, min_n=self.s.min_agreement_n)
            self.table.append(
                {"rung": k, "steps": r.steps, "numbers": sorted(r.entrants), "agreement": ag}
            )
            tau = ag.get("tau")
            grow, why = self._grows(
                [row["agreement"] for row in self.table], at_target=k == self.top
            )
        else:
            grow, why = True, ""
        if grow:
            owed = final(results, self.objectives, self.s)
            if not owed:
                grow, why = False, "no feasible configuration to promote"
            else:
                self._say_closest(k, results, owed)
                r.todo = owed
        r.growth = grow
        if not grow:
            if k == self.top and self.baseline is not None and r.entrants == [self.baseline]:
                why = "no feasible configuration to promote; the baseline alone"
            self.decided = {"steps": r.steps, "rung": k, "reason": why, "tau": tau}

    def _say_closest(self, k: int, results: list[rg.RungResult], owed: list[int]) -> None:
        near = rg.closest(results, eta=self.s.eta, min_promote=self.s.min_promote)
        if near:
            self.notes.append(
                f"nothing is feasible at {self.rungs[k].steps} steps, not even the defaults: "
                f"the {len(near)} closest to feasible go on (least constraint violation): "
                f"trials {', '.join(map(str, near))}"
            )
        elif self.baseline is not None and owed == [self.baseline]:
            self.notes.append(
                f"no feasible configuration to promote at {self.rungs[k].steps} steps: the "
                "baseline alone goes on to the target"
            )
