"""A probe that does not fit on this machine's cores is refused before it runs
(`autotune.process.cores`), by probe, verify, repro and migrate alike, as check and study refuse
the space.

A black-box review ran `autotune probe --set probe.world_size=3` on 2 cores (exit 0, three
ranks sharing two cores) and a recipe edited to 3 ranks under `verify`; `probe.threads=64` ran
as 32 threads per rank, 1 thread for 2 ranks ran 2 and 3 ran 2."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error
from assets.recipes import make_recipe

from autotune.probe.config import ProbeConfig
from autotune.process.cores import cores_problem

CPU = ProbeConfig(workload="mlp", device="cpu")


def test_more_ranks_than_cores_are_refused_on_the_cpu_only() -> None:
    problem = cores_problem(replace(CPU, world_size=3), cores=2)
    assert problem is not None
    assert problem.startswith("probe.world_size: each trial asks for 3 CPU(s), but this machine")
    assert cores_problem(replace(CPU, world_size=2), cores=2) is None
    # a DDP probe on GPUs takes one GPU per rank, which the supervisor checks
    assert cores_problem(replace(CPU, world_size=3, device="cuda"), cores=2) is None


@pytest.mark.parametrize(
    ("world", "threads", "cores", "says"),
    [
        (2, 64, 2, "probe.threads: each trial asks for 64 CPU(s) (a thread each), but this"),
        (1, 3, 2, "probe.threads: each trial asks for 3 CPU(s)"),
        (2, 1, 4, "each would run 1, 2 in all): set probe.threads to a multiple of 2"),
        (2, 3, 4, "each would run 1, 2 in all): set probe.threads to a multiple of 2"),
    ],
)
def test_threads_are_refused_unless_they_run_as_asked(
    world: int, threads: int, cores: int, says: str
) -> None:
    problem = cores_problem(replace(CPU, world_size=world, threads=threads), cores=cores)
    assert problem is not None and says in problem, problem


def test_threads_that_run_as_asked_pass() -> None:
    assert cores_problem(replace(CPU, world_size=2, threads=2), cores=2) is None
    assert cores_problem(replace(CPU, world_size=2, threads=4), cores=4) is None
    assert cores_problem(replace(CPU, threads=None, world_size=2), cores=2) is None


def test_verify_and_repro_refuse_a_recipe_of_more_ranks_than_cores(tmp_path: Path) -> None:
    ranks = (os.cpu_count() or 1) + 1
    recipe = replace(make_recipe(), world_size=ranks, probe={"steps": 50, "device": "cpu"})
    path = recipe.save(tmp_path / "r.yaml")
    for args in (["verify", path, "--seeds", "2"], ["repro", path]):
        line = one_line_error(invoke(*args), f"world_size: each trial asks for {ranks} CPU(s)")
        assert "r.yaml" in line


def test_probe_refuses_more_ranks_than_cores(tmp_path: Path) -> None:
    ranks = (os.cpu_count() or 1) + 1
    space = tmp_path / "s.yaml"
    space.write_text("name: x\nworkload: {name: mlp, size: tiny}\nprobe: {device: cpu}\n")
    result = invoke("probe", "--space", space, "--set", f"probe.world_size={ranks}")
    one_line_error(result, f"probe.world_size: each trial asks for {ranks} CPU(s)")


def test_a_recipe_from_a_larger_machine_runs_its_threads_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recipe made on a 64-core node asks for more threads than this machine has: verify and
    repro still take it (the loss does not depend on threads; a migration's first check is to
    run it here), saying its timings measure the sharing. Its ranks are still checked."""
    from autotune.recipe.preflight import load_checked

    threads = 2 * (os.cpu_count() or 1)
    recipe = replace(make_recipe(), probe={"steps": 50, "device": "cpu", "threads": threads})
    path = recipe.save(tmp_path / "r.yaml")
    assert load_checked(path).probe_config().threads == threads
    err = capsys.readouterr().err
    assert f"probe.threads {threads} is more than this machine's" in err and "r.yaml" in err, err
