"""The recipe file, its runtime API, the picks and the interval arithmetic (no study needed)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from assets.recipes import make_recipe

from autotune import Recipe
from autotune.errors import RecipeError
from autotune.probe import lr_at, metrics
from autotune.probe.workload import resolve
from autotune.recipe import RECIPE_VERSION, verify
from autotune.study import pick

# ---------------------------------------------------------------------------------------------
# The file
# ---------------------------------------------------------------------------------------------


def test_round_trip_through_the_file(tmp_path: Path) -> None:
    r = make_recipe(clip_norm=0.7, warmup_steps=20, accum_steps=4, schedule="cosine")
    path = r.save(tmp_path / "recipe.yaml")
    text = path.read_text()
    assert text.startswith("# autotune recipe")  # documented
    assert f"autotune_recipe: {RECIPE_VERSION}" in text
    back = Recipe.load(path)
    assert back == r
    assert back.effective_batch == 16 * 4
    assert not list(tmp_path.glob(".*tmp"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("autotune_recipe: 1\nname: x: y\n", ": malformed YAML (line 2, column "),
        ("just: a mapping\n", "not an autotune recipe"),
        ("autotune_recipe: 7\nname: x\n", "format 7 was written by a newer autotune"),
        (
            "autotune_recipe: 1\nname: x\nworkload: {name: mlp}\nprecision: fp32\nmicro_batch: 8\n"
            "knobs: {lr: 0.1, clip_nrom: 1.0}\n",
            "knobs.clip_nrom: unknown knob (did you mean 'clip_norm'?)",
        ),
        (
            "autotune_recipe: 1\nname: x\nworkload: {name: mlp}\nprecision: fp32\nmicro_batch: 8\n"
            "knobs: {lr: 0.1, adam_eps: -1}\n",
            "knobs.adam_eps: -1.0 is out of range",
        ),
        (
            "autotune_recipe: 1\nname: x\nworkload: {name: mlp}\nprecision: fp64\nmicro_batch: 8\n"
            "knobs: {lr: 0.1}\n",
            "precision: Input should be 'fp32', 'fp16' or 'bf16' (got 'fp64')",
        ),
        (
            "autotune_recipe: 1\nname: x\nworkload: {name: mlp}\nprecision: fp32\nmicro_batch: 8\n"
            "knobs: {lr: 0.1}\nenv: {PATH: /bin}\n",
            "env.PATH: refused: only variables starting with NCCL_",
        ),
        (
            "autotune_recipe: 1\nname: x\nworkload: {name: mlp}\nprecision: fp32\nmicro_batch: 8\n"
            "knobs: {clip_norm: 1.0}\n",
            "knobs: missing lr",
        ),
    ],
)
def test_bad_recipe_files_name_the_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError) as e:
        Recipe.load(path)
    assert str(path) in str(e.value)
    assert expected in str(e.value)


def test_missing_file() -> None:
    with pytest.raises(RecipeError, match="no such recipe file"):
        Recipe.load("/nonexistent/recipe.yaml")


# ---------------------------------------------------------------------------------------------
# The runtime API
# ---------------------------------------------------------------------------------------------


def test_optimizer_scaler_and_env_follow_the_recipe() -> None:
    r = make_recipe(adam_eps=1e-6, beta2=0.95, weight_decay=0.1, init_scale=1024.0)
    model = torch.nn.Linear(4, 2)
    opt = r.optimizer(model.parameters())
    g = opt.param_groups[0]
    assert isinstance(opt, torch.optim.AdamW)
    assert (g["lr"], g["eps"], g["betas"], g["weight_decay"]) == (0.01, 1e-6, (0.9, 0.95), 0.1)
    assert not r.scaler("cpu").is_enabled()  # fp32: a no-op scaler
    fp16 = make_recipe(precision="fp16", init_scale=1024.0, growth_interval=7)
    scaler = fp16.scaler("cpu")
    assert scaler.is_enabled() and scaler.get_scale() == 1024.0
    assert scaler.get_growth_interval() == 7
    env: dict[str, str] = {}
    assert r.apply_env(env) == {"NCCL_ALGO": "Ring"} and env == {"NCCL_ALGO": "Ring"}


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
def test_scheduler_gives_the_probe_learning_rates(schedule: str) -> None:
    r = make_recipe(warmup_steps=5, schedule=schedule, min_lr_ratio=0.1)
    opt = r.optimizer(torch.nn.Linear(2, 2).parameters())
    sched = r.scheduler(opt, total_steps=30)
    got = []
    for _ in range(30):
        got.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    want = [
        lr_at(s, peak=0.01, warmup=5, schedule=schedule, total=30, min_ratio=0.1) for s in range(30)
    ]
    assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("mode", ["global", "per_layer"])
def test_clip_and_step_clips_before_stepping(mode: str) -> None:
    torch.manual_seed(0)
    r = make_recipe(clip_norm=0.5, clip_mode=mode, lr=0.1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    opt = r.optimizer(model.parameters())
    (model(torch.randn(32, 8)) * 100).pow(2).mean().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    total = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
    assert total > 0.5
    before = [p.detach().clone() for p in model.parameters()]
    norm = r.clip_and_step(opt, r.scaler("cpu"))
    assert norm == pytest.approx(total, rel=1e-5)
    assert all(p.grad is None for p in model.parameters())  # zeroed
    # The clipped gradients are what AdamW saw: its first moment is (1 - beta1) * clipped grad.
    state = [opt.state[p]["exp_avg"] / (1 - 0.9) for p in model.parameters()]
    if mode == "global":
        assert float(torch.linalg.vector_norm(torch.stack([s.norm() for s in state]))) <= 0.5001
    else:
        assert all(float(s.norm()) <= 0.5001 for s in state)
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))


def _user_loop(r: Recipe, seed: int, steps: int) -> list[float]:
    """A user's own training loop on the mlp workload, adopting the recipe in a few lines."""
    workload = resolve("mlp", "tiny")
    torch.manual_seed(seed)
    model = workload.build_model()
    opt = r.optimizer(model.parameters())
    scaler = r.scaler("cpu")
    sched = r.scheduler(opt, steps)
    data = workload.batches(r.micro_batch, seed)
    losses = []
    for _ in range(steps):
        total = 0.0
        for _ in range(r.accum_steps):
            with r.autocast("cpu"):
                loss = workload.loss(model, next(data)) / r.accum_steps
            scaler.scale(loss).backward()
            total += float(loss.detach())
        r.clip_and_step(opt, scaler)
        sched.step()
        losses.append(total)
    return losses


