"""A Ctrl-C while `autotune study` starts (its imports: about a second, before the study's own
handlers are set): a black-box review found it lost where SIGINT was inherited as ignored (a
script's `autotune study ... &`: the whole study ran, status 0), and a traceback or a silent
status 130 otherwise. Now one line, status 130 and nothing made, however it was started; the
signal is sent as soon as the process catches SIGINT (its /proc status), so that it lands in
the imports whatever the machine's speed."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from assets import studies as h

pytestmark = pytest.mark.integration


def _catches_sigterm(pid: int) -> bool:
    """Whether process `pid` has a handler of its own for SIGTERM (its bit of SigCgt)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


@pytest.mark.parametrize("ignored", [True, False], ids=["sigint-ignored", "sigint-default"])
def test_a_ctrl_c_while_the_command_starts_ends_it_with_one_line(
    ignored: bool, tmp_path: Path
) -> None:
    h.write(tmp_path, h.mlp_space("early", trials=2, steps=20))
    proc = subprocess.Popen(
        h.autotune_cmd("study", "--space", "space.yaml"),
        cwd=tmp_path,
        env=h.cli_env(h.new_token()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored else None,
    )
    try:
        deadline = time.monotonic() + 30
        while not _catches_sigterm(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.002)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, out[-2000:], err[-3000:])
    assert err.splitlines() == ["autotune: interrupted while it started: nothing was done"], err
    assert "Traceback" not in err and out == "", out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["space.yaml"], "something was made"
