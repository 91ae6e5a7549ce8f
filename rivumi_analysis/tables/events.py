"""``events_df``: one row per accepted event: typed envelope, ``data`` as its exact JSON text, ``line_no``, ``byte_offset`` and the event's warnings."""

from __future__ import annotations

import functools
import itertools
import operator
import os
import struct
from array import array
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import polars as pl

from ..read.decode import _without_lone_surrogates
from ..read.discovery import DEFAULT_MAX_DEPTH, Source
from ..read.snapshot import RunData, gc_paused

# (pandera, through ._common and ..schemas, is imported only when a frame's validation needs
# it (_validate): a load of clean logs alone needs none)

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
    """The events table of ``runs`` (read already), checked as :func:`load_events` checks."""
    table = _Table()
    for seg in _segments(runs):
        table.add(seg)
    return table.checked()


def load_events(source: Source | None, *, strict: bool, max_depth: int,
                jobs: int | None = None) -> pl.DataFrame:
    """``events_df``'s flow: the columnar engine, in worker processes for a large fleet.

    Workers (``read.executor``; importing neither pyarrow nor polars) read chunks of runs: a clean log
    (``read.cleanlog``, the audit's proof) becomes plain column buffers (bytes and offsets,
    no object per event), any other log the exact path's rows. The parent wraps the buffers
    as Arrow arrays without copying (importing pyarrow while the workers run) and
    concatenates; the exact path's rows are validated (:func:`_checked`). Identical for
    any number of workers.
    """
    from ..read.discovery import discover
    from ..read.executor import InProcess, choose, chunked, on_object_storage
    from ..read.snapshot import is_loaded

    if is_loaded(source):
        from ._common import load

        return load(source, strict=strict, max_depth=max_depth, builder=events_frame)
    locations = discover(source, max_depth=max_depth).runs
    work = functools.partial(_events_chunk, keep_quarantined=strict)
    table = _Table()
    quarantined: list[RunData] = []
    executor, workers = choose(len(locations), jobs, local_only=on_object_storage(locations))
    if isinstance(executor, InProcess):
        segments, quarantined = work(locations)
        for seg in segments:
            table.add(seg)
    else:
        # small chunks: a worker holds one chunk of runs at a time (peak RSS 725 -> 602 MB
        # for 2,000 runs / 203 MB with 256 -> 64 runs per chunk; same CPU)
        chunks = chunked(locations, workers=workers)
        shared = _shared_prefix()
        try:
            results = executor.map(functools.partial(work, shared=shared), chunks)
            # meanwhile, what the parent needs afterwards (pyarrow: ~0.1 CPU-s in a fresh
            # process)
            import pyarrow  # noqa: F401

            for segments, bad in results:
                for seg in segments:  # converted as they come: one chunk's Arrow at a time
                    table.add(seg)
                quarantined.extend(bad)
        finally:
            if shared is not None:  # what a failed or interrupted load left behind
                _remove_shared(shared)
    frame = table.checked()
    if quarantined:  # (only kept by a strict load; ._common imports pandera)
        from ._common import check_strict

        check_strict(quarantined, strict)
    return frame


def _checked(frames: list[pl.DataFrame], exact: list[pl.DataFrame],
             run_dirs: list[str]) -> pl.DataFrame:
    """The events table from its parts, validated by ``EventsSchema`` wherever a value is
    not guaranteed by construction.

    The rows of clean logs (:class:`_Fast`) satisfy the model by construction: the
    columns' dtypes are the model's; ``line_no`` is ``1..n`` per run and ``byte_offset``/
    ``byte_length`` are the lines' (each an envelope's canonical layout, so ``>= 1``);
    ``sequence >= 0`` and a non-empty ``event_type`` are constraints of the strict envelope
    decode (``read.columnar.Envelope``); ``kind`` is ``snapshot._kind``'s; ``warnings`` is
    empty. So the exact path's rows are validated (all of them, in one call) and the
    whole table only if the dtypes differ from the model's or a run directory repeats (the
    key ``(run_dir, line_no)`` is then not unique by construction; with distinct runs, rows
    validated in parts are valid together). ``exact`` holds the exact rows not validated yet.
    ``tests/test_tables_columnar.py`` validates the clean rows alone with pandera as well.
    """
    table = _concat(frames)
    if exact:
        _validate(_concat(exact))
    if table.schema != _polars_schema() or len(set(run_dirs)) != len(run_dirs):
        _validate(table)
    return table


