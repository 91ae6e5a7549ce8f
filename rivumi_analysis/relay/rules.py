"""The state-atomic channel/journal reducer: rules C1–C13, D1–D4, J1–J6, F and DEAD (journal §7).

The state is a frozen dataclass; :func:`step` is a pure function ``(state, entry) -> (state,
violations, applied)``. An entry that breaks a C, J or F rule is one the kernel would have
refused: it is reported and the *old* state is returned unchanged (state-atomic). D rules and
DEAD are reported only. Per channel entry at most one D rule (first failing of D1–D4) and at
most one C rule (first failing, in the kernel's order) are reported.

>>> from rivumi_analysis.relay.read import Envelope
>>> e = Envelope(1, 1, "run.completed", "r", None, None, 0, {}, 0)
>>> late = Envelope(2, 1, "run.spawned", "r", None, None, 0, {}, 1)
>>> [v.rule for v in fold_entries([e, late], run_id="r").violations]
['J2']
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .read import Envelope, Journal, canonical

CHANNEL_TYPES = frozenset({"channel.appended", "channel.delivered", "channel.acknowledged"})
WAIT_TYPES = frozenset({"sleep.until", "wait.event", "wait.human", "wait.completed"})


@dataclass(frozen=True, slots=True)
class Violation:
    """One failed rule: rule id (``C1``…``DEAD``), the entry's seq and a readable message."""

    rule: str
    seq: int
    message: str


@dataclass(frozen=True, slots=True)
class Append:
    channel: str
    offset: int
    producer: str
    message_id: str
    message: str  # canonical JSON text
    seq: int


@dataclass(frozen=True, slots=True)
class Delivery:
    channel: str
    consumer: str
    offset: int
    seq: int


@dataclass(frozen=True, slots=True)
class Spec:
    """What the rules need of ``run.spawned.payload.spec``: step id -> (type, streams)."""

    steps: Mapping[str, tuple[Any, frozenset[str]]]

    @staticmethod
    def of(entries: Sequence[Envelope]) -> Spec | None:
        """The spec of the first ``run.spawned`` (wherever it sits), or None (journal §7.0)."""
        first = next((e for e in entries if e.entry_type == "run.spawned"), None)
        spec = first.payload.get("spec") if first is not None else None
        steps = spec.get("steps") if isinstance(spec, dict) else None
        if not isinstance(steps, list):
            return None
        out: dict[str, tuple[Any, frozenset[str]]] = {}
        for s in steps:
            if not isinstance(s, dict) or not isinstance(s.get("id"), str):
                continue
            surfaces = s.get("surfaces")
            streams = surfaces.get("streams") if isinstance(surfaces, dict) else None
            names = frozenset(x["stream"] for x in streams or ()
                              if isinstance(x, dict) and isinstance(x.get("stream"), str)) \
                if isinstance(streams, list) else frozenset()
            out.setdefault(s["id"], (s.get("type"), names))
        return Spec(out)


@dataclass(frozen=True, slots=True)
class Context:
    """Static facts of one journal: its run id, segments (SQLite) and spec."""

    run_id: str | None
    segments: tuple[tuple[int, int], ...] | None
    spec: Spec | None


