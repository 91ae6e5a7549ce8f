"""The resume verdict: what the runner's resume would decide for a run, and why (§8.1, §8.2).

A pure function of a :class:`~rivumi_analysis.read.snapshot.RunData`: no file access. Steps 1, 2
and 8 of §8.1 (lease, claim, workspace) are not evaluated: the toolkit is read-only and archived
runs usually lack ``workspace/``.

Decision order (the first that holds is the verdict; every condition that holds is listed):

1. ``not_resumable``: external run, no ``session.json``, or a fork whose manifest is rejected.
2. ``corrupt``: any failure of §8.1 steps 3–5 as §8.2 reads them.
3. manifest exactly one ahead: step 7 (side-effect tail) is skipped.
4. ``side_effect_uncertain``: the log ends at ``tool.started``/``verification.started``.
5. ``terminal``: the manifest is terminal.
6. ``resync`` when one ahead, else ``resumable``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress
from typing import Any

from pydantic import ValidationError

from .errors import VERDICT_REASONS
from .read import fast_models as _fast_models
from .read.cleanlog import CleanLog
from .read.io import RUNNER_FILE_LIMIT
from .read.models import (
    MANIFEST_KNOWN_KEYS,
    TERMINAL_PHASES,
    SessionManifest,
    TaskContract,
    first_error,
)
from .read.occurrences import reused_ids
from .read.resume_reader import read_for_resume
from .read.snapshot import RunData, atomic_leftovers

SIDE_EFFECT_STARTS = frozenset({"tool.started", "verification.started"})
TERMINAL_RUN_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled"})
_FILE_STATUS_REASON = {
    "symlink": "symlinked_file",
    "unreadable": "unreadable",
    "not_regular": "not_regular_file",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """A run's verdict with its reasons (verdict-level codes) and warnings, plus messages.

    Attributes:
        verdict: one of :data:`rivumi_analysis.errors.VERDICTS`.
        reasons: sorted verdict-level codes that hold.
        warnings: sorted auditor warnings.
        messages: ``code -> readable message`` (what, where, hint) for every code listed.
        manifest_valid: whether ``session.json`` passed the SessionManifest schema.
    """

    verdict: str
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    messages: dict[str, str]
    manifest_valid: bool


class _Collector:
    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.reasons: set[str] = set()
        self.warnings: set[str] = set()
        self.messages: dict[str, str] = {}

    def reason(self, code: str, message: str) -> None:
        assert code in VERDICT_REASONS, code
        self.reasons.add(code)
        self.messages.setdefault(code, message)

    def warn(self, code: str, message: str) -> None:
        self.warnings.add(code)
        self.messages.setdefault(code, message)


def decide(run: RunData) -> Verdict:
    """Decide the resume verdict of one run (pure; never raises for bad content).

    >>> from rivumi_analysis.read.snapshot import read_run
    >>> decide(read_run("/nonexistent-run")).verdict
    'not_resumable'
    """
    c = _Collector(run.run_dir)
    files = run.files
    where_events = f"{run.run_dir}/events.jsonl"

    # --- 1. not resumable by design ------------------------------------------------------
    session_status = files["session.json"].status
    if run.kind == "external":
        c.reason("external_run", f"{run.run_dir}: external run (no session manifest; §11.8); "
                 "hint: inspect its events with events_df, it cannot be resumed")
    if session_status == "missing":
        c.reason("manifest_missing", f"{run.run_dir}/session.json does not exist; "
                 "hint: without a manifest the runner cannot resume this run")

    # --- 2. corrupt: §8.1 step 3 (session.json) ----------------------------------------------
    manifest_model: Any = None  # SessionManifest or its msgspec twin (same attributes)
    manifest = run.manifest
    if session_status in _FILE_STATUS_REASON:
        code = _FILE_STATUS_REASON[session_status]
        c.reason(code, f"{run.run_dir}/session.json is {_status_words(session_status)}; "
                 "it was not read. hint: resume refuses it too")
    elif session_status == "too_large" or (files["session.json"].size or 0) > RUNNER_FILE_LIMIT:
        c.reason("manifest_too_large", f"{run.run_dir}/session.json is "
                 f"{files['session.json'].size} bytes, over the runner's 16 MiB limit")
    if session_status == "ok" and manifest is None:
        c.reason("manifest_invalid_json", f"{run.run_dir}/session.json: {run.manifest_error}; "
                 "hint: a killed non-atomic copy or a hand edit; resume refuses it")
    if manifest is not None:
        unknown = sorted(set(manifest) - MANIFEST_KNOWN_KEYS)
        if unknown:
            c.warn("manifest_unknown_key", f"{run.run_dir}/session.json has unknown key(s) "
                   f"{', '.join(unknown)}; the runner's strict loader rejects them")
        phase = manifest.get("phase")
        if isinstance(manifest.get("terminal"), bool) and isinstance(phase, str) and (
                manifest["terminal"] != (phase in TERMINAL_PHASES)):
            c.warn("terminal_phase_mismatch", f"{run.run_dir}/session.json: terminal="
                   f"{manifest['terminal']} but phase={phase!r}")
        try:
            # the msgspec twin answers for the documents the runner writes; pydantic (the
            # oracle) for everything else, and for every refusal (its exact message)
            manifest_model = (run.manifest_model or _fast_models.manifest(manifest)
                              or SessionManifest.model_validate(manifest))
        except ValidationError as exc:
            if run.kind == "fork":
                c.reason("fork_manifest_rejected", f"{run.run_dir}/session.json: fork manifest "
                         f"rejected by the strict loader ({first_error(exc)}); §9.5: a fork run "
                         "cannot be resumed")
            c.reason("manifest_schema", f"{run.run_dir}/session.json fails SessionManifest: "
                     f"{first_error(exc)}")
        except Exception as exc:  # pragma: no cover - defensive: odd values pydantic rejects
            c.reason("manifest_schema", f"{run.run_dir}/session.json: {exc}")

    # --- §8.1 step 4 (request.json, only when present) -------------------------------------
    req_status = files["request.json"].status
    if req_status == "missing":
        c.warn("request_missing", f"{run.run_dir}/request.json is absent; task_id/base_sha "
               "match (§8.1 step 4) not checked")
    elif req_status in _FILE_STATUS_REASON:
        c.reason(_FILE_STATUS_REASON[req_status], f"{run.run_dir}/request.json is "
                 f"{_status_words(req_status)}; it was not read")
    elif req_status == "too_large" or (files["request.json"].size or 0) > RUNNER_FILE_LIMIT:
        c.reason("request_invalid", f"{run.run_dir}/request.json is over the 16 MiB limit")
    elif run.request is None:
        c.reason("request_invalid", f"{run.run_dir}/request.json: {run.request_error}")
    else:
        try:
            contract = _fast_models.request(run.request) or TaskContract.model_validate(
                run.request)
        except ValidationError as exc:
            c.reason("request_invalid", f"{run.run_dir}/request.json fails TaskContract: "
                     f"{first_error(exc)}")
        else:
            if manifest_model is not None:
                if contract.task_id != manifest_model.task_id:
                    c.reason("request_mismatch", f"{run.run_dir}/request.json task_id "
                             f"{contract.task_id!r} != session.json {manifest_model.task_id!r}")
                elif contract.base_sha is None or (
                        contract.base_sha.lower() != manifest_model.base_sha.lower()):
                    c.reason("request_mismatch", f"{run.run_dir}/request.json base_sha "
                             f"{contract.base_sha!r} != session.json {manifest_model.base_sha!r}")

    # --- §8.1 step 5 (events.jsonl) as §8.2 reads it ------------------------------------------
    native_log = run.kind != "external"
    last_seq, tail = _check_events(run, c, manifest_model, native_log, where_events)

    # --- manifest vs log --------------------------------------------------------------------
    ahead = False
    lseq = manifest_model.last_event_sequence if manifest_model else _int_or_none(
        manifest.get("last_event_sequence") if manifest else None)
    if lseq is not None and last_seq is not None and native_log:
        if lseq < last_seq:
            c.reason("manifest_behind", f"{run.run_dir}/session.json last_event_sequence {lseq} "
                     f"is behind the log's last sequence {last_seq}; hint: the manifest is saved "
                     "before each append, so this never happens in a clean crash")
        elif lseq == last_seq + 1:
            ahead = True
            c.reason("manifest_ahead", f"{run.run_dir}/session.json last_event_sequence {lseq} is "
                     f"one ahead of the log ({last_seq}): killed between the manifest save and "
                     "the append; resume resyncs it")
        elif lseq > last_seq + 1:
            c.reason("manifest_ahead_by_more", f"{run.run_dir}/session.json last_event_sequence "
                     f"{lseq} is {lseq - last_seq} ahead of the log ({last_seq})")

    # the tail as resume reads it (two events joined by a lone CR are two events, §8.2)
    last = len(tail) - 1
    last_type = tail.event_types[last] if last >= 0 else None
    tail_side_effect = last_type in SIDE_EFFECT_STARTS
    if tail_side_effect and not ahead and native_log:
        c.reason("side_effect_tail", f"{where_events}:{tail.line_no(last)}:"
                 f"{tail.offset(last)}: the log ends at {last_type}; resume "
                 "cannot prove whether the action completed. hint: check the workspace by hand")
    if tail_side_effect and ahead:
        c.warn("completion_unlogged", f"{where_events}: the manifest is one ahead while the log "
               f"ends at {last_type}: the action ran, its completion was never logged")
    manifest_terminal = (manifest_model.terminal if manifest_model else
                         bool(manifest.get("terminal")) if isinstance(manifest, dict) else False)
    if manifest_terminal and native_log:
        c.reason("terminal", f"{run.run_dir}/session.json is terminal (phase "
                 f"{manifest.get('phase') if manifest else None!r}); resume refuses it "
                 "(continuation reopens it)")

    _auditor_warnings(run, c, manifest_model, ahead)

    # --- decide ----------------------------------------------------------------------------
    r = c.reasons
    if r & {"external_run", "manifest_missing", "fork_manifest_rejected"}:
        verdict = "not_resumable"
    elif r - {"manifest_ahead", "side_effect_tail", "terminal"}:
        verdict = "corrupt"
    elif "side_effect_tail" in r:
        verdict = "side_effect_uncertain"
    elif "terminal" in r:
        verdict = "terminal"
    elif ahead:
        verdict = "resync"
    else:
        verdict = "resumable"
    return Verdict(verdict, tuple(sorted(c.reasons)), tuple(sorted(c.warnings)), c.messages,
                   manifest_model is not None)


def _status_words(status: str) -> str:
    return {"symlink": "a symlink", "unreadable": "unreadable",
            "not_regular": "not a regular file"}.get(status, status)


def _int_or_none(v: Any) -> int | None:
    return v if type(v) is int else None


class _Events:
    """Events as the rules read them, in columns: gathered from event objects (the exact
    reading's ``Event`` s, with their ``data``, or resume's ``ResumeEvent`` s). A clean log's
    ``cleanlog.CleanLog`` has the same columns and methods, so every rule below is written
    once, over columns."""

    __slots__ = ("_events", "event_types", "run_ids", "sequences", "task_ids")

    def __init__(self, events: list[Any]) -> None:
        self._events = events
        self.event_types = [e.event_type for e in events]
        self.sequences = [e.sequence for e in events]
        self.run_ids = [e.run_id for e in events]
        self.task_ids = [e.task_id for e in events]

    def __len__(self) -> int:
        return len(self._events)

    @property
    def objects(self) -> list[dict[str, Any]]:
        """Every event's parsed ``data`` (``Event`` s only)."""
        return [e.data for e in self._events]

    def line_no(self, index: int) -> int:
        return self._events[index].line_no

    def offset(self, index: int) -> int:
        return self._events[index].byte_offset