def _validate(df: pl.DataFrame) -> None:
    """``df`` validated by ``EventsSchema`` (pandera, imported only when a frame needs it)."""
    from ._common import validate

    validate(df, "EventsSchema")


@functools.cache
def _polars_schema() -> pl.Schema:
    """``EventsSchema``'s dtypes (:data:`_ARROW_COLUMNS` as polars reads them; tested)."""
    types = {"str": pl.String(), "int": pl.Int64(), "ts": pl.Datetime("us", "UTC"),
             "list": pl.List(pl.String())}
    return pl.Schema([(name, types[t]) for name, t in _ARROW_COLUMNS])


def _events_chunk(locations: list[Any], *, keep_quarantined: bool = True,
                  shared: str | None = None) -> tuple[list[Any], list[RunData]]:
    """The events rows of some runs as :func:`_segments` (plain Python: safe in a forked
    worker, cheap to pickle) and, when ``keep_quarantined`` (a strict load), the runs with
    quarantined lines. ``shared`` (a pool worker): the clean logs' buffers go to
    shared-memory files named ``shared-<pid>-<n>`` (:func:`_share`), not through the pipe."""
    from ..read.snapshot import iter_runs

    quarantined: list[RunData] = []

    def runs() -> Iterator[RunData]:
        for run in iter_runs(locations, columnar=True, skim=True):
            if keep_quarantined and run.quarantined:
                quarantined.append(run)
            yield run

    with gc_paused():
        segments = _segments(runs())
        if shared is not None:
            segments = [seg._replace(fast=_share(seg.fast, shared))
                        if seg.fast is not None else seg for seg in segments]
    _release_free_memory()
    return segments, quarantined


_SHARED_DIR = "/dev/shm"


def _shared_prefix() -> str | None:
    """A fresh name prefix for this load's shared-memory files, or None (no writable
    ``/dev/shm``: the buffers go through the pipe)."""
    if not (os.path.isdir(_SHARED_DIR) and os.access(_SHARED_DIR, os.W_OK)):
        return None
    return os.path.join(_SHARED_DIR, f"rivumi-events-{os.getpid()}-{os.urandom(6).hex()}")


def _remove_shared(prefix: str) -> None:
    import glob

    for path in glob.glob(glob.escape(prefix) + "-*"):
        try:
            os.unlink(path)
        except OSError:
            pass


class _Span(NamedTuple):
    """A buffer in a shared-memory file: where it starts and how many bytes."""

    offset: int
    size: int


_COUNTER = itertools.count()


def _share(fast: _Fast, prefix: str) -> _Fast:
    """``fast`` with its per-event buffers written to one shared-memory file (each
    replaced by its :class:`_Span`, 64-byte aligned), which the parent maps instead of
    unpickling copies from the pipe (-0.4 CPU-s in the parent at 10,000 runs); ``fast``
    itself when the file cannot be written."""
    parts: list[Any] = []
    at = 0

    def put(buf: Any) -> _Span:
        nonlocal at
        size = memoryview(buf).nbytes
        parts.append(buf)
        pad = -size % 64
        if pad:
            parts.append(bytes(pad))
        span = _Span(at, size)
        at += size + pad
        return span

    shared = fast._replace(
        sequence=put(fast.sequence),
        # (the timestamps stay in the message: parsed at once, their text need not outlive
        # the chunk as a part of the mapping, which lives as long as any of its columns)
        strings=[*((put(text), put(offsets)) for text, offsets in fast.strings[:2]),
                 fast.strings[2]],
        run_ids=fast.run_ids if isinstance(fast.run_ids, list) else tuple(
            map(put, fast.run_ids)),
        task_ids=fast.task_ids if isinstance(fast.task_ids, list) else tuple(
            map(put, fast.task_ids)),
        data=tuple(map(put, fast.data)))
    path = f"{prefix}-{os.getpid()}-{next(_COUNTER)}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError:
        return fast
    try:
        views = [memoryview(p).cast("B") for p in parts]
        while views:
            done = os.writev(fd, views[:512])
            while views and done >= len(views[0]):
                done -= len(views[0])
                views.pop(0)
            if done:
                views[0] = views[0][done:]
    except OSError:
        os.close(fd)
        os.unlink(path)
        return fast
    os.close(fd)
    return shared._replace(shared=path)


