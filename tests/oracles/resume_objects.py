"""The oracle of the resume rules that read events: §8.1 step 5 as resume reads the log and
the auditor's event rules, over per-event objects (``RunData.events`` and resume's own
``ResumeEvent`` s), as the package ran them before issue 28 wrote them once over columns
(``rivumi_analysis.resume._log_rules``, ``_sequence_rules`` and ``_event_warnings``).

:func:`decide` is the package's ``resume.decide`` with ``_log_rules`` and ``_event_warnings``
replaced by the versions below (everything else, the file, line and manifest checks, is
shared: it has one implementation and is not what the oracle checks). ``tests/test_cleanlog.py`` and
``tests/test_resume_oracle.py`` compare the package's verdicts with this one's. Takes a run
read exactly (``read.snapshot.exact_run``).
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from rivumi_analysis import resume
from rivumi_analysis.read.occurrences import reused_ids
from rivumi_analysis.read.resume_reader import read_for_resume
from rivumi_analysis.read.snapshot import Event, RunData
from rivumi_analysis.resume import (
    SIDE_EFFECT_STARTS,
    TERMINAL_RUN_EVENTS,
    Verdict,
    _Collector,
    _usage_compare,
    _wall_time_check,
)

__all__ = ["decide"]


def decide(run: RunData) -> Verdict:
    """``resume.decide`` with the event rules over objects (``run`` read exactly)."""
    assert run.fast is None, "the oracle reads event objects: pass exact_run(run)"
    with mock.patch.object(resume, "_log_rules", _log_rules), \
            mock.patch.object(resume, "_event_warnings", _event_warnings):
        return resume.decide(run)


class _Tail:
    """The log's last event as resume reads it, where ``resume.decide`` looks for it."""

    def __init__(self, event: Any) -> None:
        self.event_types = [event.event_type] if event is not None else []
        self._event = event

    def __len__(self) -> int:
        return len(self.event_types)

    def line_no(self, _index: int) -> int:
        return self._event.line_no

    def offset(self, _index: int) -> int:
        return self._event.byte_offset


def _log_rules(run: RunData, c: _Collector, manifest: Any, native_log: bool,
               where: str) -> tuple[int, _Tail]:
    last_seq, resume_log = _log_rule_objects(run, c, manifest, native_log, where)
    # the tail as resume reads it (two events joined by a lone CR are two events, §8.2)
    last_event = (resume_log.events[-1] if resume_log is not None and resume_log.events
                  else run.events[-1] if resume_log is None and run.events else None)
    return last_seq, _Tail(last_event)


def _log_rule_objects(run: RunData, c: _Collector, manifest: Any, native_log: bool,
                      where: str) -> tuple[int, Any]:
    if not native_log:
        return (run.events[-1].sequence if run.events else -1), None

    log = read_for_resume(run.events_bytes or b"", run.lines, run.events)
    for err in log.errors:
        c.reason(err.code, f"{where}:{err.line_no}:{err.byte_offset}: {err.message}")
    events = log.events
    first_line: dict[int, int] = {}
    for e in events:
        if e.sequence in first_line:
            c.reason("duplicate_sequence", f"{where}:{e.line_no}:{e.byte_offset}: sequence "
                     f"{e.sequence} already appeared at line {first_line[e.sequence]}; hint: an "
                     "emit without the lock (§4.5 hazard)")
            break
        first_line[e.sequence] = e.line_no
    # Contiguity is a fact about what resume reads: its i-th non-blank piece needs sequence i.
    for index, (what, k) in enumerate(log.order):
        if what == "event" and events[k].sequence != index:
            e = events[k]
            c.reason("sequence_not_contiguous", f"{where}:{e.line_no}:{e.byte_offset}: piece "
                     f"{index} of the log (as resume splits it) has sequence {e.sequence}; "
                     f"resume needs {index}")
            break
    if manifest is not None:
        for e in events:
            if e.run_id != manifest.run_id:
                c.reason("run_id_drift", f"{where}:{e.line_no}:{e.byte_offset}: run_id "
                         f"{e.run_id!r} != manifest {manifest.run_id!r}")
                break
        for e in events:
            if e.task_id is not None and e.task_id != manifest.task_id:
                c.reason("task_id_drift", f"{where}:{e.line_no}:{e.byte_offset}: task_id "
                         f"{e.task_id!r} != manifest {manifest.task_id!r}")
                break
    return (events[-1].sequence if events else -1), log