Events = CleanLog | _Events


def _events_of(run: RunData) -> Events:
    """The run's events as columns: its clean log, or its ``Event`` s."""
    return run.fast if run.fast is not None else _Events(run.events)


def _check_events(run: RunData, c: _Collector, manifest: Any, native_log: bool,
                  where: str) -> tuple[int | None, Events]:
    """Apply §8.1 step 5 as resume reads the log (§8.2, §8.2).

    Returns the last sequence resume reads (-1 when empty; None when the log was not
    read) and the events whose last one is the log's tail as resume reads it.
    """
    unread = _check_log_file(run, c, manifest, native_log, where)
    if unread is not _READ:
        return unread, _events_of(run)
    _line_warnings(run, c, where)
    return _log_rules(run, c, manifest, native_log, where)


_READ = object()


def _check_log_file(run: RunData, c: _Collector, manifest: Any, native_log: bool,
                    where: str) -> Any:
    """The file checks of ``events.jsonl``: :data:`_READ` when its lines are to be read,
    else the last sequence to report (-1 for a missing log, None for one not read)."""
    status = run.events_status
    fr = run.files["events.jsonl"]
    if status == "missing":
        if native_log and run.files["session.json"].status == "ok":
            lseq = manifest.last_event_sequence if manifest else None
            if lseq is None or lseq != -1:
                c.reason("events_missing", f"{where} does not exist but session.json "
                         f"last_event_sequence is {lseq}; hint: the writer was killed before the "
                         "first append (§9.6 note)")
        return -1
    if status in _FILE_STATUS_REASON:
        c.reason(_FILE_STATUS_REASON[status], f"{where} is {_status_words(status)}; it was not "
                 "read")
        return None
    if status == "too_large":
        c.reason("events_too_large", f"{where} is {fr.size} bytes, over the toolkit's read bound")
        return None
    if (fr.size or 0) > RUNNER_FILE_LIMIT and native_log:
        c.reason("events_too_large", f"{where} is {fr.size} bytes, over the runner's 16 MiB "
                 "limit; hint: the log is still analysed, but resume refuses it")
    return _READ


