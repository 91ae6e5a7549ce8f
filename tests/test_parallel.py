"""Parallel audit equals the serial one; the decoder's fast path equals its exact path."""

from __future__ import annotations

import glob
import math
import os
import sys
from pathlib import Path

import pytest

import rivumi_analysis.read.decode as D
import rivumi_analysis.read.executor as X
from rivumi_analysis.fleet_audit import audit

FIXTURES = Path(__file__).parent / "fixtures"


def test_parallel_equals_serial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(X, "POOL_MIN_RUNS", 4)
    serial = audit(FIXTURES, jobs=1)
    parallel = audit(FIXTURES, jobs=2)
    assert len(serial.runs) >= 8
    assert parallel == serial
    assert [r["run_dir"] for r in parallel.runs] == sorted(r["run_dir"] for r in parallel.runs)


def test_progress_counts_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(X, "POOL_MIN_RUNS", 4)
    seen: list[int] = []
    res = audit(FIXTURES, jobs=2, progress=seen.append)
    assert sum(seen) == len(res.runs)


TRICKY = [
    b'{"sequence":1,"event_type":"x","data":{"a":1e400}}',
    b'{"sequence":1,"event_type":"x","data":{"a":123456789012345678901234567890}}',
    b'{"sequence":1,"event_type":"x","data":{"a":-9223372036854775809}}',
    b'{"sequence":1,"event_type":"x","data":{"a":"\\ud800"}}',
    b'{"sequence":1,"event_type":"x"}\r',
    b'{"sequence":1,"event_type":"x","d":"a\tb"}',
    b'{"sequence":1,"event_type":"x","d":"\\u003a","e":1,"e":2}',
    b'{"sequence":1,"event_type":"x","d":"\\u003A:","e":1,"e":2}',
    b'{"sequence":1,"event_type":"x","data":{"k":1,"k":{"z":":"}}}',
    b'{"sequence":1,"event_type":"x","data":{"k":{"a":1,"a":1}}}',
    b' {"sequence":1,"event_type":"x"} \x0c',
    b'{"sequence":1.0,"event_type":"x"}',
    b'{"sequence":"7","event_type":"x","data":{"f":0.1,"g":-0,"h":-0.0,"i":1E-7,'
    b'"j":2.2250738585072011e-308,"k":9007199254740993,"l":18446744073709551615}}',
    b"[1]", b'"s"', b"{}",
    b'{"sequence":1,"event_type":"x","data":NaN}',
    b'{"sequence":1,"event_type":"x","data":{"a":-Infinity}}',
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b'{"sequence":1,"event_type":"x","data":{"\\u0000":"\\u001b[0m"}}',
    b'{"sequence":1,"event_type":"x","data":{"a":1}} x',
    b'{"sequence":1,"event_type":"x",}',
    b'{"sequence":1,"event_type":"\xc3\xa9\xe2\x80\xa8"}',
    b'{"sequence":1,"event_type":"x","data":{"s":"\xff"}}',
    b'{"sequence":true,"event_type":"x","run_id":"r","data":{"t":true,"n":null}}',
]


def _same(x: object, y: object) -> bool:
    if type(x) is not type(y):
        return False
    if isinstance(x, dict):
        return list(x) == list(y) and all(_same(x[k], y[k]) for k in x)  # type: ignore[index]
    if isinstance(x, list):
        return len(x) == len(y) and all(map(_same, x, y))  # type: ignore[arg-type]
    if isinstance(x, float):
        return (math.isnan(x) and math.isnan(y)) or (  # type: ignore[arg-type]
            x == y and math.copysign(1, x) == math.copysign(1, y))  # type: ignore[arg-type]
    return x == y


def test_fast_decode_equals_exact_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = list(TRICKY)
    for f in glob.glob(str(FIXTURES / "**" / "events.jsonl"), recursive=True):
        if not os.path.islink(f):
            lines += Path(f).read_bytes().split(b"\n")
    lines = [ln for ln in lines if ln.strip()]
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20000))
    try:
        fast = [D.decode_line(ln, line_no=1, has_newline=True) for ln in lines]
        monkeypatch.setattr(D, "FAST_PATH", False)
        exact = [D.decode_line(ln, line_no=1, has_newline=True) for ln in lines]
    finally:
        sys.setrecursionlimit(old)
    for ln, a, b in zip(lines, fast, exact, strict=True):
        assert (a.reason, a.message, a.warnings, a.sequence, a.event_type, a.data_json) == (
            b.reason, b.message, b.warnings, b.sequence, b.event_type, b.data_json), ln[:80]
        assert _same(a.obj, b.obj), ln[:80]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    from rivumi_analysis.cli import main

    code = main(list(args))
    return code, capsys.readouterr().out


def test_cli_cache_and_jobs_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(FIXTURES / "example")
    assert _cli(capsys, "audit", run, "--jobs", "0")[0] == 2
    a = _cli(capsys, "audit", run, "--format", "json", "--no-cache", "--jobs", "1")
    b = _cli(capsys, "audit", run, "--format", "json", "--cache-dir", str(tmp_path / "c"))
    c = _cli(capsys, "audit", run, "--format", "json", "--cache-dir", str(tmp_path / "c"))
    assert a[0] == b[0] == c[0] == 0
    assert a[1] == b[1] == c[1] and a[1].startswith("{")
    assert list((tmp_path / "c" / "store").glob("*/_store.msgpack"))  # the store
