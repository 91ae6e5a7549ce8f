"""Approval waits never go negative (docs/run-format.md §10.3), in both ``states_df`` engines.

Pydantic accepts naive, numeric and other-offset ``created_at`` values, so a valid log can
have an ``approval.resolved`` stamped before its ``approval.requested``. The runner times the
wait with a monotonic clock (never negative); the toolkit counts such an interval as 0, as it
does for resume downtime, instead of failing the schema check.
"""

from __future__ import annotations

import json

import pytest

from rivumi_analysis.tables.states import states_df
from tests.test_replay_helpers import Log, manifest, stamp, write_run
from tests.test_states_vec import _assert_same


def _approval(log: Log, rid: str, requested_at: float, resolved_at: float) -> Log:
    log.add("approval.requested", at=requested_at, request_id=rid, action_id="t1",
            effect="execute", reason="model_tool", policy_reason="p", preview="")
    log.add("approval.resolved", at=resolved_at, request_id=rid, action_id="t1",
            effect="execute", reason="model_tool", policy_reason="p", decision="allow_once")
    return log


def _backwards_log() -> Log:
    log = Log().add("run.created", at=0, provider="p", model="m", prompt_version="v",
                    base_sha="0" * 40)
    log.model(1, tool_calls=["shell"])
    log.add("tool.requested", tool_call_id="t1", name="shell", effect="execute",
            arguments={"cmd": "ls"})
    _approval(log, "r1", requested_at=100.0, resolved_at=40.0)  # 60 s backwards
    log.add("tool.started", at=101.0, tool_call_id="t1", name="shell", effect="execute")
    log.add("tool.completed", tool_call_id="t1", name="shell", ok=True, error=None,
            preview="")
    _approval(log, "r2", requested_at=110.0, resolved_at=117.5)  # a normal 7.5 s wait
    return log


@pytest.mark.parametrize("charge", [None, True, False])
def test_backwards_approval_counts_as_no_wait(tmp_path, charge):
    run = write_run(tmp_path, "r", _backwards_log(), manifest())
    ref = states_df(str(run), engine="reference", charge_approval_waits=charge)  # validates
    _assert_same(ref, states_df(str(run), engine="vectorized", charge_approval_waits=charge))
    _assert_same(ref, states_df(str(run), engine="auto", charge_approval_waits=charge))
    waits = dict(zip(ref["event_type"].to_list(), ref["approval_wait_seconds"].to_list(),
                     strict=False))
    assert min(ref["approval_wait_seconds"].to_list()) >= 0.0
    # the backwards wait adds 0; the later normal wait adds exactly its 7.5 s
    assert ref.filter(ref["sequence"] == 5)["approval_wait_seconds"].item() == 0.0
    assert ref["approval_wait_seconds"][-1] == 7.5
    assert waits["approval.resolved"] == 7.5
    assert (ref["charged_wall_seconds"].drop_nulls() >= 0.0).all()


def test_numeric_and_naive_timestamps_around_an_approval(tmp_path):
    """The differential mutations that found the bug: a Unix number and a naive datetime."""
    log = _backwards_log()
    lines = [json.loads(x) for x in log.lines]
    lines[5]["created_at"] = 0  # approval.resolved at the epoch: far before its request
    lines[8]["created_at"] = stamp(50.0)[:-1]  # naive ISO for the second request
    raw = b"".join(json.dumps(o, sort_keys=True, separators=(",", ":")).encode() + b"\n"
                   for o in lines)
    run = tmp_path / "r"
    run.mkdir()
    (run / "events.jsonl").write_bytes(raw)
    (run / "session.json").write_text(json.dumps(manifest()))
    ref = states_df(str(run), engine="reference")
    _assert_same(ref, states_df(str(run), engine="auto"))
    assert ref.height == len(lines)
    assert min(ref["approval_wait_seconds"].to_list()) >= 0.0
