"""Where an export on an engine writes: a local (shared) folder or an object-store prefix.

Parts are always written by the one writer (``store.build.write_parts``). For a URI
destination (``s3://bucket/prefix``, ``gs://...``) each task writes its parts into a
temporary local folder and then uploads every file under the same relative path; an object
PUT is atomic and names are deterministic, so a retried task overwrites its own objects.
Filesystems come from ``read.uri`` (registered ones travel to the workers with the tasks).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..read.uri import is_uri, resolve


def _fs(out: str) -> tuple[Any, str]:
    fs, path = resolve(out)
    return fs, path.rstrip("/")


@contextmanager
def staging(out: str) -> Iterator[str]:
    """A folder for ``write_parts``: ``out`` itself when local, else a temporary folder whose
    files :func:`upload` copies to the URI."""
    if not is_uri(out):
        yield out
        return
    tmp = tempfile.mkdtemp(prefix="rivumi-parts-")
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def upload(staged: str, out: str, rel_paths: list[str]) -> None:
    """Copy staged files to ``out`` (nothing to do when ``out`` is local)."""
    if not is_uri(out):
        return
    fs, base = _fs(out)
    for rel in rel_paths:
        with open(os.path.join(staged, rel), "rb") as src, \
                fs.open_output_stream(f"{base}/{rel}") as dst:
            shutil.copyfileobj(src, dst, 8 * 1024 * 1024)


def put_text(out: str, name: str, text: str) -> None:
    """Write a small file at ``out/name`` last-writer-wins (atomic rename when local)."""
    if not is_uri(out):
        tmp = os.path.join(out, f".{name}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, os.path.join(out, name))
        return
    fs, base = _fs(out)
    with fs.open_output_stream(f"{base}/{name}") as dst:
        dst.write(text.encode("utf-8"))


def read_parquet(out: str, rel_paths: list[str], columns: list[str] | None = None) -> Any:
    """The rows of some part files as one polars DataFrame."""
    import polars as pl

    if not rel_paths:
        return None
    if not is_uri(out):
        lf = pl.scan_parquet([os.path.join(out, p) for p in rel_paths])
        return (lf.select(columns) if columns else lf).collect()
    import pyarrow.parquet as pq

    fs, base = _fs(out)
    return pl.concat([pl.from_arrow(pq.read_table(f"{base}/{p}", filesystem=fs, columns=columns))
                      for p in rel_paths], how="vertical")


def check_out(out: str) -> None:
    """``export.check_out`` for a URI: the prefix is empty or holds a previous export."""
    from ..export import MARKER, ExportError
    from ..export import check_out as check_local

    if not is_uri(out):
        check_local(out)
        return
    from pyarrow import fs as pafs

    fs, base = _fs(out)
    try:
        info = fs.get_file_info(base)
        if info.type == pafs.FileType.File:
            raise ExportError(f"--out {out} exists and is not a prefix")
        entries = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except OSError as exc:
        raise ExportError(f"--out {out}: cannot list it ({exc})") from exc
    names = {e.base_name for e in entries}
    if names and MARKER not in names:
        raise ExportError(f"--out {out} is not empty and holds no previous export")


def prepare_out(out: str) -> None:
    """``export._prepare_out`` for a URI: drop a previous export's tables and marker."""
    from ..export import MARKER, TABLES, _prepare_out

    if not is_uri(out):
        _prepare_out(out)
        return
    from pyarrow import fs as pafs

    check_out(out)
    fs, base = _fs(out)
    for t in TABLES:
        fs.delete_dir_contents(f"{base}/{t}", missing_dir_ok=True)
    for name in (MARKER, "_parts.json"):
        if fs.get_file_info(f"{base}/{name}").type == pafs.FileType.File:
            fs.delete_file(f"{base}/{name}")
