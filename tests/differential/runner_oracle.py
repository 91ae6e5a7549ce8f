"""An independent oracle of the runner's resume, replay and fork-seed code (§8.1, §9, §8.2).

Written for the differential tests from the spec alone: it imports nothing from
``rivumi_analysis``. The models are pydantic models kept as close to the runner's as the spec
allows (``extra="forbid"``, frozen, lax types, the runner's defaults, lengths, NUL validators
and stripping, §6, §7, §8.4). Resume's reading of ``events.jsonl`` is done literally
(``read_text`` with universal newlines, ``str.splitlines()``, ``piece.strip()`` for blank
pieces, ``RunEvent.model_validate_json(piece)`` unstripped, §8.2); replay's reading is done
literally too (bytes split after ``\\n``, ``bytes.strip()``, ``json.loads``, the checks and
messages of §9.6).

Where the runner itself crashes (a traceback instead of a verdict or a refusal) the oracle
returns the toolkit's documented decision instead (README "Documented decisions"):

* a ``session.json``/``request.json`` nested deeper than Python's JSON parser can go:
  ``corrupt`` (``manifest_invalid_json`` / ``request_invalid``);
* replay: invalid UTF-8 in a line -> ``event JSONL line N is not valid UTF-8``; a line nested
  past :data:`PY_JSON_MAX_DEPTH` -> ``event JSONL line N is not valid JSON``; an integer
  literal of more than 4300 digits -> ``event JSONL line N has an integer of more than 4300
  digits``; a lone surrogate that would reach the output -> :data:`SURROGATE_OUTPUT_MESSAGE`.

The depth at which Python's JSON parser overflows depends on the caller's stack, so the oracle
makes it one named constant (the toolkit's documented limit), and parses with a raised
recursion limit below it, so its answers never depend on where it is called from.
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# --------------------------------------------------------------------------------------------
# Documented decisions (shared vocabulary with the toolkit's README; values, not code)
# --------------------------------------------------------------------------------------------
PY_JSON_MAX_DEPTH = 960
"""Containers nested deeper than this are where Python's ``json`` overflows in the runner.
Its real limit is the recursion limit (1000) minus the caller's stack: measured on CPython
3.11, 996 levels from an empty stack, 975 with 20 frames; the runner's CLI and resume call it
from 10-40 frames deep. The toolkit documents 960 as its explicit limit (inside that band;
1000+ is refused by both)."""
INT_MAX_DIGITS = 4300
"""Python's default integer-string conversion limit (``sys.get_int_max_str_digits()``)."""
SURROGATE_OUTPUT_MESSAGE = (
    "replay output would contain a lone surrogate, which is not valid UTF-8")
REPLAY_LINE_LIMIT = 131_072
REPLAY_MAX_EVENTS = 10_000
RUNNER_FILE_LIMIT = 16 * 1024 * 1024


def _now() -> datetime:
    return datetime.now(UTC)


def _uuid_hex() -> str:
    return uuid.uuid4().hex


# --------------------------------------------------------------------------------------------
# Models (§4, §6, §7, §8.3, §8.4)
# --------------------------------------------------------------------------------------------
class ContractModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunEvent(ContractModel):
    event_type: Annotated[str, Field(min_length=1)]
    run_id: Annotated[str, Field(min_length=1)]
    task_id: str | None = None
    sequence: Annotated[int, Field(ge=0)]
    data: dict[str, Any] = Field(default_factory=dict)
    event_id: str = Field(default_factory=_uuid_hex)
    created_at: datetime = Field(default_factory=_now)


class SessionPhase(StrEnum):
    created = "created"
    preparing = "preparing"
    running = "running"
    waiting_approval = "waiting_approval"
    verifying = "verifying"
    paused = "paused"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"


TERMINAL_PHASES = {SessionPhase.completed, SessionPhase.failed, SessionPhase.cancelled}


class ToolEffect(StrEnum):
    read = "read"
    modify = "modify"
    modify_execute = "modify_execute"
    execute = "execute"


