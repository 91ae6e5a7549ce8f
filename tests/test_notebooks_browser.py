"""Exported notebooks draw every chart offline: a notebook executed on the sample runs, exported
with ``nbconvert --to html``, opened in headless Chromium with the network off.

altair's own inline renderer declared ``const spec`` at the top of each output, so a page of
several outputs drew only its first chart ("Identifier 'spec' has already been declared").
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.test_notebooks import _execute, kernel_env  # noqa: F401  (the fixture)
from tests.test_report_browser import ARGS, CHROMIUM

pytestmark = pytest.mark.browser

_PROBE = r"""() => Array.from(document.querySelectorAll('.rivumi-vega-chart')).map(el => ({
  id: el.id, drawn: el.querySelectorAll('canvas, svg.marks').length,
  state: el.dataset.rendered || null}))"""


@pytest.mark.parametrize("name", ["00_fleet_overview", "03_repeat_guards_and_budgets"])
def test_exported_notebook_draws_every_chart_offline(name: str, kernel_env: str,  # noqa: F811
                                                     tmp_path: Path) -> None:
    from nbconvert import HTMLExporter

    nb = _execute(name, {}, kernel_env)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    n_charts = sum("rivumi-vega-chart" in o.get("data", {}).get("text/html", "")
                   for o in outputs)
    assert n_charts >= 2, n_charts  # several charts in one page: the case that broke
    html, _ = HTMLExporter().from_notebook_node(nb)
    page_file = tmp_path / f"{name}.html"
    page_file.write_text(html, encoding="utf-8")

    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS,
                                     timeout=60_000)
        try:
            page = browser.new_page()
            # nothing but the file itself loads (the lab template's own CDN links fail: not
            # ours, and not needed by the charts)
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
                       else r.abort())
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(page_file.as_uri(), wait_until="load", timeout=120_000)
            page.wait_for_function(
                "n => Array.from(document.querySelectorAll('.rivumi-vega-chart'))"
                ".filter(el => el.dataset.rendered).length >= n",
                arg=n_charts, timeout=120_000)
            charts = page.evaluate(_PROBE)
        finally:
            browser.close()
    assert len(charts) == n_charts and all(c["drawn"] and c["state"] == "1" for c in charts), charts
    assert not [e for e in errors if "already been declared" in e or "vegaEmbed" in e], errors
