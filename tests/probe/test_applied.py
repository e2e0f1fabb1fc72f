"""Which searched knobs a script never applied (`autotune.probe.applied`), from what its run
recorded as applying its knobs (`script_applied`)."""

from __future__ import annotations

from autotune.probe.applied import text, unapplied

SEARCHED = ["lr", "clip_norm", "warmup_steps", "min_lr_ratio", "weight_decay", "NCCL_ALGO"]


def test_a_script_with_its_own_scheduler_never_applied_the_schedule_knobs() -> None:
    missing = unapplied(["optimizer", "clip"], SEARCHED)
    assert missing == {
        "min_lr_ratio": "trial.recipe.scheduler (or recipe.lr_at)",
        "warmup_steps": "trial.recipe.scheduler (or recipe.lr_at)",
    }
    said = text(missing)
    assert "min_lr_ratio, warmup_steps (applied by trial.recipe.scheduler" in said


def test_what_applies_every_knob_leaves_none_unapplied() -> None:
    assert unapplied(["hf"], SEARCHED) == {}
    assert unapplied(["lightning", "scheduler"], SEARCHED) == {}
    assert unapplied(["optimizer", "scheduler", "clip"], SEARCHED) == {}
    assert unapplied(None, SEARCHED) == {}  # a built-in workload: autotune's probe applies all


def test_the_schedule_applies_the_peak_lr_but_not_the_optimizers_other_knobs() -> None:
    missing = unapplied(["scheduler", "clip"], SEARCHED)
    assert missing == {"weight_decay": "trial.recipe.optimizer"}
    # environment knobs are not recorded: never said unapplied
    assert unapplied([], SEARCHED).keys() == {
        "lr",
        "clip_norm",
        "warmup_steps",
        "min_lr_ratio",
        "weight_decay",
    }


def test_a_script_that_clips_by_itself_never_applied_the_clipping_knobs() -> None:
    """A script that calls torch's clip_grad_norm_ with its own threshold: a searched clip_norm
    (or policy) was not what its trials ran."""
    missing = unapplied(["optimizer", "scheduler"], ["clip_norm", "clip_policy", "zclip_z"])
    helper = "trial.recipe.clip_and_step (or recipe.clip_policy)"
    assert missing == {"clip_norm": helper, "clip_policy": helper, "zclip_z": helper}
