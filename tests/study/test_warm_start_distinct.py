"""A warm start does not spend trials on what the study already runs: a configuration that is the
baseline again (PyTorch's defaults, moved to a batch layout that fits, as a migration's re-tune
of a defaults recipe gets) or the same params twice. The baseline of a space whose
`accum_steps` excludes 1 is the same arithmetic at its smallest layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune import study as st
from autotune.study.warmstart import distinct_params

SPACE = """\
name: w
workload: {name: mlp, size: tiny}
probe: {steps: 20, batch: 64, device: cpu}
budget: {trials: 6}
sampler: {name: random, seed: 0}
knobs:
  clip_norm: {choices: [0.0, 1.8, 4.0]}
  warmup_steps: {low: 0, high: 30}
  accum_steps: {choices: [2, 4]}
"""


def config(label: str, **knobs: Any) -> dict[str, Any]:
    return {"knobs": {"lr": 0.1, **knobs}, "env": {}, "label": label}


CONFIGS = [
    # the recipe: the defaults at a micro-batch of 64 (accum 1), which the space leaves out
    config("recipe", clip_norm=0.0, warmup_steps=0, accum_steps=1),
    config("neighbour 1", clip_norm=1.8, warmup_steps=30, accum_steps=1),
    config("neighbour 2", clip_norm=1.8, warmup_steps=30, accum_steps=1),  # the same params
    config("neighbour 3", clip_norm=4.0, warmup_steps=0, accum_steps=4),
    config("defaults at accum 4", clip_norm=0.0, warmup_steps=0, accum_steps=4),
    config("clip left to the sampler", warmup_steps=0, accum_steps=2),
]


def test_the_baseline_again_and_repeats_are_left_out() -> None:
    space = sp.loads(SPACE)
    base = space.baseline_knobs()
    assert (base["accum_steps"], base["clip_norm"], base["warmup_steps"]) == (2, 0.0, 0)
    kept = distinct_params(CONFIGS, space.searched(), base)
    assert [(c["label"], p) for c, p in kept] == [
        ("neighbour 1", {"clip_norm": 1.8, "warmup_steps": 30}),
        ("neighbour 3", {"clip_norm": 4.0, "warmup_steps": 0, "accum_steps": 4}),
        ("clip left to the sampler", {"warmup_steps": 0, "accum_steps": 2}),
    ]
    # With nothing but the layout searched, every configuration is kept once (nothing else
    # could tell it from the baseline).
    layout = sp.loads(SPACE, overrides=["knobs.clip_norm=0.0", "knobs.warmup_steps=0"])
    got = distinct_params(CONFIGS, layout.searched(), layout.baseline_knobs())
    assert [p for _, p in got] == [{}, {"accum_steps": 4}, {"accum_steps": 2}]


def test_the_study_enqueues_only_the_distinct_ones(tmp_path: Path) -> None:
    space = sp.loads(SPACE)
    ws = st.WarmStart(ref="recipe.yaml", configs=CONFIGS)
    opts = st.StudyOptions(space=space, study_dir=tmp_path / "w", warm_start=ws)
    (tmp_path / "w").mkdir()
    cond = sp.condition(space, platform="cpu")
    study = st.open_study(opts, st.open_storage(st.storage_url(opts, tmp_path / "w")), cond)
    waiting = study.get_trials(deepcopy=False)
    sources = [t.user_attrs.get("autotune.source") for t in waiting]
    assert sources == [
        None,  # the baseline
        "warm start: neighbour 1",
        "warm start: neighbour 3",
        "warm start: clip left to the sampler",
    ]


def test_a_grid_study_runs_a_warm_start_with_a_knob_left_to_the_sampler(tmp_path: Path) -> None:
    """Optuna's grid sampler runs an enqueued configuration only whole: one whose accumulation
    the space lacks (the recipe's, which ran out of memory, outside a re-tune's choices) raised
    "All parameters must be specified when using GridSampler with enqueue_trial". It takes the
    grid's value nearest its own."""
    space = sp.loads(SPACE.replace("{name: random, seed: 0}", "{name: grid, grid_points: 2}"))
    ws = st.WarmStart(ref="recipe.yaml", configs=CONFIGS)
    opts = st.StudyOptions(space=space, study_dir=tmp_path / "w", warm_start=ws)
    (tmp_path / "w").mkdir()
    cond = sp.condition(space, platform="cpu")
    study = st.open_study(opts, st.open_storage(st.storage_url(opts, tmp_path / "w")), cond)
    waiting = len(study.get_trials(deepcopy=False))
    # the baseline and two warm starts: the third, its clip filled with the grid's first value
    # (it has none of its own), is the baseline again
    assert waiting == 3
    got = {}
    for _ in range(waiting):
        trial = study.ask()
        if trial.number > 0:  # the baseline asks nothing (`trial_setup`)
            got[trial.user_attrs["autotune.source"]] = st.suggest(trial, space, cond.searched)
        study.tell(trial, 1.0)
    assert got == {  # neighbour 1's accumulation 1, not in the grid: the nearest, 2
        "warm start: neighbour 1": {"clip_norm": 1.8, "warmup_steps": 30, "accum_steps": 2},
        "warm start: neighbour 3": {"clip_norm": 4.0, "warmup_steps": 0, "accum_steps": 4},
    }
