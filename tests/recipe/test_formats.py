"""autotune.recipe.exporters: every export format checked against the real consumer (no mocks).

yaml goes back through Recipe.loads; env through bash; the python snippet is exec'd on its own
and trained, and compared step for step with the Recipe API; hf builds real TrainingArguments;
lightning builds a real Trainer.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
import json
import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune import __version__, space
from autotune.errors import RecipeError
from autotune.probe.workload import resolve
from autotune.recipe import Recipe
from autotune.recipe import exporters as formats

MLP = {"name": "mlp", "size": "tiny"}
ENV = {"NCCL_ALGO": "Ring", "HSA_ENABLE_SDMA": "0"}


def make_recipe(
    precision: str = "fp32",
    *,
    env: dict[str, str] | None = None,
    world_size: int = 1,
    micro_batch: int = 8,
    **knobs: Any,
) -> Recipe:
    base = space.load("amp").fixed_knobs()  # lr is fixed there; set it anyway
    return Recipe(
        name="amp-trial3",
        workload=dict(MLP),
        precision=precision,
        micro_batch=micro_batch,
        knobs={**base, "lr": 0.01, **knobs},
        env=dict(env or {}),
        world_size=world_size,
        probe={"steps": 150, "seed": 0, "device": "auto"},
        fingerprint={"hash": "fp1234abcd", "platform": "cpu", "host": {"cpu_model": "TestCPU"}},
        source={"study": "amp", "trial": 3, "pick": "balanced"},
        created_at="2025-01-01T00:00:00+00:00",
    )


def snippet(recipe: Recipe) -> dict[str, Any]:
    """Exec the python export in a fresh namespace, as a user's file would run."""
    ns: dict[str, Any] = {"__name__": "recipe_snippet"}
    exec(compile(formats.render(recipe, "python"), "recipe_snippet.py", "exec"), ns)
    return ns


# ----- render -----------------------------------------------------------------------------------


def test_formats_and_unknown_format() -> None:
    assert formats.FORMATS == ("yaml", "env", "python", "hf", "lightning")
    r = make_recipe()
    for fmt in formats.FORMATS:
        assert formats.render(r, fmt).endswith("\n")
    with pytest.raises(RecipeError) as e:
        formats.render(r, "toml")
    for fmt in formats.FORMATS:
        assert fmt in str(e.value)
    with pytest.raises(RecipeError, match="did you mean 'yaml'"):
        formats.render(r, "yml")


# ----- yaml -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "recipe",
    [
        make_recipe(),
        make_recipe("fp16", env=ENV, init_scale=1024.0, clip_mode="per_layer", accum_steps=4),
        make_recipe("bf16", world_size=4, schedule="cosine", min_lr_ratio=0.1, warmup_steps=20),
    ],
)
def test_yaml_round_trip(recipe: Recipe) -> None:
    text = formats.render(recipe, "yaml")
    assert text == recipe.dump()
    assert Recipe.loads(text) == recipe


def test_yaml_writes_a_repeated_object_out_without_anchors() -> None:
    device = {"name": "AMD Instinct MI250X/MI250", "arch": "gfx90a", "memory_gb": 64}
    seeds = [1, 2, 3]
    recipe = dataclasses.replace(
        make_recipe(),
        fingerprint={"hash": "fp2", "platform": "rocm", "devices": [device, device]},
        achieved={"loss_cv": {"seeds": seeds}, "throughput": {"seeds": seeds}},
    )
    text = formats.render(recipe, "yaml")
    assert not re.search(r"[&*]id\d", text), text
    assert text.count("gfx90a") == 2
    assert Recipe.loads(text) == recipe


# ----- env --------------------------------------------------------------------------------------


def _bash_env(path: Path) -> dict[str, str]:
    out = subprocess.run(
        ["bash", "-c", f'source "{path}" && env -0'],
        check=True,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=30,
    ).stdout
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


@pytest.mark.integration
def test_env_exports_variables(tmp_path: Path) -> None:
    text = formats.render(make_recipe(env=ENV), "env")
    assert "amp-trial3" in text and "study amp" in text and "trial 3" in text
    path = tmp_path / "recipe.env"
    path.write_text(text)
    seen = _bash_env(path)
    assert seen["NCCL_ALGO"] == "Ring"
    assert seen["HSA_ENABLE_SDMA"] == "0"


