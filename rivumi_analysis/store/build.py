"""Every table for a chunk of runs (one read per run) and the one Parquet writer.

:func:`build_tables` is pure: it reads each run once, as the audit does (a clean log kept as
columns), and builds all tables with the loaders' own builders: the columnar ones where a log
is clean, the exact ones elsewhere (:func:`chunk_frames`). :func:`build_frames`, every table
from runs read exactly, is the oracle it is tested against. :func:`write_parts` writes them
in the one dataset layout shared by :mod:`rivumi_analysis.export`, the store and the
distributed engine::

    OUT/<table>/kind=<kind>/part-<key>.parquet

Names are deterministic (a retried task with the same key overwrites its files, never
duplicates them) and every file appears by an atomic rename.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._version import __version__
from ..read.discovery import RunLocation
from ..read.snapshot import RunData, gc_paused, read_run
from ..tables.registry import TABLES as SPECS
from ..tables.registry import build_order, names

TABLES: tuple[str, ...] = names(stored=True)
"""Every table the store materialises, in a stable order (the registry's)."""

SCHEMA_VERSION = 3
"""Version of the dataset layout and columns (in each file's metadata)."""

_KEY_RE = re.compile(r"[A-Za-z0-9_.-]+\Z")


def read_runs(locations: Iterable[RunLocation | str]) -> list[RunData]:
    """Read every location once (a plain string is a top-level run directory)."""
    out = []
    with gc_paused():
        for loc in locations:
            if isinstance(loc, str):
                loc = RunLocation(loc)
            out.append(read_run(loc.run_dir, is_subagent=loc.is_subagent,
                                parent_run_dir=loc.parent_run_dir,
                                source_root=loc.source_root))
    return out


def empty_tables() -> dict[str, Any]:
    """Every table with no rows (the exact ``*_df`` schemas)."""
    import polars as pl

    from ..checks import schema

    # the models' schemas from their check plans (rivumi_analysis.checks): no pandera, and no
    # replay engine for the states columns (replay.vectorised.STATE_COLUMNS, the same;
    # tests/test_checks.py)
    return {t: pl.DataFrame(schema=schema(SPECS[t].schema)) for t in TABLES}


@functools.cache
def schema_blobs() -> dict[str, bytes]:
    """Every table's exact schema as polars IPC bytes of its empty frame (kept in the
    store's manifest: :func:`store.read.table_schema` reads them back without pandera)."""
    import io

    out = {}
    for table, df in empty_tables().items():
        buf = io.BytesIO()
        df.write_ipc(buf)
        out[table] = buf.getvalue()
    return out


def build_frames(runs: Sequence[RunData]) -> dict[str, Any]:
    """Every table (polars DataFrames, validated) of some already read runs, in their order."""
    from ..tables._common import quarantine_frame
    from ..tables.approvals import approvals_frame
    from ..tables.drift import drift_frame
    from ..tables.events import events_frame
    from ..tables.forks import forks_frame
    from ..tables.manifests import manifests_frame
    from ..tables.messages import messages_frame
    from ..tables.model_calls import model_calls_frame
    from ..tables.runs import runs_frame
    from ..tables.states import replay_run, states_df
    from ..tables.tool_calls import tool_calls_frame
    from ..tables.usage import usage_frame
    from ..tables.verifications import verifications_frame

    runs = list(runs)
    if not runs:
        return empty_tables()
    with gc_paused():
        # one reference replay per run serves drift and forks (each loader alone replays
        # the run itself); states come from the vectorised engine, as states_df's
        replays = [replay_run(r) for r in runs if r.kind != "external"]
        tables = {
            "runs": runs_frame(runs),
            "events": events_frame(runs),
            "quarantine": quarantine_frame(runs),
            "manifests": manifests_frame(runs),
            "tool_calls": tool_calls_frame(runs),
            "approvals": approvals_frame(runs),
            "model_calls": model_calls_frame(runs),
            "usage": usage_frame(runs),
            "verifications": verifications_frame(runs),
            "states": states_df(runs),
            "drift": drift_frame(replays),
            "forks": forks_frame(replays),
            "messages": messages_frame(runs),
        }
    return {t: tables[t] for t in TABLES}


# --- one read per run for every table ---------------------------------------------------------

HELD_LOCKS_EVERY = 64
"""``/proc/locks`` is read once per this many runs (as the audit does), not once per run."""


def read_for_tables(loc: RunLocation, *, events_prefix: Any = None,
                    decoded_out: list[Any] | None = None,
                    held_locks: frozenset[str] | None = None) -> RunData:
    """One read of a run that every table can be built from (:func:`chunk_frames`).

    The audit's reading (``read_run(clean=True)``: every file read, a clean native log kept
    as ``cleanlog.CleanLog`` columns with no per-event object) with its documents parsed
    whole (``whole_docs=True``: ``manifests``, ``messages``, ``usage``, ``drift`` and
    ``runs`` read more of ``session.json`` than the audit keeps; the msgspec twin of the
    manifest as the audit decides it). ``events_prefix`` and ``decoded_out`` as for
    ``read_run`` (a run with a prefix is read exactly).
    """
    return read_run(loc.run_dir, is_subagent=loc.is_subagent, parent_run_dir=loc.parent_run_dir,
                    source_root=loc.source_root, events_prefix=events_prefix,
                    decoded_out=decoded_out, clean=True, held_locks=held_locks,
                    whole_docs=True)


def read_runs_for_tables(locations: Iterable[RunLocation | str]) -> list[RunData]:
    """:func:`read_for_tables` of every location (a string is a top-level run directory)."""
    from ..read.incremental import proc_locked_keys

    out = []
    held: frozenset[str] | None = None
    with gc_paused():
        for i, loc in enumerate(locations):
            if isinstance(loc, str):
                loc = RunLocation(loc)
            if i % HELD_LOCKS_EVERY == 0:
                held = proc_locked_keys()
            out.append(read_for_tables(loc, held_locks=held))
    return out


def chunk_frames(runs: Sequence[RunData], *,
                 stages: dict[str, float] | None = None) -> dict[str, Any]:
    """Every table of runs read by :func:`read_for_tables`; equal to :func:`build_frames` of
    the same runs read exactly (``tests/test_store_chunk.py``). Each table comes from its
    registry entry's chunk builder (``tables.registry``: ``TableSpec.build``, after the tables
    it ``needs``).

    A clean log feeds ``events`` (``events_df``'s columns), ``states``, ``drift`` and
    ``forks`` (``tables.replayed.replay_tables``: one vectorised engine pass on its columns)
    and the six derived tables (each table's column builder over the log's envelopes and
    parsed ``data``, ``tables._common.derived_frame``) without an object per event or a row
    dict; ``runs`` takes the audit record of the
    clean reading and the first/last event times of the events table.
    Every other run is read exactly, as the loaders do. ``stages``: CPU seconds are added
    per stage (for ``benchmarks/store_cpu_split.py``).
    """
    runs = list(runs)
    if not runs:
        return empty_tables()
    clock = time.process_time
    last = clock()

    def done(stage: str) -> None:  # CPU seconds per stage (benchmarks/store_cpu_split.py)
        nonlocal last
        now = clock()
        if stages is not None:
            stages[stage] = stages.get(stage, 0.0) + now - last
        last = now

    tables: dict[str, Any] = {}
    with gc_paused():
        for spec in build_order():
            if spec.name in tables:  # built by the pass of a table before it
                continue
            built = spec.builder()(runs, **{n: tables[n] for n in spec.needs})
            if not isinstance(built, dict):
                built = {spec.name: built}
            tables.update(built)
            done("+".join(built))
    return {t: tables[t] for t in TABLES}


def build_tables(locations: Sequence[RunLocation | str]) -> dict[str, Any]:
    """Every table for a chunk of runs, reading each run once (:func:`read_for_tables`,
    :func:`chunk_frames`); pure (writes nothing).

    Args:
        locations: ``RunLocation`` values from discovery (or run directory strings).

    Returns:
        Table name -> ``pyarrow.Table`` with exactly the columns and types of the matching
        ``*_df`` loader, rows in the order of ``locations`` (``runs`` sorted by ``run_dir``).
        ``forks`` link rows are resolved within the chunk only (the store resolves them
        fleet-wide when it reads them).

    >>> t = build_tables(["tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e"])
    >>> t["events"].num_rows, t["runs"].num_rows, sorted(t) == sorted(TABLES)
    (50, 1, True)
    """
    return {t: df.to_arrow() for t, df in chunk_frames(read_runs_for_tables(locations)).items()}


# --- the one writer -------------------------------------------------------------------------

def _portable_type(dt: Any) -> Any:
    import polars as pl

    if isinstance(dt, pl.Datetime):
        return pl.Datetime("us", dt.time_zone or "UTC")
    if isinstance(dt, pl.Duration):
        return pl.Int64  # microseconds
    if isinstance(dt, (pl.List, pl.Array)):
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


@functools.lru_cache(maxsize=512)
def _portable_cast(dt: Any) -> tuple[bool, Any]:
    """``(is a duration, the portable type)`` of ``dt``, or ``(False, None)`` when ``dt`` is
    portable already (the dtype comparisons cost ~0.3 ms per 46-column frame uncached)."""
    import polars as pl

    want = _portable_type(dt)
    if isinstance(dt, pl.Duration):
        return True, want
    return False, (want if want != dt else None)


def portable(df: Any) -> Any:
    """Cast every column to a type polars, DuckDB and Spark all read from Parquet."""
    import polars as pl

    casts = []
    # (df.dtypes, not df.schema: ~12 us against ~0.7 ms for a 46-column frame)
    for name, dt in zip(df.columns, df.dtypes, strict=True):
        duration, want = _portable_cast(dt)
        if duration:
            casts.append(pl.col(name).dt.total_microseconds().alias(name))
        elif want is not None:
            casts.append(pl.col(name).cast(want))
    return df.with_columns(casts) if casts else df


def with_kind(df: Any, kinds: Mapping[str, str], *, kmap: Any = None) -> Any:
    """Add (or fill) the ``kind`` partition column from each row's run (``kmap``: the
    :func:`_kind_frame` of ``kinds``, when the caller made it once for several tables)."""
    import polars as pl

    if "kind" in df.columns:
        return df.with_columns(pl.col("kind").fill_null("unknown"))
    if "run_dir" not in df.columns:
        return df.with_columns(pl.lit("unknown").alias("kind"))
    if kmap is None:
        kmap = _kind_frame(kinds)
    return df.join(kmap, on="run_dir", how="left", maintain_order="left").with_columns(
        pl.col("kind").fill_null("unknown"))


def _kind_frame(kinds: Mapping[str, str]) -> Any:
    """``kinds`` as a frame to join on ``run_dir``."""
    import polars as pl

    from ..tables._common import rows_frame

    # keyed as the tables show run_dir (a folder name that is not UTF-8 with U+FFFD)
    return rows_frame({"run_dir": list(kinds), "kind": list(kinds.values())},
                      {"run_dir": pl.String, "kind": pl.String}).unique("run_dir", keep="first")


def _plain_arrow(tbl: Any) -> Any:
    """Arrow view/large types -> the plain ones every Parquet reader maps."""
    target = _plain_schema(tbl.schema)
    if target is None:
        return tbl
    import pyarrow as pa

    # Table.cast(target) without its Python loop of casts: from_arrays casts each column whose
    # type differs (a column of the right type stays as it is: same chunks, same buffers)
    return pa.Table.from_arrays(tbl.columns, schema=target)


@functools.lru_cache(maxsize=256)
def _plain_schema(schema: Any) -> Any:
    """The schema :func:`_plain_arrow` casts a table of ``schema`` to, or None to keep it (made
    once per schema: ~0.8 ms for a 46-column table)."""
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

    target = pa.schema([pa.field(f.name, plain(f.type)) for f in schema])
    return target if target != schema else None


def file_digest(path: str) -> str:
    """BLAKE2b of a file's bytes (the store's damage check)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _kinds_from(tables: Mapping[str, Any]) -> dict[str, str]:
    runs = tables.get("runs")
    if runs is None:
        return {}
    df = _polars(runs)
    if not df.height or "kind" not in df.columns:
        return {}
    return dict(zip(df["run_dir"].to_list(), df["kind"].fill_null("unknown").to_list(),
                    strict=True))


def _polars(t: Any) -> Any:
    import polars as pl

    return t if isinstance(t, pl.DataFrame) else pl.from_arrow(t)


def _by_kind(df: Any) -> dict[Any, Any]:
    """``df`` split on its ``kind`` column (row order kept); a frame of one kind is itself
    (``partition_by`` copies every column even then: ~50 ms per 1,000 runs' tables)."""
    kinds = df.get_column("kind").unique(maintain_order=True)
    if len(kinds) == 1:
        return {(kinds[0],): df}
    return df.partition_by("kind", as_dict=True, maintain_order=True)


def write_parts(tables: Mapping[str, Any], out_dir: str | os.PathLike[str], key: str, *,
                kinds: Mapping[str, str] | None = None, metadata: Mapping[str, str] | None = None,
                transform: Any = None, keep_empty: bool = False,
                before_rename: BeforeRename | None = None) -> dict[str, Any]:
    """Write tables as Parquet parts ``OUT/<table>/kind=<kind>/part-<key>.parquet``.

    Args:
        tables: table name -> ``pyarrow.Table`` or polars DataFrame.
        out_dir: the dataset folder (created if needed).
        key: the part name (``[A-Za-z0-9_.-]+``); the same key overwrites the same files.
        kinds: ``run_dir`` -> run kind for tables without a ``kind`` column (default: from
            ``tables["runs"]``).
        metadata: extra key/value metadata stored in every file.
        transform: optional ``f(table, polars_df) -> polars_df`` applied before writing
            (``export --redact`` uses it).
        keep_empty: write one empty file under ``kind=none`` for a table with no rows, so its
            schema stays readable (``export`` does); by default such a table writes nothing.
        before_rename: passed to :func:`write_atomically` for every file (crash tests).

    Returns:
        ``{"key": key, "files": [{"table", "kind", "path", "rows", "bytes", "blake2b"}]}``
        with ``path`` relative to ``out_dir``.
    """
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    if not _KEY_RE.match(key):
        raise ValueError(f"part key must match [A-Za-z0-9_.-]+, not {key!r}")
    out = os.fspath(out_dir)
    kinds = dict(kinds) if kinds is not None else _kinds_from(tables)
    kmap = None
    files: list[dict[str, Any]] = []
    # each file is encoded, fsynced, renamed and hashed by one of WRITE_THREADS threads
    # (pyarrow's writer and fsync release the GIL) while this thread prepares the next one;
    # at most WRITE_THREADS files wait, and their records keep this order
    pending: deque[Any] = deque()
    lookup = _kind_lookup(kinds)
    with ThreadPoolExecutor(max_workers=WRITE_THREADS) as pool:
        for table, t in tables.items():
            df = portable(_polars(t))
            # (the join only where the rows' runs have several kinds, or one is not in kinds)
            groups = _kind_groups(df, lookup) if transform is None else None
            if groups is None:
                if kmap is None and "kind" not in df.columns and "run_dir" in df.columns:
                    kmap = _kind_frame(kinds)
                df = with_kind(df, kinds, kmap=kmap)
                if transform is not None:
                    df = transform(table, df)
                groups = _by_kind(df) if df.height else {("none",): df}
            elif not df.height:
                groups = {("none",): df}
            if not df.height and not keep_empty:
                continue
            meta = {b"rivumi_analysis.schema_version": str(SCHEMA_VERSION).encode(),
                    b"rivumi_analysis.table": table.encode(),
                    b"rivumi_analysis.version": __version__.encode(),
                    **{k.encode(): v.encode() for k, v in (metadata or {}).items()}}
            for gkey, part in groups.items():
                kind = str(gkey[0] if isinstance(gkey, tuple) else gkey)
                # polars' oldest Arrow types (large strings/lists): one conversion to the plain
                # types below instead of string views converted twice (the same table)
                arrow = part.to_arrow(compat_level=_oldest_arrow())
                if "kind" in part.columns:
                    arrow = arrow.remove_column(arrow.schema.get_field_index("kind"))
                arrow = _plain_arrow(arrow)
                arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}),
                                                       **meta})
                pending.append(pool.submit(_write_file, arrow, out, table, kind, key,
                                           part.height, before_rename))
                while len(pending) > WRITE_THREADS:
                    files.append(pending.popleft().result())
        files.extend(f.result() for f in pending)
    return {"key": key, "files": files}


