"""Pandera (polars backend) models, one per table, and the data dictionary.

Every column carries a ``description`` (what it means, and how it differs from columns that
look alike), a ``unit`` and a ``source`` (the file and field it comes from, or how it is
derived) in ``metadata``. ``rivumi-analysis schema TABLE`` prints them; section numbers
(``§N``) point into ``docs/run-format.md``. Public: validate your own frames with the models.

>>> import polars as pl
>>> from rivumi_analysis.schemas import QuarantineSchema
>>> sorted(QuarantineSchema.to_schema().columns)[:3]
['byte_length', 'byte_offset', 'file']

pandera validates *data* only on eager DataFrames; on a LazyFrame it checks the schema alone.
"""

from __future__ import annotations

from typing import Any

import pandera.polars as pa
import polars as pl
from pandera.typing.polars import Series  # noqa: F401  (re-exported for users' own models)

from .checks import frame_check
from .errors import (
    OUTCOMES,
    QUARANTINE_REASONS,
    RELAY_ENTRY_TYPES,
    RELAY_QUARANTINE_REASONS,
    RELAY_RULES,
    RELAY_UNREADABLE_REASONS,
    VERDICTS,
)

_KINDS = ["native", "fork", "subagent", "external"]
UTC_US = pl.Datetime("us", "UTC")

# units used in the dictionary
TOKENS, SECONDS, COUNT, BYTES, SEQ, TS = (
    "tokens", "seconds", "count", "bytes", "event sequence number", "UTC datetime (µs)")


def _col(description: str, source: str, unit: str | None = None, **checks: Any) -> Any:
    """A pandera Field carrying its data-dictionary entry (description, unit, source)."""
    return pa.Field(description=description, metadata={"unit": unit, "source": source},
                    **checks)


class _Base(pa.DataFrameModel):
    class Config:
        strict = True  # no undeclared columns
        coerce = False


# shared wording ---------------------------------------------------------------------------
_RUN_DIR = ("The run's key: its directory as an absolute path (the source you passed, resolved, "
            "joined with the folders below it; a subagent's is <parent run_dir>/subagents/<id>, "
            "so it includes its parent). The same run typed two ways has one run_dir. Unique "
            "per run; join any table to runs_df on it (run_id is not unique).")
_RUN_ID = ("The run's id: session.json run_id, else the first run_id of its events, else "
           "checkpoint.json run_id (null for external runs without one). Not unique across a "
           "fleet: a subagent id can repeat under two parents; use run_dir to join.")
_RUN_ID_SRC = "session.json run_id / events.jsonl run_id / checkpoint.json run_id"
_KIND = ("What made the run: native (agent loop), fork (sessions --fork-from-event), subagent "
         "(nested under <parent>/subagents/), external (Codex/Claude Code runner) (§1.1).")
_KIND_SRC = "derived: files present and first event (§1.1)"


def _tok(what: str, src: str, **checks: Any) -> Any:
    return _col(what, src, TOKENS, **checks)


