"""The runner's own way of validating a run (§8.1 steps 3-5, as §8.2 reads them).

Written here from the spec (not imported from the toolkit) so the baseline stays independent:
pydantic v2 models of ``RunEvent``, ``SessionManifest`` and ``TaskContract`` with
``extra="forbid"`` in the default lax mode, and the garbage collector left on, as in the runner.
Nested conversation items, approvals and verification outcomes are validated as objects
(``dict``), which slightly flatters the baseline.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LIMIT = 16 * 1024 * 1024


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunEvent(_M):
    event_type: str = Field(min_length=1)
    run_id: str = Field(min_length=1)
    task_id: str | None = None
    sequence: int = Field(ge=0)
    data: dict[str, Any] = Field(default_factory=dict)
    event_id: str = ""
    created_at: datetime | None = None


class Usage(_M):
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    provider_total_tokens: int | None = None


class SessionManifest(_M):
    schema_version: Literal[1] = 1
    run_id: str
    task_id: str
    provider_name: str
    model_id: str
    protocol: str
    prompt_version: str = Field("m2-unversioned-patch", min_length=1)
    base_sha: str = Field(pattern=r"^[0-9a-fA-F]{40}$")
    phase: Literal["created", "preparing", "running", "waiting_approval", "verifying", "paused",
                   "completed", "failed", "cancelled"] = "created"
    step: int = Field(0, ge=0)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    model_usage: list[dict[str, Any]] = Field(default_factory=list)
    final_summary: str = ""
    last_action_fingerprint: str | None = None
    repeat_count: int = Field(0, ge=0)
    last_event_sequence: int = Field(-1, ge=-1)
    verification: list[dict[str, Any]] = Field(default_factory=list)
    verified_workspace_fingerprint: str | None = None
    pending_action: dict[str, Any] | None = None
    approval_history: list[dict[str, Any]] = Field(default_factory=list)
    granted_effects: list[str] = Field(default_factory=list)
    active_wall_time_seconds: float = Field(0.0, ge=0)
    active_started_at: datetime | None = None
    terminal: bool = False
    active_writer_token: str | None = None
    writer_claimed_at: datetime | None = None
    writer_heartbeat_at: datetime | None = None
    updated_at: datetime | None = None

    @model_validator(mode="after")
    def _check(self) -> SessionManifest:
        if self.terminal != (self.phase in ("completed", "failed", "cancelled")):
            raise ValueError("terminal does not match phase")
        if self.phase == "waiting_approval" and self.pending_action is None:
            raise ValueError("waiting_approval without pending_action")
        for v in (self.run_id, self.task_id, self.provider_name, self.model_id, self.protocol):
            if not v.strip():
                raise ValueError("blank identifier")
        return self


class VerificationCommand(_M):
    name: str
    argv: list[str] = Field(min_length=1)
    timeout_seconds: float = Field(300.0, gt=0)


class Limits(_M):
    max_steps: int = Field(12, ge=1)
    wall_time_seconds: float = Field(900.0, gt=0)
    max_tool_output_bytes: int = Field(200_000, ge=1)
    max_patch_bytes: int = Field(100_000, ge=1)
    max_total_tokens: int | None = None


class TaskContract(_M):
    repository: str
    instruction: str
    allowed_paths: list[str] = Field(min_length=1)
    verification: list[VerificationCommand] = Field(min_length=1)
    limits: Limits = Field(default_factory=Limits)
    enabled_skills: list[str] = Field(default_factory=list)
    task_id: str = ""
    base_sha: str | None = None
    attachments: list[dict[str, str]] = Field(default_factory=list)


def _read_text(path: str) -> str | None:
    try:
        if os.path.islink(path) or os.path.getsize(path) > LIMIT:
            return None
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def validate_run(run_dir: str) -> bool:
    """True when §8.1 steps 3-5 accept the run (the runner's own reading)."""
    ok = True
    text = _read_text(os.path.join(run_dir, "session.json"))
    manifest = None
    try:
        manifest = SessionManifest.model_validate_json(text) if text is not None else None
    except ValueError:
        ok = False
    text = _read_text(os.path.join(run_dir, "request.json"))
    if text is not None:
        try:
            req = TaskContract.model_validate_json(text)
            if manifest is not None and req.task_id != manifest.task_id:
                ok = False
        except ValueError:
            ok = False
    text = _read_text(os.path.join(run_dir, "events.jsonl"))
    if text is None:
        return ok and manifest is not None and manifest.last_event_sequence == -1
    i = -1
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            ev = RunEvent.model_validate_json(line)
        except ValueError:
            ok = False
            continue
        i += 1
        if ev.sequence != i:
            ok = False
        if manifest is not None and (ev.run_id != manifest.run_id or (
                ev.task_id is not None and ev.task_id != manifest.task_id)):
            ok = False
    if manifest is not None and manifest.last_event_sequence not in (i, i + 1):
        ok = False
    return ok and manifest is not None
