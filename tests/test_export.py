"""Parquet export read back with DuckDB (and polars): row counts, a join, types, redaction."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest

from rivumi_analysis.export import SCHEMA_VERSION, TABLES, export

FIXTURES = Path(__file__).parent / "fixtures"
PORTABLE = {"BIGINT", "DOUBLE", "BOOLEAN", "VARCHAR", "BLOB", "TIMESTAMP WITH TIME ZONE",
            "VARCHAR[]"}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("export") / "ds"
    return out, export(FIXTURES, out)


def _q(out: Path, table: str) -> str:
    return f"read_parquet('{out}/{table}/*/*.parquet', hive_partitioning=true)"


def test_duckdb_reads_every_table(dataset: tuple[Path, dict]) -> None:
    out, manifest = dataset
    assert manifest["schema_version"] == SCHEMA_VERSION
    assert json.loads((out / "_dataset.json").read_text()) == manifest
    con = duckdb.connect()
    for table in TABLES:
        assert table in manifest["tables"], table
        n = con.execute(f"SELECT count(*) FROM {_q(out, table)}").fetchone()[0]
        rows = manifest["tables"][table]["rows"]
        assert n == rows, table
        types = {r[1] for r in con.execute(f"DESCRIBE SELECT * FROM {_q(out, table)}").fetchall()}
        assert types <= PORTABLE, (table, types - PORTABLE)
    assert manifest["tables"]["events"]["rows"] > 1000
    kinds = {r[0] for r in con.execute(f"SELECT DISTINCT kind FROM {_q(out, 'runs')}").fetchall()}
    assert "native" in kinds and kinds <= {"native", "fork", "subagent", "external", "unknown"}
    # no partition by run id: one folder per kind
    assert all(p.name.startswith("kind=") for p in (out / "events").iterdir())


def test_join_across_tables(dataset: tuple[Path, dict]) -> None:
    out, manifest = dataset
    con = duckdb.connect()
    joined = con.execute(
        f"SELECT count(*) FROM {_q(out, 'events')} e JOIN {_q(out, 'runs')} r "
        "ON e.run_dir = r.run_dir AND e.kind = r.kind").fetchone()[0]
    assert joined == manifest["tables"]["events"]["rows"]
    per_run = con.execute(
        f"SELECT r.run_dir, r.events, count(e.sequence) FROM {_q(out, 'runs')} r "
        f"LEFT JOIN {_q(out, 'events')} e USING (run_dir) GROUP BY r.run_dir, r.events "
        "HAVING r.events <> count(e.sequence)").fetchall()
    assert per_run == []


def test_polars_reads_it_and_metadata(dataset: tuple[Path, dict]) -> None:
    out, manifest = dataset
    df = pl.read_parquet(out / "events" / "**" / "*.parquet", hive_partitioning=True)
    assert df.height == manifest["tables"]["events"]["rows"]
    assert df.schema["created_at"] == pl.Datetime("us", "UTC")
    f = next((out / "runs").glob("*/*.parquet"))
    meta = pq.read_schema(f).metadata
    assert meta[b"rivumi_analysis.schema_version"] == str(SCHEMA_VERSION).encode()
    for table in TABLES:
        for part in (out / table).glob("*/*.parquet"):
            for field in pq.read_schema(part):
                t = str(field.type)
                assert not t.startswith(("uint", "large_", "duration", "dictionary")), t
                if t.startswith("timestamp"):
                    assert t == "timestamp[us, tz=UTC]"


def test_redacted_export(tmp_path: Path) -> None:
    out = tmp_path / "red"
    manifest = export(FIXTURES, out, redact_output=True)
    con = duckdb.connect()
    forbidden = {"message", "text", "data", "raw", "error", "replay_error", "sha256",
                 "task_id", "event_id", "policy_reason", "last_action_fingerprint",
                 "active_writer_token"}
    for table, info in manifest["tables"].items():
        assert not forbidden & set(info["columns"]), table
    dirs = [r[0] for r in con.execute(f"SELECT run_dir FROM {_q(out, 'runs')}").fetchall()]
    assert dirs and not any(d.startswith("/") or str(FIXTURES) in d for d in dirs)
    n = con.execute(f"SELECT count(*) FROM {_q(out, 'events')}").fetchone()[0]
    assert n == manifest["tables"]["events"]["rows"]
    blob = b"".join(p.read_bytes() for p in out.rglob("*.parquet"))
    assert str(FIXTURES).encode() not in blob


def test_cli_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rivumi_analysis.cli import main

    out = tmp_path / "ds"
    run = str(FIXTURES / "example")
    assert main(["export", run, "--out", str(out), "--redact"]) == 0
    assert "schema version" in capsys.readouterr().out
    assert (out / "_dataset.json").exists()
    assert main(["export", run, "--out", str(out)]) == 0  # a previous export is replaced
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    assert main(["export", run, "--out", str(tmp_path / "busy")]) == 2
    assert main(["export", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert (tmp_path / "busy" / "x").read_text() == "x"


def test_cli_export_some_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``export --tables`` writes only the named tables (in the registry's order), equal to
    the same tables of a whole export; an unknown or relay table is a usage error before
    anything is written, and so is ``--tables`` with the Ray engine."""
    from rivumi_analysis.cli import main

    run = str(FIXTURES / "example")
    some, whole = tmp_path / "some", tmp_path / "whole"
    assert main(["export", run, "--out", str(some), "--tables", "usage, runs"]) == 0
    assert "runs 1, usage 7" in capsys.readouterr().out
    manifest = json.loads((some / "_dataset.json").read_text())
    assert list(manifest["tables"]) == ["runs", "usage"]
    assert sorted(p.name for p in some.iterdir()) == ["_dataset.json", "runs", "usage"]
    export(run, whole)
    for t in ("runs", "usage"):
        got, want = (pl.read_parquet(d / t / "**" / "*.parquet") for d in (some, whole))
        assert got.equals(want)
    for bad in (["--tables", "relay_entries"], ["--tables", "nope,runs"], ["--tables", ""],
                ["--tables", "runs", "--engine", "ray"]):
        out = tmp_path / "bad"
        assert main(["export", run, "--out", str(out), *bad]) == 2
        assert not out.exists()
        assert "--tables" in capsys.readouterr().err