class Grow(Mapping[Any, Any]):
    """An insert-only persistent map: :meth:`add` returns a new map and leaves this one as it
    was, in O(1) when this map is the latest version (the fold's case) and by copying its
    visible prefix when another version was already grown from it (a branch).

    >>> a = Grow()
    >>> b = a.add("x", 1)
    >>> c = a.add("y", 2)  # a branch: b keeps its view
    >>> dict(a), dict(b), dict(c)
    ({}, {'x': 1}, {'y': 2})
    """

    __slots__ = ("_store", "_order", "_n")

    def __init__(self, store: dict[Any, tuple[int, Any]] | None = None,
                 order: list[Any] | None = None, n: int = 0) -> None:
        self._store = {} if store is None else store
        self._order = [] if order is None else order
        self._n = n

    def add(self, key: Any, value: Any) -> Grow:
        if key in self:
            raise KeyError(f"{key!r} is already present (the map is insert-only)")
        if len(self._order) != self._n:  # another version grew from this one: copy our view
            order = self._order[: self._n]
            store = {k: self._store[k] for k in order}
        else:
            order, store = self._order, self._store
        order.append(key)
        store[key] = (self._n, value)
        return Grow(store, order, self._n + 1)

    def __getitem__(self, key: Any) -> Any:
        hit = self._store.get(key)
        if hit is None or hit[0] >= self._n or self._order[hit[0]] != key:
            raise KeyError(key)
        return hit[1]

    def __contains__(self, key: object) -> bool:
        hit = self._store.get(key)
        return hit is not None and hit[0] < self._n and self._order[hit[0]] == key

    def __iter__(self) -> Iterator[Any]:
        return iter(self._order[: self._n])

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"Grow({dict(self)!r})"




@dataclass(frozen=True, slots=True)
class State:
    """What the kernel keeps while folding (never mutated: transitions build new maps)."""

    completed: bool = False
    canceling: bool = False
    j1_segment: int = 0
    running: Mapping[str, int] = field(default_factory=dict)
    routed: frozenset[str] = frozenset()
    memory: frozenset[str] = frozenset()
    streams: Mapping[str, int] = field(default_factory=dict)
    elections: Mapping[tuple[str, str, str], tuple[int, bool]] = field(default_factory=dict)
    appends: Mapping[str, Grow] = field(default_factory=dict)  # channel -> offset -> Append
    message_ids: Grow = field(default_factory=Grow)  # (channel, producer, message_id) -> seq
    deliveries: Grow = field(default_factory=Grow)  # seq -> Delivery
    acked: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def acked_offset(self, channel: str, consumer: str) -> int:
        return self.acked.get((channel, consumer), 0)


def _set(m: Mapping[Any, Any], k: Any, v: Any) -> dict[Any, Any]:
    d = dict(m)
    d[k] = v
    return d


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _nonneg(v: Any) -> bool:
    return _is_int(v) and v >= 0


# --- one entry -------------------------------------------------------------------------------


def step(state: State, e: Envelope, ctx: Context) -> tuple[State, tuple[Violation, ...], bool]:
    """Fold one entry: ``(new_state, violations, applied)``; refused entries keep ``state``.

    ``state.j1_segment`` is the one field a refused entry may move: J1 compares with the
    previous entry that *passed J1*, whatever its own rules said.
    """
    if state.completed:
        return state, (Violation("J2", e.seq, "run is terminal and cannot accept journal "
                                 "entries (entry after run.completed)"),), False
    j1 = _j1(state, e, ctx)
    if j1 is not None:
        return state, (j1,), False
    if e.segment_id != state.j1_segment:
        state = replace(state, j1_segment=e.segment_id)
    t = e.entry_type
    if t in CHANNEL_TYPES:
        return _channel(state, e, ctx)
    refuse: Violation | None = None
    new = state
    if t == "run.cancel.requested":
        new = replace(state, canceling=True)
    elif t == "run.completed":
        new = replace(state, completed=True)
    elif t == "step.routed":
        refuse = _j6(state, e, ctx)
        if refuse is None:
            new = replace(state, routed=state.routed | {e.step_id})
    elif t in ("step.attempt.started", "step.completed"):
        refuse = _f_attempt(e, ctx)
        if refuse is None:
            running = dict(state.running)
            if t == "step.attempt.started":
                running[e.step_id] = e.attempt  # type: ignore[index]
            else:
                running.pop(e.step_id, None)  # type: ignore[arg-type]
            new = replace(state, running=running)
    elif t in WAIT_TYPES:
        refuse = _f_step(e, ctx)
        if refuse is None and e.step_id in state.running:
            running = dict(state.running)
            running.pop(e.step_id)  # type: ignore[arg-type]
            new = replace(state, running=running)
    elif t == "memory.injected":
        refuse = _f_step(e, ctx)
        if refuse is None and e.step_id in state.memory:
            refuse = Violation("J5", e.seq, f"InvalidMemory: a step cannot inject memory twice "
                               f"(step {e.step_id!r})")
        if refuse is None:
            new = replace(state, memory=state.memory | {e.step_id})
    elif t == "stream.appended":
        refuse, new = _j3(state, e)
    elif t in ("effect.recorded", "effect.confirmed"):
        refuse, new = _j4(state, e)
    elif t == "epoch.summary":
        new = _epoch(state, e)
    if refuse is not None:
        return state, (refuse,), False
    return new, (), True


