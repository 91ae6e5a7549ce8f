"""A local Phoenix server (the ``otel-test`` extra) for the otel round trip and the docs'
screenshot: 127.0.0.1 only, its own working folder, telemetry off, bounded start-up, the
server log's tail in every failure."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

START_S = float(os.environ.get("RIVUMI_PHOENIX_START_S", "300"))
"""Seconds Phoenix may take to answer /healthz (about 10 s idle, 60-80 s at load 25)."""


class PhoenixError(RuntimeError):
    """Phoenix did not come up (the message holds the end of its log)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(work: Path, n: int = 40) -> str:
    p = work / "server.log"
    return "\n".join(p.read_text("utf-8", "replace").splitlines()[-n:]) if p.exists() else ""


@contextlib.contextmanager
def phoenix_server(work: Path, start_s: float = START_S) -> Iterator[str]:
    """Run ``phoenix serve`` with its data in ``work``; yields its base URL (the OTLP/HTTP
    endpoint is ``<base>/v1/traces``) and stops it (terminate, then kill) on exit."""
    port, grpc = free_port(), free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(grpc),
           "PHOENIX_TELEMETRY_ENABLED": "false"}
    exe = Path(sys.executable).with_name("phoenix")
    base = f"http://127.0.0.1:{port}"
    with (work / "server.log").open("wb") as log:
        proc = subprocess.Popen([str(exe), "serve"], env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            t0 = time.monotonic()
            while True:
                if proc.poll() is not None:
                    raise PhoenixError(f"phoenix exited with {proc.returncode}:\n{tail(work)}")
                try:
                    with urllib.request.urlopen(f"{base}/healthz", timeout=5) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() - t0 > start_s:
                    raise PhoenixError(f"phoenix did not answer /healthz within {start_s:.0f} s "
                                       f"(load {os.getloadavg()[0]:.1f}):\n{tail(work)}")
                time.sleep(1)
            print(f"phoenix up after {time.monotonic() - t0:.1f} s on {base}", file=sys.stderr)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
