"""Ground truth of generated runs: what the writer wrote, recorded while it wrote it.

The synthetic writer (:mod:`rivumi_analysis.synth.writer`) knows every call, approval, model
call and terminal event it puts on disk, and which events belong together, without reading
anything back: a tool call's ``tool.started`` is the one the writer emitted for *that* call
object, whatever id it carries. :class:`RunTruth` collects these facts per run; the generators
write them into one ``truth.jsonl`` beside the runs (``sample_runs/truth.jsonl``, a corpus's
``<out>/truth.jsonl``), one JSON object per run, sorted by ``run`` (the run directory relative
to the file's folder). The runner never writes such a file and the loaders never read it (it
is not a run directory, nor inside one); it is for tests only: a table is right when it
equals this truth, not when two of the toolkit's own paths agree.

Record keys (every record has all of them):

* ``run``, ``run_id``, ``kind`` (``native``, ``subagent``, ``fork``, ``external``),
  ``parent`` (the parent's ``run`` for a subagent), ``scenario``, ``seed``, ``profile``.
* ``files``: the run files left on disk (``session.json``, ``result.json``, ...): a run
  whose manifest was dropped (as in some published runs) has ``"session.json": false``.
* ``lines``: events written (physical lines of ``events.jsonl``).
* ``provider`` / ``model``: of ``run.created`` (or the last ``session.resumed|continued``).
* ``steps``: ``model.requested`` events written (the cumulative step counter).
* ``turns``: process segments that wrote the run (1 + resumes + continuations);
  ``resumes`` / ``continuations`` count them apart.
* ``terminal_events``: ``[{line_no, status, terminal_reason}]``, one per ``run.*`` event.
* ``outcome``: ``completed`` / ``failed`` / ``cancelled`` (the run's last turn ended with that
  terminal event), ``crashed`` (the writer process died after its last terminal event, or
  without one), ``unfinished`` (the writer stopped writing without dying or finishing),
  ``fork`` (a fork run: one ``run.forked`` line, never run). External runs: their
  ``result.json`` status.
* ``terminal_reason``: of the last terminal event when ``outcome`` is one of the three
  statuses, else null.
* ``usage``: one record per model call the runner accounted, in order:
  ``{lane, provider, model, input_tokens, output_tokens, cached_input_tokens,
  reasoning_tokens, provider_total_tokens, total_tokens, logged}``; ``logged`` says whether an
  event carries the call's usage (``model.completed``, ``role_lane.completed``); the wind-down
  call and the primary call that crossed the token budget are not logged.
* ``tokens``: per lane (``primary``, ``wind_down``, ``reviewer``) the sums of ``usage`` and
  ``calls``; ``total_tokens``: the sum over every lane (docs/run-format.md §11.1).
* ``tool_calls``: one record per call the log holds, in order of its first line:
  ``{line_no, requested_line_no, started_line_no, completed_line_no, tool_call_id, name,
  effect, step, outcome}`` (outcome as ``tool_calls_df.outcome``).
* ``approvals``: one record per approval occurrence: ``{line_no, requested_line_no,
  closed_line_no, request_id, action_id, tool_call_line_no, effect, outcome, decision}``
  (``tool_call_line_no``: the line of the call it approves, null for final verification).
* ``active_wall_time_seconds``: the writer's charged wall time at its last manifest save;
  ``started_at`` / ``ended_at``: first and last event ``created_at``.

>>> t = RunTruth("r1", run_id="r1", kind="native")
>>> t.record()["outcome"], t.record()["tool_calls"]
('unfinished', [])
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["TRUTH_FILE", "RunTruth", "TruthLog", "read_truth", "write_truth"]

TRUTH_FILE = "truth.jsonl"
"""The truth file's name, beside the runs it describes."""

LANES = ("primary", "wind_down", "reviewer")
_COUNTERS = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens",
             "total_tokens")
_TERMINAL = {"run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled"}


