"""A workload's own mistakes named as such: a review found "raised StopIteration: " (nothing
after it) for a finite `batches()`, and "optimizer got an empty parameter list" for a model
without parameters."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app

BASE = """\
import itertools
import torch
from torch import nn


class W:
    name = "mistaken"
    default_lr = 3e-3
    unstable_lr = 1.0

    def __init__(self, size):
        self.size = size
        self.w = torch.randn(8, 1, generator=torch.Generator().manual_seed(1))

    def build_model(self):
        return MODEL

    def batches(self, micro_batch, seed):
        g = torch.Generator().manual_seed(seed)
        for _ in range(COUNT):
            x = torch.randn(micro_batch, 8, generator=g)
            yield x, x @ self.w

    def eval_batches(self, micro_batch):
        g = torch.Generator().manual_seed(9)
        return [(x, x @ self.w) for x in [torch.randn(micro_batch, 8, generator=g)]]

    def loss(self, model, batch):
        return nn.functional.mse_loss(model(batch[0]) + 0 * batch[0].sum(), batch[1])

    def samples(self, batch):
        return batch[0].shape[0]

    def tokens(self, batch):
        return 0


def make(size="tiny"):
    return W(size)
"""
LINEAR = "nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))"


@pytest.mark.parametrize(
    ("model", "count", "said"),
    [
        (LINEAR, "7", "batches() ran out at step 7: it must yield micro-batches"),
        ("nn.Identity()", "10**9", "no trainable parameters"),
    ],
)
def test_a_workloads_mistake_is_named(tmp_path: Path, model: str, count: str, said: str) -> None:
    code = BASE.replace("return MODEL", f"return {model}").replace(
        "range(COUNT)", f"range({count})"
    )
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
