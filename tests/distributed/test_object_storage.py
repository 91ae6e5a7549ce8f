"""Run roots on object storage: a real S3-compatible server (moto) on 127.0.0.1 holds sample
runs; the audit of ``s3://`` URIs equals the local-filesystem audit, on both engines."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rivumi_analysis.distributed import audit
from rivumi_analysis.errors import SourceError
from rivumi_analysis.fleet_audit import audit as local_audit
from rivumi_analysis.read import uri as _uri

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ("bad_input", "crashes", "external", "forks", "subagents", "example")
BUCKET = "runs"
PREFIX = f"s3://{BUCKET}/fleet"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # a moto S3 server per module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def local_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of several sample-run families (every kind, bad input, crash cuts, subagents)."""
    out = tmp_path_factory.mktemp("fleet") / "fleet"
    for fam in FAMILIES:
        shutil.copytree(ROOT / "sample_runs" / fam, out / fam)
    return out


@pytest.fixture(scope="module")
def s3(local_fleet: Path) -> Iterator[Any]:
    """moto's S3 server on 127.0.0.1 (stopped even on failure) holding ``local_fleet``."""
    pafs = pytest.importorskip("pyarrow.fs")
    server = Path(sys.executable).parent / "moto_server"
    if not server.exists():
        pytest.skip("moto[server] (test extra) is not installed")
    port = _free_port()
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        fs = pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1",
                               endpoint_override=f"127.0.0.1:{port}", scheme="http",
                               allow_bucket_creation=True, connect_timeout=5,
                               request_timeout=30)
        deadline = time.monotonic() + 60
        while True:
            try:
                fs.create_dir(BUCKET)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for dirpath, _dirs, files in os.walk(local_fleet):
            for name in files:
                src = os.path.join(dirpath, name)
                key = f"{BUCKET}/fleet/{os.path.relpath(src, local_fleet)}"
                with open(src, "rb") as fh, fs.open_output_stream(key) as out:
                    out.write(fh.read())
        _uri.register_filesystem("s3://", fs)
        yield fs
    finally:
        _uri.unregister_filesystem("s3://")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def expected(local_fleet: Path) -> dict[str, Any]:
    """The local audit with the local root written as the S3 prefix."""
    text = json.dumps(local_audit(local_fleet, jobs=1).to_json_obj())
    return json.loads(text.replace(str(local_fleet), PREFIX))


def test_s3_audit_equals_local_audit(s3: Any, expected: dict[str, Any]) -> None:
    res = audit(PREFIX, engine="process", jobs=1)
    assert len(res.runs) >= 30
    assert any(r["kind"] == "subagent" for r in res.runs)
    assert any(r["quarantined_lines"] for r in res.runs)
    assert res.to_json_obj() == expected


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_s3_audit_on_ray_equals_local_audit(s3: Any, ray_local: Any,
                                            expected: dict[str, Any]) -> None:
    res = audit(PREFIX + "/", engine="ray", runs_per_task=8)
    assert res.to_json_obj() == expected
    assert res.summary is not None and res.summary.bytes > 0


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_listing_file_names_the_runs(s3: Any, expected: dict[str, Any], tmp_path: Path,
                                     fmt: str) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    runs = expected["runs"]
    table = pa.table({
        "path": [r["run_dir"] for r in reversed(runs)],
        "is_subagent": [r["kind"] == "subagent" for r in reversed(runs)],
        "parent_run_dir": [r["parent_run_dir"] for r in reversed(runs)],
    })
    key = f"{BUCKET}/listings/runs.{fmt}"
    with s3.open_output_stream(key) as out:
        if fmt == "csv":
            pacsv.write_csv(table, out)
        else:
            pq.write_table(table, out)
    res = audit(engine="process", jobs=1, runs_from=f"s3://{key}")
    assert res.runs == runs


def test_file_uri_is_the_local_path(local_fleet: Path) -> None:
    a = local_audit(f"file://{local_fleet}", jobs=1)
    assert a == local_audit(local_fleet, jobs=1)


