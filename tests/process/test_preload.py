"""The zygote's preload list (`AUTOTUNE_PRELOAD`): the modules a training script imports, imported
once in the worker's zygote instead of in every trial; set by the study for script workloads."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune import space as sp
from autotune.errors import SpaceError
from autotune.probe import ProbeConfig
from autotune.process import launcher, zygotes
from autotune.process import zygote as zygote_mod
from autotune.process.zygote import PRELOAD_ENV
from autotune.process.zygotes import discard_zygote
from autotune.study.adapter import Driver
from autotune.study.options import StudyOptions
from autotune.study.progress import Progress
from autotune.study.workers import trial_process_env

# Records the pid of each process that imports it.
MARK = "import os\nwith open({out!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"

# A training script that records, before its own imports, what its process already imported.
SCRIPT = """
import os, sys
with open({out!r}, "a") as f:
    f.write(" ".join([
        str(os.getpid()),
        str(int("preload_mark" in sys.modules)),
        str(int("autotune.recipe.trial" in sys.modules)),
        os.environ.get("AUTOTUNE_PRELOAD", "-"),
    ]) + "\\n")
import preload_mark
import autotune
trial = autotune.trial(steps=10, micro_batch=1)
for i in range(trial.steps):
    trial.report(i, loss=1.0, grad_norm=1.0)
"""


@pytest.fixture
def mods(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on PYTHONPATH with `preload_mark` (records importing pids in imports.txt), a
    module that fails to import and one that pretends to initialise CUDA."""
    d = tmp_path / "mods"
    d.mkdir()
    (d / "preload_mark.py").write_text(MARK.format(out=str(tmp_path / "imports.txt")))
    (d / "preload_broken.py").write_text("raise RuntimeError('broken on purpose')\n")
    # torch.cuda cannot be initialised on a CPU machine: this stands in for a module that does.
    (d / "preload_cuda.py").write_text("import torch\ntorch.cuda.is_initialized = lambda: True\n")
    (tmp_path / "train.py").write_text(SCRIPT.format(out=str(tmp_path / "seen.txt")))
    monkeypatch.setenv("PYTHONPATH", str(d))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(zygotes, "_REFUSED", set())
    yield tmp_path
    discard_zygote()


def _script_probe(tmp_path: Path) -> dict[str, Any]:
    script = tmp_path / "train.py"
    return ProbeConfig(
        workload="script:train.py", script=str(script), steps=10, micro_batch=1
    ).to_dict()


def _trial(tmp_path: Path, preload: str) -> dict[str, Any]:
    out = launcher.run_trial_process(
        _script_probe(tmp_path),
        {},
        timeout_s=120,
        threads=1,
        spare=True,
        extra_env={PRELOAD_ENV: preload},
    )
    assert out["outcome"] == "complete", out["log_tail"]
    return out


def _seen(tmp_path: Path) -> list[list[str]]:
    return [line.split() for line in (tmp_path / "seen.txt").read_text().splitlines()]


