"""The parts of `autotune migrate` that need no process: the fingerprint differences and their
classes, the op comparison, the knob classes and re-tune plan, the curve check, the recipe's
`recorded` section and the report's order."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from assets.recipes import make_recipe

from autotune import fingerprint
from autotune.migrate import knob_classes
from autotune.migrate.differences import classify, differences
from autotune.migrate.holds import curve_check
from autotune.migrate.ops import compare_ops
from autotune.migrate.report import markdown
from autotune.repro import record


@pytest.fixture(scope="module")
def here() -> dict[str, Any]:
    return fingerprint.collect()


def test_a_fingerprint_records_the_numerics_settings(here: dict[str, Any]) -> None:
    num = here["numerics"]
    assert num["float32_matmul_precision"] in ("highest", "high", "medium")
    assert isinstance(num["matmul_allow_tf32"], bool)
    assert num["interop_threads"] >= 1
    # The identity (and so the hash) does not move with them.
    other = copy.deepcopy(here)
    other["numerics"]["matmul_allow_tf32"] = not num["matmul_allow_tf32"]
    assert fingerprint.identity_hash(other) == fingerprint.identity_hash(here)


def test_differences_are_classed_by_what_they_can_change(here: dict[str, Any]) -> None:
    other = copy.deepcopy(here)
    other["versions"]["torch"] = "2.0.0"
    other["env"]["torch_threads"] = here["env"]["torch_threads"] + 3
    other["env"]["NCCL_SOCKET_IFNAME"] = "eth9"
    other["env"]["ROCBLAS_INTERNAL_FP16_ALT_IMPL"] = "1"
    other["numerics"]["matmul_allow_tf32"] = not here["numerics"]["matmul_allow_tf32"]
    other["numerics"]["interop_threads"] = 99
    other["determinism"]["deterministic_algorithms"] = True
    other["host"]["ram_gb"] = 4096.0
    other["versions"]["numpy"] = "0.1"
    d = differences(other, here)
    got = {r["field"]: r["class"] for r in d["rows"]}
    assert got == {
        "versions.torch": "numerics",
        "env.torch_threads": "numerics",
        "env.ROCBLAS_INTERNAL_FP16_ALT_IMPL": "numerics",
        "numerics.matmul_allow_tf32": "numerics",
        "determinism.deterministic_algorithms": "numerics",
        "env.NCCL_SOCKET_IFNAME": "performance",
        "numerics.interop_threads": "performance",
        "host.ram_gb": "performance",
        "versions.numpy": "none",
    }
    # Numerics first, then performance, then none.
    classes = [r["class"] for r in d["rows"]]
    assert classes == sorted(classes, key=["numerics", "performance", "none"].index)
    assert d["counts"] == {"numerics": 5, "performance": 3, "none": 1}
    assert not d["same_identity"] and not d["not_recorded"]


def test_an_older_fingerprint_names_what_it_does_not_record(here: dict[str, Any]) -> None:
    old = {k: v for k, v in here.items() if k != "numerics"}
    d = differences(old, here)
    assert d["not_recorded"] == ["numerics"] and d["rows"] == [] and d["same_identity"]
    assert differences(None, here)["not_recorded"] == ["fingerprint"]
    assert classify("devices.0.arch")[0] == "numerics"
    assert classify("devices.0.total_memory_mb")[0] == "performance"
    assert classify("numerics.cpu_capability") == (
        "numerics",
        "another vector instruction set (ATEN_CPU_CAPABILITY): CPU kernels round differently",
    )


def audit(**errors: float) -> dict[str, Any]:
    entries = []
    for name in ("gelu", "softmax", "matmul"):
        for p in ("fwd", "bwd"):
            key = f"{name}_{p}"
            entries.append(
                {
                    "op": name,
                    "pass": p,
                    "max_abs": errors.get(key, 1e-7),
                    "max_scaled": errors.get(key, 1e-7),
                    "ref_rms": 1.0,
                    "nonfinite": 0,
                    "error": None,
                    "flagged": errors.get(key, 0) > 1e-3,
                }
            )
    flagged = [f"{e['op']}.{e['pass']}" for e in entries if e["flagged"]]
    return {"dtype": "fp32", "device": "cpu", "entries": entries, "flagged": flagged}


def test_ops_whose_error_grew_are_named() -> None:
    got = compare_ops(audit(), audit(softmax_bwd=5e-2, gelu_fwd=3e-6))
    assert got["status"] == "compared"
    assert got["grew"] == ["gelu.fwd", "softmax.bwd"]  # 30x and 5e5x; matmul unchanged
    assert got["beyond_tolerance"] == ["softmax.bwd"]  # gelu grew but stays within tolerance
    # An error that shrank here is a difference, not a growth.
    assert compare_ops(audit(matmul_fwd=1e-4), audit())["grew"] == []
    alone = compare_ops(None, audit(softmax_bwd=5e-2))
    assert alone["status"] == "not recorded" and alone["beyond_tolerance"] == ["softmax.bwd"]


def test_the_compact_audit_compares_like_the_full_one() -> None:
    from autotune.repro.audit import OPS, run_audit

    full = run_audit(device="cpu", dtype="fp32", ops=[o for o in OPS if o.name == "gelu"])
    small = record.compact_audit(full, threads=1)
    assert small["threads"] == 1 and isinstance(small["torch"], str)
    assert [e["op"] for e in small["entries"]] == ["gelu", "gelu"]
    got = compare_ops(small, small)
    assert got["grew"] == [] and all(r["ratio"] == 1.0 for r in got["rows"])


def test_knob_classes_and_the_retune_plan() -> None:
    searched = ["clip_norm", "warmup_steps", "init_scale", "accum_steps", "adam_eps"]
    env = {"NCCL_ALGO": "Ring"}
    by = knob_classes.classes(searched, env)
    assert by == {
        "hardware-bound": ["init_scale", "accum_steps", "NCCL_ALGO"],
        "portable": ["clip_norm", "warmup_steps", "adam_eps"],
    }
    plan = knob_classes.retune_plan(
        searched, env, {"problems": ["it diverged on more seeds than the baseline (2 vs 0 of 3)"]}
    )
    assert plan["knobs"] == [
        "init_scale",
        "accum_steps",
        "NCCL_ALGO",
        "clip_norm",
        "warmup_steps",
        "adam_eps",
    ]
    held = knob_classes.retune_plan(searched, env, {"problems": []})
    assert held["knobs"] == ["init_scale", "accum_steps", "NCCL_ALGO"]
    assert knob_classes.inert_env({"NCCL_ALGO": "Ring", "ROCBLAS_X": "1"}, "cpu", 1) == [
        "NCCL_ALGO",
        "ROCBLAS_X",
    ]
    assert knob_classes.inert_env({"NCCL_ALGO": "Ring"}, "cuda", 8) == []


def test_the_curve_is_compared_at_the_recorded_seed() -> None:
    losses = [2.0 / (1 + i) for i in range(50)]
    rec = record.curve_of({"seed": 3, "steps_run": 50, "series": {"loss": losses}})
    assert rec is not None and rec["step"] == list(range(50))
    same = curve_check(rec, {"summary": {"seed": 3, "series": {"loss": losses}}})
    assert same["status"] == "compared" and same["agree"]
    drift = [v * (1.0 + 0.2 * (i > 20)) for i, v in enumerate(losses)]
    moved = curve_check(rec, {"summary": {"seed": 3, "series": {"loss": drift}}})
    assert not moved["agree"] and moved["first_divergence_step"] == 21
    assert curve_check(rec, {"summary": {"seed": 4, "series": {"loss": losses}}})["status"] == (
        "other seed"
    )
    assert curve_check(None, None)["status"] == "not recorded"
    long = record.curve_of({"seed": 0, "series": {"loss": [1.0] * 5000}})
    assert long is not None and len(long["step"]) == record.MAX_POINTS
    assert long["step"][0] == 0 and long["step"][-1] == 4999


def test_a_recipe_keeps_what_it_recorded(tmp_path: Any) -> None:
    from autotune import Recipe
    from autotune import space as sp

    knobs = {k: v.default for k, v in sp.KNOBS.items()}
    knobs.update(lr=0.01, batch=None, accum_steps=1)
    recorded = {"curve": {"metric": "loss", "seed": 0, "step": [0, 1], "value": [2.0, 1.5]}}
    r = Recipe(
        name="r",
        workload={"name": "mlp", "size": "tiny"},
        precision="fp32",
        micro_batch=8,
        knobs=knobs,
        probe={"steps": 30},
        recorded=recorded,
    )
    back = Recipe.load(r.save(tmp_path / "r.yaml"))
    assert back.recorded == recorded
    plain = Recipe.load(
        Recipe(
            name="p",
            workload={"name": "mlp", "size": "tiny"},
            precision="fp32",
            micro_batch=8,
            knobs=knobs,
            probe={"steps": 30},  # a recipe file without probe.steps is refused
        ).save(tmp_path / "p.yaml")
    )
    assert plain.recorded == {} and "recorded:" not in (tmp_path / "p.yaml").read_text()


def test_the_report_puts_the_verdict_first(here: dict[str, Any]) -> None:
    other = copy.deepcopy(here)
    other["versions"]["torch"] = "2.0.0"
    iv = {"mean": 1.0, "low": 0.9, "high": 1.1, "n": 2}
    result_side = {"n": 2, "diverged_share": 0.0, "failed": 0, "metrics": {"final_loss": iv}}
    result = {
        "recipe": "r",
        "verdict": "transfers",
        "why": "The recipe holds here.",
        "recorded_hash": "a",
        "here_hash": "b",
        "here_summary": "cpu",
        "differences": differences(other, here),
        "ops": compare_ops(audit(), audit(gelu_fwd=1e-5)),
        "holds": {
            "seeds": [0, 1],
            "steps": 30,
            "threads": 2,
            "recipe_result": result_side,
            "baseline_result": result_side,
            "vs_baseline": {"verdict": "no detectable difference", "why": "noise", "metrics": {}},
            "problems": [],
            "curve": {"status": "not recorded"},
        },
        "knob_classes": {"hardware-bound": [], "portable": ["clip_norm"]},
        "inert_env": [],
        "retune": None,
        "compute": {
            "samples": 100,
            "probes": 4,
            "probe_wall_s": 1.0,
            "audit_wall_s": 1.0,
            "study_samples": 1000,
        },
    }
    text = markdown(result)
    order = ["**Verdict: transfers**", "## Does the recipe", "## What differs", "`versions.torch`"]
    order += ["## Which ops differ", "**gelu.fwd**", "## Loss curve", "## Compute spent", "10%"]
    at = [text.find(x) for x in order]
    assert all(i >= 0 for i in at) and at == sorted(at), at

    # The machine's load while the check ran, under the machine's line: a throughput read beside
    # other work is said to be low; at this check's own threads nothing is said of it.
    assert "Load average" not in text  # a result without it (an older one) says nothing
    busy = markdown({**result, "load": {"start": 3.1, "end": 2.4, "cores": 2}})
    line = next(x for x in busy.splitlines() if x.startswith("Load average"))
    assert "3.10 at the start of the check, 2.40 at its end, on 2 core(s)" in line, line
    assert "more than its own 2 thread(s)" in line and "throughput measured here is lower" in line
    assert busy.find("checked here on") < busy.find("Load average") < busy.find("## Does the")
    quiet = markdown({**result, "load": {"start": 2.2, "end": 1.9, "cores": 2}})
    line = next(x for x in quiet.splitlines() if x.startswith("Load average"))
    assert "2.20 at the start" in line and "lower" not in line, line


def test_a_recipe_that_diverges_here_does_not_transfer(tmp_path: Any) -> None:
    from autotune import Recipe
    from autotune import space as sp
    from autotune.migrate.run import verdict_of

    knobs = {k: v.default for k, v in sp.KNOBS.items()}
    knobs.update(lr=0.01, batch=None, accum_steps=1, clip_norm=0.5)
    recipe = Recipe(
        name="r",
        workload={"name": "mlp", "size": "tiny"},
        precision="fp16",
        micro_batch=8,
        knobs=knobs,
        env={"NCCL_ALGO": "Ring"},
        source={"searched": ["clip_norm", "init_scale", "warmup_steps"]},
    )
    vs = {"verdict": "worse", "why": "diverged", "worse_on": []}
    broken = {"problems": ["it diverged on more seeds than the baseline (2 vs 0 of 3)"]}
    verdict, why, plan = verdict_of(
        recipe,
        "r.yaml",
        {**broken, "vs_baseline": vs},
        [],
        [
            "clip_norm",
            "init_scale",
            "warmup_steps",
        ],
    )
    assert verdict == "does not transfer: re-tune init_scale, NCCL_ALGO, clip_norm, warmup_steps"
    assert "diverged on more seeds" in why
    assert (
        plan is not None and plan["command"] == "autotune study --space SPACE --warm-start r.yaml"
    )
    held = {"problems": [], "seeds": [0, 1], "vs_baseline": {"verdict": "better", "why": "x"}}
    assert verdict_of(recipe, "r.yaml", held, [], [])[0] == "transfers"
    changed = verdict_of(recipe, "r.yaml", held, ["NCCL_ALGO"], [])
    assert changed[0] == "transfers with these changes: drop NCCL_ALGO" and changed[2] is None


def test_the_report_goes_to_mlflow(tmp_path: Any) -> None:
    from mlflow.tracking import MlflowClient

    from autotune.migrate.output import EXPERIMENT, connect, log_report

    report = tmp_path / "migration.md"
    report.write_text("# Migration\n\n**Verdict: transfers**\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = {
        "recipe": "r",
        "verdict": "transfers",
        "recorded_hash": "a",
        "here_hash": "b",
        "compute": {"samples": 100},
        "report": str(report),
        "png": None,
    }
    run_id = log_report(connect(uri), result)
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert run.data.tags["autotune.migrate.verdict"] == "transfers"
    assert run.data.metrics["samples"] == 100
    exp = client.get_experiment(run.info.experiment_id)
    assert exp is not None and exp.name == EXPERIMENT
    assert [a.path for a in client.list_artifacts(run_id)] == ["migration.md"]


def test_the_reduced_study_fixes_the_other_knobs_at_the_recipe(tmp_path: Any) -> None:
    from autotune import Recipe
    from autotune import space as sp
    from autotune.migrate.retune import reduced_overrides

    text = """\
