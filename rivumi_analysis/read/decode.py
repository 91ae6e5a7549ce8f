"""Decode one physical line of ``events.jsonl`` into an envelope or a quarantine verdict.

This is the one place that knows the runner's encodings (§4, §8.2). The rule for an
*accepted event* mirrors pydantic v2's lax validation of ``RunEvent.sequence`` and
``event_type``; everything else the runner tolerates (or resume rejects while replay does
not) becomes a per-line warning code.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from . import runner_json as _runner_json
from .models import DATETIME_ADAPTER, SEQUENCE_ADAPTER, RunEvent
from .resume_reader import run_event_error

BOM = b"\xef\xbb\xbf"
REPLAY_LINE_LIMIT = 131_072
RUN_EVENT_KEYS = frozenset(RunEvent.model_fields)

# str.splitlines() separators other than \n and \r\n (§8.2). \r alone is handled apart.
_SPLITLINES_CHARS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]|\r(?!$)")
# Cheap bytes pre-check: any byte sequence that could encode one of the above.
_SPLITLINES_BYTES = re.compile(rb"[\x0b\x0c\x1c\x1d\x1e\r]|\xc2\x85|\xe2\x80[\xa8\xa9]")
_CANONICAL_TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


class _DataSpan(msgspec.Struct):
    data: msgspec.Raw = msgspec.Raw(b"")


_DATA_DECODER = msgspec.json.Decoder(_DataSpan)


@dataclass(frozen=True, slots=True)
class Decoded:
    """Outcome of decoding one non-blank line.

    Attributes:
        obj: the parsed JSON object when the line is an accepted event.
        sequence: the validated sequence (lax int).
        event_type: the event type as written.
        data_json: exact JSON text of the ``data`` value (None when absent).
        reason: quarantine reason code, or None for an accepted event.
        message: human-readable text for the reason.
        warnings: sorted warning codes.
    """

    obj: dict[str, Any] | None
    sequence: int | None
    event_type: str | None
    data_json: str | None
    reason: str | None
    message: str | None
    warnings: tuple[str, ...]


class _Flags:
    __slots__ = ("dup", "nan")

    def __init__(self) -> None:
        self.dup = False
        self.nan = False


def _loads(text: str, flags: _Flags) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        d = dict(items)
        if len(d) != len(items):
            flags.dup = True
        return d

    def constant(name: str) -> float:
        flags.nan = True
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[name]

    # explicit depth and integer-digit limits: never a matter of the caller's stack
    return _runner_json.loads(text, object_pairs_hook=pairs, parse_constant=constant)


_FAST_DECODER = msgspec.json.Decoder()
_FAST_ENCODE = msgspec.json.encode
_ESCAPED_COLON = re.compile(rb"\\u003[aA]")
FAST_PATH = True
_FAST_MAX_BRACKETS = 200
"""Speed only: decode with msgspec when that provably gives what ``_loads`` gives."""


def _fast_loads(body: bytes) -> dict[str, Any] | None:
    """``json.loads`` of a line that needs none of its hooks, or None (take the exact path).

    msgspec refuses what the exact path would flag or read differently (``NaN``/``Infinity``,
    numbers out of float range, lone surrogates) and keeps big integers exact. A repeated key
    is the one thing it absorbs silently: each key contributes one ``:`` separator, and ``:``
    is never escaped on output, so the re-encoded object has as many ``:`` as the line exactly
    when no key was dropped (a line spelling ``:`` as ``\\u003a`` takes the exact path).

    >>> _fast_loads(b'{"a":1,"b":{"c":"x:y"}}')
    {'a': 1, 'b': {'c': 'x:y'}}
    >>> _fast_loads(b'{"a":1,"a":2}') is None, _fast_loads(b'{"a":NaN}') is None
    (True, True)
    """
    if (not FAST_PATH or _runner_json.may_have_long_int(body)
            or body.count(b"[") + body.count(b"{") > _FAST_MAX_BRACKETS):
        # long integers and deep nesting: the exact path applies json's explicit limits
        # (msgspec's own depth limit depends on the caller's stack)
        return None
    try:
        obj = _FAST_DECODER.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if type(obj) is not dict:
        return None
    if body.count(b":") != _FAST_ENCODE(obj).count(b":") or (
            b"\\u003" in body and _ESCAPED_COLON.search(body)):
        return None
    return obj


_SPLIT_CANDIDATES = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\xc2\x85",
                     b"\xe2\x80\xa8", b"\xe2\x80\xa9")


def _may_split(body: bytes) -> bool:
    """Same answer as ``_SPLITLINES_BYTES.search(body)`` (substring scans are faster).

    >>> _may_split(b'{"a":1}'), _may_split(chr(0x2028).encode()), _may_split(bytes([13]))
    (False, True, True)
    """
    for c in _SPLIT_CANDIDATES:
        if c in body:
            return True
    return False


def decode_line(raw: bytes, *, line_no: int, has_newline: bool,
                may_split: bool = True) -> Decoded:
    """Decode one non-blank physical line (without its ``\\n``).

    >>> d = decode_line(b'{"sequence":" 5 ","event_type":"x","run_id":"r"}', line_no=2,
    ...                 has_newline=True)
    >>> (d.reason, d.sequence, "coerced_value" in d.warnings)
    (None, 5, True)
    >>> decode_line(b'{"sequence":-1,"event_type":"x"}', line_no=1, has_newline=True).reason
    'bad_sequence'
    """
    warnings: set[str] = set()
    torn = not has_newline
    body = raw
    if line_no == 1 and body.startswith(BOM):
        body = body[3:]
        warnings.add("bom")
    if body.endswith(b"\r"):
        warnings.add("crlf")
    if len(raw) > REPLAY_LINE_LIMIT:
        warnings.add("line_too_long_for_replay")

    def quarantine(reason: str, message: str) -> Decoded:
        if torn:
            message = f"partial final line (no trailing newline): {message}"
            reason = "torn_tail"
        return Decoded(None, None, None, None, reason, message, tuple(sorted(warnings)))

    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return quarantine("invalid_utf8", f"not valid UTF-8 at byte {exc.start} of the line")
    # may_split=False: the caller scanned the whole file once and found no candidate byte
    if may_split and _may_split(body) and _SPLITLINES_CHARS.search(text.rstrip("\r")):
        warnings.add("line_separator_split")
    flags = _Flags()
    try:
        obj = _fast_loads(body)
        if obj is None:
            obj = _loads(text, flags)
    except _runner_json.TooDeep as exc:
        return quarantine("json_syntax", f"not valid JSON for the runner's replay: {exc}")
    except _runner_json.IntTooLong as exc:
        return quarantine("json_syntax", f"not valid JSON for the runner's replay: {exc}")
    except ValueError as exc:
        return quarantine("json_syntax", f"not valid JSON: {exc}")
    if b"\\u" in body and _SURROGATE_ESCAPE.search(body):
        # Lone surrogates cannot enter Arrow/polars strings (UTF-8 only). Verdicts and replay
        # read the raw bytes, never this object; the tables show U+FFFD instead.
        obj = _without_lone_surrogates(obj)
    if flags.dup:
        warnings.add("duplicate_key")
    if flags.nan:
        warnings.add("nan_or_infinity")
    if not isinstance(obj, dict):
        return quarantine("not_object", f"JSON value is a {type(obj).__name__}, not an object")
    seq, coerced, seq_msg = _lax_sequence(obj)
    if seq is None:
        return quarantine("bad_sequence", seq_msg or "bad sequence")
    if coerced:
        warnings.add("coerced_value")
    etype = obj.get("event_type")
    if not isinstance(etype, str) or not etype:
        what = "missing" if "event_type" not in obj else f"{etype!r} is not a non-empty string"
        return quarantine("bad_event_type", f"event_type {what}")
    if not has_newline:
        warnings.add("final_newline_missing")
    data_json = _data_text(body, text, obj)
    return Decoded(obj, seq, etype, data_json, None, None, tuple(sorted(warnings)))


def _lax_sequence(obj: dict[str, Any]) -> tuple[int | None, bool, str | None]:
    if "sequence" not in obj:
        return None, False, "sequence is missing"
    value = obj["sequence"]
    if type(value) is int:
        if value > MAX_TABLE_SEQUENCE:
            return None, False, f"sequence {str(value)[:30]}... is beyond 64 bits"
        if value >= 0:
            return value, False, None
        return None, False, f"sequence {value} is negative"
    try:
        # pydantic's own lax JSON rules decide (" 5 ", "+5", "5.0", 5.0, true are ints).
        seq = SEQUENCE_ADAPTER.validate_json(json.dumps(value, allow_nan=True))
    except Exception:  # pydantic.ValidationError or a non-finite float
        return None, False, f"sequence {json.dumps(value)[:60]} is not a non-negative integer"
    if seq > MAX_TABLE_SEQUENCE:
        return None, False, f"sequence {str(seq)[:30]}... is beyond 64 bits"
    return seq, True, None


MAX_TABLE_SEQUENCE = 2 ** 63 - 1
"""Sequences past the tables' Int64 are quarantined (``bad_sequence``); no real log gets near,
and resume's verdict (decided on the raw line) is unaffected."""
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate (in strings and keys) replaced by U+FFFD.

    >>> _without_lone_surrogates({"k" + chr(0xD800): ["a" + chr(0xDC00), "ok"]})
    {'k�': ['a�', 'ok']}
    """
    if isinstance(value, str):
        if not _has_surrogate(value):
            return value
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in value)
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_without_lone_surrogates(v) for v in value]
    return value


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _data_text(body: bytes, text: str, obj: dict[str, Any]) -> str | None:
    if "data" not in obj:
        return None
    try:
        span = _DATA_DECODER.decode(body).data
        if span:
            return bytes(span).decode("utf-8")
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        pass  # (msgspec's depth limit depends on the stack; the text scan below does not)
    return top_level_value_text(text, "data")


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_WS = re.compile(r"[ \t\n\r]*")
_SCALAR_END = re.compile(r"[,}\]\s]")
_INTERESTING = re.compile(r'[\[\]{}"]')


def top_level_value_text(text: str, key: str) -> str | None:
    """Exact text of the last value of top-level ``key`` in a valid JSON object text.

    >>> top_level_value_text('{"a":1, "data" : {"x":[1,"}"]} ,"b":NaN}', "data")
    '{"x":[1,"}"]}'
    """
    pos = _WS.match(text, 0).end()
    if pos >= len(text) or text[pos] != "{":
        return None
    pos += 1
    found: str | None = None
    while True:
        pos = _WS.match(text, pos).end()
        if pos < len(text) and text[pos] == "}":
            return found
        m = _STRING.match(text, pos)
        if m is None:
            return found
        name = json.loads(m.group(0))
        pos = _WS.match(text, m.end()).end() + 1  # past ':'
        pos = _WS.match(text, pos).end()
        end = _skip_value(text, pos)
        if name == key:
            found = text[pos:end]
        pos = _WS.match(text, end).end()
        if pos >= len(text) or text[pos] != ",":
            return found
        pos += 1


def _skip_value(text: str, pos: int) -> int:
    ch = text[pos]
    if ch == '"':
        return _STRING.match(text, pos).end()
    if ch in "[{":
        depth = 0
        while True:
            m = _INTERESTING.search(text, pos)
            if m is None:
                return len(text)
            c = m.group(0)
            if c == '"':
                pos = _STRING.match(text, m.start()).end()
                continue
            pos = m.end()
            depth += 1 if c in "[{" else -1
            if depth == 0:
                return pos
    m = _SCALAR_END.search(text, pos)
    return len(text) if m is None else m.start()


# --- envelope fields of accepted events ------------------------------------------------------


def parse_created_at(value: Any) -> tuple[datetime | None, bool]:
    """Parse ``created_at`` as pydantic would (lax), returning ``(utc_datetime, coerced)``.

    >>> parse_created_at("2026-08-20T21:01:41.533183Z")[0].isoformat()
    '2026-08-20T21:01:41.533183+00:00'
    >>> parse_created_at("2026-08-20T21:01:41")[1]
    True
    """
    if isinstance(value, str) and _CANONICAL_TS.match(value):
        try:
            return datetime.fromisoformat(value), False
        except ValueError:  # the right shape, an impossible value (hour 24, 30 Feb, ...)
            return None, False
    if value is None:
        return None, False
    try:
        dt = DATETIME_ADAPTER.validate_python(value)
    except Exception:
        return None, False
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC), True


def native_envelope_warnings(obj: dict[str, Any], raw: bytes | None = None) -> set[str]:
    """Warnings that apply to native/fork/subagent events (RunEvent envelope), not external.

    ``raw`` is the line as written: validity is decided on it, as resume decides (§8.3).
    """
    out: set[str] = set()
    if not RUN_EVENT_KEYS.issuperset(obj):
        out.add("event_extra_key")
    if "created_at" not in obj:
        out.add("created_at_missing")
    if "event_id" not in obj:
        out.add("event_id_missing")
    if raw is not None:
        if run_event_error(raw, obj) is not None:
            out.add("invalid_event_line")
    elif not _run_event_valid(obj):
        out.add("invalid_event_line")
    return out


def _run_event_valid(obj: dict[str, Any]) -> bool:
    """Would ``RunEvent.model_validate`` accept this object (lax mode)? (no raw line at hand)"""
    run_id = obj.get("run_id")
    task_id = obj.get("task_id")
    data = obj.get("data", {})
    event_id = obj.get("event_id", "")
    created_at = obj.get("created_at")
    fast = (
        RUN_EVENT_KEYS.issuperset(obj)
        and isinstance(run_id, str) and run_id != ""
        and (task_id is None or isinstance(task_id, str))
        and isinstance(data, dict)
        and isinstance(event_id, str)
        and (created_at is None or (isinstance(created_at, str) and _CANONICAL_TS.match(created_at)))
    )
    if fast:
        return True
    try:
        RunEvent.model_validate_json(json.dumps(obj, allow_nan=True))
    except Exception:
        return False
    return True
