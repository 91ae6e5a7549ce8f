"""``rivumi-analysis watch``: a live view of a fleet that is still running.

Every few seconds the fleet is stat-ed (the audit cache's fingerprint of each run folder);
only live runs (a process holds ``.writer.lock``) are read, and only when their fingerprint
changed (a run that was live is read once more when it lets go, for its verdict); a run that
is not live is only stat-ed, so the first tick over a settled fleet of 10,000 runs costs a
listing and a stat per run. A live run's ``events.jsonl`` is decoded from the first line
that was not complete last time (the audit cache's prefix rule: same inode, BLAKE2b of the
already-read prefix), so a tick costs a stat per run plus the new bytes.

Live runs are those whose ``.writer.lock`` a process holds (``writer_active``). For each:
step, seconds since the last append (the log's mtime), repeat count against the guard's trip
count, wall time and tokens burned against their limits, and what resume would decide if the
writer died now. Alerts: ``stalled`` (no append for ``stall_seconds``), ``repeat_guard`` (one
identical call from the trip), ``over_budget`` (steps, wall time or tokens at their limit),
``crash_tail`` (the log ends in an incomplete line). A run whose writer lets go leaves the
live list with its verdict.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from ..read.discovery import DEFAULT_MAX_DEPTH, Source, discover
from ..read.incremental import EventsPrefix, fingerprint, make_prefix, proc_locked_keys
from ..read.snapshot import RunData, _lock_key, read_run
from ..replay.reducer import REPEAT_TRIP

STALL_SECONDS = 60.0
INTERVAL_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class RunView:
    """What ``watch`` shows for one run."""

    run_dir: str
    run_id: str | None
    live: bool
    step: int | None
    max_steps: int | None
    last_append: float | None  # epoch seconds (events.jsonl mtime)
    repeat_count: int | None
    repeat_trip: int
    wall_seconds: float | None
    wall_limit: float | None
    tokens: int | None
    token_limit: int | None
    verdict: str
    reasons: tuple[str, ...]
    torn_tail: bool
    events: int

    def alerts(self, now: float, stall_seconds: float) -> dict[str, str]:
        """Alert code -> message, for a live run."""
        out: dict[str, str] = {}
        if not self.live:
            return out
        if self.last_append is not None and now - self.last_append >= stall_seconds:
            out["stalled"] = f"no event for {now - self.last_append:.0f} s"
        if self.repeat_count is not None and self.repeat_count == self.repeat_trip - 1:
            out["repeat_guard"] = (f"repeat count {self.repeat_count}/{self.repeat_trip}: "
                                   "one identical call from the guard")
        over = []
        if self.max_steps is not None and self.step is not None and self.step >= self.max_steps:
            over.append(f"step {self.step}/{self.max_steps}")
        if self.wall_limit and self.wall_seconds is not None and (
                self.wall_seconds >= self.wall_limit):
            over.append(f"wall {self.wall_seconds:.0f}/{self.wall_limit:.0f} s")
        if self.token_limit and self.tokens is not None and self.tokens >= self.token_limit:
            over.append(f"tokens {self.tokens}/{self.token_limit}")
        if over:
            out["over_budget"] = ", ".join(over)
        if self.torn_tail:
            out["crash_tail"] = "events.jsonl ends in an incomplete line"
        return out

    def key(self) -> tuple[Any, ...]:
        """What makes a change worth a line (everything but the clock)."""
        d = asdict(self)
        d.pop("last_append")
        return tuple(d.values())


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return v if type(v) is int else None


def view_of(run: RunData) -> RunView:
    """The watch view of one freshly read run."""
    from ..resume import decide
    from ..tables.facts import run_facts

    m = run.manifest or {}
    limits = (run.request or {}).get("limits") if isinstance(run.request, dict) else None
    limits = limits if isinstance(limits, dict) else {}
    facts = run_facts(run)  # steps and tokens: the run facts (log first)
    try:
        st = os.lstat(os.path.join(run.run_dir, "events.jsonl"))
        last = st.st_mtime
    except OSError:
        last = None
    v = decide(run)
    data = run.events_bytes or b""
    return RunView(
        run_dir=run.run_dir, run_id=run.run_id, live=run.writer_active,
        step=facts["step"], max_steps=_int(limits.get("max_steps")), last_append=last,
        repeat_count=_int(m.get("repeat_count")), repeat_trip=REPEAT_TRIP,
        wall_seconds=_num(m.get("active_wall_time_seconds")),
        wall_limit=_num(limits.get("wall_time_seconds")), tokens=facts["total_tokens"],
        token_limit=_int(limits.get("max_total_tokens")), verdict=v.verdict,
        reasons=tuple(v.reasons), torn_tail=bool(data) and not data.endswith(b"\n"),
        events=len(run.events))


@dataclass(slots=True)
class _Tracked:
    fp: bytes | None
    prefix: EventsPrefix | None
    view: RunView | None
    """None for a run that was not live whenever it was stat-ed (never read)."""
    alerts: dict[str, str] = field(default_factory=dict)


def _lock_held(run_dir: str, names: list[str] | None, held: frozenset[str]) -> bool:
    """Whether a process holds the run's ``.writer.lock`` (``held``: ``/proc/locks`` keys)."""
    if not held or (names is not None and ".writer.lock" not in names):
        return False
    try:
        st = os.lstat(os.path.join(run_dir, ".writer.lock"))
    except OSError:
        return False
    return _lock_key(st.st_dev, st.st_ino) in held


