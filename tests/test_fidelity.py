"""Regression tests for issue 11: one minimal edit of the shared example per disagreement class.

Each case states what the runner does (§8.2) and checks the toolkit's audit verdict, its
``replay --json`` and, through the independent oracle (``tests/differential``), every other
aspect (readers_disagree, fork seeds, the audit's replay_accepts).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rivumi_analysis.audit import audit_run
from tests.conftest import dumps, example_events, example_manifest, example_request
from tests.differential import runner_oracle as oracle
from tests.differential.compare import compare_run, run_cli

LINES = example_events().split(b"\n")[:-1]  # 50 events, sequences 0..49
LAST = len(LINES) - 1


def _events(edit: Callable[[list[bytes]], list[bytes]]) -> bytes:
    return b"\n".join(edit(list(LINES))) + b"\n"


def _line(i: int, fn: Callable[[bytes], bytes]) -> Callable[[list[bytes]], list[bytes]]:
    def edit(lines: list[bytes]) -> list[bytes]:
        lines[i] = fn(lines[i])
        return lines
    return edit


def _ts(value: str) -> Callable[[bytes], bytes]:
    def fn(line: bytes) -> bytes:
        start = line.index(b'"created_at":"') + len(b'"created_at":"')
        end = line.index(b'"', start)
        return line[:start] + value.encode() + line[end:]
    return fn


def _into_data(member: str) -> Callable[[bytes], bytes]:
    return lambda line: line.replace(b'"data":{', b'"data":{' + member.encode() + b",", 1)


def _join(i: int, sep: str) -> Callable[[list[bytes]], list[bytes]]:
    def edit(lines: list[bytes]) -> list[bytes]:
        lines[i:i + 2] = [lines[i] + sep.encode() + lines[i + 1]]
        return lines
    return edit


def _insert(i: int, raw: bytes) -> Callable[[list[bytes]], list[bytes]]:
    def edit(lines: list[bytes]) -> list[bytes]:
        lines.insert(i, raw)
        return lines
    return edit


def _check(make_run: Any, *, events: bytes | None = None, manifest: Any = "default",
           request: Any = "default", verdict: str, reason: str | None = None,
           replay_ok: bool | None = None, replay_error: str | None = None,
           readers_disagree: bool | None = None) -> dict[str, Any]:
    run = make_run(events=events if events is not None else "default", manifest=manifest,
                   request=request)
    rec = audit_run(run)
    assert rec["verdict"] == verdict, (rec["reasons"], rec["message"])
    if reason is not None:
        assert reason in rec["reasons"], rec["reasons"]
    if replay_ok is not None:
        code, out, err = run_cli(["replay", run, "--json"])
        assert (code == 0) == replay_ok, err
        out.decode("utf-8")  # never bytes that are not UTF-8
        if replay_error is not None:
            assert (code, out, err) == (2, b"", f"error: {replay_error}\n")
    if readers_disagree is not None:
        assert ("readers_disagree" in rec["warnings"]) == readers_disagree, rec["warnings"]
    res = compare_run(Path(run))
    assert res.ok, (res.aspects, res.details)
    return rec


# --- class 1: impossible timestamps never crash the audit (§8.3) ---------------------------
@pytest.mark.parametrize("value", [
    "2026-08-20T24:00:00Z", "2026-00-20T21:02:47Z", "2026-13-20T21:02:47Z",
    "2026-02-30T21:02:47Z", "2026-08-20T21:02:60Z", "2026-08-2\u0663T21:02:47Z",
    "2026-08-20T21:02:47.879324Z\\n", "2026-08-20T31:01:41.533183Z",  # a bit flip: 2 -> 3
])
def test_impossible_created_at_is_an_invalid_line_not_a_crash(make_run: Any, value: str) -> None:
    rec = _check(make_run, events=_events(_line(LAST, _ts(value))), verdict="corrupt",
                 reason="invalid_event_line", replay_ok=True, readers_disagree=True)
    assert rec["lines"] == 50 and rec["events"] == 50  # still accounted for, never zeroed


# --- class 2: resume accepts what the toolkit called corrupt (§8.2) ------------------------
@pytest.mark.parametrize("name,edit,replay_ok", [
    ("nbsp_only_line", _insert(10, "\u00a0".encode()), False),
    ("ideographic_space_line", _insert(10, "\u3000 ".encode()), False),
    ("u2029_after_brace", _line(5, lambda ln: ln + "\u2029".encode()), False),
    ("nel_after_brace", _line(5, lambda ln: ln + "\u0085".encode()), False),
    ("form_feed_before_brace", _line(5, lambda ln: b"\x0c" + ln), False),
    ("cr_space_lf", _line(5, lambda ln: ln + b"\r "), True),
    ("joined_by_cr", _join(20, "\r"), False),
    ("joined_by_ff", _join(20, "\x0c"), False),
    ("joined_by_rs", _join(20, "\x1e"), False),
    ("joined_by_u2028", _join(20, "\u2028"), False),
])
def test_resume_accepts_its_own_blank_and_separator_pieces(make_run: Any, name: str, edit: Any,
                                                           replay_ok: bool) -> None:
    _check(make_run, events=_events(edit), verdict="terminal", replay_ok=replay_ok,
           readers_disagree=not replay_ok)


def test_a_separator_inside_a_string_is_corrupt(make_run: Any) -> None:
    edit = _line(5, lambda ln: ln.replace(b'"data":{"', "\"data\":{\"\u2028".encode(), 1))
    _check(make_run, events=_events(edit), verdict="corrupt", reason="line_separator_split",
           replay_ok=True, readers_disagree=True)


def test_joined_events_make_a_side_effect_tail_for_resume(make_run: Any) -> None:
    """Two events joined by a lone CR are two events for resume, so its tail decides."""
    started = next(ln for ln in LINES if b'"event_type":"tool.started"' in ln)
    obj = json.loads(started)
    obj.update(sequence=LAST + 1)
    events = b"\n".join(LINES) + b"\r" + dumps(obj) + b"\n"
    m = example_manifest()
    m.update(phase="running", terminal=False, last_event_sequence=LAST + 1)
    _check(make_run, events=events, manifest=m, verdict="side_effect_uncertain",
           reason="side_effect_tail", replay_ok=False, readers_disagree=True)


# --- class 3: resume refuses what the toolkit accepted (§8.3) ------------------------------
@pytest.mark.parametrize("name,edit", [
    ("created_at_null", _line(LAST, lambda ln: ln.replace(
        ln[ln.index(b'"created_at":'):ln.index(b',"data"')], b'"created_at":null'))),
    ("event_id_null", _line(LAST, lambda ln: ln.replace(
        ln[ln.index(b'"event_id":'):ln.index(b',"event_type"')], b'"event_id":null'))),
    ("surrogate_in_data_value", _line(3, _into_data('"k":"\\ud800"'))),
    ("surrogate_in_data_key", _line(3, _into_data('"\\udc00":1'))),
    ("surrogate_in_event_type", _line(3, lambda ln: ln.replace(
        b'"event_type":"', b'"event_type":"\\udfff', 1))),
    ("nested_202_deep", _line(3, _into_data('"k":' + "[" * 200 + "]" * 200))),
    ("float_with_4301_digit_integer_part", _line(3, _into_data('"k":' + "1" * 4301 + ".5"))),
])
def test_resume_refuses_what_pydantic_refuses(make_run: Any, name: str, edit: Any) -> None:
    _check(make_run, events=_events(edit), verdict="corrupt", reason="invalid_event_line")


def test_nesting_just_below_pydantics_limit_is_valid(make_run: Any) -> None:
    edit = _line(3, _into_data('"k":' + "[" * 199 + "]" * 199))
    _check(make_run, events=_events(edit), verdict="terminal", replay_ok=True,
           readers_disagree=False)


def test_installed_pydantic_refuses_at_the_documented_depth() -> None:
    """§8.3 pins pydantic-core's limit; if an upgrade moves it, this test says so."""
    from rivumi_analysis.read.models import RunEvent
    from rivumi_analysis.read.resume_reader import RUN_EVENT_REFUSED_DEPTH, run_event_error

    line = '{"event_type":"a","run_id":"r","sequence":0,"data":{"k":%s}}'
    ok = line % ("[" * 199 + "]" * 199)
    deep = line % ("[" * 200 + "]" * 200)
    RunEvent.model_validate_json(ok)
    with pytest.raises(ValueError, match="recursion limit"):
        RunEvent.model_validate_json(deep)
    assert RUN_EVENT_REFUSED_DEPTH == 202
    assert run_event_error(ok.encode()) is None and run_event_error(deep.encode())


