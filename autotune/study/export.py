"""From a finished study to a recipe: pick a candidate, gather its record, write the file."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from autotune import __version__, outfile
from autotune import space as sp
from autotune.errors import RecipeError
from autotune.recipe import Recipe, exporters, now_iso
from autotune.recipe.inactive import active_knobs
from autotune.study import attrs as ua
from autotune.study import folder, pick, short_of, unfinished, verdict
from autotune.study.fidelity import rank_fidelity
from autotune.study.find import find_study
from autotune.study.folder import read_rung_record
from autotune.study.neighbours import pareto_neighbours, screened
from autotune.study.objectives import trial_setup
from autotune.study.records import count_finished, read_outcome
from autotune.study.session import driver_running
from autotune.study.verification import decided_steps
from autotune.tracking import redact
from autotune.tracking.redaction import unredacted
from autotune.tracking.sqlite_runs import study_trial_runs


def recipe_from_study(
    ref: str, how: str = "balanced", storage: str | None = None, audit: bool = False
) -> Recipe:
    """The recipe of the candidate `how` picks in study `ref` (folder, name or --storage).
    `audit`: also record this machine's op audit (`autotune migrate` compares with it)."""
    study, space, study_dir, meta = find_study(ref, storage)
    objectives = [o.model_dump() for o in space.objectives]
    cands = pick.picked_candidates(study, how)  # a trial N the study has not: refused
    if not cands:
        _refuse_none(study, space, objectives)
    left = unfinished.state(study, space, driver_running(study_dir) if study_dir else None)
    partial = unfinished.verification_partial(left)  # then no partial one weighs on a pick
    decision = verdict.decide(study, cands, objectives, how, partial=partial)
    chosen = decision.chosen
    vs = _vs_baseline(study, cands, decision)
    outcome = _trial_record(study_dir, chosen.number)
    fp = (outcome or {}).get("fingerprint")
    summary = (outcome or {}).get("summary") or {}
    mlflow_meta = dict(study.user_attrs.get(ua.MLFLOW) or {})
    run_ids = _trial_run_ids(mlflow_meta, meta.get("tracking_uri"))
    probe = _probe_settings(space, fp, chosen.steps)
    short = short_of.recipe_short(chosen, int(probe.get("steps") or 0), decided_steps(study, space))
    if short:  # no baseline measured at another length beside its numbers
        vs["baseline"] = None
    knobs = active_knobs({**space.fixed_knobs(), **chosen.knobs})
    if knobs.get("lr") is None:
        raise RecipeError(f"study {space.name} trial {chosen.number}: no resolved learning rate")
    retried = _oom_retried(outcome or {}, space)
    at_length = _at_length(study_dir, chosen, ua.decided(study), summary)
    recipe = Recipe(
        name=f"{space.name}-trial{chosen.number}",
        workload=_workload(space, at_length, summary),
        precision=space.probe.precision,
        micro_batch=_micro_batch(knobs, summary, space),
        knobs=knobs,
        env=dict(chosen.env),
        world_size=space.probe.world_size,
        probe=probe,
        achieved=_achieved(chosen, objectives),
        fingerprint=fp,
        source={
            "study": space.name,
            "storage": _redact(meta.get("storage")),
            "study_dir": str(study_dir) if study_dir else None,
            "trial": chosen.number,
            "pick": pick.parse_pick(how)[0],
            # The paired verdict of the named pick (or trial N) against the baseline over the
            # verification seeds; `defaults`: the pick gave way to PyTorch's defaults.
            "defaults": decision.defaults_preferred,
            "baseline": bool(chosen.baseline),  # the exported configuration is the defaults
            "first_choice": decision.first.number,
            "neighbours": _neighbours(study, space, cands, chosen, objectives, how),
            **({"unfinished": left} if left else {}),
            **({"short_of_decided": short} if short else {}),
            "vs_baseline": vs,
            "searched": sorted(set(space.searched()) - set(ua.dropped(study))),  # not dropped
            "fp_hash": chosen.fp_hash,
            # What the study spent, in samples (`autotune migrate` weighs its own cost by it).
            # With the samples saved against every trial (and the same verification) at the
            # target, and how the rung below the target ranked what reached it (`fidelity`).
            **_spent(study, space, study_dir, left),
            "rank_fidelity": rank_fidelity(study, space, ua.decided(study)),
            **({"oom_retry": retried} if retried else {}),
            # A script's trial: what applied its knobs (the recipe's optimizer or scheduler,
            # the hf or lightning integration): what its probe was, for the exports.
            **(
                {"script_applied": summary["script_applied"]} if "script_applied" in summary else {}
            ),
            "mlflow": _mlflow_source(mlflow_meta, run_ids.get(chosen.number), chosen.verified),
        },
        recorded=_recorded(
            at_length,
            fp,
            probe,
            space.probe.precision,
            audit,
            _verified_runs(chosen.verified),
        ),
        autotune_version=__version__,
        created_at=now_iso(),
    )
    return recipe.with_digests()  # what verify checks it against: a later edit is seen


