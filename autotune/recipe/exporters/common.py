"""Pieces every export format shares: where a recipe came from, what it was tuned on, the
GradScaler, DDP and schedule in words, and Python literals of knob values."""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.errors import RecipeError
from autotune.recipe.file import Recipe


def one_line(value: Any) -> str:
    """Text that is safe inside a one-line comment: no line breaks."""
    return " ".join(str(value).split())


def origin(r: Recipe) -> str:
    """'study S, trial T (pick P)', or what is known of it."""
    src = r.source or {}
    parts = []
    if src.get("study") is not None:
        parts.append(f"study {src['study']}")
    if src.get("trial") is not None:
        parts.append(f"trial {src['trial']}")
    text = ", ".join(parts) if parts else "no study recorded"
    if src.get("pick"):
        text += f" (pick {src['pick']})"
    return one_line(text)


def platform(r: Recipe) -> str | None:
    """cuda, rocm or cpu: where the recipe was tuned, when the record says."""
    fp = r.fingerprint or {}
    plat = fp.get("platform")
    if isinstance(plat, str) and plat:
        return plat
    device = str((r.probe or {}).get("device") or "")
    if device.startswith("cuda"):
        return "cuda"
    if device == "cpu":
        return "cpu"
    return None


def tuned_on(r: Recipe) -> str:
    """One line: the hardware fingerprint, the workload and how long the probe ran."""
    fp = r.fingerprint or {}
    fp_hash = r.fingerprint_hash or (r.source or {}).get("fp_hash")
    devices = [d for d in (fp.get("devices") or []) if isinstance(d, dict)]
    device = devices[0].get("name") if devices else None
    if device and len(devices) > 1:
        device = f"{len(devices)} x {device}"
    if not device:
        device = fp.get("device") or (fp.get("host") or {}).get("cpu_model")
    hw = []
    if fp_hash:
        hw.append(f"fingerprint {fp_hash}")
    where = ", ".join(str(x) for x in (platform(r), device) if x)
    if where:
        hw.append(f"({where})" if hw else where)
    text = f"{workload_text(r)}, {r.precision}"
    steps = (r.probe or {}).get("steps")
    if steps:
        text += f", {steps}-step probes"
    text += "; " + (" ".join(hw) if hw else "hardware not recorded")
    return one_line(text)


def workload_text(r: Recipe) -> str:
    """'workload mlp (tiny)', or 'script train.py --width 48' for a script's recipe."""
    wl = r.workload
    if wl.get("script"):
        args = [str(a) for a in wl.get("args") or ()]
        return one_line(f"script {shlex.join([Path(str(wl['script'])).name, *args])}")
    return one_line(f"workload {wl.get('name')} ({wl.get('size')})")


def script_applied(r: Recipe) -> set[str] | None:
    """A script's recipe: what applied the trial's knobs in the script (`optimizer`,
    `scheduler`, `hf`, `lightning`); None for a built-in workload or a recipe without the
    record (then the probe is assumed to be autotune's own functions)."""
    if not r.workload.get("script"):
        return None
    applied = (r.source or {}).get("script_applied")
    return None if applied is None else {str(a) for a in applied}


def hf_trained(r: Recipe) -> bool:
    """The study's trials ran under the script's own Hugging Face Trainer (the hf integration's
    TrainingArguments): what it measured is HF's schedule and weight decay, not the recipe's."""
    applied = script_applied(r)
    return applied is not None and "hf" in applied


def hf_trained_note(r: Recipe, instead: str) -> str | None:
    """For a recipe tuned under HF's Trainer, how HF's schedule and weight decay (what the study
    measured) differ from the recipe's own functions this export gives; `instead` says how to
    train as measured in the export's tool. None for any other recipe, or where they agree."""
    if not hf_trained(r):
        return None
    k = r.knobs
    warmup, sched, ratio = int(k["warmup_steps"]), str(k["schedule"]), float(k["min_lr_ratio"])
    gaps = []
    if warmup > 0:
        gaps.append(
            "HF's warm-up gave optimizer step s (from 0) the rate peak * s / warmup_steps, "
            "starting at 0; the recipe's gives peak * (s + 1) / warmup_steps (one step ahead)"
        )
    if sched != "constant":
        end = "0" if sched == "linear" or ratio == 0 else f"{ratio!r} x the peak"
        gaps.append(
            f"HF's decay ended at {end} one step after the last step (the recipe's reaches "
            "min_lr_ratio x the peak on the last step)"
        )
    if float(k["weight_decay"]) > 0:
        gaps.append(
            "HF exempted biases and normalisation weights from weight decay; the recipe's "
            "optimizer decays every parameter"
        )
    if not gaps:
        return None
    return (
        f"Measured under HF: the study's trials ran your script's Hugging Face Trainer "
        f"({workload_text(r)}, through autotune.integrations.hf), so it measured HF's schedule "
        f"and weight decay, which differ from the recipe's functions here: {'; '.join(gaps)}. "
        f"{instead}"
    )