@dataclass(frozen=True, slots=True)
class Change:
    """One line of ``--format jsonl``: ``live`` (new or changed), ``alert``, ``finished``."""

    type: str
    run_dir: str
    at: float
    view: RunView
    alert: str | None = None
    message: str | None = None

    def to_json(self) -> str:
        d = {"type": self.type, "at": datetime.fromtimestamp(self.at, UTC).isoformat(
            timespec="seconds"), "run_dir": self.run_dir, "run_id": self.view.run_id}
        if self.alert:
            d.update(alert=self.alert, message=self.message)
        v = self.view
        d.update(step=v.step, max_steps=v.max_steps,
                 seconds_since_last_event=(round(self.at - v.last_append, 1)
                                           if v.last_append is not None else None),
                 repeat_count=v.repeat_count, repeat_trip=v.repeat_trip,
                 wall_seconds=v.wall_seconds, wall_limit=v.wall_limit, tokens=v.tokens,
                 token_limit=v.token_limit, events=v.events,
                 **({"verdict": v.verdict, "reasons": list(v.reasons)} if self.type == "finished"
                    else {"resume_now": v.verdict}))
        return json.dumps(_printable(d), separators=(",", ":"))


class Watcher:
    """Polls a fleet; :meth:`poll` returns what changed since the last poll."""

    def __init__(self, source: Source | None, *, max_depth: int = DEFAULT_MAX_DEPTH,
                 stall_seconds: float = STALL_SECONDS) -> None:
        self.source = source
        self.max_depth = max_depth
        self.stall_seconds = stall_seconds
        self.runs: dict[str, _Tracked] = {}
        self.finished: list[tuple[float, RunView]] = []
        self.reads = 0
        self.bytes_decoded = 0

    def _read(self, loc: Any, prev: _Tracked | None, fp: Any) -> tuple[RunView, EventsPrefix | None]:
        prefix = prev.prefix if prev is not None else None
        if prefix is not None and (fp is None or fp.events_identity != prefix.identity):
            prefix = None
        decoded: list[Any] = []
        run = read_run(loc.run_dir, is_subagent=loc.is_subagent,
                       parent_run_dir=loc.parent_run_dir, events_prefix=prefix,
                       source_root=loc.source_root,
                       decoded_out=decoded)
        self.reads += 1
        data = run.events_bytes or b""
        start = prefix.length if prefix is not None and prefix.matches(data) else 0
        self.bytes_decoded += len(data) - start
        new_prefix = None
        if data and decoded and fp is not None and fp.events_identity is not None:
            new_prefix = make_prefix(data, decoded[0][0], decoded[0][1], fp.events_identity)
        return view_of(run), new_prefix

    def poll(self, now: float | None = None) -> list[Change]:
        """Stat every run, re-read the changed live ones, return the changes (first poll: the
        live runs and their alerts)."""
        held = proc_locked_keys()
        listings: dict[str, list[str]] = {}
        found = discover(self.source, max_depth=self.max_depth, listings=listings).runs
        changes: list[Change] = []
        seen = set()
        for loc in found:
            seen.add(loc.run_dir)
            prev = self.runs.get(loc.run_dir)
            # the lock file's identity (ctime/mtime/size), not its bytes, as the store does
            names = listings.get(loc.run_dir)
            fp = fingerprint(loc.run_dir, held, names)
            if prev is not None and fp is not None and prev.fp == fp.blob:
                view = prev.view
            else:
                prev_view = prev.view if prev is not None else None
                if (prev_view is not None and prev_view.live) or _lock_held(
                        loc.run_dir, names, held):
                    view, prefix = self._read(loc, prev, fp)
                else:
                    view, prefix = None, None  # not live: nothing to show until it is
                prev = self.runs[loc.run_dir] = _Tracked(fp.blob if fp else None, prefix, view,
                                                         prev.alerts if prev else {})
                t = time.time() if now is None else now
                if view is None:
                    pass
                elif view.live and (prev_view is None or prev_view.key() != view.key()):
                    changes.append(Change("live", loc.run_dir, t, view))
                elif prev_view is not None and prev_view.live and not view.live:
                    changes.append(Change("finished", loc.run_dir, t, view))
                    self.finished.append((t, view))
            t = time.time() if now is None else now
            alerts = view.alerts(t, self.stall_seconds) if view is not None else {}
            for code, msg in alerts.items():
                if code not in prev.alerts:
                    changes.append(Change("alert", loc.run_dir, t, view, code, msg))
            prev.alerts = alerts
        for gone in [r for r in self.runs if r not in seen]:
            tr = self.runs.pop(gone)
            if tr.view is not None and tr.view.live:
                t = time.time() if now is None else now
                changes.append(Change("finished", gone, t, tr.view, message="run removed"))
        return changes

    def live(self) -> list[RunView]:
        return [t.view for t in self.runs.values() if t.view is not None and t.view.live]

    def alerts(self) -> list[tuple[str, str, str]]:
        return [(r, code, msg) for r, t in self.runs.items() for code, msg in t.alerts.items()]


