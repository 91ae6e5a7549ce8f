"""The store's warm read: the Parquet read of the manifest in force overlaps the stat pass
(``store.core.open_and_read``), and is kept only when the refresh served that very manifest.

Each test makes the optimistic read finish on the old version first, then changes the fleet
(or the store) before the stat pass runs, so the discarded read is certain, not a race."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import rivumi_analysis as ra
import rivumi_analysis.store.core as core
from rivumi_analysis.errors import QuarantineError
from rivumi_analysis.store.core import Store, open_store
from tests.test_store import OLD, _age

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_runs"
@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    src = tmp_path / "fleet"
    for group in ("completed", "forks", "crashes"):
        shutil.copytree(SAMPLES / group, src / group, symlinks=True)
    _age(src)
    return src


def _runs(src: Path, group: str) -> list[Path]:
    return sorted(p for p in (src / group).iterdir() if p.is_dir())


class _Spy:
    """Records each optimistic read (its manifest, success, rows) and runs ``change``
    after the read finished and before discovery (the stat pass) starts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
        self.change = change
        self.reads: list[tuple[Any, bool, Any]] = []
        self.done = threading.Event()
        run, discover = core._Prefetch.run, core.discover

        def spy_run(job: Any) -> None:
            try:
                run(job)
            finally:
                self.reads.append((job.manifest, job.ok, job.value))
                self.done.set()

        def spy_discover(*args: Any, **kw: Any) -> Any:
            if self.change is not None:
                assert self.done.wait(30), "the optimistic read did not start"
                self.change()
            return discover(*args, **kw)

        monkeypatch.setattr(core._Prefetch, "run", spy_run)
        monkeypatch.setattr(core, "discover", spy_discover)


def _append(run: Path) -> None:
    import json
    import uuid

    lines = [ln for ln in (run / "events.jsonl").read_bytes().split(b"\n")[:-1] if ln.strip()]
    last = json.loads(lines[-1])
    ev = {**last, "sequence": last["sequence"] + 1, "event_id": uuid.uuid4().hex,
          "event_type": "note.added", "data": {"marker": "during the read"}}
    with open(run / "events.jsonl", "ab") as fh:
        fh.write(json.dumps(ev, separators=(",", ":")).encode() + b"\n")


def test_nothing_changed_serves_the_optimistic_read(fleet: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    ra.events_df(str(fleet), store_dir=store)
    spy = _Spy(monkeypatch, lambda: None)
    m = Store(store).manifest()
    got = ra.events_df(str(fleet), store_dir=store)
    assert len(spy.reads) == 1 and spy.reads[0][1]  # read once, in the background
    assert spy.reads[0][0].generation == m.generation
    assert got is spy.reads[0][2]["events"]  # that very frame was returned
    assert_frame_equal(got, ra.events_df(str(fleet), cache=False))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["append", "add", "remove", "rewrite", "other_refresher"])