class RunTruth:
    """What the writer put into one run directory (see the module docstring for the keys).

    Writers report events with :meth:`line` once the line is written, and the protocol
    facts (which call or approval a line opens or closes) with the ``call_*`` and
    ``approval_*`` methods, keyed by a token the writer holds for the occurrence.

    Args:
        run: the run directory relative to the truth file's folder (POSIX separators).
        run_id: the run's id.
        kind: ``native``, ``subagent``, ``fork`` or ``external``.
        parent: the parent's ``run`` (subagents).
        scenario / seed / profile: what generated it.
    """

    def __init__(self, run: str, *, run_id: str | None, kind: str, parent: str | None = None,
                 scenario: str | None = None, seed: int | None = None,
                 profile: str | None = None) -> None:
        self.run, self.run_id, self.kind, self.parent = run, run_id, kind, parent
        self.scenario, self.seed, self.profile = scenario, seed, profile
        self.lines = 0
        self.provider: str | None = None
        self.model: str | None = None
        self.steps = 0
        self.step: int | None = None
        self.resumes = 0
        self.continuations = 0
        self.terminal_events: list[dict[str, Any]] = []
        self.died = False
        self.torn = False
        self.outcome_override: tuple[str, str | None] | None = None
        self.usage: list[dict[str, Any]] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.approvals: list[dict[str, Any]] = []
        self.files: dict[str, bool] = {}
        self.active_wall_time_seconds: float | None = None
        self.started_at: str | None = None
        self.ended_at: str | None = None
        self._calls: dict[Any, dict[str, Any]] = {}
        self._approvals: dict[Any, dict[str, Any]] = {}
        self._turn_start = 0  # line of the last session.resumed/continued (0: none)
        self._last_requested: int | None = None  # line of the last tool.requested
        self.waiting_approval: Any = None

    # ------------------------------------------------------------------ lines
    def line(self, event_type: str, data: Mapping[str, Any], created_at: str | None) -> int:
        """Count one written event line; returns its 1-based line number."""
        self.lines += 1
        if created_at is not None:
            self.started_at = self.started_at or created_at
            self.ended_at = created_at
        if event_type == "run.created" or event_type in ("session.resumed", "session.continued"):
            self.provider, self.model = data.get("provider"), data.get("model")
            if event_type != "run.created":
                self._turn_start = self.lines
            self.resumes += event_type == "session.resumed"
            self.continuations += event_type == "session.continued"
        elif event_type == "model.requested":
            self.steps += 1
            self.step = data.get("step")
        elif event_type in _TERMINAL:
            self.terminal_events.append({"line_no": self.lines, "status": _TERMINAL[event_type],
                                         "terminal_reason": data.get("terminal_reason")})
        return self.lines

    # ------------------------------------------------------------------ tool calls
    def call_requested(self, token: Any, call: Mapping[str, Any], effect: str | None,
                       line_no: int) -> None:
        """A ``tool.requested`` line opened a new call occurrence."""
        rec = {"line_no": line_no, "requested_line_no": line_no, "started_line_no": None,
               "completed_line_no": None, "tool_call_id": call["tool_call_id"],
               "name": call["name"], "effect": effect, "step": self.step,
               "outcome": "not_started"}
        self.tool_calls.append(rec)
        self._calls[token] = rec
        self._last_requested = line_no

    def call_started(self, token: Any, line_no: int) -> None:
        """The ``tool.started`` line of the occurrence ``token``."""
        rec = self._calls[token]
        rec["started_line_no"], rec["outcome"] = line_no, "in_flight"

    def call_completed(self, token: Any, call: Mapping[str, Any], line_no: int, *, ok: bool,
                       executed: bool, error: str | None) -> None:
        """The ``tool.completed`` line of ``token``; an unknown tool's opens its own call."""
        rec = self._calls.pop(token, None)
        if rec is None:  # an unknown tool: no tool.requested was written
            rec = {"line_no": line_no, "requested_line_no": None, "started_line_no": None,
                   "completed_line_no": None, "tool_call_id": call["tool_call_id"],
                   "name": call["name"], "effect": None, "step": self.step,
                   "outcome": "not_started"}
            self.tool_calls.append(rec)
        rec["completed_line_no"] = line_no
        err = error or ""
        rec["outcome"] = (("ok" if ok else "error") if executed else
                          "unknown_tool" if err.startswith("Unknown tool") else
                          "denied" if "denied" in err else "not_executed")

    # ------------------------------------------------------------------ approvals
    def approval_opened(self, token: Any, req: Mapping[str, Any], line_no: int) -> None:
        """An ``approval.requested`` line opened an approval occurrence."""
        rec = {"line_no": line_no, "requested_line_no": line_no, "closed_line_no": None,
               "request_id": req["request_id"], "action_id": req["action_id"],
               "tool_call_line_no": self._call_of(req), "effect": req["effect"],
               "outcome": "open", "decision": None}
        self.approvals.append(rec)
        self._approvals[token] = rec
        self.waiting_approval = token

    def approval_closed(self, token: Any, outcome: str, decision: str | None,
                        line_no: int) -> None:
        """The ``approval.resolved`` / ``approval.abandoned`` line of ``token``."""
        rec = self._approvals.pop(token)
        rec.update(closed_line_no=line_no, outcome=outcome, decision=decision)
        if self.waiting_approval == token:
            self.waiting_approval = None

    def approval_reused(self, req: Mapping[str, Any], line_no: int) -> None:
        """An ``approval.reused`` line: an occurrence opened and closed by one line."""
        self.approvals.append({
            "line_no": line_no, "requested_line_no": None, "closed_line_no": line_no,
            "request_id": req["request_id"], "action_id": req["action_id"],
            "tool_call_line_no": self._call_of(req), "effect": req["effect"],
            "outcome": "reused", "decision": "allow_once"})

    def _call_of(self, req: Mapping[str, Any]) -> int | None:
        # a tool's approval is asked right after the writer requested that call
        return self._last_requested if req.get("tool_call") else None

    # ------------------------------------------------------------------ usage, end
    def model_usage(self, usage: Mapping[str, Any], *, lane: str, provider: str | None,
                    model: str | None, logged: bool) -> None:
        """One model call's usage as the runner accounts it (stored form, no total)."""
        total = (usage["provider_total_tokens"] if usage.get("provider_total_tokens")
                 is not None else usage["input_tokens"] + usage["output_tokens"])
        self.usage.append({"lane": lane, "provider": provider, "model": model,
                           **{k: usage[k] for k in _COUNTERS[:4]},
                           "provider_total_tokens": usage.get("provider_total_tokens"),
                           "total_tokens": int(total), "logged": logged})

    def mark_logged(self) -> None:
        """The last usage record's event (``model.completed``, ``role_lane.completed``) was
        written: its usage is in the log."""
        self.usage[-1]["logged"] = True

    def approval_abandoned(self, req: Mapping[str, Any], line_no: int) -> None:
        """``approval.abandoned`` on resume: it closes the approval that was open when the
        previous process died (the writer knows which: the one it was waiting on)."""
        if self.waiting_approval is not None:
            self.approval_closed(self.waiting_approval, "abandoned", None, line_no)
            return
        self.approvals.append({
            "line_no": line_no, "requested_line_no": None, "closed_line_no": line_no,
            "request_id": req["request_id"], "action_id": req["action_id"],
            "tool_call_line_no": None, "effect": req["effect"], "outcome": "abandoned",
            "decision": None})

    def die(self) -> None:
        """The writing process died here (a crash, a kill)."""
        self.died = True

    def outcome(self) -> tuple[str, str | None]:
        """``(outcome, terminal_reason)`` (see the module docstring)."""
        if self.outcome_override is not None:  # forks, external runs
            return self.outcome_override
        last = self.terminal_events[-1] if self.terminal_events else None
        if last is not None and last["line_no"] > self._turn_start:
            return last["status"], last["terminal_reason"]  # the last turn ended with it
        return ("crashed" if self.died else "unfinished"), None

    def record(self) -> dict[str, Any]:
        """The JSON-ready truth record of the run."""
        outcome, reason = self.outcome()
        tokens = {lane: {"calls": 0, **dict.fromkeys(_COUNTERS, 0)} for lane in LANES}
        for u in self.usage:
            lane = tokens.setdefault(u["lane"], {"calls": 0, **dict.fromkeys(_COUNTERS, 0)})
            lane["calls"] += 1
            for k in _COUNTERS:
                lane[k] += u[k]
        return {
            "run": self.run, "run_id": self.run_id, "kind": self.kind, "parent": self.parent,
            "scenario": self.scenario, "seed": self.seed, "profile": self.profile,
            "files": dict(sorted(self.files.items())), "lines": self.lines,
            "torn_tail": self.torn,
            "provider": self.provider, "model": self.model, "steps": self.steps,
            "turns": 1 + self.resumes + self.continuations, "resumes": self.resumes,
            "continuations": self.continuations,
            "terminal_events": list(self.terminal_events), "outcome": outcome,
            "terminal_reason": reason, "usage": list(self.usage), "tokens": tokens,
            "total_tokens": sum(u["total_tokens"] for u in self.usage),
            "tool_calls": sorted(self.tool_calls, key=lambda r: r["line_no"]),
            "approvals": sorted(self.approvals, key=lambda r: r["line_no"]),
            "active_wall_time_seconds": self.active_wall_time_seconds,
            "started_at": self.started_at, "ended_at": self.ended_at,
        }

    def look_at_files(self, run_dir: str) -> None:
        """Note which run files the generator left (after any it dropped on purpose)."""
        names = ("session.json", "request.json", "events.jsonl", "checkpoint.json",
                 "result.json")
        self.files = {n: os.path.isfile(os.path.join(run_dir, n)) for n in names}


