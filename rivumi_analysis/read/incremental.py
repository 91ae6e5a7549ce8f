"""What an incremental reader keeps between reads of a run: fingerprints, the racy window,
the decoded prefix of a grown ``events.jsonl``, the toolkit's code fingerprint.

The store (:mod:`rivumi_analysis.store`, the toolkit's one incremental cache: every table and
the audit's records) and ``watch`` build on these. A run read again is served from what was
kept only when its *fingerprint* is unchanged: the run folder's identity, its listing (every
entry's name, so temp leftovers and subagent folders show) and, for every file a record is
read from (``session.json``, ``request.json``, ``events.jsonl``, ``result.json``,
``checkpoint.json``, ``backend-result.json``, ``.writer.lock``), its mode, size, ``mtime_ns``,
``ctime_ns``, inode and device, plus whether a live process holds ``.writer.lock``
(``/proc/locks``).

When ``events.jsonl`` only grew (same inode), the decoded complete lines of the already-read
prefix are reused after checking the prefix's size, its final ``\\n`` and a BLAKE2b hash of the
whole prefix; decoding resumes at the first line that was not complete. Any doubt falls back to
a full read, so a warm result always equals a cold one. What was read within
:data:`RACY_SECONDS` of a file's modification is never trusted (a file modified within the
timestamp granularity could change again without changing its identity).

The toolkit never writes into a run directory: what it keeps lives in
``$RIVUMI_ANALYSIS_CACHE_DIR`` or ``${XDG_CACHE_HOME:-~/.cache}/rivumi-analysis``.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import Any

import msgspec

from .._version import __version__
from .snapshot import _RUN_FILES, _lock_key

RACY_SECONDS = 2.0
"""A run with a file modified less than this long ago is read but what was read is not kept."""

PREFIX_MAX_BYTES = 64 * 1024 * 1024
"""Largest ``events.jsonl`` prefix whose decoded lines are kept for incremental reads."""


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
        # this file is rivumi_analysis/read/incremental.py: walk the whole package
        pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{__version__}|{schema_version}|{TABLE_SCHEMA_VERSION}".encode())
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


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What a run's record depends on, as bytes, plus the newest mtime (for the racy check)."""

    blob: bytes
    newest_mtime_ns: int
    events_identity: tuple[int, int] | None  # (inode, device) of a regular events.jsonl


def fingerprint(run_dir: str, held_keys: frozenset[str],
                names: list[str] | None = None) -> Fingerprint | None:
    """Fingerprint a run folder (``None`` when it cannot be listed: never cached).

    ``names``: the folder's entries as discovery just listed them (``discover(listings=)``),
    so it is not listed a second time: the same fingerprint as listing it now. The lock
    file counts by its identity (``ctime_ns``/``mtime_ns``/size, as every other file) and
    whether a process holds it, never by its bytes.
    """
    if names is None:
        try:
            names = os.listdir(run_dir)
        except OSError:
            return None
    return _fingerprint_listed(run_dir, held_keys, names)


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


# --- stored prefixes -------------------------------------------------------------------------

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