name: src
workload: {name: mlp, size: tiny}
probe: {steps: 30, micro_batch: 32, device: cpu}
budget: {trials: 20}
knobs:
  clip_norm: {low: 0.1, high: 5.0, log: true}
  warmup_steps: {low: 0, high: 10}
  init_scale: {low: 1024, high: 65536, log: true}
"""
    space = sp.loads(text, source="src")
    knobs = {k: v.default for k, v in sp.KNOBS.items()}
    knobs.update(lr=0.01, batch=None, accum_steps=1, clip_norm=0.7, warmup_steps=4)
    recipe = Recipe(
        name="r",
        workload={"name": "mlp", "size": "tiny"},
        precision="fp32",
        micro_batch=8,
        knobs=knobs,
    )
    got = reduced_overrides(space, recipe, ["init_scale", "clip_norm"], 0.3)
    assert got == ["name=src-migrated", "knobs.warmup_steps=4", "budget.trials=6"]
    reduced = sp.loads(text, source="src", overrides=got)
    assert sorted(reduced.searched()) == ["clip_norm", "init_scale"]
    assert reduced.budget.trials == 6 and reduced.name == "src-migrated"
    # the baseline, the recipe's warm start and one the sampler chooses (a review: with 2, the
    # re-tune searched nothing, yet named the knobs it had "re-tuned")
    assert reduced_overrides(space, recipe, [], 0.01)[-1] == "budget.trials=3"
    nb = {"trial": 3, "knobs": knobs, "env": {}}
    with_two = replace(recipe, source={"neighbours": [nb, {**nb, "trial": 5}]})
    assert reduced_overrides(space, with_two, [], 0.01)[-1] == "budget.trials=5"


def test_the_retune_counts_its_warm_start_as_the_study_runs_it() -> None:
    """A recipe that is PyTorch's defaults (a tie's) is the baseline again: its re-tune runs the
    baseline, each neighbour that differs in the reduced space, and one sampled configuration
    (it ran 5 where 4 tried the same configurations: `benchmarks/RESULTS.md`)."""
    from autotune import space as sp
    from autotune.migrate.retune import warm_trials
    from autotune.study.options import WarmStart

    space = sp.loads(
        "name: src\nworkload: {name: mlp, size: tiny}\nprobe: {steps: 30}\nknobs:\n"
        "  clip_norm: {low: 0.0, high: 5.0}\n  warmup_steps: {low: 0, high: 10}\n",
        source="src",
    )
    defaults = {k: v.default for k, v in sp.KNOBS.items()}

    def warm(*configs: dict[str, Any]) -> WarmStart:
        return WarmStart(ref="r", configs=[{"knobs": c, "env": {}} for c in configs])

    near, far = {**defaults, "clip_norm": 3.9}, {**defaults, "clip_norm": 1.5, "warmup_steps": 4}
    assert warm_trials(space, warm(defaults, near, far)) == 4  # the defaults are the baseline
    assert warm_trials(space, warm({**near, "clip_norm": 0.7}, near, far)) == 5
    assert warm_trials(space, warm(defaults, near, dict(near))) == 3  # the same neighbour twice
    # a knob the reduced space does not search does not tell two configurations apart
    fixed = sp.loads(
        "name: src\nworkload: {name: mlp, size: tiny}\nprobe: {steps: 30}\nknobs:\n"
        "  clip_norm: {low: 0.0, high: 5.0}\n  warmup_steps: 4\n",
        source="src",
    )
    assert warm_trials(fixed, warm(defaults, near, {**near, "warmup_steps": 4})) == 3


def test_the_retune_says_which_recipe_values_its_warm_start_moved_into_the_space() -> None:
    from autotune import space as sp
    from autotune.migrate.retune import clamped

    space = sp.loads(
        "name: src\nworkload: {name: mlp, size: tiny}\nprobe: {steps: 30}\nknobs:\n"
        "  clip_norm: {low: 0.05, high: 5.0, log: true}\n"
        "  adam_eps: {low: 1.0e-10, high: 1.0e-5, log: true}\n"
        "  warmup_steps: {low: 0, high: 30, step: 10}\n",
        source="src",
    )
    recipe = make_recipe(clip_norm=1e-6, adam_eps=1.0, warmup_steps=10)
    assert clamped(recipe, space.searched()) == ["clip_norm 1e-06 -> 0.05", "adam_eps 1.0 -> 1e-05"]


def test_the_compute_line_counts_the_retune() -> None:
    """A review: "this check cost 47%" of the source study left out the re-tune's samples."""
    from autotune.migrate.report import _compute_section

    c = {"samples": 45_000, "probes": 6, "probe_wall_s": 30.0, "audit_wall_s": 0.0}
    lines = _compute_section({**c, "retune_samples": 61_440, "study_samples": 97_280})
    assert "this check and its re-tune cost 109% of it." in " ".join(lines)


