"""``read.docskim.skim_doc`` equals ``snapshot._parse_json_doc`` reduced to the skimmed keys:
on every sample document and on mutations aimed at what msgspec's skip does not check."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rivumi_analysis.read.docskim import SKIM_KEYS, skim_doc
from rivumi_analysis.read.io import FileRead
from rivumi_analysis.read.snapshot import _parse_json_doc
from tests.conftest import examples

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted(p for base in (ROOT / "sample_runs", ROOT / "tests" / "fixtures")
              for name in ("session.json", "checkpoint.json", "backend-result.json",
                           "request.json")
              for p in base.rglob(name) if p.is_file() and not p.is_symlink())


def _oracle(fr: FileRead) -> tuple[Any, str | None]:
    doc, error = _parse_json_doc(fr)
    if isinstance(doc, dict):
        return {k: doc[k] for k in SKIM_KEYS if k in doc}, error
    return doc, error


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _check(data: bytes) -> None:
    fr = FileRead("ok", data)
    got, want = skim_doc(fr, _parse_json_doc), _oracle(fr)
    assert _same(got, want), (data[:300], got, want)


def test_sample_documents() -> None:
    assert len(DOCS) > 100
    for path in DOCS:
        _check(path.read_bytes())


def test_not_ok_files() -> None:
    for status in ("missing", "not_read", "too_large"):
        assert skim_doc(FileRead(status), _parse_json_doc) == _oracle(FileRead(status))


EDGE = [
    b'{"run_id":"a","run_id":"b"}',  # repeated key: the last value
    b'{"run\\u005fid":"x","provider\\u005Fname":"fork"}',  # escaped keys
    b'{"run_id":"\\ud800"}',  # a lone surrogate in a skimmed value (msgspec refuses it)
    b'{"note":"\\udc00","run_id":"r"}',  # ... in a skipped value (json.loads reads it)
    b'{"x":"\xff","run_id":"r"}',  # invalid UTF-8 in a skipped value
    b'{"x":"\xc3\xa9","run_id":"r"}',  # valid UTF-8
    b'{"x":1e999,"run_id":"r"}',  # out of msgspec's range, skipped
    b'{"run_id":1e999}',  # ... skimmed
    b'{"x":NaN,"run_id":"r"}', b'{"x":Infinity,"run_id":"r"}', b'{"run_id":-Infinity}',
    b'{"x":' + b"9" * 700 + b',"run_id":"r"}',  # a long integer (the runner's limit)
    b'{"x":' + b"9" * 5000 + b',"run_id":"r"}',
    b'{"x":' + b"[" * 1000 + b"]" * 1000 + b',"run_id":"r"}',  # deep
    b'{"x":' + b"[" * 100 + b"]" * 100 + b',"run_id":"r"}',
    b'{"x":01,"run_id":"r"}', b'{"x":1.,"run_id":"r"}', b'{"x":+1,"run_id":"r"}',
    b'{"x":.5,"run_id":"r"}', b'{"x":-,"run_id":"r"}', b'{"x":1e,"run_id":"r"}',
    b'{"x":"\\x","run_id":"r"}', b'{"x":"a\x01","run_id":"r"}', b'{"x":"\\u12","run_id":"r"}',
    b'{"x":tru,"run_id":"r"}', b'{"x":[1,],"run_id":"r"}', b'{"x":{"a":1,},"run_id":"r"}',
    b'{"run_id":"r",}', b'{"run_id":"r"} x', b'{"run_id":"r"}\n\n', b' \t\r\n{"run_id":"r"}',
    b'\x0c{"run_id":"r"}', b'{"run_id":"r"}\x0c', b'\xef\xbb\xbf{"run_id":"r"}',
    b'{"x":{"run_id":"nested"},"provider_name":"fork"}',
    b'{"backend_name":"b","resumable":false,"run_id":null}', b'{"resumable":0}',
    b'[]', b'"s"', b'null', b'1', b'', b'{', b'{}', b'{"a":1}\x00',
]


@pytest.mark.parametrize("data", EDGE)
def test_edges(data: bytes) -> None:
    _check(data)


_SAMPLE = (ROOT / "sample_runs" / "example").rglob("session.json")
_BASE = next(iter(sorted(_SAMPLE))).read_bytes()
_INSERTS = [b'"', b"\\", b"\xff", b"\xc3", b"\x00", b"\x01", b"{", b"[", b"}", b"]", b",", b":",
            b" ", b"e", b"1e999", b"NaN", b"\\ud800", b'"run_id":"z",', b"9" * 650, b"-", b"."]


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_BASE)), st.sampled_from(_INSERTS),
                          st.integers(0, 3)), min_size=1, max_size=3))
def test_mutations(edits: list[tuple[int, bytes, int]]) -> None:
    data = _BASE
    for pos, ins, drop in edits:
        pos = min(pos, len(data))
        data = data[:pos] + ins + data[pos + drop:]
    _check(data)


def test_long_integer_found_at_every_offset() -> None:
    """The strided sample never misses a digit run at the runner's limit, wherever it sits."""
    for off in range(0, 300, 7):
        for run in (641, 642, 700):
            _check(b'{"run_id":"r","x":' + b" " * off + b"7" * run + b"}")
            _check(b'{"x":"' + b"a" * off + b'","y":' + b"7" * run + b',"run_id":"r"}')


def test_bracket_count_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import numpy  # noqa: F401 (loaded: the vectorised count)

    from rivumi_analysis.read import docskim

    cases = [*EDGE, bytes(range(256)) * 3, _BASE]
    for data in cases:
        assert docskim._brackets(data) == data.count(b"[") + data.count(b"{")
    monkeypatch.delitem(sys.modules, "numpy")
    for data in cases:
        assert docskim._brackets(data) == data.count(b"[") + data.count(b"{")
