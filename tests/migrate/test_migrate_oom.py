"""A recipe whose micro-batch no longer fits on the new machine: a real CPU allocation failure
under a real process memory limit (`AUTOTUNE_PROBE_MEMORY_MB`), end to end with real Ray,
Optuna and MLflow. The source study runs unlimited; its recipe, at accumulation 1 (micro-batch
32), runs out of memory under the limit. `autotune migrate` names why, then runs the same batch
in more steps (`autotune/migrate/layout.py`): at accumulation 2 it fits and holds, so the
verdict is that change (given the space, no re-tune runs), and the recipe at that layout is
written and runs under the limit. That verdict stands on one probe at the layout, judged by
the recipe's verified seeds' spread (`autotune/migrate/layout_spread.py`); a run past that
spread goes on to the recipe over the seeds, the probe reused.
Under a tighter limit no smaller micro-batch fits either, and the re-tune of the layout is
planned but not run: the space fixes the accumulation, so each of its trials would run out of
memory again (`retune.unfit`). A layout that fits but does not hold: `tests/migrate/
test_layout.py`; a re-tune under a limit: `benchmarks/migrate_retune.py`."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from assets import studies as h

from autotune import Recipe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

# Activations grow with the micro-batch (a per-position layer over 400k positions, about 18.5
# MiB a sample): over a probe process's imports (where AUTOTUNE_PROBE_MEMORY_MB counts from),
# micro-batch 4 needs +121-124 MiB, 8 +193-196, 16 +341-344 and 32 +633-636 (measured by
# bisection, `benchmarks/memory_limit_need.py`, forked and fresh alike, 2026-12-07); the limit
# sits ~145 MiB from micro-batch 16's need and from 32's, so that another CPU's kernels do not
# move either across it. (At 800k positions, twice the probes' time, the same test took ~6 min
# of CI's 40.)
WORKLOAD = """
import torch
from torch import nn

LENGTH = 400_000

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

LIMIT_MB = "490"


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
verify: {{top_k: 1, seeds: 3}}
knobs:
  lr: 0.01
  clip_norm: {{low: 100.0, high: 1000.0, log: true}}
  accum_steps: 1
"""


# The searched knob clips at a norm this model's gradients never reach, so every trial trains as
# the baseline does, to the bit: the pick (by throughput, which a loaded machine decides) never
# loses to the baseline where it was tuned. A warm-up searched instead lost on final_loss when a
# loaded machine made it the pick, and a recipe that lost there takes the full check, not the
# layout's one probe (`holds.carried_problems`): this module's verdicts then depended on the load.


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The source study's recipe (unlimited), at accumulation 1: the whole batch at once."""
    tmp_path = tmp_path_factory.mktemp("source")
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
        data["micro_batch"], data["accum_steps"] = 32, 1
        data["source"]["defaults"] = False
    # not the defaults by a tie (`migrate/tie.py`): given the space, such a recipe that holds
    # goes on to a re-tune, and this module tests the layout alone
    data["source"]["first_choice"] = data["source"]["trial"]
    return {"dir": tmp_path, "recipe": data, "env": env}


def _migrate(
    src: dict[str, Any],
    data: dict[str, Any],
    name: str,
    limit: str = LIMIT_MB,
) -> tuple[Any, dict[str, Any]]:
    tmp_path = src["dir"]
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
    small = {**src["env"], "AUTOTUNE_PROBE_MEMORY_MB": limit}  # the new machine
    args = ["migrate", f"{name}.yaml", "--seeds", "2", "--threads", "1"]
    args += ["--space", "space.yaml"]  # given the space a re-tune could run (none should)
    mig = h.autotune(
        [*args, "--no-audit", "-o", f"out-{name}", "--json"], tmp_path, env=small, timeout=900
    )
    return mig, json.loads(mig.stdout) if mig.stdout.strip() else {}


