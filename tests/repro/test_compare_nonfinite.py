"""Non-finite values on both sides (a black-box review): +inf against -inf, and NaN against
+inf, were `AGREE ... (max relative difference inf at step 5)`, exit 0; two all-NaN runs were
AGREE with `max_rel_diff 0`, logged as `agree 1.0`. An all-zero curve leaked a RuntimeWarning
(0 x inf), `-o` with another suffix wrote a PNG under it, and `-o FILE/y.png` said "File
exists"."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.errors import ReproError
from autotune.repro import compare

BASE = [2 * math.exp(-i / 10) + 0.1 for i in range(30)]
inf, nan = math.inf, math.nan


def _with(step: int, value: float) -> list[float]:
    return [value if i == step else v for i, v in enumerate(BASE)]


@pytest.mark.parametrize(("x", "y"), [(inf, -inf), (nan, inf), (-inf, nan), (1.0, nan)])
def test_different_non_finite_values_are_a_departure(x: float, y: float) -> None:
    r = compare.compare_series(range(30), _with(5, x), range(30), _with(5, y))
    assert not r["agree"] and r["first_divergence_step"] == 5, r["verdict"]
    assert "diverge at step 5" in r["verdict"]


@pytest.mark.parametrize("x", [inf, -inf, nan])
def test_the_same_non_finite_value_is_the_same_outcome(x: float) -> None:
    r = compare.compare_series(range(30), _with(5, x), range(30), _with(5, x))
    assert r["agree"] and not r["nothing_finite"], r["verdict"]


def test_nothing_finite_is_no_agreement(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    r = compare.compare_series(range(30), [nan] * 30, range(30), [nan] * 30)
    assert r["nothing_finite"] and not r["agree"]
    assert "nothing finite to compare" in r["verdict"]

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("nan", artifact_location=str(tmp_path / "art"))
    ids = []
    for name in ("a", "b"):
        run = client.create_run(experiment, run_name=name).info.run_id
        for i in range(30):
            client.log_metric(run, "loss", nan, step=i)
        ids.append(run)
    with pytest.raises(ReproError, match="nothing finite to compare"):
        compare.compare_runs(ids[0], ids[1], uri)
    assert client.get_experiment_by_name(compare.EXPERIMENT) is None  # nothing logged
    result = CliRunner().invoke(app, ["compare", *ids, "--tracking-uri", uri])
    assert result.exit_code == 2, result.output
    assert "nothing finite to compare" in result.stderr


def test_zero_curves_raise_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        r = compare.compare_series(range(30), [0.0] * 30, range(30), [0.0] * 30)
    assert r["agree"]


def test_output_path_is_checked(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(ReproError, match=r"x\.txt is not a folder"):
        compare.check_options(0.05, 5, out_png=tmp_path / "x.txt" / "y.png")
    with pytest.raises(ReproError, match=r"the plot is a PNG; give a file name ending in \.png"):
        compare.check_options(0.05, 5, out_png=tmp_path / "plot.txt")
    compare.check_options(0.05, 5, out_png=tmp_path / "new" / "plot.PNG")


def test_an_infinite_difference_is_printed_as_such() -> None:
    """The table read `max rel. diff n/a` beside a verdict naming an inf difference."""
    r = compare.compare_series(range(30), _with(5, inf), range(30), _with(5, -inf))
    assert "max rel. diff      inf at step 5" in compare.format_compare(r)
