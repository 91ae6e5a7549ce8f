"""The per-run audit record (what the ``audit`` command prints per run).

The fleet audit, :func:`rivumi_analysis.fleet_audit.audit`, runs :func:`audit_chunk` over
chunks of runs (``read.executor``) or serves the records from the store.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .errors import VERDICTS
from .read.cleanlog import CleanLog
from .read.discovery import RunLocation, check_sources, expand_path
from .read.snapshot import RunData, gc_paused, read_run
from .resume import TERMINAL_RUN_EVENTS, decide

SCHEMA_VERSION = 1

RECORD_FIELDS: tuple[str, ...] = (
    "schema_version", "run_dir", "run_id", "kind", "verdict", "reasons", "warnings", "message",
    "lines", "blank_lines", "events", "quarantined_lines", "first_sequence", "last_sequence",
    "manifest_last_event_sequence", "phase", "terminal_reason", "replay_accepts",
    "replay_error", "parent_run_dir",
)
"""Every key of an audit record, in output order (null, never absent, when unknown)."""


@dataclass(frozen=True, slots=True)
class AuditResult:
    """Records (sorted by ``run_dir``) and the paths discovery skipped."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    root_used: str | None = None

    def to_json_obj(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "runs": self.runs, "skipped": self.skipped}

    def to_json_text(self) -> str:
        """What ``audit --format json`` prints, without its final newline.

        The text of ``json.dumps(self.to_json_obj(), ensure_ascii=False, indent=1)``, encoded
        by msgspec (~7x faster for a fleet; a record holds no float, so every value is written
        alike, ``tests/test_audit_cold.py``); a string with a lone surrogate (a path that is not
        UTF-8) falls back to ``json.dumps``.

        >>> print(AuditResult(skipped=[{"path": "/r/x", "reason": "symlink"}]).to_json_text())
        {
         "schema_version": 1,
         "runs": [],
         "skipped": [
          {
           "path": "/r/x",
           "reason": "symlink"
          }
         ]
        }
        """
        obj = self.to_json_obj()
        try:
            return msgspec.json.format(msgspec.json.encode(obj), indent=1).decode("utf-8")
        except (UnicodeError, TypeError, msgspec.EncodeError):
            import json

            return json.dumps(obj, ensure_ascii=False, indent=1)


def _replay_verdict(run: RunData) -> tuple[bool | None, str | None]:
    from .replay.proof import run_replay_verdict

    return run_replay_verdict(run)


def record_from_run(run: RunData) -> dict[str, Any]:
    """Build the JSON-ready audit record of one run (pure; see :data:`RECORD_FIELDS`)."""
    v = decide(run)
    manifest = run.manifest or {}
    lseq = manifest.get("last_event_sequence")
    phase = manifest.get("phase")
    terminal_reason = None
    clean = run.fast if isinstance(run.fast, CleanLog) else None
    if clean is not None:  # every line an accepted event, no blank or quarantined line
        seqs = clean.sequences
        n_lines = n_events = len(seqs)
        n_blank = n_quarantined = 0
        types = clean.event_types
        for i in range(len(types) - 1, -1, -1):
            if types[i] in TERMINAL_RUN_EVENTS:
                tr = clean.objects[i].get("terminal_reason")
                terminal_reason = tr if isinstance(tr, str) else None
                break
    else:
        lines = run.lines
        events = run.events
        seqs = [e.sequence for e in events]
        n_lines, n_events = len(lines), len(events)
        n_blank = sum(1 for ln in lines if ln.status == "blank")
        n_quarantined = sum(1 for ln in lines if ln.status == "quarantined")
        for e in reversed(events):
            if e.event_type in TERMINAL_RUN_EVENTS:
                tr = e.data.get("terminal_reason")
                terminal_reason = tr if isinstance(tr, str) else None
                break
    if terminal_reason is None and isinstance(run.result, dict):
        tr = run.result.get("terminal_reason")
        terminal_reason = tr if isinstance(tr, str) else None
    reasons = list(v.reasons)
    warnings = set(v.warnings)
    messages = dict(v.messages)
    replay_accepts, replay_error = _replay_verdict(run)
    if replay_accepts is not None and run.kind != "external" and run.events_status == "ok":
        resume_accepts = not (set(reasons) & _RESUME_LOG_REASONS)
        if resume_accepts != replay_accepts:
            warnings.add("readers_disagree")
            messages.setdefault("readers_disagree", (
                f"{run.run_dir}/events.jsonl: resume's reading "
                f"{'accepts' if resume_accepts else 'refuses'} the log, replay "
                f"{'accepts' if replay_accepts else 'refuses'} it"
                + (f" ({replay_error})" if replay_error else "")))
    first_code = next((c for c in reasons if c not in ("terminal",)), None) or (
        reasons[0] if reasons else None)
    message = messages.get(first_code) if first_code else None
    return {
        "schema_version": SCHEMA_VERSION,
        "run_dir": run.run_dir,
        "run_id": run.run_id,
        "kind": run.kind,
        "verdict": v.verdict,
        "reasons": reasons,
        "warnings": sorted(warnings),
        "message": message,
        "lines": n_lines,
        "blank_lines": n_blank,
        "events": n_events,
        "quarantined_lines": n_quarantined,
        "first_sequence": min(seqs) if seqs else None,
        "last_sequence": max(seqs) if seqs else None,
        "manifest_last_event_sequence": lseq if type(lseq) is int else None,
        "phase": phase if isinstance(phase, str) else None,
        "terminal_reason": terminal_reason,
        "replay_accepts": replay_accepts,
        "replay_error": replay_error,
        "parent_run_dir": run.parent_run_dir,
    }