class ApprovalReason(StrEnum):
    model_tool = "model_tool"
    final_verification = "final_verification"


class ApprovalDecision(StrEnum):
    allow_once = "allow_once"
    allow_session = "allow_session"
    deny = "deny"
    cancel = "cancel"


NonNegInt = Annotated[int, Field(ge=0)]
NonEmptyStr = Annotated[str, Field(min_length=1)]
NonNegFloat = Annotated[float, Field(ge=0)]


class Usage(ContractModel):
    input_tokens: NonNegInt = 0
    output_tokens: NonNegInt = 0
    cached_input_tokens: NonNegInt = 0
    reasoning_tokens: NonNegInt = 0
    provider_total_tokens: NonNegInt | None = None


class CostBreakdown(ContractModel):
    currency: Literal["USD"] = "USD"
    source: Literal["estimated", "authoritative"] = "estimated"
    provider: NonEmptyStr  # §8.4
    model: str
    input_cost: NonNegFloat = 0.0
    cached_input_cost: NonNegFloat = 0.0
    output_cost: NonNegFloat = 0.0


class ModelUsageRecord(ContractModel):
    lane: NonEmptyStr  # §8.4
    provider: str
    model: str
    usage: Usage = Field(default_factory=Usage)
    cost: CostBreakdown | None = None


class ToolCall(ContractModel):
    tool_call_id: NonEmptyStr = Field(default_factory=_uuid_hex)  # §8.4 default
    name: NonEmptyStr
    arguments: dict[str, Any] = Field(default_factory=dict)
    provider_metadata: dict[str, Any] = Field(default_factory=dict)


