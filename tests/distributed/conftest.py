"""Ray fixtures: one local cluster per test session, a generated corpus, a two-node cluster.

Every Ray process listens and connects on a loopback address only. Ray rewrites 127.0.0.1 to
the machine's outward address, so the tests pin nodes to another loopback address
(:data:`LOOPBACK`). Clusters use a per-session token (``RAY_AUTH_TOKEN``) and never touch
``~/.ray``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

LOOPBACK = "127.0.0.2"
"""A loopback address Ray does not rewrite to the machine's outward IP (127.0.0.1 it does)."""

RAY_ENV = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16),
           "RAY_USAGE_STATS_ENABLED": "0"}
# Ray reads its auth settings when it is imported: set them before any test imports it.
os.environ.update(RAY_ENV)
CORPUS_RUNS = 2000
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """``ray.init`` once per session: 2 CPUs, no dashboard, a 256 MiB object store, quiet."""
    pytest.importorskip("ray", reason="the ray extra is not installed")
    import ray
    import ray.data

    for attempt in (1, 2, 3):  # Ray waits only 30 s for its raylet: a busy machine misses it
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False,
                     object_store_memory=256 * 2**20, logging_level="ERROR",
                     log_to_driver=False, _node_ip_address=LOOPBACK)
            break
        except Exception:
            ray.shutdown()
            if attempt == 3:
                raise
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def corpus_2k(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A generated fleet of 2,000 realistic runs (about 70 MB, under 10 s to write)."""
    from rivumi_analysis.synth.corpus import generate_corpus

    out = str(tmp_path_factory.mktemp("corpus") / "fleet")
    generate_corpus(out, runs=CORPUS_RUNS, target_mb=40, seed=13, workers=1)
    return out


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    # its own session: the whole node (raylet, gcs, workers) is one process group we stop
    with open(log, "wb") as fh:
        return subprocess.Popen([str(VENV_BIN / "ray"), "start", *args, "--block"],
                                stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the node's process group, then SIGKILL what is left (only our own group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@contextlib.contextmanager
def two_node_cluster(*, worker_cpus: int = 2) -> Iterator[dict[str, str]]:
    """A head node (1 CPU) and a second node with ``worker_cpus`` CPUs and its own resource
    ``rivumi_worker``, both on :data:`LOOPBACK`; yields the environment a driver needs
    (``RAY_ADDRESS`` and the token). Both nodes are stopped even when the body fails."""
    pytest.importorskip("ray", reason="the ray extra is not installed")
    tmp = tempfile.mkdtemp(prefix="rvt")  # short: Ray's socket paths have a length limit
    env = {**os.environ, **RAY_ENV}
    env.pop("RAY_ADDRESS", None)
    common = ["--node-ip-address", LOOPBACK, "--object-store-memory", str(128 * 2**20),
              "--disable-usage-stats"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # Ray gives a new node's raylet a hard-coded 30 s to register with the GCS (node.py,
        # not configurable): on a busy machine the head can miss it and `ray start` exits;
        # a second attempt starts a new head
        addr_file = Path(tmp) / "ray_current_cluster"
        for attempt in (1, 2, 3):
            hlog = Path(tmp) / f"head-{attempt}.log"
            head = _start(["--head", "--port", "0", "--num-cpus", "1",
                           "--include-dashboard", "false", "--temp-dir", tmp, *common],
                          hlog, env)
            procs.append(head)
            deadline = time.monotonic() + 120
            while not addr_file.exists() or not addr_file.read_text().strip():
                if head.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            else:
                break
            _stop(head)
            procs.remove(head)
            with contextlib.suppress(FileNotFoundError):
                addr_file.unlink()
            if attempt == 3:
                raise RuntimeError("head node did not start: " + hlog.read_text(errors="replace"))
        address = addr_file.read_text().strip()
        assert address.startswith(LOOPBACK + ":"), address
        # Ray gives a new node's raylet 30 s to register: on a busy machine that can fail,
        # and then `ray start` exits; a second attempt is a new node
        for attempt in (1, 2, 3):
            wlog = Path(tmp) / f"worker-{attempt}.log"
            worker = _start(["--address", address, "--num-cpus", str(worker_cpus),
                             "--resources", f'{{"rivumi_worker": {worker_cpus}}}', *common],
                            wlog, env)
            procs.append(worker)
            deadline = time.monotonic() + 120
            while "Ray runtime started" not in wlog.read_text(errors="replace"):
                if worker.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            else:
                break
            _stop(worker)
            if attempt == 3:
                raise RuntimeError("worker node did not start: "
                                   + wlog.read_text(errors="replace"))
        yield {**env, "RAY_ADDRESS": address}
    finally:
        for p in reversed(procs):
            _stop(p)
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