def _line_warnings(run: RunData, c: _Collector, where: str) -> None:
    """Quarantined and blank lines, and the events' warnings (a clean log has none)."""
    lines = run.lines
    quarantined = [ln for ln in lines if ln.status == "quarantined"]
    if quarantined:
        first = quarantined[0]
        c.warn("quarantined_lines", f"{where}:{first.line_no}:{first.byte_offset}: "
               f"{len(quarantined)} line(s) quarantined, first: {first.reason}: {first.message}")
    if any(ln.status == "blank" for ln in lines):
        c.warn("blank_lines", f"{where}: blank or whitespace-only lines (skipped by the runner)")
    for e in run.events:
        for w in e.warnings:
            if w in ("coerced_value", "nan_or_infinity", "duplicate_key", "crlf",
                     "final_newline_missing", "line_too_long_for_replay",
                     "created_at_missing", "event_id_missing"):
                c.warn(w, f"{where}:{e.line_no}:{e.byte_offset}: {w.replace('_', ' ')}")


def _log_rules(run: RunData, c: _Collector, manifest: Any, native_log: bool,
               where: str) -> tuple[int, Events]:
    """The sequence rules over the events resume reads from a log that was read, and those
    events (see :func:`_check_events`)."""
    if not native_log:
        log = _events_of(run)
        return (log.sequences[-1] if len(log) else -1), log
    if run.fast is not None:  # resume reads a clean log's lines as its events, in order
        log, order = run.fast, None
    else:
        resumed = read_for_resume(run.events_bytes or b"", run.lines, run.events)
        for err in resumed.errors:
            c.reason(err.code, f"{where}:{err.line_no}:{err.byte_offset}: {err.message}")
        log, order = _Events(resumed.events), resumed.order
    _sequence_rules(log, order, c, manifest, where)
    return (log.sequences[-1] if len(log) else -1), log


