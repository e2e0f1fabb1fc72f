"""A workload module's code that prints, parses the command line or ends the process, while it is
imported or its factory runs (`autotune.probe.workload_guard`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from autotune.errors import WorkloadError
from autotune.probe.workload import resolve

WORKLOAD = """
class W:
    name = "guarded"; default_lr = 1e-3; unstable_lr = 1.0
    def __init__(self, size): self.size = size
    def build_model(self): ...
    def batches(self, micro_batch, seed): ...
    def eval_batches(self, micro_batch): ...
    def loss(self, model, batch): ...
    def samples(self, batch): ...
    def tokens(self, batch): ...
"""


def _file(tmp_path: Path, top: str, make: str = "return W(size)") -> str:
    path = tmp_path / "user_wl.py"
    path.write_text(f"{top}\n{WORKLOAD}\ndef make(size='tiny'):\n    {make}\n")
    return f"{path}:make"


@pytest.mark.parametrize(
    ("top", "shown"),
    [
        ("raise SystemExit(3)", "SystemExit(3)"),
        ("import sys; sys.exit('no data')", "SystemExit('no data')"),
        ("import os; os._exit(0)", "os._exit(0)"),  # would end pytest without the guard
    ],
)
def test_a_module_that_exits_at_import_is_named(tmp_path: Path, top: str, shown: str) -> None:
    ref = _file(tmp_path, top)
    real_exit = os._exit
    for _ in range(2):  # not left half-imported: the second resolve runs it again
        with pytest.raises(WorkloadError) as err:
            resolve(ref)
        assert str(err.value).startswith(f"workload {ref!r} exited while it was imported: {shown}")
        assert "workload.script" in str(err.value)
    assert os._exit is real_exit


def test_a_factory_that_exits_is_named(tmp_path: Path) -> None:
    ref = _file(tmp_path, "", make="raise SystemExit(4)")
    with pytest.raises(WorkloadError, match=r"exited while its factory ran: SystemExit\(4\)"):
        resolve(ref)


def test_a_module_level_parser_sees_none_of_autotunes_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's train.py named as the workload parses sys.argv at import: it reads its own
    name alone, not `autotune check space.yaml` (which it would refuse as autotune's usage)."""
    argv = ["autotune", "check", "space.yaml"]
    monkeypatch.setattr(sys, "argv", argv)
    top = "import argparse, sys\nSEEN = list(sys.argv)\n"
    top += "ARGS = argparse.ArgumentParser().parse_args()"
    ref = _file(tmp_path, top)
    assert resolve(ref).name == "guarded"
    path = str((tmp_path / "user_wl.py").resolve())
    module = next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == path)
    assert [path] == module.SEEN
    assert sys.argv is argv


def test_a_parser_that_requires_arguments_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    top = "import argparse\np = argparse.ArgumentParser()\np.add_argument('--data', required=True)"
    ref = _file(tmp_path, top + "\np.parse_args()")
    with pytest.raises(WorkloadError, match=r"exited while it was imported: SystemExit\(2\)"):
        resolve(ref)
    assert "usage: user_wl.py" in capsys.readouterr().err  # its own usage, not autotune's


def test_prints_at_import_and_in_the_factory_go_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = _file(tmp_path, "print('HELLO AT IMPORT')", make="print('HELLO IN MAKE'); return W(size)")
    assert resolve(ref).name == "guarded"
    out = capsys.readouterr()
    assert out.out == ""
    assert "HELLO AT IMPORT" in out.err and "HELLO IN MAKE" in out.err
