"""Resume's reading of ``events.jsonl``, exactly (§8.1 step 5, §8.2, §8.2, §8.3).

The runner's resume reads the log as UTF-8 text with universal newlines, splits it with
``str.splitlines()``, skips every piece whose ``piece.strip()`` is empty (Unicode
whitespace), and validates every other piece *unstripped* with
``RunEvent.model_validate_json``. This module is that reader; the loader's physical lines
(split at ``\\n`` only, replay's view) are reused whenever they provably give the same pieces:

* a file with no ``str.splitlines()`` separator other than ``\\n`` (no ``\\r``, ``\\v``,
  ``\\f``, ``\\x1c``-``\\x1e``, NEL, U+2028, U+2029) and no leading BOM has exactly its
  physical lines as pieces; a physical line is blank for resume when ``str.strip()`` empties
  it (so a line of U+00A0 or U+3000 is blank for resume, though not for replay);
* any other file is read as text, literally, and each piece validated by pydantic.

Which lines are valid ``RunEvent`` lines is decided by :func:`run_event_error`: a fast
structural check that is provably pydantic's answer, else pydantic itself on the raw piece.

>>> ok = b'{"event_type":"a","run_id":"r","sequence":0}'
>>> log = read_for_resume(ok + "\\u2028".encode() + ok.replace(b":0", b":1") + b"\\n")
>>> [e.sequence for e in log.events], log.errors
([0, 1], [])
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from .models import RunEvent, first_error
from .runner_json import has_digit_run

BOM = b"\xef\xbb\xbf"
RUN_EVENT_REFUSED_DEPTH = 202
"""pydantic-core 2.50.5 refuses a JSON line in which some value sits this deep (the line's
object is level 1, ``data`` level 2, a scalar inside the deepest container one more level):
199 nested arrays as the value of a ``data`` key pass, 200 fail ("recursion limit exceeded").
The limit has moved between pydantic-core versions; the toolkit applies this one explicitly
and lets pydantic decide below it (tests/test_fidelity.py pins the installed behaviour)."""

RUN_EVENT_KEYS = frozenset(RunEvent.model_fields)
# str.splitlines() separators other than "\n" (a CR LF pair is one, so a "\r" finds it)
_SEPARATORS = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\xc2\x85", b"\xe2\x80\xa8",
               b"\xe2\x80\xa9")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_CANONICAL_TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$", re.ASCII)
_MAX_FAST_SEQUENCE = 2 ** 63 - 1


def needs_text_reading(data: bytes) -> bool:
    """Whether resume's pieces can differ from the physical ``\\n`` lines of ``data``.

    >>> needs_text_reading(b'{"a":1}\\n'), needs_text_reading(b'{"a":1}\\r\\n')
    (False, True)
    >>> needs_text_reading("{}\\u2029\\n".encode()), needs_text_reading(BOM + b"{}\\n")
    (True, True)
    """
    if data.startswith(BOM):
        return True
    # substring scans (memchr speed) instead of one regex with alternatives
    return any(sep in data for sep in _SEPARATORS)


def canonical_timestamp_ok(value: str) -> bool:
    """True when ``value`` is a runner-written timestamp pydantic provably accepts.

    The shape alone is not enough: hour 24, 30 February or second 60 match it and are
    refused by pydantic (§8.3); ``datetime.fromisoformat`` refuses exactly those.

    >>> canonical_timestamp_ok("2026-08-20T21:02:47.879324Z")
    True
    >>> canonical_timestamp_ok("2026-08-20T24:00:00Z"), canonical_timestamp_ok("2026-02-30T00:00:00Z")
    (False, False)
    """
    if not _CANONICAL_TS.match(value):
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def value_depth(raw: bytes | str) -> int:
    """Deepest JSON value level, as pydantic-core counts it (top-level value = 1; a scalar
    inside a container at level L is at L + 1; keys do not count).

    >>> value_depth(b'{"a":[1]}'), value_depth(b'{"a":[]}'), value_depth(b'{}')
    (3, 2, 1)
    """
    text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    depth = best = 0
    pos, n = 0, len(text)
    while pos < n:
        ch = text[pos]
        if ch == '"':
            m = _STRING_TAIL.match(text, pos + 1)
            end = m.end() if m is not None else n
            # a string is a value unless it is an object key (followed by ':')
            k = end
            while k < n and text[k] in " \t\r\n":
                k += 1
            if not (k < n and text[k] == ":"):
                best = max(best, depth + 1)
            pos = end
            continue
        if ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
        elif ch not in " \t\r\n,:":
            best = max(best, depth + 1)
            m = _SCALAR.match(text, pos)
            pos = m.end() if m is not None else pos + 1
            continue
        pos += 1
    return best


_STRING_TAIL = re.compile(r'(?:[^"\\]|\\.)*"', re.S)
_SCALAR = re.compile(r'[^\s,\]}:"]+')


def run_event_error(raw: bytes | str, obj: dict[str, Any] | None = None) -> str | None:
    """None when ``RunEvent.model_validate_json(raw)`` accepts ``raw``, else why not.

    ``obj`` (the line as the loader parsed it) enables the fast check: every key a RunEvent
    field, real types, a canonical and real ``created_at``, no surrogate escape, shallow
    nesting and no long digit run. That is provably pydantic's "valid"; anything else is
    decided by pydantic on the unstripped piece (with the depth limit above made explicit).

    >>> run_event_error(b'{"event_type":"a","run_id":"r","sequence":0,"created_at":null}')
    'created_at: Input should be a valid datetime'
    >>> run_event_error(b'{"event_type":"a","run_id":"r","sequence":0,"data":{"k":"\\\\ud800"}}')[:30]
    '(root): Invalid JSON: unexpect'
    """
    raw_b = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if obj is not None and _fast_valid(raw_b, obj):
        return None
    brackets = raw_b.count(b"[") + raw_b.count(b"{")
    if brackets >= RUN_EVENT_REFUSED_DEPTH - 1:
        depth = value_depth(raw_b)
        if depth >= RUN_EVENT_REFUSED_DEPTH:
            return (f"(root): Invalid JSON: a value nested {depth} levels deep; pydantic-core "
                    f"refuses {RUN_EVENT_REFUSED_DEPTH} (recursion limit exceeded)")
    try:
        RunEvent.model_validate_json(raw)
    except ValidationError as exc:
        return first_error(exc)
    return None


def _fast_valid(raw: bytes, obj: dict[str, Any]) -> bool:
    if not RUN_EVENT_KEYS.issuperset(obj):
        return False
    seq = obj.get("sequence")
    et = obj.get("event_type")
    run_id = obj.get("run_id")
    task_id = obj.get("task_id")
    if not (type(seq) is int and 0 <= seq <= _MAX_FAST_SEQUENCE
            and type(et) is str and et and type(run_id) is str and run_id
            and (task_id is None or type(task_id) is str)):
        return False
    if "data" in obj and type(obj["data"]) is not dict:
        return False
    if "event_id" in obj and type(obj["event_id"]) is not str:
        return False
    if "created_at" in obj:
        ts = obj["created_at"]
        if type(ts) is not str or not canonical_timestamp_ok(ts):
            return False
    if b"\\u" in raw and _SURROGATE_ESCAPE.search(raw):
        return False
    if raw.count(b"[") + raw.count(b"{") >= RUN_EVENT_REFUSED_DEPTH - 2:
        return False
    return not (len(raw) > 4300 and has_digit_run(raw, 4301))


@dataclass(frozen=True, slots=True)
class ResumeEvent:
    """A piece resume accepted as a RunEvent."""

    sequence: int
    event_type: str
    run_id: str
    task_id: str | None
    line_no: int  # 1-based physical line (split at "\n") where the piece starts
    byte_offset: int


@dataclass(frozen=True, slots=True)
class ResumeError:
    """A piece resume refuses (or the whole file, for invalid UTF-8)."""

    code: str  # invalid_event_line | torn_tail | event_extra_key | line_separator_split | bom
    line_no: int
    byte_offset: int
    message: str


@dataclass(frozen=True, slots=True)
class ResumeLog:
    """What resume reads from ``events.jsonl``: accepted pieces and refused ones, in order.

    ``order`` interleaves both as ``("event", i)`` / ``("error", i)`` for contiguity, which
    counts every non-blank piece (a refused piece may carry a second code, e.g. ``bom`` and
    ``torn_tail``, listed in ``errors`` only).
    """

    events: list[ResumeEvent] = field(default_factory=list)
    errors: list[ResumeError] = field(default_factory=list)
    order: list[tuple[str, int]] = field(default_factory=list)
    text_read: bool = False

    @property
    def accepts(self) -> bool:
        return not self.errors


def read_for_resume(data: bytes, lines: list[Any] | None = None,
                    events: list[Any] | None = None) -> ResumeLog:
    """Resume's reading of ``data`` (the whole ``events.jsonl``).

    ``lines``/``events`` are the loader's physical lines and accepted events of the same
    bytes (``RunData.lines``/``.events``); they are reused when the pieces are provably the
    physical lines. Without them, or when the file needs it, the text is read literally.
    """
    if lines is None or events is None or needs_text_reading(data):
        return _read_text(data)
    return _read_physical(data, lines, events)


def _read_physical(data: bytes, lines: list[Any], events: list[Any]) -> ResumeLog:
    log = ResumeLog()
    by_line = {e.line_no: e for e in events}
    for ln in lines:
        if ln.status == "blank":
            continue
        e = by_line.get(ln.line_no)
        if e is None:
            raw = data[ln.byte_offset:ln.byte_offset + ln.byte_length]
            if ln.reason in ("invalid_utf8",) or (ln.reason == "torn_tail" and "UTF-8" in (
                    ln.message or "")):
                # read_text fails on the whole file: resume reads nothing at all
                return _utf8_failure(data, ln.byte_offset)
            if not raw.decode("utf-8").strip():
                continue  # Unicode whitespace only: blank for resume (not for replay)
            code = "torn_tail" if ln.reason == "torn_tail" else "invalid_event_line"
            _add_error(log, code, ln.line_no, ln.byte_offset, f"{ln.reason}: {ln.message}")
            continue
        if "event_extra_key" in e.warnings:
            extra = sorted(set(e.obj) - RUN_EVENT_KEYS)
            _add_error(log, "event_extra_key", ln.line_no, ln.byte_offset,
                       f"unknown top-level key(s) {', '.join(extra)}; RunEvent forbids extra "
                       "keys")
            continue
        if "invalid_event_line" in e.warnings:
            raw = data[ln.byte_offset:ln.byte_offset + ln.byte_length]
            err = run_event_error(raw.removeprefix(BOM) if ln.line_no == 1 else raw,
                                  None) or "invalid"
            _add_error(log, "invalid_event_line", ln.line_no, ln.byte_offset,
                       f"fails RunEvent: {err}")
            continue
        log.order.append(("event", len(log.events)))
        log.events.append(ResumeEvent(e.sequence, e.event_type, e.run_id, e.task_id,
                                      ln.line_no, ln.byte_offset))
    return log


def _add_error(log: ResumeLog, code: str, line_no: int, offset: int, message: str) -> None:
    log.order.append(("error", len(log.errors)))
    log.errors.append(ResumeError(code, line_no, offset, message))


def _read_text(data: bytes) -> ResumeLog:
    log = ResumeLog(text_read=True)
    try:
        text = data.decode("utf-8")  # strict; a BOM is kept, as read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        return _utf8_failure(data, exc.start)
    # Universal newlines turn "\r\n" and a lone "\r" into "\n"; splitlines() breaks at all
    # three anyway, so splitting the untranslated text gives the same pieces, and keeps
    # their byte positions for messages.
    byte_pos = 0
    line_no = 1
    ends_nl = data.endswith(b"\n")
    for chunk in text.splitlines(keepends=True):
        piece = chunk[:len(chunk) - _ending_len(chunk)]
        size = len(chunk.encode("utf-8"))
        start_line, start_byte = line_no, byte_pos
        byte_pos += size
        line_no += chunk.count("\n")
        if not piece.strip():
            continue
        split = not (start_byte == 0 or data[start_byte - 1:start_byte] == b"\n") or not (
            chunk.endswith("\n") or byte_pos == len(data))
        try:
            ev = RunEvent.model_validate_json(piece)
        except ValidationError as exc:
            err = run_event_error(piece) or first_error(exc)
            torn = byte_pos == len(data) and not ends_nl
            if torn and (split or start_byte == 0 and data.startswith(BOM)):
                # also what a killed writer leaves: say so beside the other reason
                log.errors.append(ResumeError(
                    "torn_tail", start_line, start_byte,
                    f"partial final line (no trailing newline): {err}"))
            if start_byte == 0 and data.startswith(BOM):
                code = "bom"
                msg = ("the file starts with a UTF-8 BOM; resume's text reader keeps it, so "
                       "the first piece is not valid JSON")
            elif split:
                code = "line_separator_split"
                msg = ("a str.splitlines() separator (CR, FF, RS, NEL, U+2028, ...) cuts this "
                       f"event for resume: {err}")
            elif torn:
                code = "torn_tail"
                msg = f"partial final line (no trailing newline): {err}"
            else:
                code = "invalid_event_line"
                msg = f"fails RunEvent: {err}"
            _add_error(log, code, start_line, start_byte, msg)
            continue
        log.order.append(("event", len(log.events)))
        log.events.append(ResumeEvent(ev.sequence, ev.event_type, ev.run_id, ev.task_id,
                                      start_line, start_byte))
    return log


def _utf8_failure(data: bytes, bad: int) -> ResumeLog:
    """``read_text`` raises on the whole file: resume reads no event at all."""
    line_no = data.count(b"\n", 0, bad) + 1
    start = data.rfind(b"\n", 0, bad) + 1
    torn = data.find(b"\n", bad) < 0  # in the final segment without a newline: a torn write
    code = "torn_tail" if torn else "invalid_event_line"
    what = "partial final line (no trailing newline), " if torn else ""
    return ResumeLog(errors=[ResumeError(
        code, line_no, start, f"{what}not valid UTF-8 at byte {bad}; resume reads the whole "
        "file as strict UTF-8 text")], order=[("error", 0)])


def _ending_len(chunk: str) -> int:
    if chunk.endswith("\r\n"):
        return 2
    return 1 if chunk and chunk[-1] in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029" else 0
