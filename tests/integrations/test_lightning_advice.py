"""A Lightning job that forgot `trainer_kwargs` is told so (not the Hugging Face advice, though
`import lightning` imports transformers), and a fit that continues a shorter probe's checkpoint
with a plain DataLoader says that its batches are drawn afresh."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("lightning")

import torch
from assets.scripts import LIGHTNING_DATA, LIGHTNING_MODULE

from autotune.integrations import lightning as lt
from autotune.probe.config import ProbeConfig
from autotune.probe.script_errors import ScriptFailure
from autotune.probe.script_run import run_script

pytestmark = pytest.mark.filterwarnings("ignore")

SCRIPT = (
    """
import sys
import lightning, torch
import torch.nn.functional as F
import autotune
from autotune.integrations import lightning as lt

trial = autotune.trial(steps=99, micro_batch=4)
how = sys.argv[1]
"""
    + LIGHTNING_MODULE
    + """
class Own(lightning.Callback):  # a script that reports itself
    def on_train_batch_end(self, trainer, module, outputs, *a):
        trial.report(trainer.global_step - 1, loss=outputs["loss"])
"""
    + LIGHTNING_DATA
    + """quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False)
if how == "kwargs":
    trainer = lightning.Trainer(**lt.trainer_kwargs(trial, **quiet))
else:
    own = [Own()] if how == "own" else []
    trainer = lightning.Trainer(max_steps=trial.steps, callbacks=own, **quiet)
trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=trial.micro_batch),
            ckpt_path=lt.ckpt_path(trial, model))
"""
)


def probe(tmp_path: Path, how: str, steps: int, **cfg: Any) -> dict[str, Any]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    c = ProbeConfig(
        workload="script:train.py",
        steps=steps,
        schedule_steps=20,
        micro_batch=4,
        script=str(script),
        args=[how],
        knobs={"lr": 0.01},
        **cfg,
    )
    return run_script(c, None)


def test_a_lightning_trainer_without_trainer_kwargs_is_told_to_use_it(tmp_path: Path) -> None:
    # (`import lightning` imports transformers where it is installed: the advice was HF's)
    with pytest.raises(ScriptFailure) as e:
        probe(tmp_path, "forgot", 10)
    assert e.value.cause == "no_reports"
    message = str(e.value)
    assert "lightning.Trainer(**autotune.integrations.lightning.trainer_kwargs(trial" in message
    assert "hf.attach" not in message
    # a script that reports through its own callback is not stopped
    assert probe(tmp_path, "own", 4)["status"] == "ok"


def test_a_continued_fit_with_a_plain_dataloader_warns(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "state" / "0001-s5.pt")
    assert probe(tmp_path, "kwargs", 5, save_state=state)["state_saved"]["saved"]
    assert "drawn afresh" not in capfd.readouterr().err  # from step 0: nothing to say
    longer = probe(tmp_path, "kwargs", 10, resume_from=state)
    assert longer["resumed_from_step"] == 5 and longer["steps_run"] == 10
    err = capfd.readouterr().err
    assert "autotune: warning: this fit continues" in err and "DataLoader" in err
    assert "drawn afresh" in err
    # and the probe's record says so, where the study's records and MLflow keep it
    assert "drawn afresh" in longer["continuation"]["note"]
    assert longer["continuation"]["step"] == 5


def test_a_stateful_loader_is_not_warned_about(capfd: pytest.CaptureFixture[str]) -> None:
    class Stateful(torch.utils.data.DataLoader):  # type: ignore[type-arg]
        def state_dict(self) -> dict[str, Any]:
            return {}

        def load_state_dict(self, _state: dict[str, Any]) -> None:
            pass

    data = torch.utils.data.TensorDataset(torch.zeros(4, 1))
    trainer: Any = SimpleNamespace(train_dataloader=Stateful(data))
    assert not lt.warn_if_data_restarts(trainer)
    trainer.train_dataloader = torch.utils.data.DataLoader(data)
    assert lt.warn_if_data_restarts(trainer)
    assert "DataLoader has no state_dict" in capfd.readouterr().err