def _j1(state: State, e: Envelope, ctx: Context) -> Violation | None:
    if ctx.segments is None:
        if ctx.run_id is not None and e.run_id != ctx.run_id:
            return Violation("J1", e.seq, f"WrongRun: entry of run {e.run_id!r} in the journal "
                             f"of run {ctx.run_id!r}")
    else:
        segs = ctx.segments
        idx = next((i for i, (sid, _) in enumerate(segs) if sid == e.segment_id), None)
        if idx is None:
            return Violation("J1", e.seq, f"WrongSegment: segment_id {e.segment_id} is not a "
                             "segments row")
        lo = segs[idx][1]
        hi = min((o for sid, o in segs if sid > e.segment_id), default=None)
        if e.seq < lo or (hi is not None and e.seq >= hi):
            return Violation("J1", e.seq, f"WrongSegment: seq {e.seq} is outside segment "
                             f"{e.segment_id} (opened at seq {lo}"
                             + (f", next opened at {hi})" if hi is not None else ")"))
    if e.segment_id < state.j1_segment:
        return Violation("J1", e.seq, f"WrongSegment: segment_id {e.segment_id} is below the "
                         f"current segment {state.j1_segment}")
    return None


def _in_spec(step_id: str | None, ctx: Context) -> bool:
    return ctx.spec is None or step_id in ctx.spec.steps


def _j6(state: State, e: Envelope, ctx: Context) -> Violation | None:
    if e.step_id is None:
        why = "step.routed has no step_id"
    elif not _in_spec(e.step_id, ctx):
        why = f"step {e.step_id!r} is not in the spec"
    elif e.attempt is not None:
        why = f"step.routed carries attempt {e.attempt}"
    elif e.step_id in state.routed:
        why = f"step {e.step_id!r} is already routed"
    else:
        return None
    return Violation("J6", e.seq, f"InvalidRouting: {why}")


def _f_step(e: Envelope, ctx: Context) -> Violation | None:
    if e.step_id is None:
        return Violation("F", e.seq, f"{e.entry_type} has no step_id")
    if not _in_spec(e.step_id, ctx):
        return Violation("F", e.seq, f"{e.entry_type} names step {e.step_id!r}, not in the spec")
    return None


def _f_attempt(e: Envelope, ctx: Context) -> Violation | None:
    v = _f_step(e, ctx)
    if v is not None:
        return v
    if e.attempt is None:
        return Violation("F", e.seq, f"{e.entry_type} of step {e.step_id!r} has no attempt")
    if (e.entry_type == "step.completed" and ctx.spec is not None
            and ctx.spec.steps[e.step_id][0] == "agent"  # type: ignore[index]
            and e.payload.get("completionReason") == "success"
            and e.payload.get("disposition") == "step_done"
            and e.payload.get("end_pins") is None):
        return Violation("F", e.seq, f"agent step {e.step_id!r} completed with success/"
                         "step_done but without end_pins")
    return None


