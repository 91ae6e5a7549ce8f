"""Tests of drift_df (issue 4, deliverable 2)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rivumi_analysis.replay.reducer import fingerprint
from rivumi_analysis.tables.drift import DRIFT_FIELDS, EXPLANATIONS, drift_df
from tests.test_replay_helpers import Log, manifest, stamp, write_run

EXAMPLE = Path(__file__).resolve().parent / "fixtures/example/a66038f97f204cb3aaa96339f195c37e"


def _by_field(df: pl.DataFrame) -> dict[str, dict]:
    return {r["field"]: r for r in df.to_dicts()}


def test_example_has_no_unexplained_drift():
    df = drift_df(str(EXAMPLE))
    assert df["field"].to_list() == list(DRIFT_FIELDS)
    assert not df["unexplained"].any()
    rows = _by_field(df)
    for name in ("step", "last_action_fingerprint", "last_event_sequence", "usage.input_tokens",
                 "usage.output_tokens", "usage.cached_input_tokens", "usage.reasoning_tokens",
                 "usage.provider_total_tokens"):
        assert rows[name]["matches"] and rows[name]["explanation"] is None, name
        assert rows[name]["replayed"] == rows[name]["manifest"]
    assert rows["active_wall_time_seconds"]["explanation"] == "m4_charges_approval_waits"
    assert set(df["explanation"].drop_nulls()) <= set(EXPLANATIONS)


def _usage(i, o):
    return {"input_tokens": i, "output_tokens": o, "cached_input_tokens": 0,
            "reasoning_tokens": 0, "provider_total_tokens": i + o}


def test_resume_reset_is_explained(tmp_path):
    log = Log().add("run.created", at=0).model(1).tool("a", "read_file", {"p": 1})
    log.tool("b", "read_file", {"p": 1})
    log.add("session.resumed", resumed_step=1)
    log.add("run.completed", terminal_reason="no_changes")
    man = manifest(step=1, usage=_usage(10, 5), repeat_count=0, last_event_sequence=log.seq - 1,
                   last_action_fingerprint=fingerprint("read_file", {"p": 1}),
                   active_wall_time_seconds=log.t - 1)
    rows = _by_field(drift_df(str(write_run(tmp_path, "r", log, man))))
    assert rows["repeat_count"]["matches"]
    assert rows["repeat_count"]["explanation"] == "resume_resets_repeat_count"
    assert not any(r["unexplained"] for r in rows.values())


def test_wind_down_usage_and_manifest_ahead(tmp_path):
    log = Log().add("run.created", at=0).model(1)
    log.add("loop.wind_down_started", step=1).add("loop.wind_down_completed", content="x")
    log.add("run.failed", terminal_reason="max_steps_exceeded")
    man = manifest(step=1, usage=_usage(30, 8), last_event_sequence=log.seq - 1,
                   phase="failed", active_wall_time_seconds=log.t - 1)
    rows = _by_field(drift_df(str(write_run(tmp_path, "w", log, man))))
    assert rows["usage.input_tokens"]["explanation"] == "usage_includes_unlogged_lanes"
    assert not rows["usage.input_tokens"]["matches"]
    assert not any(r["unexplained"] for r in rows.values())

    log2 = Log().add("run.created", at=0).model(1)
    man2 = manifest(step=2, usage=_usage(10, 5), last_event_sequence=log2.seq, phase="running",
                    terminal=False, active_wall_time_seconds=log2.t - 1)
    rows = _by_field(drift_df(str(write_run(tmp_path, "a", log2, man2))))
    assert rows["step"]["explanation"] == "manifest_ahead_by_one"
    assert rows["last_event_sequence"]["explanation"] == "manifest_ahead_by_one"


def test_unexplained_drift_and_crash_clock(tmp_path):
    log = Log().add("run.created", at=0).model(1)
    man = manifest(step=5, usage=_usage(10, 5), last_event_sequence=log.seq - 1,
                   phase="running", terminal=False, active_wall_time_seconds=0.5,
                   active_started_at=stamp(0.5))
    rows = _by_field(drift_df(str(write_run(tmp_path, "c", log, man))))
    assert rows["step"]["unexplained"] and rows["step"]["explanation"] is None
    assert rows["active_wall_time_seconds"]["matches"]
    assert rows["active_wall_time_seconds"]["explanation"] == "clock_running_at_crash"


# ---------------------------------------------------------------------------- sample runs
SAMPLE_RUNS = Path(__file__).resolve().parents[1] / "sample_runs"
EXPECTED_DRIFT = {
    # run (group/id prefix): (field, explanation, matches)
    "example/a66038f9": ("active_wall_time_seconds", "m4_charges_approval_waits", True),
    "bad_input/6f2713cc": ("step", "events_rejected", False),
    "crashes/df177557": ("step", "manifest_ahead_by_one", False),
    "crashes/cd525421": ("repeat_count", "continuation_resets_repeat_guard", True),
    "failed/96ac73d9": ("repeat_count", "guard_counts_unlogged_calls", True),
    "failed/cfbf67dc": ("usage.input_tokens", "usage_includes_unlogged_lanes", False),
    "failed/23dc033b": ("usage.input_tokens", "usage_includes_budget_crossing_call", False),
    "resumed/29628e15": ("repeat_count", "resume_resets_repeat_count", True),
    "resumed/a71326098": ("active_wall_time_seconds", "resume_downtime_charged", True),
    "crashes/f61d2521": ("active_wall_time_seconds", "clock_running_at_crash", True),
}


def test_sample_runs_drift_is_explained_and_pinned():
    if not SAMPLE_RUNS.is_dir():  # pragma: no cover
        import pytest

        pytest.skip("sample_runs not generated")
    df = drift_df(str(SAMPLE_RUNS))
    assert not df["unexplained"].any(), df.filter(pl.col("unexplained")).to_dicts()
    rel = df.with_columns(pl.col("run_dir").str.replace(f"^{SAMPLE_RUNS}/?", "").alias("rel"))
    for prefix, (field, explanation, matches) in EXPECTED_DRIFT.items():
        rows = rel.filter(pl.col("rel").str.starts_with(prefix) & (pl.col("field") == field))
        assert rows.height == 1, prefix
        assert (rows["explanation"][0], rows["matches"][0]) == (explanation, matches), prefix
