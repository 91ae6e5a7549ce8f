"""Store housekeeping: ``store ls`` lists every store with its source, size and last use;
``store gc`` removes old or surplus stores (never a busy one, never a folder that is not a
store); a refresh keeps the default root within the size cap."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from rivumi_analysis import cli, runs_df
from rivumi_analysis.store import housekeeping as hk
from rivumi_analysis.store.core import ENV_DIR, open_store
from rivumi_analysis.store.paths import LAST_USED, LOCK, MANIFEST
from tests.test_store import _age

SAMPLES = Path(__file__).resolve().parents[1] / "sample_runs"
DAY = 86400.0


def _fleet(tmp_path: Path, name: str, n: int) -> Path:
    src = tmp_path / name
    for run in sorted(p for p in (SAMPLES / "completed").iterdir() if p.is_dir())[:n]:
        shutil.copytree(run, src / run.name)
    _age(src)
    return src


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = tmp_path / "stores"
    monkeypatch.setenv(ENV_DIR, str(r))
    monkeypatch.delenv(hk.ENV_MAX_SIZE, raising=False)
    return r


def _used(store: Path, days_ago: float) -> None:
    t = time.time() - days_ago * DAY
    os.utime(store / LAST_USED, (t, t))


def test_ls_lists_each_store_with_its_source_runs_size_and_last_use(
        tmp_path: Path, root: Path) -> None:
    a, b = _fleet(tmp_path, "a", 1), _fleet(tmp_path, "b", 3)
    sa = Path(open_store(str(a)).store.directory)
    sb = Path(open_store(str(b)).store.directory)
    _used(sa, 2)
    (root / "not-a-store").mkdir()  # no manifest: never listed, never removed
    stores = hk.list_stores()
    assert [Path(s.directory) for s in stores] == [sb, sa]  # most recently used first
    assert [(s.sources, s.runs) for s in stores] == [((str(b),), 3), ((str(a),), 1)]
    for s in stores:
        on_disk = sum(f.stat().st_size for f in Path(s.directory).rglob("*") if f.is_file())
        assert s.bytes == on_disk > 0
    assert abs(stores[1].last_used - (time.time() - 2 * DAY)) < 60
    # reading through the store (a loader) counts as a use
    runs_df(str(a))
    assert hk.list_stores()[0].directory == str(sa)


def test_gc_older_than_removes_only_stores_unused_that_long(tmp_path: Path,
                                                            root: Path) -> None:
    a, b = _fleet(tmp_path, "a", 1), _fleet(tmp_path, "b", 1)
    sa = Path(open_store(str(a)).store.directory)
    sb = Path(open_store(str(b)).store.directory)
    _used(sa, 40)
    _used(sb, 5)
    gone = hk.gc_stores(older_than=30 * DAY)
    assert [Path(s.directory) for s in gone] == [sa]
    assert not sa.exists() and (sb / MANIFEST).is_file() and (root / sb.name).is_dir()
    assert len(runs_df(str(b))) == 1  # the kept store still serves its fleet


def test_gc_max_size_removes_least_recently_used_first_and_skips_busy_stores(
        tmp_path: Path, root: Path) -> None:
    stores = [Path(open_store(str(_fleet(tmp_path, f"f{i}", 1))).store.directory)
              for i in range(3)]
    for age, s in zip((3, 2, 1), stores, strict=True):
        _used(s, age)
    sizes = {str(s.directory): s.bytes for s in hk.list_stores()}
    newest = sizes[str(stores[2])]
    # room for the newest one only: the two older go, oldest first
    gone = hk.gc_stores(max_bytes=newest, dry_run=True)
    assert [Path(s.directory) for s in gone] == stores[:2]
    assert all(s.exists() for s in stores)  # a dry run removes nothing
    fd = os.open(stores[0] / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a refresh holds the oldest: it is skipped
        gone = hk.gc_stores(max_bytes=newest)
    finally:
        os.close(fd)
    assert [Path(s.directory) for s in gone] == stores[1:]  # then the rest, least used first
    assert stores[0].exists() and not stores[1].exists() and not stores[2].exists()


def test_a_refresh_keeps_the_default_root_within_the_cap(
        tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = Path(open_store(str(_fleet(tmp_path, "a", 2))).store.directory)
    _used(first, 1)
    monkeypatch.setenv(hk.ENV_MAX_SIZE, str(hk.list_stores()[0].bytes + 1))
    second = Path(open_store(str(_fleet(tmp_path, "b", 2))).store.directory)
    assert second.is_dir() and not first.exists()  # the one just refreshed is never removed
    monkeypatch.setenv(hk.ENV_MAX_SIZE, "off")
    third = Path(open_store(str(_fleet(tmp_path, "c", 1))).store.directory)
    assert second.is_dir() and third.is_dir()


def test_store_ls_and_gc_from_the_cli(tmp_path: Path, root: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    a = _fleet(tmp_path, "a", 1)
    sa = Path(open_store(str(a)).store.directory)
    _used(sa, 10)
    assert cli.main(["store", "ls", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(d["directory"], d["sources"], d["runs"]) for d in listed] == [(str(sa), [str(a)], 1)]
    assert cli.main(["store", "gc"]) == 2  # says what to remove by
    assert "--older-than" in capsys.readouterr().err
    assert cli.main(["store", "gc", "--older-than", "1w", "--dry-run"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith(f"would remove {sa}\t") and sa.exists()
    assert cli.main(["store", "gc", "--older-than", "30d"]) == 0  # not that old
    assert sa.exists()
    assert cli.main(["store", "gc", "--older-than", "1w"]) == 0
    assert not sa.exists() and "1 store(s)" in capsys.readouterr().err
    assert cli.main(["store", "ls", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
