"""The worker side of a study (`autotune.study.workers`): the records of a worker's failure, and
the job runner the rungs, the yardstick and the verification share, on a real local Ray."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from autotune import space as sp
from autotune.study import workers


def test_a_probe_task_is_forked_by_its_workers_zygote_unless_it_holds_a_gpu() -> None:
    assert workers.zygote_pays(0.0) is True
    assert workers.zygote_pays(1.0) is False and workers.zygote_pays(0.5) is False


def test_a_dead_worker_is_one_failed_record_with_the_error_ray_gave() -> None:
    died = workers.worker_died("WorkerCrashedError: gone")
    assert list(died.items()) == [
        ("outcome", "failed"),
        ("cause", "worker_died"),
        ("error", "WorkerCrashedError: gone"),
        ("summary", None),
    ]
    assert json.dumps(died) == (
        '{"outcome": "failed", "cause": "worker_died", "error": "WorkerCrashedError: gone", '
        '"summary": null}'
    )


def test_an_error_on_the_worker_names_the_exception_and_keeps_its_traceback() -> None:
    try:
        raise OSError("Argument list too long\nsecond line")
    except OSError as e:
        rec = workers.worker_error(e)
    assert rec["outcome"] == "failed" and rec["cause"] == "worker_error"
    assert rec["error"] == "OSError: Argument list too long"
    assert "Traceback" in rec["log_tail"] and "test_an_error_on_the_worker" in rec["log_tail"]
    assert rec["summary"] is None and rec["fingerprint"] is None and rec["node"]
    assert workers.worker_error(ValueError())["error"] == "ValueError"


# A script that kills its Ray worker before it reports: its probe process's parent, or the
# parent of the worker's zygote that forked it.
KILLER = """\
import os, signal, time
worker = os.getppid()
with open(f"/proc/{worker}/cmdline", "rb") as f:
    if b"autotune.process.zygote" in f.read():
        with open(f"/proc/{worker}/stat") as s:
            worker = int(s.read().rsplit(")", 1)[1].split()[1])
os.kill(worker, signal.SIGKILL)
time.sleep(60)
"""
FINE = (
    "import autotune\n"
    "trial = autotune.trial(steps=10, micro_batch=2)\n"
    "for i in range(trial.steps):\n"
    "    trial.report(i, loss=1.0 / (i + 1))\n"
)
SPACE = """\
name: workers
workload: {{script: {script}}}
probe: {{steps: 10, micro_batch: 2, threads: 1}}
budget: {{trials: 2, concurrency: 1, cpus_per_trial: 1}}
knobs:
  lr: 0.01
"""


def _space(tmp: Path, name: str, script: str) -> sp.Space:
    (tmp / f"{name}.py").write_text(script)
    path = tmp / f"{name}.yaml"
    path.write_text(SPACE.format(script=str(tmp / f"{name}.py")))
    return sp.load(str(path))


@pytest.mark.integration
def test_jobs_run_in_order_a_dead_worker_and_an_error_are_failed_probes_not_a_failed_run(
    tmp_path: Path,
) -> None:
    import ray

    fine, killer = _space(tmp_path, "fine", FINE), _space(tmp_path, "killer", KILLER)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    temp = Path(tempfile.gettempdir()) / f"autotune-ray-{os.getuid()}"
    temp.mkdir(parents=True, exist_ok=True)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
        _temp_dir=str(temp),
    )
    try:
        here = ray.get_runtime_context().get_node_id()
        jobs = [
            workers.ProbeJob("killed", sp.probe_config(killer), {}),
            workers.ProbeJob("fine", sp.probe_config(fine), {}, node=here),
            # an environment over the kernel's 128 KiB per variable: the worker cannot start the
            # probe's process (E2BIG), as a screen trial's (tests/study/test_study.py) cannot
            workers.ProbeJob("error", sp.probe_config(fine), {"HSA_AUTOTUNE_BIG": "x" * 200_000}),
        ]
        seen: list[tuple[Any, dict[str, Any], float]] = []
        t0 = time.monotonic()
        ok = workers.run_jobs(
            fine, ray, jobs, 120, lambda j, out, s: seen.append((j.key, out, s)), str
        )
        whole = time.monotonic() - t0
    finally:
        ray.shutdown()
    assert ok is True
    # on 2 CPUs one probe at a time (one core kept for the driver): in the order given
    assert [key for key, _, _ in seen] == ["killed", "fine", "error"]
    killed, done, error = (out for _, out, _ in seen)
    assert killed["outcome"] == "failed" and killed["cause"] == "worker_died", killed
    assert set(killed) == {"outcome", "cause", "error", "summary"}
    assert "Worker" in killed["error"] or "died" in killed["error"], killed["error"]
    assert done["outcome"] == "complete", done.get("log_tail")
    assert done["ray_node"] == here and done["summary"]["steps_run"] == 10
    # on a CPU worker, forked by the worker's zygote as the screen's trials are (`zygote_pays`)
    assert done["zygote"] is not None, done
    # each job's own seconds, from its hand-over to its record (its progress line's), not the
    # phase's so far: one at a time, they add up to no more than the whole run
    assert all(s > 0 for _, _, s in seen) and sum(s for _, _, s in seen) <= whole, (seen, whole)
    # a probe that raised on its worker is the screen's record (`worker_error`), not a dead worker
    assert error["outcome"] == "failed" and error["cause"] == "worker_error", error
    assert error["error"].startswith("OSError: ") and "Traceback" in error["log_tail"], error
    assert error["ray_node"] == here and error["summary"] is None
