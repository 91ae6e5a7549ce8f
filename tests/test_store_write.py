"""The writer's fast paths against their exact formulations: the Parquet files a chunk of one
kind writes without the ``kind`` join are the files the join writes, byte for byte; the
cached type conversions (``portable``, ``_plain_arrow``) equal their uncached forms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

from rivumi_analysis.read.discovery import discover
from rivumi_analysis.store import build
from rivumi_analysis.store.build import build_tables, write_parts

SAMPLES = Path(__file__).resolve().parents[1] / "sample_runs"


def _through_the_join(_table: str, df: Any) -> Any:
    """A transform that changes nothing: ``write_parts`` then takes its exact path (the
    ``kind`` join and split) for every table."""
    return df


@pytest.fixture(autouse=True)
def written(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, pa.Table]]:
    """Every Arrow table handed to the file writer, with its file's table and kind."""
    seen: list[tuple[str, pa.Table]] = []
    real = build._write_file

    def spy(arrow: pa.Table, out: str, table: str, kind: str, *a: Any) -> Any:
        seen.append((f"{table}/{kind}", arrow))
        return real(arrow, out, table, kind, *a)

    monkeypatch.setattr(build, "_write_file", spy)
    return seen


def _same_tables(seen: list[tuple[str, pa.Table]]) -> None:
    """The first half of ``seen`` (the exact path's) equals the second, chunk by chunk."""
    half = len(seen) // 2
    assert half and len(seen) == 2 * half
    for (name, want), (name2, got) in zip(seen[:half], seen[half:], strict=True):
        assert name == name2
        assert got.equals(want, check_metadata=True), name
        assert [[len(c) for c in col.chunks] for col in got.columns] == [
            [len(c) for c in col.chunks] for col in want.columns], name


def _files(out: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(f["table"], f["kind"], f["path"], f["rows"], f["bytes"], f["blake2b"])
            for f in out["files"]]


