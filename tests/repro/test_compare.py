"""Loss-curve comparison: synthetic series, then runs logged the way a study logs its trials."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from assets.logged import logged_outcome
from typer.testing import CliRunner

from autotune import tracking
from autotune.cli import app
from autotune.errors import ReproError
from autotune.repro import compare

runner = CliRunner()

STEPS = 120
DIVERGE_AT = 60


def _curve(seed: int = 0, noise: float = 0.005) -> np.ndarray:
    """A decaying loss with a little multiplicative noise."""
    steps = np.arange(STEPS)
    rng = np.random.default_rng(seed)
    return (2.0 * np.exp(-steps / 40) + 0.3) * (1 + noise * rng.standard_normal(STEPS))


def _diverged() -> np.ndarray:
    """The base curve until DIVERGE_AT, then 20% above it and climbing."""
    base = _curve()
    steps = np.arange(STEPS)
    return np.where(steps >= DIVERGE_AT, base * (1.2 + 0.01 * (steps - DIVERGE_AT)), base)


# --------------------------------------------------------------------------------------------
# compare_series
# --------------------------------------------------------------------------------------------


def test_injected_divergence_is_found_at_its_step() -> None:
    steps = np.arange(STEPS)
    r = compare.compare_series(steps, _curve(), steps, _diverged(), rtol=0.05, window=5)
    assert r["first_divergence_step"] == DIVERGE_AT
    assert not r["agree"]
    assert r["verdict"].startswith(f"diverge from step {DIVERGE_AT}")
    assert r["max_rel_diff_step"] == STEPS - 1
    assert r["final_rel_diff"] == pytest.approx(1 - 1 / (1.2 + 0.01 * (STEPS - 1 - DIVERGE_AT)))
    assert r["common_steps"] == STEPS and r["only_a"] == r["only_b"] == 0


def test_one_noisy_step_does_not_count() -> None:
    steps = np.arange(STEPS)
    a = _curve(seed=0)
    b = _curve(seed=1)  # independent noise of 0.5%: well within rtol
    b[30] *= 1.5  # one step 50% off
    r = compare.compare_series(steps, a, steps, b, rtol=0.05, window=5)
    assert r["agree"] and r["first_divergence_step"] is None
    assert r["max_rel_diff_step"] == 30 and r["max_rel_diff"] > 0.3
    assert r["correlation"] > 0.99
    # Without smoothing the same step is a disagreement.
    raw = compare.compare_series(steps, a, steps, b, rtol=0.05, window=1)
    assert raw["first_divergence_step"] == 30 and not raw["agree"]


def test_relative_difference_formula_and_alignment() -> None:
    # b lacks step 2 and has steps 5 and 6 that a lacks; step 3 is given twice (the last counts).
    r = compare.compare_series(
        [0, 1, 2, 3, 4],
        [1.0, 2.0, 3.0, 4.0, 5.0],
        [4, 3, 3, 1, 0, 5, 6],
        [5.0, 9.0, 4.4, 2.0, 1.0, 1.0, 1.0],
        rtol=0.5,
        window=1,
    )
    assert r["series"]["step"] == [0, 1, 3, 4]
    assert r["series"]["rel_diff"] == pytest.approx([0.0, 0.0, 0.4 / 4.4, 0.0])
    assert (r["only_a"], r["only_b"]) == (1, 2)
    assert r["first_divergence_step"] is None
    assert not r["agree"]  # the two runs do not cover the same steps
    assert "steps the other lacks" in r["verdict"]


def test_non_finite_values() -> None:
    nan, inf = float("nan"), float("inf")
    r = compare.compare_series(
        range(4), [1.0, nan, inf, 1.0], range(4), [1.0, nan, 1.0, 1.0], window=1
    )
    assert r["series"]["rel_diff"] == [0.0, 0.0, None, 0.0]  # inf where only one is finite
    assert r["first_divergence_step"] == 2
    assert r["correlation"] is None  # constant over the finite steps


def test_bad_input_is_a_user_error() -> None:
    with pytest.raises(ReproError, match="share no step"):
        compare.compare_series([0, 1], [1.0, 1.0], [5, 6], [1.0, 1.0])
    with pytest.raises(ReproError, match="series b: 2 steps but 1 values"):
        compare.compare_series([0], [1.0], [0, 1], [1.0])
    with pytest.raises(ReproError, match="rtol"):
        compare.compare_series([0], [1.0], [0], [1.0], rtol=0)


def test_rolling_median_is_centred_and_shrinks_at_the_ends() -> None:
    x = np.array([0.0, 0.0, 9.0, 0.0, 0.0, 5.0, 5.0, 5.0])
    assert compare.rolling_median(x, 3).tolist() == [0.0, 0.0, 0.0, 0.0, 0.0, 5.0, 5.0, 5.0]
    assert compare.rolling_median(x, 4).tolist() == compare.rolling_median(x, 5).tolist()


# --------------------------------------------------------------------------------------------
# Runs in MLflow, logged through the study's own code
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A study with four trials: base, base with other noise, diverged, NaN from step 80."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    client = tracking.connect(uri)
    experiment_id = tracking.ensure_experiment(client, "curves")
    parent = tracking.ensure_study_run(
        client, experiment_id, "curves", space_yaml="name: curves\n", params={}, tags={}
    )
    with_nan = [*_curve().tolist()[:80], *[float("nan")] * (STEPS - 80)]
    trials = {
        "base": _curve(0).tolist(),
        "noisy": _curve(1).tolist(),
        "diverged": _diverged().tolist(),
        "nan": with_nan,
    }
    ids = {
        name: tracking.log_trial(client, experiment_id, parent, "curves", logged_outcome(i, loss))
        for i, (name, loss) in enumerate(trials.items())
    }
    return {"uri": uri, **ids}


def _invoke(*args: str | Path) -> Any:
    return runner.invoke(app, [str(a) for a in args])


def test_cli_compare_agrees_on_runs_that_agree(runs: dict[str, str], tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    png = tmp_path / "plots" / "base-vs-noisy.png"
    result = _invoke(
        "compare", runs["base"], runs["noisy"], "--tracking-uri", runs["uri"], "-o", png
    )
    assert result.exit_code == 0, result.output
    assert "AGREE" in result.stdout and "first divergence   none" in result.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    client = MlflowClient(runs["uri"])
    experiment = client.get_experiment_by_name("autotune-compare")
    assert experiment is not None
    (logged,) = [
        r
        for r in client.search_runs([experiment.experiment_id])
        if r.data.tags.get("autotune.compare.run_b") == runs["noisy"]
    ]
    assert logged.data.tags["autotune.compare.run_a"] == runs["base"]
    assert logged.data.tags["autotune.compare.name_a"] == "trial-0000-baseline"
    assert logged.data.tags["autotune.compare.agree"] == "true"
    assert logged.data.metrics["agree"] == 1.0
    assert logged.data.metrics["common_steps"] == STEPS
    assert logged.data.params == {"metric": "loss", "rtol": "0.05", "window": "5"}
    artifacts = {a.path for a in client.list_artifacts(logged.info.run_id)}
    assert artifacts == {"comparison.png", "comparison.json"}
    history = client.get_metric_history(logged.info.run_id, "rel_diff")
    assert len(history) == STEPS


def test_cli_compare_exits_1_on_a_divergence(runs: dict[str, str]) -> None:
    result = _invoke("compare", runs["base"], runs["diverged"], "--tracking-uri", runs["uri"])
    assert result.exit_code == 1, result.output
    assert "DIFFER" in result.stdout
    assert f"first divergence   {DIVERGE_AT}" in result.stdout
    # With a tolerance above the jump they part where 1 - 1/(1.2 + 0.01 k) first exceeds 0.3.
    loose = compare.compare_runs(runs["base"], runs["diverged"], runs["uri"], rtol=0.3, log=False)
    k = next(k for k in range(STEPS) if 1 - 1 / (1.2 + 0.01 * k) > 0.3)
    assert loose["first_divergence_step"] == DIVERGE_AT + k == 83
    assert loose["compare_run_id"] is None


def test_a_run_with_non_finite_losses_does_not_agree(runs: dict[str, str]) -> None:
    r = compare.compare_runs(runs["base"], runs["nan"], runs["uri"], log=False)
    # The first 80 steps are the same curve, but the rest is NaN (not logged, only counted).
    assert r["first_divergence_step"] is None
    assert r["only_a"] == STEPS - 80
    assert not r["agree"]
    assert any("non-finite" in n for n in r["notes"])


def test_comparison_json_round_trips(runs: dict[str, str], tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    r = compare.compare_runs(runs["base"], runs["diverged"], runs["uri"], window=3)
    path = MlflowClient(runs["uri"]).download_artifacts(
        r["compare_run_id"], "comparison.json", str(tmp_path)
    )
    data = json.loads(Path(path).read_text())
    assert data["first_divergence_step"] == r["first_divergence_step"] == DIVERGE_AT
    assert data["window"] == 3
    assert math.isclose(data["max_rel_diff"], r["max_rel_diff"])


def test_cli_compare_user_errors(runs: dict[str, str]) -> None:
    missing = _invoke("compare", runs["base"], "0123abc", "--tracking-uri", runs["uri"])
    assert missing.exit_code == 2
    assert missing.stderr.strip().splitlines() == [
        f"autotune: error: no run '0123abc' in the MLflow store {runs['uri']}"
    ]
    no_metric = _invoke(
        "compare", runs["base"], runs["noisy"], "--metric", "lose", "--tracking-uri", runs["uri"]
    )
    assert no_metric.exit_code == 2
    (line,) = no_metric.stderr.strip().splitlines()
    assert f"run {runs['base']}" in line and "no metric 'lose'" in line and "loss" in line


def test_one_non_finite_step_the_other_run_lacks_is_a_departure(tmp_path: Path) -> None:
    """A black-box review: one NaN at step 20 (or an inf at 30, which MLflow's SQLite store keeps
    as 1.8e308) in a curve otherwise the same was AGREE, exit 0: the rolling median smoothed
    it away, and the inf overflowed the correlation with a RuntimeWarning."""
    import warnings

    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("fakes")
    base = [1 - 0.005 * i for i in range(50)]
    ids = {}
    for name, bad in (("base", None), ("nan", (20, float("nan"))), ("inf", (30, float("inf")))):
        run = client.create_run(experiment, run_name=name).info.run_id
        for i, v in enumerate(base):
            client.log_metric(run, "loss", bad[1] if bad and i == bad[0] else v, step=i)
        ids[name] = run
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for name, step in (("nan", 20), ("inf", 30)):
            r = compare.compare_runs(ids["base"], ids[name], uri, log=False)
            assert not r["agree"] and r["first_divergence_step"] == step, r["verdict"]
            assert "non-finite" in r["verdict"], r["verdict"]
            assert r["correlation"] is not None and r["correlation"] > 0.99
    result = _invoke("compare", ids["base"], ids["nan"], "--tracking-uri", uri, "--no-log")
    assert result.exit_code == 1 and "DIFFER" in result.stdout, result.output


def test_an_even_window_is_said_rounded_up() -> None:
    """`--window 4` ran with 5 and printed 5, with no word (a black-box review)."""
    steps = list(range(20))
    r = compare.compare_series(steps, [1.0] * 20, steps, [1.0] * 20, window=4)
    assert (r["window"], r["window_asked"]) == (5, 4)
    assert "4 asked, rounded up: a centred median takes an odd count" in compare.format_compare(r)
    odd = compare.compare_series(steps, [1.0] * 20, steps, [1.0] * 20, window=5)
    assert "asked" not in compare.format_compare(odd)
