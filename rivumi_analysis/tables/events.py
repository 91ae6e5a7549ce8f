"""``events_df``: one row per accepted event: typed envelope, ``data`` as its exact JSON text, ``line_no``, ``byte_offset`` and the event's warnings."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH, Source
from ..read.snapshot import RunData, gc_paused

# (pandera, through ._common and ..schemas, is imported only where a frame is validated: in a
# fresh process its import costs ~0.25 CPU-s, which load_events overlaps with the workers)

EVENT_CHUNK_ROWS = 50_000

_ARROW_COLUMNS = (
    ("run_dir", "str"), ("run_id", "str"), ("kind", "str"), ("line_no", "int"),
    ("byte_offset", "int"), ("byte_length", "int"), ("sequence", "int"), ("event_type", "str"),
    ("event_run_id", "str"), ("task_id", "str"), ("event_id", "str"), ("created_at", "ts"),
    ("text", "str"), ("data", "str"), ("warnings", "list"),
)
"""``EventsSchema``'s columns as the Arrow types ``pl.from_arrow`` turns into its dtypes
(without importing pandera in a worker; ``tests/test_tables_columnar.py`` checks them)."""


def events_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from ..schemas import EventsSchema
    from ._common import validate

    return validate(_events_rows(runs), EventsSchema)


def load_events(source: Source | None, *, strict: bool, max_depth: int,
                jobs: int | None = None) -> pl.DataFrame:
    """``events_df``'s flow: the columnar engine, in worker processes for a large fleet.

    Each worker reads a chunk of runs (fast path or exact, per file) and hands back an Arrow
    table, so the parent concatenates tables instead of rebuilding rows. Identical for any
    number of workers. The parent imports pyarrow before forking (the workers inherit it) and
    pandera while the workers run.
    """
    from ..read.cache import PARALLEL_MIN_RUNS, _pool_context, default_jobs
    from ..read.discovery import discover
    from ..read.snapshot import Fleet

    if isinstance(source, (Fleet, RunData)) or (isinstance(source, (list, tuple)) and source
                                                and all(isinstance(r, RunData) for r in source)):
        from ._common import load

        return load(source, strict=strict, max_depth=max_depth, builder=events_frame)
    locations = discover(source, max_depth=max_depth).runs
    n_jobs = default_jobs() if jobs is None else max(1, jobs)
    n_jobs = min(n_jobs, max(1, len(locations) // 8))
    work = functools.partial(_events_chunk, keep_quarantined=strict)
    tables: list[Any] = []
    quarantined: list[RunData] = []
    if n_jobs > 1 and len(locations) >= PARALLEL_MIN_RUNS:
        # small chunks: a worker holds one chunk of runs at a time (peak RSS 725 -> 602 MB
        # for 2,000 runs / 203 MB with 256 -> 64 runs per chunk; same CPU)
        size = max(8, min(64, len(locations) // (n_jobs * 4)))
        chunks = [locations[i:i + size] for i in range(0, len(locations), size)]
        try:
            _events_in_pool(work, chunks, n_jobs, _pool_context(), tables, quarantined)
        except (ImportError, OSError):
            # no process pool here (a sandbox, or privileges dropped after import so the
            # pool's modules cannot be loaded): the same rows, read in this process
            tables, quarantined = [], []
    if not tables:
        table_, quarantined = work(locations)
        tables = [table_]
    from ..schemas import EventsSchema
    from ._common import check_strict, validate

    frames = [pl.from_arrow(t) for t in tables]
    table = validate(pl.concat(frames, rechunk=False) if len(frames) > 1 else frames[0],
                     EventsSchema)
    check_strict(quarantined, strict)
    return table


def _events_in_pool(work: Any, chunks: list[list[Any]], n_jobs: int, context: Any,
                    tables: list[Any], quarantined: list[RunData]) -> None:
    from concurrent.futures import ProcessPoolExecutor

    _warm_arrow()
    with ProcessPoolExecutor(max_workers=n_jobs, mp_context=context) as ex:
        results = ex.map(work, chunks)  # every chunk submitted now
        # meanwhile, what the parent needs afterwards (pandera's import alone is ~0.25 CPU-s)
        from ..schemas import EventsSchema  # noqa: F401
        from ._common import validate  # noqa: F401

        for table_, bad in results:
            tables.append(table_)
            quarantined.extend(bad)


def _warm_arrow() -> None:
    """Pay pyarrow's one-off costs once, before forking, instead of in every worker: its
    import, the pandas shim it imports on the first ``pa.array`` (pandas is installed with
    pandera: ~0.15 CPU-s) and the compute kernels' first use."""
    from ..read.columnar import columns, decode

    line = (b'{"created_at":"2026-01-01T00:00:00.000001Z","data":{},"event_id":"e",'
            b'"event_type":"t","run_id":"r","sequence":0,"task_id":null}\n')
    warm = decode(line)
    if warm is not None:
        columns([warm])


def _events_chunk(locations: list[Any], *,
                  keep_quarantined: bool = True) -> tuple[Any, list[RunData]]:
    """Events rows of some runs as an Arrow table (unvalidated; no polars, so it is safe in
    a forked worker) and, when ``keep_quarantined`` (a strict load), the runs with
    quarantined lines."""
    from ..read.snapshot import iter_runs

    quarantined: list[RunData] = []

    def runs() -> Iterator[RunData]:
        for run in iter_runs(locations, columnar=True, skim=True):
            if keep_quarantined and run.quarantined:
                quarantined.append(run)
            yield run

    with gc_paused():
        return _events_arrow(runs()), quarantined


def _events_schema() -> Any:
    """The Arrow schema of the events rows (see :data:`_ARROW_COLUMNS`)."""
    import pyarrow as pa

    types = {"str": pa.large_string(), "int": pa.int64(), "ts": pa.timestamp("us", "UTC"),
             "list": pa.large_list(pa.large_string())}
    return pa.schema([pa.field(name, types[t]) for name, t in _ARROW_COLUMNS])


def _events_rows(runs: Iterable[RunData]) -> pl.DataFrame:
    """The events rows of ``runs`` (not validated), in run and file order."""
    return pl.from_arrow(_events_arrow(runs))


def _events_arrow(runs: Iterable[RunData]) -> Any:
    """The events rows as one Arrow table, built without polars (safe in a forked worker)."""
    import pyarrow as pa

    arrow = _events_schema()
    names = arrow.names
    cols: dict[str, list[Any]] = {k: [] for k in names}
    chunks: list[Any] = []
    batch: list[RunData] = []  # consecutive runs on the columnar fast path
    batch_events = 0

    def flush_cols() -> None:
        nonlocal cols
        if cols["line_no"]:
            chunks.append(pa.table(cols, schema=arrow))
            cols = {k: [] for k in names}

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
