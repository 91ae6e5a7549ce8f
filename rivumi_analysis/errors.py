"""One error hierarchy and the registry of stable reason codes.

Every problem the toolkit reports carries a *code*: a short, stable, snake_case string that
scripts can match on. Codes never change meaning once published; new ones may be added.

Codes come in four families:

* ``VERDICT_REASONS``: verdict-level facts about a run (they decide or explain the verdict).
* ``WARNINGS``: what the runner tolerates (or does not look at) but a careful auditor flags.
* ``QUARANTINE_REASONS``: why a physical line of ``events.jsonl`` is not an accepted event.
* ``SKIP_REASONS``: why discovery did not enter a path.

>>> VERDICT_REASONS["torn_tail"].startswith("events.jsonl ends")
True
>>> "bom" in EVENT_WARNINGS
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

VERDICTS: tuple[str, ...] = (
    "resumable",
    "resync",
    "side_effect_uncertain",
    "terminal",
    "corrupt",
    "not_resumable",
    "error",
)
"""Every verdict name, in the order the decision procedure tries them (``error`` last)."""

OUTCOMES: tuple[str, ...] = (
    "completed", "failed", "cancelled", "interrupted", "crashed", "live", "fork_not_run",
    "unreadable")
"""Every value of ``runs_df.outcome``, in report order (defined in
``rivumi_analysis.tables.facts``)."""

FACT_DEFINITIONS: Mapping[str, str] = {
    "outcome": (
        "completed, failed or cancelled: the suffix of the last terminal run.* event of the "
        "last turn (an external run: result.json status); otherwise live (the writer lock is "
        "held), fork_not_run (a fork run whose log holds only run.forked), interrupted "
        "(session.json shows an orderly stop: clock stopped, not waiting on an approval, "
        "every saved event logged) or crashed (anything else, including a log without "
        "session.json); unreadable: the run could not be read (discovery could not list it, "
        "or the toolkit failed on it)"),
    "terminal_reason": "data.terminal_reason of that terminal event (external: result.json)",
    "step": "the highest model.requested data.step (cumulative; 0 when the log has none)",
    "total_tokens": (
        "primary + reviewer + wind_down tokens (§9.1). From the log (model.completed and "
        "role_lane.completed usage.total_tokens) when it holds every call: no wind-down "
        "summary and no call that crossed the token budget; otherwise the model_usage "
        "records of result.json/session.json, else usage.total_tokens of result.json, "
        "checkpoint.json or session.json; null when none has it"),
    "primary_tokens": "sum of model.completed usage.total_tokens (lane primary)",
    "reviewer_tokens": "sum of role_lane.completed usage.total_tokens (lane reviewer)",
    "wind_down_tokens": (
        "0 when the log has no loop.wind_down_completed; else the wind_down model_usage "
        "records (the log holds no usage for that call)"),
    "provider_name": "provider of the last run.created/session.resumed/session.continued",
    "model_id": "model of that same event",
    "wall_time_used_seconds": (
        "seconds from the last turn's first event (run.created or session.continued) to the "
        "log's last event: elapsed time, including approval waits and resume downtime "
        "(the budget's charged time is active_wall_time_seconds, session.json)"),
    "started_at": "created_at of the log's first event",
    "ended_at": "created_at of the log's last event",
}
"""What each run fact of ``runs_df`` is (``tables.facts`` computes them; the data
dictionary and the report's closing note say the same)."""

VERDICT_REASONS: Mapping[str, str] = {
    "external_run": "an external (Codex/Claude Code) run: it has no session manifest and is never resumable (§11.8)",
    "manifest_missing": "there is no session.json entry at all, so resume has nothing to load",
    "fork_manifest_rejected": "a fork run whose session.json the runner's strict loader rejects (computed usage.total_tokens, §9.5)",
    "manifest_invalid_json": "session.json is not valid UTF-8 JSON",
    "manifest_schema": "session.json parses but fails the SessionManifest schema (unknown key, wrong type, validator)",
    "manifest_too_large": "session.json is larger than the runner's 16 MiB limit",
    "request_invalid": "request.json is too large, not JSON, or fails the TaskContract schema",
    "request_mismatch": "request.json task_id or base_sha differs from session.json (or base_sha is null)",
    "events_missing": "events.jsonl is absent although the manifest says events were written",
    "events_too_large": "events.jsonl is larger than the runner's 16 MiB limit",
    "invalid_event_line": "a non-blank events.jsonl line fails the runner's strict RunEvent validation",
    "torn_tail": "events.jsonl ends with a partial line (no final newline and not a valid event)",
    "event_extra_key": "an event line has a top-level key RunEvent does not allow",
    "line_separator_split": "a raw U+2028/U+2029/NEL or other str.splitlines() separator splits an event line for resume (§8.2)",
    "bom": "events.jsonl starts with a UTF-8 BOM, which resume's text reader does not strip",
    "sequence_not_contiguous": "event sequences do not run 0,1,2,... in file order (gap, out of order, or not starting at 0)",
    "duplicate_sequence": "two events carry the same sequence",
    "run_id_drift": "an event's run_id differs from the manifest's",
    "task_id_drift": "an event's non-null task_id differs from the manifest's",
    "manifest_behind": "session.json last_event_sequence is lower than the last logged sequence",
    "manifest_ahead_by_more": "session.json last_event_sequence is two or more ahead of the log",
    "manifest_ahead": "session.json is exactly one event ahead of the log (crash between save and append); resume resyncs",
    "side_effect_tail": "the log ends at tool.started/verification.started: resume cannot prove the action completed",
    "terminal": "the manifest is terminal (completed, failed or cancelled); resume refuses it",
    "symlinked_file": "session.json, request.json or events.jsonl is a symlink; it is never read",
    "unreadable": "a run file exists but cannot be read (permissions or I/O error)",
    "not_regular_file": "a run file is not a regular file (FIFO, device, directory); it is never opened",
    "internal_error": "the toolkit hit an unexpected error on this run; see the message",
}

WARNINGS: Mapping[str, str] = {
    "request_missing": "request.json is absent, so step 4 of resume (task/base_sha match) was not checked",
    "final_newline_missing": "the last line is a complete event but lacks its trailing newline",
    "crlf": "a line ends with CR LF instead of LF",
    "blank_lines": "events.jsonl contains blank or whitespace-only lines",
    "coerced_value": "a value was accepted only through pydantic's lax coercion (e.g. sequence \"5\" or 5.0)",
    "nan_or_infinity": "a NaN or Infinity literal appears (not standard JSON)",
    "duplicate_key": "a JSON object repeats a key; the last value wins",
    "created_at_missing": "an event has no created_at",
    "event_id_missing": "an event has no event_id",
    "line_too_long_for_replay": "a line exceeds replay's 131072-byte bound (resume accepts it)",
    "quarantined_lines": "some events.jsonl lines are not accepted events (see quarantine_df)",
    "run_id_mismatch_dirname": "run_id differs from the run directory's name",
    "tool_unpaired": "a tool.started has no tool.completed (or a completion has no start), not at the tail",
    "approval_unpaired": "an approval.requested has no resolution/abandonment, or a resolution has no request",
    "duplicate_tool_call_id": "a tool_call_id opens more than one call in the run (providers reuse ids across turns); tool_calls_df pairs by occurrence, one row per call",
    "duplicate_request_id": "a request_id opens more than one approval in the run; approvals_df pairs by occurrence, one row per approval",
    "pending_action_inconsistent": "pending_action in session.json does not match an open approval or unstarted action in the log",
    "result_disagrees": "result.json status or terminal_reason disagrees with the last terminal run.* event",
    "result_without_terminal_event": "result.json exists but the log has no terminal run.* event",
    "usage_unreconciled": "manifest usage does not equal the sum of model.completed usage (nor model_usage records)",
    "completion_unlogged": "the manifest is one ahead while the log ends at a side-effect start: the action ran, its completion was never logged",
    "atomic_write_leftover": "a .<name>.<random> temp file left by a killed atomic write",
    "writer_token_mismatch": ".writer.lock token differs from the manifest's active_writer_token",
    "writer_active": "another process holds the run's writer lock (a live run)",
    "live_changed": "the run kept changing while it was read; no stable snapshot was had",
    "terminal_phase_mismatch": "session.json terminal disagrees with phase",
    "wall_time_over_budget": "active_wall_time_seconds exceeds limits.wall_time_seconds",
    "manifest_unknown_key": "session.json has a key the newest SessionManifest does not know",
    "readers_disagree": "resume's reading of events.jsonl and replay's reading disagree on whether the log is acceptable",
    "checkpoint_invalid": "checkpoint.json is present but is not a JSON object",
    "result_invalid": "result.json is present but is not a JSON object",
    "file_too_large_for_runner": "a run file exceeds the runner's 16 MiB limit (still analysed)",
    "subagents_unreadable": "the run's subagents/ folder could not be listed",
    "fact_disagrees": "a run fact read from events.jsonl (outcome, terminal reason, steps, tokens, provider, model) disagrees with session.json, result.json or checkpoint.json: runs_df keeps the log's value, drift_df has a <fact>@<file> row",
}

EVENT_WARNINGS: Mapping[str, str] = {
    "event_extra_key": "the line has a top-level key RunEvent does not allow",
    "coerced_value": "sequence or another field was accepted only through lax coercion",
    "nan_or_infinity": "a NaN or Infinity literal appears in the line",
    "duplicate_key": "a JSON object in the line repeats a key (last value wins)",
    "bom": "the line starts with a UTF-8 BOM",
    "created_at_missing": "no created_at key",
    "event_id_missing": "no event_id key",
    "final_newline_missing": "a complete final line without its trailing newline",
    "crlf": "the line ends with CR before LF",
    "line_separator_split": "the line contains a character str.splitlines() splits on (U+2028, U+2029, NEL, ...)",
    "invalid_event_line": "the line fails the runner's strict RunEvent validation (wrong type of run_id, task_id, data, ...)",
    "line_too_long_for_replay": "the line exceeds 131072 bytes",
}

QUARANTINE_REASONS: Mapping[str, str] = {
    "torn_tail": "a final segment without newline that is not an accepted event (wins over the others)",
    "invalid_utf8": "the line is not valid UTF-8",
    "json_syntax": "the line is not valid JSON",
    "not_object": "the line is JSON but not an object",
    "bad_sequence": "sequence is missing, negative, not an integer under pydantic's lax rules, or beyond 64 bits",
    "bad_event_type": "event_type is missing, not a string, or empty",
}

SKIP_REASONS: Mapping[str, str] = {
    "symlink": "a symlink below the given path: never followed",
    "not_regular": "neither a directory nor a regular file (FIFO, socket, device)",
    "unreadable": "a directory that could not be listed",
    "depth_limit": "a directory below the discovery depth limit",
}

# --- relayflowd journals (issue 14; spec: relayflowd-journal.md) -----------------------------

RELAY_ENTRY_TYPES: frozenset[str] = frozenset({
    "run.spawned", "run.cancel.requested", "run.completed",
    "event.received", "subscription.registered", "subscription.matched", "subscription.stale",
    "subscription.prepared", "subscription.opened", "subscription.closed",
    "subscription.overflow.fenced", "subscription.acknowledged",
    "step.routed", "step.attempt.started", "step.completed",
    "wait.event", "wait.human", "sleep.until", "wait.completed",
    "stream.appended", "memory.injected",
    "channel.appended", "channel.delivered", "channel.acknowledged",
    "effect.recorded", "effect.confirmed",
    "epoch.summary", "segment.closed",
})
"""The 28 relayflowd entry types of ``relayflowd-core/src/entry.rs @ f6b82904`` (§6)."""

RELAY_UNREADABLE_REASONS: Mapping[str, str] = {
    "journal_busy": "the .sqlite3 or its -wal kept changing while copied (5 attempts, 50 ms apart)",
    "not_sqlite": "the file does not start with the 16 bytes 'SQLite format 3\\0' (empty, truncated or not SQLite)",
    "sqlite_error": "SQLite could not open or query the private copy (corrupt or malformed database)",
    "quick_check_failed": "PRAGMA quick_check did not return exactly one row 'ok'",
    "meta_invalid": "the meta table is missing or has no non-empty run_id",
    "journal_version_unsupported": "meta.journal_version is not '1'",
    "schema_invalid": "the segments or entries table is missing or lacks a column of the run-file schema",
    "wal_not_regular": "the -wal beside the .sqlite3 is a symlink or not a regular file; never read",
    "too_large": "the file is larger than the toolkit's read bound",
    "unreadable": "the file cannot be read (permissions or I/O error)",
    "internal_error": "the toolkit hit an unexpected error on this journal; see the message",
}

RELAY_QUARANTINE_REASONS: Mapping[str, str] = {
    "torn_tail": "the final line has no newline and does not parse (a torn write)",
    "invalid_utf8": "the line is not valid UTF-8",
    "json_syntax": "the line is not RFC 8259 JSON (NaN/Infinity and out-of-range numbers included)",
    "not_object": "the line (or journal_read element) is JSON but not an object",
    "shape_mismatch": "the line parses but has another shape than the file's (jsonl/replay_json/journal_read)",
    "replay_mismatch": "a replay_json line whose kind or step_id differs from its event",
    "entries_not_array": "a journal_read page whose entries is not an array",
    "missing_field": "an envelope field (seq, segment_id, entry_type, run_id, step_id, attempt, at_ms, payload) is absent",
    "bad_field_type": "an envelope field has the wrong JSON/SQLite type (e.g. seq 1.0, attempt \"1\")",
    "bad_field_value": "an envelope field is out of range (seq or segment_id < 1, attempt outside 0..2^32-1, empty run_id)",
    "unsafe_integer": "an envelope integer is outside +-(2^53-1)",
    "payload_invalid_json": "a SQLite payload that is not valid JSON text",
    "payload_not_object": "the payload is valid JSON but not an object",
    "unknown_entry_type": "entry_type is not one of the 28 known types (vocabulary drift): kept out of the rules",
}

RELAY_WARNINGS: Mapping[str, str] = {
    "run_id_file_mismatch": "the file name is not <meta.run_id>.sqlite3 (the run id comes from meta)",
    "payload_not_canonical": "a SQLite payload is valid JSON but not canonical (key order or whitespace); the kernel never writes one",
    "payload_unsafe_integer": "a payload integer is outside +-(2^53-1) (a JS reader would refuse it)",
    "duplicate_key": "a JSON object repeats a key (the last value wins)",
    "at_ms_backwards": "at_ms decreases from one seq to the next (not a violation: order is by seq)",
    "final_newline_missing": "the last line parses but lacks its trailing newline",
    "crlf": "a line ends with CR LF (the CR is dropped)",
    "blank_lines": "the file contains blank lines (skipped, not counted)",
    "segments_table_inconsistent": "the segments table does not start at opened_seq 1 or is not increasing",
}

RELAY_SKIP_REASONS: Mapping[str, str] = {
    "symlink": "a symlink: never followed",
    "not_regular": "a FIFO, socket or device: never opened",
    "registry": "relayflowd.sqlite3 is the run registry, not a journal",
    "wal_without_database": "a -wal whose .sqlite3 is missing is not a journal",
    "shm_without_database": "a -shm whose .sqlite3 is missing is not a journal",
    "not_a_journal": "a .jsonl file with no line of a journal shape",
    "unreadable": "a directory that could not be listed, or a file that could not be read",
}

RELAY_RULES: Mapping[str, str] = {
    "C1": "channel payload decodes (channel, offset, producer/consumer, message_id, message, delivery_seq)",
    "C2": "channel.appended: step_id = producer",
    "C3": "channel.appended: offset = applied appends on the channel + 1 (dense, 1-based)",
    "C4": "channel.appended: (producer, message_id) not already appended on the channel",
    "C5": "channel.delivered: step_id = consumer",
    "C6": "channel.delivered: offset = acked(channel, consumer) + 1",
    "C7": "channel.delivered: an applied append exists at that offset",
    "C8": "channel.delivered: message equals the appended message as a JSON value (1 != 1.0)",
    "C9": "channel.delivered: no applied delivery has this seq",
    "C10": "channel.acknowledged: step_id = consumer",
    "C11": "channel.acknowledged: delivery_seq names an applied delivery of the same channel and consumer",
    "C12": "channel.acknowledged: offset = that delivery's offset",
    "C13": "channel.acknowledged: offset = acked(channel, consumer) + 1",
    "D1": "channel entry after an applied run.cancel.requested",
    "D2": "channel caller missing, not in the spec, or not an agent step",
    "D3": "channel.appended to a channel the producer does not declare in surfaces.streams",
    "D4": "channel caller is not the step's running attempt",
    "J1": "entry of another run, or segment_id not a valid/current segment",
    "J2": "entry after an applied run.completed",
    "J3": "stream.appended offset is not head + 1 (0-based)",
    "J4": "effect entry without step/attempt/keys, wrong deduped, or confirm without holding the election",
    "J5": "memory.injected twice for a step",
    "J6": "step.routed without a spec step, with an attempt, or routed twice",
    "F": "fold error: start/completion/wait/sleep/memory without step (or attempt) or not in the spec; agent success without end_pins",
    "DEAD": "an attempt start never completed although the step restarted or the run completed",
}

ALL_CODES: Mapping[str, Mapping[str, str]] = {
    "verdict reasons": VERDICT_REASONS,
    "warnings": WARNINGS,
    "event warnings": EVENT_WARNINGS,
    "quarantine reasons": QUARANTINE_REASONS,
    "skip reasons": SKIP_REASONS,
    "relay unreadable reasons": RELAY_UNREADABLE_REASONS,
    "relay quarantine reasons": RELAY_QUARANTINE_REASONS,
    "relay warnings": RELAY_WARNINGS,
    "relay skip reasons": RELAY_SKIP_REASONS,
    "relay rules": RELAY_RULES,
}


class RivumiAnalysisError(Exception):
    """Base class of every error the toolkit raises on purpose.

    Attributes:
        code: stable reason code (see :mod:`rivumi_analysis.errors`).
        where: ``file:line:byte`` (or a path) the problem is about, or ``None``.
        hint: what the user can do about it.
    """

    code: str = "error"

    def __init__(self, message: str, *, code: str | None = None, where: str | None = None,
                 hint: str | None = None) -> None:
        self.message = message
        if code is not None:
            self.code = code
        self.where = where
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        text = f"[{self.code}] {self.message}"
        if self.where:
            text += f"\n  at {self.where}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class SourceError(RivumiAnalysisError):
    """A source given to a loader does not exist, is a regular file, or no run root was found."""

    code = "bad_source"


class QuarantineError(RivumiAnalysisError):
    """Raised by loaders with ``strict=True`` when at least one line was quarantined.

    Attributes:
        quarantine: the quarantine table (a polars DataFrame) with one row per problem line.
    """

    code = "quarantined_lines"

    def __init__(self, quarantine: Any) -> None:
        self.quarantine = quarantine
        n = quarantine.height
        first = quarantine.row(0, named=True)
        where = f"{first['file']}:{first['line_no']}:{first['byte_offset']}"
        super().__init__(
            f"{n} line(s) of events.jsonl could not be accepted; first: "
            f"{first['reason']}: {first['message']}",
            where=where,
            hint="inspect err.quarantine, or call the loader with strict=False to keep going",
        )


class RelayQuarantineError(RivumiAnalysisError):
    """Raised by ``relay_*_df`` loaders with ``strict=True`` when a journal row, line or element
    was quarantined or a journal is unreadable.

    Attributes:
        quarantine: the ``relay_quarantine_df`` table of the journals read.
    """

    code = "relay_quarantined"

    def __init__(self, quarantine: Any) -> None:
        self.quarantine = quarantine
        first = quarantine.row(0, named=True)
        where = first["path"]
        if first["line_no"] is not None:
            where += f":{first['line_no']}:{first['byte_offset']}"
        super().__init__(
            f"{quarantine.height} journal row(s)/line(s) or journal(s) could not be accepted; "
            f"first: {first['reason']}: {first['message']}", where=where,
            hint="inspect err.quarantine, or call the loader with strict=False to keep going")


class ReplayRefused(RivumiAnalysisError):
    """The runner's replay (or fork seed) would refuse this log; ``message`` is the runner's text."""

    code = "replay_refused"

    def __init__(self, message: str) -> None:
        self.message = message
        self.code = "replay_refused"
        self.where = None
        self.hint = None
        Exception.__init__(self, message)


class SchemaValidationError(RivumiAnalysisError):
    """A table failed its pandera model (a bug in the toolkit or in a user-built frame)."""

    code = "schema_validation"


class StoreError(RivumiAnalysisError):
    """The Parquet store cannot be used (codes: ``store_unwritable``, ``store_locked``,
    ``store_inside_source``, ``store_damaged``, ``store_failed``); loaders then fall back to an in-memory load."""

    code = "store_unusable"


def describe(code: str) -> str:
    """Return the one-line description of a reason code, or raise ``KeyError``.

    >>> describe("depth_limit")
    'a directory below the discovery depth limit'
    """
    for family in ALL_CODES.values():
        if code in family:
            return family[code]
    raise KeyError(code)


class EmptySourceWarning(UserWarning):
    """No run directory was found below the source: the tables are empty (every CLI command
    exits 2 on it)."""


class CostUnknownWarning(UserWarning):
    """A helper summed cost while some rows' cost is unknown: the sum undercounts."""
