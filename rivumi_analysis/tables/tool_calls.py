"""``tool_calls_df``: one row per tool call in the log (by occurrence: ids may repeat), requested → started → completed: effect, outcome, error and duration."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ..read.occurrences import Occurrences
from ..read.snapshot import RunData
from ._common import (
    Builders,
    _bool,
    _int,
    _seconds,
    _str,
    clipped_size,
    derived_frame,
    frame,
    load_columnar,
    preview,
    raw_value,
    wanted_lines,
)

WANTS = (frozenset({"model.requested", "session.resumed", "session.continued"}), ("tool.",))
"""The event types this table reads (names, prefixes); its builders read no other."""

_STEP_BOUNDARIES = frozenset({"model.requested", "session.resumed", "session.continued"})
"""No tool call stays open past these: a call belongs to the model step that asked for it."""


def tool_calls_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    return frame(tool_calls_rows(runs), "ToolCallsSchema")


def tool_calls_rows(runs: Iterable[RunData]) -> list[dict[str, Any]]:
    """The rows of ``runs`` (no polars: safe in a forked worker); events of other types than
    :data:`WANTS` are never read. One row per call occurrence: a ``tool.requested`` opens
    one (whatever its id), ``tool.started``/``tool.completed`` join the most recent open call
    of their id in the same model step, or open their own row (an unknown tool's completion;
    a start whose request is not in the log) (:class:`~rivumi_analysis.read.occurrences.Occurrences`)."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        calls = Occurrences()
        step = None
        batch_ids: set[str] = set()
        first = len(rows)
        for e in run.events:
            d = e.data
            et = e.event_type
            if et in _STEP_BOUNDARIES:
                calls.forget_open()
                if et == "model.requested":
                    step = _int(d.get("step"))
                continue
            if et == "tool.batch_started":
                ids = d.get("tool_call_ids")
                batch_ids |= {i for i in ids if isinstance(i, str)} if isinstance(ids, list) else set()
                continue
            if not et.startswith("tool.") or not isinstance(d.get("tool_call_id"), str):
                continue
            tcid = d["tool_call_id"]
            row = None
            if et == "tool.started":
                row = calls.latest(tcid)
                if row is not None and row["started_sequence"] is not None:
                    row = None  # started twice: the second start is a call of its own
            elif et == "tool.completed":
                row = calls.close(tcid)
            if row is None and et in ("tool.requested", "tool.started", "tool.completed"):
                row = {
                    "run_dir": run.run_dir, "run_id": run.run_id, "line_no": e.line_no,
                    "tool_call_id": tcid, "name": _str(d.get("name")),
                    "effect": _str(d.get("effect")), "step": step,
                    "requested_sequence": None, "started_sequence": None,
                    "completed_sequence": None, "requested_line_no": None,
                    "started_line_no": None, "completed_line_no": None, "requested_at": None,
                    "started_at": None, "completed_at": None, "ok": None, "error": None,
                    "arguments_omitted": False, "arguments": None, "arguments_preview": None,
                    "arguments_bytes": None, "result_bytes": None, "result_clipped": None,
                }
                rows.append(row)
                calls.open(tcid, row)
                if et == "tool.completed":
                    calls.close(tcid)
            if row is None:
                continue
            if row["effect"] is None:
                row["effect"] = _str(d.get("effect"))
            if et == "tool.requested":
                row["requested_sequence"], row["requested_at"] = e.sequence, e.created_at
                row["requested_line_no"] = e.line_no
                args = d.get("arguments")
                row["arguments_omitted"] = isinstance(args, dict) and args.get("omitted") is True
                text = raw_value(e.data_json, "arguments", args)
                row["arguments"], row["arguments_preview"] = text, preview(text)
                if row["arguments_omitted"]:
                    row["arguments_bytes"] = _int(args.get("utf8_bytes"))
                elif text is not None:
                    row["arguments_bytes"] = len(text.encode("utf-8", "surrogatepass"))
            elif et == "tool.started":
                row["started_sequence"], row["started_at"] = e.sequence, e.created_at
                row["started_line_no"] = e.line_no
            elif et == "tool.completed":
                row["completed_sequence"], row["completed_at"] = e.sequence, e.created_at
                row["completed_line_no"] = e.line_no
                row["ok"], row["error"] = _bool(d.get("ok")), _str(d.get("error"))
                row["result_bytes"], row["result_clipped"] = clipped_size(_str(d.get("preview")))
                if row["result_bytes"] is None:
                    row["result_clipped"] = None
        for row in rows[first:]:
            row["executed"] = row["started_sequence"] is not None
            row["in_batch"] = row["tool_call_id"] in batch_ids
            row["duration_seconds"] = _seconds(row["started_at"], row["completed_at"])
            row["outcome"] = _tool_outcome(row)
    return rows


