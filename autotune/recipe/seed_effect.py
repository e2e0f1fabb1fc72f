"""Whether the seeds a configuration ran over made any difference: a script that seeds torch
itself with a constant (`torch.manual_seed(1234)`) ignores `trial.seed`, and then every
verification seed replays one run. Its intervals are zero wide and a paired verdict over such
seeds is no evidence at all, so a study and `autotune verify` say so and judge nothing from
them, in the words `autotune repro --seeds` uses for the same finding, by the same bit-for-bit
check (`probe.series_equal`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.probe.series_equal import compare_run_series
from autotune.probe.summary import loss_of


def ignored_text(seeds: Sequence[Any]) -> str:
    """What `autotune repro --seeds`, a study and `autotune verify` say of identical runs."""
    return (
        f"the runs on seeds {', '.join(str(s) for s in seeds)} are identical: the workload "
        "ignores its seed, so runs over seeds (verification, the paired verdicts) measure "
        "nothing of the noise"
    )


def identical_seeds(runs: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The seeds of `runs` (one configuration's, one per seed) when at least two of them have
    a loss series and those series are equal bit for bit; else []. A run's series is its
    `loss_series` (a study's stored verification seed) or its summary's (`probe.summary`)."""
    series = {}
    for r in runs:
        loss = r.get("loss_series") or loss_of(r.get("summary"))
        if loss and r.get("seed") is not None:
            series[r["seed"]] = loss
    if len(series) < 2:
        return []
    return list(series) if compare_run_series(list(series.values()))["bitwise_equal"] else []