def _release_free_memory() -> None:
    """Give the heap's free pages back (glibc's ``malloc_trim``; nothing elsewhere).

    A worker reads run after run: file buffers, decoded objects and the growing column
    lists interleave on glibc's heap, which then keeps the freed pages and grows chunk after
    chunk (a worker's peak RSS 66 -> 103 MB over 17 chunks of 2,000 runs; trimmed after
    every chunk it stays at the first chunk's). Every :data:`_TRIM_EVERY` th chunk: each
    trim gives back pages the next chunk faults in again (55k -> 9k page faults per 2,000
    runs without any trim: -0.06 CPU-s)."""
    global _MALLOC_TRIM
    if next(_CHUNKS) % _TRIM_EVERY:
        return
    if _MALLOC_TRIM is None:
        try:
            import ctypes

            _MALLOC_TRIM = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM: Any = None
_TRIM_EVERY = 4
_CHUNKS = itertools.count(1)


def _events_schema() -> Any:
    """The Arrow schema of the events rows (see :data:`_ARROW_COLUMNS`)."""
    import pyarrow as pa

    types = {"str": pa.large_string(), "int": pa.int64(), "ts": pa.timestamp("us", "UTC"),
             "list": pa.large_list(pa.large_string())}
    return pa.schema([pa.field(name, types[t]) for name, t in _ARROW_COLUMNS])


class _Segment(NamedTuple):
    """The events of consecutive runs: the clean logs' as :class:`_Fast` buffers, the
    others' as the exact path's column lists, and the order to interleave them in."""

    fast: _Fast | None
    exact: dict[str, list[Any]] | None
    order: list[tuple[bool, int]]  # per run: (read exactly, rows)
    exact_runs: list[str]  # run_dir of each exactly-read run, in order
    locations: list[Any]  # every run, in order (for the exact reading, if ever needed)


