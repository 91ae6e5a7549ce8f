"""Incremental record cache and process pool: one consolidated SQLite file outside the sources.

Generic over what a record is: the caller (:func:`rivumi_analysis.audit.audit`) passes a
:class:`Recorder` (how to turn a :class:`~rivumi_analysis.read.snapshot.RunData` into a
JSON-ready record, the record of a run that failed, which records may be cached, and the
record schema version), so this module sits below the audit and imports nothing above ``read``.

A run's cached audit record is reused only when its *fingerprint* is unchanged. The
fingerprint covers everything that can change the record:

- the run folder itself (``stat``: device and inode), its listing (every entry's name, so
  temp leftovers and subagent folders show) and, for every file a record is read from
  (``session.json``, ``request.json``, ``events.jsonl``, ``result.json``, ``checkpoint.json``,
  ``backend-result.json``, ``.writer.lock``), its mode, size, ``mtime_ns``, ``ctime_ns``,
  inode and device (so a rewrite, even of the same size with the mtime set back, and a file
  replaced by a symlink show);
- whether a live process holds ``.writer.lock`` (``/proc/locks``); its content (the writer
  token) counts through its listing entry (a rewrite changes its ``ctime_ns``; the store's
  fingerprint also hashes the content, ``lock_content=True``);
- the run directory string as given, its absolute path, and the subagent/parent linkage;
- the toolkit version, the audit-record and table schema versions, and a fingerprint of the
  toolkit's own source files (so a changed rule is never served from an old cache).

When ``events.jsonl`` only grew (same inode), the decoded complete lines of the already-read
prefix are reused after checking the prefix's size, its final ``\\n`` and a BLAKE2b hash of the
whole prefix (stronger than a hash of its tail, and cheap next to decoding); decoding resumes at
the first line that was not complete. Any doubt (no prefix stored, other inode, hash mismatch, a
corrupt cache row or file, a version change) falls back to a full read, so a warm result always
equals a cold one. Entries are written only for runs whose files are older than
:data:`RACY_SECONDS` (a file modified within the timestamp granularity could change again
without changing its identity), that were read stably (no ``live_changed``, no active writer)
and whose fingerprint was the same before and after the read.

The toolkit never writes into a run directory: the cache lives in ``$RIVUMI_ANALYSIS_CACHE_DIR``
or ``${XDG_CACHE_HOME:-~/.cache}/rivumi-analysis`` unless a directory is given.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import sqlite3
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import Any

import msgspec

from .._version import __version__
from .snapshot import _RUN_FILES, _lock_key

CACHE_FORMAT = 1
"""Layout of the cache file (bump when the stored rows change shape)."""

RACY_SECONDS = 2.0
"""Runs with a file modified less than this long ago are audited but not cached."""

PREFIX_MAX_BYTES = 64 * 1024 * 1024
"""Largest ``events.jsonl`` prefix whose decoded lines are kept for incremental reads."""

_LOCK_READ = 4096
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_OPEN_FLAGS |= getattr(os, "O_CLOEXEC", 0)


def default_cache_dir(environ: dict[str, str] | None = None) -> str:
    """The user cache directory for this toolkit (never inside a run directory).

    >>> default_cache_dir({"XDG_CACHE_HOME": "/c", "HOME": "/h"})
    '/c/rivumi-analysis'
    >>> default_cache_dir({"RIVUMI_ANALYSIS_CACHE_DIR": "/x", "HOME": "/h"})
    '/x'
    """
    env = os.environ if environ is None else environ
    if env.get("RIVUMI_ANALYSIS_CACHE_DIR"):
        return env["RIVUMI_ANALYSIS_CACHE_DIR"]
    base = env.get("XDG_CACHE_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rivumi-analysis")


_CODE_FP: tuple[int | str, str] | None = None  # (schema version, fingerprint)


def code_fingerprint(schema_version: int | str) -> str:
    """Toolkit version, schema versions and the identity of the package's source files.

    Every ``.py`` and ``.json`` file of the package, in every subpackage, counts.
    """
    global _CODE_FP
    if _CODE_FP is None or _CODE_FP[0] != schema_version:
        # this file is rivumi_analysis/read/cache.py: walk the whole package
        pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{__version__}|{schema_version}|{TABLE_SCHEMA_VERSION}|{CACHE_FORMAT}".encode())
        for dirpath, dirnames, files in os.walk(pkg):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".json")):
                    q = os.path.join(dirpath, name)
                    st = os.stat(q)
                    h.update(f"{q}|{st.st_size}|{st.st_mtime_ns}\n".encode())
        _CODE_FP = (schema_version, h.hexdigest())
    return _CODE_FP[1]


TABLE_SCHEMA_VERSION = 1
"""Version of the table schemas (see ``export.SCHEMA_VERSION``); part of every cache key."""


# --- fingerprints ------------------------------------------------------------------------------

def proc_locked_keys() -> frozenset[str]:
    """``major:minor:inode`` of every file lock held on this machine (read once per audit)."""
    from .snapshot import _proc_locked_inodes

    return frozenset(_proc_locked_inodes() or ())


def run_key(run_dir: str, is_subagent: bool, parent_run_dir: str | None) -> str:
    # discovery's paths are absolute and normal already: abspath (pure Python) only otherwise
    normal = (run_dir[:1] == "/" and run_dir[-1:] != "/" and "/." not in run_dir
              and "//" not in run_dir)
    key = "\0".join((run_dir if normal else os.path.abspath(run_dir), run_dir,
                     "1" if is_subagent else "0",
                     parent_run_dir if parent_run_dir is not None else "\1"))
    if not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:  # a name that is not UTF-8: SQLite takes only UTF-8 text
            return key.encode("utf-8", "surrogateescape").hex()  # (no '/': never a path key)
    return key


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What a run's record depends on, as bytes, plus the newest mtime (for the racy check)."""

    blob: bytes
    newest_mtime_ns: int
    events_identity: tuple[int, int] | None  # (inode, device) of a regular events.jsonl


