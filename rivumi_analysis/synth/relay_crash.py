"""The channel crash test of journal §9 (docs/relayflowd-journal.md), with a real SIGKILL.

A writer *child process* (its own process group) runs the alice/bob ping/pong exchange and,
right after the commit of the cut point (``append``, ``delivery``, ``effect`` or ``ack``),
reports ``CUT <name>`` over its stdout pipe and waits; the parent then SIGKILLs the whole
group, so the journal is left exactly as a killed daemon leaves it (committed entries possibly
only in the ``-wal``). The parent copies the ``.sqlite3`` and ``-wal`` as evidence of the
moment of the kill, then a *second process* resumes like the kernel: ``step.completed crashed``
for both attempt-1 starts, attempt 2 re-dispatched, and the exchange replayed through the
idempotent channel verbs (D5, D6) and effect elections.

Run as ``python -m rivumi_analysis.synth.relay_crash child|resume PATH CUT``.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time

from .relayflowd import JournalWriter, agent_step, run_id_for, spec_of

CUTS = ("append", "delivery", "effect", "ack")
REQ, REP = "requests", "replies"
SPEC = spec_of("relay-crash-pingpong", [agent_step("alice", [REQ]), agent_step("bob", [REP])])
HANDSHAKE_TIMEOUT_S = 30.0


def _cut(name: str, cut: str) -> None:
    if name == cut:
        sys.stdout.write(f"CUT {name}\n")
        sys.stdout.flush()
        time.sleep(120)  # SIGKILL lands here; the timeout only guards a lost parent
        os._exit(4)


def child(path: str, cut: str, run_id: str, created_at_ms: int) -> None:
    """Attempt 1 of the exchange, stopping (for the SIGKILL) right after ``cut`` committed."""
    w = JournalWriter.create(path, run_id, created_at_ms=created_at_ms)
    w.spawn(SPEC)
    w.route("alice")
    w.start("alice", 1)
    w.route("bob")
    w.start("bob", 1)
    w.channel_append("alice", 1, REQ, "ping", {"text": "ping"})
    _cut("append", cut)
    got = w.channel_receive("bob", 1, REQ)
    assert got is not None
    _cut("delivery", cut)
    if not w.effect_record("bob", 1, "/provider/bob"):
        w.effect_confirm("bob", 1, "/provider/bob")  # after the provider call
    _cut("effect", cut)
    w.channel_ack("bob", 1, REQ, got.seq)
    _cut("ack", cut)
    raise SystemExit(f"unknown cut {cut!r}")


def resume(path: str) -> None:
    """What ``relayflowd resume`` and the re-dispatched workers journal (journal §9, after the resume)."""
    w = JournalWriter.open(path)
    running = dict(w._fold().state.running)
    for step in ("alice", "bob"):
        if step in running:
            w.complete(step, running[step], "crashed", "retry")
    w.start("alice", 2)
    w.start("bob", 2)
    w.channel_append("alice", 2, REQ, "ping", {"text": "ping"})  # D5: the original comes back
    got = w.channel_receive("bob", 2, REQ)  # None under the ack cut
    if not w.effect_record("bob", 2, "/provider/bob"):
        w.effect_confirm("bob", 2, "/provider/bob")
    seq = got.seq if got is not None else max(w._fold().state.deliveries)
    w.channel_ack("bob", 2, REQ, seq)
    assert w.channel_ack("bob", 2, REQ, seq) is None  # the second ack is deduplicated (D6)
    assert w.channel_receive("bob", 2, REQ) is None
    w.channel_append("bob", 2, REP, "pong", {"text": "pong"})
    got = w.channel_receive("alice", 2, REP)
    assert got is not None
    if not w.effect_record("alice", 2, "/provider/alice"):
        w.effect_confirm("alice", 2, "/provider/alice")
    w.channel_ack("alice", 2, REP, got.seq)
    w.complete("alice", 2)
    w.complete("bob", 2)
    w.finish()
    w.close()


def _python(*args: str, **kw: object) -> subprocess.Popen[str]:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-m", "rivumi_analysis.synth.relay_crash", *args],
                            env=env, text=True, **kw)  # type: ignore[call-overload]


def write_crash(directory: str, cut: str, *, run_id: str | None = None,
                created_at_ms: int = 1788961144000) -> dict[str, str]:
    """Run the cut: ``{"kill": journal copied at the kill, "resumed": journal after resume}``."""
    if cut not in CUTS:
        raise ValueError(f"cut must be one of {CUTS}")
    rid = run_id or run_id_for(f"crash-{cut}")
    live = os.path.join(directory, "resumed")
    kill = os.path.join(directory, "kill")
    os.makedirs(live)
    os.makedirs(kill)
    path = os.path.join(live, f"{rid}.sqlite3")
    proc = _python("child", path, cut, rid, str(created_at_ms), stdout=subprocess.PIPE,
                   start_new_session=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], HANDSHAKE_TIMEOUT_S)
        line = proc.stdout.readline() if ready else ""
        if line.strip() != f"CUT {cut}":
            raise RuntimeError(f"writer child did not reach cut {cut!r} (got {line!r}, "
                               f"exit {proc.poll()})")
        os.killpg(proc.pid, signal.SIGKILL)
        if proc.wait(timeout=HANDSHAKE_TIMEOUT_S) != -signal.SIGKILL:
            raise RuntimeError(f"writer child was not killed by SIGKILL ({proc.returncode})")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=HANDSHAKE_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()
    for suffix in ("", "-wal"):  # the evidence as the kill left it (the -shm is rebuildable)
        if os.path.exists(path + suffix):
            shutil.copyfile(path + suffix, os.path.join(kill, f"{rid}.sqlite3{suffix}"))
    res = _python("resume", path, cut)
    if res.wait(timeout=60) != 0:
        raise RuntimeError(f"resume after cut {cut!r} failed ({res.returncode})")
    return {"kill": os.path.join(kill, f"{rid}.sqlite3"), "resumed": path}


if __name__ == "__main__":  # pragma: no cover - runs in the child processes
    if sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif sys.argv[1] == "resume":
        resume(sys.argv[2])
    else:
        raise SystemExit(f"usage: {sys.argv[0]} child|resume PATH CUT")
