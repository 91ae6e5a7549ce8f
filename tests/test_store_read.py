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

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_runs"
OLD = time.time() - 3600


def _age(top: Path) -> None:
    for dirpath, dirs, files in os.walk(top):
        for n in dirs + files:
            os.utime(os.path.join(dirpath, n), (OLD, OLD), follow_symlinks=False)


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
