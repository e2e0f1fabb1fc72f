"""A recipe without the sections an export writes (`fingerprint`, `achieved`, `recorded`,
`source`: written by hand, or a file cut short) is migrated, and the report says plainly what it
lacks and what that means for the verdict. A review: a recipe cut after `env: {}` was
"Tuned on `None`", its missing neighbours blamed on an old export, its `transfers` unqualified."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune import Recipe
from autotune import space as sp
from autotune.migrate.lacks import MEANS, lacking, note
from autotune.migrate.neighbours import neighbours_status
from autotune.migrate.report import markdown


def cut(tmp_path: Path) -> Recipe:
    """A recipe file as the review cut one: everything up to `env: {}` and nothing after."""
    knobs = {k: v.default for k, v in sp.KNOBS.items()}
    knobs.update(lr=0.003, clip_norm=1.6)
    whole = Recipe(
        name="cut-trial2",
        workload={"name": "mlp", "size": "tiny"},
        precision="fp32",
        micro_batch=16,
        knobs=knobs,
        probe={"steps": 30, "seed": 0},
        achieved={"final_loss": {"direction": "minimize", "value": 1.0, "verified": None}},
        fingerprint={"hash": "abc", "platform": "cpu"},
        source={"study": "s", "trial": 2, "searched": ["clip_norm"], "neighbours": []},
        recorded={"curve": {"metric": "loss", "seed": 0, "step": [0], "value": [1.0]}},
    )
    text = whole.dump()
    path = tmp_path / "cut.yaml"
    path.write_text(text[: text.index("env: {}") + len("env: {}\n")])
    return Recipe.load(path)


def result_of(recipe: Recipe) -> dict[str, Any]:
    iv = {"mean": 1.0, "low": 0.9, "high": 1.1, "n": 2}
    side = {"n": 2, "diverged_share": 0.0, "failed": 0, "metrics": {"final_loss": iv}}
    holds = {
        "seeds": [0, 1],
        "steps": 30,
        "threads": 2,
        "recipe_result": side,
        "baseline_result": copy.deepcopy(side),
        "vs_baseline": {"verdict": "no detectable difference", "why": "noise", "metrics": {}},
        "problems": [],
        "curve": {"status": "not recorded"},
        "not_reproduced": "the recipe records no loss curve",
    }
    holds["neighbours"] = neighbours_status(recipe, holds)
    lacks = lacking(recipe)
    return {
        "recipe": recipe.name,
        "verdict": "transfers",
        "why": "The recipe holds here." + note(lacks, "transfers"),
        "recorded_hash": recipe.fingerprint_hash,
        "here_hash": "b",
        "here_summary": "cpu",
        "lacks": lacks,
        "differences": {"rows": [], "not_recorded": [], "counts": {}, "recorded": False},
        "ops": {"status": "skipped", "rows": []},
        "holds": holds,
        "knob_classes": {"hardware-bound": [], "portable": []},
        "inert_env": [],
        "retune": None,
        "compute": {"samples": 1, "probes": 4, "probe_wall_s": 1.0, "audit_wall_s": 0.0},
    }


def test_a_cut_recipe_is_migrated_saying_what_it_lacks(tmp_path: Path) -> None:
    recipe = cut(tmp_path)
    assert lacking(recipe) == ["fingerprint", "achieved", "recorded", "source"]
    result = result_of(recipe)
    text = markdown(result)
    assert "`None`" not in text and "None" not in text.split("## Pareto")[0]
    assert "exported before autotune recorded them" not in text
    assert "Tuned on a machine the recipe does not record (no `fingerprint`)" in text
    assert "## What the recipe lacks" in text
    assert "no `fingerprint`, `achieved`, `recorded` or `source` section" in text
    for name, means in MEANS.items():
        assert f"- no `{name}`: {means}." in text
    assert "it has no `source` section" in text
    assert "Hardware-bound: none; portable: none" not in text  # nothing was classed
    assert "Not classed: the recipe does not record which knobs its study searched" in text
    assert "why the cheap check did not stand: the recipe records no loss curve" in text
    # the verdict's sentence says what `transfers` means without a promise
    assert "records no `achieved` values: it promised nothing" in result["why"]
    assert result["holds"]["neighbours"]["source"] is False


def test_an_exported_recipe_lacks_nothing(tmp_path: Path) -> None:
    whole = cut(tmp_path)  # then give it back what the cut took
    full = replace(
        whole,
        achieved={"final_loss": {"direction": "minimize", "value": 1.0}},
        fingerprint={"hash": "abc"},
        source={"study": "s", "trial": 2},
        recorded={"verified": {"steps": 30, "runs": []}},
    )
    assert lacking(full) == [] and note([], "transfers") == ""
    text = markdown({**result_of(full), "lacks": []})
    assert "## What the recipe lacks" not in text and "Tuned on `abc`" in text
    assert "exported before autotune recorded them" in text  # it has a source, no neighbours
    classed = {"hardware-bound": ["accum_steps"], "portable": ["clip_norm"]}
    text = markdown({**result_of(full), "lacks": [], "knob_classes": classed})
    assert "Hardware-bound: accum_steps; portable: clip_norm." in text
    only = lacking(replace(full, achieved={}))
    assert only == ["achieved"] and note(only, "does not transfer: re-tune x") == ""
    assert "no `achieved` section (" in markdown({**result_of(full), "lacks": only})


def test_an_edited_recipe_says_its_recordings_were_set_aside(tmp_path: Path) -> None:
    """A review (`bad-both.yaml`: clip_norm and adam_eps edited after export): the report said
    the recipe "records no loss curve" and "records no `achieved` values" (it records both, set
    aside for the edit), its table "where it was tuned: better" (measured on the exported
    configuration), and a neighbour's verdict ended "it promised nothing", as if of trial 2."""
    from autotune.migrate.lacks import set_aside_texts

    recipe = cut(tmp_path)
    result = result_of(recipe)
    holds = {**result["holds"], "source_verdict": "better"}
    set_aside_texts(holds, ["knobs"])
    text = markdown({**result, "holds": holds, "edited": ["knobs"]})
    assert "records no loss curve" not in text
    assert "its recorded loss curve was set aside: the recipe was changed since its export" in text
    assert "where it was tuned: better for the configuration exported (the recipe was" in text
    said = note(["achieved"], "transfers", ["knobs"])
    assert "records no" not in said and "`achieved` values were set aside" in said
    assert note(["achieved"], "transfers with these changes: use trial 2 (clip_norm: a -> b)") == ""
