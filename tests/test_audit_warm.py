"""The warm audit fingerprints each run from discovery's listing (no second listing)."""

from __future__ import annotations

import json
from pathlib import Path

from rivumi_analysis.audit import audit
from rivumi_analysis.read.cache import fingerprint, proc_locked_keys
from rivumi_analysis.read.discovery import discover
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
        # the audit cache's form (no lock bytes): by path from the listing == by listing now
        listed = fingerprint(loc.run_dir, held, listings[loc.run_dir], lock_content=False)
        assert listed == fingerprint(loc.run_dir, held, lock_content=False)
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
