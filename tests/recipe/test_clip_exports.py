"""Every export of a recipe carries its clipping policy: a trial (the probe) with each policy,
and its recipe replayed through the yaml export (the Recipe API in a plain loop), the python
export (the standalone snippet in a plain loop), the hf export under a real
`transformers.Trainer.train()` and the lightning export under a real `lightning.Trainer.fit()`,
each reproduces the trial's losses step for step, to 1e-6, while the policy clips."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from autotune.probe import ProbeConfig, run_probe
from autotune.probe.workload import resolve
from autotune.recipe import Recipe
from autotune.recipe import exporters as formats

pytestmark = pytest.mark.filterwarnings("ignore")

STEPS = 16
MICRO = 8
POLICIES = {
    "norm": {"clip_norm": 0.5},
    "norm_per_layer": {"clip_norm": 0.2, "clip_mode": "per_layer"},
    "agc": {"clip_policy": "agc", "agc_lambda": 0.01},
    # zclip clips outliers only: at lr 0.3 step 1's norm is 10x step 0's
    "zclip": {
        "lr": 0.3,
        "clip_policy": "zclip",
        "zclip_z": 0.5,
        "zclip_alpha": 0.5,
        "zclip_warmup": 1,
    },
    "autoclip": {"clip_policy": "autoclip", "autoclip_percentile": 25.0},
}


def trial_of(knobs: dict[str, Any]) -> tuple[dict[str, Any], Recipe]:
    """The probe's run with `knobs`, and its recipe as `autotune export` would write it."""
    cfg = ProbeConfig(
        workload="mlp", steps=STEPS, schedule_steps=STEPS, micro_batch=MICRO, threads=1,
        seed=0, knobs={"lr": 0.05, **knobs},
    )  # fmt: skip
    out = run_probe(cfg)
    recipe = Recipe(
        name="clip",
        workload={"name": "mlp", "size": "tiny"},
        precision="fp32",
        micro_batch=MICRO,
        knobs=dict(out["knobs"]),
        probe={"steps": STEPS, "schedule_steps": STEPS, "seed": 0, "device": "cpu"},
        fingerprint={"hash": "fp", "platform": "cpu"},
    )
    return out, recipe


def fresh(seed: int = 0) -> tuple[Any, torch.nn.Module, list[Any]]:
    """The workload, the model as the probe builds it, and its first micro-batches."""
    from autotune.probe.steps import seed_everything

    wl = resolve("mlp", "tiny")
    seed_everything(seed)
    model = wl.build_model()
    stream = wl.batches(MICRO, seed)
    return wl, model, [next(stream) for _ in range(STEPS)]


def snippet(recipe: Recipe) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "recipe_snippet"}
    exec(compile(formats.render(recipe, "python"), "recipe_snippet.py", "exec"), ns)
    return ns


def yaml_loop(recipe: Recipe) -> list[float]:
    r = Recipe.loads(formats.render(recipe, "yaml"))
    wl, model, data = fresh()
    opt, scaler = r.optimizer(model.parameters()), r.scaler("cpu")
    sched = r.scheduler(opt, STEPS)
    losses = []
    for batch in data:
        loss = wl.loss(model, batch)
        loss.backward()
        losses.append(float(loss))
        r.clip_and_step(opt, scaler)
        sched.step()
    return losses


def python_loop(recipe: Recipe) -> list[float]:
    ns = snippet(recipe)
    wl, model, data = fresh()
    opt, scaler = ns["make_optimizer"](model.parameters()), ns["make_scaler"]("cpu")
    sched = ns["make_scheduler"](opt)
    losses = []
    for batch in data:
        with ns["autocast"]("cpu"):
            loss = wl.loss(model, batch)
        scaler.scale(loss).backward()
        losses.append(float(loss))
        ns["clip_and_step"](opt, scaler, model.parameters())
        sched.step()
    return losses


def hf_train(recipe: Recipe, tmp: Any) -> list[float]:
    transformers = pytest.importorskip("transformers")
    out = json.loads(formats.render(recipe, "hf"))
    ns = snippet(recipe)
    wl, net, data = fresh()
    losses: list[float] = []

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            loss = wl.loss(self.net, (x, labels))
            losses.append(float(loss))
            return {"loss": loss}

    class InOrder(transformers.Trainer):  # the probe's batches, in the probe's order
        def _get_train_sampler(self, *a: Any, **kw: Any) -> Any:
            return torch.utils.data.SequentialSampler(self.train_dataset)

    rows = [{"x": x[i], "labels": y[i]} for x, y in data for i in range(len(x))]
    args = {**out["training_arguments"], "max_steps": STEPS}
    args.update(output_dir=str(tmp), use_cpu=True, report_to="none", save_strategy="no")
    args.update(disable_tqdm=True, dataloader_drop_last=True, optim="adamw_torch")
    model = Model()
    opt = ns["make_optimizer"](model.parameters())  # the notes' exact optimizer and schedule
    callbacks = [ns["hf_callback"]()] if recipe.adaptive_clipping else []
    if recipe.knobs["clip_mode"] == "per_layer":  # the notes' per-layer recipe
        args["max_grad_norm"] = 0.0
        callbacks = [ns["hf_callback"]()]
    trainer = InOrder(
        model=model,
        args=transformers.TrainingArguments(**args),
        train_dataset=rows,
        optimizers=(opt, ns["make_scheduler"](opt)),
        callbacks=callbacks,
    )
    trainer.train()
    return losses


