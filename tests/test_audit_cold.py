"""The cold audit's reading shortcuts give the snapshot the plain reading gives."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import rivumi_analysis.read.cache as C
import rivumi_analysis.read.snapshot as S
from rivumi_analysis.audit import audit
from tests.conftest import SAMPLE_RUNS

EXAMPLE = Path(__file__).parent / "fixtures" / "example" / "a66038f97f204cb3aaa96339f195c37e"


def test_files_absent_from_the_listing_are_not_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    """``read_run(clean=True)`` opens only what the folder lists; every file status (and so
    every record) is the plain reading's, on every sample run."""
    opened: list[str] = []
    real = S.read_file

    def counting(path: str, *a: object, **k: object) -> S.FileRead:
        opened.append(os.path.basename(path))
        return real(path, *a, **k)  # type: ignore[arg-type]

    from rivumi_analysis.read.discovery import discover

    monkeypatch.setattr(S, "_LOCAL_IO", (counting, *S._LOCAL_IO[1:]))
    monkeypatch.setattr(S, "read_file", counting)
    runs = discover(str(SAMPLE_RUNS)).runs
    skipped = 0
    for loc in runs:
        plain = S.read_run(loc.run_dir, is_subagent=loc.is_subagent,
                           parent_run_dir=loc.parent_run_dir)
        opened.clear()
        clean = S.read_run(loc.run_dir, is_subagent=loc.is_subagent,
                           parent_run_dir=loc.parent_run_dir, clean=True)
        assert {k: v.status for k, v in clean.files.items()} == {
            k: v.status for k, v in plain.files.items()}
        assert clean.listing == plain.listing
        assert (clean.writer_lock_token, clean.writer_active) == (
            plain.writer_lock_token, plain.writer_active)
        listed = set(clean.listing)
        assert not [n for n in opened if n not in listed and n in S._RUN_FILES] or not listed
        skipped += len(S._RUN_FILES - listed) if listed else 0
    assert skipped > len(runs)  # backend-result.json at least, nearly everywhere


def test_held_locks_given_by_the_caller_are_used(tmp_path: Path) -> None:
    run = tmp_path / EXAMPLE.name
    shutil.copytree(EXAMPLE, run)
    (run / ".writer.lock").write_text("token=abc\n")
    st = os.lstat(run / ".writer.lock")
    key = S._lock_key(st.st_dev, st.st_ino)
    held = S.read_run(str(run), clean=True, held_locks=frozenset({key}))
    free = S.read_run(str(run), clean=True, held_locks=frozenset())
    assert held.writer_active and not free.writer_active
    assert held.writer_lock_token == free.writer_lock_token == "abc"


def test_proc_locks_read_once_per_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        shutil.copytree(EXAMPLE, tmp_path / f"r{i}")
    reads = []
    real = C.proc_locked_keys

    def counting() -> frozenset[str]:
        reads.append(1)
        return real()

    monkeypatch.setattr(C, "proc_locked_keys", counting)
    monkeypatch.setattr(C, "LOCKS_BATCH", 2)
    recs = audit(str(tmp_path), jobs=1, cache=False).runs
    assert len(recs) == 5 and len(reads) == 3  # runs 0-1, 2-3, 4
