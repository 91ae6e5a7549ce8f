"""The tables against the writer's ground truth, not against each other (issue 29, item 7).

The synthetic writer records what it wrote while writing it (``rivumi_analysis/synth/truth.py``):
which lines open, start and complete each tool call and approval (it knows the call object,
whatever id it carries), every model call's usage per lane, the terminal events. The
generators write this into ``truth.jsonl`` beside the runs: ``sample_runs/truth.jsonl`` and a
corpus's ``<out>/truth.jsonl``. It is not a run directory and no loader reads it; only these
tests do. Here every table's rows and the run facts it holds are compared with it: on the
bundled sample runs, on a corpus, and on drawn fleets (hypothesis) of continued sessions
with reused tool-call and approval ids, runs without session.json or result.json,
unreadable runs, resumes, crashes, wind-down and reviewer lanes.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rivumi_analysis as ra
from rivumi_analysis.read.discovery import discover
from rivumi_analysis.synth.scenarios import run_script, sc_mixed
from rivumi_analysis.synth.truth import TRUTH_FILE, TruthLog, read_truth, write_truth
from tests.conftest import SAMPLE_RUNS

pytestmark = pytest.mark.timeout(600)

_FINISHED = ("completed", "failed", "cancelled")
_CALL_KEYS = ("line_no", "requested_line_no", "started_line_no", "completed_line_no",
              "tool_call_id", "name", "effect", "step", "outcome")
_APPROVAL_KEYS = ("line_no", "requested_line_no", "closed_line_no", "request_id", "action_id",
                  "tool_call_line_no", "effect", "outcome", "decision")


def _readable(rec: dict[str, Any]) -> bool:
    """A native or subagent run whose events.jsonl the writer left readable."""
    return rec["kind"] in ("native", "subagent") and rec["files"].get("events.jsonl", False)


def _by_run(df: pl.DataFrame, keys: tuple[str, ...]) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    for row in df.select("run_dir", *keys).iter_rows():
        out.setdefault(row[0], []).append(row[1:])
    return {k: sorted(v, key=lambda r: r[0]) for k, v in out.items()}


def _lane_sums(rows: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    out: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for r in rows:
        out[r["lane"]] += r["total_tokens"]
        calls[r["lane"]] += 1
    return {lane: (calls[lane], out[lane]) for lane in calls}


def check_against_truth(root: Path, truth: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Every table's rows and the run facts it holds equal ``truth`` (the records of every
    run under ``root``); returns the totals compared (so callers can assert coverage)."""
    root = root.resolve()
    fleet = ra.load_fleet(str(root))
    runs = ra.runs_df(fleet)
    tool_calls = ra.tool_calls_df(fleet)
    approvals = ra.approvals_df(fleet)
    model_calls = ra.model_calls_df(fleet)
    usage = ra.usage_df(fleet)
    # every run the writer wrote was found, and nothing else (truth.jsonl is not a run)
    run_dirs = {str(root / rec["run"]) for rec in truth.values()}
    assert {loc.run_dir for loc in discover(str(root)).runs} == run_dirs
    calls = _by_run(tool_calls, _CALL_KEYS)
    apprs = _by_run(approvals, _APPROVAL_KEYS)
    steps = dict(model_calls.group_by("run_dir").len().iter_rows())
    usage_by = {rd: _lane_sums(g.to_dicts()) for (rd,), g in usage.group_by("run_dir")}
    facts = {r["run_dir"]: r for r in runs.to_dicts()}
    totals = Counter()
    for rec in truth.values():
        rd = str(root / rec["run"])
        readable = _readable(rec)
        want_calls = [tuple(c[k] for k in _CALL_KEYS) for c in rec["tool_calls"]] if readable \
            else []
        want_apprs = [tuple(a[k] for k in _APPROVAL_KEYS) for a in rec["approvals"]] if readable \
            else []
        assert calls.get(rd, []) == want_calls, rec["run"]
        assert apprs.get(rd, []) == want_apprs, rec["run"]
        assert steps.get(rd, 0) == (rec["steps"] if readable else 0), rec["run"]
        totals["tool_calls"] += len(want_calls)
        totals["approvals"] += len(want_apprs)
        totals["model_calls"] += rec["steps"] if readable else 0
        if readable and rec["outcome"] in _FINISHED:
            manifest_usage = (rec["files"]["session.json"] and rec["profile"] == "current"
                              and rec["usage"])
            want = _lane_sums([u for u in rec["usage"] if manifest_usage or u["logged"]])
            assert usage_by.get(rd, {}) == want, rec["run"]
            totals["usage_checked"] += 1
        row = facts.get(rd)
        assert row is not None, rec["run"]  # every run is a row, readable or not
        if rec["kind"] == "fork":
            assert row["outcome"] == "fork_not_run", rec["run"]
        elif rec["kind"] == "external":
            assert (row["outcome"], row["terminal_reason"]) == (rec["outcome"],
                                                                rec["terminal_reason"])
        elif readable and rec["lines"]:
            # the run facts (issue 29 item 1) against what the writer wrote
            if rec["outcome"] in _FINISHED:
                assert row["outcome"] == rec["outcome"], rec["run"]
            else:  # the writer died or stopped: no terminal event in the last turn
                assert row["outcome"] in ("crashed", "interrupted"), (rec["run"], row["outcome"])
            assert row["terminal_reason"] == rec["terminal_reason"], rec["run"]
            assert row["step"] == rec["steps"], rec["run"]
            assert (row["provider_name"], row["model_id"]) == (rec["provider"],
                                                               rec["model"]), rec["run"]
            if rec["outcome"] in _FINISHED:
                assert row["total_tokens"] == rec["total_tokens"], rec["run"]
                totals["tokens_checked"] += 1
            ids = [c["tool_call_id"] for c in rec["tool_calls"]]
            rids = [a["request_id"] for a in rec["approvals"]]
            assert ("duplicate_tool_call_id" in row["warnings"]) == (len(ids) > len(set(ids))), \
                rec["run"]
            assert ("duplicate_request_id" in row["warnings"]) == (len(rids) > len(set(rids))), \
                rec["run"]
            totals["reused_ids"] += len(ids) > len(set(ids))
        totals["runs"] += 1
    # the counts downstream users show are the table's, so the truth's too
    assert tool_calls.height == totals["tool_calls"]
    assert approvals.height == totals["approvals"]
    # read from the path (clean logs by the column builders), in memory and through a
    # fresh Parquet store: the same rows, so the same truth
    with tempfile.TemporaryDirectory() as store:
        for cache in (False, True):
            for loader, df, key in ((ra.tool_calls_df, tool_calls, _CALL_KEYS),
                                    (ra.approvals_df, approvals, _APPROVAL_KEYS)):
                got = loader(str(root), cache=cache, store_dir=store)
                assert _by_run(got, key) == _by_run(df, key), (loader.__name__, cache)
    return dict(totals)


