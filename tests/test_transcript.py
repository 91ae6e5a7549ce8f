"""The run page's transcript (issue 32): complete against the log, redacted on request,
escaped everywhere, keyed by occurrence; ``show_run`` for notebooks.

The browser checks (nothing runs, the text is visible) are in tests/test_transcript_browser.py.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

import rivumi_analysis as ra
from rivumi_analysis.synth.scenarios import Build, run_script
from rivumi_analysis.viz.notebook import show_run
from rivumi_analysis.viz.report import load_tables, redact_tables
from rivumi_analysis.viz.run_page import render_run_html, run_page
from rivumi_analysis.viz.transcript import render_text, transcript_entries

from .hostile_runs import HOSTILE, VISIBLE_PARTS, write_hostile_runs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "sample_runs" / "example" / "a66038f97f204cb3aaa96339f195c37e"
_ARTICLE = re.compile(r'<article class="[^"]*" id="[^"]*" data-seqs="([^"]*)" '
                      r'data-types="([^"]*)">(.*?)</article>', re.S)


def _log(run: Path) -> list[dict]:
    """The run's events as written (the truth the page is checked against)."""
    out = []
    for line in _log_lines(run):
        try:
            out.append(json.loads(line))
        except ValueError:  # the hostile run's last line is not JSON (quarantined)
            continue
    return out


def _log_lines(run: Path) -> list[bytes]:
    return (run / "events.jsonl").read_bytes().splitlines()


def _articles(page: str) -> list[tuple[set[int], list[str], str]]:
    return [({int(s) for s in seqs.split()}, types.split(), body)
            for seqs, types, body in _ARTICLE.findall(page)]


def _entry_of(arts: list, seq: int, event_type: str) -> str:
    found = [body for seqs, types, body in arts if seq in seqs and event_type in types]
    assert len(found) == 1, (seq, event_type, len(found))
    return found[0]


def test_example_page_shows_every_model_reply_and_tool_call() -> None:
    """Every ``model.completed`` (finish reason, tokens, reply text) and every
    ``tool.requested`` (name, effect, arguments) and ``tool.completed`` (outcome, preview or
    error) of the bundled example's log is on its run page, in its own entry."""
    tables = load_tables([str(EXAMPLE)])
    page, _ = render_run_html(tables, str(EXAMPLE.resolve()), sources=[str(EXAMPLE)])
    arts = _articles(page)
    assert 'class="filter tx-filter" data-list="run-txl"' in page
    events = _log(EXAMPLE)
    replies = [e for e in events if e["event_type"] == "model.completed"]
    calls = [e for e in events if e["event_type"] == "tool.requested"]
    assert len(replies) == 7 and len(calls) == 6
    for e in replies:
        body = _entry_of(arts, e["sequence"], "model.completed")
        d = e["data"]
        assert f"<dd>{d['finish_reason']}</dd>" in body
        assert f"{d['usage']['total_tokens']:,} total" in body
        if d["content"]:
            assert html.escape(d["content"]) in body
        for name in d["tool_calls"]:
            assert name in body
    for e in calls:
        body = _entry_of(arts, e["sequence"], "tool.requested")
        d = e["data"]
        assert f"Tool call {d['name']}" in body and f"<dd>{d['effect']}</dd>" in body
        args = json.dumps(d["arguments"], separators=(",", ":"), sort_keys=True)
        assert html.escape(args) in body
    for e in (e for e in events if e["event_type"] == "tool.completed"):
        body = _entry_of(arts, e["sequence"], "tool.completed")
        d = e["data"]
        assert ("→ ok" if d["ok"] else "→ error") in body
        if d.get("error"):
            assert html.escape(d["error"]) in body
        if d.get("preview"):
            assert html.escape(d["preview"]) in body
    # the conversation's system and user messages, before the first model step
    kinds = [e.kind for e in transcript_entries(tables)]
    assert kinds.index("system") < kinds.index("user") < kinds.index("model")
    # every event of the log is in some entry
    seen = set().union(*(seqs for seqs, _, _ in arts))
    assert seen == {e["sequence"] for e in events}


def test_hostile_text_is_escaped_and_redaction_drops_it(tmp_path: Path) -> None:
    run = write_hostile_runs(tmp_path / "runs")[0]
    tables = load_tables([str(run)])
    page, _ = render_run_html(tables, str(run.resolve()), sources=[str(run)])
    assert "data-pwned" in page  # the text is there, escaped
    for raw in ("<script>document", "<img src=x", "<svg onload", "<iframe",
                'href="javascript:', "\u202e", "\u2066"):
        assert raw not in page, raw
    assert "⟦U+202E⟧" in page and "⟦U+2066⟧" in page
    assert page.count("<script") == 3  # the bundle, the specs (JSON) and the page's script
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert csp and "'unsafe-inline'" not in csp.group(1).replace("style-src-attr "
                                                                   "'unsafe-inline'", "")
    assert "default-src 'none'" in csp.group(1)
    # the quarantined line (not JSON, not UTF-8) is in the transcript where it falls
    entries = transcript_entries(tables)
    [q] = [e for e in entries if e.kind == "quarantine"]
    last = len(_log_lines(run))
    assert q.line_no == last and entries[-1] is q and "invalid_utf8" in q.title
    # redacted: ids, types, tool names, effects, decisions and numbers; no run text
    red = redact_tables(tables)
    rpage, _ = render_run_html(red, str(run.resolve()), sources=[str(run)], redact=True)
    assert "pwned" not in rpage and "evil.example" not in rpage and "LLLLLLLL" not in rpage
    from rivumi_analysis.viz.report import write_report

    write_report([str(run.parent)], str(tmp_path / "fleet.html"), redact=True, store=False)
    fleet = (tmp_path / "fleet.html").read_text(encoding="utf-8")
    assert "pwned" not in fleet and 'class="tx-e' in fleet  # the fleet's run pages too
    rarts = _articles(rpage)
    for e in _log(run):
        if e["event_type"] == "tool.requested":
            body = _entry_of(rarts, e["sequence"], "tool.requested")
            assert e["data"]["name"] in body and e["data"]["effect"] in body
        if e["event_type"] == "approval.resolved":
            assert e["data"]["decision"] in _entry_of(rarts, e["sequence"], "approval.resolved")


