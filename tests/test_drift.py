"""Tests of drift_df (issue 4, deliverable 2)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rivumi_analysis.drift import DRIFT_FIELDS, EXPLANATIONS, drift_df
from rivumi_analysis.reducer import fingerprint
from tests.test_replay_helpers import Log, manifest, stamp, write_run

EXAMPLE = Path("/work/shared/spec/examples/a66038f97f204cb3aaa96339f195c37e")


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
