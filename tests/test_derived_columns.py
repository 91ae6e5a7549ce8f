"""The six derived tables built from a clean log's columns equal their row builders.

``tool_calls``, ``approvals``, ``model_calls``, ``usage``, ``verifications`` and ``messages``
have a column builder (``X_table``: positional rows straight from the log's envelopes and
parsed ``data``, no ``Event``, no row dict) for clean logs and keep their row builders over
``RunData.events`` for every other run and as the oracle. Sample runs, fixtures, a generated
corpus, damaged runs and mutated logs go through the store's chunk in
``tests/test_store_chunk.py``; here the logs are generated from the data the tables read, with
values of every JSON type in every key (the ``_str``/``_int``/``_bool`` rules, repeated and
missing ids, a batch announced after its calls, fallbacks, clipped texts, non-ASCII text,
timestamps centuries apart), and every run must be clean so the column builders are what
runs.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from rivumi_analysis.read.discovery import discover
from rivumi_analysis.read.snapshot import iter_runs
from rivumi_analysis.store.build import read_runs, read_runs_for_tables
from rivumi_analysis.tables._common import checked_views, is_clean, polars_schema
from tests.conftest import SAMPLE_RUNS, examples
from tests.test_replay_helpers import manifest

TABLES = ("tool_calls", "approvals", "model_calls", "usage", "verifications", "messages")
ROOT = Path(__file__).resolve().parent.parent


def _module(name: str) -> Any:
    return importlib.import_module(f"rivumi_analysis.tables.{name}")


def _check(source: str) -> list[bool]:
    """Every derived table of ``source`` from the columns equals the row builder's; returns
    which runs were clean."""
    locations = discover(source).runs
    runs = read_runs_for_tables(locations)  # a clean log as its CleanLog (the store's chunk)
    columnar = list(iter_runs(locations, columnar=True))  # ... and read for columns (loaders)
    exact = read_runs(locations)
    for name in TABLES:
        m = _module(name)
        want = getattr(m, f"{name}_frame")(exact)
        for handed in (runs, checked_views(columnar, m.BUILDERS.clean)):
            got = getattr(m, f"{name}_table")(handed)
            assert_frame_equal(got, want, check_exact=True), name
    # the same clean-log test for both readings (the audit's reading builds the objects of
    # an external run's log)
    assert [is_clean(r) for r in runs] == [is_clean(v) and v.kind != "external"
                                           for v in columnar]
    return [is_clean(r) for r in runs]


def test_positional_columns_are_the_schema_columns() -> None:
    for name in TABLES:
        m = _module(name)
        assert m._COLUMNS == tuple(polars_schema(m._model())), name


def test_sample_runs_and_fixtures_both_paths() -> None:
    clean = _check(str(SAMPLE_RUNS))
    assert any(clean) and not all(clean)  # clean and exact runs, interleaved
    _check(str(ROOT / "tests" / "fixtures"))


# --- generated logs: every key the tables read, every JSON type -------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"),
                              blacklist_characters="\ufeff"), max_size=12)
_IDS = st.sampled_from(["a", "b", "c"])
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-3, 5), _IDS,
                    st.floats(allow_nan=False, allow_infinity=False), _TEXT)
_VALUE = st.recursive(_SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_IDS, inner, max_size=3)), max_leaves=6)
_CLIPPED = st.builds(lambda a, n, b: f"{a}\n... output truncated ({n} bytes omitted) ...\n{b}",
                     _TEXT, st.integers(0, 10**6), _TEXT)
_TOKENS = st.dictionaries(st.sampled_from(["input_tokens", "output_tokens",
                                           "cached_input_tokens", "reasoning_tokens",
                                           "provider_total_tokens", "total_tokens"]),
                          st.one_of(st.integers(0, 99), st.none(), st.booleans(), _IDS),
                          max_size=6)
_COST = st.fixed_dictionaries({}, optional={
    k: st.one_of(st.just(-0.0), st.floats(-1, 1), st.integers(0, 3), st.booleans(), _IDS,
                 st.none())
    for k in ("input_cost", "cached_input_cost", "output_cost", "total_cost", "currency",
              "source")}) | st.sampled_from([  # the sum of the three costs, -0.0 included
                  {"input_cost": -0.0, "cached_input_cost": -0.0, "output_cost": -0.0},
                  {"input_cost": 0.1, "cached_input_cost": 0.2, "output_cost": 0.3}])
_KEYS: dict[str, Any] = {
    "step": st.one_of(st.integers(0, 9), _SCALAR),
    "tool_call_id": st.one_of(_IDS, _IDS, _SCALAR),
    "tool_call_ids": st.one_of(st.lists(st.one_of(_IDS, _SCALAR), max_size=3), _SCALAR),
    "name": st.one_of(_IDS, _SCALAR),
    "effect": st.one_of(st.sampled_from(["read", "modify"]), _SCALAR),
    "arguments": st.one_of(st.none(), _VALUE, st.fixed_dictionaries(
        {"omitted": st.one_of(st.just(True), _SCALAR), "utf8_bytes": _SCALAR})),
    "ok": _SCALAR,
    "error": st.one_of(st.sampled_from(["Unknown tool x", "approval denied", "denied by x"]),
                       _SCALAR),
    "preview": st.one_of(_TEXT, _CLIPPED, _SCALAR),
    "content": st.one_of(_TEXT, _CLIPPED, _SCALAR),
    "text": st.one_of(_TEXT, _SCALAR),
    "request_id": st.one_of(_IDS, _IDS, _SCALAR),
    "action_id": _SCALAR, "reason": _SCALAR, "policy_reason": _SCALAR, "decision": _SCALAR,
    "provider": _SCALAR, "model": _SCALAR, "to_provider": _SCALAR, "to_model": _SCALAR,
    "finish_reason": _SCALAR, "kind": _SCALAR, "role": _SCALAR,
    "tool_calls": st.one_of(st.lists(st.one_of(_IDS, _SCALAR), max_size=3), _SCALAR),
    "usage": st.one_of(_TOKENS, _SCALAR),
    "cost": st.one_of(_COST, _SCALAR),
    "argv": st.one_of(st.lists(st.one_of(_TEXT, _SCALAR), max_size=3), _SCALAR),
    "exit_code": _SCALAR,
    "duration_seconds": _SCALAR,
}
_APPROVAL = ("request_id", "action_id", "effect", "reason", "policy_reason", "decision")
_VERIFICATION = ("name", "argv", "ok", "error", "exit_code", "duration_seconds")
_SETTING = ("provider", "model")
_READS = {  # event type -> the keys the tables read of it
    "run.created": _SETTING, "session.resumed": _SETTING, "session.continued": _SETTING,
    "model.requested": ("step",), "model.retry": (), "model.fallback": ("to_provider", "to_model"),
    "model.completed": ("step", "finish_reason", "tool_calls", "usage", "content"),
    "model.failed": ("kind",),
    "tool.requested": ("tool_call_id", "name", "effect", "arguments"),
    "tool.started": ("tool_call_id", "name", "effect"),
    "tool.completed": ("tool_call_id", "name", "effect", "ok", "error", "preview"),
    "tool.batch_started": ("tool_call_ids", "tool_call_id"),
    "tool.batch_completed": ("tool_call_id", "tool_call_ids"),
    "approval.requested": _APPROVAL, "approval.resolved": _APPROVAL,
    "approval.reused": _APPROVAL, "approval.abandoned": _APPROVAL,
    "approval.expired": _APPROVAL,
    "verification.started": _VERIFICATION, "verification.completed": _VERIFICATION,
    "verification.reused": _VERIFICATION,
    "loop.wind_down_completed": ("content",), "thinking.healed": ("text",),
    "role_lane.completed": ("role", "provider", "model", "usage", "cost", "preview"),
    "message": ("text", "content"), "workspace.prepared": (),
}
_TYPES = sorted(_READS) + [  # the types that carry most of the state, more often
    "model.requested", "model.completed", "tool.requested", "tool.requested", "tool.started",
    "tool.completed", "tool.completed", "approval.requested", "approval.resolved",
    "verification.started", "verification.completed", "role_lane.completed"]


def _data(etype: str) -> Any:
    """The keys ``etype``'s readers read (each present or not) and maybe one more key."""
    return st.tuples(
        st.fixed_dictionaries({}, optional={k: _KEYS[k] for k in _READS[etype]}),
        st.dictionaries(st.sampled_from(sorted(_KEYS)), _VALUE, max_size=1),
    ).map(lambda parts: {**parts[1], **parts[0]})


