"""Read one run directory into an immutable snapshot (``RunData``), never modifying it.

The snapshot holds everything the rules, reducer and tables need: parsed documents, every
physical line with its status, and the accepted events. Reading a live run is retried until
the manifest is the same before and after the log was read.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from . import runner_json as _runner_json
from .decode import (
    _may_split,
    _without_lone_surrogates,
    decode_line,
    native_envelope_warnings,
    parse_created_at,
)
from .discovery import DEFAULT_MAX_DEPTH, RunLocation, Skipped, Source, discover
from .io import (
    RUNNER_FILE_LIMIT,
    FileRead,
    PhysicalLine,
    lstat_identity,
    read_file,
    split_physical_lines,
)

STABLE_READ_ATTEMPTS = 6
RETRY_SLEEP_SECONDS = 0.002
TAIL_RACY_SECONDS = 2.0
"""A torn ``events.jsonl`` modified less than this long ago (wall clock against its mtime)
may be a write still in flight: :func:`_tail_in_flight` waits for it. ``write()`` stamps the
mtime before it copies a byte, so an in-flight line's mtime is as old as the writer's
preemption (milliseconds, even on a loaded machine); 2 s is far above that, and a crashed
run's log is older than that by the time it is audited, except right after the crash. (The
same window as ``read.incremental.RACY_SECONDS``.)"""
TAIL_WAIT_SECONDS = 0.25
"""Bound on the sleeps waiting for an in-flight line to complete (doubling from
:data:`RETRY_SLEEP_SECONDS`: 2, 4, ... 128 ms, 254 ms in all, once per read). A writer
preempted mid-``write()`` on a loaded 2-core machine runs again within tens of ms; one that
stays stalled longer is reported as a torn tail, as before."""
_PAGE_BYTES = 4096
"""The smallest page size: a page-cache write grows the file's size one page (or folio, a
multiple of it) at a time, so a read overlapping an in-flight write ends on a multiple."""
_DOC_DECODER = msgspec.json.Decoder()

_NOT_READ = FileRead("not_read")
_NOT_FOR_COLUMNS = frozenset({"request.json", "result.json"})
# states need the limits in request.json, and drift's run-fact cross-checks result.json
# (``tables.facts``)
_NOT_FOR_STATES: frozenset[str] = frozenset()

ATOMIC_WRITE_TARGETS = frozenset({
    "session.json", "request.json", "checkpoint.json", "result.json", "verification.json",
    "backend-result.json", "changes.patch", "test.log",
})


class Line(msgspec.Struct, frozen=True, gc=False):
    """One physical line of ``events.jsonl`` and what became of it.

    (A frozen msgspec Struct rather than a dataclass: one is built per line, and a Struct is
    built about ten times faster. Neither holds a reference cycle, hence ``gc=False``.)

    ``raw`` (the bytes without ``\\n``) is kept only for quarantined lines, which the
    quarantine table reports; for the others it is ``b""`` and the bytes are
    ``events_bytes[byte_offset:byte_offset + byte_length]`` (a second copy of every line
    would double the memory of a loaded fleet).
    """

    line_no: int
    byte_offset: int
    byte_length: int
    raw: bytes
    has_newline: bool
    status: str  # accepted | quarantined | blank
    reason: str | None = None
    message: str | None = None
    warnings: tuple[str, ...] = ()


class Event(msgspec.Struct, frozen=True, gc=False):
    """One accepted event (envelope typed, ``data`` kept as exact JSON text and parsed)."""

    line_no: int
    byte_offset: int
    byte_length: int
    sequence: int
    event_type: str
    run_id: Any
    task_id: Any
    event_id: Any
    created_at: datetime | None
    text: str | None
    data_json: str | None
    data: dict[str, Any]
    warnings: tuple[str, ...]
    obj: dict[str, Any] = msgspec.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunData:
    """Everything read from one run directory."""

    run_dir: str
    kind: str
    run_id: str | None
    is_subagent: bool
    parent_run_dir: str | None
    listing: tuple[str, ...]
    files: dict[str, FileRead]
    manifest: dict[str, Any] | None
    manifest_error: str | None
    request: dict[str, Any] | None
    request_error: str | None
    result: Any
    checkpoint: Any
    backend_result: Any
    lines: list[Line]
    events: list[Event]
    events_bytes: bytes | None
    events_status: str
    writer_lock_token: str | None
    writer_active: bool
    live_changed: bool
    source_root: str | None = None  # discovery's RunLocation.source_root (run_path)
    manifest_model: Any = None
    """``read.fast_models.SessionManifest`` decoded straight from ``session.json`` when read
    for the audit (``read_run(clean=True)``) and the twin accepts it; ``manifest`` then holds
    only the keys the audit reads of the document (:func:`audit_manifest`)."""
    fast: Any = None
    """The log's ``cleanlog.CleanLog`` when it is clean and the run was read for columns
    (``read_run(columnar=True)``: only the columnar table builders may use the run) or for
    the audit (``read_run(clean=True)``: every other field is complete, and the verdict
    rules read the columns); ``lines`` and ``events`` are then empty (:func:`exact_run`
    gives the complete snapshot). None: the log was read line by line."""

    @property
    def run_path(self) -> str:
        """``run_dir`` relative to the source it was found under (its name when unknown)."""
        if self.source_root:
            return os.path.relpath(self.run_dir, self.source_root)
        return os.path.basename(os.path.normpath(self.run_dir))

    @property
    def manifest_status(self) -> str:
        return self.files["session.json"].status

    @property
    def quarantined(self) -> list[Line]:
        return [ln for ln in self.lines if ln.status == "quarantined"]


@dataclass(frozen=True, slots=True)
class Fleet:
    runs: list[RunData]
    skipped: list[Skipped]
    root_used: str | None


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small acyclic objects.

    Loading creates millions of dicts and tuples and no reference cycles; letting the
    collector rescan the growing heap made loading about 1.5x slower.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_fleet(source: Source | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH,
               progress: Callable[[int, int], None] | None = None) -> Fleet:
    """Discover and read every run below ``source`` once; any ``*_df`` loader accepts the result.

    ``progress(done, total)`` is called once after discovery (``done=0``) and after each run
    read (the CLI draws its progress from it).

    >>> from rivumi_analysis import events_df, runs_df
    >>> fleet = load_fleet("tests/fixtures/example")
    >>> runs_df(fleet).height, events_df(fleet).height
    (1, 50)
    """
    found = discover(source, max_depth=max_depth)
    with gc_paused():
        if progress is None:
            runs = [read_run(loc.run_dir, is_subagent=loc.is_subagent,
                             parent_run_dir=loc.parent_run_dir, source_root=loc.source_root)
                    for loc in found.runs]
        else:
            total = len(found.runs)
            progress(0, total)
            runs = []
            for loc in found.runs:
                runs.append(read_run(loc.run_dir, is_subagent=loc.is_subagent,
                                     parent_run_dir=loc.parent_run_dir,
                                     source_root=loc.source_root))
                progress(len(runs), total)
    return Fleet(runs=runs, skipped=found.skipped, root_used=found.root_used)


def runs_of(source: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[RunData]:
    """Runs for a loader: a loaded :class:`Fleet`, a ``RunData`` or a list of them, or a source.

    Passing a fleet loaded once with :func:`load_fleet` lets several tables share one read.
    """
    if isinstance(source, Fleet):
        return source.runs
    if isinstance(source, RunData):
        return [source]
    if isinstance(source, (list, tuple)) and source and all(
            isinstance(r, RunData) for r in source):
        return list(source)
    return load_fleet(source, max_depth=max_depth).runs


def is_loaded(source: Any) -> bool:
    """Whether ``source`` is runs read already (a :class:`Fleet`, a ``RunData`` or a non-empty
    list of them), not a path source to discover.

    >>> is_loaded([]), is_loaded(Fleet(runs=[], skipped=[], root_used=None))
    (False, True)
    """
    return isinstance(source, (Fleet, RunData)) or (
        isinstance(source, (list, tuple)) and bool(source)
        and all(isinstance(r, RunData) for r in source))


def stream_runs(source: Any, *, max_depth: int = DEFAULT_MAX_DEPTH,
                columnar: bool = False) -> Iterator[RunData]:
    """Like :func:`runs_of`, but reads path sources one run at a time (discovery first, so
    usage errors are raised before anything is read). ``columnar``: see :func:`read_run`."""
    if is_loaded(source):
        return iter(runs_of(source))
    return iter_runs(discover(source, max_depth=max_depth).runs, columnar=columnar)


def iter_runs(locations: list[RunLocation], *, columnar: bool = False,
              skim: bool = False) -> Iterator[RunData]:
    """Read runs one at a time, so memory is bounded by the largest run."""
    for loc in locations:
        yield read_run(loc.run_dir, is_subagent=loc.is_subagent, parent_run_dir=loc.parent_run_dir,
                       source_root=loc.source_root, columnar=columnar, skim=skim)


def _msgspec_may_read(data: bytes) -> bool:
    """Whether msgspec may decode ``data`` for the runner's ``json.loads``: msgspec's own depth
    limit depends on the stack, so only text that cannot reach the documented limit goes to
    it (a RecursionError falls back to the explicit parser). A document msgspec decodes whole
    needs no integer check: msgspec refuses every literal of more than the toolkit's
    ``INT_MAX_DIGITS`` digits whatever ``PYTHONINTMAXSTRDIGITS`` says (and a negative one of
    exactly that many; ``tests/test_audit_cold.py`` pins both), and a refusal goes to the
    explicit parser, which decides as ``json.loads`` with the documented limits."""
    return data.count(b"[") + data.count(b"{") <= _runner_json.PYTHON_JSON_MAX_DEPTH


def _parse_json_doc(fr: FileRead) -> tuple[Any, str | None]:
    """``json.loads`` on UTF-8 text, as the runner reads its JSON documents."""
    if fr.status != "ok" or fr.data is None:
        return None, None
    if _msgspec_may_read(fr.data):
        try:
            # msgspec reads standard JSON exactly as json.loads does; what it refuses (NaN,
            # Infinity, lone surrogates) goes to json.loads, as the runner
            return _DOC_DECODER.decode(fr.data), None
        except (msgspec.DecodeError, RecursionError):
            pass  # (msgspec accepts only valid UTF-8: the text is decoded only from here on)
    try:
        text = fr.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not valid UTF-8 at byte {exc.start}"
    try:
        return _runner_json.loads(text), None
    except _runner_json.TooDeep as exc:
        # The runner's json.loads overflows the recursion limit and resume crashes; the
        # toolkit's documented decision: not valid JSON (corrupt, manifest_invalid_json).
        return None, f"{exc}: the runner's JSON parser overflows (documented decision)"
    except _runner_json.IntTooLong as exc:
        return None, f"{exc}: the runner's json.loads refuses it"
    except ValueError as exc:
        return None, f"not valid JSON: {exc}"


class _CheckpointKeys(msgspec.Struct):
    """What the audit reads of ``checkpoint.json`` (``_kind``, ``_run_id``) and the run facts
    cross-check (``tables.facts``: status, step, usage)."""

    backend_name: Any = msgspec.UNSET
    resumable: Any = msgspec.UNSET
    run_id: Any = msgspec.UNSET
    status: Any = msgspec.UNSET
    step: Any = msgspec.UNSET
    usage: Any = msgspec.UNSET


class _ResultKeys(msgspec.Struct):
    """What the audit reads of ``result.json`` (``resume``'s result rules, the record) and
    the run facts (``tables.facts``: usage and the per-lane ``model_usage``)."""

    status: Any = msgspec.UNSET
    terminal_reason: Any = msgspec.UNSET
    usage: Any = msgspec.UNSET
    model_usage: Any = msgspec.UNSET


_AUDIT_DOCS = {"checkpoint.json": (msgspec.json.Decoder(_CheckpointKeys),
                                   _CheckpointKeys.__struct_fields__),
               "result.json": (msgspec.json.Decoder(_ResultKeys), _ResultKeys.__struct_fields__)}


def audit_doc(fr: FileRead, name: str) -> Any:
    """``_parse_json_doc(fr)[0]`` with only the keys the audit reads when it is an object
    (``checkpoint.json``, ``result.json``: a 20 KB checkpoint for three keys).

    A typed decode that skips every other value gives exactly that when the text is valid
    UTF-8 (a skipped string's UTF-8 is not checked), cannot nest past the runner's limit and
    has no long digit run (a skipped integer's length is not checked either): the guard of
    ``read.docskim``, which skims the same way for ``events_df``. What msgspec then accepts
    is a JSON object, the runner's ``json.loads`` reads it as one with the same values for
    these keys (a repeated key: the last, in both), and what it refuses goes to the full
    parse.
    ``tests/test_audit_cold.py`` proves it equal on every sample document and mutations.
    """
    from .docskim import _skimmable

    decoder, keys = _AUDIT_DOCS[name]
    data = fr.data
    if fr.status == "ok" and data is not None and _skimmable(data):
        try:
            doc = decoder.decode(data)
        except (msgspec.DecodeError, RecursionError):
            pass
        else:
            return {k: v for k in keys if (v := getattr(doc, k)) is not msgspec.UNSET}
    full, _err = _parse_json_doc(fr)
    return {k: full[k] for k in keys if k in full} if isinstance(full, dict) else full


class _ManifestKeys(msgspec.Struct):
    """What the audit reads of ``session.json`` as a document (the record, ``_kind``,
    ``_run_id``, ``resume``'s messages); the rest it reads from the twin."""

    last_event_sequence: Any = msgspec.UNSET
    phase: Any = msgspec.UNSET
    provider_name: Any = msgspec.UNSET
    run_id: Any = msgspec.UNSET
    terminal: Any = msgspec.UNSET


_MANIFEST_KEYS = msgspec.json.Decoder(_ManifestKeys)


def audit_manifest(fr: FileRead) -> tuple[Any, Any, str | None]:
    """``(twin, document, error)`` of ``session.json`` for the audit.

    When msgspec may read the text (:func:`_msgspec_may_read`) and the msgspec twin of
    ``SessionManifest`` accepts it decoded straight from the bytes
    (``fast_models.manifest_from_json``), the document is only its keys the audit reads
    (a second typed decode that skips the rest; every other key is a twin field, so none is
    unknown). Else ``(None, *_parse_json_doc(fr))``, and the verdict asks the twin and
    pydantic of the parsed document as always.
    """
    model = _twin(fr)
    if model is not None:
        try:
            keys = _MANIFEST_KEYS.decode(fr.data)
        except (msgspec.DecodeError, RecursionError):  # pragma: no cover - read above
            pass
        else:
            return model, {k: v for k in _ManifestKeys.__struct_fields__
                           if (v := getattr(keys, k)) is not msgspec.UNSET}, None
    doc, err = _parse_json_doc(fr)
    return None, doc, err


def whole_manifest(fr: FileRead) -> tuple[Any, Any, str | None]:
    """``(_twin(fr), *_parse_json_doc(fr))`` with ``session.json`` parsed once: the store's
    reading (``read_run(whole_docs=True)``), which needs the whole document and the twin.

    When msgspec may read the text (:func:`_msgspec_may_read`) and decodes it, the twin is
    ``fast_models.manifest`` of that document (``msgspec.convert``: no second pass over the
    bytes), which equals ``fast_models.manifest_from_json`` of the bytes
    (``tests/test_audit_cold.py``); a document msgspec refuses has no twin, as in
    :func:`_twin`, and is parsed as :func:`_parse_json_doc` parses it.
    ``tests/test_cleanlog.py`` proves the triple equal to the two separate reads.
    """
    data = fr.data
    if fr.status == "ok" and data is not None and _msgspec_may_read(data):
        try:
            doc = _DOC_DECODER.decode(data)
        except (msgspec.DecodeError, RecursionError):
            pass  # (the explicit parser decides, as in _parse_json_doc; no twin)
        else:
            if not isinstance(doc, dict):
                return None, doc, None
            from .fast_models import manifest

            return manifest(doc), doc, None
    doc, err = _parse_json_doc(fr)
    return None, doc, err


def _twin(fr: FileRead) -> Any:
    """``SessionManifest``'s msgspec twin decoded straight from ``session.json`` when msgspec
    may read the text and the twin accepts it, else None (:func:`audit_manifest`)."""
    data = fr.data
    if fr.status == "ok" and data is not None and _msgspec_may_read(data):
        from .fast_models import manifest_from_json

        return manifest_from_json(data)
    return None


def _listing(run_dir: str) -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listdir(run_dir)))
    except OSError:
        return ()


def atomic_leftovers(listing: tuple[str, ...]) -> list[str]:
    """Names of temp files left by a killed atomic write (``.<name>.<random>``).

    >>> atomic_leftovers((".session.json.k3j2h1", ".writer.lock", "events.jsonl",
    ...                   ".result.json.x1.tmp", ".session.json"))
    ['.result.json.x1.tmp', '.session.json.k3j2h1']
    """
    dotted = [name for name in listing if name[:1] == "."]  # (usually only .writer.lock)
    return sorted(name for name in dotted for target in ATOMIC_WRITE_TARGETS
                  if name.startswith(f".{target}.") and len(name) > len(target) + 2)


def _proc_locked_inodes() -> set[str] | None:
    """``major:minor:inode`` keys of every file lock held on this machine (Linux)."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    keys = set()
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 2260 fd:00:1573916 0 EOF" (blocked waiters have "->")
        if len(parts) >= 6 and parts[1] != "->":
            keys.add(parts[5].lower())
    return keys


def _lock_key(st_dev: int, st_ino: int) -> str:
    return f"{os.major(st_dev):02x}:{os.minor(st_dev):02x}:{st_ino}"


def _writer_lock(run_dir: str, held_locks: frozenset[str] | None = None,
                 ) -> tuple[str | None, bool]:
    """Token in ``.writer.lock`` and whether some process holds the lock (never taking it).

    ``held_locks``: the keys of ``/proc/locks`` as the caller read them for a batch of runs
    (``read.incremental.proc_locked_keys``); None reads them now.
    """
    path = os.path.join(run_dir, ".writer.lock")
    fr = read_file(path, limit=4096)
    if fr.status != "ok" or fr.data is None or fr.identity is None:
        return None, False
    token = None
    m = re.search(rb"token=([0-9A-Za-z_-]+)", fr.data)
    if m:
        token = m.group(1).decode("ascii")
    held = False
    keys = _proc_locked_inodes() if held_locks is None else held_locks
    if keys:
        _size, _mtime, ino, dev = fr.identity
        held = _lock_key(dev, ino) in keys
    return token, held


def _tail_in_flight(data: bytes | None, path: str,
                    lstat: Callable[[str], tuple[int, int, int, int] | None], *,
                    wait: bool = True) -> tuple[bool, bool]:
    """Whether the torn tail just read from ``path`` may be a line still being appended.

    ``(moved, waited)``: ``moved`` when ``data`` does not end with ``\\n`` and the file
    (``lstat``: ``read.io.lstat_identity`` or ``read.uri``'s) is no longer as read: it was
    already another size, or, when the tail can be a write in flight (its length a multiple
    of :data:`_PAGE_BYTES` and the file modified within :data:`TAIL_RACY_SECONDS`) and
    ``wait``, it changed within :data:`TAIL_WAIT_SECONDS` of backed-off sleeps (``waited``).
    A complete log costs nothing, a crash tail (old, or off the page grid) one ``lstat``; a
    writer stalled mid-line (or killed there a moment ago) the whole wait.

    >>> _tail_in_flight(b'{"a":1}\\n', "/nonexistent", lambda p: None)
    (False, False)
    """
    if not data or data.endswith(b"\n"):
        return False, False
    now = lstat(path)
    if now is None:
        return False, False
    if now[0] != len(data):  # grew (or was replaced) between the read and this lstat
        return True, False
    if not wait or len(data) % _PAGE_BYTES or (
            time.time_ns() - now[1] > TAIL_RACY_SECONDS * 1e9):
        return False, False
    delay, slept = RETRY_SLEEP_SECONDS, 0.0
    while slept < TAIL_WAIT_SECONDS:
        time.sleep(delay)
        slept += delay
        delay *= 2
        if lstat(path) != now:
            return True, True
    return False, True


def read_run(run_dir: str, *, is_subagent: bool = False,
             parent_run_dir: str | None = None, events_prefix: Any = None,
             decoded_out: list[Any] | None = None, source_root: str | None = None,
             columnar: bool = False, with_request: bool = False,
             clean: bool = False, held_locks: frozenset[str] | None = None,
             skim: bool = False, whole_docs: bool = False) -> RunData:
    """Read one run directory into a :class:`RunData`. Never raises for bad content.

    A live run is re-read until ``session.json`` and ``events.jsonl`` were not replaced
    while being read (bounded attempts; ``live_changed`` when no stable snapshot was had),
    and while its log's torn tail may be a line still being appended (:func:`_tail_in_flight`).

    ``events_prefix`` (the incremental cache, ``read.incremental.EventsPrefix``) supplies the decoded
    complete lines of an already-read prefix; it is used only when ``events_prefix.matches``
    the bytes just read. ``decoded_out``, when given, receives ``(lines, events)`` as decoded
    (before the kind-dependent warnings), for the cache to store.

    ``columnar=True`` (the table builders): when the log is clean
    (``read.cleanlog.clean_log``; engine not ``exact``), ``RunData.fast`` holds its
    ``CleanLog`` and no per-line object is built. What no table needs is then not read:
    ``request.json`` and ``result.json`` (status ``not_read``), the listing and the writer lock (``with_request``:
    ``request.json`` is read all the same, for the limits ``states_df`` needs).
    ``skim`` (with ``columnar``; ``events_df``): ``manifest`` and ``checkpoint`` hold only the
    keys kind and run id are decided by (``read.docskim``) and ``backend_result`` is not
    parsed.

    ``clean=True`` (the audit): every file is read as usual, but when the log of a native
    run is clean (``read.cleanlog.clean_log``; engine not ``exact``), ``RunData.fast`` holds
    its columns and no per-line object is built; the verdict rules read the columns
    (:func:`clean_objects` gives the objects, :func:`exact_run` the complete snapshot).
    ``checkpoint``/``result`` then hold only the keys the audit reads (:func:`audit_doc`).
    ``decoded_out`` then receives nothing. The folder is listed first, and a file the
    listing does not hold is ``missing`` without being opened (a local run's audit opens
    only what exists; the listing is a snapshot taken before the files, as the files are).

    ``whole_docs`` (with ``clean``; the store's tables): ``session.json`` parsed whole
    (:func:`whole_manifest`: once, ``manifest_model`` as ``clean`` decides it) instead of the
    audit's few keys; ``checkpoint`` and ``result`` as ``clean`` reads them (no table reads
    another key of them).

    ``held_locks``: the keys of ``/proc/locks`` read once for a batch of runs
    (``read.incremental.proc_locked_keys``), instead of once per run; None reads them now.
    """
    # object-storage runs (``s3://...``) read through ``read.uri``; local paths as always
    io = _io_for(run_dir)
    read_file, lstat_identity, _listing = io[0], io[1], io[2]
    not_read: Any = (_NOT_FOR_STATES if with_request else _NOT_FOR_COLUMNS) if columnar else ()
    listing: tuple[str, ...] | None = None
    if clean and not columnar and io is _LOCAL_IO:
        listing = _listing(run_dir)
        if listing:  # (empty: unlistable or empty, so nothing is known absent)
            absent = _RUN_FILES.difference(listing)
            if absent:
                not_read = {name: _MISSING for name in absent}
    live_changed = True
    may_wait = True
    session_path = os.path.join(run_dir, "session.json")
    for attempt in range(STABLE_READ_ATTEMPTS):
        if attempt:
            time.sleep(RETRY_SLEEP_SECONDS * attempt)  # let a busy writer finish its step
        # Manifest first, then the log, then check the manifest was not replaced meanwhile:
        # the writer saves the manifest before each append (§3.4), so a stable manifest means
        # the log we read is not ahead of it.
        before = lstat_identity(session_path)
        files = {name: read_file(os.path.join(run_dir, name)) if name not in not_read
                 else _skipped(not_read, name)
                 for name in ("session.json", "request.json", "events.jsonl")}
        after = lstat_identity(session_path)
        ev = files["events.jsonl"]
        # A torn tail may be a line still being written (its size grows page by page while
        # the writer is preempted mid-write()): re-read when the log moved on.
        moved, waited = _tail_in_flight(ev.data, os.path.join(run_dir, "events.jsonl"),
                                        lstat_identity, wait=may_wait)
        may_wait = may_wait and not waited  # (one bounded wait per read)
        if moved:
            continue
        if before == after:
            live_changed = False
            break
        # Replaced meanwhile: a manifest read *after* the log is a state the protocol can be
        # in (saved, not yet appended) when it is at most one ahead of what we read.
        again = read_file(session_path)
        if _consistent_pair(again, ev):
            files["session.json"] = again
            live_changed = False
            break
    for name in ("result.json", "checkpoint.json", "backend-result.json"):
        files[name] = read_file(os.path.join(run_dir, name), limit=RUNNER_FILE_LIMIT * 4) if (
            name not in not_read) else _skipped(not_read, name)
    if listing is None:
        listing = _listing(run_dir) if not columnar else ()
    skim = skim and columnar
    parse_doc = _parse_json_doc
    if skim:
        from .docskim import skim_doc

        def parse_doc(fr: FileRead) -> tuple[Any, str | None]:
            return skim_doc(fr, _parse_json_doc)
    request, request_error = _parse_json_doc(files["request.json"])
    manifest_model = None
    if clean and not columnar and _columnar_engine() != "exact" and whole_docs:
        # session.json parsed once (the twin from that document); checkpoint.json and
        # result.json as the audit reads them: no table reads more of them
        manifest_model, manifest, manifest_error = whole_manifest(files["session.json"])
        result = audit_doc(files["result.json"], "result.json")
        checkpoint = audit_doc(files["checkpoint.json"], "checkpoint.json")
    elif clean and not columnar and _columnar_engine() != "exact":
        # the audit reads session.json as its twin, three keys of checkpoint.json and two of
        # result.json
        manifest_model, manifest, manifest_error = audit_manifest(files["session.json"])
        result = audit_doc(files["result.json"], "result.json")
        checkpoint = audit_doc(files["checkpoint.json"], "checkpoint.json")
    else:
        manifest, manifest_error = parse_doc(files["session.json"])
        result, _ = _parse_json_doc(files["result.json"])
        checkpoint = _LATER if skim and _kind_free(files["checkpoint.json"]) else parse_doc(
            files["checkpoint.json"])[0]
    backend_result, _ = _parse_json_doc(files["backend-result.json"]) if not skim else (None, None)
    ev = files["events.jsonl"]
    events_bytes = ev.data if ev.status == "ok" else None
    fast = None
    if events_bytes and events_prefix is None and _columnar_engine() != "exact":
        from .cleanlog import clean_log

        # the clean-log test, once for every reading (a reading for columns does not
        # measure the lines: no object and no replay proof of it needs their lengths)
        fast = clean_log(events_bytes, per_line=not columnar)
    if checkpoint is _LATER:  # (skim) needed only when the log is not clean: see _kind_free
        checkpoint = None if fast is not None else parse_doc(files["checkpoint.json"])[0]
    kind = ""
    if fast is not None and (columnar or clean):
        kind = _kind(files, manifest, checkpoint, fast.envelopes, is_subagent)
    if fast is not None and (columnar or (clean and kind != "external")):
        # the clean log is kept as columns (the audit's rules read a native log's only)
        lines, events = [], []
        run_id = _run_id(manifest, fast.envelopes, checkpoint)
    else:
        # the objects: a clean log's built from its columns, any other log line by line
        lines, events = (fast_lines_and_events(fast) if fast is not None
                         else _decode_events(events_bytes, events_prefix))
        if decoded_out is not None:
            decoded_out.append((lines, events))
        kind = _kind(files, manifest, checkpoint, events, is_subagent)
        if kind != "external" and fast is None:  # a clean log has no warning to add
            events = _with_native_warnings(events, events_bytes or b"")
            lines = _merge_line_warnings(lines, events)
        fast = None
        run_id = _run_id(manifest, events, checkpoint)
    if columnar or ".writer.lock" in not_read:
        token, held = None, False
    elif io is _LOCAL_IO:
        token, held = _writer_lock(run_dir, held_locks)
    else:
        token, held = io[3](run_dir)
    return RunData(
        run_dir=run_dir, kind=kind, run_id=run_id, is_subagent=is_subagent,
        parent_run_dir=parent_run_dir, listing=listing, files=files,
        manifest=manifest if isinstance(manifest, dict) else None,
        manifest_error=manifest_error if manifest_error or isinstance(manifest, dict) or
        manifest is None else "session.json is JSON but not an object",
        request=request if isinstance(request, dict) else None,
        request_error=request_error if request_error or isinstance(request, dict) or
        request is None else "request.json is JSON but not an object",
        result=result, checkpoint=checkpoint, backend_result=backend_result,
        lines=lines, events=events, events_bytes=events_bytes,
        events_status=ev.status, writer_lock_token=token, writer_active=held,
        live_changed=live_changed, source_root=source_root, fast=fast,
        manifest_model=manifest_model,
    )


_MISSING = FileRead("missing")
_LATER = object()


def _kind_free(fr: FileRead) -> bool:
    """Whether ``checkpoint.json`` can decide neither kind nor run id of a run whose log is
    clean, so ``read_run(skim=True)`` need not parse it (``checkpoint`` is then None).

    The checkpoint decides the kind only through a top-level ``backend_name`` key
    (:func:`_kind`), and a key spells ``backend_name`` only as those bytes or with a ``\\u``
    escape (none of its characters has another escape); the run id comes from it only when
    neither the manifest nor any event has one (:func:`_run_id`), and every event of a clean
    log has a non-empty ``run_id``. A native run's checkpoint holds neither (§5.2).

    >>> _kind_free(FileRead("ok", b'{"run_id":"r","status":"x"}'))
    True
    >>> _kind_free(FileRead("ok", b'{"backend\\\\u005fname":"b","resumable":false}'))
    False
    """
    data = fr.data
    return (fr.status == "ok" and data is not None and b"backend_name" not in data
            and _U_ESCAPE.search(data) is None)


_U_ESCAPE = re.compile(rb"\\u")  # (a regex finds it faster than ``in``: backslashes are rarer)
# every entry read_run opens (the audit skips those its listing does not hold)
_RUN_FILES = frozenset({"session.json", "request.json", "events.jsonl", "result.json",
                        "checkpoint.json", "backend-result.json", ".writer.lock"})


def _skipped(not_read: Any, name: str) -> FileRead:
    """A file not opened: ``missing`` when the listing showed it absent, else ``not_read``."""
    return not_read[name] if isinstance(not_read, dict) else _NOT_READ


def _columnar_engine() -> str:
    from .columnar import engine

    return engine()


def _io_for(run_dir: str) -> tuple[Any, Any, Any, Any]:
    if "://" in run_dir:
        from .uri import URI_IO as u

        return u.read_file, u.lstat_identity, u.listing, u.writer_lock
    return _LOCAL_IO


def fast_lines_and_events(log: Any) -> tuple[list[Line], list[Event]]:
    """The exact path's ``(lines, events)`` of a clean log (``cleanlog.CleanLog``).

    Builds the same ``Line``/``Event`` objects as :func:`_decode_events` without decoding any
    line again and without checking anything: the clean-log test has proved every line an
    accepted event with no warning (``read.columnar`` says why).
    """
    fromiso = datetime.fromisoformat
    lines = []
    events = []
    pos = 0
    for i, (e, n, data_obj) in enumerate(zip(log.envelopes, log.lengths(), log.objects,
                                             strict=True)):
        ts = e.created_at
        line_no = i + 1
        events.append(Event(line_no, pos, n, e.sequence, e.event_type, e.run_id, e.task_id,
                            e.event_id, fromiso(ts), None, bytes(e.data).decode("utf-8"),
                            data_obj, (),
                            {"created_at": ts, "data": data_obj, "event_id": e.event_id,
                             "event_type": e.event_type, "run_id": e.run_id,
                             "sequence": e.sequence, "task_id": e.task_id}))
        lines.append(Line(line_no, pos, n, b"", True, "accepted", None, None, ()))
        pos += n + 1
    return lines, events


def clean_objects(run: RunData) -> tuple[list[Line], list[Event]]:
    """The ``(lines, events)`` of a run read with ``clean=True`` (what ``decoded_out`` of the
    exact reading receives: the objects before the kind-dependent warnings)."""
    if run.fast is None:
        return run.lines, run.events
    return fast_lines_and_events(run.fast)


def exact_run(run: RunData) -> RunData:
    """``run`` as the exact per-line path reads it (itself when it already is): a clean log's
    ``Line``/``Event`` objects built from its columns (:func:`fast_lines_and_events`, equal to
    the exact decoding, which has no warning to add to a clean log).

    >>> r = read_run("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e", columnar=True)
    >>> (r.fast is not None, len(r.events), len(exact_run(r).events), exact_run(r).fast)
    (True, 0, 50, None)
    """
    if run.fast is None:
        return run
    lines, events = fast_lines_and_events(run.fast)
    fields = {name: getattr(run, name) for name in RunData.__dataclass_fields__}
    fields.update(lines=lines, events=events, fast=None)
    return RunData(**fields)


def _consistent_pair(manifest: FileRead, events: FileRead) -> bool:
    """Whether ``manifest.last_event_sequence`` is the log's last sequence or one more."""
    if manifest.status != "ok" or manifest.data is None:
        return False
    doc, _err = _parse_json_doc(manifest)
    lseq = doc.get("last_event_sequence") if isinstance(doc, dict) else None
    if type(lseq) is not int:
        return False
    data = events.data if events.status == "ok" else b""
    tail = (data or b"").rstrip()
    last_line = tail[tail.rfind(b"\n") + 1:] if tail else b""
    if not last_line:
        return lseq in (-1, 0)
    try:
        seq = _DOC_DECODER.decode(last_line).get("sequence")
    except (msgspec.DecodeError, AttributeError):
        return False
    return type(seq) is int and lseq in (seq, seq + 1)


def _decode_events(data: bytes | None, prefix: Any = None) -> tuple[list[Line], list[Event]]:
    if data is None:
        return [], []
    lines: list[Line] = []
    events: list[Event] = []
    start = 0
    if prefix is not None and prefix.matches(data):
        lines, events = prefix.restore(data)
        start = prefix.length
    # one scan of the whole file instead of one per line (most logs have no candidate byte)
    may_split = _may_split(data)
    for pl in _physical_lines_from(data, start, len(lines)):
        raw = pl.raw
        if not raw.strip():
            lines.append(Line(pl.line_no, pl.byte_offset, len(raw), b"", pl.has_newline, "blank"))
            continue
        d = decode_line(raw, line_no=pl.line_no, has_newline=pl.has_newline,
                        may_split=may_split)
        if d.reason is not None:
            lines.append(Line(pl.line_no, pl.byte_offset, len(raw), raw, pl.has_newline,
                              "quarantined", d.reason, d.message, d.warnings))
            continue
        obj = d.obj or {}
        created_at, coerced = parse_created_at(obj.get("created_at"))
        warnings = d.warnings
        if coerced:
            warnings = tuple(sorted({*warnings, "coerced_value"}))
        data_obj = obj.get("data")
        text = obj.get("text")
        events.append(Event(
            line_no=pl.line_no, byte_offset=pl.byte_offset, byte_length=len(raw),
            sequence=d.sequence or 0, event_type=d.event_type or "",
            run_id=obj.get("run_id"), task_id=obj.get("task_id"), event_id=obj.get("event_id"),
            created_at=created_at, text=text if isinstance(text, str) else None,
            data_json=d.data_json, data=data_obj if isinstance(data_obj, dict) else {},
            warnings=warnings, obj=obj,
        ))
        lines.append(Line(pl.line_no, pl.byte_offset, len(raw), b"", pl.has_newline,
                          "accepted", None, None, warnings))
    return lines, events


def _physical_lines_from(data: bytes, start: int, line_no: int) -> list[Any]:
    """Physical lines of ``data[start:]``, numbered and offset as in the whole file."""
    if not start:
        return split_physical_lines(data)
    return [PhysicalLine(pl.line_no + line_no, pl.byte_offset + start, pl.raw, pl.has_newline)
            for pl in split_physical_lines(data[start:])]


def _with_native_warnings(events: list[Event], data: bytes) -> list[Event]:
    out = []
    for e in events:
        raw = data[e.byte_offset:e.byte_offset + e.byte_length]
        if e.line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # the BOM itself is resume's business (read.resume_reader)
        extra = native_envelope_warnings(e.obj, raw)
        if extra - set(e.warnings):
            e = _replace_warnings(e, tuple(sorted({*e.warnings, *extra})))
        out.append(e)
    return out


def _replace_warnings(e: Event, warnings: tuple[str, ...]) -> Event:
    return Event(e.line_no, e.byte_offset, e.byte_length, e.sequence, e.event_type, e.run_id,
                 e.task_id, e.event_id, e.created_at, e.text, e.data_json, e.data, warnings, e.obj)


def _merge_line_warnings(lines: list[Line], events: list[Event]) -> list[Line]:
    by_line = {e.line_no: e.warnings for e in events}
    return [
        Line(ln.line_no, ln.byte_offset, ln.byte_length, ln.raw, ln.has_newline, ln.status,
             ln.reason, ln.message, by_line[ln.line_no])
        if ln.line_no in by_line and by_line[ln.line_no] != ln.warnings else ln
        for ln in lines
    ]


def _kind(files: dict[str, FileRead], manifest: Any, checkpoint: Any, events: list[Event],
          is_subagent: bool) -> str:
    if (isinstance(checkpoint, dict) and "backend_name" in checkpoint
            and checkpoint.get("resumable") is False):
        return "external"
    if files["backend-result.json"].status != "missing":
        return "external"
    if files["session.json"].status == "missing" and not any(
            isinstance(e.run_id, str) and e.run_id for e in events):
        return "external"
    if events and events[0].event_type == "run.forked":
        return "fork"
    if isinstance(manifest, dict) and manifest.get("provider_name") == "fork":
        return "fork"
    if is_subagent:
        return "subagent"
    return "native"


def _run_id(manifest: Any, events: list[Event], checkpoint: Any) -> str | None:
    # The run's display id: a lone surrogate escape in a document (json.loads keeps it) would
    # crash every Arrow table and the JSON output, so it shows as U+FFFD, as in event rows.
    if isinstance(manifest, dict) and isinstance(manifest.get("run_id"), str):
        return _without_lone_surrogates(manifest["run_id"])
    for e in events:
        if isinstance(e.run_id, str) and e.run_id:
            return e.run_id
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("run_id"), str):
        return _without_lone_surrogates(checkpoint["run_id"])
    return None


_LOCAL_IO = (read_file, lstat_identity, _listing, _writer_lock)