class Message(ContractModel):
    role: Literal["system", "user", "assistant"]
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    provider_metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _roles(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages may carry tool_calls")
        if self.role in ("system", "user") and self.content is None:
            raise ValueError("system and user messages need content")
        if self.role == "assistant" and self.content is None and not self.tool_calls:
            raise ValueError("an assistant message needs content or tool_calls")
        return self


class ToolObservation(ContractModel):
    tool_call_id: NonEmptyStr
    name: NonEmptyStr
    ok: bool
    content: str = ""
    error: str | None = None

    @model_validator(mode="after")
    def _ok(self) -> ToolObservation:
        if self.ok and self.error is not None:
            raise ValueError("ok observation with an error")
        if not self.ok and not self.error:
            raise ValueError("failed observation without an error")
        return self


class InjectedContext(ContractModel):
    item_type: Literal["injected_context"] = "injected_context"  # §8.4 default
    source: Annotated[str, Field(min_length=1, max_length=128)]
    content: Annotated[str, Field(min_length=1, max_length=16_000)]

    @field_validator("content")
    @classmethod
    def _no_nul(cls, v: str) -> str:
        if "\x00" in v:
            raise ValueError("content cannot contain NUL")
        return v


ConversationItem = Message | ToolObservation | InjectedContext


class VerificationCommand(ContractModel):
    name: str
    argv: Annotated[list[str], Field(min_length=1)]
    timeout_seconds: Annotated[float, Field(gt=0)] = 300.0

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("name must not be blank")
        return v

    @field_validator("argv")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        for arg in v:
            if not arg:
                raise ValueError("argv entries must be non-empty")
            if "\x00" in arg:
                raise ValueError("argv entries cannot contain NUL")
        return v


class VerificationOutcome(ContractModel):
    name: str
    argv: list[str]  # §8.4: required
    ok: bool
    exit_code: int | None = None
    duration_seconds: NonNegFloat = 0.0
    output: str = ""


class ApprovalRequest(ContractModel):
    request_id: NonEmptyStr = Field(default_factory=_uuid_hex)  # §8.4
    run_id: NonEmptyStr
    action_id: NonEmptyStr
    effect: ToolEffect
    reason: ApprovalReason
    policy_reason: Annotated[str, Field(max_length=2000)] = ""
    preview: Annotated[str, Field(max_length=16_000)] = ""
    tool_call: ToolCall | None = None
    command: VerificationCommand | None = None

    @model_validator(mode="after")
    def _one(self) -> ApprovalRequest:
        if (self.tool_call is None) == (self.command is None):
            raise ValueError("exactly one of tool_call and command")
        if self.reason == ApprovalReason.final_verification and self.command is None:
            raise ValueError("final_verification needs a command")
        return self


class ApprovalAuditRecord(ContractModel):
    request: ApprovalRequest
    decision: ApprovalDecision
    decided_at: datetime = Field(default_factory=_now)  # §8.4


def _stripped_nonblank(v: str) -> str:
    v = v.strip()
    if not v:
        raise ValueError("must not be blank")
    return v


class SessionManifest(ContractModel):
    schema_version: Literal[1] = 1
    run_id: str
    task_id: str
    provider_name: str
    model_id: str
    protocol: str
    prompt_version: NonEmptyStr = "m2-unversioned-patch"
    base_sha: Annotated[str, Field(pattern=r"^[0-9a-fA-F]{40}$")]
    phase: SessionPhase = SessionPhase.created
    step: NonNegInt = 0
    messages: list[ConversationItem] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    model_usage: list[ModelUsageRecord] = Field(default_factory=list)
    final_summary: str = ""
    last_action_fingerprint: str | None = None
    repeat_count: NonNegInt = 0
    last_event_sequence: Annotated[int, Field(ge=-1)] = -1
    verification: list[VerificationOutcome] = Field(default_factory=list)
    verified_workspace_fingerprint: str | None = None
    pending_action: ApprovalRequest | None = None
    approval_history: list[ApprovalAuditRecord] = Field(default_factory=list)
    granted_effects: frozenset[ToolEffect] = frozenset()
    active_wall_time_seconds: NonNegFloat = 0.0
    active_started_at: datetime | None = None
    terminal: bool = False
    active_writer_token: str | None = None
    writer_claimed_at: datetime | None = None
    writer_heartbeat_at: datetime | None = None
    updated_at: datetime = Field(default_factory=_now)  # §8.4: null is invalid

    @field_validator("run_id", "task_id", "provider_name", "model_id", "protocol")
    @classmethod
    def _ids(cls, v: str) -> str:
        return _stripped_nonblank(v)

    @model_validator(mode="after")
    def _rules(self) -> SessionManifest:
        if self.terminal != (self.phase in TERMINAL_PHASES):
            raise ValueError("terminal must match phase")
        if self.phase == SessionPhase.waiting_approval and self.pending_action is None:
            raise ValueError("waiting_approval requires pending_action")
        if self.pending_action is not None and self.pending_action.run_id != self.run_id:
            raise ValueError("pending_action.run_id must equal run_id")
        return self


class Limits(ContractModel):
    max_steps: Annotated[int, Field(ge=1)] = 12
    wall_time_seconds: Annotated[float, Field(gt=0)] = 900.0
    max_tool_output_bytes: Annotated[int, Field(ge=1)] = 200_000
    max_patch_bytes: Annotated[int, Field(ge=1)] = 100_000
    max_total_tokens: Annotated[int, Field(ge=1)] | None = None


_SKILL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class TaskContract(ContractModel):
    repository: str
    instruction: str
    allowed_paths: Annotated[list[str], Field(min_length=1)]
    verification: Annotated[list[VerificationCommand], Field(min_length=1)]
    limits: Limits = Field(default_factory=Limits)
    enabled_skills: list[str] = Field(default_factory=list)
    task_id: str = Field(default_factory=_uuid_hex)
    base_sha: str | None = None
    attachments: list[dict[str, str]] = Field(default_factory=list)

    @field_validator("instruction", "task_id")
    @classmethod
    def _nonblank(cls, v: str) -> str:
        return _stripped_nonblank(v)

    @field_validator("base_sha")
    @classmethod
    def _base(cls, v: str | None) -> str | None:
        return None if v is None else _stripped_nonblank(v)

    @field_validator("allowed_paths")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        out: list[str] = []
        for raw in v:
            p = raw.strip().replace("\\", "/")
            if not p or "\x00" in p or p.startswith("/") or ".." in p.split("/"):
                raise ValueError(f"bad allowed path {raw!r}")
            out.append(p)
        if len(set(out)) != len(out):
            raise ValueError("allowed_paths must be unique")
        return out

    @field_validator("enabled_skills")
    @classmethod
    def _skills(cls, v: list[str]) -> list[str]:
        out = [s.strip() for s in v]  # §8.4: stripped before the checks
        for s in out:
            if not _SKILL.match(s):
                raise ValueError(f"bad skill {s!r}")
        if len(set(out)) != len(out):
            raise ValueError("enabled_skills must be unique")
        return out


# --------------------------------------------------------------------------------------------
# Helpers: explicit JSON depth and the runner's json.loads without stack dependence
# --------------------------------------------------------------------------------------------
def container_depth(text: str | bytes) -> int:
    """Maximum nesting of JSON containers (``[``/``{``) outside strings (top level = 1)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogatepass") if _is_utf8ish(text) else text.decode(
            "latin-1")
    depth = best = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


def _is_utf8ish(b: bytes) -> bool:
    try:
        b.decode("utf-8", "surrogatepass")
        return True
    except UnicodeDecodeError:
        return False


class _DeepJSON(Exception):
    """json.loads would overflow Python's recursion limit in the runner (documented limit)."""


def runner_json_loads(doc: str | bytes) -> Any:
    """``json.loads`` as the runner calls it, with the recursion overflow made explicit."""
    if container_depth(doc) > PY_JSON_MAX_DEPTH:
        raise _DeepJSON
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, PY_JSON_MAX_DEPTH + 2000))
    try:
        return json.loads(doc)
    finally:
        sys.setrecursionlimit(old)


