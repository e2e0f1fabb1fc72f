"""Out-of-range numeric options refused up front (black-box review bb2, findings 2, 3, 9, 10 and
13): one `autotune: error:` line naming the option, exit status 2, before any file is read, any
store opened, any folder made or any probe run. `migrate --threads/--timeout` are checked before
the recipe is read and the `-o` folder made; `compare --rtol` and `audit --factor` before the
tracking store is looked for; `repro --seeds` before the space is loaded. So the tests point at
files and stores that do not exist: with the option accepted they would fail naming those."""

from __future__ import annotations

from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --------------------------------------------------------------------------------------------
# migrate --threads / --timeout (findings 2 and 3), --seeds 1 (a later review)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", ["missing.yaml", "garbage.yaml"])
@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--threads", "99999999"),
        ("--threads", "100000"),
        ("--threads", "4097"),
        ("--threads", "0"),
        ("--threads", "-3"),
        ("--timeout", "0"),
        ("--timeout", "-1"),
        ("--timeout", "nan"),
        ("--timeout", "inf"),
        ("--timeout", "-inf"),
        ("--seeds", "1"),  # one paired seed: no seed noise, a 38% worse recipe tied
    ],
)
def test_migrate_refuses_an_out_of_range_option_before_anything(
    here: Path, recipe: str, option: str, value: str
) -> None:
    (here / "garbage.yaml").write_text("{not: a recipe\n")
    out = here / "report" / "deeper"
    line = one_line_error(invoke("migrate", recipe, option, value, "-o", out), option, value)
    assert recipe not in line  # the option, not the file, is what is refused
    assert not (here / "report").exists()
    assert sorted(p.name for p in here.iterdir()) == ["garbage.yaml"]


def test_migrate_threads_bound_is_the_space_files() -> None:
    from autotune.migrate.run import check_options
    from autotune.space.limits import MAX_THREADS

    check_options(MAX_THREADS, 1e-3)  # the largest thread count, the smallest sane timeout
    check_options(None, 600.0)
    line = one_line_error(invoke("migrate", "missing.yaml", "--threads", str(MAX_THREADS + 1)))
    assert f"1 to {MAX_THREADS}" in line


# --------------------------------------------------------------------------------------------
# compare --rtol (finding 9), audit --compare --factor (finding 10)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "0", "-1"])
def test_compare_refuses_a_non_finite_or_non_positive_rtol(here: Path, value: str) -> None:
    uri = f"sqlite:///{here / 'mlflow.db'}"
    args = ["compare", "a" * 32, "b" * 32, "--tracking-uri", uri, "--no-log", "--rtol", value]
    one_line_error(invoke(*args), "--rtol", value)
    assert list(here.iterdir()) == []


def test_compare_refuses_a_zero_window_before_the_store(here: Path) -> None:
    uri = f"sqlite:///{here / 'mlflow.db'}"
    args = ["compare", "a" * 32, "b" * 32, "--tracking-uri", uri, "--no-log", "--window", "0"]
    one_line_error(invoke(*args), "--window")
    assert list(here.iterdir()) == []


def test_compare_series_refuses_an_infinite_rtol() -> None:
    from autotune.errors import ReproError
    from autotune.repro.compare import compare_series

    with pytest.raises(ReproError, match="rtol must be a finite number > 0, got inf"):
        compare_series([0, 1], [1.0, 0.5], [0, 1], [1.0, 0.5], rtol=float("inf"))


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1", "0", "-1"])
def test_audit_compare_refuses_a_factor_that_is_not_a_finite_number_above_1(
    here: Path, value: str
) -> None:
    uri = f"sqlite:///{here / 'mlflow.db'}"
    args = ["audit", "--compare", "a" * 32, "b" * 32, "--tracking-uri", uri, "--factor", value]
    line = one_line_error(invoke(*args), "--factor", "finite", "> 1")
    assert ("infinite" in line) == value.endswith("inf"), line  # why inf is refused, for inf
    assert list(here.iterdir()) == []


# --------------------------------------------------------------------------------------------
# repro --seeds (finding 13)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("seeds", "repeated"), [("0,0", "0"), ("3,1,3", "3"), ("1,2,2,1", "1")])
def test_repro_refuses_a_repeated_seed(here: Path, seeds: str, repeated: str) -> None:
    line = one_line_error(invoke("repro", "missing.yaml", "--seeds", seeds), "--seeds")
    assert f"seed {repeated} is repeated" in line
    assert "missing.yaml" not in line
    assert list(here.iterdir()) == []


def test_run_repro_refuses_a_repeated_seed() -> None:
    from autotune.errors import ReproError
    from autotune.repro.repro import run_repro

    with pytest.raises(ReproError, match="--seeds 5,5: seed 5 is repeated"):
        run_repro("missing.yaml", seeds=[5, 5])


def test_migrate_refuses_threads_beyond_this_machines_cores(here: Path) -> None:
    """A review: `--threads 3` on a 2-core machine ran (exit 0) and the report said 3 threads in
    its op audit, 2 in its header. Refused as `probe` and `verify` refuse probe.threads."""
    import os

    from assets.recipes import make_recipe

    path = make_recipe().save(here / "r.yaml")
    many = str((os.cpu_count() or 1) + 1)
    line = one_line_error(invoke("migrate", path, "--threads", many, "-o", "out"), "--threads")
    assert f"asks for {many} CPU(s)" in line and "lower --threads" in line
    assert not (here / "out").exists()
