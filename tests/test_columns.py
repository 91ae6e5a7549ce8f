"""The columns analysts reached for (issue 16): model and provider per model call, tool
arguments and result size, the task's repository / base SHA / instruction, cost coverage."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import rivumi_analysis as ra
from rivumi_analysis.errors import CostUnknownWarning
from rivumi_analysis.tables.usage import cost_by_model
from tests.conftest import SAMPLE_RUNS


@pytest.fixture(scope="module")
def fleet() -> Any:
    return ra.load_fleet(str(SAMPLE_RUNS))


def test_model_per_call_equals_the_manifest_record_of_the_call(fleet: Any) -> None:
    calls = ra.model_calls_df(fleet).filter(pl.col("outcome") == "completed")
    usage = ra.usage_df(fleet).filter((pl.col("source") == "manifest.model_usage")
                                      & (pl.col("lane") == "primary"))
    checked = 0
    for run_dir in usage["run_dir"].unique().to_list():
        c = calls.filter(pl.col("run_dir") == run_dir).sort("requested_line_no")
        u = usage.filter(pl.col("run_dir") == run_dir).sort("index").head(c.height)
        assert c.select("provider", "model").rows() == u.select("provider", "model").rows()
        checked += c.height
    assert checked > 300


def test_fallback_switches_the_model_for_that_call(fleet: Any) -> None:
    calls = ra.model_calls_df(fleet)
    fell = calls.filter(pl.col("fallbacks") > 0)
    assert fell.height > 0
    assert (fell["requested_model"] != fell["model"]).all()
    run = fell.row(0, named=True)
    others = calls.filter((pl.col("run_dir") == run["run_dir"])
                          & (pl.col("step") != run["step"]))
    # every other step runs on the run's model (each call starts from the first candidate)
    assert others.height > 0 and (others["model"] == run["requested_model"]).all()
    # and runs_df.model_id names only that one model
    runs = ra.runs_df(fleet).filter(pl.col("run_dir") == run["run_dir"])
    assert runs["model_id"].item() == run["requested_model"]


def test_tool_arguments_are_the_exact_logged_text(fleet: Any) -> None:
    tools = ra.tool_calls_df(fleet).filter(pl.col("requested_sequence").is_not_null())
    events = ra.events_df(fleet).filter(pl.col("event_type") == "tool.requested")
    j = tools.join(events, left_on=["run_dir", "requested_sequence"],
                   right_on=["run_dir", "sequence"], how="inner")
    assert j.height >= tools.height
    j = j.filter(pl.col("data").str.contains(pl.col("tool_call_id"), literal=True))
    assert j.height == tools.height  # one tool.requested line per call
    for args, data, prev, size in j.select("arguments", "data", "arguments_preview",
                                           "arguments_bytes").iter_rows():
        assert f'"arguments":{args}' in data            # exact text, not a re-serialisation
        assert json.loads(args) == json.loads(data)["arguments"]
        assert len(prev) <= 80 and "\n" not in prev
        assert size == len(args.encode())
    unknown = ra.tool_calls_df(fleet).filter(pl.col("outcome") == "unknown_tool")
    assert unknown.height > 0 and unknown["arguments"].is_null().all()


def test_omitted_arguments_keep_the_runners_size(tmp_path: Path, make_run) -> None:
    from tests.conftest import dumps, example_events

    lines = example_events().splitlines(keepends=True)
    out = []
    for raw in lines:
        ev = json.loads(raw)
        if ev["event_type"] == "tool.requested":
            ev["data"]["arguments"] = {"omitted": True, "sha256": "ab" * 32, "utf8_bytes": 25000}
            raw = dumps(ev) + b"\n"
        out.append(raw)
    run = make_run(events=b"".join(out))
    t = ra.tool_calls_df(run).filter(pl.col("arguments_omitted"))
    assert t.height > 0 and (t["arguments_bytes"] == 25000).all()


def test_result_size_counts_the_clipped_bytes(fleet: Any) -> None:
    tools = ra.tool_calls_df(fleet)
    events = ra.events_df(fleet).filter(pl.col("event_type") == "tool.completed")
    prev = events.with_columns(
        pl.col("data").str.json_decode(pl.Struct({"preview": pl.Utf8, "tool_call_id": pl.Utf8}))
        .alias("d")).unnest("d").filter(pl.col("preview").is_not_null())
    # joined by the completion's line: ids repeat (a continued session reuses call_0)
    j = tools.join(prev, left_on=["run_dir", "completed_line_no"], right_on=["run_dir", "line_no"])
    plain = j.filter(~pl.col("result_clipped"))
    assert plain.height > 100
    assert (plain["result_bytes"] == plain["preview"].str.len_bytes()).all()
    clipped = j.filter(pl.col("result_clipped"))
    assert clipped.height > 0
    assert (clipped["result_bytes"] > clipped["preview"].str.len_bytes()).all()
    assert tools.filter(~pl.col("executed") & pl.col("result_bytes").is_not_null()).height == 0


def test_task_fields_come_from_request_json(fleet: Any) -> None:
    runs = ra.runs_df(fleet)
    checked = 0
    for row in runs.iter_rows(named=True):
        path = Path(row["run_dir"]) / "request.json"
        if not path.exists():
            assert row["repository"] is None and row["instruction_summary"] is None
            continue
        req = json.loads(path.read_text("utf-8"))
        assert row["repository"] == req.get("repository")
        assert row["base_sha"] == req.get("base_sha")
        first = next(ln.strip() for ln in req["instruction"].splitlines() if ln.strip())
        assert row["instruction_summary"] == (first if len(first) <= 160
                                              else first[:159] + "…")
        checked += 1
    assert checked > 80


def test_cost_known_and_the_warning_of_the_summing_helper(fleet: Any) -> None:
    usage = ra.usage_df(fleet)
    assert (usage["cost_known"] == usage["total_cost"].is_not_null()).all()
    assert 0 < (~usage["cost_known"]).sum() < usage.height
    with pytest.warns(CostUnknownWarning, match=r"cost is unknown for \d+ of \d+ model calls"):
        per = cost_by_model(usage)
    assert per["unknown_cost_calls"].sum() == (~usage["cost_known"]).sum()
    assert per["calls"].sum() == usage.height
    assert per["total_tokens"].sum() == usage["total_tokens"].sum()
    known = usage.filter(pl.col("cost_known"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning when every cost is known
        ok = cost_by_model(known)
    assert ok["known_cost"].sum() == pytest.approx(known["total_cost"].sum())
