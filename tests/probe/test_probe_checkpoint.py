"""Continuation of a probe from a shorter probe's state (`autotune.probe.checkpoint`): on the CPU
a continued probe is, step for step, the probe that ran from step 0; anything else restarts."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from autotune.probe import ProbeConfig, run_probe
from autotune.probe.checkpoint import identity, room_for, unsupported

SERIES = ("loss", "grad_norm", "lr", "scale", "clipped", "skipped")
HARDWARE = {"throughput", "tokens_per_s", "peak_mem_mb"}  # timings: not the same run twice
HARDWARE |= {f"{m}_{end}" for m in ("throughput", "tokens_per_s") for end in ("low", "high")}


def same_run(a: dict[str, Any], b: dict[str, Any]) -> None:
    for name in SERIES:
        assert np.array_equal(np.array(a["series"][name]), np.array(b["series"][name])), name
    ma = {k: v for k, v in a["metrics"].items() if k not in HARDWARE}
    mb = {k: v for k, v in b["metrics"].items() if k not in HARDWARE}
    assert ma == mb
    assert a["status"] == b["status"] and a["steps_run"] == b["steps_run"]
    assert a["samples_seen"] == b["samples_seen"]


def continued(base: ProbeConfig, short: int, state: Path) -> tuple[dict, dict, dict]:
    first = run_probe(replace(base, steps=short, save_state=str(state)))
    cont = run_probe(replace(base, resume_from=str(state)))
    fresh = run_probe(base)
    return first, cont, fresh


@pytest.mark.parametrize(
    ("workload", "knobs", "precision"),
    [
        ("mlp", {"lr": 0.01}, "fp32"),
        (
            "tiny_gpt",
            {"lr": 0.003, "schedule": "cosine", "warmup_steps": 5, "accum_steps": 2},
            "fp32",
        ),
        ("resnet", {"lr": 0.05, "clip_norm": 1.0}, "fp32"),  # BatchNorm buffers
        ("mlp", {"lr": 0.01, "schedule": "linear"}, "fp16"),  # the GradScaler's state
    ],
)
def test_a_continued_probe_is_the_probe_from_step_0(
    tmp_path: Path, workload: str, knobs: dict[str, Any], precision: str
) -> None:
    base = ProbeConfig(
        workload=workload,
        steps=45,
        schedule_steps=60,
        micro_batch=8,
        threads=1,
        knobs=knobs,
        precision=precision,
        seed=3,
    )
    first, cont, fresh = continued(base, 20, tmp_path / "s.pt")
    assert first["state_saved"]["saved"] is True
    # what a continued probe that fails on its first own step still reports per step
    kept = torch.load(tmp_path / "s.pt", weights_only=True)["per_step"]
    assert kept == [first["samples_per_step"], first["tokens_per_step"]] and kept[0] > 0
    assert cont["continuation"] == {"from": str(tmp_path / "s.pt"), "step": 20, "why": None}
    assert cont["resumed_from_step"] == 20
    # this process ran the 25 new steps only; the summary covers all 45
    assert cont["samples_run"] == 25 * cont["samples_per_step"]
    assert fresh["samples_run"] == fresh["samples_seen"] == 45 * fresh["samples_per_step"]
    same_run(cont, fresh)
    # the first 20 steps are the short probe's
    assert cont["series"]["loss"][:20] == first["series"]["loss"]
    # its throughput is its own process's: its 25 steps, less a warm-up of 3 (max(3, 10%))
    own = np.array(cont["series"]["step_time"][20 + 3 :])
    want = cont["samples_per_step"] / np.median(own[own > 0])
    assert cont["metrics"]["throughput"] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize(
    ("knobs", "precision"),
    [
        ({"clip_policy": "zclip", "zclip_warmup": 5, "zclip_z": 0.1, "zclip_alpha": 0.5}, "fp16"),
        ({"clip_policy": "autoclip", "autoclip_percentile": 20.0}, "fp32"),
    ],
)
def test_a_continued_probe_clips_as_the_uninterrupted_one(
    tmp_path: Path, knobs: dict[str, Any], precision: str
) -> None:
    """zclip's EMAs and autoclip's history are rebuilt from the inherited steps' norms: the
    continued probe clips the steps after the cut exactly as the probe from step 0 does."""
    base = ProbeConfig(
        workload="mlp", steps=40, schedule_steps=40, micro_batch=8, threads=1, seed=2,
        precision=precision,
        knobs={"lr": 0.05, **knobs},
    )  # fmt: skip
    _, cont, fresh = continued(base, 15, tmp_path / "s.pt")
    assert cont["resumed_from_step"] == 15
    same_run(cont, fresh)
    assert any(fresh["series"]["clipped"][15:]) and not all(fresh["series"]["clipped"][15:])


DROPOUT = """
import torch
from autotune.workloads.mlp import make as make_mlp

