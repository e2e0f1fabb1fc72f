"""`clip_norm: auto`: the space keeps the word, the study seeds the range from the baseline's
gradient norms (median to 99th percentile), remembers it for a resume, and says what it
measured."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pytest
from assets import studies as h

from autotune import space as sp
from autotune.study import attrs as ua
from autotune.study import clip_seed
from autotune.study.records import write_outcome

AUTO = "name: a\nworkload: mlp\nknobs:\n  clip_policy: {choices: [none, norm]}\n  clip_norm: auto\n"


def test_auto_loads_round_trips_and_is_searched_with_a_placeholder_range() -> None:
    s = sp.loads(AUTO)
    d = s.knobs["clip_norm"]
    assert isinstance(d, sp.Domain) and d.auto and (d.low, d.high, d.log) == (0.05, 5.0, True)
    assert "clip_norm: auto" in sp.dump(s) and sp.loads(sp.dump(s)) == s
    assert clip_seed.pending(sp.condition(s, platform="cpu").searched)
    assert s.baseline_knobs()["clip_norm"] == 0.0  # the baseline: no clipping
    over = sp.loads("name: a\nworkload: mlp\n", overrides=["knobs.clip_norm=auto"])
    assert isinstance(over.knobs["clip_norm"], sp.Domain) and over.knobs["clip_norm"].auto


def test_the_range_runs_from_the_median_to_the_99th_percentile() -> None:
    rng = np.random.default_rng(0)
    norms = [*rng.lognormal(0.0, 1.0, 400), float("nan"), float("inf"), 0.0]
    info = clip_seed.measured_range(norms)
    assert info is not None and info["steps"] == 400
    finite = [x for x in norms if np.isfinite(x) and x > 0]
    assert info["low"] == pytest.approx(np.median(finite))
    assert info["high"] == pytest.approx(np.percentile(finite, 99))
    flat = clip_seed.measured_range([2.0] * 50)
    assert flat is not None and (flat["low"], flat["high"]) == (0.5, 8.0)
    assert clip_seed.measured_range([float("nan")]) is None


def test_the_study_seeds_from_trial_0_and_keeps_it_for_a_resume(tmp_path: Path) -> None:
    s = sp.loads(AUTO)
    searched = dict(sp.condition(s, platform="cpu").searched)
    study = optuna.create_study()
    assert clip_seed.seed(study, tmp_path, searched) is None  # no baseline yet: placeholder
    assert searched["clip_norm"].auto
    norms = [1.0 + 0.1 * i for i in range(100)]
    write_outcome(tmp_path, {"number": 0, "summary": {"series": {"grad_norm": norms}}})
    info = clip_seed.seed(study, tmp_path, searched)
    assert info is not None and searched["clip_norm"] == sp.Domain(
        low=info["low"], high=info["high"], log=True
    )
    assert info["low"] == pytest.approx(np.median(norms))
    assert study.user_attrs[ua.CLIP_NORM_AUTO] == info
    text = clip_seed.text(info)
    assert text.startswith("clip_norm: auto: the baseline's total gradient norm over 100 steps")
    # a resumed study: the range from the study's record, even with trial 0's file gone
    (tmp_path / "trials" / "0000.json").unlink()
    again = dict(sp.condition(s, platform="cpu").searched)
    assert clip_seed.seed(study, tmp_path, again) == info and again == searched


@pytest.mark.integration
def test_a_study_with_auto_runs_the_baseline_first_and_searches_the_seeded_range(
    tmp_path: Path,
) -> None:
    """A real study (Ray, Optuna, MLflow): the conditional clip_policy space with
    `clip_norm: auto`; every trial after the baseline that picks norm draws clip_norm in the
    range measured on the baseline, and the summary says what was measured."""
    text = h.mlp_space("autoclip", trials=6, steps=20).replace(
        "  clip_norm: {low: 0.1, high: 5.0, log: true}\n",
        "  clip_policy: {choices: [norm, zclip]}\n  clip_norm: auto\n"
        "  zclip_z: {low: 1.0, high: 3.0}\n",
    )
    space = h.write(tmp_path, text)
    cmd = ["study", "--space", str(space), "--tracking-uri", h.sqlite_uri(tmp_path)]
    run = h.autotune(cmd, tmp_path, token=h.new_token(), timeout=500)
    assert run.returncode == 0, h.explain(run)
    assert "clip_norm: auto: the baseline's total gradient norm over 20 steps" in run.stdout
    storage = f"sqlite:///{tmp_path / 'autotune-studies' / 'autoclip' / 'optuna.db'}"
    study = optuna.load_study(study_name="autoclip", storage=storage)
    info = study.user_attrs[ua.CLIP_NORM_AUTO]
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 6 and ua.is_baseline(trials[0])
    for t in trials[1:]:
        policy = t.params["clip_policy"]
        assert ("clip_norm" in t.params) == (policy == "norm")
        assert ("zclip_z" in t.params) == (policy == "zclip")
        if policy == "norm":
            assert info["low"] <= t.params["clip_norm"] <= info["high"]


def test_auto_with_the_grid_sampler_is_refused_naming_the_key() -> None:
    from autotune.errors import SpaceError

    with pytest.raises(SpaceError, match=r"s\.yaml: knobs\.clip_norm.*auto needs tpe"):
        sp.loads(AUTO + "sampler: {name: grid}\n", source="s.yaml")