def _kind_lookup(kinds: Mapping[str, str]) -> Mapping[str, str] | None:
    """``kinds`` itself when a table shows every ``run_dir`` of it as it is (no lone
    surrogate, which :func:`_kind_frame` shows as U+FFFD) and every kind is a string, else
    None (:func:`_kind_groups` leaves such a chunk to the join)."""
    if not all(isinstance(k, str) for k in kinds.values()):
        return None
    try:
        "".join(kinds).encode()
    except (UnicodeEncodeError, TypeError):
        return None
    return kinds


def _kind_groups(df: Any, lookup: Mapping[str, str] | None) -> dict[Any, Any] | None:
    """``df`` split as :func:`with_kind` then :func:`_by_kind` split it (each part keeps a
    ``kind`` column of its own, which the writer drops), without the join where it is not
    needed: a ``kind`` column with no null is split as it is; a table whose runs all have one
    kind is that kind whole, in one chunk per column as the join leaves it (the writer's
    pages depend on the chunks). None: the join decides (nulls, or several kinds among the rows of
    a table without a ``kind`` column). Few polars calls: each costs ~0.1 ms or more."""
    if "kind" in df.columns:
        col = df.get_column("kind")
        if not df.height or col.null_count():
            return None
        if col.n_unique() == 1:
            return {(col[0],): df}
        return df.partition_by("kind", as_dict=True, maintain_order=True)
    if "run_dir" not in df.columns:
        return {("unknown",): df}
    import polars as pl

    col = df.get_column("run_dir")
    if lookup is None or col.dtype != pl.String:
        return None
    found = {"unknown" if r is None else lookup.get(r, "unknown")
             for r in col.unique().to_list()}
    # (the join's rows come in one chunk per column: the same chunks, the same Parquet pages)
    return {(found.pop(),): df.rechunk()} if len(found) == 1 else None


