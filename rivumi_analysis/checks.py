"""Validation of a table's frame by its model's check plan, in one polars select, without pandera.

Importing pandera costs a fresh process ~0.2-0.5 CPU-s (more with pandas installed), and its
polars backend runs each check as its own query: every store worker paid both for every chunk.
Each pandera model of :mod:`rivumi_analysis.schemas` is held here as DATA (:data:`PLANS`,
generated from the live models by ``scripts/checkplans.py``; ``tests/test_checks.py`` fails
when a model changes and the plans were not regenerated): its exact polars schema, the
columns that may not be null (nor NaN), the unique ones, and the checks pandera runs as
``(column or None for a dataframe check, check name, sorted statistics, ignore_na)``, taken
from pandera's check objects (their ``name`` and ``statistics``). A dataframe check is one of
:data:`FRAME_CHECKS`, which the models' own dataframe checks evaluate (one definition).
:func:`surely_valid` evaluates a plan in one polars select.

It is at least as strict as pandera: a frame it passes, pandera passes (``tests/test_checks.py``
judges mutated tables by both); any other frame, or a model without a plan, goes to pandera,
whose result or error is the answer (``tables._common.validate``). The A/B against pandera
alone: ``benchmarks/validation_ab.py``.

>>> import polars as pl
>>> surely_valid("VerificationsSchema", pl.DataFrame(schema=schema("VerificationsSchema")))
True
>>> surely_valid("VerificationsSchema", pl.DataFrame({"x": [1]}))
False
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

_FLOATS = (pl.Float32, pl.Float64)

# A column check's polars expression, per pandera builtin check name (pandera's own polars
# builtins: backends/polars/builtin_checks.py), from the check's ``statistics``.
_COLUMN: dict[str, Callable[..., pl.Expr]] = {
    "equal_to": lambda c, value: pl.col(c).eq(value),
    "not_equal_to": lambda c, value: pl.col(c).ne(value),
    "greater_than": lambda c, min_value: pl.col(c).gt(min_value),
    "greater_than_or_equal_to": lambda c, min_value: pl.col(c).ge(min_value),
    "less_than": lambda c, max_value: pl.col(c).lt(max_value),
    "less_than_or_equal_to": lambda c, max_value: pl.col(c).le(max_value),
    "isin": lambda c, allowed_values: pl.col(c).is_in(allowed_values),
    "notin": lambda c, forbidden_values: pl.col(c).is_in(forbidden_values).not_(),
    "str_matches": lambda c, pattern: pl.col(c).str.contains(
        pattern if pattern.startswith("^") else f"^{pattern}"),
    "str_startswith": lambda c, string: pl.col(c).str.starts_with(string),
    "str_endswith": lambda c, string: pl.col(c).str.ends_with(string),
    "str_length": lambda c, min_value=None, max_value=None, exact_value=None: _str_length(
        pl.col(c).str.len_chars(), min_value, max_value, exact_value),
}


def _str_length(n: pl.Expr, low: Any, high: Any, exact: Any) -> pl.Expr:
    if exact is not None:
        return n.eq(exact)
    if low is None and high is None:
        raise ValueError("str_length needs a bound")  # pandera raises too: no plan
    if low is None:
        return n.le(high)
    if high is None:
        return n.ge(low)
    return n.is_between(low, high)


FRAME_CHECKS: dict[str, Callable[[], pl.Expr]] = {
    "key_unique": lambda: ~pl.struct("run_dir", "line_no").is_duplicated(),
    "unexplained_means_no_rule": lambda: pl.col("unexplained") == (
        ~pl.col("matches") & pl.col("explanation").is_null()),
}
"""The dataframe checks of :mod:`rivumi_analysis.schemas` by name: each model's dataframe check
of that name evaluates this expression (:func:`frame_check`), so the plan's name is the
check."""


def frame_check(name: str, lf: pl.LazyFrame) -> pl.LazyFrame:
    """The dataframe check ``name`` of :data:`FRAME_CHECKS` over ``lf``, as pandera's
    dataframe checks return it (one boolean column named after the check).

    >>> frame_check("key_unique", pl.LazyFrame({"run_dir": ["r", "r"], "line_no": [1, 1]})
    ...             ).collect()["key_unique"].to_list()
    [False, False]
    """
    return lf.select(FRAME_CHECKS[name]().alias(name))


def schema(model: str) -> dict[str, pl.DataType]:
    """The exact polars schema (column -> dtype, in declaration order) of a model by name.

    >>> list(schema("VerificationsSchema"))[:2]
    ['run_dir', 'run_id']
    """
    return dict(PLANS[model]["schema"])


_EXPRS: dict[str, list[tuple[pl.Expr, bool]] | None] = {}


def _exprs(model: str) -> list[tuple[pl.Expr, bool]] | None:
    """The plan's checks as ``(boolean column expression, ignore_na)``, built once."""
    if model in _EXPRS:
        return _EXPRS[model]
    plan = PLANS.get(model)
    out: list[tuple[pl.Expr, bool]] | None = None
    if plan is not None and plan["checks"] is not None:
        try:
            out = []
            for col, kind, args, ignore_na in plan["checks"]:
                if col is None:
                    out.append((FRAME_CHECKS[kind](), ignore_na))
                else:
                    out.append((_COLUMN[kind](col, **dict(args)), ignore_na))
        except Exception:  # noqa: BLE001 (pandera decides)
            out = None
    _EXPRS[model] = out
    return out


