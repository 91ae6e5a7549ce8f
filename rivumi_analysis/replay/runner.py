"""Runner-compatible replay, ``--replay-json`` output and seed-only fork seeds (§9).

This module re-implements the runner's ``session_replay.py`` (``reduce_jsonl`` →
normalisation → ``_reduce_normalized``) over raw bytes, with exactly the refusal messages and
check order of §9.6, plus the toolkit decisions listed at the end of §9.6 for the cases where
the runner crashes or hangs (invalid UTF-8, recursion overflow, symlinked or non-regular
``events.jsonl``).

It depends on nothing else in the package except :mod:`rivumi_analysis.errors`, so every other
layer (audit, states, drift, forks) can use it.

>>> state = replay_bytes(b'{"sequence":0,"event_type":"run.created","run_id":"r1"}\\n')
>>> canonical_json(state)
'{"completed_turn_ids":[],"event_count":1,"first_sequence":0,"last_sequence":0,"run_id":"r1","schema_version":1,"timeline":[{"event_type":"run.created","run_id":"r1","sequence":0}]}'
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..errors import ReplayRefused
from ..read import runner_json as _runner_json

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_EVENTS",
    "MAX_TEXT_CHARS",
    "ReplayRefused",
    "canonical_json",
    "events_path",
    "fork_seed",
    "fork_seed_bytes",
    "normalize_events",
    "parse_lines",
    "read_events_bytes",
    "reduce_normalized",
    "replay_bytes",
    "replay_state",
    "replay_verdict",
]

MAX_LINE_BYTES = 131_072
"""Replay's per-line bound (newline excluded), §9.1."""
MAX_EVENTS = 10_000
"""Replay's bound on the number of events after normalisation, §9.2."""
MAX_TEXT_CHARS = 16_000
"""Strings picked for ``text``/``detail`` and the optional top-level strings are cut here."""

# §9.2: the optional top-level string keys, in the order the runner checks them (rule 11).
_TOP_LEVEL_TEXT_KEYS: tuple[str, ...] = (
    "text", "summary", "terminal_reason", "reason", "error", "tool", "tool_name", "name",
    "model", "runtime", "provider", "base_sha", "model_override",
)
# §9.3: keys searched for a timeline ``detail``, top level first, then ``data``.
_DETAIL_KEYS: tuple[str, ...] = (
    "summary", "terminal_reason", "reason", "error", "tool", "tool_name", "name", "model",
    "runtime", "provider", "base_sha",
)
_ID_KEYS: tuple[str, ...] = ("run_id", "conversation_id", "turn_id")
_TERMINAL_TYPES = frozenset({
    "run.completed", "run.failed", "run.cancelled", "turn.completed", "turn.failed",
    "turn.cancelled", "turn.interrupted", "turn_completed",
})
_TURN_START_TYPES = frozenset({"user.message", "turn_started"})
_TURN_END_TYPES = frozenset({
    "turn.completed", "turn.failed", "turn.cancelled", "turn.interrupted", "turn_completed",
})
# bytes.strip() strips exactly these ASCII whitespace bytes (rule 1).
_ASCII_WS = b" \t\n\r\x0b\x0c"


# --------------------------------------------------------------------------------------------
# Canonical JSON
# --------------------------------------------------------------------------------------------
def _drop_nulls(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _drop_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_drop_nulls(v) for v in obj]
    return obj


def canonical_json(obj: Any) -> str:
    """Return the runner's canonical JSON text of ``obj`` (§9.4), without the final newline.

    Keys are sorted, separators compact, non-ASCII kept raw, and keys whose value is ``None``
    are dropped at every level (the replay state and seed contain no nulls worth keeping).

    Args:
        obj: a JSON-ready value (usually a replay state or fork seed dict).

    Returns:
        The JSON text.

    >>> canonical_json({"b": 1, "a": None, "c": [{"x": None, "y": "é"}]})
    '{"b":1,"c":[{"y":"é"}]}'
    """
    return json.dumps(_drop_nulls(obj), ensure_ascii=False, separators=(",", ":"),
                      sort_keys=True)