def _sequence_rules(log: Events, order: list[tuple[str, int]] | None, c: _Collector,
                    manifest: Any, where: str) -> None:
    """Duplicate and non-contiguous sequences, run and task id drift, over the events resume
    reads (``order``: its pieces, ``("event", i)`` or a refused piece; None: every piece is
    an event, in order)."""
    seqs = log.sequences
    n = len(seqs)
    if order is not None or seqs != list(range(n)):
        first_line: dict[int, int] = {}
        for i, seq in enumerate(seqs):
            if seq in first_line:
                c.reason("duplicate_sequence", f"{where}:{log.line_no(i)}:{log.offset(i)}: "
                         f"sequence {seq} already appeared at line {first_line[seq]}; hint: an "
                         "emit without the lock (§4.5 hazard)")
                break
            first_line[seq] = log.line_no(i)
        # Contiguity is a fact about what resume reads: its i-th non-blank piece needs
        # sequence i.
        pieces = order if order is not None else [("event", i) for i in range(n)]
        for index, (what, i) in enumerate(pieces):
            if what == "event" and seqs[i] != index:
                c.reason("sequence_not_contiguous", f"{where}:{log.line_no(i)}:{log.offset(i)}: "
                         f"piece {index} of the log (as resume splits it) has sequence "
                         f"{seqs[i]}; resume needs {index}")
                break
    if manifest is not None:
        run_ids = log.run_ids
        if run_ids.count(manifest.run_id) != n:
            i = next(i for i, r in enumerate(run_ids) if r != manifest.run_id)
            c.reason("run_id_drift", f"{where}:{log.line_no(i)}:{log.offset(i)}: run_id "
                     f"{run_ids[i]!r} != manifest {manifest.run_id!r}")
        task_ids = log.task_ids
        if not {*task_ids} <= {None, manifest.task_id}:
            i = next(i for i, t in enumerate(task_ids)
                     if t is not None and t != manifest.task_id)
            c.reason("task_id_drift", f"{where}:{log.line_no(i)}:{log.offset(i)}: task_id "
                     f"{task_ids[i]!r} != manifest {manifest.task_id!r}")


