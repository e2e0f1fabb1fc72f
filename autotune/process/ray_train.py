"""The ranks of a DDP probe as Ray Train workers (a TorchTrainer), which may sit on different
Ray nodes: `ray_train_probe` runs the same rank code as `autotune.process.ranks`."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.probe import ProbeConfig, run_probe
from autotune.process import channel as report_channel

if TYPE_CHECKING:
    pass

from autotune.process.ranks import (
    RankContext,
    RankFailure,
    cause_of,
    check_allreduce,
    comm_timeout_s,
)


def ray_train_probe(
    cfg: ProbeConfig, *, storage_path: str, placement: str = "SPREAD"
) -> dict[str, Any]:
    """Run `cfg` as `cfg.world_size` Ray Train workers (a TorchTrainer; the caller has called
    `ray.init`), spread over the cluster's nodes. Each worker's environment holds the trial's
    environment knobs before it starts (`worker_runtime_env`); Ray Train sets up the process
    group (gloo on CPUs, nccl on GPUs, with the communication timeout) and gives each worker its
    device from the GPUs Ray made visible to it. Returns the combined summary, as `launch` does
    (without oom_retry and measure_scaling)."""
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.train.v2.api.config import RunConfig, ScalingConfig  # Ray Train v2 (Ray 2.60)

    use_gpu = cfg.device.startswith("cuda")
    trainer = TorchTrainer(
        _ray_train_worker,
        train_loop_config={"probe": cfg.to_dict()},
        torch_config=TorchConfig(
            backend="nccl" if use_gpu else "gloo", timeout_s=int(comm_timeout_s())
        ),
        scaling_config=ScalingConfig(
            num_workers=cfg.world_size,
            use_gpu=use_gpu,
            resources_per_worker={"CPU": float(cfg.threads or 1)},
            placement_strategy=placement,
        ),
        run_config=RunConfig(  # type: ignore[arg-type]  # v2 config; the stub names v1
            storage_path=storage_path,
            worker_runtime_env={
                "env_vars": {
                    **{k: str(v) for k, v in cfg.env.items()},
                    "OMP_NUM_THREADS": str(cfg.threads or 1),
                }
            },
        ),
    )
    result = trainer.fit()
    if result.error is not None:
        raise RankFailure(cause_of(result.error), f"Ray Train: {result.error}")
    if result.checkpoint is None:
        raise RankFailure("crash", "Ray Train finished without rank 0's summary")
    with result.checkpoint.as_directory() as folder:
        summary: dict[str, Any] = json.loads((Path(folder) / "summary.json").read_text())
    return summary


def _ray_train_worker(config: dict[str, Any]) -> None:
    import ray.train
    import ray.train.torch
    import torch.distributed as dist

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    cfg = dataclasses.replace(
        ProbeConfig.from_dict(config["probe"]), device=str(device), world_size=world
    )
    check_allreduce(rank, world, device)
    result = run_probe(cfg, None, rank=RankContext(rank, world, cfg, distributed=True))
    mine = {k: v for k, v in result.items() if k != "series"}
    mine["node"] = ray.get_runtime_context().get_node_id()
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        result.pop("env_seen", None)
        result.pop("rank", None)
        result["world_size"] = world
        result["rank_env"] = [g.get("env_seen") for g in gathered]
        result["ranks"] = [
            {"rank": g.get("rank"), "status": g.get("status"), "node": g.get("node")}
            for g in gathered
        ]
    # Ray Train v2 keeps only metrics that come with a checkpoint: rank 0's summary is one.
    with tempfile.TemporaryDirectory(prefix="autotune-summary-") as folder:
        checkpoint = None
        if rank == 0:
            text = json.dumps(result, default=report_channel.json_default)
            (Path(folder) / "summary.json").write_text(text)
            checkpoint = ray.train.Checkpoint.from_directory(folder)
        ray.train.report({"status": result["status"]}, checkpoint=checkpoint)