def test_a_user_loop_with_the_recipe_is_steadier_than_the_defaults() -> None:
    """At the mlp's unstable learning rate PyTorch's defaults blow up at the start; warm-up and
    clipping, applied through the runtime API in a plain loop, give a lower loss variance over
    the run, no early explosion and a lower final loss, on every seed."""
    unstable = resolve("mlp", "tiny").unstable_lr
    tuned = make_recipe(lr=unstable, clip_norm=1.0, warmup_steps=40)
    defaults = make_recipe(lr=unstable)
    steps = 150
    for seed in (1, 2, 3):
        a = np.array(_user_loop(tuned, seed, steps))
        b = np.array(_user_loop(defaults, seed, steps))
        assert np.isfinite(a).all()
        var_default = float(np.var(b)) if np.isfinite(b).all() else math.inf
        assert float(np.var(a)) < var_default / 10, (seed, np.var(a), var_default)
        assert a.max() <= 1.5 * a[0] < b.max(), (seed, a.max(), a[0], b.max())
        assert metrics.final_loss(a) < metrics.final_loss(b)


# ---------------------------------------------------------------------------------------------
# Intervals
# ---------------------------------------------------------------------------------------------


def test_interval_of_known_data() -> None:
    iv = verify.interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.776 * math.sqrt(2.5) / math.sqrt(5)  # t(0.975, 4) * s / sqrt(n)
    assert iv["mean"] == 3.0 and iv["n"] == 5
    assert iv["std"] == pytest.approx(math.sqrt(2.5))
    assert (iv["low"], iv["high"]) == pytest.approx((3.0 - half, 3.0 + half))
    assert verify.interval([2.0, float("nan"), None])["n"] == 1  # type: ignore[list-item]
    one = verify.interval([2.0])
    assert one["mean"] == 2.0 and one["low"] is None
    assert verify.interval([])["mean"] is None