def test_show_run_is_the_same_view_in_text_and_html(tmp_path: Path) -> None:
    run = write_hostile_runs(tmp_path / "runs")[0]
    view = ra.show_run(str(run))
    assert "show_run" in dir(ra)
    entries = transcript_entries(load_tables([str(run)]))
    assert [e.title for e in view.entries] == [e.title for e in entries]
    text = str(view)
    assert "\u202e" not in text and "⟦U+202E⟧" in text
    assert "Resumed (looplane resume)" in text and "Continued: a new user turn" in text
    assert "== Turn 2 ==" in text
    assert "(+" in text  # the 60,000-character line is clipped, its length shown
    page = view._repr_html_()
    assert "<script" not in page and "<img" not in page and "<svg" not in page
    assert "tx-filter" not in page  # no script in a notebook: no filter box that would not work
    assert html.escape(VISIBLE_PARTS[0], quote=True) in page
    assert re.search(r"text · 60,\d{3} chars", page)  # the long text is folded, its length shown
    frame = view.frame()
    assert frame.height == len(view.entries) and frame["line_no"].drop_nulls().is_sorted()
    red = show_run(str(run), redact=True)
    assert "pwned" not in str(red) and "pwned" not in red._repr_html_()
    assert [e.kind for e in red.entries] == [e.kind for e in view.entries]


def test_repeated_tool_call_ids_stay_separate_entries(tmp_path: Path) -> None:
    """A continued session can reuse a tool_call_id: each occurrence is its own entry with
    its own arguments and outcome (events are matched by sequence, not by id)."""
    b = Build("repeat-ids", 3)
    b.model([("read_file", {"path": "a.py"})])
    cid = b.ops[-1]["tool_calls"][0]["tool_call_id"]
    b.tool(cid, content="first result")
    b.final("done once")
    b.verify(True)
    b.finish("completed", "verified")
    b.add("continue", instruction="again", idle=60.0)
    b.model([("list_files", {"path": "b"})])
    b.ops[-1]["tool_calls"][0]["tool_call_id"] = cid
    b.tool(cid, ok=False, error="second error")
    b.final("done twice")
    b.verify(True)
    b.finish("completed", "verified")
    b.close()
    run = Path(run_script(b.script(), str(tmp_path)))
    tools = [e for e in transcript_entries(load_tables([str(run)])) if e.kind == "tool"]
    assert [e.title for e in tools] == ["Tool call read_file → ok",
                                        "Tool call list_files → error"]
    assert dict(tools[0].texts)["arguments"] == '{"path":"a.py"}'
    assert dict(tools[0].texts)["result preview"] == "first result"
    assert dict(tools[1].texts)["arguments"] == '{"path":"b"}'
    assert dict(tools[1].fields)["error"] == "second error"
    assert not set(tools[0].sequences) & set(tools[1].sequences)
    assert all("decision allow_once" in dict(t.fields)["approval"] for t in tools)


def test_embedded_run_page_caps_its_transcript(monkeypatch: pytest.MonkeyPatch) -> None:
    import rivumi_analysis.viz.run_page as RP

    tables = load_tables([str(EXAMPLE)])
    monkeypatch.setattr(RP, "TRANSCRIPT_CAPS", {**RP.TRANSCRIPT_CAPS, "entries_embedded": 6})
    p = run_page(tables, str(EXAMPLE.resolve()), sources=[str(EXAMPLE)], embedded=True,
                 key="run-1")
    assert len(_articles(p.html)) <= 6
    assert 'id="run-1-tx-cut"' in p.html and "not shown here (cap)" in p.html


@pytest.mark.parametrize("text", [HOSTILE[:200], "a\u202eb\r\n\x00"])
def test_render_text_shows_controls(text: str) -> None:
    from rivumi_analysis.viz.transcript import Entry

    out = render_text([Entry("reply", "r", texts=[("reply", text)])])
    assert "\u202e" not in out and "\x00" not in out and "\r" not in out


def test_every_event_and_quarantined_line_of_the_sample_runs_has_one_entry() -> None:
    """Over every bundled sample run (native, resumed, continued, forks, subagents,
    external, crashes, bad input): each accepted event is folded into exactly one entry, each
    quarantined line has its own, and entries follow the log's order."""
    tables = load_tables([str(ROOT / "sample_runs")])
    events, quarantine = tables["events"], tables["quarantine"]
    assert events is not None and quarantine is not None
    checked = 0
    for rd in tables["runs"]["run_dir"].to_list():  # type: ignore[index]
        entries = transcript_entries(tables, rd)
        ev = events.filter(events["run_dir"] == rd)
        folded = sorted(s for e in entries for s in e.sequences)
        assert folded == sorted(ev["sequence"].to_list()), rd
        q = quarantine.filter(quarantine["run_dir"] == rd)
        assert sorted(e.line_no for e in entries if e.kind == "quarantine") == sorted(
            q["line_no"].to_list()), rd
        lines = [e.line_no for e in entries if e.line_no is not None]
        assert lines == sorted(lines), rd
        checked += 1
    assert checked >= 80
