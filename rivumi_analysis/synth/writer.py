"""A run writer that follows the Rivumi/Looplane runner's write protocol (docs/run-format.md §3–§7, §9.5, §11.8).

The writer produces run directories byte-compatible with what the runner writes, including the
states a killed runner leaves behind. It mirrors the runner's persistence code, not its agent
logic: callers (see :mod:`rivumi_analysis.synth.scenarios`) decide *what* happens (model replies, tool
results, approval decisions); the writer decides *how* it lands on disk and keeps the manifest
up to date through its own state updates (step, messages, usage, repeat guard, approvals, wall
clock, phase).

Determinism: nothing reads the real clock or the global random generator. Time comes from a
:class:`VirtualClock`, identifiers and temp-file names from a seeded :class:`Ids`, and the pid
in ``.writer.lock`` is a fixed number, so a run (and a run killed at a cut point) is
byte-identical across regenerations.

>>> fmt_ts(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
'2026-01-02T03:04:05Z'
>>> fmt_ts(datetime(2026, 1, 2, 3, 4, 5, 120, tzinfo=UTC))
'2026-01-02T03:04:05.000120Z'
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rivumi_analysis.synth.truth import RunTruth

__all__ = [
    "PROFILES",
    "Faults",
    "Ids",
    "Profile",
    "RunWriter",
    "VirtualClock",
    "action_fingerprint",
    "bounded_text",
    "dumps_compact",
    "fmt_ts",
    "write_external_run",
    "write_fork_run",
]

TERMINAL_PHASES = frozenset({"completed", "failed", "cancelled"})
STATUS_TO_PHASE = {
    "created": "created",
    "preparing": "preparing",
    "inspecting": "running",
    "planning": "running",
    "implementing": "running",
    "verifying": "verifying",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}
# approvals.TOOL_EFFECTS (2b8ba482) plus the older run_check entry (§5.3).
TOOL_EFFECTS: Mapping[str, str] = {
    **dict.fromkeys(
        ["list_files", "read_file", "search_text", "git_diff", "dispatch_subagents", "agent",
         "tool_program", "web_fetch", "web_search", "read_process", "list_processes",
         "wait_for_output", "view_image", "take_screenshot", "read_session"], "read"),
    **dict.fromkeys(["create_file", "replace_text", "apply_patch"], "modify"),
    "tool_transaction": "modify_execute",
    **dict.fromkeys(["shell", "http_request", "start_process", "stop_process", "start_session",
                     "send_input", "end_session", "run_check"], "execute"),
}
FIXED_LOCK_PID = 4242
"""The pid written into ``.writer.lock``: fixed, so killed runs are byte-identical."""


# --------------------------------------------------------------------------- encodings

def fmt_ts(dt: datetime) -> str:
    """Format a UTC datetime the way pydantic v2 does (``Z``; fraction dropped when zero)."""
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if dt.microsecond:
        text += f".{dt.microsecond:06d}"
    return text + "Z"


def parse_ts(text: str) -> datetime:
    """Parse a timestamp written by :func:`fmt_ts` back to an aware UTC datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def dumps_compact(obj: Any) -> str:
    """``atomic_write_json``/event encoding: sorted keys, compact separators, raw UTF-8.

    >>> dumps_compact({"b": 1, "a": "é"})
    '{"a":"é","b":1}'
    """
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def dumps_declared(obj: Any) -> str:
    """``model_dump_json()`` style: keys in the given (declaration/insertion) order, compact."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def action_fingerprint(name: str, arguments: Mapping[str, Any]) -> str:
    """SHA-256 hex of the canonical ``{"name","arguments"}`` JSON (repeat guard, §10.1)."""
    payload = dumps_compact({"name": name, "arguments": arguments})
    return hashlib.sha256(payload.encode()).hexdigest()


def bounded_text(value: str, limit: int) -> str:
    """Clip text to ``limit`` UTF-8 bytes keeping head and tail, like the runner (§4.4).

    >>> bounded_text("abc", 10)
    'abc'
    >>> "bytes omitted" in bounded_text("x" * 5000, 2000)
    True
    """
    raw = value.encode()
    if len(raw) <= limit:
        return value
    omitted = len(raw) - limit
    half = limit // 2
    head = raw[:half].decode(errors="ignore")
    tail = raw[len(raw) - (limit - half):].decode(errors="ignore")
    return f"{head}\n... output truncated ({omitted} bytes omitted) ...\n{tail}"


def zero_usage() -> dict[str, Any]:
    """A fresh ``Usage`` (stored form: no computed ``total_tokens``)."""
    return {"cached_input_tokens": 0, "input_tokens": 0, "output_tokens": 0,
            "provider_total_tokens": None, "reasoning_tokens": 0}


def usage_total(usage: Mapping[str, Any]) -> int:
    """Computed ``Usage.total_tokens`` (§6.3)."""
    if usage.get("provider_total_tokens") is not None:
        return int(usage["provider_total_tokens"])
    return int(usage["input_tokens"]) + int(usage["output_tokens"])


def usage_out(usage: Mapping[str, Any]) -> dict[str, Any]:
    """A Usage dump that includes the computed field (events, result, checkpoint)."""
    return {**usage, "total_tokens": usage_total(usage)}


def add_usage(left: Mapping[str, Any], right: Mapping[str, Any]) -> dict[str, Any]:
    """``model_calls.add_usage``: sum the counters; provider total = sum of *computed* totals."""
    out = {k: int(left[k]) + int(right.get(k, 0)) for k in
           ("cached_input_tokens", "input_tokens", "output_tokens", "reasoning_tokens")}
    out["provider_total_tokens"] = usage_total(left) + usage_total(right)
    return out


def cost_out(cost: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A CostBreakdown dump with the computed ``total_cost``."""
    if cost is None:
        return None
    total = cost["input_cost"] + cost["cached_input_cost"] + cost["output_cost"]
    return {**cost, "total_cost": total}


# --------------------------------------------------------------------------- determinism

