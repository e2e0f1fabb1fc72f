"""benchmarks/false_divergence.py --from-cache: saved series are labelled by the divergence
monitor and judged against their group's best final loss, without training anything."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from assets.bench import imported

TARGET = 100


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    with imported("false_divergence") as module:
        yield module


def save(path: Path, config: str, loss: np.ndarray, lr: float = 0.1) -> None:
    meta = {
        "workload": "mlp",
        "config": config,
        "seed": 1,
        "target": TARGET,
        "steps_run": TARGET,
        "precision": "fp32",
        "initial_loss": 2.0,
        "clipping": False,
        "knobs": {"lr": lr},
        "probe_cause": None,
        "probe_step": None,
        "wall_s": 0.0,
    }
    n = len(loss)
    with open(path / f"mlp-{config}-s1.npz", "wb") as fh:
        np.savez(
            fh,
            meta=np.array(json.dumps(meta)),
            loss=loss,
            grad_norm=np.ones(n),
            scale=np.ones(n),
            skipped=np.zeros(n),
        )


def test_from_cache_labels_and_judges(bench: ModuleType, tmp_path: Path) -> None:
    steps = np.arange(TARGET)
    clean = 2.0 * np.exp(-steps / 30) + 0.5  # ends at ~0.5: the best
    blip = clean.copy()
    blip[5] = math.nan  # one non-finite step, then it trains on: a false divergence
    broken = clean.copy()
    broken[20:] = math.nan  # non-finite from step 20 to the end: a true one
    worse = clean + 0.2  # never diverged, ends 40% above the best
    for config, loss in [
        ("default_lr", clean),
        ("defaults", blip),
        ("clip1", broken),
        ("warmup50", worse),
    ]:
        save(tmp_path, config, loss)
    # at another learning rate: a study of its own, whose best it is, but 60% above the workload's
    other = clean + 0.3
    other[7] = math.nan
    save(tmp_path, "clip0.3_warmup50", other, lr=0.003)
    out = tmp_path / "result.json"
    argv = ["--from-cache", "--series-dir", str(tmp_path), "--workloads", "mlp"]
    assert bench.main([*argv, "--seeds", "1", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    row = record["table"]["mlp"]
    assert (row["runs"], row["diverged"], row["truly"]) == (5, 3, 1)
    assert (row["false_study"], row["false_all"]) == (2, 1)
    assert row["saved"] == pytest.approx((TARGET - 20) / TARGET)
    by_config = {r["config"]: r for r in record["runs"]}
    assert by_config["defaults"]["step"] == 5 and by_config["defaults"]["false_study"]
    assert by_config["clip1"]["final_loss"] is None  # ends non-finite: not within 10% of anything
    assert by_config["warmup50"]["cause"] is None


def test_from_cache_without_series_says_so(bench: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no saved series"):
        bench.main(["--from-cache", "--series-dir", str(tmp_path), "--json", ""])
