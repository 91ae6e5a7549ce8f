"""A page per run (``report RUN_DIR``), the fleet report's run pages and ``--compare A B``.

Golden data: the run-page chart data of known sample runs (budget fractions, state changes,
divergence points) checked against values read from the runs themselves.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from rivumi_analysis.cli import main
from rivumi_analysis.viz import run_page as RP
from rivumi_analysis.viz.report import (
    CHART_SECTIONS,
    RUN_PAGES_CAP,
    load_tables,
    notable_runs,
    run_pages,
)

from .conftest import EXAMPLE_DIR, SAMPLE_RUNS

FAILED = SAMPLE_RUNS / "failed"
WALL_RUN = FAILED / "133a7f1df5864168aae142e04da5ce6b"      # wall_time_exceeded at 180 s
TOKEN_RUN = FAILED / "23dc033b4f45459ea450684e209d2710"     # token_budget_exceeded, 10k
REPEAT_RUN = FAILED / "6cb60108dd764a5fb3cb97ce9da8b79f"    # repeated_action at seq 32
STEPS_RUN = FAILED / "10c00bc9e50c4887af0a04cd2d6cafd5"     # max_steps_exceeded, 5 steps
FORK_SRC = SAMPLE_RUNS / "forks" / "adead8fcd12d49daa0a8c1c515f7fd2c"
FORK = SAMPLE_RUNS / "forks" / "fork-0545b17e9aa347cd9f566aacb1e7c4a8"
TORN = SAMPLE_RUNS / "bad_input" / "8a3a44109fb745459021061a821550f7"


@pytest.fixture(scope="module")
def failed_tables():
    return load_tables([str(FAILED), str(SAMPLE_RUNS / "forks")])


def _one(tables, run: Path):
    rd = str(run.resolve())
    return RP.run_tables(tables, [rd])[rd], tables["runs"].filter(
        pl.col("run_dir") == rd).row(0, named=True)


def _final(bd: pl.DataFrame) -> dict[str, float]:
    return dict(bd.sort("sequence").group_by("budget", maintain_order=True)
                .agg(pl.col("fraction").last()).iter_rows())


def test_burn_down_golden(failed_tables):
    per, run = _one(failed_tables, STEPS_RUN)
    bd = RP.burn_down_data(per["states"], run)
    # max_steps_exceeded: every one of its 5 steps used; one row per event and budget
    assert run["max_steps"] == 5 and _final(bd)["steps"] == 1.0
    assert bd.filter(pl.col("budget") == "steps").height == per["states"].height
    assert "tokens" not in _final(bd)  # no token budget: no line
    per, run = _one(failed_tables, WALL_RUN)
    wall = _final(RP.burn_down_data(per["states"], run))["wall time"]
    assert run["wall_time_seconds"] == 180 and 0.999 <= wall <= 1.0
    # the manifest's final charged time crosses the budget (180.009 s): the diamond
    fin = dict(RP.final_fractions(run).select("budget", "fraction").iter_rows())
    assert fin["wall time"] == round(run["active_wall_time_seconds"] / 180, 5) > 1.0
    per, run = _one(failed_tables, TOKEN_RUN)
    bd = _final(RP.burn_down_data(per["states"], run))
    fin = dict(RP.final_fractions(run).select("budget", "fraction").iter_rows())
    # the crossing model call is charged in session.json but has no model.completed event:
    # the replayed log stays below the budget, the final value is over it
    assert bd["tokens"] < 1.0 < fin["tokens"] == round(run["total_tokens"] / 10_000, 5)


def test_state_table_lists_the_guard_trip(failed_tables):
    per, _ = _one(failed_tables, REPEAT_RUN)
    t = RP.state_table(per["states"])
    rows = t.filter(pl.col("changed").str.contains("repeat_count"))
    assert rows["sequence"].to_list() == [4, 25, 32]
    trip = rows.row(2, named=True)
    assert trip["event_type"] == "run.failed"
    assert "repeat_count 2→3" in trip["changed"]
    assert "terminal_reason ∅→repeated_action" in trip["changed"]
    assert t.height == per["states"].height and t["changed"][0] == ""


def test_divergence_of_a_fork_and_its_source(failed_tables):
    per = RP.run_tables(failed_tables, [str(FORK_SRC.resolve()), str(FORK.resolve())])
    src, fork = per[str(FORK_SRC.resolve())], per[str(FORK.resolve())]
    link = failed_tables["forks"].filter((pl.col("row_kind") == "fork_link")
                                         & (pl.col("run_dir") == str(FORK.resolve())))
    fp = link["fork_point_sequence"][0]
    d = RP.divergence(src, fork)
    assert d.relation == "fork" and d.sequence == fp + 1 == 8
    assert d.shared_events == link["events_included"][0]
    nxt = src["events"].filter(pl.col("sequence") == fp + 1)["event_type"][0]
    assert (d.a_event, d.b_event) == (nxt, "run.forked")
    # the state the fork starts from is the source's state after the fork point
    at = dict(d.state_diff.select("field", "a").iter_rows())
    st = src["states"].filter(pl.col("sequence") == fp).row(0, named=True)
    assert at["step"] == str(st["step"]) and at["total_tokens"] == str(st["total_tokens"])
    # the other way round is recognised too
    assert RP.divergence(fork, src).relation == "fork-reverse"


def _copy(src: Path, dst: Path, keep_lines: int | None = None,
          edit_line: int | None = None) -> Path:
    shutil.copytree(src, dst)
    ev = dst / "events.jsonl"
    lines = ev.read_bytes().splitlines(keepends=True)
    if keep_lines is not None:
        lines = lines[:keep_lines]
    if edit_line is not None:
        obj = json.loads(lines[edit_line])
        obj["data"]["step"] = 99 if "step" in obj["data"] else obj["data"].get("step")
        obj["data"]["edited_by_test"] = True
        lines[edit_line] = json.dumps(obj).encode() + b"\n"
    ev.write_bytes(b"".join(lines))
    return dst


def test_divergence_by_sequence(tmp_path):
    a = _copy(EXAMPLE_DIR, tmp_path / "a")
    b = _copy(EXAMPLE_DIR, tmp_path / "b", keep_lines=10)
    c = _copy(EXAMPLE_DIR, tmp_path / "c", edit_line=6)
    t = load_tables([str(a), str(b), str(c)])
    per = RP.run_tables(t, [str(p.resolve()) for p in (a, b, c)])
    pa, pb, pc = (per[str(p.resolve())] for p in (a, b, c))
    d = RP.divergence(pa, pb)  # b is a's first 10 events
    assert (d.relation, d.sequence, d.shared_events, d.b_event) == ("sequence", 10, 10, None)
    assert "an event only a has" in d.message
    d = RP.divergence(pa, pc)  # c differs in the data of line 7 only
    seq6 = pa["events"].sort("sequence")["sequence"][6]
    assert d.sequence == seq6 and d.a_event == d.b_event
    assert "same event type with different data" in d.message
    assert RP.divergence(pa, pa).sequence is None  # identical
    rows = RP.state_diff_rows(pa["states"], pb["states"], d.sequence)
    assert rows.height == pa["states"].filter(pl.col("sequence") >= seq6).height


def test_notable_runs_cover_each_failure_outcome():
    t = load_tables([str(SAMPLE_RUNS)])
    from rivumi_analysis.viz.charts import outcomes

    chosen = notable_runs(t)
    assert len(chosen) == min(RUN_PAGES_CAP, t["runs"].height) == len(set(chosen))
    o = t["runs"].drop("outcome").join(outcomes(t["runs"]), on="run_dir")
    wanted = set(o.filter(~pl.col("outcome").str.starts_with("completed"))["outcome"])
    got = set(o.filter(pl.col("run_dir").is_in(chosen))["outcome"])
    assert wanted <= got
    slowest = o.sort("wall_time_used_seconds", descending=True, nulls_last=True)
    assert slowest["run_dir"][0] in chosen
    pages = run_pages(t, sources=[str(SAMPLE_RUNS)])
    assert [p.run_dir for p in pages] == chosen
    for p in pages:  # a chart only when there is something to draw
        assert set(p.charts) <= {f"{p.anchor}-timeline", f"{p.anchor}-burn"}
        assert p.html.count('class="vega-chart"') == len(p.charts)
        assert ("Nothing to draw" in p.html) == (len(p.charts) < 2)
    assert any(len(p.charts) == 2 for p in pages)


def test_cli_report_run_dir_writes_its_page(tmp_path, capsys):
    out = tmp_path / "run.html"
    assert main(["report", str(TORN), "--out", str(out)]) == 0
    assert "1 runs, 2 charts" in capsys.readouterr().out
    html = out.read_text()
    assert 'id="chart-timeline"' in html and 'id="chart-burn"' in html
    assert "State after each event" in html and "torn_tail" in html  # quarantined line
    assert "http://" not in html.replace("http://www.w3.org", "") and "cdn." not in html


@pytest.mark.slow
def test_fleet_report_links_its_run_pages(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(FAILED), "--out", str(out)]) == 0
    html = out.read_text()
    assert 'id="sec-runs"' in html
    n = html.count('<section id="run-')
    assert 0 < n <= RUN_PAGES_CAP
    assert html.count('<td><a href="#run-') == n  # each page linked from the audit table
    assert len(CHART_SECTIONS) + n <= html.count('class="vega-chart"') <= (
        len(CHART_SECTIONS) + 2 * n)


def test_cli_compare(tmp_path, capsys):
    out = tmp_path / "cmp.html"
    assert main(["report", "--compare", str(FORK_SRC), str(FORK), "--out", str(out)]) == 0
    o = capsys.readouterr().out
    assert "b is a fork of a at sequence 7" in o and "2 runs compared" in o
    html = out.read_text()
    assert "Where they diverge" in html and 'id="chart-compare"' in html
    # the fork never ran: no timeline of its own (compare, a-timeline, a-burn, b-burn)
    assert html.count('class="vega-chart"') == 4


def test_cli_compare_usage_errors(tmp_path, capsys):
    out = tmp_path / "cmp.html"
    assert main(["report", "--compare", str(FORK_SRC), str(SAMPLE_RUNS / "forks"),
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is not a run directory" in err and "Traceback" not in err
    assert main(["report", str(FAILED), "--compare", str(FORK_SRC), str(FORK),
                 "--out", str(out)]) == 2
    assert "not both" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_vega_bundle_is_cached_and_checked(tmp_path, monkeypatch):
    """The inlined Vega bundle is kept in the cache dir with its sha256; a damaged file is
    rebuilt, never served."""
    from rivumi_analysis.viz import _html

    monkeypatch.setenv("RIVUMI_ANALYSIS_CACHE_DIR", str(tmp_path))
    _html.js_bundle.cache_clear()
    first = _html.js_bundle(_html.vl_version())
    files = list(tmp_path.glob("vega-bundle-*.js"))
    assert len(files) == 1 and "vegaEmbed" in first
    head, _, body = files[0].read_text().partition("\n")
    assert body == first and head.startswith("// sha256:")
    files[0].write_text(head + "\n" + body[:-10] + "tampered")  # damaged copy
    _html.js_bundle.cache_clear()
    assert _html.js_bundle(_html.vl_version()) == first  # rebuilt, not the damaged text
    assert files[0].read_text().partition("\n")[2] == first
    _html.js_bundle.cache_clear()


def test_run_page_of_a_run_with_a_duplicate_sequence():
    """An emit race leaves two events with one sequence (duplicate_sequence): the page still
    draws."""
    dup = SAMPLE_RUNS / "bad_input"
    t = load_tables([str(dup)])
    runs = t["runs"].filter(pl.col("reasons").list.contains("duplicate_sequence"))
    assert runs.height >= 1
    rd = runs["run_dir"][0]
    page = RP.run_page(t, rd, sources=[str(dup)])
    assert page.charts and all(c.to_dict() for c in page.charts.values())
