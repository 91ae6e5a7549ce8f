"""Read-only loading of relayflowd run journals (spec ``relayflowd-journal.md`` journal §1, journal §3).

Discovery never follows a symlink and never opens a FIFO or device. A SQLite journal is
copied (with its ``-wal``, never its ``-shm``) into a private temporary directory, fingerprinted
before and after, and only the copy is opened; the source files are never opened by SQLite.
JSON journals are read with the project's bounded, no-follow reader. Every source reduces to
one list of accepted :class:`Envelope` rows ordered by ``(seq, position)`` plus quarantine rows
with their position and a stable reason code (``errors.RELAY_QUARANTINE_REASONS``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sqlite3
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import RELAY_ENTRY_TYPES
from ..read.io import read_file, split_physical_lines

SAFE_INT = 2**53 - 1
ATTEMPT_MAX = 2**32 - 1
SQLITE_HEADER = b"SQLite format 3\x00"
BUSY_ATTEMPTS = 5
BUSY_WAIT_S = 0.05

ENTRY_TYPES = RELAY_ENTRY_TYPES

SOURCE_KINDS = ("sqlite", "jsonl", "replay_json", "journal_read")


# --- data ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Envelope:
    """One accepted journal entry (journal §3).

    Attributes:
        seq, segment_id, entry_type, run_id, step_id, attempt, at_ms, payload: the envelope.
        position: 0-based order of the row/line/element in its source (ties on ``seq``).
        line_no: 1-based physical line (JSON shapes) or ``None`` (SQLite).
        element: index inside a ``journal_read`` page, else ``None``.
    """

    seq: int
    segment_id: int
    entry_type: str
    run_id: str
    step_id: str | None
    attempt: int | None
    at_ms: int
    payload: dict[str, Any]
    position: int
    line_no: int | None = None
    element: int | None = None


@dataclass(frozen=True, slots=True)
class QuarantineRow:
    """A row, line or element that is not an accepted entry, with where and why."""

    reason: str
    message: str
    position: int
    line_no: int | None = None
    byte_offset: int | None = None
    element: int | None = None
    seq: int | None = None
    entry_type: str | None = None


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """A warning (or the unreadable reason) about one journal: code, message, where."""

    code: str
    message: str
    where: str | None = None


@dataclass(frozen=True, slots=True)
class Journal:
    """One journal as read: accepted entries, quarantine, warnings.

    Attributes:
        path: the file (for SQLite the ``.sqlite3``) as reported (relative to PATH or absolute).
        abspath: absolute path of the file.
        source_kind: ``sqlite``, ``jsonl``, ``replay_json`` or ``journal_read``.
        run_id: from ``meta`` (SQLite) or the lowest-seq accepted entry; None when unreadable.
        entries: accepted envelopes ordered by ``(seq, position)``.
        quarantine: quarantined rows/lines/elements in source order.
        unreadable: the reason code when journal §1.1 failed or the file could not be read.
        segments: SQLite ``segments`` rows ``(segment_id, opened_seq)``, else None.
        warnings: diagnostics that do not change the verdict.
    """

    path: str
    abspath: str
    source_kind: str
    run_id: str | None
    entries: tuple[Envelope, ...] = ()
    quarantine: tuple[QuarantineRow, ...] = ()
    unreadable: Diagnostic | None = None
    segments: tuple[tuple[int, int], ...] | None = None
    warnings: tuple[Diagnostic, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Candidate:
    """A file discovery decided to read: its path, reported path and kind (sqlite/json)."""

    abspath: str
    path: str
    kind: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """A path looked at and not audited, with a reason from ``RELAY_SKIP_REASONS``."""

    path: str
    reason: str
    message: str = ""


# --- discovery -------------------------------------------------------------------------------


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _journal_like(name: str) -> bool:
    return name.endswith((".sqlite3", ".sqlite3-wal", ".sqlite3-shm", ".jsonl"))


def discover(paths: Sequence[str], *, max_depth: int = 16,
             exclude_names: frozenset[str] = frozenset()
             ) -> tuple[list[Candidate], list[Skipped]]:
    """Find journals under each path (a file, or a directory walked recursively).

    Only regular files are considered: symlinks are never followed (a symlinked journal is
    listed as skipped), FIFOs and devices never opened. ``*.sqlite3`` files are SQLite
    journals except the registry ``relayflowd.sqlite3``; a ``-wal``/``-shm`` belongs to its
    ``.sqlite3``; ``*.jsonl`` files are JSON candidates (their shape is decided on reading).
    Files named in ``exclude_names`` are not looked at while walking (e.g. ``events.jsonl``).

    >>> discover(["/nonexistent-relay"])[1][0].reason
    'unreadable'
    """
    found: list[Candidate] = []
    skipped: list[Skipped] = []
    for root in paths:
        st = _lstat(root)
        if st is None:
            skipped.append(Skipped(root, "unreadable", "path does not exist or cannot be stat'ed"))
            continue
        if stat.S_ISDIR(st.st_mode) or (stat.S_ISLNK(st.st_mode) and os.path.isdir(root)):
            _walk(root, root, 0, max_depth, found, skipped, exclude_names)  # PATH used as given
        else:
            _classify(os.path.abspath(root), root, st, found, skipped, explicit=True)
    found.sort(key=lambda c: c.path)
    skipped.sort(key=lambda s: s.path)
    return found, skipped


def _walk(root: str, directory: str, depth: int, max_depth: int, found: list[Candidate],
          skipped: list[Skipped], exclude: frozenset[str]) -> None:
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        skipped.append(Skipped(os.path.relpath(directory, root), "unreadable", str(exc)))
        return
    for e in entries:
        if e.name in exclude:
            continue
        # an ordinary file that cannot be a journal is never looked at: no stat, no relpath
        # (a fleet's run folders hold thousands of them; the directory entry's type is known)
        with contextlib.suppress(OSError):
            if (not _journal_like(e.name) and not e.is_symlink()
                    and not e.is_dir(follow_symlinks=False)):
                continue
        rel = os.path.relpath(e.path, root)
        try:
            st = e.stat(follow_symlinks=False)
        except OSError as exc:
            skipped.append(Skipped(rel, "unreadable", str(exc)))
            continue
        if stat.S_ISDIR(st.st_mode):
            if depth + 1 <= max_depth:
                _walk(root, e.path, depth + 1, max_depth, found, skipped, exclude)
            continue
        if stat.S_ISLNK(st.st_mode) and os.path.isdir(e.path):
            skipped.append(Skipped(rel, "symlink", "a symlinked directory: never followed"))
            continue
        _classify(os.path.abspath(e.path), rel, st, found, skipped, explicit=False)


def _classify(abspath: str, rel: str, st: os.stat_result, found: list[Candidate],
              skipped: list[Skipped], *, explicit: bool) -> None:
    name = os.path.basename(abspath)
    if not explicit and not _journal_like(name):
        return  # unrelated files are not "looked at"
    if stat.S_ISLNK(st.st_mode):
        skipped.append(Skipped(rel, "symlink", "symlinks are never followed"))
        return
    if not stat.S_ISREG(st.st_mode):
        skipped.append(Skipped(rel, "not_regular", "not a regular file; never opened"))
        return
    if name == "relayflowd.sqlite3":
        skipped.append(Skipped(rel, "registry", "the run registry is not a journal"))
        return
    for suffix, reason in (("-wal", "wal_without_database"), ("-shm", "shm_without_database")):
        if name.endswith(".sqlite3" + suffix):
            base = abspath[: -len(suffix)]
            bst = _lstat(base)
            if bst is None or not stat.S_ISREG(bst.st_mode):
                skipped.append(Skipped(rel, reason, f"{os.path.basename(base)} is missing"))
            elif explicit:  # named on the command line: audit its database
                found.append(Candidate(base, rel[: -len(suffix)], "sqlite"))
            return
    if name.endswith(".sqlite3"):
        found.append(Candidate(abspath, rel, "sqlite"))
    elif name.endswith(".jsonl") or explicit:
        found.append(Candidate(abspath, rel, "json"))


# --- SQLite ----------------------------------------------------------------------------------

Fingerprint = tuple[int, int, int, int, int] | None


def fingerprint(path: str) -> Fingerprint:
    """``(device, inode, size, mtime_ns, ctime_ns)`` without following symlinks; None if absent."""
    st = _lstat(path)
    if st is None:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _Unreadable(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def read_sqlite(abspath: str, path: str | None = None) -> Journal:
    """Read one SQLite journal by copying it (and its ``-wal``) first (journal §1.1).

    Never raises for bad input: a failure makes the journal unreadable with a reason code.
    """
    path = path if path is not None else abspath
    try:
        return _read_sqlite(abspath, path)
    except _Unreadable as exc:
        return Journal(path, abspath, "sqlite", None,
                       unreadable=Diagnostic(exc.code, exc.message, abspath))


def _copy_member(src: str, dst: str) -> None:
    got = read_file(src)
    if got.status == "missing":
        return
    if got.status in ("symlink", "not_regular"):
        code = "wal_not_regular" if src.endswith("-wal") else "unreadable"
        raise _Unreadable(code, f"{src} is a {got.status.replace('_', ' ')}; never read")
    if got.status == "too_large":
        raise _Unreadable("too_large", f"{src} is {got.size} bytes, over the read bound")
    if got.status != "ok" or got.data is None:
        raise _Unreadable("unreadable", f"{src} cannot be read: {got.error}")
    with open(dst, "wb") as fh:
        fh.write(got.data)


def _read_sqlite(abspath: str, path: str) -> Journal:
    wal = abspath + "-wal"
    tmp = tempfile.mkdtemp(prefix="rivumi-relay-")
    try:
        copy = os.path.join(tmp, "journal.sqlite3")
        for attempt in range(BUSY_ATTEMPTS):
            before = (fingerprint(abspath), fingerprint(wal))
            if before[0] is None:
                raise _Unreadable("unreadable", f"{abspath} disappeared")
            for name in ("journal.sqlite3", "journal.sqlite3-wal", "journal.sqlite3-shm"):
                try:
                    os.unlink(os.path.join(tmp, name))
                except FileNotFoundError:
                    pass
            _copy_member(abspath, copy)
            if not os.path.exists(copy):
                raise _Unreadable("unreadable", f"{abspath} disappeared while copied")
            _copy_member(wal, copy + "-wal")
            if (fingerprint(abspath), fingerprint(wal)) == before:
                break
            if attempt + 1 < BUSY_ATTEMPTS:
                time.sleep(BUSY_WAIT_S)
        else:
            raise _Unreadable("journal_busy", f"{abspath} or its -wal changed during each of "
                              f"{BUSY_ATTEMPTS} copies (a writer is committing); try again")
        with open(copy, "rb") as fh:
            head = fh.read(16)
        if head != SQLITE_HEADER:
            raise _Unreadable("not_sqlite", f"{abspath} does not start with 'SQLite format 3\\0' "
                              f"(first bytes {head[:16]!r})")
        return _query_copy(copy, abspath, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _query_copy(copy: str, abspath: str, path: str) -> Journal:
    # read-only open of the private copy; never immutable=1 (it would ignore the -wal)
    uri = "file:" + copy.replace("%", "%25").replace("?", "%3f").replace("#", "%23") + "?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise _Unreadable("sqlite_error", f"cannot open a copy of {abspath}: {exc}") from None
    try:
        try:
            rows = con.execute("PRAGMA quick_check").fetchall()
        except sqlite3.Error as exc:
            raise _Unreadable("sqlite_error", f"{abspath}: {exc}") from None
        if rows != [("ok",)]:
            raise _Unreadable("quick_check_failed", f"{abspath}: PRAGMA quick_check returned "
                              f"{[r[0] for r in rows][:5]!r}")
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.Error as exc:
            raise _Unreadable("meta_invalid", f"{abspath}: cannot read meta: {exc}") from None
        run_id = meta.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise _Unreadable("meta_invalid", f"{abspath}: meta has no non-empty run_id")
        version = meta.get("journal_version")
        if version != "1":
            raise _Unreadable("journal_version_unsupported",
                              f"{abspath}: meta.journal_version is {version!r}, expected '1'")
        try:
            segs = con.execute(
                "SELECT segment_id, opened_seq FROM segments ORDER BY segment_id").fetchall()
            cur = con.execute("SELECT seq, segment_id, entry_type, step_id, attempt, at_ms, "
                              "payload FROM entries ORDER BY seq")
            raw_rows = cur.fetchall()
        except sqlite3.Error as exc:
            raise _Unreadable("schema_invalid", f"{abspath}: {exc}") from None
    finally:
        con.close()
    warnings: list[Diagnostic] = []
    base = os.path.basename(abspath)
    if base != f"{run_id}.sqlite3":
        warnings.append(Diagnostic("run_id_file_mismatch",
                                   f"file name {base} differs from meta.run_id {run_id!r}", abspath))
    segments = tuple((s, o) for s, o in segs if isinstance(s, int) and isinstance(o, int))
    if (len(segments) != len(segs) or not segments or segments[0][1] != 1
            or any(b[1] <= a[1] for a, b in zip(segments, segments[1:], strict=False))):
        warnings.append(Diagnostic("segments_table_inconsistent",
                                   f"segments rows {segs[:5]!r} do not start at opened_seq 1 "
                                   "or are not increasing", abspath))
    entries: list[Envelope] = []
    quarantine: list[QuarantineRow] = []
    for pos, row in enumerate(raw_rows):
        env, q, w = sqlite_row(pos, row, run_id, abspath)
        if env is not None:
            entries.append(env)
        if q is not None:
            quarantine.append(q)
        warnings.extend(w)
    warnings.extend(_at_ms_warnings(entries, abspath))
    return Journal(path, abspath, "sqlite", run_id, tuple(entries), tuple(quarantine),
                   segments=segments, warnings=tuple(warnings))


def sqlite_row(pos: int, row: tuple[Any, ...], run_id: str, where: str
                ) -> tuple[Envelope | None, QuarantineRow | None, list[Diagnostic]]:
    """Check one ``entries`` row ``(seq, segment_id, entry_type, step_id, attempt, at_ms,
    payload)``: an accepted envelope, or a quarantine row; plus warnings."""
    seq, segment_id, entry_type, step_id, attempt, at_ms, payload = row
    warnings: list[Diagnostic] = []
    et = entry_type if isinstance(entry_type, str) else None

    def q(reason: str, message: str) -> tuple[None, QuarantineRow, list[Diagnostic]]:
        return None, QuarantineRow(reason, f"seq {seq}: {message}", pos,
                                   seq=seq if isinstance(seq, int) else None, entry_type=et), []

    if isinstance(payload, bytes):
        try:
            payload = payload.decode("utf-8")
        except UnicodeDecodeError:
            return q("payload_invalid_json", "payload is a BLOB that is not UTF-8 text")
    if not isinstance(payload, str):
        return q("bad_field_type", f"payload is {_json_type(payload)}, not TEXT")
    fields = {"seq": seq, "segment_id": segment_id, "entry_type": entry_type,
              "run_id": run_id, "step_id": step_id, "attempt": attempt, "at_ms": at_ms}
    problem = _check_fields(fields)
    if problem is not None:
        return q(*problem)
    try:
        value, dup = parse_json(payload)
    except ValueError as exc:
        return q("payload_invalid_json", f"payload is not valid JSON: {exc}")
    if not isinstance(value, dict):
        return q("payload_not_object", f"payload is a JSON {_json_type(value)}, not an object")
    if entry_type not in ENTRY_TYPES:
        return q("unknown_entry_type", f"unknown entry_type {entry_type!r}")
    if dup:
        warnings.append(Diagnostic("duplicate_key", f"seq {seq}: payload repeats a key", where))
    if not is_canonical_text(payload):
        warnings.append(Diagnostic("payload_not_canonical",
                                   f"seq {seq}: payload is not canonical JSON (key order or "
                                   "whitespace)", where))
    if has_unsafe_int(value):
        warnings.append(Diagnostic("payload_unsafe_integer",
                                   f"seq {seq}: payload holds an integer beyond 2^53-1", where))
    env = Envelope(seq, segment_id, entry_type, run_id, step_id, attempt, at_ms, value, pos)
    return env, None, warnings


def _check_fields(f: dict[str, Any]) -> tuple[str, str] | None:
    """The envelope check shared by all sources: (reason, message) or None when fine."""
    for name in ("seq", "segment_id", "at_ms"):
        v = f[name]
        if not _is_int(v):
            return "bad_field_type", f"{name} is {_json_type(v)}, not an integer"
    if not isinstance(f["entry_type"], str):
        return "bad_field_type", f"entry_type is {_json_type(f['entry_type'])}, not a string"
    if not isinstance(f["run_id"], str):
        return "bad_field_type", f"run_id is {_json_type(f['run_id'])}, not a string"
    if f["step_id"] is not None and not isinstance(f["step_id"], str):
        return "bad_field_type", f"step_id is {_json_type(f['step_id'])}, not a string or null"
    if f["attempt"] is not None and not _is_int(f["attempt"]):
        return "bad_field_type", f"attempt is {_json_type(f['attempt'])}, not an integer or null"
    for name in ("seq", "segment_id", "at_ms", "attempt"):
        v = f[name]
        if v is not None and abs(v) > SAFE_INT:
            return "unsafe_integer", f"{name} {v} is outside +-(2^53-1)"
    if f["seq"] < 1:
        return "bad_field_value", f"seq {f['seq']} is below 1"
    if f["segment_id"] < 1:
        return "bad_field_value", f"segment_id {f['segment_id']} is below 1"
    if f["attempt"] is not None and not 0 <= f["attempt"] <= ATTEMPT_MAX:
        return "bad_field_value", f"attempt {f['attempt']} is outside 0..2^32-1"
    if not f["run_id"]:
        return "bad_field_value", "run_id is empty"
    return None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _at_ms_warnings(entries: Sequence[Envelope], where: str) -> list[Diagnostic]:
    back = [(a.seq, b.seq) for a, b in zip(entries, entries[1:], strict=False)
            if b.at_ms < a.at_ms]
    if not back:
        return []
    first = back[0]
    return [Diagnostic("at_ms_backwards", f"at_ms steps backwards {len(back)} time(s), first "
                       f"from seq {first[0]} to seq {first[1]} (order is by seq)", where)]


# --- JSON values -----------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259)")


def _parse_float(text: str) -> float:
    v = float(text)
    if math.isinf(v):
        raise ValueError(f"number {text[:40]} is out of range")
    return v + 0.0  # -0.0 and 0.0 are equal JSON numbers


def parse_json(text: str) -> tuple[Any, bool]:
    """Parse RFC 8259 JSON keeping integers and floats apart; also report duplicate keys.

    >>> parse_json('{"a":1,"b":1.0}')
    ({'a': 1, 'b': 1.0}, False)
    >>> parse_json('{"a":1,"a":2}')
    ({'a': 2}, True)
    """
    dup = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal dup
        d = dict(items)
        if len(d) != len(items):
            dup = True
        return d

    value = json.loads(text, parse_constant=_reject_constant, parse_float=_parse_float,
                       object_pairs_hook=pairs)
    return value, dup


def canonical(value: Any) -> str:
    """Canonical JSON text: keys sorted at every depth, compact, ints and floats apart.

    The kernel compares JSON values, where ``1`` and ``1.0`` differ; Python's ``1 == 1.0``
    must never decide such a comparison.

    >>> canonical({"b": [1, 1.0], "a": None})
    '{"a":null,"b":[1,1.0]}'
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def is_canonical_text(text: str) -> bool:
    """True when JSON text has no whitespace outside strings and every object's keys sorted.

    Number spelling is not judged (Rust and Python print floats differently).

    >>> is_canonical_text('{"a":1,"b":{"c":2}}'), is_canonical_text('{"b":1,"a":2}')
    (True, False)
    >>> is_canonical_text('{"a": 1}')
    False
    """
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in " \t\r\n":
            return False
    ok = True

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal ok
        keys = [k for k, _ in items]
        if keys != sorted(keys) or len(set(keys)) != len(keys):
            ok = False
        return dict(items)

    try:
        json.loads(text, object_pairs_hook=pairs)
    except ValueError:
        return False
    return ok


