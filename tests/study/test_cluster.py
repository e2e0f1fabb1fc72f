"""A study on a real two-node Ray cluster, with its Optuna storage and MLflow backend in PostgreSQL.

Both Ray nodes run on this machine (loopback, one CPU each), so two trials at once must land on
two different nodes. PostgreSQL comes from AUTOTUNE_TEST_PG, a base URL such as
postgresql://autotune:autotune@127.0.0.1:55432 whose server holds the databases autotune_optuna
and autotune_mlflow (.ci/run creates them). Without it the test is skipped, unless
AUTOTUNE_REQUIRE_SERVICES=1 (CI), where that is a failure. The databases persist between runs:
each run uses a study name of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from assets import studies as h

pytestmark = [
    pytest.mark.integration,
    pytest.mark.cluster,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

TRIALS = 4
STEPS = 20


@pytest.fixture
def pg() -> str:
    """The PostgreSQL base URL; asked for first, so that a missing server starts nothing."""
    return h.pg_base()


@contextlib.contextmanager
def cluster(nodes: int = 2, token: str | None = None, **env: str) -> Iterator[str]:
    """A head and `nodes - 1` more nodes on loopback, one CPU each, started with `env` on top of
    the tests' (`h.cli_env`: Ray's token authentication off unless `env` says otherwise);
    yields the head's host:port.

    Teardown stops exactly the processes these `ray start` calls made (found by a token in
    their environment, `token` if given): `ray stop --force` would also stop any other Ray on
    this machine.
    """
    token = token or h.new_token()
    temp = Path(tempfile.mkdtemp(prefix="atray-", dir="/tmp"))  # short: Ray's unix sockets
    ray = str(Path(sys.executable).with_name("ray"))
    port = h.free_port()
    common = [
        "--node-ip-address=127.0.0.1",
        "--num-cpus=1",
        "--disable-usage-stats",
        f"--temp-dir={temp}",
    ]
    head = [
        ray,
        "start",
        "--head",
        f"--port={port}",
        "--include-dashboard=false",
        f"--dashboard-agent-listen-port={h.free_port()}",
        *common,
    ]
    node = [
        ray,
        "start",
        f"--address=127.0.0.1:{port}",
        f"--dashboard-agent-listen-port={h.free_port()}",
        *common,
    ]
    try:
        for cmd in [head, *[node] * (nodes - 1)]:
            started = subprocess.run(
                cmd,
                env=h.cli_env(token, **env),
                capture_output=True,
                text=True,
                timeout=120,
                stdin=subprocess.DEVNULL,
            )
            assert started.returncode == 0, f"{' '.join(cmd)}\n{started.stdout}\n{started.stderr}"
        yield f"127.0.0.1:{port}"
    finally:
        h.kill_tagged(token, grace_s=3)
        shutil.rmtree(temp, ignore_errors=True)
    assert not h.tagged_processes(token), "Ray processes outlived the test"


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A head and a second node on loopback, one CPU each; yields the head's host:port. One
    cluster for the module's tests that use it (starting it took 14-19 s of each on CI): each
    study's driver is a job of its own on it, and a test's own processes are found by its own
    token. (Started before a test's `pg` fixture, a module's being set up first: without
    PostgreSQL the cluster still serves the tests that need none.)"""
    with cluster() as address:
        yield address


def test_a_cluster_with_rays_token_authentication(tmp_path: Path) -> None:
    """Ray 2.59 and later start a cluster with token authentication on (the README's `ray
    start` lines as a user runs them): a driver without the token is refused in one line that
    says so and what to do, and makes nothing; with RAY_AUTH_MODE=token and the cluster's
    token it runs. The token is given as RAY_AUTH_TOKEN, so nothing is written to ~/.ray."""
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    with cluster(nodes=1, **auth) as address:
        space = h.write(tmp_path, h.mlp_space("tok", trials=2, steps=STEPS, verify_top_k=0))
        cmd = ["study", "--space", str(space), "--address", address]
        refused = h.autotune(cmd, tmp_path, env=h.cli_env(h.new_token()), timeout=300)
        assert refused.returncode == 2, h.explain(refused)
        last = refused.stderr.strip().splitlines()[-1]
        assert last.startswith("autotune: error: cannot join the Ray cluster"), last
        assert "InvalidAuthToken" in last and "RAY_AUTH_MODE=token" in last, last
        assert not (tmp_path / "autotune-studies" / "tok").exists(), "a refused join made a study"
        joined = h.autotune(cmd, tmp_path, env=h.cli_env(h.new_token(), **auth), timeout=590)
        assert joined.returncode == 0, h.explain(joined)


