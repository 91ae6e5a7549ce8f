"""Quantile bands of the burn-down charts: golden tests of the aggregated data."""

from __future__ import annotations

import polars as pl
import pytest

from rivumi_analysis.viz import charts as C
from rivumi_analysis.viz.report import load_tables

from .conftest import SAMPLE_RUNS
from .test_charts import _values


@pytest.fixture(scope="module")
def tables():
    return load_tables([str(SAMPLE_RUNS)])


def test_quantile_bands_step_functions_and_counts():
    # a: 0 → 1 at x=0.5; b: 0 → 4 at x=1.0; c starts late (x=0.5) at 2
    d = pl.DataFrame({"run_dir": ["a", "a", "b", "b", "c"],
                      "x": [0.0, 0.5, 0.0, 1.0, 0.5], "y": [0.0, 1.0, 0.0, 4.0, 2.0]})
    b = C.quantile_bands(d, "x", "y", bins=4, quantiles=(0.0, 0.5, 1.0))
    assert b.columns == ["x", "runs", "q0", "q50", "q100"]
    assert b["x"].to_list() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert b["runs"].to_list() == [2, 2, 3, 3, 3]  # c counts from its first row on
    assert b["q50"].to_list() == [0.0, 0.0, 1.0, 1.0, 2.0]  # a held at 1, b at 0 until 1.0
    assert b["q100"].to_list() == [0.0, 0.0, 2.0, 2.0, 4.0]
    # a row between two points counts at the next point (its value is reached by then)
    e = C.quantile_bands(pl.DataFrame({"run_dir": ["a"], "x": [0.3], "y": [5.0]}), "x", "y",
                         bins=2, quantiles=(0.5,))
    assert e.rows() == [(0.5, 1, 5.0), (1.0, 1, 5.0)]
    assert C.quantile_bands(d.clear(), "x", "y").height == 0


def test_dodge_keeps_order_and_gap():
    ys = [1.0, 1.0, 1.0, 0.98, 0.2, 0.5]
    out = C.dodge(ys, 0.05)
    order = sorted(range(len(ys)), key=lambda i: (ys[i], i))
    placed = [out[i] for i in order]
    assert all(b - a >= 0.05 - 1e-9 for a, b in zip(placed, placed[1:], strict=False))
    assert out[4] == 0.2 and out[5] == 0.5  # alone: where they are
    crowd = [out[i] for i in (3, 0, 1, 2)]
    assert abs(sum(crowd) / 4 - sum(ys[i] for i in (3, 0, 1, 2)) / 4) < 1e-9  # centred


def _band_rows(spec, field="q50"):
    return sorted((r for r in _values(spec) if field in r and "runs" in r),
                  key=lambda r: r["x"])


def test_wall_burn_bands_golden_on_the_sample_runs(tables):
    runs = tables["runs"].with_columns(
        pl.col("wall_time_seconds").fill_null(900.0))
    spec = C.wall_time_budget(runs=runs, states=tables["states"], max_lines=4).to_dict()
    burn = spec["vconcat"][-1]
    rows = _band_rows(burn)
    assert len(rows) == 51 and rows[0]["x"] == 0 and rows[-1]["x"] == 1
    # independently: each run's final charged / budget (over 150 % drawn at 150 %)
    st = tables["states"].filter(pl.col("charged_wall_seconds").is_not_null()
                                 & pl.col("wall_elapsed_seconds").is_not_null())
    fin = (st.group_by("run_dir", maintain_order=True).agg(
        pl.col("charged_wall_seconds").last(), pl.col("wall_elapsed_seconds").max().alias("e"))
        .filter(pl.col("e") > 0)
        .join(runs.select("run_dir", "wall_time_seconds"), on="run_dir")
        .filter(pl.col("wall_time_seconds") > 0)
        .select((pl.col("charged_wall_seconds") / pl.col("wall_time_seconds")).alias("f")))
    assert rows[-1]["runs"] == fin.height > 20
    for q in (10, 50, 90):
        want = min(fin["f"].quantile(q / 100, interpolation="linear"), 1.5)
        assert rows[-1][f"q{q}"] == pytest.approx(want, abs=1e-5)
    assert all(a["q50"] <= b["q50"] + 1e-9 for a, b in zip(rows, rows[1:], strict=False))
    # drawn: the runs over budget first (at most half), labelled with readable labels
    labels = [r for r in _values(burn) if "label_y" in r]
    assert len(labels) == 4 and len({r["run_id"] for r in labels}) == 4
    assert all(len(r["run"]) < 40 and r["run"] != r["run_id"] for r in labels)
    # they are the runs that matter for a budget: every one at or above the fleet's p90 end
    assert min(r["y"] for r in labels) >= rows[-1]["q90"] - 1e-5
    assert max(r["y"] for r in labels) == pytest.approx(min(fin["f"].max(), 1.5), abs=1e-4)


def test_token_burn_bands_end_at_the_session_totals(tables):
    runs = tables["runs"]
    spec = C.token_budget(runs=runs, states=tables["states"], events=tables["events"],
                          max_lines=3).to_dict()
    burn = spec["vconcat"][-1]
    rows = _band_rows(burn)
    fin = (runs.filter((pl.col("max_total_tokens") > 0) & pl.col("total_tokens").is_not_null())
           .join(tables["states"].select("run_dir").unique(), on="run_dir", how="semi")
           .select((pl.col("total_tokens") / pl.col("max_total_tokens")).alias("f")))
    assert rows[-1]["runs"] == fin.height > 0
    assert rows[-1]["q90"] == pytest.approx(
        min(fin["f"].quantile(0.9, interpolation="linear"), 1.5), abs=1e-5)
    labels = {r["run_id"] for r in _values(burn) if "label_y" in r}
    over = set(runs.filter(pl.col("terminal_reason") == "token_budget_exceeded")["run_id"])
    assert len(labels) == 3 and len(labels & over) >= 1
    assert "focus_run" in [p["name"] for p in spec["params"]]


def test_step_burn_bands_under_the_timeline(tables):
    runs, states = tables["runs"], tables["states"]
    spec = C.step_timeline(runs=runs, model_calls=tables["model_calls"],
                           tool_calls=tables["tool_calls"], events=tables["events"],
                           states=states, max_lines=4).to_dict()
    burn = spec["vconcat"][-1]
    rows = _band_rows(burn)
    st = states.filter(pl.col("step").is_not_null() & pl.col("wall_elapsed_seconds").is_not_null())
    fin = (st.group_by("run_dir").agg(pl.col("step").max(),
                                      pl.col("wall_elapsed_seconds").max().alias("e"))
           .filter(pl.col("e") > 0)
           .join(runs.filter(pl.col("max_steps") > 0).select("run_dir", "max_steps"),
                 on="run_dir")
           .select((pl.col("step") / pl.col("max_steps")).alias("f")))
    assert rows[-1]["runs"] == fin.height > 20
    assert rows[-1]["q50"] == pytest.approx(fin["f"].quantile(0.5, interpolation="linear"),
                                            abs=1e-5)
    labels = {r["run_id"] for r in _values(burn) if "label_y" in r}
    hit = set(runs.filter(pl.col("terminal_reason") == "max_steps_exceeded")["run_id"])
    assert len(labels) == 4 and len(labels & hit) == min(len(hit), 2)
    assert "focus_run" in [p["name"] for p in spec["params"]]
