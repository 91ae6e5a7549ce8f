"""messages_df (the transcript) and search (regex over events, tool arguments, messages)."""

from __future__ import annotations

import json
import re
from typing import Any

import polars as pl
import pytest

import rivumi_analysis as ra
from rivumi_analysis import cli
from rivumi_analysis.tables.messages import messages_df
from rivumi_analysis.text_search import search
from tests.conftest import EXAMPLE_DIR, SAMPLE_RUNS


@pytest.fixture(scope="module")
def fleet() -> Any:
    return ra.load_fleet(str(SAMPLE_RUNS))


def test_manifest_messages_are_complete_and_in_order(fleet: Any) -> None:
    df = messages_df(fleet)
    run = str(SAMPLE_RUNS / "completed" / "b7423824b1fa434fb77cea7738a4d5e2")
    manifest = json.loads((SAMPLE_RUNS / "completed" / "b7423824b1fa434fb77cea7738a4d5e2"
                           / "session.json").read_text("utf-8"))["messages"]
    rows = df.filter((pl.col("run_dir") == run) & (pl.col("source") == "session.json"))
    assert rows["position"].to_list() == list(range(len(manifest)))
    for row, item in zip(rows.iter_rows(named=True), manifest, strict=True):
        assert row["content"] == item.get("content")
        if "role" in item:
            assert row["role"] == item["role"]
            calls = item.get("tool_calls") or []
            assert row["tool_calls"] == [c["name"] for c in calls]
            assert (json.loads(row["tool_calls_json"]) if calls else []) == calls
        else:
            assert row["role"] == "tool" and row["ok"] == item["ok"]
            assert row["tool_call_id"] == item["tool_call_id"]


def test_event_messages_carry_usage_and_match_model_calls(fleet: Any) -> None:
    df = messages_df(fleet).filter(pl.col("item") == "model.completed")
    calls = ra.model_calls_df(fleet).filter(pl.col("outcome") == "completed")
    assert df.height == calls.height
    per = [d.group_by("run_dir").agg(pl.col("total_tokens").sum(), pl.len().alias("n"),
                                     pl.col("tool_calls").list.len().sum().alias("names"))
           .sort("run_dir") for d in (df, calls)]
    assert per[0].equals(per[1])


def test_tokens_only_where_the_log_carries_them(fleet: Any) -> None:
    df = messages_df(fleet)
    has = df.filter(pl.col("total_tokens").is_not_null())
    assert set(has["item"]) == {"model.completed", "role_lane.completed"}
    # every other row is null, not 0 or an estimate
    rest = df.filter(~pl.col("item").is_in(["model.completed", "role_lane.completed"]))
    assert rest.height > 0 and rest.select(
        pl.col("input_tokens", "output_tokens", "total_tokens").is_null().all()).row(0) == (
        True, True, True)
    # the reviewer's replies carry exactly the reviewer lane's usage
    review = df.filter(pl.col("item") == "role_lane.completed")
    lane = ra.usage_df(fleet).filter(pl.col("lane") == "reviewer")
    assert review.height == lane.height > 0 and (review["role"] == "reviewer").all()
    key = ["run_dir", "input_tokens", "output_tokens", "total_tokens"]
    assert review.select(key).sort(key).equals(lane.select(key).sort(key))
    assert review["content"].drop_nulls().len() == review.height


def test_compacted_runs_keep_the_dropped_exchanges_in_events(fleet: Any) -> None:
    df = messages_df(fleet)
    compacted = df.filter(pl.col("context_source") == "history_summary_fallback")["run_dir"]
    assert compacted.len() > 0
    for run in compacted.unique().to_list():
        r = df.filter(pl.col("run_dir") == run)
        manifest = r.filter((pl.col("source") == "session.json") & (pl.col("role") == "tool"))
        logged = r.filter(pl.col("item") == "tool.completed")
        assert logged.height > manifest.height  # the log still has what compaction dropped


def test_external_runs_have_messages(fleet: Any) -> None:
    df = messages_df(fleet)
    ext = ra.runs_df(fleet).filter(pl.col("kind") == "external")["run_dir"]
    got = df.filter(pl.col("run_dir").is_in(ext.implode()))
    assert got.height >= ext.len() and (got["source"] == "events").all()


def test_search_finds_every_table_with_location_and_snippet(fleet: Any) -> None:
    hits = search(fleet, r"Unknown tool 'save_memory'")
    assert set(hits["table"]) >= {"events", "messages"}
    ev = hits.filter(pl.col("table") == "events").row(0, named=True)
    events = ra.events_df(fleet)
    line = events.filter((pl.col("run_dir") == ev["run_dir"])
                         & (pl.col("line_no") == ev["line_no"])).row(0, named=True)
    assert line["sequence"] == ev["sequence"] and "Unknown tool" in line["data"]
    assert "Unknown tool 'save_memory'" in ev["snippet"]
    assert search(fleet, "unknown TOOL 'SAVE", ignore_case=True).height == hits.height
    assert search(fleet, "unknown TOOL 'SAVE").height == 0
    only = search(fleet, r"Unknown tool 'save_memory'", tables=["messages"])
    assert set(only["table"]) == {"messages"}


