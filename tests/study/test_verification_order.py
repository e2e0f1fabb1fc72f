"""The order the study's verification hands its probes out in: interleaved by seed (each seed's
runs of the baseline and of every candidate together), so a change in the machine's load is not
read as a paired difference between configurations run one after the other. No Ray, no probe:
`run_jobs` is stubbed and records the jobs it is given."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from assets import studies as h

from autotune import space as sp
from autotune.recipe.seeds import seeds_for
from autotune.study import pick
from autotune.study import verification as vn
from autotune.study.folder import verify_path


def candidate(number: int, space: sp.Space, baseline: bool = False) -> pick.Candidate:
    knobs = space.baseline_knobs() if baseline else {**space.baseline_knobs(), "clip_norm": 0.5}
    return pick.Candidate(
        number=number,
        values=[0.1],
        metrics={},
        knobs=knobs,
        env=space.baseline_env(),
        params={},
        baseline=baseline,
        steps=60,
    )


def handed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, todo: list[pick.Candidate], space: sp.Space
) -> list[tuple[int, int]]:
    jobs: list[Any] = []

    def run_jobs(_space: Any, _ray: Any, given: list[Any], *_a: Any) -> bool:
        jobs.extend(given)
        return True

    monkeypatch.setattr(vn, "to_verify", lambda _study, _space: todo)
    monkeypatch.setattr(vn, "decided_steps", lambda _study, _space: 60)
    monkeypatch.setattr(vn, "run_jobs", run_jobs)
    monkeypatch.setattr(vn, "_record_verified", lambda *_a: None)  # no study, no MLflow here
    opts = SimpleNamespace(space=space, quiet=True)
    assert vn.verify_phase(opts, None, None, tmp_path, None) is False  # type: ignore[arg-type]
    for job in jobs:  # each job is the candidate's probe at that seed
        c, seed = job.key
        assert job.probe.seed == seed and job.probe.knobs == c.knobs
    return [(j.key[1], j.key[0].number) for j in jobs]


def test_the_baseline_and_the_candidates_run_interleaved_by_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    space = sp.loads(h.mlp_space("o", trials=4), source="o", overrides=["verify.seeds=3"])
    todo = [candidate(3, space), candidate(0, space, baseline=True), candidate(5, space)]
    s1, s2, s3 = seeds_for(space.probe.seed, 3)
    # per seed the baseline first (the reference of the relative constraints), then the
    # candidates in their order
    assert handed_out(tmp_path, monkeypatch, todo, space) == [
        (s1, 0),
        (s1, 3),
        (s1, 5),
        (s2, 0),
        (s2, 3),
        (s2, 5),
        (s3, 0),
        (s3, 3),
        (s3, 5),
    ]


def test_seeds_read_back_are_left_out_and_the_rest_keep_seed_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    space = sp.loads(h.mlp_space("o", trials=4), source="o", overrides=["verify.seeds=3"])
    todo = [candidate(0, space, baseline=True), candidate(2, space)]
    s1, s2, s3 = seeds_for(space.probe.seed, 3)
    # the baseline's seeds ran beside the top rung (`beside`): only the candidate's remain
    for seed in (s1, s2, s3):
        path = verify_path(tmp_path, 0, seed, 60)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"seed": seed, "outcome": "failed", "number": 0}))
    assert handed_out(tmp_path, monkeypatch, todo, space) == [(s1, 2), (s2, 2), (s3, 2)]


def test_a_failed_seed_says_why_on_its_progress_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review saw `trial 0 seed 2: failed (exception)` and nothing more while the study ran;
    the error was only in verify/*.json. The line carries its one printable line."""
    space = sp.loads(h.mlp_space("o", trials=4), source="o", overrides=["verify.seeds=2"])
    error = "RuntimeError: boom \x1b[31mon seed 2\nand a second line the script printed"

    def run_jobs(_space: Any, _ray: Any, given: list[Any], _t: Any, done: Any, *_a: Any) -> bool:
        for job in given:
            out = {"outcome": "failed", "cause": "exception", "error": error, "summary": None}
            done(job, out, 1.0)
        return True

    monkeypatch.setattr(vn, "to_verify", lambda _study, _space: [candidate(3, space)])
    monkeypatch.setattr(vn, "decided_steps", lambda _study, _space: 60)
    monkeypatch.setattr(vn, "run_jobs", run_jobs)
    monkeypatch.setattr(vn, "_record_verified", lambda *_a: None)
    opts = SimpleNamespace(space=space, quiet=False)
    vn.verify_phase(opts, None, None, tmp_path, None)  # type: ignore[arg-type]
    line = next(x for x in capsys.readouterr().out.splitlines() if "trial 3 seed" in x)
    assert "failed (exception): " in line and "RuntimeError: boom" in line, line
    assert "\x1b" not in line and "second line" not in line
