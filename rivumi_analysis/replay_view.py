"""The ``replay`` and ``fork-seed`` commands: the runner's bytes, plus what a person needs.

``replay --json`` and ``fork-seed`` print the runner's bytes (:mod:`.replay.runner`); this
module (above the verdict rules and the reducer, so it can use both) adds what a person needs
around them: per event the timestamp, the time since the
previous event, and the state fields that changed (from the reference reducer); the resume
verdict of the run; and, when the runner's replay refuses the log, the same reason code,
``file:line:byte`` location and hint the audit gives.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .errors import ReplayRefused
from .replay.reducer import (
    Limits,
    ReducerEvent,
    charge_waits_default,
    events_from_bytes,
    events_from_run,
    infer_generation,
    initial_state,
    iter_transitions,
    state_row,
)
from .replay.runner import (
    canonical_json,
    fork_seed,
    read_events_bytes,
    replay_state,
)

if TYPE_CHECKING:
    from .read.snapshot import RunData

# (the reader of whole runs and the verdict rules are imported where a command needs them:
# pydantic's models cost ~0.25 s of a ~0.1 s `replay --json` or `fork-seed`)

__all__ = ["cmd_fork_seed", "cmd_replay", "explain_refusal", "fork_point_warning",
           "fork_warning_of_dir", "not_a_run_dir", "render_view"]

# state_row columns that move with the clock on every event: shown once, in the footer
_CLOCK = {"wall_elapsed_seconds", "charged_wall_seconds", "approval_wait_seconds",
          "wall_time_remaining_seconds", "steps_remaining", "tokens_remaining"}
# derived from columns already shown: left out of the per-event changes to keep lines short
_QUIET = {"provider_total_tokens", "primary_total_tokens", "repeat_trip_distance"}

# (pattern of the runner's refusal message, reason code, hint)
_REFUSALS: tuple[tuple[str, str, str], ...] = (
    (r"partial final line", "torn_tail",
     "the writer was killed mid-line; the runner's replay refuses the log until the tail is "
     "removed (never edit a run in place: copy it first)"),
    (r"line (\d+) exceeds 131072 bytes", "line_too_long_for_replay",
     "the runner's replay refuses lines over 128 KiB; resume accepts them (docs/run-format.md "
     "§9.1)"),
    (r"line (\d+) is not valid UTF-8", "invalid_utf8", "see quarantine_df for the raw bytes"),
    (r"line (\d+) is not valid JSON", "json_syntax", "see quarantine_df for the raw bytes"),
    (r"line (\d+) must contain an object", "not_object", "see quarantine_df for the raw bytes"),
    (r"event (\d+) requires a non-negative integer sequence", "bad_sequence",
     "see quarantine_df"),
    (r"event (\d+) requires event_type", "bad_event_type", "see quarantine_df"),
    (r"duplicate event sequence: (-?\d+)", "duplicate_sequence",
     "two lines carry one sequence (an emit without the lock, docs/run-format.md §4.5); "
     "fork before the duplicate is impossible too: the whole log must replay"),
    (r"multiple run_id values", "run_id_drift", "the log mixes two runs' events"),
    (r"could not read event JSONL", "events_unreadable",
     "pass a run directory that holds a regular events.jsonl"),
)


def not_a_run_dir(path: str) -> str | None:
    """A readable refusal when ``path`` is not a directory (e.g. the events.jsonl file).

    >>> not_a_run_dir("/nonexistent") is None
    True
    """
    if not os.path.lexists(path) or os.path.isdir(path):
        return None
    parent = os.path.dirname(os.path.normpath(path)) or "."
    return (f"source_not_directory: {path}: a file, not a run directory; "
            f"hint: pass the run directory that holds events.jsonl ({parent})")


def _line_location(run: RunData, code: str, m: re.Match[str] | None, message: str) -> str:
    path = f"{run.run_dir}/events.jsonl"
    lines = run.lines
    target = None
    if code in ("line_too_long_for_replay", "invalid_utf8", "json_syntax", "not_object") and m:
        n = int(m.group(1))
        target = next((ln for ln in lines if ln.line_no == n), None)
    elif code in ("bad_sequence", "bad_event_type") and m:
        i = int(m.group(1))
        nonblank = [ln for ln in lines if ln.status != "blank"]
        target = nonblank[i] if i < len(nonblank) else None
    elif code == "torn_tail" and lines:
        target = lines[-1]
    elif code == "duplicate_sequence" and m:
        seq = int(m.group(1))
        dups = [e for e in run.events if e.sequence == seq]
        if len(dups) > 1:
            return f"{path}:{dups[1].line_no}:{dups[1].byte_offset}"
    elif code == "run_id_drift":
        first = next((e.run_id for e in run.events if isinstance(e.run_id, str)), None)
        other = next((e for e in run.events
                      if isinstance(e.run_id, str) and e.run_id != first), None)
        if other is not None:
            return f"{path}:{other.line_no}:{other.byte_offset}"
    if target is not None:
        return f"{path}:{target.line_no}:{target.byte_offset}"
    return path


def explain_refusal(run: RunData, message: str) -> str:
    """The runner's refusal ``message`` with the audit's reason code, location and hint.

    Returns ``<code>: <file>:<line>:<byte>: <message>; hint: <hint>`` and, when the audit has
    its own words for that code, ``audit: <its message>`` on a second line.
    """
    for pattern, code, hint in _REFUSALS:
        m = re.search(pattern, message)
        if m is None:
            continue
        where = _line_location(run, code, m, message)
        text = f"{code}: {where}: {message}; hint: {hint}"
        from .resume import decide

        audit_msg = decide(run).messages.get(code)
        if audit_msg and audit_msg not in text:
            text += f"\n  audit: {audit_msg}"
        return text
    return f"replay_refused: {run.run_dir}/events.jsonl: {message}"


def fork_point_warning(run: RunData, sequence: int) -> str | None:
    """Why a fork at ``sequence`` is not safe (a side effect in flight, an open approval),
    or None when it is safe (or the sequence is not in the log)."""
    return _fork_warning(run.run_dir, events_from_run(run), sequence)


def fork_warning_of_dir(run_dir: str, sequence: int) -> str | None:
    """:func:`fork_point_warning` of the run in ``run_dir``, without reading the whole run
    when its log is clean (``read.columnar.decode``): then the exact reading accepts every
    line as one event with the line's own values, which is what ``events_from_bytes`` parses
    (equal warnings on every sample run: ``tests/test_replay_view.py``). Any other log (or one
    that cannot be read here) is read with ``read_run``, as the audit reads it.

    >>> fork_warning_of_dir("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e", 1)
    """
    from .read.columnar import decode

    try:
        data = read_events_bytes(run_dir)
    except ReplayRefused:
        data = b""
    if decode(data) is not None:
        return _fork_warning(run_dir, events_from_bytes(data), sequence)
    from .read.snapshot import read_run

    return fork_point_warning(read_run(run_dir), sequence)


def _fork_warning(run_dir: str, events: Sequence[ReducerEvent], sequence: int) -> str | None:
    for t in iter_transitions(events):
        if t.rejected or t.state.sequence != sequence:
            continue
        s = t.state
        if s.fork_safe:
            return None
        parts = []
        if s.side_effects_in_flight:
            parts.append(f"{s.side_effects_in_flight} side effect(s) in flight "
                         "(started, not completed: a fork cannot know whether it happened)")
        if s.open_approvals:
            parts.append(f"{len(s.open_approvals)} open approval(s) (the pending decision "
                         "is not carried into a fork)")
        return (f"warning: unsafe_fork_point: {run_dir}/events.jsonl sequence {sequence} "
                f"({t.event.event_type}): {' and '.join(parts)}; hint: pick a sequence where "
                "states_df.fork_safe is true (forks_df lists them; docs/run-format.md §9.5)")
    return None


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v):
        return v[:8] + "…"
    return "null" if v is None else str(v)


def _changes(prev: dict[str, Any], cur: dict[str, Any]) -> list[str]:
    out = []
    for k, v in cur.items():
        if k in _CLOCK or k in _QUIET or prev.get(k) == v:
            continue
        old = prev.get(k)
        if isinstance(v, int) and isinstance(old, int) and not isinstance(v, bool) \
                and k.endswith("tokens"):
            out.append(f"{k} +{v - old}")
        else:
            out.append(f"{k} {_fmt_value(old)}→{_fmt_value(v)}")
    return out


def _ts(t: datetime | None) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if t else "-"


def render_view(run_dir: str, state: dict[str, Any]) -> str:
    """The readable replay of one run: verdict, runner state, then one line per event with
    timestamp, time since the previous event, the runner's detail and what changed."""
    from .read.snapshot import read_run
    from .resume import decide

    run = read_run(run_dir)
    v = decide(run)
    events = events_from_run(run)
    generation = infer_generation(events, run.manifest)
    charge = charge_waits_default(generation)
    limits = Limits.from_request(run.request)
    detail = {item["sequence"]: item.get("detail") or item.get("text")
              for item in state.get("timeline", [])}
    count = state.get("event_count", 0)
    span = (f"sequences {state['first_sequence']}..{state['last_sequence']}" if count
            else "no events")
    term = state.get("terminal_event_type")
    lines = [
        f"Replay {run_dir}",
        f"run_id {state.get('run_id') or run.run_id or '-'}  kind {run.kind}  "
        f"runner {generation}",
        f"verdict {v.verdict}" + (f" ({', '.join(v.reasons)})" if v.reasons else ""),
        f"{count} event(s), {span}, "
        + (f"last terminal event {term}" if term else "no terminal event"),
        "",
        f"{'seq':>5}  {'created_at (UTC)':<23}  {'+s':>8}  event_type  [detail]  changes",
    ]
    prev_row: dict[str, Any] = state_row(
        initial_state(), charge_approval_waits=charge, limits=limits)
    prev_time: datetime | None = None
    last_row = prev_row
    for t in iter_transitions(events):
        ev = t.event
        when = ev.created_at
        delta = (f"{(when - prev_time).total_seconds():8.3f}" if when and prev_time
                 else f"{'':>8}")
        row = state_row(t.state, charge_approval_waits=charge, limits=limits)
        text = f"{ev.sequence:>5}  {_ts(when):<23}  {delta}  {ev.event_type}"
        d = detail.get(ev.sequence)
        if d:
            d = d if len(d) <= 60 else d[:57] + "..."
            text += f"  [{d}]"
        if t.rejected:
            text += f"  REJECTED ({t.rejected}): state unchanged"
        else:
            ch = _changes(prev_row, row)
            if ch:
                text += "  " + ", ".join(ch)
            prev_row = row
        lines.append(text)
        if when is not None:
            prev_time = when
        last_row = prev_row
    if not events:
        lines.append("  none")
    lines += ["", "time: elapsed {} s, charged {} s ({} approval waits), approval waits {} s"
              .format(_fmt_value(last_row["wall_elapsed_seconds"]),
                      _fmt_value(last_row["charged_wall_seconds"]),
                      "with" if charge else "without",
                      _fmt_value(last_row["approval_wait_seconds"]))]
    return "\n".join(lines)