# --------------------------------------------------------------------------- sample_runs

def test_sample_runs_truth_file_is_beside_the_runs_and_documented() -> None:
    truth = read_truth(SAMPLE_RUNS)
    assert (SAMPLE_RUNS / TRUTH_FILE).is_file()
    assert "truth.jsonl" in (SAMPLE_RUNS / "README.md").read_text("utf-8")
    kinds = Counter(r["kind"] for r in truth.values())
    assert {"native", "subagent", "fork", "external"} <= set(kinds)
    outcomes = Counter(r["outcome"] for r in truth.values())
    assert {"completed", "failed", "cancelled", "crashed", "fork"} <= set(outcomes)


def test_sample_runs_tables_equal_the_writers_truth() -> None:
    truth = read_truth(SAMPLE_RUNS)
    totals = check_against_truth(SAMPLE_RUNS, truth)
    assert totals["runs"] >= 80 and totals["tool_calls"] > 200 and totals["reused_ids"] >= 1
    assert totals["usage_checked"] >= 50 and totals["tokens_checked"] >= 50


def test_sample_runs_have_a_continued_session_with_reused_ids_and_a_run_without_manifest(
        ) -> None:
    truth = read_truth(SAMPLE_RUNS)
    readme = (SAMPLE_RUNS / "README.md").read_text("utf-8")
    reused = [r for r in truth.values() if r["scenario"] == "continued_reused_ids"]
    assert len(reused) == 1 and reused[0]["continuations"] == 2
    ids = Counter(c["tool_call_id"] for c in reused[0]["tool_calls"])
    assert ids["call_0"] == len(reused[0]["tool_calls"]) > 3  # every call is call_0
    assert max(Counter(a["request_id"] for a in reused[0]["approvals"]).values()) == 3
    bare = [r for r in truth.values() if r["scenario"] == "no_manifest"]
    assert len(bare) == 1 and not bare[0]["files"]["session.json"]
    assert not (SAMPLE_RUNS / bare[0]["run"] / "session.json").exists()
    for rec in reused + bare:  # each with its README line saying what it shows
        line = next(ln for ln in readme.splitlines() if f"`{rec['run']}`" in ln)
        assert ("repeat across steps and turns" in line if rec in reused
                else "without its session.json" in line)


def test_run_page_and_error_chart_count_every_call_of_a_reused_id_session() -> None:
    from rivumi_analysis.viz import charts as C
    from rivumi_analysis.viz.report import load_tables
    from rivumi_analysis.viz.run_page import render_run_html

    truth = read_truth(SAMPLE_RUNS)
    rec = next(r for r in truth.values() if r["scenario"] == "continued_reused_ids")
    rd = str((SAMPLE_RUNS / rec["run"]).resolve())
    html, _ = render_run_html(load_tables([rd]), rd, sources=[rd])
    assert f"{len(rec['tool_calls'])} tool call(s)" in html
    fleet = ra.load_fleet(rd)
    _, _, n = C.tool_error_table(ra.tool_calls_df(fleet))
    assert n == len(rec["tool_calls"])
    seg = C.timeline_segments(tool_calls=ra.tool_calls_df(fleet))
    assert seg.filter(pl.col("lane") == "tool").height == len(rec["tool_calls"])


