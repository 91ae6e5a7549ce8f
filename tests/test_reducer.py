"""Tests of the reference reducer (issue 4, deliverable 1)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from rivumi_analysis.replay import reducer
from rivumi_analysis.replay.reducer import (
    Limits,
    ReducerEvent,
    apply_event,
    events_from_bytes,
    final_state,
    fingerprint,
    infer_generation,
    iter_transitions,
    state_row,
)
from tests.conftest import examples
from tests.test_replay_helpers import Log

EXAMPLE = Path(__file__).resolve().parent / "fixtures/example/a66038f97f204cb3aaa96339f195c37e"
EXAMPLE_BYTES = (EXAMPLE / "events.jsonl").read_bytes()
MANIFEST = json.loads((EXAMPLE / "session.json").read_text())


def _final(log: Log) -> reducer.RunState:
    return final_state(events_from_bytes(log.bytes()))


# ---------------------------------------------------------------------------- the example run
def test_example_final_state_equals_manifest():
    s = final_state(events_from_bytes(EXAMPLE_BYTES))
    assert s.step == MANIFEST["step"] == 7
    assert s.usage.as_dict() == MANIFEST["usage"]
    assert s.last_fingerprint == MANIFEST["last_action_fingerprint"]
    assert s.sequence == MANIFEST["last_event_sequence"] == 49
    assert s.repeat_count == MANIFEST["repeat_count"]
    assert (s.phase, s.terminal) == (MANIFEST["phase"], MANIFEST["terminal"])
    assert [list(v) for v in s.verification] == [
        [v["name"], v["ok"], v["exit_code"]] for v in MANIFEST["verification"]]
    # M4-era run: the clock did not pause during approvals (§10.3 evidence caveat).
    assert infer_generation(events_from_bytes(EXAMPLE_BYTES), MANIFEST) == "m4"
    assert abs(s.charged_wall_seconds(True) - MANIFEST["active_wall_time_seconds"]) < 0.1
    assert s.charged_wall_seconds(False) < 10


def test_example_intermediate_states():
    rows = list(iter_transitions(events_from_bytes(EXAMPLE_BYTES)))
    by_seq = {t.event.sequence: t.state for t in rows}
    assert by_seq[5].open_approvals and not by_seq[5].fork_safe  # approval.requested
    assert by_seq[6].fork_safe                                   # approval.resolved
    assert by_seq[7].side_effects_in_flight == 1                 # tool.started
    assert by_seq[47].verifications_in_flight == {"check-1"}     # verification.started
    assert by_seq[8].usage.total_tokens == 661
    assert by_seq[22].repeat_count == 1                          # list_files "." after ""
    # No event says "verifying" (§6.1), so the phase stays running through final checks.
    assert by_seq[5].phase == "waiting_approval" and by_seq[48].phase == "running"


# ---------------------------------------------------------------------------- repeat guard
def test_repeat_guard_resume_and_continuation():
    log = Log().add("run.created").tool("a", "read_file", {"path": "x"}).tool(
        "b", "read_file", {"path": "x"})
    s = _final(log)
    assert (s.repeat_count, s.repeat_trip_distance) == (2, 1)
    fp = fingerprint("read_file", {"path": "x"})
    assert s.last_fingerprint == fp
    log.add("session.resumed", resumed_step=0)
    s = _final(log)
    assert (s.repeat_count, s.last_fingerprint, s.resume_count) == (0, fp, 1)
    log.tool("c", "read_file", {"path": "x"})  # same as the kept fingerprint: 0 + 1
    assert _final(log).repeat_count == 1
    log.add("run.completed", terminal_reason="verified").add("session.continued")
    s = _final(log)
    assert (s.repeat_count, s.last_fingerprint, s.continuation_index) == (0, None, 1)
    assert (s.terminal, s.phase) == (False, "running")


def test_repeated_action_trip_counts_the_unlogged_call():
    log = Log().add("run.created").model(1, tool_calls=["shell"]).tool("a", "shell", {"c": 1})
    log.model(2, tool_calls=["shell"]).tool("b", "shell", {"c": 1})
    log.model(3, tool_calls=["shell"])  # the third identical call: evaluated, never logged
    assert _final(log).repeat_count == 2
    log.add("run.failed", terminal_reason="repeated_action")
    s = _final(log)
    assert (s.repeat_count, s.repeat_trip_distance, s.terminal_reason) == (3, 0,
                                                                           "repeated_action")
    assert s.unlogged_guard_calls == 1 and s.last_fingerprint == fingerprint("shell", {"c": 1})


def test_unlogged_call_with_a_new_name_has_unknown_fingerprint():
    log = Log().add("run.created").model(1, tool_calls=["read_file"]).tool("a", "read_file", {})
    log.model(2, tool_calls=["shell"]).add("run.failed", terminal_reason="wall_time_exceeded")
    s = _final(log)
    assert (s.repeat_count, s.fingerprint_unknown, s.last_fingerprint) == (1, True, None)


def test_fingerprint_unknown_omitted_and_unknown_tool():
    stub = {"omitted": True, "utf8_bytes": 30000, "sha256": "ab" * 32}
    log = Log().add("run.created").tool("a", "create_file", stub).tool("b", "create_file", stub)
    s = _final(log)
    assert (s.fingerprint_unknown, s.last_fingerprint, s.repeat_count) == (True, None, 2)
    log.tool("c", "read_file", {"path": "y"})
    assert _final(log).fingerprint_unknown is False
    log.add("tool.completed", tool_call_id="d", name="save_memory", ok=False,
            error="Unknown tool 'save_memory'. Available tools: read_file")
    s = _final(log)
    assert (s.fingerprint_unknown, s.last_fingerprint, s.repeat_count) == (True, None, 1)


# ---------------------------------------------------------------------------- time and budgets
def test_time_approvals_resume_and_budgets():
    log = Log().add("run.created", at=0).model(1, {"input_tokens": 100, "output_tokens": 50})
    log.tool("a", "shell", {"cmd": "x"}, effect="execute", approve=30.0)
    s = _final(log)
    assert abs(s.approval_wait_seconds - 30.0) < 1e-6
    elapsed = s.wall_elapsed_seconds()
    assert abs(s.charged_wall_seconds(True) - elapsed) < 1e-6
    assert abs(s.charged_wall_seconds(False) - (elapsed - 30.0)) < 1e-6
    # crash while an approval is open, resume 100 s later: neither wait nor outage charged
    log.add("approval.requested", request_id="r2", action_id="b", effect="execute",
            reason="model_tool", policy_reason="p", preview="")
    before = _final(log)
    assert before.open_approvals and not before.fork_safe
    log.add("session.resumed", at=log.t + 99.0, resumed_step=1)
    log.add("approval.abandoned", request_id="r2", action_id="b", effect="execute",
            reason="process_interrupted_before_decision")
    s = _final(log)
    assert not s.open_approvals and s.fork_safe
    assert abs(s.resume_downtime_seconds - 100.0) < 1e-6
    uncharged = s.wall_elapsed_seconds() - s.charged_wall_seconds(False)
    assert abs(uncharged - (30.0 + 100.0)) < 1e-6
    row = state_row(s, charge_approval_waits=False,
                    limits=Limits.from_request({"limits": {"max_steps": 5,
                                                           "max_total_tokens": 1000}}))
    assert (row["steps_remaining"], row["tokens_remaining"]) == (4, 850)
    assert abs(row["wall_time_remaining_seconds"] - (900.0 - s.charged_wall_seconds(False))) < 1e-6


def test_usage_lanes_and_provider_total_rule():
    log = Log().add("run.created").model(1, {"input_tokens": 10, "output_tokens": 2,
                                             "provider_total_tokens": 20})
    log.add("role_lane.completed", role="reviewer", provider="a", model="b",
            usage={"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}, cost=None,
            preview="")
    s = _final(log)
    assert s.usage.as_dict() == {"input_tokens": 13, "output_tokens": 3,
                                 "cached_input_tokens": 0, "reasoning_tokens": 0,
                                 "provider_total_tokens": 24}
    assert (s.usage_primary.total_tokens, s.usage_reviewer.total_tokens) == (20, 4)


# ---------------------------------------------------------------------------- properties
_TYPES = ["run.created", "model.requested", "model.completed", "tool.requested", "tool.started",
          "tool.completed", "approval.requested", "approval.resolved", "approval.abandoned",
          "session.resumed", "session.continued", "verification.started",
          "verification.completed", "run.failed", "run.completed", "role_lane.completed"]
_data = st.fixed_dictionaries({}, optional={
    "step": st.one_of(st.integers(0, 5), st.text(max_size=2)),
    "name": st.sampled_from(["a", "b"]),
    "arguments": st.one_of(st.dictionaries(st.sampled_from(["p"]), st.integers(0, 1)),
                           st.just({"omitted": True, "sha256": "x"}), st.none()),
    "tool_call_id": st.sampled_from(["t1", "t2"]),
    "request_id": st.sampled_from(["r1", "r2"]),
    "usage": st.one_of(st.none(), st.dictionaries(
        st.sampled_from(["input_tokens", "output_tokens", "provider_total_tokens"]),
        st.one_of(st.integers(0, 9), st.booleans(), st.none()))),
    "terminal_reason": st.sampled_from(["verified", "repeated_action"]),
    "error": st.sampled_from(["Unknown tool 'x'", "boom"]),
})
_events = st.lists(st.builds(
    lambda i, seq, et, t, d: ReducerEvent(i + 1, seq, et, None if t is None else
                                          reducer._parse_time(f"2026-01-01T00:00:{t:02d}Z"), d),
    st.integers(0, 100), st.integers(0, 6), st.sampled_from(_TYPES),
    st.one_of(st.none(), st.integers(0, 59)), _data), max_size=25)


@given(_events)
@settings(max_examples=examples(150))
def test_rejected_events_never_change_state(events):
    prev = reducer.initial_state()
    for t in iter_transitions(events):
        if t.rejected:
            assert t.state is prev
        else:
            assert t.state.sequence == t.event.sequence
        prev = t.state
        state_row(t.state, charge_approval_waits=False, limits=Limits(3, 10.0, 100))


@given(_events, st.integers(0, 25))
@settings(max_examples=examples(100))
def test_prefix_reduction_is_prefix_of_full(events, k):
    full = [t.state for t in iter_transitions(events)]
    part = [t.state for t in iter_transitions(events[:k])]
    assert part == full[:k]


def test_duplicate_sequence_is_rejected_atomically():
    log = Log().add("run.created").add("model.requested", step=1)
    log.add("model.requested", seq=1, step=9)
    ts = list(iter_transitions(events_from_bytes(log.bytes())))
    assert [t.rejected for t in ts] == [None, None, "duplicate_sequence"]
    assert ts[2].state is ts[1].state and ts[2].state.step == 1


@given(st.integers(0, len(EXAMPLE_BYTES)))
@settings(max_examples=examples(300))
def test_reducer_never_raises_on_byte_cuts(cut):
    for data in (EXAMPLE_BYTES[:cut], EXAMPLE_BYTES[cut:]):
        for t in iter_transitions(events_from_bytes(data)):
            state_row(t.state, charge_approval_waits=True, limits=None)


def test_reducer_on_every_line_cut():
    lines = EXAMPLE_BYTES.splitlines(keepends=True)
    for k in range(len(lines) + 1):
        s = final_state(events_from_bytes(b"".join(lines[:k])))
        assert s.event_count == k


def test_apply_event_rejects_bad_sequence():
    s = reducer.initial_state()
    t = apply_event(s, ReducerEvent(1, -1, "x"))
    assert t.rejected == "bad_sequence" and t.state is s