# --------------------------------------------------------------------------------------------
# Resume (§8.1 steps 3-7 and 9; §8.2–§8.4)
# --------------------------------------------------------------------------------------------
@dataclass
class ResumeOutcome:
    verdict: str
    reason: str
    manifest_valid: bool = False
    log_accepts: bool | None = None  # resume's reading of events.jsonl (None: not evaluated)
    log_error: str | None = None
    events: list[RunEvent] = field(default_factory=list)


def _read_doc(path: Path) -> tuple[Any, str | None]:
    """``json.loads`` on the UTF-8 text, as the runner reads session.json / request.json."""
    try:
        if path.stat().st_size > RUNNER_FILE_LIMIT:
            return None, "too_large"
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None, "utf8"
    try:
        return runner_json_loads(text), None
    except _DeepJSON:
        return None, "deep"  # runner: RecursionError (crash); toolkit: corrupt (documented)
    except ValueError:
        return None, "json"  # JSONDecodeError, or the int-digit limit


def resume_read_events(path: Path) -> tuple[list[RunEvent], str | None]:
    """Resume's literal reading of events.jsonl: (events, first error) (§8.2)."""
    if path.stat().st_size > RUNNER_FILE_LIMIT:
        return [], "too_large"
    try:
        text = path.read_text(encoding="utf-8")  # universal newlines, strict UTF-8, BOM kept
    except UnicodeDecodeError:
        return [], "utf8"
    events: list[RunEvent] = []
    for piece in text.splitlines():
        if not piece.strip():
            continue
        try:
            events.append(RunEvent.model_validate_json(piece))
        except ValidationError:
            return events, "invalid_line"
    return events, None


def external_or_fork(run_dir: Path, manifest: Any) -> str:
    """The toolkit's run kind where it matters for ``not_resumable`` (README verdict order)."""
    ck = _try_json(run_dir / "checkpoint.json")
    if isinstance(ck, dict) and "backend_name" in ck and ck.get("resumable") is False:
        return "external"
    if os.path.lexists(run_dir / "backend-result.json"):
        return "external"
    if isinstance(manifest, dict) and manifest.get("provider_name") == "fork":
        return "fork"
    try:
        data = (run_dir / "events.jsonl").read_bytes()
    except OSError:
        data = b""
    for raw in data.split(b"\n"):
        if raw.strip():
            try:
                first = json.loads(raw)
            except (ValueError, RecursionError):
                return "native"
            if isinstance(first, dict) and first.get("event_type") == "run.forked":
                return "fork"
            return "native"
    return "native"


