"""The store built and refreshed on Ray equals the process engine's store: every table, after
a change, after a killed worker; a chunk that keeps failing is reported with its runs and
publishes nothing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from rivumi_analysis.distributed import ChunkFailedError, store
from rivumi_analysis.distributed._tasks import FAULT_ENV
from rivumi_analysis.store import TABLES
from rivumi_analysis.store.core import Store
from rivumi_analysis.store.read import ordered, read_parts

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ("bad_input", "crashes", "forks", "subagents", "completed", "failed")

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def tables(store_dir: Path) -> dict[str, pl.DataFrame]:
    """Every table as the loaders read it from a store folder (no refresh)."""
    st = Store(store_dir)
    m = st.manifest()
    assert m is not None
    return {t: ordered(read_parts(st, m, t), t, m) for t in TABLES}


def assert_same_tables(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame]) -> None:
    for t in TABLES:
        assert_frame_equal(a[t], b[t])


def cold(fleet: Path) -> dict[str, pl.DataFrame]:
    """Every table loaded in memory (no store), from one read of the fleet."""
    import rivumi_analysis as ra

    loaded = ra.load_fleet(fleet)
    return {t: getattr(ra, f"{t}_df")(loaded, cache=False) for t in TABLES}


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    """A copy of several sample-run families (every kind, bad input, crash cuts, forks)."""
    out = tmp_path / "fleet"
    for fam in FAMILIES:
        shutil.copytree(ROOT / "sample_runs" / fam, out / fam)
    return out


def test_store_on_ray_equals_process_store_and_refreshes(ray_local: Any, fleet: Path,
                                                         tmp_path: Path) -> None:
    p = store(fleet, store_dir=tmp_path / "p", engine="process", jobs=3)
    r = store(fleet, store_dir=tmp_path / "r", engine="ray", jobs=3)
    assert r.summary is not None and r.summary.failures == ()
    n = len(r.opened.manifest.runs)
    assert r.summary.runs == n and r.summary.chunks == r.summary.chunks_done >= 2
    # the same runs; the parts differ (the process engine writes a fleet this small as
    # one part, in this process; Ray one per chunk)
    assert sorted(r.opened.manifest.runs) == sorted(p.opened.manifest.runs)
    assert len(r.opened.manifest.parts) == r.summary.chunks
    want = tables(tmp_path / "p")
    assert_same_tables(want, tables(tmp_path / "r"))
    assert_same_tables(want, cold(fleet))
    # a run changes: the Ray refresh re-reads only it, and equals a cold load again
    run = next(d for d in sorted((fleet / "completed").iterdir()) if d.is_dir())
    log = run / "events.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-1]))  # a truncated log (its last event gone)
    os.utime(log, (1_700_000_000, 1_700_000_000))  # old mtime: not "racy", read once
    r2 = store(fleet, store_dir=tmp_path / "r", engine="ray", jobs=3)
    assert r2.summary is not None and r2.summary.runs == 1
    assert_same_tables(tables(tmp_path / "r"), cold(fleet))


def test_killed_worker_store_has_no_lost_or_duplicated_rows(
        ray_local: Any, fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "killed"
    monkeypatch.setenv(FAULT_ENV, f"kill-once:{marker}")
    r = store(fleet, store_dir=tmp_path / "r", engine="ray", jobs=3)
    assert marker.exists()  # a worker died after writing its part; Ray retried the chunk
    assert r.summary is not None and r.summary.failures == ()
    assert not [p for p in (tmp_path / "r").rglob("*") if p.name.endswith(".tmp")]
    assert_same_tables(tables(tmp_path / "r"), cold(fleet))


def test_chunk_that_keeps_failing_is_reported_and_nothing_is_published(
        ray_local: Any, fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = store(fleet, store_dir=tmp_path / "r", engine="process")
    victim = next(d for d in sorted((fleet / "crashes").iterdir()) if d.is_dir())
    (victim / "events.jsonl").write_bytes((victim / "events.jsonl").read_bytes() + b"{}\n")
    os.utime(victim / "events.jsonl", (1_700_000_000, 1_700_000_000))
    monkeypatch.setenv(FAULT_ENV, f"kill-always:{victim}")
    with pytest.raises(ChunkFailedError) as err:
        store(fleet, store_dir=tmp_path / "r", engine="ray",
              ray_remote_args={"max_retries": 1})
    [failure] = err.value.failures
    assert str(victim) in failure.run_dirs and str(victim) in str(err.value)
    # the previous version is still the published one
    m = Store(tmp_path / "r").manifest()
    assert m is not None and m.parts.keys() == before.opened.manifest.parts.keys()


def test_cli_store_engine_ray(ray_local: Any, fleet: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    from rivumi_analysis.cli import main

    src = fleet / "completed"
    assert main(["store", str(src), "--store", str(tmp_path / "r"), "--engine", "ray"]) == 0
    out, err = capsys.readouterr()
    assert f"store {tmp_path / 'r'}" in out and "ray: 1/1 chunks" in err
    assert_same_tables(tables(tmp_path / "r"), cold(src))


def test_ray_executor_is_the_local_executors_interface(ray_local: Any, fleet: Path) -> None:
    """``read.executor.map_chunks`` with the Ray executor gives what this process gives,
    in chunk order, for the audit's chunk function and for a function defined here."""
    from rivumi_analysis.audit import audit_chunk
    from rivumi_analysis.distributed import RayExecutor
    from rivumi_analysis.read.discovery import discover
    from rivumi_analysis.read.executor import map_chunks

    locs = discover(str(fleet)).runs
    ray_ex = RayExecutor()
    got = [r for chunk in map_chunks(audit_chunk, locs, executor=ray_ex, most=8) for r in chunk]
    assert got == audit_chunk(locs)
    assert ray_ex.summary.chunks >= 2 and ray_ex.summary.chunks_done == ray_ex.summary.chunks
    sizes = list(map_chunks(lambda chunk: len(chunk), locs, executor=ray_ex, most=8))
    assert sum(sizes) == len(locs) and len(sizes) == ray_ex.summary.chunks
