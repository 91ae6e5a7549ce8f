"""Tests of states_df (issue 4, deliverable 1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rivumi_analysis.errors import QuarantineError
from rivumi_analysis.replay.reducer import events_from_bytes, iter_transitions, state_row
from rivumi_analysis.schemas import StatesSchema
from rivumi_analysis.tables.states import STATE_COLUMNS, states_df
from tests.conftest import examples
from tests.test_replay_helpers import Log, manifest, write_run

EXAMPLE = Path(__file__).resolve().parent / "fixtures/example/a66038f97f204cb3aaa96339f195c37e"


def test_example_states_table():
    df = states_df(str(EXAMPLE))
    assert df.columns == list(STATE_COLUMNS)
    assert df.height == 50 and df["line_no"].to_list() == list(range(1, 51))
    assert df["sequence"].to_list() == list(range(50))
    StatesSchema.validate(df)
    last = df.row(-1, named=True)
    assert (last["step"], last["total_tokens"], last["repeat_count"]) == (7, 7583, 1)
    assert last["terminal"] and last["phase"] == "completed"
    assert last["runner_generation"] == "m4" and last["charge_approval_waits"]
    assert df["fork_accepted"].all() and df["rejected"].is_null().all()
    assert df.filter(pl.col("sequence") == 7)["fork_safe"].to_list() == [False]


def test_states_df_equals_reference_reducer_rows():
    df = states_df(str(EXAMPLE), charge_approval_waits=False)
    ref = [state_row(t.state, charge_approval_waits=False)
           for t in iter_transitions(events_from_bytes((EXAMPLE / "events.jsonl").read_bytes()))]
    got = df.drop("run_dir", "run_id", "kind", "line_no", "sequence", "event_type", "created_at",
                  "rejected", "fork_accepted", "runner_generation",
                  "charge_approval_waits").to_dicts()
    assert got == ref
    assert not df["charge_approval_waits"].any()


def test_rejected_rows_and_fork_accepted(tmp_path):
    log = Log().add("run.created").add("model.requested", step=1)
    log.add("model.requested", seq=1, step=5)
    run = write_run(tmp_path, "r1", log, manifest(last_event_sequence=1, phase="running",
                                                  terminal=False, step=1))
    df = states_df(str(run))
    assert df["rejected"].to_list() == [None, None, "duplicate_sequence"]
    assert df["step"].to_list() == [0, 1, 1]
    assert not df["fork_accepted"].any()  # replay refuses the whole log (rule 13)


def test_limits_from_request(tmp_path):
    log = Log().add("run.created").model(1).model(2)
    run = write_run(tmp_path, "r1", log, manifest(),
                    request={"limits": {"max_steps": 3, "max_total_tokens": 100}})
    last = states_df(str(run)).row(-1, named=True)
    assert (last["steps_remaining"], last["tokens_remaining"]) == (1, 70)
    assert last["wall_time_remaining_seconds"] is not None


def test_strict_raises_on_quarantined_line(tmp_path):
    run = tmp_path / "r1"
    shutil.copytree(EXAMPLE, run)
    with open(run / "events.jsonl", "ab") as fh:
        fh.write(b"not json\n")
    assert states_df(str(run)).height == 50
    with pytest.raises(QuarantineError):
        states_df(str(run), strict=True)


_EXAMPLE_BYTES = (EXAMPLE / "events.jsonl").read_bytes()


@settings(max_examples=examples(15), deadline=None)
@given(st.integers(0, len(_EXAMPLE_BYTES)))
def test_states_df_on_byte_cuts_of_the_example(cut):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "a66038f97f204cb3aaa96339f195c37e"
        run.mkdir()
        (run / "events.jsonl").write_bytes(_EXAMPLE_BYTES[:cut])
        (run / "session.json").write_bytes((EXAMPLE / "session.json").read_bytes())
        df = states_df(str(run))
        complete = _EXAMPLE_BYTES[:cut].count(b"\n")
        assert df.height in (complete, complete + 1)  # + a final line that parses whole
        # replay refuses a torn final line, so no row may claim a fork would be accepted then
        if cut and not _EXAMPLE_BYTES[:cut].endswith(b"\n"):
            assert not df["fork_accepted"].any()


def test_batched_reading_equals_one_pass(monkeypatch):
    """states_df reads and reduces runs in batches; the batch size never changes the table."""
    from rivumi_analysis.tables import states as states_mod
    from tests.conftest import SAMPLE_RUNS

    monkeypatch.setattr(states_mod, "STATES_BATCH_RUNS", 10_000)
    one_pass = states_mod.states_df(str(SAMPLE_RUNS))
    for size in (1, 7):
        monkeypatch.setattr(states_mod, "STATES_BATCH_RUNS", size)
        assert states_mod.states_df(str(SAMPLE_RUNS)).equals(one_pass), size