def _try_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None


def resume_verdict(run_dir: str | os.PathLike[str]) -> ResumeOutcome:
    """What ``looplane resume`` would decide, in the toolkit's verdict vocabulary."""
    rd = Path(run_dir)
    session = rd / "session.json"
    if not session.exists():
        return ResumeOutcome("not_resumable", "manifest_missing")
    doc, doc_err = _read_doc(session)
    kind = external_or_fork(rd, doc)
    if kind == "external":
        return ResumeOutcome("not_resumable", "external_run")
    manifest: SessionManifest | None = None
    problems: list[str] = []
    if doc_err is not None:
        problems.append(f"manifest_{doc_err}")
    else:
        try:
            manifest = SessionManifest.model_validate(doc)
        except ValidationError:
            if kind == "fork":
                return ResumeOutcome("not_resumable", "fork_manifest_rejected")
            problems.append("manifest_schema")
    request = rd / "request.json"
    if request.exists():  # README: request checked when present
        rdoc, rerr = _read_doc(request)
        if rerr is not None:
            problems.append(f"request_{rerr}")
        else:
            try:
                contract = TaskContract.model_validate(rdoc)
            except ValidationError:
                problems.append("request_schema")
            else:
                if manifest is not None and (
                        contract.task_id != manifest.task_id or contract.base_sha is None
                        or contract.base_sha.lower() != manifest.base_sha.lower()):
                    problems.append("request_mismatch")
    events_path = rd / "events.jsonl"
    events: list[RunEvent] = []
    log_accepts: bool | None = None
    log_error: str | None = None
    if not events_path.exists():
        if manifest is not None and manifest.last_event_sequence != -1:
            problems.append("events_missing")
        actual_last = -1
    else:
        events, log_error = resume_read_events(events_path)
        if log_error is None:
            for i, e in enumerate(events):
                if e.sequence != i:
                    log_error = "not_contiguous"
                    break
        if log_error is None and manifest is not None:
            for e in events:
                if e.run_id != manifest.run_id or (
                        e.task_id is not None and e.task_id != manifest.task_id):
                    log_error = "id_drift"
                    break
        log_accepts = log_error is None
        if log_error is not None:
            problems.append(f"events_{log_error}")
        actual_last = events[-1].sequence if events else -1
    if problems or manifest is None:
        return ResumeOutcome("corrupt", problems[0] if problems else "manifest",
                             manifest is not None, log_accepts, log_error, events)
    lseq = manifest.last_event_sequence
    if lseq not in (actual_last, actual_last + 1):
        return ResumeOutcome("corrupt", "last_event_sequence", True, log_accepts, log_error,
                             events)
    ahead = lseq == actual_last + 1
    if not ahead and events and events[-1].event_type in ("tool.started",
                                                          "verification.started"):
        return ResumeOutcome("side_effect_uncertain", "side_effect_tail", True, log_accepts,
                             log_error, events)
    if manifest.terminal:
        return ResumeOutcome("terminal", "terminal", True, log_accepts, log_error, events)
    return ResumeOutcome("resync" if ahead else "resumable", "ok", True, log_accepts,
                         log_error, events)