@pytest.mark.integration
def test_env_quotes_values_and_comments(tmp_path: Path) -> None:
    # A hostile name cannot escape its comment line; awkward values survive quoting.
    recipe = dataclasses.replace(
        make_recipe(env={"NCCL_SOCKET_IFNAME": "eth0 ib0", "NCCL_DEBUG_SUBSYS": "it's $HOME;x"}),
        name="evil\nexport NCCL_PWNED=1",
    )
    path = tmp_path / "recipe.env"
    path.write_text(formats.render(recipe, "env"))
    seen = _bash_env(path)
    assert seen["NCCL_SOCKET_IFNAME"] == "eth0 ib0"
    assert seen["NCCL_DEBUG_SUBSYS"] == "it's $HOME;x"
    assert "NCCL_PWNED" not in seen


@pytest.mark.integration
def test_env_without_knobs_is_a_valid_empty_script(tmp_path: Path) -> None:
    text = formats.render(make_recipe(), "env")
    assert "no environment knobs" in text
    assert all(line.startswith("#") for line in text.splitlines())
    path = tmp_path / "recipe.env"
    path.write_text(text)
    subprocess.run(["sh", "-n", str(path)], check=True, timeout=30)
    assert not any(k.startswith(("NCCL_", "HSA_")) for k in _bash_env(path))


def test_env_refuses_a_bad_variable_name() -> None:
    with pytest.raises(RecipeError, match="not a valid variable name"):
        formats.render(make_recipe(env={"NCCL_X; rm -rf /": "1"}), "env")


# ----- python -----------------------------------------------------------------------------------


def test_python_is_standalone_and_carries_every_value() -> None:
    recipe = make_recipe(
        "fp16", env=ENV, init_scale=512.0, growth_interval=100, accum_steps=2, world_size=2
    )
    text = formats.render(recipe, "python")

    def imports(nodes: Any) -> set[str]:
        out = set()
        for node in nodes:
            if isinstance(node, ast.Import):
                out |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                out.add((node.module or "").split(".")[0])
        return out

    tree = ast.parse(text)
    assert imports(tree.body) == {"__future__", "torch", "math", "os"}
    # the trainers' clipping callbacks import their trainer when called, never at import
    assert imports(ast.walk(tree)) == {
        "__future__",
        "torch",
        "math",
        "os",
        "transformers",
        "lightning",
    }
    for expected in ("amp-trial3", "study amp", "trial 3", "fp1234abcd", "TestCPU", __version__):
        assert expected in text.split("\nimport")[0], expected

    ns = snippet(recipe)
    for name, value in recipe.knobs.items():
        assert ns[name.upper()] == value and type(ns[name.upper()]) is type(value), name
    assert ns["MICRO_BATCH"] == 8 and ns["ACCUM_STEPS"] == 2 and ns["WORLD_SIZE"] == 2
    assert ns["EFFECTIVE_BATCH"] == recipe.effective_batch == 32
    assert ns["PRECISION"] == "fp16" and ns["AMP_DTYPE"] is torch.float16
    environ: dict[str, str] = {}
    assert ns["apply_env"](environ) == ENV and environ == ENV

    scaler = ns["make_scaler"]("cpu")
    assert scaler.is_enabled()
    assert scaler.get_scale() == 512.0
    assert scaler.get_growth_interval() == 100
    assert scaler.get_growth_factor() == recipe.knobs["growth_factor"]
    assert scaler.get_backoff_factor() == recipe.knobs["backoff_factor"]
    assert not snippet(make_recipe("bf16"))["make_scaler"]("cpu").is_enabled()


@pytest.mark.integration
def test_python_snippet_passes_ruff(tmp_path: Path) -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    for i, recipe in enumerate([make_recipe(), make_recipe("fp16", env=ENV, world_size=2)]):
        path = tmp_path / f"recipe_{i}.py"
        path.write_text(formats.render(recipe, "python"))
        subprocess.run(
            [ruff, "check", "--isolated", "--line-length", "100", str(path)],
            check=True,
            timeout=60,
        )