def has_unsafe_int(value: Any) -> bool:
    """True when a JSON value holds an integer outside ±(2⁵³−1) at any depth.

    >>> has_unsafe_int({"a": [2**53]}), has_unsafe_int({"a": 2**53 - 1})
    (True, False)
    """
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) > SAFE_INT:
            return True
    return False


# --- JSON shapes -----------------------------------------------------------------------------


def _shape_of(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    if "entries" in value:
        return "journal_read"
    if "event" in value and "kind" in value:
        return "replay_json"
    if "entry_type" in value:
        return "jsonl"
    return None


@dataclass(slots=True)
class _Line:
    line_no: int
    byte_offset: int
    value: Any = None
    error: tuple[str, str] | None = None


def read_json(abspath: str, path: str | None = None) -> Journal | Skipped:
    """Read one JSON Lines journal of any of the three shapes (journal §3.1–§3.2).

    Returns :class:`Skipped` (``not_a_journal``) when no line has a journal shape, and an
    unreadable :class:`Journal` when the file cannot be read.
    """
    path = path if path is not None else abspath
    got = read_file(abspath)
    if got.status in ("symlink", "not_regular"):
        return Skipped(path, got.status, "never opened")
    if got.status != "ok" or got.data is None:
        code = "too_large" if got.status == "too_large" else "unreadable"
        return Journal(path, abspath, "jsonl", None, unreadable=Diagnostic(
            code, f"{abspath} cannot be read: {got.error or got.status}", abspath))
    return parse_json_lines(got.data, abspath, path)


def parse_json_lines(data: bytes, abspath: str, path: str) -> Journal | Skipped:
    """Parse the bytes of a JSON Lines journal (see :func:`read_json`)."""
    lines: list[_Line] = []
    warnings: list[Diagnostic] = []
    blank = crlf = 0
    physical = split_physical_lines(data)
    for pl_ in physical:
        raw = pl_.raw
        if raw.endswith(b"\r"):
            raw = raw[:-1]
            crlf += 1
        if not raw.strip():
            blank += 1
            continue
        ln = _Line(pl_.line_no, pl_.byte_offset)
        torn = not pl_.has_newline
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            ln.error = ("torn_tail" if torn else "invalid_utf8",
                        f"not valid UTF-8 at byte {exc.start}")
            lines.append(ln)
            continue
        try:
            ln.value, dup = parse_json(text)
            if dup:
                warnings.append(Diagnostic("duplicate_key", "an object repeats a key",
                                           f"{abspath}:{ln.line_no}:{ln.byte_offset}"))
            if torn:
                warnings.append(Diagnostic("final_newline_missing", "the last line parses but "
                                           "has no newline", f"{abspath}:{ln.line_no}:"
                                           f"{ln.byte_offset}"))
        except (ValueError, RecursionError) as exc:
            ln.error = ("torn_tail" if torn else "json_syntax", f"not JSON: {exc}")
        lines.append(ln)
    shape = next((s for s in (_shape_of(ln.value) for ln in lines if ln.error is None) if s),
                 None)
    if shape is None:
        return Skipped(path, "not_a_journal", "no line is a jsonl, replay_json or journal_read "
                       "journal entry")
    if blank:
        warnings.append(Diagnostic("blank_lines", f"{blank} blank line(s) skipped", abspath))
    if crlf:
        warnings.append(Diagnostic("crlf", f"{crlf} line(s) end with CR LF", abspath))
    accepted: list[tuple[dict[str, Any], int, int | None, int]] = []  # (obj, line, element, off)
    quarantine: list[QuarantineRow] = []
    pos = 0
    for ln in lines:
        where = dict(line_no=ln.line_no, byte_offset=ln.byte_offset)
        if ln.error is not None:
            quarantine.append(QuarantineRow(ln.error[0], ln.error[1], pos, **where))
            pos += 1
            continue
        v = ln.value
        s = _shape_of(v)
        if s != shape:
            reason = "not_object" if not isinstance(v, dict) else "shape_mismatch"
            quarantine.append(QuarantineRow(reason, f"line has shape {s or _json_type(v)}, "
                                            f"the file's shape is {shape}", pos, **where))
            pos += 1
            continue
        if shape == "journal_read":
            items = v["entries"]
            if not isinstance(items, list):
                quarantine.append(QuarantineRow("entries_not_array", "entries is "
                                                f"{_json_type(items)}, not an array", pos,
                                                **where))
                pos += 1
                continue
            for i, item in enumerate(items):
                accepted.append((item, ln.line_no, i, ln.byte_offset))
            continue
        if shape == "replay_json":
            ev = v["event"]
            if not isinstance(ev, dict):
                quarantine.append(QuarantineRow("not_object", f"event is {_json_type(ev)}, not "
                                                "an object", pos, **where))
                pos += 1
                continue
            if v.get("kind") != ev.get("entry_type") or v.get("step_id") != ev.get("step_id"):
                quarantine.append(QuarantineRow(
                    "replay_mismatch", f"kind {v.get('kind')!r}/step_id {v.get('step_id')!r} "
                    f"differ from the event's {ev.get('entry_type')!r}/{ev.get('step_id')!r}",
                    pos, seq=ev.get("seq") if _is_int(ev.get("seq")) else None, **where))
                pos += 1
                continue
            v = ev
        accepted.append((v, ln.line_no, None, ln.byte_offset))
    entries: list[Envelope] = []
    for obj, line_no, element, off in accepted:
        env, q = _json_envelope(obj, pos, line_no, element, off)
        if env is not None:
            entries.append(env)
        else:
            assert q is not None
            quarantine.append(q)
        pos += 1
    quarantine.sort(key=lambda r: (r.line_no or 0, r.element if r.element is not None else -1))
    entries.sort(key=lambda e: (e.seq, e.position))
    run_id = entries[0].run_id if entries else None
    warnings.extend(_at_ms_warnings(entries, abspath))
    return Journal(path, abspath, shape, run_id, tuple(entries), tuple(quarantine),
                   warnings=tuple(warnings))


_FIELDS = ("seq", "segment_id", "entry_type", "run_id", "step_id", "attempt", "at_ms", "payload")


def _json_envelope(obj: Any, pos: int, line_no: int, element: int | None, off: int
                   ) -> tuple[Envelope | None, QuarantineRow | None]:
    where = dict(line_no=line_no, element=element, byte_offset=off)
    if not isinstance(obj, dict):
        return None, QuarantineRow("not_object", f"entry is {_json_type(obj)}, not an object",
                                   pos, **where)
    seq = obj.get("seq") if _is_int(obj.get("seq")) else None
    et = obj.get("entry_type") if isinstance(obj.get("entry_type"), str) else None
    missing = [k for k in _FIELDS if k not in obj]
    if missing:
        return None, QuarantineRow("missing_field", f"envelope lacks {', '.join(missing)}", pos,
                                   seq=seq, entry_type=et, **where)
    problem = _check_fields({k: obj[k] for k in _FIELDS if k != "payload"})
    if problem is not None:
        return None, QuarantineRow(*problem, pos, seq=seq, entry_type=et, **where)
    if not isinstance(obj["payload"], dict):
        return None, QuarantineRow("payload_not_object", f"payload is a JSON "
                                   f"{_json_type(obj['payload'])}, not an object", pos, seq=seq,
                                   entry_type=et, **where)
    if obj["entry_type"] not in ENTRY_TYPES:
        return None, QuarantineRow("unknown_entry_type", f"unknown entry_type "
                                   f"{obj['entry_type']!r}", pos, seq=seq, entry_type=et, **where)
    return Envelope(obj["seq"], obj["segment_id"], obj["entry_type"], obj["run_id"],
                    obj["step_id"], obj["attempt"], obj["at_ms"], obj["payload"], pos,
                    line_no, element), None


# --- one entry point -------------------------------------------------------------------------


def read_candidate(c: Candidate) -> Journal | Skipped:
    """Read one discovered candidate (never raises for bad input)."""
    if c.kind == "sqlite":
        return read_sqlite(c.abspath, c.path)
    # an explicitly named file that is SQLite by content is read as SQLite
    got = _lstat(c.abspath)
    if got is not None and stat.S_ISREG(got.st_mode) and not c.abspath.endswith(".jsonl"):
        try:
            fd = os.open(c.abspath, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                head = os.read(fd, 16)
            finally:
                os.close(fd)
            if head == SQLITE_HEADER:
                return read_sqlite(c.abspath, c.path)
        except OSError:
            pass
    return read_json(c.abspath, c.path)


def iter_journals(paths: Sequence[str] | str, *, max_depth: int = 16,
                  exclude_names: frozenset[str] = frozenset()
                  ) -> tuple[Iterator[Journal], list[Skipped]]:
    """Discover and lazily read journals; the skipped list grows as files are read."""
    if isinstance(paths, str | os.PathLike):
        paths = [os.fspath(paths)]
    cands, skipped = discover([os.fspath(p) for p in paths], max_depth=max_depth,
                              exclude_names=exclude_names)

    def gen() -> Iterator[Journal]:
        for c in cands:
            got = read_candidate(c)
            if isinstance(got, Skipped):
                skipped.append(got)
                skipped.sort(key=lambda s: s.path)
            else:
                yield got

    return gen(), skipped


def load_journals(paths: Sequence[str] | str | Iterable[Journal], *, max_depth: int = 16
                  ) -> tuple[list[Journal], list[Skipped]]:
    """Discover and read every journal under ``paths`` (or pass already read journals through).

    >>> load_journals([])
    ([], [])
    """
    if not isinstance(paths, str | os.PathLike):
        items = list(paths)
        if items and all(isinstance(j, Journal) for j in items):
            return items, []  # type: ignore[return-value]
        paths = items  # type: ignore[assignment]
    it, skipped = iter_journals(paths, max_depth=max_depth)  # type: ignore[arg-type]
    journals = list(it)
    return journals, skipped
