"""The warm audit fingerprints each run from discovery's listing (no second listing)."""

from __future__ import annotations

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
    for loc in found.runs:
        with_names = fingerprint(loc.run_dir, held, listings[loc.run_dir])
        assert with_names is not None and with_names == fingerprint(loc.run_dir, held)


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
