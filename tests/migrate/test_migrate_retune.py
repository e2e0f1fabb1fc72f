"""A recipe that does not hold here is re-tuned by a reduced study: `autotune migrate RECIPE
--space FILE` on a recipe whose warm-up never ends within the run (its loss stays near the
initial one while the baseline's falls), end to end with real Ray, Optuna and MLflow."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from assets import studies as h

from autotune import Recipe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]


@pytest.fixture(scope="module")
def broken(shared: h.FinishedStudy, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The shared study's recipe (exported once for both tests, in this process: what
    `autotune export` writes, without a CLI process each), broken: it does not hold here."""
    from autotune.study import export as ex

    good = tmp_path_factory.mktemp("export") / "recipe.yaml"
    ex.write(ex.recipe_from_study(str(shared.study_dir)), "yaml", str(good))
    data: dict[str, Any] = yaml.safe_load(good.read_text())
    data["knobs"]["warmup_steps"] = 100 * shared.steps  # the learning rate never rises here
    data["source"]["defaults"] = False
    data["source"].pop("neighbours", None)  # a sane neighbour would hold: the re-tune is tested
    return data


def test_a_recipe_that_does_not_hold_is_retuned(
    shared: h.FinishedStudy, broken: dict[str, Any], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(broken))
    out = tmp_path / "report"
    space = shared.folder / "space.yaml"
    args = ["migrate", str(bad), "--seeds", "3", "--no-audit", "--space", str(space)]
    mig = h.autotune([*args, "-o", str(out), "--json"], tmp_path)
    assert mig.returncode == 1, h.explain(mig)
    result = json.loads(mig.stdout)
    holds = result["holds"]
    assert holds["vs_baseline"]["metrics"]["final_loss"]["verdict"] == "worse", holds
    assert any("loses to the baseline" in p for p in holds["problems"])
    # Re-tuned: the portable knobs the failure implicates, over 30% of the space's trials.
    plan = result["retune"]
    assert set(plan["knobs"]) == {"clip_norm", "warmup_steps"}
    done_ = plan["result"]
    assert done_["trials"] == max(3, math.floor(0.3 * shared.trials))  # one sampled at least
    assert result["verdict"] == "re-tuned: clip_norm, warmup_steps"
    new = Recipe.load(done_["recipe"])
    assert new.source["migrated_from"]["recipe"] == Recipe.load(bad).name
    assert new.knobs["warmup_steps"] <= 10  # from the space's domain, not the broken 3000
    assert result["compute"]["retune_samples"] > 0
    text = Path(result["report"]).read_text()
    assert text.index("**Verdict: re-tuned") < text.index("Re-tuned by a study of")


def test_a_re_tune_that_finds_nothing_is_the_verdict_with_its_report(
    shared: h.FinishedStudy, broken: dict[str, Any], tmp_path: Path
) -> None:
    """The re-tune's study ends with nothing feasible (here a constraint no run can meet): the
    migration says the recipe does not transfer and why, writes its report, exits 1; no
    re-tuned recipe is written."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(broken))
    space = yaml.safe_load((shared.folder / "space.yaml").read_text())
    space["constraints"] = [{"metric": "loss_drop", "op": ">=", "value": 100.0}]
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    out = tmp_path / "report"
    args = ["migrate", str(bad), "--seeds", "3", "--no-audit", "--space", "space.yaml"]
    mig = h.autotune([*args, "-o", str(out), "--json"], tmp_path)
    assert mig.returncode == 1, h.explain(mig)
    assert "Traceback" not in mig.stderr, h.explain(mig)
    result = json.loads(mig.stdout)
    assert result["verdict"] == "does not transfer: the re-tune found nothing that holds here"
    done_ = result["retune"]["result"]
    assert done_["recipe"] is None and "no feasible trial" in done_["failed"], done_
    assert "no feasible trial" in result["why"]
    assert not (out / "recipe-retuned.yaml").exists()
    text = Path(result["report"]).read_text()
    assert text.index("**Verdict: does not transfer") < text.index("nothing held here")