class Dropped:
    def __init__(self, size="tiny"):
        self.inner = make_mlp(size=size)
        self.name, self.size = "dropped", size
        self.default_lr, self.unstable_lr = self.inner.default_lr, self.inner.unstable_lr

    def build_model(self):
        return torch.nn.Sequential(self.inner.build_model(), torch.nn.Dropout(0.5))

    def batches(self, micro_batch, seed):
        return self.inner.batches(micro_batch, seed)

    def eval_batches(self, micro_batch):
        return self.inner.eval_batches(micro_batch)

    def loss(self, model, batch):
        return self.inner.loss(model, batch)

    def samples(self, batch):
        return self.inner.samples(batch)

    def tokens(self, batch):
        return self.inner.tokens(batch)

def make(size="tiny"):
    return Dropped(size)
"""


def test_the_random_state_continues_too(tmp_path: Path) -> None:
    """Dropout draws from torch's RNG every step: without it restored, the losses part."""
    path = tmp_path / "dropped.py"
    path.write_text(textwrap.dedent(DROPOUT))
    base = ProbeConfig(
        workload=f"{path}:make", steps=30, schedule_steps=30, micro_batch=8, threads=1, seed=1
    )
    _, cont, fresh = continued(base, 12, tmp_path / "s.pt")
    assert cont["resumed_from_step"] == 12, cont["continuation"]
    same_run(cont, fresh)


def test_another_configuration_a_missing_or_broken_state_restarts(tmp_path: Path) -> None:
    base = ProbeConfig(
        workload="mlp", steps=30, schedule_steps=30, micro_batch=8, threads=1, knobs={"lr": 0.01}
    )
    state = tmp_path / "s.pt"
    run_probe(replace(base, steps=10, save_state=str(state)))
    fresh = run_probe(replace(base, knobs={"lr": 0.02}))
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a state")
    cases = {
        "of another configuration": replace(base, knobs={"lr": 0.02}, resume_from=str(state)),
        "no state at": replace(base, knobs={"lr": 0.02}, resume_from=str(tmp_path / "no.pt")),
        "unreadable state": replace(base, knobs={"lr": 0.02}, resume_from=str(broken)),
        "is after step 10, not before 10": replace(base, steps=10, resume_from=str(state)),
    }
    for why, cfg in cases.items():
        out = run_probe(cfg)
        assert out["resumed_from_step"] == 0
        assert why in out["continuation"]["why"]
        if cfg.steps == 30:
            same_run(out, fresh)


def test_a_diverged_probe_leaves_no_state(tmp_path: Path) -> None:
    cfg = ProbeConfig(workload="mlp", steps=40, micro_batch=8, threads=1, knobs={"lr": 1e4}, seed=0)
    out = run_probe(replace(cfg, save_state=str(tmp_path / "s.pt")))
    assert out["status"] == "diverged"
    assert out["state_saved"] is None and not (tmp_path / "s.pt").exists()