class VirtualClock:
    """A seeded virtual clock: a UTC wall time and a monotonic reading that advance together.

    Args:
        start: first wall-clock value (aware UTC).
        seed: seed of the jitter generator used by :meth:`tick`.
        mono_start: first monotonic reading.
    """

    def __init__(self, start: datetime, seed: int = 0, mono_start: float = 0.0) -> None:
        self._wall = start
        self._mono = mono_start
        self._rng = random.Random(seed)

    def now(self) -> datetime:
        """Current wall time."""
        return self._wall

    def monotonic(self) -> float:
        """Current monotonic reading (seconds)."""
        return self._mono

    def advance(self, seconds: float) -> None:
        """Move both readings forward (microsecond resolution on the wall clock)."""
        micros = max(0, round(seconds * 1_000_000))
        self._wall += timedelta(microseconds=micros)
        self._mono += micros / 1_000_000

    def tick(self, low: float = 0.0008, high: float = 0.004) -> None:
        """Advance by a small seeded jitter: the runner's own overhead between writes."""
        self.advance(self._rng.uniform(low, high))

    def set(self, wall: datetime | str | None = None, mono: float | None = None) -> None:
        """Pin the clock (scenario scripts pin observed values). Wall moves carry mono along."""
        if wall is not None:
            target = parse_ts(wall) if isinstance(wall, str) else wall
            delta = (target - self._wall).total_seconds()
            self._wall = target
            self._mono += max(0.0, delta)
        if mono is not None:
            self._mono = mono


class Ids:
    """Seeded identifiers: uuid4-style hex, tokens and temp-file suffixes.

    Args:
        seed: seed of the generator (the only source of randomness in a run).
    """

    _TEMP_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def hex32(self) -> str:
        """A uuid4().hex look-alike."""
        value = self.rng.getrandbits(128)
        value &= ~(0xF000 << 64)
        value |= 0x4000 << 64
        value &= ~(0xC000 << 48)
        value |= 0x8000 << 48
        return f"{value:032x}"

    def call_id(self) -> str:
        """A provider tool-call id like ``fc_<uuid>``."""
        h = self.hex32()
        return f"fc_{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def temp_suffix(self) -> str:
        """An 8-character temp-file suffix (``tempfile`` style)."""
        return "".join(self.rng.choice(self._TEMP_CHARS) for _ in range(8))


# --------------------------------------------------------------------------- profiles

@dataclass(frozen=True)
class Profile:
    """Which runner version the writer imitates.

    Attributes:
        name: ``m4`` (the older runner that wrote the example run) or ``current``.
        policy_reason: ``approval.*`` events and ApprovalRequest carry ``policy_reason``.
        model_usage: the manifest and result carry ``model_usage`` (and the result ``cost``).
        verification_argv: ``verification.completed`` carries ``argv``.
        pause_on_approval: the wall clock is paused while the approval policy decides.
        message_metadata: Message items carry ``provider_metadata``.
        verified_fingerprint: the manifest has ``verified_workspace_fingerprint``.
        request_extras: ``request.json`` has ``enabled_skills``, ``attachments``, ``max_total_tokens``.
        result_error_key: ``result.json`` always has ``error`` (null unless failed).
    """

    name: str
    policy_reason: bool
    model_usage: bool
    verification_argv: bool
    pause_on_approval: bool
    message_metadata: bool
    verified_fingerprint: bool
    request_extras: bool
    result_error_key: bool


PROFILES: Mapping[str, Profile] = {
    "m4": Profile("m4", False, False, False, False, False, False, False, False),
    "current": Profile("current", True, True, True, True, True, True, True, True),
}


@dataclass(frozen=True)
class Faults:
    """Fault injection (not the protocol): how a broken writer or a bad copy damages a log.

    Attributes:
        crlf: lines end with CR LF.
        bom: a UTF-8 BOM precedes the first line.
        no_final_newline: newlines are written *before* each line after the first, so the
            file lacks its final newline.
        torn_at: sequence whose line is written in two ``write`` calls (hook ``torn`` between).
        duplicate_at: sequence at which the counter is not advanced (the §4.5 race): the next
            event reuses it.
    """

    crlf: bool = False
    bom: bool = False
    no_final_newline: bool = False
    torn_at: int | None = None
    duplicate_at: int | None = None


Hook = Callable[[str, "int | None", "str | None"], None]
"""Cut-point callback ``hook(point, sequence, event_type)`` (see :mod:`rivumi_analysis.synth.crash`)."""


def _no_hook(point: str, seq: int | None, event_type: str | None) -> None:
    return None


class _Pins:
    """Queues of pinned values consumed in order (scenario scripts of observed runs)."""

    def __init__(self) -> None:
        self.events: list[tuple[str | None, str | None]] = []


# --------------------------------------------------------------------------- the writer

