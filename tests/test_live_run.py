"""Auditing a run while a writer appends to it (runner protocol) never reports false corruption."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from rivumi_analysis.audit import audit_run
from tests.conftest import dumps, example_events, running_manifest

WRITER = textwrap.dedent("""
    import json, os, sys, time
    run, n = sys.argv[1], int(sys.argv[2])
    lines = open(sys.argv[3], "rb").read().splitlines()
    manifest = json.loads(open(sys.argv[4], "rb").read())
    hs = sys.argv[5]
    for k in range(n):
        if k in (n // 4, n // 2, 3 * n // 4):
            # hand-shake: pause mid-stream until the test has audited the run while it waits
            # (overlap by construction, not by scheduling luck on a loaded machine)
            open(os.path.join(hs, "paused-%d" % k), "w").close()
            deadline = time.monotonic() + 30
            while not os.path.exists(os.path.join(hs, "go-%d" % k)) and time.monotonic() < deadline:
                time.sleep(0.001)
        obj = json.loads(lines[k % len(lines)])
        obj["sequence"] = k
        if obj["event_type"] in ("tool.started", "verification.started", "run.completed"):
            obj["event_type"] = "context_provider.injected"  # keep the run open and clean
        manifest["last_event_sequence"] = k
        tmp = os.path.join(run, ".session.json.tmp%05d" % k)
        with open(tmp, "wb") as fh:                      # 1. save the manifest (atomic)
            fh.write(json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode())
        os.replace(tmp, os.path.join(run, "session.json"))
        line = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode() + b"\\n"
        fd = os.open(os.path.join(run, "events.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, line)                               # 2. then one O_APPEND write
        os.close(fd)
        if k % 50 == 0:
            time.sleep(0.001)
    print("done", flush=True)
""")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_audit_during_appends_is_never_corrupt(tmp_path: Path) -> None:
    run = tmp_path / "a66038f97f204cb3aaa96339f195c37e"
    run.mkdir()
    m = running_manifest(-1)
    m["phase"] = "running"
    (tmp_path / "lines.jsonl").write_bytes(example_events())
    (tmp_path / "manifest.json").write_bytes(dumps(m))
    (tmp_path / "writer.py").write_text(WRITER)
    hs = tmp_path / "handshake"
    hs.mkdir()
    proc = subprocess.Popen([sys.executable, str(tmp_path / "writer.py"), str(run), "3000",
                             str(tmp_path / "lines.jsonl"), str(tmp_path / "manifest.json"),
                             str(hs)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[dict] = []
    pending: set[str] = set()
    deadline = time.monotonic() + 100
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if (run / "events.jsonl").exists():
                seen.append(audit_run(str(run)))
            for k in pending:  # an audit ran wholly inside the writer's pause at k: release it
                (hs / f"go-{k}").touch()
            pending = {p.name.split("-")[1] for p in hs.glob("paused-*")} - {
                p.name.split("-")[1] for p in hs.glob("go-*")}
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"writer stalled; stderr={err!r}; files={sorted(p.name for p in run.iterdir())}")
    assert "done" in out, err
    assert len(seen) >= 3, "the audit never overlapped the writer"
    assert sorted(p.name for p in hs.glob("go-*")) == ["go-1500", "go-2250", "go-750"], (
        "the writer went on without the hand-shake")
    bad = [r for r in seen if r["verdict"] not in ("resumable", "resync")
           and "live_changed" not in r["warnings"]]
    assert not bad, json.dumps(bad[:2], indent=1)
    assert all("manifest_behind" not in r["reasons"] and "torn_tail" not in r["reasons"]
               for r in seen)
    final = audit_run(str(run))
    assert final["verdict"] == "resumable" and final["events"] == 3000


@pytest.mark.timeout(60)
def test_writer_active_detected_from_the_lock_itself(tmp_path: Path, make_run) -> None:
    """A held flock on .writer.lock is seen via /proc/locks; the pid in the file is ignored."""
    run = Path(make_run(events=b"".join(example_events().splitlines(keepends=True)[:10]),
                        manifest=running_manifest(9)))
    lock = run / ".writer.lock"
    lock.write_text("pid=999999 token=c01295ad5e1d4fceb808cfd63c3a0e41\n")  # a dead pid
    assert "writer_active" not in audit_run(str(run))["warnings"]
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1],'r+');"
         "fcntl.flock(f, fcntl.LOCK_EX|fcntl.LOCK_NB); print('locked', flush=True);"
         "time.sleep(60)", str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        rec = audit_run(str(run))
        assert "writer_active" in rec["warnings"] and rec["verdict"] == "resumable"
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert "writer_active" not in audit_run(str(run))["warnings"]


# --- a line read while it is being appended --------------------------------------------------
# ext4 grows a file's size one page at a time during one write(): a reader can see a line
# cut at a page boundary with the size it read, while the writer is preempted mid-write().

def _spanning_log() -> tuple[bytes, int]:
    """The example's first lines up to the one spanning byte 4096, and that line's sequence."""
    lines = example_events().splitlines(keepends=True)
    n = next(i for i in range(len(lines)) if len(b"".join(lines[:i + 1])) > 4096) + 1
    log = b"".join(lines[:n])
    assert log[4095:4096] != b"\n" and log.endswith(b"\n")
    return log, json.loads(lines[n - 1])["sequence"]


def _sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """``time.sleep`` in ``read.snapshot`` records instead of sleeping."""
    from rivumi_analysis.read import snapshot

    asked: list[float] = []
    monkeypatch.setattr(snapshot.time, "sleep", asked.append)
    return asked


def _first_read_torn(monkeypatch: pytest.MonkeyPatch, cut: int) -> None:
    """The reader's first read of ``events.jsonl`` returns its first ``cut`` bytes, and the
    ``lstat`` after it that size (the file on disk is whole: the line has completed since)."""
    from rivumi_analysis.read import snapshot
    from rivumi_analysis.read.io import FileRead

    real_read, real_lstat = snapshot._LOCAL_IO[0], snapshot._LOCAL_IO[1]
    pending = ["read", "lstat"]

    def read_file(path: str, *args: Any, **kw: Any) -> FileRead:
        fr = real_read(path, *args, **kw)
        if os.path.basename(path) == "events.jsonl" and pending[:1] == ["read"]:
            pending.pop(0)
            return FileRead("ok", fr.data[:cut], cut, (cut, *fr.identity[1:]))
        return fr

    def lstat_identity(path: str) -> tuple[int, int, int, int] | None:
        ident = real_lstat(path)
        if os.path.basename(path) == "events.jsonl" and pending == ["lstat"]:
            pending.pop(0)
            return (cut, *ident[1:])
        return ident

    monkeypatch.setattr(snapshot, "_LOCAL_IO", (read_file, lstat_identity,
                                                *snapshot._LOCAL_IO[2:]))


@pytest.mark.parametrize("reader", ["audit", "read_run", "store", "watch"])
def test_line_completing_after_a_torn_read_is_accepted(make_run, monkeypatch: pytest.MonkeyPatch,
                                                       reader: str) -> None:
    """Planted: without the in-flight wait, every reader reports the cut line as torn."""
    from rivumi_analysis.read.discovery import RunLocation
    from rivumi_analysis.read.snapshot import read_run
    from rivumi_analysis.store.build import read_for_tables
    from rivumi_analysis.store.watch import view_of

    log, last = _spanning_log()
    run = make_run(events=log, manifest=running_manifest(last))
    n = log.count(b"\n")
    asked = _sleeps(monkeypatch)
    _first_read_torn(monkeypatch, 4096)
    if reader == "audit":
        rec = audit_run(run)
        assert "torn_tail" not in rec["reasons"], rec
        assert rec["events"] == n and rec["quarantined_lines"] == 0, rec
        assert "live_changed" not in rec["warnings"], rec
    elif reader == "watch":
        view = view_of(read_run(run))
        assert not view.torn_tail and view.events == n
        assert "crash_tail" not in view.alerts(time.time(), 3600.0)
    else:
        rd = read_run(run) if reader == "read_run" else read_for_tables(
            RunLocation(run, False, None))
        assert rd.events_bytes == log and not rd.live_changed
        if rd.fast is None:  # (the store's reader keeps a clean log as columns)
            assert len(rd.events) == n and rd.events[-1].sequence == last
            assert all(ln.status == "accepted" and ln.has_newline for ln in rd.lines)
    assert asked, "the torn read was not waited on"


@pytest.mark.parametrize("cut", [4096, 4000])
def test_old_torn_tail_is_reported_at_once(make_run, monkeypatch: pytest.MonkeyPatch,
                                           cut: int) -> None:
    """A crashed run's torn tail (old) costs no sleep, even when cut on a page boundary."""
    log, last = _spanning_log()
    run = make_run(events=log[:cut], manifest=running_manifest(last))
    old = time.time() - 3600
    os.utime(os.path.join(run, "events.jsonl"), (old, old))
    asked = _sleeps(monkeypatch)
    rec = audit_run(run)
    assert "torn_tail" in rec["reasons"] and rec["verdict"] == "corrupt", rec
    assert asked == []


def test_fresh_torn_tail_off_the_page_grid_is_reported_at_once(
        make_run, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash cut audited just after the kill (fresh) costs no sleep unless its length is a
    multiple of a page: a write in flight is seen only cut on a page boundary."""
    log, last = _spanning_log()
    run = make_run(events=log[:4000], manifest=running_manifest(last))
    asked = _sleeps(monkeypatch)
    assert "torn_tail" in audit_run(run)["reasons"]
    assert asked == []


def test_fresh_torn_tail_nothing_completes_is_still_torn(
        make_run, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer stalled mid-line (or killed there a moment ago): torn after the bounded wait."""
    from rivumi_analysis.read import snapshot

    log, last = _spanning_log()
    run = make_run(events=log[:4096], manifest=running_manifest(last))
    asked = _sleeps(monkeypatch)
    rec = audit_run(run)
    assert "torn_tail" in rec["reasons"] and rec["verdict"] == "corrupt", rec
    assert "live_changed" not in rec["warnings"], rec
    assert asked and snapshot.TAIL_WAIT_SECONDS <= sum(asked) < 2 * snapshot.TAIL_WAIT_SECONDS
