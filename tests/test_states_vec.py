"""The vectorised ``states_df`` engine equals the reference reducer (issue 4 done-when, issue 6).

Every comparison is whole-frame equality (all columns, dtypes, null positions and float bits)
between ``engine="reference"`` and ``engine="auto"`` (vectorised with per-run fallback), and,
where the vectorised path can express the run, ``engine="vectorized"`` alone.
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

from rivumi_analysis.read.snapshot import load_fleet, read_run
from rivumi_analysis.replay.vectorised import NotVectorizable, fallback_reasons
from rivumi_analysis.tables import states as states_mod
from rivumi_analysis.tables.states import states_df
from tests.conftest import examples
from tests.test_replay_helpers import RUN_ID, Log, manifest, stamp, write_run

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_RUNS = ROOT / "sample_runs"
EXAMPLE = Path(__file__).resolve().parent / "fixtures/example/a66038f97f204cb3aaa96339f195c37e"
_KNOWN_REASONS = {"duplicate_sequence", "tool_calls_not_strings",
                  "overlapping_approvals", "unhashable_verification_name",
                  "time_span_beyond_float"}


def _assert_same(ref: pl.DataFrame, got: pl.DataFrame) -> None:
    assert ref.schema == got.schema
    assert ref.height == got.height
    for name in ref.columns:
        a, b = ref[name], got[name]
        if not a.equals(b):  # name the first differing cell for a readable failure
            bad = ref.with_row_index("_row").filter(a.ne_missing(b))
            row = bad.row(0, named=True)
            raise AssertionError(f"{name} differs at row {row['_row']} (line {row['line_no']}, "
                                 f"{row['event_type']}): reference {row[name]!r}, "
                                 f"vectorised {b[row['_row']]!r}")
    assert ref.equals(got)


@pytest.fixture
def no_pandera(monkeypatch):
    """Skip the (slow, fixed-cost) pandera pass in the many-example tests: both engines
    build the same frame either way, and the sample-run tests validate it."""
    monkeypatch.setattr(states_mod, "_validate", lambda df: df)


def _check(source: Any, **kw: Any) -> pl.DataFrame:
    ref = states_df(source, engine="reference", **kw)
    _assert_same(ref, states_df(source, engine="auto", **kw))
    return ref


# ---------------------------------------------------------------------------- real runs
def test_example_run_is_vectorised_and_equal():
    ref = _check(str(EXAMPLE))
    _assert_same(ref, states_df(str(EXAMPLE), engine="vectorized"))
    for charge in (True, False):
        _assert_same(states_df(str(EXAMPLE), engine="reference", charge_approval_waits=charge),
                     states_df(str(EXAMPLE), engine="vectorized",
                               charge_approval_waits=charge))


def test_every_sample_run_equals_the_reference():
    ref = _check(str(SAMPLE_RUNS))
    assert ref.height > 2000


def test_every_sample_run_alone_equals_the_reference(no_pandera):
    runs = [r for r in load_fleet(str(SAMPLE_RUNS)).runs if r.kind != "external"]
    reasons = fallback_reasons(runs)
    assert set(reasons.values()) <= _KNOWN_REASONS
    assert len(reasons) <= len(runs) // 5  # the common case takes the vectorised path
    # run by run too (a run alone, so no neighbour can hide an offset)
    for run in runs:
        got = states_df(run, engine="auto")
        _assert_same(states_df(run, engine="reference"), got)


def test_vectorized_engine_refuses_what_it_cannot_express(tmp_path):
    log = Log().add("run.created").add("model.requested", step=1)
    log.add("model.requested", seq=1, step=5)
    run = write_run(tmp_path, "r1", log, manifest())
    with pytest.raises(NotVectorizable, match="duplicate_sequence"):
        states_df(str(run), engine="vectorized")
    df = _check(str(run))
    assert df["rejected"].to_list() == [None, None, "duplicate_sequence"]
    with pytest.raises(ValueError, match="engine"):
        states_df(str(run), engine="fast")


def test_empty_and_mixed_sources(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "events.jsonl").write_bytes(b"")
    (empty / "session.json").write_text(json.dumps(manifest()))
    assert _check(str(empty)).height == 0
    # a fallback run between two vectorised ones keeps the run order
    good = Log().add("run.created").model(1).tool("a", "read_file", {"p": 1})
    dup = Log().add("run.created").add("model.requested", step=1).add("x", seq=1)
    write_run(tmp_path / "m", "a1", good, manifest())
    write_run(tmp_path / "m", "b2", dup, manifest())
    write_run(tmp_path / "m", "c3", good, manifest())
    runs = load_fleet(str(tmp_path / "m")).runs
    ref = _check(runs)
    assert ref["run_dir"].unique(maintain_order=True).to_list() == [r.run_dir for r in runs]


def test_loaded_runs_in_many_batches_equal_one_batch_and_the_reference(tmp_path, monkeypatch):
    """Runs already loaded, in batches of 3: each batch's window expressions run in the
    helper thread while the next batch is prepared; the frame equals one batch and the
    reference, with the fallback runs in their places and the first refusal raised."""
    good = Log().add("run.created").model(1).tool("a", "read_file", {"p": 1})
    dup = Log().add("run.created").add("model.requested", step=1).add("x", seq=1)
    for i in range(11):
        write_run(tmp_path / "m", f"r{i:02d}", dup if i in (4, 8) else good, manifest())
    runs = load_fleet(str(tmp_path / "m")).runs + [
        r for r in load_fleet(str(SAMPLE_RUNS)).runs if r.kind != "external"][:40]
    one = states_df(runs)
    monkeypatch.setattr(states_mod, "STATES_BATCH_RUNS", 3)
    threads = []
    real = states_mod._states_begun

    def spy(*a: Any, **kw: Any) -> Any:
        threads.append(a[-1])
        return real(*a, **kw)

    monkeypatch.setattr(states_mod, "_states_begun", spy)
    _assert_same(one, states_df(runs))
    assert len(threads) == -(-len(runs) // 3) and len(set(map(id, threads))) == 1
    _assert_same(states_df(runs, engine="reference"), states_df(runs))
    with pytest.raises(NotVectorizable, match=f"{runs[4].run_dir}: duplicate_sequence"):
        states_df(runs, engine="vectorized")


def test_the_engine_on_loaded_runs_imports_no_pandas(tmp_path):
    """The engine builds its Arrow inputs from buffers: on loaded runs (sample runs: clean,
    damaged, a duplicate sequence handed to the reference) it imports no pandas (pyarrow's
    ``pa.array`` would), and its frame equals the reference reducer's."""
    import subprocess
    import sys

    out = tmp_path / "states.arrow"
    code = ("import sys; from rivumi_analysis.read.snapshot import load_fleet; "
            "from rivumi_analysis.replay.vectorised import vector_states; "
            f"runs = [r for r in load_fleet({str(SAMPLE_RUNS)!r}).runs if r.kind != 'external']; "
            "df, why = vector_states(runs); "
            f"df.drop('_r').write_ipc({str(out)!r}); "
            "print('pandas' in sys.modules, sorted(why.values()))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=str(ROOT))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "['duplicate_sequence']"], p.stdout
    runs = [r for r in load_fleet(str(SAMPLE_RUNS)).runs if r.kind != "external"]
    reasons = fallback_reasons(runs)
    ref = states_mod.states_frame(
        [states_mod.replay_run(r) for r in runs if r.run_dir not in reasons], validate=False)
    _assert_same(ref, pl.read_ipc(out))


@pytest.mark.parametrize(("values", "typ"), [
    ([1, None, -5, 2**62], "int64"), ([None, None], "int64"), ([], "int64"),
    ([0, 1, -1, None], "int8"), ([1.5, None, -0.0, 3.0], "float64"),
    ([True, None, False] * 4, "bool"), (["a", None, "", "é€😀", None], "large_string"),
    (["x", None], "string"), ([], "large_string"), (["x"], "large_string"),
    (["a", "bb", "é"] * 30, "large_string"), ([str(i) for i in range(100)], "large_string"),
    (["2026-01-02T03:04:05.000006Z", None, "9999-12-31T23:59:59.999999Z",
      "0001-01-01T00:00:00Z", "1969-12-31T23:59:59.999999Z"], "timestamp"),
])
def test_engine_arrays_equal_pyarrows(values, typ):
    """(Timestamps as the loader gives them: UTC datetimes, ``read.decode.parse_created_at``.)"""
    import datetime as dt

    import pyarrow as pa

    from rivumi_analysis.replay.vectorised import _TS_US, _arrow

    arrow_type = _TS_US if typ == "timestamp" else pa.type_for_alias(typ)
    if typ == "timestamp":
        values = [None if v is None else dt.datetime.fromisoformat(v) for v in values]
    got = _arrow(values, arrow_type)
    got.validate(full=True)
    want = pa.array(values, arrow_type)
    assert got.type == want.type and got.equals(want)
    assert got.is_null().to_pylist() == want.is_null().to_pylist()


@pytest.mark.parametrize("values", [["\ud800"], ["a", "\udfff"] * 50, [2**63]])
def test_engine_arrays_refuse_what_pyarrow_refuses(values):
    """A lone surrogate (a run folder name that is not UTF-8: the caller then shows
    U+FFFD) and an int beyond int64 raise the same error type as ``pa.array``."""
    import pyarrow as pa

    from rivumi_analysis.replay.vectorised import _arrow

    typ = pa.int64() if isinstance(values[0], int) else pa.large_string()
    with pytest.raises(Exception) as want:
        pa.array(values, typ)
    with pytest.raises(want.type):
        _arrow(values, typ)


@settings(max_examples=examples(80), deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "model.requested", "é"]), max_size=300),
       st.integers(0, 3), st.lists(st.sampled_from(["a", "b", "model.requested", "zz"]),
                                    min_size=1, max_size=3), st.booleans())