# Verdict reasons that come from resume's reading of events.jsonl (§8.1 step 5).
_RESUME_LOG_REASONS = frozenset({
    "events_too_large", "invalid_event_line", "torn_tail", "event_extra_key",
    "line_separator_split", "bom", "sequence_not_contiguous", "duplicate_sequence",
    "run_id_drift", "task_id_drift",
})


def error_record(loc: RunLocation, exc: BaseException) -> dict[str, Any]:
    """The record of a run the toolkit failed on: verdict ``error``, reason ``internal_error``."""
    rec: dict[str, Any] = dict.fromkeys(RECORD_FIELDS)
    tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
    rec.update(schema_version=SCHEMA_VERSION, run_dir=loc.run_dir, kind=None, verdict="error",
               reasons=["internal_error"], warnings=[],
               message=f"{loc.run_dir}: internal error: {tb}; hint: please report this run",
               lines=0, blank_lines=0, events=0, quarantined_lines=0,
               parent_run_dir=loc.parent_run_dir)
    return rec


def audit_run(run_dir: str, *, is_subagent: bool = False,
              parent_run_dir: str | None = None) -> dict[str, Any]:
    """Audit one run directory and return its record. Never raises for bad content.

    Raises:
        SourceError: ``run_dir`` does not exist (``source_missing``) or is not a directory
            (``source_not_directory``): a wrong path is a usage error, as on the command
            line, not an "external run" with no files.

    >>> rec = audit_run("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e")
    >>> rec["verdict"], rec["quarantined_lines"], rec["events"]
    ('terminal', 0, 50)
    """
    run_dir = expand_path(run_dir)  # ``~`` and ``$VARS``, as in every path argument
    check_sources([run_dir])
    return _audit_one(run_dir, is_subagent, parent_run_dir)


def _audit_one(run_dir: str, is_subagent: bool, parent_run_dir: str | None) -> dict[str, Any]:
    # a run found by discovery that vanished since is an error record, not an exception
    loc = RunLocation(run_dir, is_subagent, parent_run_dir)
    try:
        return record_from_run(read_run(run_dir, is_subagent=is_subagent,
                                        parent_run_dir=parent_run_dir, clean=True))
    except Exception as exc:  # one bad run must not stop a fleet audit
        return error_record(loc, exc)


def audit_records(runs: list[RunData]) -> list[dict[str, Any]]:
    """The record of each run read already (an error record where the audit raises)."""
    out = []
    for run in runs:
        try:
            out.append(record_from_run(run))
        except Exception as exc:  # one bad run must not stop a fleet audit
            out.append(error_record(RunLocation(run.run_dir, run.is_subagent,
                                                run.parent_run_dir), exc))
    return out


LOCKS_BATCH = 64
"""Runs audited per read of ``/proc/locks`` (which writer locks are held)."""


def audit_chunk(locations: list[RunLocation]) -> list[dict[str, Any]]:
    """The records of some runs, each read as the audit reads it and dropped before the next
    (what a worker runs; memory bounded by the largest run)."""
    from .read.incremental import proc_locked_keys

    out = []
    locks = None
    with gc_paused():  # parsing builds many containers and no cycles: no collector passes
        for n, loc in enumerate(locations):
            if n % LOCKS_BATCH == 0:
                locks = proc_locked_keys()
            try:
                run = read_run(loc.run_dir, is_subagent=loc.is_subagent,
                               parent_run_dir=loc.parent_run_dir, clean=True,
                               held_locks=locks)
                out.append(record_from_run(run))
            except Exception as exc:  # one bad run must not stop a fleet audit
                out.append(error_record(loc, exc))
    return out


def iter_records(locations: list[RunLocation],
                 progress: Callable[[int], None] | None = None) -> Iterator[dict[str, Any]]:
    """Audit runs one at a time (memory bounded by the largest run)."""
    for loc in locations:
        yield _audit_one(loc.run_dir, loc.is_subagent, loc.parent_run_dir)
        if progress is not None:
            progress(1)


def format_table(runs: list[dict[str, Any]], skipped: list[dict[str, str]]) -> str:
    """The human-readable audit table (what ``audit --format table`` prints), with a summary."""
    heads = ("RUN", "KIND", "VERDICT", "EVENTS", "QUAR", "REASONS")
    # a run another process is writing (its lock is held) is marked live: its verdict is
    # that of the snapshot read
    rows = [[_short(r["run_dir"], 60), r["kind"] or "-",
             r["verdict"] + (" (live)" if "writer_active" in r["warnings"] else ""),
             str(r["events"]), str(r["quarantined_lines"]), ",".join(r["reasons"]) or "-"]
            for r in runs]
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in rows]
    counts: dict[str, int] = {}
    for r in runs:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    summary = ", ".join(f"{v} {counts[v]}" for v in VERDICTS if v in counts) or "no runs"
    live = sum(1 for r in runs if "writer_active" in r["warnings"])
    lines.append(f"\n{len(runs)} run(s): {summary}" + (f"; {live} live (being written)"
                                                        if live else ""))
    for s in skipped:
        lines.append(f"skipped: {s['path']} ({s['reason']})")
    return "\n".join(lines) + "\n"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]
