"""clip_policy as a conditional knob: its children are searched only where their policy is
picked (real Optuna), dropped with a reason where it never is, and clip_mode per_layer is refused
with a policy that never picks norm. The shipped clip_policy.yaml searches all five."""

from __future__ import annotations

import warnings
from pathlib import Path

import optuna
import pytest

from autotune import space as sp
from autotune import study as at
from autotune.errors import SpaceError

SHIPPED = Path(__file__).parents[2] / "search_spaces" / "clip_policy.yaml"
CHILDREN = {
    "norm": {"clip_norm"},
    "agc": {"agc_lambda"},
    "zclip": {"zclip_z", "zclip_alpha"},
    "autoclip": {"autoclip_percentile"},
    "none": set(),
}


def test_the_shipped_space_searches_each_policy_with_only_its_children() -> None:
    space = sp.load(str(SHIPPED))
    searched = sp.condition(space, platform="cpu").searched
    assert set(searched["clip_policy"].choices) == {"none", "norm", "agc", "zclip", "autoclip"}
    study = optuna.create_study(
        sampler=at.make_sampler(space, searched), directions=["minimize", "maximize"]
    )
    seen: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "dynamic search space" fallback warning from TPE
        for i in range(14):  # past n_startup_trials: TPE models the conditional space
            trial = study.ask()
            params = at.suggest(trial, space, searched)
            policy = params["clip_policy"]
            seen.add(policy)
            clip_knobs = {n for n in params if n in sp.CLIP_CHILDREN}
            assert clip_knobs == CHILDREN[policy], (policy, params)
            assert "warmup_steps" in params
            knobs, _ = at.trial_setup(space, params, baseline=False)
            assert knobs["clip_policy"] == policy
            study.tell(trial, [float(i % 5), 1.0])
    assert len(seen) >= 3
    base = space.baseline_knobs()
    assert (base["clip_policy"], base["clip_norm"]) == ("norm", 0.0)  # PyTorch's: no clipping


def test_children_of_a_policy_never_picked_are_dropped_with_the_reason() -> None:
    s = sp.loads(
        "name: c\nworkload: mlp\nknobs:\n  clip_policy: {choices: [agc, zclip]}\n"
        "  clip_norm: {low: 0.1, high: 1.0}\n  agc_lambda: {low: 0.001, high: 0.1, log: true}\n"
    )
    c = sp.condition(s, platform="cpu")
    assert "agc_lambda" in c.searched and "clip_norm" not in c.searched
    assert c.dropped["clip_norm"] == (
        "clip_norm acts only with clip_policy norm (clip_policy: one of ['agc', 'zclip'])"
    )
    fixed = sp.loads("name: c\nworkload: mlp\nknobs:\n  zclip_z: {low: 1.0, high: 3.0}\n")
    assert sp.condition(fixed, platform="cpu").dropped["zclip_z"] == (
        "zclip_z acts only with clip_policy zclip (clip_policy: norm)"
    )


def test_a_space_without_clip_policy_searches_as_before() -> None:
    s = sp.load("gradclip")
    searched = sp.condition(s, platform="cpu").searched
    assert not at.conditional(searched)
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    params = at.suggest(trial, s, searched)
    assert list(params) == list(searched)  # every knob, in the file's order
    assert s.fixed_knobs()["clip_policy"] == "norm"


def test_per_layer_with_a_policy_that_never_picks_norm_is_refused() -> None:
    with pytest.raises(SpaceError, match=r"knobs\.clip_mode.*per_layer is the norm policy's"):
        sp.loads(
            "name: c\nworkload: mlp\nknobs: {clip_policy: agc, clip_mode: per_layer}\n",
            source="s.yaml",
        )
    ok = sp.loads(
        "name: c\nworkload: mlp\nknobs:\n  clip_policy: {choices: [norm, zclip]}\n"
        "  clip_mode: per_layer\n"
    )
    assert ok.knobs["clip_mode"] == "per_layer"


@pytest.mark.parametrize(
    ("precision", "eps", "warned"),
    [
        ("fp16", "1.0e-8", "rounds to 0"),
        ("fp16", "{low: 1.0e-7, high: 1.0e-4, log: true}", "is subnormal"),
        ("fp16", "1.0e-4", None),
        ("fp32", "1.0e-8", None),
    ],
)
def test_an_eps_float16_cannot_hold_is_warned_in_an_fp16_space(
    precision: str, eps: str, warned: str | None
) -> None:
    s = sp.loads(
        f"name: e\nworkload: mlp\nprobe: {{precision: {precision}}}\nknobs: {{adam_eps: {eps}}}\n"
    )
    got = sp.dtype_warnings(s)
    if warned is None:
        assert got == []
    else:
        (line,) = got
        assert line.startswith("knobs.adam_eps: ") and warned in line


def test_the_shipped_fp16_spaces_are_checked_against_float16() -> None:
    shipped = Path(__file__).parents[2] / "search_spaces"
    fp16 = [p for p in sorted(shipped.glob("*.yaml")) if sp.load(str(p)).probe.precision == "fp16"]
    assert fp16  # amp, ddp_amp
    for path in fp16:
        assert any("adam_eps" in w for w in sp.dtype_warnings(sp.load(str(path)))), path.name


def test_check_shows_each_child_under_its_policy() -> None:
    from typer.testing import CliRunner

    from autotune.cli import app

    out = CliRunner().invoke(app, ["check", str(SHIPPED)]).output
    assert "(only when clip_policy is zclip)" in out.split("zclip_alpha", 1)[1].splitlines()[0]
    fixed = out.split("fixed:", 1)[1]
    assert "agc_eps" in fixed and "zclip_warmup" in fixed
    plain = CliRunner().invoke(app, ["check", str(SHIPPED.with_name("gradclip.yaml"))]).output
    assert "agc_eps" not in plain and "only when" not in plain  # no policy searched: as before


def test_the_schedule_and_min_lr_ratio_make_a_conditional_space() -> None:
    """min_lr_ratio is asked only under a decaying schedule: TPE models it in its own group,
    not left out of the joint model from the first trial with a constant schedule."""
    s = sp.loads(
        "name: s\nworkload: mlp\nknobs:\n  schedule: {choices: [constant, cosine]}\n"
        "  min_lr_ratio: {low: 0.1, high: 0.5}\n"
    )
    searched = sp.condition(s, platform="cpu").searched
    assert at.conditional(searched)
    sampler = at.make_sampler(s, searched)
    assert isinstance(sampler, optuna.samplers.TPESampler) and sampler._group
    assert not at.conditional({k: v for k, v in searched.items() if k != "schedule"})
