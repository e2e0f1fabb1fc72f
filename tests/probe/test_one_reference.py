"""One initial-loss reference per seed (`autotune.probe.reference`): every trial of a study is
judged against the same number whatever its accumulation or micro-batch (the held-out set read
in the study's chunks), a training script can give its own, and a recipe's verification uses
its study's."""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from assets import studies as h

from autotune import space as sp
from autotune import study as st
from autotune.probe import ProbeConfig, run_probe
from autotune.probe.reference import held_out
from autotune.probe.script import BadReport
from autotune.probe.script_run import run_script
from autotune.probe.workload import resolve
from autotune.recipe import Recipe
from autotune.recipe import verify as vf
from autotune.study import export as ex

# The built-ins normalise with LayerNorm/GroupNorm; this one has BatchNorm, whose train-mode
# loss depends on how the held-out samples are chunked.
BATCHNORM = textwrap.dedent(
    """
    import torch
    from autotune.workloads.mlp import MLPWorkload

    class WithBatchNorm(MLPWorkload):
        def build_model(self):
            c = self.config
            return torch.nn.Sequential(
                torch.nn.Linear(c.inputs, c.hidden),
                torch.nn.BatchNorm1d(c.hidden),
                torch.nn.ReLU(),
                torch.nn.Linear(c.hidden, c.outputs),
            )

    def make(size="tiny"):
        return WithBatchNorm(size)
    """
)


@pytest.fixture
def batchnorm(tmp_path: Path) -> str:
    path = tmp_path / "bn.py"
    path.write_text(BATCHNORM)
    return f"{path}:make"


def accum_space(workload: str, extra: str = "") -> sp.Space:
    return sp.loads(
        f"name: r\nworkload: {{name: '{workload}', size: tiny}}\n"
        f"probe: {{steps: 20, batch: 16, device: cpu, threads: 1{extra}}}\n"
        "knobs:\n  accum_steps: {choices: [1, 2, 4]}\n"
    )


def first_step(cfg: ProbeConfig) -> dict[str, Any]:
    """The probe's summary after one step: the reference is measured before it."""
    return run_probe(replace(cfg, steps=1))


@pytest.mark.parametrize("name", ["mlp", "tiny_gpt", "resnet", "batchnorm"])
def test_every_accumulation_of_a_seed_is_judged_against_one_reference(
    name: str, request: pytest.FixtureRequest
) -> None:
    workload = request.getfixturevalue("batchnorm") if name == "batchnorm" else name
    space = accum_space(workload)
    held = sum(resolve(workload).samples(b) for b in resolve(workload).eval_batches(16))
    by_seed = {}
    for seed in (0, 1):
        refs, micro = [], []
        for accum in (1, 2, 4):
            knobs = {**space.fixed_knobs(), "accum_steps": accum}
            cfg = sp.probe_config(space, knobs=knobs, seed=seed)
            micro.append(cfg.micro_batch)
            r = first_step(cfg)
            refs.append(r["initial_reference"])
            assert r["metrics"]["initial_loss"] == pytest.approx(r["initial_reference"]["loss"])
        assert micro == [16, 8, 4]
        assert refs[0] == refs[1] == refs[2], refs  # the same number, samples and chunks
        ref = refs[0]
        assert ref["source"] == "held_out" and ref["why"] is None
        # the smallest micro-batch of the space, 16 x probe.batch samples (or all there are)
        assert ref["chunk"] == 4 and ref["samples"] == min(16 * 16, held)
        by_seed[seed] = ref["loss"]
    assert by_seed[0] != by_seed[1]  # another seed, another untrained model


def test_with_batchnorm_the_chunk_decides_the_reference_so_it_is_fixed(batchnorm: str) -> None:
    w = resolve(batchnorm)
    torch.manual_seed(0)
    model = w.build_model().train()
    buffers = [b.clone() for b in model.buffers()]
    cpu = torch.device("cpu")
    by_chunk = {c: held_out(model, w, c, cpu, None, samples=128).loss for c in (4, 16)}
    # the same 128 samples, normalised over 4 or over 16 at a time: another number
    assert by_chunk[4] is not None and by_chunk[16] is not None
    assert abs(by_chunk[4] - by_chunk[16]) > 1e-3 * by_chunk[16]
    assert all(torch.equal(a, b) for a, b in zip(buffers, model.buffers(), strict=True))