SURROGATE_OUTPUT_MESSAGE = (
    "replay output would contain a lone surrogate, which is not valid UTF-8")
"""Documented decision (§9.8): ``json.loads`` turns an escape such as ``\\ud800`` into a lone
surrogate; when one reaches the replay state or seed, the runner's CLI crashes printing it.
The toolkit refuses instead (exit 2) and never prints bytes that are not UTF-8."""


def _printable(state: dict[str, Any]) -> dict[str, Any]:
    """Return ``state`` if its canonical JSON encodes as UTF-8, else refuse (§9.8)."""
    try:
        canonical_json(state).encode("utf-8")
    except UnicodeEncodeError:
        raise ReplayRefused(SURROGATE_OUTPUT_MESSAGE) from None
    return state


# --------------------------------------------------------------------------------------------
# Loading (§9.1, rules 1-6)
# --------------------------------------------------------------------------------------------
def events_path(run_dir: str | os.PathLike[str]) -> str:
    """Return ``<run_dir>/events.jsonl`` joined as given (never resolved), as §9.6 requires.

    >>> events_path("runs/abc")
    'runs/abc/events.jsonl'
    """
    return os.path.join(os.fspath(run_dir), "events.jsonl")


def _open_events(run_dir: str | os.PathLike[str]) -> int:
    """Open ``events.jsonl`` without following links or blocking; return the descriptor."""
    path = events_path(run_dir)
    not_regular = f"could not read event JSONL: {path} is not a regular file"
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise ReplayRefused(f"could not read event JSONL: {exc}") from None
    if not stat.S_ISREG(st.st_mode):
        # Symlinks, FIFOs, sockets, devices and directories are never opened.
        raise ReplayRefused(not_regular)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        # ELOOP: the path became a symlink between lstat and open (O_NOFOLLOW refused it).
        if exc.errno == errno.ELOOP or isinstance(exc, IsADirectoryError):
            raise ReplayRefused(not_regular) from None
        raise ReplayRefused(f"could not read event JSONL: {exc}") from None
    try:
        # Re-check on the open descriptor: the file may have been swapped after lstat.
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ReplayRefused(not_regular)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fd_chunks(fd: int) -> Iterator[bytes]:
    """Read a regular file to the end; OS errors become rule 6 refusals. Closes ``fd``."""
    try:
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:  # cannot happen on a regular file; be safe anyway
                continue
            except OSError as exc:
                raise ReplayRefused(f"could not read event JSONL: {exc}") from None
            if not chunk:
                return
            yield chunk
    finally:
        os.close(fd)


def read_events_bytes(run_dir: str | os.PathLike[str]) -> bytes:
    """Read ``events.jsonl`` of ``run_dir`` the safe way, or raise :class:`ReplayRefused`.

    A symlink or a non-regular file (FIFO, device, directory) is never read: the runner would
    follow the link or hang on a FIFO, the toolkit refuses with
    ``could not read event JSONL: <path> is not a regular file``. Other OS errors become
    ``could not read event JSONL: <OS error text>`` (rule 6).

    Args:
        run_dir: the run directory, as given by the user.

    Returns:
        The whole file content.

    Raises:
        ReplayRefused: the file cannot be read.

    >>> read_events_bytes("/nonexistent-dir")
    Traceback (most recent call last):
    ...
    rivumi_analysis.errors.ReplayRefused: could not read event JSONL: [Errno 2] No such file or directory: '/nonexistent-dir/events.jsonl'
    """
    return b"".join(_fd_chunks(_open_events(run_dir)))


def _split_chunks(chunks: Iterable[bytes]) -> Iterator[tuple[bytes, bool]]:
    """Physical lines (without ``\\n``) and whether each had one, like iterating ``rb``."""
    parts: list[bytes] = []  # pieces of the current line (no quadratic concatenation)
    for chunk in chunks:
        pieces = chunk.split(b"\n")
        if len(pieces) == 1:
            parts.append(chunk)
            continue
        parts.append(pieces[0])
        yield b"".join(parts), True
        for raw in pieces[1:-1]:
            yield raw, True
        parts = [pieces[-1]]
    tail = b"".join(parts)
    if tail:
        yield tail, False