@pytest.mark.integration
def test_ddp_ranks_each_continue_their_own_state(tmp_path: Path) -> None:
    """Two gloo ranks on the CPU: each keeps its RNGs and its shard's position."""
    from autotune.process.entry import run

    base = ProbeConfig(
        workload="mlp",
        steps=24,
        schedule_steps=24,
        micro_batch=8,
        device="cpu",
        threads=2,
        world_size=2,
        knobs={"lr": 0.01, "clip_norm": 1.0},
    )
    state = tmp_path / "s.pt"
    first = run(replace(base, steps=10, save_state=str(state)))
    assert first["state_saved"]["saved"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.pt.rank0", "s.pt.rank1"]
    cont = run(replace(base, resume_from=str(state)))
    fresh = run(base)
    assert cont["resumed_from_step"] == 10 and fresh["resumed_from_step"] == 0
    same_run(cont, fresh)
    # one rank's state gone: neither continues (they would run different steps), both say why
    (tmp_path / "s.pt.rank1").unlink()
    alone = run(replace(base, resume_from=str(state)))
    assert alone["resumed_from_step"] == 0
    assert "another rank's state" in alone["continuation"]["why"]
    same_run(alone, fresh)


def test_a_state_is_written_only_with_room_to_spare() -> None:
    gib = 1 << 30
    assert room_for(100 << 20, 2 * gib) is None
    why = room_for(600 << 20, gib + (1000 << 20))
    assert why == "not enough free disk for the state (600 MiB; 2024 MiB free)"
    # a DDP probe's 4 ranks write theirs at once: room for one is not room for four
    assert room_for(100 << 20, gib + (400 << 20)) is None
    why = room_for(100 << 20, gib + (400 << 20), copies=4)
    assert why == "not enough free disk for the state (4 x 100 MiB, one per rank; 1424 MiB free)"


def test_a_model_of_other_shapes_is_another_configuration() -> None:
    """A workload edited since the state was written (a layer resized) does not load into it."""
    cfg = ProbeConfig(workload="mlp")
    a, b = torch.nn.Linear(4, 8), torch.nn.Linear(4, 9)
    device = torch.device("cpu")
    assert identity(cfg, {}, device, 10, a) == identity(cfg, {}, device, 10, torch.nn.Linear(4, 8))
    assert identity(cfg, {}, device, 10, a) != identity(cfg, {}, device, 10, b)


def test_what_cannot_continue_says_why() -> None:
    base = ProbeConfig(workload="mlp")
    assert unsupported(base) is None
    assert unsupported(replace(base, script="train.py")) is None  # its trial.resume hook
    assert "script" in (unsupported(replace(base, script="train.py", world_size=2)) or "")
    assert unsupported(replace(base, world_size=2)) is None  # each rank keeps its own
    assert "oom_retry" in (unsupported(replace(base, oom_retry=True)) or "")


def test_the_one_restore_loads_the_parts_positions_the_data_then_puts_the_rngs_back() -> None:
    """`continue_from`, the restore of the loop's and a script's states alike: the parts in
    order (one saved empty, or not given, left alone), the data placed, the RNGs last (the
    data's positioning draws from them, as a script's loader may), a part that does not load
    raised as it is or as the caller names it."""
    from autotune.probe import rng
    from autotune.probe.checkpoint import continue_from

    torch.manual_seed(3)
    model, other = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    at_save = rng.capture()
    state = {
        "step": 4,
        "model": model.state_dict(),
        "scaler": {},
        "rng": at_save,
        "series": {"loss": torch.arange(4.0)},
        "per_step": [8, 0],
    }
    placed: list[int] = []

    def position(step: int) -> None:
        placed.append(step)
        torch.rand(5)  # a loader that draws: the RNGs must be put back after it

    class Never:
        def load_state_dict(self, _: Any) -> None:
            raise AssertionError("a part saved empty is left alone")

    start = continue_from(state, {"model": other, "scaler": Never(), "scheduler": None}, position)
    assert all(
        torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters(), strict=True)
    )
    assert placed == [4]
    assert torch.equal(torch.get_rng_state(), at_save["torch"])
    assert start.step == 4 and start.per_step == (8, 0)
    assert start.series["loss"].tolist() == [0.0, 1.0, 2.0, 3.0]

    wrong = {**state, "model": torch.nn.Linear(3, 2).state_dict()}
    with pytest.raises(RuntimeError, match="size mismatch"):
        continue_from(wrong, {"model": other}, position)
    with pytest.raises(KeyError, match="model: RuntimeError"):
        continue_from(wrong, {"model": other}, position, lambda n, e: KeyError(f"{n}: {e!r}"))