def tool_calls_table(runs: Sequence[RunData]) -> pl.DataFrame:
    """The table of ``runs``: clean logs handed over as columns (``fast``, the store's chunk)
    by :func:`_fast_rows`, every other run by :func:`tool_calls_rows` (the oracle)."""
    return derived_frame(runs, BUILDERS, _model())


_COLUMNS = ("run_dir", "run_id", "line_no", "tool_call_id", "name", "effect", "step",
            "requested_sequence", "started_sequence", "completed_sequence", "requested_line_no",
            "started_line_no", "completed_line_no", "requested_at", "started_at",
            "completed_at", "executed", "ok", "error", "outcome", "in_batch",
            "arguments_omitted", "arguments", "arguments_preview", "arguments_bytes",
            "result_bytes", "result_clipped", "duration_seconds")
(_TCID, _EFFECT, _REQ_SEQ, _START_SEQ, _DONE_SEQ, _REQ_LINE, _START_LINE, _DONE_LINE, _REQ_AT,
 _START_AT, _DONE_AT, _EXECUTED, _OK, _ERROR, _OUTCOME, _IN_BATCH, _OMITTED, _ARGS,
 _ARGS_PREVIEW, _ARGS_BYTES, _RESULT_BYTES, _RESULT_CLIPPED) = map(_COLUMNS.index, (
    "tool_call_id", "effect", "requested_sequence", "started_sequence", "completed_sequence",
    "requested_line_no", "started_line_no", "completed_line_no", "requested_at",
    "started_at", "completed_at", "executed", "ok", "error", "outcome", "in_batch",
    "arguments_omitted", "arguments", "arguments_preview", "arguments_bytes", "result_bytes",
    "result_clipped"))


