"""A recipe whose micro-batch no longer fits on the new machine: a real CPU allocation failure
under a real process memory limit (`AUTOTUNE_PROBE_MEMORY_MB`), end to end with real Ray,
Optuna and MLflow. The source study runs unlimited and picks accumulation 1 (micro-batch 32);
`autotune migrate --space` under the limit says why it does not transfer (out of memory at
micro-batch 32), re-tunes the batch layout on the micro-batches that fit, and the re-tuned
recipe records where it came from and runs under the limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from assets import studies as h

from autotune import Recipe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

# Activations grow with the micro-batch (a per-position layer over 800k positions, about 40
# MiB a sample): over a probe process's imports (where AUTOTUNE_PROBE_MEMORY_MB counts from),
# micro-batch 8 needs +375-398 MiB and micro-batch 32 +1265-1288 (measured by bisection,
# 2026-12-04); the limit sits about 400 MiB from each, so that another CPU's kernels do not
# move either across it.
WORKLOAD = """
import torch
from torch import nn

LENGTH = 800_000

class Wide:
    name, size, default_lr, unstable_lr = "wide", "tiny", 3e-3, 0.3

    def build_model(self):
        return nn.Sequential(nn.Linear(1, 4), nn.ReLU(), nn.Linear(4, 1))

    def batches(self, micro_batch, seed):
        gen = torch.Generator().manual_seed(seed)
        while True:
            z = torch.randn(micro_batch, 1, 1, generator=gen)
            x = torch.randn(micro_batch, LENGTH, 1, generator=gen).add_(z)
            yield x, z[:, 0].abs()

    def eval_batches(self, micro_batch):
        return [next(self.batches(micro_batch, 12345))]

    def loss(self, model, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(model(x).mean(dim=1), y)

    def samples(self, batch):
        return int(batch[0].shape[0])

    def tokens(self, batch):
        return 0

def make(size="tiny"):
    return Wide()
"""

LIMIT_MB = "800"


def space(workload: Path) -> str:
    return f"""\
name: wide
workload: {{name: "{workload}:make", size: tiny}}
objectives:
  - {{metric: final_loss, direction: minimize}}
  - {{metric: throughput, direction: maximize}}
probe: {{steps: 10, batch: 32, device: cpu, threads: 1, reference_batch: 8, reference_samples: 8}}
budget: {{trials: 2, trial_timeout_s: 300}}
sampler: {{name: random, seed: 0}}
verify: {{top_k: 0}}
knobs:
  lr: 0.01
  warmup_steps: {{low: 0, high: 5}}
  accum_steps: {{choices: [1, 4]}}
"""


def test_a_micro_batch_that_no_longer_fits_is_named_and_re_tuned(tmp_path: Path) -> None:
    (tmp_path / "wide.py").write_text(WORKLOAD)
    (tmp_path / "space.yaml").write_text(space(tmp_path / "wide.py"))
    env = h.cli_env(None)
    env.pop("AUTOTUNE_PROBE_MEMORY_MB", None)
    done = h.autotune(["study", "--space", "space.yaml", "--quiet"], tmp_path, env=env, timeout=900)
    assert done.returncode == 0, h.explain(done)
    done = h.autotune(["export", "wide", "-o", "src.yaml"], tmp_path, env=env)
    assert done.returncode == 0, h.explain(done)
    data = yaml.safe_load((tmp_path / "src.yaml").read_text())
    if data["knobs"]["accum_steps"] != 1:  # the source machine's layout: the whole batch at once
        data["knobs"]["accum_steps"] = 1  # (the study's pick may prefer 4 on a loaded machine)
        data["source"]["defaults"] = False
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(data))

    small = {**env, "AUTOTUNE_PROBE_MEMORY_MB": LIMIT_MB}  # the new machine
    args = ["migrate", "recipe.yaml", "--space", "space.yaml", "--seeds", "2", "--threads", "1"]
    mig = h.autotune([*args, "--no-audit", "-o", "out", "--json"], tmp_path, env=small, timeout=900)
    assert mig.returncode == 1, h.explain(mig)
    result = json.loads(mig.stdout)
    holds = result["holds"]
    assert holds["oom"]["micro_batch"] == 32 and len(holds["oom"]["seeds"]) == 2, holds
    assert "ran out of memory here on 2 of 2 seeds: its micro-batch of 32" in result["why"]
    fields = [r["field"] for r in result["differences"]["rows"]]
    assert "env.AUTOTUNE_PROBE_MEMORY_MB" in fields
    plan = result["retune"]
    assert plan["knobs"] == ["accum_steps"] and plan["oom_micro_batch"] == 32
    assert "knobs.accum_steps={choices: [4]}" in plan["result"]["overrides"]
    # The layout, and a portable knob only where a Pareto neighbour of the recipe gives it
    # another value (a choice of the recipe's and theirs, not a search of its range).
    old = Recipe.load(tmp_path / "recipe.yaml")
    varied = {
        k for n in old.source.get("neighbours") or [] for k, v in n["knobs"].items()
        if v != old.knobs.get(k)
    }  # fmt: skip
    re_tuned = result["verdict"].removeprefix("re-tuned: ").split(", ")
    assert "accum_steps" in re_tuned and set(re_tuned) - {"accum_steps"} <= varied, result
    new = Recipe.load(tmp_path / plan["result"]["recipe"])  # beside the report, under -o
    came = new.source["migrated_from"]
    assert came["recipe"] == old.name
    assert came["re_tuned"] == re_tuned and "out of memory" in came["why"]["accum_steps"]
    assert new.knobs["accum_steps"] == 4 and new.micro_batch == 8
    # The re-tuned recipe runs on the new machine.
    ver = h.autotune(
        ["verify", plan["result"]["recipe"], "--seeds", "1", "--json"], tmp_path, env=small
    )
    report = json.loads(ver.stdout)
    assert report["recipe_result"]["runs"][0]["outcome"] == "complete", h.explain(ver)
    text = (tmp_path / result["report"]).read_text()
    assert text.index("**Verdict: re-tuned") < text.index("ran out of memory here")
