"""The frame builders' shortcuts equal what they replace, on values of every JSON type.

* ``tables._common.rows_frame`` builds a string-list column of dict rows as one Arrow list
  array when every value is a list of strings: equal to ``pl.DataFrame(rows, schema=...)``
  (the frame it replaces), also when some value is not (it falls back), with lone
  surrogates, missing keys and both ``strict`` settings;
* ``tables.drift`` builds its frame from positional rows: ``drift_rows`` keeps its dict rows
  and ``drift_of_rows`` takes either, with the same frame; ``rows_of`` (both sides as tuples)
  equals its dict formulation, kept here as the oracle, on manifests with values of every
  JSON type in every key and on any run facts (the table tests compare two engines that
  share ``rows_of``, so they cannot see a change in it).
"""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from rivumi_analysis.read.decode import _without_lone_surrogates
from rivumi_analysis.tables._common import rows_frame
from rivumi_analysis.tables.drift import _SCHEMA, drift_of_rows
from tests.conftest import examples

_TEXT = st.text(max_size=6)  # any code point, lone surrogates included
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), _TEXT,
                    st.floats(allow_nan=True, allow_infinity=True))
_JSON = st.recursive(_SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)), max_leaves=8)
_SCHEMA_LISTS = {"a": pl.String, "l": pl.List(pl.String), "n": pl.Int64,
                 "m": pl.List(pl.String)}
_LIST_VALUE = st.one_of(st.lists(_TEXT, max_size=3), st.lists(_TEXT, max_size=3),
                        st.lists(_TEXT, max_size=3), st.none(),
                        st.lists(st.one_of(_TEXT, st.integers(0, 3), st.none()), max_size=3))
_ROW = st.fixed_dictionaries({"a": st.one_of(_TEXT, st.none()), "n": st.integers(0, 9)},
                             optional={"l": _LIST_VALUE, "m": _LIST_VALUE,
                                       "x": st.integers()})


def _reference(rows: list[dict[str, Any]], schema: dict[str, Any], strict: bool) -> Any:
    """What ``rows_frame`` was: polars' own frame of dict rows (lone surrogates as U+FFFD)."""
    try:
        return pl.DataFrame(rows, schema=schema, strict=strict)
    except UnicodeEncodeError:
        return pl.DataFrame(_without_lone_surrogates(rows), schema=schema, strict=strict)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_ROW, max_size=6), st.booleans())
def test_rows_frame_string_lists_equal_polars_own_frame(rows: list[dict[str, Any]],
                                                        strict: bool) -> None:
    try:
        want = _reference(rows, _SCHEMA_LISTS, strict)
    except Exception as exc:  # polars refuses the rows (strict): rows_frame refuses them too
        with pytest.raises(type(exc)):
            rows_frame(rows, _SCHEMA_LISTS, strict=strict)
        return
    assert_frame_equal(rows_frame(rows, _SCHEMA_LISTS, strict=strict), want, check_exact=True)


def test_rows_frame_takes_the_list_shortcut_and_falls_back() -> None:
    """Both ways are taken: all lists of strings (one Arrow array), and a list holding an int
    (polars' own conversion, which writes the int as text when not strict)."""
    rows = [{"a": "x", "n": 1, "l": ["p", "q"], "m": []}, {"a": None, "n": 2, "l": [], "m": ["é"]}]
    assert_frame_equal(rows_frame(rows, _SCHEMA_LISTS), _reference(rows, _SCHEMA_LISTS, True))
    mixed = [{**rows[0], "l": ["p", 3]}, rows[1]]
    got = rows_frame(mixed, _SCHEMA_LISTS, strict=False)
    assert got["l"].to_list()[0] == ["p", "3"]
    assert_frame_equal(got, _reference(mixed, _SCHEMA_LISTS, False))
    assert rows_frame([], _SCHEMA_LISTS).schema == pl.Schema(_SCHEMA_LISTS)


def test_drift_of_rows_takes_dicts_or_positional_rows() -> None:
    rows = [("r" + chr(0xDCFF), "id", "native", "step", "1", "2", False, None, True),
            ("r", None, "native", "phase", '"done"', '"done"', True, "x", False)]
    dicts = [dict(zip(_SCHEMA, row, strict=True)) for row in rows]
    got = drift_of_rows(rows, validate=False)
    assert got["run_dir"][0] == "r\ufffd"
    assert_frame_equal(got, drift_of_rows(dicts, validate=False), check_exact=True)
    assert_frame_equal(drift_of_rows([], validate=False), drift_of_rows(iter([]), validate=False))


# --- drift rows: the per-run tuples equal the dict formulation they replaced ---------------