def test_python_autocast() -> None:
    a = torch.randn(4, 4)
    with snippet(make_recipe("bf16"))["autocast"]("cpu"):
        assert (a @ a).dtype is torch.bfloat16
    with snippet(make_recipe("fp32"))["autocast"]("cpu"):
        assert (a @ a).dtype is torch.float32


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
@pytest.mark.parametrize(("warmup", "ratio"), [(0, 0.0), (7, 0.0), (5, 0.1)])
def test_python_lr_matches_the_recipe(schedule: str, warmup: int, ratio: float) -> None:
    recipe = make_recipe(schedule=schedule, warmup_steps=warmup, min_lr_ratio=ratio, lr=0.3)
    ns = snippet(recipe)
    total = 40
    for step in range(total + 3):  # past the end too
        expected = recipe.lr_at(step, total) / recipe.lr
        assert ns["lr_factor"](step, total) == pytest.approx(expected, rel=1e-12, abs=1e-15)

    # The schedulers themselves, driven the same way.
    opts = [torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.3) for _ in range(2)]
    scheds = [recipe.scheduler(opts[0], total), ns["make_scheduler"](opts[1], total)]
    for _ in range(total + 2):
        assert opts[1].param_groups[0]["lr"] == pytest.approx(opts[0].param_groups[0]["lr"])
        for o, s in zip(opts, scheds, strict=True):
            o.step()
            s.step()
    with pytest.raises(ValueError):
        ns["make_scheduler"](opts[1], 0)


