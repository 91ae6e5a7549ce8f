"""The Parquet store: warm equals cold after every kind of change, damage, fallback, scans."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import rivumi_analysis as ra
from rivumi_analysis.errors import StoreError
from rivumi_analysis.store.core import MANIFEST, Store, StoreWarning, open_store

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_runs"
TABLES = ra._TABLES
OLD = time.time() - 3600


def _age(top: Path) -> None:
    """Files written by a test are 'racy' (modified just now); age them like a settled fleet."""
    for dirpath, dirs, files in os.walk(top):
        for n in dirs + files:
            os.utime(os.path.join(dirpath, n), (OLD, OLD), follow_symlinks=False)


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    src = tmp_path / "fleet"
    for group in ("completed", "forks", "crashes", "bad_input", "external"):
        shutil.copytree(SAMPLES / group, src / group, symlinks=True)
    _age(src)
    return src


def assert_warm_equals_cold(src: Path, store: Path) -> None:
    for t in TABLES:
        load = getattr(ra, f"{t}_df")
        assert_frame_equal(load(str(src), store_dir=store), load(str(src), cache=False)), t


def append_event(run: Path, marker: str = "appended", *, newline: bool = True) -> bytes:
    """Append a valid next event (the last one's envelope, next sequence); return its line."""
    import json
    import uuid

    lines = [ln for ln in (run / "events.jsonl").read_bytes().split(b"\n")[:-1] if ln.strip()]
    last = json.loads(lines[-1])  # the last complete line
    ev = {**last, "sequence": last["sequence"] + 1, "event_id": uuid.uuid4().hex,
          "event_type": "note.added", "data": {"marker": marker}}
    line = json.dumps(ev, separators=(",", ":")).encode() + (b"\n" if newline else b"")
    with open(run / "events.jsonl", "ab") as fh:
        fh.write(line)
    return line


def _runs(src: Path, group: str) -> list[Path]:
    return sorted(p for p in (src / group).iterdir() if p.is_dir())


@pytest.mark.slow
def test_warm_equals_cold_after_every_kind_of_change(fleet: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert_warm_equals_cold(fleet, store)
    st = Store(store)
    n_runs = len(st.manifest().order)
    # nothing changed: nothing re-read, nothing written
    m0 = st.manifest()
    opened = open_store(str(fleet), store_dir=store)
    assert opened.store.last_stats.reread == 0 and opened.manifest.generation == m0.generation

    a, b, c, d, e = _runs(fleet, "completed")[:5]
    # append one line to a log
    with open(a / "events.jsonl", "ab") as fh:
        fh.write(b'{"sequence": 999, "type": "note", "data": {}}\n')
    assert_warm_equals_cold(fleet, store)
    assert Store(store).last_stats is None  # stats live on the instance that refreshed
    opened = open_store(str(fleet), store_dir=store)
    # the appended run is racy (modified now) and re-read on every open until it settles
    assert opened.store.last_stats.reread <= 1
    # rewrite in place: same size, old mtime restored (ctime still tells)
    data = (b / "events.jsonl").read_bytes()
    (b / "events.jsonl").write_bytes(data.replace(b'"sequence":1,', b'"sequence":7,', 1))
    os.utime(b / "events.jsonl", (OLD, OLD))
    assert_warm_equals_cold(fleet, store)
    # truncate
    with open(c / "events.jsonl", "r+b") as fh:
        fh.truncate(len(data) // 3)
    assert_warm_equals_cold(fleet, store)
    # delete a run
    shutil.rmtree(d)
    assert_warm_equals_cold(fleet, store)
    # add a run
    shutil.copytree(SAMPLES / "completed" / e.name, fleet / "completed" / "zz-new-run")
    assert_warm_equals_cold(fleet, store)
    # replace a file by a symlink
    (e / "session.json").unlink()
    os.symlink(a / "session.json", e / "session.json")
    assert_warm_equals_cold(fleet, store)
    m = Store(store).manifest()
    assert len(m.order) == n_runs and d.as_posix() not in m.runs
    # the writer lock taken, then released
    with _writer_lock_held(a):
        assert_warm_equals_cold(fleet, store)
        assert Store(store).manifest().runs[str(a)]["writer_active"] is True
        assert "writer_active" in ra.runs_df(str(fleet), store_dir=store).filter(
            pl.col("run_dir") == str(a))["warnings"].to_list()[0]
    assert_warm_equals_cold(fleet, store)
    assert Store(store).manifest().runs[str(a)]["writer_active"] is False


@pytest.mark.slow
def test_a_lock_taken_without_a_write_is_seen_by_the_stat_pass(fleet: Path,
                                                                tmp_path: Path) -> None:
    """Only the held-lock bit of the fingerprint changes (the lock file is not written): the
    stat pass's lock keys (read in a thread started before the manifest) must show it."""
    store = tmp_path / "store"
    run = _runs(fleet, "completed")[0]
    (run / ".writer.lock").write_text("pid=1 token=abc\n")
    _age(run)
    ra.runs_df(str(fleet), store_dir=store)
    assert _refresh(fleet, store).reread == 0
    fd = os.open(run / ".writer.lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert _refresh(fleet, store).reread == 1
        assert Store(store).manifest().runs[str(run)]["writer_active"] is True
        assert_warm_equals_cold(fleet, store)
    finally:
        os.close(fd)
    assert _refresh(fleet, store).reread == 1  # released: seen too
    assert Store(store).manifest().runs[str(run)]["writer_active"] is False


def test_a_live_run_with_no_new_bytes_is_reread_on_every_open(fleet: Path,
                                                                tmp_path: Path) -> None:
    """A run whose writer lock is held is volatile: re-read on every open even when none of
    its files changed (its fingerprint is the same); once the lock is released and the run
    has settled (mtimes older than RACY_SECONDS), it is read once more and then no longer."""
    store = tmp_path / "store"
    run = _runs(fleet, "completed")[0]
    ra.runs_df(str(fleet), store_dir=store)

    def files() -> dict[str, tuple[int, int, int]]:
        return {p.name: (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                for p in run.iterdir() for st in [p.lstat()]}

    with _writer_lock_held(run):
        _age(run)  # the lock file was just written: only the held lock keeps the run live
        assert _refresh(fleet, store).reread == 1  # the lock taken
        before = files()
        for _ in range(2):
            assert _refresh(fleet, store).reread == 1
            e = Store(store).manifest().runs[str(run)]
            assert e["volatile"] is True and e["writer_active"] is True
        assert files() == before  # no byte written, not even a stat field changed
    assert _refresh(fleet, store).reread == 1  # released
    assert Store(store).manifest().runs[str(run)]["volatile"] is False
    assert _refresh(fleet, store).reread == 0
    assert _refresh(fleet, store).reread == 0


def test_scans_push_down_and_match_the_table(fleet: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    lf = ra.scan_events(str(fleet), store_dir=store)
    assert isinstance(lf, pl.LazyFrame)
    q = lf.filter(pl.col("event_type") == "tool.completed").select("run_dir", "sequence")
    plan = q.explain()
    assert "tool.completed" in plan and "PROJECT" in plan.upper()
    got = q.collect().sort("run_dir", "sequence")
    want = ra.events_df(str(fleet), cache=False).filter(
        pl.col("event_type") == "tool.completed").select("run_dir", "sequence").sort(
        "run_dir", "sequence")
    assert got.height > 0
    assert_frame_equal(got, want)
    for t in TABLES:
        scanned = getattr(ra, f"scan_{t}")(str(fleet), store_dir=store).collect()
        assert scanned.schema == getattr(ra, f"{t}_df")(str(fleet), cache=False).schema, t


@pytest.mark.slow
def test_superseded_rows_never_show_and_compaction_keeps_tables(fleet: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    import rivumi_analysis.store.core as core

    monkeypatch.setattr(core, "COMPACT_MIN_PARTS", 2)
    store = tmp_path / "store"
    ra.events_df(str(fleet), store_dir=store)
    runs = _runs(fleet, "completed")
    for i, run in enumerate(runs[:4]):  # four refreshes, each leaving a small delta part
        with open(run / "events.jsonl", "ab") as fh:
            fh.write(b'{"bad json %d\n' % i)
        _age(run)
        ra.events_df(str(fleet), store_dir=store)
    m = Store(store).manifest()
    assert len(m.parts) <= 3  # the small parts were merged
    assert all(m.live_runs(k) for k in m.parts)
    assert_warm_equals_cold(fleet, store)
    n = ra.scan_events(str(fleet), store_dir=store).select(pl.len()).collect().item()
    assert n == ra.events_df(str(fleet), cache=False).height


def test_damaged_part_is_detected_and_rebuilt(fleet: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    cold = ra.events_df(str(fleet), cache=False)
    ra.events_df(str(fleet), store_dir=store)
    m = Store(store).manifest()
    f = next(f for _k, f in m.files("events"))
    path = store / f["path"]
    st = path.stat()
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2: len(blob) // 2 + 64] = b"\0" * 64
    path.write_bytes(bytes(blob))
    assert_frame_equal(ra.events_df(str(fleet), store_dir=store), cold)
    # damage that keeps size and mtime (and so passes the cheap check) is caught on read
    ra.events_df(str(fleet), store_dir=store)
    m = Store(store).manifest()
    f = next(f for _k, f in m.files("events"))
    path = store / f["path"]
    st = path.stat()
    blob = bytearray(path.read_bytes())
    blob[8:4000] = os.urandom(3992)
    path.write_bytes(bytes(blob))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert Store(store).damaged_parts(Store(store).manifest(), deep=True)
    assert_frame_equal(ra.events_df(str(fleet), store_dir=store), cold)
    assert not Store(store).damaged_parts(Store(store).manifest(), deep=True)
    # a damaged manifest: the store is rebuilt
    (store / MANIFEST).write_bytes(b"garbage")
    assert_frame_equal(ra.events_df(str(fleet), store_dir=store), cold)
    assert Store(store).manifest() is not None


def test_verify_catches_damage_that_keeps_identity_and_still_decodes(fleet: Path,
                                                                      tmp_path: Path) -> None:
    """The README's trade-off: by default a part is trusted by size, mtime and inode, so a
    change that keeps them and still decodes is served; ``verify=True`` checks every
    BLAKE2b, finds it and re-reads the part's runs."""
    store = tmp_path / "store"
    ra.events_df(str(fleet), store_dir=store)
    m = Store(store).manifest()
    key, f = next(iter(m.files("events")))
    path = store / f["path"]
    st = path.stat()
    blob = path.read_bytes()
    assert blob.count(b"parquet-cpp-arrow") == 1  # the footer's created_by: free text
    path.write_bytes(blob.replace(b"parquet-cpp-arrow", b"parquet-cpp-arrox"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_ino == st.st_ino and open_store(
        str(fleet), store_dir=store).store.last_stats.reread == 0  # trusted
    pl.read_parquet(path)  # it still decodes
    opened = open_store(str(fleet), store_dir=store, verify=True)
    assert opened.store.last_stats.reread == len(m.parts[key]["runs"]) > 0
    assert not Store(store).damaged_parts(Store(store).manifest(), deep=True)
    assert_warm_equals_cold(fleet, store)


def test_unwritable_store_warns_and_loads_in_memory(fleet: Path, tmp_path: Path) -> None:
    cold = ra.events_df(str(fleet), cache=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.warns(StoreWarning, match="not writable"):
        df = ra.events_df(str(fleet), store_dir=blocker / "store")
    assert_frame_equal(df, cold)
    # a read-only directory (as an unprivileged user: root may write anywhere)
    import subprocess
    import sys
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="rivumi-ro-"))
    try:
        shutil.copytree(fleet, top / "fleet", symlinks=True)
        (top / "ro").mkdir()
        for dirpath, _dirs, _files in os.walk(top):
            os.chmod(dirpath, 0o755)
        os.chmod(top / "ro", 0o555)
        code = (
            "import os, warnings, rivumi_analysis as ra\n"
            # import everything first: the interpreter may live where nobody cannot read
            f"ra.events_df({str(fleet)!r}, store_dir={str(tmp_path / 'warm')!r})\n"
            "if os.geteuid() == 0: os.setgid(65534); os.setuid(65534)\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            f"    df = ra.events_df({str(top / 'fleet')!r}, store_dir={str(top / 'ro' / 's')!r})\n"
            "print(df.height, [str(x.message) for x in w])\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120, cwd=str(ROOT))
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"{cold.height} ") and "not writable" in out.stdout
        assert not (top / "ro" / "s").exists()
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_store_never_inside_the_sources(fleet: Path) -> None:
    with pytest.raises(StoreError, match="inside"):
        open_store(str(fleet), store_dir=fleet / "completed" / "store")
    with pytest.warns(StoreWarning):
        df = ra.runs_df(str(fleet), store_dir=fleet / "store")
    assert df.height == ra.runs_df(str(fleet), cache=False).height
    assert not (fleet / "store").exists()


def test_strict_and_cache_off(fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                              ) -> None:
    store = tmp_path / "store"
    with pytest.raises(ra.errors.QuarantineError) as warm:
        ra.events_df(str(fleet), strict=True, store_dir=store)
    with pytest.raises(ra.errors.QuarantineError) as cold:
        ra.events_df(str(fleet), strict=True, cache=False)
    assert_frame_equal(warm.value.quarantine, cold.value.quarantine)
    monkeypatch.setenv("RIVUMI_ANALYSIS_STORE", "0")
    other = tmp_path / "other"
    ra.events_df(str(fleet), store_dir=other)
    assert not other.exists()
    with pytest.raises(ra.errors.SourceError):
        ra.events_df(str(tmp_path / "missing"), cache=True, store_dir=other)


def test_toolkit_change_rebuilds_without_reusing_file_names(fleet: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    import rivumi_analysis.store.core as core

    store = tmp_path / "store"
    ra.events_df(str(fleet), store_dir=store)
    old_files = {p: p.read_bytes() for p in store.rglob("*.parquet")}
    monkeypatch.setattr(core, "code_fingerprint", lambda _version: "another toolkit")
    assert Store(store).manifest() is None  # written by another toolkit: not trusted
    assert_frame_equal(ra.events_df(str(fleet), store_dir=store),
                       ra.events_df(str(fleet), cache=False))
    m = Store(store).manifest()
    assert m is not None and m.generation == 2
    # a reader of the old manifest can still read the files it names
    assert all(p.read_bytes() == b for p, b in old_files.items())


def test_compact_leaves_exactly_the_live_rows_for_duckdb(fleet: Path, tmp_path: Path) -> None:
    import duckdb

    from rivumi_analysis.cli import main

    store = tmp_path / "store"
    ra.events_df(str(fleet), store_dir=store)
    run = _runs(fleet, "completed")[0]
    with open(run / "events.jsonl", "ab") as fh:
        fh.write(b'{"x": 1}\n')
    _age(run)
    ra.events_df(str(fleet), store_dir=store)
    files = f"read_parquet('{store}/events/*/*.parquet', hive_partitioning=true)"
    cold = ra.events_df(str(fleet), cache=False)
    n = duckdb.connect().execute(f"SELECT count(*) FROM {files}").fetchone()[0]
    assert n > cold.height  # the re-read run's old rows are still in the base part
    assert main(["store", str(fleet), "--store", str(store), "--compact"]) == 0
    Store(store)._gc(Store(store).manifest(), grace=0)
    n = duckdb.connect().execute(f"SELECT count(*) FROM {files}").fetchone()[0]
    assert n == cold.height
    assert_frame_equal(ra.events_df(str(fleet), store_dir=store), cold)


def test_parallel_first_build_equals_cold(fleet: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import rivumi_analysis.store.core as core
    from rivumi_analysis.read.discovery import discover
    from rivumi_analysis.store.read import ordered, read_parts

    monkeypatch.setattr(core, "PART_RUNS", 3)  # several parts, written in this process
    st = Store(tmp_path / "store")
    m = st.refresh(discover(str(fleet)).runs, sources=[str(fleet)], jobs=2)
    assert len(m.parts) >= 2 and st.last_stats.parts_written == len(m.parts)
    for t in TABLES:
        assert_frame_equal(ordered(read_parts(st, m, t), t, m),
                           getattr(ra, f"{t}_df")(str(fleet), cache=False)), t


def test_injected_executor_runs_every_chunk_and_gives_the_same_tables(
        fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook for the distributed engine: chunks run by a caller's executor (here in
    reverse order, as a cluster may return them) give the tables of a cold load."""
    from rivumi_analysis.store import ChunkResult, ChunkTask, run_chunk

    monkeypatch.setattr("rivumi_analysis.store.core.MIN_CHUNK_RUNS", 2)
    seen: list[ChunkTask] = []

    def executor(tasks: list[ChunkTask]) -> list[ChunkResult]:
        seen.extend(tasks)
        return [run_chunk(t) for t in reversed(tasks)]

    store = tmp_path / "store"
    opened = open_store(str(fleet), store_dir=store, executor=executor, jobs=2)
    assert len(seen) >= 2 and opened.store.last_stats.parts_written == len(seen)
    assert sorted(r for t in seen for r in (loc.run_dir for loc in t.locations)) == sorted(
        opened.manifest.order)
    assert_warm_equals_cold(fleet, store)


def test_failing_or_incomplete_executor_keeps_the_previous_version(
        fleet: Path, tmp_path: Path) -> None:
    from rivumi_analysis.store import run_chunk

    store = tmp_path / "store"
    before = open_store(str(fleet), store_dir=store).manifest
    a = _runs(fleet, "completed")[0]
    with open(a / "events.jsonl", "ab") as fh:
        fh.write(b"\n")

    def boom(tasks: list) -> list:
        raise RuntimeError("worker lost")

    with pytest.raises(RuntimeError, match="worker lost"):
        open_store(str(fleet), store_dir=store, executor=boom)
    assert Store(store).manifest().generation == before.generation

    with pytest.raises(StoreError, match="no result"):
        open_store(str(fleet), store_dir=store, executor=lambda tasks: [])
    with pytest.raises(StoreError, match="unexpected result"):
        open_store(str(fleet), store_dir=store,
                   executor=lambda tasks: [run_chunk(t) for t in tasks] * 2)
    assert Store(store).manifest().generation == before.generation
    assert_warm_equals_cold(fleet, store)


def test_messages_and_search_are_served_from_the_store(fleet: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    cold = ra.messages_df(str(fleet), cache=False)
    assert cold.height > 0
    assert_frame_equal(ra.messages_df(str(fleet), store_dir=store), cold)
    assert ra.scan_messages(str(fleet), store_dir=store).select(pl.len()).collect().item() == (
        cold.height)
    for pattern, kw in (("tool", {}), ("ERROR|unknown", {"ignore_case": True})):
        want = ra.search(str(fleet), pattern, cache=False, **kw)
        assert want.height > 0
        assert_frame_equal(ra.search(str(fleet), pattern, store_dir=store, **kw), want)
    # served from Parquet: a changed run shows in the next search, the others are not re-read
    a = _runs(fleet, "completed")[0]
    append_event(a, "zebra-marker")
    hits = ra.search(str(fleet), "zebra-marker", store_dir=store)
    assert hits.height == 1 and hits["run_dir"].to_list() == [str(a)]
    assert_frame_equal(hits, ra.search(str(fleet), "zebra-marker", cache=False))


def test_fingerprint_stats_every_file_the_reader_opens(fleet: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The store stats only CONTENT_FILES (and subfolders); the reader must open no other."""
    from rivumi_analysis.read import snapshot
    from rivumi_analysis.read.discovery import discover
    from rivumi_analysis.store.core import CONTENT_FILES

    opened: set[str] = set()
    read_file, *rest = snapshot._LOCAL_IO

    def spy(path: str, *args: object, **kw: object) -> object:
        opened.add(os.path.basename(path))
        return read_file(path, *args, **kw)

    monkeypatch.setattr(snapshot, "_LOCAL_IO", (spy, *rest))
    for loc in discover(str(fleet)).runs:
        snapshot.read_run(loc.run_dir, is_subagent=loc.is_subagent)
    assert "events.jsonl" in opened and opened <= CONTENT_FILES
    monkeypatch.undo()
    # an entry the reader never opens changes: nothing is re-read, tables stay equal
    store = tmp_path / "store"
    open_store(str(fleet), store_dir=store)
    a = next(r for r in _runs(fleet, "completed") if (r / "test.log").is_file())
    (a / "test.log").write_text("rewritten\n")
    opened_store = open_store(str(fleet), store_dir=store)
    assert opened_store.store.last_stats.reread == 0
    assert_warm_equals_cold(fleet, store)


# --- a log that only grew: decoded from its first incomplete line ---------------------------
# (a prefix is kept only of a live run's log read exactly, e.g. with a torn tail: a clean log
# is read whole again, which costs less than the exact path from a prefix)

@pytest.fixture
def small_fleet(tmp_path: Path) -> Path:
    src = tmp_path / "small"
    for group in ("completed", "crashes"):
        shutil.copytree(SAMPLES / group, src / group, symlinks=True)
    _age(src)
    return src


def _refresh(src: Path, store: Path) -> object:
    return open_store(str(src), store_dir=store).store.last_stats


@contextlib.contextmanager
def _live(src: Path, store: Path, run: Path, *, prefix: bool = True) -> Iterator[None]:
    """``run`` is being written (a process holds its writer lock): it is re-read on every
    open, and its decoded prefix is kept when its log is not clean (``prefix``)."""
    with _writer_lock_held(run):
        _refresh(src, store)
        assert Store(store).manifest().runs[str(run)]["prefix"] is prefix
        yield


@contextlib.contextmanager
def _writer_lock_held(run: Path) -> Iterator[None]:
    """This process holds ``run``'s writer lock (as the runner does while it writes)."""
    lock = run / ".writer.lock"
    lock.write_text("pid=1 token=abc\n")
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _torn(run: Path) -> bytes:
    """Append an event and cut it in the middle (a torn tail); return the whole line."""
    data = (run / "events.jsonl").read_bytes()
    line = append_event(run, "torn")
    with open(run / "events.jsonl", "r+b") as fh:
        fh.truncate(len(data) + len(line) // 2)
    return line


@pytest.mark.slow
def test_grown_log_is_decoded_from_its_first_incomplete_line(small_fleet: Path,
                                                             tmp_path: Path) -> None:
    store = tmp_path / "store"
    a, b, c = _runs(small_fleet, "completed")[:3]
    line = _torn(a)
    _refresh(small_fleet, store)
    with _live(small_fleet, store, a):
        with open(a / "events.jsonl", "ab") as fh:  # the torn line completed, one event
            fh.write(line[len(line) // 2:])
        append_event(a, "one")
        s = _refresh(small_fleet, store)
        assert (s.reread, s.incremental) == (1, 1)
        assert_warm_equals_cold(small_fleet, store)
        for i in range(150):  # many events at once
            append_event(a, f"many-{i}")
        assert _refresh(small_fleet, store).incremental == 1
        assert_warm_equals_cold(small_fleet, store)
    # ``a`` settled (its last append older than the racy window), so that the next open
    # re-reads it once for its released lock and the one after that not at all: without
    # this the count below depended on the machine taking more than RACY_SECONDS since
    # the appends (it failed on a quiet machine, passed on a loaded one)
    _age(a)
    # a live run whose log is clean keeps no prefix: it is read whole as it grows
    with _live(small_fleet, store, c, prefix=False):
        append_event(c, "clean")
        s = _refresh(small_fleet, store)
        assert (s.reread, s.incremental) == (1, 0)
        assert Store(store).manifest().runs[str(c)]["prefix"] is False
        assert_warm_equals_cold(small_fleet, store)
    _refresh(small_fleet, store)  # the locks released: ``a`` and ``c`` read once more
    # a settled run keeps no prefix: when it grows it is read whole, same tables
    assert Store(store).manifest().runs[str(b)]["prefix"] is False
    append_event(b, "settled")
    assert _refresh(small_fleet, store).incremental == 0
    assert_warm_equals_cold(small_fleet, store)


@pytest.mark.slow
def test_append_completing_a_torn_tail_and_one_that_stays_torn(small_fleet: Path,
                                                               tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = _runs(small_fleet, "completed")[0]
    line = _torn(a)
    _refresh(small_fleet, store)
    q = ra.quarantine_df
    with _live(small_fleet, store, a):
        # more bytes of the torn line, still no newline: the torn line is decoded again
        with open(a / "events.jsonl", "ab") as fh:
            fh.write(line[len(line) // 2:-8])
        s = _refresh(small_fleet, store)
        assert (s.reread, s.incremental) == (1, 1)
        assert_warm_equals_cold(small_fleet, store)
        assert q(str(small_fleet), store_dir=store).filter(pl.col("run_dir") == str(a)).height
        # the rest of the line and its newline, then one more event
        with open(a / "events.jsonl", "ab") as fh:
            fh.write(line[-8:])
        append_event(a, "after")
        s = _refresh(small_fleet, store)
        assert (s.reread, s.incremental) == (1, 1)
        assert_warm_equals_cold(small_fleet, store)
        assert not q(str(small_fleet), store_dir=store).filter(
            pl.col("run_dir") == str(a)).height
    assert_warm_equals_cold(small_fleet, store)


@pytest.mark.slow
def test_prefix_that_no_longer_matches_falls_back_to_a_full_read(small_fleet: Path,
                                                                 tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = _runs(small_fleet, "completed")[0]
    _torn(a)
    _refresh(small_fleet, store)
    with _live(small_fleet, store, a):
        # a byte inside the decoded prefix rewritten (same size), then an append
        data = (a / "events.jsonl").read_bytes()
        (a / "events.jsonl").write_bytes(data.replace(b'"sequence":1,', b'"sequence":5,', 1))
        append_event(a, "x")
        s = _refresh(small_fleet, store)
        assert (s.reread, s.incremental) == (1, 0)
        assert_warm_equals_cold(small_fleet, store)
        # truncated below the prefix
        with open(a / "events.jsonl", "r+b") as fh:
            fh.truncate(len(data) // 2)
        assert _refresh(small_fleet, store).incremental == 0
        assert_warm_equals_cold(small_fleet, store)
        # the prefix file damaged (size and mtime kept): a miss, never an error
        m = Store(store).manifest()
        f = next(f for f in m.parts[m.runs[str(a)]["part"]]["files"]
                 if f["table"] == "_prefix")
        path = store / f["path"]
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        st = path.stat()
        path.write_bytes(bytes(raw))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        append_event(a, "y")
        s = _refresh(small_fleet, store)
        assert s.reread >= 1 and s.incremental == 0
        assert_warm_equals_cold(small_fleet, store)


def test_readme_duckdb_query_runs_as_written(fleet: Path, tmp_path: Path) -> None:
    """The README's DuckDB example, run as written after ``store --compact``, gives what
    the polars tables give."""
    import re

    import duckdb

    text = (ROOT / "README.md").read_text()
    sql = re.search(r"```sql\n(.*?)```", text[text.index("## The store"):], re.S).group(1)
    store = tmp_path / "store"
    open_store(str(fleet), store_dir=store, compact=True)
    got = duckdb.connect().execute(sql.replace("STORE", str(store))).fetchall()
    tc = ra.tool_calls_df(str(fleet), cache=False)
    runs = ra.runs_df(str(fleet), cache=False)
    want = (tc.join(runs.select("run_dir", "verdict"), on="run_dir").group_by("verdict")
            .len().sort(["len", "verdict"], descending=[True, False]))
    assert sorted(got) == sorted(want.rows()) and len(got) > 1


def test_scan_without_refresh_serves_the_store_as_it_is(fleet: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    n = ra.scan_events(str(fleet), store_dir=store).select(pl.len()).collect().item()
    a = _runs(fleet, "completed")[0]
    append_event(a, "not-yet")
    stale = ra.scan_events(str(fleet), store_dir=store, refresh=False)
    assert stale.select(pl.len()).collect().item() == n  # no stat pass: as it was
    assert ra.scan_events(str(fleet), store_dir=store).select(pl.len()).collect().item() == n + 1
    # a store for other sources, or none yet, is refreshed anyway
    other = tmp_path / "other"
    assert ra.scan_runs(str(fleet), store_dir=other, refresh=False).collect().height == len(
        Store(store).manifest().order)


def test_fingerprint_sees_every_change_to_a_read_file(tmp_path: Path) -> None:
    """The stat pass's key: equal for an untouched folder (with or without discovery's
    listing), different after each change the rows depend on, and a file listed but gone
    by the time it is stat-ed gives a key equal to no intact folder's."""
    from rivumi_analysis.store.core import run_fingerprint

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "example" / "a66038f97f204cb3aaa96339f195c37e",
                    run)
    _age(run)
    d = str(run)

    def fp(names: list[str] | None = None) -> bytes:
        got = run_fingerprint(d, frozenset(), names)
        assert got is not None
        return got.blob

    names = sorted(os.listdir(run))
    first = fp()
    assert fp(names) == first
    seen = {first}
    (run / "notes.txt").write_text("x")  # a name the toolkit does not read: the name counts
    seen.add(fp())
    os.utime(run / "result.json", (OLD + 1, OLD + 1))  # mtime only
    seen.add(fp())
    data = (run / "result.json").read_bytes()
    (run / "result.json").write_bytes(data.replace(b"{", b" ", 1))  # same size, in place
    os.utime(run / "result.json", (OLD + 1, OLD + 1))  # mtime restored: ctime shows it
    seen.add(fp())
    (run / "result.json").unlink()
    (run / "result.json").symlink_to(run / "session.json")  # replaced by a symlink
    seen.add(fp())
    assert len(seen) == 5
    listed = sorted(os.listdir(run))
    (run / "session.json").unlink()  # listed, then gone before its lstat
    vanished = fp(listed)
    assert vanished not in seen and vanished != fp()


def test_open_pauses_the_collector_and_restores_it(small_fleet: Path, tmp_path: Path) -> None:
    """The stat pass and the refresh run with the cyclic collector paused (their objects
    hold no cycle; its full passes cost up to 0.1 CPU-s per open of 10,000 runs), and it is
    left as it was found: on, also after a refresh that fails; off when it was off."""
    import gc

    store = tmp_path / "store"
    seen: list[bool] = []
    open_store(str(small_fleet), store_dir=store, hook=lambda _point: seen.append(gc.isenabled()))
    assert seen and not any(seen)
    assert gc.isenabled()

    def boom(point: str) -> None:
        raise RuntimeError(point)

    append_event(_runs(small_fleet, "completed")[0], "gc")
    with pytest.raises(RuntimeError, match="lock_taken"):
        open_store(str(small_fleet), store_dir=store, hook=boom)
    assert gc.isenabled()
    gc.disable()
    try:
        open_store(str(small_fleet), store_dir=store)
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert_warm_equals_cold(small_fleet, store)


def test_manifest_records_every_table_schema_exactly(fleet: Path, tmp_path: Path) -> None:
    """The manifest's schemas (polars IPC of each empty table) equal the pandera models' own
    (``build.empty_tables``), so a warm read that takes them gives the exact dtypes; a
    manifest without them (written before they were recorded) falls back to the models."""
    import dataclasses

    from rivumi_analysis.store.build import empty_tables
    from rivumi_analysis.store.read import table_schema

    m = open_store(str(fleet), store_dir=tmp_path / "store").manifest
    models = {t: dict(df.schema) for t, df in empty_tables().items()}
    assert set(m.schemas) == set(TABLES) == set(models)
    for t in TABLES:
        assert table_schema(t, m) == models[t], t
        assert list(table_schema(t, m)) == list(models[t]), t  # column order too
    old = dataclasses.replace(m, schemas=None)
    assert all(table_schema(t, old) == models[t] for t in TABLES)


def test_a_warm_load_in_a_fresh_process_imports_no_pandera(fleet: Path, tmp_path: Path) -> None:
    """A notebook's first warm load after a kernel restart: the store serves the table
    without importing pandera (nor pandas), and it equals a cold load."""
    import subprocess
    import sys

    store = tmp_path / "store"
    open_store(str(fleet), store_dir=store)
    out = tmp_path / "events.arrow"
    code = ("import sys; import rivumi_analysis as ra; "
            f"df = ra.events_df({str(fleet)!r}, store_dir={str(store)!r}); "
            f"df.write_ipc({str(out)!r}); "
            "print('pandera' in sys.modules, 'pandas' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=str(ROOT))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "False"], p.stdout
    assert_frame_equal(pl.read_ipc(out), ra.events_df(str(fleet), cache=False))


def test_a_spawned_worker_builds_a_chunk_without_pandera_or_pandas(fleet: Path, tmp_path: Path) -> None:
    """A store worker is a fresh (spawned) process: building a chunk of every kind of run
    (clean, forks, crashes, damaged, external: every table has rows) validates each table by
    its check plan (``rivumi_analysis.checks``) and never imports pandera nor pandas
    (~0.2 and ~0.14 CPU-s per worker); every table's rows are the exact oracle's count."""
    import json
    import subprocess
    import sys

    out = tmp_path / "chunk"
    code = (
        "import sys, json; from rivumi_analysis.read.discovery import discover; "
        "from rivumi_analysis.store.core import ChunkTask, run_chunk; "
        f"locs = tuple(discover({str(fleet)!r}).runs); "
        f"res = run_chunk(ChunkTask({str(out)!r}, 'g0000001-0000', locs, {{}}, {{}})); "
        "mods = ['pandera' in sys.modules, 'pandas' in sys.modules]; "
        "print(json.dumps([mods, len(res.part['runs']), "
        "sorted({f['table'] for f in res.part['files']} - {'_prefix', '_audit'})]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=str(ROOT))
    assert p.returncode == 0, p.stderr
    imported, n_runs, tables = json.loads(p.stdout.strip().splitlines()[-1])
    assert imported == [False, False]  # neither pandera nor pandas (pyarrow's pa.array of a
    # Python list imports pandas: the replay engine and the derived tables avoid it)
    from rivumi_analysis.read.discovery import discover
    from rivumi_analysis.store.build import TABLES, build_frames, read_runs

    assert n_runs == len(discover(str(fleet)).runs)
    assert tables == sorted(TABLES)  # every table had rows, so every table was validated
    want = build_frames(read_runs(discover(str(fleet)).runs))
    for t in TABLES:
        got = pl.read_parquet(str(out / t), hive_partitioning=True)
        assert got.height == want[t].height, t


@pytest.mark.slow
def test_a_large_first_build_starts_its_workers_before_the_stat_pass(
        fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first build big enough for worker processes starts them before the stat pass (their
    start-up overlaps it) and runs every chunk on them: the tables equal a cold load; a
    refresh of a built store starts none early."""
    import rivumi_analysis.store.core as core

    monkeypatch.setattr("rivumi_analysis.read.executor.POOL_MIN_RUNS", 4)
    started: list[object] = []
    real = core._early_pool

    @contextlib.contextmanager
    def spy(n_jobs: int, wanted: bool, **kw: bool) -> Iterator[object]:
        with real(n_jobs, wanted, **kw) as pool:
            started.append(pool)
            yield pool

    monkeypatch.setattr(core, "_early_pool", spy)
    ran: list[int] = []
    store = tmp_path / "store"
    executor = functools.partial(core.local_executor, progress=ran.append)
    opened = open_store(str(fleet), store_dir=store, executor=executor, jobs=2)
    assert len(started) == 1 and started[0] is not None
    assert opened.store.last_stats.parts_written >= 2
    assert sum(ran) == len(opened.manifest.order)  # every chunk ran, on the workers
    assert_warm_equals_cold(fleet, store)
    open_store(str(fleet), store_dir=store, jobs=2)  # built: nothing re-read, no workers
    assert len(started) > 1 and all(p is None for p in started[1:])


@pytest.mark.slow
def test_store_workers_keep_the_pages_polars_frees() -> None:
    """A local worker is set up before it imports anything: polars' jemalloc keeps the pages
    a chunk frees for the next one (``read.executor.WORKER_ENV``); the caller's environment
    is untouched; importing the module a worker unpickles a store chunk from loads no polars
    (else the setting would come too late)."""
    import os
    import subprocess
    import sys

    import rivumi_analysis.read.executor as X
    import rivumi_analysis.store.core as core

    want = X.WORKER_ENV["_RJEM_MALLOC_CONF"]
    before = os.environ.get("_RJEM_MALLOC_CONF")
    with core._early_pool(2, True) as pool:
        assert pool is not None
        got = set(pool.map(_malloc_conf, range(4)))
    # (polars' own __init__, which this test module's import runs in the worker, puts its
    # decay settings first: the last setting wins)
    assert got and all(g is not None and g.endswith(want) for g in got), got
    assert os.environ.get("_RJEM_MALLOC_CONF") == before
    p = subprocess.run([sys.executable, "-c", "import sys, rivumi_analysis.store.core; "
                        "print(sorted({'polars', 'pyarrow'} & set(sys.modules)))"],
                       capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert p.returncode == 0 and p.stdout.strip() == "[]", (p.stdout, p.stderr)


def _malloc_conf(_chunk: object) -> str | None:
    import os

    return os.getenv("_RJEM_MALLOC_CONF")
