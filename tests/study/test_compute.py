"""Compute accounting (`autotune.study.compute`): exact arithmetic on made-up probe records, and
a real SQLite Optuna study with its folder's records read back. No Ray, no probe process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from assets import studies as h
from hypothesis import given
from hypothesis import strategies as hs

from autotune import space as sp
from autotune import study as st
from autotune.study import compute as cp
from autotune.study import rung_phase as rp

B = 16  # samples per step


def probe(steps: int, outcome: str = "complete") -> dict[str, Any]:
    """A probe's record as the study writes it: `steps` optimizer steps at B samples each."""
    return {"outcome": outcome, "summary": {"samples_seen": B * steps, "steps_run": steps}}


def test_the_quick_start_arithmetic_exactly() -> None:
    # 12 trials at 150, rungs 340 (5 probes) and 750 (3), 2 candidates x 3 seeds at 750
    plan = cp.Plan(samples_per_step=B, probe_steps=150, target_steps=750, verify_probes=6)
    screen = [cp.samples_of(probe(150)) for _ in range(12)]
    rungs = [cp.samples_of(probe(s)) for s in [340] * 5 + [750] * 3]
    verification = [cp.samples_of(probe(750)) for _ in range(6)]
    c = cp.account(screen, rungs, verification, plan)
    assert (c["screen"], c["rungs"], c["verification"]) == (28_800, 63_200, 72_000)
    assert c["total"] == 164_000
    assert c["today"] == B * 150 * (12 + 6) == 43_200
    assert c["full_length"] == B * 750 * (12 + 6) == 216_000
    assert c["vs_today"] == pytest.approx(164_000 / 43_200)
    assert c["saved_vs_full"] == pytest.approx(1 - 164_000 / 216_000)
    assert cp.format_line(c) == (
        "compute: 164k samples (screen 28.8k, rungs 63.2k, verification 72k) = 3.8x a "
        "screen-only study, 24% less than every trial (and the same verification) at 750 steps"
    )
    # a verification larger than top_k x seeds (more candidates, the baseline's seeds): full
    # length is charged the same verification as it ran, not the estimate of 6 probes
    bigger = [cp.samples_of(probe(750)) for _ in range(9)]
    c9 = cp.account(screen, rungs, bigger, plan)
    assert c9["full_length"] == B * 750 * 12 + B * 750 * 9
    spent9 = 28_800 + 63_200 + B * 750 * 9
    assert c9["saved_vs_full"] == pytest.approx(1 - spent9 / (B * 750 * 21))
    # more than full length: said so, not as a negative saving
    c = cp.account(screen, rungs * 3, verification, plan)
    assert c["saved_vs_full"] < 0
    assert "% more than every trial (and the same verification) at 750 steps" in (
        cp.format_line(c) or ""
    )


def test_a_probe_stopped_early_counts_what_it_saw() -> None:
    diverged = probe(37, "diverged")
    assert cp.samples_of(diverged) == B * 37
    assert cp.samples_of({"outcome": "failed", "summary": None}) == 0
    # a continued probe counts what its own process ran, not the steps it inherited
    resumed = {"summary": {"samples_seen": B * 340, "samples_run": B * 190}}
    assert cp.samples_of(resumed) == B * 190
    # a summary without samples_seen (a training script's): samples per step x steps run
    assert cp.samples_of({"summary": {"samples_per_step": 8, "steps_run": 12}}) == 96
    plan = cp.Plan(samples_per_step=B, probe_steps=150, target_steps=150, verify_probes=0)
    c = cp.account([cp.samples_of(probe(150)), cp.samples_of(diverged)], [], [], plan)
    assert c["total"] == B * (150 + 37) and c["today"] == B * 150 * 2


@given(
    trials=hs.integers(1, 50),
    steps=hs.integers(10, 2000),
    b=hs.integers(1, 512),
    top_k=hs.integers(0, 5),
    seeds=hs.integers(1, 5),
)
def test_without_a_target_a_study_spends_what_today_does(
    trials: int, steps: int, b: int, top_k: int, seeds: int
) -> None:
    plan = cp.Plan(b, probe_steps=steps, target_steps=steps, verify_probes=top_k * seeds)
    c = cp.account([b * steps] * trials, [], [b * steps] * (top_k * seeds), plan)
    assert c["total"] == c["today"] == c["full_length"]
    assert c["vs_today"] == 1.0 and c["saved_vs_full"] == 0.0
    line = cp.format_line(c) or ""
    assert "rungs" not in line and "every trial at" not in line
    assert "screen-only" not in line  # it is the screen-only study: no figure about itself


def test_the_screen_only_estimate_counts_the_verification_that_ran() -> None:
    """The baseline's seeds verified beside the candidates were in the measured total and not
    in the screen-only estimate: a screen-only run of the same plan read 1.2x itself (a black-
    box review). The estimate counts the verification probes that ran, at the screen length."""
    b, steps, target = 8, 50, 200
    plan = cp.Plan(b, probe_steps=steps, target_steps=target, verify_probes=1 * 3)
    verified = [b * target] * 6  # 3 seeds of the candidate, 3 of the baseline beside it
    c = cp.account([b * steps] * 6, [b * 100] * 3, verified, plan)
    assert c["today"] == b * steps * (6 + 6)
    assert "x a screen-only study" in (cp.format_line(c) or "")
    none_yet = cp.account([b * steps] * 6, [], [], plan)
    assert none_yet["today"] == b * steps * (6 + 3)  # as estimated: top_k x seeds


