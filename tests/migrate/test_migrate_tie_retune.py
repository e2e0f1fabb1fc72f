"""A recipe that is PyTorch's defaults by a tie, migrated with its space: when it holds after a
check that re-ran it here, `migrate --space` runs the reduced re-tune from its study's first
choice and Pareto neighbours instead of stopping at a `transfers` that only says the defaults
still run (`autotune/migrate/tie.py`), end to end with real Ray, Optuna and MLflow."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from assets import studies as h

from autotune import Recipe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]


def _export(shared: h.FinishedStudy, out: Path, pick: str) -> dict[str, Any]:
    """What `autotune export STUDY --pick PICK -o OUT` writes, exported in this process: four
    exports, each a CLI process of its own before (the export CLI: tests/recipe, tests/cli)."""
    from autotune.study import export as ex

    ex.write(ex.recipe_from_study(str(shared.study_dir), pick), "yaml", str(out))
    data: dict[str, Any] = yaml.safe_load(out.read_text())
    return data


def _tied(shared: h.FinishedStudy, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The study's baseline (trial 0) exported as a recipe that is the defaults because its
    first choice (another trial of the study, with the knobs it ran) tied with them."""
    trials = []
    for n in range(1, shared.trials):
        data = _export(shared, tmp_path / f"trial{n}.yaml", f"trial {n}")
        trials.append({"trial": n, "knobs": data["knobs"], "env": data.get("env") or {}})
    base = _export(shared, tmp_path / "base.yaml", "trial 0")
    differ = [t for t in trials if t["knobs"] != base["knobs"]]
    assert differ, "every trial of the shared study ran the defaults"
    first = differ[-1]  # not trial 1: the order must come from the recipe, not the study
    base["source"].update(
        defaults=True,
        first_choice=first["trial"],
        neighbours=[*(t for t in differ if t is not first), first],
        vs_baseline={"verdict": "no detectable difference", "seeds": [1, 2], "metrics": {}},
    )
    path = tmp_path / "tied.yaml"
    path.write_text(yaml.safe_dump(base))
    return path, first


def test_a_tied_recipe_that_holds_is_re_tuned_from_its_first_choice(
    shared: h.FinishedStudy, tmp_path: Path
) -> None:
    path, first = _tied(shared, tmp_path)
    out = tmp_path / "report"
    space = shared.folder / "space.yaml"
    # --full: on the machine it came from the recorded run reproduces and the study's tie stands
    args = ["migrate", str(path), "--full", "--seeds", "2", "--no-audit", "--space", str(space)]
    mig = h.autotune([*args, "-o", str(out), "--json"], tmp_path)
    result = json.loads(mig.stdout)
    assert result["holds"]["problems"] == [], result["why"]  # the defaults hold: a tie's transfers
    plan = result["retune"]
    assert plan is not None and plan["tie"]["first_choice"] == first["trial"], plan
    done = plan["result"]
    # twice the tie's 2 seeds: the same 2 again would measure the same tie
    assert plan["verify_seeds"] == 4 and "verify.seeds=4" in done["overrides"], done["overrides"]
    # the baseline (the recipe, the defaults, is it again), each neighbour, one sampled
    least = 2 + len(Recipe.load(path).source["neighbours"])
    assert done["trials"] == max(least, math.floor(0.3 * shared.trials)), done
    # The re-tune's study: the baseline, then the first choice before the other neighbours.
    (folder,) = (out / "retune").iterdir()
    study = optuna.load_study(study_name=folder.name, storage=f"sqlite:///{folder / 'optuna.db'}")
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    assert by_number[0].user_attrs.get("autotune.baseline")
    assert sorted(by_number) == list(range(done["trials"]))
    last = by_number[done["trials"] - 1].user_attrs  # the sampler's: not a warm start
    assert not last.get("autotune.source") and not last.get("autotune.baseline"), last
    source = by_number[1].user_attrs.get("autotune.source") or ""
    assert f"trial {first['trial']} (the study's first choice)" in source, source
    for name, value in by_number[1].params.items():  # its searched knobs, the first choice's
        assert value == first["knobs"][name], (name, value, first["knobs"])
    # The verdict: the re-tune's pick replaces the recipe only when it beat the defaults.
    new = Recipe.load(done["recipe"])
    vs = new.source.get("vs_baseline") or {}
    if not done["defaults"] and vs.get("verdict") == "better":
        assert result["verdict"] == f"re-tuned: {', '.join(done['searched'])}"
        assert mig.returncode == 1, h.explain(mig)
        assert (
            f"its pick, trial {new.source['trial']}, paired against the defaults" in (result["why"])
        )
    else:  # kept the defaults, or a pick not shown better: the verdict stands
        assert result["verdict"] == "transfers", result["verdict"]
        assert mig.returncode == 0, h.explain(mig)
        kept = bool(new.source.get("defaults") or new.source.get("baseline"))
        assert kept == done["defaults"]
        said = "it kept PyTorch's defaults too" if kept else "not better, so the verdict stands"
        assert said in result["why"], result["why"]
    assert new.source["migrated_from"]["recipe"] == Recipe.load(path).name
    assert "Given the space, that study ran here:" in result["why"]
    text = Path(result["report"]).read_text()
    assert f"tries its first choice (trial {first['trial']})" in text
    assert "Command: `" not in text  # the re-tune ran: no command to run it
    assert "warm-started from its first choice and Pareto neighbours: `" in text
