"""A relayflowd journal writer that follows the journal format (docs/relayflowd-journal.md: journal §2, §5, §6).

The run file has the kernel's schema, is opened with ``journal_mode=WAL``, ``synchronous=FULL``
and ``foreign_keys=ON``, and every append is one ``BEGIN IMMEDIATE`` transaction that refuses
after ``run.completed``, stores canonical JSON, and re-runs the audit's reducer on the journal
inside the transaction: an entry the rules refuse is rolled back (the writer refuses what the
kernel refuses). ``raw=True`` skips those checks, to write violation journals on purpose.

The channel verbs decide like the kernel (journal §6, D5–D7): an identical re-send returns the original
append (nothing journaled), a receive journals a delivery of ``acked + 1`` when it exists, an
ack at or below the acknowledged offset returns the current acknowledgement (nothing journaled).

Test data only: nothing in the package imports this module except tests and ``python -m``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..relay.read import canonical, parse_json, sqlite_row
from ..relay.rules import Fold, fold_entries

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE segments (segment_id INTEGER PRIMARY KEY, journal_version INTEGER NOT NULL,
                       opened_seq INTEGER NOT NULL);
CREATE TABLE entries (seq INTEGER PRIMARY KEY,
                      segment_id INTEGER NOT NULL REFERENCES segments(segment_id),
                      entry_type TEXT NOT NULL, step_id TEXT, attempt INTEGER,
                      at_ms INTEGER NOT NULL, payload TEXT NOT NULL);
CREATE INDEX entries_segment_seq ON entries(segment_id, seq);
CREATE INDEX entries_step_seq ON entries(step_id, seq) WHERE step_id IS NOT NULL;
CREATE TABLE effects (step_id TEXT NOT NULL, idempotency_key TEXT NOT NULL,
                      surface_path TEXT NOT NULL, entry_seq INTEGER NOT NULL,
                      attempt INTEGER NOT NULL, confirmed_seq INTEGER,
                      PRIMARY KEY (step_id, idempotency_key, surface_path)) WITHOUT ROWID;
CREATE TABLE stream_index (stream TEXT NOT NULL, "offset" INTEGER NOT NULL,
                           entry_seq INTEGER NOT NULL,
                           PRIMARY KEY (stream, "offset")) WITHOUT ROWID;
"""

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid(seed: str, at_ms: int) -> str:
    """A deterministic ULID-shaped id (26 Crockford characters) from a seed and a time.

    >>> len(ulid("x", 1788961144343)), ulid("x", 1) == ulid("x", 1)
    (26, True)
    """
    n = (at_ms << 80) | int.from_bytes(hashlib.sha256(seed.encode()).digest()[:10], "big")
    return "".join(CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


BASE_MS = 1788961144000
"""The scenarios' clock origin (ms since the epoch)."""


def run_id_for(name: str) -> str:
    """The deterministic run id of a named scenario (shared by the scenarios and crash cuts)."""
    return ulid(f"relay-scenario/{name}", BASE_MS)


def idempotency_key(run_id: str, step_id: str) -> str:
    """The attempt's idempotency key: derived from run and step, the same for every attempt."""
    return hashlib.sha256(f"{run_id}/{step_id}".encode()).hexdigest()


class Refused(Exception):
    """The writer refused a command, like the kernel would (``code`` as in the protocol)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Delivered:
    """A receive's result: the delivery entry's seq, the offset and the message."""

    seq: int
    offset: int
    message: Any


class JournalWriter:
    """One run file, written the kernel's way. Create with :meth:`create`, reopen with
    :meth:`open`; ``at_ms`` of each entry is ``clock_ms + step_ms * seq`` unless given."""

    def __init__(self, path: str, con: sqlite3.Connection, run_id: str, clock_ms: int,
                 step_ms: int = 7) -> None:
        self.path = path
        self.con = con
        self.run_id = run_id
        self.clock_ms = clock_ms
        self.step_ms = step_ms

    # -- files --------------------------------------------------------------------------------

    @staticmethod
    def _connect(path: str, *, autocheckpoint: bool = True) -> sqlite3.Connection:
        con = sqlite3.connect(path, isolation_level=None, timeout=10.0,
                              check_same_thread=False)
        con.execute("PRAGMA journal_mode = WAL")
        con.execute("PRAGMA synchronous = FULL")
        con.execute("PRAGMA foreign_keys = ON")
        con.execute("PRAGMA busy_timeout = 10000")
        if not autocheckpoint:
            con.execute("PRAGMA wal_autocheckpoint = 0")
        return con

    @classmethod
    def create(cls, path: str, run_id: str, *, created_at_ms: int = 1788961144000,
               journal_version: str = "1", autocheckpoint: bool = True) -> JournalWriter:
        """Create ``path`` with the run-file schema, ``meta`` and segment 1."""
        if os.path.exists(path):
            raise FileExistsError(path)
        con = cls._connect(path, autocheckpoint=autocheckpoint)
        con.execute("BEGIN IMMEDIATE")
        for stmt in SCHEMA.split(";"):
            if stmt.strip():
                con.execute(stmt)
        con.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", [
            ("run_id", run_id), ("created_at_ms", str(created_at_ms)),
            ("journal_version", journal_version)])
        con.execute("INSERT INTO segments VALUES (1, 1, 1)")
        con.execute("COMMIT")
        return cls(path, con, run_id, created_at_ms)

    @classmethod
    def open(cls, path: str, *, autocheckpoint: bool = True) -> JournalWriter:
        """Reopen an existing run file (e.g. to resume after a SIGKILL)."""
        con = cls._connect(path, autocheckpoint=autocheckpoint)
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        return cls(path, con, meta["run_id"], int(meta["created_at_ms"]))

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions -------------------------------------------------------------------------

    @contextmanager
    def _txn(self) -> Iterator[None]:
        self.con.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def _fold(self) -> Fold:
        rows = self.con.execute("SELECT seq, segment_id, entry_type, step_id, attempt, at_ms, "
                                "payload FROM entries ORDER BY seq").fetchall()
        segs = tuple(self.con.execute(
            "SELECT segment_id, opened_seq FROM segments ORDER BY segment_id").fetchall())
        entries = []
        for pos, row in enumerate(rows):
            env, _, _ = sqlite_row(pos, row, self.run_id, self.path)
            if env is not None:
                entries.append(env)
        return fold_entries(entries, run_id=self.run_id, segments=segs)

    def _insert(self, entry_type: str, step_id: str | None, attempt: int | None,
                payload: Any, *, at_ms: int | None, segment_id: int | None,
                payload_text: str | None, raw: bool) -> int:
        seq = (self.con.execute("SELECT COALESCE(MAX(seq), 0) FROM entries").fetchone()[0]) + 1
        if not raw and self.con.execute(
                "SELECT 1 FROM entries WHERE entry_type = 'run.completed' LIMIT 1").fetchone():
            raise Refused("run_terminal", f"run {self.run_id} is terminal and cannot accept "
                          "journal entries")
        if segment_id is None:
            segment_id = self.con.execute("SELECT MAX(segment_id) FROM segments").fetchone()[0]
        text = payload_text if payload_text is not None else canonical(payload)
        self.con.execute("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (seq, segment_id, entry_type, step_id, attempt,
                          self.clock_ms + self.step_ms * seq if at_ms is None else at_ms, text))
        if raw:
            return seq
        bad = [v for v in self._fold().violations if v.seq == seq and v.rule != "DEAD"]
        if bad:
            code = "channel_conflict" if entry_type.startswith("channel.") else "invalid_entry"
            raise Refused(code, "; ".join(f"{v.rule}: {v.message}" for v in bad))
        self._project(seq, entry_type, step_id, attempt, payload)
        return seq

    def _project(self, seq: int, entry_type: str, step_id: str | None, attempt: int | None,
                 payload: Any) -> None:
        """Keep the ``effects``/``stream_index`` projections (the audit ignores them)."""
        if entry_type == "stream.appended":
            self.con.execute("INSERT INTO stream_index VALUES (?, ?, ?)",
                             (payload["stream"], payload["offset"], seq))
        elif entry_type == "effect.recorded" and not payload["deduped"]:
            self.con.execute("INSERT OR REPLACE INTO effects VALUES (?, ?, ?, ?, ?, NULL)",
                             (step_id, payload["idempotency_key"], payload["surface_path"],
                              seq, attempt))
        elif entry_type == "effect.confirmed":
            self.con.execute("UPDATE effects SET confirmed_seq = ? WHERE step_id = ? AND "
                             "idempotency_key = ? AND surface_path = ?",
                             (seq, step_id, payload["idempotency_key"], payload["surface_path"]))

    def append(self, entry_type: str, step_id: str | None = None, attempt: int | None = None,
               payload: Any = None, *, at_ms: int | None = None, raw: bool = False,
               segment_id: int | None = None, payload_text: str | None = None) -> int:
        """Append one entry in its own IMMEDIATE transaction; returns its seq.

        ``raw=True`` writes without the terminal check and the rules (violation journals);
        ``segment_id``/``payload_text`` override what the kernel would write (raw only).
        """
        if not raw and (segment_id is not None or payload_text is not None):
            raise ValueError("segment_id and payload_text overrides need raw=True")
        with self._txn():
            return self._insert(entry_type, step_id, attempt, {} if payload is None else payload,
                                at_ms=at_ms, segment_id=segment_id, payload_text=payload_text,
                                raw=raw)

    def rollover(self) -> int:
        """Close the segment and open the next one in one transaction (journal §5); returns its id."""
        with self._txn():
            fold = self._fold()
            cur = self.con.execute("SELECT MAX(segment_id) FROM segments").fetchone()[0]
            nxt = cur + 1
            closed = self._insert("segment.closed", None, None, {"next_segment_id": nxt},
                                  at_ms=None, segment_id=None, payload_text=None, raw=False)
            self.con.execute("INSERT INTO segments VALUES (?, 1, ?)", (nxt, closed + 1))
            state = fold.state
            summary = {
                "epoch": nxt, "prev_segment_id": cur, "journal_version": 1,
                "steps_done": [], "open_waits": [], "pinned_revisions": {},
                "stream_state": {k: v for k, v in sorted(state.streams.items())},
                "budget_spent": {"dollars": "0", "tokens_in": 0, "tokens_out": 0},
                "steps_open": {s: {"attempt": a, "state": "running"}
                               for s, a in sorted(state.running.items())},
                "routing": {s: {"profile": "attached-worker", "provider": "worker"}
                            for s in sorted(state.routed)},
            }
            self._insert("epoch.summary", None, None, summary, at_ms=None, segment_id=nxt,
                         payload_text=None, raw=False)
            return nxt

    # -- run and step verbs -------------------------------------------------------------------

    def spawn(self, spec: dict[str, Any], *, created_by: str = "rivumi-analysis-synth") -> int:
        spec_hash = hashlib.sha256(canonical(spec).encode()).hexdigest()
        return self.append("run.spawned", payload={
            "spec": spec, "spec_hash": spec_hash, "parent_run_id": None, "journal_version": 1,
            "created_by": created_by})

    def route(self, step_id: str) -> int:
        return self.append("step.routed", step_id, payload={
            "fallbacks_attempted": [], "profile": "attached-worker", "provider": "worker"})

    def start(self, step_id: str, attempt: int, *, step_type: str = "agent",
              max_iterations: int = 2) -> int:
        seq_hint = self.con.execute("SELECT COALESCE(MAX(seq), 0) FROM entries").fetchone()[0]
        return self.append("step.attempt.started", step_id, attempt, {
            "executor": "local-agent" if step_type == "agent" else "kernel",
            "idempotency_key": idempotency_key(self.run_id, step_id),
            "lease_deadline_ms": self.clock_ms + self.step_ms * (seq_hint + 1) + 30000,
            "lease_id": ulid(f"{self.run_id}/{step_id}/{attempt}", self.clock_ms),
            "max_iterations": max_iterations,
            "pins": {"streams": [], "workspace": []},
            "recovery_mode": "reset" if step_type == "agent" else None,
            "step_type": step_type})

    def complete(self, step_id: str, attempt: int, reason: str = "success",
                 disposition: str = "step_done", *, end_pins: Any = "default") -> int:
        if end_pins == "default":
            end_pins = {"streams": [], "workspace": []} if reason == "success" else None
        return self.append("step.completed", step_id, attempt, {
            "budget": {"dollars": "0", "tokens_in": 0, "tokens_out": 0},
            "completed_by": "local-agent" if reason == "success" else "kernel",
            "completionReason": reason, "disposition": disposition, "effects": [],
            "end_pins": end_pins, "next_attempt_at_ms": None,
            "output": None if reason != "success" else {"exit_code": 0},
            "verification": None})

    def finish(self, reason: str = "success") -> int:
        return self.append("run.completed", payload={
            "budget_total": {"dollars": "0", "tokens_in": 0, "tokens_out": 0},
            "completionReason": reason, "failed_step_id": None})

    # -- channel verbs (decided like the kernel) ----------------------------------------------

    def channel_append(self, step_id: str, attempt: int, channel: str, message_id: str,
                       message: Any) -> int:
        """``channel.append``: returns the seq of the (original or new) append (D5)."""
        with self._txn():
            state = self._fold().state
            text = canonical(message)
            for a in state.appends.get(channel, {}).values():
                if a.producer == step_id and a.message_id == message_id:
                    if a.message != text:
                        raise Refused("channel_conflict", "message id reused with different "
                                      "content")
                    return a.seq  # idempotent re-send: nothing journaled
            offset = len(state.appends.get(channel, {})) + 1
            return self._insert("channel.appended", step_id, attempt, {
                "channel": channel, "offset": offset, "producer": step_id,
                "message_id": message_id, "message": message}, at_ms=None, segment_id=None,
                payload_text=None, raw=False)

    def channel_receive(self, step_id: str, attempt: int, channel: str) -> Delivered | None:
        """``channel.receive``: journals a delivery of ``acked + 1``, or returns None (D7)."""
        with self._txn():
            state = self._fold().state
            offset = state.acked_offset(channel, step_id) + 1
            have = state.appends.get(channel, {})
            if offset not in have:
                return None
            message, _ = parse_json(have[offset].message)
            seq = self._insert("channel.delivered", step_id, attempt, {
                "channel": channel, "consumer": step_id, "offset": offset,
                "message": message}, at_ms=None, segment_id=None, payload_text=None, raw=False)
            return Delivered(seq, offset, message)

    def channel_ack(self, step_id: str, attempt: int, channel: str, delivery_seq: int
                    ) -> int | None:
        """``channel.ack``: the new ack's seq, or None when it is at or below the acked offset
        (idempotent, D6: nothing journaled)."""
        with self._txn():
            state = self._fold().state
            d = state.deliveries.get(delivery_seq)
            if d is None or d.channel != channel or d.consumer != step_id:
                raise Refused("channel_conflict", f"unknown delivery sequence {delivery_seq}")
            acked = state.acked_offset(channel, step_id)
            if d.offset <= acked:
                return None
            if d.offset != acked + 1:
                raise Refused("channel_conflict", "acknowledgement would skip messages")
            return self._insert("channel.acknowledged", step_id, attempt, {
                "channel": channel, "consumer": step_id, "offset": d.offset,
                "delivery_seq": delivery_seq}, at_ms=None, segment_id=None, payload_text=None,
                raw=False)

    # -- effects ------------------------------------------------------------------------------

    def effect_record(self, step_id: str, attempt: int, surface_path: str) -> bool:
        """``effect.record``: journals ``effect.recorded`` with the computed ``deduped``."""
        key = idempotency_key(self.run_id, step_id)
        with self._txn():
            held = self._fold().state.elections.get((step_id, key, surface_path))
            deduped = held is not None and (held[1] or held[0] == attempt)
            self._insert("effect.recorded", step_id, attempt, {
                "surface_path": surface_path, "idempotency_key": key, "revision_before": None,
                "revision_after": None, "agent_identity": step_id, "deduped": deduped},
                at_ms=None, segment_id=None, payload_text=None, raw=False)
            return deduped

    def effect_confirm(self, step_id: str, attempt: int, surface_path: str) -> int:
        return self.append("effect.confirmed", step_id, attempt, {
            "surface_path": surface_path, "idempotency_key": idempotency_key(self.run_id, step_id),
            "agent_identity": step_id})


def agent_step(step_id: str, streams: list[str], *, max_iterations: int = 2) -> dict[str, Any]:
    """A spec step of type agent declaring its workspace, provider surface and streams."""
    return {"id": step_id, "type": "agent", "depends_on": [], "instruction": f"act as {step_id}",
            "max_iterations": max_iterations, "recovery_mode": "reset",
            "retry": {"initial_backoff_ms": 0, "jitter_percent": 0, "max_backoff_ms": 0,
                      "multiplier": 1},
            "surfaces": {"workspace": [{"surface": f"ws-{step_id}"}],
                         "external": [f"/provider/{step_id}"],
                         "streams": [{"stream": s} for s in streams]},
            "verification": {}}


def spec_of(name: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "steps": steps, "version": "0.1.0"}


# --- JSON dumps in the three shapes (journal §3.1) ---------------------------------------------------


def envelopes(path: str) -> list[dict[str, Any]]:
    """The journal's entries as envelope dicts (reads the file directly: test data only)."""
    con = sqlite3.connect(path)
    try:
        run_id = dict(con.execute("SELECT key, value FROM meta").fetchall())["run_id"]
        rows = con.execute("SELECT seq, segment_id, entry_type, step_id, attempt, at_ms, payload "
                           "FROM entries ORDER BY seq").fetchall()
    finally:
        con.close()
    return [{"at_ms": at, "attempt": att, "entry_type": et, "payload": json.loads(p),
             "run_id": run_id, "segment_id": seg, "seq": seq, "step_id": st}
            for seq, seg, et, st, att, at, p in rows]


def _js_numbers(v: Any) -> Any:
    """What a JavaScript reader prints: integral floats lose their ``.0``."""
    if isinstance(v, dict):
        return {k: _js_numbers(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_js_numbers(x) for x in v]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def dump_jsonl(envs: list[dict[str, Any]], shape: str, *, page: int = 4) -> bytes:
    """Serialise envelopes as ``jsonl`` (bare), ``replay_json`` or ``journal_read`` pages."""
    lines: list[str] = []
    if shape == "jsonl":
        lines = [json.dumps(e, sort_keys=True, separators=(",", ":")) for e in envs]
    elif shape == "replay_json":
        for e in envs:
            e = _js_numbers(e)
            p = e["payload"]
            spend = p.get("budget", p.get("budget_total"))
            lines.append(canonical({"event": e, "kind": e["entry_type"], "spend": spend,
                                    "step_id": e["step_id"],
                                    "verification": p.get("verification")}))
    elif shape == "journal_read":
        for i in range(0, len(envs), page):
            lines.append(canonical({"entries": envs[i:i + page]}))
    else:
        raise ValueError(shape)
    return "".join(line + "\n" for line in lines).encode()