def test_a_micro_batch_that_no_longer_fits_and_one_that_fits_at_no_smaller_micro_batch(
    source: dict[str, Any],
) -> None:
    # One test for both limits: xdist may send two tests of this module to two workers, and
    # each would run the source study again (the suite's `--dist worksteal` moves queued tests
    # between workers; `loadgroup`'s groups did not hold under pytest 9.2 either).
    _more_steps(source)
    _one_probe_at_the_layout(source)
    _no_smaller_micro_batch(source)


def _more_steps(source: dict[str, Any]) -> None:
    """The full check at the layout: the recipe's verified seeds, doctored (a recipe without
    digests is taken as it is) to a spread its run cannot end in, send the layout's one probe
    on to the recipe over the seeds, that probe reused (`layout_spread` -> `try_layout`)."""
    data = copy.deepcopy(source["recipe"])
    data["source"].pop("digests", None)
    for i, run in enumerate(data["recorded"]["verified"]["runs"]):
        run["metrics"]["final_loss"] = 1e-4 * (1 + 0.1 * i)  # the layout ends near 1 or more
    mig, result = _migrate(source, data, "recipe")
    assert mig.returncode == 0, h.explain(mig)
    holds = result["holds"]
    assert holds.get("path") is None, holds.get("path")  # not the one-probe verdict
    assert holds["not_reproduced"].startswith(
        "the run here ended oom; at accum_steps 2 not within its verified seeds' spread: final_loss"
    ), holds["not_reproduced"]
    assert holds["oom"]["micro_batch"] == 32 and len(holds["oom"]["seeds"]) == 2, holds
    assert "ran out of memory here on 2 of 2 seeds: its micro-batch of 32" in result["why"]
    fields = [r["field"] for r in result["differences"]["rows"]]
    assert "env.AUTOTUNE_PROBE_MEMORY_MB" in fields
    layout = holds["layout"]
    assert layout["held"] == 2 and layout["from_accum"] == 1 and layout["batch"] == 32, layout
    (tried,) = layout["tried"]
    assert tried["micro_batch"] == 16 and tried["holds"] and not tried["out_of_memory"], tried
    assert tried["result"]["seeds"] == [0, 1], tried["result"]  # seed 0's probe, reused
    assert result["verdict"] == "transfers with these changes: accum_steps 1 -> 2", result
    # no Pareto neighbour, no re-tune: the least change held
    assert holds["neighbours"]["status"] == "not needed" and result["retune"] is None
    # the recipe over 2 seeds (its baseline beside it unless it is the defaults), then at
    # accumulation 2 (and the defaults there, when they ran out of memory too)
    base = 2 if holds["baseline_result"] is not None else 0
    assert layout["probes"] in (2, 4) and tried["probes"] == layout["probes"]
    assert result["compute"]["probes"] == 2 + base + layout["probes"]
    old = Recipe.load(source["dir"] / "recipe.yaml")
    new = Recipe.load(source["dir"] / result["migrated_recipe"])
    assert new.knobs == {**old.knobs, "accum_steps": 2} and new.micro_batch == 16
    came = new.source["migrated_from"]
    assert came["recipe"] == old.name and came["changed"] == {"accum_steps": [1, 2]}
    assert "curve" not in new.recorded  # it recorded the old layout's run
    # The recipe at that layout runs on the new machine (the recipe alone: the baseline's run
    # beside it, a probe over 400k positions, is not what is asserted).
    small = {**source["env"], "AUTOTUNE_PROBE_MEMORY_MB": LIMIT_MB}
    args = ["verify", result["migrated_recipe"], "--seeds", "1", "--no-baseline", "--json"]
    ver = h.autotune(args, source["dir"], env=small)
    report = json.loads(ver.stdout)
    assert report["recipe_result"]["runs"][0]["outcome"] == "complete", h.explain(ver)
    text = (source["dir"] / result["report"]).read_text()
    assert text.index("**Verdict: transfers with these changes") < text.index("## The same batch")
    assert "| 2 | 16 | " in text


