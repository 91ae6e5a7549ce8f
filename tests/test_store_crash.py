"""A refresh SIGKILLed at every named cut point leaves a readable, consistent store; two
refreshers at once do not corrupt it. Real child processes, a pipe handshake, timeouts."""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

import rivumi_analysis as ra
from rivumi_analysis.store.core import Store
from rivumi_analysis.store.read import ordered, read_parts

pytestmark = pytest.mark.crash  # real SIGKILLs of refreshes

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_runs"
OLD = time.time() - 3600
TIMEOUT = 60.0

# The child refreshes the store; at the requested cut it says so and blocks on stdin. A line
# on stdin lets it go on; EOF (the parent is gone) ends it without writing more.
CHILD = r"""
import os, sys
import rivumi_analysis.store.core as core
from rivumi_analysis.read.discovery import discover
store_dir, src, cut = sys.argv[1:4]
core.COMPACT_MIN_PARTS = 0
def hook(point):
    if point == cut:
        sys.stdout.write(f"CUT {point}\n"); sys.stdout.flush()
        if not sys.stdin.readline():
            os._exit(3)
st = core.Store(store_dir, hook=hook)
st.refresh(discover(src).runs, sources=[src])
s = st.last_stats
sys.stdout.write(f"END reread={s.reread} removed={s.removed}\n"); sys.stdout.flush()
"""


def _age(top: Path) -> None:
    for dirpath, dirs, files in os.walk(top):
        for n in dirs + files:
            os.utime(os.path.join(dirpath, n), (OLD, OLD), follow_symlinks=False)


def _spawn(store: Path, src: Path, cut: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(store), str(src), cut],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=str(ROOT))


def _line(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    deadline = time.monotonic() + TIMEOUT
    try:
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(timeout=left):
                proc.kill()
                raise AssertionError(f"child stalled; stderr: {proc.stderr.read()!r}")
            chunk = os.read(proc.stdout.fileno(), 1)
            if not chunk:
                proc.wait(timeout=TIMEOUT)
                raise AssertionError(f"child ended early: {buf!r} {proc.stderr.read()!r}")
            buf += chunk
    finally:
        sel.close()
    return buf.decode().strip()


def _close(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=TIMEOUT)
    for s in (proc.stdin, proc.stdout, proc.stderr):
        if s is not None:
            s.close()


def snapshot(store: Path) -> dict[str, object]:
    """Every table as the store holds it now, without refreshing (what a reader sees)."""
    st = Store(store)
    m = st.manifest()
    assert m is not None, "the store has no readable manifest"
    return {t: ordered(read_parts(st, m, t), t, m) for t in ra._TABLES}


def _same(a: dict[str, object], b: dict[str, object]) -> bool:
    try:
        for t in ra._TABLES:
            assert_frame_equal(a[t], b[t])
    except AssertionError:
        return False
    return True


@pytest.fixture
def scene(tmp_path: Path) -> tuple[Path, Path, dict, dict]:
    """A settled fleet with a store (old version), then changes the store has not seen."""
    src = tmp_path / "fleet"
    for group in ("completed", "forks"):
        shutil.copytree(SAMPLES / group, src / group)
    _age(src)
    base = tmp_path / "base-store"
    ra.events_df(str(src), store_dir=base)
    old = snapshot(base)
    runs = sorted(p for p in (src / "completed").iterdir())
    with open(runs[0] / "events.jsonl", "ab") as fh:  # grown
        fh.write(b'{"not": "an event"}\n')
    shutil.rmtree(runs[1])  # removed
    shutil.copytree(runs[2], src / "completed" / "zz-added")  # added
    _age(src)
    new = {t: getattr(ra, f"{t}_df")(str(src), cache=False) for t in ra._TABLES}
    assert not _same(old, new)
    return src, base, old, new


@pytest.mark.slow
@pytest.mark.parametrize("cut", Store.CUT_POINTS)
def test_kill_at_every_cut_point(scene: tuple, tmp_path: Path, cut: str) -> None:
    src, base, old, new = scene
    store = tmp_path / f"store-{cut}"
    shutil.copytree(base, store)
    proc = _spawn(store, src, cut)
    try:
        assert _line(proc) == f"CUT {cut}"
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=TIMEOUT) == -signal.SIGKILL
    finally:
        _close(proc)
    seen = snapshot(store)
    before_manifest = Store.CUT_POINTS.index(cut) < Store.CUT_POINTS.index("manifest_replaced")
    assert _same(seen, old if before_manifest else new), cut
    left = _temps(store)
    if cut == "part_temp_written":  # killed inside write_atomically, before its rename
        assert any(p.name.startswith(".part-") for p in left), left
    # the next refresh repairs: every table equals a cold load
    for t in ra._TABLES:
        assert_frame_equal(getattr(ra, f"{t}_df")(str(src), store_dir=store), new[t]), t
    st = Store(store)
    m = st.manifest()
    assert m.generation == Store(base).manifest().generation + 1
    # a leftover temporary file is named by no manifest, and gc removes it once past its grace
    assert not {str(p.relative_to(store)) for p in left} & {
        f["path"] for p in m.parts.values() for f in p["files"]}
    st._gc(m, grace=0)
    assert not _temps(store)
    assert _same(snapshot(store), new)


def _temps(store: Path) -> set[Path]:
    """The temporary files (``write_atomically``'s and the manifest's) in ``store``."""
    return set(store.rglob(".*.tmp"))


def test_two_concurrent_refreshers(scene: tuple, tmp_path: Path) -> None:
    src, base, old, new = scene
    store = tmp_path / "store-two"
    shutil.copytree(base, store)
    first = _spawn(store, src, "lock_taken")
    second = None
    try:
        assert _line(first) == "CUT lock_taken"  # the first holds the lock
        second = _spawn(store, src, "never")
        time.sleep(1.0)  # the second is now waiting for the lock
        assert second.poll() is None
        assert _same(snapshot(store), old)
        assert first.stdin is not None
        first.stdin.write(b"go\n")
        first.stdin.flush()
        a = _line(first)
        b = _line(second)
        assert first.wait(timeout=TIMEOUT) == 0 and second.wait(timeout=TIMEOUT) == 0
    finally:
        _close(first)
        if second is not None:
            _close(second)
    assert a.startswith("END reread=") and not a.startswith("END reread=0 ")
    assert b == "END reread=0 removed=0"  # it found the work done once it had the lock
    assert _same(snapshot(store), new)