def test_type_positions_equal_a_scan(values, cut, wanted, null):
    """The engine's row positions of given event types (one dictionary encoding, numpy over
    its codes) equal a plain scan, on a sliced array too (non-zero offset) and with a null
    (then the Arrow path answers)."""
    import pyarrow as pa

    from rivumi_analysis.replay.vectorised import _arrow, _Positions

    values = [*values, None] if null else values
    arr = pa.concat_arrays([_arrow(values, pa.large_string())]).slice(min(cut, len(values)))
    rows = arr.to_pylist()
    assert _Positions(arr)(wanted) == [i for i, v in enumerate(rows) if v in wanted]


_SETTER_VALUES = {"int64": st.integers(-5, 5), "int8": st.integers(-1, 1),
                  "float64": st.floats(-1, 1), "bool": st.booleans(),
                  "large_string": st.sampled_from(["a", "é", ""])}


@settings(max_examples=examples(150), deadline=None)
@given(st.sampled_from(sorted(_SETTER_VALUES)), st.data())
def test_setter_columns_equal_the_full_list(typ, data):
    """A setter column (the rows that set it, every other row its default) made dense equals
    the full list of values, with nulls from the default or from a value set to None."""
    import pyarrow as pa

    from rivumi_analysis.replay.vectorised import _Sparse

    value = _SETTER_VALUES[typ]
    n = data.draw(st.integers(0, 40))
    col = _Sparse(data.draw(st.one_of(st.none(), value)))
    for row in data.draw(st.lists(st.integers(0, max(n - 1, 0)), unique=True)) if n else ():
        col[row] = data.draw(st.one_of(value, st.none()) if data.draw(st.booleans()) else value)
    got = col.dense(n, pa.type_for_alias(typ))
    got.validate(full=True)
    want = pa.array([col.get(i, col.default) for i in range(n)], pa.type_for_alias(typ))
    assert got.type == want.type and got.equals(want)
    assert got.is_null().to_pylist() == want.is_null().to_pylist()


