"""``runs_df``, ``messages_df``, ``manifests_df`` and ``quarantine_df`` read a large path
fleet in worker processes (``tables._common.load_rows``): the workers build plain rows, the
parent the frame. The oracle is each table's builder over the complete snapshots
(``load_fleet``), compared whole-frame with ``assert_frame_equal``, in a pool (``jobs=2``)
and in this process (``jobs=1``): every sample run (forks, subagents, external runs, crash
cuts, a corrupt log) plus quarantined lines, a run whose audit raises, and strict loads.
"""

from __future__ import annotations

import operator
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from rivumi_analysis import audit as _audit
from rivumi_analysis.errors import QuarantineError
from rivumi_analysis.read import executor as _executor
from rivumi_analysis.read import uri as _uri
from rivumi_analysis.read.snapshot import RunData, load_fleet
from rivumi_analysis.tables import _common, manifests, messages, quarantine, runs
from tests.conftest import SAMPLE_RUNS

TableSpec = tuple[_common.RowsBuilder, str, Callable[[_common.Columns], pl.DataFrame] | None,
                  Callable[..., pl.DataFrame], Callable[[Iterable[RunData]], pl.DataFrame]]
"""rows builder, model, frame of the columns (None: the model's), public loader, builder
over loaded runs."""

TABLES: dict[str, TableSpec] = {
    "runs": (runs.runs_rows, "RunsSchema", runs.runs_table, runs.runs_df, runs.runs_frame),
    "messages": (messages._exact_rows, "MessagesSchema", None, messages.messages_df,
                 messages.messages_frame),
    "manifests": (manifests.manifests_rows, "ManifestsSchema", None, manifests.manifests_df,
                  manifests.manifests_frame),
    "quarantine": (_common.quarantine_rows, "QuarantineSchema", None,
                   quarantine.quarantine_df, _common.quarantine_frame),
}
BAD_LINE = b'{"not json\n'


def _load(name: str, source: Any, jobs: int | None, strict: bool = False) -> pl.DataFrame:
    rows, model, table, _df, _frame = TABLES[name]
    return _common.load_rows(source, strict=strict, max_depth=8, rows=rows, model=model,
                             table=table, jobs=jobs)


@pytest.fixture(autouse=True)
def _pool_from_32_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sample fleet (94 runs) takes the pool (the default threshold is for speed)."""
    monkeypatch.setattr(_executor, "POOL_MIN_RUNS", 32)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every sample run (94: above the pool's threshold for ``jobs=2``), three more logs with
    a quarantined line each, in different chunks; mtimes kept (no torn tail looks in flight)."""
    out = tmp_path_factory.mktemp("pooled") / "runs"
    shutil.copytree(SAMPLE_RUNS, out, symlinks=True)
    logs = sorted(out.glob("completed/*/events.jsonl"))
    for log in (logs[0], logs[12], logs[-1]):
        st = log.stat()
        log.write_bytes(log.read_bytes() + BAD_LINE)
        os.utime(log, ns=(st.st_atime_ns, st.st_mtime_ns))
    return out


def _pids(runs_: Iterable[RunData]) -> list[dict[str, Any]]:
    return [{"run_dir": os.getpid()} for _run in runs_]


def _reading_pids(source: str, jobs: int) -> list[int]:
    """The pid of the process that built each run's row."""
    return _common.load_rows(source, strict=False, max_depth=8, rows=_pids, model="RunsSchema",
                             table=operator.itemgetter("run_dir"), jobs=jobs)


def test_a_fleet_of_sample_runs_takes_the_pool_with_two_jobs(fleet: Path) -> None:
    pids = _reading_pids(str(fleet), 2)
    assert len(pids) == len(load_fleet(str(fleet)).runs)
    assert os.getpid() not in pids
    assert _reading_pids(str(fleet), 1) == [os.getpid()] * len(pids)


@pytest.mark.parametrize("name", TABLES)
def test_pooled_equals_in_process_and_the_builder(name: str, fleet: Path) -> None:
    want = TABLES[name][4](load_fleet(str(fleet)).runs)
    assert want.height
    for jobs in (2, 1):
        assert_frame_equal(_load(name, str(fleet), jobs), want)
    assert_frame_equal(TABLES[name][3](str(fleet)), want)  # the public loader (in process)
    assert_frame_equal(_load(name, load_fleet(str(fleet)), 2), want)  # loaded: load()
    # a list of sources, as discovery orders it
    parts = [str(fleet / "forks"), str(fleet / "subagents"), str(fleet / "crashes"),
             str(fleet / "completed")]
    assert_frame_equal(_load(name, parts, 2), TABLES[name][4](load_fleet(parts).runs))


