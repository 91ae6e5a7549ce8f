"""Derived tables and ``states_df`` on the columnar engine equal the object builders (issue 10).

``tool_calls_df``, ``approvals_df``, ``model_calls_df``, ``usage_df`` and ``verifications_df``
read a path source for columns (``tables._common.load_columnar``: fast-path logs are built by
the table's column builder, in worker processes for a large fleet);
``states_df`` feeds the columnar rows to the vectorised engine. The oracle is each table's
object builder over the complete snapshots (``load_fleet``), compared whole-frame with
``assert_frame_equal``: every sample run, a generated corpus (in a pool and in-process, with
the engine forced exact too), and generated logs with mutations that only just fail a
fast-path check.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from rivumi_analysis.read import columnar as _columnar
from rivumi_analysis.read.snapshot import load_fleet
from rivumi_analysis.tables import _common
from rivumi_analysis.tables.states import states_df
from tests.conftest import SAMPLE_RUNS, examples
from tests.test_columnar import LINES, MUTATIONS, _mutate
from tests.test_replay_helpers import manifest

TABLES = ("tool_calls", "approvals", "model_calls", "usage", "verifications")


def _module(name: str) -> Any:
    return importlib.import_module(f"rivumi_analysis.tables.{name}")


def _oracle(name: str, runs: list[Any]) -> pl.DataFrame:
    return getattr(_module(name), f"{name}_frame")(runs)


def _columnar_table(name: str, source: str, jobs: int | None = None) -> pl.DataFrame:
    m = _module(name)
    return _common.load_columnar(source, strict=False, max_depth=8, model=m._model(),
                                 builders=m.BUILDERS, jobs=jobs)


def _check_events(source: str, runs: list[Any], jobs: tuple[int | None, ...]) -> int:
    """``events_df``'s loader (columnar, documents skimmed) equals the object builder over
    complete snapshots, in process and in a pool."""
    from rivumi_analysis.tables.events import events_frame, load_events

    want = events_frame(runs)
    for j in jobs:
        assert_frame_equal(load_events(source, strict=False, max_depth=8, jobs=j), want)
    return want.height


def _check_all(source: str, jobs: tuple[int | None, ...] = (1,)) -> dict[str, int]:
    runs = load_fleet(source).runs
    heights = {"events": _check_events(source, runs, jobs)}
    for name in TABLES:
        want = _oracle(name, runs)
        for j in jobs:
            assert_frame_equal(_columnar_table(name, source, jobs=j), want)
        heights[name] = want.height
    return heights


def test_public_loaders_take_the_columnar_path_and_equal_the_builders() -> None:
    runs = load_fleet(str(SAMPLE_RUNS)).runs
    for name in TABLES:
        m = _module(name)
        assert_frame_equal(getattr(m, f"{name}_df")(str(SAMPLE_RUNS)), _oracle(name, runs))
    heights = _check_all(str(SAMPLE_RUNS), jobs=(1, 2))
    assert all(heights.values())  # every table has rows on the sample runs


@pytest.fixture(autouse=True)
def _pool_from_16_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """``jobs=2`` takes worker processes on these small fleets (the default threshold is
    for speed), so the pooled paths are compared with the in-process ones."""
    monkeypatch.setattr("rivumi_analysis.read.executor.POOL_MIN_RUNS", 16)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    from rivumi_analysis.synth.corpus import generate_corpus

    out = tmp_path_factory.mktemp("corpus") / "runs"
    # 40 runs: above the pool threshold, with the generator's torn tails and forks
    generate_corpus(str(out), runs=40, target_mb=2, seed=7, workers=1)
    return str(out)


@pytest.mark.corpus
@pytest.mark.parametrize("engine", ["auto", "exact"])
def test_generated_corpus_in_a_pool_and_in_process(corpus: str, engine: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_columnar.ENGINE_ENV, engine)
    _check_all(corpus, jobs=(2, 1))
    assert_frame_equal(states_df(corpus), states_df(corpus, engine="reference"))


def test_strict_raises_for_a_quarantined_line_in_a_pool(corpus: str, tmp_path: Path) -> None:
    import shutil

    from rivumi_analysis.errors import QuarantineError

    copy = tmp_path / "runs"
    shutil.copytree(corpus, copy)
    log = sorted(copy.glob("*/events.jsonl"))[5]
    log.write_bytes(log.read_bytes() + b'{"not json\n')
    m = _module("tool_calls")
    assert m.tool_calls_df(str(copy)).height  # not strict: loads, the line quarantined
    with pytest.raises(QuarantineError) as err:
        _common.load_columnar(str(copy), strict=True, max_depth=8, model=m._model(),
                              builders=m.BUILDERS, jobs=2)
    assert str(log) in err.value.quarantine["file"].to_list()
    from rivumi_analysis.tables.events import load_events

    with pytest.raises(QuarantineError) as err2:
        load_events(str(copy), strict=True, max_depth=8, jobs=2)
    assert_frame_equal(err2.value.quarantine, err.value.quarantine)
    assert load_events(str(copy), strict=False, max_depth=8, jobs=2).height


def test_events_arrow_schema_is_the_pandera_schema() -> None:
    from rivumi_analysis.schemas import EventsSchema
    from rivumi_analysis.tables.events import _events_schema, _polars_schema

    empty = pl.from_arrow(_events_schema().empty_table())
    assert dict(empty.schema) == _common.polars_schema(EventsSchema) == dict(_polars_schema())
    assert list(empty.schema) == list(_polars_schema())


# documents the events tables skim for kind and run id (read.docskim), damaged in ways that
# change the kind or run id, or that only the full parse can judge
_DOC_EDITS: dict[str, Any] = {
    "session.json": [
        b"", b"[1]", b"{", b'{"run_id":"late","run_id":"x"}', b'{"run_id":"r","x":"\\udc00"}',
        b'{"provider_name":"fork","run_id":"f"}', b'{"run\\u005fid":"escaped"}',
        b'{"run_id":"r","x":"\xff"}', b'{"run_id":"r","x":1e999}', b'{"run_id":7}',
        b'{"x":' + b"9" * 700 + b',"run_id":"long-int"}',
    ],
    "checkpoint.json": [
        b'{"backend_name":"b","resumable":false,"run_id":"ext"}', b'{"run_id":"from-cp"}',
        b'{"backend_name":"b","resumable":0}', b"null", b'{"run_id":"c","x":NaN}',
        # parsed although the log is clean (read_run skips the others when it is):
        b'{"backend\\u005fname":"b","resumable":false,"run_id":"escaped-key"}',
        b'{"resumable":false,"x":"backend_name","run_id":"value-only"}',
        b'{"run_id":"c","x":"\\u00e9"}',
    ],
}


def test_skimmed_documents_give_the_same_kind_and_run_id(corpus: str, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "runs"
    shutil.copytree(corpus, copy)
    runs = sorted(p for p in copy.iterdir() if (p / "events.jsonl").is_file())
    k = 0
    for name, edits in _DOC_EDITS.items():
        for edit in edits:
            (runs[k] / name).write_bytes(edit)
            k += 1
    (runs[k] / "session.json").unlink()  # run id from the log, or the checkpoint
    (runs[k + 1] / "backend-result.json").write_bytes(b"{}")  # external
    (runs[k + 2] / "session.json").unlink()  # no manifest, a checkpoint the skim skips
    (runs[k + 2] / "checkpoint.json").write_bytes(b'{"run_id":"cp-only"}')
    fleet = load_fleet(str(copy)).runs
    kinds = {r.kind for r in fleet}
    assert {"external", "fork", "native"} <= kinds
    escaped = next(r for r in fleet if r.run_dir == str(runs[k - 3]))
    assert escaped.kind == "external"
    _check_events(str(copy), fleet, jobs=(1, 2))


def _write(tmp: Path, log: bytes) -> str:
    import json

    run = tmp / "run"
    run.mkdir(exist_ok=True)
    (run / "events.jsonl").write_bytes(log)
    (run / "session.json").write_text(json.dumps(manifest()))
    return str(run)


_MUTATION = st.one_of(st.just("none"), st.sampled_from(sorted(MUTATIONS)))


@settings(max_examples=examples(400), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(LINES) - 1), _MUTATION), min_size=1, max_size=12))
def test_generated_logs(tmp_path: Path, picks: list[tuple[int, str]]) -> None:
    out = []
    for seq, (i, name) in enumerate(picks):
        line = LINES[i].replace(f'"sequence":{i},'.encode(), f'"sequence":{seq},'.encode(), 1)
        out.append(_mutate(name, line))
    source = _write(tmp_path, b"".join(out))
    _check_all(source)
    assert_frame_equal(states_df(source), states_df(source, engine="reference"))


@pytest.mark.differential
def test_every_newline_cut_of_the_example() -> None:
    """Every table at every newline cut of the shared example (the cuts
    ``test_columnar.test_every_byte_cut_of_the_example`` and
    ``test_cleanlog.test_every_cut_of_the_example`` find clean; torn cuts never are), in the
    example run with its manifest as written and level with the cut: each cut's rows come
    from the column builders (one clean segment) and equal the object builders'."""
    from tests.test_cleanlog import _write as _example_run

    for k in range(len(LINES) + 1):  # k lines: the cut after the k-th newline (0: empty)
        for shift in (None, 0):
            source = _example_run(b"".join(LINES[:k]), shift)
            # (the empty log is not clean: read exactly)
            assert _segments_kinds(source) == [(k > 0, k == 0)], (k, shift)
            heights = _check_all(source)
            assert heights["events"] == k
            assert_frame_equal(states_df(source), states_df(source, engine="reference"))


