"""A Trainer job in a study that names no output_dir gets a folder of its trial's own from
`hf.training_args`; it is removed when the trial's process exits, so a study does not leave one
empty folder per trial in the temporary directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from assets.scripts import hf_trainer_job

pytestmark = pytest.mark.integration

RECORD = "import json; json.dump(trainer.args.output_dir, open('outdir.json', 'w'))"

# A probe process's part: the script run as a trial, then the process leaves as a probe
# process does, by os._exit (no exit handlers run).
PROBE = """
import json, os, sys
from autotune.probe.config import ProbeConfig
from autotune.probe.script_run import run_script
cfg = ProbeConfig(workload="script:train.py", steps=3, script="train.py", knobs={"lr": 0.01})
print(json.dumps(run_script(cfg, lambda _m: None)["status"]), flush=True)
os._exit(0)
"""


def test_the_trials_own_output_dir_is_gone_when_its_process_exits(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp_path / "train.py").write_text(textwrap.dedent(hf_trainer_job(rows=32, after=RECORD)))
    env = {**os.environ, "TMPDIR": str(tmp)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == "ok"
    used = Path(json.loads((tmp_path / "outdir.json").read_text()))
    assert used.parent == tmp and used.name.startswith("autotune-hf-")  # it was made, there
    assert not used.exists()
    assert not list(tmp.glob("autotune-hf-*"))
