"""Private engine shared by the ``*_df`` loaders: RunData snapshots -> validated DataFrames."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

import pandera.polars as pa
import polars as pl

from ._discovery import Source
from ._snapshot import Event, RunData, gc_paused, stream_runs
from .errors import QuarantineError, SchemaValidationError

RAW_KEEP_BYTES = 4096
EVENT_CHUNK_ROWS = 50_000


def polars_schema(model: type[pa.DataFrameModel]) -> dict[str, pl.DataType]:
    """The polars schema (column -> dtype) a pandera model declares, in declaration order."""
    return {name: col.dtype.type for name, col in model.to_schema().columns.items()}


def frame(rows: list[dict[str, Any]] | dict[str, list[Any]],
          model: type[pa.DataFrameModel]) -> pl.DataFrame:
    """Build a DataFrame with exactly the model's columns and validate it eagerly."""
    # polars takes both shapes (dict rows or a dict of columns) with the same call
    return validate(pl.DataFrame(rows, schema=polars_schema(model), strict=False), model)


def validate(df: pl.DataFrame, model: type[pa.DataFrameModel]) -> pl.DataFrame:
    try:
        return model.validate(df, lazy=True)
    except (pa.errors.SchemaErrors, pa.errors.SchemaError) as exc:
        raise SchemaValidationError(
            f"{model.__name__} validation failed: {str(exc)[:2000]}",
            hint="this is a toolkit bug if the frame came from a loader; please report it",
        ) from exc


def load(source: Source | None, *, strict: bool, max_depth: int,
         builder: Callable[[Iterable[RunData]], pl.DataFrame]) -> pl.DataFrame:
    """The one loader flow: discover, read, build the table, check strictness.

    Runs are read one at a time and dropped once their rows are built, so memory follows
    the table, not the parsed fleet; the quarantined runs are kept for a strict error.
    """
    quarantined: list[RunData] = []

    def runs() -> Iterator[RunData]:
        for run in stream_runs(source, max_depth=max_depth):
            if run.quarantined:
                quarantined.append(run)
            yield run

    with gc_paused():
        table = builder(runs())
    check_strict(quarantined, strict)
    return table


def check_strict(runs: list[RunData], strict: bool) -> None:
    """Raise :class:`QuarantineError` when ``strict`` and any line was quarantined."""
    if strict and any(run.quarantined for run in runs):
        raise QuarantineError(quarantine_frame(runs))


# --- helpers ---------------------------------------------------------------------------------

def _int(v: Any) -> int | None:
    return v if type(v) is int else None


def _float(v: Any) -> float | None:
    if type(v) is bool:
        return None
    return float(v) if isinstance(v, (int, float)) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def parse_ts(v: Any) -> datetime | None:
    from ._decode import parse_created_at

    return parse_created_at(v)[0] if isinstance(v, str) else None


def _seconds(a: datetime | None, b: datetime | None) -> float | None:
    if a is None or b is None:
        return None
    return (b - a).total_seconds()


def usage_columns(u: Any) -> dict[str, int | None]:
    u = u if isinstance(u, dict) else {}
    out = {k: _int(u.get(k)) for k in (
        "input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens",
        "provider_total_tokens")}
    tt = _int(u.get("total_tokens"))
    if tt is None and u:
        ptt = out["provider_total_tokens"]
        tt = ptt if ptt is not None else (out["input_tokens"] or 0) + (out["output_tokens"] or 0)
    out["total_tokens"] = tt
    return out


# --- quarantine ------------------------------------------------------------------------------

def quarantine_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from .schemas import QuarantineSchema

    rows = []
    for run in runs:
        path = f"{run.run_dir}/events.jsonl"
        for ln in run.lines:
            if ln.status != "quarantined":
                continue
            rows.append({
                "run_dir": run.run_dir, "run_id": run.run_id, "file": path,
                "line_no": ln.line_no, "byte_offset": ln.byte_offset,
                "byte_length": ln.byte_length, "reason": ln.reason,
                "message": f"{path}:{ln.line_no}:{ln.byte_offset}: {ln.message}",
                "raw": ln.raw[:RAW_KEEP_BYTES], "raw_truncated": len(ln.raw) > RAW_KEEP_BYTES,
                "sha256": hashlib.sha256(ln.raw).hexdigest(),
            })
    return frame(rows, QuarantineSchema)


