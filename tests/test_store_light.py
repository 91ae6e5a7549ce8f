"""The light freshness check: a load of only ``events``/``quarantine`` checks the files those
rows depend on (``store.core.light_fingerprint``) instead of the full stat pass, and falls
back to the full refresh on any doubt (issue 12)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal

import rivumi_analysis as ra
import rivumi_analysis.store.core as core
from rivumi_analysis.store.core import Store, light_fingerprint, open_store, run_fingerprint
from tests.test_store import SAMPLES, _age, _runs, _writer_lock_held, append_event
from tests.test_store_read import _settle

LIGHT = ("events", "quarantine")


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    src = tmp_path / "fleet"
    for group in ("completed", "crashes", "bad_input"):
        shutil.copytree(SAMPLES / group, src / group, symlinks=True)
    _age(src)
    _settle(monkeypatch)  # a change made by the test settles at once (no volatile entry)
    return src


@pytest.fixture
def refreshes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each full refresh (``Store.refresh``) records its ``RefreshStats`` here."""
    seen: list[Any] = []
    real = Store.refresh

    def spy(self: Store, *args: Any, **kwargs: Any) -> Any:
        out = real(self, *args, **kwargs)
        seen.append(self.last_stats)
        return out

    monkeypatch.setattr(Store, "refresh", spy)
    return seen


def _load(t: str, src: Path, store: Path, refreshes: list[Any]) -> bool:
    """Warm ``t`` equals cold; returns whether the full refresh ran for it."""
    before = len(refreshes)
    load = getattr(ra, f"{t}_df")
    assert_frame_equal(load(str(src), store_dir=store), load(str(src), cache=False))
    return len(refreshes) > before


def _light_served(src: Path, store: Path, refreshes: list[Any]) -> None:
    """Both light tables are served without a refresh and without a manifest write."""
    ident = Store(store)._manifest_identity()
    for t in LIGHT:
        assert not _load(t, src, store, refreshes), t
    assert Store(store)._manifest_identity() == ident


def _settled(src: Path, store: Path, refreshes: list[Any]) -> None:
    open_store(str(src), store_dir=store)
    _light_served(src, store, refreshes)


def _rewrite_json(path: Path, **changes: Any) -> None:
    doc = json.loads(path.read_bytes())
    doc.update(changes)
    path.write_text(json.dumps(doc))


