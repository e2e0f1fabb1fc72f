"""What a workload factory's methods return is checked before the probe uses it: a loss() that is
not one number, and a samples()/tokens() count that is negative or not finite, fail with one
line naming the method and what it returned (not a torch error, not a negative throughput).
Real workloads (subclasses of the built-in mlp), the real probe loop."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from autotune.errors import WorkloadError
from autotune.probe import run_probe
from autotune.probe.config import ProbeConfig

ODD = textwrap.dedent(
    """
    import torch
    from autotune.workloads.mlp import MLPWorkload

    class Odd(MLPWorkload):
        def __init__(self, size, what):
            super().__init__(size)
            self.what = what

        def loss(self, model, batch):
            out = super().loss(model, batch)
            if self.what == "string":
                return "0.5"
            if self.what == "vector":
                return out * torch.ones(3)
            if self.what == "one":
                return out.reshape(1)  # one number in a 1-d tensor: fine
            return out

        def samples(self, batch):
            n = super().samples(batch)
            lies = {"negative": -5, "nan": float("nan"), "huge": 10**15, "huge_float": 1e300}
            return lies.get(self.what, n)

        def tokens(self, batch):
            return -1 if self.what == "negative_tokens" else super().tokens(batch)

    def make(size="tiny", what="ok"):
        return Odd(size, what)

    for what in ("string", "vector", "one", "negative", "nan", "negative_tokens", "huge",
                 "huge_float"):
        globals()[what] = lambda size="tiny", what=what: Odd(size, what)
    """
)


def _probe(tmp_path: Path, factory: str) -> dict:
    (tmp_path / "odd.py").write_text(ODD)
    cfg = ProbeConfig(workload=f"{tmp_path / 'odd.py'}:{factory}", steps=10, micro_batch=8)
    return run_probe(cfg)


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("string", r"loss\(\) returned str '0\.5', not a one-element tensor"),
        ("vector", r"loss\(\) returned a tensor of shape \(3,\), not a one-element tensor"),
    ],
)
def test_a_loss_that_is_not_one_number_names_loss(tmp_path: Path, factory: str, said: str) -> None:
    with pytest.raises(WorkloadError, match=said) as e:
        _probe(tmp_path, factory)
    assert str(e.value).startswith("workload '") and "\n" not in str(e.value)


def test_a_one_element_loss_trains(tmp_path: Path) -> None:
    r = _probe(tmp_path, "one")
    assert r["status"] == "ok" and r["steps_run"] == 10


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("negative", r"samples\(\) returned -5: it must return how many samples"),
        ("nan", r"samples\(\) returned nan"),
        ("negative_tokens", r"tokens\(\) returned -1"),
        # a count no step holds: a throughput of 10^18 a second, and compute lines to match
        ("huge", r"samples\(\) returned 1000000000000000: .* a finite number from 0 to 1e\+12"),
        ("huge_float", r"samples\(\) returned 1e\+300"),
    ],
)
def test_a_count_below_zero_not_finite_or_impossible_names_the_method(
    tmp_path: Path, factory: str, said: str
) -> None:
    with pytest.raises(WorkloadError, match=said):
        _probe(tmp_path, factory)
