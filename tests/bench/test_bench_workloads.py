"""The benchmark's own workloads (benchmarks/workloads/): each is found by path, follows the
Workload protocol, and trains under the probe."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from autotune.errors import WorkloadError
from autotune.probe import ProbeConfig, run_probe
from autotune.probe.workload import Workload, resolve

ROOT = Path(__file__).resolve().parents[2]
REFS = {
    "heavy_tail": f"{ROOT}/benchmarks/workloads/heavy_tail.py:make",
    "gru_lm": f"{ROOT}/benchmarks/workloads/gru_lm.py:make",
}


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=sorted(REFS))
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_follows_the_protocol(name: str) -> None:
    wl = resolve(REFS[name], "tiny")
    assert isinstance(wl, Workload)
    assert (wl.name, wl.size) == (name, "tiny")
    assert 0 < wl.default_lr < wl.unstable_lr
    torch.manual_seed(0)
    model = wl.build_model()
    a, b = next(wl.batches(8, seed=3)), next(wl.batches(8, seed=3))
    assert all(
        torch.equal(x, y) for x, y in zip(a, b, strict=True)
    )  # the order is fixed by the seed
    c = next(wl.batches(8, seed=4))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))
    assert wl.samples(a) == 8
    loss = wl.loss(model, a)
    assert loss.ndim == 0 and math.isfinite(loss.item()) and loss.requires_grad
    held = wl.eval_batches(8)
    again = wl.eval_batches(8)
    assert held and all(torch.equal(x[0], y[0]) for x, y in zip(held, again, strict=True))


def test_sizes_are_checked(name: str) -> None:
    with pytest.raises(WorkloadError, match="huge"):
        resolve(REFS[name], "huge")


def test_trains_under_the_probe_at_its_default_lr(name: str) -> None:
    # heavy_tail's outlier batches are what a one-step divergence rule calls an explosion: the
    # run is carried on whatever the monitor says, as the false-divergence benchmark does.
    cfg = ProbeConfig(
        workload=REFS[name],
        steps=60,
        micro_batch=16,
        seed=1,
        threads=1,
        divergence={"stop_early": False},
    )
    summary = run_probe(cfg)
    assert summary["steps_run"] == 60
    loss = summary["series"]["loss"]
    assert all(math.isfinite(x) for x in loss)
    first, last = sum(loss[:5]) / 5, sum(loss[-10:]) / 10
    assert summary["initial_reference"]["source"] == "held_out"
    # heavy_tail's batch losses swing with its outliers: compare with the held-out start
    start = summary["initial_reference"]["loss"]
    assert last < 0.8 * max(first, start), (first, last, start)


def test_heavy_tail_targets_have_outliers() -> None:
    wl = resolve(REFS["heavy_tail"], "tiny")
    _, y = wl.data  # type: ignore[attr-defined]
    dev = (y - y.median()).abs().flatten()
    # Student-t with 2.5 degrees of freedom: the largest of ~8k draws is far out of a normal's reach
    assert float(dev.max()) > 15 * float(dev.median())


def test_gru_text_is_sums() -> None:
    wl = resolve(REFS["gru_lm"], "tiny")
    train, _ = wl.text  # type: ignore[attr-defined]
    sample = bytes(train[:200].tolist()).decode("ascii")
    for line in sample.split(";")[1:-1]:
        left, right = line.split("=")
        a, b = left.split("+")
        assert int(a) + int(b) == int(right)
    x, y = next(wl.batches(4, seed=0))
    assert torch.equal(x[:, 1:], y[:, :-1]) and wl.tokens((x, y)) == y.numel()
