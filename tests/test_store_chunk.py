"""The store's chunk builder (one columnar read per run for all 13 tables) equals the exact one.

The oracle is :func:`rivumi_analysis.store.build.build_frames` over runs read exactly
(``read_runs``: every line an object, every document parsed whole); the builder under test is
:func:`~rivumi_analysis.store.build.chunk_frames` over :func:`read_runs_for_tables` (the audit's
clean reading, documents parsed whole), which the store's chunks and ``build_tables`` use.
Compared table by table with ``assert_frame_equal``: every sample run and fixture, a generated
corpus (forks, torn tails) with damaged documents and logs, the engine forced exact, a live run
(writer lock held), and generated logs with mutations that only just fail a fast-path check.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from rivumi_analysis.read import columnar as _columnar
from rivumi_analysis.read.cleanlog import CleanLog
from rivumi_analysis.read.discovery import discover
from rivumi_analysis.store.build import (
    TABLES,
    build_frames,
    chunk_frames,
    read_runs,
    read_runs_for_tables,
)
from tests.conftest import SAMPLE_RUNS, examples
from tests.test_columnar import LINES, MUTATIONS, _mutate
from tests.test_tables_columnar import _DOC_EDITS, _write

ROOT = Path(__file__).resolve().parent.parent


def _check(source: str) -> dict[str, int]:
    """Every table of the chunk builder equals the exact builder's; returns the heights."""
    locations = discover(source).runs
    want = build_frames(read_runs(locations))
    got = chunk_frames(read_runs_for_tables(locations))
    assert list(got) == list(TABLES)
    for table in TABLES:
        assert_frame_equal(got[table], want[table], check_exact=True), table
    return {t: want[t].height for t in TABLES}


def test_every_sample_run_and_fixture() -> None:
    heights = _check(str(SAMPLE_RUNS))
    assert all(heights[t] for t in TABLES if t != "quarantine")
    assert heights["quarantine"]  # the sample runs hold damaged logs too
    _check(str(ROOT / "tests" / "fixtures"))


def test_clean_logs_take_the_columnar_path() -> None:
    runs = read_runs_for_tables(discover(str(SAMPLE_RUNS)).runs)
    clean = [r for r in runs if isinstance(r.fast, CleanLog)]
    assert clean and len(clean) < len(runs)  # both paths are exercised above
    # the documents the tables read are whole, not the audit's few keys
    assert any(isinstance(r.manifest, dict) and "messages" in r.manifest for r in clean)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    from rivumi_analysis.synth.corpus import generate_corpus

    out = tmp_path_factory.mktemp("corpus") / "runs"
    generate_corpus(str(out), runs=40, target_mb=2, seed=11, workers=1)
    return str(out)


@pytest.mark.parametrize("engine", ["auto", "exact"])
def test_generated_corpus(corpus: str, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_columnar.ENGINE_ENV, engine)
    heights = _check(corpus)
    assert heights["forks"] and heights["drift"] and heights["states"]


def test_damaged_documents_and_logs(corpus: str, tmp_path: Path) -> None:
    copy = tmp_path / "runs"
    shutil.copytree(corpus, copy)
    runs = sorted(p for p in copy.iterdir() if (p / "events.jsonl").is_file())
    k = 0
    for name, edits in _DOC_EDITS.items():
        for edit in edits:
            (runs[k] / name).write_bytes(edit)
            k += 1
    (runs[k] / "session.json").unlink()
    (runs[k + 1] / "backend-result.json").write_bytes(b"{}")  # external
    (runs[k + 2] / "result.json").write_bytes(b'{"status":"failed","x":[1,2]}')
    (runs[k + 3] / "request.json").write_bytes(b"[]")
    log = runs[k + 4] / "events.jsonl"
    log.write_bytes(log.read_bytes() + b'{"not json\n')  # a quarantined line
    log = runs[k + 5] / "events.jsonl"
    log.write_bytes(log.read_bytes()[:-7])  # a torn tail
    (runs[k + 6] / "events.jsonl").write_bytes(b"")
    (runs[k + 7] / "events.jsonl").unlink()
    (runs[k + 8] / "session.json").write_bytes(b'{"run_id":"r","messages":"no list"}')
    heights = _check(str(copy))
    assert heights["quarantine"]


def test_live_run_with_its_writer_lock_held(corpus: str, tmp_path: Path) -> None:
    copy = tmp_path / "runs"
    shutil.copytree(corpus, copy)
    run = sorted(p for p in copy.iterdir() if (p / "events.jsonl").is_file())[3]
    fd = os.open(run / ".writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"token-1")
        fcntl.flock(fd, fcntl.LOCK_EX)
        runs = read_runs_for_tables(discover(str(copy)).runs)
        assert [r.writer_active for r in runs].count(True) == 1
        _check(str(copy))
    finally:
        os.close(fd)


_MUTATION = st.one_of(st.just("none"), st.sampled_from(sorted(MUTATIONS)))


@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(LINES) - 1), _MUTATION), min_size=1, max_size=12))
def test_generated_logs(tmp_path: Path, picks: list[tuple[int, str]]) -> None:
    out = []
    for seq, (i, name) in enumerate(picks):
        line = LINES[i].replace(f'"sequence":{i},'.encode(), f'"sequence":{seq},'.encode(), 1)
        out.append(_mutate(name, line))
    _check(_write(tmp_path, b"".join(out)))


def test_live_run_with_a_value_too_deep_to_pickle_keeps_no_prefix(tmp_path: Path) -> None:
    """A just-written run whose log holds a value nested as deep as the reader accepts: the
    store keeps no prefix for it (pickling it would overflow the stack) instead of failing
    the refresh, and its tables equal the exact builder's."""
    import json

    from rivumi_analysis.read.runner_json import PYTHON_JSON_MAX_DEPTH
    from rivumi_analysis.store.core import ChunkTask, run_chunk

    depth = PYTHON_JSON_MAX_DEPTH - 2
    deep = "[" * depth + "]" * depth
    first = json.loads(LINES[0])
    line = json.dumps({**first, "data": {"v": "x"}}, sort_keys=True, separators=(",", ":"))
    line = line.replace('{"v":"x"}', '{"v":' + deep + "}")
    source = _write(tmp_path, line.encode() + b"\n")
    loc = discover(source).runs[0]
    res = run_chunk(ChunkTask(str(tmp_path / "store"), "g1-0", (loc,), {loc.run_dir: None}))
    entry = res.part and res.entries[loc.run_dir]
    assert entry["volatile"] and not entry["prefix"]
    _check(source)
