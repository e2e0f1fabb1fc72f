"""The exports of a script's recipe describe the job that was tuned: the python header names
the script (no `workload None (None)`), the hf notes say when the probe was the script's own
Hugging Face Trainer (not autotune's decay or warm-up timing), and a script that ran its own
learning-rate schedule exports no schedule of ours. What applied the knobs is recorded by the
real script run (real transformers, real torch), then carried by the recipe."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from assets.scripts import hf_trainer_job

from autotune import Recipe
from autotune import space as sp
from autotune.probe.config import ProbeConfig
from autotune.probe.script_run import run_script
from autotune.recipe import exporters

HF_SCRIPT = hf_trainer_job(rows=64)

LOOP = """
import torch
import autotune

trial = autotune.trial(steps=99, micro_batch=4)
model = torch.nn.Linear(4, 1)
opt = trial.recipe.optimizer(model.parameters())
sched = {sched}
g = torch.Generator().manual_seed(0)
for step in range(trial.steps):
    x = torch.randn(4, 4, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    loss.backward()
    norm = trial.recipe.clip_and_step(opt)
    sched.step()
    trial.report(step, loss=loss.detach(), grad_norm=norm)
"""
OWN = "torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=trial.schedule_steps)"
OURS = "trial.recipe.scheduler(opt, trial.schedule_steps)"


@pytest.fixture
def run(tmp_path: Path) -> Callable[[str], dict[str, Any]]:
    def go(body: str) -> dict[str, Any]:
        script = tmp_path / "train.py"
        script.write_text(body)
        knobs = {"lr": 0.01, "warmup_steps": 2, "schedule": "linear", "weight_decay": 0.1}
        cfg = ProbeConfig(
            workload="script:train.py", steps=4, script=str(script), device="cpu", knobs=knobs
        )
        summary = run_script(cfg)
        assert summary["status"] == "ok", summary
        return summary

    return go


def script_recipe(applied: list[str] | None, **knobs: Any) -> Recipe:
    base = {name: info.default for name, info in sp.KNOBS.items()}
    source = {"study": "s", "trial": 2} | ({} if applied is None else {"script_applied": applied})
    return Recipe(
        name="s-trial2",
        workload={"script": "/home/me/job/train.py", "args": ["--width", "48"]},
        precision="fp32",
        micro_batch=16,
        knobs={**base, "lr": 0.003, "warmup_steps": 10, "schedule": "cosine", **knobs},
        probe={"steps": 100, "seed": 0, "schedule_steps": 300},
        fingerprint={"hash": "abc", "platform": "cpu"},
        source=source,
    )


def test_the_script_run_records_what_applied_its_knobs(run: Callable[[str], Any]) -> None:
    pytest.importorskip("transformers")
    assert run(HF_SCRIPT)["script_applied"] == ["hf"]
    assert run(LOOP.format(sched=OWN))["script_applied"] == ["clip", "optimizer"]
    assert run(LOOP.format(sched=OURS))["script_applied"] == ["clip", "optimizer", "scheduler"]


def test_the_python_header_names_the_script() -> None:
    text = exporters.render(script_recipe(["optimizer", "scheduler"]), "python")
    head = [line for line in text.splitlines() if line.startswith("#")][:4]
    tuned = next(line for line in head if line.startswith("# Tuned on"))
    assert "script train.py --width 48, fp32" in tuned, tuned
    assert "None" not in "\n".join(head), head
    assert 'SCHEDULE = "cosine"' in text and "WARMUP_STEPS = 10" in text


def test_hf_notes_of_an_hf_trainer_probe_claim_none_of_autotunes_timing() -> None:
    hf = json.loads(exporters.render(script_recipe(["hf"], weight_decay=0.1), "hf"))
    notes = " ".join(hf["notes"])
    assert "own Hugging Face Trainer" in notes and "train.py" in notes
    assert "one step ahead" not in notes and "decays every parameter" not in notes
    assert hf["training_arguments"]["lr_scheduler_type"] == "cosine"  # HF's, as measured
    assert hf["training_arguments"]["warmup_steps"] == 10
    # A loop that used the recipe's functions: the notes on HF's differences stand.
    loop = json.loads(exporters.render(script_recipe(["optimizer", "scheduler"]), "hf"))
    assert "one step ahead" in " ".join(loop["notes"])
    assert "decays every parameter" in " ".join(loop["notes"])


def test_a_script_with_its_own_schedule_exports_no_schedule_of_ours() -> None:
    r = script_recipe(["optimizer"], schedule="constant", warmup_steps=0)
    py = exporters.render(r, "python")
    assert "SCHEDULE = None" in py and "WARMUP_STEPS = None" in py
    assert "MIN_LR_RATIO = None" in py and 'SCHEDULE = "constant"' not in py
    assert "its own learning-rate schedule" in py
    namespace: dict[str, Any] = {}
    exec(compile(py, "recipe.py", "exec"), namespace)  # the snippet still runs
    with pytest.raises(ValueError, match="own schedule"):
        namespace["lr_factor"](0, 10)
    hf = json.loads(exporters.render(r, "hf"))
    args = hf["training_arguments"]
    assert "lr_scheduler_type" not in args and "warmup_steps" not in args
    assert any("own learning-rate schedule" in n for n in hf["notes"])
    assert not any("Schedule timing" in n for n in hf["notes"])
    lightning = json.loads(exporters.render(r, "lightning"))
    assert lightning["lr_schedule"] is None
    assert "own learning-rate schedule" in lightning["notes"][0]
    # Without the record (a recipe from before it), the schedule is exported as before.
    old = exporters.render(script_recipe(None, schedule="constant"), "python")
    assert 'SCHEDULE = "constant"' in old


def test_the_recipe_s_description_says_the_script_ran_its_own_schedule() -> None:
    """`autotune export` printed `warmup 5` for a script that ran its own LambdaLR (a black-box
    review): the description now says the recipe's warm-up and schedule were never applied."""
    own = script_recipe(["optimizer"], warmup_steps=5).describe()
    assert "the script's own schedule" in own and "warmup 5" not in own, own
    used = script_recipe(["optimizer", "scheduler"], warmup_steps=5).describe()
    assert "warmup 5" in used, used
    assert "warmup 5" in script_recipe(None, warmup_steps=5).describe()  # no record: as before


def test_python_and_lightning_exports_of_an_hf_trainer_recipe_say_hf_s_schedule_differs() -> None:
    """A recipe tuned through a script's HF Trainer: its trials ran HF's warm-up (0 at step 0)
    and weight decay (biases and norms exempt), while the python export's functions and the
    lightning export's formula are the recipe's own (one step ahead, every parameter decayed).
    The python header claimed they apply the values as measured (a black-box review): both
    exports now say how HF's differ and how to train as measured."""
    pytest.importorskip("transformers")
    import torch
    from transformers import get_scheduler

    r = script_recipe(["hf"], weight_decay=0.1, schedule="linear", min_lr_ratio=0.1)
    py = exporters.render(r, "python")
    head = " ".join(line[2:] for line in py.split("\nimport ")[0].splitlines())
    assert "the way autotune's probe measured them" not in head
    assert "Measured under HF" in head and "peak * s / warmup_steps, starting at 0" in head
    assert "exempted biases and normalisation weights" in head and "hf export" in head
    assert "ended at 0 one step after the last step" in head  # HF's linear ignores the ratio
    lightning = json.loads(exporters.render(r, "lightning"))
    said = " ".join(lightning["notes"])
    assert "Measured under HF" in said and "two parameter groups" in said
    # What the notes say of HF is what HF does; the export's functions start one step ahead.
    args = json.loads(exporters.render(r, "hf"))["training_arguments"]
    opt = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=args["learning_rate"])
    sched = get_scheduler(
        args["lr_scheduler_type"], opt, num_warmup_steps=10, num_training_steps=300
    )
    assert sched.get_last_lr()[0] == 0.0
    ns: dict[str, Any] = {}
    exec(compile(py, "recipe.py", "exec"), ns)
    assert ns["lr_factor"](0, 300) == pytest.approx(0.1)
    # A recipe whose probe applied the recipe's own functions: the claim stands, no HF note.
    ours = script_recipe(["optimizer", "scheduler"], weight_decay=0.1)
    assert "the way autotune's probe measured them" in exporters.render(ours, "python")
    notes = json.loads(exporters.render(ours, "lightning"))["notes"]
    assert not any("Measured under HF" in n for n in notes)
