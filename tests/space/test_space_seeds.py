"""Seeds: what NumPy, torch, Optuna and verification's offsets accept, checked when a space
is loaded."""

from __future__ import annotations

import pytest
from assets.space_text import BASE, edit
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune import space as sp
from autotune.errors import SpaceError

# ---------------------------------------------------------------------------------------------
# Seeds: what NumPy, torch, Optuna and verification's offsets accept, checked at load
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("probe.seed=99999999999999999999999", "probe.seed"),
        (f"probe.seed={2**64}", "probe.seed"),  # torch: "Overflow when unpacking long long"
        (f"probe.seed={sp.MAX_SEED + 1}", "probe.seed"),  # + verification's seeds: past NumPy's
        ("probe.seed=-1", "probe.seed"),
        (f"sampler.seed={2**32}", "sampler.seed"),  # Optuna: "Seed must be between 0 and 2**32-1"
        ("sampler.seed=-1", "sampler.seed"),
    ],
)
def test_a_seed_out_of_range_is_refused_at_load_naming_the_key(override: str, key: str) -> None:
    with pytest.raises(SpaceError) as e:
        sp.loads(BASE, source="s.yaml", overrides=[override])
    text = str(e.value)
    assert text.startswith(f"s.yaml: {key} (from --set): a seed is a whole number from 0 to ")
    assert "\n" not in text


def test_a_seed_out_of_range_in_the_file_names_its_line() -> None:
    text = edit("  precision: fp32\n", f"  precision: fp32\n  seed: {10**30}\n")
    line = text.splitlines().index(f"  seed: {10**30}") + 1
    with pytest.raises(SpaceError, match=rf"s\.yaml: probe\.seed \(line {line}\): a seed is"):
        sp.loads(text, source="s.yaml")


SEED_EDGES = [0, sp.MAX_SEED, sp.MAX_SEED + 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 2**64, -1]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.one_of(
        st.integers(0, sp.MAX_SEED), st.integers(-(2**70), 2**70), st.sampled_from(SEED_EDGES)
    )
)
def test_a_seed_accepted_at_load_never_fails_at_seeding(seed: int) -> None:
    import numpy as np
    import optuna
    import torch

    from autotune.probe.steps import seed_everything
    from autotune.recipe.seeds import seeds_for

    try:
        space = sp.loads(BASE, overrides=[f"probe.seed={seed}", f"sampler.seed={seed}"])
    except SpaceError as e:
        assert "a seed is a whole number" in str(e)
        return
    # The probe's seed and every seed verification derives from it (the most it may ask for).
    for s in [space.probe.seed, *seeds_for(space.probe.seed, sp.MAX_VERIFY_SEEDS)]:
        seed_everything(s)
        torch.Generator().manual_seed(s)  # a workload's data order
        np.random.seed(s)  # what HF's and Lightning's seeding call, without a modulo
    optuna.samplers.TPESampler(seed=space.sampler.seed)
