"""A cheap proof that the runner's replay accepts a log the loader already decoded.

Replaying a whole log (§9) re-parses every line. For the clean logs that make up almost every
fleet, what the loader already knows proves replay's answer; anything it cannot prove is
decided by the exact engine (:func:`rivumi_analysis.replay.runner.replay_verdict`), so the answer is
always the runner's.
"""

from __future__ import annotations

import re

from ..read.cleanlog import CleanLog
from ..read.snapshot import RunData
from .runner import MAX_EVENTS, replay_verdict

_PRINTABLE = re.compile(r"[!-~]+")
# a \u0000 escape, or a surrogate one (it may reach the output, §9.8), in one pass over the
# log: ``b"\\u0000" in data`` and a second scan cost twice that (memchr finds many "\\")
_NUL_OR_SURROGATE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")


def envelopes_ok(run: RunData) -> bool:
    """No duplicate sequence; one ``run_id``; ids and types printable ASCII without spaces.

    Such values are never blank once stripped, never contain NUL and never differ after
    replay's normalisation (§9.2), so rules 8, 9, 13 and 14 of §9.6 cannot fire.
    """
    seen: set[int] = set()
    run_id = None
    for e in run.events:
        if e.sequence in seen or not _PRINTABLE.fullmatch(e.event_type):
            return False
        seen.add(e.sequence)
        if not isinstance(e.run_id, str) or not _PRINTABLE.fullmatch(e.run_id):
            return False
        if run_id is None:
            run_id = e.run_id
        elif e.run_id != run_id:
            return False
    return True


def replay_accepts_fast(run: RunData, envelope_ok: bool) -> bool:
    """True only when replay (§9.1–§9.3) provably accepts ``run``'s log (else: undecided).

    Holds for a clean native log: every physical line accepted by the loader with no warning
    at all. For a non-external run that means each line is a JSON object that ``json.loads``
    reads the same way (no BOM, duplicate key, NaN, line separator or over-long line), with
    only RunEvent keys, a real non-negative int ``sequence``, a non-empty string ``run_id`` and
    ``data`` an object. On top of that: newline-terminated, no ``\\u0000`` escape anywhere (so
    no NUL reaches a timeline ``text``/``detail``), at most 10,000 events, and
    ``envelope_ok`` (see :func:`envelopes_ok`). Deep nesting and huge integers (which
    ``json.loads`` refuses) need long lines; those lines are checked directly.
    """
    data = run.events_bytes
    if run.events_status != "ok" or data is None or run.kind == "external":
        return False
    if not data:
        return True
    events = run.events
    if (not envelope_ok or not data.endswith(b"\n") or _NUL_OR_SURROGATE.search(data) is not None
            or len(events) > MAX_EVENTS or len(events) != len(run.lines)
            or any(e.warnings for e in events)):
        return False
    for e in events:
        if e.byte_length > 800:
            lo, hi = e.byte_offset, e.byte_offset + e.byte_length
            if e.byte_length > 4000 or data.count(b"{", lo, hi) + data.count(b"[", lo, hi) > 400:
                return False
    return True


def clean_replay_accepts(log: CleanLog, longest: int | None = None) -> bool:
    """:func:`replay_accepts_fast` for a clean log (``read.cleanlog``), over its columns.

    A clean log already holds every per-line condition above (each line an accepted event
    with no warning, newline-terminated, no ``\\u0000`` or surrogate escape, event types
    and run ids printable ASCII); what is left is the event count, unique sequences, one
    ``run_id`` and the long-line bounds (``longest``: the longest line's length when the
    caller has it already).
    """
    seqs = log.sequences
    n = len(seqs)
    if not n or n > MAX_EVENTS or len(set(seqs)) != n:
        return False
    if log.run_ids.count(log.run_ids[0]) != n:
        return False
    if log.most_brackets > 400:  # (a clean line holds at most 200)
        return False
    if longest is None:  # a file of at most 4,000 bytes has no longer line: not measured
        longest = len(log.data) if len(log.data) <= 4000 else log.longest()
    return longest <= 4000


def run_replay_verdict(run: RunData) -> tuple[bool, str | None]:
    """``(replay_accepts, replay_error)`` for a loaded run: the proof, else the exact engine.

    >>> from rivumi_analysis.read.snapshot import read_run
    >>> run_replay_verdict(read_run("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e"))
    (True, None)
    """
    if isinstance(run.fast, CleanLog):
        if clean_replay_accepts(run.fast):
            return True, None
    elif replay_accepts_fast(run, envelopes_ok(run)):
        return True, None
    return replay_verdict(run.events_bytes, run.events_status, run.run_dir)