# --- events ----------------------------------------------------------------------------------

def events_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from .schemas import EventsSchema

    schema = polars_schema(EventsSchema)
    cols: dict[str, list[Any]] = {k: [] for k in schema}
    chunks: list[pl.DataFrame] = []
    for run in runs:
        if len(cols["line_no"]) >= EVENT_CHUNK_ROWS:
            # hand a chunk to Arrow and free its Python objects: peak memory stays near the
            # size of the finished table instead of twice it
            chunks.append(pl.DataFrame(cols, schema=schema, strict=False))
            cols = {k: [] for k in schema}
        events = run.events
        n = len(events)
        if not n:
            continue
        # one comprehension per column and run: far cheaper than appending cell by cell
        cols["run_dir"] += [run.run_dir] * n
        cols["run_id"] += [run.run_id] * n
        cols["kind"] += [run.kind] * n
        cols["line_no"] += [e.line_no for e in events]
        cols["byte_offset"] += [e.byte_offset for e in events]
        cols["byte_length"] += [e.byte_length for e in events]
        cols["sequence"] += [e.sequence for e in events]
        cols["event_type"] += [e.event_type for e in events]
        cols["event_run_id"] += [e.run_id if isinstance(e.run_id, str) else None
                                 for e in events]
        cols["task_id"] += [e.task_id if isinstance(e.task_id, str) else None for e in events]
        cols["event_id"] += [e.event_id if isinstance(e.event_id, str) else None
                             for e in events]
        cols["created_at"] += [e.created_at for e in events]
        cols["text"] += [e.text for e in events]
        cols["data"] += [e.data_json for e in events]
        cols["warnings"] += [list(e.warnings) for e in events]
    chunks.append(pl.DataFrame(cols, schema=schema, strict=False))
    return validate(pl.concat(chunks, rechunk=False) if len(chunks) > 1 else chunks[0],
                    EventsSchema)


# --- runs ------------------------------------------------------------------------------------

def runs_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from ._discovery import RunLocation
    from .audit import error_record, record_from_run
    from .schemas import RunsSchema

    rows = []
    for run in runs:
        try:
            rec = record_from_run(run)
        except Exception as exc:  # same contract as the audit: one run never stops the rest
            rec = error_record(RunLocation(run.run_dir, run.is_subagent, run.parent_run_dir), exc)
        m = run.manifest or {}
        usage = usage_columns(m.get("usage")) if m else dict.fromkeys(
            ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens",
             "provider_total_tokens", "total_tokens"))
        limits = (run.request or {}).get("limits") if isinstance(run.request, dict) else None
        limits = limits if isinstance(limits, dict) else {}
        result = run.result if isinstance(run.result, dict) else {}
        times = [e.created_at for e in run.events if e.created_at is not None]
        rec.update(
            task_id=_str(m.get("task_id")), terminal=_bool(m.get("terminal")),
            step=_int(m.get("step")), repeat_count=_int(m.get("repeat_count")),
            last_action_fingerprint=_str(m.get("last_action_fingerprint")),
            provider_name=_str(m.get("provider_name")), model_id=_str(m.get("model_id")),
            active_wall_time_seconds=_float(m.get("active_wall_time_seconds")),
            started_at=min(times) if times else None, ended_at=max(times) if times else None,
            max_steps=_int(limits.get("max_steps")),
            wall_time_seconds=_float(limits.get("wall_time_seconds")),
            max_total_tokens=_int(limits.get("max_total_tokens")),
            result_status=_str(result.get("status")),
            result_terminal_reason=_str(result.get("terminal_reason")),
            **usage,
        )
        rows.append(rec)
    rows.sort(key=lambda r: r["run_dir"])
    return frame(rows, RunsSchema)


# --- manifests -------------------------------------------------------------------------------