# ---------------------------------------------------------------------------- built logs
def _ops_log(ops: list[tuple[Any, ...]]) -> Log:
    """A protocol-shaped log from a list of operations (hypothesis draws the list)."""
    log = Log().add("run.created", at=0, provider="p", model="m", prompt_version="v",
                    base_sha="0" * 40)
    step = 0
    for op in ops:
        kind = op[0]
        if kind == "step":
            _, names, usage = op
            step += 1
            log.model(step, usage, tool_calls=list(names))
        elif kind == "tool":
            _, tcid, name, arg, approve = op
            log.tool(tcid, name, {"path": arg}, effect="execute" if approve else "read",
                     approve=approve)
        elif kind == "omitted":
            log.add("tool.requested", tool_call_id=op[1], name="create_file", effect="modify",
                    arguments={"omitted": True, "utf8_bytes": 30000, "sha256": op[2] * 64})
        elif kind == "unknown":
            log.add("tool.completed", tool_call_id=op[1], name="save_memory", ok=False,
                    error="Unknown tool 'save_memory'. Available tools: read_file")
        elif kind == "open_approval":
            log.add("approval.requested", request_id=op[1], action_id="a", effect="execute",
                    reason="model_tool", policy_reason="p", preview="")
        elif kind == "resolve":
            log.add("approval.resolved", request_id=op[1], action_id="a", effect="execute",
                    reason="model_tool", policy_reason="p", decision="allow_once")
        elif kind == "start":
            log.add("tool.started", tool_call_id=op[1], name="shell", effect="execute")
        elif kind == "complete":
            log.add("tool.completed", tool_call_id=op[1], name="shell", ok=True, error=None,
                    preview="")
        elif kind == "check":
            log.add("verification.started", name=op[1], argv=["make"])
            if op[2]:
                log.add("verification.completed", name=op[1], argv=["make"], ok=True,
                        exit_code=0, duration_seconds=0.5)
        elif kind == "review":
            log.add("role_lane.completed", role="reviewer", provider="p", model="m",
                    usage={"input_tokens": op[1], "output_tokens": 2, "total_tokens": op[1] + 2},
                    cost=None, preview="")
        elif kind == "resume":
            log.add("session.resumed", at=log.t + op[1], provider="p", model="m",
                    base_sha="0" * 40, resumed_step=step)
            if op[2]:
                log.add("approval.abandoned", request_id=op[2], action_id="a",
                        effect="execute", reason="process_interrupted_before_decision")
        elif kind == "end":
            log.add(op[1], terminal_reason=op[2], changed_files=[])
        elif kind == "continue":
            log.add("session.continued", provider="p", model="m", base_sha="0" * 40,
                    resumed_step=step)
        elif kind == "gap":
            log.seq += op[1]
        elif kind == "dup":
            log.add("model.retry", seq=max(0, log.seq - 1), attempt=1, provider="p",
                    error="x", delay_seconds=1.0)
        elif kind == "wind_down":
            log.add("loop.wind_down_started", step=step)
    return log


