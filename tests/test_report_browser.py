"""The HTML report in a real browser: headless Debian Chromium via Playwright, network off.

Chromium must be at /usr/bin/chromium (CI installs it with ``scripts/install_browser.sh``).
When it is missing this test **fails**: it never downloads a browser and never skips.
The screenshot is kept at ``artifacts/report.png``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rivumi_analysis.viz.report import CHART_SECTIONS, write_report

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


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    assert os.path.exists(CHROMIUM), (
        f"{CHROMIUM} is missing: run scripts/install_browser.sh (apt-get install chromium)")
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import sync_playwright

    from rivumi_analysis.relay.report import relay_section

    out = tmp_path / "report.html"
    corpus = _corpus(tmp_path)
    res = write_report(corpus, str(out))
    relay = relay_section(corpus)  # sample_runs/relayflowd adds the relayflowd charts
    n_charts = len(CHART_SECTIONS) + (len(relay.charts) if relay is not None else 0)
    assert res.charts == n_charts

    console_errors: list[str] = []
    page_errors: list[str] = []
    blocked: list[str] = []
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS,
                                     timeout=60_000)
        try:
            ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = ctx.new_page()

            def _route(route):  # every non-file: request is aborted (no network at all)
                if route.request.url.startswith("file:"):
                    route.continue_()
                else:
                    blocked.append(route.request.url)
                    route.abort()

            page.route("**/*", _route)
            page.on("console", lambda m: console_errors.append(m.text)
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            page.goto(out.as_uri(), wait_until="load", timeout=60_000)
            try:
                page.wait_for_selector("body[data-charts-done='1']", timeout=60_000)
            except Exception:
                print("charts did not finish; console:", console_errors, "errors:",
                      page_errors, "blocked:", blocked)
                raise
            counts = page.evaluate("""() => Array.from(
                document.querySelectorAll('.vega-chart')).map(el => ({
                  key: el.dataset.chart, state: el.dataset.rendered || null,
                  svg: el.querySelectorAll('svg.marks').length,
                  canvas: el.querySelectorAll('canvas').length,
                  marks: el.querySelectorAll('svg.marks path, svg.marks rect, svg.marks line,'
                                             + ' svg.marks text').length}))""")
            page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
        finally:
            browser.close()
    diag = f"charts={counts} console={console_errors} pageerrors={page_errors} blocked={blocked}"
    assert len(counts) == n_charts, diag
    rendered = [c for c in counts if c["state"] == "1" and (c["svg"] + c["canvas"]) >= 1]
    assert len(rendered) == n_charts, diag
    assert all(c["marks"] > 10 for c in counts), diag
    assert not console_errors, diag
    assert not page_errors, diag
    assert not blocked, diag
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000


def test_chromium_is_the_system_one() -> None:
    """Playwright must never have fetched its own browser for this suite."""
    assert shutil.which("chromium") or os.path.exists(CHROMIUM), "install chromium via apt"