# --------------------------------------------------------------------------- fleets

def test_corpus_tables_equal_its_truth(tmp_path: Path) -> None:
    from rivumi_analysis.synth.corpus import generate_corpus

    out = tmp_path / "c"
    generate_corpus(str(out), runs=40, target_mb=2, seed=29, workers=1)
    totals = check_against_truth(out, read_truth(out))
    assert totals["runs"] >= 40 and totals["tool_calls"] > 100


_DROPS = st.sampled_from([(), (), ("session.json",), ("result.json",),
                          ("session.json", "result.json")])


@st.composite
def fleets(draw: Any) -> list[dict[str, Any]]:
    """Scripts of a small fleet: drawn sessions (1–5 turns, ids reused or not), some
    published without session.json or result.json, some with an unreadable events.jsonl."""
    scripts = []
    for seed in draw(st.lists(st.integers(0, 10**6), min_size=2, max_size=6, unique=True)):
        script = sc_mixed(seed)
        drop = draw(_DROPS)
        if drop:
            script["drop_files"] = list(drop)
        if draw(st.integers(0, 9)) == 0:
            script["unreadable_files"] = ["events.jsonl"]
        scripts.append(script)
    return scripts


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fleets())
def test_drawn_fleets_tables_equal_the_writers_truth(scripts: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "fleet"
        root.mkdir()
        log = TruthLog(root)
        for script in scripts:
            run_script(script, str(root), truth=log)
        write_truth(root / TRUTH_FILE, log.records())
        truth = read_truth(root)
        assert len(truth) == len(scripts)
        check_against_truth(root, truth)


def test_reused_ids_are_paired_within_the_step_not_merged() -> None:
    """A continued session of 3 turns whose every call is ``call_0``: one row per call,
    each started/completed line joined to its own request (the truth's pairs)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log = TruthLog(root)
        rd = run_script(sc_mixed(7, turns=3, reuse_ids=True, resume=True, ending="reviewer"),
                        str(root), truth=log)
        rec = log.records()[0]
        tc = ra.tool_calls_df(rd)
        assert tc.height == len(rec["tool_calls"]) > tc["tool_call_id"].n_unique()
        both = tc.drop_nulls(["requested_line_no", "completed_line_no"])
        assert both.height and (both["requested_line_no"] < both["completed_line_no"]).all()
        # each tool approval joins its own call by line, though every id is call_0..call_2
        ap = ra.approvals_df(rd).filter(pl.col("tool_call_line_no").is_not_null())
        j = ap.join(tc, left_on=["run_dir", "tool_call_line_no"], right_on=["run_dir", "line_no"])
        assert j.height == ap.height > tc["tool_call_id"].n_unique()
        assert (j["action_id"] == j["tool_call_id"]).all()
        assert (j["tool_call_line_no"] < j["line_no"]).all()  # asked after its request
        runs = ra.runs_df(rd)
        assert "duplicate_tool_call_id" in runs["warnings"][0]
        assert rec["tokens"]["reviewer"]["calls"] == 1
        assert os.path.basename(rd) == rec["run"]


def test_a_call_left_open_does_not_swallow_a_later_call_of_its_id() -> None:
    """A cancelled edit (``call_0``: requested, never completed) ends a turn; the next turn's
    ``call_0`` is an unknown tool (a completion with no request): two calls, not one. The
    open call belongs to its model step and does not outlive it."""
    from rivumi_analysis.synth.scenarios import Build

    b = Build("left_open", 3)
    [c] = b.model([("replace_text", {"path": b.task.path, "old_text": b.task.old,
                                     "new_text": b.task.new})], call_ids=["call_0"])
    b.tool(c, decision="cancel")
    b.finish("cancelled", "approval_cancelled")
    b.close()
    b.add("continue", instruction="Try again.", idle=60.0)
    [c] = b.model([("save_memory", {"note": "x"})], call_ids=["call_0"])
    b.tool(c)
    b.final("Done.")
    b.finish("completed", "no_changes")
    b.close()
    with tempfile.TemporaryDirectory() as tmp:
        log = TruthLog(tmp)
        rd = run_script(b.script(), tmp, truth=log)
        rec = log.records()[0]
        assert [c["outcome"] for c in rec["tool_calls"]] == ["not_started", "unknown_tool"]
        got = _by_run(ra.tool_calls_df(rd, cache=False), _CALL_KEYS)
        assert list(got.values())[0] == [tuple(c[k] for k in _CALL_KEYS)
                                         for c in rec["tool_calls"]]