@pytest.fixture(scope="module")
def native() -> tuple[dict[str, Any], dict[str, str]]:
    """The tables of some native runs (one kind), and their kinds."""
    locs = [loc for loc in discover(str(SAMPLES)).runs if not loc.is_subagent][:8]
    # (every table in several chunks, as a chunk's tables often are: the join leaves one
    # chunk per column, and the writer's pages follow the chunks)
    tables = {t: pl.concat([df.slice(0, df.height // 2), df.slice(df.height // 2)],
                           rechunk=False)
              for t, df in ((t, pl.from_arrow(a)) for t, a in build_tables(locs).items())}
    kinds = dict(zip(tables["runs"]["run_dir"].to_list(), tables["runs"]["kind"].to_list(),
                     strict=True))
    assert set(kinds.values()) == {"native"}, kinds
    return tables, kinds


def test_one_kind_writes_the_joins_bytes_without_the_join(
        native: tuple[dict[str, Any], dict[str, str]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, written: list[tuple[str, pa.Table]]) -> None:
    tables, kinds = native
    exact = write_parts(tables, tmp_path / "exact", "c0", kinds=kinds,
                        transform=_through_the_join)
    joins = []
    real = build.with_kind
    monkeypatch.setattr(build, "with_kind", lambda *a, **k: joins.append(1) or real(*a, **k))
    fast = write_parts(tables, tmp_path / "fast", "c0", kinds=kinds)
    assert not joins  # the fast path was taken for every table
    assert _files(fast) == _files(exact)
    _same_tables(written)
    assert len(fast["files"]) >= len(tables) - 1
    for f in fast["files"]:  # (the records are the bytes on disk: test_store_build.py)
        assert (tmp_path / "fast" / f["path"]).read_bytes() == (
            tmp_path / "exact" / f["path"]).read_bytes()


@pytest.mark.parametrize("case", ["missing_run", "other_kind", "two_kinds", "lone_surrogate",
                                  "null_kind", "all_null_kind", "mixed_kind_column",
                                  "other_run_other_kind", "empty"])
def test_every_other_chunk_writes_what_the_join_writes(
        native: tuple[dict[str, Any], dict[str, str]], tmp_path: Path, case: str,
        monkeypatch: pytest.MonkeyPatch, written: list[tuple[str, pa.Table]]) -> None:
    """Rows whose run is not in ``kinds`` ("unknown"), ``kinds`` that disagree with the
    tables' own ``kind`` columns, several kinds, a run folder name that is not UTF-8, null or
    mixed ``kind`` values, a kind no row has, empty tables kept: the same files as the exact
    path, which joins only where it must."""
    tables, kinds = dict(native[0]), dict(native[1])
    first = next(iter(kinds))
    keep_empty = False
    if case == "missing_run":
        del kinds[first]
    elif case == "other_kind":
        kinds = dict.fromkeys(kinds, "fork")
    elif case == "two_kinds":
        kinds[first] = "subagent"
    elif case == "lone_surrogate":
        kinds["/runs/r-" + chr(0xDCFF)] = "native"
    elif case == "other_run_other_kind":
        kinds["/elsewhere/r"] = "subagent"
    elif case in ("null_kind", "mixed_kind_column"):
        ev = tables["events"]
        new = None if case == "null_kind" else "fork"
        tables["events"] = ev.with_columns(
            pl.when(pl.col("run_dir") == first).then(pl.lit(new, pl.String))
            .otherwise(pl.col("kind")).alias("kind"))
        assert tables["events"]["kind"].n_unique() == 2
    elif case == "all_null_kind":
        tables["events"] = tables["events"].with_columns(kind=pl.lit(None, pl.String))
    elif case == "empty":
        tables = {t: df.clear() for t, df in tables.items()}
        keep_empty = True
    exact = write_parts(tables, tmp_path / "exact", "c1", kinds=kinds, keep_empty=keep_empty,
                        transform=_through_the_join)
    joins = []
    real = build.with_kind
    monkeypatch.setattr(build, "with_kind", lambda *a, **k: joins.append(1) or real(*a, **k))
    fast = write_parts(tables, tmp_path / "fast", "c1", kinds=kinds, keep_empty=keep_empty)
    assert _files(fast) == _files(exact)
    _same_tables(written)
    assert bool(joins) == (case not in ("other_kind", "mixed_kind_column",
                                        "other_run_other_kind")), len(joins)
    assert {f["kind"] for f in fast["files"]} == {
        "missing_run": {"native", "unknown"}, "other_kind": {"native", "fork"},
        "two_kinds": {"native", "subagent"}, "lone_surrogate": {"native"},
        "null_kind": {"native", "unknown"}, "all_null_kind": {"native", "unknown"},
        "mixed_kind_column": {"native", "fork"},
        "other_run_other_kind": {"native"}, "empty": {"none"}}[case]


def _portable_before(df: pl.DataFrame) -> pl.DataFrame:
    """``portable`` as it was before its per-dtype cache (the oracle)."""
    casts = []
    for name, dt in df.schema.items():
        want = build._portable_type(dt)
        if isinstance(dt, pl.Duration):
            casts.append(pl.col(name).dt.total_microseconds().alias(name))
        elif want != dt:
            casts.append(pl.col(name).cast(want))
    return df.with_columns(casts) if casts else df


def test_portable_equals_its_uncached_form() -> None:
    from datetime import datetime, timedelta

    df = pl.DataFrame({
        "s": ["a", None], "i": [1, 2], "u8": pl.Series([1, 2], dtype=pl.UInt8),
        "i32": pl.Series([-1, 2], dtype=pl.Int32), "u64": pl.Series([1, 2], dtype=pl.UInt64),
        "f32": pl.Series([0.5, None], dtype=pl.Float32), "f": [0.25, 1.0],
        "d": [timedelta(seconds=1, microseconds=5), None],
        "dns": pl.Series([timedelta(microseconds=7), None], dtype=pl.Duration("ns")),
        "t_naive": pl.Series([datetime(2026, 1, 1), None], dtype=pl.Datetime("ns")),
        "t_utc": pl.Series([datetime(2026, 1, 1), None], dtype=pl.Datetime("us", "UTC")),
        "t_ms_tz": pl.Series([datetime(2026, 1, 1), None],
                             dtype=pl.Datetime("ms", "Europe/Paris")),
        "cat": pl.Series(["x", "y"], dtype=pl.Categorical),
        "enum": pl.Series(["x", "y"], dtype=pl.Enum(["x", "y"])),
        "l16": pl.Series([[1], []], dtype=pl.List(pl.Int16)), "ls": [["a"], None],
        "st": pl.Series([{"a": 1, "b": "x"}, None],
                        dtype=pl.Struct({"a": pl.UInt8, "b": pl.String})),
        "n": [None, None], "b": [True, None],
    })
    want = _portable_before(df)
    assert want.schema != df.schema  # (the oracle casts)
    for _ in range(2):  # (the second time from the cache)
        assert_frame_equal(build.portable(df), want, check_dtypes=True)
    plain = df.select("s", "i", "f", "t_utc", "ls", "b")
    assert build.portable(plain) is plain


def _plain_before(tbl: pa.Table) -> pa.Table:
    """``_plain_arrow`` as it was before its schema cache (the oracle)."""
    def plain(t: Any) -> Any:
        if pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return pa.string()
        if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
            return pa.binary()
        if pa.types.is_large_list(t) or pa.types.is_list(t) or pa.types.is_list_view(t):
            return pa.list_(plain(t.value_type))
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, plain(f.type)) for f in t])
        return t

    schema = pa.schema([pa.field(f.name, plain(f.type)) for f in tbl.schema])
    return tbl.cast(schema) if schema != tbl.schema else tbl


