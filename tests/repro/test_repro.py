"""Determinism: the same probe twice is bitwise identical on the CPU; another seed is not."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from assets import factory
from typer.testing import CliRunner

from autotune import space as sp
from autotune.cli import app
from autotune.errors import RecipeError
from autotune.probe import set_deterministic
from autotune.repro import repro

runner = CliRunner()

TINY = """\
name: tiny
workload: {name: mlp, size: tiny}
probe:
  steps: 30
  micro_batch: 32
  device: cpu
knobs:
  lr: 0.003
  clip_norm: 1.0
"""

SHORT = ["probe.steps=20"]


@pytest.fixture
def tiny(write_space: Callable[..., Path]) -> Path:
    return write_space(TINY)


def test_same_seed_is_bitwise_equal_and_state_is_restored(tiny: Path) -> None:
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.benchmark,
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        torch.get_num_threads(),
    )
    r = repro.run_repro(tiny, runs=2, set_=SHORT)
    assert r["reproducible"] is True and r["bitwise_equal"] is True
    assert r["seeds"] == [0, 0] and r["steps"] == 20 and r["kind"] == "space"
    for name in ("loss", "grad_norm"):
        s = r["series"][name]
        assert s["bitwise_equal"] and s["steps"] == 20 and s["differing_steps"] == 0
        assert s["max_abs_diff"] == 0.0 and s["first_diff_step"] is None
    assert [run["steps_run"] for run in r["runs"]] == [20, 20]
    # probe.deterministic was forced on, and the probe recorded what it turned on.
    det = r["determinism"]
    assert det["use_deterministic_algorithms"] is True
    assert det["cudnn.deterministic"] is True and det["cudnn.benchmark"] is False
    assert det["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    # ... and run_repro gave the process its switches back.
    after = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.benchmark,
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        torch.get_num_threads(),
    )
    assert after == before
    text = repro.format_repro(r)
    assert "REPRODUCIBLE: bitwise identical" in text
    assert "loss         bitwise equal at all 20 steps" in text


def test_different_seeds_are_reported_as_a_difference(tiny: Path) -> None:
    r = repro.run_repro(tiny, seeds=[0, 1], set_=SHORT)
    assert r["seeds"] == [0, 1] and r["reproducible"] is None
    assert not r["bitwise_equal"]
    loss = r["series"]["loss"]
    assert loss["first_diff_step"] == 0 and loss["differing_steps"] == 20
    assert loss["max_abs_diff"] > 0
    assert "the runs differ, as they should, beyond one seed's run-to" in repro.format_repro(r)
    # seed_override moves every run to another seed, which is reproducible too.
    other = repro.run_repro(tiny, runs=2, seed_override=1, set_=SHORT)
    assert other["seeds"] == [1, 1] and other["reproducible"] is True


@pytest.mark.integration
def test_fresh_processes_are_bitwise_equal(tiny: Path) -> None:
    r = repro.run_repro(tiny, runs=2, set_=["probe.steps=10"], fresh_process=True)
    assert r["fresh_process"] and r["reproducible"] is True
    assert r["determinism"]["use_deterministic_algorithms"] is True
    assert r["series"]["loss"]["steps"] == 10


def test_compare_run_series_per_step() -> None:
    nan = float("nan")
    same = repro.compare_run_series([[1.0, 2.0, nan], [1.0, 2.0, nan]])
    assert same["bitwise_equal"] and same["per_step_max_abs"] == [0.0, 0.0, 0.0]
    one_ulp = math.nextafter(2.0, 3.0)
    diff = repro.compare_run_series([[1.0, 2.0, 3.0], [1.0, one_ulp, 3.0], [1.0, 2.0, 3.5]])
    assert not diff["bitwise_equal"]
    assert diff["differing_steps"] == 2 and diff["first_diff_step"] == 1
    assert diff["per_step_max_abs"] == [0.0, one_ulp - 2.0, 0.5]
    assert diff["max_abs_diff"] == 0.5
    short = repro.compare_run_series([[1.0, 2.0], [1.0]])
    assert short["length_mismatch"] and not short["bitwise_equal"] and short["steps"] == 1
    signed = repro.compare_run_series([[0.0], [-0.0]])
    assert not signed["bitwise_equal"] and signed["max_abs_diff"] == 0.0
    nonfinite = repro.compare_run_series([[nan], [1.0]])
    assert nonfinite["per_step_max_abs"] == [None] and nonfinite["max_abs_diff"] is None


def test_a_recipe_is_read_as_its_fixed_configuration(write_space: Callable[..., Path]) -> None:
    path = write_space(
        "autotune_recipe: 1\n"
        "name: best-mlp\n"
        "workload: {name: mlp, size: tiny}\n"
        "precision: bf16\n"
        "micro_batch: 32\n"
        "accum_steps: 2\n"
        "world_size: 1\n"
        "probe: {steps: 10, seed: 3, device: cpu}\n"
        "knobs: {lr: 0.003, warmup_steps: 5, accum_steps: 2}\n"
        "achieved: {loss_cv: {direction: minimize, value: 0.02}}\n"
        "source: {study: gradclip, trial: 7}\n",
        "best.yaml",
    )
    space, kind = repro.load_space(path)
    assert kind == "recipe" and space.name == "best-mlp"
    assert (space.probe.precision, space.probe.seed) == ("bf16", 3)
    # the recipe's micro-batch of 32 at accum 2: a batch of 64 split the same way
    assert space.probe.batch == 64 and space.probe.micro_for(2) == 32
    assert space.fixed_knobs()["warmup_steps"] == 5 and space.searched() == {}
    r = repro.run_repro(path, runs=2)
    assert r["kind"] == "recipe" and r["reproducible"] is True
    assert (r["precision"], r["steps"], r["seeds"]) == ("bf16", 10, [3, 3])

    bare = write_space("autotune_recipe: 1\nknobs: {lr: 0.003}\n", "bare.yaml")
    with pytest.raises(RecipeError, match=r"bare\.yaml: this recipe names no workload"):
        repro.load_space(bare)
    future = write_space("autotune_recipe: 9\nworkload: mlp\n", "future.yaml")
    with pytest.raises(RecipeError, match="format 9 is newer"):
        repro.load_space(future)


def test_cli_repro(tiny: Path, write_space: Callable[..., Path]) -> None:
    ok = runner.invoke(app, ["repro", str(tiny), "--set", "probe.steps=20", "--runs", "2"])
    assert ok.exit_code == 0, ok.output
    assert "REPRODUCIBLE: bitwise identical" in ok.stdout
    assert "20 steps, 2 runs in this process" in ok.stdout

    seeds = runner.invoke(app, ["repro", str(tiny), "--set", "probe.steps=10", "--seeds", "0,1"])
    assert seeds.exit_code == 0, seeds.output
    assert "the runs differ, as they should" in seeds.stdout

    for args, fragment in (
        (["--runs", "1"], "at least 2 runs"),
        (["--seeds", "0,x"], "--seeds 0,x: expected whole numbers"),
        (["--set", "probe.stepz=3"], "stepz"),
        (["--seed", str(2**64)], f"--seed: a seed is a whole number from 0 to {sp.MAX_SEED}"),
        (["--seeds", "0,-1"], "--seeds: a seed is a whole number from 0 to"),
        (["--seeds", "0,1", "--seed", "3"], "--seed 3 with --seeds 0,1: give one or the other"),
        (["--seeds", "0,1", "--runs", "3"], "--seeds runs one probe per seed (2); drop --runs"),
    ):
        bad = runner.invoke(app, ["repro", str(tiny), *args])
        assert bad.exit_code == 2, bad.output
        (line,) = bad.stderr.strip().splitlines()
        assert line.startswith("autotune: error: ") and fragment in line

    missing = runner.invoke(app, ["repro", "no/such/space.yaml"])
    assert missing.exit_code == 2 and "no/such/space.yaml" in missing.stderr


def test_set_deterministic_turns_on_every_lever() -> None:
    saved = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    try:
        applied = set_deterministic()
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == applied["CUBLAS_WORKSPACE_CONFIG"]
        assert applied["use_deterministic_algorithms"] is True
        if torch.version.hip:
            assert os.environ["ROCBLAS_DEFAULT_ATOMICS_MODE"] == "0"
        else:
            assert "ROCBLAS_DEFAULT_ATOMICS_MODE" not in applied
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
        if saved is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved


# its own seed for the model and a fixed one for the data: the seed it is given is ignored
SEEDLESS = factory.source(
    "seedless", build=f"torch.manual_seed(0); return {factory.LINEAR}", data_seed="7"
)


def test_runs_on_different_seeds_that_are_identical_exit_1(
    tmp_path: Path, write_space: Callable[..., Path]
) -> None:
    """A review: a workload that ignores its seed passed `repro --seeds 0,1` with status 0
    ("the seed has no effect"), though every verdict over seeds then measures no noise."""
    (tmp_path / "seedless.py").write_text(SEEDLESS)
    space = write_space(
        TINY.replace("{name: mlp, size: tiny}", f"{{name: {tmp_path}/seedless.py:make}}")
    )
    result = runner.invoke(app, ["repro", str(space), "--set", "probe.steps=10", "--seeds", "0,1"])
    assert result.exit_code == 1, result.output
    assert "the runs are identical: the seed has no effect" in result.stdout
    assert "the workload ignores its seed" in result.stderr


def test_a_nan_against_a_number_is_said_by_its_values_not_as_a_difference_of_0() -> None:
    """A loss that went NaN at step 5 in one run and later in the other (a review: "max abs
    difference 0"): the first differing step names both values."""
    nan = float("nan")
    s = repro.compare_run_series([[1.0] * 5 + [nan], [1.0] * 5 + [1.23, 1.0, 1.0, nan]])
    assert s["first_diff_values"] == ["nan", 1.23] and s["one_finite_steps"] == 1
    text = repro.series_text(s)
    assert "first at step 5 (nan vs 1.23)" in text and "max abs difference 0" not in text
    assert "runs have different lengths [6, 9]" in text
    both = repro.series_text(repro.compare_run_series([[1.0, nan, 3.0], [1.0, 2.0, 3.5]]))
    assert "(nan vs 2.0), max abs difference 0.5 where both are finite, 1 step(s)" in both
    ulp = repro.series_text(repro.compare_run_series([[2.0], [math.nextafter(2.0, 3.0)]]))
    assert "(2.0 vs 2.0000000000000004)" in ulp


SEARCHED = TINY.replace("clip_norm: 1.0", "clip_norm: {low: 0.1, high: 5.0, log: true}")


def test_a_space_runs_its_baseline_named_with_its_threads(
    write_space: Callable[..., Path],
) -> None:
    """`repro SPACE` runs the configuration `autotune probe` runs, the baseline (a review: it
    ran the midpoint, at torch's threads, and named neither), at a trial's planned threads."""
    from autotune.cli.probe import planned_threads

    path = write_space(SEARCHED)
    base = repro.run_repro(path, runs=2, set_=["probe.steps=10"], threads_for=planned_threads)
    assert base["config"]["name"] == "baseline" and base["config"]["knobs"] == {"clip_norm": 0.0}
    threads = planned_threads(sp.load(path))
    assert threads and base["config"]["threads"] == threads
    mid = repro.run_repro(path, runs=2, set_=["probe.steps=10"], config="midpoint")
    assert mid["config"]["knobs"]["clip_norm"] > 0 and mid["config"]["threads"] is None
    assert mid["runs"][0]["final_loss"] != base["runs"][0]["final_loss"]
    out = runner.invoke(app, ["repro", str(path), "--set", "probe.steps=10"])
    assert out.exit_code == 0, out.output
    header = out.output.splitlines()[1]
    assert header.startswith("config       baseline (PyTorch's defaults")
    assert "clip_norm=0" in header
    assert header.endswith(f"; {threads} CPU thread(s)")


def test_the_midpoint_leaves_unset_what_a_study_here_drops(
    write_space: Callable[..., Path],
) -> None:
    """`repro --config midpoint` set a searched NCCL variable (NCCL_ALGO=Ring) that a study on
    one process drops and leaves unset; now unset as there, and the report says so."""
    path = write_space(
        "name: nccl\nworkload: {name: mlp, size: tiny}\nprobe: {steps: 30, device: cpu}\n"
        "env:\n  NCCL_ALGO: {choices: [Ring, Tree]}\n"
    )
    mid = repro.run_repro(path, runs=2, set_=["probe.steps=10"], config="midpoint")
    assert mid["config"]["knobs"] == {}, "NCCL_ALGO is not in the midpoint's env"
    why = "NCCL/RCCL variables act only on GPU collectives (one process here)"
    assert mid["config"]["dropped"] == {"NCCL_ALGO": why}
    line = f"dropped knob NCCL_ALGO: {why}; left unset, as a study here leaves it"
    assert repro.format_repro(mid).splitlines()[2] == line  # under the config line


def test_a_recipes_knobs_cannot_be_changed_with_set(write_space: Callable[..., Path]) -> None:
    """The README calls a recipe's knobs all fixed (a review: `--set knobs.clip_norm=0.1` ran
    another configuration under the recipe's name)."""
    path = write_space(
        "autotune_recipe: 1\nname: r\nworkload: {name: mlp, size: tiny}\n"
        "probe: {steps: 10, device: cpu}\nknobs: {lr: 0.003, clip_norm: 1.0}\n",
        "r.yaml",
    )
    with pytest.raises(RecipeError, match=r"--set knobs\.clip_norm: a recipe's knobs are fixed"):
        repro.load_space(path, ["knobs.clip_norm=0.1"])
    r = repro.run_repro(path, runs=2)
    assert r["config"]["name"] == "recipe" and r["config"]["knobs"]["clip_norm"] == 1.0
    assert "config       recipe (the recipe's knobs" in repro.format_repro(r)
