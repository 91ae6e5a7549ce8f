"""``model_calls_df``: one row per model step: usage, finish reason, retries and fallbacks, duration."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ..read.snapshot import RunData
from ._common import (
    Builders,
    _int,
    _seconds,
    _str,
    derived_frame,
    frame,
    load_columnar,
    usage_columns,
    usage_values,
    wanted_lines,
)

WANTS = (frozenset({"run.created", "session.resumed", "session.continued", "model.requested",
                   "model.retry", "model.fallback", "model.completed", "model.failed"}), ())
"""The event types this table reads (names, prefixes); its builders read no other."""


def model_calls_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    return frame(model_calls_rows(runs), "ModelCallsSchema")


def model_calls_rows(runs: Iterable[RunData]) -> list[dict[str, Any]]:
    """The rows of ``runs`` (no polars: safe in a forked worker); events of other types than
    :data:`WANTS` are never read."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        current: dict[str, Any] | None = None
        first = len(rows)
        provider = model = None
        for e in run.events:
            d = e.data
            if e.event_type in ("run.created", "session.resumed", "session.continued"):
                provider, model = _str(d.get("provider")), _str(d.get("model"))
                continue
            if e.event_type == "model.requested":
                current = {
                    "run_dir": run.run_dir, "run_id": run.run_id, "step": _int(d.get("step")),
                    "requested_sequence": e.sequence, "requested_line_no": e.line_no,
                    "requested_at": e.created_at,
                    "completed_sequence": None, "completed_at": None, "outcome": "incomplete",
                    "finish_reason": None, "tool_calls": [], "retries": 0, "fallbacks": 0,
                    "failure_kind": None, "provider": provider, "model": model,
                    "requested_provider": provider, "requested_model": model,
                    **usage_columns(None),
                }
                rows.append(current)
            elif current is None:
                continue
            elif e.event_type == "model.retry":
                current["retries"] += 1
            elif e.event_type == "model.fallback":
                current["fallbacks"] += 1
                # the next candidate serves the rest of this call; the next step starts again
                # from the run's model (its model_usage records say so)
                current["provider"] = _str(d.get("to_provider"))
                current["model"] = _str(d.get("to_model"))
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
    return rows


def model_calls_table(runs: Sequence[RunData]) -> pl.DataFrame:
    """The table of ``runs``: clean logs handed over as columns (``fast``, the store's chunk)
    by :func:`_fast_rows`, every other run by :func:`model_calls_rows` (the oracle)."""
    return derived_frame(runs, BUILDERS, _model())


_COLUMNS = ("run_dir", "run_id", "step", "requested_sequence", "requested_line_no",
            "completed_sequence", "requested_at", "completed_at", "duration_seconds", "outcome",
            "finish_reason", "tool_calls", "retries", "fallbacks", "provider", "model",
            "requested_provider", "requested_model", "failure_kind", "input_tokens",
            "output_tokens", "cached_input_tokens", "reasoning_tokens", "provider_total_tokens",
            "total_tokens")
(_DONE_SEQ, _DONE_AT, _OUTCOME, _FINISH, _TOOL_CALLS, _RETRIES, _FALLBACKS, _PROVIDER, _MODEL,
 _FAILURE, _TOKENS) = map(_COLUMNS.index, (
    "completed_sequence", "completed_at", "outcome", "finish_reason", "tool_calls", "retries",
    "fallbacks", "provider", "model", "failure_kind", "input_tokens"))
_SETTINGS = frozenset({"run.created", "session.resumed", "session.continued"})


def _fast_rows(runs: list[RunData]) -> list[list[Any]]:
    """:func:`model_calls_rows` of clean logs, from their columns (``fast``: envelopes and
    parsed ``data``), as positional rows: no ``Event``, no row dict; only the events of
    :data:`WANTS` are visited (``wanted_lines``)."""
    rows: list[list[Any]] = []
    for run in runs:
        dec = run.fast
        envelopes, objects = dec.envelopes, dec.objects
        run_dir, run_id = run.run_dir, run.run_id
        current: list[Any] | None = None
        provider = model = None
        for j in wanted_lines(dec, WANTS):
            e = envelopes[j]
            et = e.event_type
            if et == "model.requested":
                step = objects[j].get("step")
                current = [run_dir, run_id, step if type(step) is int else None, e.sequence,
                           j + 1, None, e.created_at, None, None, "incomplete", None, [], 0, 0,
                           provider, model, provider, model, None, None, None, None, None, None,
                           None]
                rows.append(current)
            elif et in _SETTINGS:
                d = objects[j]
                provider, model = _str(d.get("provider")), _str(d.get("model"))
            elif current is None:
                continue
            elif et == "model.retry":
                current[_RETRIES] += 1
            elif et == "model.fallback":
                d = objects[j]
                current[_FALLBACKS] += 1
                current[_PROVIDER] = _str(d.get("to_provider"))
                current[_MODEL] = _str(d.get("to_model"))
            elif current[_DONE_SEQ] is None:  # model.completed or model.failed
                d = objects[j]
                current[_DONE_SEQ], current[_DONE_AT] = e.sequence, e.created_at
                if et == "model.completed":
                    current[_OUTCOME] = "completed"
                    current[_FINISH] = _str(d.get("finish_reason"))
                    tc = d.get("tool_calls")
                    current[_TOOL_CALLS] = [t for t in tc if type(t) is str] if type(
                        tc) is list else []
                    current[_TOKENS:] = usage_values(d.get("usage"))
                else:
                    current[_OUTCOME] = "failed"
                    current[_FAILURE] = _str(d.get("kind"))
    return rows


BUILDERS = Builders(
    _fast_rows,
    model_calls_rows,
    _COLUMNS,
    times=("requested_at", "completed_at"),
    lists=("tool_calls",),
    seconds=(("duration_seconds", "requested_at", "completed_at"),))
"""How the loader and the store build this table (``tables._common.Builders``)."""


def model_calls_df(source: Any = None, *, strict: bool = False,
                   max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per model step: usage, finish reason, retries and fallbacks, duration.

    The in-memory loader behind the public one (``store/loaders.py``, which documents
    ``source``, ``strict`` and ``max_depth``); validated by
    :class:`~rivumi_analysis.schemas.ModelCallsSchema`.

    >>> df = model_calls_df("tests/fixtures/example")
    >>> int(df["total_tokens"].sum())
    7583
    """
    return load_columnar(source, strict=strict, max_depth=max_depth, model=_model(),
                         builders=BUILDERS)


def _model() -> Any:
    return "ModelCallsSchema"  # by name: pandera only for a failing frame
