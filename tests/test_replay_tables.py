"""``drift_df`` and ``forks_df`` from the vectorised engine equal the reference replay.

The oracle is one reference replay per run (``engine="reference"``: ``replay_run``, then
``drift_frame``/``forks_frame``); the fast path is the vectorised engine's state rows plus its
run facts (``engine="auto"``, and ``states.replay_tables`` for runs already read, which the
store calls). Every comparison is whole-frame equality.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from rivumi_analysis.read.snapshot import load_fleet, read_run
from rivumi_analysis.replay.reducer import fingerprint
from rivumi_analysis.tables.drift import drift_df, drift_frame
from rivumi_analysis.tables.forks import forks_df, forks_frame
from rivumi_analysis.tables.replayed import replay_tables
from rivumi_analysis.tables.states import replay_run, states_df
from tests.conftest import examples
from tests.test_replay_helpers import RUN_ID, Log, manifest, stamp, write_run
from tests.test_states_vec import _line, _op, _ops_log

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_RUNS = ROOT / "sample_runs"
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLE = FIXTURES / "example" / "a66038f97f204cb3aaa96339f195c37e"


def _check_source(source: Any) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Both loaders, both engines, and replay_tables on the same runs read once."""
    drift = drift_df(source, engine="reference")
    forks = forks_df(source, engine="reference")
    assert_frame_equal(drift, drift_df(source))
    assert_frame_equal(forks, forks_df(source))
    runs = load_fleet(source).runs if not isinstance(source, list) else source
    got = replay_tables(runs)
    assert_frame_equal(drift, got["drift"])
    assert_frame_equal(forks, got["forks"])
    assert_frame_equal(states_df(runs, engine="reference"), got["states"])
    return drift, forks


def _reference(runs: list[Any], charge: bool | None = None) -> dict[str, pl.DataFrame]:
    replays = [replay_run(r, charge_approval_waits=charge) for r in runs if r.kind != "external"]
    return {"drift": drift_frame(replays, validate=False),
            "forks": forks_frame(replays, validate=False)}


def _check_runs(runs: list[Any], charge: bool | None = None) -> None:
    ref = _reference(runs, charge)
    got = replay_tables(runs, charge_approval_waits=charge, tables=("drift", "forks"),
                        validate=False)
    assert_frame_equal(ref["drift"], got["drift"])
    assert_frame_equal(ref["forks"], got["forks"])


# ---------------------------------------------------------------------------- real runs
def test_example_equals_the_reference():
    drift, forks = _check_source(str(EXAMPLE))
    assert drift.height == 13 and forks.height > 30
    for charge in (True, False):
        assert_frame_equal(drift_df(str(EXAMPLE), engine="reference", charge_approval_waits=charge),
                           drift_df(str(EXAMPLE), charge_approval_waits=charge))


def test_every_sample_run_and_fixture_equals_the_reference():
    drift, forks = _check_source(str(SAMPLE_RUNS))
    assert drift.height > 1000
    assert forks.filter(pl.col("row_kind") == "fork_link").height > 0  # links are exercised
    assert set(forks["last_safe_before"].drop_nulls()) == {"failure", "crash"}
    assert drift["explanation"].n_unique() > 5
    _check_source(str(FIXTURES))


def test_every_sample_run_alone_and_read_for_columns():
    runs = load_fleet(str(SAMPLE_RUNS)).runs
    for run in runs:  # alone: no neighbour can hide an offset
        _check_runs([run])
    # read for columns (the fast path's objects instead of events), as the cold loaders do
    cols = [read_run(r.run_dir, is_subagent=r.is_subagent, parent_run_dir=r.parent_run_dir,
                     columnar=True, with_request=True) for r in runs]
    assert any(r.fast is not None for r in cols)
    ref = _reference(runs)
    got = replay_tables(cols, tables=("drift", "forks"), validate=False)
    assert_frame_equal(ref["drift"], got["drift"])
    assert_frame_equal(ref["forks"], got["forks"])


def test_loaders_refuse_an_unknown_engine():
    with pytest.raises(ValueError, match="engine"):
        drift_df(str(EXAMPLE), engine="fast")
    with pytest.raises(ValueError, match="engine"):
        forks_df(str(EXAMPLE), engine="fast")
    with pytest.raises(ValueError, match="tables"):
        replay_tables([], tables=("runs",))


