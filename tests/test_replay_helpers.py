"""Builders for small synthetic run directories used by the replay/reducer/states tests."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

T0 = datetime(2026, 8, 20, 21, 0, 0, tzinfo=timezone.utc)  # noqa: UP017
RUN_ID = "0123456789abcdef0123456789abcdef"
SHA = "474b69574c22b02f99805f9a91b53fde9a0cb068"


def stamp(seconds: float) -> str:
    dt = T0 + timedelta(seconds=seconds)
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if dt.microsecond:
        text += f".{dt.microsecond:06d}"
    return text + "Z"


class Log:
    """Append native events with a running sequence and a controllable clock."""

    def __init__(self, run_id: str = RUN_ID) -> None:
        self.run_id = run_id
        self.lines: list[bytes] = []
        self.seq = 0
        self.t = 0.0

    def add(self, event_type: str, at: float | None = None, seq: int | None = None,
            **data: Any) -> Log:
        if at is not None:
            self.t = at
        obj = {"created_at": stamp(self.t), "data": data, "event_id": f"{len(self.lines):032x}",
               "event_type": event_type, "run_id": self.run_id,
               "sequence": self.seq if seq is None else seq, "task_id": "task"}
        self.lines.append(json.dumps(obj, ensure_ascii=False, sort_keys=True,
                                     separators=(",", ":")).encode() + b"\n")
        if seq is None:
            self.seq += 1
        self.t += 1.0
        return self

    def tool(self, tcid: str, name: str, arguments: Any, *, effect: str = "read",
             approve: float = 0.0, ok: bool = True) -> Log:
        self.add("tool.requested", tool_call_id=tcid, name=name, effect=effect,
                 arguments=arguments)
        if approve:
            rid = f"req-{tcid}"
            self.add("approval.requested", request_id=rid, action_id=tcid, effect=effect,
                     reason="model_tool", policy_reason="p", preview="")
            self.t += approve - 1.0
            self.add("approval.resolved", request_id=rid, action_id=tcid, effect=effect,
                     reason="model_tool", policy_reason="p", decision="allow_once")
        self.add("tool.started", tool_call_id=tcid, name=name, effect=effect)
        self.add("tool.completed", tool_call_id=tcid, name=name, ok=ok, error=None, preview="")
        return self

    def model(self, step: int, usage: dict[str, int] | None = None,
              tool_calls: list[str] | None = None) -> Log:
        self.add("model.requested", step=step)
        u = usage or {"input_tokens": 10, "output_tokens": 5}
        full = {"cached_input_tokens": 0, "reasoning_tokens": 0, "provider_total_tokens": None,
                **u}
        full["total_tokens"] = (full["provider_total_tokens"]
                                if full["provider_total_tokens"] is not None
                                else full["input_tokens"] + full["output_tokens"])
        self.add("model.completed", step=step, finish_reason="tool_calls",
                 tool_calls=tool_calls or [],
                 content="", usage=full)
        return self

    def bytes(self) -> bytes:
        return b"".join(self.lines)


def manifest(**overrides: Any) -> dict[str, Any]:
    base = {
        "schema_version": 1, "run_id": RUN_ID, "task_id": "task", "provider_name": "p",
        "model_id": "m", "protocol": "openai_chat", "prompt_version": "v", "base_sha": SHA,
        "phase": "completed", "step": 0, "messages": [], "model_usage": [],
        "usage": {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0,
                  "reasoning_tokens": 0, "provider_total_tokens": None},
        "final_summary": "", "last_action_fingerprint": None, "repeat_count": 0,
        "last_event_sequence": -1, "verification": [], "pending_action": None,
        "approval_history": [], "granted_effects": [], "active_wall_time_seconds": 0.0,
        "active_started_at": None, "terminal": True, "active_writer_token": None,
        "writer_claimed_at": None, "writer_heartbeat_at": None, "updated_at": stamp(0),
    }
    base.update(overrides)
    return base


def write_run(root: Path, name: str, log: Log, man: dict[str, Any] | None = None,
              request: dict[str, Any] | None = None) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "events.jsonl").write_bytes(log.bytes())
    if man is not None:
        (run / "session.json").write_text(json.dumps(man))
    if request is not None:
        (run / "request.json").write_text(json.dumps(request))
    return run
