"""The probe's typed summary (`autotune.probe.summary`): the training loop and a script session
report the same fields through it, and a summary read back gives back the same dict."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

import pytest

from autotune.probe import ProbeConfig, ProbeStatus, ProbeSummary, run_probe
from autotune.probe.script_run import run_script
from autotune.probe.summary import Continued, DivergenceRecord

SCRIPT = textwrap.dedent(
    """
    import autotune
    trial = autotune.trial(steps=99, micro_batch=3)
    for i in range(trial.steps):
        trial.report(i, loss=3.0 - 0.1 * i, grad_norm=1.0, accuracy=0.1 * i)
    """
)


@pytest.fixture(scope="module")
def loop_summary() -> dict[str, Any]:
    return run_probe(ProbeConfig(workload="mlp", steps=6, micro_batch=8, threads=1))


@pytest.fixture(scope="module")
def script_summary(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    script = tmp_path_factory.mktemp("script") / "train.py"
    script.write_text(SCRIPT)
    cfg = ProbeConfig(workload="script:train.py", steps=6, script=str(script), args=["--x"])
    return run_script(cfg)


def test_the_loop_and_a_script_report_the_same_fields_but_their_own_parts(
    loop_summary: dict[str, Any], script_summary: dict[str, Any]
) -> None:
    loop, script = set(loop_summary), set(script_summary)
    # what only a script has: its path, its file's hash and what applied the knobs in it (both
    # report the continuation of a shorter probe: a script through its trial.resume hook)
    assert set(Continued.KEYS) <= loop & script
    assert loop - script == set()
    assert script - loop == {"script", "args", "script_sha256", "script_applied", "first_report_s"}
    # and together they are every field of the type: none is left unreported
    full = dataclasses.replace(
        ProbeSummary.from_dict(loop_summary),
        script=ProbeSummary.from_dict(script_summary).script,
    )
    assert set(full.to_dict()) == loop | script
    assert script_summary["script"].endswith("train.py") and script_summary["args"] == ["--x"]
    assert script_summary["series"]["metric.accuracy"] == pytest.approx([0.1 * i for i in range(6)])


@pytest.mark.parametrize("which", ["loop_summary", "script_summary"])
def test_a_summary_read_back_is_the_same_dict_in_the_same_order(
    which: str, request: pytest.FixtureRequest
) -> None:
    d = request.getfixturevalue(which)
    s = ProbeSummary.from_dict(d)
    assert s.status is ProbeStatus.OK and not s.diverged and s.steps_run == 6
    assert isinstance(s.divergence, DivergenceRecord) and s.divergence.spike_count == 0
    back = s.to_dict()
    assert back == d and list(back) == list(d)
    assert type(back["status"]) is str  # the plain string on the wire, not the enum


def test_a_diverged_run_reads_back_with_its_cause() -> None:
    d = run_probe(
        ProbeConfig(workload="mlp", steps=60, micro_batch=16, threads=1, knobs={"lr": 1e4})
    )
    s = ProbeSummary.from_dict(d)
    assert s.status is ProbeStatus.DIVERGED and s.diverged and d["diverged"] is True
    assert s.divergence_cause == d["divergence_cause"] is not None
    assert s.continued is not None and s.continued.resumed_from_step == 0
    assert s.to_dict() == d


def test_keys_added_after_the_probe_are_kept(loop_summary: dict[str, Any]) -> None:
    # what a DDP rank and the supervisor add (autotune.process): kept as they were, at the end
    d = {**loop_summary, "world_size": 2, "rank_env": [{"A": "1"}], "oom_retried": False}
    s = ProbeSummary.from_dict(d)
    assert s.extra == {"world_size": 2, "rank_env": [{"A": "1"}], "oom_retried": False}
    assert list(s.to_dict()) == list(d) and s.to_dict() == d


def test_an_older_record_reads_back_without_the_later_keys(loop_summary: dict[str, Any]) -> None:
    later = [
        "divergence_spike_count",
        "divergence_max_loss_ratio",
        "divergence_spikes",
        "divergence_onset_step",
        "divergence_withdrawn",
        "initial_reference",
        "schedule_steps",
        "samples_seen",
        "tokens_seen",
        *Continued.KEYS,
    ]
    old = {k: v for k, v in loop_summary.items() if k not in later}
    s = ProbeSummary.from_dict(old)
    assert s.divergence is None and s.continued is None and s.initial_reference is None
    assert s.schedule_steps is None and s.samples_seen is None
    assert s.to_dict() == old


@pytest.mark.parametrize("key", ["status", "steps_run", "metrics", "series", "wall_s"])
def test_a_record_without_a_key_every_version_wrote_names_it(
    loop_summary: dict[str, Any], key: str
) -> None:
    d = {k: v for k, v in loop_summary.items() if k != key}
    with pytest.raises(ValueError, match=f"no '{key}'"):
        ProbeSummary.from_dict(d)


def test_an_unknown_status_or_another_event_is_refused(loop_summary: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="status 'complete' is none of ok, diverged, oom"):
        ProbeSummary.from_dict({**loop_summary, "status": "complete"})
    with pytest.raises(ValueError, match="event is 'start'"):
        ProbeSummary.from_dict({**loop_summary, "event": "start"})
    part = {k: v for k, v in loop_summary.items() if k != "samples_run"}
    with pytest.raises(ValueError, match="no 'samples_run'"):
        ProbeSummary.from_dict(part)


def test_status_values_are_the_strings_the_records_hold() -> None:
    assert [s.value for s in ProbeStatus] == ["ok", "diverged", "oom"]
    assert ProbeStatus.of(False, None) is ProbeStatus.OK
    assert ProbeStatus.of(False, "loss_explosion") is ProbeStatus.DIVERGED
    assert ProbeStatus.of(True, "loss_explosion") is ProbeStatus.OOM  # an OOM stays an OOM
    assert ProbeStatus.OOM == "oom"


def test_a_script_run_on_its_own_may_have_no_path(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    d = run_script(ProbeConfig(workload="script", steps=3, script=str(script)))
    s = ProbeSummary.from_dict({**d, "script": None})
    assert s.script is not None and s.script.path is None
    assert s.to_dict()["script"] is None


@pytest.mark.parametrize("which", ["loop_summary", "script_summary"])
def test_the_loss_series_is_read_the_same_from_either_summary(
    which: str, request: pytest.FixtureRequest
) -> None:
    """`loss_of`, what `autotune verify` and a study's verification keep of a seed's run."""
    from autotune.probe.summary import loss_of

    summary = request.getfixturevalue(which)
    loss = loss_of(summary)
    assert len(loss) == 6 and loss == summary["series"]["loss"]
    assert loss is not summary["series"]["loss"]  # a copy: the record is slimmed after
    assert loss_of(None) == [] and loss_of({"metrics": {}}) == []