def _refuse_none(study: Any, space: sp.Space, objectives: list[dict[str, Any]]) -> NoReturn:
    """Refuse a study with no candidate for the pick, saying why: every trial failed, none has
    finished, feasible trials stopped short of the length it decided at (`short_of`), or none
    is feasible."""
    if pick.only_failures(study):
        raise RecipeError(
            f"study {space.name} has no trial to export: every trial failed, none ran to a "
            f"result. {pick.why_none(study)}. Fix the training job and run the study again"
        )
    finished = count_finished(study)
    if finished == 0:
        raise RecipeError(
            f"study {space.name} has no trial to export: none has finished yet (its baseline, "
            "trial 0, was interrupted or is still running). Run the study's `autotune study` "
            "command again (or add --resume) to resume it"
        )
    if (short_at := short_of.at_target(study, objectives, space.probe.steps)) is not None:
        raise RecipeError(short_of.refusal(space.name, short_at))
    not_done = len(study.get_trials(deepcopy=False)) - finished
    every = f"every finished trial ({finished})" if not_done else "every trial"
    raise RecipeError(
        f"study {space.name} has no feasible trial to export ({every} diverged, failed "
        f"or broke a constraint). Closest: {pick.why_none(study)}. Widen the space, lower "
        "the learning rate, or run more trials"
    )


def _neighbours(
    study: Any,
    space: sp.Space,
    cands: list[Any],
    chosen: Any,
    objectives: list[dict[str, Any]],
    how: str,
) -> list[dict[str, Any]]:
    """The pick's Pareto neighbours (`neighbours.pareto_neighbours`: up to 3 other candidates at
    the decided length on the front, not the baseline, nearest first; then up to 2 on the front
    without the hardware objectives, from the screen where the study decided above it), as
    `autotune migrate` re-runs them: the trial, its knobs resolved as the recipe's are, its env,
    its values, the front it is on."""
    if pick.parse_pick(how)[0] == "trial":  # `cands` also holds trials short of the length
        cands = pick.candidates(study)
    above_screen = bool(ua.decided(study).get("rung"))
    screen = screened(study) if above_screen else None
    out = []
    for c, on in pareto_neighbours(cands, chosen, objectives, screen=screen):
        knobs = active_knobs({**space.fixed_knobs(), **c.knobs})
        if knobs.get("batch") is None:  # as the recipe's: its micro-batch x accum_steps
            accum = int(knobs.get("accum_steps") or 1)
            knobs["batch"] = space.probe.micro_for(accum) * accum
        values = {
            o["metric"]: (float(v) if math.isfinite(float(v)) else None)
            for o, v in zip(objectives, c.values, strict=True)
        }
        entry = {"trial": c.number, "knobs": knobs, "env": dict(c.env), "values": values}
        out.append({**entry, "front": on})
    return out


