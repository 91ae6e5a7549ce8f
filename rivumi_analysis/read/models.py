"""Pydantic v2 models of the runner's own on-disk contracts (§4, §6, §7).

They mirror the runner's models (``extra="forbid"``, default *lax* type mode) so the verdict
says what resume would say. They are the oracle; the decoder has a faster path for the
common case and falls back to these for anything unusual.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)


class _Contract(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _now() -> datetime:
    return datetime.now(UTC)


def _uuid_hex() -> str:
    return uuid.uuid4().hex


class RunEvent(_Contract):
    """One line of a native ``events.jsonl`` (§4)."""

    event_type: Annotated[str, Field(min_length=1)]
    run_id: Annotated[str, Field(min_length=1)]
    task_id: str | None = None
    sequence: Annotated[int, Field(ge=0)]
    data: dict[str, Any] = Field(default_factory=dict)
    event_id: str = Field(default_factory=_uuid_hex)  # absent: generated; null: invalid
    created_at: datetime = Field(default_factory=_now)  # absent: now; null: invalid (§8.3)


SEQUENCE_ADAPTER: TypeAdapter[int] = TypeAdapter(Annotated[int, Field(ge=0)])
EVENT_TYPE_ADAPTER: TypeAdapter[str] = TypeAdapter(Annotated[str, Field(min_length=1)])
DATETIME_ADAPTER: TypeAdapter[datetime] = TypeAdapter(datetime)


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


TERMINAL_PHASES = frozenset({"completed", "failed", "cancelled"})


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


class Usage(_Contract):
    input_tokens: NonNegInt = 0
    output_tokens: NonNegInt = 0
    cached_input_tokens: NonNegInt = 0
    reasoning_tokens: NonNegInt = 0
    provider_total_tokens: NonNegInt | None = None


class CostBreakdown(_Contract):
    currency: Literal["USD"] = "USD"
    source: Literal["estimated", "authoritative"] = "estimated"
    provider: Annotated[str, Field(min_length=1)]  # §8.4
    model: str
    input_cost: Annotated[float, Field(ge=0)] = 0.0
    cached_input_cost: Annotated[float, Field(ge=0)] = 0.0
    output_cost: Annotated[float, Field(ge=0)] = 0.0


class ModelUsageRecord(_Contract):
    lane: Annotated[str, Field(min_length=1)]  # §8.4
    provider: str
    model: str
    usage: Usage = Field(default_factory=Usage)
    cost: CostBreakdown | None = None


class ToolCall(_Contract):
    tool_call_id: Annotated[str, Field(min_length=1)] = Field(default_factory=_uuid_hex)
    name: Annotated[str, Field(min_length=1)]
    arguments: dict[str, Any] = Field(default_factory=dict)
    provider_metadata: dict[str, Any] = Field(default_factory=dict)


class Message(_Contract):
    role: Literal["system", "user", "assistant"]
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    provider_metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _roles(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages may have tool_calls")
        if self.role in ("system", "user") and self.content is None:
            raise ValueError("system and user messages need content")
        if self.role == "assistant" and self.content is None and not self.tool_calls:
            raise ValueError("assistant message needs content or tool_calls")
        return self


class ToolObservation(_Contract):
    tool_call_id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    ok: bool
    content: str = ""
    error: str | None = None

    @model_validator(mode="after")
    def _ok_error(self) -> ToolObservation:
        if self.ok and self.error is not None:
            raise ValueError("ok observation cannot carry an error")
        if not self.ok and not self.error:
            raise ValueError("failed observation needs an error")
        return self


class InjectedContext(_Contract):
    item_type: Literal["injected_context"] = "injected_context"  # §8.4: absent is valid
    source: Annotated[str, Field(min_length=1, max_length=128)]
    content: Annotated[str, Field(min_length=1, max_length=16000)]

    @field_validator("content")
    @classmethod
    def _no_nul(cls, v: str) -> str:
        if "\x00" in v:
            raise ValueError("content cannot contain NUL")
        return v


ConversationItem = Message | ToolObservation | InjectedContext


class VerificationCommand(_Contract):
    name: str
    argv: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
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
        if any("\x00" in arg for arg in v):
            raise ValueError("argv entries cannot contain NUL")
        return v


class VerificationOutcome(_Contract):
    name: str
    argv: list[str]  # required (§8.4)
    ok: bool
    exit_code: int | None = None
    duration_seconds: Annotated[float, Field(ge=0)] = 0.0
    output: str = ""


class ApprovalRequest(_Contract):
    request_id: Annotated[str, Field(min_length=1)] = Field(default_factory=_uuid_hex)
    run_id: Annotated[str, Field(min_length=1)]
    action_id: Annotated[str, Field(min_length=1)]
    effect: ToolEffect
    reason: ApprovalReason
    policy_reason: Annotated[str, Field(max_length=2000)] = ""
    preview: Annotated[str, Field(max_length=16000)] = ""
    tool_call: ToolCall | None = None
    command: VerificationCommand | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ApprovalRequest:
        if (self.tool_call is None) == (self.command is None):
            raise ValueError("exactly one of tool_call/command must be set")
        if self.reason == ApprovalReason.final_verification and self.command is None:
            raise ValueError("final_verification requires command")
        return self


class ApprovalAuditRecord(_Contract):
    request: ApprovalRequest
    decision: ApprovalDecision
    decided_at: datetime = Field(default_factory=_now)  # §8.4: absent is valid


def _blank_check(v: str) -> str:
    if not v.strip():
        raise ValueError("must not be blank")
    return v.strip()


_SHA40 = re.compile(r"^[0-9a-fA-F]{40}$")


class SessionManifest(_Contract):
    """``session.json`` as the newest runner validates it (§6.1)."""

    schema_version: Literal[1] = 1
    run_id: str
    task_id: str
    provider_name: str
    model_id: str
    protocol: str
    prompt_version: Annotated[str, Field(min_length=1)] = "m2-unversioned-patch"
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
    active_wall_time_seconds: Annotated[float, Field(ge=0)] = 0.0
    active_started_at: datetime | None = None
    terminal: bool = False
    active_writer_token: str | None = None
    writer_claimed_at: datetime | None = None
    writer_heartbeat_at: datetime | None = None
    updated_at: datetime = Field(default_factory=_now)  # absent: now; null: invalid (§8.4)

    @field_validator("run_id", "task_id", "provider_name", "model_id", "protocol")
    @classmethod
    def _ids(cls, v: str) -> str:
        return _blank_check(v)

    @model_validator(mode="after")
    def _consistency(self) -> SessionManifest:
        if self.terminal != (self.phase.value in TERMINAL_PHASES):
            raise ValueError("terminal must equal phase in {completed, failed, cancelled}")
        if self.phase == SessionPhase.waiting_approval and self.pending_action is None:
            raise ValueError("waiting_approval requires pending_action")
        if self.pending_action is not None and self.pending_action.run_id != self.run_id:
            raise ValueError("pending_action.run_id must equal run_id")
        return self


MANIFEST_KNOWN_KEYS = frozenset(SessionManifest.model_fields)
MANIFEST_LATER_KEYS = frozenset({"model_usage", "verified_workspace_fingerprint"})


class Limits(_Contract):
    max_steps: Annotated[int, Field(ge=1)] = 12
    wall_time_seconds: Annotated[float, Field(gt=0)] = 900.0
    max_tool_output_bytes: Annotated[int, Field(ge=1)] = 200_000
    max_patch_bytes: Annotated[int, Field(ge=1)] = 100_000
    max_total_tokens: Annotated[int, Field(ge=1)] | None = None


_SKILL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class TaskContract(_Contract):
    """``request.json`` (§7.1)."""

    repository: str
    instruction: str
    allowed_paths: Annotated[list[str], Field(min_length=1)]
    verification: Annotated[list[VerificationCommand], Field(min_length=1)]
    limits: Limits = Field(default_factory=Limits)
    enabled_skills: list[str] = Field(default_factory=list)
    task_id: str = Field(default_factory=_uuid_hex)
    base_sha: str | None = None
    attachments: list[dict[str, str]] = Field(default_factory=list)

    @field_validator("instruction")
    @classmethod
    def _instruction(cls, v: str) -> str:
        return _blank_check(v)

    @field_validator("allowed_paths")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        out = []
        for p in v:
            p = p.strip().replace("\\", "/")
            if not p or p.startswith("/") or "\x00" in p or ".." in p.split("/"):
                raise ValueError(f"invalid allowed path: {p!r}")
            out.append(p)
        if len(set(out)) != len(out):
            raise ValueError("allowed_paths must be unique")
        return out

    @field_validator("enabled_skills")
    @classmethod
    def _skills(cls, v: list[str]) -> list[str]:
        v = [s.strip() for s in v]  # stripped before the pattern and uniqueness (§8.4)
        for s in v:
            if not _SKILL.match(s):
                raise ValueError(f"invalid skill name: {s!r}")
        if len(set(v)) != len(v):
            raise ValueError("enabled_skills must be unique")
        return v

    @field_validator("task_id", "base_sha")
    @classmethod
    def _optional_ids(cls, v: str | None) -> str | None:
        return None if v is None else _blank_check(v)  # task_id: a str, never null


def first_error(exc: Exception) -> str:
    """A one-line summary of a pydantic ValidationError (location and message)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            errs = errors()
        except Exception:  # pragma: no cover - defensive
            errs = []
        if errs:
            e = errs[0]
            loc = ".".join(str(p) for p in e.get("loc", ())) or "(root)"
            more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
            return f"{loc}: {e.get('msg', '')}{more}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