def test_t_quantiles() -> None:
    assert verify.t975(1) == 12.706
    assert verify.t975(2) == 4.303
    assert verify.t975(22) == 2.086  # between 20 and 25: the more conservative value
    assert verify.t975(1000) == 1.96


def test_summarize_seeds_counts_divergence() -> None:
    def run(seed: int, outcome: str, cv: float | None) -> dict[str, Any]:
        m = {"loss_cv": cv} if cv is not None else {}
        return {"seed": seed, "outcome": outcome, "summary": {"metrics": m}}

    s = verify.summarize_seeds(
        [run(1, "complete", 0.1), run(2, "diverged", 9.0), run(3, "complete", 0.3)], ["loss_cv"]
    )
    assert s["diverged_share"] == pytest.approx(1 / 3)
    # the diverged seed is not in it; loss_cv is positive: its mean is geometric
    assert s["metrics"]["loss_cv"]["mean"] == pytest.approx((0.1 * 0.3) ** 0.5)
    assert s["metrics"]["loss_cv"]["n"] == 2


def test_throughput_over_seeds_keeps_each_runs_timing_noise() -> None:
    def run(seed: int, tp: float, lo: float, hi: float) -> dict[str, Any]:
        m = {"throughput": tp, "throughput_low": lo, "throughput_high": hi}
        return {"seed": seed, "outcome": "complete", "summary": {"metrics": m}}

    # three seeds that agree to 1%, each measured +-20% by its own step timings: the interval
    # over the seeds alone would be ~+-2%; the combined one keeps the runs' own noise
    runs = [run(1, 100.0, 80.0, 120.0), run(2, 101.0, 81.0, 121.0), run(3, 99.0, 79.0, 119.0)]
    tp = verify.summarize_seeds(runs, ["throughput"])["metrics"]["throughput"]
    alone = verify.interval([100.0, 101.0, 99.0], scale="log")
    assert tp["mean"] == pytest.approx(alone["mean"]) and tp["timing"] is True
    assert tp["low"] == pytest.approx((80.0 * 81.0 * 79.0) ** (1 / 3))
    assert tp["high"] == pytest.approx((120.0 * 121.0 * 119.0) ** (1 / 3))
    assert tp["low"] < alone["low"] and tp["high"] > alone["high"]
    # seeds that disagree more than each run's noise: the interval over the seeds stands
    spread = [run(1, 50.0, 49.0, 51.0), run(2, 100.0, 99.0, 101.0), run(3, 150.0, 149.0, 151.0)]
    wide = verify.summarize_seeds(spread, ["throughput"])["metrics"]["throughput"]
    assert "timing" not in wide and wide["low"] < 49.0 and wide["high"] > 151.0
    # one seed: its own interval, where the t interval has none
    one = verify.summarize_seeds(runs[:1], ["throughput"])["metrics"]["throughput"]
    assert (one["mean"], one["low"], one["high"]) == pytest.approx((100.0, 80.0, 120.0))


# ---------------------------------------------------------------------------------------------
# Picks
# ---------------------------------------------------------------------------------------------

OBJ = [
    {"metric": "loss_cv", "direction": "minimize"},
    {"metric": "throughput", "direction": "maximize"},
]