def _mlflow_source(
    meta: Mapping[str, Any], trial_run_id: str | None, verified: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Where the study's MLflow runs of the trial are (the store redacted)."""
    return {
        "tracking_uri": _redact(meta.get("uri")),
        "experiment_id": meta.get("experiment_id"),
        "study_run_id": meta.get("parent_run_id"),
        "trial_run_id": trial_run_id,
        "verification_run_id": (verified or {}).get("run_id"),
    }


def _vs_baseline(study: Any, cands: list[Any], decision: Any) -> dict[str, Any]:
    """The named pick's paired verdict against the baseline, and where each stands."""
    first = decision.first
    vs = {"steps": first.steps or (first.verified or {}).get("steps"), **decision.verdict}
    vs.update(pick=verdict.standing(first))
    base = verdict.baseline_choice(study, cands, first.steps)
    vs["baseline"] = verdict.standing(base) if base is not None else None
    return vs


def _workload(space: sp.Space, *summaries: Mapping[str, Any]) -> dict[str, Any]:
    """The space's workload; a script's with the SHA-256 of the file the picked trial ran (its
    probe's record: at the decided length, else the screen's), so that verify, repro and
    migrate can say when the script has changed since."""
    out: dict[str, Any] = space.workload.model_dump()
    sha = next((s["script_sha256"] for s in summaries if s.get("script_sha256")), None)
    if out.get("script") and sha:
        out["script_sha256"] = sha
    return out


def _at_length(
    study_dir: Path | None, chosen: Any, decided: dict[str, Any], summary: dict[str, Any]
) -> dict[str, Any]:
    """The summary of the `chosen` trial's probe whose numbers the recipe has (its record at
    the rung they came from: the one the study `decided` at, or for an explicit `trial N`
    that stopped short of it, its longest run), so the recorded curve is the run a migration
    reproduces; the screen's when the numbers are the screen's or there is no such record."""
    rung, steps = chosen.rung, chosen.steps
    if not rung and steps and steps == decided.get("steps"):  # the baseline, verified there
        rung = decided.get("rung")
    if study_dir is None or not rung or not steps:
        return summary
    record = read_rung_record(study_dir, chosen.number, rung, int(steps))
    return dict(record["summary"]) if record is not None and record.get("summary") else summary


def _recorded(
    summary: dict[str, Any],
    fp: dict[str, Any] | None,
    probe: dict[str, Any],
    precision: str,
    audit: bool,
    verified: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The trial's loss curve, its verified seeds (`verified`: `autotune migrate` judges a run
    that drifted against their spread) and, when asked and this is the machine it ran on, the
    op audit."""
    from autotune import fingerprint
    from autotune.repro import record

    out: dict[str, Any] = {}
    curve = record.curve_of(summary)
    if curve:
        out["curve"] = curve
    if verified:
        out["verified"] = verified
    if audit:
        if fp and fingerprint.identity_hash(fingerprint.collect()) != fp.get("hash"):
            raise RecipeError(
                "--audit: this machine is not the one the trial ran on (fingerprint "
                f"{fp.get('hash')}): export with --audit there"
            )
        out["audit"] = record.audit_here(
            str(probe.get("device") or "auto"), precision, probe.get("threads")
        )
    return out


def _verified_runs(verified: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What export records of the recipe's verification (`Candidate.verified`): its length and
    per seed the outcome and the metrics (finite ones); None when it was not verified."""
    if verified is None or not verified.get("runs"):
        return None
    return {
        "steps": verified.get("steps"),
        "runs": [
            {
                "seed": r.get("seed"),
                "outcome": r.get("outcome"),
                "metrics": {
                    k: float(v)
                    for k, v in (r.get("metrics") or {}).items()
                    if isinstance(v, int | float) and math.isfinite(float(v))
                },
            }
            for r in verified["runs"]
        ],
    }


def _spent(
    study: Any, space: Any, study_dir: Path | None, left: dict[str, Any] | None
) -> dict[str, Any]:
    """`compute` (samples: total, screen, rungs, verification) and `compute_saved`, None where
    the folder cannot tell, or the study is unfinished (`left`: `unfinished.spent`): a record
    for the report, an unreadable folder must not stop export."""
    try:
        found = unfinished.spent(study, space, study_dir, left)
    except Exception:
        found = None
    if not found:
        return {"compute": None, "compute_saved": None}
    parts = ("total", "screen", "rungs", "verification")
    return {
        "compute": {k: found[k] for k in parts if k in found},
        "compute_saved": found.get("saved_vs_full"),
    }


def _micro_batch(knobs: dict[str, Any], summary: dict[str, Any], space: Any) -> int:
    """The recipe's micro-batch: the searched (or fixed) batch split into accum_steps, else
    what the trial ran with."""
    if knobs.get("batch") is not None:
        return int(knobs["batch"]) // int(knobs.get("accum_steps") or 1)
    return int(summary.get("micro_batch") or space.probe.micro_batch)


def _trial_record(study_dir: Path | None, number: int) -> dict[str, Any] | None:
    """The picked trial's trials/NNNN.json (None: none, or no study folder); a damaged one is a
    RecipeError naming it: the recipe's fingerprint and the probe's own values come from it."""
    if study_dir is None:
        return None
    record = read_outcome(study_dir, number)
    path = folder.trial_path(study_dir, number)
    if record is None and path.exists():
        raise RecipeError(
            f"{path}: trial {number}'s record is damaged (not a trial's record); the recipe's "
            "fingerprint and the probe's own values come from it: restore the file, or export "
            "another trial (--pick 'trial N')"
        )
    return record


def _oom_retried(outcome: dict[str, Any], space: Any) -> dict[str, Any] | None:
    """When the trial ran out of memory and was retried (probe.oom_retry) at another layout:
    the layout it was asked for and the one it ran with (its record's knobs, which the recipe
    takes, are the latter); else None."""
    summary = outcome.get("summary") or {}
    if not summary.get("oom_retried") or summary.get("micro_batch") is None:
        return None
    knobs, _ = trial_setup(space, outcome.get("params") or {}, bool(outcome.get("baseline")))
    accum = int(knobs.get("accum_steps") or 1)
    asked = {"micro_batch": sp.probe_config(space, knobs=knobs).micro_batch}
    asked["accum_steps"] = accum
    ran = {"micro_batch": int(summary["micro_batch"])}
    ran["accum_steps"] = int(summary.get("accum_steps") or accum)
    return None if ran == asked else {"asked": asked, "ran": ran}


def verdict_note(recipe: Recipe) -> str | None:
    """One line on the paired verdict: why the defaults were exported, or a warning that the
    trial asked for is not better than the defaults (or diverged on some seeds); first, that
    the study was stopped before it finished (or its driver runs now), when it was."""
    src = recipe.source or {}
    left = src.get("unfinished")
    note = _verdict_note(src)
    if not left:
        return note
    stopped = f"study {src.get('study')} " + (
        f"is running now (its driver: {left['driver']}): the pick is the state so far"
        if left.get("driver")
        else str(unfinished.text(left, int(recipe.probe.get("steps") or 0), _target(recipe)))
    )
    return stopped + (f"; {note}" if note else "")


def folder_note(recipe: Recipe) -> str | None:
    """One line when the study's folder (its trial records) was not reachable from here
    (`listing.home_folder`): what the recipe lacks then, and where to export it instead."""
    if (recipe.source or {}).get("study_dir"):
        return None
    return (
        f"study {recipe.source.get('study')}'s folder (its trial records) is not reachable from "
        "here, so the recipe has no fingerprint, loss curve, compute or probe threads; export it "
        "where that folder is, or name the folder: `autotune export FOLDER`"
    )


def _target(recipe: Recipe) -> int:
    """The study's budget.target_steps: what every probe scheduled its LR over."""
    return int(recipe.probe.get("schedule_steps") or recipe.probe.get("steps") or 0)


def _verdict_note(src: Mapping[str, Any]) -> str | None:
    short = src.get("short_of_decided")
    if short:
        return (
            f"trial {src.get('trial')} ran {short['steps']} steps, short of the "
            f"{short['decided_steps']} the study decided at, and was not verified: the "
            f"recipe's numbers are that shorter run's; check it with `autotune verify RECIPE "
            f"--steps {short['decided_steps']}`"
        )
    vs = src.get("vs_baseline") or {}
    v, why = vs.get("verdict"), vs.get("why") or ""
    if src.get("defaults") and src.get("first_choice") == src.get("trial"):
        return f"exporting PyTorch's defaults (trial {src.get('trial')}): {why}"
    if src.get("defaults"):
        return (
            f"exporting PyTorch's defaults (trial {src.get('trial')}): the pick, trial "
            f"{src.get('first_choice')}, showed {verdict.against(v)} them over the same seeds "
            f"({why})"
        )
    share = (vs.get("pick") or {}).get("diverged_share")
    if src.get("pick") == "trial" and v not in (None, "better", "not compared"):
        return (
            f"trial {src.get('trial')} shows {verdict.against(v)} the defaults over the same "
            f"seeds: {why}"
        )
    if share:
        return f"trial {src.get('trial')} diverged on {share:.0%} of its verification seeds"
    return None


def oom_note(recipe: Recipe) -> str | None:
    """One line when the recipe's trial was retried after running out of memory."""
    retried = (recipe.source or {}).get("oom_retry")
    if not retried:
        return None
    a, r = retried["asked"], retried["ran"]
    return (
        f"trial {recipe.source.get('trial')} ran out of memory at micro_batch {a['micro_batch']} "
        f"x accum_steps {a['accum_steps']} and was retried (probe.oom_retry): the recipe has "
        f"what it measured, {r['micro_batch']} x {r['accum_steps']} (batch "
        f"{r['micro_batch'] * r['accum_steps']}, asked {a['micro_batch'] * a['accum_steps']})"
    )


def _achieved(chosen: Any, objectives: list[dict[str, Any]]) -> dict[str, Any]:
    """Per objective: its direction, the trial's own value and, when verified, the interval."""
    achieved = {}
    for i, o in enumerate(objectives):
        ver = None
        if chosen.verified:
            iv = (chosen.verified.get("metrics") or {}).get(o["metric"]) or {}
            ver = {
                "mean": iv.get("mean"),
                "low": iv.get("low"),
                "high": iv.get("high"),
                "n": iv.get("n"),
                "seeds": chosen.verified.get("seeds"),
                "diverged_share": chosen.verified.get("diverged_share"),
            }
        achieved[o["metric"]] = {
            "direction": o["direction"],
            "value": chosen.values[i],
            "verified": ver,
        }
    return achieved


def _probe_settings(space: Any, fp: dict[str, Any] | None, steps: int | None) -> dict[str, Any]:
    """How the probe measured (the layout keys stand at the recipe's top level), at `steps`:
    the length the study decided at, where its rungs went beyond the screen."""
    probe = space.probe.model_dump()
    for key in ("micro_batch", "batch", "precision", "world_size"):
        probe.pop(key, None)
    if steps:  # measured (and verified) at the length the study decided at
        probe["steps"] = steps
    # Every probe scheduled its LR over the target (`sp.probe_config`): the run it measured.
    probe["schedule_steps"] = space.budget.target_steps or space.probe.steps
    if "batch" in space.knobs:  # steps count at this reference batch (equal samples)
        probe["batch"] = space.probe.samples_per_step
    # The initial-loss reference every trial was judged against: verify uses the same.
    ref = sp.probe_config(space)
    probe["reference_batch"], probe["reference_samples"] = ref.reference_chunk, ref.reference_total
    if probe.get("threads") is None and fp and fp.get("platform") == "cpu":
        # On a CPU the threads are part of the measurement: verify with the same number.
        probe["threads"] = (fp.get("env") or {}).get("torch_threads")
    return probe


def _trial_run_ids(meta: dict[str, Any], given: str | None) -> dict[int, str]:
    """The MLflow run of each trial. The study records its store redacted: it is reached by the
    URI study.json keeps (`given`) or $MLFLOW_TRACKING_URI, whichever it is the redaction of."""
    uri = unredacted(meta.get("uri"), given, os.environ.get("MLFLOW_TRACKING_URI"))
    if not uri or not meta.get("experiment_id") or not meta.get("parent_run_id"):
        return {}
    return study_trial_runs(uri, str(meta["experiment_id"]), str(meta["parent_run_id"]))


def _redact(url: Any) -> Any:
    return redact(url) if isinstance(url, str) else url


def check_output(out: str | None) -> None:
    """Refuse an -o the recipe cannot be written to (before the study is read)."""
    if out is None or out == "-":
        return
    path = Path(out)
    if path.is_dir():
        raise RecipeError(
            f"-o {out}: is a folder; give a file's path, e.g. -o {path / 'recipe.yaml'}"
        )
    problem = outfile.no_folder(outfile.target(path, "-o"))  # a device, a FIFO: refused
    if problem:
        raise RecipeError(f"-o {out}: {problem}")


def write(recipe: Recipe, fmt: str, out: str | None) -> str:
    """Render `recipe` as `fmt`; write it to `out` atomically (or return it for stdout): whole
    or not at all, and no temporary file left behind when it cannot be written; a symlink's
    target is replaced, the link kept (`autotune.outfile`)."""
    text = exporters.render(recipe, fmt)
    if out is not None and out != "-":
        check_output(out)
        try:
            outfile.write(out, text, "-o")
        except OSError as e:
            raise RecipeError(f"-o {out}: cannot write it: {e.strerror or e}") from e
    return text