def test_crash_cut_prefixes_of_the_example(tmp_path):
    """The example cut after every line and inside a line (a torn tail), each a run."""
    data = (EXAMPLE / "events.jsonl").read_bytes()
    man = (EXAMPLE / "session.json").read_bytes()
    ends = [i + 1 for i, b in enumerate(data) if b == 0x0A]
    cuts = ends[::3] + [e - 7 for e in ends[1::5]] + [0]
    for n, cut in enumerate(cuts):
        run = tmp_path / "cuts" / f"cut{n:03d}"
        run.mkdir(parents=True)
        (run / "events.jsonl").write_bytes(data[:cut])
        (run / "session.json").write_bytes(man)
    drift, forks = _check_source(str(tmp_path / "cuts"))
    assert drift["run_dir"].n_unique() == len(cuts)
    assert "crash" in set(forks["last_safe_before"].drop_nulls())


@pytest.mark.crash
def test_real_kill_cuts(tmp_path):
    from rivumi_analysis.synth.crash import cut_run

    for i, cut in enumerate(("appended@tool.started", "waiting_approval@approval.requested#3",
                             "manifest_saved@run.completed")):
        cut_run("verified", 0, cut, str(tmp_path / f"k{i}"), timeout=30)
    _check_source(str(tmp_path))


@pytest.mark.corpus
def test_generated_corpus_through_the_pool(tmp_path):
    from rivumi_analysis.synth.corpus import generate_corpus

    generate_corpus(str(tmp_path / "c"), runs=300, target_mb=3, workers=1, seed=11)
    # >= 256 runs: the cold loaders read and prepare in worker processes
    drift, forks = _check_source(str(tmp_path / "c"))
    assert drift["run_dir"].n_unique() >= 250


def test_fallback_and_fork_runs_among_vectorised_ones(tmp_path):
    good = Log().add("run.created", at=0).model(1).tool("a", "read_file", {"p": 1})
    good.add("run.failed", terminal_reason="repeated_action")
    dup = Log().add("run.created").add("model.requested", step=1).add("x", seq=1)
    dup.add("run.failed", terminal_reason="x")
    root = tmp_path / "m"
    write_run(root, "src1", good, manifest(step=1, last_event_sequence=good.seq - 1))
    write_run(root, "dup2", dup, manifest())
    fork = Log().add("run.forked", source_run_id="src1", fork_point_sequence=3,
                     fork_point_event_type="tool.requested", events_included=4)
    fork.model(1)
    write_run(root, "fork3", fork, manifest())
    bad = Log().add("run.forked", source_run_id="dup2", fork_point_sequence=1,
                    fork_point_event_type="model.requested", events_included=True)
    write_run(root, "fork4", bad, manifest())
    lost = Log().add("run.forked", source_run_id="nowhere", fork_point_sequence=0)
    write_run(root, "fork5", lost, [1, 2])  # a manifest that is not an object: no drift rows
    (root / "empty6").mkdir()
    (root / "empty6" / "events.jsonl").write_bytes(b"")
    (root / "empty6" / "session.json").write_text(json.dumps(manifest(step=2)))
    drift, forks = _check_source(str(root))
    links = forks.filter(pl.col("row_kind") == "fork_link")
    assert links["source_found"].to_list() == [True, True, False]
    assert links["fork_point_matches"].to_list()[0] is True
    assert drift.filter(pl.col("explanation") == "events_rejected").height > 0
    assert "fork5" not in "".join(drift["run_dir"].unique().to_list())


