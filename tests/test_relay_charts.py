"""relayflowd charts (built from the tables) and the report's relayflowd section."""

from __future__ import annotations

import shutil

import polars as pl

from rivumi_analysis.relay import charts as C
from rivumi_analysis.relay import tables as T
from rivumi_analysis.relay.read import load_journals
from rivumi_analysis.relay.report import relay_section
from rivumi_analysis.viz.report import CHART_SECTIONS, write_report

from .conftest import EXAMPLE_DIR
from .relay_helpers import EXAMPLE, snapshot


def _tables(path: str) -> dict[str, pl.DataFrame]:
    js, _ = load_journals([path])
    return {"cursor": T.relay_channel_cursor_df(js), "attempts": T.relay_attempts_df(js),
            "deliveries": T.relay_channel_deliveries_df(js), "acks": T.relay_channel_acks_df(js)}


def _data(spec: dict) -> list[list[dict]]:
    found = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("data"), dict) and "values" in node["data"]:
                found.append(node["data"]["values"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(spec)
    return found


def test_lag_chart_marks_crash_and_resume_points(relay_catalog):
    t = _tables(relay_catalog["crash"]["delivery"]["resumed"])
    spec = C.consumer_lag(t["cursor"], t["attempts"]).to_dict()
    lines, rules = _data(spec)
    crashed = t["attempts"].filter(pl.col("completion_reason") == "crashed")["end_seq"]
    assert sorted(r["seq"] for r in rules) == sorted(crashed.to_list())
    assert {r["series"] for r in lines} == {"requests / bob", "replies / alice"}
    assert max(r["lag"] for r in lines) == 1 and lines[-1]["lag"] == 0
    kill = _tables(relay_catalog["crash"]["delivery"]["kill"])
    _, live = _data(C.consumer_lag(kill["cursor"], kill["attempts"]).to_dict())
    assert {r["event"] for r in live} == {"live at the tail (killed or running)"}


def test_redeliveries_swimlanes_latency(relay_catalog):
    t = _tables(relay_catalog["race"])
    (bars,) = _data(C.redeliveries_per_message(t["deliveries"]).to_dict())
    got = {r["kind"]: r["deliveries"] for r in bars}
    assert got == {"first delivery": 1, "redelivery, same attempt": 7}
    (lanes,) = _data(C.delivery_swimlanes(t["deliveries"], t["acks"]).to_dict())
    assert sorted({r["event"] for r in lanes}) == ["acknowledgement", "delivery", "redelivery"]
    assert sum(r["event"] == "acknowledgement" for r in lanes) == 1
    (lat,) = _data(C.ack_latency(t["acks"]).to_dict())
    assert {r["measured"] for r in lat} == {"from acknowledged delivery", "from first delivery"}
    assert all(r["ms"] >= 0 for r in lat)


def test_several_journals_are_labelled_and_empty_tables_give_empty_charts(relay_catalog):
    t = _tables(relay_catalog["root"])
    (lines, *_) = _data(C.consumer_lag(t["cursor"]).to_dict())
    assert all(" · " in r["series"] for r in lines)
    e = _tables(str(EXAMPLE))
    for chart in (C.consumer_lag(e["cursor"], e["attempts"]),
                  C.redeliveries_per_message(e["deliveries"]),
                  C.delivery_swimlanes(e["deliveries"], e["acks"]), C.ack_latency(e["acks"])):
        assert "no " in chart.to_dict()["title"]


def test_report_section_present_only_with_journals(tmp_path, relay_catalog):
    assert relay_section([str(EXAMPLE_DIR.parent)]) is None  # runs, no journals
    root = tmp_path / "fleet"
    shutil.copytree(EXAMPLE_DIR.parent, root / "runs")
    shutil.copytree(relay_catalog["root"] + "/crash/effect", root / "relay" / "effect")
    shutil.copy(EXAMPLE, root / "relay" / "example.jsonl")
    before = snapshot(root)
    res = write_report([str(root)], str(tmp_path / "r.html"))
    assert snapshot(root) == before
    html = (tmp_path / "r.html").read_text()
    assert 'id="sec-relay"' in html and 'href="#sec-relay"' in html
    assert html.count('<tr><td>relay/') == 3  # kill, resumed, example
    for key in ("relay_lag", "relay_redeliveries", "relay_swimlanes", "relay_ack_latency"):
        assert f'data-chart="{key}"' in html
    assert res.charts == len(CHART_SECTIONS) + 4  # the run charts, then 4 relay charts
    sec = relay_section([str(root)], redact=True)
    assert sec is not None and sec.journals == 3 and "relay/effect" not in sec.html
