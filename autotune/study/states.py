"""Where a study keeps its probes' states, so that a promoted probe continues the same trial's
probe at the rung below instead of starting over (`autotune.probe.checkpoint`).

`study_dir/state/NNNN-sSTEPS.pt`: the state of trial NNNN after STEPS steps (at probe.batch; a
trial that searches the batch runs its own steps for that length); a DDP probe's ranks each keep
`NNNN-sSTEPS.pt.rankR`; a script whose framework checkpoints itself keeps its checkpoint beside it
in the folder `NNNN-sSTEPS.pt.d` (`autotune.probe.script_state`). Screen probes write one when the
study has rungs above the screen; a rung's probes read the one below and write their own, except at
the top rung. A rung's states are removed once the rung above has finished (a driver stopped mid-
rung still finds them), those of trials not promoted as soon as promotion has chosen, and every
state once the study has decided (or found decided).

On a cluster a probe writes its state on the node that ran it; the promoted probe is asked to run
on that node (Ray's soft node affinity, spilling elsewhere at once when that node is gone or busy)
and starts over where the state is not found. `remove_everywhere` removes states on the driver's
node and on every other live node of the cluster (a task pinned to each node; a node that died
keeps what it wrote).
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.probe import ProbeConfig
from autotune.probe.checkpoint import unsupported
from autotune.study.folder import state_dir, state_path

# a DDP rank's: .pt.rankR; a framework's own checkpoint (a script's HF or Lightning): .pt.d/
_STATE = re.compile(r"(\d{4,})-s(\d+)\.pt(\.rank\d+|\.d)?")


def screen_probe(
    space: sp.Space,
    study_dir: Path,
    number: int,
    knobs: Mapping[str, Any],
    env: Mapping[str, Any],
    *,
    rungs_above: bool,
    baseline: bool = False,
) -> ProbeConfig:
    """Trial `number`'s screen probe; it keeps its state when a rung may continue it."""
    cfg = sp.probe_config(space, knobs=knobs, env=env).for_baseline(baseline)
    if not (rungs_above and space.rungs.continuation):
        return cfg
    return with_states(cfg, study_dir, number, steps=space.probe.steps, save=True)


def rung_probe(
    space: sp.Space,
    study_dir: Path,
    number: int,
    knobs: Mapping[str, Any],
    env: Mapping[str, Any],
    *,
    steps: int,
    below: int,
    top: bool,
    baseline: bool = False,
) -> ProbeConfig:
    """Trial `number`'s probe at a rung of `steps`: it continues its state at the rung `below`
    and keeps its own unless it is the `top` rung (`rungs.continuation: false`: neither)."""
    cfg = sp.probe_config(space, knobs=knobs, env=env, steps=steps).for_baseline(baseline)
    if not space.rungs.continuation:
        return cfg
    return with_states(cfg, study_dir, number, steps=steps, save=not top, resume_steps=below)


def with_states(
    cfg: ProbeConfig,
    study_dir: Path,
    number: int,
    *,
    steps: int,
    save: bool,
    resume_steps: int | None = None,
) -> ProbeConfig:
    """`cfg` (a probe of trial `number` at the length `steps`) set to write its state when
    `save`, and to continue from the trial's state at `resume_steps`; unchanged for a probe
    that cannot continue (a script, an OOM retry, a scaling timing: they restart)."""
    if unsupported(cfg) is not None:
        return cfg
    return replace(
        cfg,
        save_state=str(state_path(study_dir, number, steps)) if save else None,
        resume_from=(
            None if resume_steps is None else str(state_path(study_dir, number, resume_steps))
        ),
    )


def remove_states(
    study_dir: Path, *, steps: Iterable[int] | None = None, keep: Iterable[int] = ()
) -> None:
    """Remove the states at the lengths `steps` but those of the trials `keep` (None: every
    state, and the folder)."""
    folder = state_dir(study_dir)
    if steps is None:
        shutil.rmtree(folder, ignore_errors=True)
        return
    wanted, kept = set(steps), set(keep)
    for path in folder.glob("*.pt*") if folder.is_dir() else ():
        m = _STATE.fullmatch(path.name)
        if m and int(m.group(2)) in wanted and int(m.group(1)) not in kept:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
                continue
            with contextlib.suppress(OSError):
                path.unlink()


REMOVE_TIMEOUT_S = 60.0
"""How long the driver waits for the other nodes to remove their states (a node that does not
answer in time keeps them; nothing else waits on it)."""


def remove_everywhere(
    ray: Any,
    study_dir: Path,
    *,
    steps: Iterable[int] | None = None,
    keep: Iterable[int] = (),
) -> list[str]:
    """`remove_states` here and on every other live node of the Ray cluster (a probe writes its
    state on the node that ran it); return the ids of the other nodes that did. Without a Ray
    session (`ray` None or not started), here only."""
    remove_states(study_dir, steps=steps, keep=keep)
    if ray is None or not ray.is_initialized():
        return []
    here = ray.get_runtime_context().get_node_id()
    others = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n["NodeID"] != here]
    if not others:
        return []
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0, max_retries=0)(_remove_on_node)
    args = (study_dir, None if steps is None else list(steps), list(keep))
    refs = [
        task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
            *args
        )
        for node in others
    ]
    done, late = ray.wait(refs, num_returns=len(refs), timeout=REMOVE_TIMEOUT_S)
    for ref in late:
        ray.cancel(ref, force=True)
    removed: list[str] = []
    for ref in done:
        with contextlib.suppress(Exception):  # a node that died meanwhile keeps its states
            removed.append(str(ray.get(ref)))
    return removed


def _remove_on_node(study_dir: Path, steps: list[int] | None, keep: list[int]) -> str:
    """A Ray task: remove the states on the node it runs on; return that node's id."""
    import ray

    remove_states(study_dir, steps=steps, keep=keep)
    return str(ray.get_runtime_context().get_node_id())