def surely_valid(model: str, df: pl.DataFrame) -> bool:
    """Whether ``df`` passes every check pandera runs for the model named ``model`` (a class
    name of :mod:`rivumi_analysis.schemas`); False also when it cannot tell (the caller then
    asks pandera). Imports neither pandera nor pandas."""
    plan = PLANS.get(model)
    exprs = _exprs(model)
    if plan is None or exprs is None:
        return False
    want = plan["schema"]
    if len(df.schema) != len(want) or any(want.get(c) != dt for c, dt in df.schema.items()):
        return False  # strict: exactly the model's columns, each of exactly its dtype
    sel: list[pl.Expr] = []
    for c in plan["not_null"]:
        sel.append(pl.col(c).is_not_null().all())
        if want[c] in _FLOATS:
            sel.append(pl.col(c).is_not_nan().all())
    sel.extend(pl.col(c).is_duplicated().any().not_() for c in plan["unique"])
    for e, ignore_na in exprs:
        sel.append((e | e.is_null()).all() if ignore_na else e.fill_null(False).all())
    if not sel:
        return True
    try:
        row = df.select(e.alias(f"c{i}") for i, e in enumerate(sel)).row(0)
    except Exception:  # noqa: BLE001 (pandera reports what the check raised)
        return False
    return all(v is True for v in row)


