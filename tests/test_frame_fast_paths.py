"""The frame builders' shortcuts equal what they replace, on values of every JSON type.

* ``tables._common.rows_frame`` builds a string-list column of dict rows as one Arrow list
  array when every value is a list of strings: equal to ``pl.DataFrame(rows, schema=...)``
  (the frame it replaces), also when some value is not (it falls back), with lone
  surrogates, missing keys and both ``strict`` settings;
* ``tables.drift._j`` writes str, int, float, None and bools without the JSON encoder's
  per-call set-up: equal to the encoder (``json.dumps(..., ensure_ascii=False,
  sort_keys=True, separators=(",", ":"))``) on every value, NaN and huge ints included;
* ``tables.drift`` builds its frame from positional rows: ``drift_rows`` keeps its dict rows
  and ``drift_of_rows`` takes either, with the same frame.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from rivumi_analysis.read.decode import _without_lone_surrogates
from rivumi_analysis.tables._common import rows_frame
from rivumi_analysis.tables.drift import _SCHEMA, _j, drift_of_rows

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


@settings(max_examples=300, deadline=None)
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


_ENCODE = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode


@settings(max_examples=500, deadline=None)
@given(_JSON)
def test_drift_text_is_the_json_encoders(value: Any) -> None:
    try:
        want = _ENCODE(value)
    except ValueError as exc:  # an int past Python's digit limit: the same error
        with pytest.raises(type(exc)):
            _j(value)
        return
    assert _j(value) == want


def test_drift_text_edge_values() -> None:
    for value in (True, False, None, 0, -0.0, 1e16, 1e-05, 2.5, float("inf"), float("-inf"),
                  float("nan"), 10**40, "", "a\"\\\n\x00\x7f\u2028é" + chr(0xD800), [], {},
                  [["lint", True, 0]], {"b": 1, "a": [1.0]}):
        assert _j(value) == _ENCODE(value), value


def test_drift_of_rows_takes_dicts_or_positional_rows() -> None:
    rows = [("r" + chr(0xDCFF), "id", "native", "step", "1", "2", False, None, True),
            ("r", None, "native", "phase", '"done"', '"done"', True, "x", False)]
    dicts = [dict(zip(_SCHEMA, row, strict=True)) for row in rows]
    got = drift_of_rows(rows, validate=False)
    assert got["run_dir"][0] == "r\ufffd"
    assert_frame_equal(got, drift_of_rows(dicts, validate=False), check_exact=True)
    assert_frame_equal(drift_of_rows([], validate=False), drift_of_rows(iter([]), validate=False))