def cand(n: int, cv: float, thr: float, verified: dict[str, Any] | None = None) -> pick.Candidate:
    return pick.Candidate(
        number=n,
        values=[cv, thr],
        metrics={"loss_cv": cv, "throughput": thr},
        knobs={},
        env={},
        params={},
        verified=verified,
    )


def ver(cv: float, thr: float, diverged: float = 0.0) -> dict[str, Any]:
    return {
        "diverged_share": diverged,
        "metrics": {"loss_cv": {"mean": cv}, "throughput": {"mean": thr}},
    }


def test_picks_on_a_known_front() -> None:
    a, b, c, d = cand(0, 0.01, 100), cand(1, 0.02, 900), cand(2, 0.05, 1000), cand(3, 0.03, 500)
    cands = [a, b, c, d]
    assert {x.number for x in pick.front(cands, OBJ)} == {0, 1, 2}  # d is dominated by b
    # scaled over the front: a (0, 1), b (0.25, 0.11), c (1, 0) -> b is closest to (0, 0)
    assert pick.pick(cands, OBJ, "balanced").number == 1
    assert pick.pick(cands, OBJ, "fastest").number == 2
    assert pick.pick(cands, OBJ, "stablest").number == 0
    assert pick.pick(cands, OBJ, "trial 3").number == 3
    assert [x.number for x in pick.ranked(cands, OBJ)] == [1, 0, 2, 3]
    with pytest.raises(RecipeError, match="trial 9 is not a candidate"):
        pick.pick(cands, OBJ, "trial:9")
    with pytest.raises(RecipeError, match="choose balanced"):
        pick.parse_pick("quickest")


def test_picks_use_verified_numbers_and_set_aside_diverging_ones() -> None:
    a = cand(0, 0.01, 100, ver(0.2, 100, diverged=0.5))  # lucky once, diverges on half the seeds
    b = cand(1, 0.02, 900, ver(0.03, 880))
    c = cand(2, 0.05, 1000)  # not verified
    assert pick.pick([a, b, c], OBJ, "stablest").number == 1
    assert pick.pick([a, b, c], OBJ, "balanced").number == 1
    assert pick.pick([a, b, c], OBJ, "trial 2").number == 2  # asked for by number


def test_matched_at_ignores_hardware_objectives() -> None:
    trials = [(0, [0.5, 2000.0]), (1, [0.2, 10.0]), (2, [0.104, 5.0])]
    # The source's best was loss_cv 0.1 at 900 samples/s on other hardware: only loss_cv counts.
    assert pick.matched_at(trials, [0.1, 900.0], OBJ) == 2
    assert pick.matched_at(trials, [0.01, 900.0], OBJ) is None


def test_drift_warning_names_the_fields() -> None:
    r = make_recipe()
    report = {
        "recipe": r.name,
        "seeds": [1],
        "steps": 50,
        "recipe_result": verify.summarize_seeds(
            [{"seed": 1, "outcome": "complete", "summary": {"metrics": {"loss_cv": 0.05}}}],
            ["loss_cv"],
        ),
        "promise": verify.compare_promise(  # a promise of 1 seed, within these two seeds
            r,
            verify.summarize_seeds(
                [
                    {"seed": s, "outcome": "complete", "summary": {"metrics": {"loss_cv": v}}}
                    for s, v in ((1, 0.05), (2, 0.06))
                ],
                ["loss_cv"],
            ),
            same_hardware=False,
        ),
        "drift": [{"field": "devices.0.name", "recipe": "AMD Instinct MI210", "here": "MI250X"}],
        "recipe_fingerprint_hash": "abc123",
        "fingerprint": {"hash": "def456"},
    }
    text = verify.format_report(report)
    assert "WARNING: this machine differs" in text
    assert "devices.0.name: 'AMD Instinct MI210' -> 'MI250X'" in text
    # a promise of 1 seed against 2 seeds here: one more seed could be half or twice it
    assert "loss_cv" in text and "too few seeds to tell" in text