_tcid = st.sampled_from(["t1", "t2", "t3"])
_rid = st.sampled_from(["r1", "r2"])
_op = st.one_of(
    st.tuples(st.just("step"), st.lists(st.sampled_from(["read_file", "shell", "save_memory"]),
                                        max_size=2),
              st.one_of(st.none(), st.fixed_dictionaries(
                  {"input_tokens": st.integers(0, 50), "output_tokens": st.integers(0, 9)},
                  optional={"provider_total_tokens": st.integers(0, 99)}))),
    st.tuples(st.just("tool"), _tcid, st.sampled_from(["read_file", "shell"]),
              st.sampled_from(["a", "b"]), st.sampled_from([0.0, 0.0, 2.5, 30.0])),
    st.tuples(st.just("omitted"), _tcid, st.sampled_from(["a", "b"])),
    st.tuples(st.just("unknown"), _tcid),
    st.tuples(st.just("open_approval"), _rid),
    st.tuples(st.just("resolve"), _rid),
    st.tuples(st.just("start"), _tcid),
    st.tuples(st.just("complete"), _tcid),
    st.tuples(st.just("check"), st.sampled_from(["c1", "c2"]), st.booleans()),
    st.tuples(st.just("review"), st.integers(0, 20)),
    st.tuples(st.just("resume"), st.sampled_from([0.0, 5.0, 120.0]),
              st.sampled_from([None, "r1", "r2"])),
    st.tuples(st.just("end"), st.sampled_from(["run.completed", "run.failed", "run.cancelled"]),
              st.sampled_from(["verified", "repeated_action", None])),
    st.tuples(st.just("continue")),
    st.tuples(st.just("gap"), st.integers(1, 3)),
    st.tuples(st.just("dup")),
    st.tuples(st.just("wind_down")),
)
_SETTINGS = settings(max_examples=examples(200), deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])


