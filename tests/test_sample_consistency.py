"""Sample runs must not contradict the runner rules they illustrate (§10)."""

from __future__ import annotations

import polars as pl
import pytest

from rivumi_analysis import runs_df, states_df
from rivumi_analysis.read.snapshot import load_fleet

from .conftest import SAMPLE_RUNS


@pytest.fixture(scope="module")
def fleet():
    return load_fleet(str(SAMPLE_RUNS))


def test_wall_time_failures_are_at_or_over_their_budget(fleet):
    """§10.3: ``wall_time_exceeded`` means charged time reached ``wall_time_seconds``."""
    r = runs_df(fleet).filter(pl.col("terminal_reason") == "wall_time_exceeded")
    assert r.height >= 3
    under = r.filter(pl.col("active_wall_time_seconds") < pl.col("wall_time_seconds"))
    assert under.height == 0, under.select("run_dir", "active_wall_time_seconds",
                                           "wall_time_seconds")


def test_repeat_count_at_threshold_only_in_repeated_action_runs(fleet):
    """§10.1: the third identical call in a row fails the run with ``repeated_action``."""
    s = states_df(fleet)
    peak = s.group_by("run_dir").agg(pl.col("repeat_count").max().alias("peak"))
    r = runs_df(fleet).select("run_dir", "terminal_reason").join(peak, on="run_dir")
    tripped = r.filter(pl.col("peak") >= 3)
    assert tripped.height >= 2
    assert set(tripped["terminal_reason"].to_list()) == {"repeated_action"}, tripped
    assert (r.filter(pl.col("terminal_reason") == "repeated_action")["peak"] >= 3).all()