# ---------------------------------------------------------------------------- built logs
_SETTINGS = settings(max_examples=examples(150), deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])
_manifest = st.fixed_dictionaries({}, optional={
    "step": st.integers(0, 4),
    "repeat_count": st.integers(0, 3),
    "last_action_fingerprint": st.sampled_from([None, fingerprint("shell", {"path": "a"})]),
    "last_event_sequence": st.integers(-1, 40),
    "phase": st.sampled_from(["created", "running", "preparing", "completed", "failed"]),
    "terminal": st.booleans(),
    "active_wall_time_seconds": st.one_of(st.floats(0, 200), st.integers(0, 5),
                                          st.just("x")),
    "active_started_at": st.one_of(st.none(), st.integers(0, 60).map(stamp)),
    "model_usage": st.one_of(st.just([]), st.just([{"lane": "wind_down"}]),
                             st.just([{"lane": "primary"}]), st.just("x")),
    "verification": st.one_of(st.just([]), st.just([{"name": "c1", "ok": True,
                                                     "exit_code": 0}]), st.just("x")),
    "usage": st.one_of(st.just("x"), st.fixed_dictionaries(
        {"input_tokens": st.integers(0, 60), "output_tokens": st.integers(0, 9)})),
})


def _write(data: bytes, man: dict[str, Any] | None, request: dict[str, Any] | None,
           tmp: str) -> str:
    run = Path(tmp) / RUN_ID
    run.mkdir()
    (run / "events.jsonl").write_bytes(data)
    if man is not None:
        (run / "session.json").write_text(json.dumps(manifest(**man)))
    if request is not None:
        (run / "request.json").write_text(json.dumps(request))
    return str(run)


