"""A small real study that promotes through two rungs: real local Ray, SQLite Optuna, SQLite
MLflow; nothing mocked. 6 trials screened at 30 steps, promoted to 60 and 120 (`grow: always`),
verified at 120; then a driver that stopped mid-rung resumes without re-running what finished.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from assets import studies as h

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

SPACE = """\
name: rungs
workload: {name: mlp, size: tiny}
probe: {steps: 30, batch: 32, device: cpu, telemetry_every: 10, threads: 1}
budget: {trials: 6, trial_timeout_s: 120, target_steps: 120}
rungs: {eta: 3, min_promote: 2, grow: always}
sampler: {name: random, seed: 0}
verify: {top_k: 1, seeds: 2}
knobs:
  clip_norm: {low: 0.1, high: 5.0, log: true}
  warmup_steps: {low: 0, high: 10}
  accum_steps: {choices: [1, 2]}
"""


def rung_runs(uri: str) -> tuple[dict[str, Any], list[Any]]:
    """(trial run id -> trial number, the nested rung runs) of the study's experiment."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("rungs")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    trials = {
        r.info.run_id: int(r.data.tags["autotune.trial_number"])
        for r in runs
        if r.data.tags.get("autotune.role") == "trial"
    }
    return trials, [r for r in runs if r.data.tags.get("autotune.role") == "rung"]


def ran_samples(summary: dict[str, Any]) -> int:
    return int(summary.get("samples_run", summary.get("samples_seen", 0)))


def fresh_probe(space_file: Path, knobs: dict[str, Any], steps: int) -> dict[str, Any]:
    """The trial's probe run from step 0 in this process, as the study configures it."""
    from autotune import space as sp
    from autotune.probe import run_probe

    space = sp.load(space_file)
    return run_probe(sp.probe_config(space, knobs=knobs, steps=steps))