# --- rendering ---------------------------------------------------------------------------------

def _printable(value: Any) -> Any:
    """``value`` with a lone surrogate (a folder name that is not UTF-8, as ``os.listdir``
    escapes it, or a ``\\udXXX`` escape in a JSON document) shown as U+FFFD: never print
    what is not UTF-8.

    >>> _printable("/runs/r" + chr(0xDCFF)), _printable({"run_dir": "ok"})
    ('/runs/r\ufffd', {'run_dir': 'ok'})
    """
    from ..read.decode import _without_lone_surrogates

    return _without_lone_surrogates(value)


def _short(run_dir: str, width: int = 34) -> str:
    return run_dir if len(run_dir) <= width else "…" + run_dir[-(width - 1):]


def _frac(used: float | None, limit: float | None) -> str:
    if used is None:
        return "-"
    if not limit:
        return f"{used:.0f}"
    return f"{100 * used / limit:.0f}%"


def render_screen(w: Watcher, now: float, source_label: str, tick_seconds: float) -> str:
    """The full-screen view (a TTY redraws it every tick)."""
    live = sorted(w.live(), key=lambda v: v.run_dir)
    stamp = datetime.fromtimestamp(now, UTC).strftime("%H:%M:%S UTC")
    lines = [f"rivumi-analysis watch {source_label}   {stamp}   {len(live)} live, "
             f"{len(w.runs) - len(live)} not live   (tick {tick_seconds:.2f} s)", "",
             f"{'LIVE RUN':<34} {'STEP':>7} {'LAST':>6} {'REPEAT':>6} {'WALL':>6} "
             f"{'TOKENS':>7}  RESUME NOW"]
    for v in live:
        step = f"{v.step if v.step is not None else '-'}/{v.max_steps or '-'}"
        last = f"{now - v.last_append:.0f}s" if v.last_append is not None else "-"
        rep = f"{v.repeat_count if v.repeat_count is not None else '-'}/{v.repeat_trip}"
        lines.append(f"{_short(v.run_dir):<34} {step:>7} {last:>6} {rep:>6} "
                     f"{_frac(v.wall_seconds, v.wall_limit):>6} "
                     f"{_frac(v.tokens, v.token_limit):>7}  {v.verdict}")
    if not live:
        lines.append("(no live run)")
    alerts = w.alerts()
    lines += ["", "ALERTS" if alerts else "ALERTS (none)"]
    lines += [f"  {code:<13} {_short(r)}  {msg}" for r, code, msg in sorted(alerts)]
    if w.finished:
        lines += ["", "FINISHED"]
        for t, v in w.finished[-8:]:
            when = datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S")
            lines.append(f"  {when} {_short(v.run_dir)}  verdict {v.verdict}"
                         + (f" ({', '.join(v.reasons)})" if v.reasons else ""))
    return _printable("\n".join(lines))