class RunWriter:
    """Writes one native (or subagent) run directory with the runner's persistence protocol.

    Args:
        run_dir: the run directory (created with ``exist_ok=False`` by :meth:`create`).
        profile: ``"m4"`` or ``"current"`` (see :data:`PROFILES`).
        clock: virtual clock.
        ids: seeded identifiers.
        fsync: fsync files and directory like the durable runner (default off, for speed).
        hook: cut-point callback, called at every protocol point.
        faults: fault injection.
        manifest_every: save ``session.json`` only on every k-th emit (corpus fast mode);
            1 follows the protocol exactly.
        artifact_root: the run root written into ``result.json`` artifact paths (absolute
            paths of the machine that "ran" the task); defaults to a fixed fake root.
        artifact_rel: the run's path below ``artifact_root`` (subagents:
            ``<parent>/subagents/<id>``); defaults to the directory name.
        truth: where to record what is written (:class:`~rivumi_analysis.synth.truth.RunTruth`,
            shared by every writer of the run: resumes and continuations too); None: nothing.
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, profile: str = "current",
                 clock: VirtualClock, ids: Ids, fsync: bool = False, hook: Hook | None = None,
                 faults: Faults | None = None, manifest_every: int = 1,
                 artifact_root: str = "/home/dev/.local/state/looplane/runs",
                 artifact_rel: str | None = None, truth: RunTruth | None = None) -> None:
        self.run_dir = os.fspath(run_dir)
        self.truth = truth
        self.artifact_rel = artifact_rel
        self.profile = PROFILES[profile]
        self.clock = clock
        self.ids = ids
        self.fsync = fsync
        self.hook: Hook = hook or _no_hook
        self.faults = faults or Faults()
        self.manifest_every = max(1, manifest_every)
        self.artifact_root = artifact_root
        self.m: dict[str, Any] = {}
        self.request: dict[str, Any] = {}
        self.seq = 0
        self.pins = _Pins()
        self.process_token = ""
        self.run_started_mono = 0.0
        self.turn_start_step = 0
        self.made_changes = False
        self._events_written = 0
        self._emits_since_save = 0
        self._test_log_written = False
        self._fast_fd: int | None = None
        self._fast_buf: list[bytes] = []
        self.closed = False

    # ----------------------------------------------------------------- low-level file I/O
    def path(self, name: str) -> str:
        """Absolute-or-relative path of a file inside the run directory."""
        return os.path.join(self.run_dir, name)

    def atomic_write(self, name: str, text: str, *, seq: int | None = None,
                     event_type: str | None = None) -> None:
        """``_atomic_write``: temp ``.<name>.<random>`` in the same folder, then ``os.replace``."""
        if self.manifest_every > 1:
            # Corpus fast mode: the same bytes written in place (renames are slow here).
            with open(self.path(name), "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            return
        tmp = self.path(f".{name}.{self.ids.temp_suffix()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, text.encode())
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        # A kill here leaves the temp file beside the old document (atomic_write_leftover).
        self.hook(f"temp_written:{name}", seq, event_type)
        os.replace(tmp, self.path(name))
        if self.fsync:
            self._fsync_dir()

    def _fsync_dir(self) -> None:
        dfd = os.open(self.run_dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def write_json(self, name: str, obj: Any) -> None:
        """``atomic_write_json``: sorted compact raw UTF-8, no trailing newline."""
        if self.manifest_every > 1:
            # Corpus fast mode: same bytes, written in place (no temp file + rename).
            with open(self.path(name), "w", encoding="utf-8", newline="") as fh:
                fh.write(dumps_compact(obj))
            return
        self.atomic_write(name, dumps_compact(obj))

    def acquire_lock(self, token: str) -> None:
        """``SessionStore.acquire_writer``: truncate and rewrite ``.writer.lock``."""
        flags = os.O_CREAT | os.O_RDWR | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(self.path(".writer.lock"), flags, 0o600)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid={FIXED_LOCK_PID} token={token}\n".encode())
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _append_line(self, line: str, seq: int, event_type: str) -> None:
        """``JsonlEventSink``: one ``O_APPEND`` write per line; the file is created here."""
        f = self.faults
        data = line.encode()
        end = b"\r\n" if f.crlf else b"\n"
        if f.no_final_newline:
            data = (end + data) if self._events_written else data
        else:
            data = data + end
        if f.bom and self._events_written == 0:
            data = b"\xef\xbb\xbf" + data
        if self.manifest_every > 1:
            # Fast mode: lines are buffered and appended (same bytes) right after each
            # manifest save, so the log never gets ahead of the manifest.
            self._fast_buf.append(data)
            self._events_written += 1
            if self._emits_since_save == 0:
                self.flush_events()
            return
        fd = os.open(self.path("events.jsonl"), os.O_APPEND | os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            if f.torn_at == seq:
                # Fault injection: the line lands in two writes, cut inside its JSON text.
                cut = max(1, len(data) // 2)
                os.write(fd, data[:cut])
                if self.truth is not None:
                    self.truth.torn = True
                self.hook("torn", seq, event_type)
                os.write(fd, data[cut:])
            else:
                os.write(fd, data)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._events_written += 1

    # ----------------------------------------------------------------- manifest
    def save_manifest(self, *, seq: int | None = None, event_type: str | None = None,
                      force: bool = False) -> None:
        """``SessionStore.save``: refresh heartbeat/updated_at and atomically replace.

        In corpus fast mode only every k-th save is written unless ``force`` is set.
        """
        if not force and self.manifest_every > 1:
            self._emits_since_save += 1
            if self._emits_since_save < self.manifest_every:
                return
        self._emits_since_save = 0
        now = fmt_ts(self.clock.now())
        self.m["updated_at"] = now
        self.m["writer_heartbeat_at"] = now
        self.atomic_write("session.json", dumps_compact(self.m), seq=seq, event_type=event_type)
        if self.truth is not None:
            self.truth.active_wall_time_seconds = self.m["active_wall_time_seconds"]
        if self._fast_buf and seq is None:
            self.flush_events()

    # ----------------------------------------------------------------- emit protocol (§3.4)
    def emit(self, event_type: str, data: Mapping[str, Any], *, event_id: str | None = None,
             at: str | None = None, truth: Callable[[int], None] | None = None) -> int:
        """``RunPersistence.emit``: build the event, save the manifest, append, count.

        ``truth(line_no)``: what the line means for the run's truth (which call or approval
        it opens or closes), recorded as soon as the line is written, before any hook."""
        if self.pins.events:
            pin_at, pin_id = self.pins.events.pop(0)
            at = at or pin_at
            event_id = event_id or pin_id
        if at is not None:
            self.clock.set(wall=at)
        else:
            self.clock.tick()
        seq = self.seq
        event = {
            "created_at": fmt_ts(self.clock.now()),
            "data": data,
            "event_id": event_id or self.ids.hex32(),
            "event_type": event_type,
            "run_id": self.m["run_id"],
            "sequence": seq,
            "task_id": self.m["task_id"],
        }
        line = dumps_compact(event)
        self.m["last_event_sequence"] = seq
        self.save_manifest(seq=seq, event_type=event_type)
        self.hook("manifest_saved", seq, event_type)
        self._append_line(line, seq, event_type)
        if self.truth is not None:
            line_no = self.truth.line(event_type, data, event["created_at"])
            if truth is not None:
                truth(line_no)
        self.hook("appended", seq, event_type)
        if self.faults.duplicate_at != seq:
            self.seq += 1
        return seq

    # ----------------------------------------------------------------- lifecycle
    def create(self, *, run_id: str, request: Mapping[str, Any], provider: str, model: str,
               protocol: str, prompt_version: str, base_sha: str, writer_token: str | None = None,
               process_token: str | None = None, workspace: bool = True) -> None:
        """Fresh native run (§3.3 steps 1–3): dir, lock, request.json, session.json, run.created."""
        os.makedirs(self.run_dir, exist_ok=False)
        token = writer_token or self.ids.hex32()
        self.process_token = process_token or self.ids.hex32()
        self.acquire_lock(token)
        self.request = dict(request)
        self.request["base_sha"] = base_sha
        self.write_json("request.json", self.request)
        now = fmt_ts(self.clock.now())
        m: dict[str, Any] = {
            "schema_version": 1, "run_id": run_id, "task_id": self.request["task_id"],
            "provider_name": provider, "model_id": model, "protocol": protocol,
            "prompt_version": prompt_version, "base_sha": base_sha, "phase": "created",
            "step": 0, "messages": [], "usage": zero_usage(), "final_summary": "",
            "last_action_fingerprint": None, "repeat_count": 0, "last_event_sequence": -1,
            "verification": [], "pending_action": None, "approval_history": [],
            "granted_effects": [], "active_wall_time_seconds": 0.0,
            # The clock starts with run(): a fresh run has no manifest base yet (§10.3).
            "active_started_at": now, "terminal": False, "active_writer_token": token,
            "writer_claimed_at": now, "writer_heartbeat_at": now, "updated_at": now,
        }
        if self.profile.model_usage:
            m["model_usage"] = []
        if self.profile.verified_fingerprint:
            m["verified_workspace_fingerprint"] = None
        self.m = m
        self.run_started_mono = self.clock.monotonic()
        self.save_manifest(force=True)
        self.emit("run.created", {"base_sha": base_sha, "model": model,
                                  "prompt_version": prompt_version, "provider": provider})
        if workspace:
            self.emit("workspace.prepared", {"base_sha": base_sha, "workspace": "workspace"})

    def message(self, role: str, content: str | None, tool_calls: Sequence[Mapping] = ()) -> dict:
        """Build a conversation Message (profile decides ``provider_metadata``)."""
        msg: dict[str, Any] = {"content": content, "role": role,
                               "tool_calls": [dict(c) for c in tool_calls]}
        if self.profile.message_metadata:
            msg["provider_metadata"] = {}
        return msg

    def start_conversation(self, system: str, user: str) -> None:
        """§3.3, before step 4: initial messages and checkpoint ``inspecting``."""
        self.m["messages"].extend([self.message("system", system), self.message("user", user)])
        self.checkpoint("inspecting", {})

    def checkpoint(self, status: str, metadata: Mapping[str, Any]) -> None:
        """``RunPersistence.checkpoint``: checkpoint.json, then session.json with the phase."""
        self.clock.tick(0.0002, 0.001)
        phase = STATUS_TO_PHASE[status]
        if self.manifest_every > 1 and phase not in TERMINAL_PHASES:
            # Corpus fast mode: intermediate checkpoints only change in-memory phase.
            self.m["phase"] = phase
            self.m["terminal"] = False
            return
        msgs = self.m["messages"]
        doc = {
            "active_writer_token": self.process_token,
            "last_action_fingerprint": self.m["last_action_fingerprint"],
            "messages": msgs, "metadata": dict(metadata), "run_id": self.m["run_id"],
            "status": status, "step": self.m["step"], "task_id": self.m["task_id"],
            "tool_call_count": sum(len(x.get("tool_calls") or []) for x in msgs if "role" in x),
            "updated_at": fmt_ts(self.clock.now()), "usage": usage_out(self.m["usage"]),
        }
        self.write_json("checkpoint.json", doc)
        self.m["phase"] = phase
        self.m["terminal"] = phase in TERMINAL_PHASES
        self.save_manifest()

    # ----------------------------------------------------------------- wall clock (§10.3)
    def charged_seconds(self) -> float:
        """Charged active time right now."""
        if self.m.get("active_started_at") is None:
            return self.m["active_wall_time_seconds"]
        return self.m["active_wall_time_seconds"] + (self.clock.monotonic() - self.run_started_mono)

    def pause_clock(self) -> None:
        """Fold the running segment into the base and stop charging."""
        if self.m.get("active_started_at") is not None:
            self.m["active_wall_time_seconds"] = self.charged_seconds()
            self.m["active_started_at"] = None

    def resume_clock(self) -> None:
        """Start a new charged segment."""
        self.m["active_started_at"] = fmt_ts(self.clock.now())
        self.run_started_mono = self.clock.monotonic()

    def close(self, *, mono: float | None = None, at: str | None = None) -> None:
        """The lifecycle ``finally``: stop the clock, save session.json once more (lock kept)."""
        if at is not None or mono is not None:
            self.clock.set(wall=at, mono=mono)
        else:
            self.clock.tick()
        self.pause_clock()
        self.save_manifest(force=True)
        self.release()

    def flush_events(self) -> None:
        """Fast mode: append the buffered lines with one ``O_APPEND`` write."""
        if not self._fast_buf:
            return
        if self._fast_fd is None:
            self._fast_fd = os.open(self.path("events.jsonl"),
                                    os.O_APPEND | os.O_CREAT | os.O_WRONLY, 0o600)
        os.write(self._fast_fd, b"".join(self._fast_buf))
        self._fast_buf.clear()

    def release(self) -> None:
        """Close the fast-mode log descriptor (the lock file itself is never deleted)."""
        self.flush_events()
        if self._fast_fd is not None:
            os.close(self._fast_fd)
            self._fast_fd = None
        self.closed = True

    # ----------------------------------------------------------------- model steps
    def model_request(self) -> int:
        """``state.step += 1`` then ``model.requested``."""
        self.m["step"] += 1
        self.emit("model.requested", {"step": self.m["step"]})
        return self.m["step"]

    def record_usage(self, usage: Mapping[str, Any], *, lane: str = "primary",
                     provider: str | None = None, model: str | None = None,
                     cost: Mapping[str, Any] | None = None) -> None:
        """Add one call's usage to the cumulative usage and (current) to ``model_usage``."""
        full = {**zero_usage(), **usage}
        self.m["usage"] = add_usage(self.m["usage"], full)
        if self.truth is not None:
            self.truth.model_usage(full, lane=lane, provider=provider or self.m["provider_name"],
                                   model=model or self.m["model_id"], logged=False)
        if self.profile.model_usage:
            self.m["model_usage"].append({
                "cost": dict(cost) if cost is not None else None, "lane": lane,
                "model": model or self.m["model_id"],
                "provider": provider or self.m["provider_name"], "usage": full})

    def model_completed(self, *, usage: Mapping[str, Any], content: str | None,
                        tool_calls: Sequence[Mapping[str, Any]], finish_reason: str | None,
                        cost: Mapping[str, Any] | None = None, provider: str | None = None,
                        model: str | None = None) -> None:
        """Record the reply in the conversation and emit ``model.completed``."""
        full = {**zero_usage(), **usage}
        self.record_usage(full, cost=cost, provider=provider, model=model)
        calls = [self.tool_call_dict(c) for c in tool_calls]
        self.m["messages"].append(self.message("assistant", content, calls))
        if not calls and content is not None:
            self.m["final_summary"] = content
        self.emit("model.completed", {
            "content": bounded_text(content or "", 2000), "finish_reason": finish_reason,
            "step": self.m["step"], "tool_calls": [c["name"] for c in calls],
            "usage": usage_out(full)}, truth=lambda _ln: self.truth.mark_logged())

    @staticmethod
    def tool_call_dict(call: Mapping[str, Any]) -> dict[str, Any]:
        """A stored ToolCall (arguments keep their insertion order for previews)."""
        return {"arguments": call["arguments"], "name": call["name"],
                "provider_metadata": dict(call.get("provider_metadata") or {}),
                "tool_call_id": call["tool_call_id"]}

    # ----------------------------------------------------------------- repeat guard (§10.1)
    def repeat_guard(self, call: Mapping[str, Any]) -> bool:
        """Update fingerprint/count; return True when the call trips the guard (count ≥ 3)."""
        fp = action_fingerprint(call["name"], call["arguments"])
        if fp == self.m["last_action_fingerprint"]:
            self.m["repeat_count"] += 1
        else:
            self.m["last_action_fingerprint"] = fp
            self.m["repeat_count"] = 1
        return self.m["repeat_count"] >= 3

    # ----------------------------------------------------------------- approvals (§6.6)
    def approval_request(self, *, action_id: str, effect: str, reason: str, preview: str,
                         tool_call: Mapping | None, command: Mapping | None,
                         request_id: str | None, policy_reason: str) -> dict[str, Any]:
        """Build an ApprovalRequest."""
        req: dict[str, Any] = {
            "action_id": action_id, "command": dict(command) if command else None,
            "effect": effect, "preview": bounded_text(preview, 16000), "reason": reason,
            "request_id": request_id or self.ids.hex32(), "run_id": self.m["run_id"],
            "tool_call": self.tool_call_dict(tool_call) if tool_call else None,
        }
        if self.profile.policy_reason:
            req["policy_reason"] = policy_reason
        return req

    def _approval_data(self, req: Mapping[str, Any], *, preview: bool) -> dict[str, Any]:
        data = {"action_id": req["action_id"], "effect": req["effect"], "reason": req["reason"],
                "request_id": req["request_id"]}
        if self.profile.policy_reason:
            data["policy_reason"] = req["policy_reason"]
        if preview:
            data["preview"] = req["preview"]
        return data

    def approve(self, req: dict[str, Any], decision: str | None, *, wait: float = 0.0,
                decided_at: str | None = None) -> str:
        """Run the approval path; ``decision=None`` means "take the reuse path if granted".

        Returns the effective decision (``allow_once`` for a reuse).
        """
        if decision is None and req["effect"] in self.m["granted_effects"]:
            # approval.reused: no policy call; pending is set directly (null for READ).
            self.m["pending_action"] = None if req["effect"] == "read" else req
            self.emit("approval.reused", self._approval_data(req, preview=False),
                      truth=lambda ln: self.truth.approval_reused(req, ln))
            return "allow_once"
        decision = decision or "allow_once"
        self._open_approval(req)
        self.clock.advance(wait)
        if decided_at is not None:
            self.clock.set(wall=decided_at)
        self.m["phase"] = "running"
        self.m["approval_history"].append(
            {"decided_at": fmt_ts(self.clock.now()), "decision": decision, "request": req})
        if decision == "allow_session" and req["effect"] not in self.m["granted_effects"]:
            self.m["granted_effects"].append(req["effect"])
        allowed = decision in ("allow_once", "allow_session")
        if not allowed or req["effect"] == "read":
            self.m["pending_action"] = None
        if self.profile.pause_on_approval:
            self.resume_clock()
            self.save_manifest()
        data = self._approval_data(req, preview=False)
        data["decision"] = decision
        self.emit("approval.resolved", data,
                  truth=lambda ln: self.truth.approval_closed(id(req), "resolved", decision, ln))
        return decision

    def pending_action_wait(self, req: dict[str, Any]) -> None:
        """Open an approval prompt and stop there (a process killed while waiting)."""
        self._open_approval(req)

    def _open_approval(self, req: dict[str, Any]) -> None:
        """§6.6: set pending_action and waiting_approval, pause the clock (current profile),
        save, then emit ``approval.requested`` (a cut point while waiting)."""
        self.m["pending_action"] = req
        self.m["phase"] = "waiting_approval"
        self.clock.tick()
        if self.profile.pause_on_approval:
            self.pause_clock()
        self.save_manifest()
        # the truth's occurrence is this request object (ids may repeat)
        self.emit("approval.requested", self._approval_data(req, preview=True),
                  truth=lambda ln: self.truth.approval_opened(id(req), req, ln))
        self.hook("waiting_approval", self.seq - 1, "approval.requested")

    # ----------------------------------------------------------------- tools
    def observation(self, call: Mapping[str, Any], ok: bool, content: str,
                    error: str | None) -> dict[str, Any]:
        """Append a ToolObservation to the conversation."""
        obs = {"content": content, "error": None if ok else (error or "failed"),
               "name": call["name"], "ok": ok, "tool_call_id": call["tool_call_id"]}
        self.m["messages"].append(obs)
        return obs

    def tool_requested(self, call: Mapping[str, Any], effect: str) -> None:
        """Emit ``tool.requested`` (arguments replaced by a stub when too large, §4.4)."""
        args = call["arguments"]
        enc = json.dumps(args, sort_keys=True, ensure_ascii=False)
        limit = min(int(self.request.get("limits", {}).get("max_tool_output_bytes", 200000)),
                    20000)
        if len(enc.encode()) > limit:
            args = {"omitted": True, "sha256": hashlib.sha256(enc.encode()).hexdigest(),
                    "utf8_bytes": len(enc.encode())}
        # the truth's occurrence is this call object (ids may repeat)
        self.emit("tool.requested", {"arguments": args, "effect": effect, "name": call["name"],
                                     "tool_call_id": call["tool_call_id"]},
                  truth=lambda ln: self.truth.call_requested(id(call), call, effect, ln))

    def tool_started(self, call: Mapping[str, Any], effect: str) -> None:
        """Emit ``tool.started``; ``pending_action`` is cleared only once it is durable."""
        self.emit("tool.started", {"effect": effect, "name": call["name"],
                                   "tool_call_id": call["tool_call_id"]},
                  truth=lambda ln: self.truth.call_started(id(call), ln))
        self.m["pending_action"] = None

    def tool_completed(self, call: Mapping[str, Any], *, ok: bool, content: str,
                       error: str | None, executed: bool = True,
                       verification: Mapping[str, Any] | None = None) -> None:
        """Append the observation and emit ``tool.completed`` (no preview when not executed)."""
        obs = self.observation(call, ok, content, error)
        data: dict[str, Any] = {"error": obs["error"], "name": call["name"], "ok": ok,
                                "tool_call_id": call["tool_call_id"]}
        if executed:
            data["preview"] = bounded_text(content, 2000)
        if verification is not None:
            data["verification"] = {**verification,
                                    "output": bounded_text(verification["output"], 2000)}
        self.emit("tool.completed", data, truth=lambda ln: self.truth.call_completed(
            id(call), call, ln, ok=ok, executed=executed, error=obs["error"]))

    # ----------------------------------------------------------------- verification
    def verification_started(self, check: Mapping[str, Any]) -> None:
        """Emit ``verification.started``; clears a pending final-verification action."""
        self.emit("verification.started", {"argv": list(check["argv"]), "name": check["name"]})
        self.m["pending_action"] = None

    def verification_completed(self, outcome: Mapping[str, Any], *, denied: bool = False) -> None:
        """Emit ``verification.completed`` (``argv`` only in the current profile)."""
        data: dict[str, Any] = {"duration_seconds": outcome["duration_seconds"],
                                "exit_code": outcome["exit_code"], "name": outcome["name"],
                                "ok": outcome["ok"]}
        if self.profile.verification_argv:
            data["argv"] = list(outcome["argv"])
        if denied:
            data["error"] = "approval denied"
        self.emit("verification.completed", data)

    def write_test_log(self, outcomes: Iterable[Mapping[str, Any]]) -> None:
        """``test.log``: one ``$ argv`` / ``exit=… duration=…s`` / output block per check."""
        blocks = []
        for o in outcomes:
            blocks.append(f"$ {' '.join(o['argv'])}\nexit={o['exit_code']} "
                          f"duration={o['duration_seconds']:.3f}s\n{o['output']}")
        with open(self.path("test.log"), "w", encoding="utf-8", newline="") as fh:
            fh.write("\n".join(blocks))
        self._test_log_written = True

    # ----------------------------------------------------------------- finish (§3.3 step 5)
    def finish(self, *, status: str, terminal_reason: str, changed_files: Sequence[str],
               patch: str = "", error: str | None = None, cost: Mapping | None = None,
               summary: str | None = None) -> None:
        """``completion.finish``: patch, test.log, terminal checkpoint, ``run.*``, result.json."""
        with open(self.path("changes.patch"), "w", encoding="utf-8", newline="") as fh:
            fh.write(patch)
        if not os.path.exists(self.path("test.log")):
            open(self.path("test.log"), "w").close()
        if summary is not None:
            self.m["final_summary"] = summary
        self.checkpoint(status, {"terminal_reason": terminal_reason})
        self.emit(f"run.{status}", {"changed_files": list(changed_files),
                                    "terminal_reason": terminal_reason})
        self.clock.tick()
        self.write_json("result.json", self.result_doc(status, terminal_reason, changed_files,
                                                        error, cost))

    def result_doc(self, status: str, terminal_reason: str, changed_files: Sequence[str],
                   error: str | None, cost: Mapping | None) -> dict[str, Any]:
        """``RunResult`` with computed fields and re-rooted artifact paths."""
        base = f"{self.artifact_root.rstrip('/')}/{self._artifact_rel()}"
        artifacts = {"checkpoint": f"{base}/checkpoint.json", "events": f"{base}/events.jsonl",
                     "patch": f"{base}/changes.patch", "request": f"{base}/request.json",
                     "result": f"{base}/result.json", "test_log": f"{base}/test.log"}
        doc: dict[str, Any] = {
            "artifacts": artifacts, "changed_files": list(changed_files),
            "run_id": self.m["run_id"], "status": status, "summary": self.m["final_summary"],
            "task_id": self.m["task_id"], "terminal_reason": terminal_reason,
            "usage": usage_out(self.m["usage"]), "verification": self.m["verification"],
        }
        if self.profile.model_usage:
            doc["model_usage"] = [{**r, "cost": cost_out(r["cost"]), "usage": usage_out(r["usage"])}
                                  for r in self.m["model_usage"]]
            pairs = {(r["provider"], r["model"]) for r in self.m["model_usage"]}
            doc["cost"] = cost_out(cost) if (cost is not None and len(pairs) == 1) else None
        if self.profile.result_error_key or error is not None:
            doc["error"] = error if status == "failed" else None
        return doc

    def _artifact_rel(self) -> str:
        # Relative to the (fake) run root: "<id>" or "<parent>/subagents/<id>".
        return self.artifact_rel or os.path.basename(os.path.normpath(self.run_dir))

    # ----------------------------------------------------------------- resume / continue (§8.1, §11.6)
    @classmethod
    def reopen(cls, run_dir: str | os.PathLike[str], **kwargs: Any) -> RunWriter:
        """Open an existing run directory for resume or continuation (reads its files)."""
        w = cls(run_dir, **kwargs)
        with open(w.path("session.json"), encoding="utf-8") as fh:
            w.m = json.load(fh)
        with open(w.path("request.json"), encoding="utf-8") as fh:
            w.request = json.load(fh)
        lines = 0
        if os.path.exists(w.path("events.jsonl")):
            with open(w.path("events.jsonl"), "rb") as fh:
                lines = sum(1 for ln in fh if ln.strip())
        w._events_written = lines
        w._actual_last = lines - 1
        return w

    def _claim(self, token: str | None) -> None:
        token = token or self.ids.hex32()
        self.process_token = self.ids.hex32()
        self.acquire_lock(token)
        self.clock.tick()
        now = fmt_ts(self.clock.now())
        self.m["active_writer_token"] = token
        self.m["writer_claimed_at"] = now
        self.save_manifest(force=True)

    def resume(self, *, writer_token: str | None = None) -> None:
        """``AgentRunner.resume``: claim, resync, restore, charge downtime, ``session.resumed``."""
        self._claim(writer_token)
        if self.m["last_event_sequence"] == self._actual_last + 1:
            self.m["last_event_sequence"] = self._actual_last
            self.save_manifest()
        self.seq = self.m["last_event_sequence"] + 1
        self.m["repeat_count"] = 0
        self.made_changes = True
        self.turn_start_step = 0
        # Whole downtime is charged when the previous process died with the clock running.
        if self.m.get("active_started_at") is not None:
            down = (self.clock.now() - parse_ts(self.m["active_started_at"])).total_seconds()
            self.m["active_wall_time_seconds"] += down
        self.resume_clock()
        self.m["phase"] = "running"
        self.save_manifest()
        self.emit("session.resumed", {"base_sha": self.m["base_sha"], "model": self.m["model_id"],
                                      "provider": self.m["provider_name"],
                                      "resumed_step": self.m["step"]})
        self._abandon_pending()

    def _abandon_pending(self) -> None:
        req = self.m.get("pending_action")
        if not req:
            return
        if req.get("tool_call"):
            call = req["tool_call"]
            self.m["messages"].append({
                "content": "", "error": "approval was interrupted before execution; the action "
                "was not performed", "name": call["name"], "ok": False,
                "tool_call_id": call["tool_call_id"]})
        else:
            self.m["messages"].append(self.message(
                "user", "Final verification approval was interrupted before execution; "
                "the check was not run."))
        self.m["pending_action"] = None
        self.emit("approval.abandoned", {"action_id": req["action_id"], "effect": req["effect"],
                                         "reason": "process_interrupted_before_decision",
                                         "request_id": req["request_id"]},
                  truth=lambda ln: self.truth.approval_abandoned(req, ln))

    def continue_turn(self, instruction: str, *, writer_token: str | None = None) -> None:
        """Conversation continuation: reopen a terminal session for a new user turn."""
        self._claim(writer_token)
        self.seq = self.m["last_event_sequence"] + 1
        self.m["phase"] = "running"
        self.m["terminal"] = False
        self.turn_start_step = self.m["step"]
        self.m["last_action_fingerprint"] = None
        self.m["repeat_count"] = 0
        self.m["active_wall_time_seconds"] = 0.0
        self.resume_clock()
        self.m["messages"].append(self.message("user", instruction))
        self.emit("session.continued", {"base_sha": self.m["base_sha"],
                                        "model": self.m["model_id"],
                                        "provider": self.m["provider_name"],
                                        "resumed_step": self.m["step"]})


