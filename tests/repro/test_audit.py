"""The operator audit: errors against float64 on the CPU, flags, MLflow round trip, comparison."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from autotune.cli import app
from autotune.errors import ReproError
from autotune.repro import audit

runner = CliRunner()


@pytest.fixture(scope="module")
def cpu_audit() -> dict[str, Any]:
    return audit.run_audit(device="cpu", dtype="fp32", seed=0)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite tracking store for the module (creating its tables takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def _entry(result: dict[str, Any], op: str, which: str) -> dict[str, Any]:
    (found,) = [e for e in result["entries"] if e["op"] == op and e["pass"] == which]
    return found


def _op(name: str) -> audit.Op:
    (found,) = [op for op in audit.OPS if op.name == name]
    return found


# --------------------------------------------------------------------------------------------
# Running the battery
# --------------------------------------------------------------------------------------------


def test_cpu_fp32_errors_are_small_and_finite_for_every_op(cpu_audit: dict[str, Any]) -> None:
    names = [op.name for op in audit.OPS]
    assert names == [
        "gelu",
        "layer_norm",
        "softmax",
        "log_softmax",
        "scaled_dot_product_attention",
        "matmul",
        "add",
        "mul",
        "div",
        "sqrt",
        "exp",
        "cross_entropy",
    ]
    assert [(e["op"], e["pass"]) for e in cpu_audit["entries"]] == [
        (n, p) for n in names for p in ("fwd", "bwd")
    ]
    for e in cpu_audit["entries"]:
        where = f"{e['op']}.{e['pass']}"
        assert e["error"] is None, where
        assert e["nonfinite"] == 0 and e["ref_nonfinite"] == 0, where
        for key in ("max_abs", "mean_abs", "max_rel", "max_scaled"):
            assert math.isfinite(e[key]) and e[key] >= 0, where
        # fp32 against float64: a few units in the last place, grown a little by reductions.
        assert e["max_scaled"] < 1e-4, where
        assert e["mean_abs"] <= e["max_abs"], where
        assert sum(e["hist"].values()) == e["numel"], where
        assert not e["flagged"], (where, e["reason"])
    assert cpu_audit["flagged"] == []
    assert cpu_audit["device"] == "cpu" and cpu_audit["dtype"] == "fp32"
    assert cpu_audit["fingerprint"]["platform"] in ("cpu", "cuda", "rocm")
    # add and mul are correctly rounded: at most half an ulp of fp32 (2^-24 ≈ 6e-8).
    for name in ("add", "mul"):
        assert _entry(cpu_audit, name, "fwd")["max_rel"] <= 2**-24 * 1.01
    # add's gradient is w itself: exact.
    assert _entry(cpu_audit, "add", "bwd")["max_abs"] == 0.0
    # The shapes are a transformer step's, not toy sizes.
    assert _entry(cpu_audit, "gelu", "fwd")["shape"] == [8, 128, 512]
    assert _entry(cpu_audit, "scaled_dot_product_attention", "bwd")["inputs"] == ["q", "k", "v"]


def test_an_injected_faulty_op_is_flagged() -> None:
    gelu = _op("gelu")
    bad = audit.Op("gelu", gelu.make, lambda x: F.gelu(x) + 1e-2, reference=F.gelu)
    result = audit.run_audit(device="cpu", dtype="fp32", ops=[bad, _op("add")])
    fwd = _entry(result, "gelu", "fwd")
    assert fwd["flagged"] and "max_scaled" in fwd["reason"]
    assert fwd["max_abs"] == pytest.approx(1e-2, rel=1e-3)
    # The offset has no gradient: the backward pass is still right, and add is untouched.
    assert not _entry(result, "gelu", "bwd")["flagged"]
    assert not _entry(result, "add", "fwd")["flagged"]
    assert result["flagged"] == ["gelu.fwd"]
    assert "1 flagged: gelu.fwd" in audit.format_audit(result)


def test_non_finite_outputs_and_raising_ops_are_flagged() -> None:
    def make(g: torch.Generator) -> dict[str, torch.Tensor]:
        return {"x": 1.0 + torch.rand(1000, generator=g, dtype=torch.float64)}

    overflow = audit.Op("overflow", make, lambda x: x * 1e38 * 10.0, backward=False)

    def broken(x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float64:
            raise RuntimeError("not implemented for this dtype")
        return x

    raising = audit.Op("raising", make, broken)
    result = audit.run_audit(device="cpu", dtype="fp32", ops=[overflow, raising])
    over = _entry(result, "overflow", "fwd")
    assert over["flagged"] and over["nonfinite"] == 1000 and over["hist"]["nonfinite"] == 1000
    assert [e["pass"] for e in result["entries"] if e["op"] == "overflow"] == ["fwd"]
    err = _entry(result, "raising", "fwd")
    assert err["flagged"] and err["error"].startswith("RuntimeError: not implemented")
    assert result["flagged"] == ["overflow.fwd", "raising.fwd"]
    text = audit.format_audit(result)
    assert "ERROR RuntimeError" in text and "FLAGGED" in text


def test_inputs_are_seeded_per_op() -> None:
    ops = [_op("mul")]
    a = audit.run_audit(device="cpu", dtype="bf16", seed=3, ops=ops)
    b = audit.run_audit(device="cpu", dtype="bf16", seed=3, ops=ops)
    c = audit.run_audit(device="cpu", dtype="bf16", seed=4, ops=ops)
    assert a["entries"] == b["entries"]
    assert a["entries"][0]["mean_abs"] != c["entries"][0]["mean_abs"]
    # An op's inputs do not depend on which other ops run.
    d = audit.run_audit(device="cpu", dtype="bf16", seed=3, ops=[_op("add"), *ops])
    assert d["entries"][2:] == a["entries"]


def test_bad_settings_are_user_errors() -> None:
    with pytest.raises(ReproError, match="unknown dtype 'fp8'"):
        audit.run_audit(device="cpu", dtype="fp8")
    with pytest.raises(ReproError, match="unknown device 'tpu'"):
        audit.run_audit(device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ReproError, match="torch sees no GPU"):
            audit.run_audit(device="cuda")


def test_format_audit_is_a_table(cpu_audit: dict[str, Any]) -> None:
    text = audit.format_audit(cpu_audit)
    for op in audit.OPS:
        assert op.name in text
    assert "nothing flagged" in text
    assert "float64" in text


# --------------------------------------------------------------------------------------------
# MLflow and comparison
# --------------------------------------------------------------------------------------------


def test_log_audit_and_load_it_back(cpu_audit: dict[str, Any], store: str) -> None:
    from mlflow.tracking import MlflowClient

    run_id = audit.log_audit(cpu_audit, store)
    client = MlflowClient(store)
    run = client.get_run(run_id)
    assert client.get_experiment(run.info.experiment_id).name == "autotune-audit"
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert tags["autotune.fp.hash"] == cpu_audit["fingerprint"]["hash"]
    assert tags["autotune.fp.platform"] == cpu_audit["fingerprint"]["platform"]
    assert tags["autotune.role"] == "audit"
    assert tags["autotune.audit.dtype"] == "fp32"
    metrics = run.data.metrics
    gelu = _entry(cpu_audit, "gelu", "fwd")
    assert metrics["gelu.fwd.max_abs"] == pytest.approx(gelu["max_abs"])
    assert metrics["cross_entropy.bwd.max_rel"] == pytest.approx(
        _entry(cpu_audit, "cross_entropy", "bwd")["max_rel"]
    )
    assert metrics["flagged_count"] == 0.0
    assert "audit.json" in [a.path for a in client.list_artifacts(run_id)]

    loaded = audit.load_audit(run_id, store)
    assert loaded.pop("run_id") == run_id
    assert loaded == json.loads(json.dumps(cpu_audit, default=str))


def test_compare_audits_marks_ops_that_differ(cpu_audit: dict[str, Any]) -> None:
    same = audit.compare_audits(cpu_audit, copy.deepcopy(cpu_audit))
    assert same["differs"] == []
    assert all(r["ratio"] == pytest.approx(1.0) for r in same["rows"])

    other = copy.deepcopy(cpu_audit)
    _entry(other, "softmax", "bwd")["max_abs"] *= 50  # a kernel 50x worse on "b"
    _entry(other, "matmul", "fwd")["max_abs"] *= 5  # within the factor
    cmp = audit.compare_audits(cpu_audit, other, factor=10.0)
    assert cmp["differs"] == ["softmax.bwd"]
    (row,) = [r for r in cmp["rows"] if r["differs"]]
    assert row["ratio"] == pytest.approx(50.0) and row["why"] == "max_abs b larger"
    text = audit.format_comparison(cmp)
    assert "DIFFERS" in text and "1 differ by more than 10x: softmax.bwd" in text
    with pytest.raises(ReproError, match="factor"):
        audit.compare_audits(cpu_audit, other, factor=1.0)


def test_cli_audit_logs_and_compares(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A short battery keeps the command quick; the full one ran in the fixture.
    monkeypatch.setattr(audit, "OPS", [_op("gelu"), _op("softmax")])
    result = runner.invoke(
        app, ["audit", "--device", "cpu", "--dtype", "fp32", "--json", "--tracking-uri", store]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [e["op"] for e in data["entries"]] == ["gelu", "gelu", "softmax", "softmax"]
    run_a = data["run_id"]
    assert audit.load_audit(run_a, store)["entries"] == data["entries"]

    result = runner.invoke(app, ["audit", "--device", "cpu", "--no-log"])
    assert result.exit_code == 0, result.output
    assert "nothing flagged" in result.stdout and "logged as run" not in result.stdout

    # The same numbers again: nothing differs (exit 0); a worse softmax: exit 1.
    run_same = audit.log_audit(data, store)
    worse = copy.deepcopy(data)
    _entry(worse, "softmax", "fwd")["max_abs"] *= 1000
    run_worse = audit.log_audit(worse, store)
    same = runner.invoke(app, ["audit", "--compare", run_a, run_same, "--tracking-uri", store])
    assert same.exit_code == 0, same.output
    assert "no op differs by more than 10x" in same.stdout
    differs = runner.invoke(app, ["audit", "--compare", run_a, run_worse, "--tracking-uri", store])
    assert differs.exit_code == 1, differs.output
    assert "softmax" in differs.stdout and "DIFFERS" in differs.stdout

    missing = runner.invoke(app, ["audit", "--compare", run_a, "nope", "--tracking-uri", store])
    assert missing.exit_code == 2
    assert missing.stderr.strip().splitlines() == [
        f"autotune: error: no run 'nope' in the MLflow store {store}"
    ]


def test_load_audit_of_a_run_that_is_not_an_audit(store: str, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    experiment_id = client.create_experiment("not-audits", artifact_location=tmp_path.as_uri())
    run_id = client.create_run(experiment_id).info.run_id
    with pytest.raises(ReproError, match=f"run {run_id} .* has no audit.json"):
        audit.load_audit(run_id, store)
