"""The verification phase: the best candidates re-run with other seeds (see
`autotune.recipe.verify`), their verified numbers stored in the study and MLflow.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.errors import one_line
from autotune.probe.outcome import Outcome
from autotune.probe.summary import loss_of
from autotune.recipe import verify as vf
from autotune.recipe.seeds import ran_whole, timing_group
from autotune.study import attrs as ua
from autotune.study import pick
from autotune.study.folder import verify_path, write_json
from autotune.study.improvement import baseline_at, broken
from autotune.study.objectives import feasible, reference, vacuous
from autotune.study.options import StudyOptions
from autotune.study.progress import fmt_s
from autotune.study.records import baseline_trial
from autotune.study.rungs import target_of
from autotune.study.workers import ProbeJob, run_jobs
from autotune.study.writer import MlflowWriter


def to_verify(study: Any, space: sp.Space) -> list[Any]:
    """The best `verify.top_k` searched candidates (by their own values) not yet verified, and
    the baseline beside them whenever it is not verified at that length: it is the yardstick the
    candidates are compared with, seed by seed (a baseline that is no candidate, e.g. labelled
    diverged at the screen, is verified all the same)."""
    if space.verify.top_k <= 0:
        return []
    objectives = [o.model_dump() for o in space.objectives]
    cands = pick.candidates(study)
    # the baseline takes no place among the top_k: it is verified beside them whatever its rank
    plain = [dataclasses.replace(c, verified=None) for c in cands if not c.baseline]
    top = {c.number for c in pick.ranked(plain, objectives)[: space.verify.top_k]}
    out = [c for c in cands if c.number in top and c.verified is None]
    if not top:
        return out
    base = baseline_candidate(study, space)
    if base is not None and not any(c.number == base.number for c in out):
        out.insert(0, base)
    return out


def ran_beside(study: Any, space: sp.Space, study_dir: Path) -> list[Any]:
    """With no candidate to verify (`to_verify` empty: nothing at the top rung was feasible),
    the baseline alone when every one of its verification seeds already ran beside the top
    rung (`autotune.study.beside`): recorded, they say how the defaults fared at the target
    (`show --json`'s `verified`) at no further cost; left unread, they were spent for nothing
    and the summary had no verified row beside the seeds it counted. Else nothing."""
    base = baseline_candidate(study, space) if space.verify.top_k > 0 else None
    if base is None or base.steps == space.probe.steps:  # beside seeds run above the screen
        return []
    seeds = vf.seeds_for(space.probe.seed, space.verify.seeds)
    ran = all(verify_path(study_dir, base.number, s, int(base.steps)).is_file() for s in seeds)
    return [base] if seeds and ran else []


def baseline_candidate(study: Any, space: sp.Space, steps: int | None = None) -> Any | None:
    """The baseline as a configuration to verify at `steps` (None: the decided length); None
    when there is no baseline, or it was verified there already."""
    t = baseline_trial(study)
    if t is None:
        return None
    steps = decided_steps(study, space) if steps is None else steps
    done = pick.verified_results(study).get(t.number)
    if done is not None and done.get("steps") == steps:
        return None
    return pick.Candidate(
        number=t.number,
        values=[float(v) for v in (t.values or [])],
        metrics=ua.metrics(t),
        knobs=ua.knobs(t) or space.baseline_knobs(),
        env=ua.env(t) or space.baseline_env(),
        params=dict(t.params),
        baseline=True,
        steps=steps,
    )


def decided_steps(study: Any, space: sp.Space) -> int:
    """The length the study's answer is decided at: the top rung reached (else the screen)."""
    decided = ua.decided(study)
    return int(decided.get("steps") or space.probe.steps)


def save_seed(
    study_dir: Path, number: int, seed: int, out: dict[str, Any], steps: int
) -> dict[str, Any]:
    """Write one seed's outcome atomically, of its step series the loss alone (`loss_series`,
    logged to the verification's MLflow run); return what was written."""
    slim = dict(out)
    if slim.get("summary"):
        loss = loss_of(slim["summary"])
        if loss:
            slim["loss_series"] = loss
        slim["summary"] = {k: v for k, v in slim["summary"].items() if k != "series"}
    write_json(verify_path(study_dir, number, seed, steps), slim)
    return slim


def seed_job(space: sp.Space, c: Any, seed: int, steps: int, key: Any) -> ProbeJob:
    """Candidate `c`'s verification probe over `seed` at `steps` (the baseline's run as the
    yardstick is), its time limit the probe's scaled to the length; `key` the caller's."""
    probe = sp.probe_config(space, knobs=c.knobs, env=c.env, seed=seed, steps=steps)
    timeout = space.budget.trial_timeout_s * steps / space.probe.steps
    return ProbeJob(key, probe.for_baseline(c.baseline), c.env, timeout_s=timeout)


def record_seed(
    study_dir: Path,
    space: sp.Space,
    number: int,
    seed: int,
    out: dict[str, Any],
    steps: int,
    group: str,
) -> dict[str, Any]:
    """Trial `number`'s verification seed finished: labelled (seed, trial, the LR schedule's
    length, `group`: the batch of runs it ran in, `seeds.timing_group`) and written
    (`save_seed`); what was written."""
    out.update(seed=seed, number=number, schedule_steps=target_of(space), timing_group=group)
    return save_seed(study_dir, number, seed, out, steps)


def seeds_kept(study: Any, space: sp.Space) -> str | None:
    """The warning when the study's verified configurations ran on another number of seeds
    than `verify.seeds` now asks (raised on a --resume): a finished verification is kept as it
    ran, not extended, so its intervals are over the seeds it had. None when they agree."""
    ran: dict[int, list[Any]] = {}
    for key, value in study.user_attrs.items():
        if ua.verified_of(key) is not None and isinstance(value, dict):
            seeds = value.get("seeds")
            if isinstance(seeds, list) and len(seeds) != space.verify.seeds:
                ran.setdefault(len(seeds), seeds)
    if not ran:
        return None
    n, seeds = next(iter(ran.items()))
    return (
        f"verify.seeds is {space.verify.seeds}, but the configurations verified earlier ran on "
        f"{n} seed(s) ({seeds}): a finished verification is kept as it ran, not run again on "
        "other seeds (its intervals are over those); to verify on "
        f"{space.verify.seeds}, start a new study (another name) or `autotune verify` its recipe "
        f"with --seeds {space.verify.seeds}"
    )


def verify_phase(
    opts: StudyOptions, study: Any, logger: MlflowWriter, study_dir: Path, ray: Any
) -> bool:
    """Re-run the best candidates with other seeds; store the verified numbers in the study and
    MLflow. Returns True when interrupted (what finished is kept: the next run continues)."""
    space = opts.space
    todo = to_verify(study, space) or ran_beside(study, space, study_dir)
    if not todo:
        return False
    steps = decided_steps(study, space)
    timeout = space.budget.trial_timeout_s * steps / space.probe.steps
    say = (lambda _t: None) if opts.quiet else print
    seeds = vf.seeds_for(space.probe.seed, space.verify.seeds)
    metrics = verified_metrics(space)
    say(f"verifying {verifying_text(todo)} with seeds {seeds} at {steps} steps")
    results, pending = saved_seeds(study_dir, todo, seeds, steps)
    total = len(todo) * len(seeds)
    if len(pending) < total:
        say(f"  {total - len(pending)} of {total} seed(s) already run (read back)")

    # Interleaved by seed (`in_seed_order`): each seed's runs of every configuration and the
    # baseline are handed out together, so a change in the machine's load falls on the arms of
    # a paired seed alike. The baseline's seeds are the reference of the others' relative
    # constraints: a candidate is recorded once they are all in (when the baseline is verified).
    base = next((c.number for c in todo if c.baseline), None)
    pending = in_seed_order(pending, seeds)
    group = timing_group("in the verification phase")
    recorded: set[int] = set()

    def finish_ready() -> None:
        base_done = base is None or len(results[base]) == len(seeds)
        for c in todo:
            if c.number in recorded or len(results[c.number]) < len(seeds):
                continue
            if base_done or c.number == base:
                recorded.add(c.number)
                _record_verified(
                    study, space, logger, c, results[c.number], metrics, steps, say, study_dir
                )

    def done(job: ProbeJob, out: dict[str, Any], elapsed_s: float) -> None:
        c, seed = job.key
        results[c.number].append(record_seed(study_dir, space, c.number, seed, out, steps, group))
        say(seed_line(sum(len(v) for v in results.values()), total, c.number, seed, out, elapsed_s))
        finish_ready()

    finish_ready()
    jobs = [seed_job(space, c, seed, steps, (c, seed)) for c, seed in pending]
    return not run_jobs(space, ray, jobs, timeout, done, lambda _s: INTERRUPTED)


def verifying_text(todo: list[Any]) -> str:
    """`2 configurations (trials 3, 9) beside the baseline (trial 0)`: what is verified."""
    cands = [c.number for c in todo if not c.baseline]
    base = [c.number for c in todo if c.baseline]
    text = ""
    if cands:
        text = (
            f"{len(cands)} configuration{'s' if len(cands) > 1 else ''} "
            f"(trial{'s' if len(cands) > 1 else ''} {', '.join(map(str, cands))})"
        )
    if base:
        text += f"{' beside ' if cands else ''}the baseline (trial {base[0]})"
    return text


def verified_metrics(space: sp.Space) -> list[str]:
    """The metrics a configuration's seeds are summarised over: the objectives', then the ones
    every verification reports."""
    return list(dict.fromkeys([*(o.metric for o in space.objectives), *vf.REPORTED]))


def seed_line(n: int, total: int, number: int, seed: int, out: dict[str, Any], took: float) -> str:
    """`  [4/9] trial 3 seed 2: failed (exception): ValueError: ...  [12 s]`: a seed's line."""
    why = _error(out) if out["outcome"] == Outcome.FAILED else ""
    return (
        f"  [{n}/{total}] trial {number} seed {seed}: {out['outcome']}"
        + (f" ({out['cause']})" if out.get("cause") else "")
        + (f": {why}" if why else "")
        + f"  [{fmt_s(took)}]"
    )


def _error(out: dict[str, Any]) -> str:
    """A failed seed's error as the summary's failures say it (`errors.one_line`)."""
    return one_line(out.get("error") or "")


def in_seed_order(pending: list[tuple[Any, int]], seeds: list[int]) -> list[tuple[Any, int]]:
    """The (candidate, seed) runs in the order they are handed out: seed by seed, and within a
    seed the baseline first, then the candidates in their order (a stable sort)."""
    return sorted(pending, key=lambda cs: (seeds.index(cs[1]), not cs[0].baseline))


#: What an interrupted verification says (on stderr).
INTERRUPTED = "interrupted during verification; run the same command again to finish it"


def saved_seeds(
    study_dir: Path, todo: list[Any], seeds: list[int], steps: int
) -> tuple[dict[int, list[dict[str, Any]]], list[tuple[Any, int]]]:
    """The seeds a previous run verified at `steps` (read back from their files), and the ones
    to run."""
    results: dict[int, list[dict[str, Any]]] = {c.number: [] for c in todo}
    pending: list[tuple[Any, int]] = []
    for c in todo:
        for seed in seeds:
            path = verify_path(study_dir, c.number, seed, steps)
            if path.is_file():
                results[c.number].append(json.loads(path.read_text()))
            else:
                pending.append((c, seed))
    return results, pending


def _record_verified(
    study: Any,
    space: sp.Space,
    logger: MlflowWriter,
    c: Any,
    runs: list[dict[str, Any]],
    metrics: list[str],
    steps: int,
    say: Callable[[str], Any],
    study_dir: Path,
) -> None:
    """A candidate's seeds summarised, logged to MLflow, stored in the study and announced."""
    runs = sorted(runs, key=lambda r: r["seed"])
    res = vf.summarize_seeds(runs, metrics)
    res["steps"] = steps
    res["schedule_steps"] = target_of(space)
    judge_seeds(study, space, study_dir, res, runs)
    res["run_id"] = logger.seed_runs(c.number, res, runs)
    study.set_user_attr(ua.verified_key(c.number), res)
    shown = "  ".join(f"{m} {vf.format_interval(res['metrics'].get(m))}" for m in metrics[:2])
    say(f"  verified trial {c.number}: {shown}  diverged {res['diverged_share']:.0%} of seeds")


def judge_seeds(
    study: Any, space: sp.Space, study_dir: Path, res: dict[str, Any], runs: list[dict[str, Any]]
) -> None:
    """Per seed `feasible` (complete, and within every constraint: not only "not diverged"),
    the relative ones against the baseline's run at that seed and length, and `broken`, the
    constraints a complete seed breaks (`improvement.broken`); `all_feasible`;
    `vacuous`: the relative constraints some seed had no baseline value for."""
    steps = int(res["steps"])
    refs = baseline_references(study, space, study_dir, steps, [int(r["seed"]) for r in runs])
    for row, r, ref in zip(res["runs"], runs, refs, strict=True):
        row["feasible"] = r.get("outcome") == Outcome.COMPLETE and feasible(
            space, Outcome.COMPLETE, _metrics(r), ref
        )
        if r.get("outcome") == Outcome.COMPLETE and not row["feasible"]:
            # which, for the summary to name (`verdict.why_defaults_not_taken`)
            row["broken"] = broken(space, _metrics(r), ref, objectives=False)
    res["all_feasible"] = all(row["feasible"] for row in res["runs"])
    res["vacuous"] = sorted({label for ref in refs for label in vacuous(space, ref)})


def baseline_references(
    study: Any, space: sp.Space, study_dir: Path, steps: int, seeds: list[int]
) -> list[dict[str, Any] | None]:
    """Per seed, the baseline's metrics a verification seed is judged against: its verified
    run at the same seed and steps when the baseline was verified, else its run at that length
    (`improvement.baseline_at`: its record at the decided rung, or its screen when that is the
    decided length). None: no reference (vacuous)."""
    base = baseline_trial(study)
    if base is None:
        return [None] * len(seeds)
    state = baseline_at(study, space, base, steps)
    at_length = reference(state["outcome"], state["metrics"], ran_whole(state)) if state else None
    out = []
    for seed in seeds:
        path = verify_path(study_dir, base.number, seed, steps)
        if path.is_file():
            run = json.loads(path.read_text())
            out.append(reference(run.get("outcome"), _metrics(run), ran_whole(run.get("summary"))))
        else:
            out.append(at_length)
    return out


def _metrics(run: dict[str, Any]) -> dict[str, Any]:
    return dict((run.get("summary") or {}).get("metrics") or {})
