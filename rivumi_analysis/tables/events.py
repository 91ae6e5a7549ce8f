"""``events_df``: one row per accepted event: typed envelope, ``data`` as its exact JSON text, ``line_no``, ``byte_offset`` and the event's warnings."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ..read.snapshot import RunData
from ._common import load, polars_schema, validate

EVENT_CHUNK_ROWS = 50_000


def events_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from ..schemas import EventsSchema

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


def events_df(source: Any = None, *, strict: bool = False,
              max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per accepted event: typed envelope, ``data`` as its exact JSON text, ``line_no``, ``byte_offset`` and the event's warnings.

    Args:
        source: a run directory, a folder of runs, or a list of either; ``None`` uses the
            default run root (``$RIVUMI_RUN_ROOT``, ``$LOOPLANE_RUN_ROOT``, ...). A fleet read
            once with :func:`rivumi_analysis.load_fleet` is accepted too, so several tables
            share one read.
        strict: raise :class:`~rivumi_analysis.errors.QuarantineError` (carrying the
            quarantine table) if and only if at least one line was quarantined.
        max_depth: how many folder levels to descend looking for runs.

    Returns:
        An eager polars DataFrame validated by :class:`rivumi_analysis.schemas.EventsSchema`.

    Raises:
        SourceError: a missing source, a regular file, or no default run root.

    >>> df = events_df("tests/fixtures/example")
    >>> df.height, df["sequence"].max()
    (50, 49)
    """
    return load(source, strict=strict, max_depth=max_depth, builder=events_frame)
