"""A workload that closes the descriptors it inherited closes autotune's report channel; the
failure says so, naming the descriptor (black-box review bb5, B10), instead of only "exited
with status 1 without a summary"."""

from __future__ import annotations

import errno
import json
import os
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.process import channel
from autotune.process.launcher import outcome_of


def test_a_write_on_a_closed_channel_names_it() -> None:
    read_fd, write_fd = os.pipe()
    writer = channel.Writer(write_fd, "n")
    os.close(write_fd)
    try:
        with pytest.raises(channel.ChannelClosed) as e:
            writer({"event": "start"})
    finally:
        os.close(read_fd)
    assert e.value.errno == errno.EBADF
    assert f"autotune's report channel (fd {write_fd}) was closed by the workload" in str(e.value)


def test_the_crash_cause_quotes_the_closed_channel_from_the_log() -> None:
    tail = (
        "Traceback (most recent call last):\n"
        "autotune.process.channel.ChannelClosed: [Errno 9] "
        + str(channel.ChannelClosed(7).strerror)
    )
    out = outcome_of(1, False, 60.0, {}, tail)
    assert out["cause"] == "crash"
    assert out["error"].startswith("the probe process exited with status 1 without a summary: ")
    assert "autotune's report channel (fd 7) was closed by the workload" in out["error"]
    assert outcome_of(1, False, 60.0, {}, "ValueError: x")["error"].endswith("without a summary")


SPACE = """\
name: closefds
workload: {script: train.py}
probe: {steps: 10, micro_batch: 4, device: cpu, threads: 1}
knobs: {lr: 0.01}
"""
SCRIPT = """\
import os
os.closerange(3, 4096)
import autotune
trial = autotune.trial(steps=99, micro_batch=3)
for step in range(trial.steps):
    trial.report(step, loss=1.0 / (step + 1), grad_norm=1.0)
"""


@pytest.mark.integration
def test_a_script_that_closes_inherited_fds_is_told_which(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    (tmp_path / "space.yaml").write_text(SPACE)
    result = CliRunner().invoke(app, ["probe", "--space", str(tmp_path / "space.yaml"), "--json"])
    assert result.exit_code == 2, result.output
    data = json.loads(result.stdout)
    assert (data["status"], data["cause"]) == ("failed", "crash")
    assert "without a summary: autotune's report channel (fd " in data["error"], data["error"]
    assert "was closed by the workload" in data["error"]
