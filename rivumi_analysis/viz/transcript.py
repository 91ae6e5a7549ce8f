"""The transcript of one run: what the agent did, turn by turn and step by step.

Built from the tables only (``events_df`` for the order and the keys no other table keeps,
``messages_df`` for the texts, ``model_calls_df``, ``tool_calls_df``, ``approvals_df``,
``verifications_df`` and ``quarantine_df`` for the facts); nothing here reads a run file.

Entries follow the log's physical order (``line_no``). A model step is one entry (its
``model.requested`` with the reply, finish reason and tokens folded in), a tool call is one
entry at its ``tool.requested`` (approval, start and completion folded in), a final check is
one entry at its approval or start; every other event, every quarantined line and the
conversation's system and user messages (``session.json``) have an entry of their own where
they fall. Events are matched to table rows by their sequence (one occurrence each), never by
``tool_call_id`` or ``request_id`` alone: ids repeat across a continued session.

Every text is run-originated and untrusted: :func:`text_html` escapes it for HTML and makes
bidi controls, other control characters and lone surrogates visible instead of obeyed.
``redact=True`` keeps only ids, types, tool names, effects, decisions, codes and numbers.

>>> from rivumi_analysis.viz.report import load_tables
>>> t = load_tables(["tests/fixtures/example"])
>>> entries = transcript_entries(t)
>>> [e.kind for e in entries][:4]
['turn', 'marker', 'event', 'system']
>>> sum(e.kind == "tool" for e in entries), sum(e.kind == "model" for e in entries)
(6, 7)
"""

from __future__ import annotations

import html as _html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ._html import visible

__all__ = ["Entry", "TRANSCRIPT_CAPS", "render_text", "text_html", "transcript_entries",
           "transcript_html", "visible"]

TRANSCRIPT_CAPS: Mapping[str, int] = {
    "fold_chars": 600,       # texts longer than this (or than fold_lines lines) are folded
    "fold_lines": 6,
    "text_chars": 20_000,    # at most this much of one text is put on the page
    "entries_embedded": 150,  # entries of a run page inside the fleet report (first and last)
}
"""Folding and caps of the transcript. Each cut says what it cut."""

def text_html(text: Any) -> str:
    """Run text as HTML text or attribute content: :func:`visible`, then escaped (``&<>"'``).

    >>> text_html('<img src=x onerror="a()">\\u202e')
    '&lt;img src=x onerror=&quot;a()&quot;&gt;⟦U+202E⟧'
    """
    if text is None:
        return ""
    return _html.escape(visible(str(text)), quote=True)


@dataclass
class Entry:
    """One entry of the transcript.

    Attributes:
        kind: ``turn``, ``system``, ``user``, ``context``, ``model``, ``reply``, ``tool``,
            ``approval``, ``verification``, ``marker``, ``quarantine`` or ``event``.
        title: one line (allowlisted values only: types, names, codes, numbers).
        line_no: the physical line of its first event (None: a session.json message).
        sequences: the sequences of every event folded into the entry.
        event_types: their types, in order.
        seconds: seconds since the run started (its first event).
        fields: ``(label, value)`` facts; values may be run text (escaped when rendered).
        texts: ``(label, text)`` long texts, folded when long.
        status: ``ok``, ``error``, ``warn`` or ``""`` (the colour of the entry).
    """

    kind: str
    title: str
    line_no: int | None = None
    order: float = 0.0
    sequences: list[int] = field(default_factory=list)
    event_types: list[str] = field(default_factory=list)
    seconds: float | None = None
    fields: list[tuple[str, Any]] = field(default_factory=list)
    texts: list[tuple[str, str]] = field(default_factory=list)
    status: str = ""


# --------------------------------------------------------------------------- building
def _rows_by(df: pl.DataFrame | None, key: str) -> dict[int, dict[str, Any]]:
    """``{key value: row}`` (the first row of each value)."""
    if df is None or df.height == 0 or key not in df.columns:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for row in df.filter(pl.col(key).is_not_null()).iter_rows(named=True):
        out.setdefault(int(row[key]), row)
    return out