@pytest.mark.parametrize("engine", ["auto", "exact"])
def test_states_prepared_in_a_pool_equal_the_reference(
        corpus: str, tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from rivumi_analysis.tables import states as states_mod

    copy = tmp_path / "runs"
    shutil.copytree(corpus, copy)
    logs = sorted(copy.glob("*/events.jsonl"))
    logs[3].write_bytes(logs[3].read_bytes() + b'{"not json\n')  # exact path, quarantined
    data = logs[4].read_bytes()  # a duplicate sequence: the reference reducer
    logs[4].write_bytes(data + data.splitlines(keepends=True)[-1])
    monkeypatch.setenv(_columnar.ENGINE_ENV, engine)
    ref = states_df(str(copy), engine="reference")
    used = []
    real = states_mod._states_in_pool

    def spy(*a: Any, **kw: Any) -> Any:
        out = real(*a, **kw)
        used.append(out is not None)
        return out

    monkeypatch.setattr(states_mod, "_states_in_pool", spy)
    assert_frame_equal(states_df(str(copy)), ref)
    assert used == [True]  # 40 runs: chunks in two workers
    # a worker prepares every run, on the fast path or not (the quarantined log is read
    # exactly): only the runs handed to the reference reducer go back as snapshots
    from rivumi_analysis.read.discovery import discover

    locations = discover(str(copy)).runs
    events, _, reasons, others, quarantined = states_mod._prepare_chunk(locations, None)
    assert set(others) == set(reasons) and set(reasons.values()) == {"duplicate_sequence"}
    assert len(quarantined) == 1 and events.num_rows == ref.height  # every run's events
    from rivumi_analysis.errors import QuarantineError
    from rivumi_analysis.replay.vectorised import NotVectorizable

    with pytest.raises(QuarantineError):
        states_df(str(copy), strict=True)
    with pytest.raises(NotVectorizable, match="duplicate_sequence"):
        states_df(str(copy), engine="vectorized")


def test_events_of_clean_logs_with_null_task_ids(tmp_path: Path) -> None:
    """Null task ids on the fast path (the buffers carry a not-null byte per event)."""
    from rivumi_analysis.read.cleanlog import clean_log

    lines = [_mutate("task_id_null", ln) if i % 3 else ln for i, ln in enumerate(LINES)]
    log = b"".join(lines)
    assert clean_log(log) is not None and b'"task_id":null' in log
    source = _write(tmp_path, log)
    heights = _check_all(source)
    assert heights["events"] == len(LINES)


def _segments_kinds(source: str) -> list[tuple[bool, bool]]:
    """(has clean rows, has exactly-read rows) of each segment of ``source`` in one chunk."""
    from rivumi_analysis.read.discovery import discover
    from rivumi_analysis.tables.events import _events_chunk

    segments, _ = _events_chunk(discover(source).runs)
    return [(s.fast is not None, s.exact is not None) for s in segments]


def test_clean_rows_satisfy_the_pandera_model_by_construction(corpus: str,
                                                             tmp_path: Path) -> None:
    """``events_df`` validates only the exactly-read rows with pandera: the clean logs' rows
    (every constraint of ``EventsSchema`` true by construction) pass pandera all the same,
    on a corpus whose chunks interleave clean and exactly-read runs, run ids and task ids
    that vary within a log (per-event buffers) or not (one value per run)."""
    import shutil

    from rivumi_analysis.read.cleanlog import clean_log
    from rivumi_analysis.schemas import EventsSchema
    from rivumi_analysis.tables.events import load_events

    copy = tmp_path / "runs"
    shutil.copytree(corpus, copy)
    logs = sorted(copy.glob("*/events.jsonl"))
    logs[1].write_bytes(logs[1].read_bytes() + b'{"not json\n')  # read exactly
    data = logs[2].read_bytes()  # a task id that changes within a clean log
    last = data.splitlines(keepends=True)[-1]
    logs[2].write_bytes(data.replace(last, _mutate("task_id_null", last)))
    assert clean_log(logs[2].read_bytes()) is not None
    kinds = _segments_kinds(str(copy))
    assert (True, True) in kinds  # clean and exact runs in one segment: interleaved
    for jobs in (1, 2):
        table = load_events(str(copy), strict=False, max_depth=8, jobs=jobs)
        assert_frame_equal(_common.validate(table, EventsSchema), table)
        clean = table.filter(~pl.col("run_dir").is_in([str(logs[1].parent)]))
        assert_frame_equal(_common.validate(clean, EventsSchema), clean)
    _check_events(str(copy), load_fleet(str(copy)).runs, jobs=(1, 2))


def test_a_repeated_run_is_still_refused_by_pandera() -> None:
    """The key (run_dir, line_no) is unique by construction only for distinct runs: the
    same run given twice is validated whole, and refused as before."""
    from rivumi_analysis.errors import SchemaValidationError
    from rivumi_analysis.read.snapshot import read_run
    from rivumi_analysis.tables.events import events_frame
    from tests.conftest import EXAMPLE_DIR

    run = read_run(str(EXAMPLE_DIR), columnar=True, skim=True)
    assert events_frame([run]).height == 50
    with pytest.raises(SchemaValidationError, match="key_unique"):
        events_frame([run, run])


def test_a_timestamp_arrow_refuses_reads_the_segment_exactly(
        corpus: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Should Arrow's parse ever refuse a timestamp the clean-log proof accepted (or the
    lines' sizes not add up to the files'), the segment is read exactly (and validated):
    the same table, in process and in a pool."""
    from rivumi_analysis.tables import events as ev

    calls = []
    real = ev._raw_columns

    def refuse(*args: Any) -> None:
        calls.append(args)

    runs = load_fleet(corpus).runs
    pool_from = "rivumi_analysis.read.executor.POOL_MIN_RUNS"
    monkeypatch.setattr(ev, "_finish", refuse)
    _check_events(corpus, runs, jobs=(1, 2))
    assert calls
    calls.clear()
    monkeypatch.undo()
    monkeypatch.setattr(pool_from, 16)  # (undone above with the rest)

    def refuse_some(seg: Any, rows_before: int, bytes_before: int) -> Any:
        if len(calls) % 2 == 0:  # every other segment: clean and re-read ones side by side
            calls.append(seg)
            return None
        calls.append(seg)
        return real(seg, rows_before, bytes_before)

    monkeypatch.setattr(ev, "_raw_columns", refuse_some)
    _check_events(corpus, runs, jobs=(1, 2))
    assert len(calls) > 2


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(
    ["a", "Z", "0", "~", "!", " ", "\n", "\t", "\x7f", "\x00", "é", "\u2028", '"', "\\"]),
    max_size=4), max_size=4))
def test_plain_is_the_regex(values: list[str]) -> None:
    """``cleanlog._plain`` (C-level string checks) equals ``[!#-[\\]-~]+`` (printable
    ASCII but space, quote and backslash: ``events_df`` sizes lines from these values) on
    every value (the regex it replaced ran over the values joined by newlines, so it let a
    value holding a newline through: such a log now takes the exact path, which is always
    allowed)."""
    import re

    from rivumi_analysis.read.cleanlog import _plain

    assert _plain(values) == all(re.fullmatch(r"[!#-\[\]-~]+", v) for v in values)


def _leftovers() -> list[str]:
    import glob
    import os

    return glob.glob(f"/dev/shm/rivumi-events-{os.getpid()}-*")


def test_buffers_through_shared_memory_or_the_pipe(corpus: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Pool workers hand the clean logs' buffers over in shared-memory files (mapped by
    the parent, removed at once) or, without a writable ``/dev/shm``, through the pipe:
    the same table either way, and no file left behind, also when the load fails."""
    from rivumi_analysis.tables import events as ev

    runs = load_fleet(corpus).runs
    want = ev.events_frame(runs)
    mapped = []
    real = ev._mapped

    def spy(path: str) -> Any:
        mapped.append(path)
        return real(path)

    monkeypatch.setattr(ev, "_mapped", spy)
    assert_frame_equal(ev.load_events(corpus, strict=False, max_depth=8, jobs=2), want)
    # (a machine without a writable /dev/shm takes the pipe here too)
    assert (mapped or ev._shared_prefix() is None) and not _leftovers()
    mapped.clear()
    monkeypatch.setattr(ev, "_SHARED_DIR", str(tmp_path / "missing"))
    assert_frame_equal(ev.load_events(corpus, strict=False, max_depth=8, jobs=2), want)
    assert not mapped  # through the pipe
    monkeypatch.setattr(ev, "_SHARED_DIR", "/dev/shm")

    def fail(seg: Any, rows_before: int, bytes_before: int) -> Any:
        raise RuntimeError("conversion failed")

    monkeypatch.setattr(ev, "_raw_columns", fail)
    with pytest.raises(RuntimeError, match="conversion failed"):
        ev.load_events(corpus, strict=False, max_depth=8, jobs=2)
    assert not _leftovers()


def test_a_buffer_that_cannot_be_shared_stays_in_the_message(tmp_path: Path) -> None:
    from rivumi_analysis.read.discovery import discover
    from rivumi_analysis.tables import events as ev
    from tests.conftest import EXAMPLE_DIR

    segments, _ = ev._events_chunk(discover(str(EXAMPLE_DIR)).runs)
    fast = segments[0].fast
    assert fast is not None
    kept = ev._share(fast, str(tmp_path / "missing" / "x"))  # cannot be created
    assert kept is fast
    shared = ev._share(fast, str(tmp_path / "x"))
    assert shared.shared is not None and isinstance(shared.data[0], ev._Span)
    frame = ev._fast_table(shared)
    assert_frame_equal(frame, ev._fast_table(fast))
    assert not list(tmp_path.iterdir())  # mapped, and its name removed


def test_an_events_load_imports_no_pandera(corpus: str, tmp_path: Path) -> None:
    """A load whose exactly-read rows the check plan (``rivumi_analysis.checks``) passes never
    imports pandera (nor pandas): a fresh process, a corpus with a torn tail (read exactly)."""
    import shutil
    import subprocess
    import sys

    copy = tmp_path / "runs"
    shutil.copytree(corpus, copy)
    log = sorted(copy.glob("*/events.jsonl"))[0]
    log.write_bytes(log.read_bytes() + b'{"torn')
    code = ("import sys; from rivumi_analysis.tables.events import events_df; "
            f"df = events_df({str(copy)!r}); "
            "print(df.height, 'pandera' in sys.modules, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert int(out[0]) > 0 and out[1:] == ["False", "False"]


@settings(max_examples=examples(300), deadline=None)
@given(st.datetimes(min_value=__import__("datetime").datetime(1, 1, 1),
                    max_value=__import__("datetime").datetime(9999, 12, 31, 23, 59, 59,
                                                              999999)),
       st.booleans())
def test_timestamps_parse_as_the_exact_path_reads_them(when: Any, whole_second: bool) -> None:
    """The clean logs' timestamps (the runner's shape: six fraction digits, or none when
    zero) parsed by Arrow's cast in ``_raw_columns`` equal the exact path's
    ``parse_created_at``."""
    import pyarrow as pa

    from rivumi_analysis.read.cleanlog import _TIMESTAMPS
    from rivumi_analysis.read.decode import parse_created_at

    if whole_second:
        when = when.replace(microsecond=0)
    text = when.strftime("%Y-%m-%dT%H:%M:%S") + (f".{when.microsecond:06d}" if when.microsecond
                                                 else "") + "Z"
    text = f"{when.year:04d}" + text[text.index("-"):]  # (strftime pads years < 1000 unevenly)
    if when.year == 0 or _TIMESTAMPS.fullmatch(text + "\n") is None:
        return  # not on the fast path
    got = pl.from_arrow(pa.array([text], pa.large_string()).cast(
        pa.timestamp("us", "UTC"))).item()
    assert got == parse_created_at(text)[0]


def test_clean_logs_are_sized_from_their_values(corpus: str, tmp_path: Path) -> None:
    """``_fast_table`` sizes every line from its values (``_line_length``) and checks the
    sum against the files: on a corpus with null, varying and constant task ids, every
    segment's clean rows take that path (no exact re-read) and their lengths and offsets
    are the exact path's (the frame equals the oracle)."""
    import shutil

    from rivumi_analysis.read.discovery import discover
    from rivumi_analysis.tables import events as ev

    copy = tmp_path / "runs"
    shutil.copytree(corpus, copy)
    logs = sorted(copy.glob("*/events.jsonl"))
    for log, name in zip(logs, ("task_id_null", "none"), strict=False):
        data = log.read_bytes()
        last = data.splitlines(keepends=True)[-1]
        log.write_bytes(data.replace(last, _mutate(name, last)))
    segments, _ = ev._events_chunk(discover(str(copy)).runs)
    fast = [s.fast for s in segments if s.fast is not None]
    assert fast and all(ev._fast_table(f) is not None for f in fast)
    _check_events(str(copy), load_fleet(str(copy)).runs, jobs=(1,))
