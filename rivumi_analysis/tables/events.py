"""``events_df``: one row per accepted event: typed envelope, ``data`` as its exact JSON text, ``line_no``, ``byte_offset`` and the event's warnings."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH, Source
from ..read.snapshot import RunData, gc_paused
from ._common import check_strict, load, polars_schema, validate

EVENT_CHUNK_ROWS = 50_000


def events_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from ..schemas import EventsSchema

    return validate(_events_rows(runs), EventsSchema)


def load_events(source: Source | None, *, strict: bool, max_depth: int,
                jobs: int | None = None) -> pl.DataFrame:
    """``events_df``'s flow: the columnar engine, in worker processes for a large fleet.

    Each worker reads a chunk of runs (fast path or exact, per file) and hands back an Arrow
    frame, so the parent concatenates frames instead of rebuilding rows. Identical for any
    number of workers.
    """
    from ..read.cache import PARALLEL_MIN_RUNS, _pool_context, default_jobs
    from ..read.discovery import discover
    from ..read.snapshot import Fleet
    from ..schemas import EventsSchema

    if isinstance(source, (Fleet, RunData)) or (isinstance(source, (list, tuple)) and source
                                                and all(isinstance(r, RunData) for r in source)):
        return load(source, strict=strict, max_depth=max_depth, builder=events_frame)
    locations = discover(source, max_depth=max_depth).runs
    n_jobs = default_jobs() if jobs is None else max(1, jobs)
    n_jobs = min(n_jobs, max(1, len(locations) // 8))
    if n_jobs <= 1 or len(locations) < PARALLEL_MIN_RUNS:
        frame_, quarantined = _events_chunk(locations)
        frames = [frame_]
    else:
        # small chunks: a worker holds one chunk of runs at a time (peak RSS 725 -> 602 MB
        # for 2,000 runs / 203 MB with 256 -> 64 runs per chunk; same CPU)
        size = max(8, min(64, len(locations) // (n_jobs * 4)))
        chunks = [locations[i:i + size] for i in range(0, len(locations), size)]
        try:
            frames, quarantined = _events_in_pool(chunks, n_jobs, _pool_context())
        except (ImportError, OSError):
            # no process pool here (a sandbox, or privileges dropped after import so the
            # pool's modules cannot be loaded): the same rows, read in this process
            frame_, quarantined = _events_chunk(locations)
            frames = [frame_]
    table = validate(pl.concat([pl.from_arrow(f) for f in frames], rechunk=False)
                     if len(frames) > 1 else pl.from_arrow(frames[0]), EventsSchema)
    check_strict(quarantined, strict)
    return table


def _events_in_pool(chunks: list[list[Any]], n_jobs: int,
                    context: Any) -> tuple[list[Any], list[RunData]]:
    from concurrent.futures import ProcessPoolExecutor

    frames: list[Any] = []
    quarantined: list[RunData] = []
    with ProcessPoolExecutor(max_workers=n_jobs, mp_context=context) as ex:
        for frame_, bad in ex.map(_events_chunk, chunks):
            frames.append(frame_)
            quarantined.extend(bad)
    return frames, quarantined


def _events_chunk(locations: list[Any]) -> tuple[Any, list[RunData]]:
    """Events rows of some runs as an Arrow table (unvalidated; no polars, so it is safe in
    a forked worker) and the runs with quarantined lines."""
    from ..read.snapshot import iter_runs

    quarantined: list[RunData] = []

    def runs() -> Iterator[RunData]:
        for run in iter_runs(locations, columnar=True):
            if run.quarantined:
                quarantined.append(run)
            yield run

    with gc_paused():
        return _events_arrow(runs()), quarantined


def _arrow_schema(schema: dict[str, pl.DataType]) -> Any:
    """The Arrow schema that ``pl.from_arrow`` turns into exactly ``schema``."""
    import pyarrow as pa

    fields = []
    for name, dtype in schema.items():
        if dtype == pl.Int64:
            t = pa.int64()
        elif dtype == pl.Utf8:
            t = pa.large_string()
        elif dtype == pl.List(pl.Utf8):
            t = pa.large_list(pa.large_string())
        elif isinstance(dtype, pl.Datetime):
            t = pa.timestamp(dtype.time_unit, dtype.time_zone)
        else:  # pragma: no cover - the events schema has no other type
            raise TypeError(f"{name}: {dtype}")
        fields.append(pa.field(name, t))
    return pa.schema(fields)


def _events_rows(runs: Iterable[RunData]) -> pl.DataFrame:
    """The events rows of ``runs`` (not validated), in run and file order."""
    return pl.from_arrow(_events_arrow(runs))


def _events_arrow(runs: Iterable[RunData]) -> Any:
    """The events rows as one Arrow table, built without polars (safe in a forked worker)."""
    import pyarrow as pa

    from ..schemas import EventsSchema

    schema = polars_schema(EventsSchema)
    arrow = _arrow_schema(schema)
    cols: dict[str, list[Any]] = {k: [] for k in schema}
    chunks: list[Any] = []
    batch: list[RunData] = []  # consecutive runs on the columnar fast path
    batch_events = 0

    def flush_cols() -> None:
        nonlocal cols
        if cols["line_no"]:
            chunks.append(pa.table(cols, schema=arrow))
            cols = {k: [] for k in schema}

    def flush_batch() -> None:
        nonlocal batch, batch_events
        if batch:
            for item in _fast_events(batch, arrow):
                if isinstance(item, RunData):  # failed a batch check: the exact path
                    _event_rows(item, cols)
                else:
                    flush_cols()
                    chunks.append(item)
            flush_cols()
            batch, batch_events = [], 0

    for run in runs:
        if run.fast is not None:
            batch.append(run)
            batch_events += len(run.fast)
            if batch_events >= EVENT_CHUNK_ROWS:
                flush_batch()
            continue
        flush_batch()
        if len(cols["line_no"]) >= EVENT_CHUNK_ROWS:
            # hand a chunk to Arrow and free its Python objects: peak memory stays near the
            # size of the finished table instead of twice it
            flush_cols()
        _event_rows(run, cols)
    flush_batch()
    if cols["line_no"] or not chunks:
        chunks.append(pa.table(cols, schema=arrow))
    return pa.concat_tables(chunks) if len(chunks) > 1 else chunks[0]


def _fast_events(batch: list[RunData], arrow: Any) -> Iterator[Any]:
    """Arrow tables of consecutive fast-path runs, in run order; a run that fails a batch
    check is yielded as its exact snapshot instead (the caller builds its rows the exact way)."""
    import pyarrow as pa

    from ..read.columnar import columns
    from ..read.snapshot import exact_run

    table, ok = columns([run.fast for run in batch])
    idx = table["file"]
    n = table.num_rows
    cols = {
        "run_dir": pa.array([r.run_dir for r in batch], pa.large_string()).take(idx),
        "run_id": pa.array([r.run_id for r in batch], pa.large_string()).take(idx),
        "kind": pa.array([r.kind for r in batch], pa.large_string()).take(idx),
        "text": pa.nulls(n, pa.large_string()),
        "warnings": pa.LargeListArray.from_arrays(pa.array([0] * (n + 1), pa.int64()),
                                                  pa.array([], pa.large_string())),
    }
    table = pa.table([cols[f.name] if f.name in cols else table[f.name] for f in arrow],
                     schema=arrow)
    if all(ok):
        yield table
        return
    start = 0
    for run, good in zip(batch, ok, strict=True):
        if good:
            k = len(run.fast)
            yield table.slice(start, k)
            start += k
        else:
            yield exact_run(run)


def _event_rows(run: RunData, cols: dict[str, list[Any]]) -> None:
    """Append one exactly-read run's events to the column lists."""
    events = run.events
    n = len(events)
    if not n:
        return
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
    return load_events(source, strict=strict, max_depth=max_depth)
