"""The audit's incremental cache is the store: a warm result always equals a cold one, and
only runs that changed are read again."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

import rivumi_analysis.read.executor as X
import rivumi_analysis.read.incremental as C
import rivumi_analysis.read.snapshot as S
import rivumi_analysis.store.core as core
from rivumi_analysis.fleet_audit import audit

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
    """Counts runs the store actually read and lines actually decoded."""
    counts = {"runs": 0, "lines": 0}
    real_chunk, real_decode = core.run_chunk, S.decode_line

    def chunk(task, *a, **k):
        counts["runs"] += len(task.locations)
        return real_chunk(task, *a, **k)

    def decode(*a, **k):
        counts["lines"] += 1
        return real_decode(*a, **k)

    monkeypatch.setattr(core, "run_chunk", chunk)
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
    """A run being written (files modified just now) keeps its decoded prefix in the store:
    the next audit decodes only the lines after it."""
    cache = tmp_path / "cache"
    _warm(fleet, cache)
    rest = (EXAMPLE / "events.jsonl").read_bytes().splitlines(keepends=True)[30:]
    with open(fleet / "live" / "events.jsonl", "ab") as fh:
        fh.write(b"".join(rest[:5]) + rest[5][:40])  # five lines and a torn tail
    _reset(calls)
    warm = _warm(fleet, cache)
    assert calls["runs"] == 1  # read whole (its stored entry had no prefix: a clean log)
    assert warm == _cold(fleet)
    with open(fleet / "live" / "events.jsonl", "ab") as fh:  # complete the torn line
        fh.write(rest[5][40:])
    _reset(calls)
    warm = _warm(fleet, cache)
    assert calls["runs"] == 1 and calls["lines"] == 1  # from the stored 35-line prefix
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
    store = next((cache / "store").iterdir())
    for p in store.rglob("*.pickle"):  # the records (and any prefix): a damaged part
        p.write_bytes(b"\0garbage" * 100)
    _reset(calls)
    assert _warm(fleet, cache) == _cold(fleet)
    assert calls["runs"] == 2  # re-read, not served
    _reset(calls)
    warm, n = _warm(fleet, cache), calls["runs"]  # rebuilt, then used
    assert warm == _cold(fleet) and n == 0
    (store / "_store.msgpack").write_bytes(b"\0garbage" * 100)  # the manifest: rebuilt
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
    monkeypatch.setattr(X, "POOL_MIN_RUNS", 8)
    cold = _cold(fleet)
    assert audit(fleet, jobs=2, cache_dir=tmp_path / "c").runs == cold
    assert audit(fleet, jobs=2, cache_dir=tmp_path / "c").runs == cold


def test_a_table_load_after_an_audit_reads_the_audited_runs_again(
        fleet: Path, tmp_path: Path, calls: dict) -> None:
    """An audit's parts hold records only; a table load reads those runs for every table,
    and the audit afterwards is served from the table load's ``runs`` rows."""
    from rivumi_analysis.fleet_audit import _store_dir

    cache = tmp_path / "cache"
    first = _warm(fleet, cache)
    store_dir = _store_dir(str(fleet), 8, cache)
    _reset(calls)
    opened = core.open_store(str(fleet), store_dir=store_dir, jobs=1)
    assert calls["runs"] == 2 and all(e["full"] for e in opened.manifest.runs.values())
    _reset(calls)
    assert _warm(fleet, cache) == first and calls["runs"] == 0


def test_an_unusable_store_audits_without_it(fleet: Path, tmp_path: Path) -> None:
    """A cache directory inside the source: the store refuses it; the audit warns and
    gives the cold records."""
    with pytest.warns(core.StoreWarning, match="auditing without the cache"):
        warm = audit(fleet, jobs=1, cache_dir=fleet / "done" / "cache").runs
    assert warm == _cold(fleet)