def test_reads_are_bounded_and_typed(s3: Any) -> None:
    run = next(r for r in s3.get_file_info(
        __import__("pyarrow.fs").fs.FileSelector(f"{BUCKET}/fleet/example")))
    uri = f"s3://{run.path}"
    ok = _uri.read_file(f"{uri}/events.jsonl")
    assert ok.status == "ok" and ok.data and ok.size == len(ok.data)
    big = _uri.read_file(f"{uri}/events.jsonl", limit=10)
    assert (big.status, big.data, big.size) == ("too_large", None, ok.size)
    assert _uri.read_file(f"{uri}/nope.json").status == "missing"
    assert _uri.read_file(uri).status == "not_regular"
    assert _uri.lstat_identity(f"{uri}/nope.json") is None
    assert "events.jsonl" in _uri.listing(uri)


def test_missing_uri_source_is_a_source_error(s3: Any) -> None:
    with pytest.raises(SourceError) as err:
        audit(f"s3://{BUCKET}/no-such-prefix", engine="process", jobs=1)
    assert err.value.code == "source_missing"
    with pytest.raises(SourceError) as err:
        audit(f"{PREFIX}/example/{os.listdir(ROOT / 'sample_runs' / 'example')[0]}/events.jsonl",
              engine="process", jobs=1)
    assert err.value.code == "source_not_directory"


