"""``model_calls_df``: one row per model step: usage, finish reason, retries and fallbacks, duration."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ..read.snapshot import RunData
from ._common import _int, _seconds, _str, frame, load_columnar, usage_columns

WANTS = (frozenset({"run.created", "session.resumed", "session.continued", "model.requested",
                   "model.retry", "model.fallback", "model.completed", "model.failed"}), ())
"""The event types this table reads (names, prefixes): the columnar loader builds no other."""


def model_calls_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from ..schemas import ModelCallsSchema

    return frame(model_calls_rows(runs), ModelCallsSchema)


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


def model_calls_df(source: Any = None, *, strict: bool = False,
                   max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per model step: usage, finish reason, retries and fallbacks, duration.

    Args:
        source: a run directory, a folder of runs, or a list of either; ``None`` uses the
            default run root (``$RIVUMI_RUN_ROOT``, ``$LOOPLANE_RUN_ROOT``, ...). A fleet read
            once with :func:`rivumi_analysis.load_fleet` is accepted too, so several tables
            share one read.
        strict: raise :class:`~rivumi_analysis.errors.QuarantineError` (carrying the
            quarantine table) if and only if at least one line was quarantined.
        max_depth: how many folder levels to descend looking for runs.

    Returns:
        An eager polars DataFrame validated by :class:`rivumi_analysis.schemas.ModelCallsSchema`.

    Raises:
        SourceError: a missing source, a regular file, or no default run root.

    >>> df = model_calls_df("tests/fixtures/example")
    >>> int(df["total_tokens"].sum())
    7583
    """
    return load_columnar(source, strict=strict, max_depth=max_depth, rows=model_calls_rows,
                         model=_model(), wants=WANTS)


def _model() -> Any:
    from ..schemas import ModelCallsSchema

    return ModelCallsSchema