def test_seeds_that_diverged_are_worse_than_a_promise_that_held_on_every_seed() -> None:
    from dataclasses import replace

    verified = {"mean": 0.05, "low": 0.04, "high": 0.06, "n": 3, "diverged_share": 0.0}
    r = replace(
        make_recipe(),
        achieved={"loss_cv": {"direction": "minimize", "value": 0.05, "verified": verified}},
    )
    runs = [
        {"seed": 1, "outcome": "complete", "summary": {"metrics": {"loss_cv": 0.05}}},
        {"seed": 2, "outcome": "complete", "summary": {"metrics": {"loss_cv": 0.055}}},
        {"seed": 3, "outcome": "diverged", "summary": {"metrics": {}}},
    ]
    measured = verify.summarize_seeds(runs, ["loss_cv"])
    rows = {p["metric"]: p for p in verify.compare_promise(r, measured, same_hardware=True)}
    # over the 2 seeds that did not diverge: too few to tell (the overlap rule said "as
    # promised" of an interval of one degree of freedom)
    assert rows["loss_cv"]["verdict"] == (
        "too few seeds to tell (2 measured: the loss_cv interval spans 3.36x; --seeds 3 or more)"
    )
    # one seed of three, against none of the study's three: within chance, said so
    assert rows["diverged"]["verdict"] == (
        "more than promised, within chance (1 of 3 here vs 0 of 3 promised: p = 1)"
    )
    assert rows["diverged"]["beyond_chance"] is False
    # those seeds and five more that diverged, against a promise from ten seeds: worse
    ten = replace(
        r, achieved={"loss_cv": {**r.achieved["loss_cv"], "verified": {**verified, "n": 10}}}
    )
    gone = [{"seed": s, "outcome": "diverged", "summary": {"metrics": {}}} for s in range(4, 9)]
    many = verify.summarize_seeds([*runs, *gone], ["loss_cv"])
    assert verify.compare_promise(ten, many, same_hardware=True)[-1]["verdict"] == (
        "WORSE than promised (6 of 8 here vs 0 of 10 promised: beyond chance, p = 0.0015)"
    )
    # none of 2 seeds here against none of three: too few here to call it as promised
    held = verify.summarize_seeds(runs[:2], ["loss_cv"])
    assert verify.compare_promise(r, held, True)[-1]["verdict"] == (
        "too few seeds to tell (0 of 2 here vs 0 of 3 promised; --seeds 3 or more)"
    )
    # a recipe whose verification is not recorded promises nothing about divergence
    assert [p["metric"] for p in verify.compare_promise(make_recipe(), measured, True)] == [
        "loss_cv"
    ]
    report = {
        "recipe": r.name,
        "seeds": [1, 2, 3],
        "steps": 50,
        "recipe_result": measured,
        "promise": verify.compare_promise(r, measured, True),
        "drift": [],
        "recipe_fingerprint_hash": None,
        "fingerprint": {},
    }
    assert (
        "diverged       promised 0% of seeds  measured 33%  -> more than promised, within chance "
        + ("(1 of 3 here vs 0 of 3 promised: p = 1)")
        in verify.format_report(report)
    )


# ---------------------------------------------------------------------------------------------
# Recipes from elsewhere, through `autotune verify`
# ---------------------------------------------------------------------------------------------

BEHAVING = Path(__file__).resolve().parents[1] / "assets" / "behaving.py"


def write_recipe(tmp_path: Path, **changes: Any) -> Path:
    """A recipe file of `make_recipe()` with top-level keys replaced (`probe`, `env`, ...)."""
    import yaml

    data = yaml.safe_load(make_recipe().dump())
    data.update(changes)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def verify_cli(path: Path, *args: str) -> Any:
    from typer.testing import CliRunner

    from autotune.cli import app

    return CliRunner().invoke(app, ["verify", str(path), *args])