def _compare_log_bytes(data: bytes, request: dict[str, Any] | None,
                       charge: bool | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / RUN_ID
        run.mkdir()
        (run / "events.jsonl").write_bytes(data)
        (run / "session.json").write_text(json.dumps(manifest()))
        if request is not None:
            (run / "request.json").write_text(json.dumps(request))
        _check(read_run(str(run)), charge_approval_waits=charge)


@_SETTINGS
@given(st.lists(_op, max_size=30),
       st.sampled_from([None, {"limits": {"max_steps": 4, "max_total_tokens": 120,
                                          "wall_time_seconds": 60}}, {}]),
       st.sampled_from([None, False, True]))
def test_generated_protocol_logs_equal_the_reference(no_pandera, ops, request, charge):
    _compare_log_bytes(_ops_log(ops).bytes(), request, charge)


# Random envelopes with odd data types, missing times, duplicates and gaps (no protocol).
_TYPES = ["run.created", "model.requested", "model.completed", "tool.requested", "tool.started",
          "tool.completed", "approval.requested", "approval.resolved", "approval.abandoned",
          "session.resumed", "session.continued", "verification.started",
          "verification.completed", "verification.reused", "run.failed", "run.completed",
          "role_lane.completed", "loop.wind_down_started", "model.failed", "run.forked"]
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2, 5), st.sampled_from(["", "a", "b"]))
_data = st.fixed_dictionaries({}, optional={
    "step": st.one_of(st.integers(0, 5), st.booleans(), st.text(max_size=2)),
    "name": _scalar,
    "arguments": st.one_of(st.dictionaries(st.sampled_from(["p"]), st.integers(0, 1)),
                           st.just({"omitted": True, "sha256": "x"}), st.none(), _scalar),
    "tool_call_id": _scalar,
    "request_id": _scalar,
    "tool_calls": st.one_of(st.lists(st.sampled_from(["a", "b"]), max_size=2), _scalar),
    "usage": st.one_of(_scalar, st.dictionaries(
        st.sampled_from(["input_tokens", "output_tokens", "provider_total_tokens",
                         "cached_input_tokens", "reasoning_tokens"]),
        st.one_of(st.integers(0, 9), st.booleans(), st.none(), st.just(1.5)))),
    "terminal_reason": _scalar,
    "error": st.sampled_from(["Unknown tool 'x'", "boom", None]),
})
_line = st.tuples(st.integers(0, 40), st.sampled_from(_TYPES),
                  st.one_of(st.none(), st.integers(0, 200)), _data)


