"""Hostile run text in a real browser (issue 32): the run page, the fleet report and
``show_run``'s notebook HTML, rendered in headless Debian Chromium (launched as
tests/test_report_browser.py does, network off), run nothing that a run wrote and show it
as text.

Every payload of tests/hostile_runs.py would set ``data-pwned`` on ``<html>`` if it ran. The
checks: no such attribute in the live DOM, no element carries an event-handler attribute,
no ``<img>``, ``<iframe>`` or foreign ``<script>``/``<svg onload>`` was created, every link
is a same-page anchor, the pages raise no Content-Security-Policy violation (their own
scripts and styles are allowed by hash; anything else would be reported), and the payloads
are in the page's visible text, bidi overrides shown as markers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .hostile_runs import VISIBLE_PARTS, write_hostile_runs
from .test_report_browser import ARGS, CHROMIUM, _need_chromium, block_network

pytestmark = pytest.mark.browser

_WATCH = """window.__csp = [];
document.addEventListener('securitypolicyviolation', function(e){
  window.__csp.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + (e.sample || ''));
});"""

_PROBE = r"""() => {
  const all = Array.from(document.querySelectorAll('*'));
  const handlers = [];
  all.forEach(el => Array.from(el.attributes).forEach(a => {
    if (/^on/i.test(a.name)) handlers.push(el.tagName + ' ' + a.name);
  }));
  const links = Array.from(document.querySelectorAll('a[href]'))
    .map(a => a.getAttribute('href')).filter(h => !h.startsWith('#'));
  const scripts = Array.from(document.scripts).filter(s => s.type !== 'application/json');
  return {pwned: document.documentElement.getAttribute('data-pwned'),
          handlers: handlers, links: links,
          imgs: document.querySelectorAll('img, iframe, object, embed').length,
          svgOnload: document.querySelectorAll('svg[onload]').length,
          scripts: scripts.length,
          text: document.body.innerText,
          csp: window.__csp || [],
          entries: document.querySelectorAll('.tx-e').length};
}"""


def _open_all(pages: dict[str, Path], *, click: str | None = None) -> dict[str, dict]:
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import sync_playwright

    out: dict[str, dict] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS,
                                     timeout=60_000)
        try:
            for name, path in pages.items():
                ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
                page = ctx.new_page()
                errors: list[str] = []
                requests: list[str] = []
                page.on("pageerror", lambda exc, e=errors: e.append(str(exc)))
                page.on("dialog", lambda d, e=errors: (e.append("dialog " + d.message),
                                                       d.dismiss()))
                block_network(page, requests)
                page.add_init_script(_WATCH)
                page.goto(path.as_uri(), wait_until="load", timeout=120_000)
                done = True
                if name != "show_run":
                    try:
                        page.wait_for_selector("body[data-charts-done='1']", timeout=120_000)
                    except Exception:  # noqa: BLE001 - a broken page: probe it all the same
                        done = False
                # hover and click every transcript header and fold: handlers would fire
                for el in page.query_selector_all(".tx-x summary")[:40]:
                    el.click()
                page.mouse.move(200, 300)
                res = page.evaluate(_PROBE)
                res["errors"], res["requests"], res["charts_done"] = errors, requests, done
                if click and name == "run" and done:
                    page.click(click, timeout=30_000, force=True)
                    page.wait_for_timeout(300)
                    res["hit"] = page.evaluate(
                        "(() => {const h = document.querySelector('.tx-hit');"
                        " return h ? h.getAttribute('data-types') : null})()")
                    # and back: an entry's bar outlines its segments on the timeline
                    page.click('article[data-types^="tool.requested"] .tx-bar', timeout=30_000)
                    page.wait_for_timeout(300)
                    res["outlined"] = page.evaluate(
                        "document.getElementById('chart-timeline').getAttribute('data-outlined')")
                out[name] = res
                ctx.close()
        finally:
            browser.close()
    return out


def test_hostile_text_runs_nowhere_and_shows_as_text(tmp_path: Path) -> None:
    _need_chromium()
    from rivumi_analysis.viz.notebook import show_run
    from rivumi_analysis.viz.report import write_report

    runs = write_hostile_runs(tmp_path / "runs")
    pages = {"run": tmp_path / "run.html", "fleet": tmp_path / "fleet.html",
             "show_run": tmp_path / "show_run.html"}
    write_report([str(runs[0])], str(pages["run"]))
    res = write_report([str(tmp_path / "runs")], str(pages["fleet"]), store=False)
    assert res.run_pages == 2
    # a notebook has no CSP of ours: show_run's HTML must be safe on its own
    pages["show_run"].write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head>"
                                 f"<body>{show_run(str(runs[0]))._repr_html_()}</body></html>",
                                 encoding="utf-8")
    found = _open_all(pages, click="#chart-timeline g.role-mark path")
    for name, r in found.items():
        diag = {k: v for k, v in r.items() if k != "text"}
        assert r["pwned"] is None, (name, diag)
        assert r["charts_done"], (name, diag)  # e.g. a "<!--" left open swallows the page
        assert not r["handlers"] and not r["links"] and r["imgs"] == 0, (name, diag)
        assert r["svgOnload"] == 0 and not r["errors"] and not r["requests"], (name, diag)
        assert r["scripts"] == (0 if name == "show_run" else 2), (name, diag)
        assert not r["csp"], (name, diag)  # nothing was even tried
        assert r["entries"] >= 20, (name, diag)
        for part in VISIBLE_PARTS:
            assert part in r["text"], (name, part)
        assert "\u202e" not in r["text"] and "⟦U+202E⟧" in r["text"], name
    assert found["run"].get("hit"), "a click on the timeline lands on a transcript entry"
    assert found["run"].get("outlined") == "1", "an entry's bar outlines it on the timeline"