def fingerprint(run_dir: str, held_keys: frozenset[str],
                names: list[str] | None = None, *, lock_content: bool = True,
                ) -> Fingerprint | None:
    """Fingerprint a run folder (``None`` when it cannot be listed: never cached).

    ``names``: the folder's entries as discovery just listed them (``discover(listings=)``),
    so it is not listed a second time (nor opened): the same fingerprint as listing it now.
    ``lock_content``: include the bytes of ``.writer.lock`` (the audit cache relies on the
    lock file's ``ctime_ns``/``mtime_ns``/size instead, as for every other file, and passes
    False both when it looks a run up and when it stores it).
    """
    if not lock_content:
        if names is None:
            try:
                names = os.listdir(run_dir)
            except OSError:
                return None
        return _fingerprint_listed(run_dir, held_keys, names)
    try:
        dfd = os.open(run_dir, _DIR_FLAGS)
    except OSError:
        return None
    try:
        top = os.fstat(dfd)
        names = sorted(os.listdir(dfd) if names is None else names)
        parts: list[Any] = [top.st_dev, top.st_ino, top.st_mode]
        newest = 0
        events_identity = None
        lstat = os.lstat
        for name in names:
            try:
                st = lstat(name, dir_fd=dfd)
            except OSError:
                parts.append([name, None])
                continue
            parts.append([name, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                          st.st_ino, st.st_dev])
            if st.st_mtime_ns > newest:
                newest = st.st_mtime_ns
            if name == "events.jsonl" and stat.S_ISREG(st.st_mode):
                events_identity = (st.st_ino, st.st_dev)
            elif name == ".writer.lock" and stat.S_ISREG(st.st_mode):
                parts.append(["lock", _read_small(name, dfd) if lock_content else None,
                              _lock_key(st.st_dev, st.st_ino) in held_keys])
    except OSError:
        return None
    finally:
        os.close(dfd)
    return Fingerprint(msgspec.msgpack.encode(parts), newest, events_identity)


# (mode, size, mtime, ctime, inode, device) of an entry, in one C-level call
_STAT_KEY = attrgetter("st_mode", "st_size", "st_mtime_ns", "st_ctime_ns", "st_ino", "st_dev")
_MTIME = attrgetter("st_mtime_ns")