def _write_stdout(text: str) -> None:
    # Always UTF-8, whatever the locale; _printable() already refused lone surrogates.
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    stream.write(text.encode("utf-8"))
    stream.flush()


def _error(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return 2


def cmd_replay(args: Any) -> int:
    """CLI handler of ``rivumi-analysis replay RUN_DIR [--json]``; returns the exit code.

    ``--json`` prints (and refuses) exactly as the runner does. The readable view adds
    timestamps, durations, the verdict and per-event state changes, and its refusals carry
    the audit's reason code, ``file:line:byte`` location and hint.
    """
    as_json = getattr(args, "json", False)
    if not as_json:
        problem = not_a_run_dir(args.run_dir)
        if problem:
            return _error(problem)
    try:
        state = replay_state(args.run_dir)
    except ReplayRefused as exc:
        if as_json:
            return _error(exc.message)
        from .read.snapshot import read_run

        return _error(explain_refusal(read_run(args.run_dir), exc.message))
    if as_json:
        _write_stdout(canonical_json(state) + "\n")
    else:
        _write_stdout(render_view(args.run_dir, state) + "\n")
    return 0


def cmd_fork_seed(args: Any) -> int:
    """CLI handler of ``rivumi-analysis fork-seed RUN_DIR --sequence N``; returns the exit code.

    The seed on stdout is the runner's, byte for byte; when the fork point is not safe (a side
    effect in flight or an open approval) a warning goes to stderr and the exit code stays 0.
    """
    try:
        seed = fork_seed(args.run_dir, args.sequence)
    except ReplayRefused as exc:
        return _error(exc.message)
    _write_stdout(canonical_json(seed) + "\n")
    warning = fork_warning_of_dir(args.run_dir, args.sequence)
    if warning:
        sys.stderr.write(warning + "\n")
        sys.stderr.flush()
    return 0
