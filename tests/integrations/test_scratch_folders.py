"""A Trainer job in a study that names no output_dir (Hugging Face) or default_root_dir
(Lightning) gets a folder of its trial's own from the integration; it is removed when the
script ends, so a study does not leave one empty folder per trial in the temporary directory
(a black-box review found 1017 of Hugging Face's and 593 of Lightning's in /tmp)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from assets.scripts import LIGHTNING_DATA, LIGHTNING_MODULE, hf_trainer_job

pytestmark = pytest.mark.integration

RECORD = "import json; json.dump(trainer.args.output_dir, open('outdir.json', 'w'))"

LIGHTNING = (
    """
import json
import lightning
import torch
import torch.nn.functional as F
import autotune
from autotune.integrations import lightning as lt

trial = autotune.trial(steps=99, micro_batch=4)
"""
    + LIGHTNING_MODULE
    + LIGHTNING_DATA
    + """trainer = lightning.Trainer(**lt.trainer_kwargs(trial))
json.dump(trainer.default_root_dir, open('outdir.json', 'w'))
trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=trial.micro_batch))
"""
)

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


@pytest.mark.parametrize("framework", ["hf", "lightning"])
def test_the_trials_own_folder_is_gone_when_its_process_exits(
    tmp_path: Path, framework: str
) -> None:
    if framework == "lightning":
        pytest.importorskip("lightning")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    job = hf_trainer_job(rows=32, after=RECORD) if framework == "hf" else LIGHTNING
    (tmp_path / "train.py").write_text(textwrap.dedent(job))
    env = {**os.environ, "TMPDIR": str(tmp)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == "ok"
    used = Path(json.loads((tmp_path / "outdir.json").read_text()))
    prefix = f"autotune-{framework}-"
    assert used.parent == tmp and used.name.startswith(prefix)  # it was made, there
    assert not used.exists()
    assert not list(tmp.glob(f"{prefix}*"))
