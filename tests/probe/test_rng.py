"""Every RNG a probe draws from, captured and put back (`autotune.probe.rng`): what a probe's
state keeps and what the initial-loss reference restores."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from autotune.probe import rng


def draws() -> list[Any]:
    return [random.random(), float(np.random.rand()), float(torch.rand(1))]


def test_restore_puts_every_rng_back() -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    state = rng.capture()
    first = draws()
    assert draws() != first  # they moved on
    rng.restore(state)
    assert draws() == first


def test_a_state_read_back_from_a_file_restores_the_same(tmp_path: Path) -> None:
    torch.manual_seed(4)
    path = tmp_path / "rng.pt"
    torch.save(rng.capture(), path)
    first = draws()
    loaded = torch.load(path, weights_only=True)  # plain data only; tuples may come back lists
    rng.restore(loaded)
    assert draws() == first
    listed = {**loaded, "python": list(loaded["python"])}
    rng.restore(listed)
    assert draws() == first