def _fingerprint_listed(run_dir: str, held_keys: frozenset[str],
                        names: list[str]) -> Fingerprint | None:
    """:func:`fingerprint` of a folder already listed: an ``lstat`` per entry (relative to
    the open folder), without reading the lock file.

    The warm audit's whole cost is this per run, so it runs no Python per entry: the
    ``lstat`` calls and each entry's stat fields are C-level ``map``s, and the key is one
    msgpack encoding of the folder's identity, the names and those fields.
    """
    try:
        dfd = os.open(run_dir, _DIR_FLAGS)
    except OSError:
        return None
    try:
        top = os.fstat(dfd)
        names = sorted(names)
        # the files a record is read from (read_run's); of the other entries only the names
        # count (atomic-write leftovers; subagent folders are runs of their own)
        read = list(filter(_RUN_FILES.__contains__, names))
        try:
            sts = list(map(partial(os.lstat, dir_fd=dfd), read))
        except OSError:  # an entry vanished since the listing: a key that shows it
            return _fingerprint_vanished(dfd, held_keys, names, read, top)
    except OSError:
        return None
    finally:
        os.close(dfd)
    lock = None
    if ".writer.lock" in read:
        st = sts[read.index(".writer.lock")]
        if stat.S_ISREG(st.st_mode):
            lock = _lock_key(st.st_dev, st.st_ino) in held_keys
    events_identity = None
    if "events.jsonl" in read:
        st = sts[read.index("events.jsonl")]
        if stat.S_ISREG(st.st_mode):
            events_identity = (st.st_ino, st.st_dev)
    blob = _encode_key((top.st_dev, top.st_ino, top.st_mode, names,
                        list(map(_STAT_KEY, sts)), lock))
    return Fingerprint(blob, max(map(_MTIME, sts), default=0), events_identity)


def _encode_key(parts: tuple[Any, ...]) -> bytes:
    """msgpack of a key; names that are not UTF-8 (lone surrogates) as their bytes."""
    try:
        return msgspec.msgpack.encode(parts)
    except UnicodeEncodeError:
        return msgspec.msgpack.encode((*parts[:3], list(map(os.fsencode, parts[3])), *parts[4:]))


def _fingerprint_vanished(dfd: int, held_keys: frozenset[str], names: list[str],
                          read: list[str], top: os.stat_result) -> Fingerprint:
    """The per-entry form of :func:`_fingerprint_listed` when a file cannot be stat-ed
    (``None`` in its place): never equal to the key of a folder whose files all exist."""
    fields: list[Any] = []
    newest = 0
    events_identity = None
    lock = None
    for name in read:
        try:
            st = os.lstat(name, dir_fd=dfd)
        except OSError:
            fields.append(None)
            continue
        fields.append(_STAT_KEY(st))
        newest = max(newest, st.st_mtime_ns)
        if name == "events.jsonl" and stat.S_ISREG(st.st_mode):
            events_identity = (st.st_ino, st.st_dev)
        elif name == ".writer.lock" and stat.S_ISREG(st.st_mode):
            lock = _lock_key(st.st_dev, st.st_ino) in held_keys
    blob = _encode_key((top.st_dev, top.st_ino, top.st_mode, names, fields, lock))
    return Fingerprint(blob, newest, events_identity)


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def _read_small(name: str, dir_fd: int) -> str | None:
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _LOCK_READ).hex()
    except OSError:
        return None
    finally:
        os.close(fd)


# --- the events.jsonl prefix -------------------------------------------------------------------

@dataclass(slots=True)
class EventsPrefix:
    """Decoded complete lines of an ``events.jsonl`` prefix (``Line.raw`` left out)."""

    length: int
    digest: bytes
    identity: tuple[int, int]
    lines: list[Any]
    events: list[Any]

    def matches(self, data: bytes) -> bool:
        n = self.length
        return (0 < n <= len(data) and data[n - 1:n] == b"\n"
                and _digest(memoryview(data)[:n]) == self.digest)

    def restore(self, data: bytes) -> tuple[list[Any], list[Any]]:
        from .snapshot import Line

        lines = [Line(ln.line_no, ln.byte_offset, ln.byte_length,
                      data[ln.byte_offset:ln.byte_offset + ln.byte_length], ln.has_newline,
                      ln.status, ln.reason, ln.message, ln.warnings) for ln in self.lines]
        return lines, list(self.events)