def test_cli_reads_s3_sources_and_listings(s3: Any, expected: dict[str, Any], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from rivumi_analysis.cli import main

    assert main(["audit", PREFIX, "--format", "json", "--no-cache", "--jobs", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == expected
    listing = tmp_path / "runs.csv"
    listing.write_text("path\n" + "\n".join(r["run_dir"] for r in expected["runs"]
                                            if r["kind"] != "subagent") + "\n")
    rc = main(["audit", "--runs-from", str(listing), "--format", "json", "--jobs", "1"])
    got = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert got["runs"] == [r for r in expected["runs"] if r["kind"] != "subagent"]
    assert main(["audit", f"s3://{BUCKET}/missing", "--no-cache"]) == 2
    assert "source does not exist: s3://runs/missing" in capsys.readouterr().err
    assert main(["audit", "x", "--runs-from", str(listing)]) == 2


def read_dataset(out: Path, table: str, rename: tuple[str, str] | None = None) -> Any:
    """A table of an export in canonical row order; ``rename`` rewrites a path prefix."""
    import polars as pl

    df = pl.scan_parquet(f"{out}/{table}/**/*.parquet", hive_partitioning=True).collect()
    if rename is not None:
        df = df.with_columns(pl.col(pl.String).str.replace_all(*rename, literal=True))
    keys = [c for c, t in df.schema.items() if not isinstance(t, (pl.List, pl.Struct))]
    return df.sort(keys, nulls_last=True)


@pytest.fixture(scope="module")
def local_export(local_fleet: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rivumi_analysis.export import export as process_export

    out = tmp_path_factory.mktemp("local-export") / "ds"
    process_export(local_fleet, out)
    return out


def assert_export_equals_local(out: Path, local_export: Path, local_fleet: Path) -> None:
    from polars.testing import assert_frame_equal

    from rivumi_analysis.export import TABLES

    for table in TABLES:
        assert_frame_equal(read_dataset(out, table),
                           read_dataset(local_export, table, (str(local_fleet), PREFIX)),
                           check_column_order=False)
    mine = json.loads((out / "_dataset.json").read_text())["tables"]
    theirs = json.loads((local_export / "_dataset.json").read_text())["tables"]
    assert mine == theirs


def test_s3_export_equals_local_export(s3: Any, local_fleet: Path, local_export: Path,
                                       tmp_path: Path) -> None:
    from rivumi_analysis.distributed import export

    res = export(PREFIX, tmp_path / "ds", engine="process")
    assert res.manifest["tables"]["runs"]["rows"] >= 30
    assert_export_equals_local(tmp_path / "ds", local_export, local_fleet)


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_s3_export_on_ray_equals_local_export(s3: Any, ray_local: Any, local_fleet: Path,
                                              local_export: Path, tmp_path: Path) -> None:
    from rivumi_analysis.distributed import export

    res = export(PREFIX, tmp_path / "ds", engine="ray", runs_per_task=8)
    assert res.complete and res.summary is not None and res.summary.bytes > 0
    assert_export_equals_local(tmp_path / "ds", local_export, local_fleet)


def download(fs: Any, uri: str, dest: Path) -> Path:
    """Copy an exported prefix to a local folder (to read it like a local export)."""
    from pyarrow import fs as pafs

    pafs.copy_files(uri.split("://", 1)[1], str(dest), source_filesystem=fs,
                    destination_filesystem=pafs.LocalFileSystem())
    return dest


@pytest.mark.parametrize("engine", ["process", pytest.param("ray", marks=pytest.mark.ray)])
def test_export_from_s3_to_an_s3_prefix_equals_local_export(
        s3: Any, local_fleet: Path, local_export: Path, tmp_path: Path, engine: str,
        request: pytest.FixtureRequest) -> None:
    from rivumi_analysis.distributed import export
    from rivumi_analysis.export import ExportError

    if engine == "ray":
        request.getfixturevalue("ray_local")
    out = f"s3://{BUCKET}/exports/{engine}"
    res = export(PREFIX, out, engine=engine, runs_per_task=8)
    assert res.complete and res.summary is not None and res.summary.chunks_done > 1
    assert_export_equals_local(download(s3, out, tmp_path / "ds"), local_export, local_fleet)
    # a second export replaces the first (its marker says it is an export) ...
    export(PREFIX, out, engine=engine, runs_per_task=64)
    assert_export_equals_local(download(s3, out, tmp_path / "ds2"), local_export, local_fleet)
    parts = json.loads((tmp_path / "ds2" / "_parts.json").read_text())
    assert sorted(f["path"] for f in parts["files"]) == sorted(
        str(p.relative_to(tmp_path / "ds2")) for p in (tmp_path / "ds2").rglob("*.parquet"))
    # ... but a prefix holding something else is refused before anything is read
    with pytest.raises(ExportError, match="not empty and holds no previous export"):
        export(PREFIX, PREFIX, engine=engine)


@pytest.mark.parametrize("engine", ["process", pytest.param("ray", marks=pytest.mark.ray)])
def test_store_from_s3_equals_local_store(s3: Any, local_fleet: Path, tmp_path: Path,
                                          engine: str, request: pytest.FixtureRequest) -> None:
    import polars as pl
    from polars.testing import assert_frame_equal

    from rivumi_analysis.distributed import store
    from rivumi_analysis.store import TABLES
    from rivumi_analysis.store.read import ordered, read_parts

    if engine == "ray":
        request.getfixturevalue("ray_local")
    local = store(local_fleet, store_dir=tmp_path / "local", engine="process", jobs=1)
    remote = store(PREFIX, store_dir=tmp_path / "s3", engine=engine, jobs=2)
    for t in TABLES:
        a = ordered(read_parts(local.opened.store, local.opened.manifest, t), t,
                    local.opened.manifest)
        b = ordered(read_parts(remote.opened.store, remote.opened.manifest, t), t,
                    remote.opened.manifest)
        a = a.with_columns(pl.col(pl.String).str.replace_all(str(local_fleet), PREFIX,
                                                             literal=True))
        assert_frame_equal(b, a)


def test_store_refresh_over_s3_reads_only_what_changed(s3: Any, tmp_path: Path) -> None:
    """Objects are fingerprinted (name, size, modification time): a refresh with nothing
    changed reads no run; after one object is rewritten, exactly its run is read again, and
    the audit served from that store equals a cold audit of the bucket."""
    from rivumi_analysis.read.incremental import RACY_SECONDS
    from rivumi_analysis.store.core import open_store

    time.sleep(RACY_SECONDS + 1.1)  # the uploaded objects are no longer racy
    store_dir = tmp_path / "s3-store"
    first = open_store(PREFIX, store_dir=store_dir, jobs=1)
    n = len(first.manifest.order)
    assert n >= 30 and first.store.last_stats.reread == n
    again = open_store(PREFIX, store_dir=store_dir, jobs=1)
    assert again.store.last_stats.reread == 0  # (today: every run read again)
    run = next(r for r in again.manifest.order if r.endswith("a66038f97f204cb3aaa96339f195c37e"))
    key = run.split("://", 1)[1] + "/events.jsonl"
    with s3.open_input_stream(key) as fh:
        data = fh.read()
    with s3.open_output_stream(key) as out:  # one line fewer: a changed size
        out.write(data[:data.rstrip(b"\n").rfind(b"\n") + 1])
    changed = open_store(PREFIX, store_dir=store_dir, jobs=1)
    assert changed.store.last_stats.reread == 1
    assert changed.manifest.runs[run]["fp"] != again.manifest.runs[run]["fp"]
    served = local_audit(PREFIX, jobs=1, cache_dir=tmp_path / "cache")
    assert served.runs == local_audit(PREFIX, jobs=1, cache=False).runs
    with s3.open_output_stream(key) as out:  # put it back for the other tests
        out.write(data)