class _Table:
    """The events table from its segments as they come (:meth:`add`), then :meth:`checked`.

    A segment's clean-log buffers become polars columns at once (a shared-memory mapping
    lives as long as the columns that use it); the columns derived from them (``line_no``,
    ``byte_offset``, ``byte_length``, ``created_at``, ...) are computed once for all the
    segments (:func:`_finish`; one polars query per segment cost ~2 ms of overhead each, 0.3
    CPU-s on 10,000 runs). Built with polars; pyarrow only wraps the buffers (most of its
    other entry points, ``pyarrow.compute`` and ``pa.array`` among them, import pandas,
    ~0.2 CPU-s in a fresh process).
    """

    def __init__(self) -> None:
        # per segment: the segment, its clean rows' raw columns, its exact rows
        self.parts: list[tuple[_Segment, pl.DataFrame | None, pl.DataFrame | None]] = []
        self.run_dirs: list[str] = []
        self.rows = 0  # clean rows so far
        self.size = 0  # and the bytes of their files

    def add(self, seg: _Segment) -> None:
        raw = exact = None
        if seg.fast is not None:
            raw = _raw_columns(seg.fast, self.rows, self.size)
            if raw is not None:  # (else its runs are read exactly: frames)
                self.rows += raw.height
                self.size += sum(seg.fast.sizes)
            self.run_dirs.extend(r[0] for r in seg.fast.runs)
        if seg.exact is not None:
            try:
                exact = pl.DataFrame(seg.exact, schema=_polars_schema())
            except UnicodeEncodeError:  # a run folder name that is not UTF-8: U+FFFD
                exact = pl.DataFrame(_without_lone_surrogates(seg.exact),
                                     schema=_polars_schema())
            self.run_dirs.extend(seg.exact_runs)
        self.parts.append((seg, raw, exact))

    def frames(self) -> tuple[list[pl.DataFrame], list[pl.DataFrame]]:
        """The table's pieces in run order, and its exactly-read parts."""
        raws = [raw for _s, raw, _e in self.parts if raw is not None]
        fast = _finish(_concat(raws), 0, 0, self.size) if raws else None
        pieces: list[pl.DataFrame] = []
        exact: list[pl.DataFrame] = []
        at = 0
        for seg, raw, exact_part in self.parts:
            own = None
            if seg.fast is not None:
                if raw is not None and fast is not None:
                    own = fast.slice(at, raw.height)
                elif raw is not None:  # (not expected: _finish) which segment it is
                    own = _finish(raw, at, sum(self._sizes_before(seg)), sum(seg.fast.sizes))
                at += raw.height if raw is not None else 0
                if own is None:  # (not expected) its runs read exactly
                    from ..read.snapshot import exact_run, iter_runs

                    again = _Table()
                    for s in _segments(exact_run(r) for r in iter_runs(seg.locations)):
                        again.add(s)
                    more, more_exact = again.frames()
                    pieces += more
                    exact += more_exact
                    continue
            if exact_part is not None:
                exact.append(exact_part)
            pieces += _interleaved(seg.order, own, exact_part)
        return pieces, exact

    def _sizes_before(self, seg: _Segment) -> Iterator[int]:
        for s, raw, _e in self.parts:
            if s is seg:
                return
            if raw is not None:
                yield sum(s.fast.sizes)

    def checked(self) -> pl.DataFrame:
        """The table, validated (:func:`_checked`)."""
        pieces, exact = self.frames()
        return _checked(pieces or [pl.DataFrame(schema=_polars_schema())], exact,
                        self.run_dirs)


def _interleaved(order: list[tuple[bool, int]], fast: pl.DataFrame | None,
                 exact: pl.DataFrame | None) -> list[pl.DataFrame]:
    """A segment's rows in run order: a slice per stretch of consecutive runs of one kind."""
    if fast is None or exact is None:
        frame = fast if fast is not None else exact
        return [frame] if frame is not None else []
    pieces = []
    at = {False: 0, True: 0}
    for is_exact, group in itertools.groupby(order, key=lambda o: o[0]):
        n = sum(rows for _e, rows in group)
        if n:
            pieces.append((exact if is_exact else fast).slice(at[is_exact], n))
            at[is_exact] += n
    return pieces


def _concat(frames: list[pl.DataFrame]) -> Any:
    """The frames one after the other (None for none)."""
    if not frames:
        return None
    return pl.concat(frames, rechunk=False) if len(frames) > 1 else frames[0]


_RUN_COLUMNS = ("run_dir", "run_id", "kind")


class _Fast(NamedTuple):
    """The events of clean logs as plain buffers (``array('q')`` and bytes): picklable
    without one object per event, wrapped by Arrow without a copy."""

    runs: list[tuple[str, str | None, str]]  # run_dir, run_id, kind
    counts: array  # events per run
    sizes: array  # events.jsonl bytes per run
    sequence: array  # per event, as every other per-event field below (each line's length
    # is its canonical layout's: _fast_table)
    strings: list[tuple[bytes, array]]  # event_type, event_id, created_at
    # event_run_id and task_id: one value per run when each run's are all equal (the
    # usual log), else per event: (event_run_id, (task_id text, offsets, 0/1 not null))
    run_ids: list[str] | tuple[bytes, array]
    task_ids: list[str | None] | tuple[bytes, array, bytes]
    data: tuple[bytes, array]
    shared: str | None = None  # the buffers are :class:`_Span` s of this file (_share)


