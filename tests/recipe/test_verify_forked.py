"""`verify`'s and `migrate`'s probes are forked by a zygote kept for the command
(`autotune.process.zygotes.serving`), not fresh processes that each import torch again: a forked
probe gives a fresh one's numbers at the same seed, each environment of the arms keeps its own
zygote across the seeds, and none outlives the runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import assets.studies as h
import pytest

from autotune import space as sp
from autotune.probe.summary import loss_of
from autotune.process import zygotes
from autotune.recipe.verify import run_interleaved, run_local, run_one

pytestmark = pytest.mark.integration

#: What a probe measures of time and memory: not the same twice, forked or not.
TIMED = ("throughput", "throughput_high", "throughput_low", "peak_mem_mb")


def _numbers(out: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    assert out["outcome"] == "complete", out["log_tail"]
    summary = out["summary"]
    metrics = {k: v for k, v in summary["metrics"].items() if k not in TIMED}
    return loss_of(summary), metrics


def test_forked_probes_give_a_fresh_ones_numbers_and_their_zygotes_end_with_the_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the probe processes import the installed package
    cfg = sp.probe_config(sp.load("gradclip", ["probe.steps=40", "knobs.clip_norm=0.5"]))
    said: list[str] = []
    fresh = run_one(cfg, {}, 11, timeout_s=300, threads=1, say=said.append, label="fresh")
    assert fresh["zygote"] is None  # outside `serving`: a fresh process, as before

    other = {"NCCL_DEBUG": "WARN"}  # an environment knob: an arm of its own zygote
    ran = run_interleaved(
        [(cfg, {}, "a"), (cfg, other, "b")], [11, 12, 13], timeout_s=300, threads=1,
        say=said.append,
    )  # fmt: skip
    a, b = ran
    assert [r["seed"] for r in a] == [11, 12, 13] == [r["seed"] for r in b]

    # The same seed, forked or fresh: the same loss at every step and the same metrics.
    losses, metrics = _numbers(fresh)
    assert len(losses) == 40
    assert _numbers(a[0]) == (losses, metrics)
    assert _numbers(b[0]) == (losses, metrics)  # NCCL_DEBUG does not touch a CPU probe
    assert _numbers(a[1])[0] != losses  # another seed is another run

    # Each arm forked by its own zygote, started once and kept across the seeds, although
    # the arms alternate; its environment knob set in its probes.
    za, zb = a[0]["zygote"], b[0]["zygote"]
    assert za is not None and zb is not None and za != zb
    assert [r["zygote"] for r in a] == [za] * 3 and [r["zygote"] for r in b] == [zb] * 3
    assert [r["spare"] for r in a] == [False, True, True] == [r["spare"] for r in b]
    assert "NCCL_DEBUG" not in a[2]["fingerprint"]["env"]
    assert b[2]["fingerprint"]["env"].get("NCCL_DEBUG") == "WARN"
    # A forked probe starts without importing torch again: its start is a fraction of a fresh
    # process's (the first of each arm waited for its zygote's imports).
    assert max(a[2]["start_s"], b[2]["start_s"]) * 4 < fresh["start_s"], (a, b, fresh)

    # Nothing outlives the runs.
    assert h.ended(za) and h.ended(zb)
    assert not zygotes._ZYGOTES and not zygotes.serving_now()
    assert sum(" seed " in line for line in said) == 7  # each run said its line


def test_a_commands_serving_keeps_its_zygote_across_its_runs_and_ends_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`migrate` runs many `run_local`s inside one `serving`: one zygote for all of them, ended
    when the command's block ends, also when it ends by an exception (Ctrl-C)."""
    monkeypatch.chdir(tmp_path)
    cfg = sp.probe_config(sp.load("gradclip", ["probe.steps=10"]))
    with pytest.raises(KeyboardInterrupt), zygotes.serving():
        (first,) = run_interleaved([(cfg, {}, "x")], [1], timeout_s=300, threads=1, say=print)[0]
        (second,) = run_local(cfg, {}, [2], timeout_s=300, threads=1, say=print, label="x")
        assert first["zygote"] is not None and second["zygote"] == first["zygote"]
        assert second["spare"] is True and h.ended(first["zygote"], timeout=0.5) is False
        raise KeyboardInterrupt
    assert h.ended(first["zygote"])
    assert not zygotes._ZYGOTES and not zygotes.serving_now()
