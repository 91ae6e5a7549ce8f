"""Export the toolkit's tables as a Parquet dataset that polars, DuckDB and Spark all read.

Layout (Hive-style, partitioned by table and run kind, never by run id)::

    OUT/_dataset.json                          schema version, tables, columns, row counts
    OUT/<table>/kind=<kind>/part-0.parquet     one file per (table, kind)

Tables: every run table (``runs``, ``events``, ``quarantine``, ``manifests``, ``states``,
``tool_calls``, ``approvals``, ``model_calls``, ``usage``, ``verifications``, ``drift``,
``forks``, ``messages``). ``kind`` is ``native|fork|subagent|external`` (``unknown`` for a
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
from collections.abc import Callable
from typing import Any

from ._version import __version__
from .errors import SourceError
from .read.discovery import DEFAULT_MAX_DEPTH, Source, normalize_sources

SCHEMA_VERSION = 1
"""Version of the exported dataset's layout and columns (also in each file's metadata)."""

TABLES = ("runs", "events", "quarantine", "manifests", "states", "tool_calls", "approvals",
          "model_calls", "usage", "verifications", "drift", "forks", "messages")
MARKER = "_dataset.json"

# String columns kept under --redact (codes, ids of runs, tool names, effects, decisions).
# Numbers, booleans and timestamps are always kept; every other string/binary column is dropped.
REDACT_KEEP_STRINGS = frozenset({
    "run_id", "event_run_id", "kind", "verdict", "reasons", "warnings", "phase",
    "terminal_reason", "result_status", "result_terminal_reason", "event_type", "reason",
    "effect", "decision", "outcome", "name", "tool_calls", "finish_reason",
    "failure_kind", "source", "lane", "currency", "cost_source", "rejected",
    "runner_generation", "row_kind", "field", "last_safe_before", "item", "role",
})
REDACT_RELATIVE = frozenset({"run_dir", "parent_run_dir", "file"})
# Columns named like codes but holding free text in some table.
REDACT_DROP = {"approvals": frozenset({"policy_reason"})}


def build_tables(runs: list[Any]) -> dict[str, Any]:
    """Every exported table, built from one list of ``RunData`` snapshots."""
    from .tables import (
        approvals,
        events,
        manifests,
        model_calls,
        tool_calls,
        usage,
        verifications,
    )
    from .tables import runs as runs_table
    from .tables._common import quarantine_frame

    tables = {
        "runs": runs_table.runs_frame(runs),
        "events": events.events_frame(runs),
        "quarantine": quarantine_frame(runs),
        "tool_calls": tool_calls.tool_calls_frame(runs),
        "approvals": approvals.approvals_frame(runs),
        "model_calls": model_calls.model_calls_frame(runs),
        "usage": usage.usage_frame(runs),
        "manifests": manifests.manifests_frame(runs),
        "verifications": verifications.verifications_frame(runs),
    }
    from .tables.drift import drift_df
    from .tables.forks import forks_df
    from .tables.messages import messages_frame
    from .tables.states import states_df  # the same engine as the loader, not a copy of it

    tables["states"] = states_df(runs)
    tables["drift"] = drift_df(runs)
    tables["forks"] = forks_df(runs)
    tables["messages"] = messages_frame(runs)
    return {t: tables[t] for t in TABLES if t in tables}


def _portable_type(dt: Any) -> Any:
    import polars as pl

    if isinstance(dt, pl.Datetime):
        return pl.Datetime("us", dt.time_zone or "UTC") if dt.time_zone else pl.Datetime(
            "us", "UTC")
    if isinstance(dt, pl.Duration):
        return pl.Int64  # microseconds
    if isinstance(dt, pl.List):
        return pl.List(_portable_type(dt.inner))
    if isinstance(dt, pl.Array):
        return pl.List(_portable_type(dt.inner))
    if isinstance(dt, pl.Struct):
        return pl.Struct({f.name: _portable_type(f.dtype) for f in dt.fields})
    if dt in (pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64, pl.Int8, pl.Int16, pl.Int32):
        return pl.Int64
    if dt == pl.Float32:
        return pl.Float64
    if dt in (pl.Categorical, pl.Enum, pl.Null, pl.Object) or isinstance(
            dt, (pl.Categorical, pl.Enum)):
        return pl.String
    return dt


def portable(df: Any) -> Any:
    """Cast every column to a type polars, DuckDB and Spark all read from Parquet."""
    import polars as pl

    casts = []
    for name, dt in df.schema.items():
        want = _portable_type(dt)
        if isinstance(dt, pl.Duration):
            casts.append(pl.col(name).dt.total_microseconds().alias(name))
        elif want != dt:
            casts.append(pl.col(name).cast(want))
    return df.with_columns(casts) if casts else df


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


def with_kind(df: Any, kinds: dict[str, str]) -> Any:
    """Add (or fill) the ``kind`` partition column from each row's run."""
    import polars as pl

    if "kind" in df.columns:
        return df.with_columns(pl.col("kind").fill_null("unknown"))
    if "run_dir" not in df.columns:
        return df.with_columns(pl.lit("unknown").alias("kind"))
    kmap = pl.DataFrame({"run_dir": list(kinds), "kind": list(kinds.values())},
                        schema={"run_dir": pl.String, "kind": pl.String})
    return df.join(kmap, on="run_dir", how="left", maintain_order="left").with_columns(
        pl.col("kind").fill_null("unknown"))