def _load_line(raw: bytes, has_newline: bool, line_no: int) -> dict[str, Any] | None:
    """Rules 1-5 for one physical line: None for a blank line, else the JSON object."""
    if not raw.strip(_ASCII_WS):
        return None  # rule 1: blank, even as a final segment without "\n"
    if not has_newline:
        raise ReplayRefused("event JSONL has a partial final line")  # rule 2
    if len(raw) > MAX_LINE_BYTES:
        raise ReplayRefused(f"event JSONL line {line_no} exceeds {MAX_LINE_BYTES} bytes")
    try:
        # json.loads on bytes, exactly as the runner: it sniffs UTF-8/16/32, strips a UTF-8
        # BOM and decodes with "surrogatepass"; depth and digit limits are explicit.
        value = _runner_json.loads(raw)
    except UnicodeDecodeError:
        # The runner crashes here; §9.6 toolkit decision.
        raise ReplayRefused(f"event JSONL line {line_no} is not valid UTF-8") from None
    except _runner_json.IntTooLong:
        # The runner crashes (ValueError from Python's integer-string limit); documented
        # toolkit decision (§9.8).
        raise ReplayRefused(f"event JSONL line {line_no} has an integer of more than "
                            f"{_runner_json.INT_MAX_DIGITS} digits") from None
    except ValueError:
        # JSONDecodeError, and nesting past PYTHON_JSON_MAX_DEPTH (the runner's
        # RecursionError; §9.6 decision).
        raise ReplayRefused(f"event JSONL line {line_no} is not valid JSON") from None
    if not isinstance(value, dict):
        raise ReplayRefused(f"event JSONL line {line_no} must contain an object")
    return value


def parse_lines(data: bytes) -> list[dict[str, Any]]:
    """Apply the loading rules 1-5 of §9.6 to ``data`` and return the JSON objects in order.

    Lines are split after each ``\\n``; the first failing line decides. Blank lines (after
    ``bytes.strip()``) are skipped and still count in the 1-based physical line number.

    Args:
        data: the raw bytes of ``events.jsonl``.

    Returns:
        One dict per non-blank line, in file order.

    Raises:
        ReplayRefused: with the runner's message for the first bad line.

    >>> parse_lines(b'{"a":1}\\n\\n[1]\\n')
    Traceback (most recent call last):
    ...
    rivumi_analysis.errors.ReplayRefused: event JSONL line 3 must contain an object
    """
    out = []
    for line_no, (raw, nl) in enumerate(_split_chunks((data,)), start=1):
        value = _load_line(raw, nl, line_no)
        if value is not None:
            out.append(value)
    return out


def _load_normalized(chunks: Iterable[bytes]) -> list[dict[str, Any]]:
    """Rules 1-12 in the runner's order, streaming: every line is loaded (rules 1-5) before
    the first normalisation error (rules 7-11) is reported, then the count bound (rule 12).

    Only normalised events are kept, and none past the bound, so a huge log costs little
    memory while giving the same answer as loading everything first.
    """
    events: list[dict[str, Any]] = []
    norm_error: ReplayRefused | None = None
    count = 0
    for line_no, (raw, nl) in enumerate(_split_chunks(chunks), start=1):
        value = _load_line(raw, nl, line_no)
        if value is None:
            continue
        if norm_error is None:
            try:
                event = _normalize_one(count, value)
            except ReplayRefused as exc:
                norm_error = exc
            else:
                if count < MAX_EVENTS:
                    events.append(event)
        count += 1
    if norm_error is not None:
        raise norm_error
    if count > MAX_EVENTS:
        raise ReplayRefused(f"event log exceeds {MAX_EVENTS} events")
    return events