@pytest.mark.slow
def test_every_change_to_a_light_file_is_seen(fleet: Path, tmp_path: Path,
                                              refreshes: list[Any]) -> None:
    store = tmp_path / "store"
    assert _load("events", fleet, store, refreshes)  # the first build
    _settled(fleet, store, refreshes)
    a, b, c, d, e = _runs(fleet, "completed")[:5]

    def truncate() -> None:
        with open(e / "events.jsonl", "r+b") as fh:
            fh.truncate(os.path.getsize(e / "events.jsonl") // 3)  # (a torn tail too)

    changes = {
        "append to events.jsonl": lambda: append_event(a),
        "rewrite session.json": lambda: _rewrite_json(b / "session.json", run_id="renamed"),
        "remove checkpoint.json": lambda: (c / "checkpoint.json").unlink(),
        "add checkpoint.json": lambda: (c / "checkpoint.json").write_text(
            json.dumps({"backend_name": "x", "resumable": False})),  # (makes it external)
        "create backend-result.json": lambda: (d / "backend-result.json").write_text("{}"),
        "truncate events.jsonl": truncate,
    }
    for what, change in changes.items():
        cold = ra.events_df(str(fleet), cache=False)
        change()
        _settle_now()
        for i, t in enumerate(LIGHT):
            assert _load(t, fleet, store, refreshes) is (i == 0), (what, t)
        if what != "remove checkpoint.json":  # (a native run's kind does not read it)
            assert not ra.events_df(str(fleet), cache=False).equals(cold), what
        _light_served(fleet, store, refreshes)


def _settle_now() -> None:
    import time

    time.sleep(0.06)  # (RACY_SECONDS is 0.05 here)


def test_a_change_only_to_files_no_light_table_reads(fleet: Path, tmp_path: Path,
                                                      refreshes: list[Any]) -> None:
    """``request.json``/``result.json`` do not feed the light tables: their loads take the
    light path (rows still equal a cold load); the next full load re-reads the run."""
    store = tmp_path / "store"
    ra.runs_df(str(fleet), store_dir=store)
    _settled(fleet, store, refreshes)
    run = _runs(fleet, "completed")[0]
    req = json.loads((run / "request.json").read_bytes())
    for change, full in (
            (lambda: _rewrite_json(run / "request.json",
                                   limits={**req["limits"], "max_steps": 3}), "states"),
            (lambda: (run / "result.json").unlink(), "runs")):
        cold = ra.runs_df(str(fleet), cache=False)
        change()
        _settle_now()
        assert not ra.runs_df(str(fleet), cache=False).equals(cold)
        _light_served(fleet, store, refreshes)
        assert _load(full, fleet, store, refreshes)
        assert refreshes[-1].reread == 1
        assert Store(store).manifest().runs[str(run)]["fp"] == run_fingerprint(
            str(run), frozenset()).blob
        assert _load("runs" if full == "states" else "states", fleet, store, refreshes)
        assert refreshes[-1].reread == 0
        _light_served(fleet, store, refreshes)
    # scan_* and open_store keep the full pass
    _rewrite_json(run / "request.json", limits=req["limits"])
    before = len(refreshes)
    ra.scan_events(str(fleet), store_dir=store).collect()
    assert len(refreshes) == before + 1 and refreshes[-1].reread == 1


@pytest.mark.slow
def test_a_held_writer_lock_takes_the_full_path(fleet: Path, tmp_path: Path,
                                                refreshes: list[Any]) -> None:
    """A run read while its writer lock was held (``writer_active``) is re-read on every
    open, light tables included; a lock taken since the last read changes no light row and
    is left for the next full refresh."""
    store = tmp_path / "store"
    run = _runs(fleet, "completed")[0]
    (run / ".writer.lock").write_text("pid=1 token=abc\n")
    _settle_now()
    _settled(fleet, store, refreshes)
    fd = os.open(run / ".writer.lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # taken without a write: no light file changed
        _light_served(fleet, store, refreshes)
        assert _load("runs", fleet, store, refreshes)  # the full pass sees it
        assert refreshes[-1].reread == 1
        assert Store(store).manifest().runs[str(run)]["writer_active"] is True
        for t in (*LIGHT, "events"):  # re-read while held (the entry is writer_active)
            assert _load(t, fleet, store, refreshes)
            assert refreshes[-1].reread == 1
    finally:
        os.close(fd)
    assert _load("events", fleet, store, refreshes)  # released: read once more
    assert refreshes[-1].reread == 1
    _light_served(fleet, store, refreshes)
    with _writer_lock_held(_runs(fleet, "crashes")[0]):  # a lock file written and held
        append_event(_runs(fleet, "crashes")[0])
        _settle_now()
        assert _load("quarantine", fleet, store, refreshes)
        assert _load("events", fleet, store, refreshes)  # (writer_active now)


@pytest.mark.slow
def test_added_or_removed_runs_and_a_damaged_part_take_the_full_path(
        fleet: Path, tmp_path: Path, refreshes: list[Any]) -> None:
    store = tmp_path / "store"
    _settled(fleet, store, refreshes)
    run = _runs(fleet, "completed")[0]
    shutil.copytree(run, fleet / "completed" / "zz-new")
    _settle_now()
    assert _load("events", fleet, store, refreshes)
    shutil.rmtree(fleet / "completed" / "zz-new")
    _settle_now()
    assert _load("events", fleet, store, refreshes)
    last = fleet / "zz" / run.name  # a run added after every other (the order kept)
    shutil.copytree(run, last)
    _settle_now()
    assert _load("quarantine", fleet, store, refreshes)
    assert Store(store).manifest().order[-1] == str(last)
    _light_served(fleet, store, refreshes)
    shutil.rmtree(last)  # and removed again
    _settle_now()
    assert _load("events", fleet, store, refreshes)
    _light_served(fleet, store, refreshes)
    m = Store(store).manifest()
    part = next(f for _k, f in m.files("events"))
    os.utime(Store(store).path(part["path"]), ns=(1, 1))  # damaged (its mtime changed)
    assert _load("events", fleet, store, refreshes)
    _light_served(fleet, store, refreshes)


def test_an_entry_without_a_light_fingerprint_takes_the_full_path(
        fleet: Path, tmp_path: Path, refreshes: list[Any]) -> None:
    store = tmp_path / "store"
    _settled(fleet, store, refreshes)
    st = Store(store)
    m = st.manifest()
    first = m.order[0]
    m.runs[first] = {k: v for k, v in m.runs[first].items() if k != "lfp"}
    st._write_manifest(m)
    assert _load("events", fleet, store, refreshes)
    assert refreshes[-1].reread == 0  # (its fp is current: the full pass keeps the entry)
    assert _load("events", fleet, store, refreshes)  # and it still has no lfp


def _layouts(tmp_path: Path) -> Iterator[tuple[str, list[str] | None]]:
    """Run folders of several shapes, each with ``None`` and with an explicit listing."""
    ext = next(p for p in (SAMPLES / "external").iterdir() if p.is_dir())
    native = _runs(SAMPLES, "completed")[0]
    for name, src in (("ext", ext), ("native", native)):
        d = tmp_path / name
        shutil.copytree(src, d, symlinks=True)
        yield str(d), None
    bare = tmp_path / "bare"  # no light file at all
    bare.mkdir()
    (bare / "request.json").write_text("{}")
    yield str(bare), None
    odd = tmp_path / "odd"
    shutil.copytree(native, odd)
    (odd / "checkpoint.json").unlink()
    (odd / "session.json").unlink()
    os.symlink(native / "session.json", odd / "session.json")  # a symlink: its own lstat
    (odd / "events.jsonl").unlink()
    (odd / "events.jsonl").mkdir()  # not a regular file
    (odd / os.fsdecode(b"x\xff")).write_text("")  # a name that is not UTF-8
    yield str(odd), None
    yield str(odd), sorted([*os.listdir(odd), "checkpoint.json", ".writer.lock"])  # gone


def test_light_blob_is_the_light_part_of_the_full_fingerprint(tmp_path: Path) -> None:
    seen = set()
    for d, names in _layouts(tmp_path):
        full = run_fingerprint(d, frozenset(), names)
        assert full is not None and full.light == light_fingerprint(d, names), (d, names)
        seen.add(full.light)
    assert len(seen) == 5  # every layout differs (a listed file gone is not an absent one)
    assert light_fingerprint(str(tmp_path / "missing")) is None


def test_a_volatile_entry_takes_the_full_path(fleet: Path, tmp_path: Path,
                                              refreshes: list[Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A run read while it may still have been changing (modified within RACY_SECONDS) is
    re-read on every open until it settles, light tables included."""
    store = tmp_path / "store"
    _settled(fleet, store, refreshes)
    run = _runs(fleet, "completed")[0]
    monkeypatch.setattr(core, "RACY_SECONDS", 3600.0)
    append_event(run)
    for _ in range(2):
        assert _load("events", fleet, store, refreshes)
        assert refreshes[-1].reread == 1
        assert Store(store).manifest().runs[str(run)]["volatile"] is True
    monkeypatch.setattr(core, "RACY_SECONDS", 0.05)
    assert _load("quarantine", fleet, store, refreshes)  # settled: read once more
    _light_served(fleet, store, refreshes)
