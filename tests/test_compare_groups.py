"""``compare_groups`` and ``report --group-by``, the report's headline counts, the fleet
scatter's sample, and exit code 2 on an empty source from every command (issue 29)."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from rivumi_analysis.cli import main
from rivumi_analysis.synth.scenarios import get_script, run_script
from rivumi_analysis.tables.groups import compare_groups, wilson_interval

SCRIPTS = [("verified", 1), ("verified", 2), ("no_changes", 1), ("max_steps", 1),
           ("provider_failed", 1), ("lanes", 1), ("lanes", 2)]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("groups")
    for name, seed in SCRIPTS:
        run_script(get_script(name, seed), str(root))
    return root


def _wilson_by_brute_force(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson interval as the set of p whose score test does not reject: |k/n - p| <=
    z * sqrt(p(1-p)/n), found by bisection on each side (an independent oracle of the closed
    form)."""
    phat = k / n

    def inside(p: float) -> bool:
        return abs(phat - p) <= z * math.sqrt(p * (1 - p) / n) + 1e-15

    def edge(lo: float, hi: float) -> float:  # inside(lo) != inside(hi)
        for _ in range(80):
            mid = (lo + hi) / 2
            if inside(mid) == inside(lo):
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    low = 0.0 if inside(0.0) else edge(0.0, phat)
    high = 1.0 if inside(1.0) else edge(phat, 1.0)
    return low, high


@pytest.mark.parametrize("k,n", [(0, 5), (3, 7), (7, 7), (48, 63), (1, 1000)])
def test_wilson_interval_is_the_score_test_inversion(k: int, n: int) -> None:
    lo, hi = wilson_interval(k, n)
    blo, bhi = _wilson_by_brute_force(k, n)
    assert lo == pytest.approx(blo, abs=1e-9) and hi == pytest.approx(bhi, abs=1e-9)


def test_compare_groups_counts_and_rates_equal_what_was_written(fleet: Path) -> None:
    g = compare_groups(str(fleet), by="model")
    want: dict[str, dict[str, int]] = {}
    for name, seed in SCRIPTS:
        s = get_script(name, seed)
        model = next(o for o in s["ops"] if o["op"] == "create")["model"]
        status = [o for o in s["ops"] if o["op"] == "finish"][-1]["status"]
        w = want.setdefault(model, {"runs": 0, "completed": 0, "failed": 0})
        w["runs"] += 1
        w[status] += 1
    assert sorted(g["model_id"]) == sorted(want)
    for row in g.iter_rows(named=True):
        w = want[row["model_id"]]
        assert (row["runs"], row["completed"], row["failed"], row["ended"]) == (
            w["runs"], w["completed"], w["failed"], w["completed"] + w["failed"])
        assert row["success_rate"] == pytest.approx(w["completed"] / row["ended"])
        lo, hi = wilson_interval(w["completed"], row["ended"])
        assert (row["success_rate_low"], row["success_rate_high"]) == (lo, hi)
        assert row["tokens_known"] == row["runs"] and row["steps_known"] == row["runs"]
        assert 0.0 <= row["cost_known_share"] <= 1.0
    # the outcome counts of every group add up to its runs
    outcome_cols = ["completed", "failed", "cancelled", "interrupted", "crashed", "live",
                    "fork_not_run", "unreadable"]
    assert (g.select(pl.sum_horizontal(outcome_cols)).to_series() == g["runs"]).all()
    with pytest.raises(ValueError, match="by must be a runs_df column"):
        compare_groups(str(fleet), by="nope")


@pytest.mark.slow
def test_report_group_by_and_headline_counts(fleet: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(fleet), "--out", str(out), "--no-store",
                 "--group-by", "model"]) == 0
    html = out.read_text()
    assert 'id="sec-groups"' in html and "Groups by model_id" in html
    assert 'id="sec-facts"' in html and "wind_down_tokens" in html
    # the outcome cards add up to the runs card
    n = len(SCRIPTS)
    assert f"<b>{n}</b><span>runs</span>" in html
    completed = sum(1 for s in SCRIPTS if s[0] != "provider_failed" and s[0] != "max_steps")
    assert f"<b>{completed}</b><span>completed</span>" in html
    assert f"<b>{n - completed}</b><span>failed</span>" in html
    assert main(["report", str(fleet), "--out", str(out), "--group-by", "nope"]) == 2
    assert "not a runs_df column" in capsys.readouterr().err
    # --redact never shows a text column's values (model names): refused; codes are fine
    assert main(["report", str(fleet), "--out", str(out), "--redact", "--group-by",
                 "model"]) == 2
    assert "--redact drops" in capsys.readouterr().err
    assert main(["report", str(fleet), "--out", str(out), "--no-store", "--redact",
                 "--group-by", "outcome"]) == 0
    html = out.read_text()
    section = html[html.index('<section id="sec-groups">'):]
    section = section[:section.index("</section>")]
    assert "Groups by outcome" in section and "<td>completed</td>" in section
    for name, seed in SCRIPTS:
        model = next(o for o in get_script(name, seed)["ops"] if o["op"] == "create")["model"]
        assert model not in section


def test_fleet_scatter_samples_runs_with_values_and_says_what_it_left_out() -> None:
    from rivumi_analysis.viz.charts import fleet_overview

    runs = pl.DataFrame({"run_dir": [f"r{i}" for i in range(6)],
                         "run_id": [f"r{i}" for i in range(6)], "verdict": ["terminal"] * 6,
                         "step": [3, 4, None, None, None, None],
                         "total_tokens": [100, 200, None, None, None, None],
                         "wall_time_used_seconds": [1.0, 2.0, None, None, None, None]})
    spec = fleet_overview(runs, max_points=2).to_dict()
    scatter = spec["vconcat"][1]["hconcat"][0]
    assert {v["run_id"] for v in scatter["data"]["values"]} == {"r0", "r1"}
    assert any("4 run(s) without steps or tokens left out" in line
               for line in scatter["title"]["subtitle"])
    none = fleet_overview(runs.with_columns(pl.lit(None, pl.Int64).alias("total_tokens")))
    empty = none.to_dict()["vconcat"][1]["hconcat"][0]
    assert "no run has both steps and tokens" in empty["data"]["values"][0]["message"]


@pytest.mark.parametrize("argv", [["audit", "{d}", "--format", "json"],
                                  ["report", "{d}", "--out", "{d}/r.html", "--no-store"],
                                  ["export", "{d}", "--out", "{d}/ds"],
                                  ["search", "x", "{d}"],
                                  ["store", "{d}", "--store", "{d}/../store-empty"]])
def test_an_empty_source_exits_2_from_every_command(argv: list[str], tmp_path: Path,
                                                     capsys) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    assert main([a.format(d=d) for a in argv]) == 2
    assert "no run" in capsys.readouterr().err