def _j3(state: State, e: Envelope) -> tuple[Violation | None, State]:
    p = e.payload
    stream, offset = p.get("stream"), p.get("offset")
    if not isinstance(stream, str) or not _nonneg(offset):
        return Violation("J3", e.seq, "InvalidStreamOffset: stream.appended needs a string "
                         "stream and a non-negative integer offset"), state
    head = state.streams.get(stream)
    want = 0 if head is None else head + 1
    if offset != want:
        return Violation("J3", e.seq, f"InvalidStreamOffset: stream {stream!r} offset {offset}, "
                         f"expected {want}"), state
    return None, replace(state, streams=_set(state.streams, stream, offset))


def _j4(state: State, e: Envelope) -> tuple[Violation | None, State]:
    p = e.payload
    recorded = e.entry_type == "effect.recorded"
    if e.step_id is None:
        return Violation("J4", e.seq, f"MissingStep: {e.entry_type} has no step_id"), state
    if e.attempt is None:
        return Violation("J4", e.seq, f"MissingAttempt: {e.entry_type} has no attempt"), state
    sp, key = p.get("surface_path"), p.get("idempotency_key")
    if not isinstance(sp, str) or not isinstance(key, str) or (
            recorded and not isinstance(p.get("deduped"), bool)):
        return Violation("J4", e.seq, f"{e.entry_type} needs string surface_path and "
                         "idempotency_key" + (" and a boolean deduped" if recorded else "")), state
    k = (e.step_id, key, sp)
    held = state.elections.get(k)
    if recorded:
        correct = held is not None and (held[1] or held[0] == e.attempt)
        if p["deduped"] != correct:
            return Violation("J4", e.seq, f"effect {sp!r}: deduped is {p['deduped']}, the "
                             f"journal's election gives {correct}"), state
        if correct:
            return None, state
        return None, replace(state, elections=_set(state.elections, k, (e.attempt, False)))
    if held is None or held[0] != e.attempt:
        return Violation("J4", e.seq, f"UnelectedEffect: attempt {e.attempt} cannot confirm "
                         f"effect {sp!r}; it does not hold the election"), state
    return None, replace(state, elections=_set(state.elections, k, (held[0], True)))


def _epoch(state: State, e: Envelope) -> State:
    p = e.payload
    running: dict[str, int] = {}
    steps_open = p.get("steps_open")
    if isinstance(steps_open, dict):
        for sid, info in steps_open.items():
            if isinstance(info, dict) and info.get("state") == "running" \
                    and _is_int(info.get("attempt")):
                running[sid] = info["attempt"]
    routing = p.get("routing")
    routed = frozenset(routing) if isinstance(routing, dict) else frozenset()
    return replace(state, running=running, routed=routed)


# --- channel entries -------------------------------------------------------------------------


def _channel(state: State, e: Envelope, ctx: Context) -> tuple[State, tuple[Violation, ...], bool]:
    out: list[Violation] = []
    d = _d_rules(state, e, ctx)
    if d is not None:
        out.append(d)
    t = e.entry_type
    if t == "channel.appended":
        c, new = _appended(state, e)
    elif t == "channel.delivered":
        c, new = _delivered(state, e)
    else:
        c, new = _acknowledged(state, e)
    if c is not None:
        out.append(c)
        return state, tuple(out), False
    return new, tuple(out), True


def _d_rules(state: State, e: Envelope, ctx: Context) -> Violation | None:
    if state.canceling:
        return Violation("D1", e.seq, "run is terminal or canceling (channel entry after "
                         "run.cancel.requested)")
    if e.step_id is None:
        return Violation("D2", e.seq, "unknown step: the channel entry has no step_id")
    if ctx.spec is not None:
        info = ctx.spec.steps.get(e.step_id)
        if info is None:
            return Violation("D2", e.seq, f"unknown step {e.step_id!r}")
        if info[0] != "agent":
            return Violation("D2", e.seq, f"channel caller must be an agent (step {e.step_id!r} "
                             f"is {info[0]!r})")
        ch = e.payload.get("channel")
        if e.entry_type == "channel.appended" and isinstance(ch, str) and ch not in info[1]:
            return Violation("D3", e.seq, f"channel {ch!r} is not a declared writable stream of "
                             f"step {e.step_id!r}")
    running = state.running.get(e.step_id)
    if e.attempt is None or running != e.attempt:
        return Violation("D4", e.seq, f"channel caller does not match active attempt (attempt "
                         f"{e.attempt}, running {running})")
    return None


