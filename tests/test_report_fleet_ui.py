"""The fleet report's UI at scale (issue 30 item 5): a compact paged audit table, labels
that differ, a token chart legend that names outcomes (not runs), no legend beside the tool
error counts, one font family, and chart specs that do not depend on object addresses."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import polars as pl

from rivumi_analysis.viz import charts as C
from rivumi_analysis.viz import report as R
from rivumi_analysis.viz._html import CSS, FONT, csp, page_css, spec

from .conftest import SAMPLE_RUNS


def _runs(n: int) -> pl.DataFrame:
    """``n`` runs of one task whose instructions read alike (the issue's look-alike labels)."""
    t0 = datetime(2026, 8, 3, 9, tzinfo=UTC)
    return pl.DataFrame({
        "run_dir": [f"/abs/fleet/r{i}" for i in range(n)],
        "run_id": [f"{i:08x}{'ab' * 12}" for i in range(n)],
        "instruction_summary": ["Fix the calculator bug so that it adds numbers"] * n,
        "terminal_reason": ["token_budget_exceeded", "verified"] * (n // 2) + ["verified"] * (n % 2),
        "verdict": ["terminal"] * n, "result_status": ["failed", "completed"] * (n // 2)
        + ["completed"] * (n % 2), "started_at": [t0 + timedelta(minutes=i) for i in range(n)],
        "max_total_tokens": [1000] * n, "total_tokens": [1200 if i % 2 == 0 else 100 + i
                                                         for i in range(n)],
        "active_wall_time_seconds": [float(i) for i in range(n)]})


def test_labels_are_short_id_plus_task_and_differ():
    labels = C.run_labels(_runs(40))
    runs = _runs(40)
    assert labels["run"].n_unique() == 40
    for rid, lab in labels.select("run_id", "run").iter_rows():
        assert lab.startswith(rid[:8] + " Fix the calculator"), lab
        assert len(lab) <= 8 + 1 + 24 and "#" not in lab  # differ by id, not by a counter
    assert "/abs/" not in "".join(labels["run"]) and runs.height == 40


def _states(runs: pl.DataFrame) -> pl.DataFrame:
    n = runs.height
    return pl.DataFrame({
        "run_dir": [rd for rd in runs["run_dir"] for _ in range(3)],
        "sequence": [s for _ in range(n) for s in (0, 5, 9)],
        "event_type": ["run.created", "model.completed", "run.failed"] * n,
        "total_tokens": [t for tot in runs["total_tokens"] for t in (0, tot // 2, tot)]})


def test_token_budget_legend_names_how_runs_end_not_each_run():
    runs = _runs(40)
    d = C.token_budget(runs=runs, states=_states(runs)).to_dict()
    line = d["vconcat"][0]["hconcat"][0]["layer"][0]
    color = line["encoding"]["color"]
    assert color["field"] == "group" and color["scale"]["domain"] == list(C.TOKEN_GROUPS)
    assert line["encoding"]["detail"]["field"] == "run"  # still one line per run
    rows = [r for r in d.get("datasets", {}).values() for r in r] or line["data"]["values"]
    groups = {r["run_id"]: r["group"] for r in rows if "group" in r and "sequence" in r}
    over = set(runs.filter(pl.col("terminal_reason") == "token_budget_exceeded")["run_id"])
    assert {g for rid, g in groups.items() if rid in over} == {"token_budget_exceeded"}
    assert {g for rid, g in groups.items() if rid not in over} == {"within budget"}


def test_tool_error_legend_is_below_the_bars():
    t = pl.DataFrame({"run_dir": ["a"] * 4, "name": ["shell"] * 4, "effect": ["execute"] * 4,
                      "outcome": ["error"] * 4})
    d = C.tool_error_rates(t).to_dict()
    bars = d["layer"][0]
    assert bars["encoding"]["color"]["legend"]["orient"] == "bottom"
    assert d["layer"][1]["mark"]["type"] == "text"  # the counts at the bars' ends


def test_one_font_family_and_deterministic_specs():
    runs = _runs(30)
    a, b = (spec(C.token_budget(runs=runs, states=_states(runs))) for _ in range(2))
    assert a["config"]["font"] == FONT and f"font:14px/1.45 {FONT}" in CSS
    # view names hash the data's text: the same data gives the same names in any process
    names = re.compile(r'"(view_[0-9a-f]+)')
    assert names.findall(json.dumps(a)) == names.findall(json.dumps(b)) != []
    # the verdict colours come after the grey default, so they are the ones shown
    css = page_css()
    assert css.index(".v{background:#555}") < css.index(".v-corrupt{")


def test_audit_table_is_compact_paged_and_escaped(tmp_path):
    tables = R.load_tables([str(SAMPLE_RUNS)])
    runs = tables["runs"]
    assert runs is not None and runs.height > R.AUDIT_PAGE_ROWS // 10
    hostile = runs.with_columns(pl.lit("<script>alert(1)</script>" + "x" * 40).alias("message"))
    html = R._audit_rows(hostile, [str(SAMPLE_RUNS)], redact=False)
    assert 'class="compact"' in html and f'data-size="{R.AUDIT_PAGE_ROWS}"' in html
    assert html.count("<tr>") == runs.height + 1  # every run is in the table, paged by script
    assert "<script>" not in html and 'title="&lt;script&gt;alert(1)&lt;/script&gt;x' in html
    page = R.render_html(tables, sources=[str(SAMPLE_RUNS)], pages=[])
    policy = re.search(r'Content-Security-Policy" content="([^"]+)"', page).group(1)
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    styles = re.findall(r"<style[^>]*>(.*?)</style>", page, flags=re.S)
    assert policy == csp(scripts, styles).replace('"', "&quot;")  # the hashes still match