# --------------------------------------------------------------------------- fork runs (§9.5)

_MANIFEST_ORDER = (
    "schema_version", "run_id", "task_id", "provider_name", "model_id", "protocol",
    "prompt_version", "base_sha", "phase", "step", "messages", "usage", "model_usage",
    "final_summary", "last_action_fingerprint", "repeat_count", "last_event_sequence",
    "verification", "verified_workspace_fingerprint", "pending_action", "approval_history",
    "granted_effects", "active_wall_time_seconds", "active_started_at", "terminal",
    "active_writer_token", "writer_claimed_at", "writer_heartbeat_at", "updated_at",
)


def _request_declared(req: Mapping[str, Any]) -> dict[str, Any]:
    """A TaskContract in declaration order (``model_dump_json``), with current defaults."""
    lim = req.get("limits", {})
    limits = {"max_steps": lim.get("max_steps", 12),
              "wall_time_seconds": float(lim.get("wall_time_seconds", 900.0)),
              "max_tool_output_bytes": lim.get("max_tool_output_bytes", 200000),
              "max_patch_bytes": lim.get("max_patch_bytes", 100000),
              "max_total_tokens": lim.get("max_total_tokens")}
    return {
        "repository": req["repository"], "instruction": req["instruction"],
        "allowed_paths": list(req["allowed_paths"]),
        "verification": [{"name": v["name"], "argv": list(v["argv"]),
                          "timeout_seconds": float(v.get("timeout_seconds", 300.0))}
                         for v in req["verification"]],
        "limits": limits, "enabled_skills": list(req.get("enabled_skills", [])),
        "task_id": req["task_id"], "base_sha": req.get("base_sha"),
        "attachments": list(req.get("attachments", [])),
    }


