"""A knob its clipping policy or schedule leaves unread is put back at the catalogue's default
(the value the probe ran it with), every other knob left as it is."""

from __future__ import annotations

from autotune.recipe.inactive import active_knobs, inactive


def test_a_clipping_child_under_another_policy_is_off() -> None:
    knobs = {"clip_policy": "autoclip", "clip_norm": 0.7071067811865476, "clip_mode": "global"}
    knobs |= {"autoclip_percentile": 6.2, "agc_lambda": 0.05}
    assert inactive(knobs) == ["clip_norm", "clip_mode", "agc_lambda"]
    assert active_knobs(knobs) == {**knobs, "clip_norm": 0.0, "agc_lambda": 0.01}


def test_min_lr_ratio_under_a_constant_schedule_is_its_default() -> None:
    assert active_knobs({"schedule": "constant", "min_lr_ratio": 0.28})["min_lr_ratio"] == 0.0
    cosine = {"schedule": "cosine", "min_lr_ratio": 0.28, "clip_norm": 0.5}
    assert inactive(cosine) == [] and active_knobs(cosine) == cosine