def _auditor_warnings(run: RunData, c: _Collector, manifest: SessionManifest | None,
                      ahead: bool) -> None:
    name = run.run_dir.rstrip("/").rsplit("/", 1)[-1]
    if run.run_id and name != run.run_id and run.kind != "subagent" and run.kind != "external":
        c.warn("run_id_mismatch_dirname", f"{run.run_dir}: run_id {run.run_id!r} differs from "
               f"the directory name {name!r}")
    leftovers = atomic_leftovers(run.listing)
    if leftovers:
        c.warn("atomic_write_leftover", f"{run.run_dir}/{leftovers[0]}: temp file left by a "
               "killed atomic write (ignored by the runner)")
    if run.writer_active:
        c.warn("writer_active", f"{run.run_dir}/.writer.lock is held by a live process; the "
               "run is being written")
    if run.live_changed:
        c.warn("live_changed", f"{run.run_dir}: session.json kept changing while read; no "
               "stable snapshot (verdict is provisional)")
    if (run.writer_lock_token and manifest is not None and manifest.active_writer_token
            and run.writer_lock_token != manifest.active_writer_token):
        c.warn("writer_token_mismatch", f"{run.run_dir}/.writer.lock token differs from "
               "session.json active_writer_token")
    if run.files["checkpoint.json"].status == "ok" and not isinstance(run.checkpoint, dict):
        c.warn("checkpoint_invalid", f"{run.run_dir}/checkpoint.json is not a JSON object")
    if run.files["result.json"].status == "ok" and not isinstance(run.result, dict):
        c.warn("result_invalid", f"{run.run_dir}/result.json is not a JSON object")
    for fname in ("session.json", "request.json"):
        if (run.files[fname].size or 0) > RUNNER_FILE_LIMIT:
            c.warn("file_too_large_for_runner", f"{run.run_dir}/{fname} exceeds 16 MiB")

    _event_warnings(run, _events_of(run), c, manifest, ahead)


_COUNTERS = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens")


def _usage_compare(run: RunData, c: _Collector, manifest: SessionManifest,
                   logged: list[Any] | None) -> None:
    """Compare the manifest's usage with its ``model_usage`` records (``logged`` None) or
    with the ``usage`` of the logged model completions."""

    def total(u: dict[str, Any]) -> int:
        ptt = u.get("provider_total_tokens")
        if isinstance(ptt, int):
            return ptt
        return int(u.get("input_tokens") or 0) + int(u.get("output_tokens") or 0)

    if logged is None and isinstance(manifest, _fast_models.SessionManifest):
        _usage_compare_struct(run, c, manifest)
        return
    if logged is None:
        recs = [r.usage.model_dump() for r in manifest.model_usage]
        basis = "model_usage records"
    else:
        recs = [r for r in logged if isinstance(r, dict)]
        basis = "model.completed usage"
    mu = manifest.usage.model_dump()
    try:
        sums = {k: sum(int(r.get(k) or 0) for r in recs) for k in _COUNTERS}
        ptt = sum(total(r) for r in recs)
    except (TypeError, ValueError):
        return
    mismatch = [k for k in _COUNTERS if sums[k] != mu[k]]
    if recs and (mu["provider_total_tokens"] or 0) != ptt:
        mismatch.append("provider_total_tokens")
    if mismatch:
        c.warn("usage_unreconciled", f"{run.run_dir}/session.json usage differs from the sum of "
               f"{basis} in {', '.join(mismatch)}")