def test_the_space_sets_the_chunk_and_the_samples_and_dumps_as_before() -> None:
    space = sp.loads(
        "name: r\nworkload: {name: mlp}\nprobe: {steps: 40, batch: 16}\n"
        "knobs:\n  batch: {choices: [8, 16, 32]}\n  accum_steps: {choices: [1, 2]}\n"
    )
    assert space.smallest_micro_batch() == 4  # batch 8 at accum 2
    cfg = sp.probe_config(space, knobs={**space.fixed_knobs(), "batch": 32})
    assert (cfg.micro_batch, cfg.reference_batch, cfg.reference_samples) == (32, 4, 256)
    assert ProbeConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert "reference" not in sp.dump(space)  # unset: a study's identity is as it was
    fixed = sp.loads(sp.dump(space), overrides=["probe.reference_batch=2"])
    fixed = sp.loads(sp.dump(fixed), overrides=["probe.reference_samples=100"])
    cfg = sp.probe_config(fixed)
    assert (cfg.reference_batch, cfg.reference_samples) == (2, 100)
    plain = ProbeConfig(workload="mlp", micro_batch=8)  # by hand: its micro-batch, 16 chunks
    assert (plain.reference_chunk, plain.reference_total) == (8, 128)
    with pytest.raises(sp.SpaceError, match="reference_batch"):
        sp.loads(sp.dump(space), overrides=["probe.reference_batch=0"])


# ----- a training script ---------------------------------------------------------------------

SCRIPT = """
import json, sys
import torch
import autotune

trial = autotune.trial(steps=99, micro_batch=3)
model = torch.nn.Sequential(
    torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 1)
)
g = torch.Generator().manual_seed(123)
x, y = torch.randn(200, 4, generator=g), torch.randn(200, 1, generator=g)
mse = torch.nn.functional.mse_loss
before = model[1].running_mean.clone()
{call}
assert torch.equal(model[1].running_mean, before)  # the reference left the buffers alone
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(trial.steps):
    xb, yb = torch.randn(trial.micro_batch, 4), torch.randn(trial.micro_batch, 1)
    loss = mse(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    trial.report(step, loss=loss)
"""

HELD_OUT = "got = trial.reference(model, (x, y), lambda m, b: mse(m(b[0]), b[1]))"


def run(tmp_path: Path, call: str, **cfg: Any) -> dict[str, Any]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(call=call))
    c = ProbeConfig(workload="script:train.py", steps=4, script=str(script), **cfg)
    return run_script(c)


def test_a_script_that_gives_a_held_out_set_gets_one_reference_per_seed(tmp_path: Path) -> None:
    refs = [
        run(tmp_path, HELD_OUT, micro_batch=m, seed=s, reference_batch=4, reference_samples=64)
        for s, m in ((0, 16), (0, 2), (1, 16))
    ]
    ref = refs[0]["initial_reference"]
    assert ref == {**ref, "source": "held_out", "chunk": 4, "samples": 64, "batches": 16}
    assert ref["why"] is None
    assert refs[1]["initial_reference"] == ref  # another micro-batch: the same reference
    assert refs[2]["initial_reference"]["loss"] != ref["loss"]  # another seed: another model
    for r in refs:
        assert r["metrics"]["initial_loss"] == pytest.approx(r["initial_reference"]["loss"])
    # what the probe computed: the train-mode mean over 16 chunks of 4 of the first 64 samples
    check = HELD_OUT + textwrap.dedent(
        """
        import copy
        m = copy.deepcopy(model)  # a copy: this sum moves BatchNorm's running statistics
        with torch.no_grad():
            want = sum(float(mse(m(x[i : i + 4]), y[i : i + 4])) for i in range(0, 64, 4)) / 16
        assert abs(got - want) <= 1e-6 * want, (got, want)
        assert model.training
        """
    )
    run(tmp_path, check, micro_batch=8, reference_batch=4, reference_samples=64)