# --- class 4: the runner's models, field by field (§8.4) -----------------------------------
def _manifest(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    m = example_manifest()
    edit(m)
    return m


def _pending(m: dict[str, Any], **changes: Any) -> dict[str, Any]:
    pa = {"action_id": "call_1", "effect": "modify", "reason": "model_tool",
          "request_id": "0" * 32, "run_id": m["run_id"],
          "tool_call": {"tool_call_id": "call_1", "name": "write_file", "arguments": {}}}
    pa.update(changes)
    return pa


def _approval(m: dict[str, Any], drop: str | None = None) -> None:
    rec = {"request": _pending(m), "decision": "allow_once", "decided_at": "2026-08-20T21:02:00Z"}
    if drop == "decided_at":
        rec.pop("decided_at")
    elif drop == "request_id":
        rec["request"].pop("request_id")
    m["approval_history"] = [rec]


def _add_message(item: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda m: m["messages"].append(item)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda m: m.__setitem__(key, value)


@pytest.mark.parametrize("name,edit,verdict", [
    ("updated_at_null", _set("updated_at", None), "corrupt"),
    ("updated_at_absent", lambda m: m.pop("updated_at"), "terminal"),
    ("verification_outcome_without_argv", lambda m: m["verification"][0].pop("argv"),
     "corrupt"),
    ("model_usage_empty_lane", _set("model_usage", [
        {"lane": "", "provider": "p", "model": "m"}]), "corrupt"),
    ("cost_empty_provider", _set("model_usage", [
        {"lane": "primary", "provider": "p", "model": "m",
         "cost": {"provider": "", "model": "m"}}]), "corrupt"),
    ("pending_empty_action_id", lambda m: m.__setitem__("pending_action", _pending(
        m, action_id="")), "corrupt"),
    ("nul_in_injected_context", _add_message({
        "item_type": "injected_context", "source": "context_pressure", "content": "a\x00b"}),
     "corrupt"),
    ("nul_in_pending_command_argv", lambda m: m.__setitem__("pending_action", _pending(
        m, tool_call=None, reason="final_verification", effect="execute",
        action_id="verification:c", command={"name": "c", "argv": ["pytest", "-q\x00"]})),
     "corrupt"),
    ("decided_at_absent", lambda m: _approval(m, "decided_at"), "terminal"),
    ("request_id_absent", lambda m: _approval(m, "request_id"), "terminal"),
    ("tool_call_id_absent", _add_message({
        "role": "assistant", "content": None,
        "tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}]}), "terminal"),
    ("item_type_absent", _add_message({"source": "ide_diagnostics", "content": "x"}),
     "terminal"),
])
def test_manifest_models_match_the_runner(make_run: Any, name: str, edit: Any,
                                          verdict: str) -> None:
    m = _manifest(edit)
    _check(make_run, manifest=m, verdict=verdict,
           reason="manifest_schema" if verdict == "corrupt" else None)


@pytest.mark.parametrize("name,edit,verdict", [
    ("nul_in_verification_argv", lambda r: r["verification"][0]["argv"].append("a\x00"),
     "corrupt"),
    ("enabled_skills_stripped", lambda r: r.__setitem__("enabled_skills", [" lint "]),
     "terminal"),
    ("enabled_skills_duplicate_after_strip", lambda r: r.__setitem__(
        "enabled_skills", ["lint", " lint"]), "corrupt"),
])
def test_request_model_matches_the_runner(make_run: Any, name: str, edit: Any,
                                          verdict: str) -> None:
    r = example_request()
    edit(r)
    _check(make_run, request=r, verdict=verdict,
           reason="request_invalid" if verdict == "corrupt" else None)


# --- class 5: fork seeds name the prefix's ids (§9.8) --------------------------------------
def test_fork_seed_ids_come_from_the_prefix(make_run: Any) -> None:
    edit = _line(LAST, lambda ln: ln.replace(b"{", b'{"conversation_id":"conv-1",', 1))
    run = make_run(events=_events(edit))
    code, out, _ = run_cli(["fork-seed", run, "--sequence", "3"])
    seed = json.loads(out)
    assert code == 0 and "source_conversation_id" not in seed
    assert seed["source_run_id"] == example_manifest()["run_id"]
    code, out, _ = run_cli(["fork-seed", run, "--sequence", str(LAST)])
    assert json.loads(out)["source_conversation_id"] == "conv-1"
    assert compare_run(Path(run)).ok


# --- class 6: replay refusals that are documented decisions (§9.8) -------------------------
def test_replay_refuses_an_integer_over_4300_digits(make_run: Any) -> None:
    edit = _line(7, _into_data('"k":' + "1" * 4301))
    _check(make_run, events=_events(edit), verdict="corrupt", replay_ok=False,
           replay_error="event JSONL line 8 has an integer of more than 4300 digits")


def test_replay_refuses_a_lone_surrogate_that_would_reach_the_output(make_run: Any) -> None:
    edit = _line(7, _into_data('"summary":"a\\ud800b"'))
    _check(make_run, events=_events(edit), verdict="corrupt", replay_ok=False,
           replay_error=oracle.SURROGATE_OUTPUT_MESSAGE)


def test_a_lone_surrogate_that_stays_out_of_the_output_is_replayed(make_run: Any) -> None:
    edit = _line(7, _into_data('"unshown":"a\\ud800b"'))
    _check(make_run, events=_events(edit), verdict="corrupt", replay_ok=True,
           readers_disagree=True)


def test_a_manifest_nested_past_the_recursion_limit_is_corrupt(make_run: Any) -> None:
    text = dumps(example_manifest()).replace(
        b'"messages":[', b'"messages":[{"role":"user","content":"x","provider_metadata":{"d":'
        + b"[" * 1000 + b"]" * 1000 + b"}},", 1)
    _check(make_run, manifest=text, verdict="corrupt", reason="manifest_invalid_json")


# --- class 7: every depth limit is explicit, never the remaining stack ----------------------
@pytest.mark.parametrize("depth,replay_ok", [(958, True), (959, False), (1000, False)])
def test_replay_depth_limit_is_explicit_and_audit_agrees(make_run: Any, depth: int,
                                                         replay_ok: bool) -> None:
    # the line's object and data add two levels: 958 + 2 = 960, the documented limit
    edit = _line(7, _into_data('"k":' + "[" * depth + "]" * depth))
    run = make_run(events=_events(edit))
    code, _, _ = run_cli(["replay", run, "--json"])
    assert (code == 0) == replay_ok

    def deep_stack(n: int) -> dict[str, Any]:
        return deep_stack(n - 1) if n else audit_run(run)

    old = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(3000)
        for frames in (0, 200, 2000):  # the answer never depends on the caller's stack
            rec = deep_stack(frames)
            assert rec["replay_accepts"] is replay_ok, rec["message"]
            assert rec["replay_accepts"] is replay_ok and rec["verdict"] == "corrupt"
    finally:
        sys.setrecursionlimit(old)
    assert compare_run(Path(run)).ok


# --- bad input is normal input for the tables too -------------------------------------------
def test_tables_survive_lone_surrogates_and_huge_sequences(make_run: Any) -> None:
    import rivumi_analysis

    def edit(lines: list[bytes]) -> list[bytes]:
        lines[3] = lines[3].replace(b'"event_type":"', b'"event_type":"\\ud800', 1)
        lines[5] = _into_data('"tool_name":"x\\udfff","\\udc00k":1')(lines[5])
        lines[7] = lines[7].replace(b'"sequence":7', b'"sequence":' + b"9" * 40, 1)
        return lines

    run = make_run(events=_events(edit))
    for name in ("runs_df", "events_df", "quarantine_df", "tool_calls_df", "approvals_df",
                 "model_calls_df", "states_df"):
        getattr(rivumi_analysis, name)(run)  # none raises
    events = rivumi_analysis.events_df(run)
    assert "\ufffd" in events.filter(events["line_no"] == 4)["event_type"].item()
    q = rivumi_analysis.quarantine_df(run)
    assert q.filter(q["line_no"] == 8)["reason"].item() == "bad_sequence"
    assert audit_run(run)["verdict"] == "corrupt"
