"""The incremental audit cache: a warm result always equals a cold one."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

import rivumi_analysis.read.cache as C
import rivumi_analysis.read.snapshot as S
from rivumi_analysis.audit import audit

EXAMPLE = Path(__file__).parent / "fixtures" / "example" / "a66038f97f204cb3aaa96339f195c37e"
OLD = time.time() - 3600


def _age(root: Path) -> None:
    for dp, dn, fn in os.walk(root):
        for n in fn + dn:
            os.utime(os.path.join(dp, n), (OLD, OLD), follow_symlinks=False)


def _live_run(dst: Path, keep: int) -> Path:
    """A non-terminal copy of the example run holding its first ``keep`` events."""
    shutil.copytree(EXAMPLE, dst)
    lines = (EXAMPLE / "events.jsonl").read_bytes().splitlines(keepends=True)
    (dst / "events.jsonl").write_bytes(b"".join(lines[:keep]))
    man = json.loads((dst / "session.json").read_text())
    man.update(terminal=False, phase="running", last_event_sequence=keep - 1)
    (dst / "session.json").write_text(json.dumps(man))
    (dst / "result.json").unlink()
    return dst


@pytest.fixture()
def fleet(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    root.mkdir()
    shutil.copytree(EXAMPLE, root / "done")
    _live_run(root / "live", 30)
    _age(root)
    return root


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts runs actually read and lines actually decoded."""
    counts = {"runs": 0, "lines": 0}
    real_job, real_decode = C.audit_job, S.decode_line

    def job(*a, **k):
        counts["runs"] += 1
        return real_job(*a, **k)

    def decode(*a, **k):
        counts["lines"] += 1
        return real_decode(*a, **k)

    monkeypatch.setattr(C, "audit_job", job)
    monkeypatch.setattr(S, "decode_line", decode)
    return counts


def _cold(root: Path) -> list[dict]:
    return audit(root, jobs=1).runs


def _warm(root: Path, cache: Path) -> list[dict]:
    return audit(root, jobs=1, cache_dir=cache).runs


def _reset(calls: dict[str, int]) -> None:
    calls["runs"] = calls["lines"] = 0


def test_unchanged_is_served_from_cache(fleet: Path, tmp_path: Path, calls: dict) -> None:
    cache = tmp_path / "cache"
    first = _warm(fleet, cache)
    assert first == _cold(fleet)
    assert list(cache.iterdir()) and not any("cache" in p.name for p in fleet.rglob("*"))
    _reset(calls)
    assert _warm(fleet, cache) == first
    assert calls["runs"] == 0


def test_appended_reads_only_new_lines(fleet: Path, tmp_path: Path, calls: dict) -> None:
    cache = tmp_path / "cache"
    _warm(fleet, cache)
    rest = (EXAMPLE / "events.jsonl").read_bytes().splitlines(keepends=True)[30:]
    with open(fleet / "live" / "events.jsonl", "ab") as fh:
        fh.write(b"".join(rest[:5]) + rest[5][:40])  # five lines and a torn tail
    _reset(calls)
    warm = _warm(fleet, cache)
    assert calls["runs"] == 1 and calls["lines"] == 6  # the 5 new lines + the torn tail
    assert warm == _cold(fleet)
    with open(fleet / "live" / "events.jsonl", "ab") as fh:  # complete the torn line
        fh.write(rest[5][40:])
    _reset(calls)
    warm = _warm(fleet, cache)
    assert calls["lines"] == 6  # still from the stored prefix (fresh files are not stored)
    assert warm == _cold(fleet)
    _age(fleet)
    _warm(fleet, cache)  # now stored with the longer prefix
    _reset(calls)
    warm, n = _warm(fleet, cache), calls["runs"]
    assert warm == _cold(fleet) and n == 0


def test_rewritten_in_place_same_size_and_mtime(fleet: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before = _warm(fleet, cache)
    ev = fleet / "live" / "events.jsonl"
    st = os.stat(ev)
    data = ev.read_bytes()
    i = data.index(b'"sequence":3')
    ev.write_bytes(data[:i] + b'"sequence":9' + data[i + 12:])  # same size, gap in sequence
    os.utime(ev, ns=(st.st_atime_ns, st.st_mtime_ns))  # even the mtime is restored
    warm = _warm(fleet, cache)
    assert warm == _cold(fleet) and warm != before


def test_truncated(fleet: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _warm(fleet, cache)
    for name in ("live", "done"):
        ev = fleet / name / "events.jsonl"
        lines = ev.read_bytes().splitlines(keepends=True)
        ev.write_bytes(b"".join(lines[:10]))
    assert _warm(fleet, cache) == _cold(fleet)


def test_replaced_by_a_symlink(fleet: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before = _warm(fleet, cache)
    ev = fleet / "done" / "events.jsonl"
    shutil.copy(ev, tmp_path / "elsewhere.jsonl")
    ev.unlink()
    ev.symlink_to(tmp_path / "elsewhere.jsonl")
    warm = _warm(fleet, cache)
    assert warm == _cold(fleet) and warm != before


def test_corrupted_cache_file(fleet: Path, tmp_path: Path, calls: dict) -> None:
    cache = tmp_path / "cache"
    _warm(fleet, cache)
    db = next(cache.glob("*.sqlite"))
    for p in cache.iterdir():
        p.write_bytes(b"\0garbage" * 100)
    assert _warm(fleet, cache) == _cold(fleet)
    _reset(calls)
    warm, n = _warm(fleet, cache), calls["runs"]  # rebuilt, then used
    assert warm == _cold(fleet) and n == 0
    con = sqlite3.connect(db)  # a corrupt row is a miss, not an error
    con.execute("UPDATE runs SET record = x'00ff', prefix = x'00ff'")
    con.commit()
    con.close()
    _reset(calls)
    warm, n = _warm(fleet, cache), calls["runs"]
    assert warm == _cold(fleet) and n == 2


def test_toolkit_version_change_drops_the_cache(fleet: Path, tmp_path: Path, calls: dict,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    _warm(fleet, cache)
    monkeypatch.setattr(C, "_CODE_FP", None)
    monkeypatch.setattr(C, "__version__", "999.0")
    _reset(calls)
    warm, n = _warm(fleet, cache), calls["runs"]
    assert warm == _cold(fleet) and n == 2


def test_fresh_files_are_not_stored(fleet: Path, tmp_path: Path, calls: dict) -> None:
    cache = tmp_path / "cache"
    (fleet / "done" / "checkpoint.json").write_text("{}")  # modified just now
    _warm(fleet, cache)
    _reset(calls)
    warm, n = _warm(fleet, cache), calls["runs"]
    assert warm == _cold(fleet) and n == 1


def test_listing_change_is_a_miss(fleet: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before = _warm(fleet, cache)
    (fleet / "done" / ".session.json.tmp123").write_text("{}")  # an atomic-write leftover
    warm = _warm(fleet, cache)
    assert warm == _cold(fleet) and warm != before


def test_parallel_cached_equals_serial(fleet: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(40):
        shutil.copytree(EXAMPLE, fleet / f"copy{i:02d}")
    _age(fleet)
    monkeypatch.setattr(C, "PARALLEL_MIN_RUNS", 8)
    cold = _cold(fleet)
    assert audit(fleet, jobs=2, cache_dir=tmp_path / "c").runs == cold
    assert audit(fleet, jobs=2, cache_dir=tmp_path / "c").runs == cold