def _c1(e: Envelope, who: str, extra: str) -> Violation | None:
    p = e.payload
    bad: list[str] = []
    if not isinstance(p.get("channel"), str):
        bad.append("channel")
    if not _nonneg(p.get("offset")):
        bad.append("offset")
    if not isinstance(p.get(who), str):
        bad.append(who)
    if extra == "message_id" and not isinstance(p.get("message_id"), str):
        bad.append("message_id")
    if extra in ("message_id", "message") and "message" not in p:
        bad.append("message")
    if extra == "delivery_seq" and not _is_int(p.get("delivery_seq")):
        bad.append("delivery_seq")
    if bad:
        return Violation("C1", e.seq, f"payload decode error: bad or missing {', '.join(bad)}")
    if extra == "message_id" and (not p["channel"] or not p["message_id"]):
        return Violation("C1", e.seq, "empty channel or message id")
    return None


def _appended(state: State, e: Envelope) -> tuple[Violation | None, State]:
    v = _c1(e, "producer", "message_id")
    if v is not None:
        return v, state
    p = e.payload
    ch, producer, mid, offset = p["channel"], p["producer"], p["message_id"], p["offset"]
    if e.step_id != producer:
        return Violation("C2", e.seq, f"producer does not match step ({producer!r} vs "
                         f"{e.step_id!r})"), state
    have = state.appends.get(ch) or Grow()
    if offset != len(have) + 1:
        return Violation("C3", e.seq, f"append offset is not consecutive (offset {offset}, "
                         f"expected {len(have) + 1})"), state
    if (ch, producer, mid) in state.message_ids:
        return Violation("C4", e.seq, f"duplicate message id {mid!r} of {producer!r}"), state
    a = Append(ch, offset, producer, mid, canonical(p["message"]), e.seq)
    return None, replace(state, appends=_set(state.appends, ch, have.add(offset, a)),
                         message_ids=state.message_ids.add((ch, producer, mid), e.seq))


def _delivered(state: State, e: Envelope) -> tuple[Violation | None, State]:
    v = _c1(e, "consumer", "message")
    if v is not None:
        return v, state
    p = e.payload
    ch, consumer, offset = p["channel"], p["consumer"], p["offset"]
    if e.step_id != consumer:
        return Violation("C5", e.seq, f"consumer does not match step ({consumer!r} vs "
                         f"{e.step_id!r})"), state
    want = state.acked_offset(ch, consumer) + 1
    if offset != want:
        return Violation("C6", e.seq, f"delivery must be next unacknowledged message (offset "
                         f"{offset}, expected {want})"), state
    have = state.appends.get(ch) or Grow()
    if offset not in have:
        return Violation("C7", e.seq, f"delivery has no append (channel {ch!r} offset "
                         f"{offset})"), state
    got, exp = canonical(p["message"]), have[offset].message
    if got != exp:
        return Violation("C8", e.seq, f"delivery differs from appended message ({_cut(got)} vs "
                         f"{_cut(exp)})"), state
    if e.seq in state.deliveries:
        return Violation("C9", e.seq, f"duplicate delivery sequence {e.seq}"), state
    return None, replace(state, deliveries=state.deliveries.add(
        e.seq, Delivery(ch, consumer, offset, e.seq)))


