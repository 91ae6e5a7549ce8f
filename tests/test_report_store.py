"""The fleet report read through the Parquet store equals the in-memory report."""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path

import polars as pl
import pytest

from rivumi_analysis.cli import main
from rivumi_analysis.store import local_executor, open_store
from rivumi_analysis.viz import report as R
from rivumi_analysis.viz._html import spec

from .conftest import SAMPLE_RUNS

_NAMES = re.compile(r"\b(view|param|selector|concat|data)_\d+\b")


def _specs(charts: dict) -> dict[str, str]:
    """Chart specs with altair's per-process counters (view_12, param_3) normalised."""
    return {k: _NAMES.sub(r"\1_N", json.dumps(spec(c), sort_keys=True, default=str))
            for k, c in charts.items()}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "s"
    cold = R.load_tables([str(SAMPLE_RUNS)])
    warm = R.load_tables([str(SAMPLE_RUNS)], store=True, store_dir=str(store))
    return cold, warm, store


def test_store_tables_equal_the_cold_tables_on_their_columns(both):
    cold, warm, store = both
    assert warm.store == str(store) and cold.store is None and cold.detail is None
    assert set(warm) == set(R.REPORT_TABLES)
    for name in R.DETAIL_ONLY:  # read for the runs that get a page only (warm.detail)
        assert warm[name] is None and cold[name] is not None, name
    for name in set(R.REPORT_TABLES) - R.DETAIL_ONLY:
        c, w = cold[name], warm[name]
        assert c is not None and w is not None, name
        assert w.columns == list(R.FLEET_COLUMNS.get(name, c.columns)), name
        assert w.height == c.height > 0 or name in ("quarantine",), name
        assert w.equals(c.select(w.columns)), name


@pytest.mark.slow
def test_fleet_charts_from_the_store_equal_the_cold_charts(both):
    cold, warm, _ = both
    a, b = _specs(R.build_charts(cold)), _specs(R.build_charts(warm))
    assert sorted(a) == sorted(b) == sorted(k for k, *_ in R.CHART_SECTIONS)
    for key in a:
        assert "chart failed" not in b[key], key
        assert a[key] == b[key], key


@pytest.mark.slow
def test_run_pages_read_whole_rows_of_their_runs_only(both):
    cold, warm, _ = both
    asked: list[list[str]] = []
    detail = warm.detail
    assert detail is not None

    def spy(run_dirs):
        asked.append(list(run_dirs))
        return detail(run_dirs)

    pc = R.run_pages(cold, sources=[str(SAMPLE_RUNS)])
    pw = R.run_pages(warm, sources=[str(SAMPLE_RUNS)], detail=spy)
    assert asked == [R.notable_runs(cold)] and 0 < len(pw) <= R.RUN_PAGES_CAP
    assert [p.run_dir for p in pw] == [p.run_dir for p in pc]
    assert [p.html for p in pw] == [p.html for p in pc]
    assert [_specs(p.charts) for p in pw] == [_specs(p.charts) for p in pc]
    whole = detail(asked[0])
    assert whole["states"].columns == cold["states"].columns
    assert set(whole["events"]["run_dir"].unique()) <= set(asked[0])


@pytest.mark.slow
def test_second_report_reads_no_run_and_cli_store_options(tmp_path, capsys):
    src = tmp_path / "runs"
    import shutil

    for name in sorted(p.name for p in (SAMPLE_RUNS / "failed").iterdir())[:3]:
        shutil.copytree(SAMPLE_RUNS / "failed" / name, src / name)
    store = tmp_path / "store"
    out = tmp_path / "r.html"
    argv = ["report", str(src), "--out", str(out), "--store", str(store)]
    assert main(argv) == 0
    assert "(3 of 3 runs new or changed)" in capsys.readouterr().err
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "(0 of 3 runs new or changed)" in err and "read 3/3 runs" in err
    assert main(["report", str(src), "--out", str(out), "--no-store"]) == 0
    assert "tables from the store" not in capsys.readouterr().err
    # a store inside the source is a usage error before any work
    assert main(["report", str(src), "--out", str(out), "--store", str(src / "s")]) == 2
    err = capsys.readouterr().err
    assert "--store" in err and "inside" in err and not (src / "s").exists()
    with pytest.raises(SystemExit):
        main(["report", str(src), "--store", str(store), "--no-store"])


def test_local_executor_reports_every_run(tmp_path):
    src = tmp_path / "runs"
    import shutil

    for name in sorted(p.name for p in (SAMPLE_RUNS / "failed").iterdir())[:4]:
        shutil.copytree(SAMPLE_RUNS / "failed" / name, src / name)
    seen: list[int] = []
    opened = open_store(str(src), store_dir=tmp_path / "store",
                        executor=partial(local_executor, progress=seen.append))
    assert seen == [1, 1, 1, 1] and len(opened.manifest.order) == 4


def test_store_fallback_when_unusable(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    t = R.load_tables([str(SAMPLE_RUNS / "failed")], store=True,
                      store_dir=str(blocker / "store"))
    assert t.store is None and isinstance(t["runs"], pl.DataFrame) and t["runs"].height
    assert "loading in memory" in capsys.readouterr().err


def test_empty_folder_opens_no_store(tmp_path):
    (tmp_path / "empty").mkdir()
    t = R.load_tables([str(tmp_path / "empty")], store=True, store_dir=str(tmp_path / "s"))
    assert t["runs"] is not None and t["runs"].height == 0 and not Path(tmp_path / "s").exists()