@pytest.mark.parametrize("name", TABLES)
def test_strict_raises_the_same_quarantine_table(name: str, fleet: Path) -> None:
    want = _common.quarantine_frame(load_fleet(str(fleet)).runs)
    assert want.height == 4  # the sample's torn line and the three added ones
    errors = []
    for load in (lambda: _load(name, str(fleet), 2, strict=True),
                 lambda: _load(name, str(fleet), 1, strict=True),
                 lambda: TABLES[name][3](str(fleet), strict=True)):
        with pytest.raises(QuarantineError) as err:
            load()
        errors.append(err.value)
    for err in errors:
        assert_frame_equal(err.quarantine, want)
        assert str(err) == str(errors[0])
    clean = [str(fleet / group) for group in ("failed", "cancelled", "resumed", "subagents",
                                              "external", "example")]
    assert len(load_fleet(clean).runs) >= _executor.POOL_MIN_RUNS
    assert_frame_equal(_load(name, clean, 2, strict=True),  # no line quarantined
                       TABLES[name][4](load_fleet(clean).runs))


def test_only_a_strict_load_ships_quarantine_rows(fleet: Path) -> None:
    from rivumi_analysis.read.discovery import discover

    locations = discover(str(fleet)).runs
    columns, bad = _common._rows_chunk(locations, rows=_pids, names=("run_dir",),
                                       keep_quarantined=False)
    assert len(columns["run_dir"]) == len(locations) and bad == []
    _columns, bad = _common._rows_chunk(locations, rows=_pids, names=("run_dir",),
                                        keep_quarantined=True)
    assert bad == _common.quarantine_rows(load_fleet(str(fleet)).runs)


def _raising_record(run: RunData) -> dict[str, Any]:
    if "/forks/" in run.run_dir:
        raise ValueError(f"cannot audit {os.path.basename(run.run_dir)}")
    return _REAL_RECORD(run)


_REAL_RECORD = _audit.record_from_run


def test_a_run_whose_audit_raises_has_the_same_error_record(
        fleet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (in this process: a worker imports the real audit, not the patched one)
    monkeypatch.setattr(_audit, "record_from_run", _raising_record)
    want = runs.runs_frame(load_fleet(str(fleet)).runs)
    errors = want.filter(pl.col("verdict") == "error")
    assert errors.height == len(list(fleet.glob("forks/*")))  # sources and forks
    assert errors["message"].str.contains("internal error: ValueError: cannot audit").all()
    assert_frame_equal(_load("runs", str(fleet), 1), want)


def test_object_storage_runs_are_read_in_this_process(
        fleet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyarrow.fs import LocalFileSystem

    seen = []
    real = _executor.choose

    def spy(*a: Any, **k: Any) -> Any:
        seen.append(real(*a, **k))
        return seen[-1]

    monkeypatch.setattr(_executor, "choose", spy)
    _uri.register_filesystem("pooltest://", LocalFileSystem())
    try:
        source = f"pooltest://{fleet}"
        got = _load("manifests", source, 2)
        want = manifests.manifests_frame(load_fleet(source).runs)
    finally:
        _uri.unregister_filesystem("pooltest://")
    assert len(seen) == 1 and isinstance(seen[0][0], _executor.InProcess)
    assert_frame_equal(got, want)
    assert got.height == _load("manifests", str(fleet), 2).height


@pytest.mark.parametrize("name", TABLES)
def test_no_runs_gives_the_builders_empty_frame(name: str, tmp_path: Path) -> None:
    from rivumi_analysis.errors import EmptySourceWarning

    want = TABLES[name][4]([])
    assert want.height == 0
    for jobs in (2, 1):
        with pytest.warns(EmptySourceWarning, match="no run directory found below"):
            got = _load(name, str(tmp_path), jobs)
        assert_frame_equal(got, want)


def test_derived_tables_ship_quarantined_runs_only_for_a_strict_load(fleet: Path) -> None:
    """``load_columnar``'s workers (the derived tables) send back the runs with quarantined
    lines only when the load is strict, and a strict pooled load raises the same error as
    one in this process."""
    from rivumi_analysis.read.discovery import discover
    from rivumi_analysis.tables import tool_calls

    locations = discover(str(fleet)).runs
    builders = tool_calls.BUILDERS
    _parts, bad = _common._parts_chunk(locations, builders=builders, keep_quarantined=False)
    assert bad == []
    _parts, bad = _common._parts_chunk(locations, builders=builders, keep_quarantined=True)
    assert len(bad) == 4 and all(run.quarantined for run in bad)
    want = _common.quarantine_frame(load_fleet(str(fleet)).runs)
    lenient = []
    for jobs in (2, 1):
        with pytest.raises(QuarantineError) as err:
            _common.load_columnar(str(fleet), strict=True, max_depth=8, model="ToolCallsSchema",
                                  builders=builders, jobs=jobs)
        assert_frame_equal(err.value.quarantine, want)
        lenient.append(_common.load_columnar(str(fleet), strict=False, max_depth=8,
                                             model="ToolCallsSchema", builders=builders,
                                             jobs=jobs))
    assert lenient[0].height
    assert_frame_equal(lenient[0], lenient[1])