WRITE_THREADS = 2
"""Threads writing a part's files (:func:`write_parts`)."""

BeforeRename = Callable[[str], None]
"""``before_rename(temp_path)``: called by :func:`write_atomically` once the temporary file
is written and fsynced, before its rename (the store's ``part_temp_written`` cut point)."""


def _write_file(arrow: Any, out: str, table: str, kind: str, key: str,
                rows: int, before_rename: BeforeRename | None = None) -> dict[str, Any]:
    """Write one part file atomically and describe it.

    The file is encoded in memory and written once by :func:`write_atomically`: a part is
    durable before any manifest can name it (the manifest is written after every part's
    record is back).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rel = os.path.join(table, f"kind={kind}", f"part-{key}.parquet")
    sink = pa.BufferOutputStream()
    pq.write_table(arrow, sink, compression="zstd", coerce_timestamps="us",
                   allow_truncated_timestamps=False)
    data = sink.getvalue()
    return {"table": table, "kind": kind, "path": rel, "rows": rows,
            "bytes": data.size,
            "blake2b": write_atomically(os.path.join(out, rel), data, before_rename=before_rename)}


def write_atomically(path: str, data: Any, *, before_rename: BeforeRename | None = None) -> str:
    """Write ``data`` (bytes-like) to ``path`` durably and atomically; return its BLAKE2b.

    The digest is taken from the bytes in memory (never read back). The file is written once
    under a temporary name, fsynced and renamed in, so a reader sees the old file or the whole
    new one and a manifest written afterwards never names a file that is not on disk.

    Args:
        path: the file to write (its folder is created if needed).
        data: the bytes (any bytes-like object, e.g. a ``pyarrow.Buffer``).
        before_rename: test hook called with the temporary file's path between its fsync
            and its rename (the crash tests kill the process there).

    Returns:
        The BLAKE2b (16-byte digest, hex) of ``data``.
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.tmp")
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    if before_rename is not None:
        before_rename(tmp)
    os.replace(tmp, path)
    return digest


def _oldest_arrow() -> Any:
    """polars' oldest Arrow compatibility level (large strings and lists, no views)."""
    import polars as pl

    return pl.CompatLevel.oldest()