def manifests_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from pydantic import ValidationError

    from ._models import SessionManifest, first_error
    from .schemas import ManifestsSchema

    rows = []
    for run in runs:
        m = run.manifest
        if m is None:
            continue
        try:
            SessionManifest.model_validate(m)
            valid, err = True, None
        except ValidationError as exc:
            valid, err = False, first_error(exc)
        pending = m.get("pending_action") if isinstance(m.get("pending_action"), dict) else {}
        ver = m.get("verification")
        ver_ok = (all(isinstance(v, dict) and v.get("ok") is True for v in ver)
                  if isinstance(ver, list) and ver else None)
        usage = usage_columns(m.get("usage"))
        usage.pop("total_tokens")
        ge = m.get("granted_effects")
        rows.append({
            "run_dir": run.run_dir, "run_id": run.run_id, "schema_valid": valid,
            "schema_error": err,
            **{k: _str(m.get(k)) for k in ("task_id", "provider_name", "model_id", "protocol",
                                           "prompt_version", "base_sha", "phase",
                                           "last_action_fingerprint", "active_writer_token")},
            "terminal": _bool(m.get("terminal")), "step": _int(m.get("step")),
            "repeat_count": _int(m.get("repeat_count")),
            "last_event_sequence": _int(m.get("last_event_sequence")),
            **usage,
            "active_wall_time_seconds": _float(m.get("active_wall_time_seconds")),
            "active_started_at": parse_ts(m.get("active_started_at")),
            "updated_at": parse_ts(m.get("updated_at")),
            "message_count": len(m["messages"]) if isinstance(m.get("messages"), list) else None,
            "model_usage_count": len(m["model_usage"]) if isinstance(
                m.get("model_usage"), list) else None,
            "approval_history_count": len(m["approval_history"]) if isinstance(
                m.get("approval_history"), list) else None,
            "granted_effects": sorted(x for x in ge if isinstance(x, str)) if isinstance(
                ge, list) else [],
            "pending_request_id": _str(pending.get("request_id")),
            "pending_action_id": _str(pending.get("action_id")),
            "verification_ok": ver_ok,
        })
    return frame(rows, ManifestsSchema)


# --- event-derived tables --------------------------------------------------------------------

def tool_calls_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from .schemas import ToolCallsSchema

    rows = []
    for run in runs:
        calls: dict[str, dict[str, Any]] = {}
        step = None
        batch_ids: set[str] = set()
        for e in run.events:
            d = e.data
            if e.event_type == "model.requested":
                step = _int(d.get("step"))
                continue
            if e.event_type == "tool.batch_started":
                ids = d.get("tool_call_ids")
                batch_ids |= {i for i in ids if isinstance(i, str)} if isinstance(ids, list) else set()
                continue
            if not e.event_type.startswith("tool.") or not isinstance(d.get("tool_call_id"), str):
                continue
            tcid = d["tool_call_id"]
            row = calls.get(tcid)
            if row is None:
                row = calls[tcid] = {
                    "run_dir": run.run_dir, "run_id": run.run_id, "tool_call_id": tcid,
                    "name": _str(d.get("name")), "effect": _str(d.get("effect")), "step": step,
                    "requested_sequence": None, "started_sequence": None,
                    "completed_sequence": None, "requested_at": None, "started_at": None,
                    "completed_at": None, "ok": None, "error": None, "arguments_omitted": False,
                }
            if row["effect"] is None:
                row["effect"] = _str(d.get("effect"))
            if e.event_type == "tool.requested":
                row["requested_sequence"], row["requested_at"] = e.sequence, e.created_at
                args = d.get("arguments")
                row["arguments_omitted"] = isinstance(args, dict) and args.get("omitted") is True
            elif e.event_type == "tool.started":
                row["started_sequence"], row["started_at"] = e.sequence, e.created_at
            elif e.event_type == "tool.completed":
                row["completed_sequence"], row["completed_at"] = e.sequence, e.created_at
                row["ok"], row["error"] = _bool(d.get("ok")), _str(d.get("error"))
        for row in calls.values():
            row["executed"] = row["started_sequence"] is not None
            row["in_batch"] = row["tool_call_id"] in batch_ids
            row["duration_seconds"] = _seconds(row["started_at"], row["completed_at"])
            row["outcome"] = _tool_outcome(row)
            rows.append(row)
    return frame(rows, ToolCallsSchema)


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