def _fast_rows(runs: list[RunData]) -> list[list[Any]]:
    """:func:`tool_calls_rows` of clean logs, from their columns (``fast``: envelopes and
    parsed ``data``), as positional rows: no ``Event``, no row dict; only the events of
    :data:`WANTS` are visited (``wanted_lines``). ``arguments`` is the re-encoded value: a
    clean log's ``data`` re-encodes to the line's exact bytes. (Values of parsed JSON are
    of exact types: ``type(v) is str`` is ``_str``'s ``isinstance``.) A clean log's line
    ``j`` (0-based) is its physical line ``j + 1``."""
    from msgspec.json import encode

    rows: list[list[Any]] = []
    for run in runs:
        dec = run.fast
        envelopes, objects = dec.envelopes, dec.objects
        run_dir, run_id = run.run_dir, run.run_id
        calls = Occurrences()
        step = None
        batch_ids: set[str] = set()
        first = len(rows)
        for j in wanted_lines(dec, WANTS):
            e = envelopes[j]
            et = e.event_type
            d = objects[j]
            if et in _STEP_BOUNDARIES:
                calls.forget_open()
                if et == "model.requested":
                    step = d.get("step")
                    if type(step) is not int:
                        step = None
                continue
            if et == "tool.batch_started":
                ids = d.get("tool_call_ids")
                if type(ids) is list:
                    batch_ids.update(i for i in ids if type(i) is str)
                continue
            tcid = d.get("tool_call_id")
            if type(tcid) is not str:
                continue
            row = None
            if et == "tool.started":
                row = calls.latest(tcid)
                if row is not None and row[_START_SEQ] is not None:
                    row = None
            elif et == "tool.completed":
                row = calls.close(tcid)
            if row is None:
                if et not in ("tool.requested", "tool.started", "tool.completed"):
                    continue
                name, effect = d.get("name"), d.get("effect")
                row = [run_dir, run_id, j + 1, tcid, name if type(name) is str else None,
                       effect if type(effect) is str else None, step, None, None, None, None,
                       None, None, None, None, None, None, None, None, None, None, False,
                       None, None, None, None, None, None]
                rows.append(row)
                calls.open(tcid, row)
                if et == "tool.completed":
                    calls.close(tcid)
            elif row[_EFFECT] is None:
                effect = d.get("effect")
                if type(effect) is str:
                    row[_EFFECT] = effect
            if et == "tool.requested":
                row[_REQ_SEQ], row[_REQ_AT], row[_REQ_LINE] = e.sequence, e.created_at, j + 1
                args = d.get("arguments")
                omitted = type(args) is dict and args.get("omitted") is True
                row[_OMITTED] = omitted
                if "arguments" in d:
                    raw = encode(args)
                    text = raw.decode()
                    row[_ARGS], row[_ARGS_PREVIEW] = text, preview(text)
                else:
                    raw = None
                    row[_ARGS] = row[_ARGS_PREVIEW] = None
                if omitted:
                    row[_ARGS_BYTES] = _int(args.get("utf8_bytes"))
                elif raw is not None:
                    row[_ARGS_BYTES] = len(raw)
            elif et == "tool.started":
                row[_START_SEQ], row[_START_AT], row[_START_LINE] = e.sequence, e.created_at, j + 1
            elif et == "tool.completed":
                row[_DONE_SEQ], row[_DONE_AT], row[_DONE_LINE] = e.sequence, e.created_at, j + 1
                ok, error = d.get("ok"), d.get("error")
                row[_OK] = ok if type(ok) is bool else None
                row[_ERROR] = error if type(error) is str else None
                result = d.get("preview")
                if type(result) is str:
                    row[_RESULT_BYTES], row[_RESULT_CLIPPED] = clipped_size(result)
                else:
                    row[_RESULT_BYTES] = row[_RESULT_CLIPPED] = None
        for row in rows[first:]:
            executed = row[_EXECUTED] = row[_START_SEQ] is not None
            row[_IN_BATCH] = row[_TCID] in batch_ids
            if row[_DONE_SEQ] is None:
                row[_OUTCOME] = "in_flight" if executed else "not_started"
            elif executed:
                row[_OUTCOME] = "ok" if row[_OK] else "error"
            else:
                err = row[_ERROR] or ""
                row[_OUTCOME] = ("unknown_tool" if err.startswith("Unknown tool") else
                                 "denied" if "denied" in err else "not_executed")
    return rows


BUILDERS = Builders(
    _fast_rows,
    tool_calls_rows,
    _COLUMNS,
    times=("requested_at", "started_at", "completed_at"),
    seconds=(("duration_seconds", "started_at", "completed_at"),))
"""How the loader and the store build this table (``tables._common.Builders``)."""


def _tool_outcome(row: dict[str, Any]) -> str:
    err = row["error"] or ""
    if row["completed_sequence"] is None:
        return "in_flight" if row["executed"] else "not_started"
    if row["executed"]:
        return "ok" if row["ok"] else "error"
    if err.startswith("Unknown tool"):
        return "unknown_tool"
    if "denied" in err:
        return "denied"
    return "not_executed"


def tool_calls_df(source: Any = None, *, strict: bool = False,
                  max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per tool call in the log (by occurrence: ids may repeat), requested → started → completed: effect, outcome, error and duration.

    A call is keyed by ``(run_dir, line_no)``, the line that opened it: a ``tool_call_id``
    can repeat (providers reuse ids across the turns of a continued session), so the started
    and completed events join the most recent open call of their id in the same model step,
    and a reused id is the run warning ``duplicate_tool_call_id``.

    The in-memory loader behind the public one (``store/loaders.py``, which documents
    ``source``, ``strict`` and ``max_depth``); validated by
    :class:`~rivumi_analysis.schemas.ToolCallsSchema`.

    >>> df = tool_calls_df("tests/fixtures/example")
    >>> df["outcome"].value_counts().sort("outcome").rows()
    [('error', 2), ('ok', 4)]
    """
    return load_columnar(source, strict=strict, max_depth=max_depth, model=_model(),
                         builders=BUILDERS)


def _model() -> Any:
    return "ToolCallsSchema"  # by name: pandera only for a failing frame