def _num(v: Any, fmt: str = ",") -> str:
    if v is None:
        return "–"
    try:
        return format(v, fmt)
    except (TypeError, ValueError):
        return str(v)


def _secs(v: Any) -> str:
    return "–" if v is None else f"{float(v):,.2f} s"


def _data(row: Mapping[str, Any]) -> dict[str, Any]:
    raw = row.get("data")
    if not isinstance(raw, str):
        return {}
    try:
        d = json.loads(raw)
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def _s(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _one(tables: Mapping[str, pl.DataFrame | None], name: str,
         run_dir: str | None) -> pl.DataFrame | None:
    df = tables.get(name)
    if df is None or run_dir is None or "run_dir" not in df.columns:
        return df
    return df.filter(pl.col("run_dir") == run_dir)


def transcript_entries(tables: Mapping[str, pl.DataFrame | None], run_dir: str | None = None,
                       *, redact: bool = False) -> list[Entry]:
    """The transcript of one run as :class:`Entry` objects in log order.

    Args:
        tables: the run's tables (or a fleet's, with ``run_dir``): ``events``, ``messages``,
            ``model_calls``, ``tool_calls``, ``approvals``, ``verifications``, ``quarantine``
            (a missing table only leaves its facts out).
        run_dir: the run, when ``tables`` hold several.
        redact: keep ids, types, tool names, effects, decisions, codes and numbers; no text.
    """
    if run_dir is None:
        runs = tables.get("runs")
        if runs is not None and runs.height:
            run_dir = runs["run_dir"][0]
    ev = _one(tables, "events", run_dir)
    msgs = _one(tables, "messages", run_dir)
    mc = _one(tables, "model_calls", run_dir)
    tc = _one(tables, "tool_calls", run_dir)
    ap = _one(tables, "approvals", run_dir)
    vf = _one(tables, "verifications", run_dir)
    q = _one(tables, "quarantine", run_dir)

    events = (ev.sort("line_no").iter_rows(named=True)
              if ev is not None and ev.height and "line_no" in ev.columns else iter(()))
    events = list(events)
    t0 = next((r["created_at"] for r in events if r.get("created_at") is not None), None)
    runs = tables.get("runs")
    if runs is not None and "started_at" in runs.columns:
        r = runs.filter(pl.col("run_dir") == run_dir) if run_dir else runs
        if r.height and r["started_at"][0] is not None:
            t0 = r["started_at"][0]

    msg_by_line: dict[int, dict[str, Any]] = {}
    if msgs is not None and msgs.height and "line_no" in msgs.columns:
        msg_by_line = _rows_by(msgs.filter(pl.col("source") == "events"), "line_no")
    mc_done = _rows_by(mc, "completed_sequence")
    tc_key = "requested_line_no" if tc is not None and "requested_line_no" in tc.columns \
        else "requested_sequence"
    tc_req = _rows_by(tc, tc_key)
    tc_done = _rows_by(tc, "completed_sequence")
    ap_key = "requested_line_no" if ap is not None and "requested_line_no" in ap.columns \
        else "requested_sequence"
    ap_req = _rows_by(ap, ap_key)
    ap_closed = _rows_by(ap, "closed_sequence")
    vf_start = _rows_by(vf, "started_sequence")
    vf_done = _rows_by(vf, "completed_sequence")

    def key_of(row: Mapping[str, Any], line_key: str) -> Any:
        return row["line_no"] if line_key.endswith("line_no") else row["sequence"]

    out: list[Entry] = []
    open_tool: dict[str, Entry] = {}     # tool_call_id -> its latest requested occurrence
    open_check: dict[str, Entry] = {}    # verification name -> its latest open check
    step_entry: Entry | None = None
    turn = 1
    text_ok = not redact

    def add_text(entry: Entry, label: str, text: Any) -> None:
        if text_ok and isinstance(text, str) and text != "":
            entry.texts.append((label, text))

    def at(row: Mapping[str, Any]) -> float | None:
        c = row.get("created_at")
        if c is None or t0 is None:
            return None
        return (c - t0).total_seconds()

    def new(kind: str, title: str, row: Mapping[str, Any], status: str = "") -> Entry:
        e = Entry(kind, title, line_no=row.get("line_no"), order=float(row.get("line_no") or 0),
                  seconds=at(row), status=status)
        fold(e, row)
        out.append(e)
        return e

    def fold(e: Entry, row: Mapping[str, Any]) -> None:
        if row.get("sequence") is not None:
            e.sequences.append(int(row["sequence"]))
        e.event_types.append(str(row.get("event_type")))

    out.append(Entry("turn", "Turn 1", order=-1.0))
    prev_seconds: float | None = None
    for i, row in enumerate(events):
        prev_seconds = at(events[i - 1]) if i else None
        et = str(row.get("event_type") or "")
        seq = row.get("sequence")
        d = _data(row)
        msg = msg_by_line.get(row.get("line_no") or -1, {})
        if et == "model.requested":
            step = d.get("step")
            step_entry = new("model", f"Model step {_num(step)}", row)
            continue
        if et in ("model.retry", "model.fallback", "model.cache_trace", "thinking.classified",
                  "thinking.healed", "model.completed", "model.failed") and step_entry is not None:
            e = step_entry
            fold(e, row)
            if et == "model.retry":
                e.fields.append(("retry", f"attempt {_num(d.get('attempt'))}, waited "
                                 f"{_secs(d.get('delay_seconds'))}"))
                if text_ok:
                    e.fields.append(("retry error", _s(d.get("error"))))
            elif et == "model.fallback" and text_ok:
                e.fields.append(("fallback", f"{d.get('from_model')} → {d.get('to_model')}"))
            elif et == "thinking.healed":
                add_text(e, "reasoning (thinking.healed)", msg.get("content"))
            elif et == "model.completed":
                m = mc_done.get(int(seq)) if seq is not None else None
                m = m or {}
                calls = msg.get("tool_calls") or m.get("tool_calls") or []
                e.title = (f"Model step {_num(m.get('step') or d.get('step'))}: "
                           + (f"asks for {', '.join(calls)}" if calls else "answers"))
                e.fields += [("finish reason", m.get("finish_reason") or _s(d.get("finish_reason"))),
                             ("tokens", f"{_num(m.get('input_tokens') or msg.get('input_tokens'))} in"
                              f" · {_num(m.get('output_tokens') or msg.get('output_tokens'))} out"
                              f" · {_num(m.get('total_tokens') or msg.get('total_tokens'))} total"),
                             ("duration", _secs(m.get("duration_seconds")))]
                if m.get("retries"):
                    e.fields.append(("retries", _num(m.get("retries"))))
                if text_ok and m.get("model"):
                    e.fields.append(("model", m.get("model")))
                content = msg.get("content")
                if text_ok:
                    if isinstance(content, str) and content:
                        e.texts.append(("reply", content))
                    else:
                        e.fields.append(("reply text", "(none: tool calls only)"))
                e.status = "ok"
            elif et == "model.failed":
                m = mc_done.get(int(seq)) if seq is not None else None
                e.title += f": failed ({m.get('failure_kind') if m else _s(d.get('kind'))})"
                e.status = "error"
                if text_ok:
                    e.fields.append(("error", _s(d.get("error"))))
            continue
        if et == "tool.requested":
            r = tc_req.get(int(key_of(row, tc_key))) if key_of(row, tc_key) is not None else None
            tcid = _s(d.get("tool_call_id"))
            if r is not None and r.get("tool_call_id") != tcid:
                r = None  # not this occurrence's row
            r = r or {}
            # the event's own name, effect and id; the row (this occurrence's) for the rest
            e = new("tool", f"Tool call {_s(d.get('name')) or r.get('name')}", row)
            e.fields += [("effect", _s(d.get("effect")) or r.get("effect")),
                         ("tool call id", tcid), ("step", _num(r.get("step")))]
            if r.get("arguments_bytes") is not None:
                e.fields.append(("arguments size", f"{_num(r.get('arguments_bytes'))} bytes"
                                 + (" (omitted by the runner)" if r.get("arguments_omitted")
                                    else "")))
            args = r.get("arguments")
            if args is None and "arguments" in d:  # no row of this occurrence
                args = json.dumps(d["arguments"], ensure_ascii=False, separators=(",", ":"))
            add_text(e, "arguments", args)
            if tcid:
                open_tool[tcid] = e
            continue
        if et in ("tool.started", "tool.completed"):
            tcid = _s(d.get("tool_call_id"))
            e = open_tool.get(tcid) if tcid else None
            if et == "tool.started":
                if e is None:
                    e = new("tool", f"Tool call {_s(d.get('name'))} started", row)
                else:
                    fold(e, row)
                continue
            r = tc_done.get(int(seq)) if seq is not None else None
            if r is not None and tcid and r.get("tool_call_id") != tcid:
                r = None
            r = r or {}
            if e is None:  # an unknown tool or a guard trip: no tool.requested
                e = new("tool", f"Tool call {r.get('name') or _s(d.get('name'))}", row)
                e.fields.append(("tool call id", tcid))
            else:
                fold(e, row)
                open_tool.pop(tcid or "", None)
            outcome = r.get("outcome") or ("ok" if d.get("ok") is True else "error")
            e.title += f" → {outcome}"
            e.status = "ok" if outcome == "ok" else "error"
            e.fields += [("outcome", outcome), ("duration", _secs(r.get("duration_seconds")))]
            if r.get("result_bytes") is not None:
                e.fields.append(("result size", f"{_num(r.get('result_bytes'))} bytes"
                                 + (" (clipped by the runner)" if r.get("result_clipped")
                                    else "")))
            if text_ok:
                err = msg.get("error") or r.get("error") or _s(d.get("error"))
                if err:
                    e.fields.append(("error", err))
                add_text(e, "result preview", msg.get("content")
                         if msg else _s(d.get("preview")))
                ver = d.get("verification")
                if isinstance(ver, dict):
                    add_text(e, f"verification output ({_s(ver.get('name')) or 'check'})",
                             _s(ver.get("output")))
            continue
        if et.startswith("approval."):
            aid = _s(d.get("action_id")) or ""
            if et in ("approval.requested", "approval.reused"):
                r = (ap_req.get(int(key_of(row, ap_key))) if et == "approval.requested"
                     else ap_closed.get(int(seq)) if seq is not None else None) or {}
                if r.get("action_id") not in (None, aid):
                    r = {}  # not this occurrence's row
                target = open_tool.get(aid)
                if target is None and aid.startswith("verification:"):
                    name = aid.split(":", 1)[1]
                    target = new("verification", "Final verification"
                                 + (f" {name}" if text_ok else ""), row)
                    open_check[name] = target
                elif target is None:
                    target = new("approval", f"Approval for {r.get('effect') or d.get('effect')}",
                                 row)
                else:
                    fold(target, row)
                decision = r.get("decision")
                wait = r.get("wait_seconds")
                target.fields.append((
                    "approval", f"{et.split('.')[1]} · {r.get('reason') or _s(d.get('reason'))}"
                    f" · decision {decision or r.get('outcome') or 'pending'}"
                    + (f" · waited {_secs(wait)}" if wait else "")))
                if decision in ("deny", "cancel"):
                    target.status = "warn"
                if text_ok:
                    if r.get("policy_reason") or d.get("policy_reason"):
                        target.fields.append(("policy", r.get("policy_reason")
                                              or _s(d.get("policy_reason"))))
                    add_text(target, "approval preview", _s(d.get("preview")))
                continue
            target = open_tool.get(aid) or open_check.get(aid.split(":", 1)[-1])
            if target is None:
                target = new("approval", f"Approval {et.split('.')[1]}", row)
                target.fields.append(("action id", aid))
            else:
                fold(target, row)
            if et == "approval.resolved":  # the decision, when no row of this request had it
                dec = _s(d.get("decision"))
                for k, (label, value) in enumerate(target.fields):
                    if label == "approval" and isinstance(value, str) and "decision pending" \
                            in value and dec:
                        target.fields[k] = (label, value.replace("decision pending",
                                                                 f"decision {dec}"))
                if dec in ("deny", "cancel"):
                    target.status = "warn"
            if et == "approval.abandoned":
                target.fields.append(("approval", "abandoned (process interrupted before the "
                                                  "decision)"))
                target.status = "warn"
            continue
        if et.startswith("verification."):
            name = _s(d.get("name")) or ""
            r = (vf_start.get(int(seq)) if et == "verification.started"
                 else vf_done.get(int(seq))) if seq is not None else None
            r = r or {}
            e = open_check.get(name)
            if e is None:
                e = new("verification", "Final verification" + (f" {name}" if text_ok else "")
                        + (" (reused)" if et == "verification.reused" else ""), row)
                open_check[name] = e
            else:
                fold(e, row)
            if et == "verification.started":
                if text_ok and r.get("argv"):
                    e.fields.append(("command", " ".join(r["argv"])))
                continue
            outcome = r.get("outcome")
            e.title += f" → {outcome}"
            e.status = "ok" if outcome in ("passed", "reused") else "error"
            e.fields += [("outcome", outcome), ("exit code", _num(r.get("exit_code"))),
                         ("duration", _secs(r.get("duration_seconds")))]
            if text_ok:
                if et == "verification.reused" and r.get("argv"):
                    e.fields.append(("command", " ".join(r["argv"])))
                if d.get("error"):
                    e.fields.append(("error", _s(d.get("error"))))
                e.fields.append(("output", "not in the log (result.json keeps it; a failed "
                                           "check's output is sent back as a user message)"))
            open_check.pop(name, None)
            continue
        if et in ("session.resumed", "session.continued", "run.forked", "run.created"):
            if et == "session.continued":
                turn += 1
                out.append(Entry("turn", f"Turn {turn}", order=float(row.get("line_no") or 0)
                                 - 0.5, seconds=at(row)))
            what = {"session.resumed": "Resumed (looplane resume)",
                    "session.continued": "Continued: a new user turn",
                    "run.forked": "Forked from another run",
                    "run.created": "Run created"}[et]
            e = new("marker", what, row)
            if et in ("session.resumed", "session.continued"):
                e.fields.append(("resumed at step", _num(d.get("resumed_step"))))
                if prev_seconds is not None and e.seconds is not None:
                    e.fields.append(("gap since the previous event",
                                     _secs(e.seconds - prev_seconds)))
            if et == "run.forked":
                e.fields += [("fork point", f"sequence {_num(d.get('fork_point_sequence'))} "
                                            f"({_s(d.get('fork_point_event_type'))})"),
                             ("events included", _num(d.get("events_included")))]
                if text_ok:
                    e.fields.append(("source run", _s(d.get("source_run_id"))))
            if text_ok and et != "run.forked" and d.get("model"):
                e.fields.append(("model", f"{_s(d.get('provider'))} / {_s(d.get('model'))}"))
            continue
        if et in ("run.completed", "run.failed", "run.cancelled"):
            e = new("marker", f"{et}: {_s(d.get('terminal_reason'))}", row,
                    status="ok" if et == "run.completed" else "error")
            files = d.get("changed_files")
            if isinstance(files, list):
                e.fields.append(("changed files", _num(len(files))))
                if text_ok and files:
                    e.fields.append(("files", ", ".join(str(f) for f in files[:20])))
            continue
        if et == "run.error":
            e = new("marker", "run.error" + (f": {_s(d.get('error_type'))}" if text_ok else ""),
                    row, status="error")
            if text_ok:
                e.fields.append(("error", _s(d.get("error"))))
            continue
        if et in ("loop.wind_down_completed", "role_lane.completed", "message"):
            who = {"loop.wind_down_completed": "Wind-down summary (no tools)",
                   "role_lane.completed": f"Reviewer reply ({msg.get('role') or 'reviewer'})",
                   "message": "Message"}[et]
            e = new("reply", who, row, status="ok")
            if msg.get("total_tokens") is not None:
                e.fields.append(("tokens", _num(msg.get("total_tokens"))))
            add_text(e, "reply", msg.get("content") if msg else _s(row.get("text")))
            continue
        # any other event: its type, and its data when text may be shown
        e = new("event", et, row, status="error" if et.endswith(("failed", "denied"))
                else "")
        if d:
            nums = {k: v for k, v in d.items() if isinstance(v, int | float)
                    and not isinstance(v, bool)}
            if nums:
                e.fields.append(("numbers", ", ".join(f"{k} {_num(v)}" for k, v in nums.items())))
            if text_ok:
                rest = {k: v for k, v in d.items() if k not in nums}
                if rest:
                    add_text(e, "data", json.dumps(rest, ensure_ascii=False, separators=(", ", ": ")))
    # quarantined lines, where they fall
    if q is not None and q.height:
        for row in q.sort("line_no").iter_rows(named=True):
            e = Entry("quarantine", f"Quarantined line {_num(row.get('line_no'))}: "
                      f"{row.get('reason')}", line_no=row.get("line_no"),
                      order=float(row.get("line_no") or 0), status="error")
            e.fields += [("byte offset", _num(row.get("byte_offset"))),
                         ("length", f"{_num(row.get('byte_length'))} bytes")]
            if text_ok:
                e.fields.append(("message", row.get("message")))
                raw = row.get("raw")
                if raw is not None:
                    add_text(e, "raw start", bytes(raw[:2000]).decode("utf-8", "backslashreplace"))
            out.append(e)
    out += _conversation(msgs, events, redact=redact)
    out.sort(key=lambda e: e.order)
    return out


def _conversation(msgs: pl.DataFrame | None, events: Sequence[Mapping[str, Any]], *,
                  redact: bool) -> list[Entry]:
    """The system, user and injected-context messages of ``session.json``, each placed just
    before the model step that first saw it.

    The manifest's conversation holds no sequence: its k-th assistant message is the log's
    k-th model reply (``model.completed`` or ``loop.wind_down_completed``), so a message
    after k assistant messages goes right before the step of reply k+1. When the counts
    differ (history compaction, a manifest behind its log) only the messages before the first
    reply are placed (before the first step); the others are listed at the end, saying so.
    """
    if msgs is None or msgs.height == 0 or "source" not in msgs.columns:
        return []
    conv = msgs.filter(pl.col("source") == "session.json").sort("position")
    if conv.height == 0:
        return []
    replies = [r for r in events if r.get("event_type") in ("model.completed",
                                                             "loop.wind_down_completed")]
    requested = [r.get("line_no") or 0 for r in events
                 if r.get("event_type") == "model.requested"]

    def step_line(reply_line: int) -> float:
        before = [ln for ln in requested if ln < reply_line]
        return float(before[-1] if before else reply_line)

    last_line = float(max((r.get("line_no") or 0 for r in events), default=0))
    n_assistant = conv.filter(pl.col("role") == "assistant").height
    aligned = n_assistant == len(replies)
    first_step = float(requested[0]) if requested else (
        float(replies[0].get("line_no") or 0) if replies else 1e12)
    out = []
    seen_assistant = 0
    for row in conv.iter_rows(named=True):
        role, item = row.get("role"), row.get("item")
        if role == "assistant":
            seen_assistant += 1
            continue
        if item == "tool_observation":
            continue  # the log's tool.completed carries the result (the entry of its call)
        kind = "context" if item == "injected_context" else (role or "message")
        title = {"system": "System prompt", "user": "User message",
                 "context": f"Injected context ({row.get('context_source') or 'unknown'})"
                 }.get(kind, f"Message ({role})")
        if seen_assistant == 0:
            order = first_step - 0.6 + (row.get("position") or 0) * 1e-4
        elif aligned and seen_assistant < len(replies):
            order = step_line(int(replies[seen_assistant].get("line_no") or 0)) - 0.4 \
                + (row.get("position") or 0) * 1e-4
        elif aligned:  # after the last reply: after the last event
            order = last_line + 0.5 + (row.get("position") or 0) * 1e-4
        else:
            order = 2e12 + (row.get("position") or 0)
            title += " (place in the log unknown: the manifest's conversation and the log " \
                     "have different numbers of replies)"
        e = Entry(kind, title, order=order)
        e.fields.append(("session.json position", _num(row.get("position"))))
        if not redact and isinstance(row.get("content"), str):
            e.texts.append(("text", row["content"]))
        out.append(e)
    return out


# --------------------------------------------------------------------------- html
_KIND_LABEL = {"turn": "turn", "system": "system", "user": "user", "context": "context",
               "model": "model", "reply": "reply", "tool": "tool", "approval": "approval",
               "verification": "check", "marker": "run", "quarantine": "quarantine",
               "event": "event"}



def _fold(label: str, text: str, *, fold_chars: int, fold_lines: int, max_chars: int) -> str:
    n = len(text)
    lines = text.count("\n") + 1
    shown = text[:max_chars]
    cut = (f"\n… {n - max_chars:,} more characters not shown (messages_df and the tables "
           "have the whole text)" if n > max_chars else "")
    size = f"{n:,} chars" + (f", {lines:,} lines" if lines > 1 else "")
    if n <= fold_chars and lines <= fold_lines:
        return (f'<div class="tx-lab">{text_html(label)} · {size}</div>'
                f'<pre class="tx-p">{text_html(shown)}</pre>')
    head = shown[:160].split("\n", 1)[0]
    return (f'<details class="tx-x"><summary>{text_html(label)} · {size} · '
            f'<span class="tx-note">{text_html(head)}…</span></summary>'
            f'<pre>{text_html(shown)}{text_html(cut)}</pre></details>')


def _entry_html(e: Entry, i: int, key: str, total_s: float | None, chart: str | None) -> str:
    if e.kind == "turn":
        return f'<div class="tx-turn" id="{key}-tx-{i}">{text_html(e.title)}</div>'
    seqs = " ".join(str(s) for s in e.sequences)
    pos = []
    if e.sequences:
        pos.append("seq " + (f"{e.sequences[0]}" if len(e.sequences) == 1
                             else f"{e.sequences[0]}–{e.sequences[-1]}"))
    if e.line_no is not None:
        pos.append(f"line {e.line_no:,}")
    bar = ""
    if e.seconds is not None:
        pos.append(f"t+{e.seconds:,.1f} s")
        if total_s:
            pct = max(0.0, min(100.0, 100.0 * e.seconds / total_s))
            target = f' data-chart="{text_html(chart)}"' if chart else ""
            bar = (f'<span class="tx-bar" title="place on the timeline: t+{e.seconds:,.1f} s of '
                   f'{total_s:,.1f} s"{target}><i style="left:{pct:.1f}%"></i></span>')
    label = _KIND_LABEL.get(e.kind, e.kind)
    status = f" tx-{e.status}" if e.status else ""
    fields = "".join(f"<div><dt>{text_html(k)}</dt><dd>{text_html(v)}</dd></div>"
                     for k, v in e.fields if v is not None)
    texts = "".join(_fold(lab, txt, fold_chars=TRANSCRIPT_CAPS["fold_chars"],
                          fold_lines=TRANSCRIPT_CAPS["fold_lines"],
                          max_chars=TRANSCRIPT_CAPS["text_chars"]) for lab, txt in e.texts)
    types = text_html(" ".join(e.event_types))
    return (f'<article class="tx-e{status}" id="{key}-tx-{i}" data-seqs="{seqs}"'
            f' data-types="{types}"><div class="tx-h"><span class="tx-k k-{label}">'
            f'{label}</span><span class="tx-t">{text_html(e.title)}</span>'
            f'<span class="tx-pos">{" · ".join(pos)} {bar}</span></div>'
            + (f'<dl class="tx-f">{fields}</dl>' if fields else "") + texts + "</article>")


def transcript_html(entries: Sequence[Entry], *, key: str = "run", cap: int | None = None,
                    chart: str | None = None, interactive: bool = True) -> str:
    """The transcript as HTML (no script: folds are ``<details>``). ``cap`` keeps the first
    and last ``cap // 2`` entries and says how many were left out; ``chart`` is the element id
    of the run's timeline (the position bars point there); ``interactive``: a filter box (the
    page's script runs it; a notebook has none)."""
    secs = [e.seconds for e in entries if e.seconds is not None]
    total = max(secs) if secs else None
    shown: list[tuple[int, Entry]] = list(enumerate(entries))
    note = ""
    if cap is not None and len(shown) > cap:
        half = cap // 2
        cut = len(shown) - 2 * half
        note = (f'<p class="tx-note" id="{key}-tx-cut">{cut:,} of {len(shown):,} entries not '
                f"shown here (cap): the run's own page "
                "(<code>rivumi-analysis report RUN_DIR</code>) shows them all.</p>")
        shown = shown[:half] + [(-1, Entry("turn", ""))] + shown[-half:]
    parts = []
    for i, e in shown:
        parts.append(note if i == -1 else _entry_html(e, i, key, total, chart))
    kinds: dict[str, int] = {}
    for e in entries:
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
    summary = ", ".join(f"{n:,} {_KIND_LABEL.get(k, k)}" for k, n in kinds.items()
                        if k != "turn")
    return (f'<div class="tx" id="{key}-transcript"><p class="tx-note">{len(entries):,} '
            f"entries: {summary}. Long texts are folded (click to open); each entry shows its "
            "sequences, line and time, and its place on the run's timeline.</p>"
            + (f'<input class="filter tx-filter" data-list="{key}-txl" '
               'placeholder="filter entries (any text: tool, error, reply…)">'
               if interactive else "")
            + f'<div class="tx-list" id="{key}-txl">{"".join(parts)}</div></div>')


# --------------------------------------------------------------------------- text
def render_text(entries: Sequence[Entry], *, width: int = 100, max_text: int = 400) -> str:
    """The transcript as plain text (what ``show_run`` prints outside a notebook): one
    header line per entry, its facts indented, long texts clipped with their length.

    >>> print(render_text([Entry("tool", "Tool call read_file", line_no=5, sequences=[4],
    ...                          fields=[("effect", "read")], texts=[("arguments", "x" * 9)])]))
    [seq 4 · line 5] TOOL  Tool call read_file
        effect: read
        arguments (9 chars): xxxxxxxxx
    """
    lines = []
    for e in entries:
        if e.kind == "turn":
            lines.append(f"== {visible(e.title)} ==")
            continue
        pos = []
        if e.sequences:
            pos.append(f"seq {e.sequences[0]}" + (f"–{e.sequences[-1]}"
                                                  if len(e.sequences) > 1 else ""))
        if e.line_no is not None:
            pos.append(f"line {e.line_no}")
        if e.seconds is not None:
            pos.append(f"t+{e.seconds:.1f}s")
        lines.append(f"[{' · '.join(pos)}] {_KIND_LABEL.get(e.kind, e.kind).upper():<5} "
                     f"{visible(e.title)}")
        for k, v in e.fields:
            if v is not None:
                lines.append(f"    {k}: {visible(str(v))}"[:width])
        for lab, txt in e.texts:
            one = visible(txt).replace("\n", " ⏎ ")
            more = f" … (+{len(one) - max_text:,} chars)" if len(one) > max_text else ""
            lines.append(f"    {lab} ({len(txt):,} chars): {one[:max_text]}{more}")
    return "\n".join(lines)
