"""A probe's step series as MLflow metric histories: each key in the unit its name says."""

from __future__ import annotations

import pytest

from autotune.probe.telemetry import SERIES_NAMES
from autotune.tracking.series import SERIES_KEYS, series_metrics


def test_step_time_is_logged_in_milliseconds() -> None:
    # The probe keeps the step time in seconds (0.88 ms a step); its key says milliseconds.
    series = {"loss": [2.0, 1.5, 1.0], "step_time": [0.00088, 0.0009, 0.0011], "lr": [0.3] * 3}
    metrics, _ = series_metrics(series, ts=0)
    times = [m.value for m in metrics if m.key == "step_time_ms"]
    assert times == pytest.approx([0.88, 0.9, 1.1])
    # the series without a unit are logged as they are
    assert [m.value for m in metrics if m.key == "lr"] == pytest.approx([0.3] * 3)
    assert [m.value for m in metrics if m.key == "loss"] == pytest.approx([2.0, 1.5, 1.0])


def test_only_the_step_time_key_names_a_unit() -> None:
    # A new series with a unit in its MLflow key must get its factor too (this test is the
    # reminder): every key but step_time_ms is the series' own name.
    assert {k for n, k in SERIES_KEYS.items() if k != n} == {"step_time_ms"}
    assert set(SERIES_KEYS) == set(SERIES_NAMES)
