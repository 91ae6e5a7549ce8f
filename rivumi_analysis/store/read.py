"""Reading the store: lazy scans with pushdown, and eager tables equal to a cold load."""

from __future__ import annotations

import io
import os
from typing import Any

import polars as pl

from .build import empty_tables

_SCHEMAS: dict[str, dict[str, pl.DataType]] = {}
_FROM_MANIFEST: dict[tuple[str, bytes], dict[str, pl.DataType]] = {}


def table_schema(table: str, m: Any = None) -> dict[str, pl.DataType]:
    """The exact polars schema of a table's ``*_df`` loader: from the manifest ``m`` when it
    records it (no pandera import: a fresh process's warm load stays cheap), else from the
    pandera models (``build.empty_tables``)."""
    blob = (m.schemas or {}).get(table) if m is not None else None
    if blob is not None:
        key = (table, blob)
        if key not in _FROM_MANIFEST:
            _FROM_MANIFEST[key] = dict(pl.read_ipc(io.BytesIO(blob)).schema)
        return _FROM_MANIFEST[key]
    if not _SCHEMAS:
        _SCHEMAS.update({t: dict(df.schema) for t, df in empty_tables().items()})
    return _SCHEMAS[table]


def _file_scan(path: str, kind: str, schema: dict[str, pl.DataType],
               live: list[str] | None) -> pl.LazyFrame:
    """One part file as the table's exact schema. The store's files are written by
    ``write_parts`` (portable types, ``kind`` as the partition), so every column is cast
    back without reading the file's own schema first (a cast to the same type is free).
    Nothing read back is validated again: the rows were validated when built and the files
    are checked (size, mtime, inode; BLAKE2b with ``verify`` or after a failed read)."""
    lf = pl.scan_parquet(path, hive_partitioning=False)
    if live is not None:  # a part some of whose runs were superseded by a later part
        try:
            lf = lf.filter(pl.col("run_dir").is_in(live))
        except UnicodeEncodeError:  # a run folder name that is not UTF-8
            lf = lf.filter(pl.col("run_dir").is_in(shown(live)))
    return lf.select([pl.lit(kind, dtype=dt).alias(name) if name == "kind"
                      else pl.col(name).cast(dt) for name, dt in schema.items()])


def read_parts(store: Any, m: Any, table: str, *, parts: list[str] | None = None,
               lazy: bool = False, columns: list[str] | None = None) -> Any:
    """The rows of ``table`` held by the live runs of some parts (default: all parts)."""
    schema = table_schema(table, m)
    wanted = set(parts) if parts is not None else None
    scans = []
    live_cache: dict[str, list[str] | None] = {}
    for key, f in m.files(table):
        if wanted is not None and key not in wanted:
            continue
        if key not in live_cache:
            live = m.live_runs(key)
            live_cache[key] = None if len(live) == len(m.parts[key]["runs"]) else live
        scans.append(_file_scan(os.path.join(store.directory, f["path"]), f["kind"], schema,
                                live_cache[key]))
    if not scans:
        lf = pl.LazyFrame(schema=schema)
    else:
        lf = pl.concat(scans, how="vertical") if len(scans) > 1 else scans[0]
    if table == "forks":
        lf = resolve_fork_links(lf, store, m)
    if columns is not None:
        lf = lf.select(columns)
    return lf if lazy else lf.collect()


def shown(run_dirs: list[str]) -> list[str]:
    """Run folders as the tables show them: a name that is not UTF-8 (``os.listdir``'s
    surrogate escapes) with U+FFFD, as ``runs_df`` does (Arrow strings are UTF-8 only).

    >>> shown(["/r/a", "/r/b" + chr(0xDCFF)])
    ['/r/a', '/r/b\ufffd']
    """
    from ..read.decode import _without_lone_surrogates

    return _without_lone_surrogates(list(run_dirs))


