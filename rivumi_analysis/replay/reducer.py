"""Reference reducer: the state of a native run after each event, from the log alone.

Immutable state (frozen dataclasses) and a pure transition function :func:`apply_event`. The
reducer is *state-atomic*: an event it rejects (today: a sequence it has already seen) leaves
the state exactly as it was and the rejection is reported in :class:`Transition.rejected`.

What is tracked, and the spec rule behind it:

* step (``data.step`` of the latest ``model.requested``), model and tool call counters;
* usage (§11.1): the four counters are summed and ``provider_total_tokens`` accumulates the
  computed ``total_tokens`` (``provider_total_tokens`` if given, else input + output); lanes as
  far as the log shows them (``model.completed`` = primary, ``role_lane.completed`` =
  reviewer; the wind-down call has no usage event);
* repeat guard (§10.1), with resume (count reset to 0, fingerprint kept) and continuation (both
  reset) rules; ``fingerprint_unknown`` when arguments were replaced by the ``omitted`` stub or
  for an "Unknown tool" completion with no ``tool.requested``;
* side effects in flight, open approvals, phase, terminal, ``continuation_index``;
* time (§10.3): elapsed since ``run.created``, approval waits, resume downtime and the charged
  wall time under either runner generation (see :func:`infer_generation`).

>>> evs = events_from_bytes(b'{"sequence":0,"event_type":"run.created","data":{}}\\n'
...                         b'{"sequence":1,"event_type":"model.requested","data":{"step":1}}\\n')
>>> final_state(evs).step
1
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "REPEAT_TRIP",
    "Limits",
    "ReducerEvent",
    "RunState",
    "Transition",
    "UsageTotals",
    "apply_event",
    "events_from_bytes",
    "events_from_run",
    "final_state",
    "fingerprint",
    "infer_generation",
    "initial_state",
    "iter_transitions",
    "state_row",
]

REPEAT_TRIP = 3
"""The repeat guard trips when ``repeat_count`` reaches this value (§10.1)."""

_TERMINAL = {"run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled"}
_UNKNOWN_TOOL_PREFIX = "Unknown tool"


# --------------------------------------------------------------------------------------------
# Small immutable building blocks
# --------------------------------------------------------------------------------------------
def _int(value: Any) -> int:
    """A usage counter as the log gives it; anything that is not a plain int counts as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Cumulative usage (§6.3/§11.1). ``provider_total_tokens`` is None until the first add.

    >>> u = UsageTotals().add({"input_tokens": 3, "output_tokens": 2})
    >>> (u.input_tokens, u.provider_total_tokens, u.total_tokens)
    (3, 5, 5)
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    provider_total_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        """The computed field: ``provider_total_tokens`` if not null, else input + output."""
        if self.provider_total_tokens is not None:
            return self.provider_total_tokens
        return self.input_tokens + self.output_tokens

    def add(self, usage: Any) -> UsageTotals:
        """Return ``self + usage`` by the runner's ``add_usage`` rule (``usage`` is a dict)."""
        if not isinstance(usage, Mapping):
            return self
        inp, out = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
        ptt = usage.get("provider_total_tokens")
        right_total = _int(ptt) if isinstance(ptt, int) and not isinstance(ptt, bool) else inp + out
        return UsageTotals(
            self.input_tokens + inp,
            self.output_tokens + out,
            self.cached_input_tokens + _int(usage.get("cached_input_tokens")),
            self.reasoning_tokens + _int(usage.get("reasoning_tokens")),
            self.total_tokens + right_total,
        )

    def as_dict(self) -> dict[str, int | None]:
        """The five stored counters (the manifest's ``usage`` shape)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "provider_total_tokens": self.provider_total_tokens,
        }


def _interval_add(intervals: tuple[tuple[int, int], ...], n: int) -> tuple[tuple[int, int], ...]:
    """Insert ``n`` into a sorted tuple of disjoint closed intervals (persistent set of ints).

    A contiguous log stays one interval, so the seen-sequence set costs O(1) space per run.
    """
    i = bisect.bisect_left(intervals, (n, n))
    left = intervals[i - 1] if i > 0 else None
    right = intervals[i] if i < len(intervals) else None
    if left is not None and left[1] + 1 >= n and right is not None and n + 1 >= right[0]:
        return intervals[: i - 1] + ((left[0], right[1]),) + intervals[i + 1:]
    if left is not None and left[1] + 1 >= n:
        return intervals[: i - 1] + ((left[0], max(left[1], n)),) + intervals[i:]
    if right is not None and n + 1 >= right[0]:
        return intervals[:i] + ((min(n, right[0]), right[1]),) + intervals[i + 1:]
    return intervals[:i] + ((n, n),) + intervals[i:]


def _interval_has(intervals: tuple[tuple[int, int], ...], n: int) -> bool:
    i = bisect.bisect_right(intervals, (n, float("inf"))) - 1
    return i >= 0 and intervals[i][0] <= n <= intervals[i][1]


def fingerprint(name: Any, arguments: Any) -> str:
    """The repeat-guard fingerprint of a tool call (§10.1).

    >>> fingerprint("run_check", {"name": "check-1"})[:16]
    'fe8994c7102d5a7f'
    """
    text = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False,
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _is_omitted_stub(arguments: Any) -> bool:
    return (isinstance(arguments, Mapping) and arguments.get("omitted") is True
            and set(arguments) <= {"omitted", "utf8_bytes", "sha256"})


@dataclass(frozen=True, slots=True)
class ReducerEvent:
    """The fields of an event the reducer looks at (built from ``RunData.events`` or bytes)."""

    line_no: int
    sequence: int
    event_type: str
    created_at: datetime | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    run_id: Any = None


@dataclass(frozen=True, slots=True)
class Limits:
    """Budget limits from ``request.json`` (§7.1). ``None`` fields mean "no limit known"."""

    max_steps: int | None = None
    wall_time_seconds: float | None = None
    max_total_tokens: int | None = None

    @classmethod
    def from_request(cls, request: Any) -> Limits | None:
        """Limits of a parsed ``request.json`` (TaskContract defaults when ``limits`` is absent).

        >>> Limits.from_request({"limits": {"max_steps": 5}})
        Limits(max_steps=5, wall_time_seconds=900.0, max_total_tokens=None)
        >>> Limits.from_request(None) is None
        True
        """
        if not isinstance(request, Mapping):
            return None
        lim = request.get("limits")
        lim = lim if isinstance(lim, Mapping) else {}
        steps = lim.get("max_steps", 12)
        wall = lim.get("wall_time_seconds", 900.0)
        tokens = lim.get("max_total_tokens")
        num = (int, float)
        return cls(
            max_steps=steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
            wall_time_seconds=float(wall) if isinstance(wall, num) and not isinstance(wall, bool)
            else None,
            max_total_tokens=tokens if isinstance(tokens, int) and not isinstance(tokens, bool)
            else None,
        )


@dataclass(frozen=True)
class RunState:
    """The state of a run after some prefix of its log. Never mutated; see :func:`apply_event`.

    (No ``__slots__``: :func:`_evolve` copies the instance dict, which is several times faster
    than :func:`dataclasses.replace` for this many fields.)
    """

    # identity and position
    run_id: str | None = None
    sequence: int | None = None
    event_type: str | None = None
    event_count: int = 0
    rejected_count: int = 0
    seen: tuple[tuple[int, int], ...] = ()
    # steps and calls
    step: int = 0
    turn_start_step: int = 0
    model_requests: int = 0
    model_completions: int = 0
    model_failures: int = 0
    tool_requests: int = 0
    tool_starts: int = 0
    tool_completions: int = 0
    # usage (§11.1)
    usage: UsageTotals = UsageTotals()
    usage_primary: UsageTotals = UsageTotals()
    usage_reviewer: UsageTotals = UsageTotals()
    # repeat guard (§10.1)
    last_fingerprint: str | None = None
    fingerprint_key: str | None = None  # comparable stand-in when the real one is unknown
    repeat_count: int = 0
    fingerprint_unknown: bool = False
    last_call_name: Any = None
    # tool names of the latest model.completed not yet seen as tool.requested/Unknown tool
    pending_calls: tuple[Any, ...] = ()
    unlogged_guard_calls: int = 0
    # side effects and approvals
    tools_in_flight: frozenset[str] = frozenset()
    verifications_in_flight: frozenset[str] = frozenset()
    open_approvals: tuple[tuple[str, datetime | None], ...] = ()
    # verification outcomes of the latest final-verification round: (name, ok, exit_code)
    verification: tuple[tuple[Any, Any, Any], ...] = ()
    verification_round_open: bool = False
    # lifecycle
    phase: str = "created"
    terminal: bool = False
    terminal_event_type: str | None = None
    terminal_reason: str | None = None
    continuation_index: int = 0
    resume_count: int = 0
    # time (§10.3)
    started_at: datetime | None = None
    turn_started_at: datetime | None = None
    last_time: datetime | None = None
    approval_wait_seconds: float = 0.0
    approval_wait_turn_seconds: float = 0.0
    resume_downtime_seconds: float = 0.0
    downtime_in_approval_turn_seconds: float = 0.0

    # ---- derived values -------------------------------------------------------------------
    @property
    def side_effects_in_flight(self) -> int:
        """Started tools and final checks with no completion yet."""
        return len(self.tools_in_flight) + len(self.verifications_in_flight)

    @property
    def fork_safe(self) -> bool:
        """A fork here would cut no side effect in flight and no pending approval."""
        return self.side_effects_in_flight == 0 and not self.open_approvals

    @property
    def repeat_trip_distance(self) -> int:
        """How many more identical calls in a row until the guard trips (0 = tripped)."""
        return max(0, REPEAT_TRIP - self.repeat_count)

    def open_approval_seconds(self) -> float:
        """Time the still-open approvals have waited, up to the latest event."""
        return sum(_wait(t, self.last_time) for _, t in self.open_approvals)

    def wall_elapsed_seconds(self) -> float | None:
        """Wall-clock time from ``run.created`` (or the first event) to the latest event."""
        return _seconds(self.started_at, self.last_time)

    def charged_wall_seconds(self, charge_approval_waits: bool) -> float | None:
        """Charged wall time of the current turn by §10.3.

        Continuations restart the clock. With ``charge_approval_waits=False`` (current
        runners) approval waits and resume downtime that began inside an approval wait are
        not charged; older (M4) runners charged everything, including resume outages.
        """
        elapsed = _seconds(self.turn_started_at, self.last_time)
        if elapsed is None:
            return None
        if not charge_approval_waits:
            elapsed -= (self.approval_wait_turn_seconds + self.open_approval_seconds()
                        + self.downtime_in_approval_turn_seconds)
        return max(0.0, elapsed)


@dataclass(frozen=True, slots=True)
class Transition:
    """The result of one :func:`apply_event`: the state after, and why it was rejected."""

    event: ReducerEvent
    state: RunState
    rejected: str | None = None


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def _wait(start: datetime | None, end: datetime | None) -> float:
    """An approval wait from two timestamps, never negative (docs/run-format.md §10.3).

    The runner times waits with a monotonic clock; log timestamps that go backwards (naive,
    numeric or other-offset ``created_at`` values) count as no wait, as resume downtime does.
    """
    return max(0.0, _seconds(start, end) or 0.0)


def initial_state() -> RunState:
    """The state before any event.

    >>> initial_state().phase
    'created'
    """
    return RunState()


# --------------------------------------------------------------------------------------------
# The transition function
# --------------------------------------------------------------------------------------------
def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _close_approval(s: RunState, request_id: Any, when: datetime | None,
                    changes: dict[str, Any]) -> None:
    opened = changes.get("open_approvals", s.open_approvals)
    keep = tuple(a for a in opened if a[0] != request_id)
    if len(keep) == len(opened):
        return
    waited = sum(_wait(t, when) for rid, t in opened if rid == request_id)
    changes["open_approvals"] = keep
    changes["approval_wait_seconds"] = changes.get(
        "approval_wait_seconds", s.approval_wait_seconds) + waited
    changes["approval_wait_turn_seconds"] = changes.get(
        "approval_wait_turn_seconds", s.approval_wait_turn_seconds) + waited


def _get(s: RunState, changes: dict[str, Any], name: str) -> Any:
    return changes[name] if name in changes else getattr(s, name)


def _repeat(s: RunState, key: str, real: str | None, unknown: bool,
            changes: dict[str, Any], name: Any) -> None:
    """§10.1 for one evaluated tool call: same key → count + 1, else key replaces, count 1."""
    last_key = _get(s, changes, "fingerprint_key")
    if last_key is not None and key == last_key:
        changes["repeat_count"] = _get(s, changes, "repeat_count") + 1
    else:
        changes["repeat_count"] = 1
    changes["fingerprint_key"] = key
    changes["last_fingerprint"] = real
    changes["fingerprint_unknown"] = unknown
    changes["last_call_name"] = name
    pending = list(_get(s, changes, "pending_calls"))
    if name in pending:
        pending.remove(name)
        changes["pending_calls"] = tuple(pending)


def _settle_pending(s: RunState, changes: dict[str, Any], seq: int) -> None:
    """Calls the model asked for that never reached the log were still evaluated by the guard
    (§10.1: the tripping call gets no ``tool.requested``). A call named like the previous one is
    taken to repeat it (that is what trips the guard); any other name has an unknown
    fingerprint."""
    pending = s.pending_calls
    if not pending:
        return
    for i, name in enumerate(pending):
        if _get(s, changes, "fingerprint_key") is not None and name == _get(
                s, changes, "last_call_name"):
            changes["repeat_count"] = _get(s, changes, "repeat_count") + 1
        else:
            key = "unlogged:" + fingerprint(name, {"sequence": seq, "index": i})
            _repeat(s, key, None, True, changes, name)
    changes["pending_calls"] = ()
    changes["unlogged_guard_calls"] = s.unlogged_guard_calls + len(pending)


def _evolve(state: RunState, changes: dict[str, Any]) -> RunState:
    """A copy of ``state`` with ``changes`` applied (the frozen-dataclass ``replace``, fast)."""
    new = object.__new__(RunState)
    d = new.__dict__
    d.update(state.__dict__)
    d.update(changes)
    return new


def apply_event(state: RunState, event: ReducerEvent) -> Transition:
    """Apply one event; pure and state-atomic.

    Args:
        state: the state before the event.
        event: the event (in file order).

    Returns:
        A :class:`Transition`; when ``rejected`` is set, ``state`` is the input state itself.

    >>> s = final_state(events_from_bytes(b'{"sequence":0,"event_type":"run.created"}\\n'))
    >>> t = apply_event(s, ReducerEvent(line_no=2, sequence=0, event_type="x"))
    >>> (t.rejected, t.state is s)
    ('duplicate_sequence', True)
    """
    seq = event.sequence
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return Transition(event, state, "bad_sequence")
    if _interval_has(state.seen, seq):
        return Transition(event, state, "duplicate_sequence")
    s = state
    et = event.event_type
    data = event.data if isinstance(event.data, Mapping) else {}
    when = event.created_at
    c: dict[str, Any] = {
        "sequence": seq,
        "event_type": et,
        "event_count": s.event_count + 1,
        "seen": _interval_add(s.seen, seq),
    }
    if s.run_id is None and isinstance(event.run_id, str) and event.run_id:
        c["run_id"] = event.run_id
    if when is not None:
        if s.started_at is None:
            c["started_at"] = when
        if s.turn_started_at is None:
            c["turn_started_at"] = when
        c["last_time"] = when if s.last_time is None else max(s.last_time, when)

    if et in ("run.created", "run.forked"):
        if when is not None:
            c["started_at"] = when
            c["turn_started_at"] = when
    elif et == "session.resumed":
        c["resume_count"] = s.resume_count + 1
        c["repeat_count"] = 0  # §8.1 step 11: the count is not restored; the fingerprint is
        c["pending_calls"] = ()
        c["phase"] = "running"
        gap = _seconds(s.last_time, when) or 0.0
        c["resume_downtime_seconds"] = s.resume_downtime_seconds + max(0.0, gap)
        if s.open_approvals:
            # The process died while waiting for a decision: under current runners the clock
            # was paused, so neither the wait up to the crash nor the outage is charged.
            c["downtime_in_approval_turn_seconds"] = (
                s.downtime_in_approval_turn_seconds + max(0.0, gap))
            waited = sum(_wait(t, s.last_time) for _, t in s.open_approvals)
            c["approval_wait_seconds"] = s.approval_wait_seconds + waited
            c["approval_wait_turn_seconds"] = s.approval_wait_turn_seconds + waited
            c["open_approvals"] = ()
        # A side effect cut by the crash never gets its completion; it is not in flight in
        # the new process (resume refuses a side-effect tail unless the manifest was ahead).
        c["tools_in_flight"] = frozenset()
        c["verifications_in_flight"] = frozenset()
    elif et == "session.continued":
        c.update(
            continuation_index=s.continuation_index + 1, repeat_count=0, last_fingerprint=None,
            fingerprint_key=None, fingerprint_unknown=False, last_call_name=None,
            pending_calls=(), phase="running", terminal=False,
            turn_start_step=s.step, turn_started_at=when, approval_wait_turn_seconds=0.0,
            downtime_in_approval_turn_seconds=0.0, open_approvals=(),
            tools_in_flight=frozenset(), verifications_in_flight=frozenset(),
        )
    elif et == "model.requested":
        _settle_pending(s, c, seq)
        step = data.get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            c["step"] = step
        c["model_requests"] = s.model_requests + 1
        c["phase"] = "running"
        c["verification_round_open"] = False
    elif et == "model.completed":
        c["model_completions"] = s.model_completions + 1
        calls = data.get("tool_calls")
        if isinstance(calls, list):
            c["pending_calls"] = tuple(n for n in calls if isinstance(n, str | int | float))
        c["usage"] = s.usage.add(data.get("usage"))
        c["usage_primary"] = s.usage_primary.add(data.get("usage"))
    elif et == "model.failed":
        c["model_failures"] = s.model_failures + 1
    elif et == "role_lane.completed":
        c["usage"] = s.usage.add(data.get("usage"))
        c["usage_reviewer"] = s.usage_reviewer.add(data.get("usage"))
    elif et == "tool.requested":
        c["tool_requests"] = s.tool_requests + 1
        args = data.get("arguments")
        name = data.get("name")
        if _is_omitted_stub(args):
            # Same stub hash + same name means same arguments, so the count stays exact even
            # though the real fingerprint cannot be rebuilt.
            key = "omitted:" + fingerprint(name, {"sha256": args.get("sha256")})
            _repeat(s, key, None, True, c, name)
        else:
            fp = fingerprint(name, args if args is not None else {})
            _repeat(s, fp, fp, False, c, name)
    elif et == "tool.started":
        c["tool_starts"] = s.tool_starts + 1
        tcid = _str(data.get("tool_call_id")) or f"#{seq}"
        c["tools_in_flight"] = s.tools_in_flight | {tcid}
    elif et == "tool.completed":
        c["tool_completions"] = s.tool_completions + 1
        tcid = _str(data.get("tool_call_id")) or ""
        c["tools_in_flight"] = s.tools_in_flight - {tcid}
        err = data.get("error")
        if isinstance(err, str) and err.startswith(_UNKNOWN_TOOL_PREFIX):
            # The guard evaluated this call but its arguments never reached the log.
            key = "unknown:" + fingerprint(data.get("name"), {"tool_call_id": tcid})
            _repeat(s, key, None, True, c, data.get("name"))
    elif et == "approval.requested":
        rid = _str(data.get("request_id")) or f"#{seq}"
        c["open_approvals"] = s.open_approvals + ((rid, when),)
        c["phase"] = "waiting_approval"
    elif et in ("approval.resolved", "approval.abandoned"):
        _close_approval(s, data.get("request_id"), when, c)
        if et == "approval.resolved":
            c["phase"] = "running"
    elif et == "verification.started":
        name = data.get("name")
        c["verifications_in_flight"] = s.verifications_in_flight | {
            name if isinstance(name, str) else f"#{seq}"}
    elif et in ("verification.completed", "verification.reused"):
        name = data.get("name")
        # only a string name can match a started check (and a list would not hash)
        c["verifications_in_flight"] = s.verifications_in_flight - {
            name if isinstance(name, str) else None}
        outcome = (name, data.get("ok"), data.get("exit_code"))
        prev = s.verification if s.verification_round_open else ()
        c["verification"] = prev + (outcome,)
        c["verification_round_open"] = True
    elif et == "loop.wind_down_started":
        _settle_pending(s, c, seq)
    elif et in _TERMINAL:
        _settle_pending(s, c, seq)
        c["phase"] = _TERMINAL[et]
        c["terminal"] = True
        c["terminal_event_type"] = et
        reason = _str(data.get("terminal_reason"))
        c["terminal_reason"] = reason
    return Transition(event, _evolve(s, c), None)


def iter_transitions(events: Iterable[ReducerEvent],
                     state: RunState | None = None) -> Iterator[Transition]:
    """Apply events in order, yielding one :class:`Transition` per event.

    Args:
        events: reducer events in file order.
        state: the state to start from (default: :func:`initial_state`).

    Yields:
        One :class:`Transition` per event; rejected events carry the reason.

    >>> evs = [ReducerEvent(1, 0, "run.created"), ReducerEvent(2, 0, "run.created")]
    >>> [t.rejected for t in iter_transitions(evs)]
    [None, 'duplicate_sequence']
    """
    s = state if state is not None else initial_state()
    for ev in events:
        t = apply_event(s, ev)
        s = t.state
        yield t


def final_state(events: Iterable[ReducerEvent]) -> RunState:
    """The state after the whole log.

    >>> final_state([ReducerEvent(1, 0, "run.created"), ReducerEvent(2, 1, "run.failed",
    ...                                                       data={"terminal_reason": "x"})]).phase
    'failed'
    """
    s = initial_state()
    for t in iter_transitions(events, s):
        s = t.state
    return s


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------
def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def events_from_bytes(data: bytes) -> list[ReducerEvent]:
    """Leniently parse ``events.jsonl`` bytes into reducer events (tests and quick looks).

    Lines that are not JSON objects with an int ``sequence`` and a string ``event_type`` are
    skipped; this never raises. Production code uses :func:`events_from_run`.

    >>> [e.sequence for e in events_from_bytes(b'{"sequence":0,"event_type":"a"}\\nxx\\n{"seq')]
    [0]
    """
    out: list[ReducerEvent] = []
    for i, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if not isinstance(obj, dict):
            continue
        seq, et = obj.get("sequence"), obj.get("event_type")
        if not isinstance(seq, int) or isinstance(seq, bool) or not isinstance(et, str):
            continue
        d = obj.get("data")
        out.append(ReducerEvent(i, seq, et, _parse_time(obj.get("created_at")),
                                d if isinstance(d, dict) else {}, obj.get("run_id")))
    return out


def events_from_run(run: Any) -> list[ReducerEvent]:
    """Reducer events from a ``RunData`` (its accepted events, in file order).

    >>> from rivumi_analysis.read.snapshot import read_run
    >>> run = read_run("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e")
    >>> len(events_from_run(run))
    50
    """
    return [ReducerEvent(e.line_no, e.sequence, e.event_type, e.created_at, e.data, e.run_id)
            for e in run.events]


def infer_generation(events: Sequence[ReducerEvent], manifest: Any = None) -> str:
    """Guess the runner generation from the signals §1.2 lists: ``"m4"``, ``"current"`` or
    ``"unknown"``.

    ``approval.*`` events without ``policy_reason`` or ``verification.completed`` without
    ``argv`` mean M4; with them, current. Without such events, a manifest without
    ``model_usage`` means M4 and one with it current.

    >>> infer_generation([ReducerEvent(0, 0, "approval.requested", data={"reason": "x"})])
    'm4'
    >>> infer_generation([])
    'unknown'
    """
    old = new = False
    for e in events:
        if e.event_type in ("approval.requested", "approval.resolved", "approval.reused"):
            if "policy_reason" in e.data:
                new = True
            else:
                old = True
        elif e.event_type == "verification.completed" and "error" not in e.data:
            if "argv" in e.data:
                new = True
            else:
                old = True
    if old:
        return "m4"
    if new:
        return "current"
    if isinstance(manifest, Mapping):
        return "current" if "model_usage" in manifest else "m4"
    return "unknown"


def charge_waits_default(generation: str) -> bool:
    """Default of ``charge_approval_waits``: True only for M4 runners (which did not pause the
    clock during approvals); current and unknown runners pause it.

    >>> charge_waits_default("m4"), charge_waits_default("unknown")
    (True, False)
    """
    return generation == "m4"


# --------------------------------------------------------------------------------------------
# Flattening for tables
# --------------------------------------------------------------------------------------------
def state_row(state: RunState, *, charge_approval_waits: bool,
              limits: Limits | None = None) -> dict[str, Any]:
    """Flatten a state into the columns of ``states_df`` (see ``schemas.StatesSchema``).

    >>> row = state_row(initial_state(), charge_approval_waits=False)
    >>> row["fork_safe"], row["repeat_trip_distance"], row["steps_remaining"]
    (True, 3, None)
    """
    u = state.usage
    charged = state.charged_wall_seconds(charge_approval_waits)
    steps_remaining = wall_remaining = tokens_remaining = None
    if limits is not None:
        if limits.max_steps is not None:
            steps_remaining = limits.max_steps - (state.step - state.turn_start_step)
        if limits.wall_time_seconds is not None and charged is not None:
            wall_remaining = limits.wall_time_seconds - charged
        if limits.max_total_tokens is not None:
            tokens_remaining = limits.max_total_tokens - u.total_tokens
    return {
        "step": state.step,
        "model_requests": state.model_requests,
        "model_completions": state.model_completions,
        "model_failures": state.model_failures,
        "tool_requests": state.tool_requests,
        "tool_starts": state.tool_starts,
        "tool_completions": state.tool_completions,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cached_input_tokens": u.cached_input_tokens,
        "reasoning_tokens": u.reasoning_tokens,
        "provider_total_tokens": u.provider_total_tokens,
        "total_tokens": u.total_tokens,
        "primary_total_tokens": state.usage_primary.total_tokens,
        "reviewer_total_tokens": state.usage_reviewer.total_tokens,
        "last_action_fingerprint": state.last_fingerprint,
        "repeat_count": state.repeat_count,
        "repeat_trip_distance": state.repeat_trip_distance,
        "fingerprint_unknown": state.fingerprint_unknown,
        "unlogged_guard_calls": state.unlogged_guard_calls,
        "side_effects_in_flight": state.side_effects_in_flight,
        "open_approvals": len(state.open_approvals),
        "phase": state.phase,
        "terminal": state.terminal,
        "terminal_reason": state.terminal_reason,
        "continuation_index": state.continuation_index,
        "resume_count": state.resume_count,
        "wall_elapsed_seconds": state.wall_elapsed_seconds(),
        "approval_wait_seconds": state.approval_wait_seconds + state.open_approval_seconds(),
        "resume_downtime_seconds": state.resume_downtime_seconds,
        "charged_wall_seconds": charged,
        "steps_remaining": steps_remaining,
        "wall_time_remaining_seconds": wall_remaining,
        "tokens_remaining": tokens_remaining,
        "fork_safe": state.fork_safe,
    }
