"""Export the toolkit's tables as a Parquet dataset that polars, DuckDB and Spark all read.

Layout (Hive-style, partitioned by table and run kind, never by run id)::

    OUT/_dataset.json                          schema version, tables, columns, row counts
    OUT/<table>/kind=<kind>/part-0.parquet     one file per (table, kind)

This is the store's layout, written by the same writer (``store.build.write_parts``; the
store has more parts per folder, ``part-<key>.parquet``). Tables: every table of the registry
marked ``exported`` (:data:`TABLES`: the run tables, not the relayflowd ones). ``kind``
is ``native|fork|subagent|external`` (``unknown`` for a
run the toolkit failed on); a table with no rows gets one empty file under ``kind=none`` so
its schema is still readable. Column types are limited to what all three engines read:
Int64, Float64, Boolean, String, Binary, Timestamp(microseconds, UTC) and lists of those (no
unsigned integers, durations, categoricals or null-typed columns).

``redact=True`` keeps only the allowlist of the privacy rule (issue 5 §8.1): run ids, event
types, sequences, timestamps, numbers, codes, tool names, effects and decisions, and
``run_dir`` relative to the given PATH; content, previews, arguments, messages, error texts,
quarantine raw bytes and absolute paths are dropped.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from typing import Any

from ._version import __version__
from .errors import SourceError
from .read.discovery import DEFAULT_MAX_DEPTH, Source, normalize_sources
from .store.build import SCHEMA_VERSION, portable, with_kind, write_parts
from .tables.registry import names

__all__ = ["SCHEMA_VERSION", "TABLES", "ExportError", "check_tables", "export", "portable",
           "redact"]

TABLES = names(exported=True)
"""The exported tables (the registry's, in its order)."""
MARKER = "_dataset.json"

# String columns kept under --redact (codes, ids of runs, tool names, effects, decisions).
# Numbers, booleans and timestamps are always kept; every other string/binary column is dropped.
REDACT_KEEP_STRINGS = frozenset({
    "run_id", "event_run_id", "kind", "verdict", "reasons", "warnings", "phase",
    "terminal_reason", "result_status", "result_terminal_reason", "event_type", "reason",
    "effect", "decision", "outcome", "name", "tool_calls", "finish_reason",
    "failure_kind", "source", "lane", "currency", "cost_source", "rejected",
    "runner_generation", "row_kind", "field", "last_safe_before", "item", "role",
    # where each run fact came from (tables.facts): file names and codes
    "outcome_source", "terminal_reason_source", "step_source", "tokens_source",
    "provider_source", "wall_time_source", "times_source",
})
REDACT_RELATIVE = frozenset({"run_dir", "parent_run_dir", "file"})
# Columns named like codes but holding free text in some table.
REDACT_DROP = {"approvals": frozenset({"policy_reason"})}


def build_tables(runs: list[Any]) -> dict[str, Any]:
    """Every exported table (polars DataFrames), built from one list of ``RunData`` snapshots:
    the store's tables (``store.build.build_frames``, ``messages`` included)."""
    from .store.build import build_frames

    tables = build_frames(runs)
    return {t: tables[t] for t in TABLES}


def redact(table: str, df: Any, tops: list[str]) -> Any:
    """Keep only the allowlisted columns; ``run_dir`` becomes relative to its PATH."""
    import polars as pl

    keep = []
    drop = REDACT_DROP.get(table, frozenset())
    for name, dt in df.schema.items():
        if name in drop:
            continue
        if name in REDACT_RELATIVE:
            mapping = {p: _relative(p, tops)
                       for p in df.get_column(name).unique().to_list() if p is not None}
            keep.append(pl.col(name).replace_strict(mapping, default=None,
                                                    return_dtype=pl.String).alias(name))
        elif dt.is_numeric() or dt == pl.Boolean or isinstance(dt, (pl.Datetime, pl.Date)):
            keep.append(pl.col(name))
        elif name in REDACT_KEEP_STRINGS and (dt == pl.String or dt == pl.List(pl.String)):
            keep.append(pl.col(name))
    return df.select(keep)


def _relative(path: str | None, tops: list[str]) -> str | None:
    from .read.discovery import relative_run_dir

    if path is None:
        return None
    for i, top in enumerate(tops):
        top = os.path.realpath(top)  # run_dir starts with the resolved source (discovery)
        norm = os.path.normpath(top)
        if path == top or path.startswith(top.rstrip(os.sep) + os.sep) or path == norm:
            rel = relative_run_dir(path, top)
            if len(tops) > 1:
                rel = f"{i}/{rel}"
            return rel
    return os.path.basename(path.rstrip(os.sep))


def _kinds_of(runs: list[Any]) -> dict[str, str]:
    return {r.run_dir: r.kind or "unknown" for r in runs}


def check_tables(tables: Sequence[str] | None) -> tuple[str, ...]:
    """The exported tables to write, in :data:`TABLES` order (None: all of them).

    >>> check_tables(["usage", "runs"])
    ('runs', 'usage')
    >>> check_tables(["relay_entries"])
    Traceback (most recent call last):
    ...
    rivumi_analysis.export.ExportError: --tables: unknown or not exported: relay_entries; choose from runs, events, quarantine, manifests, tool_calls, approvals, model_calls, usage, verifications, states, drift, forks, messages
    """
    if tables is None:
        return TABLES
    unknown = [t for t in tables if t not in TABLES]
    if unknown or not tables:
        raise ExportError(f"--tables: unknown or not exported: {', '.join(unknown) or '(none)'}; "
                          f"choose from {', '.join(TABLES)}")
    return tuple(t for t in TABLES if t in tables)


def export(source: Source | None, out: str | os.PathLike[str], *, redact_output: bool = False,
           max_depth: int = DEFAULT_MAX_DEPTH,
           progress: Callable[[str, int, int], None] | None = None,
           tables: Sequence[str] | None = None) -> dict[str, Any]:
    """Write the Parquet dataset of every run below ``source`` to ``out``; return the manifest.

    ``out`` must not exist, be empty, or hold a previous export (which is replaced).
    ``progress(phase, done, total)`` reports reading runs and writing tables. ``tables``:
    write only these (default: every exported table, :data:`TABLES`).

    Raises:
        ExportError: ``out`` or ``tables`` cannot be used (checked before anything is read).
        SourceError: a bad source, or (code ``no_runs``) no run below it; ``out`` is then
            left untouched.
    """
    from .read.snapshot import load_fleet

    def step(phase: str, done: int, total: int) -> None:
        if progress is not None:
            progress(phase, done, total)

    out = os.fspath(out)
    check_out(out)
    wanted = check_tables(tables)
    tops, _root = normalize_sources(source)
    fleet = load_fleet(source, max_depth=max_depth,
                       progress=lambda d, t: step("reading runs", d, t))
    if not fleet.runs:
        raise SourceError(f"no runs found below {', '.join(tops)}", code="no_runs",
                          hint="a run directory holds events.jsonl, session.json or "
                               "result.json; check the PATH and --max-depth")
    _prepare_out(out)
    step("building tables", 0, 1)
    built = build_tables(fleet.runs)
    step("building tables", 1, 1)
    kinds = _kinds_of(fleet.runs)
    manifest: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "toolkit_version": __version__,
                                "redacted": redact_output, "partitioning": ["table", "kind"],
                                "tables": {}}
    for i, table in enumerate(wanted):
        df = built[table]
        step("writing tables", i, len(wanted))
        df = with_kind(portable(df), kinds)
        if redact_output:
            df = redact(table, df, tops)
        counts: dict[str, int] = {}
        for f in write_parts({table: df}, out, "0", keep_empty=True)["files"]:
            counts[f["kind"]] = counts.get(f["kind"], 0) + f["rows"]
        manifest["tables"][table] = {
            "rows": sum(counts.values()), "partitions": counts,
            "columns": {k: str(v) for k, v in df.schema.items() if k != "kind"},
        }
    with open(os.path.join(out, MARKER), "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    step("writing tables", len(wanted), len(wanted))
    return manifest


def check_out(out: str) -> None:
    """Raise :class:`ExportError` when ``out`` cannot take an export (changes nothing).

    >>> check_out("README.md")
    Traceback (most recent call last):
    ...
    rivumi_analysis.export.ExportError: --out README.md exists and is not a directory
    """
    if os.path.lexists(out):
        if not os.path.isdir(out) or os.path.islink(out):
            raise ExportError(f"--out {out} exists and is not a directory")
        entries = os.listdir(out)
        if entries and MARKER not in entries:
            raise ExportError(f"--out {out} is not empty and holds no previous export")
        if not os.access(out, os.W_OK | os.X_OK):
            raise ExportError(f"--out {out} is not writable")
        return
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ExportError(f"--out {out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ExportError(f"--out {out}: cannot create it, {parent} is not writable")


def _prepare_out(out: str) -> None:
    check_out(out)
    if os.path.lexists(out):
        for t in TABLES:
            shutil.rmtree(os.path.join(out, t), ignore_errors=True)
        if os.path.exists(os.path.join(out, MARKER)):
            os.unlink(os.path.join(out, MARKER))
    os.makedirs(out, exist_ok=True)


class ExportError(Exception):
    """A usage problem with ``--out``."""
