"""`autotune check` on a black-box review's findings: it showed `clip_norm: auto` as a fixed
range never searched, passed a `budget.gpus_per_trial` this machine cannot give (the README says
refused naming the key), named a workload's bad size without its line, and said nothing of
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


def test_gpus_per_trial_beyond_this_machine_is_refused(here: Path) -> None:
    gpus = torch.cuda.device_count()
    asked = max(1, gpus) + 1
    path = write(here, SPACE.replace("trials: 2", f"trials: 2, gpus_per_trial: {asked}"))
    line = one_line_error(invoke("check", path), f"{path}: budget.gpus_per_trial: ")
    assert f"asks for {asked} GPU(s), but this machine has {gpus}" in line


def test_the_default_gpu_per_trial_passes_without_a_gpu(here: Path) -> None:
    path = write(here, SPACE.replace("trials: 2", "trials: 2, gpus_per_trial: 1"))
    result = invoke("check", path)
    assert result.exit_code == 0, result.output


def test_a_workload_size_it_does_not_have_names_the_key_and_line(here: Path) -> None:
    path = write(here, SPACE.replace("size: tiny", "size: Tiny"))
    line = one_line_error(invoke("check", path), f"{path}: workload.size (line 2): ")
    assert "has no size 'Tiny'" in line and "did you mean 'tiny'?" in line
    line = one_line_error(
        invoke("check", path, "--set", "workload.size=Big"), f"{path}: workload.size (from --set): "
    )
    assert "has no size 'Big'" in line


def test_misspelt_nccl_variables_are_warned_of(here: Path) -> None:
    result = invoke("check", write(here, SPACE + "env: {NCCL_ALOG: Ring, NCCL_ALGO: Rnig}\n"))
    assert result.exit_code == 0, result.output
    assert (
        "env.NCCL_ALOG: not a known NCCL/RCCL variable (did you mean NCCL_ALGO?)" in result.stdout
    )
    assert "env.NCCL_ALGO: 'Rnig' is not one of its values" in result.stdout