def write_record(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_a_real_study_read_back_from_its_storage_and_folder(tmp_path: Path) -> None:
    import optuna

    n = 4
    study_dir = h.recorded_study(tmp_path, "c", trials=n, finished=n)
    study = optuna.load_study(study_name="c", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    text = h.mlp_space("c", trials=n, verify_top_k=1, verify_seeds=2)
    space = sp.loads(text, source="c", overrides=["budget.target_steps=90"])
    assert space.probe.samples_per_step == 32
    # The recorded trials stored no samples_seen: their trials/NNNN.json records are read
    # (trial 2 diverged at step 11); a leftover .tmp file is not a record.
    for i in range(n):
        seen = 32 * (11 if i == 2 else 30)
        write_record(study_dir / "trials" / f"{i:04d}.json", {"summary": {"samples_seen": seen}})
    write_record(study_dir / "trials" / "0001-r1.json.tmp", probe(1000))
    trials = {t.number: t for t in study.get_trials()}
    out = {"outcome": "complete", "summary": {"metrics": {}, "samples_seen": 32 * 90}}
    rp.record_rung(space, study, study_dir, trials[0], 1, 90, out)
    # trial 3 continued its screen probe: it ran 60 of its 90 steps
    cont = {**out, "summary": {**out["summary"], "samples_run": 32 * 60, "resumed_from_step": 30}}
    rp.record_rung(space, study, study_dir, trials[3], 1, 90, cont)
    # a rung record left from an earlier target (rung 1 at 60 steps) is not this answer's
    (study_dir / "trials" / "0001-r1.json").write_text(
        json.dumps({"number": 1, "rung": 1, "steps": 60, **probe(60)})
    )
    screen = 32 * (30 * 3 + 11)
    rungs = 32 * 90 + 32 * 60

    # verification missing (not run yet): counted as none, the estimates still include it
    c = st.summarize(study, space, study_dir)["compute"]
    assert (c["screen"], c["rungs"], c["verification"]) == (screen, rungs, 0)
    assert c["total"] == screen + rungs
    assert c["today"] == 32 * 30 * (n + 2) and c["full_length"] == 32 * 90 * (n + 2)

    for seed in (1, 2):
        record = {"outcome": "complete", "summary": {"samples_seen": 32 * 90}}
        write_record(study_dir / "verify" / f"0003-s90-seed{seed}.json", record)
    summary = st.summarize(study, space, study_dir)
    c = summary["compute"]
    assert c["verification"] == 2 * 32 * 90 and c["total"] == screen + rungs + 2 * 32 * 90
    assert cp.format_line(c) in st.format_summary(summary).splitlines()
    # without the study folder (a study known from its storage only) nothing is claimed
    assert st.summarize(study, space, None)["compute"] is None
    assert c["unreadable"] == []

    # A record damaged or edited by hand is counted as nothing, and the line says so.
    (study_dir / "verify" / "0003-s90-seed2.json").write_text("[1,2")
    write_record(study_dir / "trials" / "0000-r1.json", {"number": 0, "rung": 1, "steps": 90,
                 "summary": {"samples_seen": "x"}})  # fmt: skip
    summary = st.summarize(study, space, study_dir)
    c = summary["compute"]
    assert c["unreadable"] == ["trials/0000-r1.json", "verify/0003-s90-seed2.json"]
    assert c["verification"] == 32 * 90 and c["rungs"] == 32 * 60
    line = cp.format_line(c)
    assert line is not None and line.endswith(
        "; 2 record file(s) unreadable, counted as nothing: trials/0000-r1.json, "
        "verify/0003-s90-seed2.json"
    )
    assert line in st.format_summary(summary).splitlines()


def test_the_baseline_yardstick_is_its_screen_only_verification(tmp_path: Path) -> None:
    """The baseline's screen at the verification seeds (the yardstick) and its seeds verified
    at the target are one probe each of a screen-only study, which reuses the yardstick as the
    baseline's verification: rvj read 2.3x a screen-only study where that study, run, spent
    33.3k samples of 89.6k (2.69x; a black-box review)."""
    import optuna

    n = 4
    study_dir = h.recorded_study(tmp_path, "y", trials=n, finished=n)
    study = optuna.load_study(study_name="y", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    text = h.mlp_space("y", trials=n, verify_top_k=1, verify_seeds=2)
    space = sp.loads(text, source="y", overrides=["budget.target_steps=90"])
    for i in range(n):
        write_record(study_dir / "trials" / f"{i:04d}.json", {"summary": {"samples_seen": 32 * 30}})
    for seed in (1, 2):  # the yardstick at 30 steps; the baseline and trial 3 at 90
        for name, steps in (("0000-s30", 30), ("0000-s90", 90), ("0003-s90", 90)):
            record = {"outcome": "complete", "summary": {"samples_seen": 32 * steps}}
            write_record(study_dir / "verify" / f"{name}-seed{seed}.json", record)
    # the figures themselves: the summary gives no ratio for this study, which has not run its
    # rungs (`unfinished.spent`)
    c = cp.study_compute(study, space, study_dir)
    assert c is not None and st.summarize(study, space, study_dir)["compute"]["vs_today"] is None
    assert c["verification"] == 2 * 32 * (30 + 90 + 90)
    # 4 trials and 4 verified (trial, seed) pairs at the screen's 30 steps, not 4 + 6
    assert c["today"] == 32 * 30 * (n + 4)
    assert c["vs_today"] == pytest.approx(c["total"] / (32 * 30 * 8))
