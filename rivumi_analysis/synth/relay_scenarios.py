"""Scenario catalog of relayflowd journals (written with :mod:`.relayflowd`).

* ``violations/<RULE>.sqlite3``: one journal per rule id, each showing exactly that rule
  (``C9`` is a JSONL dump: SQLite cannot hold two entries with one seq);
* ``crash/<cut>/``: the alice/bob ping/pong exchange cut by a real SIGKILL (see
  :mod:`.relay_crash`);
* ``race``, ``segments``, ``consumers``: the 8-way receive race, an acknowledgement crossing a
  segment rollover, and one channel with several consumers;
* ``dumps/``: JSONL dumps of some scenarios in the three shapes (journal §3.1).

Everything is fixed by a seed (run ids, ``at_ms``, lease ids), so regeneration gives the same
audit records (SQLite bytes may differ: WAL salts are random).

Regenerate with ``python -m rivumi_analysis.synth.relay_scenarios sample_runs/relayflowd``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from .relayflowd import (
    BASE_MS,
    JournalWriter,
    agent_step,
    dump_jsonl,
    envelopes,
    run_id_for,
    spec_of,
)

REQ, REP = "requests", "replies"


def _new(directory: str, name: str, *, file_name: str | None = None) -> JournalWriter:
    os.makedirs(directory, exist_ok=True)
    rid = run_id_for(name)
    return JournalWriter.create(os.path.join(directory, file_name or f"{rid}.sqlite3"), rid,
                                created_at_ms=BASE_MS)


PINGPONG_SPEC = spec_of("relay-pingpong", [
    agent_step("alice", [REQ]), agent_step("bob", [REP]),
    {"id": "det", "type": "deterministic", "command": "true", "depends_on": [],
     "max_iterations": 1, "verification": {}},
])


def _base(w: JournalWriter) -> None:
    w.spawn(PINGPONG_SPEC)
    w.route("alice")
    w.start("alice", 1)
    w.route("bob")
    w.start("bob", 1)


def _raw(w: JournalWriter, entry_type: str, step: str | None, attempt: int | None,
         **payload: Any) -> int:
    return w.append(entry_type, step, attempt, payload, raw=True)


def _app(w: JournalWriter, step: str, offset: int, mid: str, msg: Any, *, ch: str = REQ,
         producer: str | None = None, attempt: int = 1) -> int:
    return _raw(w, "channel.appended", step, attempt, channel=ch, offset=offset,
                producer=producer or step, message_id=mid, message=msg)


def _dlv(w: JournalWriter, step: str, offset: int, msg: Any, *, ch: str = REQ,
         consumer: str | None = None, attempt: int = 1) -> int:
    return _raw(w, "channel.delivered", step, attempt, channel=ch, consumer=consumer or step,
                offset=offset, message=msg)


def _ack(w: JournalWriter, step: str, offset: int, dseq: int, *, ch: str = REQ,
         consumer: str | None = None, attempt: int = 1) -> int:
    return _raw(w, "channel.acknowledged", step, attempt, channel=ch,
                consumer=consumer or step, offset=offset, delivery_seq=dseq)


PING = {"text": "ping"}


def _v_c1(w: JournalWriter) -> None:
    _app(w, "alice", 1, "", PING)


def _v_c2(w: JournalWriter) -> None:
    _app(w, "alice", 1, "ping", PING, producer="bob")


def _v_c3(w: JournalWriter) -> None:
    _app(w, "alice", 2, "ping", PING)


def _v_c4(w: JournalWriter) -> None:
    _app(w, "alice", 1, "ping", PING)
    _app(w, "alice", 2, "ping", PING)


def _v_c5(w: JournalWriter) -> None:
    _app(w, "alice", 1, "ping", PING)
    _dlv(w, "bob", 1, PING, consumer="alice")


def _v_c6(w: JournalWriter) -> None:
    _app(w, "alice", 1, "ping", PING)
    _app(w, "alice", 2, "ping2", PING)
    _dlv(w, "bob", 2, PING)


def _v_c7(w: JournalWriter) -> None:
    _dlv(w, "bob", 1, PING)


def _v_c8(w: JournalWriter) -> None:
    _app(w, "alice", 1, "n", {"n": 1})
    _dlv(w, "bob", 1, {"n": 1.0})  # equal in Python, different JSON values for the kernel


def _v_c10(w: JournalWriter) -> None:
    _app(w, "alice", 1, "ping", PING)
    d = _dlv(w, "bob", 1, PING)
    _ack(w, "bob", 1, d, consumer="alice")


def _v_c11(w: JournalWriter) -> None:
    _app(w, "alice", 1, "ping", PING)
    _dlv(w, "bob", 1, PING)
    _ack(w, "bob", 1, 999)


def _v_c12(w: JournalWriter) -> None:
    _app(w, "alice", 1, "ping", PING)
    _app(w, "alice", 2, "ping2", PING)
    d = _dlv(w, "bob", 1, PING)
    _ack(w, "bob", 2, d)


def _v_c13(w: JournalWriter) -> None:
    _app(w, "alice", 1, "ping", PING)
    d = _dlv(w, "bob", 1, PING)
    _ack(w, "bob", 1, d)
    _ack(w, "bob", 1, d)  # a journaled repeated ack (the kernel dedupes it, D6)


def _v_d1(w: JournalWriter) -> None:
    _app(w, "alice", 1, "ping", PING)
    _raw(w, "run.cancel.requested", None, None, requested_by="operator")
    _dlv(w, "bob", 1, PING)


def _v_d2(w: JournalWriter) -> None:
    w.route("det")
    w.start("det", 1, step_type="deterministic", max_iterations=1)
    _app(w, "alice", 1, "ping", PING)
    _dlv(w, "det", 1, PING)


def _v_d3(w: JournalWriter) -> None:
    _app(w, "alice", 1, "pong", PING, ch=REP)


def _v_d4(w: JournalWriter) -> None:
    _app(w, "alice", 1, "ping", PING)
    _dlv(w, "bob", 1, PING, attempt=2)


def _v_j1(w: JournalWriter) -> None:
    w.rollover()  # segment 2 is current; an entry written into the closed segment 1
    w.append("event.received", payload={"event_key": "tick"}, raw=True, segment_id=1)


def _v_j2(w: JournalWriter) -> None:
    w.complete("alice", 1)
    w.complete("bob", 1)
    w.finish()
    _raw(w, "event.received", None, None, event_key="late")


def _v_j3(w: JournalWriter) -> None:
    _raw(w, "stream.appended", "alice", 1, stream=REQ, offset=1, producer="alice",
         message={"text": "x"})


def _v_j4(w: JournalWriter) -> None:
    _raw(w, "effect.confirmed", "bob", 1, surface_path="/provider/bob",
         idempotency_key="k", agent_identity="bob")


def _v_j5(w: JournalWriter) -> None:
    mem = {"request": {"scope": "run", "query": "q", "budget": 1}, "pack": [], "budget": 1,
           "provider": "none"}
    _raw(w, "memory.injected", "alice", None, **mem)
    _raw(w, "memory.injected", "alice", None, **mem)


def _v_j6(w: JournalWriter) -> None:
    w.append("step.routed", "alice", None, {"fallbacks_attempted": [], "profile": "p",
                                            "provider": "worker"}, raw=True)


def _v_f(w: JournalWriter) -> None:
    _raw(w, "step.attempt.started", "ghost", 1, step_type="agent", idempotency_key="k")


def _v_dead(w: JournalWriter) -> None:
    w.start("alice", 2)  # attempt 1 never completed: resume did not explain it


VIOLATIONS: dict[str, Callable[[JournalWriter], None]] = {
    "C1": _v_c1, "C2": _v_c2, "C3": _v_c3, "C4": _v_c4, "C5": _v_c5, "C6": _v_c6,
    "C7": _v_c7, "C8": _v_c8, "C10": _v_c10, "C11": _v_c11, "C12": _v_c12, "C13": _v_c13,
    "D1": _v_d1, "D2": _v_d2, "D3": _v_d3, "D4": _v_d4,
    "J1": _v_j1, "J2": _v_j2, "J3": _v_j3, "J4": _v_j4, "J5": _v_j5, "J6": _v_j6,
    "F": _v_f, "DEAD": _v_dead,
}
"""Rule id -> builder appending (after :func:`_base`) the entries that break exactly it."""

ALL_RULES = (*[f"C{i}" for i in range(1, 14)], "D1", "D2", "D3", "D4",
             *[f"J{i}" for i in range(1, 7)], "F", "DEAD")


def write_violations(directory: str) -> dict[str, str]:
    """Write one journal per rule id into ``directory``; returns rule -> file path."""
    out: dict[str, str] = {}
    for rule, build in VIOLATIONS.items():
        with _new(os.path.join(directory, rule), f"violation-{rule}") as w:
            _base(w)
            build(w)
            out[rule] = w.path
    # C9: the same delivery line twice; only a JSON dump can repeat a seq
    tmp = os.path.join(directory, ".c9-build")
    with _new(tmp, "violation-C9", file_name="C9.sqlite3") as w:
        _base(w)
        _app(w, "alice", 1, "ping", PING)
        _dlv(w, "bob", 1, PING)
    envs = envelopes(os.path.join(tmp, "C9.sqlite3"))
    envs.append(envs[-1])
    os.makedirs(os.path.join(directory, "C9"))
    path = os.path.join(directory, "C9", f"{run_id_for('violation-C9')}.jsonl")
    with open(path, "wb") as fh:
        fh.write(dump_jsonl(envs, "jsonl"))
    for name in os.listdir(tmp):
        os.unlink(os.path.join(tmp, name))
    os.rmdir(tmp)
    out["C9"] = path
    return out


# --- channel scenarios -----------------------------------------------------------------------


def write_race(directory: str, *, racers: int = 8) -> str:
    """The 8-way race (journal §10): ``racers`` threads on independent connections race the same send,
    the same receive and the same ack. One append, ``racers`` deliveries, one ack."""
    import threading

    with _new(directory, "race") as w:
        w.spawn(spec_of("relay-race", [agent_step("producer", ["jobs"]),
                                       agent_step("consumer", [])]))
        for s in ("producer", "consumer"):
            w.route(s)
            w.start(s, 1)
        path, clock = w.path, w.clock_ms
    barrier = threading.Barrier(racers)
    errors: list[BaseException] = []
    deliveries: list[int] = []

    def racer() -> None:
        try:
            with JournalWriter.open(path) as mine:
                mine.clock_ms = clock
                barrier.wait(timeout=20)
                mine.channel_append("producer", 1, "jobs", "job-1", {"job": 1})
                barrier.wait(timeout=20)
                got = mine.channel_receive("consumer", 1, "jobs")
                assert got is not None
                deliveries.append(got.seq)
                barrier.wait(timeout=20)
                mine.channel_ack("consumer", 1, "jobs", got.seq)
        except BaseException as exc:  # reported to the caller below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=racer) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    with JournalWriter.open(path) as w:
        w.complete("producer", 1)
        w.complete("consumer", 1)
        w.finish()
    return path


def write_segments(directory: str) -> str:
    """A channel crossing a segment rollover: delivered in segment 1, redelivered in segment 2,
    and the ack (in segment 2) names the segment-1 delivery."""
    with _new(directory, "segments") as w:
        w.spawn(spec_of("relay-segments", [agent_step("alice", [REQ]), agent_step("bob", [])]))
        for s in ("alice", "bob"):
            w.route(s)
            w.start(s, 1)
        w.channel_append("alice", 1, REQ, "m1", {"n": 1})
        first = w.channel_receive("bob", 1, REQ)
        assert first is not None
        w.rollover()
        again = w.channel_receive("bob", 1, REQ)
        assert again is not None
        w.channel_ack("bob", 1, REQ, first.seq)
        w.channel_append("alice", 1, REQ, "m2", {"n": 2})
        d2 = w.channel_receive("bob", 1, REQ)
        assert d2 is not None
        w.channel_ack("bob", 1, REQ, d2.seq)
        w.complete("alice", 1)
        w.complete("bob", 1)
        w.finish()
        return w.path


def write_consumers(directory: str) -> str:
    """One producer, three consumers on one channel at different paces: ``fast`` acks all
    three messages, ``slow`` is redelivered once and acks one, ``stuck`` never acks.
    The run is left open (the consumers are live at the tail)."""
    with _new(directory, "consumers") as w:
        w.spawn(spec_of("relay-consumers", [agent_step("producer", ["events"]),
                                            agent_step("fast", []), agent_step("slow", []),
                                            agent_step("stuck", [])]))
        for s in ("producer", "fast", "slow", "stuck"):
            w.route(s)
            w.start(s, 1)
        for i in (1, 2, 3):
            w.channel_append("producer", 1, "events", f"e{i}", {"event": i, "ratio": i / 2})
            d = w.channel_receive("fast", 1, "events")
            assert d is not None
            w.channel_ack("fast", 1, "events", d.seq)
        d = w.channel_receive("slow", 1, "events")
        d = w.channel_receive("slow", 1, "events")  # redelivered: not yet acknowledged
        assert d is not None
        w.channel_ack("slow", 1, "events", d.seq)
        w.channel_receive("slow", 1, "events")
        w.channel_receive("stuck", 1, "events")
        w.channel_receive("stuck", 1, "events")
        return w.path


def write_dumps(directory: str, journal: str, stem: str) -> list[str]:
    """Write ``<stem>.<shape>.jsonl`` for the three shapes of one SQLite journal."""
    os.makedirs(directory, exist_ok=True)
    envs = envelopes(journal)
    out = []
    for shape in ("jsonl", "replay_json", "journal_read"):
        name = "envelopes" if shape == "jsonl" else shape
        path = os.path.join(directory, f"{stem}.{name}.jsonl")
        with open(path, "wb") as fh:
            fh.write(dump_jsonl(envs, shape))
        out.append(path)
    return out


def write_catalog(root: str) -> dict[str, Any]:
    """Write the whole catalog under ``root`` (which must not exist yet)."""
    from .relay_crash import CUTS, write_crash

    os.makedirs(root)
    out: dict[str, Any] = {"violations": write_violations(os.path.join(root, "violations"))}
    out["crash"] = {cut: write_crash(os.path.join(root, "crash", cut), cut) for cut in CUTS}
    out["race"] = write_race(os.path.join(root, "race"))
    out["segments"] = write_segments(os.path.join(root, "segments"))
    out["consumers"] = write_consumers(os.path.join(root, "consumers"))
    dumps = os.path.join(root, "dumps")
    out["dumps"] = (write_dumps(dumps, out["crash"]["delivery"]["resumed"], "crash-delivery")
                    + write_dumps(dumps, out["consumers"], "consumers"))
    with open(os.path.join(root, "README.md"), "w", encoding="utf-8") as fh:
        fh.write(README)
    return out


README = """# relayflowd sample journals

