"""The relayflowd tables: one loader per table, shared signature ``relay_x_df(source, *,
strict=False, max_depth=16)``, each validated by its pandera model in ``schemas.py``.

``source`` is a path, a list of paths, or journals already read with
:func:`~rivumi_analysis.relay.read.load_journals` (so several tables cost one read).
``strict=True`` raises :class:`~rivumi_analysis.errors.RelayQuarantineError` when any row was
quarantined or any journal is unreadable.

Only *applied* channel entries (no C rule failed) make the channel tables: they are the state
the kernel's fold keeps. ``relay_entries_df`` holds every accepted entry with ``applied`` and
the ``rules`` it broke.

>>> relay_violations_df([]).columns[:4]
['path', 'source_kind', 'run_id', 'seq']
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import polars as pl

from ..errors import RelayQuarantineError
from ..schemas import (
    RelayAttemptsSchema,
    RelayChannelAcksSchema,
    RelayChannelCursorSchema,
    RelayChannelDeliveriesSchema,
    RelayChannelMessagesSchema,
    RelayEntriesSchema,
    RelayQuarantineSchema,
    RelayViolationsSchema,
)
from ..tables._common import frame
from .read import Journal, load_journals
from .rules import Fold, fold_journal

Source = str | os.PathLike[str] | Sequence[str] | Iterable[Journal]


def _journals(source: Source, strict: bool, max_depth: int) -> list[Journal]:
    journals, _ = load_journals(source, max_depth=max_depth)  # type: ignore[arg-type]
    if strict and any(j.quarantine or j.unreadable for j in journals):
        raise RelayQuarantineError(quarantine_frame(journals))
    return journals


def _folded(source: Source, strict: bool, max_depth: int) -> list[tuple[Journal, Fold]]:
    return [(j, fold_journal(j)) for j in _journals(source, strict, max_depth)
            if j.unreadable is None]


def _load(source: Source, strict: bool, max_depth: int, model: Any,
          rows_of: Callable[[Journal, Fold], Iterable[dict[str, Any]]]) -> pl.DataFrame:
    rows = [r for j, f in _folded(source, strict, max_depth) for r in rows_of(j, f)]
    return frame(rows, model)


# --- entries, quarantine, violations ---------------------------------------------------------


def relay_entries_df(source: Source, *, strict: bool = False, max_depth: int = 16
                     ) -> pl.DataFrame:
    """One row per accepted entry, with ``applied`` and the rule ids it broke."""
    from .read import canonical

    def rows(j: Journal, f: Fold) -> Iterable[dict[str, Any]]:
        for o in f.outcomes:
            e = o.entry
            yield {"path": j.path, "source_kind": j.source_kind, "run_id": e.run_id,
                   "seq": e.seq, "position": e.position, "segment_id": e.segment_id,
                   "entry_type": e.entry_type, "step_id": e.step_id, "attempt": e.attempt,
                   "at_ms": e.at_ms, "payload": canonical(e.payload), "applied": o.applied,
                   "rules": [v.rule for v in o.violations]}

    return _load(source, strict, max_depth, RelayEntriesSchema, rows)


def quarantine_frame(journals: Iterable[Journal]) -> pl.DataFrame:
    """The quarantine table of already read journals (also used by strict errors)."""
    rows: list[dict[str, Any]] = []
    for j in journals:
        if j.unreadable is not None:
            rows.append({"path": j.path, "source_kind": j.source_kind, "run_id": None,
                         "level": "journal", "reason": j.unreadable.code,
                         "message": j.unreadable.message})
        for q in j.quarantine:
            rows.append({"path": j.path, "source_kind": j.source_kind, "run_id": j.run_id,
                         "level": "entry", "position": q.position, "line_no": q.line_no,
                         "byte_offset": q.byte_offset, "element": q.element, "seq": q.seq,
                         "entry_type": q.entry_type, "reason": q.reason, "message": q.message})
    return frame(rows, RelayQuarantineSchema)


def relay_quarantine_df(source: Source, *, strict: bool = False, max_depth: int = 16
                        ) -> pl.DataFrame:
    """One row per quarantined row/line/element, plus one per unreadable journal."""
    return quarantine_frame(_journals(source, strict, max_depth))


def relay_violations_df(source: Source, *, strict: bool = False, max_depth: int = 16
                        ) -> pl.DataFrame:
    """One row per failed rule: path, run, seq, rule id, entry type, message."""

    def rows(j: Journal, f: Fold) -> Iterable[dict[str, Any]]:
        types = {e.seq: e.entry_type for e in j.entries}
        for v in f.violations:
            yield {"path": j.path, "source_kind": j.source_kind, "run_id": j.run_id,
                   "seq": v.seq, "rule": v.rule, "entry_type": types.get(v.seq, ""),
                   "message": v.message}

    return _load(source, strict, max_depth, RelayViolationsSchema, rows)


# --- attempts --------------------------------------------------------------------------------


def relay_attempts_df(source: Source, *, strict: bool = False, max_depth: int = 16
                      ) -> pl.DataFrame:
    """One row per applied attempt start: its completion (if any) and status
    ``completed`` / ``dead`` (DEAD) / ``live`` (unexplained at the tail, not a violation)."""

    def rows(j: Journal, f: Fold) -> Iterable[dict[str, Any]]:
        dead = {v.seq for v in f.dead}
        applied = [o.entry for o in f.outcomes if o.applied]
        for i, e in enumerate(applied):
            if e.entry_type != "step.attempt.started":
                continue
            end = next((c for c in applied[i + 1:] if c.entry_type == "step.completed"
                        and c.step_id == e.step_id and c.attempt == e.attempt), None)
            yield {"path": j.path, "run_id": j.run_id, "step_id": e.step_id,
                   "attempt": e.attempt, "start_seq": e.seq, "started_at_ms": e.at_ms,
                   "end_seq": end.seq if end else None,
                   "ended_at_ms": end.at_ms if end else None,
                   "duration_ms": max(0, end.at_ms - e.at_ms) if end else None,
                   "completion_reason": _str(end.payload.get("completionReason")) if end else None,
                   "disposition": _str(end.payload.get("disposition")) if end else None,
                   "status": "completed" if end else ("dead" if e.seq in dead else "live")}

    return _load(source, strict, max_depth, RelayAttemptsSchema, rows)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


# --- channels --------------------------------------------------------------------------------


def _applied(f: Fold, entry_type: str) -> list[Any]:
    return [o.entry for o in f.outcomes if o.applied and o.entry.entry_type == entry_type]


def relay_channel_messages_df(source: Source, *, strict: bool = False, max_depth: int = 16
                              ) -> pl.DataFrame:
    """One row per applied append, with how often it was delivered and by how many consumers
    it is acknowledged at the end."""
    from .read import canonical

    def rows(j: Journal, f: Fold) -> Iterable[dict[str, Any]]:
        deliveries: dict[tuple[str, int], int] = {}
        for d in _applied(f, "channel.delivered"):
            k = (d.payload["channel"], d.payload["offset"])
            deliveries[k] = deliveries.get(k, 0) + 1
        for e in _applied(f, "channel.appended"):
            p = e.payload
            ch, off = p["channel"], p["offset"]
            acked = sum(1 for (c, _), a in f.state.acked.items() if c == ch and a >= off)
            yield {"path": j.path, "run_id": j.run_id, "channel": ch, "offset": off,
                   "seq": e.seq, "segment_id": e.segment_id, "producer": p["producer"],
                   "message_id": p["message_id"], "attempt": e.attempt, "at_ms": e.at_ms,
                   "message": canonical(p["message"]),
                   "deliveries": deliveries.get((ch, off), 0), "consumers_acked": acked}

    return _load(source, strict, max_depth, RelayChannelMessagesSchema, rows)


def relay_channel_deliveries_df(source: Source, *, strict: bool = False, max_depth: int = 16
                                ) -> pl.DataFrame:
    """One row per applied delivery: ordinal per (channel, consumer, offset), redelivery
    within the same attempt or across attempts, and the ack that named it."""

    def rows(j: Journal, f: Fold) -> Iterable[dict[str, Any]]:
        acked_by = {a.payload["delivery_seq"]: a.seq for a in _applied(f, "channel.acknowledged")}
        prev: dict[tuple[str, str, int], list[int | None]] = {}
        for e in _applied(f, "channel.delivered"):
            p = e.payload
            k = (p["channel"], p["consumer"], p["offset"])
            before = prev.setdefault(k, [])
            redelivery = bool(before)
            yield {"path": j.path, "run_id": j.run_id, "channel": k[0], "consumer": k[1],
                   "offset": k[2], "seq": e.seq, "segment_id": e.segment_id,
                   "attempt": e.attempt, "at_ms": e.at_ms, "delivery_ordinal": len(before) + 1,
                   "redelivery": redelivery,
                   "redelivery_within_attempt": redelivery and before[-1] == e.attempt,
                   "redelivery_across_attempts": redelivery and before[-1] != e.attempt,
                   "acked_by_seq": acked_by.get(e.seq)}
            before.append(e.attempt)

    return _load(source, strict, max_depth, RelayChannelDeliveriesSchema, rows)


def relay_channel_acks_df(source: Source, *, strict: bool = False, max_depth: int = 16
                          ) -> pl.DataFrame:
    """One row per applied acknowledgement, with latency from the acknowledged delivery and
    from the first delivery of that offset (``at_ms`` differences clamped at 0)."""

    def rows(j: Journal, f: Fold) -> Iterable[dict[str, Any]]:
        deliveries = {d.seq: d for d in _applied(f, "channel.delivered")}
        first: dict[tuple[str, str, int], Any] = {}
        for d in deliveries.values():
            first.setdefault((d.payload["channel"], d.payload["consumer"], d.payload["offset"]), d)
        for e in _applied(f, "channel.acknowledged"):
            p = e.payload
            d = deliveries[p["delivery_seq"]]
            d0 = first[(p["channel"], p["consumer"], p["offset"])]
            yield {"path": j.path, "run_id": j.run_id, "channel": p["channel"],
                   "consumer": p["consumer"], "offset": p["offset"], "seq": e.seq,
                   "segment_id": e.segment_id, "attempt": e.attempt, "at_ms": e.at_ms,
                   "delivery_seq": d.seq, "delivery_segment_id": d.segment_id,
                   "latency_ms": max(0, e.at_ms - d.at_ms), "first_delivery_seq": d0.seq,
                   "first_delivery_latency_ms": max(0, e.at_ms - d0.at_ms)}

    return _load(source, strict, max_depth, RelayChannelAcksSchema, rows)


def cursor_rows(j: Journal, f: Fold) -> Iterable[dict[str, Any]]:
    """Cursor rows of one folded journal (see :func:`relay_channel_cursor_df`)."""
    head: dict[str, int] = {}
    acked: dict[tuple[str, str], int] = {}
    delivered: dict[tuple[str, str], set[int]] = {}
    consumers: dict[str, list[str]] = {}
    for o in f.outcomes:
        e = o.entry
        if not o.applied or not e.entry_type.startswith("channel."):
            continue
        p = e.payload
        ch = p["channel"]
        if e.entry_type == "channel.appended":
            head[ch] = head.get(ch, 0) + 1
            touched = consumers.get(ch, [])
        else:
            c = p["consumer"]
            if c not in consumers.setdefault(ch, []):
                consumers[ch].append(c)
            if e.entry_type == "channel.delivered":
                delivered.setdefault((ch, c), set()).add(p["offset"])
            else:
                acked[(ch, c)] = p["offset"]
            touched = [c]
        for c in touched:
            a = acked.get((ch, c), 0)
            yield {"path": j.path, "run_id": j.run_id, "channel": ch, "consumer": c,
                   "seq": e.seq, "entry_type": e.entry_type, "head": head.get(ch, 0),
                   "acked_offset": a, "lag": max(0, head.get(ch, 0) - a),
                   "in_flight": sum(1 for off in delivered.get((ch, c), ()) if off > a)}


def relay_channel_cursor_df(source: Source, *, strict: bool = False, max_depth: int = 16
                            ) -> pl.DataFrame:
    """(channel, consumer) after each applied channel entry that changes it: head (applied
    appends), acknowledged offset, lag (head − acked) and in-flight (delivered, not acked).
    A consumer appears from its first delivery on (there is no subscription registry)."""
    return _load(source, strict, max_depth, RelayChannelCursorSchema, cursor_rows)