class RunsSchema(_Base):
    """``runs_df``: one row per run (audit record + manifest, request and result fields)."""

    schema_version: pl.Int64 = _col(
        "Version of the audit record layout (always 1).", "toolkit constant", eq=1)
    run_dir: pl.Utf8 = _col(_RUN_DIR, "discovery (the path given, resolved, + folders walked)",
                            unique=True)
    run_path: pl.Utf8 = _col(
        "run_dir relative to the source it was found under (portable: the same on any "
        "machine for the same folder layout), e.g. completed/<id> or <id>/subagents/<agent>; "
        "the run's directory name when the source was the run itself.",
        "derived: run_dir relative to the source root")
    run_id: pl.Utf8 = _col(_RUN_ID, _RUN_ID_SRC, nullable=True)
    kind: pl.Utf8 = _col(_KIND, _KIND_SRC, nullable=True, isin=_KINDS)
    verdict: pl.Utf8 = _col(
        "What the runner's resume would do with this run: resumable, resync, "
        "side_effect_uncertain, terminal, corrupt, not_resumable, or error (the toolkit "
        "failed on the run) (§8.5).", "derived: verdict rules (§8)", isin=list(VERDICTS))
    reasons: pl.List(pl.Utf8) = _col(
        "Every reason code behind the verdict (rivumi-analysis codes explains each).",
        "derived: verdict rules (§8)")
    warnings: pl.List(pl.Utf8) = _col(
        "Run-level warning codes that do not change the verdict (sorted).",
        "derived: consistency checks (§11.10)")
    message: pl.Utf8 = _col(
        "Human-readable explanation of the first reason: what, where (file:line:byte) "
        "and a hint. Null when nothing is wrong.", "derived", nullable=True)
    lines: pl.Int64 = _col(
        "Physical lines of events.jsonl; always events + quarantined_lines + blank_lines.",
        "events.jsonl (split at \\n)", COUNT, ge=0)
    blank_lines: pl.Int64 = _col(
        "Empty or whitespace-only lines of events.jsonl (skipped by the runner too).",
        "events.jsonl", COUNT, ge=0)
    events: pl.Int64 = _col(
        "Accepted events (rows of events_df for this run).", "events.jsonl", COUNT, ge=0)
    quarantined_lines: pl.Int64 = _col(
        "Lines that are not accepted events (rows of quarantine_df for this run).",
        "events.jsonl", COUNT, ge=0)
    first_sequence: pl.Int64 = _col(
        "Lowest sequence among accepted events (0 for a healthy log).",
        "events.jsonl sequence", SEQ, nullable=True)
    last_sequence: pl.Int64 = _col(
        "Highest sequence among accepted events. Compare manifest_last_event_sequence: "
        "equal, or one less when the manifest is ahead (§3.4).",
        "events.jsonl sequence", SEQ, nullable=True)
    manifest_last_event_sequence: pl.Int64 = _col(
        "The last event the manifest accounts for (-1: none). One more than last_sequence "
        "means a crash between saving session.json and appending the event (§3.4).",
        "session.json last_event_sequence", SEQ, nullable=True)
    phase: pl.Utf8 = _col(
        "Manifest phase at the last save (created, running, waiting_approval, verifying, "
        "completed, failed, cancelled, ...). states_df.phase is the replayed one.",
        "session.json phase", nullable=True)
    terminal_reason: pl.Utf8 = _col(
        "Why the run ended (run fact): terminal_reason of the last turn's terminal run.* "
        "event (an external run: result.json). Null while the run has not ended (§5.9); "
        "result_terminal_reason is result.json's, and a difference is a fact_disagrees "
        "warning. Where it came from: terminal_reason_source.",
        "events.jsonl run.completed|failed|cancelled data.terminal_reason (external: "
        "result.json terminal_reason)", nullable=True)
    replay_accepts: pl.Boolean = _col(
        "Whether the runner's replay (replay --json, fork seeds) accepts events.jsonl; may "
        "differ from resume's reading (§8.7). Null when there is no log to replay.",
        "derived: replay rules (§9)", nullable=True)
    replay_error: pl.Utf8 = _col(
        "The runner's replay refusal message when replay_accepts is false (§9.6).",
        "derived: replay rules (§9.6)", nullable=True)
    parent_run_dir: pl.Utf8 = _col(
        "For a subagent run, the run_dir of the parent run it is nested in; else null.",
        "discovery (<parent>/subagents/<id>/)", nullable=True)
    task_id: pl.Utf8 = _col(
        "The task id (subagents: <parent task>:subagent:<id>; forks: <orig>-fork-<hex>).",
        "session.json task_id", nullable=True)
    terminal: pl.Boolean = _col(
        "The manifest says the session ended (phase completed/failed/cancelled).",
        "session.json terminal", nullable=True)
    step: pl.Int64 = _col(
        "Model steps so far, cumulative over the run directory (continuations included) "
        "(run fact): the highest model.requested data.step, 0 when the log has none; "
        "session.json step (or checkpoint.json) only for a run without a readable log. "
        "Where it came from: step_source.",
        "events.jsonl model.requested data.step (max)", COUNT, nullable=True)
    repeat_count: pl.Int64 = _col(
        "Consecutive identical tool calls at the last save (the guard trips at 3; resume "
        "resets it to 0) (§10.1).", "session.json repeat_count", COUNT, nullable=True)
    last_action_fingerprint: pl.Utf8 = _col(
        "SHA-256 of the last tool call's name and arguments (§10.1).",
        "session.json last_action_fingerprint", nullable=True)
    provider_name: pl.Utf8 = _col(
        "Provider of the run (run fact): data.provider of the last run.created, "
        "session.resumed or session.continued; session.json provider_name when the log has "
        "none (forks: 'fork'). Per-call providers (fallbacks) are in usage_df.provider. "
        "Where it came from: provider_source.",
        "events.jsonl run.created|session.resumed|session.continued data.provider",
        nullable=True)
    model_id: pl.Utf8 = _col(
        "Model of the run (run fact): data.model of that same event; session.json model_id "
        "when the log has none (forks: 'side-effect-free'). Per-call models are in "
        "usage_df.model.", "events.jsonl run.created|session.resumed|session.continued "
        "data.model", nullable=True)
    input_tokens: pl.Int64 = _tok(
        "Cumulative input tokens of every model call of the run (all lanes: primary, "
        "wind-down, reviewer), cached input included, as session.json holds them (null "
        "without it; the run fact is total_tokens). Subagents are not included.",
        "session.json usage.input_tokens", nullable=True)
    output_tokens: pl.Int64 = _tok(
        "Cumulative output tokens of every model call (all lanes), reasoning included.",
        "session.json usage.output_tokens", nullable=True)
    cached_input_tokens: pl.Int64 = _tok(
        "Cumulative cached input tokens (a part of input_tokens).",
        "session.json usage.cached_input_tokens", nullable=True)
    reasoning_tokens: pl.Int64 = _tok(
        "Cumulative reasoning tokens (a part of output_tokens).",
        "session.json usage.reasoning_tokens", nullable=True)
    provider_total_tokens: pl.Int64 = _tok(
        "The runner's running sum of each call's total_tokens (never null after the first "
        "call, §11.1); equal to total_tokens whenever both are set and usage reconciles.",
        "session.json usage.provider_total_tokens", nullable=True)
    total_tokens: pl.Int64 = _tok(
        "Total tokens of the run, all lanes (run fact, §9.1): primary_tokens + "
        "reviewer_tokens + wind_down_tokens. From the log (model.completed and "
        "role_lane.completed usage) when it holds every call; when the run had a wind-down "
        "summary or a call that crossed the token budget (neither has a usage event), from "
        "the model_usage records, else usage.total_tokens of result.json, checkpoint.json "
        "or session.json; null when none has it. Where it came from: tokens_source. "
        "Equals the run's sum of usage_df.total_tokens when usage reconciles; larger than "
        "the run's sum of model_calls_df.total_tokens by the wind-down, reviewer and "
        "budget-crossing calls. Subagents are not included (sum their rows).",
        "events.jsonl model.completed + role_lane.completed data.usage (§9.1)", nullable=True)
    active_wall_time_seconds: pl.Float64 = _col(
        "Wall time the runner charged against the budget (§10.3): M4-era runners count the "
        "whole span (approval waits, resume downtime); current runners pause during approval "
        "waits. Differs from ended_at - started_at (the event span) and from "
        "states_df.charged_wall_seconds (the toolkit's replay of the same clock).",
        "session.json active_wall_time_seconds", SECONDS, nullable=True)
    started_at: UTC_US = _col(
        "Earliest created_at among the run's events (run fact; started_at to ended_at is "
        "the elapsed span, waits and downtime included).", "events.jsonl created_at (min)", TS,
        nullable=True)
    ended_at: UTC_US = _col(
        "Latest created_at among the run's events (the last activity logged, not "
        "necessarily the end of the run).", "events.jsonl created_at (max)", TS,
        nullable=True)
    max_steps: pl.Int64 = _col(
        "Step budget of the task (default 12).", "request.json limits.max_steps", COUNT,
        nullable=True)
    wall_time_seconds: pl.Float64 = _col(
        "Wall-time budget of the task (default 900); compare active_wall_time_seconds.",
        "request.json limits.wall_time_seconds", SECONDS, nullable=True)
    max_total_tokens: pl.Int64 = _tok(
        "Token budget of the task (null: none); compare total_tokens.",
        "request.json limits.max_total_tokens", nullable=True)
    repository: pl.Utf8 = _col(
        "Path of the source repository the task ran against (on the machine that ran it).",
        "request.json repository", nullable=True)
    base_sha: pl.Utf8 = _col(
        "Commit the task started from (40 hex); resume requires it to equal session.json "
        "base_sha (manifests_df.base_sha), else reason request_mismatch.",
        "request.json base_sha", nullable=True)
    instruction_summary: pl.Utf8 = _col(
        "The task's instruction: its first non-blank line, at most 160 characters ('…' when "
        "cut). The full text is in request.json and in the first user message "
        "(messages_df).", "request.json instruction (first line)", nullable=True)
    result_status: pl.Utf8 = _col(
        "Status in result.json (completed, failed, cancelled); null when the run never "
        "reached finish. The run fact is outcome (from the log).", "result.json status",
        nullable=True)
    result_terminal_reason: pl.Utf8 = _col(
        "terminal_reason in result.json; terminal_reason is the same from the log, and "
        "the warning result_disagrees flags a difference.",
        "result.json terminal_reason", nullable=True)
    outcome: pl.Utf8 = _col(
        "How the run ended (run fact): completed, failed or cancelled (the last turn's "
        "terminal run.* event; an external run: result.json status), live (writer lock "
        "held), fork_not_run (a fork whose log holds only run.forked), interrupted "
        "(no terminal event; session.json shows an orderly stop: clock stopped, not "
        "waiting on an approval, every saved event logged), crashed (no terminal event "
        "otherwise, including a log without session.json), or unreadable (the folder could "
        "not be listed, or the toolkit failed on the run: see reasons and message).",
        "events.jsonl terminal run.* event (see outcome_source)",
        isin=list(OUTCOMES))
    outcome_source: pl.Utf8 = _col(
        "Where outcome came from: events.jsonl, events.jsonl+session.json (interrupted), "
        "result.json (external runs), .writer.lock (live), discovery: <skip reason>, or "
        "toolkit error.", "derived")
    terminal_reason_source: pl.Utf8 = _col(
        "Where terminal_reason came from: events.jsonl or result.json (external runs); "
        "null when the run has not ended.", "derived", nullable=True)
    step_source: pl.Utf8 = _col(
        "Where step came from: events.jsonl, else session.json or checkpoint.json (runs "
        "without a readable log); null when unknown.", "derived", nullable=True)
    tokens_source: pl.Utf8 = _col(
        "Where total_tokens came from: events.jsonl (the log holds every call), "
        "model_usage (lanes the log cannot hold, from result.json/session.json model_usage), "
        "result.json, checkpoint.json or session.json (usage.total_tokens); null when "
        "unknown (external runs record no usage).", "derived", nullable=True)
    primary_tokens: pl.Int64 = _tok(
        "Tokens of the primary lane (every agent step): the sum of model.completed "
        "usage.total_tokens; from model_usage when a call crossed the token budget (that "
        "call has no model.completed); null when unknown.",
        "events.jsonl model.completed data.usage (§9.1)", nullable=True)
    reviewer_tokens: pl.Int64 = _tok(
        "Tokens of the reviewer lane: the sum of role_lane.completed usage.total_tokens.",
        "events.jsonl role_lane.completed data.usage (§9.1)", nullable=True)
    wind_down_tokens: pl.Int64 = _tok(
        "Tokens of the wind-down summary call: 0 without loop.wind_down_completed; else "
        "the wind_down model_usage records (the log holds no usage for it); null when "
        "unknown.", "result.json / session.json model_usage lane wind_down (§9.1)",
        nullable=True)
    provider_source: pl.Utf8 = _col(
        "Where provider_name and model_id came from: events.jsonl or session.json.",
        "derived", nullable=True)
    wall_time_used_seconds: pl.Float64 = _col(
        "Wall time used by the run's last turn (run fact): from its first event "
        "(run.created or session.continued) to the log's last event, approval waits and "
        "resume downtime included; session.json active_wall_time_seconds for a run "
        "without log times. The budget's charged time is active_wall_time_seconds.",
        "events.jsonl created_at", SECONDS, nullable=True)
    wall_time_source: pl.Utf8 = _col(
        "Where wall_time_used_seconds came from: events.jsonl or session.json.", "derived",
        nullable=True)
    times_source: pl.Utf8 = _col(
        "Where started_at and ended_at came from: events.jsonl (null: no event has a "
        "created_at).", "derived", nullable=True)


