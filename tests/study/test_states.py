"""Which probes of a study keep a state and which continue one (`autotune.study.states`), and
the states' removal. Plain data: no probe runs here (tests/study/test_study_rungs.py runs a
study)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from assets import studies as h

from autotune import space as sp
from autotune.probe import ProbeConfig
from autotune.study import states as ss


def space(*overrides: str) -> sp.Space:
    text = h.mlp_space("s", trials=4)
    return sp.loads(text, source="s", overrides=["budget.target_steps=90", *overrides])


def test_the_screen_keeps_a_state_only_when_a_rung_may_continue_it(tmp_path: Path) -> None:
    knobs = {"clip_norm": 1.0}
    cfg = ss.screen_probe(space(), tmp_path, 7, knobs, {}, rungs_above=True)
    assert cfg.save_state == str(tmp_path.resolve() / "state" / "0007-s30.pt")
    assert cfg.resume_from is None and cfg.steps == 30 and cfg.schedule_steps == 90
    assert ss.screen_probe(space(), tmp_path, 7, knobs, {}, rungs_above=False).save_state is None
    off = space("rungs.continuation=false")
    assert ss.screen_probe(off, tmp_path, 7, knobs, {}, rungs_above=True).save_state is None


def test_a_rung_probe_continues_the_rung_below_and_keeps_its_state_below_the_top(
    tmp_path: Path,
) -> None:
    mid = ss.rung_probe(space(), tmp_path, 3, {}, {}, steps=60, below=30, top=False)
    assert mid.steps == 60 and mid.resume_from == str(ss.state_path(tmp_path, 3, 30))
    assert mid.save_state == str(ss.state_path(tmp_path, 3, 60))
    top = ss.rung_probe(space(), tmp_path, 3, {}, {}, steps=90, below=60, top=True)
    assert top.resume_from == str(ss.state_path(tmp_path, 3, 60)) and top.save_state is None
    off = ss.rung_probe(
        space("rungs.continuation=false"), tmp_path, 3, {}, {}, steps=60, below=30, top=False
    )
    assert off.resume_from is None and off.save_state is None


def test_a_probe_that_cannot_continue_is_left_as_it_is(tmp_path: Path) -> None:
    for cfg in (
        ProbeConfig(workload="mlp", script="train.py", world_size=2),
        ProbeConfig(workload="mlp", oom_retry=True),
        ProbeConfig(workload="mlp", world_size=2, measure_scaling=True),
    ):
        assert ss.with_states(cfg, tmp_path, 1, steps=30, save=True, resume_steps=10) == cfg
    plain = ProbeConfig(workload="mlp")
    assert ss.with_states(plain, tmp_path, 1, steps=30, save=True) == replace(
        plain, save_state=str(ss.state_path(tmp_path, 1, 30))
    )
    # A script of one process continues through its state hook (trial.resume).
    script = ProbeConfig(workload="script:train.py", script="train.py")
    assert ss.with_states(script, tmp_path, 1, steps=30, save=False, resume_steps=10) == replace(
        script, resume_from=str(ss.state_path(tmp_path, 1, 10))
    )


def test_states_are_removed_by_length_then_all(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    folder.mkdir()
    for name in ("0001-s30.pt", "0002-s30.pt.rank1", "0001-s60.pt", "0001-s60.pt.rank0", "x.txt"):
        (folder / name).write_bytes(b"x")
    (folder / "0003-s30.pt.d").mkdir()  # a script's HF or Lightning checkpoint
    (folder / "0003-s30.pt.d" / "optimizer.pt").write_bytes(b"x")
    ss.remove_states(tmp_path, steps=[30])
    assert sorted(p.name for p in folder.iterdir()) == ["0001-s60.pt", "0001-s60.pt.rank0", "x.txt"]
    (folder / "0002-s60.pt").write_bytes(b"x")
    ss.remove_states(tmp_path, steps=[60], keep=[1])  # promoted: trial 1; trial 2's go now
    assert sorted(p.name for p in folder.iterdir()) == ["0001-s60.pt", "0001-s60.pt.rank0", "x.txt"]
    ss.remove_states(tmp_path)
    assert not folder.exists()
    ss.remove_states(tmp_path)  # nothing there: nothing to do


def test_a_decided_study_keeps_no_states(tmp_path: Path) -> None:
    """More trials screened after the decision: no rung will read their states."""
    import optuna

    from autotune.study import rung_phase as rp
    from autotune.study.options import StudyOptions

    study_dir = h.recorded_study(tmp_path, "s", trials=2, finished=2)
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    sp_ = space()
    assert rp.pending(study, sp_)
    study.set_user_attr("autotune.decided", {"steps": 90, "target_steps": 90})
    assert not rp.pending(study, sp_)
    (study_dir / "state").mkdir()
    (study_dir / "state" / "0002-s30.pt").write_bytes(b"x")
    assert rp.rung_phase(StudyOptions(space=sp_), study, None, study_dir, None) is False
    assert not (study_dir / "state").exists()


def test_rungs_continuation_takes_a_boolean_and_names_the_key() -> None:
    import pytest

    assert space().rungs.continuation is True
    assert space("rungs.continuation=false").rungs.continuation is False
    with pytest.raises(sp.SpaceError, match=r"rungs\.continuation \(from --set\): .*boolean"):
        space("rungs.continuation=maybe")