def test_search_refuses_bad_input_readably() -> None:
    with pytest.raises(ValueError, match="unknown table"):
        search(str(EXAMPLE_DIR), "x", tables=["nope"])
    with pytest.raises(ValueError, match="invalid pattern"):
        search(str(EXAMPLE_DIR), "(")


def test_search_cli(capsys) -> None:
    assert cli.main(["search", "def add", str(EXAMPLE_DIR), "--format", "jsonl"]) == 0
    rows = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert rows and all(r["run_id"] == EXAMPLE_DIR.name for r in rows)
    assert {"run_dir", "sequence", "snippet", "table", "column"} <= set(rows[0])
    assert cli.main(["search", "(", str(EXAMPLE_DIR)]) == 2
    assert "invalid pattern" in capsys.readouterr().err


def _oracle(fleet: Any, pattern: str, flags: int = 0) -> list[tuple[Any, ...]]:
    """The hits Python ``re`` finds, keyed like ``search`` rows (run, table, column, place)."""
    import re

    from rivumi_analysis.text_search import SEARCH_TABLES, _table

    rx = re.compile(pattern, flags)
    out = []
    for name, cols in SEARCH_TABLES.items():
        df = _table(name, fleet)
        none = [None] * df.height
        seq = (none if name == "runs" else
               df["requested_sequence" if name == "tool_calls" else "sequence"].to_list())
        line = none if name == "runs" else df["line_no"].to_list()
        for col in cols:
            for k, text in enumerate(df[col].to_list()):
                if text is not None and rx.search(text):
                    out.append((df["run_dir"][k], name, col, seq[k], line[k]))
    return sorted(out, key=repr)


def _keys(hits: pl.DataFrame) -> list[tuple[Any, ...]]:
    return sorted(hits.select("run_dir", "table", "column", "sequence", "line_no").rows(),
                  key=repr)


@pytest.mark.parametrize("pattern", [
    r"Unknown tool (?='save_memory')",          # look-ahead
    r"(?<!\w)save_memory(?!\w)",                # negative look-behind and look-ahead
    r"(?<=def )add\(",                          # look-behind
    r"(\w)\1\1",                                # backreference
    r"(?P<q>['\"])save_memory(?P=q)",           # named backreference
    r"Unknown tool",                            # ordinary: the vectorised engine
])
def test_search_look_around_and_backreferences_match_python_re(fleet: Any, pattern: str) -> None:
    from rivumi_analysis.text_search import _rust_accepts

    hits = search(fleet, pattern)
    want = _oracle(fleet, pattern)
    assert want, pattern  # each pattern finds something, so equality is not vacuous
    assert _keys(hits) == want
    assert hits.height == len(want)
    assert _rust_accepts(pattern) == (pattern == "Unknown tool")


def test_search_fallback_snippet_ignore_case_and_cli(capsys) -> None:
    hits = search(str(EXAMPLE_DIR), r"(?<=DEF )ADD\(", ignore_case=True, tables=["messages"])
    assert hits.height == 2 and all("def add(" in s for s in hits["snippet"])
    assert search(str(EXAMPLE_DIR), r"(?<=DEF )ADD\(", tables=["messages"]).height == 0
    with pytest.raises(ValueError, match="invalid pattern"):
        search(str(EXAMPLE_DIR), r"(?<=a+)b")  # Python re rejects variable-width look-behind
    assert cli.main(["search", r"(?<=def )add\(", str(EXAMPLE_DIR), "--format", "jsonl"]) == 0
    rows = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert rows and all("def add(" in r["snippet"] for r in rows)


def test_search_covers_tool_errors_results_model_content_and_instructions(fleet: Any) -> None:
    """The text a user looks for is found where it lives (issue 29, item 6): a tool's error
    (tool_calls.error), its arguments and its result preview, the model's reply and the task
    instruction; each column is searched and reports its own hits."""
    tc = ra.tool_calls_df(fleet)
    err = tc.filter(pl.col("error").str.starts_with("No such file") | pl.col("error")
                    .str.starts_with("command exited"))["error"][0]
    hits = search(fleet, err[:22], tables=["tool_calls"])
    want = tc.filter(pl.col("error").str.contains(err[:22], literal=True))
    assert set(hits["column"]) >= {"error"}
    assert hits.filter(pl.col("column") == "error").height == want.height > 0
    assert set(hits.filter(pl.col("column") == "error")["line_no"]) == set(want["line_no"])
    # a result preview (check output) and a model reply live in messages.content
    assert search(fleet, r"short test summary info", tables=["messages"]).height > 0
    assert search(fleet, r"re-ran the test suite", tables=["messages"]).height > 0
    runs = ra.runs_df(fleet)
    instr = runs["instruction_summary"].drop_nulls()[0]
    got = search(fleet, re.escape(instr), tables=["runs"])
    assert got.height == runs.filter(pl.col("instruction_summary") == instr).height
    assert set(got["column"]) == {"instruction_summary"} and got["sequence"].null_count() \
        == got.height
