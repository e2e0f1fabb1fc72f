"""`autotune check` shows the space as a study on this machine runs it: a searched environment
knob's baseline is unset (the library's own setting), and a knob the study would drop here is
marked with why (a black-box review: NCCL_ALGO was listed as searched with a default 'Ring' on a
one-process CPU probe, which the study then dropped)."""

from __future__ import annotations

from pathlib import Path

from assets.cli import invoke

SPACE = """\
name: envt
workload: {name: mlp, size: tiny}
probe: {steps: 50, device: cpu}
knobs:
  clip_norm: {low: 0.1, high: 5.0, log: true}
env:
  NCCL_ALGO: {choices: [Ring, Tree]}
"""


def test_check_marks_what_this_machine_drops_and_the_unset_env_baseline(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    result = invoke("check", tmp_path / "space.yaml")
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.strip().startswith("NCCL_ALGO"))
    assert "baseline unset" in line and "'Ring'" in line, line  # the choices, not the default
    assert "[dropped here: NCCL/RCCL variables act only on GPU collectives" in line, line
    clip = next(x for x in result.stdout.splitlines() if x.strip().startswith("clip_norm"))
    assert "dropped here" not in clip