@pytest.mark.parametrize(("mode", "clip"), [("global", 0.05), ("per_layer", 0.05), ("global", 0.0)])
def test_python_step_matches_recipe_clip_and_step(mode: str, clip: float) -> None:
    recipe = make_recipe(clip_mode=mode, clip_norm=clip, lr=0.05)
    ns = snippet(recipe)
    wl = resolve("mlp", "tiny")
    torch.manual_seed(0)
    model_a = wl.build_model()
    model_b = copy.deepcopy(model_a)
    batch = next(wl.batches(16, seed=0))

    norms = []
    for model, use_snippet in ((model_a, False), (model_b, True)):
        opt = (
            ns["make_optimizer"](model.parameters())
            if use_snippet
            else recipe.optimizer(model.parameters())
        )
        for _ in range(2):  # two steps: the second uses Adam's state from the first
            wl.loss(model, batch).backward()
            if use_snippet:
                norms.append(ns["clip_and_step"](opt, ns["make_scaler"]("cpu"), model.parameters()))
            else:
                norms.append(recipe.clip_and_step(opt, recipe.scaler("cpu")))
            assert all(p.grad is None for p in model.parameters())
    assert norms[:2] == pytest.approx(norms[2:], rel=1e-6)
    if clip:
        assert norms[0] > clip  # the clip really acted
    for pa, pb in zip(model_a.parameters(), model_b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_python_clip_gradients_per_layer_bounds_each_tensor() -> None:
    ns = snippet(make_recipe(clip_mode="per_layer", clip_norm=0.1))
    params = [torch.nn.Parameter(torch.zeros(5)) for _ in range(3)]
    for scale, p in zip((10.0, 0.01, 3.0), params, strict=True):
        p.grad = torch.full((5,), scale)
    total = float(ns["clip_gradients"](params))
    assert total == pytest.approx(math.sqrt(5 * (100 + 1e-4 + 9)), rel=1e-6)
    norms = [float(p.grad.norm()) for p in params]
    assert norms[0] == pytest.approx(0.1, rel=1e-4) and norms[2] == pytest.approx(0.1, rel=1e-4)
    assert norms[1] == pytest.approx(0.01 * math.sqrt(5), rel=1e-6)  # under the limit: untouched


def test_python_snippet_trains_the_mlp() -> None:
    recipe = make_recipe(
        lr=0.01, warmup_steps=5, schedule="cosine", min_lr_ratio=0.1, clip_norm=1.0, accum_steps=2
    )
    ns = snippet(recipe)
    wl = resolve("mlp", "tiny")
    torch.manual_seed(0)
    model = wl.build_model()
    opt = ns["make_optimizer"](model.parameters())
    scaler = ns["make_scaler"]("cpu")
    total = 60
    sched = ns["make_scheduler"](opt, total)
    stream = wl.batches(ns["MICRO_BATCH"], seed=0)
    losses = []
    for _ in range(total):
        step_loss = 0.0
        for _ in range(ns["ACCUM_STEPS"]):
            with ns["autocast"]("cpu"):
                loss = wl.loss(model, next(stream)) / ns["ACCUM_STEPS"]
            scaler.scale(loss).backward()
            step_loss += float(loss.detach())
        norm = ns["clip_and_step"](opt, scaler, model.parameters())
        sched.step()
        assert math.isfinite(norm) and math.isfinite(step_loss)
        losses.append(step_loss)
    first, last = sum(losses[:5]) / 5, sum(losses[-10:]) / 10
    assert last < 0.6 * first, (first, last)
    assert opt.param_groups[0]["lr"] == pytest.approx(recipe.lr_at(total - 1, total))


def test_python_wrap_ddp_applies_the_ddp_knobs() -> None:
    import torch.distributed as dist

    recipe = make_recipe(
        bucket_cap_mb=50.0, gradient_as_bucket_view=True, static_graph=True, broadcast_buffers=False
    )
    ns = snippet(recipe)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        ddp = ns["wrap_ddp"](torch.nn.Linear(4, 4))
        assert ddp.bucket_bytes_cap == 50 * 1024 * 1024
        assert ddp.gradient_as_bucket_view is True
        assert ddp.static_graph is True
        sync = getattr(ddp, "forward_sync_buffers", getattr(ddp, "broadcast_buffers", None))
        assert sync is False
    finally:
        dist.destroy_process_group()


# ----- hf ---------------------------------------------------------------------------------------


def _hf(recipe: Recipe) -> dict[str, Any]:
    out = json.loads(formats.render(recipe, "hf"))
    assert set(out) == {"training_arguments", "notes"}
    return out


def test_hf_builds_real_training_arguments(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    recipe = make_recipe(
        lr=0.002,
        beta1=0.85,
        beta2=0.98,
        adam_eps=1e-6,
        weight_decay=0.05,
        clip_norm=0.5,
        warmup_steps=10,
        schedule="cosine",
        min_lr_ratio=0.1,
        accum_steps=4,
        micro_batch=16,
        world_size=2,
        bucket_cap_mb=50.0,
        env=ENV,
    )
    out = _hf(recipe)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), **out["training_arguments"])
    k = recipe.knobs
    assert args.learning_rate == k["lr"]
    assert (args.adam_beta1, args.adam_beta2) == (k["beta1"], k["beta2"])
    assert args.adam_epsilon == k["adam_eps"]
    assert args.weight_decay == k["weight_decay"]
    assert args.max_grad_norm == k["clip_norm"]
    assert args.warmup_steps == k["warmup_steps"]
    assert args.gradient_accumulation_steps == 4
    assert args.per_device_train_batch_size == 16
    assert (args.fp16, args.bf16) == (False, False)
    assert str(getattr(args.optim, "value", args.optim)) == "adamw_torch"  # tuned on a CPU
    assert args.lr_scheduler_type.value == "cosine_with_min_lr"
    assert args.lr_scheduler_kwargs == {"min_lr_rate": 0.1}
    assert args.ddp_bucket_cap_mb == 50
    assert args.ddp_broadcast_buffers is True and args.ddp_static_graph is False
    assert args.ddp_find_unused_parameters is False
    notes = " ".join(out["notes"])
    assert "NCCL_ALGO" in notes and "torchrun" in notes and "weight decay" in notes

    # HF's own scheduler with these arguments ends at the recipe's floor.
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    sched = transformers.get_scheduler(
        args.lr_scheduler_type,
        opt,
        num_warmup_steps=args.warmup_steps,
        num_training_steps=50,
        scheduler_specific_kwargs=args.lr_scheduler_kwargs,
    )
    for _ in range(50):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * args.learning_rate)


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [
        ({"schedule": "constant", "warmup_steps": 0}, "constant"),
        ({"schedule": "constant", "warmup_steps": 3}, "constant_with_warmup"),
        ({"schedule": "linear"}, "linear"),
        ({"schedule": "cosine"}, "cosine"),
    ],
)
def test_hf_schedule_types(tmp_path: Path, knobs: dict[str, Any], expected: str) -> None:
    transformers = pytest.importorskip("transformers")
    out = _hf(make_recipe(**knobs))
    assert "lr_scheduler_kwargs" not in out["training_arguments"]
    args = transformers.TrainingArguments(output_dir=str(tmp_path), **out["training_arguments"])
    assert args.lr_scheduler_type.value == expected