def _usage_compare_struct(run: RunData, c: _Collector, manifest: Any) -> None:
    """:func:`_usage_compare` against ``model_usage`` for the msgspec manifest (non-negative
    ints, so ``int(v or 0)`` is ``v``), without a dict per record."""
    usages = [r.usage for r in manifest.model_usage]
    mu = manifest.usage
    mismatch = [k for k in _COUNTERS
                if sum([getattr(u, k) for u in usages]) != getattr(mu, k)]
    ptt = sum([u.input_tokens + u.output_tokens if u.provider_total_tokens is None
               else u.provider_total_tokens for u in usages])
    if usages and (mu.provider_total_tokens or 0) != ptt:
        mismatch.append("provider_total_tokens")
    if mismatch:
        c.warn("usage_unreconciled", f"{run.run_dir}/session.json usage differs from the sum of "
               f"model_usage records in {', '.join(mismatch)}")


_APPROVAL_CLOSERS = ("approval.resolved", "approval.abandoned")
_USAGE_EVENTS = ("model.completed", "role_lane.completed")
_WIND_DOWN = ("loop.wind_down_completed", "loop.wind_down_failed")
# the event types the event-level auditor rules read (the others only count for positions)
_RULE_TYPES = frozenset({
    "tool.started", "tool.completed", "approval.requested", *_APPROVAL_CLOSERS,
    "model.requested", *TERMINAL_RUN_EVENTS, *_USAGE_EVENTS, *_WIND_DOWN,
})


def _reused_id_warnings(c: _Collector, where: str, reused: tuple[set[str], set[str]]) -> None:
    """``duplicate_tool_call_id`` / ``duplicate_request_id``: an id that opens more than one
    call or approval (tool_calls_df and approvals_df keep a row for each, keyed by line)."""
    for code, what, ids in (("duplicate_tool_call_id", "tool_call_id", reused[0]),
                            ("duplicate_request_id", "request_id", reused[1])):
        if ids:
            shown = ", ".join(sorted(ids)[:3]) + (f" (+{len(ids) - 3} more)" if len(ids) > 3
                                                  else "")
            c.warn(code, f"{where}: {len(ids)} {what}(s) used by more than one call: {shown} "
                   "(paired by occurrence)")


