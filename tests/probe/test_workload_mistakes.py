"""A workload's own mistakes named as such: a review found "raised StopIteration: " (nothing
after it) for a finite `batches()`, and "optimizer got an empty parameter list" for a model
without parameters."""

from __future__ import annotations

from pathlib import Path

import pytest
from assets import factory
from typer.testing import CliRunner

from autotune.cli import app


@pytest.mark.parametrize(
    ("model", "count", "said"),
    [
        (factory.LINEAR, "7", "batches() ran out at step 7: it must yield micro-batches"),
        ("nn.Identity()", "10**9", "no trainable parameters"),
    ],
)
def test_a_workloads_mistake_is_named(tmp_path: Path, model: str, count: str, said: str) -> None:
    code = factory.source("mistaken", build=f"return {model}", count=count)
    (tmp_path / "wl.py").write_text(code)
    space = tmp_path / "space.yaml"
    space.write_text(
        f"name: mistaken\nworkload: {{name: {tmp_path}/wl.py:make}}\n"
        "probe: {steps: 20, micro_batch: 4, device: cpu}\nknobs: {lr: 0.003}\n"
    )
    result = CliRunner().invoke(app, ["probe", "--space", str(space), "--json"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()  # one line naming the workload and why
    assert line.startswith("autotune: error: the probe of workload ") and said in line, line


def test_a_script_that_is_a_folder_or_not_python_is_named(tmp_path: Path) -> None:
    """A review: `script: dir.py` (a folder) said "no such file", and a script of random bytes
    "bin.py:None: source code string cannot contain null bytes"."""
    from autotune import space as sp
    from autotune.errors import WorkloadError
    from autotune.study.driver import check_script

    (tmp_path / "dir.py").mkdir()
    (tmp_path / "bin.py").write_bytes(b"\x00\x01binary\xff")
    text = "name: s\nworkload: {{script: {}}}\nprobe: {{steps: 10}}\nknobs: {{lr: 0.01}}\n"
    folder = tmp_path / "folder.yaml"
    folder.write_text(text.format("dir.py"))
    with pytest.raises(sp.SpaceError, match=r"dir\.py: a folder, not a script"):
        sp.load(str(folder))
    binary = tmp_path / "binary.yaml"
    binary.write_text(text.format("bin.py"))
    with pytest.raises(WorkloadError, match=r"bin\.py: not Python source: ") as e:
        check_script(sp.load(str(binary)))
    assert "None" not in str(e.value)
