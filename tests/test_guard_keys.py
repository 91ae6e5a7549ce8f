"""The vectorised engine's repeat-guard keys (``vectorised._request_key``) equal the
reference reducer's, call by call, for awkward ``tool.requested`` events.

Generated runs (a few per batch, so identical calls meet across runs) with non-string names,
non-dict, null, missing and omitted-stub arguments, lone surrogates and odd numbers go
through ``states_df(engine="vectorized")`` against ``engine="reference"``, and through the
drift table and the naive guard of the run facts against the reference replay's.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from rivumi_analysis.read.snapshot import read_run
from rivumi_analysis.replay.vectorised import prepare_with_facts
from rivumi_analysis.tables import states as states_mod
from rivumi_analysis.tables.drift import _naive_guard, drift_frame
from rivumi_analysis.tables.replayed import replay_tables
from rivumi_analysis.tables.states import replay_run, states_df
from tests.conftest import examples
from tests.test_replay_helpers import RUN_ID, manifest, stamp
from tests.test_states_vec import _assert_same

_MISSING = object()  # no "arguments" key at all
_text = st.one_of(st.sampled_from(["", "shell", "read_file", "é", "\ud800", "a\udfffb", "\x00",
                                   "𝄞", "omitted", "sha256"]), st.text(max_size=3))
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), _text),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(_text, inner, max_size=3)),
    max_leaves=6)
_stub = st.fixed_dictionaries({"omitted": st.just(True)},
                              optional={"utf8_bytes": st.integers(0, 9),
                                        "sha256": st.one_of(st.just("ab"), _json)})
_near_stub = st.sampled_from([{"omitted": True, "path": "a"}, {"omitted": 1, "sha256": "ab"},
                              {"omitted": "true", "sha256": "ab"}, {"sha256": "ab"}])
_arguments = st.one_of(st.just(_MISSING), st.none(), _json, _stub, _near_stub)
_call = st.tuples(st.one_of(_text, _json), _arguments)
# ops on a small pool of calls, so that calls repeat (the guard counts repeats)
_op = st.one_of(st.tuples(st.just("call"), st.integers(0, 3)),
                st.tuples(st.just("unknown"), st.integers(0, 3)),
                st.tuples(st.just("model"), st.booleans()),
                st.just(("session.resumed",)), st.just(("session.continued",)),
                st.just(("run.completed",)))
_run = st.tuples(st.lists(_call, min_size=1, max_size=4), st.lists(_op, max_size=12),
                 st.booleans())
_SETTINGS = settings(max_examples=examples(120), deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])


def _line(seq: int, event_type: str, data: dict[str, Any], ascii_only: bool) -> bytes:
    obj = {"created_at": stamp(seq * 0.5), "data": data, "event_id": f"{seq:032x}",
           "event_type": event_type, "run_id": RUN_ID, "sequence": seq, "task_id": "task"}
    try:
        text = json.dumps(obj, ensure_ascii=ascii_only, sort_keys=True, separators=(",", ":"))
        return text.encode() + b"\n"
    except UnicodeEncodeError:  # a lone surrogate: written as its JSON escape
        return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _log(pool: list[tuple[Any, Any]], ops: list[tuple[Any, ...]], ascii_only: bool) -> bytes:
    lines = [_line(0, "run.created", {}, ascii_only)]

    def add(event_type: str, **data: Any) -> None:
        lines.append(_line(len(lines), event_type, data, ascii_only))

    for op in ops:
        if op[0] == "call":
            name, args = pool[op[1] % len(pool)]
            data = {"tool_call_id": f"t{len(lines)}", "name": name}
            if args is not _MISSING:
                data["arguments"] = args
            add("tool.requested", **data)
        elif op[0] == "unknown":
            add("tool.completed", tool_call_id=f"t{op[1]}", name=pool[op[1] % len(pool)][0],
                ok=False, error="Unknown tool 'x'")
        elif op[0] == "model":  # the string names become pending calls (settled unlogged)
            add("model.requested", step=len(lines))
            add("model.completed", step=len(lines), tool_calls=[
                n for n, _ in pool if isinstance(n, str)] if op[1] else [])
        else:
            add(op[0])
    return b"".join(lines)


def _compare(runs_spec: list[tuple[Any, ...]], columnar: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plain, runs = [], []
        for k, (pool, ops, ascii_only) in enumerate(runs_spec):
            run = Path(tmp) / f"r{k}"
            run.mkdir()
            (run / "events.jsonl").write_bytes(_log(pool, ops, ascii_only))
            (run / "session.json").write_text(json.dumps(manifest()))
            plain.append(read_run(str(run)))  # the reference reads events, not columns
            runs.append(read_run(str(run), columnar=True) if columnar else plain[-1])
        _assert_same(states_df(plain, engine="reference"), states_df(runs, engine="vectorized"))
        replays = [replay_run(r) for r in plain]
        got = replay_tables(runs, tables=("drift",), validate=False)
        assert_frame_equal(drift_frame(replays, validate=False), got["drift"])
        _, _, reasons, facts = prepare_with_facts(plain, None, {})
        assert not reasons
        assert facts.naive == [_naive_guard(rr) for rr in replays]


@pytest.fixture
def no_pandera(monkeypatch):
    monkeypatch.setattr(states_mod, "_validate", lambda df: df)


@_SETTINGS
@given(st.lists(_run, min_size=1, max_size=3), st.booleans())
def test_generated_tool_requests_equal_the_reference(no_pandera, runs_spec, columnar):
    _compare(runs_spec, columnar)
