"""`autotune check` on a black-box review's findings: it showed `clip_norm: auto` as a fixed
range never searched, passed a `budget.gpus_per_trial` this machine cannot give (the README says
refused naming the key) and said nothing of
misspelt NCCL variables. Typer's CliRunner, in process."""

from __future__ import annotations

from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error

torch = pytest.importorskip("torch")

SPACE = """\
name: findings
workload: {name: mlp, size: tiny}
probe: {steps: 20}
budget: {trials: 2}
knobs:
  lr: 0.3
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path


def write(folder: Path, text: str) -> Path:
    path = folder / "space.yaml"
    path.write_text(text)
    return path


def test_clip_norm_auto_is_shown_as_measured_from_the_baseline(here: Path) -> None:
    result = invoke("check", write(here, SPACE + "  clip_norm: auto\n"))
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.strip().startswith("clip_norm"))
    assert "measured from the baseline's gradient norms" in line, line
    assert "[0.05, 5]" not in line, line


def test_gpus_per_trial_beyond_this_machines_gpus_is_refused(here: Path) -> None:
    from autotune import space as sp
    from autotune.cli.check_gpus import check_gpus_per_trial
    from autotune.errors import SpaceError

    path = write(here, SPACE.replace("trials: 2", "trials: 2, gpus_per_trial: 4"))
    space = sp.load(str(path))
    with pytest.raises(SpaceError, match=r"budget.gpus_per_trial: each trial asks for 4 GPU"):
        check_gpus_per_trial(space, 2)  # a machine of 2 GPUs
    check_gpus_per_trial(space, 4)
    check_gpus_per_trial(space, 0)  # no GPU: the trials run on the CPU, where it does not apply
    if torch.cuda.device_count() == 0:
        assert invoke("check", path).exit_code == 0
    else:
        asked = torch.cuda.device_count() + 1
        path = write(here, SPACE.replace("trials: 2", f"trials: 2, gpus_per_trial: {asked}"))
        one_line_error(invoke("check", path), f"{path}: budget.gpus_per_trial: ")


def test_the_default_gpu_per_trial_passes_without_a_gpu(here: Path) -> None:
    path = write(here, SPACE.replace("trials: 2", "trials: 2, gpus_per_trial: 1"))
    result = invoke("check", path)
    assert result.exit_code == 0, result.output


def test_misspelt_nccl_variables_are_warned_of(here: Path) -> None:
    result = invoke("check", write(here, SPACE + "env: {NCCL_ALOG: Ring, NCCL_ALGO: Rnig}\n"))
    assert result.exit_code == 0, result.output
    assert (
        "env.NCCL_ALOG: not a known NCCL/RCCL variable (did you mean NCCL_ALGO?)" in result.stdout
    )
    assert "env.NCCL_ALGO: 'Rnig' is not one of its values" in result.stdout