def test_plain_arrow_equals_the_whole_table_cast() -> None:
    """Every column, chunk layout and the schema (field metadata and nullability too) as the
    former ``Table.cast`` to the plain schema; an already plain table is returned as it is."""
    chunk = pa.table({
        "ls": pa.array(["a", None, "ccc"], pa.large_string()),
        "sv": pa.array(["x", "y", None], pa.string_view()),
        "s": pa.array(["p", "q", "r"], pa.string()),
        "lb": pa.array([b"1", None, b"3"], pa.large_binary()),
        "i": pa.array([1, 2, None], pa.int64()),
        "ll": pa.array([["a"], [], None], pa.large_list(pa.large_string())),
        "l": pa.array([[1], [2, 3], []], pa.list_(pa.int64())),
        "st": pa.array([{"a": "x", "b": [1]}, None, {"a": None, "b": []}],
                       pa.struct([("a", pa.large_string()), ("b", pa.large_list(pa.int64()))])),
        "t": pa.array([0, 1, None], pa.timestamp("us", "UTC")),
    })
    tbl = pa.concat_tables([chunk, chunk.slice(1)])  # two chunks per column
    fields = [f.with_metadata({b"k": b"v"}) if f.name == "i" else f for f in tbl.schema]
    fields = [f.with_nullable(False) if f.name == "s" else f for f in fields]
    tbl = tbl.cast(pa.schema(fields, metadata={b"m": b"1"}))
    for t in (tbl, tbl.select(["s", "i", "t"]), tbl.select(["ls", "i"]).slice(1)):
        want = _plain_before(t)
        for _ in range(2):  # (the second time from the cache)
            got = build._plain_arrow(t)
            assert got.schema.equals(want.schema, check_metadata=True)
            assert got.equals(want, check_metadata=True)
            assert [c.num_chunks for c in got.columns] == [c.num_chunks for c in want.columns]
    plain = pa.table({"s": pa.array(["a"], pa.string()), "i": pa.array([1], pa.int64())})
    assert build._plain_arrow(plain) is plain