def approvals_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from .schemas import ApprovalsSchema

    rows = []
    for run in runs:
        reqs: dict[str, dict[str, Any]] = {}
        for e in run.events:
            if not e.event_type.startswith("approval."):
                continue
            d = e.data
            rid = d.get("request_id")
            if not isinstance(rid, str):
                continue
            row = reqs.get(rid)
            if row is None:
                row = reqs[rid] = {
                    "run_dir": run.run_dir, "run_id": run.run_id, "request_id": rid,
                    "action_id": _str(d.get("action_id")), "effect": _str(d.get("effect")),
                    "reason": _str(d.get("reason")), "policy_reason": _str(d.get("policy_reason")),
                    "outcome": "open", "decision": None, "requested_sequence": None,
                    "closed_sequence": None, "requested_at": None, "closed_at": None,
                }
            if e.event_type == "approval.requested":
                row["requested_sequence"], row["requested_at"] = e.sequence, e.created_at
            elif e.event_type in ("approval.resolved", "approval.reused", "approval.abandoned"):
                row["outcome"] = e.event_type.split(".", 1)[1]
                row["closed_sequence"], row["closed_at"] = e.sequence, e.created_at
                row["decision"] = (_str(d.get("decision")) if e.event_type == "approval.resolved"
                                   else "allow_once" if e.event_type == "approval.reused" else None)
                if row["policy_reason"] is None:
                    row["policy_reason"] = _str(d.get("policy_reason"))
        for row in reqs.values():
            row["wait_seconds"] = _seconds(row["requested_at"], row["closed_at"])
            rows.append(row)
    return frame(rows, ApprovalsSchema)


def model_calls_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from .schemas import ModelCallsSchema

    rows = []
    for run in runs:
        current: dict[str, Any] | None = None
        first = len(rows)
        for e in run.events:
            d = e.data
            if e.event_type == "model.requested":
                current = {
                    "run_dir": run.run_dir, "run_id": run.run_id, "step": _int(d.get("step")),
                    "requested_sequence": e.sequence, "requested_at": e.created_at,
                    "completed_sequence": None, "completed_at": None, "outcome": "incomplete",
                    "finish_reason": None, "tool_calls": [], "retries": 0, "fallbacks": 0,
                    "failure_kind": None, **usage_columns(None),
                }
                rows.append(current)
            elif current is None:
                continue
            elif e.event_type == "model.retry":
                current["retries"] += 1
            elif e.event_type == "model.fallback":
                current["fallbacks"] += 1
            elif e.event_type in ("model.completed", "model.failed") and (
                    current["completed_sequence"] is None):
                current["completed_sequence"], current["completed_at"] = e.sequence, e.created_at
                if e.event_type == "model.completed":
                    current["outcome"] = "completed"
                    current["finish_reason"] = _str(d.get("finish_reason"))
                    tc = d.get("tool_calls")
                    current["tool_calls"] = [t for t in tc if isinstance(t, str)] if isinstance(
                        tc, list) else []
                    current.update(usage_columns(d.get("usage")))
                else:
                    current["outcome"] = "failed"
                    current["failure_kind"] = _str(d.get("kind"))
        for row in rows[first:]:  # this run's rows only: linear in the fleet
            row["duration_seconds"] = _seconds(row["requested_at"], row["completed_at"])
    return frame(rows, ModelCallsSchema)


