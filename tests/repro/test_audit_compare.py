"""`audit --compare` (a black-box review): an `audit.json` whose `max_abs` was "abc" or an
entry without `op` was a traceback (rc 1), NaN on every entry read as "no op differs", -1
passed; an audit with 4 ops of 24 listed the other 20 as "differ by more than 10x"; headers
left out threads and seed; `--compare A --no-log` looked for a run '--no-log'; `--factor
1.0000001` printed "1x"."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from assets.cli import invoke, one_line_error

from autotune.audit_form import audit_problem
from autotune.repro import audit
from autotune.repro.audit_compare import compare_audits, factor_text, format_comparison


@pytest.fixture(scope="module")
def small() -> dict[str, Any]:
    """A real audit of two ops (four entries: forward and backward)."""
    ops = [op for op in audit.OPS if op.name in ("gelu", "add")]
    return audit.run_audit(device="cpu", dtype="fp32", seed=0, ops=ops)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def _logged(result: dict[str, Any], store: str) -> str:
    """`result` as an audit run whose audit.json is exactly it (as a hand-edited one would be)."""
    from mlflow.tracking import MlflowClient

    run_id = audit.log_audit(_valid(result), store)
    MlflowClient(store).log_text(run_id, json.dumps(result), "audit.json")
    return run_id


def _valid(result: dict[str, Any]) -> dict[str, Any]:
    """What log_audit needs to write its metrics, whatever the entries hold."""
    return {**result, "entries": [], "flagged": []}


@pytest.mark.parametrize(
    ("key", "value", "where"),
    [
        ("max_abs", "abc", "entries[1].max_abs"),
        ("max_abs", math.nan, "entries[1].max_abs"),
        ("max_abs", -1.0, "entries[1].max_abs"),
        ("op", None, "entries[1].op"),
    ],
)
def test_a_malformed_entry_is_refused_in_one_line(
    small: dict[str, Any], store: str, key: str, value: Any, where: str
) -> None:
    bad = copy.deepcopy(small)
    if value is None:
        del bad["entries"][1][key]
    else:
        bad["entries"][1][key] = value
    good, broken = _logged(small, store), _logged(bad, store)
    result = invoke("audit", "--compare", good, broken, "--tracking-uri", store)
    one_line_error(result, f"run {broken}", f"audit.json {where}")


def test_the_full_audit_form_allows_an_unmeasured_error() -> None:
    entry = {"op": "ce", "pass": "fwd", "max_abs": None, "nonfinite": 1}
    form = {"dtype": "fp16", "entries": [entry]}
    assert audit_problem(form, unmeasured=True) is None
    assert audit_problem(form) == (
        ["entries[0]", "max_abs"],
        "required (the op's largest error against float64)",
    )


def test_missing_ops_are_counted_apart(small: dict[str, Any], store: str) -> None:
    cut = {**copy.deepcopy(small), "entries": small["entries"][:1]}
    cmp = compare_audits(small, cut)
    assert cmp["differs"] == []
    assert cmp["missing"] == {"a": [], "b": ["gelu.bwd", "add.fwd", "add.bwd"]}
    text = format_comparison(cmp)
    assert "differ by more than" not in text.replace("no op differs by more than", "")
    assert "3 missing from b (only in a, not compared): gelu.bwd, add.fwd, add.bwd" in text
    assert "MISSING from b" in text and "DIFFERS" not in text
    cut_run, whole_run = _logged(cut, store), _logged(small, store)
    result = invoke("audit", "--compare", cut_run, whole_run, "--tracking-uri", store)
    assert result.exit_code == 1, result.output
    assert "3 missing from a" in result.stdout


def test_headers_name_threads_and_seed(small: dict[str, Any]) -> None:
    other = copy.deepcopy(small)
    other["seed"] = 7
    other["fingerprint"]["env"]["torch_threads"] = 1
    small = copy.deepcopy(small)
    small["fingerprint"]["env"]["torch_threads"] = 2
    text = format_comparison(compare_audits(small, other))
    a, b = text.splitlines()[:2]
    assert "2 threads, seed 0" in a and "1 threads, seed 7" in b
    assert "note: the two audits ran at different CPU thread counts" in text
    assert "note: the two audits ran on inputs of different seeds" in text
    same = format_comparison(compare_audits(small, copy.deepcopy(small)))
    assert "note:" not in same


def test_factor_is_printed_with_its_digits(small: dict[str, Any]) -> None:
    assert factor_text(1.0000001) == "1.0000001" and factor_text(10.0) == "10"
    text = format_comparison(compare_audits(small, copy.deepcopy(small), factor=1.0000001))
    assert "more than 1.0000001x" in text


def test_an_option_is_not_taken_for_a_run_id() -> None:
    result = invoke("audit", "--compare", "abc", "--no-log")
    one_line_error(result, "--compare takes two run ids", "'--no-log'")