_DATA = operator.attrgetter("data")


class _FastBatch:
    """Collects the columns of clean logs one run at a time (the run's decoded objects go
    at once) and joins them at :meth:`build`."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str | None, str]] = []
        self.logs: list[tuple[Any, ...]] = []
        self.rows = 0

    def add(self, run: RunData) -> None:
        log = run.fast
        self.runs.append((run.run_dir, run.run_id, run.kind))
        self.logs.append((log.sequences, log.event_types, log.event_ids,
                          log.created_ats, list(map(_DATA, log.envelopes)), log.run_ids,
                          log.task_ids, len(log.data)))
        self.rows += len(log)

    def build(self) -> _Fast:
        seqs, types, eids, stamps, raws, rids, tids, sizes = zip(*self.logs, strict=True)
        chain = itertools.chain.from_iterable
        data = list(chain(raws))
        run_ids: Any = [ids[0] for ids in rids]
        if any(ids.count(ids[0]) != len(ids) for ids in rids):
            run_ids = _ascii(list(chain(rids)))
        task_ids: Any = [ids[0] for ids in tids]
        if any(ids.count(ids[0]) != len(ids) for ids in tids):
            every = list(chain(tids))
            task_ids = (*_ascii([t or "" for t in every]), bytes([t is not None for t in every]))
        return _Fast(
            runs=self.runs, counts=array("q", map(len, seqs)), sizes=array("q", sizes),
            sequence=array("q", chain(seqs)),
            strings=[_ascii(list(chain(types))), _ascii(list(chain(eids))),
                     _ascii(list(chain(stamps)))],
            run_ids=run_ids, task_ids=task_ids,
            data=(b"".join(data), array("q", itertools.accumulate(map(len, data), initial=0))),
        )


def _segments(runs: Iterable[RunData]) -> list[_Segment]:
    """The events rows of ``runs`` in order, as :class:`_Segment` s without pyarrow: the
    clean logs (``read_run(columnar=True, skim=True)``) as buffers, the runs read exactly
    as column lists; a new segment every :data:`EVENT_CHUNK_ROWS` rows or so."""
    from ..read.cleanlog import CleanLog
    from ..read.discovery import RunLocation
    from ..read.snapshot import exact_run

    segments: list[_Segment] = []
    batch = _FastBatch()
    cols: dict[str, list[Any]] = {k: [] for k, _t in _ARROW_COLUMNS}
    order: list[tuple[bool, int]] = []
    exact_runs: list[str] = []
    locations: list[RunLocation] = []

    def flush() -> None:
        nonlocal batch, cols, order, exact_runs, locations
        if order:
            segments.append(_Segment(batch.build() if batch.rows else None,
                                     cols if exact_runs else None, order, exact_runs,
                                     locations))
            batch = _FastBatch()
            cols = {k: [] for k, _t in _ARROW_COLUMNS}
            order, exact_runs, locations = [], [], []

    for run in runs:
        locations.append(RunLocation(run.run_dir, is_subagent=run.is_subagent,
                                     parent_run_dir=run.parent_run_dir,
                                     source_root=run.source_root))
        if isinstance(run.fast, CleanLog) and len(run.fast):
            batch.add(run)
            order.append((False, len(run.fast)))
        else:
            before = len(cols["line_no"])
            _event_rows(exact_run(run), cols)
            order.append((True, len(cols["line_no"]) - before))
            exact_runs.append(run.run_dir)
        if batch.rows + len(cols["line_no"]) >= EVENT_CHUNK_ROWS:
            # hand a chunk over and free its Python objects: peak memory stays near the
            # size of the finished table instead of twice it
            flush()
    flush()
    if not segments:
        segments.append(_Segment(None, None, [], [], []))
    return segments


def _ascii(values: list[str]) -> tuple[bytes, array]:
    """Strings as one UTF-8 buffer and its offsets (the clean log's envelope strings are
    ASCII, so one join; a non-ASCII value would be sized by its encoding all the same)."""
    text = "".join(values)
    if text.isascii():
        return text.encode("ascii"), array("q", itertools.accumulate(map(len, values),
                                                                     initial=0))
    encoded = [v.encode("utf-8") for v in values]
    return b"".join(encoded), array("q", itertools.accumulate(map(len, encoded), initial=0))


def _fast_table(seg: _Fast) -> pl.DataFrame | None:
    """A :class:`_Fast` alone as a polars frame with the events columns (None: see
    :func:`_raw_columns` and :func:`_finish`)."""
    raw = _raw_columns(seg, 0, 0)
    return _finish(raw, 0, 0, sum(seg.sizes)) if raw is not None else None


_RAW = ("first_row", "file_start", "sequence", "data", "event_type", "event_id", "ts",
        "created_at", "event_run_id", "task_id", "run_dir", "run_id", "kind")


def _raw_columns(seg: _Fast, rows_before: int, bytes_before: int) -> pl.DataFrame | None:
    """The clean rows of a :class:`_Fast` as polars columns (:data:`_RAW`): its buffers
    wrapped by Arrow without a copy, the per-run strings gathered (polars' string views
    share each run's one copy: 16 bytes a row instead of the string; -90 MB at 969k rows
    against Arrow's take). ``first_row``/``file_start``: each row's run's first row and
    first byte counted over every clean row/file before it (``rows_before``/
    ``bytes_before`` come before this one), for :func:`_finish`. None if a timestamp
    does not parse (the clean-log proof matched each against the runner's format with real
    calendar dates and times, so the parse never should)."""
    import pyarrow as pa

    whole = _mapped(seg.shared) if seg.shared is not None else None

    def buf(part: Any) -> Any:
        if isinstance(part, _Span):
            return whole.slice(part.offset, part.size)
        return pa.py_buffer(part)

    def i64(values: Any) -> pl.Series:
        data = buf(values)
        return pl.from_arrow(pa.Array.from_buffers(pa.int64(), data.size // 8, [None, data]))

    def arrow_text(data: Any, offsets: Any) -> Any:
        offsets = buf(offsets)
        return pa.Array.from_buffers(pa.large_string(), offsets.size // 8 - 1,
                                     [None, offsets, buf(data)])

    def text(data: Any, offsets: Any) -> pl.Series:
        return pl.from_arrow(arrow_text(data, offsets))

    counts = seg.counts
    n = sum(counts)

    def per_row(values: Any) -> pl.Series:  # values[i] repeated counts[i] times
        return i64(b"".join([_PACK_Q(v) * c for v, c in zip(values, counts, strict=True)]))

    stamps = arrow_text(*seg.strings[2])
    try:  # (Arrow's ISO 8601 cast: ~10x polars' strptime; Array.cast imports no pandas)
        created_at = pl.from_arrow(stamps.cast(pa.timestamp("us", "UTC")))
    except (pa.ArrowInvalid, ValueError):
        return None
    cols = {
        "first_row": per_row(itertools.accumulate(counts[:-1], initial=rows_before)),
        "file_start": per_row(itertools.accumulate(seg.sizes[:-1], initial=bytes_before)),
        "sequence": i64(seg.sequence), "data": text(*seg.data),
        "event_type": text(*seg.strings[0]), "event_id": text(*seg.strings[1]),
        "created_at": created_at, "ts": pl.from_arrow(stamps),
    }
    per_run = {name: values for name, values in zip(
        _RUN_COLUMNS, zip(*seg.runs, strict=True), strict=True)}
    if isinstance(seg.run_ids, list):
        per_run["event_run_id"] = seg.run_ids
    else:
        cols["event_run_id"] = text(*seg.run_ids)
    if isinstance(seg.task_ids, list):
        per_run["task_id"] = seg.task_ids
    else:
        tid_text, tid_offsets, tid_present = seg.task_ids
        present = pl.from_arrow(pa.Array.from_buffers(pa.uint8(), n,
                                                      [None, buf(tid_present)]))
        cols["task_id"] = pl.select(pl.when(present != 0).then(text(tid_text, tid_offsets))
                                    ).to_series().alias("task_id")
    idx = per_row(range(len(counts)))
    schema = dict.fromkeys(per_run, pl.String)
    try:
        meta = pl.DataFrame(per_run, schema=schema)
    except UnicodeEncodeError:  # a run folder name that is not UTF-8: U+FFFD, as runs_df
        meta = pl.DataFrame(_without_lone_surrogates(per_run), schema=schema)
    meta = meta.select(pl.all().gather(idx))
    return pl.DataFrame([cols[name].alias(name) if name in cols else meta[name]
                         for name in _RAW])


def _finish(raw: pl.DataFrame, rows_before: int, bytes_before: int,
            size: int) -> pl.DataFrame | None:
    """The events columns of clean rows (:func:`_raw_columns`, the ones counted from
    ``rows_before``/``bytes_before`` on; ``size``: their files' bytes); None if the lines'
    lengths do not add up to the files' sizes (never: see :func:`_line_length`)."""
    n = raw.height
    step = pl.col("byte_length") + 1
    exprs = {
        "line_no": pl.int_range(rows_before + 1, rows_before + n + 1, dtype=pl.Int64)
        - pl.col("first_row"),
        "byte_offset": step.cum_sum() - step - (pl.col("file_start") - bytes_before),
        "text": pl.lit(None, pl.String), "warnings": pl.lit([], pl.List(pl.String)),
    }
    frame = raw.with_columns(_line_length(pl.col("task_id")).alias("byte_length")).select(
        exprs[name].alias(name) if name in exprs else pl.col(name)
        for name, _t in _ARROW_COLUMNS)
    if frame["byte_length"].sum() + n != size:  # (never: see _line_length)
        return None
    return frame


def _line_length(task_id: pl.Expr) -> pl.Expr:
    """Each line's length, from its values: a clean log is its envelopes re-encoded byte
    for byte (``read.columnar``), so a line is ``{"created_at":`` ts ``,"data":`` data
    ``,"event_id":`` eid ``,"event_type":`` type ``,"run_id":`` rid ``,"sequence":`` n
    ``,"task_id":`` tid ``}``; every string is its quoted value (timestamps in the runner's
    shape, the others plain with no quote or backslash: ``cleanlog._plain``, so nothing is
    escaped), ``data`` its exact text, the sequence its digits, a null task id ``null``.
    :func:`_finish` checks the sum against the files' sizes all the same."""
    def quoted(e: pl.Expr) -> pl.Expr:
        return e.str.len_bytes().cast(pl.Int64) + 2

    return (_LAYOUT_BYTES + quoted(pl.col("ts")) + pl.col("data").str.len_bytes().cast(pl.Int64)
            + quoted(pl.col("event_id")) + quoted(pl.col("event_type"))
            + quoted(pl.col("event_run_id"))
            + pl.col("sequence").cast(pl.String).str.len_bytes().cast(pl.Int64)
            + quoted(task_id).fill_null(4))


_LAYOUT_BYTES = len('{"created_at":,"data":,"event_id":,"event_type":,"run_id":,"sequence":,'
                    '"task_id":}')


_PACK_Q = struct.Struct("=q").pack


def _mapped(path: str) -> Any:
    """A worker's shared-memory file as one Arrow buffer (mapped read-only, the name
    removed at once: the memory lives as long as the columns that use it)."""
    import mmap

    import pyarrow as pa

    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.unlink(path)
        size = os.fstat(fd).st_size
        if not size:
            return pa.py_buffer(b"")
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        return pa.py_buffer(mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ))
    finally:
        os.close(fd)


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

    The in-memory loader behind the public one (``store/loaders.py``, which documents
    ``source``, ``strict`` and ``max_depth``); validated by
    :class:`~rivumi_analysis.schemas.EventsSchema`.

    >>> df = events_df("tests/fixtures/example")
    >>> df.height, df["sequence"].max()
    (50, 49)
    """
    return load_events(source, strict=strict, max_depth=max_depth)
