"""`autotune ui`: the MLflow UI on a tracking store, bound to loopback, without the job runner."""

from __future__ import annotations

import errno
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from autotune.errors import TrackingError, UsageError
from autotune.tracking.connection import redact

# How long `autotune ui` waits for the server to answer while it runs: MLflow's server imports
# for ~5-10 s idle, and for over a minute on a busy 2-core machine (seen in CI).
HEALTHY_WAIT_S = 300
# After this long it says that it is waiting, so a slow start is not taken for a hang.
SAY_WAITING_S = 15


def mlflow_ui_command(host: str, port: int) -> list[str]:
    """MLflow's server, for the store that `ui_env` names: not on its command line, which
    anyone on the machine reads in `ps` (a database URL's password with it). One worker
    process: a UI for one person browsing needs no more, and MLflow's default of 4 starts four
    copies of its imports (each ~0.3 GB), which is what made the start slow under load."""
    return [
        sys.executable, "-m", "mlflow", "ui",
        "--host", host, "--port", str(port), "--workers", "1",
    ]  # fmt: skip


def bind_addresses(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses a server told `--host HOST` would listen on ("0" is 0.0.0.0 to the OS)."""
    if not host.strip():
        raise UsageError("--host: empty; give an address to bind (default 127.0.0.1)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise UsageError(f"--host {host!r}: not an address of this machine ({e})") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def check_host(host: str, port: int, *, expose: bool) -> tuple[str, str]:
    """Refuse a bind beyond loopback unless `expose` asks for it; return the address to bind
    and the one to poll for health.

    The MLflow UI has no authentication: whoever reaches it reads every run and can delete
    them. So a host that is not loopback (or that means every interface: "0", "0.0.0.0", "::")
    must be asked for with --expose, and then what it exposes is printed. "0" is passed on as
    0.0.0.0: the server MLflow starts does not listen when given "0"."""
    addrs = bind_addresses(host, port)
    if all(a.is_loopback for a in addrs):
        return host, host
    everywhere = any(a.is_unspecified for a in addrs)
    where = "every interface of this machine" if everywhere else ", ".join(map(str, addrs))
    if not expose:
        raise UsageError(
            f"--host {host!r} binds {where}, not only loopback: the MLflow UI has no "
            "authentication; pass --expose to do it anyway"
        )
    print(
        f"exposing the MLflow UI on {where}, port {port}: anyone who can reach it can read "
        "every run of this store and delete them (no authentication). MLflow answers only "
        "requests addressed to localhost or a private address unless its --allowed-hosts is set.",
        file=sys.stderr,
        flush=True,
    )
    if not everywhere:
        return host, host
    # A server on every interface answers on loopback too; poll it there.
    return ("0.0.0.0", "127.0.0.1") if addrs[0].version == 4 else ("::", "::1")


def check_port(host: str, port: int) -> None:
    """Refuse a port another server listens on, before anything starts. MLflow's server fails
    on it with its error buried in its log, while the health check, answered by the other
    server, printed that server's address as the UI of this store."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as s:
            # as the server binds: a port whose last connections wait to close (TIME_WAIT) is free
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(address)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    raise UsageError(
                        f"port {port} is in use on {host} (another server listens there): "
                        "choose another with --port"
                    ) from None
                if e.errno == errno.EACCES:
                    raise UsageError(
                        f"--port {port}: not allowed to listen on it here ({e.strerror}); "
                        "choose another (above 1023)"
                    ) from None
                # an address family this machine lacks (IPv6 off): the server says if it matters


def ui_env(uri: str) -> dict[str, str]:
    """The server's environment: the store in MLFLOW_BACKEND_STORE_URI (its --backend-store-uri
    read from the environment: a process's environment is its owner's alone to read), and no
    job runner (MLflow 3's server starts one of ~7 processes, ~2.5 GB, unless told not to)."""
    return {
        **os.environ,
        "MLFLOW_BACKEND_STORE_URI": uri,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    }


def wait_healthy(
    url: str, proc: subprocess.Popen[bytes] | None, timeout_s: float = HEALTHY_WAIT_S
) -> None:
    """Wait for the UI at `url` to answer; it must be `proc`'s: an answer while `proc` has
    exited came from another server on the port (one that started after `check_port`)."""
    start = time.time()
    deadline = start + timeout_s
    said = False
    while time.time() < deadline:
        if not said and time.time() - start > SAY_WAITING_S:
            said = True
            print(
                f"waiting for the MLflow UI to answer at {url} (up to {timeout_s:.0f} s; "
                "it starts slowly on a busy machine)",
                file=sys.stderr,
                flush=True,
            )
        if proc is not None and proc.poll() is not None:
            raise _exited(proc, url)
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    if proc is not None and proc.poll() is not None:
                        raise _exited(proc, url)
                    return
        except OSError:
            time.sleep(0.5)
    raise TrackingError(f"the MLflow UI did not answer at {url} within {timeout_s:.0f} s")


def _exited(proc: subprocess.Popen[bytes], url: str) -> TrackingError:
    return TrackingError(
        f"the MLflow UI exited with status {proc.returncode} before it answered at {url} "
        "(its output above says why)"
    )


def home_link(url: str, experiment_id: str | None) -> str:
    """The address to open: the experiment's runs, or the list of experiments, both in the
    model-training view. MLflow 3's UI opens an experiment, and its home, in its GenAI (traces)
    view unless the address asks for the other; its bare home address lists the experiments in
    GenAI mode, and an experiment clicked there opens on its traces (none)."""
    where = f"experiments/{experiment_id}" if experiment_id else "experiments"
    return f"{url}/#/{where}?workflowType=machine_learning"


def serve(
    uri: str, *, host: str, port: int, poll_host: str, experiment_id: str | None = None
) -> None:
    """Run the UI until Ctrl-C, printing the URL (at `poll_host`, from check_host) once it
    answers."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the UI as Ctrl-C does: no server left behind

    signal.signal(signal.SIGTERM, stop)
    proc = subprocess.Popen(mlflow_ui_command(host, port), env=ui_env(uri))
    url = f"http://{f'[{poll_host}]' if ':' in poll_host else poll_host}:{port}"
    try:
        wait_healthy(url, proc)
        link = home_link(url, experiment_id)
        print(f"MLflow UI for {redact(uri)}\n  {link}\n(Ctrl-C to stop)", flush=True)
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