def test_a_study_promotes_through_two_rungs_and_picks_at_the_top(tmp_path: Path) -> None:
    import optuna

    space = h.write(tmp_path, SPACE)
    uri = h.sqlite_uri(tmp_path)
    cmd = ["study", "--space", str(space), "--tracking-uri", uri]
    run = h.autotune(cmd, tmp_path, token=h.new_token(), timeout=590)
    assert run.returncode == 0, h.explain(run)
    assert "decided at 120 steps (the target)" in run.stdout, h.explain(run)

    study_dir = tmp_path / "autotune-studies" / "rungs"
    show = h.autotune(["show", "rungs", "--json"], tmp_path, timeout=120)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    assert summary["target_steps"] == 120
    assert [r["steps"] for r in summary["rungs"]] == [30, 60, 120]
    assert summary["rungs"][0]["trials"] == 6 and summary["rungs"][0]["agreement"] is None
    r1, r2 = summary["rungs"][1], summary["rungs"][2]
    assert 0 in r1["numbers"] and 0 in r2["numbers"], "the baseline runs every rung"
    assert r1["trials"] == 3 and r2["trials"] == 3  # max(2, ceil(6/3)) + the baseline
    assert r1["continued"] == 3 and r2["continued"] == 3
    assert "6 of 6 promoted probes continued from the rung below" in run.stdout
    assert r2["agreement"]["vs_steps"] == 60 and r2["agreement"]["n"] == 3
    assert summary["decided"]["steps"] == 120
    assert summary["unfinished"] is None and summary["compute_saved"] is not None, "finished"
    pick = summary["pick"]
    assert pick["steps"] == 120 and pick["number"] in r2["numbers"], pick
    assert summary["verified"] and summary["verified"][0]["steps"] == 120
    # The improvement over the baseline is the pick's at the decided length.
    imp = summary["improvement"]
    assert {(r["steps"], r["trial"]) for r in imp.values()} == {(120, pick["number"])}, imp

    # Records: one per promoted probe and rung, at the rung's length, with the samples seen;
    # each continued its trial's probe at the rung below and ran only the steps above it.
    for rung, row, below in ((1, r1, 30), (2, r2, 60)):
        for n in row["numbers"]:
            rec = json.loads((study_dir / "trials" / f"{n:04d}-r{rung}.json").read_text())
            assert rec["steps"] == row["steps"] and rec["summary"]["steps_run"] == row["steps"]
            assert rec["schedule_steps"] == 120  # the LR schedule of the target
            assert rec["summary"]["samples_seen"] == 32 * row["steps"]  # equal data: any accum
            assert rec["summary"]["resumed_from_step"] == below, rec["summary"]["continuation"]
            assert rec["summary"]["samples_run"] == 32 * (row["steps"] - below)
    # Continued twice, in other processes, the top rung's probe is the one run from step 0.
    top = json.loads((study_dir / "trials" / f"{pick['number']:04d}-r2.json").read_text())
    alone = fresh_probe(space, top["knobs"], 120)
    for name in ("loss", "grad_norm", "lr", "clipped"):
        assert top["summary"]["series"][name] == alone["series"][name], name
    assert not (study_dir / "state").exists(), "the states outlived the decision"
    # The best candidate, and the baseline beside it (the yardstick of the paired verdict).
    # (The pick may be the baseline itself: throughput is an objective, and a busy machine's
    # throughput can rank the defaults first; the best searched candidate is verified then too.)
    verified = sorted(v["number"] for v in summary["verified"])
    assert 0 in verified and len(verified) == 2 and pick["first_choice"] in verified, verified
    assert set(verified) <= set(r2["numbers"])
    assert pick["number"] in verified and summary["vs_baseline"]["steps"] == 120
    assert sorted(p.name for p in (study_dir / "verify").iterdir()) == [
        f"{n:04d}-s120-seed{s}.json" for n in verified for s in (1, 2)
    ]
    # The baseline's seeds ran in the top rung's batch, after its probes, and only there.
    beside = "  beside them, the baseline's verification (trial 0) at 120 steps: seeds 1, 2"
    assert beside in run.stdout and "2 of 4 seed(s) already run (read back)" in run.stdout
    lines = run.stdout.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("rung 2: 120 steps for trials "))
    assert lines[at + 1] == beside, h.explain(run)
    assert not [x for x in lines if x.lstrip().startswith("[") and "trial 0 seed" in x]
    # The compute reported is the samples each record's process ran (continued: its own steps).
    records = [*(study_dir / "trials").glob("*.json"), *(study_dir / "verify").glob("*.json")]
    ran = [ran_samples(json.loads(p.read_text())["summary"] or {}) for p in records]
    assert len(ran) == 6 + 3 + 3 + 2 * len(verified) and summary["compute"]["total"] == sum(ran)
    assert summary["compute"]["rungs"] == 32 * (3 * 30 + 3 * 60)
    spent = summary["compute"]
    assert summary["compute_saved"] == pytest.approx(1 - spent["total"] / spent["full_length"])
    # The rank fidelity: the 60-step rung's ranking of the three that ran the target, against it.
    fid = summary["rank_fidelity"]
    assert (fid["from_steps"], fid["to_steps"], fid["n"]) == (60, 120, 3), fid
    # Every probe (screen, rungs, verification) ran the LR schedule of the target's length.
    for p in records:
        assert json.loads(p.read_text())["summary"]["schedule_steps"] == 120, p.name

    # MLflow: each promoted probe is a run nested under its trial's run.
    trials, nested = rung_runs(uri)
    got = sorted(
        (trials[r.data.tags["mlflow.parentRunId"]], int(r.data.tags["autotune.rung"]))
        for r in nested
    )
    want = sorted([(n, 1) for n in r1["numbers"]] + [(n, 2) for n in r2["numbers"]])
    assert got == want
    assert {r.data.tags["autotune.resumed_from_step"] for r in nested} == {"30", "60"}

    # A driver that stopped mid-rung: one top-rung record missing, no decision yet. The same
    # command runs only that probe again, and MLflow keeps one nested run per probe.
    kept = {p.name: p.stat().st_mtime_ns for p in (study_dir / "trials").glob("*-r*.json")}
    lost = f"{r2['numbers'][-1]:04d}-r2.json"
    (study_dir / "trials" / lost).unlink()
    study = optuna.load_study(study_name="rungs", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    study.set_user_attr("autotune.decided", {})
    again = h.autotune(cmd, tmp_path, token=h.new_token(), timeout=400)
    assert again.returncode == 0, h.explain(again)
    after = {p.name: p.stat().st_mtime_ns for p in (study_dir / "trials").glob("*-r*.json")}
    assert set(after) == set(kept)
    assert {k: v for k, v in after.items() if k != lost} == {
        k: v for k, v in kept.items() if k != lost
    }, "a finished rung probe ran again"
    _, nested = rung_runs(uri)
    assert len(nested) == len(want), "a rung probe logged twice"
    # Its state at 60 steps was removed with the decision: that probe started over, and said so.
    redo = json.loads((study_dir / "trials" / lost).read_text())["summary"]
    assert redo["resumed_from_step"] == 0 and redo["samples_run"] == 32 * 120
    assert "no state at" in redo["continuation"]["why"]

    _a_resume_logs_the_rung_and_verification_runs_mlflow_lost(cmd, tmp_path, uri, study_dir)


def _a_resume_logs_the_rung_and_verification_runs_mlflow_lost(
    cmd: list[str], cwd: Path, uri: str, study_dir: Path
) -> None:
    """MLflow brought back in line on resume: a black-box review stopped the MLflow store (its
    PostgreSQL) mid-study, and the resume logged the missing trial runs but not the rung runs
    nor the verification runs. Now the resume logs every rung probe and verification the study
    recorded without a run. (Was `test_mlflow_backfill.py`'s own study of rungs and a verified
    candidate; this finished one has both.)"""
    import optuna
    from mlflow.tracking import MlflowClient

    before = _runs(uri, "rungs")
    rungs = sorted(
        (r.data.tags["mlflow.parentRunId"], r.data.tags["autotune.steps"]) for r in before["rung"]
    )
    assert rungs and before.get("verification"), sorted(before)

    # What a store that was down when they finished leaves: no rung or verification runs, and
    # the verification stored with `run_id` None (`MlflowWriter.verification` returned None).
    client = MlflowClient(tracking_uri=uri)
    for r in before["rung"] + before["verification"]:
        client.delete_run(r.info.run_id)
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    study = optuna.load_study(study_name="rungs", storage=storage)
    verified = {k: v for k, v in study.user_attrs.items() if k.startswith("autotune.verified.")}
    assert verified
    for key, res in verified.items():
        study.set_user_attr(key, {**res, "run_id": None})

    again = h.autotune([*cmd, "--resume"], cwd, token=h.new_token(), timeout=600)
    assert again.returncode == 0, h.explain(again)
    after = _runs(uri, "rungs")
    assert (
        sorted(
            (r.data.tags["mlflow.parentRunId"], r.data.tags["autotune.steps"])
            for r in after["rung"]
        )
        == rungs
    )
    assert len(after["verification"]) == len(verified), after["verification"]
    study = optuna.load_study(study_name="rungs", storage=storage)
    ids = {r.info.run_id for r in after["verification"]}
    for key in verified:
        assert study.user_attrs[key]["run_id"] in ids, study.user_attrs[key]

    # a third run finds nothing missing and logs nothing twice
    third = h.autotune([*cmd, "--resume"], cwd, token=h.new_token(), timeout=600)
    assert third.returncode == 0, h.explain(third)
    final = _runs(uri, "rungs")
    assert len(final["rung"]) == len(rungs) and len(final["verification"]) == len(verified)


def _runs(uri: str, name: str) -> dict[str, list[Any]]:
    """The experiment's runs by their `autotune.role` (the study's own: "study")."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(name)
    out: dict[str, list[Any]] = {}
    for r in client.search_runs([exp.experiment_id], max_results=1000):
        out.setdefault(r.data.tags.get("autotune.role", "study"), []).append(r)
    return out


def test_a_study_ends_early_when_the_rankings_agree(tmp_path: Path) -> None:
    # The PASHA stop below the target, in a real study: 6 trials screened at 30 steps, 5 of
    # them and the baseline promoted to 60 (min_promote 5); the agreement of those 6 rankings
    # (at least the 4 that can show one) is measured, and with `rungs.agreement=-1` any
    # measured tau agrees: the study decides at 60 of 120 steps and never runs the target.
    space = h.write(tmp_path, SPACE)
    uri = h.sqlite_uri(tmp_path)
    sets = ["rungs.grow=pasha", "rungs.agreement=-1", "rungs.agree_rungs=1"]
    sets += ["rungs.eta=2", "rungs.min_promote=5", "verify.top_k=0"]
    cmd = ["study", "--space", str(space), "--tracking-uri", uri]
    for s in sets:
        cmd += ["--set", s]
    run = h.autotune(cmd, tmp_path, token=h.new_token(), timeout=590)
    assert run.returncode == 0, h.explain(run)
    assert "decided at 60 of 120 steps (rankings agree" in run.stdout, h.explain(run)

    show = h.autotune(["show", "rungs", "--json"], tmp_path, timeout=120)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    assert [r["steps"] for r in summary["rungs"]] == [30, 60]  # the target never ran
    ag = summary["rungs"][1]["agreement"]
    assert ag["n"] == 6 and ag["note"] is None and ag["tau"] is not None
    assert 0 < ag["p"] <= 1 and ag["metric"] == "noise_per_drop"  # the default stability
    decided = summary["decided"]
    assert decided["steps"] == 60 and decided["reason"].startswith("rankings agree")
    assert summary["pick"]["steps"] == 60
    study_dir = tmp_path / "autotune-studies" / "rungs"
    assert not list((study_dir / "trials").glob("*-r2.json"))


def test_asynchronous_promotion_reaches_the_target_without_waiting_for_a_rung(
    tmp_path: Path,
) -> None:
    # 6 trials screened at 30 steps; 4 and the baseline promoted to 60 (eta 2, min_promote 4),
    # 2 at a time. With `promotion: async` a worker that frees up at 60 steps takes a trial in
    # the top half of those finished there on to 120 while the rung's other probes still run
    # (rung 2 is open early: with agree_rungs 2 one rung pair cannot stop the study); the
    # study decides at the target from what ran there and verifies there.
    space = h.write(tmp_path, SPACE)
    uri = h.sqlite_uri(tmp_path)
    sets = ["rungs.promotion=async", "rungs.grow=pasha", "rungs.eta=2", "rungs.min_promote=4"]
    sets += ["budget.concurrency=2"]
    cmd = ["study", "--space", str(space), "--tracking-uri", uri]
    for s in sets:
        cmd += ["--set", s]
    run = h.autotune(cmd, tmp_path, token=h.new_token(), timeout=590)
    assert run.returncode == 0, h.explain(run)
    assert "(asynchronous promotion)" in run.stdout, h.explain(run)
    why = h.promoted_without_waiting(run.stdout, mid=60, top=120)
    assert why is None, why + "\n" + h.explain(run)

    show = h.autotune(["show", "rungs", "--json"], tmp_path, timeout=120)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    assert [r["steps"] for r in summary["rungs"]] == [30, 60, 120]
    r1, r2 = summary["rungs"][1], summary["rungs"][2]
    assert r1["trials"] == 5 and 0 in r1["numbers"]
    assert 0 in r2["numbers"] and set(r2["numbers"]) <= set(r1["numbers"])
    assert r2["agreement"]["vs_steps"] == 60 and r2["agreement"]["n"] == len(r2["numbers"])
    assert summary["decided"]["steps"] == 120
    pick = summary["pick"]
    assert pick["steps"] == 120 and pick["number"] in r2["numbers"], pick
    assert summary["verified"] and {v["steps"] for v in summary["verified"]} == {120}
    study_dir = tmp_path / "autotune-studies" / "rungs"
    for rung, row, below in ((1, r1, 30), (2, r2, 60)):
        for n in row["numbers"]:
            rec = json.loads((study_dir / "trials" / f"{n:04d}-r{rung}.json").read_text())
            assert rec["summary"]["resumed_from_step"] == below, rec["summary"]["continuation"]
    assert not (study_dir / "state").exists(), "the states outlived the decision"
    # The baseline's verification seeds (1 and 2) each ran once: beside the top rung by a
    # worker the ladder had no promotion for, or in the verification phase after it.
    why = h.baseline_seeds_once(run.stdout)
    assert why is None, why + "\n" + h.explain(run)
    for seed in (1, 2):
        assert (study_dir / "verify" / f"0000-s120-seed{seed}.json").is_file()

    # A driver stopped while the baseline ran the top rung: its record missing,
    # no decision. The same command adopts every other record, whatever order they finished
    # in, and runs only that probe again; the rungs are the same, MLflow logs it once.
    import optuna

    kept = {p.name: p.stat().st_mtime_ns for p in (study_dir / "trials").glob("*-r*.json")}
    (study_dir / "trials" / "0000-r2.json").unlink()
    study = optuna.load_study(study_name="rungs", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    study.set_user_attr("autotune.decided", {})
    again = h.autotune(cmd, tmp_path, token=h.new_token(), timeout=400)
    assert again.returncode == 0, h.explain(again)
    assert "rung 2: trial 0 promoted to 120 steps" in again.stdout, h.explain(again)
    # one promotion line (the summary's count line says "N promoted to S steps" per rung too)
    lines = again.stdout.splitlines()
    promotions = [ln for ln in lines if re.match(r"rung \d+: .*promoted to", ln)]
    assert len(promotions) == 1, h.explain(again)
    assert "verification: baseline (trial" not in again.stdout, "the baseline was verified already"
    after = {p.name: p.stat().st_mtime_ns for p in (study_dir / "trials").glob("*-r*.json")}
    assert set(after) == set(kept)
    assert {k: v for k, v in after.items() if k != "0000-r2.json"} == {
        k: v for k, v in kept.items() if k != "0000-r2.json"
    }, "a finished rung probe ran again"
    resumed = json.loads(h.autotune(["show", "rungs", "--json"], tmp_path, timeout=120).stdout)
    assert [r.get("numbers") for r in resumed["rungs"]] == [
        r.get("numbers") for r in summary["rungs"]
    ]
    _, nested = rung_runs(uri)
    assert len(nested) == r1["trials"] + r2["trials"], "a rung probe logged twice"


def test_fill_idle_gives_a_worker_with_nothing_to_run_the_next_best_below_the_top(
    tmp_path: Path,
) -> None:
    # 8 trials screened at 10 steps, rungs 30 -> 90 -> 270; every searched trial sleeps
    # 0.1 s a step (the baseline, its environment knob unset, does not), 5 workers. The quota
    # max(2, ceil(8/3)) = 3 and the baseline start rung 1 together; the baseline finishes
    # first and goes on to 90. When the next one finishes, nothing may go on by the quota
    # (floor(2/3) = 0 searched ones), so with `rungs.fill_idle` the free worker takes it on
    # to 90 while rung 1's last probes still run: rung 2 holds more than the quota would have
    # put there, each filled probe continues its state at 30 steps, and it counts in the
    # rung's agreement like any other. Nothing is filled from the screen (it had ended) or
    # into the top rung.
    space = h.write(tmp_path, h.fill_space("rungs"))
    uri = h.sqlite_uri(tmp_path)
    cmd = ["study", "--space", str(space), "--tracking-uri", uri]
    run = h.autotune(cmd, tmp_path, token=h.new_token(), timeout=590)
    assert run.returncode == 0, h.explain(run)
    fills = h.fills(run.stdout)
    assert fills, "no worker was given a fill\n" + h.explain(run)
    assert {rung for rung, _ in fills} == {2}, fills  # only into rung 2 (90 steps)
    filled = [n for _, n in fills]

    show = h.autotune(["show", "rungs", "--json"], tmp_path, timeout=120)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    assert [r["steps"] for r in summary["rungs"]] == [10, 30, 90, 270]
    r1, r2 = summary["rungs"][1], summary["rungs"][2]
    assert r1["trials"] == 4, r1  # the quota and the baseline: nothing filled from the screen
    assert set(filled) <= set(r2["numbers"]) <= set(r1["numbers"]), (filled, r2)
    assert r2["agreement"]["n"] == r2["trials"]
    study_dir = tmp_path / "autotune-studies" / "rungs"
    for n in filled:
        rec = json.loads((study_dir / "trials" / f"{n:04d}-r2.json").read_text())
        assert rec["summary"]["resumed_from_step"] == 30, rec["summary"]["continuation"]
    assert not (study_dir / "state").exists(), "the states outlived the decision"
    # what was filled is recorded, not only said while it ran (a --quiet study says nothing)
    for k, row in ((1, r1), (2, r2)):
        for n in row["numbers"]:
            rec = json.loads((study_dir / "trials" / f"{n:04d}-r{k}.json").read_text())
            assert bool(rec.get("filled")) == (k == 2 and n in filled), (k, n, rec.get("filled"))
    assert r2.get("filled") == len(filled) and "filled" not in r1, (r1, r2)
    text = h.autotune(["show", "rungs"], tmp_path, timeout=120).stdout
    assert f"{len(filled)} promoted beyond the quota for a worker that would idle" in text, text
    trial_runs, nested = rung_runs(uri)
    tagged = {
        (int(r.data.tags["autotune.rung"]), trial_runs[r.data.tags["mlflow.parentRunId"]])
        for r in nested
        if r.data.tags.get("autotune.filled") == "true"
    }
    assert tagged == {(2, n) for n in filled}, tagged