def _event_warnings(run: RunData, log: Events, c: _Collector, manifest: Any,
                    ahead: bool) -> None:
    """The event-level part of :func:`_auditor_warnings`, over the run's events as columns
    (a clean log's own, or its ``Event`` s gathered: one rule set for both; the rules over
    event objects they replaced are ``tests/oracles/resume_objects.py``)."""
    where = f"{run.run_dir}/events.jsonl"
    types = log.event_types
    objs = log.objects
    n = len(types)
    # the indices of the rule-relevant events, found by C-level iteration (no Python loop)
    picked = [(i, types[i]) for i in compress(range(n), map(_RULE_TYPES.__contains__, types))]
    paired = {t for t in set(types) if t.startswith(("tool.", "approval.")) or t in (
        "model.requested", "session.resumed", "session.continued")}
    _reused_id_warnings(c, where, reused_ids(
        (types[i], objs[i]) for i in compress(range(n), map(paired.__contains__, types))))
    # Unclosed pairs are anomalies only when the run moved on past them (a later model step
    # or terminal event); at the tail they are what a crash leaves, which the verdict covers.
    last_progress = -1
    for i, t in picked:
        if t == "model.requested" or t in TERMINAL_RUN_EVENTS:
            last_progress = i
    started: dict[str, int] = {}
    completed: set[str] = set()
    requested: dict[str, int] = {}
    closed: set[str] = set()
    terminal: list[int] = []
    for i, t in picked:
        if t == "tool.started" or t == "tool.completed":
            tcid = objs[i].get("tool_call_id")
            if not isinstance(tcid, str):
                continue
            if t == "tool.started":
                started[tcid] = i
            else:
                completed.add(tcid)
                if tcid not in started and objs[i].get("preview") is not None:
                    c.warn("tool_unpaired", f"{where}:{log.line_no(i)}:{log.offset(i)}: "
                           f"tool.completed for {tcid} has no tool.started")
        elif t == "approval.requested" or t in _APPROVAL_CLOSERS:
            rid = objs[i].get("request_id")
            if not isinstance(rid, str):
                continue
            if t == "approval.requested":
                requested[rid] = i
            else:
                closed.add(rid)
                if t == "approval.resolved" and rid not in requested:
                    c.warn("approval_unpaired", f"{where}:{log.line_no(i)}:{log.offset(i)}: "
                           f"approval.resolved {rid} has no approval.requested")
        elif t in TERMINAL_RUN_EVENTS:
            terminal.append(i)
    for tcid, i in started.items():
        if tcid not in completed and i < last_progress:
            c.warn("tool_unpaired", f"{where}:{log.line_no(i)}:{log.offset(i)}: tool.started "
                   f"for {tcid} never completed")
            break
    for rid, i in requested.items():
        if rid not in closed and i < last_progress:
            c.warn("approval_unpaired", f"{where}:{log.line_no(i)}:{log.offset(i)}: approval "
                   f"{rid} was never resolved")
            break
    pending = manifest.pending_action if manifest is not None else None
    if pending is not None and not ahead:
        known = {objs[i].get("request_id") for i in range(n) if types[i].startswith("approval.")}
        # pending_action is cleared by the first save after the start is durable, so it may
        # still be set when the start is the log's last event (a crash right after it).
        seqs = log.sequences
        requested_at = next((seqs[i] for i in range(n)
                             if objs[i].get("request_id") == pending.request_id), -1)
        action_started = any(
            types[i] in SIDE_EFFECT_STARTS and i != n - 1 and (
                objs[i].get("tool_call_id") == pending.action_id
                or f"verification:{objs[i].get('name')}" == pending.action_id)
            for i in range(n) if seqs[i] > requested_at)
        if pending.request_id not in known or action_started:
            c.warn("pending_action_inconsistent", f"{run.run_dir}/session.json pending_action "
                   f"{pending.request_id} ({pending.action_id}) "
                   + ("has no approval event in the log" if pending.request_id not in known
                      else "was already started, so it should have been cleared"))
    # result.json vs the last terminal run.* event
    result = run.result if isinstance(run.result, dict) else None
    if result is not None and run.kind != "external":
        if not terminal:
            c.warn("result_without_terminal_event", f"{run.run_dir}/result.json exists but the "
                   "log has no terminal run.* event")
        else:
            last = terminal[-1]
            status = types[last].split(".", 1)[1]
            reason = objs[last].get("terminal_reason")
            if result.get("status") != status or result.get("terminal_reason") != reason:
                c.warn("result_disagrees", f"{run.run_dir}/result.json status/terminal_reason "
                       f"{result.get('status')}/{result.get('terminal_reason')} != last "
                       f"{types[last]} {reason}")
    if manifest is not None and not ahead:
        if manifest.model_usage:
            _usage_compare(run, c, manifest, None)
        elif not any(t in _WIND_DOWN for _i, t in picked) and not any(
                # the wind-down call's usage is logged nowhere, nor the crossing call's (§11.1)
                objs[i].get("terminal_reason") == "token_budget_exceeded" for i in terminal):
            _usage_compare(run, c, manifest,
                           [objs[i].get("usage") for i, t in picked if t in _USAGE_EVENTS])
        _wall_time_check(run, c, manifest)


def _wall_time_check(run: RunData, c: _Collector, manifest: Any) -> None:
    limits = (run.request or {}).get("limits") if isinstance(run.request, dict) else None
    budget = limits.get("wall_time_seconds") if isinstance(limits, dict) else None
    if isinstance(budget, (int, float)) and manifest.active_wall_time_seconds > budget + 1.0:
        c.warn("wall_time_over_budget", f"{run.run_dir}/session.json active_wall_time_seconds"
               f" {manifest.active_wall_time_seconds:.1f} > limit {budget}")