def test_the_cluster_lost_mid_study_is_said_in_one_line(tmp_path: Path) -> None:
    """A review killed the head's processes (kill -9) during the screen: the driver waited 60 s
    in Ray and ended with Ray's own "Failed to connect to GCS within 60 seconds" (status 1), no
    word of autotune's. It now says in one line that the cluster at its address was lost and
    how to carry on, within seconds, with status 1."""
    space = h.write(tmp_path, h.mlp_space("headlost", trials=4, steps=STEPS))
    head_token, token = h.new_token(), h.new_token()
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with cluster(nodes=1, token=head_token) as address:
        cmd = ["study", "--space", str(space), "--address", address]
        cmd += ["--tracking-uri", h.sqlite_uri(tmp_path)]
        with out.open("w") as o, err.open("w") as e:
            proc = subprocess.Popen(
                h.autotune_cmd(*cmd), cwd=tmp_path, env=h.cli_env(token), stdout=o, stderr=e,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 240
            while "baseline   0" not in out.read_text():  # the screen runs
                assert proc.poll() is None, err.read_text()[-3000:]
                assert time.monotonic() < deadline, "the baseline never finished"
                time.sleep(0.2)
            for pid, _ in h.tagged_processes(head_token):  # the head dies: all of it, at once
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            code = proc.wait(timeout=50)
            took = time.monotonic() - killed
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            h.kill_tagged(token)
    stderr = err.read_text()
    assert code == 1, stderr[-3000:]
    assert took < 30, f"{took:.0f} s\n{stderr[-3000:]}"
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"autotune: error: lost the Ray cluster at {address}: "), last
    assert "once the cluster is back, run the same command with --resume" in last, last


def test_a_trial_no_node_can_hold_is_refused(ray_cluster: str, tmp_path: Path) -> None:
    """Two CPUs in all, one a node: a trial of two CPUs would never be placed, and Tune waited
    for it forever; the driver asks each node once it has joined, and removes what it made."""
    text = h.mlp_space("nofit", trials=2, steps=STEPS).replace(
        "trial_timeout_s: 120}", "trial_timeout_s: 120, cpus_per_trial: 2}"
    )
    space = h.write(tmp_path, text)
    cmd = ["study", "--space", str(space), "--address", ray_cluster]
    result = h.autotune([*cmd, "--tracking-uri", h.sqlite_uri(tmp_path)], tmp_path, timeout=300)
    assert result.returncode == 2, h.explain(result)
    last = result.stderr.strip().splitlines()[-1]
    assert "budget.cpus_per_trial: each trial asks for 2 CPU(s)" in last, last
    assert f"the largest node of the Ray cluster at {ray_cluster} has 1 CPU(s)" in last, last
    assert not (tmp_path / "autotune-studies" / "nofit").exists(), "a refused study was kept"