def _log_has(zygote: zygote_mod.Zygote, text: str, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not any(text in line for line in zygote.log):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.integration
def test_a_preloaded_module_is_imported_once_in_the_zygote_not_in_each_trial(mods: Path) -> None:
    preload = "preload_mark,autotune.recipe.trial"
    first, second = _trial(mods, preload), _trial(mods, preload)
    zygote = first["zygote"]
    assert zygote is not None and second["zygote"] == zygote and second["spare"]
    assert (mods / "imports.txt").read_text().split() == [str(zygote)]
    seen = _seen(mods)
    assert [s[1:] for s in seen] == [["1", "1", preload]] * 2
    assert len({s[0] for s in seen} | {str(zygote)}) == 3  # two trial pids, neither the zygote


@pytest.mark.integration
def test_a_module_that_fails_to_preload_is_skipped_and_the_trial_runs(mods: Path) -> None:
    preloads = "no_such_module_xyz,preload_broken,preload_mark"
    out = _trial(mods, preloads)
    assert out["zygote"] is not None  # forked: the zygote served
    assert (mods / "imports.txt").read_text().split() == [str(out["zygote"])]
    assert _seen(mods)[0][1] == "1"
    zygote = zygotes.zygote_of(launcher.probe_env({}, 1) | {PRELOAD_ENV: preloads})
    assert zygote is not None
    assert _log_has(zygote, "preload of 'no_such_module_xyz' skipped: ModuleNotFoundError")
    assert _log_has(zygote, "preload of 'preload_broken' skipped: RuntimeError: broken on purpose")


@pytest.mark.integration
def test_a_zygote_whose_preload_initialised_cuda_refuses_to_serve(mods: Path) -> None:
    env = launcher.probe_env({}, 1) | {PRELOAD_ENV: "preload_cuda"}
    zygote = zygote_mod.Zygote(env)
    try:
        assert zygote.proc.wait(timeout=120) == zygote_mod.NO_DEVICE_RC
        assert _log_has(zygote, "not serving: the zygote initialised CUDA/ROCm")
    finally:
        zygote.kill()
    # In a trial: it runs in a fresh process, and no zygote is started again for its environment.
    for _ in range(2):
        out = _trial(mods, "preload_cuda")
        assert out["zygote"] is None
    assert not zygotes._ZYGOTES and len(zygotes._REFUSED) == 1


def _driver(space: sp.Space, tmp_path: Path) -> Driver:
    study = optuna.create_study()
    progress = Progress(space, 1, 0, 1, True)
    opts = StudyOptions(space=space, quiet=True)
    return Driver(opts, study, {}, 1, [], None, progress, tmp_path)


@pytest.mark.integration
def test_a_script_study_trial_carries_the_preload_and_a_builtin_does_not(mods: Path) -> None:
    (mods / "space.yaml").write_text(
        textwrap.dedent("""
        name: preloaded
        workload: {script: train.py, preload: [preload_mark, preload_mark]}
        probe: {steps: 10, micro_batch: 1, threads: 1}
        """)
    )
    space = sp.load(str(mods / "space.yaml"))
    job = _driver(space, mods).next_config()
    assert job is not None
    extra = trial_process_env(space)  # what the job runner hands every probe of the study
    assert extra == {PRELOAD_ENV: "autotune.recipe.trial,preload_mark"}
    assert not any(k.startswith("AUTOTUNE_") for k in job.env)  # not a recorded knob
    out = launcher.run_trial_process(  # as the study's task runs it
        job.probe.to_dict(),
        job.env,
        timeout_s=120,
        threads=1,
        spare=True,
        extra_env=extra,
    )
    assert out["outcome"] == "complete", out["log_tail"]
    assert _seen(mods)[0][1:] == ["1", "1", "autotune.recipe.trial,preload_mark"]
    assert PRELOAD_ENV not in str((out.get("fingerprint") or {}).get("env"))

    assert _driver(sp.load("amp"), mods).next_config() is not None
    assert trial_process_env(sp.load("amp")) == {}


def test_the_study_sets_the_preload_for_script_workloads_only() -> None:
    root = Path(__file__).resolve().parents[2] / "examples"
    hf = sp.load(str(root / "hf_trainer" / "space.yaml"))
    assert trial_process_env(hf) == {
        PRELOAD_ENV: "autotune.recipe.trial,transformers.trainer,autotune.integrations.hf"
    }
    lightning = sp.load(str(root / "lightning" / "space.yaml"))
    assert trial_process_env(lightning) == {
        PRELOAD_ENV: "autotune.recipe.trial,lightning,autotune.integrations.lightning"
    }
    assert trial_process_env(sp.load("amp")) == {}


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("{script: train.py, preload: ['os; rm']}", "is not a dotted module name"),
        ("{script: train.py, preload: [torch.]}", "is not a dotted module name"),
        ("{name: tiny_gpt, preload: [torch]}", "preload is for a `script`"),
    ],
)
def test_a_bad_preload_is_one_clear_error(tmp_path: Path, workload: str, message: str) -> None:
    (tmp_path / "train.py").write_text("")
    (tmp_path / "space.yaml").write_text(f"name: bad\nworkload: {workload}\n")
    with pytest.raises(SpaceError, match=message) as e:
        sp.load(str(tmp_path / "space.yaml"))
    assert "workload" in str(e.value) and len(str(e.value).splitlines()) == 1


def test_preload_is_dumped_only_when_given() -> None:
    root = Path(__file__).resolve().parents[2] / "examples"
    dumped = sp.load(str(root / "lightning" / "space.yaml")).workload.model_dump()
    assert dumped["preload"] == ["lightning", "autotune.integrations.lightning"]
    assert "preload" not in sp.load(str(root / "plain_loop" / "space.yaml")).workload.model_dump()


def test_a_script_recipes_probe_config_carries_its_preload() -> None:
    from dataclasses import replace

    from assets.recipes import make_recipe

    recipe = replace(
        make_recipe(), workload={"script": "train.py", "args": [], "preload": ["preload_mark"]}
    )
    assert recipe.probe_config().preload == ["preload_mark"]
    assert make_recipe().probe_config().preload == []  # a built-in workload: nothing
    space = sp.load(str(Path(__file__).resolve().parents[2] / "examples/lightning/space.yaml"))
    assert sp.probe_config(space).preload == ["lightning", "autotune.integrations.lightning"]


@pytest.mark.integration
def test_verify_of_a_script_recipe_forks_from_a_zygote_that_preloaded_it(mods: Path) -> None:
    """`verify` (and `migrate`) of a script recipe: each seed's probe is forked by a zygote that
    imported the trial API and the recipe's `workload.preload` once, as the study's workers did
    (a big module such as lightning took ~8 s to import in every forked probe here)."""
    from autotune.recipe import verify as vf

    cfg = ProbeConfig(
        workload="script:train.py", script="train.py", steps=10, micro_batch=1, threads=1,
        preload=["preload_mark"],
    )  # fmt: skip
    ran = vf.run_interleaved(
        [(cfg, {}, "recipe")], [1, 2, 3], timeout_s=120, threads=1, say=lambda _t: None
    )
    assert [r["outcome"] for r in ran[0]] == ["complete"] * 3, [r["log_tail"] for r in ran[0]]
    seen = _seen(mods)
    assert [line[1:] for line in seen] == [["1", "1", "autotune.recipe.trial,preload_mark"]] * 3
    importers = (mods / "imports.txt").read_text().split()
    assert len(importers) == 1 and importers[0] not in {line[0] for line in seen}, importers
