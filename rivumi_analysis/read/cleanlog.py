"""The clean-log test, once: a clean native log as columns, no per-event object.

:func:`clean_log` is the one place that decides whether an ``events.jsonl`` is clean: the
whole-file checks of :func:`rivumi_analysis.read.columnar.decode`, then every per-event check
over whole columns at once (one regular-expression match over all timestamps, C-level string
checks of the envelope strings, C-level scans for line lengths and nesting). Every reader
takes its answer: the audit (``read_run(clean=True)``), the table builders
(``read_run(columnar=True)``: ``columnar.columns`` of the accepted logs), and the snapshot's
object builder (``snapshot.fast_lines_and_events``). Such a file is read by the exact path
as: every physical line an accepted event with no warning, no blank or quarantined line; and
by resume's reader as exactly those lines, each a valid RunEvent. So the verdict needs only
the envelope columns (sequence, type, run/task id), and the parsed ``data`` of the few event
types the rules read. ``rivumi_analysis.resume`` and ``rivumi_analysis.audit`` compute the
record from it; ``tests/test_cleanlog.py`` proves the record equal to the exact path's, and
``tests/test_columnar.py`` the columns and objects equal to the exact reading.

>>> line = (b'{"created_at":"2026-08-20T21:02:47.879324Z","data":{"step":1},"event_id":"e",'
...         b'"event_type":"model.requested","run_id":"r","sequence":0,"task_id":"t"}\\n')
>>> log = clean_log(line)
>>> len(log), log.sequences, log.event_types, log.offset(0)
(1, [0], ['model.requested'], 0)
>>> clean_log(line.replace(b"T21:", b"T24:")) is None  # hour 24: the exact path decides
True
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from .columnar import MAX_BRACKETS, REPLAY_LINE_LIMIT, Decoded, decode
from .fast_models import VALID_DATE

# the runner's timestamp (6 fraction digits, or none) with a real date and time, one per line
_TIMESTAMPS = re.compile(
    r"(?:" + VALID_DATE.pattern
    + r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{6})?Z\n)*")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"{[\n")


@dataclass(frozen=True, slots=True)
class CleanLog:
    """A log the exact path reads as ``len(self)`` accepted, warning-free events.

    Attributes:
        decoded: the columnar decode (envelope Structs and every parsed ``data`` dict).
        data: the file's bytes.
        sequences, event_types, run_ids, task_ids, event_ids, created_ats: the envelope
            columns, in line order.
        longest_line: the longest line's length in bytes (None: not measured, see
            :func:`clean_log`).
        most_brackets: the most ``{`` and ``[`` bytes on one line (at most 200).
        line_lengths: every line's length in bytes, newline excluded (``array('q')``;
            None: not measured).
    """

    decoded: Decoded
    data: bytes
    sequences: list[int]
    event_types: list[str]
    run_ids: list[str]
    task_ids: list[str | None]
    longest_line: int | None
    most_brackets: int
    line_lengths: array | None
    event_ids: list[str]
    created_ats: list[str]

    def __len__(self) -> int:
        return len(self.sequences)

    @property
    def envelopes(self) -> list[Any]:
        return self.decoded.envelopes

    @property
    def objects(self) -> list[dict[str, Any]]:
        """The parsed ``data`` object of every event."""
        return self.decoded.objects

    def lengths(self) -> array:
        """Every line's length in bytes, newline excluded (measured now when
        :func:`clean_log` did not)."""
        if self.line_lengths is not None:
            return self.line_lengths
        lines = self.data.split(b"\n")
        lines.pop()  # the empty piece after the final newline
        return array("q", map(len, lines))

    def longest(self) -> int:
        """The longest line's length in bytes."""
        return self.longest_line if self.longest_line is not None else max(self.lengths())

    def line_no(self, index: int) -> int:
        """Line number of event ``index`` (0-based): one event per line."""
        return index + 1

    def offset(self, index: int) -> int:
        """Byte offset of event ``index`` (0-based; its line number is ``index + 1``)."""
        return sum(map(len, self.data.split(b"\n", index)[:index])) + index


def clean_log(data: bytes | None, *, per_line: bool = True) -> CleanLog | None:
    """The columns of ``data`` when it is a clean log (see the module), else None.

    ``per_line=False`` (``events_df``, which sizes each line from its values): the lines are
    not measured when the whole file is within replay's line limit, and ``line_lengths``
    and ``longest_line`` are then None."""
    if not data:
        return None
    dec = decode(data)
    if dec is None:
        return None
    envs = dec.envelopes
    # every line within replay's limit (the file is one line per envelope, exactly)
    lengths: array | None = None
    longest: int | None = None
    if per_line or len(data) > REPLAY_LINE_LIMIT:
        lines = data.split(b"\n")
        lines.pop()  # the empty piece after the final newline
        lengths = array("q", map(len, lines))
        del lines
        longest = max(lengths)
        if longest > REPLAY_LINE_LIMIT:
            return None
    # at most MAX_BRACKETS '{'/'[' in each data value: a line holds its own '{', its data's
    # and any in its envelope strings, so at most MAX_BRACKETS + 1 per line bounds them all
    brackets = max(map(len, data.translate(None, _NOT_BRACKETS).split(b"\n")))
    if brackets > MAX_BRACKETS + 1:
        return None
    created_ats = list(map(_CREATED_AT, envs))
    stamps = "\n".join(created_ats) + "\n"
    if _TIMESTAMPS.fullmatch(stamps) is None or ".000000Z" in stamps:
        return None
    types = list(map(_EVENT_TYPE, envs))
    run_ids = list(map(_RUN_ID, envs))
    task_ids = list(map(_TASK_ID, envs))
    event_ids = list(map(_EVENT_ID, envs))
    if not (_plain(types) and _plain(run_ids) and _plain(event_ids)
            and _plain([t for t in task_ids if t is not None])):
        return None
    return CleanLog(dec, data, list(map(_SEQUENCE, envs)), types, run_ids, task_ids, longest,
                    brackets, lengths, event_ids, created_ats)


_CREATED_AT, _EVENT_TYPE, _RUN_ID, _TASK_ID, _EVENT_ID, _SEQUENCE = map(attrgetter, (
    "created_at", "event_type", "run_id", "task_id", "event_id", "sequence"))


def _plain(values: list[str]) -> bool:
    """Every value is non-empty printable ASCII without a space, a quote or a backslash
    (``[!#-[\\]-~]+``): envelope strings replay and resume read alike, and that JSON writes
    as themselves between quotes (``events_df`` sizes lines from them). Whole-list C-level
    checks, no per-value call.

    >>> _plain(["model.requested", "a1"]), _plain(["a b"]), _plain([""]), _plain(["caf\u00e9"])
    (True, False, False, False)
    >>> _plain(['a"b']), _plain(["a\\\\b"])
    (False, False)
    """
    text = "".join(values)
    # ASCII and printable is exactly 0x20-0x7E; without the space, [!-~]
    return (text.isascii() and text.isprintable() and " " not in text and '"' not in text
            and "\\" not in text and "" not in values)