def test_a_change_made_while_the_optimistic_read_runs_is_seen(
        fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    store = tmp_path / "store"
    a, b = _runs(fleet, "completed")[:2]

    def change() -> None:
        if kind == "append":
            _append(a)
        elif kind == "add":
            shutil.copytree(b, fleet / "completed" / "zz-added-during-the-read")
        elif kind == "remove":
            shutil.rmtree(b)
        elif kind == "rewrite":  # same size, mtime restored: only ctime shows it
            p = a / "events.jsonl"
            data = p.read_bytes()
            p.write_bytes(data.replace(b'"sequence":1,', b'"sequence":7,', 1))
            os.utime(p, (OLD, OLD))
        else:  # the fleet changed and another process refreshed the store meanwhile
            _append(a)
            spy.change = None
            open_store(str(fleet), store_dir=store)

    for t in ("events", "states", "runs"):
        load = getattr(ra, f"{t}_df")
        before = load(str(fleet), store_dir=store)
        spy = _Spy(monkeypatch, change)
        got = load(str(fleet), store_dir=store)
        monkeypatch.undo()
        # the optimistic read ran on the old version and was discarded
        assert len(spy.reads) == 1 and spy.reads[0][1], t
        assert_frame_equal(spy.reads[0][2][t], before)
        assert_frame_equal(got, load(str(fleet), cache=False)), (kind, t)
        assert not got.equals(before), (kind, t)
        shutil.rmtree(fleet)  # the next table starts from a fresh copy of the fleet
        for group in ("completed", "forks", "crashes"):
            shutil.copytree(SAMPLES / group, fleet / group, symlinks=True)
        _age(fleet)


def test_a_damaged_part_met_by_the_optimistic_read_is_repaired(
        fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    cold = ra.events_df(str(fleet), cache=False)
    ra.events_df(str(fleet), store_dir=store)
    m = Store(store).manifest()
    f = next(f for _k, f in m.files("events"))
    path = store / f["path"]
    st = path.stat()
    blob = bytearray(path.read_bytes())
    blob[8:4000] = os.urandom(3992)  # size and mtime kept: the stat check passes
    path.write_bytes(bytes(blob))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    spy = _Spy(monkeypatch, lambda: None)
    got = ra.events_df(str(fleet), store_dir=store)
    assert spy.reads and spy.reads[0][1] is False  # the optimistic read met the damage
    assert_frame_equal(got, cold)
    assert not Store(store).damaged_parts(Store(store).manifest(), deep=True)
    # damage the stat check sees (size changed): the refresh rebuilds, the read is redone
    m = Store(store).manifest()
    f = next(f for _k, f in m.files("events"))
    with open(store / f["path"], "ab") as fh:
        fh.write(b"\0" * 64)
    monkeypatch.undo()
    spy = _Spy(monkeypatch, lambda: None)
    assert_frame_equal(ra.events_df(str(fleet), store_dir=store), cold)
    assert len(spy.reads) == 1 and spy.reads[0][0].generation == m.generation
    assert Store(store).manifest().generation > m.generation


def test_strict_load_raises_from_the_optimistic_read(fleet: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    shutil.copytree(SAMPLES / "bad_input", fleet / "bad_input", symlinks=True)
    _age(fleet / "bad_input")
    ra.events_df(str(fleet), store_dir=store)
    spy = _Spy(monkeypatch, lambda: None)
    with pytest.raises(QuarantineError) as warm:
        ra.events_df(str(fleet), store_dir=store, strict=True)
    assert len(spy.reads) == 1 and spy.reads[0][1]  # the error was the read's result
    monkeypatch.undo()
    with pytest.raises(QuarantineError) as cold:
        ra.events_df(str(fleet), cache=False, strict=True)
    assert_frame_equal(warm.value.quarantine, cold.value.quarantine)
    assert isinstance(warm.value.quarantine, pl.DataFrame)


# --- names that are not UTF-8 ----------------------------------------------------------------

EXAMPLE = ROOT / "tests" / "fixtures" / "example" / "a66038f97f204cb3aaa96339f195c37e"
NOT_UTF8 = os.fsdecode(b"r\xff\xfe")  # as os.listdir gives it: surrogate escapes


def test_an_entry_name_not_utf8_in_a_run_folder_through_the_store_and_watch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An atomic-write leftover whose name is not UTF-8 (the store and watch keyed runs with
    msgpack of the names as str: UnicodeEncodeError, the store fell back, watch crashed)."""
    from rivumi_analysis.store.core import run_fingerprint
    from rivumi_analysis.store.watch import Watcher

    run = tmp_path / "fleet" / EXAMPLE.name
    shutil.copytree(EXAMPLE, run)
    leftover = run / f".session.json.{NOT_UTF8}.tmp"
    leftover.write_bytes(b"{}")
    _age(tmp_path / "fleet")
    _settle(monkeypatch)  # the discovery recorded with the names listed (a re-used one)
    store = tmp_path / "store"
    src = str(tmp_path / "fleet")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no StoreWarning: served by the store
        for t in ("events", "runs"):
            load = getattr(ra, f"{t}_df")
            assert_frame_equal(load(src, store_dir=store), load(src, cache=False))
        assert open_store(src, store_dir=store).store.last_stats.reread == 0
        m = Store(store).manifest()
        assert m.discovery is not None and any(
            leftover.name in names for _i, names in m.discovery["runs"])
    first = run_fingerprint(str(run), frozenset())
    assert first is not None and first == run_fingerprint(str(run), frozenset())
    leftover.unlink()  # the name counts
    assert run_fingerprint(str(run), frozenset()).blob != first.blob
    assert open_store(src, store_dir=store).store.last_stats.reread == 1
    leftover.write_bytes(b"{}")
    w = Watcher(src)
    assert w.poll() == [] and w.reads == 0  # not live: stat-ed, never read
    (tracked,) = w.runs.values()
    assert tracked.fp is not None  # the name fingerprinted (it was a UnicodeEncodeError)
    w.poll()
    assert w.reads == 0 and next(iter(w.runs.values())).fp == tracked.fp


def test_a_run_folder_not_utf8_in_watch_output(tmp_path: Path) -> None:
    """A live run whose folder name is not UTF-8: watch's lines show U+FFFD (never print
    what is not UTF-8; JSON lines without lone surrogate escapes)."""
    import fcntl
    import json

    from rivumi_analysis.store.watch import Watcher, render_change, render_screen

    run = tmp_path / "fleet" / NOT_UTF8
    shutil.copytree(EXAMPLE, run)
    fd = os.open(run / ".writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        w = Watcher(str(tmp_path / "fleet"), stall_seconds=0)
        changes = w.poll()
    finally:
        os.close(fd)
    assert {c.type for c in changes} >= {"live", "alert"}
    for c in changes:
        line = render_change(c)
        line.encode("utf-8")
        assert "r\ufffd\ufffd" in line
        doc = json.loads(c.to_json())
        assert doc["run_dir"].endswith("r\ufffd\ufffd")
        c.to_json().encode("utf-8")
    render_screen(w, time.time(), str(tmp_path), 0.1).encode("utf-8")
    changes = w.poll()  # the lock released: the run finishes with its verdict
    assert [c.type for c in changes] == ["finished"]
    assert "r\ufffd\ufffd" in render_change(changes[0])


def test_manifest_and_read_order_with_paths_not_utf8(tmp_path: Path) -> None:
    """The manifest keeps such paths exactly (msgpack strings are UTF-8: written as bytes),
    and the read side matches them in the U+FFFD form the tables show."""
    from rivumi_analysis.store.core import Manifest, _decode_manifest, _encode_manifest
    from rivumi_analysis.store.read import ordered

    a, b = f"/f/{NOT_UTF8}", "/f/b"
    m = Manifest(3, [b, a], {r: {"sub": False, "parent": None, "root": "/f", "fp": b"x",
                                 "part": "g1", "volatile": False} for r in (a, b)},
                 {"g1": {"runs": [a, b], "files": []}}, [f"/{NOT_UTF8}"], 8)
    back = _decode_manifest(_encode_manifest(m))
    assert back is not None
    assert (back.order, back.runs, back.parts, back.sources) == (
        m.order, m.runs, m.parts, m.sources)
    plain = Manifest(3, [b], {b: m.runs[b]}, {"g1": {"runs": [b], "files": []}}, ["/f"], 8)
    assert b"fsnames" not in _encode_manifest(plain)  # the usual encoding otherwise
    df = pl.DataFrame({"run_dir": ["/f/r\ufffd\ufffd", "/f/b"], "x": [1, 2]})
    assert ordered(df, "events", m)["x"].to_list() == [2, 1]  # b first, as discovered
    from rivumi_analysis.store.read import _file_scan

    df.write_parquet(tmp_path / "p.parquet")  # a part whose live runs are only ``a``
    got = _file_scan(str(tmp_path / "p.parquet"), "native", {"run_dir": pl.String,
                                                             "x": pl.Int64}, [a]).collect()
    assert got["x"].to_list() == [1]


# --- a discovery re-used while no folder it listed changed -----------------------------------

@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Runs at two depths, subagents, an empty folder: every shape discovery walks."""
    src = tmp_path / "tree"
    for group in ("completed", "subagents"):
        shutil.copytree(SAMPLES / group, src / group, symlinks=True)
    shutil.copytree(SAMPLES / "crashes", src / "deep" / "er" / "crashes", symlinks=True)
    (src / "empty").mkdir()
    _age(src)
    return src


def _settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Folders count as settled 50 ms after their last change (not 2 s), so a test need
    not wait; the file system's timestamps here are far finer than that."""
    monkeypatch.setattr(core, "RACY_SECONDS", 0.05)
    time.sleep(0.06)


def _same_as_discovery(src: Path, store: Path) -> bool:
    """The store's re-used discovery (when it applies) equals a fresh one; returns whether
    it applied. The store's tables then equal cold ones."""
    from rivumi_analysis.read.discovery import discover

    m = Store(store).manifest()
    again = core._rediscover([str(src)], 8, m, time.time_ns())
    listings: dict[str, list[str]] = {}
    fresh = discover(str(src), listings=listings).runs
    if again is not None:
        assert again[0] == fresh and again[1] == listings
    return again is not None


@pytest.mark.parametrize("change", [
    "nothing", "leftover_in_a_run", "run_added", "run_removed", "run_in_the_empty_folder",
    "run_replaced_by_a_symlink", "run_lost_its_markers", "subagents_appeared",
    "subagent_added", "deep_run_added", "folder_unreadable"])
def test_rediscovery_equals_discovery_after_each_kind_of_change(
        tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    store = tmp_path / "store"
    _settle(monkeypatch)
    ra.events_df(str(tree), store_dir=store)  # the first build records the discovery
    _settle(monkeypatch)
    assert _same_as_discovery(tree, store)  # nothing changed: re-used
    run = _runs(tree, "completed")[0]
    parent = _runs(tree, "subagents")[0]
    if change == "leftover_in_a_run":
        (run / ".session.json.x1.tmp").write_text("{}")
    elif change == "run_added":
        shutil.copytree(run, tree / "completed" / "zz-added")
    elif change == "run_removed":
        shutil.rmtree(run)
    elif change == "run_in_the_empty_folder":
        shutil.copytree(run, tree / "empty" / "zz-new")
    elif change == "run_replaced_by_a_symlink":
        shutil.move(run, tmp_path / "elsewhere")
        os.symlink(tmp_path / "elsewhere", run)
    elif change == "run_lost_its_markers":
        for name in os.listdir(run):
            if name in {"session.json", "events.jsonl", "request.json", "checkpoint.json",
                        "result.json"}:
                os.unlink(run / name)
        shutil.copytree(_runs(tree, "completed")[1], run / "inner")  # now a folder of runs
    elif change == "subagents_appeared":
        shutil.copytree(_runs(tree, "completed")[1], run / "subagents" / "child")
    elif change == "subagent_added":
        subs = parent / "subagents"
        shutil.copytree(next(p for p in subs.iterdir() if p.is_dir()), subs / "zz-child")
    elif change == "deep_run_added":
        shutil.copytree(run, tree / "deep" / "er" / "zz-deep")
    elif change == "folder_unreadable":
        os.chmod(tree / "empty", 0)  # (root lists it anyway; its ctime changed)
    reused = _same_as_discovery(tree, store)
    # a change inside a run folder re-lists that folder only; any other change rediscovers
    assert reused == (change in {"nothing", "leftover_in_a_run"}), change
    for t in ("events", "runs"):
        load = getattr(ra, f"{t}_df")
        assert_frame_equal(load(str(tree), store_dir=store), load(str(tree), cache=False))
    # once the changed folders have settled, an open records a discovery to re-use again
    _settle(monkeypatch)
    ra.runs_df(str(tree), store_dir=store)
    assert _same_as_discovery(tree, store)
    if change == "folder_unreadable":
        os.chmod(tree / "empty", 0o755)


def test_a_folder_changed_just_before_discovery_is_never_trusted(
        tree: Path, tmp_path: Path) -> None:
    """With the real RACY_SECONDS every folder here was just created: nothing is re-used
    (a change within the same clock tick could keep a folder's ctime)."""
    store = tmp_path / "store"
    ra.events_df(str(tree), store_dir=store)
    m = Store(store).manifest()
    assert m.discovery is None or all(ident is None for ident, _ in m.discovery["runs"])
    assert not _same_as_discovery(tree, store)


# --- the eager read: dead rows dropped and rows ordered by blocks, in one gather --------------

def _row_order(df: pl.DataFrame, order: list[str]) -> pl.DataFrame:
    """The reference: every row ranked by its run's discovery position, stably sorted."""
    rank = {r: i for i, r in enumerate(order)}
    idx = df.get_column("run_dir").replace_strict(rank, return_dtype=pl.UInt32)
    return df.with_columns(idx.alias("__o")).sort("__o", maintain_order=True).drop("__o")


@pytest.mark.parametrize("sliced", [4096, 0])
def test_ordered_moves_blocks_as_a_row_sort_would(sliced: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs interleaved, repeated in several blocks, already in order or not: the block
    moves (by slices, or by a gather when there are many) equal a stable sort of every row
    by its run's rank."""
    import random

    from rivumi_analysis.store import read
    from rivumi_analysis.store.read import ordered

    monkeypatch.setattr(read, "SLICED_SEGMENTS", sliced)

    rnd = random.Random(12)
    for _ in range(300):
        runs = [f"/f/r{i}" for i in range(rnd.randint(1, 7))]
        m = core.Manifest(1, rnd.sample(runs, len(runs)), {}, {}, ["/f"], 8)
        rows = [rnd.choice(runs) for _ in range(rnd.randint(1, 40))]
        if rnd.random() < 0.3:
            rows.sort(key=m.order.index)  # already in order: returned as it is
        df = pl.DataFrame({"run_dir": rows, "x": range(len(rows))})
        assert_frame_equal(ordered(df, "events", m), _row_order(df, m.order))


@pytest.mark.slow
def test_eager_read_drops_superseded_rows_and_orders_like_the_scan(
        fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts holding superseded runs are read whole and their dead blocks dropped with the
    reordering: every table equals the filtered scan ordered row by row, and a cold load."""
    monkeypatch.setattr(core, "PART_RUNS", 4)  # several parts
    monkeypatch.setattr("rivumi_analysis.read.executor.POOL_MIN_RUNS", 10 ** 6)  # here
    store = tmp_path / "store"
    ra.events_df(str(fleet), store_dir=store)
    # only the last run discovered changes: its new part comes last, so the blocks left are
    # in order already (dead rows still to drop)
    last = Path(Store(store).manifest().order[-1])
    _grow(last)
    opened = open_store(str(fleet), store_dir=store)
    assert opened.store.last_stats.reread == 1
    _check_eager_read(fleet, opened.store, opened.manifest)
    # runs spread over the parts, the last first: the new part's blocks move, parts are dirty
    runs = _runs(fleet, "completed")
    for run in (runs[-1], runs[1], runs[5]):
        _grow(run)
    opened = open_store(str(fleet), store_dir=store)
    m = opened.manifest
    dirty = [k for k in m.parts if len(m.live_runs(k)) != len(m.parts[k]["runs"])]
    assert len(dirty) >= 3 and opened.store.last_stats.reread == 3  # the path is exercised
    _check_eager_read(fleet, opened.store, m)


def _grow(run: Path) -> None:
    with open(run / "events.jsonl", "ab") as fh:
        fh.write(b'{"bad json\n')
    _age(run)  # settled (only this run: aging touches the ctime of what it ages)


def _check_eager_read(fleet: Path, st: Store, m: core.Manifest) -> None:
    from rivumi_analysis.store.read import read_parts, read_table

    for t in ra._TABLES:
        got = read_table(st, m, t)
        assert_frame_equal(got, _row_order(read_parts(st, m, t), m.order) if t != "runs"
                           else read_parts(st, m, t).sort("run_dir", maintain_order=True)), t
        assert_frame_equal(got, getattr(ra, f"{t}_df")(str(fleet), cache=False)), t