@_SETTINGS
@given(st.lists(_line, max_size=25), st.sampled_from([None, False, True]))
def test_generated_odd_logs_equal_the_reference(no_pandera, lines, charge):
    out = []
    for i, (seq, et, at, data) in enumerate(lines):
        obj: dict[str, Any] = {"data": data, "event_id": f"{i:032x}", "event_type": et,
                               "run_id": RUN_ID, "sequence": seq, "task_id": "task"}
        if at is not None:
            obj["created_at"] = stamp(at * 0.37)
        out.append(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    _compare_log_bytes(b"".join(out), {"limits": {"max_steps": 3}}, charge)


def test_hand_made_edge_logs(tmp_path):
    # resume while an approval is open (wait and outage not charged), then continuation
    log = Log().add("run.created", at=0).model(1, tool_calls=["shell"])
    log.add("tool.requested", tool_call_id="a", name="shell", effect="execute",
            arguments={"c": 1})
    log.add("approval.requested", request_id="r1", action_id="a", effect="execute",
            reason="model_tool", policy_reason="p", preview="")
    log.add("session.resumed", at=log.t + 100.0, resumed_step=1)
    log.add("approval.abandoned", request_id="r1", action_id="a", effect="execute",
            reason="process_interrupted_before_decision")
    log.tool("b", "shell", {"c": 1}).add("run.completed", terminal_reason="verified")
    log.add("session.continued").tool("c", "shell", {"c": 1})
    log.seq += 5  # a gap: replay allows it, the reducer does not care
    log.model(2).add("run.failed", terminal_reason="wall_time_exceeded")
    run = write_run(tmp_path, "edge", log, manifest(),
                    request={"limits": {"max_steps": 3, "wall_time_seconds": 50}})
    ref = _check(str(run))
    _assert_same(ref, states_df(str(run), engine="vectorized"))
    assert ref["resume_count"].max() == 1 and ref["continuation_index"].max() == 1
    # an interleaved read-only batch: two tools in flight at once
    log = Log().add("run.created").model(1, tool_calls=["read_file", "read_file"])
    log.add("tool.requested", tool_call_id="a", name="read_file", effect="read",
            arguments={"p": 1})
    log.add("tool.requested", tool_call_id="b", name="read_file", effect="read",
            arguments={"p": 2})
    for kind in ("tool.started", "tool.started", "tool.completed", "tool.completed"):
        log.add(kind, tool_call_id="a" if log.seq % 2 else "b", name="read_file", ok=True)
    run = write_run(tmp_path, "batch", log, manifest())
    ref = _check(str(run))
    assert ref["side_effects_in_flight"].max() == 2


def test_calls_pending_at_a_settle_point_are_vectorised(tmp_path):
    # §10.1: the tripping call never reaches the log (repeat of the last name), a call with a
    # new name gets an unknown fingerprint, several pending calls settle in order, and a
    # session.continued forgets the last name (so a pending call after it is a new key)
    log = Log().add("run.created").model(1, tool_calls=["shell"]).tool("a", "shell", {"c": 1})
    log.model(2, tool_calls=["shell"]).tool("b", "shell", {"c": 1})
    log.model(3, tool_calls=["shell"]).add("run.failed", terminal_reason="repeated_action")
    log.add("session.continued").model(4, tool_calls=["read_file", "shell", "read_file"])
    log.tool("c", "shell", {"c": 2})  # one of the three is logged, two are still pending
    log.add("loop.wind_down_started", step=4)
    log.model(5, tool_calls=["shell"]).add("session.resumed", resumed_step=5)
    log.model(6, tool_calls=["shell"]).add("run.completed", terminal_reason="verified")
    run = write_run(tmp_path, "settle", log, manifest())
    assert fallback_reasons([read_run(str(run))]) == {}
    ref = _check(str(run))
    _assert_same(ref, states_df(str(run), engine="vectorized"))
    assert ref["unlogged_guard_calls"].to_list()[-1] == 4
    assert ref.filter(pl.col("event_type") == "run.failed")["repeat_count"].to_list() == [3]
    assert ref["fingerprint_unknown"].any() and ref["repeat_count"].max() == 3


@pytest.mark.parametrize(("text", "proved"), [
    ('"\\u00e9"', True), ('"\\\\u0000"', False),  # conservative: any spelling refused
    ('"\\u0000"', False), ('"\\ud800"', False), ('"\\uDFFF"', False),
    ('"\\ud83d\\ude00"', False)])
def test_replay_proof_leaves_nul_and_surrogate_escapes_to_the_exact_engine(tmp_path, text,
                                                                          proved):
    from rivumi_analysis.replay.proof import envelopes_ok, replay_accepts_fast
    from rivumi_analysis.replay.runner import replay_verdict

    log = Log().add("run.created").add("model.requested", step=1, note="SLOT")
    run = write_run(tmp_path, "escapes", log, manifest())
    (run / "events.jsonl").write_bytes(log.bytes().replace(b'"SLOT"', text.encode()))
    snap = read_run(str(run))
    assert replay_accepts_fast(snap, envelopes_ok(snap)) is proved
    if proved:
        assert replay_verdict(snap.events_bytes, snap.events_status, snap.run_dir)[0]
    _check(str(run))


def test_time_spans_beyond_float_precision_fall_back(tmp_path):
    """A damaged timestamp 2**53 us (285 years) or more after the others: a float64
    difference would round twice (the engine once gave a bit-flipped year's run a charged
    wall time 1 ulp off), so the run goes to the reference reducer; a span just below stays
    vectorised."""
    for late, vectorised in (("6023-12-24T21:00:00.000008Z", False),
                             ("2300-12-24T21:00:00.000008Z", True)):
        log = Log().add("run.created", at=0).model(1)
        log.add("tool.progress", at=99.0)
        data = log.bytes().replace(stamp(99.0).encode(), late.encode())
        run = tmp_path / late[:4]
        run.mkdir()
        (run / "events.jsonl").write_bytes(data)
        (run / "session.json").write_text(json.dumps(manifest()))
        assert (fallback_reasons([read_run(str(run))]) == {}) is vectorised
        _check(str(run))


def test_public_reference_engine_runs_the_reducer(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The public ``states_df(engine="reference")`` reduces every run event by event (issue
    28): it is not answered from the store, which holds the vectorised engine's table."""
    import rivumi_analysis

    store = tmp_path / "store"
    auto = rivumi_analysis.states_df(str(EXAMPLE), store_dir=store)  # fills the store
    reduced: list[str] = []
    real = states_mod.replay_run

    def spy(run: Any, **kw: Any) -> Any:
        reduced.append(run.run_dir)
        return real(run, **kw)

    monkeypatch.setattr(states_mod, "replay_run", spy)
    ref = rivumi_analysis.states_df(str(EXAMPLE), store_dir=store, engine="reference")
    assert reduced == [str(EXAMPLE)]
    _assert_same(ref, auto)
    reduced.clear()
    assert rivumi_analysis.states_df(str(EXAMPLE), store_dir=store).equals(auto)
    assert reduced == []  # the default engine is answered from the store
