"""The `batch` knob at equal samples: validation at load, the one step conversion
(`autotune.probe.steps_at_batch`), real probes at two batches, and the recipe and its exports."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from autotune import space as sp
from autotune.cli import app
from autotune.errors import RecipeError, SpaceError
from autotune.probe import run_probe, steps_at_batch
from autotune.recipe import Recipe
from autotune.recipe import exporters as formats
from autotune.recipe import verify as vf


def space(knobs: str, probe: str = "steps: 20, batch: 16, device: cpu") -> sp.Space:
    return sp.loads(f"name: b\nworkload: mlp\nprobe: {{{probe}}}\nknobs:\n{knobs}")


# ----- validation at load ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("knobs", "fragment"),
    [
        (
            "  batch: {low: 8, high: 32, step: 4}\n  accum_steps: {choices: [1, 8]}\n",
            "knobs.batch (line 5): batch 12 is not divisible by knobs.accum_steps value 8",
        ),
        (
            "  batch: {choices: [16, 24]}\n  accum_steps: {choices: [2, 16]}\n",
            "batch 24 is not divisible by knobs.accum_steps value 16",
        ),
        ("  batch: 12\n  accum_steps: 8\n", "batch 12 is not divisible by knobs.accum_steps"),
        ("  batch: 0\n", "knobs.batch (line 5): 0 is out of range"),
        (
            "  batch: {choices: [8, 64]}\n",
            "at batch 64 the probe runs 5 optimizer steps (probe.steps 20 count at probe.batch "
            "16: equal samples); at least 10 are needed: raise probe.steps to 40",
        ),
    ],
)
def test_a_bad_batch_is_one_error_naming_the_key(knobs: str, fragment: str) -> None:
    with pytest.raises(SpaceError) as e:
        space(knobs)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_a_valid_batch_domain_loads_and_round_trips() -> None:
    s = space("  batch: {low: 8, high: 32, step: 8}\n  accum_steps: {choices: [1, 2, 4, 8]}\n")
    assert sp.loads(sp.dump(s)) == s
    # The domain's default (the `midpoint` config) is the reference batch; the baseline runs it.
    assert s.default_value("batch") == 16
    assert sp.probe_config(s, knobs=s.baseline_knobs()).steps == 20


@pytest.mark.parametrize(
    ("probe", "knobs"),
    [
        ("steps: 20, micro_batch: 8, batch: 16", ""),  # accum 1: the micro-batch is the batch
        ("steps: 20, micro_batch: 4, batch: 16", "  accum_steps: 2\n"),
        ("steps: 20, micro_batch: 8, batch: 16", "  accum_steps: {choices: [1, 2]}\n"),
    ],
)
def test_a_micro_batch_that_disagrees_with_the_batch_is_refused(probe: str, knobs: str) -> None:
    # The batch wins: the micro-batch was silently ignored (a black-box review ran 16, not 8).
    with pytest.raises(
        SpaceError,
        match=r"probe\.micro_batch \(line 3\): \d+ conflicts with "
        r"probe\.batch 16 .*give one",
    ):
        space(knobs or "  lr: 0.01\n", probe)


@pytest.mark.parametrize(
    ("probe", "knobs"),
    [
        ("steps: 20, micro_batch: 16, batch: 16", ""),
        ("steps: 20, micro_batch: 8, batch: 16", "  accum_steps: 2\n"),
        ("steps: 20, micro_batch: 16, batch: 64", ""),  # 16: the default a dump writes
    ],
)
def test_a_micro_batch_that_agrees_with_the_batch_loads(probe: str, knobs: str) -> None:
    s = space(knobs or "  lr: 0.01\n", probe)
    assert sp.loads(sp.dump(s)) == s


def test_check_refuses_a_bad_batch_with_exit_2_and_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: b\nworkload: mlp\nknobs:\n  batch: {choices: [6, 16]}\n  accum_steps: 4\n"
    )
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert "bad.yaml: knobs.batch (line 4): batch 6 is not divisible" in line


def test_a_searched_batch_leaves_probe_batch_a_reference_run_only_by_the_baseline() -> None:
    # probe.batch 12 runs only in the baseline, at accum_steps 1 (a searched knob at PyTorch's
    # default): accum_steps 8 never splits it, so the space is valid.
    knobs = "  batch: {choices: [16, 32]}\n  accum_steps: {choices: [1, 8]}\n"
    s = space(knobs, "steps: 40, batch: 12, device: cpu")
    base = sp.probe_config(s, knobs=s.baseline_knobs())
    assert (base.micro_batch, base.knobs["accum_steps"], base.steps) == (12, 1, 40)
    # A fixed batch knob: probe.batch never runs at all.
    space("  batch: 16\n  accum_steps: {choices: [1, 8]}\n", "steps: 40, batch: 12, device: cpu")
    # Searched without 1 (a micro-batch of the whole batch does not fit): the baseline is the
    # same arithmetic at the smallest layout allowed, and probe.batch is checked against it.
    s = space("  batch: {choices: [16, 32]}\n  accum_steps: {choices: [8, 4]}\n", "batch: 12")
    base = sp.probe_config(s, knobs=s.baseline_knobs())
    assert (base.micro_batch, base.knobs["accum_steps"]) == (3, 4)
    with pytest.raises(SpaceError, match=r"probe\.batch 12 is not divisible by .* value 8"):
        space("  batch: {choices: [16, 32]}\n  accum_steps: {choices: [8, 16]}\n", "batch: 12")
    s = space("  accum_steps: {low: 2, high: 6, step: 2}\n", "steps: 40, batch: 24")
    assert s.baseline_knobs()["accum_steps"] == 2
    assert sp.probe_config(s, knobs=s.baseline_knobs()).micro_batch == 12
    # With accum_steps fixed the baseline splits probe.batch by it: still checked.
    with pytest.raises(SpaceError, match=r"probe\.batch 12 is not divisible by knobs\.accum_steps"):
        space("  batch: {choices: [16, 32]}\n  accum_steps: 8\n", "steps: 40, batch: 12")


def _yaml_value(v: int | list[int]) -> str:
    return f"{{choices: {v}}}" if isinstance(v, list) else str(v)


def _runs(reference: int, batch: Any, accum: Any) -> list[tuple[int, int]]:
    """(batch, accum_steps) of every probe a study runs, worked out by hand: the baseline
    (searched knobs at PyTorch's defaults: the reference batch, accum_steps 1), the defaults (a
    choice domain's default: PyTorch's value when among the choices, else the first) and every
    trial (each batch with each accum_steps)."""

    def values(v: Any, absent: int) -> list[int]:
        return v if isinstance(v, list) else [absent if v is None else v]

    def default(v: Any, preferred: int) -> int:
        if isinstance(v, list):
            return preferred if preferred in v else v[0]
        return preferred if v is None else v

    base = (
        reference if isinstance(batch, list) else default(batch, reference),
        1 if isinstance(accum, list) else default(accum, 1),
    )
    defaults = (default(batch, reference), default(accum, 1))
    trials = [(b, a) for b in values(batch, reference) for a in values(accum, 1)]
    return [base, defaults, *trials]


ints = st.integers(1, 48)
some = st.one_of(st.none(), ints, st.lists(ints, min_size=2, max_size=3, unique=True))


@given(reference=ints, batch=some, accum=some)
def test_a_space_loads_exactly_when_every_batch_that_runs_splits_into_its_accum_steps(
    reference: int, batch: int | list[int] | None, accum: int | list[int] | None
) -> None:
    knobs = "".join(
        f"  {name}: {_yaml_value(v)}\n"
        for name, v in (("batch", batch), ("accum_steps", accum))
        if v is not None
    )
    text = f"name: b\nworkload: mlp\nprobe: {{steps: 5000, batch: {reference}}}\n"
    text += f"knobs:\n{knobs}" if knobs else ""
    valid = all(b % a == 0 for b, a in _runs(reference, batch, accum))
    try:
        s = sp.loads(text)
    except SpaceError as e:
        assert not valid, f"a valid space refused: {e}"
        assert "not divisible" in str(e)
        return
    assert valid, "a space accepted that splits a batch unevenly"
    ran = [sp.probe_config(s, knobs=s.baseline_knobs()), sp.probe_config(s)]
    assert [(c.micro_batch * int(c.knobs["accum_steps"] or 1)) for c in ran] == [
        b for b, _ in _runs(reference, batch, accum)[:2]
    ]  # the hand-worked baseline and defaults are what the study runs


# ----- the step conversion ---------------------------------------------------------------------


@given(
    length=st.integers(1, 100_000),
    reference=st.integers(1, 4096),
    batch=st.integers(1, 4096),
)
def test_steps_at_batch_see_the_reference_samples_within_one_batch(
    length: int, reference: int, batch: int
) -> None:
    steps = steps_at_batch(length, reference, batch)
    assert steps >= 1
    if length * reference >= batch:  # at least one step's worth: rounding is the only error
        assert abs(steps * batch - length * reference) <= batch / 2
    assert steps_at_batch(length, reference, reference) == length


def test_every_probe_length_converts_in_probe_config() -> None:
    s = space("  batch: {choices: [8, 16, 32]}\n", probe="steps: 40, batch: 16, device: cpu")
    knobs = {**s.fixed_knobs(), "batch": 32, "accum_steps": 2}
    cfg = sp.probe_config(s, knobs=knobs, steps=300)  # a rung, the target, verification
    assert (cfg.steps, cfg.micro_batch) == (150, 16)
    assert sp.probe_config(s, knobs={**knobs, "batch": 8}).steps == 80  # the screen


# ----- real probes -----------------------------------------------------------------------------


def test_probes_at_batch_8_and_32_see_equal_samples() -> None:
    s = space(
        "  lr: 0.003\n  batch: {choices: [8, 32]}\n  accum_steps: {choices: [1, 2]}\n",
        probe="steps: 40, batch: 16, device: cpu",
    )
    small = run_probe(sp.probe_config(s, knobs={**s.fixed_knobs(), "batch": 8}))
    large = run_probe(sp.probe_config(s, knobs={**s.fixed_knobs(), "batch": 32, "accum_steps": 2}))
    assert (small["steps_run"], large["steps_run"]) == (80, 20)
    assert small["samples_seen"] == large["samples_seen"] == 16 * 40
    assert (large["micro_batch"], large["accum_steps"], large["knobs"]["batch"]) == (16, 2, 32)
    assert small["knobs"]["batch"] == small["samples_per_step"] == 8
    # throughput is samples per second, comparable across batches
    assert small["metrics"]["throughput"] > 0 and large["metrics"]["throughput"] > 0


# ----- the recipe and its exports --------------------------------------------------------------

RECIPE = """\
autotune_recipe: 1
name: b-trial2
workload: {name: mlp, size: tiny}
precision: fp32
micro_batch: 8
probe: {steps: 100, seed: 0, batch: 16}
knobs: {lr: 0.003, batch: 32, accum_steps: 4}
source: {study: b, trial: 2, searched: [batch, accum_steps]}
"""


def test_a_recipe_carries_its_batch_into_every_export() -> None:
    r = Recipe.loads(RECIPE)
    assert r.knobs["batch"] == 32 and r.effective_batch == 32
    assert Recipe.loads(r.dump()) == r
    hf = json.loads(formats.render(r, "hf"))["training_arguments"]
    assert (hf["per_device_train_batch_size"], hf["gradient_accumulation_steps"]) == (8, 4)
    lightning = json.loads(formats.render(r, "lightning"))
    assert (lightning["micro_batch"], lightning["trainer"]["accumulate_grad_batches"]) == (8, 4)
    python = formats.render(r, "python")
    assert "BATCH = 32  # samples per optimizer step per process" in python
    assert "knobs:\n  lr: 0.003\n" in r.dump() and "  batch: 32\n" in r.dump()


def test_a_recipe_without_batch_resolves_it_from_its_layout() -> None:
    r = Recipe.loads(RECIPE.replace("batch: 32, ", "").replace(", batch: 16", ""))
    assert r.knobs["batch"] == 32  # micro_batch 8 x accum_steps 4


def test_a_recipe_whose_batch_disagrees_with_its_layout_is_refused() -> None:
    with pytest.raises(RecipeError) as e:
        Recipe.loads(RECIPE.replace("batch: 32", "batch: 64"), source="r.yaml")
    assert str(e.value) == (
        "r.yaml: knobs: batch 64 disagrees with micro_batch x accum_steps (8 x 4 = 32)"
    )


def test_verify_runs_the_recipe_and_its_baseline_at_equal_samples() -> None:
    r = Recipe.loads(RECIPE)
    cfg = r.probe_config()
    assert (cfg.steps, cfg.micro_batch) == (50, 8)  # 100 steps at 16 = 50 at 32
    base = r.probe_config(knobs=vf.baseline_knobs(r), steps=300)
    assert base.knobs["batch"] == 16 and base.knobs["accum_steps"] == 1
    assert (base.steps, base.micro_batch) == (300, 16)
    assert r.probe_config(steps=300).steps == 150


# ----- a training script -----------------------------------------------------------------------

SCRIPT = """\
import autotune
trial = autotune.trial(steps=99, micro_batch=3)
assert (trial.batch, trial.micro_batch, trial.steps) == (32, 16, 20), trial
assert trial.recipe.knobs["batch"] == 32 and trial.recipe.accum_steps == 2
for i in range(trial.steps):
    trial.report(i, loss=1.0 / (i + 1))
