"""Chart builders, tested through ``chart.to_dict()`` (fields, encodings, transforms, caps)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from rivumi_analysis.viz import charts as C

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EXAMPLE = "tests/fixtures/example"


def _walk(d):
    if isinstance(d, dict):
        yield d
        for v in d.values():
            yield from _walk(v)
    elif isinstance(d, list):
        for v in d:
            yield from _walk(v)


def _fields(spec) -> set[str]:
    return {node["field"] for node in _walk(spec) if isinstance(node.get("field"), str)}


def _values(spec, datasets=None) -> list[dict]:
    """Rows of every inline dataset referenced below ``spec`` (altair hoists them)."""
    datasets = datasets if datasets is not None else spec.get("datasets", {})
    rows = [row for node in _walk(spec) if isinstance(node.get("values"), list)
            for row in node["values"]]
    names = {node["name"] for node in _walk(spec)
             if isinstance(node.get("name"), str) and node["name"] in datasets}
    return rows + [row for n in names for row in datasets[n]]


def _runs(n: int) -> pl.DataFrame:
    return pl.DataFrame({
        "run_dir": [f"/abs/root/r{i:04d}" for i in range(n)],
        "run_id": [f"{i:032x}" for i in range(n)],
        "kind": ["native"] * n,
        "verdict": ["corrupt" if i % 50 == 0 else "terminal" for i in range(n)],
        "terminal_reason": ["wall_time_exceeded" if i % 7 == 0 else "verified"
                            for i in range(n)],
        "step": [i % 9 for i in range(n)], "total_tokens": [1000 + i for i in range(n)],
        "active_wall_time_seconds": [float(10 + (7 * i) % 200) for i in range(n)],
        "wall_time_seconds": [150.0] * n, "max_total_tokens": [1500] * n,
        "last_sequence": [20] * n,
    })


@pytest.fixture(scope="module")
def tables():
    from rivumi_analysis.viz.report import load_tables

    return load_tables([EXAMPLE])


def test_fleet_overview_fields_and_selection():
    spec = C.fleet_overview(_runs(30)).to_dict()
    assert {"verdict", "kind", "terminal_reason", "step", "total_tokens", "wall_s"} <= _fields(spec)
    params = [p for node in _walk(spec) for p in node.get("params", [])]
    assert any(p.get("bind") == "legend" for p in params)
    tips = [t for node in _walk(spec) for t in (node.get("tooltip") or [])
            if isinstance(node.get("tooltip"), list)]
    assert any(t.get("field") == "run_id" for t in tips)
    assert "/abs/root" not in json.dumps(spec)  # run_dir never reaches a chart


@pytest.mark.slow
def test_fleet_overview_scales_to_many_runs():
    spec = C.fleet_overview(_runs(5000)).to_dict()
    assert len(json.dumps(spec)) < 1_000_000
    counted = sum(r["runs"] for r in _values(spec) if "runs" in r and "kind" in r)
    assert counted == 5000  # bars aggregate every run


def test_step_timeline_lanes_brush_and_tooltip(tables):
    chart = C.step_timeline(runs=tables["runs"], model_calls=tables["model_calls"],
                            tool_calls=tables["tool_calls"], approvals=tables["approvals"],
                            verifications=tables["verifications"], events=tables["events"])
    spec = chart.to_dict()
    lanes = {r["lane"] for r in _values(spec)}
    assert {"model", "tool", "approval", "verification"} <= lanes
    assert {"start_s", "end_s", "series", "outcome", "seq", "run_id"} <= _fields(spec)
    effects = {r["series"] for r in _values(spec) if r["lane"] == "tool"}
    assert effects <= {f"tool: {e}" for e in C.EFFECT_COLORS}
    # a single run: no brush strip; many runs: x brush on an overview
    assert "vconcat" not in spec


def test_step_timeline_many_runs_brush_and_cap():
    n = 120
    rows = []
    for i in range(n):
        for s in range(3):
            rows.append({"run_dir": f"r{i}", "run_id": f"id{i}", "step": s + 1,
                         "requested_sequence": 3 * s, "outcome": "completed",
                         "requested_at": T0 + timedelta(seconds=10 * s),
                         "completed_at": T0 + timedelta(seconds=10 * s + 4)})
    mc = pl.DataFrame(rows)
    spec = C.step_timeline(model_calls=mc, max_runs=25).to_dict()
    assert "vconcat" in spec
    params = [p for node in _walk(spec) for p in node.get("params", [])]
    assert any(p.get("name") == "zoom" and p["select"]["type"] == "interval" for p in params)
    assert len({r["run"] for r in _values(spec)}) == 25
    assert "25 of 120 runs" in json.dumps(spec)


def test_repeat_guard_threshold_trips_and_fallback(tables):
    s = pl.DataFrame({"run_dir": ["a"] * 4 + ["b"] * 2, "run_id": ["a"] * 4 + ["b"] * 2,
                      "sequence": [1, 2, 3, 4, 1, 2],
                      "event_type": ["tool.requested"] * 3 + ["run.failed"]
                      + ["tool.requested"] * 2,
                      "terminal_reason": [None, None, None, "repeated_action", None, None],
                      "repeat_count": [1, 1, 2, 3, 1, 2]})
    spec = C.repeat_guard(states=s).to_dict()
    statuses = {(r.get("run_id"), r.get("status")) for r in _values(spec) if "call" in r}
    assert ("a", "trip") in statuses and ("b", "near miss") in statuses
    # one row per run, one cell per call coloured by its count (rows never overlap)
    grid = spec["hconcat"][0]
    assert grid["mark"]["type"] == "rect" and grid["encoding"]["y"]["field"] == "run"
    assert grid["encoding"]["color"]["scale"]["domain"] == ["1", "2", "3"]
    trip = [r for r in _values(spec) if r.get("status") == "trip" and "pos" in r]
    assert [(r["run_id"], r["count"], r["pos"]) for r in trip] == [("a", "3", 0)]
    dist = {r["peak"]: r["runs"] for r in _values(spec) if "peak" in r}
    assert dist == {3: 1, 2: 1}
    # events fallback (fingerprints rebuilt from tool.requested) on the real example run
    spec2 = C.repeat_guard(events=tables["events"]).to_dict()
    assert any("repeat_count" in r for r in _values(spec2))


def test_wall_time_budget_exceeded_and_shading(tables):
    spec = C.wall_time_budget(runs=_runs(60)).to_dict()
    vals = _values(spec)
    assert {"from_frac", "to_frac", "part"} <= _fields(spec)
    assert any(r.get("exceeded") for r in vals)
    assert "of 60 exceeded" in json.dumps(spec)
    # a third of the rows for runs over budget, the rest the closest runs within it
    r = pl.DataFrame({"run_dir": [f"r{i:02d}" for i in range(30)],
                      "run_id": [f"r{i:02d}" for i in range(30)],
                      "wall_time_seconds": [100.0] * 30,
                      "active_wall_time_seconds": [100.0 + i if i < 15 else float(i)
                                                   for i in range(30)]})
    d = C.wall_time_budget(runs=r, max_runs=12).to_dict()
    drawn = {v["run_id"] for v in _values(d) if "part" in v}
    # r00 is at exactly 100 %: not exceeded (charged > budget), the closest of the rest
    assert drawn == {f"r{i:02d}" for i in (*range(11, 15), 0, *range(23, 30))}
    assert "(14 of 30 exceeded)" in json.dumps(d)
    runs = tables["runs"].with_columns(pl.lit(900.0).alias("wall_time_seconds"))
    spec2 = C.wall_time_budget(runs=runs, states=tables["states"]).to_dict()
    assert "vconcat" in spec2  # burn-down panel when states_df is present
    assert {"q10", "q25", "q50", "q75", "q90", "x", "y", "label_y"} <= _fields(spec2)
    assert [p["name"] for p in spec2["params"]] == ["focus_run"]


def test_token_budget_compaction_and_budget_rule():
    runs = pl.DataFrame({"run_dir": ["a"], "run_id": ["a"], "max_total_tokens": [100],
                         "total_tokens": [130], "verdict": ["terminal"],
                         "terminal_reason": ["token_budget_exceeded"]})
    st = pl.DataFrame({"run_dir": ["a"] * 4, "sequence": [0, 1, 2, 3],
                       "event_type": ["run.created", "model.completed",
                                      "context_pressure.summary_fallback_applied",
                                      "run.failed"], "total_tokens": [0, 60, 60, 130]})
    ev = st.select("run_dir", "sequence", "event_type")
    spec = C.token_budget(runs=runs, states=st, events=ev).to_dict()
    layers = spec["vconcat"][0]["hconcat"][0]["layer"]
    # line, budget rule, ▲ final session.json total, ◆ compaction
    assert [ly["mark"]["type"] for ly in layers] == ["line", "rule", "point", "point"]
    assert layers[1]["encoding"]["y"]["field"] == "budget"
    assert [(r["sequence"], r["y"]) for r in _values(layers[2], spec.get("datasets", {}))
            ] == [(3, 130.0)]
    assert any(r.get("sequence") == 2 and r.get("tokens") == 60
               for r in _values(layers[3], spec.get("datasets", {})))


def test_fork_points_links_and_safe_points(tables):
    runs = pl.DataFrame({"run_dir": ["s", "f", "x"], "run_id": ["s", "fork-1", "x"],
                         "kind": ["native", "fork", "native"],
                         "verdict": ["terminal", "not_resumable", "resumable"],
                         "terminal_reason": ["verified", None, None],
                         "outcome": ["completed", "fork_not_run", "crashed"],
                         "terminal": [True, False, False], "last_sequence": [40, 0, 9]})
    forks = pl.DataFrame({
        "row_kind": ["fork_link", "candidate", "candidate"], "run_dir": ["f", "x", "x"],
        "run_id": ["fork-1", "x", "x"], "sequence": [0, 3, 7], "source_run_dir": ["s", None, None],
        "fork_point_sequence": [12, None, None], "last_safe_before": [None, None, "crash"]})
    spec = C.fork_points(runs=runs, forks=forks).to_dict()
    marks = [ly["mark"]["type"] for ly in spec["layer"]]
    assert marks[:2] == ["rule", "tick"] and "point" in marks
    link = [ly for ly in spec["layer"] if "y2" in ly["encoding"]]
    assert link and link[0]["encoding"]["x"]["field"] == "fork_point_sequence"
    order = spec["layer"][0]["encoding"]["y"]["scale"]["domain"]
    label = dict(C.run_labels(runs).select("run_id", "run").iter_rows())
    # a short id, then what the run was (readable, and runs of one kind still differ)
    assert label["fork-1"] == "fork-1 fork" and label["s"] == "s verified"
    assert order.index(label["fork-1"]) == order.index(label["s"]) + 1  # fork below source
    assert any(r.get("last_safe_before") == "crash" for r in _values(spec))
    # real tables (forks_df when present) still build
    C.fork_points(runs=tables["runs"], forks=tables["forks"], events=tables["events"],
                  states=tables["states"]).to_dict()


def test_empty_inputs_give_placeholders():
    empty = pl.DataFrame(schema={"run_dir": pl.Utf8, "run_id": pl.Utf8, "verdict": pl.Utf8})
    for chart in (C.step_timeline(), C.repeat_guard(), C.wall_time_budget(runs=empty),
                  C.fork_points(runs=empty)):
        assert chart.to_dict()


def test_run_labels_unique():
    f = pl.DataFrame({"run_dir": ["p1/sub/a", "p2/sub/a"], "run_id": ["doc-reader-1"] * 2})
    assert C.run_labels(f)["run"].n_unique() == 2
