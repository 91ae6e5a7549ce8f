"""The incremental Parquet store: a dataset of every table outside the sources, kept fresh.

Layout (the one :mod:`~rivumi_analysis.store.build` writes; ``export`` writes the same)::

    STORE/_store.msgpack                       the manifest (written last, atomically)
    STORE/.lock                                refreshers take it (flock); readers never do
    STORE/<table>/kind=<kind>/part-<key>.parquet

The manifest records, per run, the identity of everything it was built from: the audit
fingerprint of the run folder (:func:`run_fingerprint`: name, mode, size, mtime, ctime, inode
and device of every entry, and whether a process holds the writer lock) and
the toolkit's code fingerprint (toolkit, schema and cache versions and the package's own
files); and, per part file, its size, mtime, inode and BLAKE2b.

Opening the store stats the fleet and re-reads only runs whose fingerprint changed (new,
grown, rewritten, truncated, replaced by a symlink, lock taken or released), runs that were
volatile when read (a writer held the lock, the read was not stable, or a file was modified
within ``read.incremental.RACY_SECONDS``), and runs whose part file is damaged. Their rows go to a new
*delta* part (key ``g<generation>-<n>``); a run's rows are valid only in the part the
manifest names for it (an overlay: scans of a part that holds superseded runs filter on the
live ``run_dir`` set). Removed runs leave the manifest. Small parts are compacted from
Parquet (not from the sources) once they pile up. Files no manifest names are deleted after
a grace period (a reader may still hold the previous manifest).

Crash safety: parts are new files (fresh keys, temp file + rename), the manifest is
replaced atomically last, so a refresh killed at any point leaves the previous version
readable; the next refresh reuses the same generation key and overwrites the leftovers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import functools
import hashlib
import itertools
import os
import pickle
import re
import shutil
import stat
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, TypeVar

import msgspec

from ..errors import StoreError
from ..read.discovery import DEFAULT_MAX_DEPTH, RunLocation, Source, discover, normalize_sources
from ..read.incremental import RACY_SECONDS, Fingerprint, code_fingerprint
from ..read.incremental import proc_locked_keys as _held_keys
from ..read.snapshot import _lock_key, gc_paused
from .build import (
    TABLES,
    BeforeRename,
    chunk_frames,
    file_digest,
    schema_blobs,
    write_atomically,
    write_parts,
)
from .housekeeping import enforce_cap
from .paths import ENV_DIR, LOCK, MANIFEST, default_store_root, manifest_doc, store_key, touch

STORE_FORMAT = 3
"""Layout of the manifest (bump when it changes shape; an old store is rebuilt)."""

PART_RUNS = 1000
"""At most this many runs per part written by one refresh."""
COMPACT_MIN_PARTS = 8
"""Compact when more than this many small parts (< PART_RUNS / 4 live runs) exist."""
GC_GRACE_SECONDS = 300.0
"""Unreferenced files younger than this are kept (a reader may hold the old manifest)."""
LOCK_TIMEOUT_SECONDS = 120.0
MIN_CHUNK_RUNS = 32
"""The fewest runs a chunk holds when runs are spread over several jobs."""
PREFIX_DIR = "_prefix"
"""Decoded ``events.jsonl`` prefixes of live runs (``_prefix/part-<key>.pickle``)."""
AUDIT_DIR = "_audit"
"""Each part's audit records (``_audit/part-<key>.pickle``: run_dir -> record), what
``audit`` serves from the store: the rows of the ``runs`` table's record columns (a full part)
or the audit's own reading (a part written by an audit, which holds no table)."""
SIDE_DIRS = (PREFIX_DIR, AUDIT_DIR)

T = TypeVar("T")

_PART_RE = re.compile(r"\.?part-g(\d+)-")

ENV_ENABLE = "RIVUMI_ANALYSIS_STORE"
_OFF = frozenset({"0", "off", "false", "no"})


class StoreWarning(UserWarning):
    """The store could not be used; the tables were loaded in memory instead."""


Hook = Callable[[str], None]


def store_enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether loaders read through the store by default (``$RIVUMI_ANALYSIS_STORE=0`` off).

    >>> store_enabled({}), store_enabled({"RIVUMI_ANALYSIS_STORE": "off"})
    (True, False)
    """
    env = os.environ if environ is None else environ
    return env.get(ENV_ENABLE, "1").strip().lower() not in _OFF


def _inside(path: str, top: str) -> bool:
    path, top = os.path.realpath(path), os.path.realpath(top)
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def _code() -> str:
    """The toolkit's code fingerprint for the store (audit record and table schema versions)."""
    from ..audit import SCHEMA_VERSION as AUDIT_SCHEMA
    from .build import SCHEMA_VERSION

    return code_fingerprint(f"audit{AUDIT_SCHEMA}|store{SCHEMA_VERSION}|{STORE_FORMAT}")


# --- fingerprints ----------------------------------------------------------------------------

_STAT_KEY = attrgetter("st_mode", "st_size", "st_mtime_ns", "st_ctime_ns", "st_ino", "st_dev")
S_ISREG = stat.S_ISREG

CONTENT_FILES = frozenset({"session.json", "request.json", "events.jsonl", "result.json",
                           "checkpoint.json", "backend-result.json", ".writer.lock"})
"""The entries of a run folder whose content the toolkit reads (``read.snapshot.read_run``);
of every other entry only the name counts (``resume``'s atomic-leftover rule; subagent
folders are runs of their own)."""


LIGHT_TABLES = frozenset({"events", "quarantine"})
"""The tables whose rows depend only on the files of :data:`LIGHT_FILES` (``events.jsonl``;
``session.json`` and ``checkpoint.json`` for the run's kind and id, ``read.snapshot._kind``
and ``_run_id``), on whether ``backend-result.json`` exists (``_kind``: any entry of that
name makes the run external; ``read_file`` never follows a symlink, so its presence in the
listing is what counts) and on the run's location: a load of only these tables may check
just those (:func:`light_fingerprint`) instead of the full stat pass."""

LIGHT_FILES = ("checkpoint.json", "events.jsonl", "session.json")
_LIGHT_SLOT = {name: i for i, name in enumerate(LIGHT_FILES)}


@dataclass(frozen=True, slots=True)
class RunFingerprint(Fingerprint):
    """:func:`run_fingerprint`'s result: the audit-style fingerprint plus ``light``, the
    :func:`light_fingerprint` of the same stats (taken in the same pass)."""

    light: bytes = b""


def _listing(run_dir: str, names: list[str] | None) -> list[str] | None:
    """``names`` (discovery's listing), else the folder's sorted listing; None: unlistable."""
    if names is not None:
        return names
    try:
        return sorted(os.listdir(run_dir))
    except OSError:
        return None


def _light_blob(keys: list[Any], backend: bool) -> bytes:
    """The light fingerprint's encoding: the stat key of each of :data:`LIGHT_FILES`
    (``None``: not in the listing; ``False``: listed but its ``lstat`` failed) and whether
    the listing holds ``backend-result.json`` (the one encoding both producers share)."""
    return msgspec.msgpack.encode([*keys, backend])


def light_fingerprint(run_dir: str, names: list[str] | None = None) -> bytes | None:
    """What a run's ``events`` and ``quarantine`` rows depend on (:data:`LIGHT_TABLES`): an
    ``lstat`` of each of :data:`LIGHT_FILES` the listing holds and whether it holds
    ``backend-result.json``; byte-identical to ``run_fingerprint(...).light`` for the same
    files. ``names``: discovery's listing (sorted); ``None``: not listable.

    >>> d = "tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e"
    >>> light_fingerprint(d) == run_fingerprint(d, frozenset()).light
    True
    """
    if "://" in run_dir:  # object storage: the whole listing (one request either way)
        fp = _object_fingerprint(run_dir)
        return None if fp is None else fp.light
    names = _listing(run_dir, names)
    if names is None:
        return None
    lstat = os.lstat
    base = run_dir if run_dir.endswith(os.sep) else run_dir + os.sep
    keys: list[Any] = []
    for name in LIGHT_FILES:
        if name not in names:
            keys.append(None)
            continue
        try:
            keys.append(_STAT_KEY(lstat(base + name)))
        except OSError:
            keys.append(False)
    return _light_blob(keys, "backend-result.json" in names)