_WHEN = st.one_of(
    st.datetimes(min_value=datetime(2026, 8, 20), max_value=datetime(2026, 8, 21)),
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)))
_EVENT = st.sampled_from(_TYPES).flatmap(lambda t: st.tuples(st.just(t), _data(t), _WHEN))
_ITEM = st.one_of(
    st.fixed_dictionaries({"role": _SCALAR, "content": st.one_of(_TEXT, _CLIPPED, _SCALAR)},
                          optional={"tool_calls": st.one_of(_SCALAR, st.lists(st.one_of(
                              _SCALAR, st.fixed_dictionaries({}, optional={
                                  "name": _SCALAR, "tool_call_id": _SCALAR,
                                  "arguments": _VALUE})), max_size=3))}),
    st.fixed_dictionaries({"item_type": _SCALAR, "content": _SCALAR}, optional={"source": _SCALAR}),
    st.fixed_dictionaries({"ok": _SCALAR}, optional={
        "content": _SCALAR, "tool_call_id": _SCALAR, "name": _SCALAR, "error": _SCALAR}),
    _SCALAR)
_RECORD = st.one_of(_SCALAR, st.fixed_dictionaries({}, optional={
    "lane": _SCALAR, "provider": _SCALAR, "model": _SCALAR, "usage": st.one_of(_TOKENS, _SCALAR),
    "cost": st.one_of(_COST, _SCALAR)}))
