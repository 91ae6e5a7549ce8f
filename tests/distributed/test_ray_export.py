"""Every exported table written on Ray equals the process engine's export: on sample runs and
a generated corpus (fork sources in other chunks included), redacted, after a killed worker,
and a chunk that keeps failing is reported with its runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from rivumi_analysis.distributed import export, make_chunks
from rivumi_analysis.distributed._tasks import FAULT_ENV
from rivumi_analysis.export import TABLES
from rivumi_analysis.read.discovery import discover

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_RUNS = ROOT / "sample_runs"

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def read_table(out: Path | str, table: str) -> pl.DataFrame:
    """A table of a dataset in a canonical row order (parts come in any order)."""
    df = pl.scan_parquet(f"{out}/{table}/**/*.parquet", hive_partitioning=True).collect()
    keys = [c for c, t in df.schema.items() if not isinstance(t, (pl.List, pl.Struct))]
    return df.sort(keys, nulls_last=True)


def assert_same_dataset(a: Path | str, b: Path | str) -> None:
    """Every table equal (all columns, types and rows) and the same manifest tables."""
    for table in TABLES:
        assert_frame_equal(read_table(a, table), read_table(b, table),
                           check_column_order=False)
    ma = json.loads(Path(a, "_dataset.json").read_text())
    mb = json.loads(Path(b, "_dataset.json").read_text())
    assert ma["tables"] == mb["tables"]
    assert ma["redacted"] == mb["redacted"]


def parquet_files(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet"))


@pytest.fixture(scope="module")
def sample_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "p"
    export(SAMPLE_RUNS, out, engine="process")
    return out


def forks_split(source: Path | str, runs_per_task: int) -> int:
    """Fork runs whose source run lands in another chunk (resolved by the driver)."""
    found = discover(source)
    names = {os.path.basename(loc.run_dir): loc.run_dir for loc in found.runs}
    where = {d: c.key for c in make_chunks(found.runs, runs_per_task) for d in c.run_dirs}
    split = 0
    for loc in found.runs:
        try:
            with open(Path(loc.run_dir, "events.jsonl"), "rb") as fh:
                first = json.loads(fh.readline())
        except (OSError, ValueError):
            continue
        if not isinstance(first, dict) or first.get("event_type") != "run.forked":
            continue
        src = first.get("data", {}).get("source_run_id")
        if src in names and where[names[src]] != where[loc.run_dir]:
            split += 1
    return split


def test_sample_runs_every_table_equals_process_export(ray_local: Any, sample_export: Path,
                                                       tmp_path: Path) -> None:
    assert forks_split(SAMPLE_RUNS, 4) > 0  # the driver's fleet-wide fork links are needed
    seen: list[tuple[int, int, int, int]] = []
    b = export(SAMPLE_RUNS, tmp_path / "r", engine="ray", runs_per_task=4,
               on_chunk=lambda *a: seen.append(a))
    assert b.complete and b.summary is not None
    n_chunks = b.summary.chunks
    assert n_chunks == b.summary.chunks_done == len(seen) > 1
    assert_same_dataset(sample_export, tmp_path / "r")
    marker = json.loads((tmp_path / "r" / "_dataset.json").read_text())
    assert marker["engine"] == "ray"
    parts = json.loads((tmp_path / "r" / "_parts.json").read_text())
    assert len(parts["chunks"]) == n_chunks
    # one part per chunk: every written file is listed, with its checksum
    assert sorted(f["path"] for f in parts["files"]) == parquet_files(tmp_path / "r")


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A generated fleet (forks, crashes, resumes) of about 300 runs."""
    from rivumi_analysis.synth.corpus import generate_corpus

    out = str(tmp_path_factory.mktemp("corpus") / "fleet")
    generate_corpus(out, runs=300, target_mb=8, seed=5, workers=1)
    return out


def test_corpus_every_table_equals_process_export(ray_local: Any, small_corpus: str,
                                                  tmp_path: Path) -> None:
    assert forks_split(small_corpus, 64) > 0
    export(small_corpus, tmp_path / "p", engine="process")
    b = export(small_corpus, tmp_path / "r", engine="ray", runs_per_task=64)
    assert b.complete
    assert_same_dataset(tmp_path / "p", tmp_path / "r")


def test_redacted_export_on_ray_equals_process(ray_local: Any, tmp_path: Path) -> None:
    export(SAMPLE_RUNS, tmp_path / "p", engine="process", redact_output=True)
    b = export(SAMPLE_RUNS, tmp_path / "r", engine="ray", runs_per_task=4,
               redact_output=True)
    assert b.manifest["redacted"] is True
    assert_same_dataset(tmp_path / "p", tmp_path / "r")
    runs = read_table(tmp_path / "r", "runs")
    assert not any(os.path.isabs(d) for d in runs["run_dir"].to_list())


def test_killed_worker_rewrites_its_parts_no_lost_no_duplicated_rows(
        ray_local: Any, sample_export: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "killed"
    monkeypatch.setenv(FAULT_ENV, f"kill-once:{marker}")
    res = export(SAMPLE_RUNS, tmp_path / "r", engine="ray", runs_per_task=32)
    assert marker.exists()  # a worker died after writing its first part; Ray retried it
    assert res.complete
    assert not [p for p in (tmp_path / "r").rglob("*") if p.name.endswith(".tmp")]
    parts = json.loads((tmp_path / "r" / "_parts.json").read_text())
    assert sorted(f["path"] for f in parts["files"]) == parquet_files(tmp_path / "r")
    assert_same_dataset(sample_export, tmp_path / "r")  # no lost and no duplicated rows


def test_chunk_that_keeps_failing_is_reported_with_its_runs(
        ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = next(p for p in sorted((SAMPLE_RUNS / "crashes").iterdir()) if p.is_dir())
    monkeypatch.setenv(FAULT_ENV, f"kill-always:{victim}")
    res = export(SAMPLE_RUNS, tmp_path / "r", engine="ray", runs_per_task=32,
                 ray_remote_args={"max_retries": 1})
    assert not res.complete and res.summary is not None
    [failure] = res.summary.failures
    assert str(victim) in failure.run_dirs
    assert "2 attempts" in failure.message
    assert str(victim) in res.summary.text()
    assert not (tmp_path / "r" / "_dataset.json").exists()  # an incomplete dataset says so
    parts = json.loads((tmp_path / "r" / "_parts.json").read_text())
    assert {c["key"] for c in parts["chunks"]} - {f["key"] for f in parts["files"]} == {
        failure.key}


def test_cli_export_engine_ray(ray_local: Any, sample_export: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    from rivumi_analysis.cli import main

    assert main(["export", str(SAMPLE_RUNS), "--out", str(tmp_path / "r"), "--engine", "ray",
                 "--runs-per-task", "16"]) == 0
    out, err = capsys.readouterr()
    assert "ray: 6/6 chunks" in err and f"wrote {tmp_path / 'r'}" in out
    assert_same_dataset(sample_export, tmp_path / "r")
    assert main(["export", str(SAMPLE_RUNS), "--out", str(tmp_path / "x"), "--engine", "ray",
                 "--runs-per-task", "0"]) == 2
    assert "--runs-per-task must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
