"""DDP probes on the CPU: two gloo processes against one, env knobs per rank, evaluation, the
all-reduce check, hangs, OOM retry, and the conditioning of the shipped DDP spaces."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from autotune import space as sp
from autotune.cli import app
from autotune.probe import ProbeConfig
from autotune.probe.workload import resolve
from autotune.process import ranks, supervisor
from autotune.process.channel import Channel
from autotune.process.entry import run as run_probe

# Two gloo ranks at micro-batch 40 and one process at 80 sum the same samples in a different
# order (float32): the losses and gradient norms agree to this relative tolerance.
RTOL = 1e-5
KNOBS = {
    "accum_steps": 2,  # no_sync on the first micro-batch of each step
    "clip_norm": 1.0,
    "lr": 0.01,
    "bucket_cap_mb": 1.0,
    "gradient_as_bucket_view": True,
    "static_graph": True,
}
ENV = {"NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "1048576"}  # gloo ignores them; ranks must see them
INHERITED = {"NCCL_PROTO": "Simple"}  # set in the launcher's environment, as a study sets it


def ddp_config(**kw: Any) -> ProbeConfig:
    base: dict[str, Any] = {
        "workload": "mlp",
        "size": "tiny",
        "steps": 30,
        "micro_batch": 40,  # per rank; 13 eval batches of 40: one rank gets a padding duplicate
        "device": "cpu",
        "threads": 2,
        "knobs": KNOBS,
        "env": ENV,
        "world_size": 2,
        # the study's held-out chunks, not the micro-batch: one reference for 2 x 40 and 1 x 80
        "reference_batch": 20,
        "reference_samples": 320,
    }
    return ProbeConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def ddp() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    with mock.patch.dict(os.environ, INHERITED):
        result = run_probe(ddp_config(measure_scaling=True), events.append)
    return result, events


@pytest.fixture(scope="module")
def single() -> dict[str, Any]:
    """One process, same effective batch: micro-batch 2 x 40, the same accumulation."""
    return run_probe(ddp_config(world_size=1, micro_batch=80, threads=1, env={}))


@pytest.mark.integration  # the ddp fixture starts the ranks' processes
def test_ddp_matches_one_process_with_the_same_effective_batch(
    ddp: tuple[dict[str, Any], list[dict[str, Any]]], single: dict[str, Any]
) -> None:
    r, _ = ddp
    assert r["status"] == "ok" and single["status"] == "ok"
    assert r["effective_batch"] == single["effective_batch"] == 160
    for name in ("loss", "grad_norm", "lr"):
        np.testing.assert_allclose(r["series"][name], single["series"][name], rtol=RTOL)
    assert r["series"]["clipped"] == single["series"]["clipped"]
    assert any(r["series"]["clipped"])  # clipping acted, on the all-reduced gradients
    assert r["samples_per_step"] == 160
    ref = r["initial_reference"]
    assert ref["source"] == "held_out" and (ref["chunk"], ref["samples"]) == (20, 320)
    assert ref["loss"] == pytest.approx(single["initial_reference"]["loss"], rel=1e-6)
    # the trained model (the DDP wrapper's module) on the same held-out set: the final loss
    last = r["final_reference"]
    assert last["source"] == "held_out" and last["loss"] < ref["loss"]
    assert last["loss"] == pytest.approx(single["final_reference"]["loss"], rel=1e-4)
    assert r["metrics"]["final_loss"] == pytest.approx(last["loss"])


@pytest.mark.integration  # the ddp fixture starts the ranks' processes
def test_summary_fields_and_rank_zero_relay(
    ddp: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    r, events = ddp
    assert r["world_size"] == 2 and r["threads_per_rank"] == 1
    assert r["oom_retried"] is False
    assert [x["rank"] for x in r["ranks"]] == [0, 1]
    assert all(x["status"] == "ok" and x["steps_run"] == 30 for x in r["ranks"])
    kinds = [e["event"] for e in events]
    assert kinds[0] == "ddp" and kinds[1] == "start" and kinds[-1] == "summary"
    # rank 0's only: each of the first 3 steps (max(3, 10% of 30)), then chunks of 10 steps
    firsts = [e["first_step"] for e in events if e["event"] == "telemetry"]
    assert firsts == [0, 1, 2, 3, 13, 23] and kinds.count("summary") == 1
    assert "rank_up" not in kinds and "comm_ok" not in kinds
    assert events[-1] is r
    eff = r["metrics"]["scaling_efficiency"]
    assert eff is not None and 0.0 < eff < 2.0
    s = r["scaling"]
    assert eff == pytest.approx(s["throughput_n"] / (2 * s["throughput_1"]))
    assert "scaling_efficiency" in sp.METRICS


@pytest.mark.integration  # the ddp fixture starts the ranks' processes
def test_each_rank_sees_the_trial_env_knobs(
    ddp: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    r, _ = ddp
    assert r["rank_env"] == [{**ENV, **INHERITED}] * 2


@pytest.mark.integration  # the ddp fixture starts the ranks' processes
def test_eval_loss_is_the_same_for_one_and_two_processes(
    ddp: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    r, _ = ddp
    # The same training data in one process (in this one: the path of oom_retry) and its
    # evaluation at micro-batch 80 (7 batches, no padding) against 13 batches over 2 ranks.
    one = supervisor.launch(ddp_config(world_size=1, micro_batch=80, threads=1), lambda _m: None)
    assert r["eval_samples"] == one["eval_samples"] == 512  # the padding duplicate not counted
    assert r["metrics"]["eval_loss"] == pytest.approx(one["metrics"]["eval_loss"], rel=RTOL)


def test_shard_indices_pad_like_distributed_sampler() -> None:
    for n in (1, 5, 13, 14):
        for world in (1, 2, 3, 8):
            shards = [ranks.shard_indices(n, r, world) for r in range(world)]
            assert len({len(s) for s in shards}) == 1  # equal length, as with padding
            counted = sorted(i for s in shards for i, c in s if c)
            assert counted == list(range(n))  # each item exactly once
    assert ranks.shard_indices(3, 1, 2) == [(1, True), (0, False)]


def test_evaluate_combines_sums_and_counts_not_means() -> None:
    torch.manual_seed(0)
    w = resolve("mlp", "tiny")
    model = w.build_model()
    whole, n = ranks.evaluate(model, w, 40, None)
    parts = [ranks.evaluate(model, w, 40, None, rank=r, world_size=2) for r in (0, 1)]
    # 13 batches (the last of 32): rank 0 gets 7 with it, rank 1 gets 6 and a padding duplicate
    assert [c for _, c in parts] == [272, 240] and n == 512
    combined = sum(m * c for m, c in parts) / sum(c for _, c in parts)
    assert combined == pytest.approx(whole, rel=1e-6)
    mean_of_means = (parts[0][0] + parts[1][0]) / 2
    assert abs(mean_of_means - whole) > 1e-4 * whole  # the wrong way would show


def test_shard_stream_gives_disjoint_slices() -> None:
    batch = (torch.arange(6).reshape(6, 1),)
    shards = [next(ranks.shard_stream(iter([batch]), r, 3, 2))[0] for r in range(3)]
    assert [s.flatten().tolist() for s in shards] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="dimension 0"):
        next(ranks.shard_stream(iter([(torch.zeros(5, 1),)]), 0, 3, 2))


@pytest.mark.integration
def test_wrong_allreduce_fails_as_comm_incorrect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ranks.CORRUPT_ENV, "1")
    with pytest.raises(ranks.CommError, match="all-reduce check") as info:
        run_probe(ddp_config(steps=10))
    assert info.value.cause == "comm_incorrect"


def _group_alive(pgid: int) -> list[int]:
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # pgid; zombies are already dead
            alive.append(int(stat.parent.name))
    return alive


@pytest.mark.integration
def test_stalled_rank_is_comm_hang_within_the_timeout_and_leaves_nothing(tmp_path: Path) -> None:
    """The trial entry point (`python -m autotune.process.entry`), as a study starts it."""
    cfg = tmp_path / "probe.json"
    cfg.write_text(json.dumps(ddp_config(steps=10).to_dict()))
    timeout = 4
    env = {
        **os.environ,
        ranks.STALL_ENV: "1",
        ranks.COMM_TIMEOUT_ENV: str(timeout),
        "PYTHONUNBUFFERED": "1",
    }
    t0 = time.monotonic()
    channel = Channel()
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune.process.entry", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**env, **channel.env()},
        pass_fds=(channel.write_fd,),
        text=True,
        start_new_session=True,
    )
    channel.close_child_end()
    try:
        out, _ = proc.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    took = time.monotonic() - t0
    lines = list(channel.reports())
    errors = [x for x in lines if x["event"] == "error"]
    assert proc.returncode == 3 and len(errors) == 1, out[-2000:]
    assert errors[0]["cause"] == "comm_hang"
    assert "Timed out" in errors[0]["message"] or "timeout" in errors[0]["message"]
    # startup (imports on a busy 2-core machine) + the timeout + the launcher's grace
    assert took < 45 + timeout + supervisor.FAILURE_GRACE_S
    assert _group_alive(proc.pid) == []  # the launcher killed the stalled rank before exiting


def test_oom_retry_halves_micro_batch_and_doubles_accumulation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ranks.OOM_ENV, "40")  # a micro-batch above 40 "runs out of memory"
    events: list[dict[str, Any]] = []
    cfg = ddp_config(world_size=1, micro_batch=80, steps=10, oom_retry=True, env={})
    r = run_probe(cfg, events.append)
    assert r["status"] == "ok" and r["oom_retried"] is True
    assert (r["micro_batch"], r["accum_steps"], r["effective_batch"]) == (40, 4, 160)
    assert [e["event"] for e in events if e["event"].startswith("oom")] == ["oom", "oom_retry"]
    monkeypatch.setenv(ranks.OOM_ENV, "10")  # still too large after the one retry
    r = run_probe(cfg)
    assert r["status"] == "oom" and r["oom_retried"] is True


# ----- the space file and conditioning ------------------------------------------------------


def test_probe_settings_validate_world_size() -> None:
    s = sp.loads("name: x\nworkload: mlp\nprobe: {world_size: 4, oom_retry: true}\n")
    assert s.probe.world_size == 4 and s.probe.oom_retry and not s.probe.measure_scaling
    assert sp.loads(sp.dump(s)) == s
    cfg = sp.probe_config(s)
    assert (cfg.world_size, cfg.oom_retry) == (4, True)
    with pytest.raises(sp.SpaceError, match="world_size"):
        sp.loads("name: x\nworkload: mlp\nprobe: {world_size: 0}\n")


def test_nccl_space_on_cpu_drops_every_nccl_knob_with_a_message() -> None:
    s = sp.load("nccl")
    assert s.probe.world_size == 2
    c = sp.condition(s, platform="cpu")  # world size from the file
    nccl = [k for k in s.env if k.startswith("NCCL_")]
    assert nccl and not set(nccl) & set(c.searched)
    for name in nccl:
        assert "gloo on CPU" in c.dropped[name]
    assert "bucket_cap_mb" in c.searched  # a DDP knob acts under gloo too
    one = sp.condition(s, platform="cuda", world_size=1)
    assert "one process" in one.dropped["NCCL_ALGO"] and "bucket_cap_mb" in one.dropped
    # probe.device cpu on a GPU machine is gloo as well
    cpu = sp.load("nccl", ["probe.device=cpu"])
    assert "gloo" in sp.condition(cpu, platform="rocm", arch="gfx942").dropped["NCCL_PROTO"]


def test_nccl_space_on_gpus() -> None:
    s = sp.load("nccl")
    mi250 = sp.condition(s, platform="rocm", arch="gfx90a")
    assert set(mi250.searched) == {"bucket_cap_mb", *s.env} and mi250.dropped == {}
    mi100 = sp.condition(s, platform="rocm", arch="gfx908")
    assert mi100.searched["NCCL_PROTO"].choices == ("Simple", "LL")
    assert "NCCL_PROTO=LL128" in mi100.dropped
    mi300 = sp.condition(s, platform="rocm", arch="gfx942")  # one node: no Tree with Simple
    assert mi300.searched["NCCL_ALGO"].choices == ("Ring",)
    assert "Tree+Simple" in mi300.dropped["NCCL_ALGO=Tree"]
    assert "LL128" in mi300.searched["NCCL_PROTO"].choices


@pytest.mark.parametrize(
    ("env", "dropped", "kept"),
    [
        ("NCCL_ALGO: Tree\n  NCCL_PROTO: {choices: [Simple, LL]}", "NCCL_PROTO=Simple", ("LL",)),
        ("NCCL_ALGO: {choices: [Ring, Tree]}\n  NCCL_PROTO: Simple", "NCCL_ALGO=Tree", ("Ring",)),
        ("NCCL_ALGO: {choices: [Ring, Tree]}\n  NCCL_PROTO: LL", None, ("Ring", "Tree")),
    ],
)
def test_tree_simple_on_one_gfx942_node(env: str, dropped: str | None, kept: tuple[str]) -> None:
    s = sp.loads(f"name: x\nworkload: mlp\nprobe: {{world_size: 8}}\nenv:\n  {env}\n")
    c = sp.condition(s, platform="rocm", arch="gfx942")
    if dropped is None:
        assert c.dropped == {} and c.searched["NCCL_ALGO"].choices == kept
    else:
        assert dropped in c.dropped
        assert next(iter(c.searched.values())).choices == kept
    assert sp.condition(s, platform="rocm", arch="gfx90a").dropped == {}  # only gfx942


def test_socket_knobs_are_not_searched_on_one_node() -> None:
    s = sp.loads(
        "name: x\nworkload: mlp\nprobe: {world_size: 2}\n"
        "env:\n  NCCL_SOCKET_NTHREADS: {low: 1, high: 8}\n"
        "  NCCL_NSOCKS_PERTHREAD: {low: 1, high: 8}\n"
    )
    c = sp.condition(s, platform="rocm", arch="gfx90a")
    assert c.searched == {}
    assert all("between nodes" in c.dropped[k] for k in sp.ENV_SOCKET_KNOBS)


def test_ddp_amp_space_drops_alt_impl_off_gfx90a() -> None:
    s = sp.load("ddp_amp")
    assert (s.probe.world_size, s.probe.precision) == (2, "fp16")
    c = sp.condition(s, platform="cpu")
    assert "gfx90a" in c.dropped["ROCBLAS_INTERNAL_FP16_ALT_IMPL"]
    assert {"init_scale", "clip_norm", "bucket_cap_mb"} <= set(c.searched)
    assert (
        "ROCBLAS_INTERNAL_FP16_ALT_IMPL" in sp.condition(s, platform="rocm", arch="gfx90a").searched
    )


@pytest.mark.integration
def test_cli_probe_runs_ddp_amp_on_cpu() -> None:
    # midpoint: the env knob ddp_amp searches (the fp16 alt-impl switch) acts only on gfx90a, so
    # a study on the CPU drops it and leaves it unset, and so does the midpoint (it set it to 0,
    # a configuration no trial here runs); a fixed variable reaches every rank.
    args = ["--space", "ddp_amp.yaml", "--config", "midpoint", "--set", "probe.steps=20", "--json"]
    result = CliRunner().invoke(app, ["probe", *args, "--set", "env.HSA_ENABLE_SDMA=0"])
    assert result.exit_code == 0, result.output[-2000:]
    r = json.loads(result.stdout[result.stdout.index("{") :])
    assert r["status"] == "ok" and r["world_size"] == 2 and r["precision"] == "fp16"
    assert r["effective_batch"] == 32 and r["steps_run"] == 20
    assert all(e == {"HSA_ENABLE_SDMA": "0"} for e in r["rank_env"])
    assert "dropped knob ROCBLAS_INTERNAL_FP16_ALT_IMPL: " in result.stderr
    assert math.isfinite(r["metrics"]["final_scale"])


@pytest.mark.integration  # the ddp fixture starts the ranks' processes
def test_tracking_logs_world_size_and_each_rank_env(
    ddp: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    from autotune import tracking

    r, _ = ddp
    params = tracking.trial_params({"knobs": {"lr": 0.01}, "env": ENV}, r)
    assert params["world_size"] == 2 and params["effective_batch"] == 160
    assert params["oom_retried"] is False
    for rank in (0, 1):
        assert params[f"rank{rank}.env.NCCL_ALGO"] == "Ring"
        assert params[f"rank{rank}.env.NCCL_PROTO"] == "Simple"
