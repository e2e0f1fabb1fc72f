"""Mutation score of the verdict modules: would the suite notice if a verdict were wrong?

Runs mutmut (`pip install -e ".[mutation]"`, or `pip install mutmut`) over the modules that
decide what the tool concludes (diverged, promoted, picked, as promised), in a throw-away copy
of this checkout, against the unit suite (`-m "not integration"`; mutmut runs, for each mutant,
only the tests that reach the mutated function). Not part of CI: it takes tens of minutes on 2
cores.

    python benchmarks/mutation.py                      # the verdict modules, all their mutants
    python benchmarks/mutation.py --module autotune/study/rungs.py --children 2
    python benchmarks/mutation.py --module autotune/study/rungs.py \
        --tests tests/study/test_rungs.py --tests tests/study/test_rungs_chance.py

`--tests` runs each mutant against those test files only (those of them that reach its
function) instead of the whole unit suite: minutes instead of an hour on a busy 2-core machine.
A mutant those tests kill the suite kills too, so the score is a lower bound of the suite's.
`--deselect FILE::TEST` (repeatable) leaves a test out of them (a slow one).

mutmut forks a child per mutant from a process that has run the tests once; a test that
trains a real model then hangs in the child on torch's OpenMP thread pool until the CPU limit,
which would count its mutant as caught (a *timeout*) for nothing. The script runs mutmut with
one OpenMP thread (`OMP_NUM_THREADS=1`), which the fork leaves working.

A mutant is *killed* when a test fails, *timeout* when the tests ran past mutmut's limit (an
endless loop the mutant made: counted as caught, and listed apart), *survived* when every test
passed. The score is (killed + timeout) / (killed + timeout + survived). The survivors are
printed with their diff, to be killed by a new test or shown to be equivalent; the JSON record
goes to `benchmarks/results/mutation.json` (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

VERDICT_MODULES = (
    "autotune/probe/divergence.py",
    "autotune/study/rungs.py",
    "autotune/study/noise.py",
    "autotune/study/pick.py",
    "autotune/study/verdict.py",
    "autotune/recipe/paired.py",
    "autotune/recipe/promise.py",
    "autotune/recipe/verify.py",
)
"""The modules whose decisions the tool prints as verdicts (those present are mutated)."""

ALSO_COPY = ("benchmarks/", "workloads/", "search_spaces/", "examples/", "docs/", "README.md")


def copy_checkout(dest: Path) -> None:
    """The working tree as git sees it (tracked and untracked-not-ignored files) into `dest`."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for raw in files:
        if not raw:
            continue
        rel = Path(os.fsdecode(raw))
        src = ROOT / rel
        if not src.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def write_config(
    dest: Path,
    modules: list[str],
    timeout_multiplier: float,
    tests: list[str] | None = None,
    deselect: list[str] | None = None,
) -> None:
    """mutmut's settings in the copy's setup.cfg (the repository keeps none of its own);
    `tests`: the test files mutants run against (default: all of tests/); `deselect`: test ids
    left out of them."""
    skip = "".join(f"\n    --deselect\n    {node}" for node in deselect or [])
    lines = [
        "[mutmut]",
        "source_paths=autotune/",
        "only_mutate=" + "\n    ".join(modules),
        # test_layers reads the sources (their length, their imports): mutmut's rewritten copies
        # are not the code under test there. `-n 0`: one test process (the suite's addopts ask
        # pytest-xdist for two, whose workers mutmut cannot see: it would find no test reaching
        # any mutant and judge none)
        "pytest_add_cli_args=-m\n    not integration\n    -x\n    -q\n    -n\n    0"
        "\n    -p\n    no:cacheprovider\n    --ignore=tests/test_layers.py" + skip,
        "pytest_add_cli_args_test_selection=" + "\n    ".join(tests or ["tests/"]),
        # what the tests read besides the package and tests/ (mutmut copies only those)
        "also_copy=" + "\n    ".join(ALSO_COPY),
        f"timeout_multiplier={timeout_multiplier}",
    ]
    (dest / "setup.cfg").write_text("\n".join(lines) + "\n")


def results(workdir: Path) -> dict[str, str]:
    """mutant name -> status, from `mutmut results --all true`."""
    out = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name:
            found[name] = status.strip()
    return found


def diff_of(workdir: Path, name: str) -> str:
    shown = subprocess.run(
        [sys.executable, "-m", "mutmut", "show", name],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    return shown.stdout.strip()


def score(statuses: dict[str, str]) -> dict[str, object]:
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    caught = counts.get("killed", 0) + counts.get("timeout", 0)
    judged = caught + counts.get("survived", 0)
    return {"counts": counts, "score": caught / judged if judged else None, "judged": judged}


def of_module(statuses: dict[str, str], module: str) -> dict[str, str]:
    """The statuses of one module's mutants (named `pkg.mod.x_function__mutmut_N`)."""
    prefix = module.removesuffix(".py").replace("/", ".") + "."
    return {n: s for n, s in statuses.items() if n.startswith(prefix)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", action="append", help="a module to mutate (repeatable)")
    ap.add_argument("--children", type=int, default=2, help="mutants tested at once")
    ap.add_argument("--tests", action="append", help="a test file mutants run against (repeatable)")
    ap.add_argument(
        "--deselect",
        action="append",
        help="a test id (file::name) left out of the tests (repeatable)",
    )
    ap.add_argument("--timeout-multiplier", type=float, default=30.0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "mutation.json"))
    ap.add_argument("--keep", action="store_true", help="keep the throw-away copy")
    args = ap.parse_args(argv)
    modules = args.module or [m for m in VERDICT_MODULES if (ROOT / m).is_file()]
    missing = [m for m in [*modules, *(args.tests or [])] if not (ROOT / m).is_file()]
    if missing:
        print(f"no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    if shutil.which("git") is None:
        print("git is needed to copy the checkout", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="autotune-mutation-"))
    started = time.monotonic()
    try:
        copy_checkout(work)
        write_config(work, modules, args.timeout_multiplier, args.tests, args.deselect)
        print(f"mutating {', '.join(modules)} in {work}", flush=True)
        run = subprocess.run(
            [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.children)],
            cwd=work,
            env={**os.environ, "OMP_NUM_THREADS": "1"},  # see the module's docstring
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        statuses = results(work)
        if not statuses or not score(statuses)["judged"]:
            print(f"mutmut judged no mutant:\n{run.stderr[-2000:]}", file=sys.stderr)
            return 1
        survivors = sorted(n for n, s in statuses.items() if s == "survived")
        record = {
            "modules": modules,
            "tests": args.tests or ["tests/"],
            "deselected": args.deselect or [],
            **score(statuses),
            "by_module": {m: score(of_module(statuses, m)) for m in modules},
            "survived": {n: diff_of(work, n) for n in survivors},
            "timeout": sorted(n for n, s in statuses.items() if s == "timeout"),
            "wall_s": round(time.monotonic() - started, 1),
        }
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    sc = record["score"]
    for module, part in record["by_module"].items():  # type: ignore[union-attr]
        print(f"{module}: {part['counts']}")
    print(f"counts: {record['counts']}")
    print(f"score: {'n/a' if sc is None else f'{sc:.1%}'} of {record['judged']} judged mutants")
    for name, diff in record["survived"].items():  # type: ignore[union-attr]
        print(f"\nsurvived: {name}\n{diff}")
    print(f"\nwritten: {args.out} ({record['wall_s']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
