"""``watch`` against a real-protocol writer appending in a child process, seen through a
pseudo-terminal (pexpect): the run shows live, the stall alert after the writer pauses, and
the final verdict after a SIGKILL; the same through ``--format jsonl`` on a pipe; and the
default plain text on a pipe (live, then the verdict once the writer exits)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from rivumi_analysis.read.snapshot import read_run
from rivumi_analysis.resume import decide
from rivumi_analysis.store.watch import RunView, Watcher
from tests.test_store_crash import _close, _line

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 60

# The synthetic writer (the runner's write protocol) with the runner's flock on .writer.lock;
# it appends slowly, then says PAUSED and stops appending (blocked on stdin) until killed.
WRITER = r"""
import fcntl, os, sys, time
from rivumi_analysis.synth.scenarios import Driver, get_script
state = {"fd": None, "n": 0}
def hook(point, seq, event_type):
    if point != "appended":
        return
    if state["fd"] is None:
        state["fd"] = os.open(os.path.join(drv.run_dir, ".writer.lock"), os.O_RDWR)
        fcntl.flock(state["fd"], fcntl.LOCK_EX)
        sys.stdout.write(f"RUN {drv.run_dir}\n"); sys.stdout.flush()
    state["n"] += 1
    time.sleep(0.15)
    if state["n"] == int(sys.argv[2]):
        sys.stdout.write("PAUSED\n"); sys.stdout.flush()
        if not sys.stdin.readline():
            os._exit(3)