def write_table(out: str, table: str, df: Any) -> dict[str, int]:
    """Write one table (with a ``kind`` column) partitioned by kind; rows per partition."""
    import pyarrow.parquet as pq

    meta = {b"rivumi_analysis.schema_version": str(SCHEMA_VERSION).encode(),
            b"rivumi_analysis.table": table.encode(),
            b"rivumi_analysis.version": __version__.encode()}
    counts: dict[str, int] = {}
    groups = (df.partition_by("kind", as_dict=True, maintain_order=True) if df.height
              else {("none",): df})
    for key, part in groups.items():
        kind = key[0] if isinstance(key, tuple) else key
        d = os.path.join(out, table, f"kind={kind}")
        os.makedirs(d, exist_ok=True)
        arrow = _plain_arrow(part.drop("kind").to_arrow())
        arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}), **meta})
        pq.write_table(arrow, os.path.join(d, "part-0.parquet"), compression="zstd",
                       coerce_timestamps="us", allow_truncated_timestamps=False)
        counts[str(kind)] = part.height
    return counts


def _plain_arrow(tbl: Any) -> Any:
    """Arrow view/large types -> the plain ones every Parquet reader maps."""
    import pyarrow as pa

    def plain(t: Any) -> Any:
        if pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
            return pa.string()
        if pa.types.is_large_binary(t) or getattr(pa.types, "is_binary_view", lambda _: False)(t):
            return pa.binary()
        if pa.types.is_large_list(t) or pa.types.is_list(t) or getattr(
                pa.types, "is_list_view", lambda _: False)(t):
            return pa.list_(plain(t.value_type))
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, plain(f.type)) for f in t])
        return t

    schema = pa.schema([pa.field(f.name, plain(f.type)) for f in tbl.schema])
    return tbl.cast(schema) if schema != tbl.schema else tbl


def export(source: Source | None, out: str | os.PathLike[str], *, redact_output: bool = False,
           max_depth: int = DEFAULT_MAX_DEPTH,
           progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Write the Parquet dataset of every run below ``source`` to ``out``; return the manifest.

    ``out`` must not exist, be empty, or hold a previous export (which is replaced).
    ``progress(phase, done, total)`` reports reading runs and writing tables.

    Raises:
        ExportError: ``out`` cannot be used (checked before anything is read).
        SourceError: a bad source, or (code ``no_runs``) no run below it; ``out`` is then
            left untouched.
    """
    from .read.snapshot import load_fleet

    def step(phase: str, done: int, total: int) -> None:
        if progress is not None:
            progress(phase, done, total)

    out = os.fspath(out)
    check_out(out)
    tops, _root = normalize_sources(source)
    fleet = load_fleet(source, max_depth=max_depth,
                       progress=lambda d, t: step("reading runs", d, t))
    if not fleet.runs:
        raise SourceError(f"no runs found below {', '.join(tops)}", code="no_runs",
                          hint="a run directory holds events.jsonl, session.json or "
                               "result.json; check the PATH and --max-depth")
    _prepare_out(out)
    step("building tables", 0, 1)
    tables = build_tables(fleet.runs)
    step("building tables", 1, 1)
    kinds = _kinds_of(fleet.runs)
    manifest: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "toolkit_version": __version__,
                                "redacted": redact_output, "partitioning": ["table", "kind"],
                                "tables": {}}
    for i, (table, df) in enumerate(tables.items()):
        step("writing tables", i, len(tables))
        df = with_kind(portable(df), kinds)
        if redact_output:
            df = redact(table, df, tops)
        counts = write_table(out, table, df)
        manifest["tables"][table] = {
            "rows": sum(counts.values()), "partitions": counts,
            "columns": {k: str(v) for k, v in df.schema.items() if k != "kind"},
        }
    with open(os.path.join(out, MARKER), "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    step("writing tables", len(tables), len(tables))
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