Written by `rivumi_analysis.synth.relayflowd` (the kernel's schema, WAL, `synchronous=FULL`, one
`BEGIN IMMEDIATE` transaction per append, canonical JSON, channel rules checked inside the
transaction) from a fixed seed. Regenerate with
`python -m rivumi_analysis.synth.relay_scenarios sample_runs/relayflowd` (SQLite bytes differ
between runs, WAL salts are random; `tests/test_relay_catalog.py` checks that a regeneration
gives the same audit records). Audit: `rivumi-analysis relay audit sample_runs/relayflowd`.

| folder | what it shows |
|---|---|
| `crash/<cut>/kill/` | journal §9: the alice/bob ping/pong exchange as a real SIGKILL of the writer process left it at cut `append`, `delivery`, `effect` or `ack` (`.sqlite3` + `-wal`: the last committed entries are only in the `-wal`); both attempt-1 starts live at the tail, no violation |
| `crash/<cut>/resumed/` | the same journal after a second process resumed it: attempt 1 completed `crashed`, attempt 2 re-dispatched, idempotent re-send and re-ack (nothing journaled), redelivery under `delivery`/`effect`, deduplicated effect under `effect`/`ack`; the §9 table's counts, no violation |
| `race/` | journal §10: 8 threads on independent connections race one send, one receive and one ack: 1 append, 8 deliveries of offset 1 (7 redeliveries), 1 acknowledgement |
| `segments/` | a rollover between a delivery and its acknowledgement: the ack in segment 2 names the segment-1 delivery; a redelivery lands in segment 2 |
| `consumers/` | one producer and three consumers on one channel at different paces (`fast` acks all, `slow` redelivered and behind, `stuck` never acks); run left open |
| `violations/<RULE>/` | one journal per rule id (C1–C13, D1–D4, J1–J6, F, DEAD) showing exactly that rule; `C9` is a JSONL dump (a repeated delivery line: SQLite cannot repeat a seq) |
| `dumps/` | the `delivery` crash journal and the consumers journal in the three JSON shapes (`envelopes` = bare `jsonl`, `replay_json`, `journal_read` pages of 4) |
"""


if __name__ == "__main__":  # pragma: no cover - regeneration entry point
    write_catalog(sys.argv[1])
