"""A script study's identity holds its script's SHA-256: a study continued after the script was
edited is refused, as one with another space is, and a study made before the hash was kept
still continues.

A review: after `echo "# edited" >> train.py`, the same `autotune study` continued the study
with no warning; trials 0-3 carried the old `script_sha256`, 4-5 the new, and the summary, the
front, the pick and the verification compared them as one study."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from assets import studies as h

from autotune import space as sp
from autotune.study.identity import SCRIPT_KEY, changed_parts, differs, edited_script, identity

SPACE = """
name: {name}
workload: {{script: train.py}}
probe: {{steps: 10, batch: 4, threads: 1}}
budget: {{trials: 1, trial_timeout_s: 60}}
verify: {{top_k: 0}}
knobs:
  lr: 0.01
  clip_norm: {{low: 0.1, high: 1.0}}
"""

SCRIPT = """import autotune
trial = autotune.trial(steps=10, micro_batch=4)
"""


def _space(folder: Path, name: str = "ident-script") -> sp.Space:
    if not (folder / "train.py").exists():
        (folder / "train.py").write_text(SCRIPT)
    path = h.write(folder, SPACE.format(name=name))
    return sp.load(path)


def test_an_edited_script_is_refused_naming_the_script_and_both_hashes(tmp_path: Path) -> None:
    before = identity(_space(tmp_path))
    with (tmp_path / "train.py").open("a") as f:
        f.write("# edited\n")
    now = identity(_space(tmp_path))
    was, is_ = json.loads(before)[SCRIPT_KEY], json.loads(now)[SCRIPT_KEY]
    assert differs(before, now)
    refused = edited_script(before, now, "ident-script", "sqlite:///o.db")
    assert refused is not None
    said = str(refused)
    assert "\n" not in said
    assert str(tmp_path / "train.py") in said and was[:12] in said and is_[:12] in said, said
    assert "another version" in said and "--set name=ident-script-2" in said, said
    assert "restore the script" in said, said


def test_an_unedited_script_and_a_study_made_before_the_hash_continue(tmp_path: Path) -> None:
    now = identity(_space(tmp_path))
    assert not differs(now, identity(_space(tmp_path)))
    old = json.loads(now)
    del old[SCRIPT_KEY]  # as a study made before the script's hash was part of its identity
    assert not differs(json.dumps(old, sort_keys=True), now)


def test_another_space_is_still_refused_as_one(tmp_path: Path) -> None:
    now = identity(_space(tmp_path))
    old = json.loads(now)
    del old[SCRIPT_KEY]
    old["knobs"]["clip_norm"]["high"] = 2.0
    assert differs(json.dumps(old), now)
    assert edited_script(json.dumps(old), now, "s", "u") is None  # the space's refusal, then
    assert changed_parts(json.dumps(old), now) == "knobs.clip_norm"
    assert differs("not json", now) and edited_script("not json", now, "s", "u") is None


@pytest.mark.integration
def test_a_study_continued_after_its_script_was_edited_is_refused(tmp_path: Path) -> None:
    """Through the CLI: exit 2, one error line, the study's trials and records untouched."""
    import optuna

    space = _space(tmp_path, "edited")
    study_dir = tmp_path / "sd"
    study_dir.mkdir()
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    study = optuna.create_study(study_name="edited", storage=storage)
    study.set_user_attr("autotune.space", identity(space))  # as the study's first run left it
    with (tmp_path / "train.py").open("a") as f:
        f.write("# edited\n")
    args = ["study", "--space", "space.yaml", "--study-dir", str(study_dir)]
    result = h.autotune(args, tmp_path, token=h.new_token(), timeout=300)
    assert result.returncode == 2, h.explain(result)
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("autotune: error:")]
    assert len(lines) == 1 and "ran another version of the script" in lines[0], h.explain(result)
    assert "Traceback" not in result.stderr, h.explain(result)
    assert optuna.load_study(study_name="edited", storage=storage).trials == []
