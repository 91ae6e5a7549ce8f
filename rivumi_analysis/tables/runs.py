"""``runs_df``: one row per run: the audit record (verdict, reasons, warnings, line accounting) plus manifest, request-limit and result fields."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ..read.snapshot import RunData
from ._common import (
    Columns,
    _bool,
    _float,
    _int,
    _str,
    frame,
    instruction_summary,
    load_rows,
    polars_schema,
    row_columns,
    usage_columns,
)
from .facts import run_facts, unread_facts


def runs_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    """The runs table of ``runs`` (read in full), validated."""
    return runs_table(row_columns(runs_rows(runs), polars_schema("RunsSchema")))


def runs_chunk_frame(runs: Iterable[RunData], *, events: pl.DataFrame) -> pl.DataFrame:
    """The store's chunk builder of ``runs`` (registry): :func:`runs_frame` with
    ``started_at``/``ended_at`` = the first and last ``created_at`` of each run's rows in the
    chunk's ``events`` (what ``runs_frame`` takes from the run's events, which a clean
    reading does not build)."""
    times = events.group_by("run_dir").agg(pl.col("created_at").min().alias("_s"),
                                           pl.col("created_at").max().alias("_e"))
    return (runs_frame(runs).join(times, on="run_dir", how="left", maintain_order="left")
            .with_columns(started_at=pl.col("_s"), ended_at=pl.col("_e"))
            .drop("_s", "_e"))


def runs_table(columns: Columns) -> pl.DataFrame:
    """The validated frame of the columns of :func:`runs_rows`, sorted by ``run_dir``
    (stable: runs of one ``run_dir`` keep their order)."""
    run_dirs = columns["run_dir"]
    order = sorted(range(len(run_dirs)), key=run_dirs.__getitem__)
    return frame({name: list(map(values.__getitem__, order))
                  for name, values in columns.items()}, "RunsSchema")


def runs_rows(runs: Iterable[RunData]) -> list[dict[str, Any]]:
    """One row per run in run order: its audit record (an error record when the audit
    raises), its run facts (:func:`rivumi_analysis.tables.facts.run_facts`: outcome, steps,
    tokens, provider, model, times, each with its source) and manifest, request-limit and
    result fields (no polars: safe in a forked worker)."""
    from ..audit import error_record, record_from_run
    from ..read.discovery import RunLocation
    rows = []
    for run in runs:
        try:
            rec = record_from_run(run)
        except Exception as exc:  # same contract as the audit: one run never stops the rest
            rec = error_record(RunLocation(run.run_dir, run.is_subagent, run.parent_run_dir), exc)
        try:
            facts = run_facts(run)
        except Exception:  # a toolkit bug on this run: no fact rather than no row
            facts = unread_facts("internal_error")
            facts["outcome_source"] = "toolkit error"
        disagreements = facts.pop("fact_disagreements")
        if disagreements and "fact_disagrees" not in rec["warnings"]:
            rec["warnings"] = sorted([*rec["warnings"], "fact_disagrees"])
        m = run.manifest or {}
        usage = usage_columns(m.get("usage")) if m else dict.fromkeys(
            ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens",
             "provider_total_tokens", "total_tokens"))
        del usage["total_tokens"]  # the run fact (log first) is in ``facts``
        req = run.request if isinstance(run.request, dict) else {}
        limits = (run.request or {}).get("limits") if isinstance(run.request, dict) else None
        limits = limits if isinstance(limits, dict) else {}
        result = run.result if isinstance(run.result, dict) else {}
        rec.update(
            run_path=run.run_path,
            task_id=_str(m.get("task_id")), terminal=_bool(m.get("terminal")),
            repeat_count=_int(m.get("repeat_count")),
            last_action_fingerprint=_str(m.get("last_action_fingerprint")),
            active_wall_time_seconds=_float(m.get("active_wall_time_seconds")),
            max_steps=_int(limits.get("max_steps")),
            wall_time_seconds=_float(limits.get("wall_time_seconds")),
            max_total_tokens=_int(limits.get("max_total_tokens")),
            repository=_str(req.get("repository")), base_sha=_str(req.get("base_sha")),
            instruction_summary=instruction_summary(req.get("instruction")),
            result_status=_str(result.get("status")),
            result_terminal_reason=_str(result.get("terminal_reason")),
            **usage,
            **facts,
        )
        rows.append(rec)
    return rows


def skipped_rows(skipped: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per folder discovery could not list (skip reason ``unreadable``): a run
    that cannot be read is a row with its reason, never left out (issue 29).

    >>> from rivumi_analysis.read.discovery import Skipped
    >>> [(r["verdict"], r["reasons"], r["outcome"]) for r in skipped_rows(
    ...     [Skipped("/r/a", "unreadable"), Skipped("/r/l", "symlink")])]
    [('error', ['unreadable'], 'unreadable')]
    """
    import os

    from ..audit import RECORD_FIELDS, SCHEMA_VERSION
    rows = []
    for s in skipped:
        if s.reason != "unreadable":
            continue
        rec: dict[str, Any] = dict.fromkeys(RECORD_FIELDS)
        rec.update(schema_version=SCHEMA_VERSION, run_dir=s.path, verdict="error",
                   reasons=["unreadable"], warnings=[],
                   message=f"{s.path}: the folder could not be listed (permissions or I/O "
                           "error); hint: check its permissions",
                   lines=0, blank_lines=0, events=0, quarantined_lines=0,
                   run_path=os.path.basename(os.path.normpath(s.path)),
                   **unread_facts("unreadable"))
        del rec["fact_disagreements"]
        rows.append(rec)
    return rows


def runs_df(source: Any = None, *, strict: bool = False,
            max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per run: the audit record (verdict, reasons, warnings, line accounting) plus manifest, request-limit and result fields.

    The in-memory loader behind the public one (``store/loaders.py``, which documents
    ``source``, ``strict`` and ``max_depth``); validated by
    :class:`~rivumi_analysis.schemas.RunsSchema`.

    >>> df = runs_df("tests/fixtures/example")
    >>> df["verdict"].to_list()
    ['terminal']
    """
    return load_rows(source, strict=strict, max_depth=max_depth, rows=runs_rows,
                     model="RunsSchema", table=runs_table, skipped_rows=skipped_rows)
