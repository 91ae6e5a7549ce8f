"""The shared primitive: build_tables equals the loaders, write_parts is deterministic."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from rivumi_analysis import (
    approvals_df,
    drift_df,
    events_df,
    forks_df,
    manifests_df,
    messages_df,
    model_calls_df,
    quarantine_df,
    runs_df,
    states_df,
    tool_calls_df,
    usage_df,
    verifications_df,
)
from rivumi_analysis.read.discovery import discover
from rivumi_analysis.store import TABLES, build_tables, write_parts
from rivumi_analysis.store.build import empty_tables

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_runs"
LOADERS = {"runs": runs_df, "events": events_df, "quarantine": quarantine_df,
           "manifests": manifests_df, "tool_calls": tool_calls_df, "approvals": approvals_df,
           "model_calls": model_calls_df, "usage": usage_df, "verifications": verifications_df,
           "states": states_df, "drift": drift_df, "forks": forks_df, "messages": messages_df}


def test_build_tables_equals_every_loader() -> None:
    locs = discover(str(SAMPLES)).runs
    tables = build_tables(locs)
    assert tuple(tables) == TABLES == tuple(LOADERS)
    for name, loader in LOADERS.items():
        cold = loader(str(SAMPLES), cache=False)
        assert cold.height > 0 or name == "quarantine", name
        assert_frame_equal(pl.from_arrow(tables[name]), cold, check_dtypes=True), name


def test_empty_chunk_has_every_schema() -> None:
    tables = build_tables([])
    full = build_tables(discover(str(SAMPLES)).runs)
    for name in TABLES:
        assert tables[name].num_rows == 0
        assert pl.from_arrow(tables[name]).schema == pl.from_arrow(full[name]).schema, name
    assert set(empty_tables()) == set(TABLES)


@pytest.mark.slow
def test_write_parts_layout_and_retry_overwrites(tmp_path: Path) -> None:
    locs = discover(str(SAMPLES)).runs
    tables = build_tables(locs[:4])
    first = write_parts(tables, tmp_path, "c0")
    again = write_parts(tables, tmp_path, "c0")  # a retried task
    assert [f["path"] for f in first["files"]] == [f["path"] for f in again["files"]]
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.parquet"))
    assert files == sorted(f["path"] for f in first["files"])
    assert all(p.split("/")[1].startswith("kind=") and p.endswith("part-c0.parquet")
               for p in files)
    assert not list(tmp_path.rglob("*.tmp"))
    ev = pl.read_parquet(tmp_path / "events" / "**" / "*.parquet", hive_partitioning=True)
    assert ev.height == tables["events"].num_rows
    meta = pq.read_schema(tmp_path / first["files"][0]["path"]).metadata
    assert meta[b"rivumi_analysis.table"] == first["files"][0]["table"].encode()
    write_parts(build_tables(locs[4:]), tmp_path, "c1")
    both = pl.read_parquet(tmp_path / "events" / "**" / "*.parquet", hive_partitioning=True)
    assert both.height == sum(build_tables([loc])["events"].num_rows for loc in locs)


def test_write_parts_records_each_files_own_size_and_digest(tmp_path: Path) -> None:
    """Each file's record (size, BLAKE2b: the store's damage check) is of the bytes on disk,
    though the digest is taken from the encoded bytes in memory, not read back; a retried key
    overwrites with the same bytes; each file reads back as its table's rows."""
    import os

    from rivumi_analysis.store.build import file_digest

    tables = build_tables(discover(str(SAMPLES)).runs[:6])
    first = write_parts(tables, tmp_path, "c0")
    assert len(first["files"]) >= len(TABLES) - 1  # (quarantine may have no rows)
    for f in first["files"]:
        path = tmp_path / f["path"]
        assert f["bytes"] == os.path.getsize(path) > 0, f["path"]
        assert f["blake2b"] == file_digest(str(path)), f["path"]
        assert pq.read_metadata(path).num_rows == f["rows"], f["path"]
    again = write_parts(tables, tmp_path, "c0")
    assert [(f["bytes"], f["blake2b"]) for f in again["files"]] == [
        (f["bytes"], f["blake2b"]) for f in first["files"]]
    assert len({f["blake2b"] for f in first["files"]}) == len(first["files"])


def test_write_prefixes_records_the_bytes_on_disk_and_leaves_no_temporary(tmp_path: Path) -> None:
    """A part's live-run prefixes go through the same atomic writer as the Parquet parts: the
    record's size and BLAKE2b are of the file on disk, it unpickles to what was given, and a
    rewrite under the same key replaces it whole with no temporary left behind."""
    import os
    import pickle

    from rivumi_analysis.store.build import file_digest
    from rivumi_analysis.store.core import write_prefixes

    first = write_prefixes({"/runs/a": b"\x00prefix", "/runs/b": b""}, str(tmp_path), "c0")
    path = tmp_path / first["path"]
    assert first["rows"] == 2
    assert first["bytes"] == os.path.getsize(path) > 0
    assert first["blake2b"] == file_digest(str(path))
    assert pickle.loads(path.read_bytes()) == {"/runs/a": b"\x00prefix", "/runs/b": b""}
    again = write_prefixes({"/runs/c": b"x" * 1000}, str(tmp_path), "c0")
    assert again["path"] == first["path"] and again["blake2b"] != first["blake2b"]
    assert again["blake2b"] == file_digest(str(path))
    assert pickle.loads(path.read_bytes()) == {"/runs/c": b"x" * 1000}
    assert not list(tmp_path.rglob("*.tmp"))



def test_before_rename_sees_the_whole_temporary_and_the_old_file(tmp_path: Path) -> None:
    """The ``part_temp_written`` cut (``before_rename``) is between the fsynced temporary and
    its rename: the temporary holds every new byte, the target still the old ones; and
    ``write_parts`` passes the hook to every file it writes."""
    import os

    from rivumi_analysis.store.build import write_atomically

    target = tmp_path / "d" / "f.bin"
    target.parent.mkdir()
    target.write_bytes(b"old")
    seen: list[tuple[bytes, bytes]] = []
    write_atomically(str(target), b"new bytes",
                     before_rename=lambda tmp: seen.append((Path(tmp).read_bytes(),
                                                            target.read_bytes())))
    assert seen == [(b"new bytes", b"old")] and target.read_bytes() == b"new bytes"
    temps: list[str] = []
    out = write_parts(build_tables(discover(str(SAMPLES)).runs[:2]), tmp_path / "ds", "k",
                      before_rename=temps.append)
    # ".<name>.<pid>.tmp" beside each file the part holds
    assert sorted(os.path.join(os.path.dirname(t), os.path.basename(t)[1:].rsplit(".", 2)[0])
                  for t in temps) == sorted(str(tmp_path / "ds" / f["path"])
                                            for f in out["files"])
    assert not list(tmp_path.rglob("*.tmp"))
