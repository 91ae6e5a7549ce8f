"""Pandera (polars backend) models, one per table. Public: validate your own frames with them.

>>> import polars as pl
>>> from rivumi_analysis.schemas import QuarantineSchema
>>> sorted(QuarantineSchema.to_schema().columns)[:3]
['byte_length', 'byte_offset', 'file']

pandera validates *data* only on eager DataFrames; on a LazyFrame it checks the schema alone.
"""

from __future__ import annotations

import pandera.polars as pa
import polars as pl
from pandera.typing.polars import Series  # noqa: F401  (re-exported for users' own models)

from .errors import QUARANTINE_REASONS, VERDICTS

_KINDS = ["native", "fork", "subagent", "external"]
UTC_US = pl.Datetime("us", "UTC")


class _Base(pa.DataFrameModel):
    class Config:
        strict = True  # no undeclared columns
        coerce = False


class RunsSchema(_Base):
    """``runs_df``: one row per run (audit record + manifest, request and result fields)."""

    schema_version: pl.Int64 = pa.Field(eq=1)
    run_dir: pl.Utf8 = pa.Field(unique=True)
    run_id: pl.Utf8 = pa.Field(nullable=True)
    kind: pl.Utf8 = pa.Field(nullable=True, isin=_KINDS)
    verdict: pl.Utf8 = pa.Field(isin=list(VERDICTS))
    reasons: pl.List(pl.Utf8)
    warnings: pl.List(pl.Utf8)
    message: pl.Utf8 = pa.Field(nullable=True)
    lines: pl.Int64 = pa.Field(ge=0)
    blank_lines: pl.Int64 = pa.Field(ge=0)
    events: pl.Int64 = pa.Field(ge=0)
    quarantined_lines: pl.Int64 = pa.Field(ge=0)
    first_sequence: pl.Int64 = pa.Field(nullable=True)
    last_sequence: pl.Int64 = pa.Field(nullable=True)
    manifest_last_event_sequence: pl.Int64 = pa.Field(nullable=True)
    phase: pl.Utf8 = pa.Field(nullable=True)
    terminal_reason: pl.Utf8 = pa.Field(nullable=True)
    replay_accepts: pl.Boolean = pa.Field(nullable=True)
    replay_error: pl.Utf8 = pa.Field(nullable=True)
    parent_run_dir: pl.Utf8 = pa.Field(nullable=True)
    task_id: pl.Utf8 = pa.Field(nullable=True)
    terminal: pl.Boolean = pa.Field(nullable=True)
    step: pl.Int64 = pa.Field(nullable=True)
    repeat_count: pl.Int64 = pa.Field(nullable=True)
    last_action_fingerprint: pl.Utf8 = pa.Field(nullable=True)
    provider_name: pl.Utf8 = pa.Field(nullable=True)
    model_id: pl.Utf8 = pa.Field(nullable=True)
    input_tokens: pl.Int64 = pa.Field(nullable=True)
    output_tokens: pl.Int64 = pa.Field(nullable=True)
    cached_input_tokens: pl.Int64 = pa.Field(nullable=True)
    reasoning_tokens: pl.Int64 = pa.Field(nullable=True)
    provider_total_tokens: pl.Int64 = pa.Field(nullable=True)
    total_tokens: pl.Int64 = pa.Field(nullable=True)
    active_wall_time_seconds: pl.Float64 = pa.Field(nullable=True)
    started_at: UTC_US = pa.Field(nullable=True)
    ended_at: UTC_US = pa.Field(nullable=True)
    max_steps: pl.Int64 = pa.Field(nullable=True)
    wall_time_seconds: pl.Float64 = pa.Field(nullable=True)
    max_total_tokens: pl.Int64 = pa.Field(nullable=True)
    result_status: pl.Utf8 = pa.Field(nullable=True)
    result_terminal_reason: pl.Utf8 = pa.Field(nullable=True)


