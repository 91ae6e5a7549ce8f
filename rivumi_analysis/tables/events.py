"""``events_df``: one row per accepted event: typed envelope, ``data`` as its exact JSON text, ``line_no``, ``byte_offset`` and the event's warnings."""

from __future__ import annotations

import functools
import itertools
from array import array
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

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

    Workers (forked, importing neither pyarrow nor polars) read chunks of runs: a clean log
    (``read.cleanlog``, the audit's proof) becomes plain column buffers (bytes and offsets,
    no object per event), any other log the exact path's rows. The parent wraps the buffers
    as Arrow arrays without copying, concatenates and validates; it imports pyarrow and
    pandera while the workers run. Identical for any number of workers.
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
    frames: list[pl.DataFrame] = []
    quarantined: list[RunData] = []
    if n_jobs > 1 and len(locations) >= PARALLEL_MIN_RUNS:
        # small chunks: a worker holds one chunk of runs at a time (peak RSS 725 -> 602 MB
        # for 2,000 runs / 203 MB with 256 -> 64 runs per chunk; same CPU)
        size = max(8, min(64, len(locations) // (n_jobs * 4)))
        chunks = [locations[i:i + size] for i in range(0, len(locations), size)]
        try:
            _events_in_pool(work, chunks, n_jobs, _pool_context(), frames, quarantined)
        except (ImportError, OSError):
            # no process pool here (a sandbox, or privileges dropped after import so the
            # pool's modules cannot be loaded): the same rows, read in this process
            frames, quarantined = [], []
    if not frames:
        segments, quarantined = work(locations)
        frames = [_frame(segments)]
    from ..schemas import EventsSchema
    from ._common import check_strict, validate

    table = validate(pl.concat(frames, rechunk=False) if len(frames) > 1 else frames[0],
                     EventsSchema)
    check_strict(quarantined, strict)
    return table


def _events_in_pool(work: Any, chunks: list[list[Any]], n_jobs: int, context: Any,
                    frames: list[pl.DataFrame], quarantined: list[RunData]) -> None:
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=n_jobs, mp_context=context) as ex:
        results = ex.map(work, chunks)  # every chunk submitted now: the workers start
        # meanwhile, what the parent needs afterwards (pyarrow + its pandas shim + pandera:
        # ~0.5 CPU-s in a fresh process), instead of before forking
        import pyarrow  # noqa: F401

        from ..schemas import EventsSchema  # noqa: F401
        from ._common import validate  # noqa: F401

        for segments, bad in results:
            frames.append(_frame(segments))  # converted as they come: one chunk's Arrow at a time
            quarantined.extend(bad)


def _events_chunk(locations: list[Any], *,
                  keep_quarantined: bool = True) -> tuple[list[Any], list[RunData]]:
    """The events rows of some runs as :func:`_segments` (plain Python: safe in a forked
    worker, cheap to pickle) and, when ``keep_quarantined`` (a strict load), the runs with
    quarantined lines."""
    from ..read.snapshot import iter_runs

    quarantined: list[RunData] = []

    def runs() -> Iterator[RunData]:
        for run in iter_runs(locations, columnar=True, skim=True):
            if keep_quarantined and run.quarantined:
                quarantined.append(run)
            yield run

    with gc_paused():
        return _segments(runs()), quarantined


def _events_schema() -> Any:
    """The Arrow schema of the events rows (see :data:`_ARROW_COLUMNS`)."""
    import pyarrow as pa

    types = {"str": pa.large_string(), "int": pa.int64(), "ts": pa.timestamp("us", "UTC"),
             "list": pa.large_list(pa.large_string())}
    return pa.schema([pa.field(name, types[t]) for name, t in _ARROW_COLUMNS])


def _events_rows(runs: Iterable[RunData]) -> pl.DataFrame:
    """The events rows of ``runs`` (not validated), in run and file order."""
    return _frame(_segments(runs))


def _frame(segments: list[Any]) -> pl.DataFrame:
    """One polars frame (not validated) of some :func:`_segments`."""
    frames = [_segment_frame(seg) for seg in segments]
    return pl.concat(frames, rechunk=False) if len(frames) > 1 else frames[0]


def _segment_frame(seg: Any) -> pl.DataFrame:
    import pyarrow as pa

    arrow = _events_schema()
    if not isinstance(seg, _Fast):
        return pl.from_arrow(pa.table(seg, schema=arrow))
    built = _fast_table(seg, arrow)
    if built is None:  # not expected (see _fast_table): these runs the exact way
        from ..read.snapshot import exact_run, iter_runs

        return _frame(_segments(exact_run(r) for r in iter_runs(seg.locations)))
    table, run_idx = built
    idx = pl.from_arrow(run_idx)
    # the per-run strings by gather: polars' string views share each run's one copy (16
    # bytes a row instead of the string; -90 MB at 969k rows against Arrow's take)
    meta = {name: pl.Series(name, values, pl.String).gather(idx)
            for name, values in zip(_RUN_COLUMNS, zip(*seg.runs, strict=True), strict=True)}
    return pl.from_arrow(table).with_columns(**meta).select(arrow.names)


_RUN_COLUMNS = ("run_dir", "run_id", "kind")


class _Fast(NamedTuple):
    """The events of consecutive clean logs as plain buffers (``array('q')`` and bytes):
    picklable without one object per event, wrapped by Arrow without a copy."""

    runs: list[tuple[str, str | None, str]]  # run_dir, run_id, kind
    counts: array  # events per run
    sizes: array  # events.jsonl bytes per run
    byte_length: array  # per event, as every other per-event field below
    sequence: array
    strings: list[tuple[bytes, array]]  # event_type, event_run_id, event_id, created_at
    task_id: tuple[bytes, array, bytes]  # ... and a 0/1 byte per event: not null
    data: tuple[bytes, array]
    locations: list[Any]  # where the runs are (for the exact reading, if ever needed)


def _segments(runs: Iterable[RunData]) -> list[Any]:
    """The events rows of ``runs`` in order, as segments without pyarrow: a :class:`_Fast`
    per batch of consecutive clean logs (``read_run(columnar=True, skim=True)``), a dict of
    column lists for the runs read exactly."""
    from ..read.cleanlog import CleanLog
    from ..read.snapshot import exact_run

    segments: list[Any] = []
    cols: dict[str, list[Any]] = {k: [] for k, _t in _ARROW_COLUMNS}
    batch: list[RunData] = []
    batch_events = 0

    def flush_cols() -> None:
        nonlocal cols
        if cols["line_no"]:
            segments.append(cols)
            cols = {k: [] for k, _t in _ARROW_COLUMNS}

    def flush_batch() -> None:
        nonlocal batch, batch_events
        if batch:
            segments.append(_fast(batch))
            batch, batch_events = [], 0

    for run in runs:
        if isinstance(run.fast, CleanLog):
            flush_cols()
            batch.append(run)
            batch_events += len(run.fast)
            if batch_events >= EVENT_CHUNK_ROWS:
                flush_batch()
            continue
        flush_batch()
        if len(cols["line_no"]) >= EVENT_CHUNK_ROWS:
            # hand a chunk over and free its Python objects: peak memory stays near the
            # size of the finished table instead of twice it
            flush_cols()
        _event_rows(exact_run(run), cols)
    flush_batch()
    if cols["line_no"] or not segments:
        segments.append(cols)
    return segments


def _fast(batch: list[RunData]) -> _Fast:
    """Column buffers of clean logs: every line an accepted, warning-free event whose
    envelope strings are printable ASCII (``read.cleanlog``), so the columns are the
    envelopes' fields and each line's length; built with C-level joins, no per-event object."""
    from ..read.discovery import RunLocation

    logs = [run.fast for run in batch]
    envs = [e for log in logs for e in log.envelopes]
    lengths = array("q")
    for run in batch:
        lines = (run.events_bytes or b"").split(b"\n")
        lines.pop()  # the empty piece after the final newline
        lengths.extend(map(len, lines))
    tids = [log_tid for log in logs for log_tid in log.task_ids]
    raws = [e.data for e in envs]
    return _Fast(
        runs=[(r.run_dir, r.run_id, r.kind) for r in batch],
        counts=array("q", map(len, logs)),
        sizes=array("q", [len(r.events_bytes or b"") for r in batch]),
        byte_length=lengths,
        sequence=array("q", [s for log in logs for s in log.sequences]),
        strings=[_ascii([t for log in logs for t in log.event_types]),
                 _ascii([r for log in logs for r in log.run_ids]),
                 _ascii([e.event_id for e in envs]),
                 _ascii([e.created_at for e in envs])],
        task_id=(*_ascii([t or "" for t in tids]), bytes([t is not None for t in tids])),
        data=(b"".join(raws), array("q", itertools.accumulate(map(len, raws), initial=0))),
        locations=[RunLocation(r.run_dir, is_subagent=r.is_subagent,
                               parent_run_dir=r.parent_run_dir, source_root=r.source_root)
                   for r in batch],
    )


def _ascii(values: list[str]) -> tuple[bytes, array]:
    """Strings as one UTF-8 buffer and its offsets (the clean log's envelope strings are
    ASCII, so one join; a non-ASCII value would be sized by its encoding all the same)."""
    text = "".join(values)
    if text.isascii():
        return text.encode("ascii"), array("q", itertools.accumulate(map(len, values),
                                                                     initial=0))
    encoded = [v.encode("utf-8") for v in values]
    return b"".join(encoded), array("q", itertools.accumulate(map(len, encoded), initial=0))


def _fast_table(seg: _Fast, arrow: Any) -> tuple[Any, Any] | None:
    """A :class:`_Fast` as an Arrow table of the per-event columns (its buffers wrapped
    without a copy) and each row's run index into ``seg.runs``; None if a
    timestamp does not parse (the clean-log proof matched it against the runner's format
    with real calendar dates, so Arrow's parse should never refuse one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..read.columnar import _per_row, _row_numbers

    n = len(seg.sequence)

    def i64(values: array) -> Any:
        return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])

    def text(data: bytes, offsets: array, validity: Any = None) -> Any:
        return pa.Array.from_buffers(pa.large_string(), len(offsets) - 1,
                                     [validity, pa.py_buffer(offsets), pa.py_buffer(data)])

    counts = list(seg.counts)
    run_idx = _per_row(counts, list(range(len(counts))), pa.int32())
    first_row = _per_row(counts, list(itertools.accumulate(counts, initial=0))[:-1], pa.int64())
    length = i64(seg.byte_length)
    # offsets restart at every file: the end of each line, minus its length and the file start
    file_start = _per_row(counts, list(itertools.accumulate(seg.sizes, initial=0))[:-1],
                          pa.int64())
    ends = pc.cumulative_sum(pc.add(length, 1))
    etype, rid, eid, ts = (text(*s) for s in seg.strings)
    try:
        created_at = pc.cast(ts, pa.timestamp("us", "UTC"))
    except (pa.ArrowInvalid, ValueError):
        return None
    tid_text, tid_offsets, tid_present = seg.task_id
    present = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(tid_present)])
    tid = pc.if_else(pc.cast(present, pa.bool_()), text(tid_text, tid_offsets),
                     pa.scalar(None, pa.large_string()))
    cols = {
        "line_no": pc.subtract(_row_numbers(n), first_row) if n else i64(array("q")),
        "byte_offset": pc.subtract(pc.subtract(ends, pc.add(length, 1)), file_start),
        "byte_length": length, "sequence": i64(seg.sequence), "event_type": etype,
        "event_run_id": rid, "task_id": tid, "event_id": eid, "created_at": created_at,
        "text": pa.nulls(n, pa.large_string()), "data": text(*seg.data),
        "warnings": pa.LargeListArray.from_arrays(pa.array([0] * (n + 1), pa.int64()),
                                                  pa.array([], pa.large_string())),
    }
    fields = [f for f in arrow if f.name not in _RUN_COLUMNS]
    return pa.table([cols[f.name] for f in fields], schema=pa.schema(fields)), run_idx


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