def run_fingerprint(run_dir: str, held: frozenset[str],
                    names: list[str] | None = None) -> RunFingerprint | None:
    """What a run's rows depend on, from one listing of the run folder: the sorted entry
    names, and for the files the toolkit reads (:data:`CONTENT_FILES`) an ``lstat`` (mode,
    size, mtime, ctime, inode, device), plus whether a process holds ``.writer.lock``
    (``held``: ``read.incremental.proc_locked_keys()``). ``names``: the listing discovery already
    read (``discover(listings=...)``). ``None``: not listable. ``light``: the
    :func:`light_fingerprint` of the same stats (no extra system call).

    The audit cache's fingerprint also reads the lock file's content; the store does not,
    because any write to a file changes its ctime, which no process can set back (a content
    change with the same size and a restored mtime still shows).

    >>> fp = run_fingerprint("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e",
    ...                      frozenset())
    >>> fp is not None and fp.events_identity is not None
    True
    """
    if "://" in run_dir:
        return _object_fingerprint(run_dir)
    names = _listing(run_dir, names)
    if names is None:
        return None
    rows: list[Any] = []
    append = rows.append
    newest = 0
    events_identity = None
    lstat = os.lstat
    light: list[Any] = [None, None, None]  # (LIGHT_FILES)
    backend = False
    slot = _LIGHT_SLOT.get
    # called for every run on every open (10,000 runs: ~60,000 files): plain concatenation,
    # not os.path.join, and each entry's stat fields in one C-level call
    base = run_dir if run_dir.endswith(os.sep) else run_dir + os.sep
    for name in names:
        if name not in CONTENT_FILES:
            append(name)
            continue
        i = slot(name)
        if name == "backend-result.json":
            backend = True
        try:
            key = _STAT_KEY(lstat(base + name))  # mode, size, mtime, ctime, inode, device
        except OSError:
            append((name, None))
            if i is not None:
                light[i] = False
            continue
        if i is not None:
            light[i] = key
        append(name)
        append(key)
        if key[2] > newest:
            newest = key[2]
        if name == "events.jsonl":
            if S_ISREG(key[0]):
                events_identity = (key[4], key[5])
        elif name == ".writer.lock" and S_ISREG(key[0]):
            append(bool(held) and _lock_key(key[5], key[4]) in held)
    try:
        blob = msgspec.msgpack.encode(rows)
    except UnicodeEncodeError:  # an entry name that is not UTF-8: names as their bytes
        blob = msgspec.msgpack.encode([os.fsencode(r) if isinstance(r, str)
                                       else (os.fsencode(r[0]), *r[1:])
                                       if isinstance(r, tuple) and isinstance(r[0], str)
                                       else r for r in rows])
    return RunFingerprint(blob, newest, events_identity, _light_blob(light, backend))


def _object_fingerprint(run_dir: str) -> RunFingerprint | None:
    """:func:`run_fingerprint` of a run folder on object storage (a ``pyarrow.fs`` URI): every
    object's name, kind, size and modification time (``read.uri.object_fingerprint``); the
    light fingerprint is the same listing."""
    from ..read.uri import object_fingerprint

    got = object_fingerprint(run_dir)
    if got is None:
        return None
    blob, newest = got
    return RunFingerprint(blob, newest, None, blob)


# --- manifest --------------------------------------------------------------------------------

@dataclass(slots=True)
class Manifest:
    """What the store holds. ``runs``: run_dir -> entry; ``parts``: key -> part."""

    generation: int
    order: list[str]
    runs: dict[str, dict[str, Any]]
    parts: dict[str, dict[str, Any]]
    sources: list[str]
    max_depth: int
    discovery: dict[str, Any] | None = None
    """What the discovery behind ``order`` listed, with each folder's identity: re-used
    while none of them changed (:func:`_rediscover`)."""
    schemas: dict[str, bytes] | None = None
    """Each table's exact polars schema (an empty frame as polars IPC,
    :func:`store.build.schema_blobs`), so a warm read needs no pandera model (importing
    pandera and pandas costs ~0.3 s in a fresh process); ``None`` in older manifests."""

    def live_runs(self, key: str) -> list[str]:
        return [r for r in self.parts[key]["runs"] if self.runs.get(r, {}).get("part") == key]

    def files(self, table: str) -> list[tuple[str, dict[str, Any]]]:
        """``(part key, file entry)`` of every file of ``table``, in part order."""
        return [(key, f) for key, p in self.parts.items() for f in p["files"]
                if f["table"] == table]


def _encode_manifest(m: Manifest) -> bytes:
    doc = {"format": STORE_FORMAT, "code": _code(), "generation": m.generation,
           "order": m.order, "runs": m.runs, "parts": m.parts, "sources": m.sources,
           "max_depth": m.max_depth, "discovery": m.discovery, "schemas": m.schemas}
    try:
        body = msgspec.msgpack.encode(doc)
    except UnicodeEncodeError:  # a path that is not UTF-8 (msgpack strings are UTF-8)
        body = msgspec.msgpack.encode({**_with_paths(doc, _path_out), "fsnames": True})
    return hashlib.blake2b(body, digest_size=16).digest() + body


def _path_out(p: Any) -> Any:
    """A path for msgpack: as its bytes when it is not UTF-8 (``os.fsencode`` undoes the
    surrogate escapes ``os.listdir`` made of its undecodable bytes), else unchanged."""
    if isinstance(p, str) and not p.isascii():
        try:
            p.encode("utf-8")
        except UnicodeEncodeError:
            return os.fsencode(p)
    return p


def _path_in(p: Any) -> Any:
    return os.fsdecode(p) if isinstance(p, bytes) else p


def _with_paths(doc: dict[str, Any], f: Callable[[Any], Any]) -> dict[str, Any]:
    """``doc`` with ``f`` applied to every path in it: run folders (``order``, the keys of
    ``runs`` and their ``parent``/``root``, the runs of each part) and ``sources``."""
    return {**doc, "order": [f(r) for r in doc["order"]],
            "runs": {f(r): {**e, "parent": f(e.get("parent")), "root": f(e.get("root"))}
                     for r, e in doc["runs"].items()},
            "parts": {k: {**p, "runs": [f(r) for r in p["runs"]]}
                      for k, p in doc["parts"].items()},
            "sources": [f(s) for s in doc["sources"]],
            "discovery": None if doc.get("discovery") is None else {
                **doc["discovery"], "tops": [f(t) for t in doc["discovery"]["tops"]],
                "folders": [[f(x[0]), *x[1:]] for x in doc["discovery"]["folders"]],
                "unreadable": [f(x) for x in doc["discovery"].get("unreadable", [])],
                "runs": [[ident, [f(n) for n in names]]
                         for ident, names in doc["discovery"]["runs"]],
                "skipped": [[f(p), r] for p, r in doc["discovery"].get("skipped", ())],
                "root_used": f(doc["discovery"].get("root_used"))}}


def _decode_manifest(blob: bytes) -> Manifest | None:
    d = manifest_doc(blob)
    if d is None or d.get("format") != STORE_FORMAT or d.get("code") != _code():
        return None
    if d.get("fsnames"):
        d = _with_paths(d, _path_in)
    return Manifest(d["generation"], d["order"], d["runs"], d["parts"], d["sources"],
                    d["max_depth"], d.get("discovery"), d.get("schemas"))


# --- the store -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RefreshStats:
    """What one refresh did."""

    runs: int
    reread: int
    removed: int
    parts_written: int
    compacted: bool
    seconds: float
    incremental: int = 0
    """Runs whose grown ``events.jsonl`` was decoded from its first incomplete line."""