def write_fork_run(source_dir: str | os.PathLike[str], run_root: str | os.PathLike[str], *,
                   sequence: int, clock: VirtualClock, ids: Ids,
                   new_run_id: str | None = None) -> str:
    """``create_forked_run_from_event``: a real fork directory with one ``run.forked`` line.

    Returns:
        The fork run directory.
    """
    src = os.fspath(source_dir)
    with open(os.path.join(src, "request.json"), encoding="utf-8") as fh:
        req = json.load(fh)
    with open(os.path.join(src, "events.jsonl"), "rb") as fh:
        events = [json.loads(ln) for ln in fh if ln.strip()]
    point = next(e for e in events if e["sequence"] == sequence)
    run_id = new_run_id or f"fork-{ids.hex32()}"
    task_id = f"{req['task_id']}-fork-{ids.hex32()[:8]}"
    run_dir = os.path.join(os.fspath(run_root), run_id)
    os.makedirs(run_dir, exist_ok=False)
    new_req = _request_declared({**req, "task_id": task_id})
    _plain_write(os.path.join(run_dir, "request.json"), dumps_declared(new_req) + "\n")
    now = fmt_ts(clock.now())
    usage = {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0,
             "reasoning_tokens": 0, "provider_total_tokens": None, "total_tokens": 0}
    values: dict[str, Any] = {
        "schema_version": 1, "run_id": run_id, "task_id": task_id, "provider_name": "fork",
        "model_id": "side-effect-free", "protocol": "replay-fork",
        "prompt_version": "m2-unversioned-patch", "base_sha": req["base_sha"],
        "phase": "created", "step": 0, "messages": [], "usage": usage, "model_usage": [],
        "final_summary": "", "last_action_fingerprint": None, "repeat_count": 0,
        "last_event_sequence": 0, "verification": [], "verified_workspace_fingerprint": None,
        "pending_action": None, "approval_history": [], "granted_effects": [],
        "active_wall_time_seconds": 0.0, "active_started_at": None, "terminal": False,
        "active_writer_token": None, "writer_claimed_at": None, "writer_heartbeat_at": None,
        "updated_at": now,
    }
    manifest = {k: values[k] for k in _MANIFEST_ORDER}
    _plain_write(os.path.join(run_dir, "session.json"), dumps_declared(manifest) + "\n")
    clock.tick()
    event = {
        "event_type": "run.forked", "run_id": run_id, "task_id": task_id, "sequence": 0,
        "data": {"source_run_id": os.path.basename(os.path.normpath(src)),
                 "fork_point_sequence": sequence,
                 "fork_point_event_type": point["event_type"],
                 "events_included": sum(1 for e in events if e["sequence"] <= sequence),
                 "side_effects_replayed": False, "workspace": "workspace",
                 "base_sha": req["base_sha"]},
        "event_id": ids.hex32(), "created_at": fmt_ts(clock.now()),
    }
    _plain_write(os.path.join(run_dir, "events.jsonl"), dumps_declared(event) + "\n")
    return run_dir