_MANIFEST = st.fixed_dictionaries({}, optional={
    "messages": st.one_of(st.lists(_ITEM, max_size=4), _SCALAR),
    "model_usage": st.one_of(st.lists(_RECORD, max_size=3), _SCALAR)})


def _stamp(when: datetime) -> str:
    text = f"{when.year:04d}-" + when.strftime("%m-%dT%H:%M:%S")
    return f"{text}.{when.microsecond:06d}Z" if when.microsecond else f"{text}Z"


def _log(events: list[tuple[str, dict[str, Any], datetime]]) -> bytes:
    lines = []
    for seq, (etype, data, when) in enumerate(events):
        lines.append(msgspec.json.encode({
            "created_at": _stamp(when), "data": data, "event_id": f"{seq:032x}",
            "event_type": etype, "run_id": "run-1", "sequence": seq,
            "task_id": None if seq % 3 == 2 else "task"}) + b"\n")
    return b"".join(lines)


@settings(max_examples=examples(100), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.lists(_EVENT, min_size=5, max_size=60), _MANIFEST),
                min_size=1, max_size=3))
def test_generated_logs(tmp_path_factory: pytest.TempPathFactory,
                        runs: list[tuple[list[Any], dict[str, Any]]]) -> None:
    root = tmp_path_factory.mktemp("runs")
    for k, (events, extra) in enumerate(runs):
        run = root / f"run-{k}"
        run.mkdir()
        (run / "events.jsonl").write_bytes(_log(events))
        (run / "session.json").write_text(json.dumps(manifest(**extra)))
    assert all(_check(str(root)))  # every run on the column builders


