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
from rivumi_analysis.store.build import _decoded_view, read_runs, read_runs_for_tables
from rivumi_analysis.tables._common import is_clean, polars_schema
from tests.conftest import SAMPLE_RUNS
from tests.test_replay_helpers import manifest

TABLES = ("tool_calls", "approvals", "model_calls", "usage", "verifications", "messages")
ROOT = Path(__file__).resolve().parent.parent


def _module(name: str) -> Any:
    return importlib.import_module(f"rivumi_analysis.tables.{name}")


def _check(source: str) -> list[bool]:
    """Every derived table of ``source`` from the columns equals the row builder's; returns
    which runs were clean."""
    locations = discover(source).runs
    views = [_decoded_view(r) for r in read_runs_for_tables(locations)]
    exact = read_runs(locations)
    for name in TABLES:
        m = _module(name)
        got = getattr(m, f"{name}_table")(views)
        want = getattr(m, f"{name}_frame")(exact)
        assert_frame_equal(got, want, check_exact=True), name
    return [is_clean(v) for v in views]


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
_COST = st.dictionaries(st.sampled_from(["input_cost", "cached_input_cost", "output_cost",
                                         "total_cost", "currency", "source"]),
                        st.one_of(st.floats(-1, 1), st.just(-0.0), st.integers(0, 3),
                                  st.booleans(), _IDS, st.none()), max_size=6)
_KEYS: dict[str, Any] = {
    "step": st.one_of(st.integers(0, 9), _SCALAR),
    "tool_call_id": st.one_of(_IDS, _IDS, _SCALAR),
    "tool_call_ids": st.one_of(st.lists(st.one_of(_IDS, _SCALAR), max_size=3), _SCALAR),
    "name": st.one_of(_IDS, _SCALAR),
    "effect": st.one_of(st.sampled_from(["read", "modify"]), _SCALAR),
    "arguments": st.one_of(_VALUE, st.fixed_dictionaries(
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
_TYPES = ["run.created", "session.resumed", "session.continued", "model.requested",
          "model.retry", "model.fallback", "model.completed", "model.failed", "tool.requested",
          "tool.started", "tool.completed", "tool.batch_started", "tool.batch_completed",
          "approval.requested", "approval.resolved", "approval.reused", "approval.abandoned",
          "approval.expired", "verification.started", "verification.completed",
          "verification.reused", "loop.wind_down_completed", "thinking.healed",
          "role_lane.completed", "message", "workspace.prepared"]
_DATA = st.dictionaries(st.sampled_from(sorted(_KEYS)), st.none(), max_size=7).flatmap(
    lambda keys: st.fixed_dictionaries({k: _KEYS[k] for k in keys}))
_WHEN = st.one_of(
    st.datetimes(min_value=datetime(2026, 8, 20), max_value=datetime(2026, 8, 21)),
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)))
_EVENT = st.tuples(st.sampled_from(_TYPES), _DATA, _WHEN)
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


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.lists(_EVENT, min_size=1, max_size=25), _MANIFEST),
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

    monkeypatch.setattr(tc, "_fast_rows", bad)
    with pytest.raises(AssertionError):
        _check(str(tmp_path))