# --------------------------------------------------------------------------------------------
# Normalisation (§9.2, rules 7-12)
# --------------------------------------------------------------------------------------------
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _normalize_one(index: int, raw: dict[str, Any]) -> dict[str, Any]:
    sequence = raw.get("sequence")
    if not _is_int(sequence) or sequence < 0:
        raise ReplayRefused(f"event {index} requires a non-negative integer sequence")
    event_type = raw.get("event_type")
    if not isinstance(event_type, str) or not event_type.strip():
        raise ReplayRefused(f"event {index} requires event_type")
    event: dict[str, Any] = {"sequence": sequence, "event_type": event_type.strip()}
    for key in _ID_KEYS:
        value = raw.get(key)
        if value is None:
            event[key] = None
            continue
        if not isinstance(value, str) or not value.strip():
            raise ReplayRefused(f"event {index} has invalid {key}")
        event[key] = value.strip()
    data = raw.get("data")
    if data is None:
        data = {}
    elif not isinstance(data, dict):
        raise ReplayRefused(f"event {index} data must be an object")
    event["data"] = data
    top: dict[str, str] = {}
    for key in _TOP_LEVEL_TEXT_KEYS:
        value = raw.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ReplayRefused(f"event {index} has invalid {key}")
        if "\x00" in value:
            raise ReplayRefused(f"{key} cannot contain NUL")
        top[key] = value[:MAX_TEXT_CHARS]
    event["top"] = top
    return event