# --- generated by scripts/checkplans.py from the live models: do not edit by hand -----------------
PLANS = {
    'RunsSchema': {
        "schema": {
            'schema_version': pl.Int64,
            'run_dir': pl.String,
            'run_path': pl.String,
            'run_id': pl.String,
            'kind': pl.String,
            'verdict': pl.String,
            'reasons': pl.List(pl.String),
            'warnings': pl.List(pl.String),
            'message': pl.String,
            'lines': pl.Int64,
            'blank_lines': pl.Int64,
            'events': pl.Int64,
            'quarantined_lines': pl.Int64,
            'first_sequence': pl.Int64,
            'last_sequence': pl.Int64,
            'manifest_last_event_sequence': pl.Int64,
            'phase': pl.String,
            'terminal_reason': pl.String,
            'replay_accepts': pl.Boolean,
            'replay_error': pl.String,
            'parent_run_dir': pl.String,
            'task_id': pl.String,
            'terminal': pl.Boolean,
            'step': pl.Int64,
            'repeat_count': pl.Int64,
            'last_action_fingerprint': pl.String,
            'provider_name': pl.String,
            'model_id': pl.String,
            'input_tokens': pl.Int64,
            'output_tokens': pl.Int64,
            'cached_input_tokens': pl.Int64,
            'reasoning_tokens': pl.Int64,
            'provider_total_tokens': pl.Int64,
            'total_tokens': pl.Int64,
            'active_wall_time_seconds': pl.Float64,
            'started_at': pl.Datetime('us', 'UTC'),
            'ended_at': pl.Datetime('us', 'UTC'),
            'max_steps': pl.Int64,
            'wall_time_seconds': pl.Float64,
            'max_total_tokens': pl.Int64,
            'repository': pl.String,
            'base_sha': pl.String,
            'instruction_summary': pl.String,
            'result_status': pl.String,
            'result_terminal_reason': pl.String,
        },
        'not_null': ('schema_version', 'run_dir', 'run_path', 'verdict', 'reasons', 'warnings', 'lines', 'blank_lines', 'events', 'quarantined_lines'),
        'unique': ('run_dir',),
        "checks": (
            ('schema_version', 'equal_to', (('value', 1),), True),
            ('kind', 'isin', (('allowed_values', ['native', 'fork', 'subagent', 'external']),), True),
            ('verdict', 'isin', (('allowed_values', ['resumable', 'resync', 'side_effect_uncertain', 'terminal', 'corrupt', 'not_resumable', 'error']),), True),
            ('lines', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('blank_lines', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('events', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('quarantined_lines', 'greater_than_or_equal_to', (('min_value', 0),), True),
        ),
    },
    'EventsSchema': {
        "schema": {
            'run_dir': pl.String,
            'run_id': pl.String,
            'kind': pl.String,
            'line_no': pl.Int64,
            'byte_offset': pl.Int64,
            'byte_length': pl.Int64,
            'sequence': pl.Int64,
            'event_type': pl.String,
            'event_run_id': pl.String,
            'task_id': pl.String,
            'event_id': pl.String,
            'created_at': pl.Datetime('us', 'UTC'),
            'text': pl.String,
            'data': pl.String,
            'warnings': pl.List(pl.String),
        },
        'not_null': ('run_dir', 'kind', 'line_no', 'byte_offset', 'byte_length', 'sequence', 'event_type', 'warnings'),
        'unique': (),
        "checks": (
            ('kind', 'isin', (('allowed_values', ['native', 'fork', 'subagent', 'external']),), True),
            ('line_no', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('byte_offset', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('byte_length', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('sequence', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('event_type', 'str_length', (('exact_value', None), ('max_value', None), ('min_value', 1)), True),
            (None, 'key_unique', (), True),
        ),
    },
    'QuarantineSchema': {
        "schema": {
            'run_dir': pl.String,
            'run_id': pl.String,
            'file': pl.String,
            'line_no': pl.Int64,
            'byte_offset': pl.Int64,
            'byte_length': pl.Int64,
            'reason': pl.String,
            'message': pl.String,
            'raw': pl.Binary,
            'raw_truncated': pl.Boolean,
            'sha256': pl.String,
        },
        'not_null': ('run_dir', 'file', 'line_no', 'byte_offset', 'byte_length', 'reason', 'message', 'raw', 'raw_truncated', 'sha256'),
        'unique': (),
        "checks": (
            ('line_no', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('byte_offset', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('byte_length', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('reason', 'isin', (('allowed_values', ['torn_tail', 'invalid_utf8', 'json_syntax', 'not_object', 'bad_sequence', 'bad_event_type']),), True),
            ('sha256', 'str_matches', (('pattern', '^[0-9a-f]{64}$'),), True),
        ),
    },
    'ManifestsSchema': {
        "schema": {
            'run_dir': pl.String,
            'run_id': pl.String,
            'schema_valid': pl.Boolean,
            'schema_error': pl.String,
            'task_id': pl.String,
            'provider_name': pl.String,
            'model_id': pl.String,
            'protocol': pl.String,
            'prompt_version': pl.String,
            'base_sha': pl.String,
            'phase': pl.String,
            'terminal': pl.Boolean,
            'step': pl.Int64,
            'repeat_count': pl.Int64,
            'last_event_sequence': pl.Int64,
            'last_action_fingerprint': pl.String,
            'input_tokens': pl.Int64,
            'output_tokens': pl.Int64,
            'cached_input_tokens': pl.Int64,
            'reasoning_tokens': pl.Int64,
            'provider_total_tokens': pl.Int64,
            'active_wall_time_seconds': pl.Float64,
            'active_started_at': pl.Datetime('us', 'UTC'),
            'updated_at': pl.Datetime('us', 'UTC'),
            'message_count': pl.Int64,
            'model_usage_count': pl.Int64,
            'approval_history_count': pl.Int64,
            'granted_effects': pl.List(pl.String),
            'pending_request_id': pl.String,
            'pending_action_id': pl.String,
            'verification_ok': pl.Boolean,
            'active_writer_token': pl.String,
        },
        'not_null': ('run_dir', 'schema_valid', 'granted_effects'),
        'unique': ('run_dir',),
        "checks": (
        ),
    },
    'ToolCallsSchema': {
        "schema": {
            'run_dir': pl.String,
            'run_id': pl.String,
            'tool_call_id': pl.String,
            'name': pl.String,
            'effect': pl.String,
            'step': pl.Int64,
            'requested_sequence': pl.Int64,
            'started_sequence': pl.Int64,
            'completed_sequence': pl.Int64,
            'requested_at': pl.Datetime('us', 'UTC'),
            'started_at': pl.Datetime('us', 'UTC'),
            'completed_at': pl.Datetime('us', 'UTC'),
            'executed': pl.Boolean,
            'ok': pl.Boolean,
            'error': pl.String,
            'outcome': pl.String,
            'in_batch': pl.Boolean,
            'arguments_omitted': pl.Boolean,
            'arguments': pl.String,
            'arguments_preview': pl.String,
            'arguments_bytes': pl.Int64,
            'result_bytes': pl.Int64,
            'result_clipped': pl.Boolean,
            'duration_seconds': pl.Float64,
        },
        'not_null': ('run_dir', 'tool_call_id', 'executed', 'outcome', 'in_batch', 'arguments_omitted'),
        'unique': (),
        "checks": (
            ('outcome', 'isin', (('allowed_values', ['ok', 'error', 'denied', 'unknown_tool', 'not_executed', 'in_flight', 'not_started']),), True),
            ('arguments_bytes', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('result_bytes', 'greater_than_or_equal_to', (('min_value', 0),), True),
        ),
    },
    'ApprovalsSchema': {
        "schema": {
            'run_dir': pl.String,
            'run_id': pl.String,
            'request_id': pl.String,
            'action_id': pl.String,
            'effect': pl.String,
            'reason': pl.String,
            'policy_reason': pl.String,
            'outcome': pl.String,
            'decision': pl.String,
            'requested_sequence': pl.Int64,
            'closed_sequence': pl.Int64,
            'requested_at': pl.Datetime('us', 'UTC'),
            'closed_at': pl.Datetime('us', 'UTC'),
            'wait_seconds': pl.Float64,
        },
        'not_null': ('run_dir', 'request_id', 'outcome'),
        'unique': (),
        "checks": (
            ('outcome', 'isin', (('allowed_values', ['resolved', 'reused', 'abandoned', 'open']),), True),
        ),
    },
    'ModelCallsSchema': {
        "schema": {
            'run_dir': pl.String,
            'run_id': pl.String,
            'step': pl.Int64,
            'requested_sequence': pl.Int64,
            'requested_line_no': pl.Int64,
            'completed_sequence': pl.Int64,
            'requested_at': pl.Datetime('us', 'UTC'),
            'completed_at': pl.Datetime('us', 'UTC'),
            'duration_seconds': pl.Float64,
            'outcome': pl.String,
            'finish_reason': pl.String,
            'tool_calls': pl.List(pl.String),
            'retries': pl.Int64,
            'fallbacks': pl.Int64,
            'provider': pl.String,
            'model': pl.String,
            'requested_provider': pl.String,
            'requested_model': pl.String,
            'failure_kind': pl.String,
            'input_tokens': pl.Int64,
            'output_tokens': pl.Int64,
            'cached_input_tokens': pl.Int64,
            'reasoning_tokens': pl.Int64,
            'provider_total_tokens': pl.Int64,
            'total_tokens': pl.Int64,
        },
        'not_null': ('run_dir', 'requested_sequence', 'requested_line_no', 'outcome', 'tool_calls', 'retries', 'fallbacks'),
        'unique': (),
        "checks": (
            ('requested_line_no', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('outcome', 'isin', (('allowed_values', ['completed', 'failed', 'incomplete']),), True),
            ('retries', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('fallbacks', 'greater_than_or_equal_to', (('min_value', 0),), True),
        ),
    },
    'UsageSchema': {
        "schema": {
            'run_dir': pl.String,
            'run_id': pl.String,
            'index': pl.Int64,
            'source': pl.String,
            'lane': pl.String,
            'provider': pl.String,
            'model': pl.String,
            'input_tokens': pl.Int64,
            'output_tokens': pl.Int64,
            'cached_input_tokens': pl.Int64,
            'reasoning_tokens': pl.Int64,
            'provider_total_tokens': pl.Int64,
            'total_tokens': pl.Int64,
            'currency': pl.String,
            'cost_source': pl.String,
            'input_cost': pl.Float64,
            'cached_input_cost': pl.Float64,
            'output_cost': pl.Float64,
            'total_cost': pl.Float64,
            'cost_known': pl.Boolean,
        },
        'not_null': ('run_dir', 'index', 'source', 'lane', 'input_tokens', 'output_tokens', 'cached_input_tokens', 'reasoning_tokens', 'total_tokens', 'cost_known'),
        'unique': (),
        "checks": (
            ('index', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('source', 'isin', (('allowed_values', ['manifest.model_usage', 'events']),), True),
        ),
    },
    'VerificationsSchema': {
        "schema": {
            'run_dir': pl.String,
            'run_id': pl.String,
            'name': pl.String,
            'argv': pl.List(pl.String),
            'outcome': pl.String,
            'started_sequence': pl.Int64,
            'completed_sequence': pl.Int64,
            'started_at': pl.Datetime('us', 'UTC'),
            'completed_at': pl.Datetime('us', 'UTC'),
            'ok': pl.Boolean,
            'exit_code': pl.Int64,
            'duration_seconds': pl.Float64,
        },
        'not_null': ('run_dir', 'argv', 'outcome'),
        'unique': (),
        "checks": (
            ('outcome', 'isin', (('allowed_values', ['passed', 'failed', 'denied', 'reused', 'in_flight']),), True),
        ),
    },
    'StatesSchema': {
        "schema": {
            'run_dir': pl.String,
            'run_id': pl.String,
            'kind': pl.String,
            'line_no': pl.Int64,
            'sequence': pl.Int64,
            'event_type': pl.String,
            'created_at': pl.Datetime('us', 'UTC'),
            'rejected': pl.String,
            'step': pl.Int64,
            'model_requests': pl.Int64,
            'model_completions': pl.Int64,
            'model_failures': pl.Int64,
            'tool_requests': pl.Int64,
            'tool_starts': pl.Int64,
            'tool_completions': pl.Int64,
            'input_tokens': pl.Int64,
            'output_tokens': pl.Int64,
            'cached_input_tokens': pl.Int64,
            'reasoning_tokens': pl.Int64,
            'provider_total_tokens': pl.Int64,
            'total_tokens': pl.Int64,
            'primary_total_tokens': pl.Int64,
            'reviewer_total_tokens': pl.Int64,
            'last_action_fingerprint': pl.String,
            'repeat_count': pl.Int64,
            'repeat_trip_distance': pl.Int64,
            'fingerprint_unknown': pl.Boolean,
            'unlogged_guard_calls': pl.Int64,
            'side_effects_in_flight': pl.Int64,
            'open_approvals': pl.Int64,
            'phase': pl.String,
            'terminal': pl.Boolean,
            'terminal_reason': pl.String,
            'continuation_index': pl.Int64,
            'resume_count': pl.Int64,
            'wall_elapsed_seconds': pl.Float64,
            'approval_wait_seconds': pl.Float64,
            'resume_downtime_seconds': pl.Float64,
            'charged_wall_seconds': pl.Float64,
            'steps_remaining': pl.Int64,
            'wall_time_remaining_seconds': pl.Float64,
            'tokens_remaining': pl.Int64,
            'fork_safe': pl.Boolean,
            'fork_accepted': pl.Boolean,
            'runner_generation': pl.String,
            'charge_approval_waits': pl.Boolean,
        },
        'not_null': ('run_dir', 'kind', 'line_no', 'sequence', 'event_type', 'step', 'model_requests', 'model_completions', 'model_failures', 'tool_requests', 'tool_starts', 'tool_completions', 'input_tokens', 'output_tokens', 'cached_input_tokens', 'reasoning_tokens', 'total_tokens', 'primary_total_tokens', 'reviewer_total_tokens', 'repeat_count', 'repeat_trip_distance', 'fingerprint_unknown', 'unlogged_guard_calls', 'side_effects_in_flight', 'open_approvals', 'phase', 'terminal', 'continuation_index', 'resume_count', 'approval_wait_seconds', 'resume_downtime_seconds', 'fork_safe', 'fork_accepted', 'runner_generation', 'charge_approval_waits'),
        'unique': (),
        "checks": (
            ('kind', 'isin', (('allowed_values', ['native', 'fork', 'subagent', 'external']),), True),
            ('line_no', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('sequence', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('rejected', 'isin', (('allowed_values', ['duplicate_sequence', 'bad_sequence']),), True),
            ('step', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('model_requests', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('model_completions', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('model_failures', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('tool_requests', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('tool_starts', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('tool_completions', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('input_tokens', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('output_tokens', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('cached_input_tokens', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('reasoning_tokens', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('provider_total_tokens', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('total_tokens', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('primary_total_tokens', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('reviewer_total_tokens', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('last_action_fingerprint', 'str_matches', (('pattern', '^[0-9a-f]{64}$'),), True),
            ('repeat_count', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('repeat_trip_distance', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('repeat_trip_distance', 'less_than_or_equal_to', (('max_value', 3),), True),
            ('unlogged_guard_calls', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('side_effects_in_flight', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('open_approvals', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('phase', 'isin', (('allowed_values', ['created', 'preparing', 'running', 'waiting_approval', 'verifying', 'paused', 'completed', 'failed', 'cancelled']),), True),
            ('continuation_index', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('resume_count', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('approval_wait_seconds', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('resume_downtime_seconds', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('charged_wall_seconds', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('runner_generation', 'isin', (('allowed_values', ['m4', 'current', 'unknown']),), True),
            (None, 'key_unique', (), True),
        ),
    },
    'DriftSchema': {
        "schema": {
            'run_dir': pl.String,
            'run_id': pl.String,
            'kind': pl.String,
            'field': pl.String,
            'replayed': pl.String,
            'manifest': pl.String,
            'matches': pl.Boolean,
            'explanation': pl.String,
            'unexplained': pl.Boolean,
        },
        'not_null': ('run_dir', 'kind', 'field', 'replayed', 'manifest', 'matches', 'unexplained'),
        'unique': (),
        "checks": (
            ('kind', 'isin', (('allowed_values', ['native', 'fork', 'subagent', 'external']),), True),
            (None, 'unexplained_means_no_rule', (), True),
        ),
    },
    'ForksSchema': {
        "schema": {
            'row_kind': pl.String,
            'run_dir': pl.String,
            'run_id': pl.String,
            'kind': pl.String,
            'sequence': pl.Int64,
            'line_no': pl.Int64,
            'event_type': pl.String,
            'fork_accepted': pl.Boolean,
            'last_safe_before': pl.String,
            'failure_sequence': pl.Int64,
            'source_run_id': pl.String,
            'source_run_dir': pl.String,
            'fork_point_sequence': pl.Int64,
            'fork_point_event_type': pl.String,
            'events_included': pl.Int64,
            'source_found': pl.Boolean,
            'fork_point_matches': pl.Boolean,
        },
        'not_null': ('row_kind', 'run_dir', 'kind'),
        'unique': (),
        "checks": (
            ('row_kind', 'isin', (('allowed_values', ['fork_link', 'candidate']),), True),
            ('kind', 'isin', (('allowed_values', ['native', 'fork', 'subagent', 'external']),), True),
            ('sequence', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('line_no', 'greater_than_or_equal_to', (('min_value', 1),), True),
        ),
    },
    'RelayEntriesSchema': {
        "schema": {
            'path': pl.String,
            'source_kind': pl.String,
            'run_id': pl.String,
            'seq': pl.Int64,
            'position': pl.Int64,
            'segment_id': pl.Int64,
            'entry_type': pl.String,
            'step_id': pl.String,
            'attempt': pl.Int64,
            'at_ms': pl.Int64,
            'payload': pl.String,
            'applied': pl.Boolean,
            'rules': pl.List(pl.String),
        },
        'not_null': ('path', 'source_kind', 'run_id', 'seq', 'position', 'segment_id', 'entry_type', 'at_ms', 'payload', 'applied', 'rules'),
        'unique': (),
        "checks": (
            ('source_kind', 'isin', (('allowed_values', ['sqlite', 'jsonl', 'replay_json', 'journal_read']),), True),
            ('seq', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('position', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('segment_id', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('entry_type', 'isin', (('allowed_values', ['channel.acknowledged', 'channel.appended', 'channel.delivered', 'effect.confirmed', 'effect.recorded', 'epoch.summary', 'event.received', 'memory.injected', 'run.cancel.requested', 'run.completed', 'run.spawned', 'segment.closed', 'sleep.until', 'step.attempt.started', 'step.completed', 'step.routed', 'stream.appended', 'subscription.acknowledged', 'subscription.closed', 'subscription.matched', 'subscription.opened', 'subscription.overflow.fenced', 'subscription.prepared', 'subscription.registered', 'subscription.stale', 'wait.completed', 'wait.event', 'wait.human']),), True),
            ('attempt', 'greater_than_or_equal_to', (('min_value', 0),), True),
        ),
    },
    'RelayQuarantineSchema': {
        "schema": {
            'path': pl.String,
            'source_kind': pl.String,
            'run_id': pl.String,
            'level': pl.String,
            'position': pl.Int64,
            'line_no': pl.Int64,
            'byte_offset': pl.Int64,
            'element': pl.Int64,
            'seq': pl.Int64,
            'entry_type': pl.String,
            'reason': pl.String,
            'message': pl.String,
        },
        'not_null': ('path', 'source_kind', 'level', 'reason', 'message'),
        'unique': (),
        "checks": (
            ('source_kind', 'isin', (('allowed_values', ['sqlite', 'jsonl', 'replay_json', 'journal_read']),), True),
            ('level', 'isin', (('allowed_values', ['entry', 'journal']),), True),
            ('position', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('line_no', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('byte_offset', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('element', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('reason', 'isin', (('allowed_values', ['bad_field_type', 'bad_field_value', 'entries_not_array', 'internal_error', 'invalid_utf8', 'journal_busy', 'journal_version_unsupported', 'json_syntax', 'meta_invalid', 'missing_field', 'not_object', 'not_sqlite', 'payload_invalid_json', 'payload_not_object', 'quick_check_failed', 'replay_mismatch', 'schema_invalid', 'shape_mismatch', 'sqlite_error', 'too_large', 'torn_tail', 'unknown_entry_type', 'unreadable', 'unsafe_integer', 'wal_not_regular']),), True),
        ),
    },
    'RelayAttemptsSchema': {
        "schema": {
            'path': pl.String,
            'run_id': pl.String,
            'step_id': pl.String,
            'attempt': pl.Int64,
            'start_seq': pl.Int64,
            'started_at_ms': pl.Int64,
            'end_seq': pl.Int64,
            'ended_at_ms': pl.Int64,
            'duration_ms': pl.Int64,
            'completion_reason': pl.String,
            'disposition': pl.String,
            'status': pl.String,
        },
        'not_null': ('path', 'run_id', 'step_id', 'attempt', 'start_seq', 'started_at_ms', 'status'),
        'unique': (),
        "checks": (
            ('attempt', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('start_seq', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('duration_ms', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('status', 'isin', (('allowed_values', ['completed', 'dead', 'live']),), True),
        ),
    },
    'RelayChannelMessagesSchema': {
        "schema": {
            'path': pl.String,
            'run_id': pl.String,
            'channel': pl.String,
            'offset': pl.Int64,
            'seq': pl.Int64,
            'segment_id': pl.Int64,
            'producer': pl.String,
            'message_id': pl.String,
            'attempt': pl.Int64,
            'at_ms': pl.Int64,
            'message': pl.String,
            'deliveries': pl.Int64,
            'consumers_acked': pl.Int64,
        },
        'not_null': ('path', 'run_id', 'channel', 'offset', 'seq', 'segment_id', 'producer', 'message_id', 'at_ms', 'message', 'deliveries', 'consumers_acked'),
        'unique': (),
        "checks": (
            ('offset', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('seq', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('segment_id', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('deliveries', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('consumers_acked', 'greater_than_or_equal_to', (('min_value', 0),), True),
        ),
    },
    'RelayChannelDeliveriesSchema': {
        "schema": {
            'path': pl.String,
            'run_id': pl.String,
            'channel': pl.String,
            'consumer': pl.String,
            'offset': pl.Int64,
            'seq': pl.Int64,
            'segment_id': pl.Int64,
            'attempt': pl.Int64,
            'at_ms': pl.Int64,
            'delivery_ordinal': pl.Int64,
            'redelivery': pl.Boolean,
            'redelivery_within_attempt': pl.Boolean,
            'redelivery_across_attempts': pl.Boolean,
            'acked_by_seq': pl.Int64,
        },
        'not_null': ('path', 'run_id', 'channel', 'consumer', 'offset', 'seq', 'segment_id', 'at_ms', 'delivery_ordinal', 'redelivery', 'redelivery_within_attempt', 'redelivery_across_attempts'),
        'unique': (),
        "checks": (
            ('offset', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('seq', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('segment_id', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('delivery_ordinal', 'greater_than_or_equal_to', (('min_value', 1),), True),
        ),
    },
    'RelayChannelAcksSchema': {
        "schema": {
            'path': pl.String,
            'run_id': pl.String,
            'channel': pl.String,
            'consumer': pl.String,
            'offset': pl.Int64,
            'seq': pl.Int64,
            'segment_id': pl.Int64,
            'attempt': pl.Int64,
            'at_ms': pl.Int64,
            'delivery_seq': pl.Int64,
            'delivery_segment_id': pl.Int64,
            'latency_ms': pl.Int64,
            'first_delivery_seq': pl.Int64,
            'first_delivery_latency_ms': pl.Int64,
        },
        'not_null': ('path', 'run_id', 'channel', 'consumer', 'offset', 'seq', 'segment_id', 'at_ms', 'delivery_seq', 'delivery_segment_id', 'latency_ms', 'first_delivery_seq', 'first_delivery_latency_ms'),
        'unique': (),
        "checks": (
            ('offset', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('seq', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('segment_id', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('delivery_seq', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('delivery_segment_id', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('latency_ms', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('first_delivery_seq', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('first_delivery_latency_ms', 'greater_than_or_equal_to', (('min_value', 0),), True),
        ),
    },
    'RelayChannelCursorSchema': {
        "schema": {
            'path': pl.String,
            'run_id': pl.String,
            'channel': pl.String,
            'consumer': pl.String,
            'seq': pl.Int64,
            'entry_type': pl.String,
            'head': pl.Int64,
            'acked_offset': pl.Int64,
            'lag': pl.Int64,
            'in_flight': pl.Int64,
        },
        'not_null': ('path', 'run_id', 'channel', 'consumer', 'seq', 'entry_type', 'head', 'acked_offset', 'lag', 'in_flight'),
        'unique': (),
        "checks": (
            ('seq', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('entry_type', 'isin', (('allowed_values', ['channel.appended', 'channel.delivered', 'channel.acknowledged']),), True),
            ('head', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('acked_offset', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('lag', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('in_flight', 'greater_than_or_equal_to', (('min_value', 0),), True),
        ),
    },
    'RelayViolationsSchema': {
        "schema": {
            'path': pl.String,
            'source_kind': pl.String,
            'run_id': pl.String,
            'seq': pl.Int64,
            'rule': pl.String,
            'entry_type': pl.String,
            'message': pl.String,
        },
        'not_null': ('path', 'source_kind', 'run_id', 'seq', 'rule', 'entry_type', 'message'),
        'unique': (),
        "checks": (
            ('source_kind', 'isin', (('allowed_values', ['sqlite', 'jsonl', 'replay_json', 'journal_read']),), True),
            ('seq', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('rule', 'isin', (('allowed_values', ['C1', 'C2', 'C3', 'C4', 'C5', 'C6', 'C7', 'C8', 'C9', 'C10', 'C11', 'C12', 'C13', 'D1', 'D2', 'D3', 'D4', 'J1', 'J2', 'J3', 'J4', 'J5', 'J6', 'F', 'DEAD']),), True),
        ),
    },
    'MessagesSchema': {
        "schema": {
            'run_dir': pl.String,
            'run_id': pl.String,
            'source': pl.String,
            'position': pl.Int64,
            'sequence': pl.Int64,
            'line_no': pl.Int64,
            'created_at': pl.Datetime('us', 'UTC'),
            'step': pl.Int64,
            'item': pl.String,
            'role': pl.String,
            'content': pl.String,
            'content_clipped': pl.Boolean,
            'tool_calls': pl.List(pl.String),
            'tool_call_ids': pl.List(pl.String),
            'tool_calls_json': pl.String,
            'tool_call_id': pl.String,
            'tool_name': pl.String,
            'ok': pl.Boolean,
            'error': pl.String,
            'context_source': pl.String,
            'input_tokens': pl.Int64,
            'output_tokens': pl.Int64,
            'total_tokens': pl.Int64,
        },
        'not_null': ('run_dir', 'source', 'item', 'content_clipped', 'tool_calls', 'tool_call_ids'),
        'unique': (),
        "checks": (
            ('source', 'isin', (('allowed_values', ['session.json', 'events']),), True),
            ('position', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('sequence', 'greater_than_or_equal_to', (('min_value', 0),), True),
            ('line_no', 'greater_than_or_equal_to', (('min_value', 1),), True),
            ('item', 'isin', (('allowed_values', ['message', 'tool_observation', 'injected_context', 'model.completed', 'tool.completed', 'loop.wind_down_completed', 'thinking.healed', 'role_lane.completed']),), True),
        ),
    },
}