def own_schedule(r: Recipe) -> bool:
    """The script ran its own learning-rate schedule: neither the recipe's scheduler (or lr_at,
    Lightning's configure_optimizers) nor the hf integration's TrainingArguments set it, so the
    recipe's schedule knobs were never applied and are not exported."""
    applied = script_applied(r)
    return applied is not None and not applied & {"scheduler", "hf"}


def own_schedule_note(r: Recipe) -> str:
    return (
        f"Schedule: the probe was your script ({workload_text(r)}) with its own learning-rate "
        "schedule (it called neither recipe.scheduler nor an autotune integration that sets "
        "one), so the study measured that schedule and the recipe's schedule knobs "
        "(schedule, warmup_steps, min_lr_ratio) were never applied: none is exported; keep "
        "your script's."
    )


def scaler_values(k: dict[str, Any]) -> dict[str, Any]:
    return {
        "init_scale": float(k["init_scale"]),
        "growth_factor": float(k["growth_factor"]),
        "backoff_factor": float(k["backoff_factor"]),
        "growth_interval": int(k["growth_interval"]),
    }


def scaler_is_default(k: dict[str, Any]) -> bool:
    return all(v == sp.KNOBS[n].default for n, v in scaler_values(k).items())


def scaler_text(k: dict[str, Any]) -> str:
    return ", ".join(f"{n} {v!r}" for n, v in scaler_values(k).items())


def amp_device(r: Recipe) -> str:
    """torch.amp's device type where the recipe was tuned: cpu, else cuda (ROCm included)."""
    return "cpu" if platform(r) == "cpu" else "cuda"


def scaler_call(k: dict[str, Any], device: str) -> str:
    v = scaler_values(k)
    return (
        f'torch.amp.GradScaler("{device}", init_scale={v["init_scale"]!r}, '
        f"growth_factor={v['growth_factor']!r}, backoff_factor={v['backoff_factor']!r}, "
        f"growth_interval={v['growth_interval']!r})"
    )


def ddp_is_default(k: dict[str, Any]) -> bool:
    return all(k[n] == sp.KNOBS[n].default for n in sp.DDP_KNOBS)


def env_names(r: Recipe) -> str:
    return ", ".join(f"{n}={v}" for n, v in r.env.items())


def env_note(r: Recipe) -> str:
    return (
        f"Environment knobs ({one_line(env_names(r))}) are not training arguments: export them "
        "in the shell that launches training (`autotune export --format env`, then `. FILE`) or "
        "call apply_env() from the python export first thing in the script; NCCL/RCCL read them "
        "when the process group starts, ROCm libraries when they load."
    )


def schedule_note(r: Recipe, where: str) -> str | None:
    """Why `where` is the recipe's schedule length, or None when the recipe records none."""
    n = r.schedule_steps
    if n is None:
        return None
    return (
        f"{where} {n}: the study ran every probe as the first optimizer steps of a run whose "
        f"learning-rate schedule is {n} steps long (the length the study trained to: its "
        "budget.target_steps, or probe.steps when it set none), so that is what "
        "it measured: schedule your training over it (a schedule over another length is "
        "another schedule)."
    )


def schedule_formula(k: dict[str, Any]) -> str:
    peak = float(k["lr"])
    warmup = int(k["warmup_steps"])
    sched = str(k["schedule"])
    ratio = float(k["min_lr_ratio"])
    text = "step counts optimizer steps from 0 of total_steps; "
    if warmup > 0:
        text += f"lr = {peak!r} * (step + 1) / {warmup} for step < {warmup}, then "
    else:
        text += "lr = "
    if sched == "constant":
        return text + f"{peak!r}"
    p = f"p = min(1, (step - {warmup}) / max(1, total_steps - {warmup + 1}))"
    if sched == "linear":
        return text + f"{peak!r} * (1 - {1.0 - ratio:.12g} * p) with {p}"
    if sched == "cosine":
        return (
            text + f"{peak!r} * ({ratio!r} + {1.0 - ratio:.12g} * (1 + cos(pi * p)) / 2) with {p}"
        )
    raise RecipeError(f"unknown schedule {sched!r}")


def py(value: Any) -> str:
    """A Python literal for a knob value (floats round-trip exactly through repr); strings in
    double quotes where that needs no escaping, as code formatters write them."""
    if isinstance(value, str):
        text = repr(value)
        return f'"{text[1:-1]}"' if text[0] == "'" and '"' not in value else text
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f'float("{value}")'
    raise RecipeError(f"cannot write {value!r} as a Python constant")
