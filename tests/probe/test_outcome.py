"""A trial's outcome (`autotune.probe.outcome.Outcome`): the values the stores hold, unchanged,
and a member that reads, prints and serialises as its value."""

from __future__ import annotations

import json

import pytest

from autotune.probe.outcome import BROKE, MEASURED, Outcome
from autotune.probe.summary import ProbeStatus
from autotune.process.launcher import outcome_of


def test_the_values_are_the_strings_the_stores_hold() -> None:
    assert [o.value for o in Outcome] == ["complete", "diverged", "oom", "failed"]
    assert set(MEASURED) == set(Outcome) - {Outcome.FAILED}
    assert set(BROKE) == {Outcome.DIVERGED, Outcome.OOM}


@pytest.mark.parametrize("member", list(Outcome))
def test_a_member_is_its_value_as_a_string(member: Outcome) -> None:
    assert member == member.value and member.value == member
    assert str(member) == f"{member}" == member.value
    assert f"{member:>9}" == f"{member.value:>9}"
    assert json.dumps({"outcome": member}) == json.dumps({"outcome": member.value})
    assert {member.value: 1}[member] == 1 and member.value in {member}
    assert Outcome(member.value) is member


def test_a_probe_status_becomes_its_outcome() -> None:
    assert Outcome.of_status(ProbeStatus.OK.value) == "complete"
    assert Outcome.of_status("diverged") == "diverged"
    assert Outcome.of_status("oom") == "oom"
    assert type(Outcome.of_status("ok")) is str  # a plain string in the record


@pytest.mark.parametrize(
    ("status", "outcome", "cause"),
    [("ok", "complete", None), ("diverged", "diverged", "loss_explosion"), ("oom", "oom", "oom")],
)
def test_the_process_records_the_outcome_as_a_plain_string(
    status: str, outcome: str, cause: str | None
) -> None:
    summary = {"status": status, "divergence_cause": "loss_explosion"}
    out = outcome_of(0, False, 10.0, {"summary": summary}, "")
    assert out["outcome"] == outcome and type(out["outcome"]) is str and out["cause"] == cause
    failed = outcome_of(None, True, 10.0, {}, "")
    assert failed["outcome"] == Outcome.FAILED and type(failed["outcome"]) is str
    assert failed["cause"] == "timeout"


def test_a_time_out_names_a_hung_collective_only_for_several_processes() -> None:
    one = outcome_of(None, True, 30.0, {}, "")["error"]
    assert one == (
        "the probe ran past the trial time limit of 30 s and was killed (too slow, or stuck: "
        "raise budget.trial_timeout_s)"
    )
    ddp = outcome_of(None, True, 30.0, {}, "", multi=True)["error"]
    assert "(hung collective or too slow: raise budget.trial_timeout_s)" in ddp


def test_a_failure_in_autotunes_words_is_not_prefixed_with_a_type_name() -> None:
    """`sys.exit("msg")` in a script read "ScriptFailure: the script exited with status 1: msg",
    a type no user raised; an exception of the script's keeps its type."""
    said = {"cause": "exception", "message": "the script exited with status 1: msg"}
    own = outcome_of(1, False, 10.0, {"error": {**said, "error_type": "ScriptFailure"}}, "")
    assert own["error"] == "the script exited with status 1: msg"
    raised = {"cause": "exception", "error_type": "ValueError", "message": "bad"}
    assert outcome_of(1, False, 10.0, {"error": raised}, "")["error"] == "ValueError: bad"