def test_study_on_two_ray_nodes_with_postgres(pg: str, ray_cluster: str, tmp_path: Path) -> None:
    import optuna
    from mlflow.tracking import MlflowClient

    storage, tracking = f"{pg}/autotune_optuna", f"{pg}/autotune_mlflow"
    name = f"cluster-{uuid.uuid4().hex[:10]}"
    space = h.write(tmp_path, h.mlp_space(name, trials=TRIALS, steps=STEPS))
    token = h.new_token()
    result = h.autotune(
        [
            "study",
            "--space",
            str(space),
            "--address",
            ray_cluster,
            "--storage",
            storage,
            "--tracking-uri",
            tracking,
            "--set",
            "budget.concurrency=2",
        ],
        tmp_path,
        token=token,
        timeout=400,
    )
    assert result.returncode == 0, h.explain(result)
    assert f"study {name}: {TRIALS}/{TRIALS} trials" in result.stdout, h.explain(result)
    assert "2 trial(s) at a time" in result.stdout, h.explain(result)
    password = urlsplit(pg).password
    if password:
        assert f":{password}@" not in result.stdout + result.stderr, "the password is shown"
    assert not h.wait_gone(token, timeout=30), "the driver left processes behind"

    # Optuna: every trial finished, in PostgreSQL, on both nodes.
    study = optuna.load_study(study_name=name, storage=storage)
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials] == list(range(TRIALS))
    assert all(t.state.name in ("COMPLETE", "FAIL") for t in trials)
    assert all(t.user_attrs["autotune.outcome"] == "complete" for t in trials)
    assert trials[0].user_attrs["autotune.baseline"] is True
    nodes = {t.user_attrs.get("autotune.ray_node") for t in trials}
    assert None not in nodes and len(nodes) == 2, f"trials ran on Ray nodes {nodes}"

    # MLflow: the study and one child run per trial, in PostgreSQL.
    client = MlflowClient(tracking_uri=tracking)
    experiment = client.get_experiment_by_name(name)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get("autotune.role") == "study"]
    assert len(parents) == 1
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    numbers = sorted(int(r.data.tags["autotune.trial_number"]) for r in children)
    assert numbers == list(range(TRIALS))
    for run in children:
        assert run.data.tags["autotune.fp.hash"]
        assert run.data.tags["autotune.logged"] == "true"
        assert len(client.get_metric_history(run.info.run_id, "loss")) == STEPS

    # The study is found again from its storage alone, from any folder.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    show = h.autotune(["show", name, "--storage", storage, "--json"], elsewhere, timeout=120)
    assert show.returncode == 0, h.explain(show)
    assert f'"study": "{name}"' in show.stdout


def test_asynchronous_rungs_on_two_ray_nodes_with_postgres(
    pg: str, ray_cluster: str, tmp_path: Path
) -> None:
    """`rungs.promotion: async` across the two nodes: 6 trials screened at 20 steps, 4 and the
    baseline promoted to 40 (eta 2, min_promote 4), the top half of those finished there on to
    the target of 80 without waiting for the 40-step rung's last probe; each promoted probe
    continues its state (written on the node that ran the rung below), the rung probes run on
    both nodes, the study decides and verifies at the target, and no state is left."""
    import optuna

    storage, tracking = f"{pg}/autotune_optuna", f"{pg}/autotune_mlflow"
    name = f"cluster-async-{uuid.uuid4().hex[:10]}"
    text = h.mlp_space(name, trials=6, steps=STEPS, verify_top_k=1, verify_seeds=2)
    space = h.write(tmp_path, text)
    sets = ["budget.target_steps=80", "budget.concurrency=2", "rungs.promotion=async"]
    sets += ["rungs.eta=2", "rungs.min_promote=4"]
    cmd = ["study", "--space", str(space), "--address", ray_cluster, "--storage", storage]
    cmd += ["--tracking-uri", tracking]
    for s in sets:
        cmd += ["--set", s]
    token = h.new_token()
    result = h.autotune(cmd, tmp_path, token=token, timeout=590)
    assert result.returncode == 0, h.explain(result)
    assert "20 -> 40 -> 80 (asynchronous promotion)" in result.stdout, h.explain(result)
    why = h.promoted_without_waiting(result.stdout, mid=40, top=80)
    assert why is None, why + "\n" + h.explain(result)
    assert not h.wait_gone(token, timeout=30), "the driver left processes behind"

    study = optuna.load_study(study_name=name, storage=storage)
    rows = study.user_attrs["autotune.rungs"]
    assert [r["steps"] for r in rows] == [40, 80]
    assert len(rows[0]["numbers"]) == 5 and 0 in rows[1]["numbers"]
    decided = study.user_attrs["autotune.decided"]
    assert decided["steps"] == 80 and decided["promotion"] == "async", decided
    study_dir = tmp_path / "autotune-studies" / name
    nodes = set()
    for rung, row, below in ((1, rows[0], 20), (2, rows[1], 40)):
        for n in row["numbers"]:
            rec = json.loads((study_dir / "trials" / f"{n:04d}-r{rung}.json").read_text())
            assert rec["summary"]["resumed_from_step"] == below, rec["summary"]["continuation"]
            nodes.add(rec.get("ray_node"))
    assert None not in nodes and len(nodes) == 2, f"rung probes ran on Ray nodes {nodes}"
    verified = [k for k in study.user_attrs if k.startswith("autotune.verified.")]
    assert verified and all(study.user_attrs[k]["steps"] == 80 for k in verified)
    assert len(study.user_attrs["autotune.verified.0"]["runs"]) == 2
    why = h.baseline_seeds_once(result.stdout)
    assert why is None, why + "\n" + h.explain(result)
    assert not (study_dir / "state").exists(), "the states outlived the decision"