def _digest(data: bytes | memoryview) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def make_prefix(data: bytes, lines: list[Any], events: list[Any],
                identity: tuple[int, int]) -> EventsPrefix | None:
    """The prefix of complete lines of ``data`` with their decoded state, or None."""
    from .snapshot import Line

    n = data.rfind(b"\n") + 1
    if n <= 0 or n > PREFIX_MAX_BYTES:
        return None
    kept = [Line(ln.line_no, ln.byte_offset, ln.byte_length, b"", ln.has_newline, ln.status,
                 ln.reason, ln.message, ln.warnings) for ln in lines if ln.byte_offset < n]
    evs = [e for e in events if e.byte_offset < n]
    return EventsPrefix(n, _digest(data[:n]), identity, kept, evs)


# --- the cache file ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Entry:
    fp: bytes
    record: bytes
    prefix: bytes | None


class AuditCache:
    """The consolidated cache file. Every failure degrades to a miss, never to an error."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, *,
                 schema_version: int | str) -> None:
        self.directory = os.fspath(directory) if directory is not None else default_cache_dir()
        self.path = os.path.join(self.directory, f"audit-cache-v{CACHE_FORMAT}.sqlite")
        self.code = code_fingerprint(schema_version)
        self._db: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is not None:
            return self._db
        for attempt in range(2):
            try:
                os.makedirs(self.directory, mode=0o700, exist_ok=True)
                db = sqlite3.connect(self.path, timeout=5, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
                db.execute("CREATE TABLE IF NOT EXISTS runs (key TEXT PRIMARY KEY, fp BLOB, "
                           "record BLOB, prefix BLOB)")
                row = db.execute("SELECT v FROM meta WHERE k='code'").fetchone()
                if row is None or row[0] != self.code:  # toolkit changed: drop everything
                    db.execute("BEGIN IMMEDIATE")
                    db.execute("DELETE FROM runs")
                    db.execute("INSERT OR REPLACE INTO meta VALUES ('code', ?)", (self.code,))
                    db.execute("COMMIT")
                self._db = db
                return db
            except (sqlite3.DatabaseError, OSError):
                with contextlib.suppress(Exception):
                    db.close()  # type: ignore[possibly-undefined]
                if attempt == 0:
                    self._discard()
        return None

    def _discard(self) -> None:
        """Remove a corrupt cache file (our own file, outside every source)."""
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.unlink(self.path + suffix)

    def get_many(self, keys: list[str]) -> dict[str, Entry]:
        """The rows of ``keys`` (absent keys are absent), by one scan of the key range they
        span (a fleet's keys share their root's prefix, so the range holds few others)."""
        db = self._connect()
        out: dict[str, Entry] = {}
        if db is None or not keys:
            return out
        wanted = set(keys)
        try:
            for key, fp, rec in db.execute(
                    "SELECT key, fp, record FROM runs WHERE key BETWEEN ? AND ?",
                    (min(keys), max(keys))):
                if key in wanted:
                    out[key] = Entry(fp, rec, None)
        except sqlite3.DatabaseError:
            self.close()
            self._discard()
            return {}
        return out

    def get_prefix(self, key: str) -> bytes | None:
        """The stored ``events.jsonl`` prefix of one run (fetched only for a miss)."""
        db = self._connect()
        if db is None:
            return None
        try:
            row = db.execute("SELECT prefix FROM runs WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError:
            return None
        return row[0] if row else None

    def put_many(self, rows: Iterable[tuple[str, bytes, bytes, bytes | None]]) -> None:
        rows = list(rows)
        if not rows:
            return
        db = self._connect()
        if db is None:
            return
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?)", rows)
            db.execute("COMMIT")
        except sqlite3.DatabaseError:
            with contextlib.suppress(sqlite3.DatabaseError):
                db.execute("ROLLBACK")

    def close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.DatabaseError):
                self._db.close()
            self._db = None


def decode_records(blobs: list[bytes]) -> list[dict[str, Any] | None]:
    """:func:`decode_record` of each blob; one decoder call for all of them when they are all
    valid (the warm audit's common case)."""
    if not blobs:
        return []
    try:
        recs = msgspec.json.decode(b"[" + b",".join(blobs) + b"]")
    except msgspec.DecodeError:
        recs = None
    # the join of valid records is their array; anything else (a row holding "1],[2", a
    # corrupt byte) is decoded one blob at a time
    if isinstance(recs, list) and len(recs) == len(blobs) and all(
            type(r) is dict for r in recs):
        return recs
    return [decode_record(b) for b in blobs]


def decode_record(blob: bytes) -> dict[str, Any] | None:
    try:
        rec = msgspec.json.decode(blob)
    except msgspec.DecodeError:
        return None
    return rec if isinstance(rec, dict) else None


def decode_prefix(blob: bytes | None, identity: tuple[int, int] | None) -> EventsPrefix | None:
    if blob is None or identity is None:
        return None
    try:
        prefix = pickle.loads(blob)
    except Exception:  # a corrupt row is a miss
        return None
    if not isinstance(prefix, EventsPrefix) or prefix.identity != identity:
        return None
    return prefix


# --- one run, in a worker or in-process --------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Recorder:
    """What a record is, supplied by the layer that owns it (module-level functions, so it
    pickles into worker processes by reference).

    Attributes:
        compute: the record of a run that was read.
        on_error: the record of a run the toolkit failed on (never raises).
        cacheable: whether a computed record may be stored.
        schema_version: the record schema version (part of the cache's code fingerprint).
    """

    compute: Callable[[Any], dict[str, Any]]
    on_error: Callable[[Any, BaseException], dict[str, Any]]
    cacheable: Callable[[dict[str, Any]], bool]
    schema_version: int | str
    clean: bool = False
    """Read runs with ``read_run(clean=True)`` (``compute`` reads a clean log's columns)."""


@dataclass(frozen=True, slots=True)
class Job:
    """One run to audit, with what the cache knows about it."""

    run_dir: str
    is_subagent: bool
    parent_run_dir: str | None
    key: str | None = None          # None: cache disabled
    fp: Fingerprint | None = None
    prefix: bytes | None = None     # pickled EventsPrefix from the cache (may not apply)


def audit_job(job: Job, held_keys: frozenset[str], recorder: Recorder,
              locks: frozenset[str] | None = None) -> tuple[dict[str, Any], tuple | None]:
    """Audit one run; return its record and the cache row to store (or None).

    ``locks``: ``/proc/locks`` as read for the batch this run is in (None: read it now)."""
    from .discovery import RunLocation
    from .snapshot import read_run

    loc = RunLocation(job.run_dir, job.is_subagent, job.parent_run_dir)
    decoded: list[Any] = []
    prefix = (decode_prefix(job.prefix, job.fp.events_identity)
              if job.fp is not None and job.prefix is not None else None)
    try:
        run = read_run(job.run_dir, is_subagent=job.is_subagent,
                       parent_run_dir=job.parent_run_dir, events_prefix=prefix,
                       decoded_out=decoded if job.key is not None else None,
                       clean=recorder.clean, held_locks=locks)
        record = recorder.compute(run)
    except Exception as exc:  # one bad run must not stop a fleet audit
        return recorder.on_error(loc, exc), None
    if job.key is None or job.fp is None or not recorder.cacheable(record):
        return record, None
    if run.live_changed or run.writer_active:
        return record, None
    after = fingerprint(job.run_dir, held_keys, lock_content=False)
    if after is None or after.blob != job.fp.blob:
        return record, None
    if after.newest_mtime_ns > time.time_ns() - int(RACY_SECONDS * 1e9):
        return record, None
    prefix_blob = None
    manifest = run.manifest or {}
    if not decoded and run.fast is not None and run.events_bytes:
        from .snapshot import clean_objects  # read as a clean log: no objects yet

        if after.events_identity is not None and manifest.get("terminal") is not True:
            decoded.append(clean_objects(run))
    if (run.events_bytes and decoded and after.events_identity is not None
            and manifest.get("terminal") is not True):
        p = make_prefix(run.events_bytes, decoded[0][0], decoded[0][1], after.events_identity)
        if p is not None:
            prefix_blob = pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        blob = msgspec.json.encode(record)
    except UnicodeEncodeError:  # a path that is not UTF-8: audited, not stored
        return record, None
    return record, (job.key, after.blob, blob, prefix_blob)


# --- the fleet: cache lookups, then a process pool over the misses -----------------------------

PARALLEL_MIN_RUNS = 32
"""Below this many runs to read, a pool costs more than it saves."""


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


LOCKS_BATCH = 64
"""Runs audited per read of ``/proc/locks`` (a worker's chunk holds at most this many)."""


def _chunk_worker(jobs: list[Job], held_keys: frozenset[str],
                  recorder: Recorder) -> list[tuple[dict, tuple | None]]:
    return list(_audit_jobs(jobs, held_keys, recorder))


def _audit_jobs(jobs: list[Job], held_keys: frozenset[str],
                recorder: Recorder) -> Iterator[tuple[dict, tuple | None]]:
    import gc

    locks = None
    for n, job in enumerate(jobs):
        if n % LOCKS_BATCH == 0:  # which writer locks are held: read once per batch of runs
            locks = proc_locked_keys()
        gc.disable()  # parsing builds many containers and no cycles: skip the collector
        try:
            result = audit_job(job, held_keys, recorder, locks)
        finally:
            gc.enable()
        yield result


def _pool_context() -> Any:
    import multiprocessing as mp
    import threading

    # fork is cheapest (modules already imported), but unsafe once other threads exist.
    if "fork" in mp.get_all_start_methods() and threading.active_count() == 1:
        return mp.get_context("fork")
    return mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods()
                          else "spawn")