def _one_probe_at_the_layout(source: dict[str, Any]) -> None:
    """The recipe at its seed runs out of memory, and the same batch in 2
    steps at its seed ends within the spread of its 3 verified seeds: the verdict on that one
    probe (`migrate/layout_spread.py`), no seed re-run, no baseline."""
    assert len(source["recipe"]["recorded"]["verified"]["runs"]) == 3  # what it is judged by
    mig, result = _migrate(source, {**source["recipe"], "name": "cheap"}, "cheap")
    assert mig.returncode == 0, h.explain(mig)
    holds = result["holds"]
    # the memory's doing, not the numerics' (only a performance difference in the fingerprint)
    assert holds["not_reproduced"] == "the run here ended oom", holds["not_reproduced"]
    assert holds["path"] == "layout_spread" and holds["baseline_result"] is None, holds
    layout = holds["layout"]
    (tried,) = layout["tried"]
    assert layout["held"] == 2 and tried["micro_batch"] == 16 and tried["holds"], layout
    assert tried["spread"]["within"] and "final_loss" in tried["spread"]["rows"], tried
    assert result["verdict"] == "transfers with these changes: accum_steps 1 -> 2", result
    assert "ends within the spread of the recipe's 3 verified seeds" in result["why"]
    # one probe out of memory at the recipe's seed, one at the layout: nothing more ran
    assert result["compute"]["probes"] == 2 and layout["probes"] == 1, result["compute"]
    assert holds["samples"] == 32 * 10  # the layout's 10 steps of 32 (none out of memory)
    assert result["retune"] is None and result["migrated_recipe"], result
    assert holds["curve"]["status"] == "compared", holds["curve"]  # the layout's run, its twin
    text = (source["dir"] / result["report"]).read_text()
    assert "The same batch in 2 accumulation steps, the same arithmetic" in text
    assert "at the recipe's seed, judged by its verified seeds' spread" in text
    # the study's verdict carried over is the recipe's own unless it is the defaults
    assert ("the baseline itself, with no paired verdict of its own" in text) == holds[
        "recipe_is_baseline"
    ]
    assert "At the recorded seed (here at accum_steps 2, the same batch in more steps)" in text


def _no_smaller_micro_batch(source: dict[str, Any]) -> None:
    """A recipe that fits at no smaller micro-batch goes on to the re-tune plan."""
    # Under +70 MiB not even micro-batch 4 fits (+121-124 above): the three
    # layouts tried after the recipe's (accumulation 2, 4, 8) run out of memory too, each on
    # its first step, and the re-tune of the layout is planned.
    mig, result = _migrate(source, {**source["recipe"], "name": "tight"}, "tight", limit="70")
    assert mig.returncode == 1, h.explain(mig)
    layout = result["holds"]["layout"]
    assert [t["accum_steps"] for t in layout["tried"]] == [2, 4, 8], layout
    assert all(t["out_of_memory"] and not t["holds"] for t in layout["tried"]), layout
    assert layout["held"] is None
    assert layout["why"] == "at accum_steps 2, 4, 8 it runs out of memory too"
    assert (
        "The same batch in more accumulation steps does not help: at accum_steps 2, 4, 8"
        in (result["why"])
    )
    assert result["verdict"] == "does not transfer: re-tune accum_steps", result["verdict"]
    assert result["retune"]["oom_micro_batch"] == 32 and result["migrated_recipe"] is None
    # The space fixes accum_steps at 1: every trial of a re-tune in it would run micro-batch 32
    # out of memory again, so none runs (`retune.unfit`), and the why and the report say so.
    unfit = result["retune"]["unfit"]
    assert "every trial of the space space.yaml runs a micro-batch of 32 or more" in unfit, unfit
    assert f"Given the space, the re-tune did not run: {unfit}." in result["why"]
    assert result["retune"].get("result") is None and result["compute"]["retune_samples"] is None
    assert not (source["dir"] / "out-tight" / "retune").exists()
    assert f"Not run: {unfit}." in (source["dir"] / result["report"]).read_text()