def _reference_rows_of(run_dir: str, run_id: Any, kind: str, man: Any, f: Any) -> list[Any]:
    """``drift.rows_of`` as it was written before its rows became tuples (the oracle): both
    sides as dicts keyed by field name, one dict row per field."""
    import math
    from collections.abc import Mapping

    from rivumi_analysis.tables import drift as d

    if not isinstance(man, Mapping):
        return []
    types = f.types
    last_seq = f.last_sequence
    man_last = man.get("last_event_sequence", -1)
    ahead = isinstance(man_last, int) and man_last == last_seq + 1
    man_usage = man.get("usage") if isinstance(man.get("usage"), Mapping) else {}
    replayed = {"step": f.step, "repeat_count": f.repeat_count,
                "last_action_fingerprint": f.last_fingerprint,
                **{f"usage.{k}": v for k, v in zip(d._USAGE_KEYS, f.usage, strict=True)},
                "last_event_sequence": last_seq, "verification": f.verification,
                "phase": f.phase, "terminal": f.terminal,
                "active_wall_time_seconds": f.charged_wall_seconds}
    man_verif = man.get("verification", [])
    manifest = {"step": man.get("step", 0), "repeat_count": man.get("repeat_count", 0),
                "last_action_fingerprint": man.get("last_action_fingerprint"),
                **{f"usage.{k}": man_usage.get(k, None if k == "provider_total_tokens" else 0)
                   for k in d._USAGE_KEYS},
                "last_event_sequence": man_last,
                "verification": [[v.get("name"), v.get("ok"), v.get("exit_code")]
                                 for v in man_verif if isinstance(v, Mapping)]
                if isinstance(man_verif, list) else man_verif,
                "phase": man.get("phase", "created"), "terminal": man.get("terminal", False),
                "active_wall_time_seconds": man.get("active_wall_time_seconds", 0.0)}
    wall_man = manifest["active_wall_time_seconds"]
    started = d._parse_dt(man.get("active_started_at"))
    crash_extended = False
    if started is not None and f.last_time is not None and isinstance(wall_man, int | float):
        wall_man = float(wall_man) + max(0.0, (f.last_time - started).total_seconds())
        crash_extended = True
    wind_down = "loop.wind_down_started" in types or d._model_usage_has(man, "wind_down")
    rows = []
    for name in d.DRIFT_FIELDS:
        rv, mv = replayed[name], manifest[name]
        if name == "active_wall_time_seconds":
            ok = (isinstance(rv, float) and isinstance(wall_man, int | float)
                  and math.isfinite(float(wall_man))
                  and abs(rv - float(wall_man)) <= d.WALL_TIME_TOLERANCE_SECONDS)
        else:
            ok = rv == mv and type(rv) is type(mv)
        explanation = d._explain(name, ok, f, ahead, wind_down, mv, crash_extended)
        rows.append({"run_dir": run_dir, "run_id": run_id, "kind": kind, "field": name,
                     "replayed": json.dumps(rv, ensure_ascii=False, sort_keys=True,
                                            separators=(",", ":")),
                     "manifest": json.dumps(mv, ensure_ascii=False, sort_keys=True,
                                            separators=(",", ":")),
                     "matches": ok, "explanation": explanation,
                     "unexplained": (not ok) and explanation is None})
    return rows


_SMALL = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.sampled_from(["a", "b"]),
                   st.floats(allow_nan=True, allow_infinity=False, width=16))
_STAMP = st.sampled_from(["2026-08-20T21:02:47Z", "2026-08-20T21:00:00+00:00", "bad", None])
_MAN = st.one_of(st.none(), _SMALL, st.fixed_dictionaries({}, optional={
    "step": _SMALL, "repeat_count": _SMALL, "last_action_fingerprint": _SMALL,
    "usage": st.one_of(_SMALL, st.dictionaries(st.sampled_from([
        "input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens",
        "provider_total_tokens"]), _SMALL, max_size=5)),
    "last_event_sequence": _SMALL,
    "verification": st.one_of(_SMALL, st.lists(st.one_of(_SMALL, st.fixed_dictionaries(
        {}, optional={"name": _SMALL, "ok": _SMALL, "exit_code": _SMALL})), max_size=2)),
    "phase": st.one_of(_SMALL, st.sampled_from(["created", "running", "preparing", "done"])),
    "terminal": _SMALL, "active_wall_time_seconds": _SMALL, "active_started_at": _STAMP,
    "model_usage": st.one_of(_SMALL, st.lists(st.fixed_dictionaries(
        {}, optional={"lane": st.sampled_from(["primary", "wind_down"])}), max_size=2))}))
_FACTS = st.builds(
    lambda step, rc, fp, usage, seq, verif, phase, term, wall, last, tr, unk, unl, aw, down,
    charge, rej, types, nc, nfp: _drift_facts(
        step=step, repeat_count=rc, last_fingerprint=fp, usage=usage, last_sequence=seq,
        verification=verif, phase=phase, terminal=term, charged_wall_seconds=wall,
        last_time=last, terminal_reason=tr, fingerprint_unknown=unk, unlogged_guard_calls=unl,
        approval_wait_seconds=aw, resume_downtime_seconds=down, charge_approval_waits=charge,
        rejected=rej, types=types, naive_count=nc, naive_fp=nfp),
    st.integers(0, 3), st.integers(0, 3), st.sampled_from([None, "a", "b"]),
    st.tuples(*[st.integers(0, 3)] * 4, st.one_of(st.none(), st.integers(0, 3))),
    st.integers(-1, 3), st.lists(st.lists(st.one_of(st.none(), st.booleans(), st.integers(0, 2),
                                                   st.just("t")), max_size=3), max_size=2),
    st.sampled_from(["created", "running", "done"]), st.booleans(),
    st.one_of(st.none(), st.floats(0, 10)),
    st.one_of(st.none(), st.datetimes(timezones=st.just(UTC))),
    st.sampled_from([None, "token_budget_exceeded"]), st.booleans(), st.integers(0, 2),
    st.floats(0, 5), st.floats(0, 5), st.booleans(), st.booleans(),
    st.frozensets(st.sampled_from(["loop.wind_down_started", "session.continued",
                                   "tool.batch_started"])),
    st.integers(0, 3), st.sampled_from([None, "a", "b"]))


def _drift_facts(**kw: Any) -> Any:
    from rivumi_analysis.tables.drift import DriftFacts

    return DriftFacts(**kw)


@settings(max_examples=examples(400), deadline=None)
@given(_MAN, _FACTS)
def test_drift_rows_equal_the_dict_formulation(man: Any, facts: Any) -> None:
    from rivumi_analysis.tables.drift import _SCHEMA as names
    from rivumi_analysis.tables.drift import rows_of

    got = [dict(zip(names, row, strict=True)) for row in rows_of("d", "i", "native", man, facts)]
    assert got == _reference_rows_of("d", "i", "native", man, facts)
