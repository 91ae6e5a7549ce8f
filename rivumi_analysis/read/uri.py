"""Run roots on object storage: ``s3://``, ``gs://`` (and any ``pyarrow.fs`` scheme) sources.

Used only for sources written as URIs; local paths never come here (their code path is
unchanged). ``file://`` URIs are turned into local paths, so every local rule applies to them
(``O_NOFOLLOW``, symlinked folders skipped). For object stores the same rules as on disk hold
where they mean something: reads are bounded (the size is checked before a byte is read and
the read stops at the limit), nothing is ever written, and there are no symlinks, FIFOs or
file locks to honour (a writer lock is never seen as held).

Filesystems come from :func:`register_filesystem` (e.g. an ``S3FileSystem`` with an
``endpoint_override``) or else from ``pyarrow.fs.FileSystem.from_uri`` with the environment's
credentials. They are picklable, so the Ray engine hands them to its workers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .io import DEFAULT_READ_LIMIT, FileRead

_READ_BLOCK = 8 * 1024 * 1024
_registry: dict[str, Any] = {}
_lock = threading.Lock()


def is_uri(path: str) -> bool:
    """Whether ``path`` is a URI source (``scheme://...``).

    >>> is_uri("s3://bucket/runs"), is_uri("/srv/runs"), is_uri("runs")
    (True, False, False)
    """
    return "://" in path


def file_uri_to_path(path: str) -> str:
    """``file:///a/b`` -> ``/a/b``; anything else unchanged.

    >>> file_uri_to_path("file:///srv/runs"), file_uri_to_path("s3://b/k")
    ('/srv/runs', 's3://b/k')
    """
    if path.startswith("file://"):
        from urllib.parse import unquote, urlsplit

        parts = urlsplit(path)
        return unquote(parts.path) or "/"
    return path


def register_filesystem(prefix: str, filesystem: Any) -> None:
    """Read URIs starting with ``prefix`` (e.g. ``"s3://"`` or ``"s3://bucket/"``) through
    ``filesystem`` (a ``pyarrow.fs.FileSystem``). The longest matching prefix wins."""
    with _lock:
        _registry[prefix] = filesystem


def registered_filesystems() -> dict[str, Any]:
    """A copy of the registrations (the Ray engine ships them to its workers)."""
    with _lock:
        return dict(_registry)


def unregister_filesystem(prefix: str) -> None:
    with _lock:
        _registry.pop(prefix, None)


def resolve(uri: str) -> tuple[Any, str]:
    """``(filesystem, path inside it)`` for a URI.

    >>> from pyarrow.fs import LocalFileSystem
    >>> register_filesystem("mem://", LocalFileSystem())
    >>> resolve("mem://tmp/x")[1]
    'tmp/x'
    >>> unregister_filesystem("mem://")
    """
    with _lock:
        best = max((p for p in _registry if uri.startswith(p)), key=len, default=None)
        if best is not None:
            fs = _registry[best]
            return fs, uri.split("://", 1)[1]
    from pyarrow import fs as pafs

    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


# --- bounded reads --------------------------------------------------------------------------

def _kind(fs_mod: Any, info: Any) -> str:
    if info.type == fs_mod.FileType.NotFound:
        return "missing"
    if info.type == fs_mod.FileType.File:
        return "file"
    if info.type == fs_mod.FileType.Directory:
        return "dir"
    return "other"


def read_file(uri: str, limit: int = DEFAULT_READ_LIMIT) -> FileRead:
    """Read one object like ``_io.read_file`` reads a file: size checked first, read bounded.

    The identity is ``(size, mtime_ns, 0, 0)`` (object stores have no inode).
    """
    from pyarrow import fs as pafs

    try:
        fs, path = resolve(uri)
        info = fs.get_file_info(path)
    except (OSError, ValueError) as exc:
        return FileRead("unreadable", error=str(exc))
    kind = _kind(pafs, info)
    if kind == "missing":
        return FileRead("missing")
    if kind != "file":
        return FileRead("not_regular", size=None)
    size = info.size or 0
    identity = (size, info.mtime_ns or 0, 0, 0)
    if size > limit:
        return FileRead("too_large", size=size, identity=identity)
    try:
        chunks = []
        remaining = limit + 1
        with fs.open_input_stream(path) as fh:
            while remaining > 0:
                chunk = fh.read(min(remaining, _READ_BLOCK))
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
    except FileNotFoundError:
        return FileRead("missing")
    except OSError as exc:
        return FileRead("unreadable", size=size, error=str(exc))
    data = b"".join(chunks)
    if len(data) > limit:
        return FileRead("too_large", size=len(data), identity=identity)
    return FileRead("ok", data=data, size=len(data), identity=identity)


def lstat_identity(uri: str) -> tuple[int, int, int, int] | None:
    """``(size, mtime_ns, 0, 0)`` of an object, or None."""
    from pyarrow import fs as pafs

    try:
        fs, path = resolve(uri)
        info = fs.get_file_info(path)
    except (OSError, ValueError):
        return None
    if _kind(pafs, info) == "missing":
        return None
    return (info.size or 0, info.mtime_ns or 0, 0, 0)


def list_dir(uri: str) -> list[tuple[str, str]] | None:
    """``(name, kind)`` of the entries directly below ``uri`` (sorted), None if unlistable.

    ``kind`` is ``file``, ``dir`` or ``other``.
    """
    from pyarrow import fs as pafs

    infos = _entries(uri)
    if infos is None:
        return None
    out = [(info.base_name, _kind(pafs, info)) for info in infos]
    return sorted(o for o in out if o[0])


def _entries(uri: str, *, allow_not_found: bool = True) -> list[Any] | None:
    """The ``FileInfo`` of every entry directly below ``uri`` (one listing request), or None
    when it cannot be listed."""
    from pyarrow import fs as pafs

    try:
        fs, path = resolve(uri)
        return fs.get_file_info(pafs.FileSelector(path.rstrip("/"),
                                                  allow_not_found=allow_not_found,
                                                  recursive=False))
    except (OSError, ValueError):
        return None


def object_fingerprint(run_dir: str) -> tuple[bytes, int] | None:
    """What a run folder on object storage looks like now: for every object directly below it,
    its name, kind, size and modification time, in one listing request (object stores give
    no inode or ctime; ``pyarrow.fs`` gives no ETag). Returns the encoded listing and the
    newest modification time (ns), or None when it cannot be listed.

    A rewrite within the store's timestamp granularity (one second on S3) keeping the size
    shows only through the racy window: a run whose newest object is younger than
    ``read.incremental.RACY_SECONDS`` when read is read again next time.
    """
    import msgspec
    from pyarrow import fs as pafs

    infos = _entries(run_dir, allow_not_found=False)
    if infos is None:
        return None
    rows = sorted((i.base_name, _kind(pafs, i), i.size or 0, i.mtime_ns or 0)
                  for i in infos if i.base_name)
    newest = max((r[3] for r in rows), default=0)
    try:
        return msgspec.msgpack.encode(rows), newest
    except UnicodeEncodeError:  # a name that is not UTF-8
        return msgspec.msgpack.encode([(os.fsencode(r[0]), *r[1:]) for r in rows]), newest


def tree_bytes(uri: str) -> int:
    """Bytes of the objects directly below ``uri`` (for progress figures)."""
    from pyarrow import fs as pafs

    try:
        fs, path = resolve(uri)
        infos = fs.get_file_info(pafs.FileSelector(path.rstrip("/"), allow_not_found=True))
    except (OSError, ValueError):
        return 0
    return sum(i.size or 0 for i in infos if i.type == pafs.FileType.File)


def listing(run_dir: str) -> tuple[str, ...]:
    entries = list_dir(run_dir)
    return tuple(name for name, _k in entries) if entries else ()


def writer_lock(run_dir: str) -> tuple[str | None, bool]:
    """Token of ``.writer.lock``; an object store has no locks, so never held."""
    import re

    fr = read_file(_join(run_dir, ".writer.lock"), limit=4096)
    if fr.status != "ok" or fr.data is None:
        return None, False
    m = re.search(rb"token=([0-9A-Za-z_-]+)", fr.data)
    return (m.group(1).decode("ascii") if m else None), False


@dataclass(frozen=True, slots=True)
class UriIO:
    """The four file operations ``read_run`` needs, for URI run directories."""

    read_file: Any = read_file
    lstat_identity: Any = lstat_identity
    listing: Any = listing
    writer_lock: Any = writer_lock


URI_IO = UriIO()


# --- discovery ------------------------------------------------------------------------------

def discover_uris(uris: Iterable[str], *, max_depth: int, run_markers: tuple[str, ...],
                  add_run: Callable[[str, bool, str | None, str], None],
                  add_skipped: Callable[[str, str], None], seen: set[str]) -> None:
    """Walk URI sources like ``discovery._walk`` walks folders (dot-names skipped, depth
    bounded, subagents below a run), reporting runs (``run_dir``, is a subagent, parent,
    source root) and skipped paths to the callbacks. The source root is the source URI (its
    parent when the source is itself a run), as for local folders: ``run_path``.

    Raises:
        SourceError: a source that does not exist or is an object, not a prefix.
    """
    from ..errors import SourceError

    root = ""

    def walk(uri: str, depth: int, *, is_top: bool) -> None:
        entries = list_dir(uri)
        if entries is None:
            add_skipped(uri, "unreadable")
            return
        if is_top and not entries:
            lone = read_file(uri, limit=0)
            missing = lone.status == "missing"
            raise SourceError(
                f"source does not exist: {uri}" if missing else
                f"source is not a directory: {uri}",
                code="source_missing" if missing else "source_not_directory",
                where=uri, hint="a URI source is a prefix holding run folders")
        names = {n for n, _k in entries}
        if any(m in names for m in run_markers):
            if uri not in seen:
                seen.add(uri)
                run_root = uri.rsplit("/", 1)[0] if is_top else root
                add_run(uri, False, None, run_root)
                subs(uri, entries, 0, run_root)
            return
        for name, kind in entries:
            if name.startswith("."):
                continue
            child = _join(uri, name)
            if kind == "dir":
                if depth + 1 > max_depth:
                    add_skipped(child, "depth_limit")
                else:
                    walk(child, depth + 1, is_top=False)
            elif kind == "other":
                add_skipped(child, "not_regular")

    def subs(run_dir: str, entries: list[tuple[str, str]], depth: int, run_root: str) -> None:
        if ("subagents", "dir") not in entries:
            return
        sub = _join(run_dir, "subagents")
        children = list_dir(sub)
        if children is None:
            add_skipped(sub, "unreadable")
            return
        for name, kind in children:
            if name.startswith(".") or kind != "dir":
                if kind == "other" and not name.startswith("."):
                    add_skipped(_join(sub, name), "not_regular")
                continue
            child = _join(sub, name)
            if depth + 1 > max_depth:
                add_skipped(child, "depth_limit")
                continue
            grand = list_dir(child)
            if grand is None:
                add_skipped(child, "unreadable")
                continue
            if child in seen:
                continue
            seen.add(child)
            add_run(child, True, run_dir, run_root)
            subs(child, grand, depth + 1, run_root)

    for uri in uris:
        root = uri.rstrip("/")
        walk(root, 0, is_top=True)


# --- listing files --------------------------------------------------------------------------

def read_listing(listing: str) -> list[tuple[str, bool, str | None]]:
    """``(run_dir, is_subagent, parent_run_dir)`` from a listing file: Parquet
    (``.parquet``/``.pq``) or CSV with a ``path`` column (optional ``is_subagent`` and
    ``parent_run_dir`` columns), local or a URI. Duplicates are dropped; ``file://`` paths
    become local paths.

    Raises:
        SourceError: the file is unreadable or has no ``path`` column.
    """
    from ..errors import SourceError

    try:
        table = _read_table(listing)
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError)
        raise SourceError(f"cannot read listing {listing}: {exc}", code="source_missing",
                          where=listing, hint="a Parquet or CSV file with a path column"
                          ) from None
    if "path" not in table.column_names:
        raise SourceError(f"listing {listing} has no 'path' column", code="source_missing",
                          where=listing, hint="name the run directory column 'path'")
    paths = table.column("path").to_pylist()
    subs = (table.column("is_subagent").to_pylist() if "is_subagent" in table.column_names
            else [False] * len(paths))
    parents = (table.column("parent_run_dir").to_pylist()
               if "parent_run_dir" in table.column_names else [None] * len(paths))
    out = []
    seen: set[str] = set()
    for p, sub, par in zip(paths, subs, parents, strict=True):
        if not isinstance(p, str) or not p or p in seen:
            continue
        seen.add(p)
        out.append((file_uri_to_path(p), bool(sub), par if isinstance(par, str) and par
                    else None))
    return out


def _read_table(listing: str) -> Any:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    local = file_uri_to_path(listing)
    parquet = local.lower().endswith((".parquet", ".pq"))
    if is_uri(local):
        fs, path = resolve(local)
        if parquet:
            return pq.read_table(path, filesystem=fs)
        with fs.open_input_stream(path) as fh:
            return pacsv.read_csv(fh)
    return pq.read_table(local) if parquet else pacsv.read_csv(local)
