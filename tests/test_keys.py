"""Keys and joins: run_dir is the unique run key (absolute, one value however the path was
typed; a subagent's includes its parent), every table carries it and joins to runs_df without
loss, and each table's documented key is unique."""

from __future__ import annotations

import os
from typing import Any

import polars as pl
import pytest

import rivumi_analysis as ra
from rivumi_analysis.dictionary import TABLES
from tests.conftest import ROOT, SAMPLE_RUNS

RUN_TABLES = [name for name in TABLES if not name.startswith("relay_")]


@pytest.fixture(scope="module")
def tables() -> dict[str, pl.DataFrame]:
    fleet = ra.load_fleet(str(SAMPLE_RUNS))
    out: dict[str, Any] = {}
    for name in RUN_TABLES:
        out[name] = getattr(ra, f"{name}_df")(fleet)
    return out


def test_run_key_is_unique_and_absolute(tables: dict[str, pl.DataFrame]) -> None:
    runs = tables["runs"]
    assert runs["run_dir"].is_unique().all()
    assert runs["run_dir"].map_elements(os.path.isabs, return_dtype=pl.Boolean).all()
    assert not runs["run_id"].drop_nulls().is_unique().all()  # why run_id is not the key
    subs = runs.filter(pl.col("kind") == "subagent")
    assert subs.height > 0
    assert all(rd.startswith(parent + "/subagents/")
               for rd, parent in subs.select("run_dir", "parent_run_dir").iter_rows())
    assert all(rd.endswith("/" + path) for rd, path in runs.select("run_dir", "run_path")
               .iter_rows())
    assert set(runs.filter(pl.col("kind") == "subagent")["run_path"].str.count_matches(
        "/subagents/").to_list()) == {1}


def test_same_run_typed_two_ways_has_one_run_dir(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    run = "sample_runs/completed/b7423824b1fa434fb77cea7738a4d5e2"
    seen = {ra.runs_df(p)["run_dir"].item() for p in
            (run, "./" + run + "/", str(ROOT / run), "sample_runs/completed/../completed/"
             "b7423824b1fa434fb77cea7738a4d5e2")}
    assert seen == {str((ROOT / run).resolve())}
    assert ra.runs_df(run)["run_path"].item() == "b7423824b1fa434fb77cea7738a4d5e2"
    both = ra.runs_df(["sample_runs/completed", "./sample_runs/completed/"])
    assert both["run_dir"].is_unique().all()  # read once, not twice


@pytest.mark.parametrize("name", [n for n in RUN_TABLES if n != "runs"])
def test_every_child_table_joins_runs_without_loss(tables: dict[str, pl.DataFrame],
                                                   name: str) -> None:
    df = tables[name]
    assert "run_dir" in df.columns
    lost = df.join(tables["runs"], on="run_dir", how="anti")
    assert lost.is_empty(), lost.head()
    if "run_id" in df.columns:  # and the run_id it carries is the run's
        j = df.join(tables["runs"].select("run_dir", "run_id"), on="run_dir", suffix="_r")
        assert (j["run_id"].eq_missing(j["run_id_r"])).all()


@pytest.mark.parametrize("name", RUN_TABLES)
def test_documented_key_is_unique(tables: dict[str, pl.DataFrame], name: str) -> None:
    df = tables[name]
    assert df.height > 0, name
    key = list(TABLES[name].key)
    assert not df.select(key).is_duplicated().any(), (name, key)
