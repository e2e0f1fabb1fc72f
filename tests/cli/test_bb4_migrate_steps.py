"""bb4 F5: `migrate --steps N` is checked as `verify --steps` is (probe.steps' bounds, the same
one line, exit status 2), before the recipe is read or the report folder made."""

from __future__ import annotations

from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error

from autotune.space.limits import MAX_STEPS, MIN_STEPS


@pytest.mark.parametrize("steps", [3, MIN_STEPS - 1, 0, -5, MAX_STEPS + 1, 99999999999])
def test_migrate_steps_out_of_bounds_are_refused_as_verify_refuses_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: int
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.yaml").write_text("autotune_recipe: 1\n")  # never read
    migrate = one_line_error(invoke("migrate", "r.yaml", "--steps", str(steps), "-o", "out"))
    verify = one_line_error(invoke("verify", "r.yaml", "--steps", str(steps)))
    assert migrate == verify
    assert f"--steps {steps}: steps are a whole number from {MIN_STEPS} to " in migrate
    assert not (tmp_path / "out").exists(), "the report folder was made"
