"""msgspec twins of the manifest and request models, for the audit's hot path.

:mod:`rivumi_analysis.read.models` (pydantic, the runner's own contracts) stays the oracle.
The Structs here are *stricter*: they accept a document only when pydantic provably accepts
it with the same values, and decline anything else (``None``), in which case the caller asks
pydantic, which also gives the exact error message. So a decline is never an answer, only
"ask the oracle"; :func:`manifest` / :func:`request` are ``SessionManifest.model_validate`` /
``TaskContract.model_validate`` for the documents the runner writes, at a fraction of the cost.

What makes them stricter (each one a case pydantic's lax mode accepts and may coerce):
strict types (no ``"5"`` or ``5.0`` for an int, no ``1`` for a bool, no bool for a number);
the strings pydantic strips (ids, ``instruction``, paths, skills, command names) must already
be stripped; timestamps must be in the runner's own format (``YYYY-MM-DDTHH:MM:SS[.f]Z``) and
real (``datetime.fromisoformat`` accepts them); a conversation item must match one member
of the union outright; ``allowed_paths`` must need no normalisation. Every constraint of the
pydantic models (lengths, bounds, patterns, literals, the model validators) is checked here
too. ``tests/test_fast_models.py`` proves equal accept/reject (and equal values where the
verdict reads them) on every sample run and on generated mutations.

>>> doc = {"repository": "r", "instruction": "fix it", "allowed_paths": ["src"],
...        "verification": [{"name": "t", "argv": ["pytest"]}], "task_id": "t1"}
>>> request(doc).task_id, request({**doc, "task_id": " t1"}) is None  # pydantic strips it
('t1', True)
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from .models import TERMINAL_PHASES

_NonNeg = Annotated[int, msgspec.Meta(ge=0)]
_NonNegF = Annotated[float, msgspec.Meta(ge=0)]
_Str1 = Annotated[str, msgspec.Meta(min_length=1)]
_DATE = (
    r"(?:(?!0000)[0-9]{4}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
    r"|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
    r"|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)"
)
VALID_DATE = re.compile(_DATE)
"""A real calendar date ``YYYY-MM-DD`` (years 0001-9999, leap years included): exactly the
dates ``datetime.fromisoformat`` accepts in this shape (``tests/test_fast_models.py``)."""
_TIME = r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
_TS = re.compile(_DATE + _TIME + r"(?:\.[0-9]{1,6})?Z")
_SHA40 = re.compile(r"[0-9a-fA-F]{40}")
_SKILL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_Effect = Literal["read", "modify", "modify_execute", "execute"]
_Phase = Literal["created", "preparing", "running", "waiting_approval", "verifying", "paused",
                 "completed", "failed", "cancelled"]


class _Struct(msgspec.Struct, forbid_unknown_fields=True, frozen=True, gc=False):
    pass


class Usage(_Struct):
    input_tokens: _NonNeg = 0
    output_tokens: _NonNeg = 0
    cached_input_tokens: _NonNeg = 0
    reasoning_tokens: _NonNeg = 0
    provider_total_tokens: _NonNeg | None = None

    def model_dump(self) -> dict[str, Any]:
        """The field values as a dict (what ``read.models.Usage.model_dump`` returns)."""
        return msgspec.structs.asdict(self)


class CostBreakdown(_Struct):
    provider: _Str1
    model: str
    currency: Literal["USD"] = "USD"
    source: Literal["estimated", "authoritative"] = "estimated"
    input_cost: _NonNegF = 0.0
    cached_input_cost: _NonNegF = 0.0
    output_cost: _NonNegF = 0.0


class ModelUsageRecord(_Struct):
    lane: _Str1
    provider: str
    model: str
    usage: Usage = msgspec.field(default_factory=Usage)
    cost: CostBreakdown | None = None


class ToolCall(_Struct):
    name: _Str1
    tool_call_id: _Str1 | UnsetType = UNSET  # absent: pydantic draws a uuid (never read)
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    provider_metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class _Item(_Struct):
    """Every key of the three conversation-item models (``Message``, ``ToolObservation``,
    ``InjectedContext``), each with the loosest of their types; :func:`_item_ok` then applies
    the member's own rules. ``role`` is a key of Message only and ``ok`` of ToolObservation
    only, and each member forbids unknown keys, so the keys present pick the only member that
    can accept the item."""

    role: Literal["system", "user", "assistant"] | UnsetType = UNSET
    content: str | None | UnsetType = UNSET
    tool_calls: list[ToolCall] | UnsetType = UNSET
    provider_metadata: dict[str, Any] | UnsetType = UNSET
    tool_call_id: _Str1 | UnsetType = UNSET
    name: _Str1 | UnsetType = UNSET
    ok: bool | UnsetType = UNSET
    error: str | None | UnsetType = UNSET
    item_type: Literal["injected_context"] | UnsetType = UNSET
    source: Annotated[str, msgspec.Meta(min_length=1, max_length=128)] | UnsetType = UNSET


class VerificationCommand(_Struct):
    name: str
    argv: Annotated[list[_Str1], msgspec.Meta(min_length=1)]
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] = 300.0


class VerificationOutcome(_Struct):
    name: str
    argv: list[str]
    ok: bool
    exit_code: int | None = None
    duration_seconds: _NonNegF = 0.0
    output: str = ""


class ApprovalRequest(_Struct):
    run_id: _Str1
    action_id: _Str1
    effect: _Effect
    reason: Literal["model_tool", "final_verification"]
    request_id: _Str1 | UnsetType = UNSET  # absent: a uuid (declined below when pending)
    policy_reason: Annotated[str, msgspec.Meta(max_length=2000)] = ""
    preview: Annotated[str, msgspec.Meta(max_length=16000)] = ""
    tool_call: ToolCall | None = None
    command: VerificationCommand | None = None


class ApprovalAuditRecord(_Struct):
    request: ApprovalRequest
    decision: Literal["allow_once", "allow_session", "deny", "cancel"]
    decided_at: str | UnsetType = UNSET  # absent: valid (now); null: refused by the type


class SessionManifest(_Struct):
    run_id: str
    task_id: str
    provider_name: str
    model_id: str
    protocol: str
    base_sha: str
    schema_version: Literal[1] = 1
    prompt_version: _Str1 = "m2-unversioned-patch"
    phase: _Phase = "created"
    step: _NonNeg = 0
    messages: list[_Item] = msgspec.field(default_factory=list)
    usage: Usage = msgspec.field(default_factory=Usage)
    model_usage: list[ModelUsageRecord] = msgspec.field(default_factory=list)
    final_summary: str = ""
    last_action_fingerprint: str | None = None
    repeat_count: _NonNeg = 0
    last_event_sequence: Annotated[int, msgspec.Meta(ge=-1)] = -1
    verification: list[VerificationOutcome] = msgspec.field(default_factory=list)
    verified_workspace_fingerprint: str | None = None
    pending_action: ApprovalRequest | None = None
    approval_history: list[ApprovalAuditRecord] = msgspec.field(default_factory=list)
    granted_effects: list[_Effect] = msgspec.field(default_factory=list)
    active_wall_time_seconds: _NonNegF = 0.0
    active_started_at: str | None = None
    terminal: bool = False
    active_writer_token: str | None = None
    writer_claimed_at: str | None = None
    writer_heartbeat_at: str | None = None
    updated_at: str | UnsetType = UNSET  # absent: valid (now); null: refused by the type


class Limits(_Struct):
    max_steps: Annotated[int, msgspec.Meta(ge=1)] = 12
    wall_time_seconds: Annotated[float, msgspec.Meta(gt=0)] = 900.0
    max_tool_output_bytes: Annotated[int, msgspec.Meta(ge=1)] = 200_000
    max_patch_bytes: Annotated[int, msgspec.Meta(ge=1)] = 100_000
    max_total_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None


class TaskContract(_Struct):
    repository: str
    instruction: str
    allowed_paths: Annotated[list[str], msgspec.Meta(min_length=1)]
    verification: Annotated[list[VerificationCommand], msgspec.Meta(min_length=1)]
    limits: Limits = msgspec.field(default_factory=Limits)
    enabled_skills: list[str] = msgspec.field(default_factory=list)
    task_id: str | UnsetType = UNSET  # absent: pydantic draws a uuid (declined below)
    base_sha: str | None = None
    attachments: list[dict[str, str]] = msgspec.field(default_factory=list)


def _ts_ok(value: str | UnsetType | None) -> bool:
    return value is None or value is UNSET or _TS.fullmatch(value) is not None


def _stripped(value: str) -> bool:
    """Non-blank and equal to its ``strip()`` (pydantic's ``_blank_check`` keeps it as is)."""
    return bool(value) and value.strip() == value


def _command_ok(cmd: VerificationCommand) -> bool:
    return _stripped(cmd.name) and not any("\x00" in a for a in cmd.argv)


def _approval_ok(req: ApprovalRequest) -> bool:
    if (req.tool_call is None) == (req.command is None):
        return False
    if req.reason == "final_verification" and req.command is None:
        return False
    return req.command is None or _command_ok(req.command)


def _item_ok(it: _Item) -> bool:
    """The conversation-item union accepts the item (pydantic's union then does too)."""
    if it.role is not UNSET:  # Message
        if not (it.tool_call_id is UNSET and it.name is UNSET and it.ok is UNSET
                and it.error is UNSET and it.item_type is UNSET and it.source is UNSET):
            return False
        content = None if it.content is UNSET else it.content
        calls = it.tool_calls or ()
        if calls and it.role != "assistant":
            return False
        if it.role in ("system", "user") and content is None:
            return False
        return not (it.role == "assistant" and content is None and not calls)
    if it.ok is not UNSET:  # ToolObservation
        if not (it.tool_calls is UNSET and it.provider_metadata is UNSET
                and it.item_type is UNSET and it.source is UNSET):
            return False
        if it.tool_call_id is UNSET or it.name is UNSET or it.content is None:
            return False
        error = None if it.error is UNSET else it.error
        return not (it.ok and error is not None or not it.ok and not error)
    # InjectedContext
    if not (it.tool_calls is UNSET and it.provider_metadata is UNSET and it.tool_call_id is UNSET
            and it.name is UNSET and it.error is UNSET and it.source is not UNSET):
        return False
    content = it.content
    return (type(content) is str and 1 <= len(content) <= 16000 and "\x00" not in content)


def manifest(doc: dict[str, Any]) -> SessionManifest | None:
    """``session.json`` when pydantic's ``SessionManifest`` provably accepts it, else None.

    The Struct has the attributes the verdict reads from the pydantic model, with equal values.
    """
    try:
        m = msgspec.convert(doc, SessionManifest)
    except Exception:  # any doubt: the oracle decides
        return None
    return m if _manifest_ok(m) else None


_MANIFEST_JSON = msgspec.json.Decoder(SessionManifest)


def manifest_from_json(data: bytes) -> SessionManifest | None:
    """:func:`manifest` of ``session.json``'s bytes, decoded straight into the Struct (no
    dict of the whole document on the way).

    Only for text msgspec may read for the runner (``snapshot._msgspec_may_read``: no
    nesting past the runner's limit, no long digit run). Every key is a field (unknown keys
    are refused), so every value is decoded and checked as :func:`manifest` checks it, a
    repeated key keeps its last value as ``json.loads`` does, and what the decoder refuses
    (NaN, invalid UTF-8, a lone surrogate) is declined: the caller then parses the document
    and asks :func:`manifest`. ``tests/test_audit_cold.py`` proves it equal to :func:`manifest`
    of the parsed document on every sample manifest and thousands of mutations.
    """
    try:
        m = _MANIFEST_JSON.decode(data)
    except Exception:  # any doubt: the caller parses the document
        return None
    return m if _manifest_ok(m) else None


def _manifest_ok(m: SessionManifest) -> bool:
    """The model validators and field rules the Struct types cannot state."""
    if not all(_stripped(v) for v in (m.run_id, m.task_id, m.provider_name, m.model_id,
                                      m.protocol)):
        return False
    if _SHA40.fullmatch(m.base_sha) is None:
        return False
    if not (_ts_ok(m.active_started_at) and _ts_ok(m.writer_claimed_at)
            and _ts_ok(m.writer_heartbeat_at) and _ts_ok(m.updated_at)):
        return False
    if m.terminal != (m.phase in TERMINAL_PHASES):
        return False
    if m.phase == "waiting_approval" and m.pending_action is None:
        return False
    pending = m.pending_action
    if pending is not None and (pending.run_id != m.run_id or not _approval_ok(pending)
                                or pending.request_id is UNSET):
        return False
    for rec in m.approval_history:
        if not _approval_ok(rec.request) or not _ts_ok(rec.decided_at):
            return False
    if not all(_item_ok(item) for item in m.messages):
        return False
    return True


def request(doc: dict[str, Any]) -> TaskContract | None:
    """``request.json`` when pydantic's ``TaskContract`` provably accepts it, else None."""
    try:
        c = msgspec.convert(doc, TaskContract)
    except Exception:  # any doubt: the oracle decides
        return None
    if c.task_id is UNSET or not _stripped(c.task_id) or not _stripped(c.instruction):
        return None
    if c.base_sha is not None and not _stripped(c.base_sha):
        return None
    for p in c.allowed_paths:  # already normalised: pydantic keeps it unchanged
        if (not p or p != p.strip() or "\\" in p or p.startswith("/") or "\x00" in p
                or ".." in p.split("/")):
            return None
    if len(set(c.allowed_paths)) != len(c.allowed_paths):
        return None
    skills = c.enabled_skills
    if any(s != s.strip() or _SKILL.fullmatch(s) is None for s in skills) or (
            len(set(skills)) != len(skills)):
        return None
    if not all(_command_ok(cmd) for cmd in c.verification):
        return None
    return c