class TruthLog:
    """The truth records of every run a generator writes below ``root``.

    Args:
        root: the folder ``truth.jsonl`` goes into; ``run`` paths are relative to it.
        prefix: put before every ``run`` path (a run written elsewhere first, e.g. the
            in-process replica of a killed run).
    """

    def __init__(self, root: str | os.PathLike[str], prefix: str = "") -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.prefix = prefix
        self.runs: list[RunTruth] = []

    def rel(self, run_dir: str | os.PathLike[str]) -> str:
        """``run_dir`` as a ``run`` path."""
        rel = os.path.relpath(os.path.abspath(os.fspath(run_dir)), self.root)
        return "/".join(p for p in (self.prefix, rel.replace(os.sep, "/")) if p)

    def add(self, run_dir: str | os.PathLike[str], **kwargs: Any) -> RunTruth:
        """A new :class:`RunTruth` for ``run_dir`` (keyword arguments as RunTruth's)."""
        t = RunTruth(self.rel(run_dir), **kwargs)
        self.runs.append(t)
        return t

    def records(self) -> list[dict[str, Any]]:
        """Every run's record, sorted by ``run``."""
        return sorted((t.record() for t in self.runs), key=lambda r: r["run"])


def write_truth(path: str | os.PathLike[str], records: Iterable[Mapping[str, Any]]) -> None:
    """Write ``records`` as ``truth.jsonl`` (sorted by ``run``; sorted keys; one per line)."""
    rows = sorted(records, key=lambda r: r["run"])
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for r in rows:
            fh.write(json.dumps(r, sort_keys=True, ensure_ascii=False,
                                separators=(",", ":")) + "\n")


def read_truth(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """``run`` -> truth record, from a ``truth.jsonl`` (or the folder holding one)."""
    p = os.fspath(path)
    if os.path.isdir(p):
        p = os.path.join(p, TRUTH_FILE)
    with open(p, encoding="utf-8") as fh:
        return {r["run"]: r for r in map(json.loads, fh) if r}