def test_hf_fp16_keys_are_training_arguments_fields() -> None:
    transformers = pytest.importorskip("transformers")
    recipe = dataclasses.replace(
        make_recipe(
            "fp16",
            init_scale=128.0,
            clip_mode="per_layer",
            clip_norm=1.0,
            schedule="linear",
            min_lr_ratio=0.2,
            gradient_as_bucket_view=True,
        ),
        fingerprint={"hash": "gpu1", "platform": "cuda", "devices": [{"name": "GPU X"}]},
    )
    out = _hf(recipe)
    ta = out["training_arguments"]
    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    assert set(ta) <= fields
    assert ta["fp16"] is True and ta["bf16"] is False
    assert ta["optim"] == "adamw_torch_fused"  # tuned on a GPU
    assert ta["max_grad_norm"] == 1.0
    notes = " ".join(out["notes"])
    assert "init_scale 128.0" in notes and "trainer.accelerator.scaler" in notes
    assert "each parameter tensor" in notes and "on_pre_optimizer_step" in notes
    assert "ends at 0" in notes  # linear to a floor
    assert "gradient_as_bucket_view" in notes


def test_hf_plain_recipe_has_no_ddp_keys() -> None:
    ta = _hf(make_recipe(clip_norm=0.0))["training_arguments"]
    assert ta["max_grad_norm"] == 0.0
    assert not any(key.startswith("ddp_") for key in ta)


# ----- lightning --------------------------------------------------------------------------------


def _lightning(recipe: Recipe) -> dict[str, Any]:
    out = json.loads(formats.render(recipe, "lightning"))
    assert {"trainer", "optimizer", "lr_schedule", "notes"} <= set(out)
    return out


def _build_optimizer(spec: dict[str, Any], params: Any) -> torch.optim.Optimizer:
    spec = dict(spec)
    module, _, name = spec.pop("class").rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    return cls(params, **spec)


@pytest.mark.parametrize(
    ("precision", "clip", "expected"),
    [("fp32", 0.5, "32-true"), ("bf16", 0.0, "bf16-mixed")],
)
def test_lightning_builds_a_real_trainer(precision: str, clip: float, expected: str) -> None:
    lightning = pytest.importorskip("lightning")
    recipe = make_recipe(precision, clip_norm=clip, accum_steps=4, env=ENV)
    out = _lightning(recipe)
    trainer = lightning.Trainer(
        accelerator="cpu", logger=False, enable_checkpointing=False, **out["trainer"]
    )
    assert trainer.gradient_clip_val == (clip or None)
    assert trainer.gradient_clip_algorithm.value == "norm"
    assert trainer.accumulate_grad_batches == 4
    assert trainer.precision == expected
    opt = _build_optimizer(out["optimizer"], [torch.nn.Parameter(torch.zeros(2))])
    group = opt.param_groups[0]
    assert group["lr"] == recipe.lr and group["eps"] == recipe.knobs["adam_eps"]
    assert group["betas"] == (recipe.knobs["beta1"], recipe.knobs["beta2"])
    assert group["weight_decay"] == recipe.knobs["weight_decay"]
    assert "NCCL_ALGO" in " ".join(out["notes"])