def normalize_events(raw_events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalise parsed lines (rules 7-12); ``I`` in messages is the 0-based non-blank index.

    Every event is normalised before the count bound is checked, as the runner does.

    Args:
        raw_events: the dicts returned by :func:`parse_lines`.

    Returns:
        Normalised events: ``sequence``, stripped ``event_type``, ``run_id``,
        ``conversation_id``, ``turn_id`` (or None), ``data`` (a dict) and ``top`` (the
        validated optional top-level strings).

    Raises:
        ReplayRefused: the runner's message for the first bad event.

    >>> normalize_events([{"sequence": True, "event_type": "x"}])
    Traceback (most recent call last):
    ...
    rivumi_analysis.errors.ReplayRefused: event 0 requires a non-negative integer sequence
    """
    events = [_normalize_one(i, raw) for i, raw in enumerate(raw_events)]
    if len(events) > MAX_EVENTS:
        raise ReplayRefused(f"event log exceeds {MAX_EVENTS} events")
    return events


# --------------------------------------------------------------------------------------------
# Reduction (§9.3, rules 13-15) and output (§9.4)
# --------------------------------------------------------------------------------------------
def _checked_text(value: str, label: str) -> str:
    if "\x00" in value:
        raise ReplayRefused(f"{label} cannot contain NUL")
    return value[:MAX_TEXT_CHARS]


def _timeline_item(event: dict[str, Any]) -> dict[str, Any]:
    top = event["top"]
    data = event["data"]
    text: str | None = None
    top_text = top.get("text")
    if isinstance(top_text, str) and top_text:
        text = _checked_text(top_text, "text")
    else:
        data_text = data.get("text")
        if isinstance(data_text, str) and data_text:
            text = _checked_text(data_text, "data.text")
    detail: str | None = None
    for source in (top, data):
        for key in _DETAIL_KEYS:
            value = source.get(key)
            if isinstance(value, str) and value:
                detail = _checked_text(value, key)
                break
        if detail is not None:
            break
    return {
        "sequence": event["sequence"],
        "event_type": event["event_type"],
        "run_id": event["run_id"],
        "conversation_id": event["conversation_id"],
        "turn_id": event["turn_id"],
        "text": text,
        "detail": detail,
    }


def reduce_normalized(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Reduce normalised events to the §9.4 replay state dict (null keys already dropped).

    Events are stably sorted by sequence; gaps are allowed, duplicates are refused.

    Args:
        events: output of :func:`normalize_events` (any order).

    Returns:
        The replay state: ``schema_version``, ``first_sequence``, ``last_sequence``,
        ``event_count``, ``run_id``, ``conversation_id``, ``active_turn_id``,
        ``completed_turn_ids``, ``terminal_event_type`` and ``timeline``.

    Raises:
        ReplayRefused: rules 13-15.

    >>> ev = normalize_events([{"sequence": 3, "event_type": "a"}, {"sequence": 1, "event_type": "b"}])
    >>> [i["sequence"] for i in reduce_normalized(ev)["timeline"]]
    [1, 3]
    """
    ordered = sorted(events, key=lambda e: e["sequence"])
    seen: set[int] = set()
    run_id: str | None = None
    conversation_id: str | None = None
    active_turn_id: str | None = None
    completed: list[str] = []
    terminal: str | None = None
    timeline: list[dict[str, Any]] = []
    for event in ordered:
        seq = event["sequence"]
        if seq in seen:
            raise ReplayRefused(f"duplicate event sequence: {seq}")
        seen.add(seq)
        if event["run_id"] is not None:
            if run_id is None:
                run_id = event["run_id"]
            elif event["run_id"] != run_id:
                raise ReplayRefused("event log contains multiple run_id values")
        if event["conversation_id"] is not None:
            if conversation_id is None:
                conversation_id = event["conversation_id"]
            elif event["conversation_id"] != conversation_id:
                raise ReplayRefused("event log contains multiple conversation_id values")
        etype = event["event_type"]
        turn_id = event["turn_id"]
        if turn_id is not None:
            if etype in _TURN_START_TYPES:
                active_turn_id = turn_id
            elif etype in _TURN_END_TYPES:
                if turn_id not in completed:
                    completed.append(turn_id)
                if active_turn_id == turn_id:
                    active_turn_id = None
        if etype in _TERMINAL_TYPES:
            terminal = etype
        timeline.append(_drop_nulls(_timeline_item(event)))
    state: dict[str, Any] = {
        "schema_version": 1,
        "first_sequence": ordered[0]["sequence"] if ordered else None,
        "last_sequence": ordered[-1]["sequence"] if ordered else None,
        "event_count": len(ordered),
        "run_id": run_id,
        "conversation_id": conversation_id,
        "active_turn_id": active_turn_id,
        "completed_turn_ids": completed,
        "terminal_event_type": terminal,
        "timeline": timeline,
    }
    return _drop_nulls(state)


def replay_bytes(data: bytes) -> dict[str, Any]:
    """Replay the bytes of an ``events.jsonl`` exactly as ``--replay-json`` would.

    Args:
        data: the whole file content.

    Returns:
        The §9.4 replay state dict (null keys dropped); ``canonical_json`` of it plus ``"\\n"``
        is the runner's stdout.

    Raises:
        ReplayRefused: any refusal of §9.6 rules 1-5 and 7-15.

    >>> replay_bytes(b"")["event_count"]
    0
    >>> replay_bytes(b'{"sequence":0,"event_type":"x"}')
    Traceback (most recent call last):
    ...
    rivumi_analysis.errors.ReplayRefused: event JSONL has a partial final line
    """
    return _printable(reduce_normalized(_load_normalized((data,))))


def replay_state(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Replay ``<run_dir>/events.jsonl`` as the runner's ``sessions --replay-json`` does.

    Args:
        run_dir: a run directory, as given (it is joined, never resolved).

    Returns:
        The §9.4 replay state dict.

    Raises:
        ReplayRefused: with the runner's exact message (§9.6).

    >>> replay_state("/nonexistent-dir")
    Traceback (most recent call last):
    ...
    rivumi_analysis.errors.ReplayRefused: could not read event JSONL: [Errno 2] No such file or directory: '/nonexistent-dir/events.jsonl'
    """
    return _printable(reduce_normalized(_load_normalized(_fd_chunks(_open_events(run_dir)))))


# --------------------------------------------------------------------------------------------
# Fork seed (§9.5, rules 16-18)
# --------------------------------------------------------------------------------------------
def _check_fork_sequence(sequence: Any) -> int:
    if not _is_int(sequence) or sequence < 0:
        raise ReplayRefused("fork sequence must be a non-negative integer")
    return sequence


def _seed_from_events(events: list[dict[str, Any]], sequence: int) -> dict[str, Any]:
    reduce_normalized(events)  # rules 13-15 on the whole log
    at = [e for e in events if e["sequence"] == sequence]
    if not at:
        raise ReplayRefused(f"fork sequence {sequence} was not found")
    prefix = [e for e in events if e["sequence"] <= sequence]
    prefix_state = reduce_normalized(prefix)
    seed = {
        "schema_version": 1,
        "fork_point_sequence": sequence,
        "fork_point_event_type": at[0]["event_type"],
        # §9.8: the ids reduced from the prefix, not from the whole log.
        "source_run_id": prefix_state.get("run_id"),
        "source_conversation_id": prefix_state.get("conversation_id"),
        "new_run_id": None,
        "new_workspace": None,
        "events_included": len(prefix),
        "side_effects_replayed": False,
        "run_started": False,
        "replay_state": prefix_state,
    }
    return _drop_nulls(seed)


def fork_seed_bytes(data: bytes, sequence: int) -> dict[str, Any]:
    """Build the seed-only fork seed at ``sequence`` from the bytes of an ``events.jsonl``.

    Args:
        data: the whole file content.
        sequence: the fork point N.

    Returns:
        The seed dict (null keys dropped): ``run_started`` is false and there is no
        ``new_run_id``/``new_workspace``.

    Raises:
        ReplayRefused: rule 16 first, then rules 1-15 on the whole log, then rule 18.

    >>> fork_seed_bytes(b'{"sequence":0,"event_type":"x"}\\n', 0)["events_included"]
    1
    >>> fork_seed_bytes(b'{"sequence":0,"event_type":"x"}\\n', 2)
    Traceback (most recent call last):
    ...
    rivumi_analysis.errors.ReplayRefused: fork sequence 2 was not found
    """
    n = _check_fork_sequence(sequence)
    return _printable(_seed_from_events(_load_normalized((data,)), n))


def fork_seed(run_dir: str | os.PathLike[str], sequence: int) -> dict[str, Any]:
    """Build the runner's seed-only fork seed for ``<run_dir>/events.jsonl`` at ``sequence``.

    Nothing is created on disk and ``request.json`` is not needed. Rule 16 (a non-negative,
    non-bool int) is checked before the file is read.

    Args:
        run_dir: the run directory, as given.
        sequence: the fork point N.

    Returns:
        The seed dict; ``canonical_json(seed) + "\\n"`` is the runner's output.

    Raises:
        ReplayRefused: the runner's message (§9.6 rules 16-18 and 1-15).

    >>> fork_seed("/nonexistent-dir", -1)
    Traceback (most recent call last):
    ...
    rivumi_analysis.errors.ReplayRefused: fork sequence must be a non-negative integer
    """
    n = _check_fork_sequence(sequence)
    return _printable(_seed_from_events(_load_normalized(_fd_chunks(_open_events(run_dir))), n))


# --------------------------------------------------------------------------------------------
# Verdict helper for the audit record
# --------------------------------------------------------------------------------------------
def replay_verdict(events_bytes: bytes | None, events_status: str,
                   run_dir: str) -> tuple[bool, str | None]:
    """Return ``(replay_accepts, replay_error)`` for the audit record and ``runs_df``.

    Uses the bytes the loader already read (so replay judges the same snapshot); only when
    the loader could not read the file is the refusal message rebuilt from ``events_status``.

    Args:
        events_bytes: the whole ``events.jsonl`` as read, or None when not read.
        events_status: ``ok|missing|symlink|not_regular|unreadable`` (``RunData``).
        run_dir: the run directory as given (used in ``could not read`` messages).

    Returns:
        ``(True, None)`` when replay accepts the log, else ``(False, message)`` where message
        is exactly what ``rivumi-analysis replay --json`` prints after ``error: ``.

    >>> replay_verdict(b"", "ok", "r")
    (True, None)
    >>> replay_verdict(None, "symlink", "r")
    (False, 'could not read event JSONL: r/events.jsonl is not a regular file')
    """
    path = events_path(run_dir)
    try:
        if events_status == "ok" and events_bytes is not None:
            replay_bytes(events_bytes)
            return True, None
        if events_status in ("symlink", "not_regular"):
            return False, f"could not read event JSONL: {path} is not a regular file"
        if events_status == "missing":
            return False, f"could not read event JSONL: [Errno 2] No such file or directory: {path!r}"
        # unreadable, too_large (over the loader's bound) or inconsistent: replay straight
        # from disk, streaming, which also yields the real OS error text.
        replay_state(run_dir)
        return True, None
    except ReplayRefused as exc:
        return False, exc.message
