"""The warm audit (served from the store) and the fingerprints ``read.incremental`` keeps."""

from __future__ import annotations

import json
from pathlib import Path

from rivumi_analysis.fleet_audit import audit
from rivumi_analysis.read.discovery import discover
from rivumi_analysis.read.incremental import fingerprint, proc_locked_keys
from tests.conftest import SAMPLE_RUNS


def test_fingerprint_from_the_discovery_listing_is_the_same() -> None:
    listings: dict[str, list[str]] = {}
    found = discover(str(SAMPLE_RUNS), listings=listings)
    assert set(listings) == {loc.run_dir for loc in found.runs}  # subagents included
    held = proc_locked_keys()
    locked = 0
    for loc in found.runs:
        with_names = fingerprint(loc.run_dir, held, listings[loc.run_dir])
        assert with_names is not None and with_names == fingerprint(loc.run_dir, held)
        # the form without lock bytes (watch's): by path from the listing == by listing now
        listed = fingerprint(loc.run_dir, held, listings[loc.run_dir])
        assert listed == fingerprint(loc.run_dir, held)
        locked += ".writer.lock" in listings[loc.run_dir]
    assert locked > 10  # the lock entry's part is exercised


def test_listing_changed_after_discovery_is_a_miss_never_a_stale_hit(tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "r" / "a66038f97f204cb3aaa96339f195c37e"
    shutil.copytree(Path(__file__).parent / "fixtures" / "example" / run.name, run)
    listings: dict[str, list[str]] = {}
    discover(str(tmp_path / "r"), listings=listings)
    before = fingerprint(str(run), frozenset(), listings[str(run)])
    (run / "events.jsonl").unlink()  # gone after discovery listed it: lstat fails
    assert fingerprint(str(run), frozenset(), listings[str(run)]) != before
    assert audit(str(tmp_path / "r"), jobs=1, cache=False).runs[0]["reasons"]


def test_rewritten_writer_lock_is_a_miss(tmp_path: Path) -> None:
    """The writer token counts through the lock file's stat (a rewrite changes its ctime)."""
    import os
    import shutil

    root = tmp_path / "r"
    run = root / "a66038f97f204cb3aaa96339f195c37e"
    shutil.copytree(Path(__file__).parent / "fixtures" / "example" / run.name, run)
    lock = run / ".writer.lock"
    token = json.loads((run / "session.json").read_text())["active_writer_token"]
    lock.write_text(f"token={token}\n")
    old = 1_600_000_000
    for p in run.iterdir():
        os.utime(p, (old, old))
    cache = tmp_path / "cache"
    first = audit(str(root), jobs=1, cache_dir=cache).runs
    assert "writer_token_mismatch" not in first[0]["warnings"]
    assert audit(str(root), jobs=1, cache_dir=cache).runs == first
    st = lock.stat()
    lock.write_text("token=" + "b" * len(token) + "\n")  # same size, mtime restored
    os.utime(lock, ns=(st.st_atime_ns, st.st_mtime_ns))
    warm = audit(str(root), jobs=1, cache_dir=cache).runs
    assert warm == audit(str(root), jobs=1, cache=False).runs
    assert "writer_token_mismatch" in warm[0]["warnings"]


def _aged_copy(tmp_path: Path) -> tuple[Path, Path]:
    import os
    import shutil

    root = tmp_path / "r"
    run = root / "a66038f97f204cb3aaa96339f195c37e"
    shutil.copytree(Path(__file__).parent / "fixtures" / "example" / run.name, run)
    (run / ".writer.lock").write_text("token=x\n")
    for p in run.iterdir():
        os.utime(p, (1_600_000_000, 1_600_000_000))
    return root, run


def test_a_lock_taken_then_released_is_seen_warm(tmp_path: Path) -> None:
    """Whether a process holds ``.writer.lock`` is part of the key: taking it and releasing
    it are both misses, and a run being written is never stored."""
    import fcntl
    import os

    root, run = _aged_copy(tmp_path)
    cache = tmp_path / "cache"
    first = audit(str(root), jobs=1, cache_dir=cache).runs
    assert "writer_active" not in first[0]["warnings"]
    fd = os.open(run / ".writer.lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for _ in range(2):  # the second time from a cache the first may not have written
            held = audit(str(root), jobs=1, cache_dir=cache).runs
            assert "writer_active" in held[0]["warnings"]
            assert held == audit(str(root), jobs=1, cache=False).runs
    finally:
        os.close(fd)  # releases the flock
    assert audit(str(root), jobs=1, cache_dir=cache).runs == first


def test_a_file_replaced_by_a_symlink_is_a_miss(tmp_path: Path) -> None:
    root, run = _aged_copy(tmp_path)
    cache = tmp_path / "cache"
    first = audit(str(root), jobs=1, cache_dir=cache).runs
    (run / "session.json").rename(tmp_path / "session.json")
    (run / "session.json").symlink_to(tmp_path / "session.json")  # same name, same bytes
    warm = audit(str(root), jobs=1, cache_dir=cache).runs
    assert warm == audit(str(root), jobs=1, cache=False).runs and warm != first


def test_same_size_rewrite_with_mtime_restored_is_a_miss(tmp_path: Path) -> None:
    import os

    root, run = _aged_copy(tmp_path)
    cache = tmp_path / "cache"
    first = audit(str(root), jobs=1, cache_dir=cache).runs
    path = run / "session.json"
    st = path.stat()
    doc = json.loads(path.read_text())
    text = path.read_text()
    old_phase = json.dumps(doc["phase"])
    new_phase = json.dumps("x" * (len(doc["phase"])))  # same length, another phase
    assert old_phase in text and len(new_phase) == len(old_phase)
    path.write_text(text.replace(old_phase, new_phase, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    warm = audit(str(root), jobs=1, cache_dir=cache).runs
    assert warm == audit(str(root), jobs=1, cache=False).runs
    assert warm != first and warm[0]["phase"] == "x" * len(doc["phase"])


def test_an_entry_vanishing_after_the_listing_has_its_own_key(tmp_path: Path) -> None:
    from rivumi_analysis.read.incremental import _fingerprint_listed

    _root, run = _aged_copy(tmp_path)
    names = sorted(p.name for p in run.iterdir())
    whole = _fingerprint_listed(str(run), frozenset(), names)
    ghost = _fingerprint_listed(str(run), frozenset(), [*names, "zz-gone"])
    assert whole is not None and ghost is not None and ghost.blob != whole.blob
    assert ghost.events_identity == whole.events_identity
    assert ghost.newest_mtime_ns == whole.newest_mtime_ns


def test_cache_rows_of_other_fleets_in_the_key_range_are_not_served(tmp_path: Path) -> None:
    """The lookup scans the key range of this fleet's runs; rows of other runs inside that
    range are not records of this fleet (they are neither returned nor disturbed)."""
    import shutil

    runs = tmp_path / "runs"
    src = Path(__file__).parent / "fixtures" / "example" / "a66038f97f204cb3aaa96339f195c37e"
    for name in ("a", "c", "b"):
        shutil.copytree(src, runs / name)
    cache = tmp_path / "cache"
    audit(str(runs), jobs=1, cache_dir=cache)  # fills a, b and c
    shutil.rmtree(runs / "b")
    warm = audit(str(runs), jobs=1, cache_dir=cache).runs
    assert [r["run_dir"].rsplit("/", 1)[-1] for r in warm] == ["a", "c"]
    assert warm == audit(str(runs), jobs=1, cache=False).runs


def test_discovery_lists_subagents_as_before() -> None:
    """Discovery reads run folders by name only; the subagent tree, the listings and the
    skipped paths are what a walk with entry kinds gives (a reference walk here)."""
    import os

    listings: dict[str, list[str]] = {}
    found = discover(str(SAMPLE_RUNS), listings=listings)
    subs = [loc for loc in found.runs if loc.is_subagent]
    assert len(subs) >= 2
    for loc in subs:
        assert loc.parent_run_dir is not None
        assert loc.run_dir.startswith(os.path.join(loc.parent_run_dir, "subagents", ""))
    expected: list[str] = []
    for dirpath, dirnames, _files in os.walk(str(SAMPLE_RUNS.resolve())):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        if dirpath in listings:
            expected.append(dirpath)
            assert listings[dirpath] == sorted(os.listdir(dirpath))
    assert sorted(expected) == sorted(loc.run_dir for loc in found.runs)


def test_files_no_record_reads_count_by_name_only(tmp_path: Path) -> None:
    """Only the files a record is read from are stat-ed for the key; rewriting another file
    (``changes.patch``) is still a hit, and the hit equals a cold audit."""
    import rivumi_analysis.store.core as core

    root, run = _aged_copy(tmp_path)
    cache = tmp_path / "cache"
    first = audit(str(root), jobs=1, cache_dir=cache).runs
    (run / "changes.patch").write_text("something else entirely\n")
    reads = []
    real = core.run_chunk
    try:
        core.run_chunk = lambda *a, **k: reads.append(1) or real(*a, **k)  # type: ignore[assignment]
        warm = audit(str(root), jobs=1, cache_dir=cache).runs
    finally:
        core.run_chunk = real  # type: ignore[assignment]
    assert not reads and warm == first == audit(str(root), jobs=1, cache=False).runs


def test_a_run_folder_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """Discovery gives such a name with lone surrogates (``surrogateescape``); the cache
    neither crashes on it nor serves a stale record, and warm equals cold."""
    import os
    import shutil

    root = tmp_path / "r"
    root.mkdir()
    src = Path(__file__).parent / "fixtures" / "example" / "a66038f97f204cb3aaa96339f195c37e"
    odd = os.fsdecode(os.fsencode(str(root)) + b"/run\xff")
    shutil.copytree(src, odd)
    shutil.copytree(src, root / "plain")
    cache = tmp_path / "cache"
    cold = audit(str(root), jobs=1, cache=False).runs
    assert {r["run_dir"] for r in cold} == {odd, str(root / "plain")}
    assert audit(str(root), jobs=1, cache_dir=cache).runs == cold
    assert audit(str(root), jobs=1, cache_dir=cache).runs == cold
