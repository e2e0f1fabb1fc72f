"""A trial that no node can hold is refused before the study starts (`autotune.study.fits`):
Ray would never place it, and Tune would wait for it forever with the study's folder made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from assets import studies as h
from typer.testing import CliRunner

from autotune import space as sp
from autotune.cli import app
from autotune.errors import SpaceError
from autotune.study import plan_resources
from autotune.study.fits import check_trial_fits

BASE = "name: x\nworkload: {name: mlp, size: tiny}\n"
TWO_NODES = [{"CPU": 1.0}, {"CPU": 1.0}]  # the test suite's loopback cluster


@pytest.mark.parametrize(
    ("extra", "key", "asked"),
    [
        ("budget: {cpus_per_trial: 2}\n", "budget.cpus_per_trial", "2 CPU(s)"),
        ("probe: {threads: 2}\n", "probe.threads", "2 CPU(s)"),
        ("probe: {world_size: 2}\n", "probe.world_size", "2 CPU(s)"),
    ],
)
def test_more_cpus_than_any_node_has_is_refused_naming_the_key(
    extra: str, key: str, asked: str
) -> None:
    s = sp.loads(BASE + extra)
    with pytest.raises(SpaceError) as e:
        check_trial_fits(s, TWO_NODES, "the Ray cluster at 127.0.0.1:6379")
    text = str(e.value)
    assert f"{key}: each trial asks for {asked}" in text, text
    assert "the largest node of the Ray cluster at 127.0.0.1:6379 has 1 CPU(s)" in text, text
    check_trial_fits(s, [*TWO_NODES, {"CPU": 2.0}], "a cluster")  # a node that holds it


@pytest.mark.parametrize(
    ("probe", "says"),
    [
        # a review's study ran this on 2 cores, as 32 threads per rank
        ("{threads: 64, world_size: 2}", "probe.threads: each trial asks for 64 CPU(s)"),
        ("{threads: 1, world_size: 2}", "set probe.threads to a multiple of 2"),
        ("{threads: 3, world_size: 2}", "set probe.threads to a multiple of 2"),
    ],
)
def test_threads_beyond_the_cores_or_not_shared_evenly_are_refused(probe: str, says: str) -> None:
    s = sp.loads(BASE + f"probe: {probe}\nbudget: {{cpus_per_trial: 2}}\n")
    with pytest.raises(SpaceError, match=r"^<string>|probe\.threads") as e:
        check_trial_fits(s, [{"CPU": 4.0 if "64" not in probe else 2.0}], "this machine")
    assert "probe.threads: " in str(e.value) and says in str(e.value), str(e.value)


def test_the_threads_planned_for_ranks_are_the_threads_they_run() -> None:
    """Unset probe.threads: a multiple of the ranks, which share them out evenly."""
    s = sp.loads(BASE + "probe: {world_size: 2}\nbudget: {cpus_per_trial: 3}\n")
    assert plan_resources(s, {"CPU": 8.0})[2] == 2
    s = sp.loads(BASE + "probe: {world_size: 2}\n")
    assert plan_resources(s, {"CPU": 2.0})[2] == 2


def test_gpus_are_asked_of_one_node() -> None:
    s = sp.loads(BASE + "probe: {device: cuda}\nbudget: {gpus_per_trial: 2}\n")
    nodes = [{"CPU": 8.0, "GPU": 1.0}, {"CPU": 8.0, "GPU": 1.0}]
    with pytest.raises(SpaceError, match=r"budget.gpus_per_trial: each trial asks for 2 GPU"):
        check_trial_fits(s, nodes, "the Ray cluster at c:1")
    check_trial_fits(s, [{"CPU": 8.0, "GPU": 2.0}], "this machine")


def test_a_trial_that_fits_is_not_refused() -> None:
    check_trial_fits(sp.loads(BASE), [{"CPU": 1.0}], "this machine")
    check_trial_fits(sp.loads(BASE + "budget: {cpus_per_trial: 0.5}\n"), [{"CPU": 1.0}], "here")


def test_check_refuses_more_cpus_than_this_machine_has(tmp_path: Path) -> None:
    space = tmp_path / "big.yaml"
    space.write_text(BASE + f"budget: {{cpus_per_trial: {(os.cpu_count() or 1) + 1}}}\n")
    result = CliRunner().invoke(app, ["check", str(space)])
    assert result.exit_code == 2, result.output
    assert "budget.cpus_per_trial" in result.output and "this machine has" in result.output


@pytest.mark.integration
def test_a_study_that_asks_for_more_cpus_than_this_machine_has_makes_nothing(
    tmp_path: Path,
) -> None:
    more = (os.cpu_count() or 1) + 1
    text = h.mlp_space("toobig", trials=2).replace(
        "trial_timeout_s: 120}", f"trial_timeout_s: 120, cpus_per_trial: {more}}}"
    )
    assert "cpus_per_trial" in text
    space = h.write(tmp_path, text)
    args = ["study", "--space", str(space), "--tracking-uri", h.sqlite_uri(tmp_path)]
    result = h.autotune(args, tmp_path, timeout=120)  # it waited forever before
    assert result.returncode == 2, h.explain(result)
    last = result.stderr.strip().splitlines()[-1]
    assert "budget.cpus_per_trial: each trial asks for" in last, last
    assert not (tmp_path / "autotune-studies").exists(), "a study folder was created"
    assert not (tmp_path / "mlflow.db").exists(), "a tracking store was created"
