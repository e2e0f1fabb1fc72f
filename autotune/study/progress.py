"""The live view of a study in the terminal: trials done, running, failed and diverged, the best
so far, and the time left.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from autotune import space as sp
from autotune.errors import one_line
from autotune.numbers import finite
from autotune.probe.outcome import Outcome


class Progress:
    """Live view: trials done, running, failed and diverged, best so far, time left."""

    def __init__(self, space: sp.Space, total: int, done: int, concurrency: int, quiet: bool):
        from rich.console import Console

        self.space, self.total, self.done0 = space, total, done
        self.concurrency, self.quiet = concurrency, quiet
        self.console = Console(stderr=False, highlight=False)
        self.counts = {o.value: 0 for o in Outcome}
        self.running: dict[int, float] = {}  # trial number -> when it was handed to Ray
        self.best: dict[str, float] = {}
        self.durations: list[float] = []  # of the trials finished in this session
        self._live: Any = None

    def __enter__(self) -> Progress:
        if not self.quiet and self.console.is_terminal:
            from rich.live import Live

            self._live = Live(
                self._status(),
                console=self.console,
                refresh_per_second=1,
                transient=True,
                get_renderable=self._status,
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def _done(self) -> int:
        return self.done0 + sum(self.counts.values())

    def _status(self) -> str:
        left = self.total - self._done()
        eta = ""
        if left > 0:
            now = time.time()
            secs = eta_s(
                left - len(self.running),
                self.durations,
                [now - t for t in self.running.values()],
                self.concurrency,
            )
            eta = ", estimating time left" if secs is None else f", ~{fmt_s(secs)} left"
        best = "  ".join(f"best {k} {v:.4g}" for k, v in self.best.items())
        c = self.counts
        return (
            f"[{self._done()}/{self.total}] running {len(self.running)}, "
            f"diverged {c['diverged']}, oom {c['oom']}, failed {c['failed']}{eta}  {best}"
        )

    def say(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, markup=False, soft_wrap=True)

    def started(self, number: int) -> None:
        self.running[number] = time.time()

    def consider(self, metrics: Mapping[str, Any]) -> None:
        """A feasible trial's metrics: the best so far per objective. Also called with the
        trials a resumed study finished before (the driver that ran them stopped)."""
        for obj in self.space.objectives:
            v = metrics.get(obj.metric)
            if v is None:
                continue
            cur = self.best.get(obj.metric)
            better = cur is None or (v < cur if obj.direction == "minimize" else v > cur)
            if better:
                self.best[obj.metric] = float(v)

    def finished(self, o: Mapping[str, Any]) -> None:
        # Measured here, from hand-over to record, like the running trials' elapsed time: it
        # includes the scheduling and process start that the probe's own wall_s leaves out.
        t = self.running.pop(o["number"], None)
        self.counts[o["outcome"]] = self.counts.get(o["outcome"], 0) + 1
        if t is not None:
            self.durations.append(time.time() - t)
        elif o.get("wall_s"):
            self.durations.append(float(o["wall_s"]))
        metrics = (o.get("summary") or {}).get("metrics") or {}
        if o.get("feasible"):
            self.consider(metrics)
        label = "baseline" if o.get("baseline") else "trial"
        what = o["outcome"] + (f" ({o['cause']})" if o.get("cause") else "")
        if o["outcome"] == Outcome.FAILED and o.get("error"):
            what += f": {one_line(o['error'])}"
        if not o.get("feasible") and o["outcome"] == Outcome.COMPLETE:
            # an objective with no finite value (told a stand-in) makes it infeasible too
            why = [
                f"no finite {obj.metric}"
                for obj in self.space.objectives
                if finite(metrics.get(obj.metric)) is None
            ]
            why += [
                f"{c.metric} {c.op} {c.value:g}"
                for c, v in zip(
                    self.space.constraints, (o.get("constraints") or [0])[1:], strict=False
                )
                if v > 0
            ]
            what += f" (infeasible: {', '.join(why)})" if why else " (infeasible)"
        vals = "  ".join(
            f"{obj.metric} {metrics[obj.metric]:.4g}"
            for obj in self.space.objectives
            if metrics.get(obj.metric) is not None
        )
        self.say(
            f"  {label} {o['number']:>3}  {what:<22} {vals}  [{float(o.get('wall_s') or 0):.0f} s]"
        )
        if self._live is None:
            self.say(f"    {self._status()}")


def eta_s(
    unstarted: int, durations: Sequence[float], elapsed: Sequence[float], concurrency: int
) -> float | None:
    """Seconds left in a study: None (still estimating) until a trial has finished.

    Each trial not started takes the mean duration of the finished ones, each running one the
    rest of that mean (nothing once it has run longer); the work is shared by `concurrency`
    slots, and the study cannot end before its longest running trial does. As time passes
    with no trial finishing, the estimate only falls."""
    if not durations:
        return None
    mean = sum(durations) / len(durations)
    rest = [max(0.0, mean - e) for e in elapsed]
    shared = (max(0, unstarted) * mean + sum(rest)) / max(1, concurrency)
    return max([shared, *rest])


def fmt_s(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"
