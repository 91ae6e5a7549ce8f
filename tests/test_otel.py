"""``rivumi-analysis otel``: runs as OpenTelemetry GenAI traces, checked against the tables,
against the raw example log, against a golden OTLP/JSON file, and through a real receiver
(a local Phoenix server on 127.0.0.1, read back with its client)."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import rivumi_analysis as ra
from rivumi_analysis.cli import main

from .phoenix_helpers import START_S, PhoenixError, free_port, phoenix_server, tail

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_runs"
EXAMPLE_ID = "a66038f97f204cb3aaa96339f195c37e"
EXAMPLE = SAMPLE / "example" / EXAMPLE_ID
GOLDEN = ROOT / "tests" / "fixtures" / "otel" / f"{EXAMPLE_ID}.otlp.jsonl"


def _value(v: dict[str, Any]) -> Any:
    (kind, x), = v.items()
    if kind == "intValue":
        return int(x)
    if kind == "arrayValue":
        return [_value(i) for i in x.get("values", [])]
    return x


def _attrs(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {a["key"]: _value(a["value"]) for a in items}


def _spans(path: Path) -> list[dict[str, Any]]:
    """Every span of an OTLP/JSON file, attributes as a dict, with its line index."""
    out = []
    for i, line in enumerate(path.read_text("utf-8").splitlines()):
        req = json.loads(line)
        for rs in req["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    s["attrs"] = _attrs(s.get("attributes", []))
                    s["line"] = i
                    for e in s.get("events", []):
                        e["attrs"] = _attrs(e.get("attributes", []))
                    out.append(s)
    return out


def _export(*args: str) -> int:
    return main(["otel", *args])


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("otel")
    a, b = d / "traces.jsonl", d / "again.jsonl"
    assert _export(str(SAMPLE), "--out", str(a)) == 0
    assert _export(str(SAMPLE), "--out", str(b)) == 0
    return a, b


@pytest.fixture(scope="module")
def tables() -> dict[str, pl.DataFrame]:
    return {"runs": ra.runs_df(str(SAMPLE)), "model_calls": ra.model_calls_df(str(SAMPLE)),
            "tool_calls": ra.tool_calls_df(str(SAMPLE)), "events": ra.events_df(str(SAMPLE)),
            "quarantine": ra.quarantine_df(str(SAMPLE)),
            "approvals": ra.approvals_df(str(SAMPLE))}


def test_one_root_per_run_one_span_per_call_and_token_sums(exported, tables) -> None:
    spans = _spans(exported[0])
    runs, mc, tc = tables["runs"], tables["model_calls"], tables["tool_calls"]
    roots = [s for s in spans if "parentSpanId" not in s]
    assert len(roots) == runs.height
    assert {r["attrs"]["rivumi.run.path"] for r in roots} == set(runs["run_path"])
    assert len({s["traceId"] for s in spans}) == runs.height
    # one line (one ExportTraceServiceRequest) per run, one trace per line
    assert len({s["line"] for s in spans}) == runs.height
    assert all(len({s["traceId"] for s in spans if s["line"] == i}) == 1
               for i in {s["line"] for s in spans})
    by_op = Counter(s["attrs"].get("gen_ai.operation.name") for s in spans)
    assert by_op["invoke_agent"] == runs.height
    assert by_op["chat"] == mc.height
    assert by_op["execute_tool"] == tc.height
    chats = [s for s in spans if s["attrs"].get("gen_ai.operation.name") == "chat"]
    for attr, col in (("gen_ai.usage.input_tokens", "input_tokens"),
                      ("gen_ai.usage.output_tokens", "output_tokens"),
                      ("gen_ai.usage.cache_read.input_tokens", "cached_input_tokens"),
                      ("gen_ai.usage.reasoning.output_tokens", "reasoning_tokens")):
        assert sum(s["attrs"].get(attr, 0) for s in chats) == mc[col].sum(), attr
    assert mc["input_tokens"].sum() > 0
    # failed and denied tool calls carry an error status
    bad = tc.filter(pl.col("outcome").is_in(["error", "denied", "unknown_tool"])).height
    tools = [s for s in spans if s["attrs"].get("gen_ai.operation.name") == "execute_tool"]
    assert sum(s.get("status", {}).get("code") == 2 for s in tools) == bad > 0


def test_every_parent_inside_its_trace_and_ids_stable(exported) -> None:
    a, b = exported
    assert a.read_bytes() == b.read_bytes()  # same ids, times, everything
    spans = _spans(a)
    ids = Counter(s["spanId"] for s in spans)
    assert max(ids.values()) == 1, "span ids are unique"
    in_trace = defaultdict(set)
    for s in spans:
        in_trace[s["traceId"]].add(s["spanId"])
        assert len(s["traceId"]) == 32 and len(s["spanId"]) == 16  # hex, as OTLP/JSON wants
    for s in spans:
        if "parentSpanId" in s:
            assert s["parentSpanId"] in in_trace[s["traceId"]], s["name"]
        assert int(s["startTimeUnixNano"]) <= int(s["endTimeUnixNano"])


def test_every_event_line_accounted_for(exported, tables) -> None:
    """Each accepted line is one span's start or end or one span event; each quarantined line
    and each verdict is an event of the root."""
    spans = _spans(exported[0])
    key_of = {s["traceId"]: s["attrs"]["rivumi.run.path"] for s in spans
              if "parentSpanId" not in s}
    seen: dict[str, Counter] = defaultdict(Counter)
    quarantined: dict[str, set[int]] = defaultdict(set)
    audits = Counter()
    for s in spans:
        run = key_of[s["traceId"]]
        for k in ("rivumi.line_no", "rivumi.end_line_no"):
            if k in s["attrs"]:
                seen[run][s["attrs"][k]] += 1
        for e in s.get("events", []):
            if e["name"] == "rivumi.quarantined_line":
                quarantined[run].add(e["attrs"]["rivumi.line_no"])
            elif e["name"] == "rivumi.audit":
                audits[run] += 1
                assert "rivumi.verdict" in e["attrs"]
            else:
                seen[run][e["attrs"]["rivumi.line_no"]] += 1
    path_of = dict(zip(tables["runs"]["run_dir"], tables["runs"]["run_path"], strict=True))
    want: dict[str, Counter] = defaultdict(Counter)
    for rd, ln in tables["events"].select("run_dir", "line_no").iter_rows():
        want[path_of[rd]][ln] += 1
    for run in set(want) | set(seen):
        assert seen[run] == want[run], run
    q = defaultdict(set)
    for rd, ln in tables["quarantine"].select("run_dir", "line_no").iter_rows():
        q[path_of[rd]].add(ln)
    assert quarantined == q and sum(map(len, q.values())) > 0
    assert set(audits.values()) == {1} and len(audits) == tables["runs"].height


def _ns(iso: str) -> int:
    dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return (int(dt.timestamp()) * 1_000_000 + dt.microsecond) * 1000


def test_example_run_against_its_raw_log(tmp_path: Path) -> None:
    """Truth from the bytes: counts, token sums and times from events.jsonl itself."""
    out = tmp_path / "ex.jsonl"
    assert _export(str(EXAMPLE), "--out", str(out)) == 0
    spans = _spans(out)
    events = [json.loads(x) for x in (EXAMPLE / "events.jsonl").read_text("utf-8").splitlines()]
    types = Counter(e["event_type"] for e in events)
    ops = Counter(s["name"].split()[0] for s in spans)
    assert ops == {"invoke_agent": 1, "chat": types["model.requested"],
                   "execute_tool": types["tool.requested"],
                   "await_approval": types["approval.requested"],
                   "verify": types["verification.started"]}
    usage = [e["data"]["usage"] for e in events if e["event_type"] == "model.completed"]
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert sum(s["attrs"]["gen_ai.usage.input_tokens"] for s in chats) == \
        sum(u["input_tokens"] for u in usage)
    assert sum(s["attrs"]["gen_ai.usage.output_tokens"] for s in chats) == \
        sum(u["output_tokens"] for u in usage)
    root = next(s for s in spans if "parentSpanId" not in s)
    assert int(root["startTimeUnixNano"]) == _ns(events[0]["created_at"])
    assert int(root["endTimeUnixNano"]) == _ns(events[-1]["created_at"])
    assert root["attrs"]["gen_ai.conversation.id"] == EXAMPLE_ID
    assert root["attrs"]["rivumi.run.outcome"] == "completed"
    assert root["attrs"]["rivumi.run.terminal_reason"] == events[-1]["data"]["terminal_reason"]
    assert root["attrs"]["rivumi.budget.max_steps"] == 12
    for s in spans:  # each span starts and ends at its lines' created_at, exactly
        if "rivumi.line_no" in s["attrs"]:
            assert int(s["startTimeUnixNano"]) == \
                _ns(events[s["attrs"]["rivumi.line_no"] - 1]["created_at"])
        if "rivumi.end_line_no" in s["attrs"]:
            assert int(s["endTimeUnixNano"]) == \
                _ns(events[s["attrs"]["rivumi.end_line_no"] - 1]["created_at"])
    tools = [s for s in spans if s["name"].startswith("execute_tool ")]
    first = next(e for e in events if e["event_type"] == "tool.requested")
    t0 = next(s for s in tools if s["attrs"]["rivumi.line_no"] == events.index(first) + 1)
    assert t0["attrs"]["gen_ai.tool.call.id"] == first["data"]["tool_call_id"]
    assert json.loads(t0["attrs"]["gen_ai.tool.call.arguments"]) == first["data"]["arguments"]


def test_golden_otlp_json_of_the_example_run(tmp_path: Path) -> None:
    """The shared example run's export, byte for byte (review a deliberate change with
    ``RIVUMI_UPDATE_GOLDEN=1 pytest tests/test_otel.py -k golden``). The copy in another
    folder gives the same bytes: ids come from the run key, not the path."""
    copy = tmp_path / "elsewhere" / EXAMPLE_ID
    shutil.copytree(EXAMPLE, copy)
    out = tmp_path / "ex.jsonl"
    assert _export(str(copy), "--out", str(out)) == 0
    if os.environ.get("RIVUMI_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_bytes(out.read_bytes())
    assert out.read_bytes() == GOLDEN.read_bytes()


def _strings(spans: list[dict[str, Any]]) -> str:
    """Every string value of the spans' and their events' attributes, one per line."""
    out = []
    for s in spans:
        for attrs in [s["attrs"], *(e["attrs"] for e in s.get("events", []))]:
            for v in attrs.values():
                for x in v if isinstance(v, list) else [v]:
                    if isinstance(x, str):
                        out.append(x)
    return "\n".join(out)


def test_redact_leaves_out_content(tmp_path: Path) -> None:
    run = SAMPLE / "completed" / "89e56fb2524148ad87624263f771c537"
    full, red = tmp_path / "full.jsonl", tmp_path / "red.jsonl"
    assert _export(str(run), "--out", str(full)) == 0
    assert _export(str(run), "--out", str(red), "--redact") == 0
    events = [json.loads(x) for x in (run / "events.jsonl").read_text("utf-8").splitlines()]
    content = next(e["data"]["content"] for e in events
                   if e["event_type"] == "model.completed" and e["data"].get("content"))
    preview = next(e["data"]["preview"] for e in events if e["event_type"] == "approval.requested")
    needle = max((v for e in events if e["event_type"] == "tool.requested"
                  for v in e["data"]["arguments"].values() if isinstance(v, str)), key=len)
    assert len(needle) > 20
    spans_full, spans_red = _spans(full), _spans(red)
    text_full, text_red = _strings(spans_full), _strings(spans_red)
    opt_in = ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.output.messages")
    assert all(any(k in s["attrs"] for s in spans_full) for k in opt_in)
    assert not any(k in s["attrs"] for s in spans_red for k in opt_in)
    assert json.dumps(content)[1:-1] in text_full
    assert json.dumps(needle)[1:-1] in text_full
    assert json.dumps(content)[1:-1] not in text_red and needle not in text_red
    assert json.dumps(needle)[1:-1] not in text_red
    for text in (text_full, text_red):  # approval previews never leave
        assert preview not in text and json.dumps(preview)[1:-1] not in text
    # the same spans, only fewer attributes
    assert [s["spanId"] for s in spans_full] == [s["spanId"] for s in spans_red]


def test_changed_only_sends_only_changed_runs(tmp_path: Path) -> None:
    src = tmp_path / "runs"
    for rel in (f"example/{EXAMPLE_ID}", "completed/89e56fb2524148ad87624263f771c537",
                "subagents/44a48851c3094be08e29cf7340c2a238"):
        shutil.copytree(SAMPLE / rel, src / Path(rel).name)
    out, state = tmp_path / "t.jsonl", tmp_path / "state.json"
    assert _export(str(src), "--out", str(out), "--since", str(state)) == 0
    first = _spans(out)
    assert sum("parentSpanId" not in s for s in first) == 4  # a subagent is a run too
    assert json.loads(state.read_text())["runs"]
    assert _export(str(src), "--out", str(out), "--since", str(state)) == 0
    assert _spans(out) == first  # nothing changed: nothing appended
    log = src / EXAMPLE_ID / "events.jsonl"
    st = log.stat()
    os.utime(log, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert _export(str(src), "--out", str(out), "--since", str(state)) == 0
    after = _spans(out)
    new = [s for s in after if s["line"] == max(x["line"] for x in after)]
    assert len(after) > len(first)
    assert {s["attrs"].get("gen_ai.conversation.id") for s in new} == {EXAMPLE_ID}
    # the re-sent run has the ids it had: a receiver deduplicates it
    old_ids = {s["spanId"] for s in first if s["attrs"].get("gen_ai.conversation.id") ==
               EXAMPLE_ID}
    assert {s["spanId"] for s in new} == old_ids


def test_subagent_and_fork_links(exported, tables) -> None:
    spans = _spans(exported[0])
    by_id = {s["spanId"]: s for s in spans}
    roots = {s["attrs"]["rivumi.run.path"]: s for s in spans if "parentSpanId" not in s}
    runs = tables["runs"]
    children = runs.filter(pl.col("kind") == "subagent")
    assert children.height > 0
    for path in children["run_path"]:
        root = roots[path]
        (link,) = [ln for ln in root.get("links", [])
                   if _attrs(ln["attributes"])["rivumi.link"] == "parent"]
        dispatcher = by_id[link["spanId"]]
        assert dispatcher["traceId"] == link["traceId"] != root["traceId"]
        assert dispatcher["attrs"]["gen_ai.tool.name"] in ("dispatch_subagents", "agent")
        assert any(ln["traceId"] == root["traceId"] and ln["spanId"] == root["spanId"]
                   for ln in dispatcher.get("links", []))
    forks = runs.filter(pl.col("kind") == "fork")
    assert forks.height > 0
    fl = ra.forks_df(str(SAMPLE)).filter(pl.col("row_kind") == "fork_link")
    src_path = dict(zip(runs["run_dir"], runs["run_path"], strict=True))
    for row in fl.iter_rows(named=True):
        root = roots[src_path[row["run_dir"]]]
        (link,) = root["links"]
        target = by_id[link["spanId"]]
        assert target["traceId"] == roots[src_path[row["source_run_dir"]]]["traceId"]
        lines = (target["attrs"].get("rivumi.line_no"), target["attrs"].get("rivumi.end_line_no"))
        assert _attrs(link["attributes"])["rivumi.fork.point_sequence"] == \
            row["fork_point_sequence"]
        if "parentSpanId" in target:  # the span holding the fork point
            assert lines[0] is not None


def test_usage_errors() -> None:
    with pytest.raises(SystemExit) as exc:
        _export(str(EXAMPLE))
    assert exc.value.code == 2
    assert _export(str(EXAMPLE), "--endpoint", "ftp://x") == 2
    assert _export(str(SAMPLE / "nope"), "--out", "/tmp/x.jsonl") == 2


def test_receiver_down_is_an_error_not_a_hang(capsys) -> None:
    port = free_port()  # nothing listens there
    t0 = time.monotonic()
    assert _export(str(EXAMPLE), "--endpoint", f"http://127.0.0.1:{port}",
                   "--timeout", "2") == 3
    assert time.monotonic() - t0 < 60
    assert "did not accept" in capsys.readouterr().err


# --- a real receiver: Phoenix --------------------------------------------------------------------

@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory):
    """A Phoenix server on 127.0.0.1 (its own working dir, telemetry off), stopped after."""
    work = tmp_path_factory.mktemp("phoenix")
    try:
        with phoenix_server(work) as base:
            yield base, work
    except PhoenixError as exc:
        pytest.fail(str(exc))


@pytest.mark.slow
@pytest.mark.timeout(START_S + 600)
def test_phoenix_round_trip(phoenix, tables, exported) -> None:
    from phoenix.client import Client

    base, work = phoenix
    assert _export(str(SAMPLE), "--endpoint", base) == 0
    runs, mc, tc = tables["runs"], tables["model_calls"], tables["tool_calls"]
    expected = len(_spans(exported[0]))
    client = Client(base_url=base)
    deadline = time.monotonic() + 120
    while True:  # Phoenix inserts spans in the background
        got = client.spans.get_spans(project_identifier="default", limit=100_000, timeout=60)
        if len(got) >= expected or time.monotonic() > deadline:
            break
        time.sleep(2)
    ops = Counter(s["attributes"].get("gen_ai.operation.name") for s in got)
    assert ops["invoke_agent"] == runs.height, tail(work)
    assert ops["chat"] == mc.height
    assert ops["execute_tool"] == tc.height
    roots = [s for s in got if s["parent_id"] is None]
    assert len(roots) == runs.height
    in_trace = defaultdict(set)
    for s in got:
        in_trace[s["context"]["trace_id"]].add(s["context"]["span_id"])
    assert len(in_trace) == runs.height
    for s in got:
        if s["parent_id"] is not None:
            assert s["parent_id"] in in_trace[s["context"]["trace_id"]]
    chats = [s for s in got if s["attributes"].get("gen_ai.operation.name") == "chat"]
    for attr, col in (("gen_ai.usage.input_tokens", "input_tokens"),
                      ("gen_ai.usage.output_tokens", "output_tokens")):
        assert sum(s["attributes"].get(attr, 0) for s in chats) == mc[col].sum()
    # a second send of the same runs is deduplicated by the ids
    assert _export(str(SAMPLE), "--endpoint", base) == 0
    time.sleep(3)
    again = client.spans.get_spans(project_identifier="default", limit=100_000, timeout=60)
    assert len(again) == len(got)


@pytest.mark.slow
def test_a_loaded_fleet_exports_as_the_store_does(exported, tmp_path: Path) -> None:
    """The in-memory path (a fleet from load_fleet, as in the notebooks) and the store path
    give the same file."""
    from rivumi_analysis.otel import export_otel

    out = tmp_path / "fleet.jsonl"
    res = export_otel(ra.load_fleet(str(SAMPLE)), out=str(out))
    assert res.sent == res.runs > 0
    assert out.read_bytes() == exported[0].read_bytes()