"""


def test_a_script_trial_gets_its_batch_and_the_converted_steps(tmp_path: Path) -> None:
    from autotune.probe.script_run import run_script

    (tmp_path / "train.py").write_text(SCRIPT)
    s = space("  batch: {choices: [8, 32]}\n  accum_steps: {choices: [1, 2]}\n", "steps: 40")
    cfg = sp.probe_config(s, knobs={**s.fixed_knobs(), "batch": 32, "accum_steps": 2})
    cfg = replace(cfg, workload="script:train.py", script=str(tmp_path / "train.py"))
    summary = run_script(cfg, lambda _msg: None)
    assert summary["status"] == "ok" and summary["samples_seen"] == 16 * 40


def test_a_standalone_script_runs_a_recipe_at_its_equal_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import autotune
    from autotune.recipe import trial as trial_api

    monkeypatch.setattr(trial_api, "_TRIAL", None)
    monkeypatch.setenv("AUTOTUNE_RECIPE", str(Recipe.loads(RECIPE).save(tmp_path / "r.yaml")))
    t = autotune.trial(micro_batch=2)
    assert (t.batch, t.micro_batch, t.steps) == (32, 8, 50)  # 100 steps at 16 = 50 at 32


def test_a_batch_given_by_set_over_a_files_micro_batch_replaces_it(tmp_path: Path) -> None:
    """A space file with a micro_batch and `--set probe.batch=64` (no way to unset the
    micro-batch from the command line) takes the command line's batch; a study's stored copy
    of such a space opens as it ran."""
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nworkload: {name: mlp, size: tiny}\nprobe: {steps: 20, micro_batch: 32}\n"
        "knobs: {accum_steps: {choices: [1, 2]}}\n"
    )
    s = sp.load(str(path), ["probe.batch=64"])
    assert s.probe.batch == 64
    assert sp.loads(sp.dump(s), source="study s", stored=True).probe.batch == 64
    with pytest.raises(sp.SpaceError, match=r"conflicts with probe\.batch"):
        sp.loads(sp.dump(s), source="s.yaml")  # the same text as a space file of the user's