def test_fill_idle_on_two_ray_nodes_with_postgres(
    pg: str, ray_cluster: str, tmp_path: Path
) -> None:
    """`rungs.fill_idle` across the two nodes (issue 27: the built strategy checked on the
    cluster): 8 trials, rungs 30 -> 90 -> 270, asynchronous promotion, 4 slots (0.4 CPU each on
    two 1-CPU nodes), every searched trial slowed (see `h.fill_space`). A worker with neither
    a promotion nor a baseline seed to take is given rung 1's next best on to 90 steps while
    rung 1's last probes still run: only into rung 2, each filled probe continuing the state
    its 30-step probe left on the node that ran it, the rung probes on both nodes, the states
    removed after the decision."""
    import optuna

    storage, tracking = f"{pg}/autotune_optuna", f"{pg}/autotune_mlflow"
    name = f"cluster-fill-{uuid.uuid4().hex[:10]}"
    space = h.write(tmp_path, h.fill_space(name, concurrency=4))
    cmd = ["study", "--space", str(space), "--address", ray_cluster, "--storage", storage]
    cmd += ["--tracking-uri", tracking]
    token = h.new_token()
    result = h.autotune(cmd, tmp_path, token=token, timeout=590)
    assert result.returncode == 0, h.explain(result)
    fills = h.fills(result.stdout)
    assert fills, "no worker was given a fill\n" + h.explain(result)
    assert {rung for rung, _ in fills} == {2}, fills
    assert not h.wait_gone(token, timeout=30), "the driver left processes behind"

    study = optuna.load_study(study_name=name, storage=storage)
    rows = study.user_attrs["autotune.rungs"]
    assert [r["steps"] for r in rows] == [30, 90, 270]
    study_dir = tmp_path / "autotune-studies" / name
    nodes = set()
    for n in [n for _, n in fills]:
        assert n in rows[1]["numbers"], (n, rows[1])
        rec = json.loads((study_dir / "trials" / f"{n:04d}-r2.json").read_text())
        assert rec["summary"]["resumed_from_step"] == 30, rec["summary"]["continuation"]
    for rung, row in ((1, rows[0]), (2, rows[1])):
        for n in row["numbers"]:
            rec = json.loads((study_dir / "trials" / f"{n:04d}-r{rung}.json").read_text())
            nodes.add(rec.get("ray_node"))
    assert None not in nodes and len(nodes) == 2, f"rung probes ran on Ray nodes {nodes}"
    assert not (study_dir / "state").exists(), "the states outlived the decision"


def test_states_are_removed_on_every_node_of_the_cluster(
    ray_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe writes its state on the node that ran it: the driver removes states there too.
    Both nodes share this machine's disk, so only the other node's task is called here and the
    files must be gone because that task ran there."""
    import ray

    from autotune.study import states as ss

    study_dir = tmp_path / "study"
    folder = ss.state_dir(study_dir)
    folder.mkdir(parents=True)
    names = ["0001-s30.pt", "0002-s30.pt", "0002-s30.pt.rank1", "0001-s60.pt"]
    for name in names:
        (folder / name).write_bytes(b"x")
    ray.init(address=ray_cluster, logging_level="ERROR", log_to_driver=False)
    try:
        here = ray.get_runtime_context().get_node_id()
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert len(alive) == 2 and here in alive
        with monkeypatch.context() as m:  # the driver's own removal does nothing here: what
            m.setattr(ss, "remove_states", lambda *a, **k: None)  # goes, the other node removed
            others = ss.remove_everywhere(ray, study_dir, steps=[30], keep=[1])
        assert others == sorted(alive - {here})
        assert sorted(p.name for p in folder.iterdir()) == ["0001-s30.pt", "0001-s60.pt"]
        assert ss.remove_everywhere(ray, study_dir) == others
        assert not folder.exists()
    finally:
        ray.shutdown()