class Store:
    """A store folder. :meth:`refresh` brings it up to date; :meth:`manifest` reads it.

    Args:
        directory: the store folder (created on the first refresh).
        hook: test hook called at each named cut point of a refresh (crash tests).
    """

    CUT_POINTS = ("lock_taken", "part_temp_written", "part_written", "compacted",
                  "manifest_temp_written", "manifest_replaced", "gc_done")
    """Named cut points of a refresh, in order. ``part_temp_written``: a part file written
    and fsynced under its temporary name, not yet renamed (inside
    :func:`~rivumi_analysis.store.build.write_atomically`; reached by the chunks run in this
    process and by compaction, not by chunks run in worker processes or by an injected
    executor)."""

    def __init__(self, directory: str | os.PathLike[str], *, hook: Hook | None = None) -> None:
        self.directory = os.fspath(directory)
        self.hook = hook
        self.last_stats: RefreshStats | None = None

    # reading ------------------------------------------------------------------------------

    def manifest(self) -> Manifest | None:
        """The current manifest, or None when missing, damaged or from another toolkit."""
        return self._manifest_and_identity()[0]

    def _manifest_and_identity(self) -> tuple[Manifest | None, tuple[int, ...] | None]:
        """The manifest and the identity of the file it came from (inode, size, mtime,
        ctime: the manifest is only ever replaced by a rename, never written in place)."""
        try:
            with open(os.path.join(self.directory, MANIFEST), "rb") as fh:
                st = os.fstat(fh.fileno())
                return _decode_manifest(fh.read()), (st.st_ino, st.st_dev, st.st_size,
                                                     st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            return None, None

    def _manifest_identity(self) -> tuple[int, ...] | None:
        try:
            st = os.stat(os.path.join(self.directory, MANIFEST))
        except OSError:
            return None
        return st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns

    def path(self, rel: str) -> str:
        return os.path.join(self.directory, rel)

    def _file_intact(self, f: dict[str, Any], *, deep: bool = False) -> bool:
        try:
            st = os.lstat(self.path(f["path"]))
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_size != f["bytes"] or (
                st.st_mtime_ns, st.st_ino) != (f["mtime_ns"], f["ino"]):
            return False
        return not deep or file_digest(self.path(f["path"])) == f["blake2b"]

    def damaged_parts(self, m: Manifest, *, deep: bool = False) -> set[str]:
        """Parts with a file that is missing or changed (``deep``: BLAKE2b checked too)."""
        return {key for key, p in m.parts.items()
                if not all(self._file_intact(f, deep=deep) for f in p["files"])}

    # refreshing ---------------------------------------------------------------------------

    def _cut(self, point: str) -> None:
        if self.hook is not None:
            self.hook(point)

    def _before_rename(self) -> BeforeRename | None:
        """The atomic writer's ``part_temp_written`` cut (None without a hook: the writer
        then calls nothing)."""
        if self.hook is None:
            return None
        return lambda _tmp: self._cut("part_temp_written")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        fd = os.open(self.path(LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            deadline = time.monotonic() + LOCK_TIMEOUT_SECONDS
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StoreError(
                            f"store {self.directory} stayed locked for "
                            f"{LOCK_TIMEOUT_SECONDS:.0f} s", code="store_locked",
                            hint="another refresh is running (or hung); retry later") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)

    def _plan(self, m: Manifest | None, locs: list[RunLocation], fps: dict[str, Any],
              verify: bool, audit_only: bool = False) -> tuple[list[RunLocation], list[str]]:
        if m is None:
            return list(locs), []
        damaged = self.damaged_parts(m, deep=verify)
        todo = []
        for loc in locs:
            e = m.runs.get(loc.run_dir)
            fp = fps.get(loc.run_dir)
            if (not _entry_settled(e, loc, m.parts) or fp is None or e["fp"] != fp.blob
                    or e["part"] in damaged or not (audit_only or e.get("full", True))):
                todo.append(loc)
        present = {loc.run_dir for loc in locs}
        removed = [r for r in m.runs if r not in present]
        return todo, removed

    def refresh(self, locations: Sequence[RunLocation], *, sources: Sequence[str] = (),
                max_depth: int = DEFAULT_MAX_DEPTH, verify: bool = False,
                compact: bool = False, jobs: int | None = None,
                executor: ChunkExecutor | None = None,
                listings: dict[str, list[str]] | None = None,
                current: tuple[Manifest | None, tuple[int, ...] | None] | None = None,
                discovery: dict[str, Any] | None = None,
                held_locks: Callable[[], frozenset[str]] | None = None,
                audit_only: bool = False) -> Manifest:
        """Bring the store up to date with ``locations`` (the discovered fleet).

        Reads only what changed (see the module docstring); takes the lock only to write.
        ``verify`` also checks every part file's BLAKE2b (not only its size and mtime).
        ``compact`` also rewrites every part holding superseded rows, so the files hold
        exactly the live rows (for tools that read them directly, e.g. DuckDB).
        ``executor`` runs the chunks of runs to re-read (default :func:`local_executor`;
        the distributed engine passes one that runs :func:`run_chunk` on a cluster).
        ``listings``: the run folders' listings discovery read (not listed again).
        ``current``: the manifest and its file's identity as the caller read them before
        discovery (``_manifest_and_identity``): planned against when the file is still that
        one after the stat pass (not decoded again), and returned as that very object when
        nothing changed (the caller may already have read its parts, see :func:`open_store`).
        ``discovery``: what the discovery of ``locations`` listed (:func:`_discovery_memo`),
        recorded in the manifest written (the next open re-uses it while nothing changed).
        ``held_locks``: returns the held file locks the stat pass uses (default: read
        ``/proc/locks`` when the pass starts; :func:`open_store` reads them in a thread
        started before the manifest, see :class:`_HeldLocks`).
        ``audit_only``: bring only the audit records up to date (what ``audit`` reads): a run
        that must be read is read as the audit reads it and its part holds its record and no
        table (its entry is not ``full``); a table load's refresh reads such runs again.

        A first build of a large fleet starts its worker processes before the stat pass,
        so their start-up (imports) overlaps it (:func:`_early_pool`).
        """
        t0 = time.perf_counter()
        locs = list(locations)
        with _early_pool(*self._early_jobs(locs, jobs, executor, current),
                         audit_only=audit_only) as pool:
            return self._refresh(t0, locs, sources=sources, max_depth=max_depth,
                                 verify=verify, compact=compact, jobs=jobs, executor=executor,
                                 listings=listings, current=current, discovery=discovery,
                                 pool=pool, held_locks=held_locks, audit_only=audit_only)

    def _early_jobs(self, locs: list[RunLocation], jobs: int | None,
                    executor: ChunkExecutor | None,
                    current: tuple[Manifest | None, tuple[int, ...] | None] | None,
                    ) -> tuple[int, bool]:
        """``(jobs, whether to start them before the stat pass)``: yes for a first build (no
        manifest) by the local executor that runs its chunks in worker processes
        (``read.executor.pool_workers``; runs on local disk)."""
        from ..read.executor import on_object_storage, pool_workers

        n_jobs = pool_workers(len(locs), jobs)
        local = getattr(executor, "func", executor) in (None, local_executor)
        first = (current[0] is None) if current is not None else (
            self._manifest_identity() is None)
        return n_jobs, (local and first and n_jobs > 1 and not on_object_storage(locs[:1]))

    def _refresh(self, t0: float, locs: list[RunLocation], *, sources: Sequence[str],
                 max_depth: int, verify: bool, compact: bool, jobs: int | None,
                 executor: ChunkExecutor | None, listings: dict[str, list[str]] | None,
                 current: tuple[Manifest | None, tuple[int, ...] | None] | None,
                 discovery: dict[str, Any] | None, pool: Any,
                 held_locks: Callable[[], frozenset[str]] | None = None,
                 audit_only: bool = False) -> Manifest:
        """:meth:`refresh` (``pool``: worker processes already started, or None)."""
        order = [loc.run_dir for loc in locs]
        held = held_locks() if held_locks is not None else _held_keys()
        listings = listings or {}
        fps = {loc.run_dir: run_fingerprint(loc.run_dir, held, listings.get(loc.run_dir))
               for loc in locs}
        def up_to_date(m: Manifest | None, todo: list[Any], removed: Any) -> bool:
            if (m is not None and not todo and not removed and m.order == order
                    and not (compact and _dirty(m))):
                self.last_stats = RefreshStats(len(locs), 0, 0, 0, False,
                                               time.perf_counter() - t0)
                return True
            return False

        if current is None or current[1] is None or self._manifest_identity() != current[1]:
            m, ident = self._manifest_and_identity()
        else:
            m, ident = current
        todo, removed = self._plan(m, locs, fps, verify, audit_only)
        if up_to_date(m, todo, removed):
            assert m is not None
            if discovery is not None and discovery is not m.discovery and _more_trusted(
                    discovery, m.discovery):
                self._record_discovery(m, ident, discovery)
            return m
        with self._locked():
            self._cut("lock_taken")
            if ident is None or self._manifest_identity() != ident:
                # another refresher may have done the work meanwhile
                m = self.manifest()
                todo, removed = self._plan(m, locs, fps, verify, audit_only)
                if up_to_date(m, todo, removed):
                    return m
            gen = (m.generation if m is not None else self._newest_generation()) + 1
            runs = dict(m.runs) if m is not None else {}
            parts = dict(m.parts) if m is not None else {}
            for r in removed:
                runs.pop(r, None)
            written = 0
            incremental = 0
            for key, part, entries in self._write_chunks(gen, todo, fps, jobs,
                                                               executor, m, pool, audit_only):
                parts[key] = part
                # the light fingerprint of the very stats the entry's "fp" is (set here, not
                # by the chunk: executors and the distributed engine stay as they are)
                runs.update({r: {**e, "lfp": _fp_light(fps.get(r))} for r, e in entries.items()})
                incremental += sum(1 for e in entries.values() if e.get("incremental"))
                written += 1
                self._cut("part_written")
            new = Manifest(gen, order, runs, parts, list(sources), max_depth, discovery,
                           # (an audit's refresh imports no polars: the schemas are
                           # written by the next table load's refresh)
                           (m.schemas if m is not None else None) if audit_only
                           else schema_blobs())
            self._drop_dead_parts(new)
            compacted = self._maybe_compact(new, force=compact)
            if compacted:
                self._cut("compacted")
            self._write_manifest(new)
            self._gc(new)
            self._cut("gc_done")
        self.last_stats = RefreshStats(len(locs), len(todo), len(removed), written, compacted,
                                       time.perf_counter() - t0, incremental)
        return new

    def _record_discovery(self, m: Manifest, ident: tuple[int, ...] | None,
                          discovery: dict[str, Any]) -> None:
        """Record a discovery that can be re-used more than the one ``m`` holds (folders
        that have settled since), in a copy of ``m`` (same generation and parts): best
        effort, never waiting for the lock, never an error (a read-only store is served
        as it is). Readers of ``m`` lose nothing: the tables are the same."""
        try:
            fd = os.open(self.path(LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if ident is not None and self._manifest_identity() == ident:
                self._write_manifest(dataclasses.replace(m, discovery=discovery))
        except OSError:
            pass
        finally:
            os.close(fd)

    def _newest_generation(self) -> int:
        """The newest generation any part file on disk has (used without a valid manifest:
        an old toolkit's reader may still read the files its manifest names, so a rebuild
        never reuses their names)."""
        newest = 0
        for table in (*TABLES, *SIDE_DIRS):
            for _dirpath, _dirs, names in os.walk(self.path(table)):
                for name in names:
                    m = _PART_RE.match(name)
                    if m:
                        newest = max(newest, int(m.group(1)))
        return newest

    def _prefix_records(self, m: Manifest, key: str) -> dict[str, bytes]:
        """The stored prefixes of a part (empty when it has none or its file is damaged)."""
        f = next((f for f in m.parts.get(key, {}).get("files", ())
                  if f["table"] == PREFIX_DIR), None)
        if f is None or not self._file_intact(f):
            return {}
        try:
            with open(self.path(f["path"]), "rb") as fh:
                if file_digest(self.path(f["path"])) != f["blake2b"]:
                    return {}
                recs = pickle.load(fh)
        except Exception:  # a damaged cache file is a miss, never an error
            return {}
        return recs if isinstance(recs, dict) else {}

    def _audit_records(self, m: Manifest, key: str) -> dict[str, Any]:
        """The audit records of a part's runs (empty when its file is missing or damaged:
        :meth:`damaged_parts` then has the part re-read by the next refresh)."""
        f = next((f for f in m.parts.get(key, {}).get("files", ())
                  if f["table"] == AUDIT_DIR), None)
        if f is None or not self._file_intact(f):
            return {}
        try:
            with open(self.path(f["path"]), "rb") as fh:
                recs = pickle.load(fh)
        except Exception:  # a damaged file is a miss, never an error
            return {}
        return recs if isinstance(recs, dict) else {}

    def audit_records(self, m: Manifest) -> list[dict[str, Any]] | None:
        """Every run's audit record, in the manifest's run order (``None`` when a part's
        records cannot be read: the caller refreshes or audits without the store)."""
        by_part: dict[str, dict[str, Any]] = {}
        out = []
        for r in m.order:
            key = m.runs[r]["part"]
            if key not in by_part:
                by_part[key] = self._audit_records(m, key)
            rec = by_part[key].get(r)
            if not isinstance(rec, dict):
                return None
            out.append(rec)
        return out

    def _prefixes(self, m: Manifest | None, todo: list[RunLocation]) -> dict[str, bytes]:
        """Stored prefixes of the runs to re-read that had one (checked files only)."""
        if m is None:
            return {}
        by_part: dict[str, list[str]] = {}
        for loc in todo:
            e = m.runs.get(loc.run_dir)
            if e is not None and e.get("prefix"):
                by_part.setdefault(e["part"], []).append(loc.run_dir)
        out: dict[str, bytes] = {}
        for key, runs in by_part.items():
            recs = self._prefix_records(m, key)
            out.update({r: recs[r] for r in runs if isinstance(recs.get(r), bytes)})
        return out

    def _write_chunks(self, gen: int, todo: list[RunLocation], fps: dict[str, Any],
                      jobs: int | None, executor: ChunkExecutor | None = None,
                      m: Manifest | None = None, pool: Any = None, audit_only: bool = False,
                      ) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
        """Read and write the runs to re-read, a part per :data:`PART_RUNS` runs.

        Each :class:`ChunkTask` is run by ``executor`` (default :func:`local_executor`:
        worker processes for several chunks, in-process for one)."""
        from ..read.executor import default_jobs, on_object_storage, pool_workers

        size = PART_RUNS
        # the local executor (also as functools.partial(local_executor, progress=...))
        # stays in this process for a small fleet (read.executor.pool_workers): there one
        # chunk per PART_RUNS runs (each chunk costs a fixed validation and a file per
        # table); a cluster's executor gets one chunk per job from two chunks' worth of runs
        local = getattr(executor, "func", executor) in (None, local_executor)
        n_jobs = (pool_workers(len(todo), jobs) if local
                  else max(1, jobs or default_jobs()) if len(todo) >= 2 * MIN_CHUNK_RUNS
                  else 1)
        if n_jobs > 1 and not (local and on_object_storage(todo[:1])):
            # equal chunks, a multiple of the jobs: 11 chunks on 2 workers left one idle
            rounds = -(-len(todo) // (n_jobs * PART_RUNS))
            size = max(MIN_CHUNK_RUNS, -(-len(todo) // (n_jobs * rounds)))
        prefixes = self._prefixes(m, todo)
        tasks = [ChunkTask(self.directory, f"g{gen:07d}-{i // size:04d}", tuple(todo[i:i + size]),
                           {loc.run_dir: _fp_blob(fps.get(loc.run_dir))
                            for loc in todo[i:i + size]},
                           {loc.run_dir: prefixes[loc.run_dir] for loc in todo[i:i + size]
                            if loc.run_dir in prefixes}, audit_only)
                 for i in range(0, len(todo), size)]
        if executor is None:
            from ..progress import bar

            shown = bar(len(todo), "reading runs")  # the first build's (a refresh's) bar
            results: Iterable[ChunkResult] = _closing(local_executor(
                tasks, jobs=n_jobs, pool=pool, before_rename=self._before_rename(),
                progress=shown.update), shown)
        elif pool is not None and getattr(executor, "func", None) is local_executor:
            results = executor(tasks, pool=pool)  # a partial of local_executor
        else:
            results = executor(tasks)
        pending = {t.key: t for t in tasks}
        for res in results:
            task = pending.pop(res.key, None)
            if task is None or set(res.part["runs"]) != {loc.run_dir for loc in task.locations}:
                raise StoreError(f"chunk executor returned an unexpected result {res.key!r}",
                                 code="store_failed", where=self.directory,
                                 hint="an executor must return one ChunkResult per task")
            yield res.key, self._stamped(res.part), res.entries
        if pending:
            raise StoreError(f"chunk executor returned no result for {sorted(pending)}",
                             code="store_failed", where=self.directory,
                             hint="an executor must return one ChunkResult per task")

    def _stamped(self, part: dict[str, Any]) -> dict[str, Any]:
        return {**part, "files": [self._stamp(f) for f in part["files"]]}

    def _stamp(self, f: dict[str, Any]) -> dict[str, Any]:
        st = os.stat(self.path(f["path"]))
        return {**f, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}

    def _drop_dead_parts(self, m: Manifest) -> None:
        for key in [k for k in m.parts if not m.live_runs(k)]:
            del m.parts[key]

    def _maybe_compact(self, m: Manifest, *, force: bool = False) -> bool:
        """Merge small parts into one (from their Parquet rows) once they pile up;
        ``force``: also every part with superseded rows."""
        # (a part written by an audit holds no table: it is never merged)
        full = [k for k in m.parts if m.parts[k].get("full", True)]
        small = [k for k in full if len(m.live_runs(k)) < PART_RUNS // 4]
        if force:
            small = [k for k in full if k in small or _dirty_part(m, k)]
            if len(small) < 2 and not any(_dirty_part(m, k) for k in small):
                return False
        elif len(small) <= COMPACT_MIN_PARTS:
            return False
        from .read import read_parts

        key = f"g{m.generation:07d}-c"
        live = [r for k in small for r in m.live_runs(k)]
        frames = {t: read_parts(self, m, t, parts=small) for t in TABLES}
        kinds = {r: m.runs[r]["kind"] for r in live}
        out = write_parts(frames, self.directory, key, kinds=kinds,
                          before_rename=self._before_rename())
        files = out["files"]
        kept: dict[str, bytes] = {}
        for k in small:
            recs = self._prefix_records(m, k)
            kept.update({r: recs[r] for r in m.live_runs(k)
                         if m.runs[r].get("prefix") and isinstance(recs.get(r), bytes)})
        if kept:
            files.append(write_prefixes(kept, self.directory, key,
                                        before_rename=self._before_rename()))
        records: dict[str, Any] = {}
        for k in small:
            records.update(self._audit_records(m, k))
        files.append(write_records({r: records.get(r) for r in live}, self.directory, key,
                                   before_rename=self._before_rename()))
        for k in small:
            del m.parts[k]
        for r in live:
            m.runs[r] = {**m.runs[r], "part": key, "prefix": r in kept}
        m.parts[key] = {"runs": live, "files": [self._stamp(f) for f in files]}
        return True

    def _write_manifest(self, m: Manifest) -> None:
        blob = _encode_manifest(m)
        tmp = self.path(f".{MANIFEST}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        self._cut("manifest_temp_written")
        os.replace(tmp, self.path(MANIFEST))
        with contextlib.suppress(OSError):
            dfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        self._cut("manifest_replaced")

    def _gc(self, m: Manifest, grace: float = GC_GRACE_SECONDS) -> int:
        """Delete files no manifest names (older than ``grace``); return how many."""
        keep = {f["path"] for p in m.parts.values() for f in p["files"]}
        cutoff = time.time() - grace
        n = 0
        for table in (*TABLES, *SIDE_DIRS):
            top = self.path(table)
            for dirpath, _dirs, names in os.walk(top):
                for name in names:
                    p = os.path.join(dirpath, name)
                    rel = os.path.relpath(p, self.directory)
                    if rel in keep:
                        continue
                    with contextlib.suppress(OSError):
                        if os.lstat(p).st_mtime < cutoff:
                            os.unlink(p)
                            n += 1
        for name in os.listdir(self.directory):
            if name.startswith(f".{MANIFEST}.") and name.endswith(".tmp"):
                p = self.path(name)
                with contextlib.suppress(OSError):
                    if os.lstat(p).st_mtime < cutoff:
                        os.unlink(p)
                        n += 1
        return n


def _dirty_part(m: Manifest, key: str) -> bool:
    return len(m.live_runs(key)) != len(m.parts[key]["runs"])


def _dirty(m: Manifest) -> bool:
    return any(_dirty_part(m, k) for k in m.parts)


@dataclass(frozen=True, slots=True)
class ChunkTask:
    """One chunk of runs to read and write as one part (picklable; see :func:`run_chunk`).

    Attributes:
        directory: the store folder (workers write into it: it must be reachable at the same
            path from wherever the task runs).
        key: the part key (``g<generation>-<n>``); the same key overwrites the same files.
        locations: the runs, in discovery order.
        fingerprints: ``run_dir`` -> the store's fingerprint of the run taken before the
            read (``None``: could not be listed); a read that changed it is marked volatile.
        prefixes: ``run_dir`` -> the decoded prefix of its ``events.jsonl`` from the last
            read (a pickled ``read.incremental.EventsPrefix``), for runs that were live then: the
            log is decoded from its first incomplete line when the prefix's bytes still
            match (length, final newline, BLAKE2b), else from the start.
        audit_only: see below.
    """

    directory: str
    key: str
    locations: tuple[RunLocation, ...]
    fingerprints: dict[str, bytes | None]
    prefixes: dict[str, bytes] = field(default_factory=dict)
    audit_only: bool = False
    """Read the runs as the audit does and write only their audit records (no table)."""


@dataclass(frozen=True, slots=True)
class ChunkResult:
    """What :func:`run_chunk` wrote: ``part`` = ``{"runs": [run_dir...], "files": [...]}``
    (``write_parts``' file entries) and ``entries`` = ``run_dir`` -> manifest entry."""

    key: str
    part: dict[str, Any]
    entries: dict[str, Any]


RunsDone = Callable[[int], None]
"""``progress(n)``: ``n`` more runs of the chunks were read (see :func:`local_executor`)."""

ChunkExecutor = Callable[[Sequence[ChunkTask]], Iterable[ChunkResult]]
"""Runs chunk tasks (e.g. on a cluster): one :class:`ChunkResult` per task, any order."""


def _read_runs(task: ChunkTask, progress: RunsDone | None = None,
               ) -> Iterator[tuple[RunLocation, Any, Any, bool]]:
    """Read the chunk's runs one at a time; a live run's grown log from its first incomplete
    line. Yields each location, its run (``read_for_tables``, or the audit's reading for an
    ``audit_only`` task), its decoded ``(lines, events)`` (before the kind-dependent
    warnings, as ``read_run`` hands them out; None for a clean log, of which no prefix is
    kept) and whether its stored prefix applied; ``progress(1)`` after each run read."""
    from ..read.incremental import decode_prefix
    from ..read.snapshot import read_run
    from .build import HELD_LOCKS_EVERY, read_for_tables

    held: frozenset[str] | None = None
    for i, loc in enumerate(task.locations):
        if i % HELD_LOCKS_EVERY == 0:
            held = _held_keys()
        blob = task.prefixes.get(loc.run_dir)
        prefix = decode_prefix(blob, (0, 0)) if blob is not None else None
        out: list[Any] = []
        if task.audit_only:  # the audit's reading (read_for_tables parses more)
            run = read_run(loc.run_dir, is_subagent=loc.is_subagent,
                           parent_run_dir=loc.parent_run_dir, source_root=loc.source_root,
                           events_prefix=prefix, decoded_out=out, clean=True,
                           held_locks=held)
        else:
            run = read_for_tables(loc, events_prefix=prefix, decoded_out=out,
                                  held_locks=held)
        resumed = (prefix is not None and run.events_bytes is not None
                   and prefix.matches(run.events_bytes))
        if progress is not None:
            progress(1)
        yield loc, run, (out[0] if out else None), resumed


@dataclass(frozen=True, slots=True)
class _Settled:
    """The fields of a run :func:`_settle` reads (an audit chunk keeps these, not the run)."""

    kind: str | None
    writer_active: bool
    live_changed: bool
    events_bytes: bytes | None


def _settle(task: ChunkTask, loc: RunLocation, run: Any, dec: Any, resumed: bool,
            held: frozenset[str], racy: int, prefixes: dict[str, bytes]) -> dict[str, Any]:
    """A run's manifest entry after its read: volatile when its fingerprint changed during
    the read (or a writer holds it, or a file is younger than the racy window), in which case
    the decoded prefix of a log read exactly is kept in ``prefixes``."""
    from ..read.incremental import PREFIX_MAX_BYTES, make_prefix

    fp = task.fingerprints.get(loc.run_dir)
    after = run_fingerprint(loc.run_dir, held)
    volatile = (fp is None or after is None or after.blob != fp
                or run.writer_active or run.live_changed or after.newest_mtime_ns > racy)
    # a prefix only of a log read exactly (its objects are at hand): a clean log is read
    # whole again, which costs less than reading it from a prefix (the exact path) and
    # spares building the objects to keep (0.3 / 3 / 15 MB log grown by one line: whole
    # 0.04 / 0.09 / 0.67 CPU-s, from the prefix 0.05 / 0.14 / 1.18 + 0.00 / 0.06 / 0.52
    # to make it)
    keep = (volatile and run.events_bytes and len(run.events_bytes) <= PREFIX_MAX_BYTES
            and dec is not None)
    if keep:
        p = make_prefix(run.events_bytes, dec[0], dec[1], (0, 0))
        if p is not None:
            try:
                prefixes[loc.run_dir] = pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL)
            except RecursionError:
                pass  # a value nested too deep to pickle: the log is read whole next time
    return {"sub": loc.is_subagent, "parent": loc.parent_run_dir, "root": loc.source_root,
            "fp": fp, "part": task.key, "volatile": volatile, "kind": run.kind or "unknown",
            "writer_active": run.writer_active, "prefix": loc.run_dir in prefixes,
            "incremental": resumed, "full": not task.audit_only}


@gc_paused()
def run_chunk(task: ChunkTask, progress: RunsDone | None = None, *,
              before_rename: BeforeRename | None = None) -> ChunkResult:
    """Read a chunk's runs once, write their part, return it (what an executor calls).

    Pure apart from writing the part files under ``task.directory`` (deterministic names,
    atomic renames): safe to retry. ``progress(n)`` is called as runs are read;
    ``before_rename`` is the atomic writer's test hook (:func:`write_atomically`).
    An ``audit_only`` task keeps one run at a time (its record, then its entry) and writes
    only the records; any other keeps the chunk's runs for its tables.

    The cyclic garbage collector stays off for the whole chunk (it makes no reference
    cycles; its objects are freed by reference counts when it returns): re-enabled after the
    read, it rescanned every object of the chunk's runs (~0.18 CPU-s per 1,000 runs).
    """
    entries: dict[str, Any] = {}
    prefixes: dict[str, bytes] = {}
    files: list[dict[str, Any]] = []
    if task.audit_only:
        from ..audit import audit_records
        from .build import HELD_LOCKS_EVERY

        records = {}
        batch: list[tuple[RunLocation, Any, Any, bool]] = []
        runs = _read_runs(task, progress)
        while True:  # a batch of runs at a time: /proc/locks read after their reads
            batch = []
            for loc, run, dec, resumed in itertools.islice(runs, HELD_LOCKS_EVERY):
                records[loc.run_dir] = audit_records([run])[0]
                # what the entry needs of the run (the bytes only of a log read exactly,
                # whose prefix may be kept): the run itself is freed now
                batch.append((loc, _Settled(run.kind, run.writer_active, run.live_changed,
                                            run.events_bytes if dec is not None else None),
                              dec, resumed))
                del run
            if not batch:
                break
            held = _held_keys()
            racy = time.time_ns() - int(RACY_SECONDS * 1e9)
            for loc, run, dec, resumed in batch:
                entries[loc.run_dir] = _settle(task, loc, run, dec, resumed, held, racy,
                                               prefixes)
            del batch
    else:
        data = list(_read_runs(task, progress))
        frames = chunk_frames([run for _loc, run, _dec, _resumed in data])
        records = _records_of(frames["runs"])
        held = _held_keys()
        racy = time.time_ns() - int(RACY_SECONDS * 1e9)
        kinds = {loc.run_dir: run.kind or "unknown" for loc, run, _dec, _res in data}
        for loc, run, dec, resumed in data:
            entries[loc.run_dir] = _settle(task, loc, run, dec, resumed, held, racy, prefixes)
        del data
        files += write_parts(frames, task.directory, task.key, kinds=kinds,
                             before_rename=before_rename)["files"]
    if prefixes:
        files.append(write_prefixes(prefixes, task.directory, task.key,
                                    before_rename=before_rename))
    files.append(write_records(records, task.directory, task.key, before_rename=before_rename))
    return ChunkResult(task.key, {"runs": [loc.run_dir for loc in task.locations],
                                  "files": files, "full": not task.audit_only}, entries)


def _records_of(runs: Any) -> dict[str, dict[str, Any]]:
    """The audit records in a ``runs`` table (its record columns: the very records the audit
    builds, ``tables.runs.runs_rows``), by ``run_dir``."""
    from ..audit import RECORD_FIELDS

    return {rec["run_dir"]: rec for rec in runs.select(RECORD_FIELDS).to_dicts()}


def write_records(records: dict[str, Any], directory: str, key: str, *,
                  before_rename: BeforeRename | None = None) -> dict[str, Any]:
    """Write a part's audit records (``run_dir`` -> record) atomically (pickled: a record of
    a run whose path is not UTF-8 is kept as it is)."""
    rel = os.path.join(AUDIT_DIR, f"part-{key}.pickle")
    data = pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)
    digest = write_atomically(os.path.join(directory, rel), data, before_rename=before_rename)
    return {"table": AUDIT_DIR, "kind": "", "path": rel, "rows": len(records),
            "bytes": len(data), "blake2b": digest}


def write_prefixes(prefixes: dict[str, bytes], directory: str, key: str, *,
                   before_rename: BeforeRename | None = None) -> dict[str, Any]:
    """Write a part's live-run prefixes (``run_dir`` -> pickled prefix) atomically."""
    rel = os.path.join(PREFIX_DIR, f"part-{key}.pickle")
    data = pickle.dumps(prefixes, protocol=pickle.HIGHEST_PROTOCOL)
    digest = write_atomically(os.path.join(directory, rel), data, before_rename=before_rename)
    return {"table": PREFIX_DIR, "kind": "", "path": rel, "rows": len(prefixes),
            "bytes": len(data), "blake2b": digest}


def _closing(results: Iterable[T], shown: Any) -> Iterator[T]:
    try:
        yield from results
    finally:
        shown.close()


def local_executor(tasks: Sequence[ChunkTask], *, jobs: int | None = None,
                   progress: RunsDone | None = None, pool: Any = None,
                   before_rename: BeforeRename | None = None) -> Iterator[ChunkResult]:
    """The default executor: :func:`run_chunk` over the tasks through
    ``read.executor.choose`` (in this process for one task or a small fleet, else worker
    processes; runs on object storage in this process).

    ``progress(n)``: ``n`` more runs were read (one call per run in this process, one per
    finished chunk from workers), e.g. ``functools.partial(local_executor, progress=cb)``
    as ``open_store(executor=...)``. ``pool``: workers already started
    (:func:`_early_pool`, a ``read.executor.LocalPool``), used for several chunks.
    ``before_rename``: the atomic writer's test hook, for chunks run in this process only
    (a closure does not reach a worker process)."""
    from ..read.executor import InProcess, choose, on_object_storage

    locs = [loc for t in tasks for loc in t.locations]
    if pool is not None and len(tasks) > 1:
        executor: Any = pool
    elif len(tasks) > 1:
        executor = choose(len(locs), jobs, local_only=on_object_storage(locs))[0]
    else:
        executor = InProcess()
    if isinstance(executor, InProcess):
        for task in tasks:
            yield run_chunk(task, progress, before_rename=before_rename)
        return
    for task, res in zip(tasks, executor.map(run_chunk, tasks), strict=True):
        if progress is not None:
            progress(len(task.locations))
        yield res


_WARM_MODULES = (
    "rivumi_analysis.store.build", "rivumi_analysis.read.incremental",
    "rivumi_analysis.tables._common", "rivumi_analysis.tables.events",
    "rivumi_analysis.tables.replayed", "rivumi_analysis.tables.runs",
    "rivumi_analysis.tables.manifests", "rivumi_analysis.tables.tool_calls",
    "rivumi_analysis.tables.approvals", "rivumi_analysis.tables.model_calls",
    "rivumi_analysis.tables.usage", "rivumi_analysis.tables.verifications",
    "rivumi_analysis.tables.messages", "pyarrow.parquet")
"""What a worker's chunk imports (:func:`_warm_worker`)."""


_WARM_AUDIT_MODULES = ("rivumi_analysis.audit", "rivumi_analysis.read.incremental")
"""What an ``audit_only`` chunk imports (no polars, no pyarrow)."""


def _warm_worker(modules: Sequence[str] = _WARM_MODULES) -> None:
    """Import what a chunk needs (a new worker does it while the parent stats the fleet)."""
    import importlib

    for name in modules:
        importlib.import_module(name)


@contextlib.contextmanager
def _early_pool(n_jobs: int, wanted: bool, *, audit_only: bool = False) -> Iterator[Any]:
    """The local worker processes (``read.executor.LocalPool``) started now, each importing
    what a chunk needs (:func:`_warm_worker`), so their start-up overlaps the parent's stat
    pass; None when not ``wanted``. (The pool is loky's reusable one: it outlives the call.)"""
    if not wanted or n_jobs <= 1:
        yield None
        return
    from ..read.executor import LocalPool

    pool = LocalPool(n_jobs)
    try:
        pool.warm(functools.partial(_warm_worker, _WARM_AUDIT_MODULES if audit_only
                                    else _WARM_MODULES))
    except (ImportError, OSError):
        yield None  # no pool here: the chunks run as they would without it
        return
    yield pool


def _fp_blob(fp: Any) -> bytes | None:
    return None if fp is None else fp.blob


def _fp_light(fp: Any) -> bytes | None:
    return getattr(fp, "light", None) or None


# --- opening a store for a source -------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Opened:
    """A fresh store and the manifest the caller should read (a consistent snapshot)."""

    store: Store
    manifest: Manifest
    skipped: tuple[tuple[str, str], ...] = ()
    """``(path, reason)`` of every path the discovery skipped (empty when not refreshed)."""
    root_used: str | None = None
    """The default run root used when no source was given."""


def resolve_store_dir(source: Source | None, store_dir: str | os.PathLike[str] | None,
                      max_depth: int) -> tuple[str, list[str]]:
    """The store folder for ``source`` and the source paths; refuses one inside a source."""
    tops, _root = normalize_sources(source)
    d = (os.fspath(store_dir) if store_dir is not None
         else os.path.join(default_store_root(), store_key(tops, max_depth)))
    for t in tops:
        if _inside(d, t) or (os.path.isdir(t) and _inside(t, d)):
            raise StoreError(f"the store {d} would be inside (or contain) the source {t}",
                             code="store_inside_source", where=d,
                             hint="choose a store directory outside every run folder")
    return d, tops


def open_store(source: Source | None = None, *, store_dir: str | os.PathLike[str] | None = None,
               max_depth: int = DEFAULT_MAX_DEPTH, verify: bool = False,
               compact: bool = False, hook: Hook | None = None,
               executor: ChunkExecutor | None = None, jobs: int | None = None,
               refresh: bool = True, audit_only: bool = False) -> Opened:
    """Discover ``source``, refresh its store and return it with the fresh manifest.

    ``refresh=False`` skips the stat pass over the sources and serves the store as it is
    (possibly stale: for a fleet known not to change), provided it exists for these
    sources and its files are intact; otherwise it refreshes as usual.

    ``audit_only``: bring only the audit records up to date (``audit`` with its cache; see
    :meth:`Store.refresh`): runs read for a table's load since are served as they are.

    ``executor`` runs the chunks of runs to (re-)read: a callable taking a list of
    :class:`ChunkTask` and returning one :class:`ChunkResult` per task (e.g. ``run_chunk``
    on a cluster); default: local worker processes (``jobs``).

    Raises:
        SourceError: as the loaders do (missing source, regular file, no default root).
        StoreError: the store cannot be used (not writable, inside a source, locked).
    """
    return _open(source, store_dir=store_dir, max_depth=max_depth, verify=verify,
                 compact=compact, hook=hook, executor=executor, jobs=jobs,
                 refresh=refresh, audit_only=audit_only)[0]


def open_and_read(source: Source | None, read: Callable[[Store, Manifest], T], *,
                  store_dir: str | os.PathLike[str] | None = None,
                  max_depth: int = DEFAULT_MAX_DEPTH, verify: bool = False,
                  tables: Iterable[str] | None = None) -> tuple[Opened, T]:
    """:func:`open_store`, then ``read(store, manifest)`` of the fresh manifest, with the
    read overlapped with the stat pass.

    The manifest in force is read first and ``read`` starts on it in a background thread
    (polars releases the GIL while it reads Parquet) while the fleet is stat-ed in this
    one. When the refresh serves that very manifest (nothing changed and its file was not
    replaced meanwhile), that result is returned; otherwise (something changed, or the
    read failed: a damaged part) it is discarded and ``read`` runs again on the fresh
    manifest, exactly as without the overlap. So the result is always ``read`` of one
    manifest, the one returned.

    ``tables``: the tables ``read`` reads, when known. Only :data:`LIGHT_TABLES`: the
    manifest in force is served as it is when every run's light fingerprint still equals
    its entry's (:func:`_light_fresh`), without the full stat pass; any doubt refreshes.
    """
    opened, job = _open(source, store_dir=store_dir, max_depth=max_depth, verify=verify,
                        prefetch=read, tables=tables)
    if job is not None and job.ok and job.manifest is opened.manifest:
        return opened, job.value
    del job  # a discarded result is freed before the second read
    return opened, read(opened.store, opened.manifest)


class _InThread(threading.Thread):
    """``fn(*args)`` in a daemon thread; ``ok``/``value`` once joined (any exception is kept
    out of the way: the caller does the work again in its own thread, which raises it)."""

    def __init__(self, name: str, fn: Callable[..., Any], *args: Any) -> None:
        super().__init__(name=name, daemon=True)
        self.fn, self.args = fn, args
        self.ok = False
        self.value: Any = None

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args)
            self.ok = True
        except BaseException:  # noqa: BLE001 (done again by the caller, which raises it)
            self.value = None


class _Prefetch(_InThread):
    """``read(store, manifest)`` in a background thread (the optimistic read of the parts of
    the manifest in force, see :func:`open_and_read`)."""

    def __init__(self, read: Callable[[Store, Manifest], Any], store: Store,
                 manifest: Manifest) -> None:
        super().__init__("rivumi-store-prefetch", read, store, manifest)
        self.manifest = manifest


class _HeldLocks(_InThread):
    """The held file locks (``read.incremental.proc_locked_keys``) read in a background thread.

    Reading ``/proc/locks`` makes the kernel take its file-lock rwsem for writing, which waits
    for an RCU grace period: 5-8 ms here unless it was read in the last ~0.5 s, spent asleep
    with the GIL released. An open starts this first, so that wait overlaps the manifest read
    and the discovery instead of preceding the stat pass (the keys are read a few tens of
    milliseconds earlier: a lock taken or released meanwhile shows at the next open, as one
    taken or released just after the pass does)."""

    def __init__(self) -> None:
        super().__init__("rivumi-store-locks", _held_keys)

    def get(self) -> frozenset[str]:
        self.join()
        return self.value if self.ok else _held_keys()


def _open(source: Source | None, *, store_dir: str | os.PathLike[str] | None,
          max_depth: int, verify: bool, compact: bool = False, hook: Hook | None = None,
          executor: ChunkExecutor | None = None, jobs: int | None = None,
          refresh: bool = True, prefetch: Callable[[Store, Manifest], Any] | None = None,
          tables: Iterable[str] | None = None,
          audit_only: bool = False) -> tuple[Opened, _Prefetch | None]:
    d, tops = resolve_store_dir(source, store_dir, max_depth)
    if not refresh:
        from ..read.discovery import check_sources

        check_sources(tops)
        store = Store(d, hook=hook)
        m = store.manifest()
        if (m is not None and m.sources == list(tops) and m.max_depth == max_depth
                and (audit_only or all(e.get("full", True) for e in m.runs.values()))
                and not store.damaged_parts(m)):
            touch(d)
            return Opened(store, m), None
    light = tables is not None and LIGHT_TABLES.issuperset(tables)
    # the stat pass and a refresh make a few objects per run of the fleet (the manifest's
    # entries, fingerprints) and no cycle: the collector's full passes over them cost
    # 0.03-0.1 CPU-s per open of 10,000 runs
    with gc_paused():
        locks = _HeldLocks()
        locks.start()  # its wait in the kernel overlaps the manifest read and the discovery
        store = Store(d, hook=hook)
        current = store._manifest_and_identity()
        m0 = current[0]
        if m0 is not None and (m0.sources != list(tops) or m0.max_depth != max_depth):
            m0 = None  # another fleet's store (store_dir= given): nothing of it is re-used
        job = None
        if prefetch is not None and not verify and m0 is not None:  # (verify: hashes first)
            job = _Prefetch(prefetch, store, m0)
            job.start()
        try:
            t0 = time.time_ns()
            again = _rediscover(tops, max_depth, m0, t0) if m0 is not None else None
            if again is not None:  # no folder discovery listed has changed: its result holds
                locs, listings, memo = again
                skipped = [tuple(x) for x in memo["skipped"]]
                root_used = memo["root_used"]
            else:
                listings = {}
                folders: list[str] = []
                found = discover(source, max_depth=max_depth, listings=listings,
                                 folders=folders)
                locs = found.runs
                skipped = [(x.path, x.reason) for x in found.skipped]
                root_used = found.root_used
                memo = _discovery_memo(tops, max_depth, locs, listings, folders, t0,
                                       skipped, root_used)
                if memo is not None:  # runs_df has a row for each (issue 29)
                    memo["unreadable"] = sorted(s.path for s in found.skipped
                                                if s.reason == "unreadable")
            if (light and m0 is not None and not verify and not compact
                    and _light_fresh(store, m0, current[1], locs, listings)):
                m = m0  # served as the nothing-changed path serves it: nothing written
            else:
                m = store.refresh(locs, sources=tops, max_depth=max_depth, verify=verify,
                                  compact=compact, jobs=jobs, executor=executor,
                                  listings=listings, current=current, discovery=memo,
                                  held_locks=locks.get, audit_only=audit_only)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT,
                             errno.ENOTDIR, errno.EEXIST):
                raise StoreError(f"the store {d} is not writable: {exc.strerror}",
                                 code="store_unwritable", where=d,
                                 hint="pass store_dir= / --store DIR, or set "
                                      f"${ENV_DIR}; ${ENV_ENABLE}=0 turns the store off") from exc
            raise
        finally:
            if job is not None:
                job.join()  # never left running: it reads files this process may replace
        touch(d)
        s = store.last_stats
        if m is not m0 and s is not None and (s.reread or s.removed or s.parts_written):
            enforce_cap(d)  # a store grew: keep the stores under the default root capped
        return Opened(store, m, tuple(skipped), root_used), job


def _entry_settled(e: dict[str, Any] | None, loc: RunLocation,
                   parts: dict[str, Any]) -> bool:
    """Whether a manifest entry may be served for ``loc`` as far as the manifest alone tells
    (its files still to be compared): it exists, was not read while volatile, its part is in
    the manifest and it was read at the same location (subagent, parent, source root).
    Shared by the full plan (:meth:`Store._plan`) and the light check (:func:`_light_fresh`)."""
    return (e is not None and not e["volatile"] and e["part"] in parts
            and (e["sub"], e["parent"], e.get("root")) == (
                loc.is_subagent, loc.parent_run_dir, loc.source_root))


def _light_fresh(store: Store, m: Manifest, ident: tuple[int, ...] | None,
                 locs: Sequence[RunLocation], listings: dict[str, list[str]]) -> bool:
    """Whether ``m`` holds the current rows of :data:`LIGHT_TABLES` for ``locs`` (the
    discovered fleet), checked with :func:`light_fingerprint` (at most 3 ``lstat`` per run
    instead of the full pass's ~5): the same runs in the same order at the same locations,
    no entry volatile or read while a writer held the lock, every entry's ``lfp`` equal to
    its run's light fingerprint now, no damaged part, and the manifest file still the one
    ``m`` came from (``ident``). Any doubt is ``False`` (a full refresh).

    Only these tables' rows are current: a change to a file no light table reads (e.g.
    ``result.json``) is left for the next full refresh (any other table's load). So is a
    writer lock taken since the read: the light rows do not depend on it (``read_run``'s
    columnar reading never looks at it), and what the writer then writes changes a light
    file's ctime, which no process can set back. (Checking it would ``lstat`` every run's
    ``.writer.lock`` whenever ``/proc/locks`` holds any lock of the file system.)"""
    if ident is None or len(locs) != len(m.order):
        return False
    entries, parts = m.runs, m.parts
    for loc, r in zip(locs, m.order, strict=True):
        e = entries.get(r)
        if (loc.run_dir != r or not _entry_settled(e, loc, parts) or e["writer_active"]
                or not e.get("full", True) or not e.get("lfp") or light_fingerprint(r, listings.get(r)) != e["lfp"]):
            return False
    return not store.damaged_parts(m) and store._manifest_identity() == ident


# --- re-using a discovery ----------------------------------------------------------------------
#
# Discovery's result is a function of the listings (names and entry kinds) of the folders it
# lists, and a folder's listing changes only with the folder itself: adding, removing,
# renaming or replacing an entry sets the folder's ctime (and mtime) to the current time, and
# no process can set a ctime back. So when every folder discovery listed still has the
# identity (mode, inode, device, mtime, ctime) it had, discovery would list the same names and
# find the same runs: the store then lstats each folder (one call) instead of listing it
# (open, getdents, close, and a Python list). An identity is recorded only when the folder's
# ctime is older than RACY_SECONDS before the discovery started (coarse file-system clocks:
# a later change within the same tick would keep the ctime); a run folder that changed is
# listed again (discovery's run rules re-applied), any other folder that changed means a full
# discovery.

_DIR_KEY = attrgetter("st_mode", "st_ino", "st_dev", "st_mtime_ns", "st_ctime_ns")


def _more_trusted(new: dict[str, Any], old: dict[str, Any] | None) -> bool:
    """Whether ``new`` spares more listings than ``old`` (or as many, others): worth a
    manifest write when nothing else changed."""
    if old is None:
        return True
    if new.get("folders") != old.get("folders"):
        return True
    a = sum(1 for ident, _ in new["runs"] if ident is not None)
    b = sum(1 for ident, _ in old["runs"] if ident is not None)
    return a > b or (a == b and new["runs"] != old["runs"])


def _discovery_memo(tops: Sequence[str], max_depth: int, locs: Sequence[RunLocation],
                    listings: dict[str, list[str]], folders: list[str],
                    t0: int, skipped: Sequence[tuple[str, str]] = (),
                    root_used: str | None = None) -> dict[str, Any] | None:
    """What a discovery started at ``t0`` (``time.time_ns()``) listed, with the identities
    that let the next open re-use it (``None``: nothing to re-use, e.g. a folder that
    changed within :data:`RACY_SECONDS`, or a URI source)."""
    if any("://" in t for t in tops):
        return None
    cutoff = t0 - int(RACY_SECONDS * 1e9)
    lstat = os.lstat

    def ident(path: str) -> list[int] | None:
        try:
            st = lstat(path)
        except OSError:
            return None
        return list(_DIR_KEY(st)) if st.st_ctime_ns < cutoff else None

    kept = []
    for f in folders:
        i = ident(f)
        if i is None:
            return None
        kept.append([f, *i])
    runs = []
    for loc in locs:
        names = listings.get(loc.run_dir)
        if names is None:
            return None
        runs.append([ident(loc.run_dir), names])
    return {"tops": [os.path.realpath(t) for t in tops], "max_depth": max_depth,
            "folders": kept, "runs": runs, "skipped": [list(x) for x in skipped],
            "root_used": root_used}


def _rediscover(tops: Sequence[str], max_depth: int, m: Manifest, t0: int,
                ) -> tuple[list[RunLocation], dict[str, list[str]], dict[str, Any]] | None:
    """``discover``'s result for ``tops`` from the discovery recorded in ``m`` when no folder
    it listed has changed (a run folder that changed is listed again), with the memo to
    record; ``None``: discover again."""
    from ..read.discovery import RUN_MARKERS, check_sources

    memo = m.discovery
    if (memo is None or memo["max_depth"] != max_depth or len(memo["runs"]) != len(m.order)
            or "skipped" not in memo or any("://" in t for t in tops)):
        return None
    check_sources(list(tops))  # a missing source is the usage error discovery raises
    if memo["tops"] != [os.path.realpath(t) for t in tops]:
        return None
    lstat = os.lstat
    for f in memo["folders"]:
        try:
            if list(_DIR_KEY(lstat(f[0]))) != f[1:]:
                return None
        except OSError:
            return None
    cutoff = t0 - int(RACY_SECONDS * 1e9)
    markers = frozenset(RUN_MARKERS)
    entries = m.runs
    locs: list[RunLocation] = []
    listings: dict[str, list[str]] = {}
    runs: list[list[Any]] = []
    changed = False
    for r, item in zip(m.order, memo["runs"], strict=True):
        e = entries.get(r)
        if e is None:
            return None
        try:
            st = lstat(r)
        except OSError:
            return None
        key = _DIR_KEY(st)
        ident, names = item
        if ident is None or tuple(ident) != key:  # changed (or recorded while racy)
            if not stat.S_ISDIR(st.st_mode):
                return None
            try:
                new = sorted(os.listdir(r))
            except OSError:
                return None
            if ((not e["sub"] and markers.isdisjoint(new))
                    or ("subagents" in new) != ("subagents" in names)):
                return None  # no longer a run, or its subagents appeared/went
            item = [list(key) if st.st_ctime_ns < cutoff else None, new]
            changed = True
        locs.append(RunLocation(r, e["sub"], e["parent"], e.get("root")))
        listings[r] = item[1]
        runs.append(item)
    # the same memo object when nothing was listed again (nothing new to record)
    return locs, listings, ({**memo, "runs": runs} if changed else memo)


def remove_store(directory: str) -> None:
    """Delete a store folder (only one that holds a store manifest or nothing)."""
    if os.path.isdir(directory) and (os.path.exists(os.path.join(directory, MANIFEST))
                                     or not os.listdir(directory)):
        shutil.rmtree(directory)


def warn_fallback(exc: BaseException) -> None:
    warnings.warn(f"{exc}; loading in memory instead of through the store", StoreWarning,
                  stacklevel=3)
