"""Task functions run on workers (pure Python + pyarrow; no Ray import needed here).

Every task turns one chunk row into a small Arrow table, using the same per-run function as
the local executor (``audit.audit_chunk``), so both engines give identical records.
"""

from __future__ import annotations

import os
import time
from typing import Any

import msgspec
import pyarrow as pa

from ._chunks import Chunk, working_dir

FAULT_ENV = "RIVUMI_TEST_FAULT"
"""Test hook, read on the driver and handed to the tasks (so it reaches any cluster):
``kill-once:<marker file>`` makes the first task that creates the marker ``os._exit`` after its
work (Ray then retries it); ``kill-always:<text>`` kills every task of a chunk holding a run
whose path contains ``<text>`` (the chunk then fails for good and must be reported)."""


def fault_from_env() -> str | None:
    return os.environ.get(FAULT_ENV) or None


def maybe_fault(fault: str | None, chunk: Chunk) -> None:
    """Apply the test hook (see :data:`FAULT_ENV`); a no-op when ``fault`` is None."""
    if not fault:
        return
    mode, _, arg = fault.partition(":")
    if mode == "kill-once":
        try:
            fd = os.open(arg, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return
        os.write(fd, chunk.key.encode())
        os.close(fd)
        os._exit(17)
    if mode == "kill-always" and any(arg in d for d in chunk.run_dirs):
        os._exit(17)


def chunk_of(batch: pa.Table) -> Chunk:
    if batch.num_rows != 1:
        raise ValueError(f"a task gets exactly one chunk, not {batch.num_rows}")
    return Chunk.from_item(batch.to_pylist()[0])


def audit_records(chunk: Chunk) -> list[dict[str, Any]]:
    """Audit records of a chunk's runs, by the local executor's own chunk function."""
    from ..audit import audit_chunk
    from ..read.discovery import RunLocation

    locs = [RunLocation(d, s, p) for d, s, p in zip(chunk.run_dirs, chunk.subagent,
                                                     chunk.parents, strict=True)]
    with working_dir(chunk.base):
        return audit_chunk(locs)


def run_bytes(run_dir: str) -> int:
    """Bytes of the regular files at the top of a run folder (for progress only)."""
    if "://" in run_dir:
        from ..read.uri import tree_bytes

        return tree_bytes(run_dir)
    total = 0
    try:
        with os.scandir(run_dir) as it:
            for e in it:
                try:
                    if e.is_file(follow_symlinks=False):
                        total += e.stat(follow_symlinks=False).st_size
                except OSError:
                    pass
    except OSError:
        return 0
    return total


AUDIT_RESULT_SCHEMA = pa.schema([
    ("key", pa.string()), ("run_dir", pa.string()), ("bytes", pa.int64()),
    ("seconds", pa.float64()), ("record", pa.binary()),
])


def use_filesystems(filesystems: dict[str, Any] | None) -> None:
    """Register the driver's object-storage filesystems in this worker (see ``read.uri``)."""
    if filesystems:
        from ..read.uri import register_filesystem

        for prefix, fs in filesystems.items():
            register_filesystem(prefix, fs)


def audit_chunk_task(batch: pa.Table, fault: str | None = None,
                     filesystems: dict[str, Any] | None = None) -> pa.Table:
    """One chunk in, one row per run out: its audit record as JSON bytes, the bytes of the
    run's files and the chunk's compute seconds (for throughput figures)."""
    t0 = time.perf_counter()
    use_filesystems(filesystems)
    chunk = chunk_of(batch)
    records = audit_records(chunk)
    enc = msgspec.json.Encoder()
    sizes = [run_bytes(os.path.join(chunk.base, d)) for d in chunk.run_dirs]
    out = pa.table({
        "key": [chunk.key] * len(records),
        "run_dir": [r["run_dir"] for r in records],
        "bytes": sizes,
        "seconds": [time.perf_counter() - t0] * len(records),
        "record": [enc.encode(r) for r in records],
    }, schema=AUDIT_RESULT_SCHEMA)
    maybe_fault(fault, chunk)
    return out


def audit_record_schema() -> pa.Schema:
    """Arrow schema of an audit record row (the fields of ``audit.RECORD_FIELDS``)."""
    from ..audit import RECORD_FIELDS

    types = {
        "schema_version": pa.int64(), "reasons": pa.list_(pa.string()),
        "warnings": pa.list_(pa.string()), "lines": pa.int64(), "blank_lines": pa.int64(),
        "events": pa.int64(), "quarantined_lines": pa.int64(), "first_sequence": pa.int64(),
        "last_sequence": pa.int64(), "manifest_last_event_sequence": pa.int64(),
        "replay_accepts": pa.bool_(),
    }
    return pa.schema([(f, types.get(f, pa.string())) for f in RECORD_FIELDS])


def audit_rows_task(batch: pa.Table, fault: str | None = None,
                    filesystems: dict[str, Any] | None = None) -> pa.Table:
    """One chunk in, its audit records out as typed columns (for ``audit_dataset``)."""
    use_filesystems(filesystems)
    chunk = chunk_of(batch)
    records = audit_records(chunk)
    maybe_fault(fault, chunk)
    return pa.Table.from_pylist([_int64_safe(r) for r in records], schema=audit_record_schema())


_I64 = (-(2**63), 2**63 - 1)


def _int64_safe(rec: dict[str, Any]) -> dict[str, Any]:
    """A sequence past int64 (legal JSON, read as a Python int) is null in Arrow columns."""
    lo, hi = _I64
    if all(not isinstance(v, int) or lo <= v <= hi for v in rec.values()):
        return rec
    return {k: None if isinstance(v, int) and not lo <= v <= hi else v for k, v in rec.items()}