def ordered(df: pl.DataFrame, table: str, m: Any) -> pl.DataFrame:
    """Rows in the order a cold load gives them (discovery order; ``runs`` by ``run_dir``)."""
    if not df.height:
        return df
    if table == "runs":
        return df.sort("run_dir", maintain_order=True)
    blocks = _blocks(df.get_column("run_dir"), 0)
    return _by_blocks(df, blocks, _block_ranks(blocks, m), dropped=False)


def read_table(store: Any, m: Any, table: str) -> pl.DataFrame:
    """``table`` as its ``*_df`` loader returns it: ``ordered(read_parts(store, m, table))``.

    A part some of whose runs a later refresh re-read into another part is read whole here
    (no row filter in the scan): its dead rows are dropped by the same one gather that puts
    the rows in discovery order, over blocks of rows (a run's rows are contiguous in a part's
    file), not over every row (after a refresh that touched every part, the row filter and
    a second full pass to order cost more than the read itself).
    """
    if table in ("runs", "forks") or not _utf8(m.order):  # (forks: its links resolved first)
        return ordered(read_parts(store, m, table), table, m)
    schema = table_schema(table, m)
    files = m.files(table)
    if not files:
        return pl.DataFrame(schema=schema)
    frames = pl.collect_all([_file_scan(os.path.join(store.directory, f["path"]), f["kind"],
                                        schema, None) for _key, f in files])
    live: dict[str, list[str] | None] = {}
    parts = []
    offset = 0
    for (key, _f), df in zip(files, frames, strict=True):
        if key not in live:
            runs = m.live_runs(key)
            live[key] = None if len(runs) == len(m.parts[key]["runs"]) else runs
        blocks = _blocks(df.get_column("run_dir"), offset)
        if live[key] is not None:  # a part holding superseded runs: only its live blocks
            blocks = blocks.filter(pl.col("value").is_in(live[key]))
        parts.append(blocks)
        offset += df.height
    blocks = pl.concat(parts)
    df = pl.concat(frames, how="vertical")
    return _by_blocks(df, blocks, _block_ranks(blocks, m), dropped=blocks.get_column(
        "len").sum() != df.height)


def _utf8(names: list[str]) -> bool:
    try:
        "".join(names).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _blocks(run_dir: pl.Series, offset: int) -> pl.DataFrame:
    """The runs of equal ``run_dir`` of a column: ``value``, ``len`` and ``start`` (the row
    of its first row, plus ``offset``)."""
    blocks = run_dir.rle().struct.unnest()
    lens = blocks.get_column("len").cast(pl.Int64)
    return blocks.with_columns(lens.alias("len"), (lens.cum_sum() - lens + offset).alias("start"))


def _block_ranks(blocks: pl.DataFrame, m: Any) -> pl.Series:
    """Each block's run's position in discovery order (``m.order``)."""
    rank = {r: i for i, r in enumerate(m.order)}
    try:
        return blocks.get_column("value").replace_strict(rank, return_dtype=pl.UInt32)
    except UnicodeEncodeError:  # a run folder name that is not UTF-8
        rank = {r: i for i, r in enumerate(shown(m.order))}
        return blocks.get_column("value").replace_strict(rank, return_dtype=pl.UInt32)


