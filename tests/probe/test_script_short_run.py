"""The failure of a script that stopped short unasked (`script_values.short_run`): what ended
it is not known there, a plain loop's or a framework Trainer's, so the advice covers both
instead of telling a Trainer job to loop over range(trial.steps)."""

from __future__ import annotations

from autotune.probe.script_values import short_run


def test_a_short_run_is_advised_for_a_plain_loop_and_for_a_trainer() -> None:
    message = str(short_run(10, 30))
    assert message.startswith("the script reported 10 of 30 steps and stopped without being")
    assert "A plain loop: loop over range(trial.steps)" in message
    for cause in ("max_steps", "num_train_epochs", "max_epochs", "should_training_stop"):
        assert cause in message