def usage_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from .schemas import UsageSchema

    rows = []
    for run in runs:
        m = run.manifest or {}
        records = m.get("model_usage")
        if isinstance(records, list) and records:
            for i, r in enumerate(records):
                if not isinstance(r, dict):
                    continue
                rows.append(_usage_row(run, i, "manifest.model_usage", _str(r.get("lane")) or "?",
                                       _str(r.get("provider")), _str(r.get("model")),
                                       r.get("usage"), r.get("cost")))
            continue
        provider = model = None
        index = 0  # this run's row count (was a scan of every earlier row: quadratic)
        for e in run.events:
            if e.event_type in ("run.created", "session.resumed", "session.continued"):
                provider, model = _str(e.data.get("provider")), _str(e.data.get("model"))
            elif e.event_type == "model.fallback":
                provider, model = _str(e.data.get("to_provider")), _str(e.data.get("to_model"))
            elif e.event_type == "model.completed":
                rows.append(_usage_row(run, index, "events", "primary", provider, model,
                                       e.data.get("usage"), None))
                index += 1
            elif e.event_type == "role_lane.completed":
                rows.append(_usage_row(run, index, "events", "reviewer",
                                       _str(e.data.get("provider")), _str(e.data.get("model")),
                                       e.data.get("usage"), e.data.get("cost")))
                index += 1
    return frame(rows, UsageSchema)


def _usage_row(run: RunData, i: int, source: str, lane: str, provider: str | None,
               model: str | None, usage: Any, cost: Any) -> dict[str, Any]:
    u = usage_columns(usage if isinstance(usage, dict) else {})
    for k in ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens"):
        u[k] = u[k] or 0
    if u["total_tokens"] is None:
        u["total_tokens"] = u["input_tokens"] + u["output_tokens"]
    cost = cost if isinstance(cost, dict) else {}
    costs = {k: _float(cost.get(k)) for k in ("input_cost", "cached_input_cost", "output_cost")}
    total_cost = _float(cost.get("total_cost"))
    if total_cost is None and cost and all(v is not None for v in costs.values()):
        total_cost = sum(v for v in costs.values() if v is not None)
    return {"run_dir": run.run_dir, "run_id": run.run_id, "index": i, "source": source,
            "lane": lane, "provider": provider, "model": model, **u,
            "currency": _str(cost.get("currency")), "cost_source": _str(cost.get("source")),
            **costs, "total_cost": total_cost}


def verifications_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from .schemas import VerificationsSchema

    rows = []
    for run in runs:
        open_checks: dict[str, dict[str, Any]] = {}
        for e in run.events:
            d = e.data
            et = e.event_type
            if et not in ("verification.started", "verification.completed",
                          "verification.reused"):
                continue
            name = _str(d.get("name"))
            argv = d.get("argv")
            argv = [a for a in argv if isinstance(a, str)] if isinstance(argv, list) else []
            if et == "verification.reused":
                rows.append(_ver_row(run, name, argv, "reused", None, e, True,
                                     _int(d.get("exit_code")), None))
            elif et == "verification.started":
                row = _ver_row(run, name, argv, "in_flight", e, None, None, None, None)
                open_checks[name or ""] = row
                rows.append(row)
            else:
                row = open_checks.pop(name or "", None)
                ok = _bool(d.get("ok"))
                outcome = ("denied" if d.get("error") == "approval denied"
                           else "passed" if ok else "failed")
                if row is None:
                    row = _ver_row(run, name, argv, outcome, None, e, ok,
                                   _int(d.get("exit_code")), _float(d.get("duration_seconds")))
                    rows.append(row)
                else:
                    row.update(outcome=outcome, completed_sequence=e.sequence,
                               completed_at=e.created_at, ok=ok, exit_code=_int(d.get("exit_code")),
                               duration_seconds=_float(d.get("duration_seconds")))
                    if argv and not row["argv"]:
                        row["argv"] = argv
    return frame(rows, VerificationsSchema)


def _ver_row(run: RunData, name: str | None, argv: list[str], outcome: str, started: Event | None,
             completed: Event | None, ok: bool | None, exit_code: int | None,
             duration: float | None) -> dict[str, Any]:
    return {"run_dir": run.run_dir, "run_id": run.run_id, "name": name, "argv": argv,
            "outcome": outcome,
            "started_sequence": started.sequence if started else None,
            "completed_sequence": completed.sequence if completed else None,
            "started_at": started.created_at if started else None,
            "completed_at": completed.created_at if completed else None,
            "ok": ok, "exit_code": exit_code, "duration_seconds": duration}