class EventsSchema(_Base):
    """``events_df``: one row per accepted event, in file order per run."""

    run_dir: pl.Utf8 = _col(_RUN_DIR, "discovery")
    run_id: pl.Utf8 = _col(_RUN_ID + " (The event's own run_id is event_run_id.)",
                           _RUN_ID_SRC, nullable=True)
    kind: pl.Utf8 = _col(_KIND, _KIND_SRC, isin=_KINDS)
    line_no: pl.Int64 = _col(
        "Physical line number in events.jsonl (1-based, blank and quarantined lines "
        "counted). (run_dir, line_no) identifies an event even when sequences repeat.",
        "events.jsonl position", "line number (1-based)", ge=1)
    byte_offset: pl.Int64 = _col(
        "Offset of the line's first byte in events.jsonl.", "events.jsonl position", BYTES,
        ge=0)
    byte_length: pl.Int64 = _col(
        "Length of the line, newline excluded.", "events.jsonl position", BYTES, ge=1)
    sequence: pl.Int64 = _col(
        "The event's sequence number (0, 1, 2, ... in a healthy log; can repeat or jump in "
        "a damaged one, see runs_df.reasons).", "events.jsonl sequence", SEQ, ge=0)
    event_type: pl.Utf8 = _col(
        "Event type, e.g. model.requested, tool.completed (catalogue: §5).",
        "events.jsonl event_type", str_length={"min_value": 1})
    event_run_id: pl.Utf8 = _col(
        "The run_id written in the event line; differs from run_id only in a damaged log "
        "(reason run_id_drift). Null for external runs.", "events.jsonl run_id",
        nullable=True)
    task_id: pl.Utf8 = _col("The task id written in the event line.", "events.jsonl task_id",
                            nullable=True)
    event_id: pl.Utf8 = _col("The event's unique id (32 hex).", "events.jsonl event_id",
                             nullable=True)
    created_at: UTC_US = _col(
        "When the runner created the event. Null for external runs (no timestamps).",
        "events.jsonl created_at", TS, nullable=True)
    text: pl.Utf8 = _col(
        "Top-level text of external-run events (message text); null for native events, "
        "whose text lives in data.", "events.jsonl text (external runs)", nullable=True)
    data: pl.Utf8 = _col(
        "The event's data object as its exact JSON text from the file (parse with "
        "pl.col('data').str.json_decode() or json.loads).", "events.jsonl data",
        nullable=True)
    warnings: pl.List(pl.Utf8) = _col(
        "Per-line warning codes (coerced values, duplicate keys, CRLF, ...); the line was "
        "still accepted. `rivumi-analysis codes` explains each code.",
        "derived: line decoder")

    @pa.dataframe_check
    def key_unique(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """(run_dir, line_no) identifies an event."""
        return frame_check("key_unique", data.lazyframe)


class QuarantineSchema(_Base):
    """``quarantine_df``: one row per problem line (nothing is dropped silently)."""

    run_dir: pl.Utf8 = _col(_RUN_DIR, "discovery")
    run_id: pl.Utf8 = _col(_RUN_ID, _RUN_ID_SRC, nullable=True)
    file: pl.Utf8 = _col("Path of the file the line is in (run_dir/events.jsonl).",
                         "discovery")
    line_no: pl.Int64 = _col("Physical line number (1-based).", "events.jsonl position",
                             "line number (1-based)", ge=1)
    byte_offset: pl.Int64 = _col("Offset of the line's first byte.", "events.jsonl position",
                                 BYTES, ge=0)
    byte_length: pl.Int64 = _col("Length of the line, newline excluded.",
                                 "events.jsonl position", BYTES, ge=0)
    reason: pl.Utf8 = _col(
        "Why the line is not an event: torn_tail, invalid_utf8, json_syntax, not_object, "
        "bad_sequence, bad_event_type.", "derived: line decoder",
        isin=list(QUARANTINE_REASONS))
    message: pl.Utf8 = _col("file:line:byte and what is wrong, readable.",
                            "derived: line decoder")
    raw: pl.Binary = _col("The line's bytes (first 4 KiB).", "events.jsonl bytes", BYTES)
    raw_truncated: pl.Boolean = _col("raw holds only the first 4 KiB of a longer line.",
                                     "derived")
    sha256: pl.Utf8 = _col("SHA-256 of the whole line (hex), even when raw is truncated.",
                           "derived", str_matches=r"^[0-9a-f]{64}$")


class ManifestsSchema(_Base):
    """``manifests_df``: one row per run that has a ``session.json`` that parses as JSON."""

    run_dir: pl.Utf8 = _col(_RUN_DIR, "discovery", unique=True)
    run_id: pl.Utf8 = _col(_RUN_ID, _RUN_ID_SRC, nullable=True)
    schema_valid: pl.Boolean = _col(
        "session.json validates as the runner's SessionManifest (strict: no unknown keys).",
        "derived: SessionManifest model (§6)")
    schema_error: pl.Utf8 = _col("First validation error when schema_valid is false.",
                                 "derived", nullable=True)
    task_id: pl.Utf8 = _col("The task id (= runs_df.task_id).", "session.json task_id",
                            nullable=True)
    provider_name: pl.Utf8 = _col("Provider at the last save (after any fallback).",
                                  "session.json provider_name", nullable=True)
    model_id: pl.Utf8 = _col("Model at the last save (after any fallback).",
                             "session.json model_id", nullable=True)
    protocol: pl.Utf8 = _col("Model protocol (openai_chat, anthropic_messages, ...; forks: "
                             "replay-fork).", "session.json protocol", nullable=True)
    prompt_version: pl.Utf8 = _col("Prompt revision of the runner.",
                                   "session.json prompt_version", nullable=True)
    base_sha: pl.Utf8 = _col("Commit the workspace started from (40 hex).",
                             "session.json base_sha", nullable=True)
    phase: pl.Utf8 = _col("Phase at the last save.", "session.json phase", nullable=True)
    terminal: pl.Boolean = _col("The session ended.", "session.json terminal", nullable=True)
    step: pl.Int64 = _col("Model steps so far (cumulative).", "session.json step", COUNT,
                          nullable=True)
    repeat_count: pl.Int64 = _col("Consecutive identical tool calls at the last save.",
                                  "session.json repeat_count", COUNT, nullable=True)
    last_event_sequence: pl.Int64 = _col(
        "Last event the manifest accounts for (-1: none); = runs_df."
        "manifest_last_event_sequence.", "session.json last_event_sequence", SEQ,
        nullable=True)
    last_action_fingerprint: pl.Utf8 = _col("SHA-256 of the last tool call (§10.1).",
                                            "session.json last_action_fingerprint",
                                            nullable=True)
    input_tokens: pl.Int64 = _tok("Cumulative input tokens, all lanes (= runs_df).",
                                  "session.json usage.input_tokens", nullable=True)
    output_tokens: pl.Int64 = _tok("Cumulative output tokens, all lanes (= runs_df).",
                                   "session.json usage.output_tokens", nullable=True)
    cached_input_tokens: pl.Int64 = _tok("Cumulative cached input tokens.",
                                         "session.json usage.cached_input_tokens",
                                         nullable=True)
    reasoning_tokens: pl.Int64 = _tok("Cumulative reasoning tokens.",
                                      "session.json usage.reasoning_tokens", nullable=True)
    provider_total_tokens: pl.Int64 = _tok(
        "Running sum of each call's total_tokens as stored (session.json has no "
        "total_tokens; runs_df.total_tokens is derived from this).",
        "session.json usage.provider_total_tokens", nullable=True)
    active_wall_time_seconds: pl.Float64 = _col(
        "Charged wall time at the last save (= runs_df.active_wall_time_seconds; §10.3).",
        "session.json active_wall_time_seconds", SECONDS, nullable=True)
    active_started_at: UTC_US = _col(
        "Start of the charged segment running at the last save; set on a finished run only "
        "if the process died with the clock running (then downtime gets charged on resume).",
        "session.json active_started_at", TS, nullable=True)
    updated_at: UTC_US = _col("Time of the last manifest save.", "session.json updated_at",
                              TS, nullable=True)
    message_count: pl.Int64 = _col(
        "Conversation items the runner would resend (after compaction).",
        "session.json messages (length)", COUNT, nullable=True)
    model_usage_count: pl.Int64 = _col(
        "Model-usage records (one per model call, all lanes); null for runners without "
        "model_usage (§1.2).", "session.json model_usage (length)", COUNT, nullable=True)
    approval_history_count: pl.Int64 = _col("Decided approvals (reuses not recorded).",
                                            "session.json approval_history (length)", COUNT,
                                            nullable=True)
    granted_effects: pl.List(pl.Utf8) = _col("Effects granted for the whole session "
                                             "(sorted).", "session.json granted_effects")
    pending_request_id: pl.Utf8 = _col(
        "Approval request id of the action awaiting approval or start (§6.6).",
        "session.json pending_action.request_id", nullable=True)
    pending_action_id: pl.Utf8 = _col(
        "Action id (tool call id or verification:<name>) of the pending action.",
        "session.json pending_action.action_id", nullable=True)
    verification_ok: pl.Boolean = _col(
        "Every last final-verification outcome passed; null when there were none.",
        "session.json verification[].ok", nullable=True)
    active_writer_token: pl.Utf8 = _col(
        "Lease token of the last writer (compare the token in .writer.lock).",
        "session.json active_writer_token", nullable=True)


_OCCURRENCE = (" The runner does not make it unique: ids repeat across the turns of a "
               "continued session (a run warning, {code}), so events are paired by "
               "occurrence, not by id: the key is (run_dir, line_no).")


class ToolCallsSchema(_Base):
    """``tool_calls_df``: one row per tool call in the log (requested → started → completed),
    by occurrence."""

    run_dir: pl.Utf8 = _col(_RUN_DIR, "discovery")
    run_id: pl.Utf8 = _col(_RUN_ID, _RUN_ID_SRC, nullable=True)
    line_no: pl.Int64 = _col(
        "Physical line of events.jsonl that opened the call: its tool.requested, or, for a "
        "call the log never requested (an unknown tool), its tool.completed. With run_dir "
        "it identifies the call (join events_df on run_dir, line_no).",
        "events.jsonl position", "line number (1-based)", ge=1)
    tool_call_id: pl.Utf8 = _col(
        "The call's id (the provider's id or a uuid hex); tool.started and tool.completed "
        "join the most recent open call of this id in the same model step."
        + _OCCURRENCE.format(code="duplicate_tool_call_id"),
        "events.jsonl tool.* data.tool_call_id")
    name: pl.Utf8 = _col("Tool name (read_file, shell, apply_patch, mcp__..., or an unknown "
                         "name).", "events.jsonl tool.* data.name", nullable=True)
    effect: pl.Utf8 = _col("Tool effect: read, modify, modify_execute, execute; null for an "
                           "unknown tool (never requested).", "events.jsonl tool.* data.effect",
                           nullable=True)
    step: pl.Int64 = _col("Model step that asked for the call (step of the preceding "
                          "model.requested).", "events.jsonl model.requested data.step", COUNT,
                          nullable=True)
    requested_sequence: pl.Int64 = _col(
        "Sequence of tool.requested; null for unknown tools (no request is logged).",
        "events.jsonl tool.requested", SEQ, nullable=True)
    started_sequence: pl.Int64 = _col("Sequence of tool.started (execution began).",
                                      "events.jsonl tool.started", SEQ, nullable=True)
    completed_sequence: pl.Int64 = _col("Sequence of tool.completed.",
                                        "events.jsonl tool.completed", SEQ, nullable=True)
    requested_line_no: pl.Int64 = _col(
        "Physical line of tool.requested; null for unknown tools (no request is logged).",
        "events.jsonl position", "line number (1-based)", nullable=True, ge=1)
    started_line_no: pl.Int64 = _col("Physical line of tool.started.", "events.jsonl position",
                                     "line number (1-based)", nullable=True, ge=1)
    completed_line_no: pl.Int64 = _col("Physical line of tool.completed.",
                                       "events.jsonl position", "line number (1-based)",
                                       nullable=True, ge=1)
    requested_at: UTC_US = _col("created_at of tool.requested.", "events.jsonl tool.requested",
                                TS, nullable=True)
    started_at: UTC_US = _col("created_at of tool.started.", "events.jsonl tool.started", TS,
                              nullable=True)
    completed_at: UTC_US = _col("created_at of tool.completed.",
                                "events.jsonl tool.completed", TS, nullable=True)
    executed: pl.Boolean = _col("The tool actually ran (a tool.started exists).",
                                "derived: tool.started present")
    ok: pl.Boolean = _col("ok of tool.completed (false also for denied or unknown calls that "
                          "never ran; see outcome).", "events.jsonl tool.completed data.ok",
                          nullable=True)
    error: pl.Utf8 = _col("Error text of tool.completed.", "events.jsonl tool.completed "
                          "data.error", nullable=True)
    outcome: pl.Utf8 = _col(
        "ok / error (ran and failed) / denied / unknown_tool / not_executed (e.g. invalid "
        "patch) / in_flight (started, never completed) / not_started (no completion, never "
        "started). Use this, not ok, for error rates.", "derived from the tool.* events",
        isin=["ok", "error", "denied", "unknown_tool", "not_executed", "in_flight",
              "not_started"])
    in_batch: pl.Boolean = _col("The call ran in a read-only parallel batch.",
                                "events.jsonl tool.batch_started data.tool_call_ids")
    arguments_omitted: pl.Boolean = _col(
        "The logged arguments were replaced by the {omitted, utf8_bytes, sha256} stub because "
        "they were too large (§4.4).", "events.jsonl tool.requested data.arguments")
    arguments: pl.Utf8 = _col(
        "The call's arguments as the exact JSON text of the log line (the {omitted, "
        "utf8_bytes, sha256} stub when arguments_omitted); null for unknown tools (no "
        "tool.requested). Parse with pl.col('arguments').str.json_decode().",
        "events.jsonl tool.requested data.arguments", nullable=True)
    arguments_preview: pl.Utf8 = _col(
        "arguments on one line, at most 80 characters ('…' when cut).", "derived", nullable=True)
    arguments_bytes: pl.Int64 = _col(
        "Size of the arguments: UTF-8 bytes of the logged JSON text, or the stub's utf8_bytes "
        "(the runner's measure of the real arguments) when omitted.",
        "derived / tool.requested data.arguments.utf8_bytes", BYTES, nullable=True, ge=0)
    result_bytes: pl.Int64 = _col(
        "Size of the tool's observation: UTF-8 bytes of tool.completed preview, plus the bytes "
        "the runner clipped out of it (result_clipped); null when there is no preview (the "
        "call did not run).", "derived: tool.completed data.preview", BYTES, nullable=True,
        ge=0)
    result_clipped: pl.Boolean = _col(
        "The logged preview is clipped (the runner keeps 2,000 bytes, §4.4).",
        "derived: tool.completed data.preview", nullable=True)
    duration_seconds: pl.Float64 = _col(
        "Execution time: completed_at - started_at (approval waits excluded).",
        "derived: tool.started / tool.completed created_at", SECONDS, nullable=True)

    @pa.dataframe_check
    def key_unique(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """(run_dir, line_no) identifies a call."""
        return data.lazyframe.select(
            ~pl.struct("run_dir", "line_no").is_duplicated().alias("key_unique"))


class ApprovalsSchema(_Base):
    """``approvals_df``: one row per approval occurrence (requested → resolved/abandoned, or
    reused)."""

    run_dir: pl.Utf8 = _col(_RUN_DIR, "discovery")
    run_id: pl.Utf8 = _col(_RUN_ID, _RUN_ID_SRC, nullable=True)
    line_no: pl.Int64 = _col(
        "Physical line of events.jsonl that opened the approval: its approval.requested, "
        "its approval.reused, or the closing event when the log holds no open request for it "
        "(e.g. approval.abandoned of a request lost with a torn line). With run_dir it "
        "identifies the approval.", "events.jsonl position", "line number (1-based)", ge=1)
    request_id: pl.Utf8 = _col(
        "Approval request id (32 hex); approval.resolved and approval.abandoned close the "
        "most recent open request of this id." + _OCCURRENCE.format(code="duplicate_request_id"),
        "events.jsonl approval.* data.request_id")
    action_id: pl.Utf8 = _col("What is approved: a tool_call_id or verification:<name>. "
                              "Ids can repeat: join tool_calls_df on tool_call_line_no.",
                              "events.jsonl approval.* data.action_id", nullable=True)
    tool_call_line_no: pl.Int64 = _col(
        "The tool call this approval is for: tool_calls_df.line_no of the latest "
        "tool.requested of action_id before it (join on run_dir and this); null for final "
        "verification and when the log holds no such request.",
        "derived: events.jsonl tool.requested position", "line number (1-based)",
        nullable=True, ge=1)
    effect: pl.Utf8 = _col("Effect being approved (read, modify, modify_execute, execute).",
                           "events.jsonl approval.* data.effect", nullable=True)
    reason: pl.Utf8 = _col("Why approval is needed: model_tool or final_verification "
                           "(abandoned: process_interrupted_before_decision).",
                           "events.jsonl approval.* data.reason", nullable=True)
    policy_reason: pl.Utf8 = _col("The policy's explanation (absent in M4-era runs).",
                                  "events.jsonl approval.* data.policy_reason", nullable=True)
    outcome: pl.Utf8 = _col(
        "resolved (decided by the policy), reused (session grant, no policy call), "
        "abandoned (process died before the decision), open (no closing event).",
        "derived: closing approval.* event", isin=["resolved", "reused", "abandoned", "open"])
    decision: pl.Utf8 = _col("allow_once, allow_session, deny, cancel (reused: allow_once).",
                             "events.jsonl approval.resolved data.decision", nullable=True)
    requested_sequence: pl.Int64 = _col("Sequence of approval.requested.",
                                        "events.jsonl approval.requested", SEQ, nullable=True)
    closed_sequence: pl.Int64 = _col("Sequence of the resolving/reusing/abandoning event.",
                                     "events.jsonl approval.*", SEQ, nullable=True)
    requested_line_no: pl.Int64 = _col(
        "Physical line of approval.requested (null for a reuse, which has none).",
        "events.jsonl position", "line number (1-based)", nullable=True, ge=1)
    closed_line_no: pl.Int64 = _col(
        "Physical line of the resolving/reusing/abandoning event (null while open).",
        "events.jsonl position", "line number (1-based)", nullable=True, ge=1)
    requested_at: UTC_US = _col("created_at of approval.requested.", "events.jsonl", TS,
                                nullable=True)
    closed_at: UTC_US = _col("created_at of the closing event.", "events.jsonl", TS,
                             nullable=True)
    wait_seconds: pl.Float64 = _col(
        "closed_at - requested_at: time waiting for the decision (current runners do not "
        "charge it to the wall-time budget; M4-era runners do).", "derived", SECONDS,
        nullable=True)

    @pa.dataframe_check
    def key_unique(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """(run_dir, line_no) identifies an approval."""
        return data.lazyframe.select(
            ~pl.struct("run_dir", "line_no").is_duplicated().alias("key_unique"))


class ModelCallsSchema(_Base):
    """``model_calls_df``: one row per model step (``model.requested`` and what followed)."""

    run_dir: pl.Utf8 = _col(_RUN_DIR, "discovery")
    run_id: pl.Utf8 = _col(_RUN_ID, _RUN_ID_SRC, nullable=True)
    step: pl.Int64 = _col("Step number (1-based, cumulative over the run directory).",
                          "events.jsonl model.requested data.step", COUNT, nullable=True)
    requested_sequence: pl.Int64 = _col("Sequence of model.requested.",
                                        "events.jsonl model.requested", SEQ)
    requested_line_no: pl.Int64 = _col(
        "Physical line of model.requested; with run_dir it identifies the call even in a "
        "log whose sequences repeat.", "events.jsonl position", "line number (1-based)", ge=1)
    completed_sequence: pl.Int64 = _col("Sequence of model.completed or model.failed.",
                                        "events.jsonl", SEQ, nullable=True)
    requested_at: UTC_US = _col("created_at of model.requested.", "events.jsonl", TS,
                                nullable=True)
    completed_at: UTC_US = _col("created_at of model.completed / model.failed.",
                                "events.jsonl", TS, nullable=True)
    duration_seconds: pl.Float64 = _col(
        "completed_at - requested_at (retries and back-off sleeps included).", "derived",
        SECONDS, nullable=True)
    outcome: pl.Utf8 = _col(
        "completed, failed (model.failed), incomplete (no closing event: a crash, the "
        "budget-crossing call, or the run ended).", "derived",
        isin=["completed", "failed", "incomplete"])
    finish_reason: pl.Utf8 = _col("Provider finish reason (tool_calls, stop, length, ...).",
                                  "events.jsonl model.completed data.finish_reason",
                                  nullable=True)
    tool_calls: pl.List(pl.Utf8) = _col("Names of the tools the model asked for, in order.",
                                        "events.jsonl model.completed data.tool_calls")
    retries: pl.Int64 = _col("model.retry events during this step.", "events.jsonl model.retry",
                             COUNT, ge=0)
    fallbacks: pl.Int64 = _col("model.fallback events during this step (the model switched).",
                               "events.jsonl model.fallback", COUNT, ge=0)
    provider: pl.Utf8 = _col(
        "Provider that served the call: the run's (run.created / session.resumed / "
        "session.continued) unless a model.fallback in this step switched it (each step "
        "starts again from the run's model). runs_df.provider_name names only the run's.",
        "events.jsonl run.created/session.* data.provider, model.fallback data.to_provider",
        nullable=True)
    model: pl.Utf8 = _col(
        "Model that served the call (after any fallback, as provider). Equals usage_df.model "
        "of the call's primary-lane record.",
        "events.jsonl run.created/session.* data.model, model.fallback data.to_model",
        nullable=True)
    requested_provider: pl.Utf8 = _col(
        "Provider in use when the step began (differs from provider when this step fell back).",
        "derived as provider, before this step's fallbacks", nullable=True)
    requested_model: pl.Utf8 = _col(
        "Model in use when the step began (differs from model when this step fell back).",
        "derived as model, before this step's fallbacks", nullable=True)
    failure_kind: pl.Utf8 = _col("Provider error kind of model.failed (auth, rate_limit, ...).",
                                 "events.jsonl model.failed data.kind", nullable=True)
    input_tokens: pl.Int64 = _tok("Input tokens of this call (primary lane only).",
                                  "events.jsonl model.completed data.usage.input_tokens",
                                  nullable=True)
    output_tokens: pl.Int64 = _tok("Output tokens of this call.",
                                   "events.jsonl model.completed data.usage.output_tokens",
                                   nullable=True)
    cached_input_tokens: pl.Int64 = _tok(
        "Cached input tokens (part of input).",
        "events.jsonl model.completed data.usage.cached_input_tokens", nullable=True)
    reasoning_tokens: pl.Int64 = _tok(
        "Reasoning tokens (part of output).",
        "events.jsonl model.completed data.usage.reasoning_tokens", nullable=True)
    provider_total_tokens: pl.Int64 = _tok(
        "Total as reported by the provider (null when it reported none).",
        "events.jsonl model.completed data.usage.provider_total_tokens", nullable=True)
    total_tokens: pl.Int64 = _tok(
        "Total tokens of this call. Only calls with a model.completed have usage, so the sum "
        "over a run misses the wind-down call, the reviewer lane and the call that crossed "
        "the token budget: it is below runs_df.total_tokens / usage_df.total_tokens exactly "
        "by those (§11.1).", "events.jsonl model.completed data.usage.total_tokens",
        nullable=True)


class UsageSchema(_Base):
    """``usage_df``: one row per model-usage record (lane), with cost where known (§11.1)."""

    run_dir: pl.Utf8 = _col(_RUN_DIR, "discovery")
    run_id: pl.Utf8 = _col(_RUN_ID, _RUN_ID_SRC, nullable=True)
    index: pl.Int64 = _col("Position of the record within the run (0-based).", "derived",
                           COUNT, ge=0)
    source: pl.Utf8 = _col(
        "Where the row comes from: manifest.model_usage (newer runners: one record per model "
        "call, every lane, with cost) or events (older runners: model.completed and "
        "role_lane.completed; no wind-down call; cost only for the reviewer).",
        "derived", isin=["manifest.model_usage", "events"])
    lane: pl.Utf8 = _col("primary (agent steps), wind_down (the tool-less summary call), "
                         "reviewer (the review lane).", "session.json model_usage[].lane",
                         )
    provider: pl.Utf8 = _col("Provider of this call (after any fallback).",
                             "session.json model_usage[].provider / run.created, "
                             "model.fallback to_provider", nullable=True)
    model: pl.Utf8 = _col("Model of this call (after any fallback).",
                          "session.json model_usage[].model / run.created, model.fallback "
                          "to_model", nullable=True)
    input_tokens: pl.Int64 = _tok("Input tokens of this call (cached included).",
                                  "model_usage[].usage.input_tokens / event usage")
    output_tokens: pl.Int64 = _tok("Output tokens of this call (reasoning included).",
                                   "model_usage[].usage.output_tokens / event usage")
    cached_input_tokens: pl.Int64 = _tok("Cached input tokens.",
                                         "model_usage[].usage.cached_input_tokens")
    reasoning_tokens: pl.Int64 = _tok("Reasoning tokens.",
                                      "model_usage[].usage.reasoning_tokens")
    provider_total_tokens: pl.Int64 = _tok("Total as reported by the provider.",
                                           "model_usage[].usage.provider_total_tokens",
                                           nullable=True)
    total_tokens: pl.Int64 = _tok(
        "Total tokens of this call: provider_total_tokens, else input + output. Summed per "
        "run it equals runs_df.total_tokens when usage reconciles (no usage_unreconciled "
        "warning).", "derived from the usage object (§6.3)")
    currency: pl.Utf8 = _col("Currency of the cost columns (USD).",
                             "model_usage[].cost.currency", nullable=True)
    cost_source: pl.Utf8 = _col("estimated (price catalogue) or authoritative (provider).",
                                "model_usage[].cost.source", nullable=True)
    input_cost: pl.Float64 = _col("Cost of the input tokens.", "model_usage[].cost.input_cost",
                                  "currency", nullable=True)
    cached_input_cost: pl.Float64 = _col("Cost of the cached input tokens.",
                                         "model_usage[].cost.cached_input_cost", "currency",
                                         nullable=True)
    output_cost: pl.Float64 = _col("Cost of the output tokens.",
                                   "model_usage[].cost.output_cost", "currency", nullable=True)
    total_cost: pl.Float64 = _col(
        "Cost of the call; null when unknown (model not in the price catalogue, or an older "
        "runner that logged no cost): a plain sum undercounts.",
        "model_usage[].cost.total_cost, else input + cached_input + output cost", "currency",
        nullable=True)
    cost_known: pl.Boolean = _col(
        "total_cost is known for this call. Sum cost with usage.cost_by_model, which reports "
        "the unknown share and warns.", "derived: total_cost is not null")


class VerificationsSchema(_Base):
    """``verifications_df``: one row per final-verification check (started/completed/reused)."""

    run_dir: pl.Utf8 = _col(_RUN_DIR, "discovery")
    run_id: pl.Utf8 = _col(_RUN_ID, _RUN_ID_SRC, nullable=True)
    name: pl.Utf8 = _col("Check name (from request.json verification).",
                         "events.jsonl verification.* data.name", nullable=True)
    argv: pl.List(pl.Utf8) = _col("Command run (never through a shell).",
                                  "events.jsonl verification.* data.argv")
    outcome: pl.Utf8 = _col("passed, failed, denied (approval denied), reused (an earlier "
                            "passing check on the same workspace), in_flight (no completion).",
                            "derived", isin=["passed", "failed", "denied", "reused",
                                             "in_flight"])
    started_sequence: pl.Int64 = _col("Sequence of verification.started.", "events.jsonl", SEQ,
                                      nullable=True)
    completed_sequence: pl.Int64 = _col("Sequence of verification.completed / .reused.",
                                        "events.jsonl", SEQ, nullable=True)
    started_at: UTC_US = _col("created_at of verification.started.", "events.jsonl", TS,
                              nullable=True)
    completed_at: UTC_US = _col("created_at of verification.completed / .reused.",
                                "events.jsonl", TS, nullable=True)
    ok: pl.Boolean = _col("The check passed.", "events.jsonl verification.completed data.ok",
                          nullable=True)
    exit_code: pl.Int64 = _col("Exit code of the command (null when denied or timed out).",
                               "events.jsonl verification.completed data.exit_code",
                               nullable=True)
    duration_seconds: pl.Float64 = _col(
        "Run time measured by the runner (not completed_at - started_at).",
        "events.jsonl verification.completed data.duration_seconds", SECONDS, nullable=True)


# --- states (replay helper) ---
class StatesSchema(_Base):
    """``states_df``: the reducer's state after each accepted event (non-external runs)."""

    run_dir: pl.Utf8 = _col(_RUN_DIR, "discovery")
    run_id: pl.Utf8 = _col(_RUN_ID, _RUN_ID_SRC, nullable=True)
    kind: pl.Utf8 = _col(_KIND, _KIND_SRC, isin=_KINDS)
    line_no: pl.Int64 = _col("Physical line of the event (joins events_df on run_dir, "
                             "line_no).", "events.jsonl position", "line number (1-based)",
                             ge=1)
    sequence: pl.Int64 = _col("The event's sequence.", "events.jsonl sequence", SEQ, ge=0)
    event_type: pl.Utf8 = _col("The event's type.", "events.jsonl event_type")
    created_at: UTC_US = _col("The event's timestamp.", "events.jsonl created_at", TS,
                              nullable=True)
    rejected: pl.Utf8 = _col(
        "Why the reducer refused the event (duplicate_sequence, bad_sequence); the state "
        "columns then equal the previous row's.", "derived: reducer",
        nullable=True, isin=["duplicate_sequence", "bad_sequence"])
    step: pl.Int64 = _col("Step of the latest model.requested.", "replayed from events",
                          COUNT, ge=0)
    model_requests: pl.Int64 = _col("model.requested events so far.", "replayed from events",
                                    COUNT, ge=0)
    model_completions: pl.Int64 = _col("model.completed events so far.",
                                       "replayed from events", COUNT, ge=0)
    model_failures: pl.Int64 = _col("model.failed events so far.", "replayed from events",
                                    COUNT, ge=0)
    tool_requests: pl.Int64 = _col("tool.requested events so far.", "replayed from events",
                                   COUNT, ge=0)
    tool_starts: pl.Int64 = _col("tool.started events so far.", "replayed from events", COUNT,
                                 ge=0)
    tool_completions: pl.Int64 = _col("tool.completed events so far.", "replayed from events",
                                      COUNT, ge=0)
    input_tokens: pl.Int64 = _tok(
        "Input tokens logged so far (model.completed + role_lane.completed usage; the "
        "wind-down and budget-crossing calls have no usage event).",
        "replayed from events", ge=0)
    output_tokens: pl.Int64 = _tok("Output tokens logged so far (same events).",
                                   "replayed from events", ge=0)
    cached_input_tokens: pl.Int64 = _tok("Cached input tokens logged so far.",
                                         "replayed from events", ge=0)
    reasoning_tokens: pl.Int64 = _tok("Reasoning tokens logged so far.",
                                      "replayed from events", ge=0)
    provider_total_tokens: pl.Int64 = _tok(
        "Running sum of each logged call's total (the runner's rule, §11.1); null before "
        "the first usage event.", "replayed from events", nullable=True, ge=0)
    total_tokens: pl.Int64 = _tok(
        "Tokens logged so far, primary + reviewer lanes = primary_total_tokens + "
        "reviewer_total_tokens. Below runs_df.total_tokens by the unlogged calls.",
        "replayed from events", ge=0)
    primary_total_tokens: pl.Int64 = _tok(
        "Tokens of the primary lane so far (model.completed); at the last row equals the "
        "run's sum of model_calls_df.total_tokens.", "replayed from events", ge=0)
    reviewer_total_tokens: pl.Int64 = _tok("Tokens of the review lane so far "
                                           "(role_lane.completed).", "replayed from events",
                                           ge=0)
    last_action_fingerprint: pl.Utf8 = _col(
        "Fingerprint of the last tool call, rebuilt from tool.requested (§10.1).",
        "replayed from events", nullable=True, str_matches=r"^[0-9a-f]{64}$")
    repeat_count: pl.Int64 = _col("Consecutive identical tool calls (trips at 3).",
                                  "replayed from events", COUNT, ge=0)
    repeat_trip_distance: pl.Int64 = _col(
        "Identical calls left before the repeat guard trips (0: tripped).",
        "derived: 3 - repeat_count", COUNT, ge=0, le=3)
    fingerprint_unknown: pl.Boolean = _col(
        "The last fingerprint cannot be rebuilt (omitted arguments or an unknown tool).",
        "replayed from events")
    unlogged_guard_calls: pl.Int64 = _col(
        "Calls the model made that the guard counted but that never got a tool.requested "
        "(e.g. the call that tripped the guard).", "replayed from events", COUNT, ge=0)
    side_effects_in_flight: pl.Int64 = _col(
        "Started tools and final checks without their completion yet.",
        "replayed from events", COUNT, ge=0)
    open_approvals: pl.Int64 = _col("Approval requests not yet resolved or abandoned.",
                                    "replayed from events", COUNT, ge=0)
    phase: pl.Utf8 = _col(
        "Phase as the log implies it (runs_df.phase is the manifest's; drift_df compares).",
        "replayed from events", isin=["created", "preparing", "running", "waiting_approval",
                                      "verifying", "paused", "completed", "failed",
                                      "cancelled"])
    terminal: pl.Boolean = _col("A terminal run.* event was seen (reset by a continuation).",
                                "replayed from events")
    terminal_reason: pl.Utf8 = _col("terminal_reason of the latest terminal event.",
                                    "replayed from events", nullable=True)
    continuation_index: pl.Int64 = _col("session.continued events so far (turn number - 1).",
                                        "replayed from events", COUNT, ge=0)
    resume_count: pl.Int64 = _col("session.resumed events so far.", "replayed from events",
                                  COUNT, ge=0)
    wall_elapsed_seconds: pl.Float64 = _col(
        "Time from run.created (or the first event) to this event: the plain elapsed span "
        "(= runs_df ended_at - started_at at the last row).", "derived: created_at",
        SECONDS, nullable=True)
    approval_wait_seconds: pl.Float64 = _col(
        "Time spent waiting for approval decisions so far (open ones up to this event). A "
        "wait whose timestamps go backwards (resolved stamped before requested) counts as "
        "0, never negative (§10.3).", "derived: approval.* created_at", SECONDS, ge=0)
    resume_downtime_seconds: pl.Float64 = _col(
        "Outage time before each session.resumed (last event before it to the resume; "
        "0 when the timestamps go backwards).",
        "derived: created_at", SECONDS, ge=0)
    charged_wall_seconds: pl.Float64 = _col(
        "The runner's charged wall time of the current turn, replayed (§10.3): elapsed "
        "since the turn started, minus approval waits unless charge_approval_waits. At the "
        "last row it should match runs_df.active_wall_time_seconds (drift_df checks, 2 s "
        "tolerance).", "derived: created_at + §10.3 rules", SECONDS, nullable=True, ge=0)
    steps_remaining: pl.Int64 = _col("Steps left in this turn (max_steps - steps used).",
                                     "derived: request.json limits", COUNT, nullable=True)
    wall_time_remaining_seconds: pl.Float64 = _col(
        "wall_time_seconds - charged_wall_seconds (negative: over budget).",
        "derived: request.json limits", SECONDS, nullable=True)
    tokens_remaining: pl.Int64 = _tok("max_total_tokens - total_tokens (logged tokens).",
                                      "derived: request.json limits", nullable=True)
    fork_safe: pl.Boolean = _col(
        "A fork at this event would cut no side effect in flight and no open approval.",
        "derived: side_effects_in_flight == 0 and open_approvals == 0")
    fork_accepted: pl.Boolean = _col(
        "The runner would build a fork seed here (its replay accepts the whole log).",
        "derived: replay rules (§9.5)")
    runner_generation: pl.Utf8 = _col(
        "m4 (older runner: approval waits charged), current, or unknown; inferred from the "
        "log and manifest (§1.2).", "derived", isin=["m4", "current", "unknown"])
    charge_approval_waits: pl.Boolean = _col(
        "Whether charged_wall_seconds includes approval waits (from runner_generation "
        "unless forced).", "derived / argument")

    @pa.dataframe_check
    def key_unique(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """(run_dir, line_no) identifies a row."""
        return frame_check("key_unique", data.lazyframe)


class DriftSchema(_Base):
    """``drift_df``: replayed final state vs ``session.json``, one row per (run, field)."""

    run_dir: pl.Utf8 = _col(_RUN_DIR, "discovery")
    run_id: pl.Utf8 = _col(_RUN_ID, _RUN_ID_SRC, nullable=True)
    kind: pl.Utf8 = _col(_KIND, _KIND_SRC, isin=_KINDS)
    field: pl.Utf8 = _col("Manifest field compared (step, repeat_count, usage, phase, "
                          "active_wall_time_seconds, ...).", "session.json field name")
    replayed: pl.Utf8 = _col("Value from replaying the log, as JSON text.",
                             "replayed from events")
    manifest: pl.Utf8 = _col("Value stored in session.json, as JSON text.",
                             "session.json <field>")
    matches: pl.Boolean = _col("The two values agree (wall time within 2 s).", "derived")
    explanation: pl.Utf8 = _col("The runner rule that explains a difference, when one does.",
                                "derived", nullable=True)
    unexplained: pl.Boolean = _col("The values differ and no rule explains it.", "derived")

    @pa.dataframe_check
    def unexplained_means_no_rule(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """``unexplained`` iff the values differ and no rule explains it."""
        return frame_check("unexplained_means_no_rule", data.lazyframe)


class ForksSchema(_Base):
    """``forks_df``: fork links and candidate fork points (``row_kind`` tells them apart)."""

    row_kind: pl.Utf8 = _col("fork_link (one per fork run) or candidate (one per safe fork "
                             "point of any non-external run).", "derived",
                             isin=["fork_link", "candidate"])
    run_dir: pl.Utf8 = _col(_RUN_DIR + " For fork_link rows: the fork run.", "discovery")
    run_id: pl.Utf8 = _col(_RUN_ID, _RUN_ID_SRC, nullable=True)
    kind: pl.Utf8 = _col(_KIND, _KIND_SRC, isin=_KINDS)
    sequence: pl.Int64 = _col("Sequence of the event (candidate: the fork point; fork_link: "
                              "the run.forked event).", "events.jsonl sequence", SEQ,
                              nullable=True, ge=0)
    line_no: pl.Int64 = _col("Physical line of that event.", "events.jsonl position",
                             "line number (1-based)", nullable=True, ge=1)
    event_type: pl.Utf8 = _col("Type of that event.", "events.jsonl event_type",
                               nullable=True)
    fork_accepted: pl.Boolean = _col("The runner would build a seed at this point.",
                                     "derived: replay rules (§9.5)", nullable=True)
    last_safe_before: pl.Utf8 = _col(
        "failure: the last safe point before a run.failed/run.error; crash: the last safe "
        "point of a log that does not end terminal; else null.", "derived", nullable=True)
    failure_sequence: pl.Int64 = _col("Sequence of that failure, or of the last event of "
                                      "the crashed log.", "derived", SEQ, nullable=True)
    source_run_id: pl.Utf8 = _col("fork_link: the source run's directory name.",
                                  "events.jsonl run.forked data.source_run_id", nullable=True)
    source_run_dir: pl.Utf8 = _col("fork_link: run_dir of the source run when it was loaded.",
                                   "derived: lookup by directory name", nullable=True)
    fork_point_sequence: pl.Int64 = _col("fork_link: sequence the fork was taken at.",
                                         "events.jsonl run.forked data.fork_point_sequence",
                                         SEQ, nullable=True)
    fork_point_event_type: pl.Utf8 = _col(
        "fork_link: type of the event at the fork point.",
        "events.jsonl run.forked data.fork_point_event_type", nullable=True)
    events_included: pl.Int64 = _col("fork_link: events of the source up to the fork point.",
                                     "events.jsonl run.forked data.events_included", COUNT,
                                     nullable=True)
    source_found: pl.Boolean = _col("fork_link: the source run was among the loaded runs.",
                                    "derived", nullable=True)
    fork_point_matches: pl.Boolean = _col(
        "fork_link: the source log has that event at that sequence and events_included "
        "events up to it.", "derived", nullable=True)


# --- relayflowd journals (issue 14) ----------------------------------------------------------
# One model per relay_*_df table (rivumi_analysis.relay.tables). Section numbers name relayflowd-journal.md, the
# relayflowd data contract. Journals are identified by ``path``;
# entries are keyed by (path, seq, position).

_RELAY_KINDS = ["sqlite", "jsonl", "replay_json", "journal_read"]
_RELAY_ENTRY_TYPES = sorted(RELAY_ENTRY_TYPES)
_CHANNEL_TYPES = ["channel.appended", "channel.delivered", "channel.acknowledged"]
MS, OFFSET, RSEQ = "ms since the epoch", "channel offset (1-based)", "journal seq"
_RPATH = ("The journal file as discovery reported it: relative to the PATH given (or the path "
          "itself when a file was named); for SQLite the .sqlite3 (its -wal is part of it).")
_RPATH_SRC = "discovery (relayflowd-journal.md §8)"
_RRUN = ("The relayflowd run id: meta.run_id for SQLite, the run_id of the lowest-seq "
         "accepted entry for JSON shapes.")
_RRUN_SRC = "meta.run_id / envelope run_id"
_RKIND = "sqlite, jsonl (bare envelopes), replay_json (flows replay --json) or journal_read."


def _rkind(**checks: Any) -> Any:
    return _col(_RKIND, "discovery + first journal-shaped line (relayflowd-journal.md §3.2)", isin=_RELAY_KINDS,
                **checks)


class RelayEntriesSchema(_Base):
    """``relay_entries_df``: one row per accepted entry, in (seq, position) order per journal."""

    path: pl.Utf8 = _col(_RPATH, _RPATH_SRC)
    source_kind: pl.Utf8 = _rkind()
    run_id: pl.Utf8 = _col("The entry's run id (SQLite: meta.run_id; JSON: its own run_id).",
                           "envelope run_id / meta.run_id")
    seq: pl.Int64 = _col("Journal sequence number; the rules fold in seq order, never at_ms.",
                         "entries.seq / envelope seq", RSEQ, ge=1)
    position: pl.Int64 = _col("0-based order in the source (ties on seq: a repeated line).",
                              "row / line / element index", COUNT, ge=0)
    segment_id: pl.Int64 = _col("Segment (epoch) the entry belongs to (relayflowd-journal.md §5).",
                                "entries.segment_id / envelope segment_id", ge=1)
    entry_type: pl.Utf8 = _col("One of the 28 known entry types (relayflowd-journal.md §4); unknown ones are "
                               "quarantined.", "entries.entry_type", isin=_RELAY_ENTRY_TYPES)
    step_id: pl.Utf8 = _col("Step id, null for run-level entries.", "entries.step_id",
                            nullable=True)
    attempt: pl.Int64 = _col("1-based attempt number where the type has one.",
                             "entries.attempt", COUNT, nullable=True, ge=0)
    at_ms: pl.Int64 = _col("Wall clock of the append; not monotone in seq (relayflowd-journal.md §11).",
                           "entries.at_ms", MS)
    payload: pl.Utf8 = _col("The payload as canonical JSON text (keys sorted, compact, ints "
                            "and floats kept apart).", "entries.payload (re-serialised)")
    applied: pl.Boolean = _col("The entry moved the reducer's state: no C, J or F rule failed "
                               "(D rules and DEAD never stop an entry).", "derived: relayflowd-journal.md §7.0")
    rules: pl.List(pl.Utf8) = _col("Rule ids reported at this entry's seq by the fold (DEAD "
                                   "is listed in relay_violations_df only).", "derived: relayflowd-journal.md §7")


class RelayQuarantineSchema(_Base):
    """``relay_quarantine_df``: one row per quarantined row/line/element, and one per
    unreadable journal (``level`` journal), so nothing is lost silently."""

    path: pl.Utf8 = _col(_RPATH, _RPATH_SRC)
    source_kind: pl.Utf8 = _rkind()
    run_id: pl.Utf8 = _col(_RRUN + " Null for an unreadable journal.", _RRUN_SRC,
                           nullable=True)
    level: pl.Utf8 = _col("entry: one row, line or journal_read element; journal: the whole "
                          "journal is unreadable (relayflowd-journal.md §1.1).", "derived",
                          isin=["entry", "journal"])
    position: pl.Int64 = _col("0-based order of the row/line/element in its source.",
                              "reader", COUNT, nullable=True, ge=0)
    line_no: pl.Int64 = _col("Physical line (JSON shapes), null for SQLite rows.",
                             "reader", "line number (1-based)", nullable=True, ge=1)
    byte_offset: pl.Int64 = _col("Byte offset of that line.", "reader", BYTES,
                                 nullable=True, ge=0)
    element: pl.Int64 = _col("Index inside a journal_read page's entries array.",
                             "reader", COUNT, nullable=True, ge=0)
    seq: pl.Int64 = _col("The entry's seq when it could be read (e.g. an unknown type).",
                         "envelope seq", RSEQ, nullable=True)
    entry_type: pl.Utf8 = _col("The entry_type when it was a string.", "envelope entry_type",
                               nullable=True)
    reason: pl.Utf8 = _col("Stable reason code (README: relayflowd codes).", "reader",
                           isin=sorted({*RELAY_QUARANTINE_REASONS, *RELAY_UNREADABLE_REASONS}))
    message: pl.Utf8 = _col("What is wrong, readable.", "reader")


class RelayAttemptsSchema(_Base):
    """``relay_attempts_df``: one row per applied ``step.attempt.started``."""

    path: pl.Utf8 = _col(_RPATH, _RPATH_SRC)
    run_id: pl.Utf8 = _col(_RRUN, _RRUN_SRC)
    step_id: pl.Utf8 = _col("The step that started.", "step.attempt.started step_id")
    attempt: pl.Int64 = _col("The attempt number.", "step.attempt.started attempt", COUNT,
                             ge=0)
    start_seq: pl.Int64 = _col("Seq of the start.", "step.attempt.started seq", RSEQ, ge=1)
    started_at_ms: pl.Int64 = _col("at_ms of the start.", "step.attempt.started at_ms", MS)
    end_seq: pl.Int64 = _col("Seq of the first later applied step.completed of the same "
                             "(step, attempt).", "step.completed seq", RSEQ, nullable=True)
    ended_at_ms: pl.Int64 = _col("at_ms of that completion.", "step.completed at_ms", MS,
                                 nullable=True)
    duration_ms: pl.Int64 = _col("ended_at_ms - started_at_ms clamped at 0 (at_ms is not "
                                 "monotone).", "derived", "ms", nullable=True, ge=0)
    completion_reason: pl.Utf8 = _col("completionReason of the completion (crashed and "
                                      "lease_expired explain a killed attempt).",
                                      "step.completed payload.completionReason", nullable=True)
    disposition: pl.Utf8 = _col("step_done, retry or park.",
                                "step.completed payload.disposition", nullable=True)
    status: pl.Utf8 = _col("completed; dead (a DEAD violation: restarted or run completed "
                           "without a completion); live (unexplained at the tail of an "
                           "unfinished run, not a violation) (relayflowd-journal.md §7.4).", "derived",
                           isin=["completed", "dead", "live"])


class RelayChannelMessagesSchema(_Base):
    """``relay_channel_messages_df``: one row per applied ``channel.appended``."""

    path: pl.Utf8 = _col(_RPATH, _RPATH_SRC)
    run_id: pl.Utf8 = _col(_RRUN, _RRUN_SRC)
    channel: pl.Utf8 = _col("Channel name (also a declared stream name; never mixed with "
                            "stream.appended).", "channel.appended payload.channel")
    offset: pl.Int64 = _col("Dense 1-based offset shared by all producers of the channel.",
                            "channel.appended payload.offset", OFFSET, ge=1)
    seq: pl.Int64 = _col("Seq of the append.", "channel.appended seq", RSEQ, ge=1)
    segment_id: pl.Int64 = _col("Segment of the append.", "channel.appended segment_id", ge=1)
    producer: pl.Utf8 = _col("Producing step (= the entry's step_id).",
                             "channel.appended payload.producer")
    message_id: pl.Utf8 = _col("Producer's message id (unique per channel and producer).",
                               "channel.appended payload.message_id")
    attempt: pl.Int64 = _col("Attempt that appended.", "channel.appended attempt", COUNT,
                             nullable=True)
    at_ms: pl.Int64 = _col("at_ms of the append.", "channel.appended at_ms", MS)
    message: pl.Utf8 = _col("The message as canonical JSON text.",
                            "channel.appended payload.message")
    deliveries: pl.Int64 = _col("Applied deliveries of this offset, all consumers.",
                                "derived", COUNT, ge=0)
    consumers_acked: pl.Int64 = _col("Consumers whose acknowledged offset reaches this one "
                                     "at the end.", "derived", COUNT, ge=0)


class RelayChannelDeliveriesSchema(_Base):
    """``relay_channel_deliveries_df``: one row per applied ``channel.delivered``."""

    path: pl.Utf8 = _col(_RPATH, _RPATH_SRC)
    run_id: pl.Utf8 = _col(_RRUN, _RRUN_SRC)
    channel: pl.Utf8 = _col("Channel name.", "channel.delivered payload.channel")
    consumer: pl.Utf8 = _col("Consuming step (= the entry's step_id).",
                             "channel.delivered payload.consumer")
    offset: pl.Int64 = _col("Offset delivered (always acked + 1).",
                            "channel.delivered payload.offset", OFFSET, ge=1)
    seq: pl.Int64 = _col("Seq of the delivery (what an ack's delivery_seq names).",
                         "channel.delivered seq", RSEQ, ge=1)
    segment_id: pl.Int64 = _col("Segment of the delivery.", "channel.delivered segment_id",
                                ge=1)
    attempt: pl.Int64 = _col("Attempt that received.", "channel.delivered attempt", COUNT,
                             nullable=True)
    at_ms: pl.Int64 = _col("at_ms of the delivery.", "channel.delivered at_ms", MS)
    delivery_ordinal: pl.Int64 = _col("1 for the first delivery of this (channel, consumer, "
                                      "offset), 2 for the first redelivery, ...", "derived",
                                      COUNT, ge=1)
    redelivery: pl.Boolean = _col("delivery_ordinal > 1: received again before the ack.",
                                  "derived")
    redelivery_within_attempt: pl.Boolean = _col(
        "A redelivery to the same attempt as the previous delivery of this offset.", "derived")
    redelivery_across_attempts: pl.Boolean = _col(
        "A redelivery to another attempt than the previous delivery (e.g. after a crash).",
        "derived")
    acked_by_seq: pl.Int64 = _col("Seq of the applied ack whose delivery_seq names this "
                                  "delivery.", "derived", RSEQ, nullable=True)


class RelayChannelAcksSchema(_Base):
    """``relay_channel_acks_df``: one row per applied ``channel.acknowledged``."""

    path: pl.Utf8 = _col(_RPATH, _RPATH_SRC)
    run_id: pl.Utf8 = _col(_RRUN, _RRUN_SRC)
    channel: pl.Utf8 = _col("Channel name.", "channel.acknowledged payload.channel")
    consumer: pl.Utf8 = _col("Acknowledging step.", "channel.acknowledged payload.consumer")
    offset: pl.Int64 = _col("Offset acknowledged (advances exactly one).",
                            "channel.acknowledged payload.offset", OFFSET, ge=1)
    seq: pl.Int64 = _col("Seq of the ack.", "channel.acknowledged seq", RSEQ, ge=1)
    segment_id: pl.Int64 = _col("Segment of the ack.", "channel.acknowledged segment_id",
                                ge=1)
    attempt: pl.Int64 = _col("Attempt that acknowledged.", "channel.acknowledged attempt",
                             COUNT, nullable=True)
    at_ms: pl.Int64 = _col("at_ms of the ack.", "channel.acknowledged at_ms", MS)
    delivery_seq: pl.Int64 = _col("Seq of the acknowledged delivery.",
                                  "channel.acknowledged payload.delivery_seq", RSEQ, ge=1)
    delivery_segment_id: pl.Int64 = _col("Segment of that delivery (may be earlier: relayflowd-journal.md §5).",
                                         "derived", ge=1)
    latency_ms: pl.Int64 = _col("Ack at_ms - acknowledged delivery at_ms, clamped at 0.",
                                "derived", "ms", ge=0)
    first_delivery_seq: pl.Int64 = _col("Seq of the first delivery of this offset to this "
                                        "consumer.", "derived", RSEQ, ge=1)
    first_delivery_latency_ms: pl.Int64 = _col(
        "Ack at_ms - first delivery at_ms, clamped at 0 (includes redeliveries).", "derived",
        "ms", ge=0)


class RelayChannelCursorSchema(_Base):
    """``relay_channel_cursor_df``: (channel, consumer) cursor after each applied channel entry
    that changes it (appends change the lag of every consumer already known)."""

    path: pl.Utf8 = _col(_RPATH, _RPATH_SRC)
    run_id: pl.Utf8 = _col(_RRUN, _RRUN_SRC)
    channel: pl.Utf8 = _col("Channel name.", "channel.* payload.channel")
    consumer: pl.Utf8 = _col("Consumer (known from its first delivery on: there is no "
                             "subscription registry).", "channel.delivered payload.consumer")
    seq: pl.Int64 = _col("Seq of the channel entry that changed the cursor.", "entries.seq",
                         RSEQ, ge=1)
    entry_type: pl.Utf8 = _col("The channel entry type that changed it.", "entries.entry_type",
                               isin=_CHANNEL_TYPES)
    head: pl.Int64 = _col("Applied appends on the channel so far.", "derived", OFFSET, ge=0)
    acked_offset: pl.Int64 = _col("acked(channel, consumer): offset of its last applied ack "
                                  "(0: nothing consumed).", "derived", OFFSET, ge=0)
    lag: pl.Int64 = _col("head - acked_offset: messages not yet acknowledged.", "derived",
                         COUNT, ge=0)
    in_flight: pl.Int64 = _col("Distinct offsets delivered and not yet acknowledged.",
                               "derived", COUNT, ge=0)


class RelayViolationsSchema(_Base):
    """``relay_violations_df``: one row per failed rule (spec relayflowd-journal.md §7)."""

    path: pl.Utf8 = _col(_RPATH, _RPATH_SRC)
    source_kind: pl.Utf8 = _rkind()
    run_id: pl.Utf8 = _col(_RRUN, _RRUN_SRC)
    seq: pl.Int64 = _col("Seq the rule is reported at (DEAD: the dead attempt's start).",
                         "derived: relayflowd-journal.md §7.0", RSEQ, ge=1)
    rule: pl.Utf8 = _col("Rule id: C1-C13, D1-D4, J1-J6, F or DEAD.", "derived: relayflowd-journal.md §7",
                         isin=list(RELAY_RULES))
    entry_type: pl.Utf8 = _col("Type of the entry at that seq.", "entries.entry_type")
    message: pl.Utf8 = _col("The kernel's error text and the values involved.", "derived")


class MessagesSchema(_Base):
    """``messages_df``: one row per transcript message (session.json messages and the log's
    model/tool exchanges)."""

    run_dir: pl.Utf8 = _col(_RUN_DIR, "discovery")
    run_id: pl.Utf8 = _col(_RUN_ID, _RUN_ID_SRC, nullable=True)
    source: pl.Utf8 = _col(
        "session.json (the conversation the runner would resend, after compaction, full "
        "text, no usage) or events (what the log keeps of each exchange: clipped texts, with "
        "usage on model replies).",
        "derived", isin=["session.json", "events"])
    position: pl.Int64 = _col("Index in session.json messages (source session.json).",
                              "session.json messages[i]", COUNT, nullable=True, ge=0)
    sequence: pl.Int64 = _col("Sequence of the event (source events).", "events.jsonl sequence",
                              SEQ, nullable=True, ge=0)
    line_no: pl.Int64 = _col("Physical line of the event (source events).",
                             "events.jsonl position", "line number (1-based)", nullable=True,
                             ge=1)
    created_at: UTC_US = _col("Timestamp of the event (session.json items have none).",
                              "events.jsonl created_at", TS, nullable=True)
    step: pl.Int64 = _col("Model step the message belongs to (source events).",
                          "events.jsonl model.completed / model.requested data.step", COUNT,
                          nullable=True)
    item: pl.Utf8 = _col(
        "What the row is: message, tool_observation, injected_context (session.json); "
        "model.completed, tool.completed, loop.wind_down_completed, thinking.healed, "
        "role_lane.completed (the reviewer's reply), or an external run's message (events).",
        "derived",
        isin=["message", "tool_observation", "injected_context", "model.completed",
              "tool.completed", "loop.wind_down_completed", "thinking.healed",
              "role_lane.completed"])
    role: pl.Utf8 = _col("system, user, assistant, tool (an observation), context "
                         "(injected context) or the review lane's role (reviewer).",
                         "session.json messages[].role / role_lane.completed role / derived",
                         nullable=True)
    content: pl.Utf8 = _col(
        "The text: message content, observation content, model reply, tool preview.",
        "session.json messages[].content / model.completed content / tool.completed preview",
        nullable=True)
    content_clipped: pl.Boolean = _col(
        "The runner clipped the text (its 'output truncated' marker is inside; §4.4).",
        "derived")
    tool_calls: pl.List(pl.Utf8) = _col("Names of the tools the assistant asked for, in order.",
                                        "messages[].tool_calls[].name / model.completed "
                                        "tool_calls")
    tool_call_ids: pl.List(pl.Utf8) = _col("Ids of those calls (session.json only; ids "
                                           "can repeat across turns, see tool_calls_df).",
                                           "messages[].tool_calls[].tool_call_id")
    tool_calls_json: pl.Utf8 = _col(
        "The assistant's tool calls with their arguments, as JSON text (session.json only; "
        "the log has the arguments in tool_calls_df).", "session.json messages[].tool_calls",
        nullable=True)
    tool_call_id: pl.Utf8 = _col("The call an observation answers.",
                                 "messages[].tool_call_id / tool.completed tool_call_id",
                                 nullable=True)
    tool_name: pl.Utf8 = _col("Tool of the observation.", "messages[].name / tool.completed "
                              "name", nullable=True)
    ok: pl.Boolean = _col("The observed tool call succeeded.", "messages[].ok / tool.completed "
                          "ok", nullable=True)
    error: pl.Utf8 = _col("Error text of the observation.", "messages[].error / tool.completed "
                          "error", nullable=True)
    context_source: pl.Utf8 = _col("Where injected context came from (history_summary_"
                                   "fallback, context_provider:<name>, ...).",
                                   "session.json messages[].source", nullable=True)
    input_tokens: pl.Int64 = _tok(
        "Input tokens of the model call that produced this reply. Only model.completed and "
        "role_lane.completed rows have tokens: those events carry the call's usage. Null on "
        "every other row, never estimated: session.json messages carry no usage, tool "
        "observations are not model output, the wind-down reply's usage is only in "
        "usage_df (lane wind_down), external runs log none.",
        "model.completed / role_lane.completed usage", nullable=True)
    output_tokens: pl.Int64 = _tok("Output tokens of that call (same rows as input_tokens).",
                                   "model.completed / role_lane.completed usage",
                                   nullable=True)
    total_tokens: pl.Int64 = _tok(
        "Total tokens of that call: on model.completed rows = model_calls_df.total_tokens, on "
        "role_lane.completed rows = usage_df lane reviewer.",
        "model.completed / role_lane.completed usage", nullable=True)