def test_a_bad_space_for_the_retune_is_refused_before_any_probe(tmp_path: Any) -> None:
    from autotune.errors import AutotuneError
    from autotune.migrate.retune_check import check_retune

    with pytest.raises(AutotuneError, match=r"nope\.yaml"):
        check_retune(str(tmp_path / "nope.yaml"))


def test_a_micro_batch_that_ran_out_of_memory_is_re_tuned_on_smaller_ones() -> None:
    from autotune import Recipe
    from autotune import space as sp
    from autotune.migrate.retune import reduced_overrides

    text = """\
name: src
workload: {name: mlp, size: tiny}
probe: {steps: 30, batch: 64, device: cpu}
budget: {trials: 10}
knobs:
  clip_norm: {low: 0.1, high: 5.0, log: true}
  accum_steps: {choices: [1, 2, 4]}
"""
    space = sp.loads(text, source="src")
    knobs = {k: v.default for k, v in sp.KNOBS.items()}
    knobs.update(lr=0.01, batch=64, accum_steps=1, clip_norm=0.7)
    recipe = Recipe(
        name="r",
        workload={"name": "mlp", "size": "tiny"},
        precision="fp32",
        micro_batch=64,
        knobs=knobs,
    )
    holds = {"problems": ["it ran out of memory here"], "oom": {"micro_batch": 64}}
    plan = knob_classes.retune_plan(["clip_norm", "accum_steps"], {}, holds)
    assert plan["knobs"] == ["accum_steps"] and plan["oom_micro_batch"] == 64
    assert "ran out of memory" in plan["why"]["accum_steps"]
    got = reduced_overrides(space, recipe, plan["knobs"], 0.3, plan["oom_micro_batch"])
    # 30% of 10 trials, never more; accum 1 (micro-batch 64, what failed) dropped.
    assert got == [
        "name=src-migrated",
        "knobs.clip_norm=0.7",
        "knobs.accum_steps={choices: [2, 4]}",
        "budget.trials=3",
    ]
    reduced = sp.loads(text, source="src", overrides=got)
    assert reduced.searched()["accum_steps"].choices == (2, 4)
    # A recipe from a study that fixed the accumulation (not in `source.searched`), re-tuned
    # with this space, which searches it: the layout is still re-tuned on the accumulations that
    # fit (it was fixed at the recipe's 1, the micro-batch that failed here).
    plan = knob_classes.retune_plan(["clip_norm"], {}, holds)
    assert plan["knobs"] == ["accum_steps"], plan
    got = reduced_overrides(space, recipe, plan["knobs"], 0.3, plan["oom_micro_batch"])
    assert "knobs.accum_steps={choices: [2, 4]}" in got and "knobs.accum_steps=1" not in got, got
    # The trials' batch is the space's knobs.batch where it fixes one (64 here), not probe.batch
    # (32): at accumulation 2 they run micro-batch 32, which ran out of memory: only 4 fits.
    fixed = text.replace("batch: 64, device", "batch: 32, device").replace("steps: 30", "steps: 60")
    fixed += "  batch: 64\n"
    at_32 = {**holds, "oom": {"micro_batch": 32}}
    plan = knob_classes.retune_plan(["clip_norm", "accum_steps"], {}, at_32)
    recipe = Recipe(
        name="r", workload={"name": "mlp", "size": "tiny"}, precision="fp32", micro_batch=32,
        knobs={**knobs, "accum_steps": 2},
    )  # fmt: skip
    got = reduced_overrides(sp.loads(fixed, source="src"), recipe, plan["knobs"], 0.3, 32)
    assert "knobs.accum_steps={choices: [4]}" in got, got
    # searched, and not re-tuned: fixed at the recipe's batch, whose micro-batch decides alike
    searched = fixed.replace("  batch: 64\n", "  batch: {choices: [32, 64]}\n")
    got = reduced_overrides(sp.loads(searched, source="src"), recipe, plan["knobs"], 0.3, 32)
    assert "knobs.batch=64" in got and "knobs.accum_steps={choices: [4]}" in got, got


