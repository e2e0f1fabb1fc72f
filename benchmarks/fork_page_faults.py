"""Why a probe in a process of its own runs slower than the same probe in a warm process
(issue 24): page faults. The same probe (tiny_gpt tiny, one thread), in rotating order each
round, run (a) in this process, which has run a probe before (the direct loop of
`study_overhead.py`); (b) in a child forked from this warm process; (c) in a child forked from a
process that did the probe process's imports and nothing else (a study's zygote); (d) as (c),
with glibc told to keep what it frees (`autotune.process.malloc.keep_freed`, what every probe
process now does: trim threshold 256 MiB, top pad 64 MiB, mmap threshold 32 MiB). Each reports
the probe's own wall time and its minor page faults.

    python benchmarks/fork_page_faults.py [--steps 2000] [--rounds 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import close_report, machine, table

from autotune.process.malloc import keep_freed


def minor_faults() -> int:
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def one(cfg: Any) -> dict[str, Any]:
    from autotune.probe import run_probe

    before = minor_faults()
    wall = float(run_probe(cfg)["wall_s"])
    return {"wall_s": round(wall, 3), "faults": minor_faults() - before}


def in_child(cfg: Any, tune: bool) -> dict[str, Any]:
    """`one(cfg)` in a child forked from this process."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if tune:
            keep_freed()
        os.write(w, json.dumps(one(cfg)).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return dict(json.loads(data))


class ColdParent:
    """A process forked before this one ran any probe, forking a child per request."""

    def __init__(self, cfg: Any) -> None:
        ask_r, self.ask = os.pipe()
        got, got_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.ask)
            os.close(got)
            while (b := os.read(ask_r, 1)) != b"":
                os.write(got_w, (json.dumps(in_child(cfg, b == b"t")) + "\n").encode())
            os._exit(0)
        os.close(ask_r)
        os.close(got_w)
        self.answers = os.fdopen(got)

    def run(self, tune: bool) -> dict[str, Any]:
        os.write(self.ask, b"t" if tune else b"p")
        return dict(json.loads(self.answers.readline()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        ap.error("--steps and --rounds must be >= 1")
    import time

    import torch

    from autotune.probe import ProbeConfig, run_probe
    from autotune.process.entry import preload

    started, m = time.perf_counter(), machine()
    torch.set_num_threads(1)
    preload()
    cfg = ProbeConfig(workload="tiny_gpt", size="tiny", steps=args.steps, micro_batch=16,
                      threads=1, knobs={"lr": 3e-4})  # fmt: skip
    cold = ColdParent(cfg)
    run_probe(ProbeConfig(**{**cfg.to_dict(), "steps": 300}))  # this process is now warm
    ways: dict[str, Callable[[], dict[str, Any]]] = {
        "(a) in this warm process": lambda: one(cfg),
        "(b) forked from it": lambda: in_child(cfg, False),
        "(c) forked from a cold, preloaded process": lambda: cold.run(False),
        "(d) as (c), glibc keeping what it frees": lambda: cold.run(True),
    }
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in ways}
    names = list(ways)
    for i in range(args.rounds):
        for name in names[i % 4 :] + names[: i % 4]:
            results[name].append(ways[name]())
            print(i, name, results[name][-1], flush=True)
    rows = []
    for name, runs in results.items():
        wall = sum(r["wall_s"] for r in runs) / len(runs)
        faults = sum(r["faults"] for r in runs) / len(runs)
        rows.append(
            [name, f"{wall:.2f}", f"{faults:,.0f}", ", ".join(str(r["wall_s"]) for r in runs)]
        )
    text = table(["way", "mean wall (s)", "mean minor faults", "per round (s)"], rows)
    close_report(args.json, m, started, results, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