drv = Driver(sys.argv[1], get_script("verified", 3), hook=hook)
drv.run()
"""


def _writer(root: Path, pause_after: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(pause_after)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(ROOT))


def _readline(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else ""
    return line.strip()


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.timeout(180)
def test_watch_live_stall_and_verdict_through_a_pty(tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    root.mkdir()
    writer = _writer(root, pause_after=10)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    tty = jsonl = None
    try:
        run_dir = _readline(writer)[4:]
        run_id = os.path.basename(run_dir)
        args = ["-m", "rivumi_analysis.cli", "watch", str(root), "--interval", "0.3",
                "--stall", "2"]
        tty = pexpect.spawn(sys.executable, args, cwd=str(ROOT), env=env, timeout=TIMEOUT,
                            dimensions=(40, 200), encoding="utf-8")
        jsonl = subprocess.Popen([sys.executable, *args, "--format", "jsonl"], cwd=str(ROOT),
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        tty.expect("1 live")
        tty.expect(run_id[-20:])
        assert _readline(writer) == "PAUSED"
        tty.expect(r"stalled\s+\S*" + run_id[-12:] + r"\s+no event for \d+ s")
        seen: list[dict] = []

        def follow(until: str) -> None:  # the jsonl follower, one JSON object per change
            deadline = time.monotonic() + TIMEOUT
            assert jsonl is not None and jsonl.stdout is not None
            while time.monotonic() < deadline:
                line = jsonl.stdout.readline()
                assert line, jsonl.stderr.read() if jsonl.stderr else ""
                seen.append(json.loads(line))
                if seen[-1]["type"] == until or seen[-1].get("alert") == until:
                    return
            raise AssertionError(f"no {until} in {seen}")

        follow("stalled")
        os.kill(writer.pid, signal.SIGKILL)
        assert writer.wait(timeout=TIMEOUT) == -signal.SIGKILL
        tty.expect("FINISHED")
        tty.expect(run_id[-12:] + r"\s+verdict (\w+)")
        verdict = tty.match.group(1)
        assert verdict in ("resumable", "resync", "side_effect_uncertain")
        tty.expect("0 live")
        follow("finished")
        assert seen[0]["type"] == "live"
        fin = next(d for d in seen if d["type"] == "finished")
        assert fin["run_dir"] == run_dir and fin["verdict"] == verdict
        steps = [d["step"] for d in seen if d["type"] == "live"]
        assert steps == sorted(steps)
    finally:
        if writer.poll() is None:
            writer.kill()
        writer.wait(timeout=TIMEOUT)
        if tty is not None:
            tty.terminate(force=True)
        if jsonl is not None:
            jsonl.kill()
            jsonl.wait(timeout=TIMEOUT)
            for s in (jsonl.stdout, jsonl.stderr):
                if s is not None:
                    s.close()
        for s in (writer.stdin, writer.stdout, writer.stderr):
            if s is not None:
                s.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_watch_on_a_pipe_prints_plain_text_lines(tmp_path: Path) -> None:
    """stdout not a terminal, no ``--format``: one plain-text line per change (no screen, no
    JSON). The live run shows while its writer holds the lock; once the writer finishes and
    the lock is released, its verdict (the resume verdict of the finished run)."""
    root = tmp_path / "fleet"
    settled = sorted((ROOT / "sample_runs" / "completed").iterdir())[0]
    shutil.copytree(settled, root / settled.name)
    writer = _writer(root, pause_after=4)
    watcher = None
    lines: list[str] = []
    try:
        run_dir = _readline(writer)[4:]
        watcher = subprocess.Popen(
            [sys.executable, "-m", "rivumi_analysis.cli", "watch", str(root), "--interval",
             "0.3", "--iterations", "500"],  # bounded: 500 ticks, whatever happens
            cwd=str(ROOT), env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        def until(pattern: str) -> re.Match[str]:
            assert watcher is not None
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                try:
                    lines.append(_line(watcher))  # bounded too; says the child's stderr
                except AssertionError as exc:
                    raise AssertionError(f"no {pattern!r} in {lines}: {exc}") from None
                found = re.search(pattern, lines[-1])
                if found:
                    return found
            raise AssertionError(f"no {pattern!r} in {TIMEOUT} s: {lines}")

        until(rf"^\d\d:\d\d:\d\d LIVE {re.escape(run_dir)}: step \d+/\d+, last event ")
        assert _readline(writer) == "PAUSED"
        assert writer.stdin is not None
        writer.stdin.write("go\n")  # the writer finishes its script and exits: lock released
        writer.stdin.flush()
        assert writer.wait(timeout=TIMEOUT) == 0
        finished = until(rf"^\d\d:\d\d:\d\d FINISHED {re.escape(run_dir)}: verdict (\w+)")
        assert finished.group(1) == decide(read_run(run_dir)).verdict
        assert all(not ln.startswith("{") and "\x1b" not in ln for ln in lines), lines
        assert not any(str(root / settled.name) in ln for ln in lines), lines  # not live
        assert re.fullmatch(r"\d\d:\d\d:\d\d 2 runs: 0 live, \d+ alerts, 1 finished since "
                            r"start \(tick [\d.]+ s\)", _line(watcher)), lines  # the summary
    finally:
        _close(writer)  # type: ignore[arg-type]  # text mode: the same kill, wait and close
        if watcher is not None:
            _close(watcher)


def test_watch_on_a_pipe_shows_a_settled_fleet_from_the_first_tick(tmp_path: Path) -> None:
    """A finished fleet on a pipe: the first tick prints its summary line (nothing live);
    later ticks without a change print nothing until the heartbeat."""
    import io

    from rivumi_analysis.store.watch import watch

    shutil.copytree(ROOT / "sample_runs" / "completed", tmp_path / "f")
    n = len(list((tmp_path / "f").iterdir()))
    out = io.StringIO()
    assert watch(str(tmp_path / "f"), out=out, interval=0.01, iterations=3) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert re.fullmatch(rf"\d\d:\d\d:\d\d {n} runs: 0 live, 0 alerts, 0 finished since start "
                        r"\(tick [\d.]+ s\)", lines[0]), lines


def _view(**kw: object) -> RunView:
    base = dict(run_dir="r", run_id="x", live=True, step=3, max_steps=12, last_append=100.0,
                repeat_count=0, repeat_trip=3, wall_seconds=10.0, wall_limit=900.0,
                tokens=100, token_limit=None, verdict="resumable", reasons=(),
                torn_tail=False, events=10)
    base.update(kw)
    return RunView(**base)  # type: ignore[arg-type]


def test_alert_rules() -> None:
    assert _view().alerts(101.0, 60) == {}
    assert set(_view().alerts(200.0, 60)) == {"stalled"}
    assert set(_view(repeat_count=2).alerts(101.0, 60)) == {"repeat_guard"}
    assert _view(step=12, tokens=5000, token_limit=4000).alerts(101.0, 60)["over_budget"] == (
        "step 12/12, tokens 5000/4000")
    assert set(_view(torn_tail=True).alerts(101.0, 60)) == {"crash_tail"}
    assert _view(live=False, torn_tail=True).alerts(500.0, 60) == {}


def test_watcher_reads_only_what_changed(tmp_path: Path) -> None:
    """A run that is not live is only stat-ed (a settled fleet's first tick reads nothing);
    a live run is read when it changed, from its first new line; it is read once more when
    its writer lets go (its verdict)."""
    import fcntl
    import shutil

    src = ROOT / "sample_runs" / "completed"
    shutil.copytree(src, tmp_path / "f")
    w = Watcher(str(tmp_path / "f"))
    assert w.poll() == []  # nothing live
    assert w.reads == 0 and len(w.runs) == len(list((tmp_path / "f").iterdir()))
    run = sorted((tmp_path / "f").iterdir())[0]
    with open(run / "events.jsonl", "ab") as fh:  # a change to a run nobody writes: a stat
        fh.write(b'{"x": 0}\n')
    assert w.poll() == [] and w.reads == 0
    fd = os.open(run / ".writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert [c.type for c in w.poll()] == ["live"] and w.reads == 1
        w.poll()
        assert w.reads == 1  # nothing changed: a stat per run, no read
        size = (run / "events.jsonl").stat().st_size
        decoded = w.bytes_decoded
        with open(run / "events.jsonl", "ab") as fh:
            fh.write(b'{"x": 1}\n')
        w.poll()
        assert w.reads == 2
        assert w.bytes_decoded - decoded == len(b'{"x": 1}\n') < size  # only the new bytes
    finally:
        os.close(fd)
    assert [c.type for c in w.poll()] == ["finished"] and w.reads == 3
    w.poll()
    assert w.reads == 3