def lightning_fit(recipe: Recipe) -> list[float]:
    lightning = pytest.importorskip("lightning")
    out = json.loads(formats.render(recipe, "lightning"))
    ns = snippet(recipe)
    wl, net, data = fresh()
    losses: list[float] = []

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = wl.loss(self.net, batch)
            losses.append(float(loss))
            return loss

        def configure_optimizers(self) -> Any:
            opt = ns["make_optimizer"](self.parameters())
            sched = ns["make_scheduler"](opt)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    kw = dict(out["trainer"])
    callbacks = [ns["lightning_callback"]()] if recipe.adaptive_clipping else []
    if recipe.knobs["clip_mode"] == "per_layer":  # the notes' per-layer recipe
        kw["gradient_clip_val"] = None
        callbacks = [ns["lightning_callback"]()]
    trainer = lightning.Trainer(
        accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=callbacks, **kw,
    )  # fmt: skip
    loader = torch.utils.data.DataLoader(data, batch_size=None)
    trainer.fit(Module(), train_dataloaders=loader)
    return losses


@pytest.mark.parametrize("policy", list(POLICIES))
def test_each_export_reproduces_the_trials_losses(policy: str, tmp_path: Any) -> None:
    trial, recipe = trial_of(POLICIES[policy])
    want = trial["series"]["loss"]
    clipped = trial["series"]["clipped"]
    assert any(clipped[: STEPS - 4]), "the policy must clip before the last steps compared"
    assert len(want) == STEPS
    runs = {
        "yaml": yaml_loop(recipe),
        "python": python_loop(recipe),
        "hf": hf_train(recipe, tmp_path),
        "lightning": lightning_fit(recipe),
    }
    for name, got in runs.items():
        assert len(got) == STEPS, name
        worst = max(abs(a - b) for a, b in zip(got, want, strict=True))
        assert worst <= 1e-6, (name, worst)


def test_without_the_policy_the_replay_differs() -> None:
    """The comparison above can fail: the same loop without clipping leaves the trial's path."""
    trial, recipe = trial_of(POLICIES["zclip"])
    unclipped = Recipe.loads(formats.render(recipe, "yaml").replace("clip_policy: zclip", ""))
    got = yaml_loop(unclipped)
    assert max(abs(a - b) for a, b in zip(got, trial["series"]["loss"], strict=True)) > 1e-4


def test_the_framework_exports_say_how_they_carry_an_adaptive_policy() -> None:
    _, recipe = trial_of(POLICIES["agc"])
    hf = json.loads(formats.render(recipe, "hf"))
    assert hf["training_arguments"]["max_grad_norm"] == 0.0
    assert any("hf_callback()" in n and "agc" in n for n in hf["notes"])
    lt = json.loads(formats.render(recipe, "lightning"))
    assert lt["trainer"]["gradient_clip_val"] is None
    assert any("lightning_callback()" in n and "lambda 0.01" in n for n in lt["notes"])


def test_the_hf_script_integration_hands_an_adaptive_policy_to_its_callback() -> None:
    """In a study's script (`autotune.integrations.hf`), the Trainer's own clipping is off for
    agc, zclip, autoclip and per-layer norms (its callback clips), on for a global norm."""
    pytest.importorskip("transformers")
    from autotune.integrations import hf
    from autotune.probe import resolve_knobs

    def fields(**knobs: Any) -> dict[str, Any]:
        r = Recipe("r", {}, "fp32", 8, knobs=resolve_knobs(knobs, 1e-3))
        return hf.recipe_fields(r, cpu=True)

    assert fields(clip_norm=0.5)["max_grad_norm"] == 0.5
    assert fields(clip_norm=0.5, clip_mode="per_layer")["max_grad_norm"] == 0.0
    for policy in ("agc", "zclip", "autoclip", "none"):
        assert fields(clip_norm=0.5, clip_policy=policy)["max_grad_norm"] == 0.0, policy