def test_planted_bug_in_a_column_builder_fails(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    """The comparison can fail: a column builder that takes the step of the call's LAST event
    instead of its first differs on a log where a new step comes between them."""
    run = tmp_path / "run"
    run.mkdir()
    when = datetime(2026, 8, 20, tzinfo=UTC).replace(tzinfo=None)
    (run / "events.jsonl").write_bytes(_log([
        ("model.requested", {"step": 1}, when), ("tool.requested", {"tool_call_id": "a"}, when),
        ("model.requested", {"step": 2}, when), ("tool.completed", {"tool_call_id": "a"}, when)]))
    (run / "session.json").write_text(json.dumps(manifest()))
    assert _check(str(tmp_path)) == [True]
    tc = _module("tool_calls")
    good = tc._fast_rows

    def bad(runs: list[Any]) -> list[Any]:
        rows = good(runs)
        for row in rows:
            row[tc._COLUMNS.index("step")] = 2
        return rows

    monkeypatch.setattr(tc, "BUILDERS", dataclasses.replace(tc.BUILDERS, fast_rows=bad))
    with pytest.raises(AssertionError):
        _check(str(tmp_path))


_W = datetime(2026, 8, 20, 21, 2, 47, 879324)
_EDGES: list[tuple[str, dict[str, Any], datetime]] = [
    ("run.created", {"provider": "p", "model": 5}, _W),
    ("tool.completed", {"tool_call_id": "early", "preview": "x"}, _W),  # before any step
    ("model.requested", {"step": 1}, _W),
    ("tool.requested", {"tool_call_id": "a", "arguments": None}, _W),  # JSON null: "null"
    ("tool.requested", {"tool_call_id": "b"}, _W),  # no arguments at all
    ("tool.requested", {"tool_call_id": "c", "effect": 3,
                        "arguments": {"b": 1.0, "a": [1e-05, "é\n"], "c": {"omitted": 1}}}, _W),
    ("tool.requested", {"tool_call_id": "d", "arguments": {"omitted": True, "utf8_bytes": 9}},
     _W),
    ("tool.requested", {"tool_call_id": "e", "arguments": {"omitted": True}}, _W),
    ("model.requested", {"step": "2"}, _W),  # a step that is not an int: null
    ("tool.started", {"tool_call_id": "a", "effect": "read"}, _W),  # effect filled later
    ("tool.started", {"tool_call_id": "new", "name": "n"}, _W),  # first seen at started
    ("tool.requested", {"tool_call_id": "d", "arguments": "  two   words  "}, _W),  # again
    ("tool.completed", {"tool_call_id": "a", "ok": 1, "error": "boom",
                        "preview": "h\n... output truncated (1000 bytes omitted) ...\nt"},
     _W.replace(year=9999)),  # centuries later
    ("tool.completed", {"tool_call_id": "b", "ok": False, "error": "Unknown tool zz"}, _W),
    ("tool.completed", {"tool_call_id": "c", "error": "approval denied"}, _W),
    ("tool.completed", {"tool_call_id": "e", "error": None, "preview": "é" * 3}, _W),
    ("tool.batch_completed", {"tool_call_id": "f"}, _W),  # a row of its own
    ("tool.batch_started", {"tool_call_ids": ["a", 7, "new"], "tool_call_id": "g"}, _W),
    ("approval.requested", {"request_id": "r1", "policy_reason": None, "effect": "modify"}, _W),
    ("approval.expired", {"request_id": "r2", "action_id": "x"}, _W),  # opens, never closes
    ("approval.reused", {"request_id": "r1", "policy_reason": "p", "decision": "deny"}, _W),
    ("approval.resolved", {"request_id": "r3", "decision": 4}, _W),
    ("approval.abandoned", {"request_id": "r2"}, _W),
    ("approval.requested", {"request_id": 9}, _W),
    ("model.fallback", {"to_provider": "q", "to_model": None}, _W),
    ("model.retry", {}, _W),
    ("model.completed", {"step": 7, "tool_calls": ["a", 1], "content": "hi",
                         "usage": {"input_tokens": 3, "output_tokens": True}}, _W),
    ("model.completed", {"usage": {"total_tokens": 5}}, _W),  # a second completion: ignored
    ("session.resumed", {"provider": "p2", "model": "m2"}, _W),
    ("model.requested", {"step": 3}, _W),
    ("model.failed", {"kind": "timeout"}, _W),
    ("role_lane.completed", {"role": "", "provider": "r", "usage": {"provider_total_tokens": 8},
                             "cost": {"input_cost": -0.0, "cached_input_cost": -0.0,
                                      "output_cost": -0.0}, "preview": "ok"}, _W),
    ("role_lane.completed", {"role": "critic", "usage": {},
                             "cost": {"input_cost": 0.1, "cached_input_cost": 0.2,
                                      "output_cost": 0.3, "currency": "USD"}}, _W),
    ("verification.completed", {"name": "lint", "ok": True}, _W),  # never started
    ("verification.started", {"name": "test", "argv": []}, _W),
    ("verification.started", {"argv": ["x", 1]}, _W),  # no name: ""
    ("verification.completed", {"name": 5, "ok": True}, _W),  # closes it (not a str: "")
    ("verification.completed", {"name": "test", "argv": ["pytest"], "ok": 0, "exit_code": 2,
                                "duration_seconds": 1}, _W),
    ("verification.reused", {"name": "test", "exit_code": 0}, _W),
    ("loop.wind_down_completed", {"content": 5}, _W),
    ("thinking.healed", {"text": "t"}, _W),
    ("message", {"text": "external only"}, _W),
]


@pytest.mark.parametrize("with_usage", [False, True])
def test_edge_cases_of_every_table(tmp_path: Path, with_usage: bool) -> None:
    """Every rule the row builders apply, one event at a time (see the comments)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").write_bytes(_log(_EDGES))
    extra: dict[str, Any] = {"messages": [
        {"role": "assistant", "content": "c", "tool_calls": [
            {"name": "a", "tool_call_id": "1", "arguments": {"z": 1, "y": "é"}}, 5, {"name": 2}]},
        {"item_type": "x", "content": 3, "source": "s"},
        {"ok": True, "content": "o", "tool_call_id": 4, "name": "n", "error": None},
        "not an item", {"other": 1}]}
    if with_usage:  # the manifest's records, not the events
        extra["model_usage"] = [{"lane": None, "usage": {"input_tokens": 1}, "cost": {
            "input_cost": 0.5, "cached_input_cost": 0, "output_cost": True}}, 3, {}]
    (run / "session.json").write_text(json.dumps(manifest(**extra)))
    assert _check(str(tmp_path)) == [True]


@pytest.mark.parametrize("jobs", [1, 2])
def test_loaders_build_from_columns_only_the_logs_the_batch_checks_pass(
        tmp_path: Path, jobs: int) -> None:
    """``load_columnar`` (the ``*_df`` loaders): one run per mutation of the example's log
    (every other line), many of which only just fail a batch check (a timestamp hour 24 or
    30 February, a line over 128 KiB, nesting): every table equals its row builder over the
    exact reading, in process and in a pool."""
    from rivumi_analysis.read.snapshot import load_fleet
    from rivumi_analysis.tables._common import load_columnar
    from tests.test_columnar import LINES, MUTATIONS, _mutate

    for name in sorted(MUTATIONS):
        run = tmp_path / name
        run.mkdir()
        (run / "events.jsonl").write_bytes(b"".join(
            _mutate(name, ln) if i % 2 else ln for i, ln in enumerate(LINES)))
        (run / "session.json").write_text(json.dumps(manifest()))
    runs = load_fleet(str(tmp_path)).runs
    for table in TABLES[:-1]:  # messages_df reads exactly
        m = _module(table)
        got = load_columnar(str(tmp_path), strict=False, max_depth=8, model=m._model(),
                            builders=m.BUILDERS, jobs=jobs)
        assert_frame_equal(got, getattr(m, f"{table}_frame")(runs), check_exact=True)


def test_a_fresh_process_builds_the_tables_without_pandas() -> None:
    """A spawned store worker is a fresh process: building the six tables from the columns
    (times, lists: Arrow arrays from polars' buffers, not ``pa.array`` over Python objects,
    which imports pandas, ~0.2 CPU-s) imports no pandas; the tables are not empty."""
    import subprocess
    import sys

    code = (
        "import sys, importlib; from rivumi_analysis.read.discovery import discover; "
        "from rivumi_analysis.store.build import read_runs_for_tables; "
        f"runs = read_runs_for_tables(discover({str(SAMPLE_RUNS)!r}).runs); "
        f"names = {TABLES!r}; "
        "mods = [importlib.import_module('rivumi_analysis.tables.' + n) for n in names]; "
        "rows = [getattr(m, n + '_table')(runs).height for m, n in zip(mods, names)]; "
        "print('pandas' in sys.modules, min(rows))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=str(ROOT))
    assert p.returncode == 0, p.stderr
    pandas, fewest = p.stdout.split()
    assert pandas == "False" and int(fewest) > 0
