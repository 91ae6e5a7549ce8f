"""The offline HTML report: self-contained, redaction allowlist, CLI and --png."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from rivumi_analysis.cli import cmd_report
from rivumi_analysis.viz.report import CHART_SECTIONS, load_tables, render_html

from .conftest import EXAMPLE_DIR, EXAMPLE_ID

SECRET = "sk-SECRET-do-not-ship-4242"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The example run plus one with a secret in a tool preview, an error text, a model
    message and a quarantined (raw) line."""
    root = tmp_path_factory.mktemp("runs")
    shutil.copytree(EXAMPLE_DIR, root / EXAMPLE_ID)
    bad = root / "secretrun"
    shutil.copytree(EXAMPLE_DIR, bad)
    text = (bad / "events.jsonl").read_text("utf-8")
    text = text.replace('"preview":"', f'"preview":"{SECRET} ', 1)
    text = text.replace('"content":"', f'"content":"{SECRET} ', 1)
    text += '{"broken json with ' + SECRET + "\n"
    (bad / "events.jsonl").write_text(text, "utf-8")
    return root


@pytest.fixture(scope="module")
def tables(corpus):
    return load_tables([str(corpus)])


def test_self_contained_and_offline(corpus, tables):
    html = render_html(tables, sources=[str(corpus)])
    pages = html.count('<section id="run-')  # the run pages: a timeline and a burn-down each
    assert pages >= 1
    assert len(CHART_SECTIONS) + pages <= html.count('class="vega-chart"') <= (
        len(CHART_SECTIONS) + 2 * pages)
    for bad in ("cdn.", "jsdelivr", "unpkg", "<script src", "<link ", "@import",
                "googleapis"):
        assert bad not in html, bad
    assert "window.vegaEmbed" in html and "Content-Security-Policy" in html
    assert "default-src 'none'" in html  # the page itself forbids any network fetch
    assert "</script>" not in html.split('id="rivumi-specs">', 1)[1].split("</script>", 1)[0]
    assert "Verdict reasons" in html and "Audit table" in html
    assert SECRET in html  # unredacted: the quarantine raw bytes are shown


def test_redact_drops_content_paths_and_raw(corpus, tables):
    html = render_html(tables, sources=[str(corpus)], redact=True)
    assert SECRET not in html
    assert str(corpus) not in html
    assert "/tmp/" not in html and str(Path.home()) + "/" not in html
    assert "broken json" not in html
    assert not re.search(r"[0-9a-f]{64}", html.split("<script>", 1)[0])  # no raw hashes
    # the allowlist survives: run ids, reason codes, relative run dirs, tool names
    assert EXAMPLE_ID in html and "secretrun" in html
    assert "list_files" in html and "verified" in html
    assert "redacted (allowlist only)" in html


@pytest.mark.slow
def test_cli_report_png_and_redact(corpus, tmp_path, capsys):
    import argparse

    out = tmp_path / "r.html"
    png = tmp_path / "png"
    args = argparse.Namespace(paths=[str(corpus)], out=str(out), png=str(png), redact=True,
                              max_depth=8)
    assert cmd_report(args) == 0
    printed = capsys.readouterr().out
    assert str(out.resolve()) in printed
    names = sorted(p.name for p in png.iterdir())
    assert names == sorted([f"{k}.{ext}" for k, *_ in CHART_SECTIONS for ext in ("png", "svg")])
    assert (png / "fleet.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert SECRET not in out.read_text("utf-8")


def test_cli_bad_path_is_usage_error(tmp_path, capsys):
    import argparse

    args = argparse.Namespace(paths=[str(tmp_path / "nope")], out=str(tmp_path / "r.html"),
                              png=None, redact=False, max_depth=8)
    assert cmd_report(args) == 2
    assert not (tmp_path / "r.html").exists()