def render_change(c: Change) -> str:
    """One plain-text line per change (stdout not a terminal)."""
    v = c.view
    stamp = datetime.fromtimestamp(c.at, UTC).strftime("%H:%M:%S")
    if c.type == "alert":
        return _printable(f"{stamp} ALERT {c.alert} {v.run_dir}: {c.message}")
    if c.type == "finished":
        return _printable(f"{stamp} FINISHED {v.run_dir}: verdict {v.verdict}"
                          + (f" ({', '.join(v.reasons)})" if v.reasons else ""))
    last = f"{c.at - v.last_append:.0f}s ago" if v.last_append is not None else "-"
    return _printable(
        f"{stamp} LIVE {v.run_dir}: step {v.step}/{v.max_steps or '-'}, last event "
        f"{last}, repeat {v.repeat_count}/{v.repeat_trip}, wall "
        f"{_frac(v.wall_seconds, v.wall_limit)}, tokens {_frac(v.tokens, v.token_limit)}, "
        f"resume now: {v.verdict}")


def render_summary(w: Watcher, now: float, tick_seconds: float) -> str:
    """The summary line a pipe gets after a tick's changes.

    >>> w = Watcher([])
    >>> render_summary(w, 0.0, 0.25)
    '00:00:00 0 runs: 0 live, 0 alerts, 0 finished since start (tick 0.25 s)'
    """
    stamp = datetime.fromtimestamp(now, UTC).strftime("%H:%M:%S")
    return (f"{stamp} {len(w.runs)} runs: {len(w.live())} live, {len(w.alerts())} alerts, "
            f"{len(w.finished)} finished since start (tick {tick_seconds:.2f} s)")


HEARTBEAT_SECONDS = 60.0
"""On a pipe, a tick with no change still prints its summary line this often."""


def watch(source: Source | None, *, out: TextIO | None = None, fmt: str = "auto",
          interval: float = INTERVAL_SECONDS, stall_seconds: float = STALL_SECONDS,
          max_depth: int = DEFAULT_MAX_DEPTH, iterations: int | None = None) -> int:
    """Run the live view until interrupted (or for ``iterations`` ticks); returns 0."""
    out = out or sys.stdout
    tty = fmt == "auto" and out.isatty()
    w = Watcher(source, max_depth=max_depth, stall_seconds=stall_seconds)
    label = source if isinstance(source, str) else " ".join(map(str, source or []))
    last_summary = None
    try:
        for _ in _ticks(interval, iterations):
            t0 = time.perf_counter()
            changes = w.poll()
            now = time.time()
            tick = time.perf_counter() - t0
            if tty:
                out.write("\x1b[H\x1b[2J" + render_screen(w, now, label, tick) + "\n")
            elif fmt == "jsonl":
                out.writelines(c.to_json() + "\n" for c in changes)
            else:
                # the changes, then a summary: every tick with a change, the first tick and
                # a heartbeat, so a pipe shows a settled fleet from the first tick
                out.writelines(render_change(c) + "\n" for c in changes)
                if changes or last_summary is None or now - last_summary >= HEARTBEAT_SECONDS:
                    out.write(render_summary(w, now, tick) + "\n")
                    last_summary = now
            out.flush()
    except KeyboardInterrupt:
        pass
    return 0


def _ticks(interval: float, iterations: int | None) -> Iterator[int]:
    i = 0
    while iterations is None or i < iterations:
        if i:
            time.sleep(interval)
        yield i
        i += 1