class EventsSchema(_Base):
    """``events_df``: one row per accepted event, in file order per run."""

    run_dir: pl.Utf8
    run_id: pl.Utf8 = pa.Field(nullable=True)
    kind: pl.Utf8 = pa.Field(isin=_KINDS)
    line_no: pl.Int64 = pa.Field(ge=1)
    byte_offset: pl.Int64 = pa.Field(ge=0)
    byte_length: pl.Int64 = pa.Field(ge=1)
    sequence: pl.Int64 = pa.Field(ge=0)
    event_type: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    event_run_id: pl.Utf8 = pa.Field(nullable=True)
    task_id: pl.Utf8 = pa.Field(nullable=True)
    event_id: pl.Utf8 = pa.Field(nullable=True)
    created_at: UTC_US = pa.Field(nullable=True)
    text: pl.Utf8 = pa.Field(nullable=True)
    data: pl.Utf8 = pa.Field(nullable=True)
    warnings: pl.List(pl.Utf8)

    @pa.dataframe_check
    def key_unique(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """(run_dir, line_no) identifies an event."""
        return data.lazyframe.select(
            ~pl.struct("run_dir", "line_no").is_duplicated().alias("key_unique"))


class QuarantineSchema(_Base):
    """``quarantine_df``: one row per problem line (nothing is dropped silently)."""

    run_dir: pl.Utf8
    run_id: pl.Utf8 = pa.Field(nullable=True)
    file: pl.Utf8
    line_no: pl.Int64 = pa.Field(ge=1)
    byte_offset: pl.Int64 = pa.Field(ge=0)
    byte_length: pl.Int64 = pa.Field(ge=0)
    reason: pl.Utf8 = pa.Field(isin=list(QUARANTINE_REASONS))
    message: pl.Utf8
    raw: pl.Binary
    raw_truncated: pl.Boolean
    sha256: pl.Utf8 = pa.Field(str_matches=r"^[0-9a-f]{64}$")


class ManifestsSchema(_Base):
    """``manifests_df``: one row per run that has a ``session.json`` that parses as JSON."""

    run_dir: pl.Utf8 = pa.Field(unique=True)
    run_id: pl.Utf8 = pa.Field(nullable=True)
    schema_valid: pl.Boolean
    schema_error: pl.Utf8 = pa.Field(nullable=True)
    task_id: pl.Utf8 = pa.Field(nullable=True)
    provider_name: pl.Utf8 = pa.Field(nullable=True)
    model_id: pl.Utf8 = pa.Field(nullable=True)
    protocol: pl.Utf8 = pa.Field(nullable=True)
    prompt_version: pl.Utf8 = pa.Field(nullable=True)
    base_sha: pl.Utf8 = pa.Field(nullable=True)
    phase: pl.Utf8 = pa.Field(nullable=True)
    terminal: pl.Boolean = pa.Field(nullable=True)
    step: pl.Int64 = pa.Field(nullable=True)
    repeat_count: pl.Int64 = pa.Field(nullable=True)
    last_event_sequence: pl.Int64 = pa.Field(nullable=True)
    last_action_fingerprint: pl.Utf8 = pa.Field(nullable=True)
    input_tokens: pl.Int64 = pa.Field(nullable=True)
    output_tokens: pl.Int64 = pa.Field(nullable=True)
    cached_input_tokens: pl.Int64 = pa.Field(nullable=True)
    reasoning_tokens: pl.Int64 = pa.Field(nullable=True)
    provider_total_tokens: pl.Int64 = pa.Field(nullable=True)
    active_wall_time_seconds: pl.Float64 = pa.Field(nullable=True)
    active_started_at: UTC_US = pa.Field(nullable=True)
    updated_at: UTC_US = pa.Field(nullable=True)
    message_count: pl.Int64 = pa.Field(nullable=True)
    model_usage_count: pl.Int64 = pa.Field(nullable=True)
    approval_history_count: pl.Int64 = pa.Field(nullable=True)
    granted_effects: pl.List(pl.Utf8)
    pending_request_id: pl.Utf8 = pa.Field(nullable=True)
    pending_action_id: pl.Utf8 = pa.Field(nullable=True)
    verification_ok: pl.Boolean = pa.Field(nullable=True)
    active_writer_token: pl.Utf8 = pa.Field(nullable=True)


class ToolCallsSchema(_Base):
    """``tool_calls_df``: one row per tool call (requested → started → completed)."""

    run_dir: pl.Utf8
    run_id: pl.Utf8 = pa.Field(nullable=True)
    tool_call_id: pl.Utf8
    name: pl.Utf8 = pa.Field(nullable=True)
    effect: pl.Utf8 = pa.Field(nullable=True)
    step: pl.Int64 = pa.Field(nullable=True)
    requested_sequence: pl.Int64 = pa.Field(nullable=True)
    started_sequence: pl.Int64 = pa.Field(nullable=True)
    completed_sequence: pl.Int64 = pa.Field(nullable=True)
    requested_at: UTC_US = pa.Field(nullable=True)
    started_at: UTC_US = pa.Field(nullable=True)
    completed_at: UTC_US = pa.Field(nullable=True)
    executed: pl.Boolean
    ok: pl.Boolean = pa.Field(nullable=True)
    error: pl.Utf8 = pa.Field(nullable=True)
    outcome: pl.Utf8 = pa.Field(isin=["ok", "error", "denied", "unknown_tool", "not_executed",
                                      "in_flight", "not_started"])
    in_batch: pl.Boolean
    arguments_omitted: pl.Boolean
    duration_seconds: pl.Float64 = pa.Field(nullable=True)


class ApprovalsSchema(_Base):
    """``approvals_df``: one row per approval request (requested → resolved/reused/abandoned)."""

    run_dir: pl.Utf8
    run_id: pl.Utf8 = pa.Field(nullable=True)
    request_id: pl.Utf8
    action_id: pl.Utf8 = pa.Field(nullable=True)
    effect: pl.Utf8 = pa.Field(nullable=True)
    reason: pl.Utf8 = pa.Field(nullable=True)
    policy_reason: pl.Utf8 = pa.Field(nullable=True)
    outcome: pl.Utf8 = pa.Field(isin=["resolved", "reused", "abandoned", "open"])
    decision: pl.Utf8 = pa.Field(nullable=True)
    requested_sequence: pl.Int64 = pa.Field(nullable=True)
    closed_sequence: pl.Int64 = pa.Field(nullable=True)
    requested_at: UTC_US = pa.Field(nullable=True)
    closed_at: UTC_US = pa.Field(nullable=True)
    wait_seconds: pl.Float64 = pa.Field(nullable=True)


class ModelCallsSchema(_Base):
    """``model_calls_df``: one row per model step (``model.requested`` and what followed)."""

    run_dir: pl.Utf8
    run_id: pl.Utf8 = pa.Field(nullable=True)
    step: pl.Int64 = pa.Field(nullable=True)
    requested_sequence: pl.Int64
    completed_sequence: pl.Int64 = pa.Field(nullable=True)
    requested_at: UTC_US = pa.Field(nullable=True)
    completed_at: UTC_US = pa.Field(nullable=True)
    duration_seconds: pl.Float64 = pa.Field(nullable=True)
    outcome: pl.Utf8 = pa.Field(isin=["completed", "failed", "incomplete"])
    finish_reason: pl.Utf8 = pa.Field(nullable=True)
    tool_calls: pl.List(pl.Utf8)
    retries: pl.Int64 = pa.Field(ge=0)
    fallbacks: pl.Int64 = pa.Field(ge=0)
    failure_kind: pl.Utf8 = pa.Field(nullable=True)
    input_tokens: pl.Int64 = pa.Field(nullable=True)
    output_tokens: pl.Int64 = pa.Field(nullable=True)
    cached_input_tokens: pl.Int64 = pa.Field(nullable=True)
    reasoning_tokens: pl.Int64 = pa.Field(nullable=True)
    provider_total_tokens: pl.Int64 = pa.Field(nullable=True)
    total_tokens: pl.Int64 = pa.Field(nullable=True)


class UsageSchema(_Base):
    """``usage_df``: one row per model-usage record (lane), with cost where known (§9.1)."""

    run_dir: pl.Utf8
    run_id: pl.Utf8 = pa.Field(nullable=True)
    index: pl.Int64 = pa.Field(ge=0)
    source: pl.Utf8 = pa.Field(isin=["manifest.model_usage", "events"])
    lane: pl.Utf8
    provider: pl.Utf8 = pa.Field(nullable=True)
    model: pl.Utf8 = pa.Field(nullable=True)
    input_tokens: pl.Int64
    output_tokens: pl.Int64
    cached_input_tokens: pl.Int64
    reasoning_tokens: pl.Int64
    provider_total_tokens: pl.Int64 = pa.Field(nullable=True)
    total_tokens: pl.Int64
    currency: pl.Utf8 = pa.Field(nullable=True)
    cost_source: pl.Utf8 = pa.Field(nullable=True)
    input_cost: pl.Float64 = pa.Field(nullable=True)
    cached_input_cost: pl.Float64 = pa.Field(nullable=True)
    output_cost: pl.Float64 = pa.Field(nullable=True)
    total_cost: pl.Float64 = pa.Field(nullable=True)


class VerificationsSchema(_Base):
    """``verifications_df``: one row per final-verification check (started/completed/reused)."""

    run_dir: pl.Utf8
    run_id: pl.Utf8 = pa.Field(nullable=True)
    name: pl.Utf8 = pa.Field(nullable=True)
    argv: pl.List(pl.Utf8)
    outcome: pl.Utf8 = pa.Field(isin=["passed", "failed", "denied", "reused", "in_flight"])
    started_sequence: pl.Int64 = pa.Field(nullable=True)
    completed_sequence: pl.Int64 = pa.Field(nullable=True)
    started_at: UTC_US = pa.Field(nullable=True)
    completed_at: UTC_US = pa.Field(nullable=True)
    ok: pl.Boolean = pa.Field(nullable=True)
    exit_code: pl.Int64 = pa.Field(nullable=True)
    duration_seconds: pl.Float64 = pa.Field(nullable=True)


# --- states (replay helper) ---
class StatesSchema(_Base):
    """``states_df``: the reducer's state after each accepted event (non-external runs)."""

    run_dir: pl.Utf8
    run_id: pl.Utf8 = pa.Field(nullable=True)
    kind: pl.Utf8 = pa.Field(isin=_KINDS)
    line_no: pl.Int64 = pa.Field(ge=1)
    sequence: pl.Int64 = pa.Field(ge=0)
    event_type: pl.Utf8
    created_at: UTC_US = pa.Field(nullable=True)
    rejected: pl.Utf8 = pa.Field(nullable=True, isin=["duplicate_sequence", "bad_sequence"])
    step: pl.Int64 = pa.Field(ge=0)
    model_requests: pl.Int64 = pa.Field(ge=0)
    model_completions: pl.Int64 = pa.Field(ge=0)
    model_failures: pl.Int64 = pa.Field(ge=0)
    tool_requests: pl.Int64 = pa.Field(ge=0)
    tool_starts: pl.Int64 = pa.Field(ge=0)
    tool_completions: pl.Int64 = pa.Field(ge=0)
    input_tokens: pl.Int64 = pa.Field(ge=0)
    output_tokens: pl.Int64 = pa.Field(ge=0)
    cached_input_tokens: pl.Int64 = pa.Field(ge=0)
    reasoning_tokens: pl.Int64 = pa.Field(ge=0)
    provider_total_tokens: pl.Int64 = pa.Field(nullable=True, ge=0)
    total_tokens: pl.Int64 = pa.Field(ge=0)
    primary_total_tokens: pl.Int64 = pa.Field(ge=0)
    reviewer_total_tokens: pl.Int64 = pa.Field(ge=0)
    last_action_fingerprint: pl.Utf8 = pa.Field(nullable=True, str_matches=r"^[0-9a-f]{64}$")
    repeat_count: pl.Int64 = pa.Field(ge=0)
    repeat_trip_distance: pl.Int64 = pa.Field(ge=0, le=3)
    fingerprint_unknown: pl.Boolean
    unlogged_guard_calls: pl.Int64 = pa.Field(ge=0)
    side_effects_in_flight: pl.Int64 = pa.Field(ge=0)
    open_approvals: pl.Int64 = pa.Field(ge=0)
    phase: pl.Utf8 = pa.Field(isin=["created", "preparing", "running", "waiting_approval",
                                    "verifying", "paused", "completed", "failed",
                                    "cancelled"])
    terminal: pl.Boolean
    terminal_reason: pl.Utf8 = pa.Field(nullable=True)
    continuation_index: pl.Int64 = pa.Field(ge=0)
    resume_count: pl.Int64 = pa.Field(ge=0)
    wall_elapsed_seconds: pl.Float64 = pa.Field(nullable=True)
    approval_wait_seconds: pl.Float64 = pa.Field(ge=0)
    resume_downtime_seconds: pl.Float64 = pa.Field(ge=0)
    charged_wall_seconds: pl.Float64 = pa.Field(nullable=True, ge=0)
    steps_remaining: pl.Int64 = pa.Field(nullable=True)
    wall_time_remaining_seconds: pl.Float64 = pa.Field(nullable=True)
    tokens_remaining: pl.Int64 = pa.Field(nullable=True)
    fork_safe: pl.Boolean
    fork_accepted: pl.Boolean
    runner_generation: pl.Utf8 = pa.Field(isin=["m4", "current", "unknown"])
    charge_approval_waits: pl.Boolean

    @pa.dataframe_check
    def key_unique(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """(run_dir, line_no) identifies a row."""
        return data.lazyframe.select(
            ~pl.struct("run_dir", "line_no").is_duplicated().alias("key_unique"))


class DriftSchema(_Base):
    """``drift_df``: replayed final state vs ``session.json``, one row per (run, field)."""

    run_dir: pl.Utf8
    run_id: pl.Utf8 = pa.Field(nullable=True)
    kind: pl.Utf8 = pa.Field(isin=_KINDS)
    field: pl.Utf8
    replayed: pl.Utf8
    manifest: pl.Utf8
    matches: pl.Boolean
    explanation: pl.Utf8 = pa.Field(nullable=True)
    unexplained: pl.Boolean

    @pa.dataframe_check
    def unexplained_means_no_rule(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """``unexplained`` iff the values differ and no rule explains it."""
        return data.lazyframe.select(
            (pl.col("unexplained") == (~pl.col("matches") & pl.col("explanation").is_null()))
            .alias("unexplained_means_no_rule"))


class ForksSchema(_Base):
    """``forks_df``: fork links and candidate fork points (``row_kind`` tells them apart)."""

    row_kind: pl.Utf8 = pa.Field(isin=["fork_link", "candidate"])
    run_dir: pl.Utf8
    run_id: pl.Utf8 = pa.Field(nullable=True)
    kind: pl.Utf8 = pa.Field(isin=_KINDS)
    sequence: pl.Int64 = pa.Field(nullable=True, ge=0)
    line_no: pl.Int64 = pa.Field(nullable=True, ge=1)
    event_type: pl.Utf8 = pa.Field(nullable=True)
    fork_accepted: pl.Boolean = pa.Field(nullable=True)
    last_safe_before: pl.Utf8 = pa.Field(nullable=True)
    failure_sequence: pl.Int64 = pa.Field(nullable=True)
    source_run_id: pl.Utf8 = pa.Field(nullable=True)
    source_run_dir: pl.Utf8 = pa.Field(nullable=True)
    fork_point_sequence: pl.Int64 = pa.Field(nullable=True)
    fork_point_event_type: pl.Utf8 = pa.Field(nullable=True)
    events_included: pl.Int64 = pa.Field(nullable=True)
    source_found: pl.Boolean = pa.Field(nullable=True)
    fork_point_matches: pl.Boolean = pa.Field(nullable=True)
