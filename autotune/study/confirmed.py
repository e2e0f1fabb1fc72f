"""A `better` chosen among several verified configurations, and judged again with fresh seeds.

The study's pick is the best of the configurations it verified, chosen on the very seeds its
paired verdict against the defaults is computed over: the luckiest of k there. With the
verdict's own code (`benchmarks/pick_selection.py`, one objective, 3 seeds, the default 3
candidates) a pick read `better` when nothing differed in 5.3% of simulated studies, against
2.3% for a configuration fixed in advance. So when more than one searched configuration was
verified at the decided length and the pick reads `better`, but would not with the error shared
over the k it was chosen among as well (`paired.compare(among=k)`: a win that large no choice
among k explains), the pick and the baseline run again on as many fresh seeds
(`confirm.confirm_phase`), and the verdict is the one over all their seeds. In the same
simulation: 2.2% false `better` (a configuration fixed in advance: 2.3%), and the power as
before (69.8% for a pick 4 SD better). The pick is not chosen again: the ranking stays the
first seeds', where every candidate ran; only its verdict is judged on more. A `better` that
does not survive is what all the seeds say (a tie gives the defaults: `verdict.decide`).

This module reads what the study stored (`attrs.CONFIRMED`); `confirm` runs it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune import space as sp
from autotune.recipe import paired as pd
from autotune.recipe.seeds import seeds_for
from autotune.study import attrs as ua
from autotune.study import pick as pk
from autotune.study.records import baseline_trial


def fresh_seeds(space: sp.Space) -> list[int]:
    """The seeds a confirmation runs: as many as `verify.seeds`, after the verification's."""
    n = space.verify.seeds
    return seeds_for(space.probe.seed + n, n)


def verified_among(study: Any, steps: int | None) -> int:
    """How many searched configurations were verified at `steps`: what a pick there was chosen
    among, on the same seeds."""
    base = baseline_trial(study)
    skip = None if base is None else base.number
    found = pk.verified_results(study).items()
    return sum(1 for n, res in found if n != skip and res.get("steps") == steps)


def awaiting(
    study: Any, cand: Any, base: Any, metrics: Sequence[tuple[str, str]], out: dict[str, Any]
) -> dict[str, Any]:
    """`out`, the verdict of `cand` over its verification's seeds, said to await its
    confirmation when it reads `better` only by the error of one configuration fixed in advance
    (the study that would run it was stopped first, or ran before confirmations were made)."""
    if out.get("verdict") != "better" or cand.verified is None:
        return out
    among = verified_among(study, cand.verified.get("steps"))
    if among < 2 or pd.compare(cand.verified, base, metrics, among=among)["verdict"] == "better":
        return out
    out["confirmation"] = {"among": among, "pending": True}
    out["why"] = (
        f"{out.get('why') or 'better'}; chosen among {among} verified configurations on these "
        "seeds, it is not yet confirmed with fresh ones: run the study again to confirm it"
    )
    return out


def confirmation(study: Any, number: int, steps: int | None) -> dict[str, Any] | None:
    """The stored confirmation of trial `number` at `steps` (None: there is none)."""
    conf = study.user_attrs.get(ua.CONFIRMED)
    if not isinstance(conf, dict) or conf.get("number") != number or conf.get("steps") != steps:
        return None
    if not isinstance(conf.get("pick"), dict) or not isinstance(conf.get("baseline_result"), dict):
        return None
    return conf


def judged(conf: dict[str, Any], metrics: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The paired verdict over every seed of a confirmation, saying how it came about."""
    out = pd.compare(conf["pick"], conf["baseline_result"], metrics)
    first, fresh = list(conf.get("chosen_on") or []), list(conf.get("seeds") or [])
    out["confirmation"] = {
        "among": conf.get("among"),
        "chosen_on": first,
        "seeds": fresh,
        "first_verdict": conf.get("first_verdict"),
    }
    told = (
        f"chosen among {conf.get('among')} verified configurations on seeds {first}, where it "
        f"read better, then judged with fresh seeds {fresh} too"
    )
    out["why"] = f"{out['why']}; {told}" if out.get("why") else told
    return out
