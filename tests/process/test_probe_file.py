"""A probe's config file left by a writer that was killed mid-probe (a Ray worker SIGKILLed, a
probe killed at its time limit) is removed by the next one written on the machine; a running
writer's file, another user's and any other file are left alone. 176 had piled up in /tmp over
days of tests that kill workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.process import probe_file


def _no_such_pid() -> int:
    """A pid no process can have: above the kernel's largest."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def test_a_file_whose_writer_is_gone_is_swept_and_a_live_one_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    gone = tmp_path / f"autotune-probe-{_no_such_pid()}-abc123.json"
    gone_rank = tmp_path / f"autotune-rank-{_no_such_pid()}-x_9.json"
    live = tmp_path / f"autotune-probe-{os.getpid()}-abc123.json"
    older = tmp_path / "autotune-probe-abc123.json"  # an older name: no pid to tell by
    other = tmp_path / f"autotune-study-{_no_such_pid()}-a.json"  # not a probe's
    for p in (gone, gone_rank, live, older, other):
        p.write_text("{}")
    path = probe_file.write({"steps": 3})
    assert Path(path).parent == tmp_path and Path(path).name.startswith(
        f"autotune-probe-{os.getpid()}-"
    )
    assert not gone.exists() and not gone_rank.exists()
    assert live.exists() and older.exists() and other.exists() and Path(path).exists()
    assert Path(path).read_text() == '{"steps": 3}'
    probe_file.remove(path)
    probe_file.remove(path)  # gone already: nothing
    assert not Path(path).exists()
    ranks = probe_file.write({}, probe_file.RANKS)
    assert Path(ranks).name.startswith(f"autotune-rank-{os.getpid()}-")


@pytest.mark.integration
def test_the_file_a_killed_writer_left_is_removed_by_the_next(tmp_path: Path) -> None:
    """A real writer SIGKILLed while its file is there (as a Ray worker is mid-probe)."""
    code = (
        "import sys, tempfile, time; tempfile.tempdir = sys.argv[1]\n"
        "from autotune.process import probe_file\n"
        "print(probe_file.write({'steps': 3}), flush=True); time.sleep(120)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    left = Path(proc.stdout.readline().strip())
    assert left.exists() and left.name.startswith(f"autotune-probe-{proc.pid}-")
    assert probe_file.sweep(str(tmp_path)) == []  # its writer runs: kept
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert left.exists()  # nothing removed it: the writer never got to
    assert probe_file.sweep(str(tmp_path)) == [str(left)] and not left.exists()