def _event_warnings(run: RunData, _columns: Any, c: _Collector, manifest: Any,
                    ahead: bool) -> None:
    where = f"{run.run_dir}/events.jsonl"
    events = run.events
    resume._reused_id_warnings(c, where, reused_ids((e.event_type, e.data) for e in events))
    # pairing of tool and approval events (tail side effects are the verdict's business)
    started: dict[str, Event] = {}
    completed: set[str] = set()
    for e in events:
        tcid = e.data.get("tool_call_id")
        if e.event_type == "tool.started" and isinstance(tcid, str):
            started[tcid] = e
        elif e.event_type == "tool.completed" and isinstance(tcid, str):
            completed.add(tcid)
            if tcid not in started and e.data.get("preview") is not None:
                c.warn("tool_unpaired", f"{where}:{e.line_no}:{e.byte_offset}: tool.completed "
                       f"for {tcid} has no tool.started")
    # Unclosed pairs are anomalies only when the run moved on past them (a later model step or
    # terminal event); at the tail they are what a crash leaves, which the verdict covers.
    moved_on_after = _moved_on_index(events)
    for tcid, e in started.items():
        if tcid not in completed and moved_on_after(e):
            c.warn("tool_unpaired", f"{where}:{e.line_no}:{e.byte_offset}: tool.started for "
                   f"{tcid} never completed")
            break
    requested: dict[str, Event] = {}
    closed: set[str] = set()
    for e in events:
        rid = e.data.get("request_id")
        if not isinstance(rid, str):
            continue
        if e.event_type == "approval.requested":
            requested[rid] = e
        elif e.event_type in ("approval.resolved", "approval.abandoned"):
            closed.add(rid)
            if e.event_type == "approval.resolved" and rid not in requested:
                c.warn("approval_unpaired", f"{where}:{e.line_no}:{e.byte_offset}: "
                       f"approval.resolved {rid} has no approval.requested")
    open_requests = [rid for rid in requested if rid not in closed]
    pending = manifest.pending_action if manifest is not None else None
    for rid in open_requests:
        if moved_on_after(requested[rid]):
            e = requested[rid]
            c.warn("approval_unpaired", f"{where}:{e.line_no}:{e.byte_offset}: approval "
                   f"{rid} was never resolved")
            break
    if pending is not None and not ahead:
        known = {e.data.get("request_id") for e in events if e.event_type.startswith("approval.")}
        requested_at = _request_seq(events, pending.request_id)
        action_started = any(
            e.event_type in SIDE_EFFECT_STARTS and e is not events[-1] and (
                e.data.get("tool_call_id") == pending.action_id
                or f"verification:{e.data.get('name')}" == pending.action_id)
            for e in events
            if e.sequence > requested_at)
        if pending.request_id not in known or action_started:
            c.warn("pending_action_inconsistent", f"{run.run_dir}/session.json pending_action "
                   f"{pending.request_id} ({pending.action_id}) "
                   + ("has no approval event in the log" if pending.request_id not in known
                      else "was already started, so it should have been cleared"))

    # result.json vs the last terminal run.* event
    terminal_events = [e for e in events if e.event_type in TERMINAL_RUN_EVENTS]
    result = run.result if isinstance(run.result, dict) else None
    if result is not None and run.kind != "external":
        if not terminal_events:
            c.warn("result_without_terminal_event", f"{run.run_dir}/result.json exists but the "
                   "log has no terminal run.* event")
        else:
            t = terminal_events[-1]
            status = t.event_type.split(".", 1)[1]
            if result.get("status") != status or result.get("terminal_reason") != t.data.get(
                    "terminal_reason"):
                c.warn("result_disagrees", f"{run.run_dir}/result.json status/terminal_reason "
                       f"{result.get('status')}/{result.get('terminal_reason')} != last "
                       f"{t.event_type} {t.data.get('terminal_reason')}")

    if manifest is not None and not ahead:
        _usage_check(run, c, manifest, terminal_events)
        _wall_time_check(run, c, manifest)


def _moved_on_index(events: list[Event]):
    """``f(event) -> bool``: whether a model step or terminal event follows ``event``."""
    last_progress = -1
    for i, e in enumerate(events):
        if e.event_type == "model.requested" or e.event_type in TERMINAL_RUN_EVENTS:
            last_progress = i
    position = {id(e): i for i, e in enumerate(events)}
    return lambda e: position.get(id(e), len(events)) < last_progress


def _request_seq(events: list[Event], request_id: str) -> int:
    for e in events:
        if e.data.get("request_id") == request_id:
            return e.sequence
    return -1


def _usage_check(run: RunData, c: _Collector, manifest: Any,
                 terminal_events: list[Event]) -> None:
    if manifest.model_usage:
        _usage_compare(run, c, manifest, None)
        return
    if any(e.event_type in ("loop.wind_down_completed", "loop.wind_down_failed")
           for e in run.events):
        return  # the wind-down call's usage is logged nowhere (§11.1)
    if any(e.data.get("terminal_reason") == "token_budget_exceeded" for e in terminal_events):
        return  # the crossing call has no model.completed (§11.1)
    _usage_compare(run, c, manifest, [e.data.get("usage") for e in run.events if e.event_type in (
        "model.completed", "role_lane.completed")])
