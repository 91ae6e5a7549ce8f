"""Fleet-question chart builders: golden tests of the data they aggregate (not of pixels)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from rivumi_analysis.viz import charts as C
from rivumi_analysis.viz.report import load_tables

from .conftest import SAMPLE_RUNS
from .test_charts import _values


@pytest.fixture(scope="module")
def tables():
    return load_tables([str(SAMPLE_RUNS)])


def _datasets(spec) -> list[list[dict]]:
    return [_values(spec)]


def test_outcomes_of_the_sample_runs(tables):
    # from the log (tables.facts): crashes/c97a0b68 (killed before run.completed was
    # appended) and crashes/cd525421 (a continuation killed after session.continued) are
    # crashed, as sample_runs/README.md says they were; external runs end as result.json says
    # (one verified, one no_changes, two failed with external reasons)
    got = dict(C.outcomes(tables["runs"]).group_by("outcome").len().iter_rows())
    assert got == {
        "completed: verified": 49, "completed: no_changes": 9,
        "cancelled": 4, "failed: wall_time_exceeded": 3, "failed: max_steps_exceeded": 4,
        "failed: token_budget_exceeded": 3, "failed: repeated_action": 2,
        "failed: provider": 3, "failed: other": 2, "crashed": 14, "fork_not_run": 3}
    assert sum(got.values()) == tables["runs"].height


def test_outcome_mix_counts_every_run_per_day(tables):
    spec = C.outcome_mix(tables["runs"]).to_dict()
    rows = [r for ds in _datasets(spec) for r in ds if "day" in r]
    dated = tables["runs"].filter(pl.col("started_at").is_not_null()).height
    assert sum(r["runs"] for r in rows) == dated
    legend = spec["vconcat"][0]["encoding"]["color"]["legend"]
    assert legend["symbolLimit"] == 0  # never truncated


def test_tool_error_table_golden(tables):
    g, cut, n = C.tool_error_table(tables["tool_calls"])
    # one per call in the logs: the session that calls everything call_0 counts 7 (truth.jsonl)
    assert (cut, n) == (0, 327)
    assert g.select("name", "calls", "not_ok", "errors", "denied").rows() == [
        ("save_memory", 2, 2, 0, 0), ("run_check", 5, 2, 1, 0), ("shell", 34, 12, 11, 0),
        ("replace_text", 67, 7, 0, 2), ("list_files", 69, 2, 1, 0), ("read_file", 129, 1, 0, 0),
        ("dispatch_subagents", 3, 0, 0, 0), ("search_text", 18, 0, 0, 0)]
    g2, cut2, _ = C.tool_error_table(tables["tool_calls"], max_tools=3)
    assert g2.height == 3 and cut2 == 5  # the cut is reported, not silent
    spec = C.tool_error_rates(tables["tool_calls"], max_tools=3).to_dict()
    assert "5 rarely used tool(s) not shown" in spec["title"]["subtitle"]


def test_cost_by_model_states_unknown_share_and_sums_tokens(tables):
    u = tables["usage"]
    spec = C.cost_by_model(runs=tables["runs"], usage=u).to_dict()
    sub = spec["vconcat"][0]["hconcat"][0]["title"]["subtitle"]
    assert sub[0] == "41 of 401 usage rows (10.2%) have no cost estimate:"
    per_model = {r["model"]: r["tokens"] for ds in _datasets(spec) for r in ds
                 if "rows_cost_unknown" in r}
    assert per_model == {"claude-haiku-4-5": 5633, "claude-sonnet-4-5": 161725,
                         "gemini-2.5-flash": 205010, "gpt-5-mini": 113222,
                         "openai/gpt-oss-120b": 149032}
    known = {r["model"]: r["cost"] for ds in _datasets(spec) for r in ds
             if "rows_cost_unknown" in r}
    expect = dict(u.group_by("model").agg(pl.col("total_cost").sum()).iter_rows())
    assert known == pytest.approx(expect)


def test_task_kinds_success_rate():
    runs = pl.DataFrame({"run_dir": list("abcde"), "repository": ["/src/x"] * 3 + ["/src/y"] * 2,
                         "outcome": ["completed", "failed", "crashed", "completed", "completed"],
                         "terminal_reason": ["verified", "repeated_action", None, "no_changes",
                                             "verified"], "kind": ["native"] * 5})
    usage = pl.DataFrame({"run_dir": ["a", "a", "d"], "total_cost": [1.0, None, 3.0]})
    spec = C.task_kinds(runs=runs, usage=usage).to_dict()
    rows = {r["group"]: r for ds in _datasets(spec) for r in ds}
    assert rows["x"]["success_rate"] == 0.5  # the crashed run is not finished
    assert (rows["x"]["runs"], rows["x"]["finished"]) == (3, 2)
    assert rows["y"]["success_rate"] == 1.0 and rows["y"]["median_cost"] == 3.0


def test_top_runs_readable_labels_full_id_in_tooltip():
    t0 = datetime(2026, 8, 3, 9, tzinfo=UTC)
    runs = pl.DataFrame({"run_dir": [f"/abs/r{i}" for i in range(30)],
                         "run_id": [f"{i:032x}" for i in range(30)],
                         "terminal_reason": ["verified"] * 30, "outcome": ["completed"] * 30,
                         "started_at": [t0 + timedelta(minutes=i) for i in range(30)],
                         "wall_time_used_seconds": [float(i) for i in range(30)]})
    spec = C.top_runs(runs=runs, n=5).to_dict()
    bars = [r for ds in _datasets(spec) for r in ds if "wall_s" in r]
    assert [r["wall_s"] for r in bars] == [29.0, 28.0, 27.0, 26.0, 25.0]
    assert bars[0]["run"] == "verified · 08-03 09:29" and len(bars[0]["run_id"]) == 32
    assert "/abs/" not in str(spec)


def test_timeline_order_matches_subtitle_and_gaps_collapse():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    runs = pl.DataFrame({"run_dir": ["ok", "bad"], "run_id": ["ok", "bad"],
                         "verdict": ["terminal", "corrupt"], "terminal_reason": ["verified", None],
                         "started_at": [t0, t0]})
    mc = pl.DataFrame({"run_dir": ["ok", "ok", "bad"], "run_id": ["ok", "ok", "bad"],
                       "step": [1, 2, 1], "requested_sequence": [1, 5, 1],
                       "requested_at": [t0, t0 + timedelta(seconds=5000), t0],
                       "completed_at": [t0 + timedelta(seconds=2),
                                        t0 + timedelta(seconds=5003), t0 + timedelta(seconds=1)],
                       "outcome": ["completed"] * 3})
    ev = pl.DataFrame({"run_dir": ["ok", "ok"], "sequence": [3, 4],
                       "event_type": ["model.completed", "session.resumed"],
                       "created_at": [t0 + timedelta(seconds=2), t0 + timedelta(seconds=5000)]})
    spec = C.step_timeline(runs=runs, model_calls=mc, events=ev).to_dict()
    main = spec["vconcat"][0]
    assert "most notable first" in main["title"]["subtitle"]
    assert main["layer"][0]["encoding"]["y"]["sort"][0].startswith("unfinished")  # corrupt first
    seg = [r for ds in _datasets(spec) for r in ds]
    assert max(r["end_s"] for r in seg) == pytest.approx(35.0)  # 2 + 30 (gap) + 3
    assert "1 long resume gap(s) collapsed" in main["title"]["subtitle"]
    over = spec["vconcat"][1]["encoding"]["x"]["scale"]["domain"]
    assert over == [0, pytest.approx(35.0)]  # the zoom strip spans the same domain
    wall = C.step_timeline(runs=runs, model_calls=mc, events=ev, collapse_gaps=None).to_dict()
    assert max(r["end_s"] for ds in _datasets(wall) for r in ds) == pytest.approx(5003.0)


def test_token_budget_uses_fractions_when_budgets_differ():
    runs = pl.DataFrame({"run_dir": ["a", "b"], "run_id": ["a", "b"],
                         "max_total_tokens": [200_000, 5_000_000],
                         "total_tokens": [100_000, 1_000_000]})
    mc = pl.DataFrame({"run_dir": ["a", "b"], "requested_sequence": [1, 1],
                       "completed_sequence": [2, 2], "total_tokens": [100_000, 1_000_000]})
    spec = C.token_budget(runs=runs, model_calls=mc).to_dict()
    left = spec["vconcat"][0]["hconcat"][0]
    assert left["layer"][0]["encoding"]["y"]["axis"]["format"] == "%"
    ys = sorted(r["y"] for r in _values(left) if "event_type" in r and "y" in r)
    assert ys == [0.2, 0.5]  # 1M of 5M, 100k of 200k
    same = runs.with_columns(pl.lit(500_000).alias("max_total_tokens"))
    spec2 = C.token_budget(runs=same, model_calls=mc).to_dict()
    assert spec2["vconcat"][0]["hconcat"][0]["layer"][0]["encoding"]["y"]["title"] == (
        "cumulative total tokens")


def test_wall_time_ecdf_covers_every_run_with_a_budget(tables):
    """The ECDF panel draws every run with a budget (51 quantiles per outcome group); the
    wall_time_exceeded runs sit at their budget."""
    runs = tables["runs"]
    spec = C.wall_time_budget(runs=runs, states=tables["states"],
                              approvals=tables["approvals"]).to_dict()
    rows = [r for r in _values(spec) if "share" in r and "group" in r]
    groups = {r["group"]: r["runs"] for r in rows}
    # charged time from session.json, else from the replayed clock (a run without manifest)
    replayed = tables["states"].filter(pl.col("charged_wall_seconds").is_not_null())["run_dir"]
    with_budget = runs.filter((pl.col("wall_time_seconds") > 0)
                              & (pl.col("active_wall_time_seconds").is_not_null()
                                 | pl.col("run_dir").is_in(replayed.unique().implode())))
    assert sum(groups.values()) == with_budget.height
    assert groups["failed: wall_time_exceeded"] == 3
    top = [r for r in rows if r["group"] == "failed: wall_time_exceeded" and r["share"] == 1.0]
    assert len(top) == 1 and 1.0 <= top[0]["value"] < 1.01
    assert all(len([r for r in rows if r["group"] == g]) == 51 for g in groups)


def test_ecdf_points_are_the_lower_quantiles():
    f = pl.DataFrame({"g": ["a"] * 10 + ["b"], "v": [float(i) for i in range(10)] + [5.0]})
    e = C.ecdf_points(f, "v", "g", points=11)
    a = e.filter(pl.col("group") == "a")
    assert a["value"].to_list() == [0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    assert e.filter(pl.col("group") == "b")["value"].unique().to_list() == [5.0]


def test_token_chart_picks_runs_over_their_budget_first(tables):
    runs = tables["runs"]
    spec = C.token_budget(runs=runs, states=tables["states"], events=tables["events"],
                          max_runs=3).to_dict()
    drawn = {r["run_id"] for r in _values(spec["vconcat"][0]["hconcat"][0]) if "sequence" in r}
    over = set(runs.filter(pl.col("terminal_reason") == "token_budget_exceeded")["run_id"])
    assert len(over) == 3 and drawn == over


def test_fleet_scatter_points_carry_their_wall_time_bin(tables):
    """Clicking a wall-time bin picks its runs in the scatter: each point's bin ``b`` is the
    histogram bin that counts it."""
    spec = C.fleet_overview(tables["runs"]).to_dict()
    rows = _values(spec)
    pts = [r for r in rows if "total_tokens" in r and "b" in r]
    bins = {(r["b"], r["verdict"]): r for r in rows if "from_s" in r}
    assert pts and bins
    for p in pts:
        if p["wall_s"] is None:
            continue
        h = bins[(p["b"], p["verdict"])]
        assert h["from_s"] - 0.01 <= p["wall_s"] <= h["to_s"] + 0.01
    assert sum(r["runs"] for r in bins.values()) == tables["runs"].filter(
        pl.col("wall_time_used_seconds").is_not_null()).height
    params = {p["name"] for p in spec.get("params", [])}
    assert {"wall_bin", "verdict_pick"} <= params or "wall_bin" in str(spec)


def test_token_chart_marks_the_final_total_of_each_drawn_run(tables):
    """The replayed line of a token_budget_exceeded run stops short of its budget (the
    crossing call has no model.completed); the ▲ at its end is the session.json total."""
    runs = tables["runs"]
    spec = C.token_budget(runs=runs, states=tables["states"], events=tables["events"],
                          max_runs=3).to_dict()
    left = spec["vconcat"][0]["hconcat"][0]
    rows = _values(left)
    ends = {r["run_id"]: r for r in rows if "total_tokens" in r and "y" in r}
    over = runs.filter(pl.col("terminal_reason") == "token_budget_exceeded")
    assert set(ends) == set(over["run_id"])
    frac = left["layer"][0]["encoding"]["y"].get("axis", {}).get("format") == "%"
    for row in over.iter_rows(named=True):
        end = ends[row["run_id"]]
        want = (round(row["total_tokens"] / row["max_total_tokens"], 5) if frac
                else float(row["total_tokens"]))
        assert end["y"] == want and row["total_tokens"] > row["max_total_tokens"]
        line = [r["y"] for r in rows if r.get("run_id") == row["run_id"] and "event_type" in r]
        assert line and max(line) < end["y"]
