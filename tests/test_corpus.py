"""The benchmark corpus is analysable: drawn budgets and endings that obey the runner rules."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from rivumi_analysis import quarantine_df, runs_df, states_df
from rivumi_analysis.read.snapshot import load_fleet
from rivumi_analysis.synth.corpus import generate_corpus

pytestmark = pytest.mark.corpus


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus") / "c"
    generate_corpus(str(out), runs=240, target_mb=8, workers=1, seed=3)
    return load_fleet(str(out))


@pytest.fixture(scope="module")
def runs(fleet):
    return runs_df(fleet)


def test_endings_and_kinds_are_mixed(runs, fleet):
    reasons = set(runs["terminal_reason"].drop_nulls().to_list())
    assert {"verified", "no_changes", "wall_time_exceeded", "max_steps_exceeded",
            "repeated_action", "token_budget_exceeded"} <= reasons
    assert runs.filter(pl.col("kind") == "fork").height >= 3
    assert runs.filter(pl.col("terminal") != True).height >= 10  # noqa: E712 - crashed runs
    assert runs["wall_time_seconds"].n_unique() >= 4
    assert runs["max_total_tokens"].drop_nulls().n_unique() >= 3
    assert quarantine_df(fleet).filter(pl.col("reason") == "torn_tail").height >= 1


def test_wall_time_failures_at_their_budget_others_below(runs):
    r = runs.filter(pl.col("kind") == "native").with_columns(
        (pl.col("active_wall_time_seconds") / pl.col("wall_time_seconds")).alias("f"))
    wt = r.filter(pl.col("terminal_reason") == "wall_time_exceeded")
    assert wt.height and wt["f"].min() >= 1.0 and wt["f"].max() < 1.001
    others = r.filter(pl.col("terminal_reason") != "wall_time_exceeded")
    assert others["f"].max() < 1.0
    # realistic spread: not every run at the same point of its budget
    assert others["f"].quantile(0.9) > 3 * others["f"].quantile(0.1)


def test_token_budget_failures_cross_it_others_stay_within(runs):
    r = runs.filter(pl.col("max_total_tokens").is_not_null())
    tb = r.filter(pl.col("terminal_reason") == "token_budget_exceeded")
    assert tb.height and (tb["total_tokens"] > tb["max_total_tokens"]).all()
    rest = r.filter(pl.col("terminal_reason") != "token_budget_exceeded")
    assert (rest["total_tokens"] <= rest["max_total_tokens"]).all()


def test_repeat_trips_only_in_repeated_action_runs(fleet, runs):
    peak = states_df(fleet).group_by("run_dir").agg(pl.col("repeat_count").max().alias("p"))
    r = runs.join(peak, on="run_dir")
    assert set(r.filter(pl.col("p") >= 3)["terminal_reason"].to_list()) == {"repeated_action"}


def test_max_steps_failures_used_every_step(runs):
    ms = runs.filter(pl.col("terminal_reason") == "max_steps_exceeded")
    assert ms.height and (ms["step"] == ms["max_steps"]).all()
    assert (runs.filter(pl.col("terminal_reason") == "verified")["step"]
            < runs.filter(pl.col("terminal_reason") == "verified")["max_steps"]).all()


def test_generation_is_deterministic(tmp_path: Path):
    a = generate_corpus(str(tmp_path / "a"), runs=30, target_mb=1, workers=1, seed=5)
    b = generate_corpus(str(tmp_path / "b"), runs=30, target_mb=1, workers=1, seed=5)
    assert a == b
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        p.name for p in (tmp_path / "b").iterdir())