def one_error_line(result: Any, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr  # nothing ran: no "verifying recipe ..." banner
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return str(lines[0])


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"NCCL_ALGO=Tree": "Ring"}, "env.NCCL_ALGO=Tree: environment variable names are"),
        ({"NCCL_ALGO;x": "Ring"}, "env.NCCL_ALGO;x: environment variable names are"),
        ({"NCCL_ALGO": "Ring\0"}, "env.NCCL_ALGO: control characters"),
        ({"NCCL_IB_HCA": "mlx5"}, "env.NCCL_IB_HCA: a site setting"),
        ({"NCCL_ALGO": {"choices": ["Ring"]}}, "env.NCCL_ALGO: must be one value"),
    ],
    ids=["equals", "semicolon", "nul", "site-setting", "domain"],
)
def test_verify_refuses_env_the_space_would_refuse(
    tmp_path: Path, env: dict[str, Any], fragment: str
) -> None:
    path = write_recipe(tmp_path, env=env)
    one_error_line(verify_cli(path), str(path), fragment)


@pytest.mark.parametrize(
    ("probe", "fragment"),
    [
        ({"steps": -5}, "probe.steps: Input should be greater than or equal to 10"),
        ({"steps": 50, "divergence": {"scale_floor": float("inf")}}, "finite number"),
        ({"steps": 50, "device": "tpu"}, "probe.device: must be auto, cpu, cuda"),
        ({"steps": 50, "stepz": 3}, "probe.stepz: unknown key (did you mean 'steps'?)"),
        ({"steps": 50, "seed": 2**64}, "probe.seed: a seed is a whole number from 0 to"),
    ],
    ids=["negative-steps", "inf-floor", "device", "unknown-key", "huge-seed"],
)
def test_verify_refuses_probe_settings_the_space_would_refuse(
    tmp_path: Path, probe: dict[str, Any], fragment: str
) -> None:
    path = write_recipe(tmp_path, probe=probe)
    one_error_line(verify_cli(path), str(path), fragment)


def test_batch_layout_is_checked_by_the_probe_rules(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, micro_batch=0, world_size=2000)
    with pytest.raises(RecipeError, match=r"recipe\.yaml: micro_batch: .*greater than or equal"):
        Recipe.load(path)


def test_verify_resolves_the_workload_before_running_anything(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, workload={"name": "no_such_workload", "size": "tiny"})
    line = one_error_line(verify_cli(path), f"{path}: workload: ", "no_such_workload")
    assert "seed" not in line


@pytest.mark.integration
def test_verify_exits_1_with_the_causes_when_every_seed_fails(tmp_path: Path) -> None:
    from assets.behaving import MESSAGE, MODE_VAR

    path = write_recipe(
        tmp_path,
        workload={"name": f"{BEHAVING}:make", "size": "tiny"},
        env={MODE_VAR: "raise"},
        probe={"steps": 20, "seed": 0, "device": "cpu", "threads": 1},
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = verify_cli(path, "--seeds", "2", "--no-baseline", "--tracking-uri", uri)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert f"recipe   seed 1: failed (exception): RuntimeError: {MESSAGE}" in result.stdout
    assert f"recipe   seed 2: failed (exception): RuntimeError: {MESSAGE}" in result.stdout
    assert "every seed of recipe t failed" in result.stderr


@pytest.mark.parametrize("scaling", [True, False])
def test_a_recipe_whose_study_measured_scaling_probes_measure_it(scaling: bool) -> None:
    """verify and migrate run `Recipe.probe_config`: without measure_scaling there, a promised
    scaling_efficiency read "measured n/a -> not measured" (a black-box review)."""
    r = replace(make_recipe(), world_size=2, probe={"steps": 50, "measure_scaling": scaling})
    assert r.probe_config().measure_scaling is scaling
    assert r.probe_config(knobs=r.knobs, steps=20).measure_scaling is scaling  # the baseline's
