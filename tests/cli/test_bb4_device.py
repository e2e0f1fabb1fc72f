"""Black-box finding bb4 F12: `probe.device: cuda` on a machine where torch sees no GPU.

`autotune check` accepted it, and `autotune study` then failed at the baseline (exit 1, a study
folder left behind) with the probe's `RuntimeError: probe.device is 'cuda' but torch sees no
GPU`. Now `check`, `probe` and a study on a local Ray refuse it up front, in one line naming the
space file, `probe.device` and what torch sees, and the study makes nothing. A study on a Ray
cluster asks the cluster instead (its driver may have no GPU while its nodes do): refused where
the cluster's resources list no GPU, run where they list one. Real torch, a real Ray cluster on
loopback for the cluster case; the commands through typer's CliRunner or in a process."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from assets import studies as h
from assets.cli import invoke, one_line_error

from autotune import space as sp
from autotune.errors import SpaceError
from autotune.study import driver

torch = pytest.importorskip("torch")
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU here")

CUDA_SPACE = """\
name: gpu-asked
workload: {name: mlp, size: tiny}
probe: {steps: 20, micro_batch: 16, device: DEVICE}
budget: {trials: 2, trial_timeout_s: 120}
knobs:
  clip_norm: {low: 0.1, high: 5.0, log: true}
"""


def space_file(folder: Path, device: str = "cuda") -> Path:
    path = folder / "space.yaml"
    path.write_text(CUDA_SPACE.replace("DEVICE", device))
    return path


def entries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path


@no_gpu
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_check_refuses_a_gpu_device_where_torch_sees_none(here: Path, device: str) -> None:
    path = space_file(here, device)
    line = one_line_error(invoke("check", path), f"{path}: probe.device: {device!r}")
    assert "torch sees none on this machine" in line
    assert f"torch {torch.__version__}" in line and "is_available() is False" in line
    assert "probe.device to cpu or auto" in line


@no_gpu
def test_check_accepts_cpu_and_auto(here: Path) -> None:
    for device in ("cpu", "auto"):
        result = invoke("check", space_file(here, device))
        assert result.exit_code == 0, result.output
        assert f"device {device}" in result.stdout


@no_gpu
def test_check_with_a_ray_address_leaves_the_gpus_to_the_cluster(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A study from here would join $RAY_ADDRESS, whose nodes may have the GPUs this machine
    lacks: `check` does not refuse (the study asks the cluster when it joins)."""
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    result = invoke("check", space_file(here))
    assert result.exit_code == 0, result.output
    assert "device cuda" in result.stdout


@no_gpu
def test_a_local_study_refuses_a_gpu_device_up_front_and_makes_nothing(here: Path) -> None:
    path = space_file(here)
    before = entries(here)
    uri = f"sqlite:///{here / 'mlflow.db'}"
    line = one_line_error(
        invoke("study", "--space", path, "--tracking-uri", uri), f"{path}: probe.device: 'cuda'"
    )
    assert "torch sees none on this machine" in line
    assert entries(here) == before, "no study folder, store or lock was made"


@no_gpu
def test_probe_refuses_a_gpu_device_where_torch_sees_none(here: Path) -> None:
    one_line_error(invoke("probe", "--space", space_file(here)), "probe.device: 'cuda'")


def test_the_cluster_check_reads_the_clusters_gpus() -> None:
    """What `ray.cluster_resources()` reports: a cluster without a GPU refuses a GPU device; one
    with GPUs takes it, whatever this machine has; cpu and auto ask for none."""
    space = sp.loads(CUDA_SPACE.replace("DEVICE", "cuda"), source="s.yaml")
    with pytest.raises(SpaceError, match=r"s\.yaml: probe\.device: 'cuda' asks for a GPU, but "):
        driver.check_cluster_device(space, {"CPU": 2.0, "memory": 1e9}, "head:6379")
    with pytest.raises(SpaceError, match="the Ray cluster at head:6379 has none"):
        driver.check_cluster_device(space, {"CPU": 2.0, "GPU": 0.0}, "head:6379")
    driver.check_cluster_device(space, {"CPU": 2.0, "GPU": 1.0}, "head:6379")
    for device in ("cpu", "auto"):
        other = sp.loads(CUDA_SPACE.replace("DEVICE", device), source="s.yaml")
        driver.check_cluster_device(other, {"CPU": 2.0}, "head:6379")


# --------------------------------------------------------------------------------------------
# On a real Ray cluster (loopback): the driver has no GPU; the cluster decides
# --------------------------------------------------------------------------------------------


@pytest.fixture
def gpu_less_head() -> Iterator[tuple[str, Callable[[], None]]]:
    """A Ray head on loopback with one CPU and no GPU; yields its address and what adds a node
    with one GPU (Ray's word: `--num-gpus=1`) to it. Teardown stops exactly the processes these
    `ray start` calls made (found by a token in their environment)."""
    token = h.new_token()
    temp = Path(tempfile.mkdtemp(prefix="atgpu-", dir="/tmp"))  # short: Ray's unix sockets
    ray = str(Path(sys.executable).with_name("ray"))
    port = h.free_port()
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    common.append(f"--temp-dir={temp}")
    head = [ray, "start", "--head", f"--port={port}", "--include-dashboard=false", "--num-gpus=0"]
    head.append(f"--dashboard-agent-listen-port={h.free_port()}")
    node = [ray, "start", f"--address=127.0.0.1:{port}", "--num-gpus=1", *common]
    node.append(f"--dashboard-agent-listen-port={h.free_port()}")
    try:
        start(head + common, token)
        yield f"127.0.0.1:{port}", lambda: start(node, token)
    finally:
        h.kill_tagged(token, grace_s=3)
        shutil.rmtree(temp, ignore_errors=True)
    assert not h.tagged_processes(token), "Ray processes outlived the test"


def start(cmd: list[str], token: str) -> None:
    done = subprocess.run(
        cmd,
        env=h.cli_env(token),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}"


@no_gpu
@pytest.mark.integration
def test_on_a_cluster_the_clusters_gpus_decide(
    gpu_less_head: tuple[str, Callable[[], None]], tmp_path: Path
) -> None:
    address, add_node = gpu_less_head
    space_file(tmp_path)
    args = ["study", "--space", "space.yaml", "--address", address]
    args += ["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    before = entries(tmp_path)
    token = h.new_token()
    try:
        refused = h.autotune(args, tmp_path, token=token, timeout=240)
    finally:
        h.kill_tagged(token)
    assert refused.returncode == 2, h.explain(refused)
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("autotune: error: space.yaml: probe.device: 'cuda' asks for a GPU")
    assert f"the Ray cluster at {address} has none" in line, line
    assert entries(tmp_path) == before, "the join made nothing that stayed"
    # A node with a GPU joins: the driver (no GPU of its own) runs the study there. The GPU is
    # Ray's word only (torch on this machine sees none): the baseline fails on the node, with
    # the probe's own error, which shows that the study got past the driver's checks.
    add_node()
    try:
        ran = h.autotune(args, tmp_path, token=token, timeout=300)
    finally:
        h.kill_tagged(token)
    assert ran.returncode == 1, h.explain(ran)
    assert "torch sees no GPU" in ran.stdout + ran.stderr, h.explain(ran)
    assert "has none" not in ran.stderr
