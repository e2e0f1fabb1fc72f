"""The confirmation phase (`confirmed` says why and what it stores): a pick chosen among several
verified configurations that reads `better` than the defaults runs again beside the baseline on
fresh seeds, and the verdict is judged over all their seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune import tracking
from autotune.recipe import paired as pd
from autotune.recipe import verify as vf
from autotune.recipe.seeds import timing_group
from autotune.study import attrs as ua
from autotune.study import pick as pk
from autotune.study.confirmed import fresh_seeds, judged, verified_among
from autotune.study.folder import read_json, verify_path
from autotune.study.options import StudyOptions
from autotune.study.verdict import baseline_choice, decide
from autotune.study.verification import (
    decided_steps,
    in_seed_order,
    judge_seeds,
    record_seed,
    saved_seeds,
    seed_job,
    seed_line,
    verified_metrics,
)
from autotune.study.workers import ProbeJob, run_jobs
from autotune.study.writer import MlflowWriter

#: What an interrupted confirmation says (on stderr).
INTERRUPTED = "interrupted while confirming the pick on fresh seeds; run the same command again"


def to_confirm(study: Any, space: sp.Space) -> tuple[Any, Any, int] | None:
    """(the pick, the baseline, how many searched configurations it was chosen among) when the
    study's balanced pick was chosen among more than one verified searched configuration at
    the decided length, reads `better` than the baseline there but not with the error shared
    over those it was chosen among as well, and has no confirmation yet; else None."""
    if space.verify.top_k < 2 or space.verify.seeds < 2:
        return None
    steps = decided_steps(study, space)
    among = verified_among(study, steps)
    if among < 2:
        return None
    cands = pk.candidates(study)
    objectives = [o.model_dump() for o in space.objectives]
    try:
        decision = decide(study, cands, objectives, "balanced")
    except pk.NoCandidateHolds:
        return None
    first = decision.first
    if first.baseline or first.verified is None or first.verified.get("steps") != steps:
        return None
    if not (decision.verdict.get("confirmation") or {}).get("pending"):  # `confirmed.awaiting`
        return None
    base = baseline_choice(study, cands, steps)
    if base is None or base.verified is None:
        return None
    return first, base, among


def confirm_phase(
    opts: StudyOptions, study: Any, logger: MlflowWriter, study_dir: Path, ray: Any
) -> bool:
    """Run the confirmation `to_confirm` asks for, store it and say its verdict. Returns True
    when interrupted (the seeds that finished are kept: the next run continues)."""
    space = opts.space
    todo = to_confirm(study, space)
    if todo is None:
        return False
    first, base, among = todo
    steps = decided_steps(study, space)
    seeds = fresh_seeds(space)
    say = (lambda _t: None) if opts.quiet else print
    say(
        f"confirming trial {first.number}, better than the baseline on seeds "
        f"{first.verified.get('seeds')} where it was chosen among {among}: both again with "
        f"fresh seeds {seeds} at {steps} steps"
    )
    results, pending = saved_seeds(study_dir, [base, first], seeds, steps)
    pending = in_seed_order(pending, seeds)
    group = timing_group("in the confirmation")
    total = 2 * len(seeds)
    if len(pending) < total:
        say(f"  {total - len(pending)} of {total} seed(s) already run (read back)")

    def done(job: ProbeJob, out: dict[str, Any], elapsed_s: float) -> None:
        c, seed = job.key
        results[c.number].append(record_seed(study_dir, space, c.number, seed, out, steps, group))
        say(seed_line(sum(len(v) for v in results.values()), total, c.number, seed, out, elapsed_s))

    timeout = space.budget.trial_timeout_s * steps / space.probe.steps
    jobs = [seed_job(space, c, seed, steps, (c, seed)) for c, seed in pending]
    if not run_jobs(space, ray, jobs, timeout, done, lambda _s: INTERRUPTED):
        return True
    mine, mine_runs = _over_all(study, space, study_dir, first, results[first.number], steps)
    theirs, base_runs = _over_all(study, space, study_dir, base, results[base.number], steps)
    tags = {tracking.TAG_CONFIRMATION: "true"}  # each side's every seed, an MLflow run
    conf = {
        "number": first.number,
        "baseline": base.number,
        "steps": steps,
        "among": among,
        "chosen_on": list(first.verified.get("seeds") or []),
        "seeds": seeds,
        "first_verdict": "better",
        "pick": mine,
        "baseline_result": theirs,
        "run_ids": {
            str(c.number): logger.seed_runs(c.number, res, runs, f"confirm-{c.number:04d}", tags)
            for c, res, runs in ((first, mine, mine_runs), (base, theirs, base_runs))
        },
    }
    study.set_user_attr(ua.CONFIRMED, conf)
    objectives = [o.model_dump() for o in space.objectives]
    verdict = judged(conf, pd.compared_metrics(objectives))
    say(f"  {pd.format_line(verdict, label=f'trial {first.number}')}")
    return False


def _over_all(
    study: Any, space: sp.Space, study_dir: Path, c: Any, fresh: list[dict[str, Any]], steps: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Candidate `c`'s seeds summarised over its verification's and the fresh ones, and their
    records (the verification's read back from their files)."""
    read = [
        read_json(verify_path(study_dir, c.number, int(seed), steps))
        for seed in (c.verified or {}).get("seeds") or []
    ]
    runs = sorted([r for r in read if r is not None] + fresh, key=lambda r: r["seed"])
    res = vf.summarize_seeds(runs, verified_metrics(space))
    res["steps"] = steps
    judge_seeds(study, space, study_dir, res, runs)
    return res, runs
