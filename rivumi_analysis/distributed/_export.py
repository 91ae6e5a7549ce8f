"""Every table of a fleet as one Parquet dataset, built chunk by chunk on Ray.

Each task reads its runs once (``store.build.read_runs``), builds every exported table with
the function the process engine's ``export`` uses (``export.build_tables``: the store's
``build_frames`` plus ``messages``), prepares each table exactly as ``export`` does (portable
types, ``kind``, ``--redact``) and writes it with the one writer, ``store.build.write_parts``:
``OUT/<table>/kind=<kind>/part-<chunk key>.parquet`` (``export`` writes the same layout with
one key, ``0``). Names are deterministic, so a retried task overwrites its own files. The
output may be an object-store prefix (``s3://...``): parts are then staged locally and
uploaded under the same names (see ``_dest``).

The driver receives only small per-table manifests (files, rows, column types, the empty
schema) plus each chunk's fork links, then:

* resolves fork links fleet-wide (a fork's source is usually in another chunk) with the rule
  of ``tables.forks`` and rewrites only the ``forks`` parts whose link columns change;
* writes one empty file per table without rows (as ``export`` does), ``_parts.json``, and
  ``_dataset.json`` last, only when every chunk succeeded (a dataset without it is
  incomplete).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pyarrow as pa

from ._chunks import Chunk, working_dir

PARTS = "_parts.json"

RESULT_SCHEMA = pa.schema([
    ("key", pa.string()), ("table", pa.string()), ("payload", pa.string()),
    ("schema", pa.binary()), ("runs", pa.int64()), ("bytes", pa.int64()),
    ("seconds", pa.float64()),
])
"""One row per table of a chunk (``table`` empty: the chunk's run kinds and fork links)."""

LINK_COLUMNS = ("run_dir", "source_run_id", "fork_point_sequence", "fork_point_event_type",
                "events_included")


def export_chunk_task(batch: pa.Table, out: str, fault: str | None = None,
                      filesystems: dict[str, Any] | None = None,
                      redact_tops: list[str] | None = None) -> pa.Table:
    """One chunk in: build every table, write its parts (one table at a time), return the
    parts' manifests (see :data:`RESULT_SCHEMA`)."""
    import polars as pl

    from ..export import _kinds_of, build_tables, redact
    from ..store.build import portable, read_runs, with_kind, write_parts
    from ._dest import staging, upload
    from ._tasks import chunk_of, maybe_fault, run_bytes, use_filesystems

    t0 = time.perf_counter()
    use_filesystems(filesystems)
    chunk = chunk_of(batch)
    with working_dir(chunk.base):
        runs = read_runs(chunk.locations())
        nbytes = sum(run_bytes(d) for d in chunk.run_dirs)
    tables = build_tables(runs)
    kinds = _kinds_of(runs)
    forks = tables["forks"]
    links = forks.filter(pl.col("row_kind") == "fork_link").select(LINK_COLUMNS).to_dicts()
    rows: list[dict[str, Any]] = []
    for i, (name, df) in enumerate(tables.items()):
        df = with_kind(portable(df), kinds)
        if redact_tops is not None:
            df = redact(name, df, redact_tops)
        with staging(out) as staged:
            files = write_parts({name: df}, staged, chunk.key)["files"]
            upload(staged, out, [f["path"] for f in files])
        columns = {k: str(v) for k, v in df.schema.items() if k != "kind"}
        rows.append({"key": chunk.key, "table": name,
                     "payload": json.dumps({"files": files, "columns": columns}),
                     "schema": df.head(0).to_arrow().schema.serialize().to_pybytes()})
        if i == 0:
            maybe_fault(fault, chunk)  # the kill test dies after one part is on disk
    secs = time.perf_counter() - t0
    rows.append({"key": chunk.key, "table": "", "schema": b"",
                 "payload": json.dumps({"kinds": kinds, "links": links,
                                        "dirs": [r.run_dir for r in runs]})})
    for r in rows:
        r.update(runs=len(chunk), bytes=nbytes, seconds=secs)
    return pa.Table.from_pylist(rows, schema=RESULT_SCHEMA)


class Collected:
    """What the driver keeps per chunk: table manifests, run kinds, fork links."""

    def __init__(self) -> None:
        self.files: dict[str, list[dict[str, Any]]] = {}   # key -> file entries (+ "key")
        self.columns: dict[str, dict[str, str]] = {}        # table -> columns
        self.schemas: dict[str, bytes] = {}                 # table -> empty Arrow schema
        self.kinds: dict[str, str] = {}
        self.links: list[dict[str, Any]] = []
        self.chunk_dirs: dict[str, list[str]] = {}          # key -> run_dir of each run
        self.task_seconds = 0.0
        self.bytes = 0

    def add(self, key: str, rows: list[dict[str, Any]]) -> None:
        files: list[dict[str, Any]] = []
        for r in rows:
            payload = json.loads(r["payload"])
            if r["table"]:
                files += [{**f, "key": key} for f in payload["files"]]
                self.columns.setdefault(r["table"], payload["columns"])
                self.schemas.setdefault(r["table"], r["schema"])
            else:
                self.kinds.update(payload["kinds"])
                self.links += payload["links"]
                self.chunk_dirs[key] = payload["dirs"]
        self.files[key] = files
        self.task_seconds += rows[0]["seconds"]
        self.bytes += rows[0]["bytes"]


def resolve_fork_links(out: str, got: Collected, order: list[str],
                       rel: Any = None) -> None:
    """Fill the fork links' source columns fleet-wide and rewrite the ``forks`` parts whose
    values change (the rule of ``tables.forks``: the source is the first non-external run in
    discovery ``order`` whose folder name is ``source_run_id``; the fork point matches when
    exactly one source event has its sequence, with its event type, and the source has
    ``events_included`` events up to it). ``rel`` maps an absolute ``run_dir`` to the one
    written (``--redact``)."""
    import polars as pl

    from ..store.build import write_parts
    from ._dest import read_parquet, staging, upload

    if not got.links:
        return
    rel = rel or (lambda p: p)
    by_name: dict[str, str] = {}
    for r in order:
        if got.kinds.get(r) != "external":
            by_name.setdefault(os.path.basename(os.path.normpath(r)), r)
    fix: dict[str, tuple[str | None, bool, bool | None]] = {}
    sources = {by_name[x["source_run_id"]] for x in got.links
               if x["source_run_id"] in by_name}
    events = None
    if sources:
        paths = [f["path"] for fs in got.files.values() for f in fs if f["table"] == "events"]
        events = read_parquet(out, paths, ["run_dir", "sequence", "event_type"])
        if events is not None:
            events = events.filter(pl.col("run_dir").is_in(sorted(rel(s) for s in sources)))
    for link in got.links:
        src = by_name.get(link["source_run_id"]) if link["source_run_id"] else None
        n = link["fork_point_sequence"]
        matches = None
        if src is not None and n is not None and events is not None:
            mine = events.filter(pl.col("run_dir") == rel(src))
            at = mine.filter(pl.col("sequence") == n)
            matches = (at.height == 1 and at["event_type"][0] == link["fork_point_event_type"]
                       and mine.filter(pl.col("sequence") <= n).height
                       == link["events_included"])
        fix[rel(link["run_dir"])] = (rel(src) if src is not None else None, src is not None,
                                     matches)
    want = pl.DataFrame(
        {"run_dir": list(fix), "row_kind": ["fork_link"] * len(fix),
         "__src": [v[0] for v in fix.values()], "__found": [v[1] for v in fix.values()],
         "__matches": [v[2] for v in fix.values()]},
        schema={"run_dir": pl.String, "row_kind": pl.String, "__src": pl.String,
                "__found": pl.Boolean, "__matches": pl.Boolean})
    for key, files in got.files.items():
        for i, f in enumerate(files):
            if f["table"] != "forks":
                continue
            df = read_parquet(out, [f["path"]])
            if "row_kind" not in df.columns:
                continue
            new = _apply_links(df, want)
            if new.equals(df):
                continue
            with staging(out) as staged:
                written = write_parts(
                    {"forks": new.with_columns(pl.lit(f["kind"]).alias("kind"))}, staged,
                    key)["files"]
                upload(staged, out, [w["path"] for w in written])
            [entry] = written
            files[i] = {**entry, "key": key}


def _apply_links(df: Any, want: Any) -> Any:
    import polars as pl

    cols = df.columns
    is_link = pl.col("row_kind") == "fork_link"
    j = df.join(want, on=["run_dir", "row_kind"], how="left", maintain_order="left")
    updates = []
    for col, new in (("source_run_dir", "__src"), ("source_found", "__found"),
                     ("fork_point_matches", "__matches")):
        if col in cols:
            updates.append(pl.when(is_link).then(pl.col(new)).otherwise(pl.col(col))
                           .cast(df.schema[col]).alias(col))
    return j.with_columns(updates).select(cols)


def finish(out: str, got: Collected, chunks: list[Chunk], *, redacted: bool, engine: str,
           complete: bool) -> dict[str, Any]:
    """Write one empty file per table without rows (as ``export`` does), ``_parts.json``,
    and ``_dataset.json`` last (when ``complete``); return the dataset manifest."""
    import polars as pl

    from .._version import __version__
    from ..export import MARKER, TABLES
    from ..store.build import SCHEMA_VERSION, write_parts
    from ._dest import put_text, staging, upload

    files = [f for fs in got.files.values() for f in fs]
    tables: dict[str, Any] = {}
    for t in TABLES:
        counts: dict[str, int] = {}
        for f in files:
            if f["table"] == t:
                counts[f["kind"]] = counts.get(f["kind"], 0) + f["rows"]
        if not counts and complete and t in got.schemas:
            schema = pa.ipc.read_schema(pa.py_buffer(got.schemas[t]))
            empty = pl.from_arrow(schema.empty_table())
            with staging(out) as staged:
                written = write_parts({t: empty}, staged, "0", keep_empty=True)["files"]
                upload(staged, out, [w["path"] for w in written])
            counts = {f["kind"]: 0 for f in written}
            files += [{**f, "key": "0"} for f in written]
        tables[t] = {"rows": sum(counts.values()), "partitions": counts,
                     "columns": got.columns.get(t, {})}
    put_text(out, PARTS, json.dumps(
        {"chunks": [{"key": c.key, "runs": list(c.run_dirs)} for c in chunks],
         "files": sorted(files, key=lambda f: f["path"])}, indent=1) + "\n")
    manifest = {"schema_version": SCHEMA_VERSION, "toolkit_version": __version__,
                "redacted": redacted, "partitioning": ["table", "kind"], "tables": tables,
                "engine": engine, "parts": len({f["key"] for f in files})}
    if complete:
        put_text(out, MARKER, json.dumps(manifest, indent=1) + "\n")
    return manifest