def _acknowledged(state: State, e: Envelope) -> tuple[Violation | None, State]:
    v = _c1(e, "consumer", "delivery_seq")
    if v is not None:
        return v, state
    p = e.payload
    ch, consumer, offset, dseq = p["channel"], p["consumer"], p["offset"], p["delivery_seq"]
    if e.step_id != consumer:
        return Violation("C10", e.seq, f"consumer does not match step ({consumer!r} vs "
                         f"{e.step_id!r})"), state
    d = state.deliveries.get(dseq)
    if d is None:
        return Violation("C11", e.seq, f"unknown delivery sequence {dseq}"), state
    if d.channel != ch or d.consumer != consumer:
        return Violation("C11", e.seq, f"delivery {dseq} belongs to another channel or consumer "
                         f"({d.channel!r}/{d.consumer!r})"), state
    if offset != d.offset:
        return Violation("C12", e.seq, f"acknowledgement offset differs from delivery ({offset} "
                         f"vs {d.offset})"), state
    want = state.acked_offset(ch, consumer) + 1
    if offset != want:
        return Violation("C13", e.seq, f"acknowledgement must advance exactly one message "
                         f"(offset {offset}, expected {want})"), state
    return None, replace(state, acked=_set(state.acked, (ch, consumer), offset))


def _cut(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# --- the whole journal -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one accepted entry fared: applied (state moved) and the violations at its seq."""

    entry: Envelope
    applied: bool
    violations: tuple[Violation, ...]


@dataclass(frozen=True, slots=True)
class Fold:
    """Result of folding one journal: final state, per-entry outcomes, all violations."""

    state: State
    outcomes: tuple[Outcome, ...]
    violations: tuple[Violation, ...]
    dead: tuple[Violation, ...]

    @property
    def effects_confirmed(self) -> int:
        return sum(1 for _, confirmed in self.state.elections.values() if confirmed)


def fold_entries(entries: Sequence[Envelope], *, run_id: str | None = None,
                 segments: tuple[tuple[int, int], ...] | None = None) -> Fold:
    """Fold accepted entries (already in ``(seq, position)`` order) and apply DEAD (journal §7.4)."""
    ctx = Context(run_id, segments, Spec.of(entries))
    state = State()
    outcomes: list[Outcome] = []
    found: list[Violation] = []
    for e in entries:
        state, vs, applied = step(state, e, ctx)
        outcomes.append(Outcome(e, applied, vs))
        found.extend(vs)
    dead = tuple(dead_attempts(outcomes))
    found.extend(dead)
    found.sort(key=lambda v: (v.seq, v.rule))
    return Fold(state, tuple(outcomes), tuple(found), dead)


def fold_journal(j: Journal) -> Fold:
    """Fold a read :class:`~rivumi_analysis.relay.read.Journal`."""
    return fold_entries(j.entries, run_id=j.run_id, segments=j.segments)


def dead_attempts(outcomes: Sequence[Outcome]) -> list[Violation]:
    """DEAD at an applied start with no later applied completion of the same (step, attempt)
    when a later applied start of the step exists or the run has an applied run.completed."""
    applied = [o.entry for o in outcomes if o.applied]
    completed = any(e.entry_type == "run.completed" for e in applied)
    last_start: dict[str, int] = {}
    last_completion: dict[tuple[str, int], int] = {}
    for e in applied:
        if e.entry_type == "step.attempt.started":
            last_start[e.step_id] = e.seq  # type: ignore[index]
        elif e.entry_type == "step.completed":
            last_completion[(e.step_id, e.attempt)] = e.seq  # type: ignore[index]
    out = []
    for e in applied:
        if e.entry_type != "step.attempt.started":
            continue
        done = last_completion.get((e.step_id, e.attempt))  # type: ignore[arg-type]
        if done is not None and done > e.seq:
            continue
        if completed or last_start[e.step_id] > e.seq:  # type: ignore[index]
            out.append(Violation("DEAD", e.seq, f"attempt {e.attempt} of step {e.step_id!r} "
                                 "started and was never completed (no crashed/lease_expired "
                                 "completion on resume)"))
    return out
