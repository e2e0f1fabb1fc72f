"""A small real study with a constraint relative to the baseline (real local Ray, SQLite Optuna
and MLflow; nothing mocked): the baseline's screen runs at the verification seeds too (the
screen's yardstick), the baseline is verified beside the best candidate, and `show --json`
carries the paired verdict, both sides' final loss with its interval, and every verified
configuration's diverged share and causes. Then `autotune verify` of a recipe that diverges on
every seed exits 1 and says why."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from assets import studies as h

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

RELATIVE = (
    "constraints:\n"
    "  - {metric: loss_drop, op: '>=', value: 0.05}\n"
    "  - {metric: final_loss, op: '<=', value: 1.05, relative_to: baseline}\n"
)
VERDICTS = ("better", "no detectable difference", "worse", "mixed", "not compared")


def cli(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A read-only command in-process (`assets.cli.in_process`)."""
    from assets.cli import in_process

    return in_process(args, cwd)


def test_show_json_carries_the_paired_verdict_and_verify_refuses_a_diverging_recipe(
    tmp_path: Path,
) -> None:
    text = h.mlp_space("verdicts", trials=3, verify_top_k=1, verify_seeds=2) + RELATIVE
    # One objective, the final loss: the tuned trials usually end a little lower than the
    # defaults at the screen seed, so the pick is compared with the baseline over the seeds.
    both = (
        "  - {metric: loss_cv, direction: minimize}\n"
        "  - {metric: throughput, direction: maximize}\n"
    )
    assert both in text
    text = text.replace(both, "  - {metric: final_loss, direction: minimize}\n")
    space = h.write(tmp_path, text.replace("device: cpu,", "device: cpu, threads: 1,"))
    uri = h.sqlite_uri(tmp_path)
    run = h.autotune(
        ["study", "--space", str(space), "--tracking-uri", uri], tmp_path, token=h.new_token()
    )
    assert run.returncode == 0, h.explain(run)
    assert "the baseline's screen at seeds [1, 2] too" in run.stdout, run.stdout
    study_dir = tmp_path / "autotune-studies" / "verdicts"
    names = sorted(p.name for p in (study_dir / "verify").glob("0000-*.json"))
    assert names == ["0000-s30-seed1.json", "0000-s30-seed2.json"], "the baseline's seeds"

    show = cli(["show", "verdicts", "--json"], tmp_path)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    assert summary["unfinished"] is None, "a study run to its end is finished"
    yard = summary["screen_yardstick"]
    assert yard["seeds"] == [0, 1, 2] and yard["runs"] == 3
    fl = yard["metrics"]["final_loss"]
    if yard["usable"] >= 2:
        assert yard["reference"]["final_loss"] == pytest.approx(fl["high"])
    pick = summary["pick"]
    assert pick is not None and pick["number"] is not None, summary["pick"]
    assert pick["verdict"] in VERDICTS and isinstance(pick["defaults_preferred"], bool)
    vs = summary["vs_baseline"]
    assert vs["verdict"] == pick["verdict"] and vs["steps"] == 30
    assert summary["vs_baseline"]["pick"]["number"] != 0, "on this machine: a tuned first choice"
    assert vs["pick"]["number"] == pick["first_choice"] and vs["baseline"]["number"] == 0
    for side in ("pick", "baseline"):
        row = vs[side]
        assert row["source"] == "verified", row
        assert set(row["final_loss"]) >= {"mean", "low", "high", "n"}
        assert 0.0 <= row["diverged_share"] <= 1.0 and isinstance(row["causes"], dict)
    if pick["first_choice"] != 0:
        assert vs["seeds"] == [1, 2] and vs["diverged"]["n"] == 2
        d = vs["metrics"]["final_loss"]["difference"]
        assert set(d) == {"mean", "low", "high", "n"}
        if pick["verdict"] in ("no detectable difference", "worse"):
            assert pick["number"] == 0 and pick["defaults_preferred"]
    verified = {v["number"]: v for v in summary["verified"]}
    assert 0 in verified and pick["first_choice"] in verified
    for v in verified.values():
        assert {"diverged_share", "causes", "held", "why_not_picked", "final_loss"} <= set(v)
        assert [r["seed"] for r in v["runs"]] == [1, 2]
    shown = cli(["show", "verdicts"], tmp_path)
    assert "relative constraints at the screen: against the baseline's screen" in shown.stdout
    assert " vs baseline" in shown.stdout

    # The export carries the verdict; a recipe with a learning rate that diverges everywhere
    # is not "as promised", whatever it promised: exit 1, saying why.
    out = tmp_path / "recipe.yaml"
    exp = cli(["export", "verdicts", "-o", str(out)], tmp_path)
    assert exp.returncode == 0, h.explain(exp)
    data = yaml.safe_load(out.read_text())
    assert data["source"]["vs_baseline"]["verdict"] == pick["verdict"]
    assert data["source"]["trial"] == pick["number"]
    assert data["source"]["defaults"] == pick["defaults_preferred"]
    data["knobs"]["lr"] = 5.0  # 30-50x its reference for ~30 steps: diverged once 20 persist
    data["probe"]["divergence"] = {**(data["probe"].get("divergence") or {}), "persist_steps": 20}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    args = ["verify", str(bad), "--seeds", "1", "--no-baseline", "--tracking-uri", uri]
    ver = h.autotune(args, tmp_path)
    assert ver.returncode == 1, h.explain(ver)
    assert "is NOT as promised: it diverged on every seed (1 of 1)" in ver.stderr, ver.stderr