def test_lightning_fp16_scaler_plugin_from_the_notes() -> None:
    lightning = pytest.importorskip("lightning")
    recipe = make_recipe("fp16", init_scale=64.0, clip_mode="per_layer", clip_norm=0.3)
    out = _lightning(recipe)
    assert out["trainer"]["precision"] == "16-mixed"
    assert out["optimizer"]["fused"] is False
    notes = " ".join(out["notes"])
    path = "lightning.pytorch.plugins.precision.MixedPrecision"
    assert path in notes and "configure_gradient_clipping" in notes and "init_scale 64.0" in notes
    # The class path in the note is real and takes the snippet's scaler.
    module, _, name = path.rpartition(".")
    plugin_cls = getattr(importlib.import_module(module), name)
    plugin = plugin_cls("16-mixed", "cpu", scaler=snippet(recipe)["make_scaler"]("cpu"))
    kw = {k: v for k, v in out["trainer"].items() if k != "precision"}
    trainer = lightning.Trainer(
        accelerator="cpu", logger=False, enable_checkpointing=False, plugins=[plugin], **kw
    )
    assert trainer.scaler is plugin.scaler and trainer.scaler.get_scale() == 64.0
    with pytest.raises(ValueError, match="Choose one"):  # as the note says
        lightning.Trainer(accelerator="cpu", logger=False, plugins=[plugin], **out["trainer"])


def test_scaler_notes_name_the_device_type_the_recipe_was_tuned_on() -> None:
    """A recipe tuned on the CPU gets GradScaler("cpu") in its notes, one tuned on a GPU "cuda";
    the lightning note's plugin expression builds on the CPU as written."""
    lightning = pytest.importorskip("lightning")
    cpu = make_recipe("fp16", init_scale=64.0)  # fingerprint platform: cpu
    gpu = dataclasses.replace(cpu, fingerprint={"hash": "gpu1", "platform": "rocm"})
    for recipe, device, other in ((cpu, "cpu", "cuda"), (gpu, "cuda", "cpu")):
        for notes in (_hf(recipe)["notes"], _lightning(recipe)["notes"]):
            text = " ".join(notes)
            assert f'GradScaler("{device}"' in text and f"make_scaler('{device}')" in text
            assert f"'{other}'" not in text and f'"{other}"' not in text
        usage = formats.render(recipe, "python").split("\n\n")[0]
        assert f'make_scaler("{device}")' in usage and f'autocast("{device}")' in usage
    notes = " ".join(_lightning(cpu)["notes"])
    start = notes.index("lightning.pytorch.plugins.precision.MixedPrecision(")
    expression = notes[start : notes.index(")]", start) + 1]
    plugin = eval(expression, {"lightning": lightning, "torch": torch})
    assert plugin.scaler.get_scale() == 64.0


def test_lightning_fit_with_the_snippet_schedule_and_per_layer_clip() -> None:
    lightning = pytest.importorskip("lightning")
    recipe = make_recipe(
        clip_mode="per_layer", clip_norm=0.05, accum_steps=2, warmup_steps=2, schedule="linear"
    )
    out = _lightning(recipe)
    ns = snippet(recipe)
    wl = resolve("mlp", "tiny")
    total = 4
    seen: list[tuple[float, float]] = []

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = wl.build_model()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return wl.loss(self.net, batch)

        def configure_optimizers(self) -> Any:
            opt = ns["make_optimizer"](self.parameters())
            sched = ns["make_scheduler"](opt, total)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

        def configure_gradient_clipping(self, optimizer: Any, *args: Any, **kw: Any) -> None:
            pre = float(ns["clip_gradients"](self.parameters()))
            post = max(float(p.grad.norm()) for p in self.parameters() if p.grad is not None)
            seen.append((pre, post))

    stream = wl.batches(recipe.micro_batch, seed=0)
    data = [next(stream) for _ in range(total * recipe.accum_steps)]
    assert out["trainer"]["max_steps"] == 150  # the recipe's schedule (its probe.steps here)
    # clipping is the module's own; a short fit of `total` steps, scheduled over them
    kw = {**out["trainer"], "gradient_clip_val": None, "max_steps": total}
    trainer = lightning.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kw,
    )
    module = Module()
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    assert len(seen) == total  # once per optimizer step, after accumulation
    assert all(pre > 0.05 and post <= 0.05 * (1 + 1e-4) for pre, post in seen)
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    assert lr == pytest.approx(recipe.lr_at(total - 1, total))