def _by_blocks(df: pl.DataFrame, blocks: pl.DataFrame, ranks: pl.Series, *,
               dropped: bool) -> pl.DataFrame:
    """The rows of ``blocks`` (``dropped``: not all of ``df``'s rows) sorted by ``ranks``
    (stably: a stable sort of the blocks by rank is the stable sort of their rows by rank,
    a block's rows keeping their order), in one gather; ``df`` itself when nothing moves."""
    if not dropped and ranks.is_sorted():
        return df
    moves = blocks.select("start", "len").with_columns(ranks.alias("rank")).sort(
        "rank", maintain_order=True)
    # blocks that follow each other in ``df`` too make one segment (after a refresh that
    # re-read a few runs of every part, a few hundred segments for 10,000 runs)
    cont = pl.col("start") == (pl.col("start") + pl.col("len")).shift(1)
    segs = (moves.with_columns((~cont.fill_null(False)).cum_sum().alias("seg"))
            .group_by("seg", maintain_order=True)
            .agg(pl.col("start").first(), pl.col("len").sum()))
    if not segs.height:
        return df.clear()
    if segs.height <= SLICED_SEGMENTS:
        # zero-copy slices, then one copy into one chunk: ~4x cheaper than a gather by row
        # index (10,000 runs' events with 300 segments: 0.04 vs 0.15 s)
        return pl.concat([df.slice(s, n) for s, n in segs.select("start", "len").iter_rows()],
                         how="vertical", rechunk=True)
    idx = segs.select(pl.int_ranges("start", pl.col("start") + pl.col("len"),
                                    dtype=pl.Int64).explode()).to_series()
    # one chunk first: a gather over many chunks costs ~10x more per column here
    return df.rechunk()[idx]


SLICED_SEGMENTS = 4096
"""Up to this many segments to move, :func:`read_table` copies slices, beyond by a gather."""


def resolve_fork_links(lf: pl.LazyFrame, store: Any, m: Any) -> pl.LazyFrame:
    """Fill the fork links' source columns fleet-wide (parts resolve them per chunk only).

    The rule is ``forks_df``'s: the source is the first non-external run (discovery order)
    whose folder name is the link's ``source_run_id``; the fork point matches when exactly
    one source event has the fork-point sequence, with the fork-point event type, and the
    source has ``events_included`` events up to it.
    """
    links = lf.filter(pl.col("row_kind") == "fork_link").select(
        "run_dir", "source_run_id", "fork_point_sequence", "fork_point_event_type",
        "events_included").collect()
    if not links.height:
        return lf
    by_name: dict[str, str] = {}
    for r in m.order:
        if m.runs.get(r, {}).get("kind") != "external":
            by_name.setdefault(os.path.basename(os.path.normpath(r)), r)
    src_dirs = {by_name[s] for s in links["source_run_id"].to_list() if s in by_name}
    ev = (read_parts(store, m, "events", lazy=True)
          .filter(pl.col("run_dir").is_in(sorted(src_dirs)))
          .select("run_dir", "sequence", "event_type").collect()) if src_dirs else None
    rows = []
    for link in links.iter_rows(named=True):
        src = by_name.get(link["source_run_id"]) if link["source_run_id"] else None
        n = link["fork_point_sequence"]
        matches = None
        if src is not None and n is not None and ev is not None:
            mine = ev.filter(pl.col("run_dir") == src)
            at = mine.filter(pl.col("sequence") == n)
            matches = (at.height == 1 and at["event_type"][0] == link["fork_point_event_type"]
                       and mine.filter(pl.col("sequence") <= n).height
                       == link["events_included"])
        rows.append({"run_dir": link["run_dir"], "row_kind": "fork_link",
                     "__src": src, "__found": src is not None, "__matches": matches})
    fix = pl.LazyFrame(rows, schema={"run_dir": pl.String, "row_kind": pl.String,
                                     "__src": pl.String, "__found": pl.Boolean,
                                     "__matches": pl.Boolean})
    cols = lf.collect_schema().names()
    is_link = pl.col("row_kind") == "fork_link"
    return (lf.join(fix, on=["run_dir", "row_kind"], how="left", maintain_order="left")
            .with_columns(
                pl.when(is_link).then(pl.col("__src")).otherwise(pl.col("source_run_dir"))
                .alias("source_run_dir"),
                pl.when(is_link).then(pl.col("__found")).otherwise(pl.col("source_found"))
                .alias("source_found"),
                pl.when(is_link).then(pl.col("__matches"))
                .otherwise(pl.col("fork_point_matches")).alias("fork_point_matches"))
            .select(cols))