# --------------------------------------------------------------------------------------------
# Replay (§9.1–§9.4, §9.6) and fork seeds (§9.5, §9.8)
# --------------------------------------------------------------------------------------------
class ReplayError(Exception):
    """A refusal: ``error: <message>`` on stderr, exit 2 (runner message or documented)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_TOP_STRINGS = ("text", "summary", "terminal_reason", "reason", "error", "tool", "tool_name",
                "name", "model", "runtime", "provider", "base_sha", "model_override")
_DETAIL = ("summary", "terminal_reason", "reason", "error", "tool", "tool_name", "name",
           "model", "runtime", "provider", "base_sha")
_TERMINAL = ("run.completed", "run.failed", "run.cancelled", "turn.completed", "turn.failed",
             "turn.cancelled", "turn.interrupted", "turn_completed")
_TURN_START = ("user.message", "turn_started")
_TURN_END = ("turn.completed", "turn.failed", "turn.cancelled", "turn.interrupted",
             "turn_completed")


def _binary_lines(data: bytes) -> list[bytes]:
    """Iterating a file opened ``rb``: split after each ``\\n`` (the last may lack it)."""
    out = []
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            out.append(data[start:])
            break
        out.append(data[start:end + 1])
        start = end + 1
    return out


def _long_int_digits(raw: bytes) -> bool:
    """Whether ``json.loads`` would hit the int-digit limit (pure integer literal)."""
    for m in re.finditer(rb"-?\d{%d,}" % (INT_MAX_DIGITS + 1), raw):
        end = m.end()
        if end >= len(raw) or raw[end:end + 1] not in (b".", b"e", b"E"):
            return True
    return False


def replay_load(data: bytes) -> list[Any]:
    """§9.6 rules 1-5 (plus the documented decisions): the JSON value of each non-blank line."""
    values = []
    for n, line in enumerate(_binary_lines(data), start=1):
        has_nl = line.endswith(b"\n")
        content = line[:-1] if has_nl else line
        if not content.strip():
            continue
        if not has_nl:
            raise ReplayError("event JSONL has a partial final line")
        if len(content) > REPLAY_LINE_LIMIT:
            raise ReplayError(f"event JSONL line {n} exceeds {REPLAY_LINE_LIMIT} bytes")
        try:
            value = runner_json_loads(content)
        except _DeepJSON:
            raise ReplayError(f"event JSONL line {n} is not valid JSON") from None
        except json.JSONDecodeError:
            raise ReplayError(f"event JSONL line {n} is not valid JSON") from None
        except UnicodeDecodeError:
            raise ReplayError(f"event JSONL line {n} is not valid UTF-8") from None
        except ValueError:
            # the runner crashes (int-string limit); the toolkit's documented refusal
            assert _long_int_digits(content), content[:80]
            raise ReplayError(f"event JSONL line {n} has an integer of more than "
                              f"{INT_MAX_DIGITS} digits") from None
        if not isinstance(value, dict):
            raise ReplayError(f"event JSONL line {n} must contain an object")
        values.append(value)
    return values


def _normalize(i: int, ev: dict[str, Any]) -> dict[str, Any]:
    seq = ev.get("sequence")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ReplayError(f"event {i} requires a non-negative integer sequence")
    et = ev.get("event_type")
    if not isinstance(et, str) or not et.strip():
        raise ReplayError(f"event {i} requires event_type")
    out: dict[str, Any] = {"sequence": seq, "event_type": et.strip()}
    for key in ("run_id", "conversation_id", "turn_id"):
        v = ev.get(key)
        if v is not None and (not isinstance(v, str) or not v.strip()):
            raise ReplayError(f"event {i} has invalid {key}")
        out[key] = v.strip() if isinstance(v, str) else None
    data = ev.get("data")
    if data is not None and not isinstance(data, dict):
        raise ReplayError(f"event {i} data must be an object")
    out["data"] = data or {}
    top = {}
    for key in _TOP_STRINGS:
        v = ev.get(key)
        if v is None:
            continue
        if not isinstance(v, str):
            raise ReplayError(f"event {i} has invalid {key}")
        if "\x00" in v:
            raise ReplayError(f"{key} cannot contain NUL")
        top[key] = v[:16_000]
    out["top"] = top
    return out


def _pick(value: Any, label: str) -> str | None:
    if isinstance(value, str) and value:
        if "\x00" in value:
            raise ReplayError(f"{label} cannot contain NUL")
        return value[:16_000]
    return None


def _reduce(events: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(events, key=lambda e: e["sequence"])
    seen: set[int] = set()
    run_id = conv = active = terminal = None
    completed: list[str] = []
    timeline = []
    for e in ordered:
        if e["sequence"] in seen:
            raise ReplayError(f"duplicate event sequence: {e['sequence']}")
        seen.add(e["sequence"])
        if e["run_id"] is not None:
            if run_id is None:
                run_id = e["run_id"]
            elif run_id != e["run_id"]:
                raise ReplayError("event log contains multiple run_id values")
        if e["conversation_id"] is not None:
            if conv is None:
                conv = e["conversation_id"]
            elif conv != e["conversation_id"]:
                raise ReplayError("event log contains multiple conversation_id values")
        et, turn = e["event_type"], e["turn_id"]
        if turn is not None:
            if et in _TURN_START:
                active = turn
            elif et in _TURN_END:
                if turn not in completed:
                    completed.append(turn)
                if active == turn:
                    active = None
        if et in _TERMINAL:
            terminal = et
        text = _pick(e["top"].get("text"), "text")
        if text is None:
            text = _pick(e["data"].get("text"), "data.text")
        detail = None
        for src in (e["top"], e["data"]):
            for key in _DETAIL:
                detail = _pick(src.get(key), key)
                if detail is not None:
                    break
            if detail is not None:
                break
        item = {"sequence": e["sequence"], "event_type": et, "run_id": e["run_id"],
                "conversation_id": e["conversation_id"], "turn_id": turn, "text": text,
                "detail": detail}
        timeline.append({k: v for k, v in item.items() if v is not None})
    state = {"schema_version": 1,
             "first_sequence": ordered[0]["sequence"] if ordered else None,
             "last_sequence": ordered[-1]["sequence"] if ordered else None,
             "event_count": len(ordered), "run_id": run_id, "conversation_id": conv,
             "active_turn_id": active, "completed_turn_ids": completed,
             "terminal_event_type": terminal, "timeline": timeline}
    return {k: v for k, v in state.items() if v is not None}


def _normalized(data: bytes) -> list[dict[str, Any]]:
    values = replay_load(data)
    events = [_normalize(i, v) for i, v in enumerate(values)]
    if len(events) > REPLAY_MAX_EVENTS:
        raise ReplayError(f"event log exceeds {REPLAY_MAX_EVENTS} events")
    return events


def _printable(obj: dict[str, Any]) -> str:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True) + "\n"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ReplayError(SURROGATE_OUTPUT_MESSAGE) from None
    return text


def replay_json(data: bytes) -> str:
    """stdout of ``sessions --replay-json`` (raises :class:`ReplayError` on a refusal)."""
    return _printable(_reduce(_normalized(data)))


def fork_seed_json(data: bytes, n: int) -> str:
    """stdout of the seed-only fork seed at ``n`` (§9.5, §9.6 rules 16-18, §9.8)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ReplayError("fork sequence must be a non-negative integer")
    events = _normalized(data)
    _reduce(events)  # the whole log first: any error anywhere refuses
    at = [e for e in events if e["sequence"] == n]
    if not at:
        raise ReplayError(f"fork sequence {n} was not found")
    prefix = [e for e in events if e["sequence"] <= n]
    state = _reduce(prefix)
    seed = {"schema_version": 1, "fork_point_sequence": n,
            "fork_point_event_type": at[0]["event_type"],
            "source_run_id": state.get("run_id"),  # §9.8: from the prefix
            "source_conversation_id": state.get("conversation_id"),
            "events_included": len(prefix), "side_effects_replayed": False,
            "run_started": False, "replay_state": state}
    return _printable({k: v for k, v in seed.items() if v is not None})


def replay_outcome(data: bytes) -> tuple[bool, str]:
    """``(accepts, stdout-or-error-message)``."""
    try:
        return True, replay_json(data)
    except ReplayError as exc:
        return False, exc.message


def fork_outcome(data: bytes, n: int) -> tuple[bool, str]:
    try:
        return True, fork_seed_json(data, n)
    except ReplayError as exc:
        return False, exc.message