def run_fleet(locations: list[Any], *, recorder: Recorder, jobs: int | None,
              cache: AuditCache | None, progress: Any = None,
              listings: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """Audit every location: cache hits are reused, misses are read (in a pool when large).

    ``listings``: run folder -> entry names, as discovery listed them (see
    :func:`fingerprint`)."""
    listings = listings or {}
    held = proc_locked_keys() if cache is not None else frozenset()
    records: list[dict[str, Any] | None] = [None] * len(locations)
    todo: list[tuple[int, Job]] = []
    entries: dict[str, Entry] = {}
    keys: list[str | None] = [None] * len(locations)
    if cache is not None:
        keys = [run_key(loc.run_dir, loc.is_subagent, loc.parent_run_dir) for loc in locations]
        entries = cache.get_many([k for k in keys if k is not None])
    hits = 0
    fps: list[Fingerprint | None] = [None] * len(locations)
    if cache is not None:
        fps = [fingerprint(loc.run_dir, held, listings.get(loc.run_dir), lock_content=False)
               for loc in locations]
        # the hits' records decoded in one call (a bad row is a miss: decoded alone)
        hit_at = [i for i, (key, fp) in enumerate(zip(keys, fps, strict=True))
                  if fp is not None and key in entries and entries[key].fp == fp.blob]
        for i, rec in zip(hit_at, decode_records([entries[keys[i]].record  # type: ignore[index]
                                                  for i in hit_at]), strict=True):
            records[i] = rec
        hits = len(locations) - records.count(None)
    for i, loc in enumerate(locations):
        if records[i] is not None:
            continue
        key, fp = keys[i], fps[i]
        ent = entries.get(key) if key is not None else None
        prefix = (cache.get_prefix(key) if cache is not None and key is not None
                  and ent is not None and fp is not None and fp.events_identity is not None
                  else None)
        todo.append((i, Job(loc.run_dir, loc.is_subagent, loc.parent_run_dir,
                            key if fp is not None else None, fp, prefix)))
    if progress is not None and hits:
        progress(hits)
    n_jobs = default_jobs() if jobs is None else max(1, jobs)
    n_jobs = min(n_jobs, max(1, len(todo) // 8))
    to_store = []
    if n_jobs > 1 and len(todo) >= PARALLEL_MIN_RUNS:
        from concurrent.futures import ProcessPoolExecutor

        size = max(4, min(64, len(todo) // (n_jobs * 8)))
        chunks = [todo[i:i + size] for i in range(0, len(todo), size)]
        with ProcessPoolExecutor(max_workers=n_jobs, mp_context=_pool_context()) as ex:
            futs = [(chunk, ex.submit(_chunk_worker, [j for _i, j in chunk], held, recorder))
                    for chunk in chunks]
            for chunk, fut in futs:
                for (i, _job), (rec, row) in zip(chunk, fut.result(), strict=True):
                    records[i] = rec
                    if row is not None:
                        to_store.append(row)
                if progress is not None:
                    progress(len(chunk))
    else:
        results = _audit_jobs([job for _i, job in todo], held, recorder)
        for (i, _job), (rec, row) in zip(todo, results, strict=True):
            records[i] = rec
            if row is not None:
                to_store.append(row)
            if progress is not None:
                progress(1)
    if cache is not None:
        cache.put_many(to_store)
    return [r for r in records if r is not None]
