"""The knobs printed beside a trial on the front or as the pick leave out one its other knobs
switch off: `min_lr_ratio=0.212` beside `schedule=constant` (a review) read as a chosen value
the run never used."""

from __future__ import annotations

from autotune.study.summary_text import _params


def test_a_knob_switched_off_by_the_others_is_not_shown_as_chosen() -> None:
    params = {"schedule": "constant", "min_lr_ratio": 0.212, "clip_norm": 0.7}
    ran = {"schedule": "constant", "min_lr_ratio": 0.0, "clip_policy": "agc", "clip_norm": 0.0}
    assert _params({}, params, ran) == "schedule=constant"
    cosine = {**ran, "schedule": "cosine", "clip_policy": "norm"}
    shown = _params({}, {**params, "schedule": "cosine"}, cosine)
    assert shown == "schedule=cosine, min_lr_ratio=0.212, clip_norm=0.7"
    assert _params({}, params) == "schedule=constant, min_lr_ratio=0.212, clip_norm=0.7"