@pytest.mark.parametrize(
    ("accum", "oom", "unfit"),
    [
        ("{choices: [1, 2, 4]}", 64, None),  # 2 and 4 fit: the re-tune searches them
        ("1", 64, "accum_steps fixed at 1"),  # every trial at micro-batch 64 again
        (None, 64, "accum_steps fixed at 1"),  # not in the space: PyTorch's (no accumulation)
        # the recipe at accumulation 4 ran out of memory at micro-batch 16: none is smaller
        ("{choices: [1, 2, 4]}", 16, "accum_steps searched over values that leave it as large"),
    ],
)
def test_a_retune_that_could_only_run_out_of_memory_again_is_not_run(
    tmp_path: Path, accum: str | None, oom: int, unfit: str | None
) -> None:
    """A space whose every trial runs the micro-batch that ran out of memory here (or a larger
    one): the re-tune is not run (its trials would each run out of memory), and why names the
    space file and what would let it run."""
    from autotune import Recipe
    from autotune import space as sp
    from autotune.migrate.retune import unfit as why_unfit

    text = (
        "name: src\nworkload: {name: mlp, size: tiny}\nprobe: {steps: 30, batch: 64, device: "
        "cpu}\nbudget: {trials: 10}\nknobs:\n  clip_norm: {low: 0.1, high: 5.0, log: true}\n"
    ) + (f"  accum_steps: {accum}\n" if accum is not None else "")
    path = tmp_path / "space.yaml"
    path.write_text(text)
    knobs = {k: v.default for k, v in sp.KNOBS.items()}
    knobs.update(lr=0.01, batch=64, accum_steps=64 // oom, clip_norm=0.7)
    recipe = Recipe(
        name="r", workload={"name": "mlp", "size": "tiny"}, precision="fp32", micro_batch=oom,
        knobs=knobs,
    )  # fmt: skip
    holds = {"problems": ["it ran out of memory here"], "oom": {"micro_batch": oom}}
    plan = knob_classes.retune_plan(["clip_norm"], {}, holds)
    got = why_unfit(str(path), recipe, plan)
    if unfit is None:
        assert got is None
    else:
        assert got is not None and unfit in got and str(path) in got, got
        assert f"micro-batch of {oom} ran out of memory here" in got
    # without running out of memory there is nothing to say
    assert why_unfit(str(path), recipe, {**plan, "oom_micro_batch": None}) is None
    # nor where a trial out of memory runs again at half the micro-batch, or a searched DDP
    # knob can save memory (a review: the re-tune was refused where its trials could fit)
    retry = text.replace("probe: {steps: 30,", "probe: {oom_retry: true, steps: 30,")
    path.write_text(retry)
    assert why_unfit(str(path), recipe, plan) is None, retry
    path.write_text(text + "  gradient_as_bucket_view: {choices: [false, true]}\n")
    ddp = knob_classes.retune_plan(["clip_norm", "gradient_as_bucket_view"], {}, holds)
    assert why_unfit(str(path), recipe, ddp) is None
    # a fixed knobs.batch is every trial's batch: a smaller probe.batch runs in none of them
    smaller = text.replace("steps: 30, batch: 64,", "steps: 60, batch: 32,")
    path.write_text(smaller + "  batch: 64\n")
    assert (why_unfit(str(path), recipe, plan) is None) == (unfit is None)


def _tiny_recipe() -> Any:
    from autotune import Recipe
    from autotune import space as sp

    knobs = {k: v.default for k, v in sp.KNOBS.items()}
    knobs.update(lr=0.01, batch=16, clip_norm=1.0)
    return Recipe(
        name="r",
        workload={"name": "mlp", "size": "tiny"},
        precision="fp32",
        micro_batch=16,
        knobs=knobs,
        probe={"steps": 30},
    )


@pytest.mark.parametrize(
    ("out", "named"),
    [("afile/x", "afile is not a folder"), ("/proc/autotune-nope", "/proc/autotune-nope")],
    ids=["under-a-file", "unmakeable"],
)
def test_a_report_folder_that_cannot_be_made_is_one_line_and_status_2(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, out: str, named: str
) -> None:
    """`migrate -o` a folder that cannot be made: refused before any probe or store, one line
    naming the folder, status 2, nothing made (the tracking store neither)."""
    from typer.testing import CliRunner

    from autotune.cli import app

    monkeypatch.chdir(tmp_path)
    _tiny_recipe().save(tmp_path / "r.yaml")
    (tmp_path / "afile").write_text("a file, not a folder")
    before = sorted(p.name for p in tmp_path.iterdir())
    args = ["migrate", "r.yaml", "-o", out, "--no-audit", "--tracking-uri", "sqlite:///m.db"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == "", result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error: -o "), lines
    assert named in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not Path("/proc/autotune-nope").exists()


def test_a_report_folder_made_for_a_refused_migration_is_removed(tmp_path: Any) -> None:
    """`-o new/folder` with a tracking store that does not answer: the folders made for the
    report go again (nothing was written in them)."""
    from autotune.errors import TrackingError
    from autotune.migrate import migrate

    recipe = _tiny_recipe().save(tmp_path / "r.yaml")
    out = tmp_path / "a" / "b"
    with pytest.raises(TrackingError, match=r"127\.0\.0\.1:1"):
        migrate(recipe, out_dir=out, audit=False, tracking_uri="http://127.0.0.1:1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"]


def test_the_reduced_study_chooses_among_the_recipe_and_its_pareto_neighbours() -> None:
    # A portable knob the re-tune does not search stays the recipe's, or takes a value one of
    # its Pareto neighbours has (the source study's front), so that a trade-off found there can
    # be chosen again at the layout that fits here; the neighbours are warm-started after the
    # recipe. From benchmarks/migrate_retune.py: the recipe (clip off) ran out of memory at
    # micro-batch 64, its neighbour (clip 3.9) at the same micro-batch was not run, and a cold
    # study here found clip ~4 at micro-batch 16, which the re-tune could not reach.
    from dataclasses import replace

    from autotune import Recipe
    from autotune import space as sp
    from autotune.migrate.retune import reduced_overrides, with_neighbours
    from autotune.study.options import WarmStart

    text = """\
name: src
workload: {name: mlp, size: tiny}
probe: {steps: 30, batch: 64, device: cpu}
budget: {trials: 10}
knobs:
  clip_norm: {low: 0.0, high: 5.0}
  warmup_steps: {low: 0, high: 10}
  accum_steps: {choices: [1, 2, 4]}
"""
    space = sp.loads(text, source="src")
    knobs = {k: v.default for k, v in sp.KNOBS.items()}
    knobs.update(lr=0.01, batch=64, accum_steps=1, clip_norm=0.0, warmup_steps=2)
    near = {**knobs, "clip_norm": 3.9, "warmup_steps": 2}
    far = {**knobs, "clip_norm": 1.5, "warmup_steps": 2, "accum_steps": 2}
    neighbours = [
        {"trial": 6, "knobs": near, "env": {}, "values": {}},
        {"trial": 3, "knobs": far, "env": {}, "values": {}},
    ]
    recipe = Recipe(
        name="r",
        workload={"name": "mlp", "size": "tiny"},
        precision="fp32",
        micro_batch=64,
        knobs=knobs,
        source={"neighbours": neighbours},
    )
    got = reduced_overrides(space, recipe, ["accum_steps"], 0.3, 64)
    assert got == [
        "name=src-migrated",
        "knobs.clip_norm={choices: [0.0, 3.9, 1.5]}",
        "knobs.warmup_steps=2",
        "knobs.accum_steps={choices: [2, 4]}",
        "budget.trials=5",  # the baseline, the recipe, its 2 neighbours, one sampled
    ]
    reduced = sp.loads(text, source="src", overrides=got)
    assert reduced.searched()["clip_norm"].choices == (0.0, 3.9, 1.5)
    warm = WarmStart(ref="r.yaml", configs=[{"knobs": knobs, "env": {}, "label": "recipe"}])
    labels = [c["label"] for c in with_neighbours(warm, recipe).configs]
    assert labels == ["recipe", "Pareto neighbour trial 6", "Pareto neighbour trial 3"]
    bare = replace(recipe, source={})
    assert with_neighbours(warm, bare) is warm
    assert "knobs.clip_norm=0.0" in reduced_overrides(space, bare, ["accum_steps"], 0.3, 64)


@pytest.mark.parametrize("path", ["reproduced", "within_spread"])
def test_a_defaults_recipe_carries_no_paired_verdict_of_its_own(path: str) -> None:
    """The study's verdict on a recipe that is PyTorch's defaults (by a tie) compared its first
    choice with them: a cheap check that carries it over says the recipe is the baseline, not
    that "its paired verdict against the baseline" was the first choice's."""
    from autotune.migrate.run import verdict_of

    r = replace(make_recipe(), recorded={"verified": {"steps": 50, "runs": []}})
    holds = {
        "path": path,
        "reproduced": "seed 0, 50 steps",
        "not_reproduced": "the curves differ",
        "spread": {"why": "the run here ends within the spread"},
        "vs_baseline": {"verdict": "no detectable difference"},
        "problems": [],
    }
    for is_baseline, said in [
        (True, "(the recipe is PyTorch's defaults, the baseline itself)"),
        (False, "(its paired verdict against the baseline: no detectable difference)"),
    ]:
        verdict, why, _ = verdict_of(
            r, "r.yaml", {**holds, "recipe_is_baseline": is_baseline}, [], []
        )
        assert verdict == "transfers" and said in why, why
