"""`source.digests`: export records a digest of each section that decides what a run does, so
that a recipe changed afterwards is not judged by the promise of the configuration exported."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from assets.recipes import make_recipe

from autotune import Recipe
from autotune.migrate.lacks import section, set_aside
from autotune.recipe import digest


def test_a_recipe_read_back_is_unedited_and_each_edit_is_named(tmp_path: Path) -> None:
    r = make_recipe(clip_norm=0.7, adam_eps=1e-8).with_digests()
    path = r.save(tmp_path / "r.yaml")
    back = Recipe.load(path)
    assert back.edited_sections() == []
    text = path.read_text()
    assert "name: mlp" in text
    assert Recipe.loads(text.replace("name: mlp", "name: tiny_gpt")).edited_sections() == [
        "workload"
    ]
    data = back.to_dict()
    data["knobs"]["clip_norm"], data["env"] = 0.9, {}
    assert Recipe.from_dict(data).edited_sections() == ["knobs", "env"]
    data = back.to_dict()
    data["probe"]["steps"] = 999
    assert Recipe.from_dict(data).edited_sections() == ["probe"]
    # what is not a section of the run (the name, the promise) is not an edit of it
    renamed = dataclasses.replace(back, name="other", achieved={})
    assert renamed.edited_sections() == []


def test_without_digests_or_with_malformed_ones_nothing_is_claimed() -> None:
    r = make_recipe(clip_norm=0.7)
    assert r.edited_sections() is None
    for junk in ("abc", [], {}, 3):
        bad = dataclasses.replace(r, source={**r.source, digest.KEY: junk})
        assert bad.edited_sections() is None
    partial = dataclasses.replace(r, source={**r.source, digest.KEY: {"knobs": "0"}})
    assert partial.edited_sections() == list(digest.SECTIONS)  # none matches: all named


def test_migrate_sets_aside_an_edited_recipes_promise_and_recordings() -> None:
    r = make_recipe(clip_norm=0.7)
    audit = {"dtype": "fp32", "entries": []}
    curve = {"metric": "loss", "seed": 0, "step": [0], "value": [1.0]}
    r = dataclasses.replace(r, recorded={"audit": audit, "curve": curve}).with_digests()
    same, changed = set_aside(r)
    assert changed == [] and same is r
    edited = dataclasses.replace(r, knobs={**r.knobs, "clip_norm": 2.0})
    kept, changed = set_aside(edited)
    assert changed == ["knobs"] and kept.achieved == {} and kept.recorded == {"audit": audit}
    other = dataclasses.replace(r, precision="bf16")
    assert set_aside(other)[0].recorded == {}  # the audit was of another precision
    text = "\\n".join(section(["achieved", "recorded"], changed))
    assert "changed since its export (`knobs`)" in text and "written by hand" not in text
    assert "written by hand" in "\\n".join(section(["achieved"]))


def test_a_recipe_that_does_not_read_back_gets_no_digests() -> None:
    """Export must not fail on the read-back: such a recipe claims nothing of its edits."""
    r = make_recipe(clip_norm=0.7)
    odd = dataclasses.replace(r, probe={"steps": 90, "schedule_steps": 30, "seed": 0})
    assert odd.with_digests() is odd and odd.with_digests().edited_sections() is None