def _plain_write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


# --------------------------------------------------------------------------- external runs (§11.8)

def write_external_run(run_dir: str | os.PathLike[str], *, request: Mapping[str, Any],
                       backend: str, events: Sequence[Mapping[str, Any]], status: str,
                       backend_status: str, terminal_reason: str, summary: str,
                       changed_files: Sequence[str], patch: str, exit_code: int | None,
                       verification: Sequence[Mapping[str, Any]] = (),
                       artifact_root: str = "/home/dev/.local/state/looplane/runs") -> str:
    """An ``ExternalCodingRunner`` run: no session.json, default-separator events.

    Args:
        events: ``ExternalAgentEvent`` dicts with ``event_type``, ``text``, ``data`` (the
            sequence is assigned here).

    Returns:
        The run directory.
    """
    rd = os.fspath(run_dir)
    os.makedirs(rd, exist_ok=False)
    run_id = os.path.basename(os.path.normpath(rd))
    task_id = request["task_id"]

    def aw(name: str, obj: Any) -> None:
        _plain_write(os.path.join(rd, name), dumps_compact(obj))

    aw("request.json", request)
    aw("checkpoint.json", {"backend_name": backend, "resumable": False, "run_id": run_id,
                           "status": "preparing", "task_id": task_id})
    aw("instruction-resolution.json", {"documents": [], "sources": []})
    aw("external-instruction-policy.json", {"backend_name": backend, "mode": "inline"})
    aw("skill-resolution.json", {"enabled_skills": [], "resolved": []})
    lines = []
    for i, ev in enumerate(events):
        rec = {"data": {**ev.get("data", {}), "source": backend}, "event_type": ev["event_type"],
               "sequence": i, "text": ev.get("text")}
        lines.append(json.dumps(rec, sort_keys=True, ensure_ascii=False) + "\n")
    # Written in one go after the backend finishes (§11.8).
    _plain_write(os.path.join(rd, "events.jsonl"), "".join(lines))
    aw("backend-result.json", {"backend_name": backend, "events": len(lines),
                               "exit_code": exit_code, "status": backend_status,
                               "summary": summary, "task_id": task_id,
                               "terminal_reason": terminal_reason})
    _plain_write(os.path.join(rd, "changes.patch"), patch)
    _plain_write(os.path.join(rd, "test.log"), "".join(
        f"$ {' '.join(v['argv'])}\nexit={v['exit_code']} duration={v['duration_seconds']:.3f}s\n"
        f"{v['output']}" for v in verification))
    aw("checkpoint.json", {"backend_name": backend, "resumable": False, "run_id": run_id,
                           "status": status, "task_id": task_id,
                           "terminal_reason": terminal_reason})
    base = f"{artifact_root.rstrip('/')}/{run_id}"
    aw("result.json", {
        "artifacts": {"checkpoint": f"{base}/checkpoint.json", "events": f"{base}/events.jsonl",
                      "patch": f"{base}/changes.patch", "request": f"{base}/request.json",
                      "result": f"{base}/result.json", "test_log": f"{base}/test.log"},
        "changed_files": list(changed_files), "cost": None,
        "error": summary if status == "failed" else None, "model_usage": [],
        "run_id": run_id, "status": status, "summary": summary, "task_id": task_id,
        "terminal_reason": terminal_reason,
        "usage": {"cached_input_tokens": 0, "input_tokens": 0, "output_tokens": 0,
                  "provider_total_tokens": None, "reasoning_tokens": 0, "total_tokens": 0},
        "verification": [dict(v) for v in verification],
    })
    return rd

