"""Opening the study in its Optuna storage: what refuses it (`check_study`, asked before the
driver waits for Ray) and the study continued or created (`open_study`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.errors import StudyError
from autotune.study import attrs as ua
from autotune.study import home
from autotune.study.identity import changed_parts, differs, edited_script, identity
from autotune.study.objectives import directions, grid_values, make_sampler, name_metrics
from autotune.study.options import StudyOptions, study_dir_for
from autotune.study.storage import space_changed
from autotune.study.warmstart import distinct_params
from autotune.tracking.connection import redact


def check_study(
    opts: StudyOptions, storage: Any, study_dir: Path | None = None, records: Path | None = None
) -> Any:
    """Refuse what `open_study` would refuse, writing nothing: a --resume of no study, a study
    of this name whose space (or script) changed, one whose home is another folder (`study_dir`,
    for a shared storage), a new study whose `records` folder holds an earlier one's. The
    driver asks before Ray starts and MLflow's store opens, so that a refusal waits for neither.
    Returns the existing study, or None for a new one."""
    import optuna

    space = opts.space
    summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
    exists = space.name in [s.study_name for s in summaries]
    if opts.resume and not exists:
        raise StudyError(
            f"--resume: no study '{space.name}' in {redact(storage.url)}; drop --resume to start it"
        )
    if not exists:
        if records is not None:
            home.refuse_overwrite(records, space.name, redact(storage.url))
        return None
    study = optuna.load_study(study_name=space.name, storage=storage)
    before, now = study.user_attrs.get(ua.SPACE), identity(space)
    if before is not None and differs(before, now):
        changed, here = changed_parts(before, now), redact(storage.url)
        folder_of = records or study_dir or study_dir_for(space.name)
        raise edited_script(before, now, space.name, here) or space_changed(
            space.name, storage.url, changed, folder_of, bool(study_dir)
        )
    if study_dir is not None:
        home.check(study, study_dir, space.name, redact(storage.url))
    return study


def open_study(
    opts: StudyOptions,
    storage: Any,
    cond: sp.Conditioned,
    study_dir: Path | None = None,
    records: Path | None = None,
) -> Any:
    """The study, continued or created (`study_dir`: its home checked and claimed, for a
    shared storage; `records`: the folder a new study's trial records go to, refused when it
    holds an earlier study's): `check_study`'s refusals first."""
    import optuna

    space = opts.space
    study = check_study(opts, storage, study_dir, records)
    if study is not None:
        if study_dir is not None:  # continued only from the folder that holds its records
            home.claim(study, study_dir)
        study.sampler = make_sampler(space, cond.searched, len(study.get_trials(deepcopy=False)))
        name_metrics(study, space)
        # what may differ on a resume (budget, verify, rungs, the knobs this machine drops):
        # show and export read this run's
        study.set_user_attr(ua.SPACE_YAML, sp.dump(space))
        study.set_user_attr(ua.DROPPED, cond.dropped)
        return study
    study = optuna.create_study(
        study_name=space.name,
        storage=storage,
        sampler=make_sampler(space, cond.searched),
        directions=list(directions(space)),  # type: ignore[arg-type]
    )
    name_metrics(study, space)
    study.set_user_attr(ua.SPACE, identity(space))
    if study_dir is not None:
        home.claim(study, study_dir)
    study.set_user_attr(ua.SPACE_YAML, sp.dump(space))
    study.set_user_attr(ua.DROPPED, cond.dropped)  # not searched: export does not list them
    study.set_user_attr(ua.OBJECTIVES, [o.model_dump() for o in space.objectives])
    # Trial 0 is always the baseline: PyTorch's defaults for the searched knobs.
    study.enqueue_trial({}, user_attrs={ua.BASELINE: True})
    if opts.warm_start is not None:
        ws = opts.warm_start
        study.set_user_attr(
            ua.WARM_START,
            {"ref": ws.ref, "fp_hash": ws.fp_hash, "objectives": ws.objectives, "best": ws.best},
        )
        # Not one the study already runs: the baseline again, or the same params twice; a
        # grid sampler's whole (`grid_filled`).
        base, grid = space.baseline_knobs(), grid_values(space, cond.searched)
        for config, params in distinct_params(ws.configs, cond.searched, base, grid):
            study.enqueue_trial(
                params,
                user_attrs={
                    ua.SOURCE: f"warm start: {config.get('label', ws.ref)}",
                    ua.SOURCE_FP: ws.fp_hash,
                },
            )
    return study
