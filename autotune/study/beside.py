"""The baseline's verification seeds, run beside the top rung.

Once the top rung runs the study decides at the target, and the verification phase then runs
the baseline at the target over `verify.seeds` seeds whatever is picked (it is the yardstick
every candidate is compared with, seed by seed). Those seeds need nothing from the rungs, so
they run beside the top rung's probes, on workers that would otherwise idle while the rung's
slowest probe finishes; each seed is written where the verification phase reads it
(`autotune.study.verification.saved_seeds`), which then runs only the rest. No sample is
added: the same seeds, earlier.

- `rungs.promotion: sync`: the seeds join the top rung's batch, after its probes (`jobs`).
- `rungs.promotion: async`: a worker the ladder has no promotion for takes the next seed once
  the top rung has an entrant (`job`); on one worker nothing changes (a free worker with no
  promotion means the ladder has decided). benchmarks/rung_idle_sim.py ("baseline verified
  beside") measured what it saves on 16 workers.

Not run: with `verify.top_k: 0`, without a baseline, once the ladder has decided, or for a seed
whose file is already there. A study whose top rung leaves no feasible candidate to verify
records the baseline alone from them (`verification.ran_beside`); they count in its samples
(`autotune.study.compute` reads the files) either way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.recipe import verify as vf
from autotune.recipe.seeds import timing_group
from autotune.study import promotion as pm
from autotune.study.folder import verify_path
from autotune.study.progress import fmt_s
from autotune.study.verification import baseline_candidate, record_seed, seed_job
from autotune.study.workers import ProbeJob

#: The first element of a beside job's key, (KIND, seed, the baseline's trial number); a rung
#: job's key starts with a trial number.
KIND = "verify"


class Beside:
    """Hands out the baseline's verification seeds at the top rung's length `steps`: all at
    once (`jobs`, the synchronous rungs), or one at a time while `ladder` is undecided and its
    top rung has an entrant (`job`, the asynchronous rungs); records each (`done`)."""

    def __init__(
        self,
        space: sp.Space,
        study: Any,
        study_dir: Path,
        steps: int,
        say: Callable[[str], None],
        ladder: pm.Ladder | None = None,
    ) -> None:
        self.space, self.study_dir, self.ladder, self.say = space, study_dir, ladder, say
        self.steps = steps
        self.group = timing_group("beside the top rung")
        top_k, n = space.verify.top_k, space.verify.seeds
        base = baseline_candidate(study, space, self.steps) if top_k > 0 and n > 0 else None
        self.base = base
        self.todo = [] if base is None else vf.seeds_for(space.probe.seed, n)

    def job(self) -> ProbeJob | None:
        """The baseline's next verification seed to run now (the asynchronous rungs); None:
        none (see the module)."""
        ladder = self.ladder
        if ladder is None or ladder.decided is not None or ladder.top < 1:
            return None
        if not ladder.rungs[ladder.top].entrants:
            return None
        got = self._next()
        if got is not None:
            self.say(
                f"verification: baseline (trial {got.key[2]}) seed {got.key[1]} at {self.steps} "
                "steps, beside the top rung"
            )
        return got

    def jobs(self) -> list[ProbeJob]:
        """Every verification seed of the baseline not yet run (the synchronous top rung)."""
        out = list(iter(self._next, None))
        if out:
            self.say(
                f"  beside them, the baseline's verification (trial {out[0].key[2]}) at "
                f"{self.steps} steps: seeds {', '.join(str(j.key[1]) for j in out)}"
            )
        return out

    def _next(self) -> ProbeJob | None:
        while self.base is not None and self.todo:
            seed = self.todo.pop(0)
            if verify_path(self.study_dir, self.base.number, seed, self.steps).is_file():
                continue
            key = (KIND, seed, self.base.number)
            return seed_job(self.space, self.base, seed, self.steps, key)
        return None

    def done(self, job: ProbeJob, out: dict[str, Any], elapsed_s: float) -> None:
        """Write the seed's outcome where the verification phase reads it."""
        assert self.base is not None
        seed = int(job.key[1])
        number = self.base.number
        record_seed(self.study_dir, self.space, number, seed, out, self.steps, self.group)
        self.say(
            f"  baseline (trial {self.base.number}) seed {seed} at {self.steps} steps: "
            + f"{out.get('outcome')}"
            + (f" ({out['cause']})" if out.get("cause") else "")
            + f"  [{fmt_s(elapsed_s)}]"
        )


def is_beside(job: ProbeJob) -> bool:
    """Whether `job` is a verification seed `Beside` handed out."""
    return isinstance(job.key, tuple) and len(job.key) == 3 and job.key[0] == KIND