def _compare(data: bytes, man: dict[str, Any] | None, request: dict[str, Any] | None,
             charge: bool | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(data, man, request, tmp)
        exact = read_run(path)
        ref = _reference([exact], charge)
        for run in (exact, read_run(path, columnar=True, with_request=True)):
            got = replay_tables([run], charge_approval_waits=charge,
                                tables=("drift", "forks"), validate=False)
            assert_frame_equal(ref["drift"], got["drift"])
            assert_frame_equal(ref["forks"], got["forks"])


@_SETTINGS
@given(st.lists(_op, max_size=30), st.one_of(st.none(), _manifest),
       st.sampled_from([None, {"limits": {"max_steps": 4, "max_total_tokens": 120}}]),
       st.sampled_from([None, False, True]), st.booleans())
def test_generated_protocol_logs_equal_the_reference(ops, man, request, charge, batch):
    log = _ops_log(ops)
    if batch:
        log.add("tool.batch_started", tool_call_ids=["t1"])
    _compare(log.bytes(), man, request, charge)


@_SETTINGS
@given(st.lists(_line, max_size=25), st.one_of(st.none(), _manifest),
       st.sampled_from([None, False, True]))
def test_generated_odd_logs_equal_the_reference(lines, man, charge):
    out = []
    for i, (seq, et, at, data) in enumerate(lines):
        obj: dict[str, Any] = {"data": data, "event_id": f"{i:032x}", "event_type": et,
                               "run_id": RUN_ID, "sequence": seq, "task_id": "task"}
        if at is not None:
            obj["created_at"] = stamp(at * 0.37)
        out.append(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    _compare(b"".join(out), man, {"limits": {"max_steps": 3}}, charge)


def test_naive_guard_and_verification_rounds(tmp_path):
    """The run facts the engine adds for drift: the naive guard (null and omitted arguments,
    a resume and a continuation) and the final verification round."""
    log = Log().add("run.created", at=0).model(1, tool_calls=["shell"])
    log.add("tool.requested", tool_call_id="a", name="shell", arguments=None)
    log.add("tool.requested", tool_call_id="b", name="shell")
    log.add("tool.requested", tool_call_id="c", name="shell",
            arguments={"omitted": True, "utf8_bytes": 3, "sha256": "ab"})
    log.add("session.resumed", at=log.t + 30)
    log.tool("d", "shell", {"x": 1}).tool("e", "shell", {"x": 1})
    log.add("verification.started", name="c1").add("verification.completed", name="c1",
                                                    ok=False, exit_code=1)
    log.model(2)
    log.add("verification.completed", name="c1", ok=True, exit_code=0)
    log.add("verification.reused", name="c2", ok=True, exit_code=None)
    log.add("run.completed", terminal_reason="verified")
    log.add("session.continued").tool("f", "shell", {"x": 1})
    verif = [{"name": "c1", "ok": True, "exit_code": 0}, {"name": "c2", "ok": True,
                                                          "exit_code": None}]
    run = write_run(tmp_path, "g", log, manifest(
        repeat_count=1, verification=verif, last_action_fingerprint=fingerprint(
            "shell", {"x": 1}), last_event_sequence=log.seq - 1))
    drift, _ = _check_source(str(run))
    rows = {r["field"]: r for r in drift.to_dicts()}
    assert rows["verification"]["matches"]
    assert rows["repeat_count"]["explanation"] == "continuation_resets_repeat_guard"


def test_facts_that_only_an_explanation_shows(tmp_path):
    """Planted-bug guards: a null ``arguments`` fingerprints as null for the naive guard
    (the reducer's guard reads it as ``{}``), and an approval still open at the end is not a
    closed wait (``m4_charges_approval_waits`` reads the closed ones)."""
    log = Log().add("run.created", at=0).model(1, tool_calls=["shell", "shell"])
    log.add("tool.requested", tool_call_id="a", name="shell", arguments={})
    log.add("tool.requested", tool_call_id="b", name="shell", arguments=None)
    run = write_run(tmp_path, "n", log, manifest(repeat_count=2, last_event_sequence=log.seq - 1,
                                                 last_action_fingerprint=fingerprint("shell", {})))
    drift, _ = _check_source(str(run))
    rows = {r["field"]: r for r in drift.to_dicts()}
    assert rows["repeat_count"]["matches"]
    assert rows["repeat_count"]["explanation"] == "resume_resets_repeat_count"

    log = Log().add("run.created", at=0).model(1)
    log.add("approval.requested", request_id="r", action_id="a", effect="execute",
            reason="model_tool", preview="")
    log.add("tool.progress", at=40.0)
    run = write_run(tmp_path, "o", log, manifest(active_wall_time_seconds=40.0))
    for charge in (True, None):
        ref = drift_df(str(run), engine="reference", charge_approval_waits=charge)
        assert_frame_equal(ref, drift_df(str(run), charge_approval_waits=charge))
        wall = ref.filter(pl.col("field") == "active_wall_time_seconds").row(0, named=True)
        assert wall["matches"] and wall["explanation"] is None


def _clean_reads(source: str) -> list[Any]:
    """The runs of ``source`` as the store's chunk reads them (a clean log as its CleanLog)."""
    from rivumi_analysis.read.discovery import discover
    from rivumi_analysis.store.build import read_for_tables

    return [read_for_tables(loc) for loc in discover(source).runs]


@pytest.mark.corpus
def test_columns_taken_from_the_events_table_of_clean_reads(tmp_path):
    """``replay_tables(runs, events=...)`` (the store's clean reads) equals the tables
    derived without it and the reference, also when the events rows do not cover a run whole
    (that run's columns are then derived again)."""
    from rivumi_analysis.synth.corpus import generate_corpus
    from rivumi_analysis.tables.events import events_frame

    generate_corpus(str(tmp_path / "c"), runs=40, target_mb=0.5, workers=1, seed=4)
    for source in (str(SAMPLE_RUNS), str(FIXTURES), str(tmp_path / "c")):
        runs = _clean_reads(source)
        assert any(r.fast is not None for r in runs)
        events = events_frame(runs)
        plain = replay_tables(runs)
        for ev in (events, events.tail(events.height - 7), events.reverse(),
                   pl.concat([events, events.head(30)])):
            got = replay_tables(runs, events=ev)
            for name in plain:
                assert_frame_equal(plain[name], got[name])
        assert_frame_equal(plain["states"], states_df(source, engine="reference"))
        assert_frame_equal(plain["drift"], drift_df(source, engine="reference"))
        assert_frame_equal(plain["forks"], forks_df(source, engine="reference"))


@_SETTINGS
@given(st.lists(_op, max_size=30), st.one_of(st.none(), _manifest))
def test_generated_clean_logs_with_events_columns(ops, man):
    from rivumi_analysis.tables.events import events_frame

    with tempfile.TemporaryDirectory() as tmp:
        _write(_ops_log(ops).bytes(), man, None, tmp)
        runs = _clean_reads(tmp)
        ref = _reference(load_fleet(tmp).runs)
        got = replay_tables(runs, events=events_frame(runs), tables=("drift", "forks"),
                            validate=False)
        assert_frame_equal(ref["drift"], got["drift"])
        assert_frame_equal(ref["forks"], got["forks"])
