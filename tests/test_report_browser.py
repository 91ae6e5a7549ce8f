"""The HTML report in a real browser: headless Debian Chromium via Playwright, network off.

Chromium must be at /usr/bin/chromium (CI installs it with ``scripts/install_browser.sh``).
When it is missing this test **fails**: it never downloads a browser and never skips.
Screenshots are kept in ``artifacts/`` (``report-<corpus>-<width>.png``, gitignored): the
sample runs and a generated fleet, each at 1024 and 1600 px.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rivumi_analysis.viz.report import AUDIT_PAGE_ROWS, CHART_SECTIONS, write_report

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--proxy-server=127.0.0.1:9"]
ARTIFACTS = ROOT / "artifacts"


def _corpus(tmp: Path) -> list[str]:
    """sample_runs/ when it has runs, else a small corpus written by the scenario catalog."""
    sample = ROOT / "sample_runs"
    if sample.is_dir() and any(p.is_dir() for p in sample.iterdir()):
        return [str(sample)]
    from rivumi_analysis.synth.scenarios import CATALOG, run_script

    out = tmp / "runs"
    out.mkdir()
    for name in ("verified", "repeated_action", "repeat_near_miss", "wall_time",
                 "token_budget", "resume", "fork", "provider_failed", "external", "subagents",
                 "approval_denied", "duplicate_sequence"):
        run_script(CATALOG[name](0), str(out))
    return [str(out)]


# Rendered state of every chart card: marks drawn, drawn width against the card's inner
# width, and any legend text Vega shortened ("…N entries").
_PROBE = r"""() => Array.from(document.querySelectorAll('.vega-chart')).map(el => {
  const sec = el.closest('section'), svg = el.querySelector('svg');
  const cs = getComputedStyle(sec);
  const inner = sec.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  const texts = Array.from(el.querySelectorAll('svg text')).map(t => t.textContent);
  return {key: el.dataset.chart, state: el.dataset.rendered || null,
          svg: el.querySelectorAll('svg.marks').length,
          width: svg ? Math.ceil(svg.getBoundingClientRect().width) : 0,
          inner: Math.floor(inner),
          marks: el.querySelectorAll('svg.marks path, svg.marks rect, svg.marks line,'
                                     + ' svg.marks text').length,
          cut: texts.filter(t => /\u2026\s*\d+\s*entries|more entries/.test(t))};
})"""

WIDTHS = (1024, 1600)
# The check is a 2,000-run corpus: CI sets RIVUMI_BROWSER_CORPUS_RUNS=2000 (.ci/run;
# about 45 s to write, load, render and screenshot on 2 cores); a developer's run of the suite
# uses 300 runs unless asked (the screenshots in artifacts/ are named after the run count).
CORPUS_RUNS = int(os.environ.get("RIVUMI_BROWSER_CORPUS_RUNS", "300"))


# Linked selection: click a labelled run in the wall-time burn-down; the page follows it in
# the audit table (filtered to it) and the focus bar names it.
_CLICK = "#chart-wall g.mark-text.role-mark text"
_LINKED = r"""() => {
  const inp = document.querySelector('input.filter[data-table="audit-table"]');
  const rows = Array.from(document.getElementById('audit-table').tBodies[0].rows);
  const bar = document.getElementById('focus-bar');
  return {filter: inp.value, shown: rows.filter(r => r.style.display !== 'none')
          .map(r => r.textContent), bar: bar ? bar.textContent : null};
}"""


# The audit table: one line per run, a page of rows at a time (the pager says which).
_AUDIT = r"""() => {
  const rows = Array.from(document.getElementById('audit-table').tBodies[0].rows);
  const shown = rows.filter(r => r.style.display !== 'none');
  return {rows: rows.length, shown: shown.length, info: document.querySelector('.pinfo').textContent,
          tallest: Math.max(...shown.map(r => r.getBoundingClientRect().height))};
}"""


def block_network(page, blocked: list[str]) -> None:  # noqa: ANN001 - a Playwright page
    """Abort every request of ``page`` that is not ``file:``, noting its URL in ``blocked``."""

    def _route(route) -> None:  # noqa: ANN001
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.route("**/*", _route)


def _render(html: Path, name: str, *, click: bool = False) -> dict[int, dict]:
    """Open ``html`` at each width, network off; returns diagnostics per width (with
    ``click``: the linked selection after clicking a run label, at the first width)."""
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    out: dict[int, dict] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS,
                                     timeout=60_000)
        try:
            for width in WIDTHS:
                console_errors: list[str] = []
                page_errors: list[str] = []
                blocked: list[str] = []
                ctx = browser.new_context(viewport={"width": width, "height": 1000})
                page = ctx.new_page()

                block_network(page, blocked)
                page.on("console", lambda m, e=console_errors: e.append(m.text)
                        if m.type == "error" else None)
                page.on("pageerror", lambda exc, e=page_errors: e.append(str(exc)))
                page.goto(html.as_uri(), wait_until="load", timeout=120_000)
                page.wait_for_selector("body[data-charts-done='1']", timeout=180_000)
                charts = page.evaluate(_PROBE)
                shot = ARTIFACTS / f"report-{name}-{width}.png"
                page.screenshot(path=str(shot), full_page=True)
                out[width] = {"charts": charts, "console": console_errors,
                              "pageerrors": page_errors, "blocked": blocked, "shot": shot}
                if click and width == WIDTHS[0]:
                    out[width]["audit"] = page.evaluate(_AUDIT)
                    page.click(_CLICK, timeout=30_000)
                    page.wait_for_timeout(300)
                    out[width]["linked"] = page.evaluate(_LINKED)
                ctx.close()
        finally:
            browser.close()
    return out


def _check(res: dict[int, dict], n_charts: int) -> None:
    for width, r in res.items():
        diag = f"width={width} {r}"
        charts = r["charts"]
        assert len(charts) == n_charts, diag
        assert all(c["state"] == "1" and c["svg"] >= 1 for c in charts), diag
        assert all(c["marks"] > 10 for c in charts), diag
        over = [(c["key"], c["width"], c["inner"]) for c in charts if c["width"] > c["inner"]]
        assert not over, f"charts wider than their card at {width} px: {over}"
        assert not [c for c in charts if c["cut"]], diag  # no silently truncated legend
        assert not r["console"] and not r["pageerrors"] and not r["blocked"], diag
        assert r["shot"].stat().st_size > 10_000


def _need_chromium() -> None:
    assert os.path.exists(CHROMIUM), (
        f"{CHROMIUM} is missing: run scripts/install_browser.sh (apt-get install chromium)")


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    _need_chromium()
    from rivumi_analysis.relay.report import relay_section

    out = tmp_path / "report.html"
    corpus = _corpus(tmp_path)
    res = write_report(corpus, str(out))
    relay = relay_section(corpus)  # sample_runs/relayflowd adds the relayflowd charts
    n_charts = len(CHART_SECTIONS) + (len(relay.charts) if relay is not None else 0)
    assert res.charts == n_charts and res.run_pages >= 1
    rendered = _render(out, "sample_runs", click=True)
    _check(rendered, n_charts + res.run_page_charts)
    audit = rendered[WIDTHS[0]]["audit"]
    assert audit["shown"] == min(audit["rows"], AUDIT_PAGE_ROWS) > 0, audit
    assert audit["info"].startswith(f"rows 1–{audit['shown']} of {audit['rows']}"), audit
    assert audit["tallest"] < 32, audit  # one line per run (rows were ~170 px tall)
    linked = rendered[WIDTHS[0]]["linked"]
    run_id = linked["filter"]
    assert len(run_id) == 32 and run_id in (linked["bar"] or ""), linked
    assert linked["shown"] and all(run_id in row for row in linked["shown"]), linked


@pytest.mark.slow
def test_report_of_a_generated_fleet_renders_at_both_widths(tmp_path: Path) -> None:
    """The same checks on a corpus written by ``rivumi_analysis.corpus`` (realistic endings,
    budgets, forks, crashes and torn tails)."""
    _need_chromium()
    from rivumi_analysis.synth.corpus import generate_corpus

    runs = tmp_path / "fleet"
    generate_corpus(str(runs), runs=CORPUS_RUNS, target_mb=CORPUS_RUNS / 10, seed=1)
    out = tmp_path / "fleet.html"
    res = write_report([str(runs)], str(out))
    assert res.runs >= CORPUS_RUNS
    _check(_render(out, f"corpus{CORPUS_RUNS}"), len(CHART_SECTIONS) + res.run_page_charts)


def test_run_page_and_comparison_render(tmp_path: Path) -> None:
    """``report RUN_DIR`` and ``report --compare A B`` (a fork and its source): every chart
    drawn with marks, none wider than its card, no console error, no network request."""
    _need_chromium()
    from rivumi_analysis.viz.report import write_compare

    forks = ROOT / "sample_runs" / "forks"
    src = forks / "adead8fcd12d49daa0a8c1c515f7fd2c"
    fork = forks / "fork-0545b17e9aa347cd9f566aacb1e7c4a8"
    failed = ROOT / "sample_runs" / "failed" / "6cb60108dd764a5fb3cb97ce9da8b79f"
    out = tmp_path / "run.html"
    res = write_report([str(failed)], str(out))
    assert res.charts == 2
    _check(_render(out, "run-page"), 2)
    out = tmp_path / "compare.html"
    res, div = write_compare(str(src), str(fork), str(out))
    assert div.relation == "fork" and res.charts == 4  # the fork has no timeline of its own
    _check(_render(out, "compare"), 4)


def test_chromium_is_the_system_one() -> None:
    """Playwright must never have fetched its own browser for this suite."""
    assert shutil.which("chromium") or os.path.exists(CHROMIUM), "install chromium via apt"
