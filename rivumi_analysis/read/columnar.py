"""The columnar fast path: one ``events.jsonl`` to Arrow columns in a few C-level passes.

The unit of work is a file. Whether the exact per-line reading (``_snapshot._decode_events``,
the reference and the oracle in tests) would give a result provable without per-line Python
work is decided ONCE, by the clean-log test :func:`rivumi_analysis.read.cleanlog.clean_log`:
:func:`decode` here is its whole-file part, ``clean_log`` adds the per-event checks over
whole columns, and :func:`columns` turns accepted logs into Arrow columns without checking
anything again. A file is clean only when all of these hold (each is one C-level pass or a
whole-column check):

- it is not empty and ends with ``\\n`` (no torn tail);
- no raw NEL (``C2 85``), U+2028 or U+2029 (the ``str.splitlines()`` separators that are legal
  inside JSON strings), no BOM anywhere, no ``\\uD800``–``\\uDFFF`` escape (conservative: any
  spelling) and no ``\\u0000`` (the exclusions of the fidelity list,
  ``/work/notes/fast-path-exclusions.md``, are all covered here or below);
- every line decodes as a **strict** RunEvent envelope (:class:`Envelope`: the seven keys, no
  other key, exact types, ``sequence >= 0``, non-empty ``event_type``/``run_id``, ``data`` an
  object). msgspec's strict mode refuses ``"5"``, ``5.0`` and ``true`` for an int, ``NaN`` and
  ``Infinity`` anywhere, raw control characters (``\\r``, ``\\v``, ``\\f``, ``\\x1c``–``\\x1e``
  inside strings), lone surrogates, and anything that is not JSON;
- re-encoding the envelopes gives back **the file, byte for byte**: so each line is exactly one
  object in the runner's canonical layout (sorted keys, compact separators, no whitespace,
  no blank line, no BOM, no duplicate top-level key, canonical string escapes);
- re-encoding every decoded ``data`` object gives back its exact text: no duplicate key at
  any depth (a repeated key would be dropped and the bytes would differ), no whitespace
  (so no ``\\r``), numbers in canonical form, valid UTF-8 in every string;
- ``event_type``, ``run_id``, ``event_id`` and ``task_id`` are printable ASCII without
  spaces, quotes or backslashes (nothing replay's stripping or normalisation could change,
  and JSON writes them as themselves), ``sequence <= 2**63 - 1``;
- every ``created_at`` round-trips through a strict parse and the runner's own format
  (``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``, fraction omitted when zero): valid calendar dates and
  times only (no hour 24, second 60, 30 February, year 0, ...);
- no line is longer than replay's 128 KiB, and no value can sit 202 levels deep (each
  ``data`` value holds at most :data:`MAX_BRACKETS` ``{``/``[`` bytes, a bound on its depth).

For such a file the exact path accepts every line with no warning at all, so the answer is
the columns. Anything else is not clean and the caller takes the exact path.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec


class _LazyModule:
    """Imports a module on first use and puts it in this module's globals, so that reading a
    log for the audit (:func:`decode` only) never pays pyarrow's import (~0.15 CPU-s per
    process, i.e. per pool worker)."""

    def __init__(self, global_name: str, module: str) -> None:
        self._global_name, self._module = global_name, module

    def __getattr__(self, attr: str) -> Any:
        import importlib

        mod = importlib.import_module(self._module)
        globals()[self._global_name] = mod
        return getattr(mod, attr)


pa: Any = _LazyModule("pa", "pyarrow")
pc: Any = _LazyModule("pc", "pyarrow.compute")

ENGINE_ENV = "RIVUMI_ENGINE"
"""Environment variable choosing the loading engine: ``auto`` (default), ``fast``, ``exact``."""

ENGINES = ("auto", "fast", "exact")

REPLAY_LINE_LIMIT = 131_072
"""Longest line without the ``line_too_long_for_replay`` warning (same as ``_decode``)."""

MAX_BRACKETS = 199
"""Most ``{``/``[`` a ``data`` value may hold on the fast path. pydantic refuses a value at
level 202 (the line's object is level 1, ``data`` level 2); with at most 199 brackets in
``data`` no container is deeper than 200 and no value deeper than 201."""

MAX_SEQUENCE = 2**63 - 1
"""pydantic refuses a larger ``sequence`` (msgspec would read it)."""

# separators str.splitlines() honours that may appear raw inside a JSON string, and a BOM
# anywhere (the fidelity list, /work/notes/fast-path-exclusions.md, item 4)
_RAW_SEPARATORS = (b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9", b"\xef\xbb\xbf")
_BAD_ESCAPE = re.compile(rb"\\u(?:[dD][89abcdefABCDEF]|0000)")  # a surrogate, or NUL
# {"created_at":" + ts + ","data": + data + ,"event_id": + J + ,"event_type": + J +
# ,"run_id": + J + ,"sequence": + N + ,"task_id": + J + }
_LAYOUT_FIXED = 15 + 9 + 12 + 14 + 10 + 12 + 11 + 1


class Envelope(msgspec.Struct, forbid_unknown_fields=True):
    """The RunEvent envelope, strictly typed, fields in the runner's (sorted) key order."""

    created_at: str
    data: msgspec.Raw
    event_id: str
    event_type: Annotated[str, msgspec.Meta(min_length=1)]
    run_id: Annotated[str, msgspec.Meta(min_length=1)]
    sequence: Annotated[int, msgspec.Meta(ge=0, le=MAX_SEQUENCE)]
    task_id: str | None


_ENVELOPES = msgspec.json.Decoder(Envelope)
_DATA = msgspec.json.Decoder(dict[str, Any])
_ENCODE_LINES = msgspec.json.Encoder().encode_lines


def engine(override: str | None = None) -> str:
    """The loading engine in force: ``override``, else ``$RIVUMI_ENGINE``, else ``auto``.

    ``auto`` and ``fast`` both take the fast path for files that pass every check of
    :func:`scan` and the exact path for the others (the fast path never guesses); ``exact``
    reads every file line by line.

    >>> engine("exact"), engine("fast")
    ('exact', 'fast')
    """
    value = override if override is not None else os.environ.get(ENGINE_ENV, "auto")
    value = (value or "auto").strip().lower()
    if value not in ENGINES:
        raise ValueError(f"{ENGINE_ENV}={value!r}: expected one of {', '.join(ENGINES)}")
    return value


@dataclass(frozen=True, slots=True)
class Decoded:
    """A file that passed the per-file checks (C-level passes over the whole buffer); the
    per-event checks (timestamps, line lengths, nesting, envelope strings) are
    ``cleanlog.clean_log``'s."""

    envelopes: list[Envelope]
    objects: list[dict[str, Any]]
    size: int

    def __len__(self) -> int:
        return len(self.envelopes)


def decode(data: bytes) -> Decoded | None:
    """Per-file checks of the clean-log test; ``None`` sends the file to the exact path.

    >>> line = (b'{"created_at":"2026-08-20T21:02:47.879324Z","data":{"step":1},"event_id":"e",'
    ...         b'"event_type":"model.requested","run_id":"r","sequence":0,"task_id":"t"}\\n')
    >>> len(decode(line)), decode(line).objects
    (1, [{'step': 1}])
    >>> decode(line.replace(b'"sequence":0', b'"sequence":"0"')) is None  # lax int: exact path
    True
    >>> decode(line[:-1]), decode(line + line.replace(b'"step":1', b'"step":1,"step":2'))
    (None, None)
    """
    if not data or data[-1] != 0x0A:
        return None
    if not data.isascii():  # the three separators are multi-byte UTF-8
        for sep in _RAW_SEPARATORS:
            if sep in data:
                return None
    if _BAD_ESCAPE.search(data):  # (one regex pass: cheaper than looking for \\u first)
        return None  # a surrogate (pydantic refuses a lone one) or NUL (replay refuses it)
    envs = _decode_exact(_ENVELOPES, data)
    if envs is None:
        return None
    # data objects: decoded (valid UTF-8, no NaN) and re-encoded to the same bytes (no repeated
    # key at any depth, canonical numbers, no whitespace)
    objects = _decode_exact(_DATA, b"\n".join([e.data for e in envs]) + b"\n")
    if objects is None:
        return None
    return Decoded(envs, objects, len(data))


def _decode_exact(decoder: Any, lines: bytes) -> list[Any] | None:
    """``lines`` decoded, if they decode and re-encode to exactly the same bytes, else None."""
    try:
        items = decoder.decode_lines(lines)
    except (msgspec.DecodeError, RecursionError, ValueError):
        return None
    return items if _ENCODE_LINES(items) == lines else None


def _i64(values: list[int]) -> pa.Array:
    return pa.array(values, pa.int64())


def columns(logs: list[Any]) -> pa.Table:
    """Event columns of a batch of clean logs (``read.cleanlog.CleanLog``, every check of
    the clean-log test done: nothing is checked again here).

    Columns: ``file`` (index into ``logs``), ``line_no``, ``byte_offset``, ``byte_length``,
    ``sequence``, ``event_type``, ``event_run_id``, ``task_id``, ``event_id``,
    ``created_at``, ``data``.
    """
    chain = itertools.chain.from_iterable
    n = sum(map(len, logs))
    counts = [len(f) for f in logs]
    file_idx = _per_row(counts, list(range(len(logs))), pa.int32())
    first_row = _per_row(counts, list(itertools.accumulate(counts, initial=0))[:-1], pa.int64())
    line_no = pc.subtract(_row_numbers(n), first_row) if n else pa.array([], pa.int64())
    raws = [e.data for f in logs for e in f.envelopes]
    data_len = _i64([len(r) for r in raws])
    joined = b"".join(raws)
    del raws
    data_col = pa.LargeStringArray.from_buffers(
        n, _offsets(data_len), pa.py_buffer(joined))
    seq = _i64(list(chain(f.sequences for f in logs)))
    etype = pa.array(list(chain(f.event_types for f in logs)), pa.large_string())
    rid = pa.array(list(chain(f.run_ids for f in logs)), pa.large_string())
    eid = pa.array(list(chain(f.event_ids for f in logs)), pa.large_string())
    tid = pa.array(list(chain(f.task_ids for f in logs)), pa.large_string())
    ts = pa.array(list(chain(f.created_ats for f in logs)), pa.large_string())
    created_at = pc.cast(ts, pa.timestamp("us", "UTC"))
    # Line lengths from the canonical layout, exact for a clean log: its envelope strings
    # are printable ASCII without a quote or backslash (JSON writes them as themselves) and
    # ``data`` is the line's own bytes.
    length = pc.add(data_len, _LAYOUT_FIXED + 6)  # + the quotes of event_id/event_type/run_id
    for arr in (ts, etype, rid, eid):
        length = pc.add(length, pc.binary_length(arr).cast(pa.int64()))
    length = pc.add(length, pc.utf8_length(pc.cast(seq, pa.large_string())).cast(pa.int64()))
    length = pc.add(length, pc.fill_null(pc.add(pc.binary_length(tid).cast(pa.int64()), 2), 4))
    ends = pc.cumulative_sum(pc.add(length, 1))
    # offsets restart at every file: subtract the end of the previous file
    file_start = _per_row(counts, list(itertools.accumulate(
        (len(f.data) for f in logs), initial=0))[:-1], pa.int64())
    byte_offset = pc.subtract(pc.subtract(ends, pc.add(length, 1)), file_start)
    return pa.table({
        "file": file_idx, "line_no": line_no, "byte_offset": byte_offset, "byte_length": length,
        "sequence": seq, "event_type": etype, "event_run_id": rid, "task_id": tid,
        "event_id": eid, "created_at": created_at, "data": data_col,
    })


def _per_row(counts: list[int], values: list[int], typ: pa.DataType) -> pa.Array:
    """``values[i]`` repeated ``counts[i]`` times, as one array (no per-row Python object).

    >>> _per_row([2, 0, 1], [7, 8, 9], pa.int64()).to_pylist()
    [7, 7, 9]
    """
    keep = [i for i, c in enumerate(counts) if c]
    if not keep:
        return pa.array([], typ)
    ends = pa.array(list(itertools.accumulate(counts[i] for i in keep)), pa.int64())
    return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(
        ends, pa.array([values[i] for i in keep], typ)))


def _row_numbers(n: int) -> pa.Array:
    """``1, 2, ..., n`` as int64."""
    return pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n))


def _offsets(lengths: pa.Array) -> pa.Buffer:
    return pa.concat_arrays([_i64([0]), pc.cumulative_sum(lengths)]).buffers()[1]