def test_a_scripts_final_loss_is_its_reference_measured_again(tmp_path: Path) -> None:
    r = run(tmp_path, HELD_OUT, micro_batch=8, reference_batch=4, reference_samples=64)
    first, last = r["initial_reference"], r["final_reference"]
    assert last["source"] == "held_out" and (last["samples"], last["chunk"]) == (64, 4)
    assert last["loss"] != first["loss"]  # four SGD steps moved the model
    assert r["metrics"]["final_loss"] == pytest.approx(last["loss"])
    assert r["metrics"]["final_train_loss"] == pytest.approx(r["series"]["loss"][-1])


def test_a_script_may_give_its_own_loss_or_none(tmp_path: Path) -> None:
    own = run(tmp_path, "trial.reference(model, evaluate=lambda: torch.tensor(3.5))")
    assert own["initial_reference"]["source"] == "script"
    assert own["initial_reference"]["loss"] == own["metrics"]["initial_loss"] == 3.5
    assert own["final_reference"]["source"] == "script"  # evaluate() is asked again at the end
    assert own["metrics"]["final_loss"] == 3.5 and own["metrics"]["loss_drop"] == 0.0
    step0 = run(tmp_path, "")
    assert step0["initial_reference"]["source"] == "step0"
    assert "trial.reference" in step0["initial_reference"]["why"]
    assert step0["metrics"]["initial_loss"] == step0["series"]["loss"][0]
    assert step0["final_reference"]["source"] == "train"
    assert step0["metrics"]["final_loss"] == step0["metrics"]["final_train_loss"]
    broken = run(tmp_path, "trial.reference(model, (x, y), lambda m, b: 1 / 0)")
    assert broken["initial_reference"]["source"] == "step0"
    assert "ZeroDivisionError" in broken["initial_reference"]["why"]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        ("trial.reference(model, x)", TypeError, "loss"),
        ("trial.reference(model)", TypeError, "held-out set with its loss, or evaluate"),
        ("trial.reference(model, (x, y[:5]), mse)", TypeError, "different numbers"),
        ("trial.reference(model, [x], mse)", TypeError, "tensor or a tuple of tensors"),
        ("trial.report(0, loss=1.0)\ntrial.reference(model, x, mse)", BadReport, "first report"),
    ],
)
def test_a_bad_reference_call_is_one_clear_error(
    tmp_path: Path, call: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        run(tmp_path, call)


# ----- a recipe ------------------------------------------------------------------------------


def test_a_recipes_verification_uses_its_studys_reference(tmp_path: Path) -> None:
    sets = ["probe.batch=32", "knobs.accum_steps={choices: [1, 2, 4]}"]
    folder = h.recorded_study(tmp_path, "acc", trials=3, finished=3, overrides=sets)
    _, space, _, _ = st.find_study(str(folder))
    recipe = ex.recipe_from_study(str(folder))
    assert (recipe.probe["reference_batch"], recipe.probe["reference_samples"]) == (8, 512)
    back = Recipe.loads(recipe.dump())
    assert back.reference_layout == (8, 512)
    seed = 3
    study_trial = sp.probe_config(space, knobs={**recipe.knobs}, seed=seed)
    want = first_step(study_trial)["initial_reference"]
    for knobs in (None, vf.baseline_knobs(back)):  # the recipe and the baseline beside it
        cfg = replace(back.probe_config(knobs=knobs), seed=seed, threads=1)
        assert first_step(cfg)["initial_reference"] == want
    # a recipe written before the record: chunks of its micro-batch, 16 x its study's batch
    old = replace(back, probe={k: v for k, v in back.probe.items() if "reference" not in k})
    cfg = Recipe.loads(old.dump()).probe_config()
    assert (cfg.reference_batch, cfg.reference_samples) == (
        old.micro_batch,
        16 * old.knobs["batch"],
    )
