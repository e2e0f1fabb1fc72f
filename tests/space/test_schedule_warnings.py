"""A warm-up as long as the schedule never ends: `check` and the study warn (a black-box review
saw `warmup_steps` up to 5000 with a 750-step target accepted without a word)."""

from __future__ import annotations

import pytest

from autotune import space as sp


@pytest.mark.parametrize(
    ("override", "warned"),
    [
        (
            "knobs.warmup_steps={low: 0, high: 5000, step: 10}",
            "up to 5000 steps, the schedule is 750",
        ),
        ("knobs.warmup_steps=750", "up to 750 steps, the schedule is 750"),
        ("knobs.warmup_steps={choices: [0, 900]}", "up to 900 steps"),
        ("knobs.warmup_steps={low: 0, high: 100}", None),
    ],
)
def test_a_warm_up_that_never_ends_is_warned_of(override: str, warned: str | None) -> None:
    s = sp.load("gradclip", [override])
    got = sp.schedule_warnings(s)
    if warned is None:
        assert got == []
    else:
        assert len(got) == 1 and warned in got[0] and "never finish warming up" in got[0]


def test_without_a_target_the_probe_is_the_schedule() -> None:
    s = sp.load(
        "gradclip", ["budget.target_steps=null", "knobs.warmup_steps=200", "probe.steps=150"]
    )
    assert "the schedule is 150 (probe.steps)" in sp.schedule_warnings(s)[0]


def test_rungs_settings_without_a_target_are_warned_of() -> None:
    """A black-box review: `rungs: {promotion: async, fill_idle: true}` with no target passed
    `check` without a word, though there are no rungs for it to act on."""
    s = sp.load(
        "gradclip",
        ["budget.target_steps=null", "rungs={promotion: async, fill_idle: true}"],
    )
    got = [w for w in sp.schedule_warnings(s) if "no effect" in w]
    assert len(got) == 1 and "rungs.fill_idle, rungs.promotion" in got[0], got
    s = sp.load("gradclip", ["rungs={promotion: async, fill_idle: true}"])
    assert not [w for w in sp.schedule_warnings(s) if "no effect" in w]
    s = sp.load("gradclip", ["budget.target_steps=null"])
    assert not [w for w in sp.schedule_warnings(s) if "no effect" in w]
