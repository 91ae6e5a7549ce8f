"""Runs as OpenTelemetry GenAI traces: OTLP/JSON files or OTLP/HTTP to any receiver.

Built on the OpenTelemetry Python SDK (extra ``rivumi-analysis[otel]``): spans are the SDK's
``ReadableSpan``, encoded by ``opentelemetry-exporter-otlp-proto-common`` and sent by the
SDK's OTLP/HTTP (protobuf) exporter, or written as OTLP/JSON (the OTLP file format: one
``ExportTraceServiceRequest`` per line, one line per run) through protobuf's own JSON
mapping, with trace and span ids in hex as OTLP/JSON requires.

Mapping (OpenTelemetry semantic conventions **v1.44.0**, GenAI spans, as named by
``opentelemetry-semantic-conventions`` 0.66b2, which the pinned SDK 1.45 brings;
``SEMCONV_VERSION``):

- one trace per run; root span ``invoke_agent rivumi`` (``gen_ai.operation.name``,
  ``gen_ai.agent.name``, ``gen_ai.agent.id`` and ``gen_ai.conversation.id`` = run id,
  ``gen_ai.provider.name``, ``gen_ai.request.model``, outcome (``runs_df.outcome``, the
  shared run fact), terminal reason, verdict and budgets as ``rivumi.*``) from the run's
  first to its last event;
- one ``chat {model}`` span per model call (``model_calls_df``): request and response model,
  ``gen_ai.usage.input_tokens`` / ``output_tokens`` / ``cache_read.input_tokens`` /
  ``reasoning.output_tokens``, ``gen_ai.response.finish_reasons``; ``model.retry``,
  ``model.fallback``, ``model.cache_trace`` and ``thinking.*`` as its span events;
- one ``execute_tool {name}`` span per tool call (``tool_calls_df``, keyed by the line of its
  ``tool.requested``): ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, effect, outcome, error
  status for failed, denied and unknown tools; ``tool.started`` and ``approval.reused`` as
  its events; each approval wait a child span ``await_approval`` of the call (or of the
  verification) it gates; each final-verification check a span ``verify {name}``;
- every other event a span event on the root (``session.resumed`` / ``session.continued``
  with ``rivumi.gap_seconds``, the time since the event before), and so are each
  quarantined line (``rivumi.quarantined_line``) and the audit verdict with its reasons
  (``rivumi.audit``): nothing is dropped. Every event line is the start or end of one span
  or one span event (``rivumi.line_no`` / ``rivumi.end_line_no``);
- a subagent run is its own trace, linked both ways with the parent's span that dispatched
  it; a fork run's root links to the span of its source run that holds the fork point;
- times are the events' ``created_at`` exactly (microseconds); trace and span ids are
  BLAKE2b digests of the run key (the run folder's name, ``<parent>/subagents/<id>`` for a
  subagent: independent of where the fleet lies) and the line number, so an export repeated
  gives the same ids and a receiver can deduplicate.

Content: by default only the GenAI opt-in content attributes carry content
(``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``, ``gen_ai.output.messages``);
approval previews, summaries, messages and other free text in event data never leave.
``redact=True`` also leaves out those opt-in attributes, error texts, policy reasons and
the audit message: what remains are ids, types, names, codes, numbers and times.
Every span also has ``openinference.span.kind`` (AGENT, LLM, TOOL, CHAIN), the one
attribute outside the GenAI conventions that is not ``rivumi.*``: Phoenix shows span kinds
by it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import polars as pl

from ._version import __version__
from .read.discovery import DEFAULT_MAX_DEPTH, Source

__all__ = ["MAPPING_VERSION", "SEMCONV_VERSION", "OtelExport", "OtelExportError",
           "export_otel", "run_spans", "to_otlp_json"]

SEMCONV_VERSION = "1.44.0"
"""The OpenTelemetry semantic conventions (GenAI spans) the mapping follows."""
MAPPING_VERSION = 1
"""Bumped when the mapping changes: an incremental export then re-sends every run."""
AGENT_NAME = "rivumi"
SCOPE = "rivumi_analysis.otel"
MAX_STRING = 32 * 1024
"""Longest string attribute (characters); longer values are cut and flagged."""
BATCH_SPANS = 2000
"""Spans per OTLP/HTTP request (whole runs; a run with more is sent alone)."""

_CHAT_EVENTS = frozenset({"model.retry", "model.fallback", "model.cache_trace",
                          "thinking.classified", "thinking.healed"})
# data keys holding free text (model, tool or user content): never copied into attributes
_CONTENT_KEYS = frozenset({"content", "preview", "arguments", "summary", "instruction",
                           "messages", "output", "stdout", "stderr", "data", "prompt",
                           "text", "result"})
# data keys with diagnostic free text: kept by default, left out under redact
_REDACTED_KEYS = frozenset({"error", "policy_reason", "reason_text", "message", "hook"})
_INT64 = (-(2 ** 63), 2 ** 63 - 1)


class OtelExportError(Exception):
    """The export could not be done (bad destination, receiver refused, no runs)."""


@dataclass(slots=True)
class OtelExport:
    """What an export did."""

    runs: int
    """Runs in the source."""
    sent: int
    """Runs exported (all, or the changed ones when incremental)."""
    spans: int
    destination: str
    seconds: float
    incremental: bool = False
    state: str | None = None
    skipped: list[dict[str, str]] = field(default_factory=list)
    """Runs with no timestamp at all (no event, no manifest time): ``run_dir``, ``reason``."""


# --- ids -----------------------------------------------------------------------------------

def _digest(size: int, *parts: object) -> int:
    h = hashlib.blake2b(digest_size=size, person=b"rivumi-otel-v1")
    for p in parts:
        h.update(str(p).encode("utf-8", "surrogatepass") + b"\0")
    return int.from_bytes(h.digest(), "big") or 1


def trace_id(run_key: str) -> int:
    """The trace id of a run (128 bits, never 0).

    >>> f"{trace_id('a66038f97f204cb3aaa96339f195c37e'):032x}" == \\
    ...     f"{trace_id('a66038f97f204cb3aaa96339f195c37e'):032x}"
    True
    """
    return _digest(16, "trace", run_key)


def span_id(run_key: str, role: str, line_no: int = 0) -> int:
    """The span id of the ``role`` span (root, chat, tool, approval, verify) starting at
    ``line_no`` of a run (64 bits, never 0)."""
    return _digest(8, run_key, role, line_no)


def _run_keys(runs: pl.DataFrame) -> dict[str, str]:
    """run_dir -> run key: the folder name, ``<parent key>/subagents/<name>`` for a subagent;
    keys that collide in one export fall back to the run's path below its source."""
    parent = dict(zip(runs["run_dir"], runs["parent_run_dir"], strict=True))
    paths = dict(zip(runs["run_dir"], runs["run_path"], strict=True))
    memo: dict[str, str] = {}

    def key(rd: str) -> str:
        if rd not in memo:
            p = parent.get(rd)
            name = os.path.basename(rd.rstrip("/"))
            memo[rd] = f"{key(p)}/subagents/{name}" if p else name
        return memo[rd]

    keys = {rd: key(rd) for rd in runs["run_dir"]}
    seen: dict[str, int] = defaultdict(int)
    for k in keys.values():
        seen[k] += 1
    return {rd: (k if seen[k] == 1 else f"{k}@{paths[rd]}") for rd, k in keys.items()}


# --- attribute values ------------------------------------------------------------------------

def _text(s: str) -> str:
    """``s`` as valid UTF-8 (a lone surrogate escaped), cut to :data:`MAX_STRING`.

    >>> _text("a" + chr(0xD800) + "b"), len(_text("x" * 40_000)) == MAX_STRING + len("…[cut]")
    ('a\\\\ud800b', True)
    """
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        s = s.encode("utf-8", "backslashreplace").decode("utf-8")
    return s if len(s) <= MAX_STRING else s[:MAX_STRING] + "…[cut]"


def _scalar(v: Any) -> Any:
    """An attribute value: bool, float, str, or an int within int64 (else its digits).

    >>> _scalar(2 ** 70), _scalar(-5), _scalar({"a": 1})
    ('1180591620717411303424', -5, None)
    """
    if isinstance(v, bool) or isinstance(v, float):
        return v
    if isinstance(v, int):
        return v if _INT64[0] <= v <= _INT64[1] else str(v)
    if isinstance(v, str):
        return _text(v)
    return None


def _flatten(prefix: str, value: Any, out: dict[str, Any], redact: bool, depth: int = 0) -> None:
    """Event data as attributes: scalars and lists of one scalar type; content keys never,
    diagnostic text only without ``redact``; deeper values as compact JSON text."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in _CONTENT_KEYS or (redact and k in _REDACTED_KEYS):
                continue
            if depth >= 3:
                out[f"{prefix}.{k}"] = _text(json.dumps(v, ensure_ascii=False,
                                                        separators=(",", ":")))
            else:
                _flatten(f"{prefix}.{k}", v, out, redact, depth + 1)
        return
    if value is None:
        return
    if isinstance(value, list):
        items = [_scalar(v) for v in value]
        kinds = {type(i) for i in items}
        if not value:
            out[prefix] = ()
        elif type(None) not in kinds and len(kinds) == 1:
            out[prefix] = tuple(items)
        elif not redact:
            out[prefix] = _text(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
        return
    v = _scalar(value)
    if v is not None:
        out[prefix] = v


def _put(attrs: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` unless ``value`` is None (OTel attributes have no null)."""
    if value is None:
        return
    if isinstance(value, (list, tuple)):
        items = [_scalar(v) for v in value]
        if all(i is not None for i in items) and len({type(i) for i in items}) <= 1:
            attrs[key] = tuple(items)
    else:
        v = _scalar(value)
        if v is not None:
            attrs[key] = v


def _put_all(attrs: dict[str, Any], prefix: str, row: dict[str, Any],
             columns: Iterable[str]) -> None:
    """``prefix.<column>`` for each of ``columns`` of a table row (nulls left out)."""
    for col in columns:
        _put(attrs, f"{prefix}.{col}", row[col])


# --- the tables -----------------------------------------------------------------------------

_COLUMNS: dict[str, list[str]] = {
    "runs": ["run_dir", "run_path", "run_id", "kind", "outcome", "outcome_source",
             "verdict", "reasons", "warnings",
             "message", "phase", "terminal_reason", "parent_run_dir", "task_id", "step",
             "provider_name", "model_id", "input_tokens", "output_tokens",
             "cached_input_tokens", "reasoning_tokens", "total_tokens",
             "active_wall_time_seconds", "started_at", "ended_at", "max_steps",
             "wall_time_seconds", "max_total_tokens", "quarantined_lines"],
    "events": ["run_dir", "line_no", "sequence", "event_type", "event_id", "created_at",
               "data"],
    "quarantine": ["run_dir", "file", "line_no", "byte_offset", "byte_length", "reason",
                   "message", "sha256"],
    "model_calls": ["run_dir", "step", "requested_line_no", "completed_sequence", "outcome",
                    "finish_reason", "tool_calls", "retries", "fallbacks", "provider", "model",
                    "requested_provider", "requested_model", "failure_kind", "input_tokens",
                    "output_tokens", "cached_input_tokens", "reasoning_tokens",
                    "total_tokens"],
    "tool_calls": ["run_dir", "tool_call_id", "name", "effect", "step", "requested_sequence",
                   "started_sequence", "completed_sequence", "ok", "error", "outcome",
                   "in_batch", "arguments", "result_bytes"],
    "approvals": ["run_dir", "request_id", "action_id", "effect", "reason", "policy_reason",
                  "outcome", "decision", "requested_sequence", "closed_sequence",
                  "wait_seconds"],
    "verifications": ["run_dir", "name", "argv", "outcome", "started_sequence",
                      "completed_sequence", "ok", "exit_code", "duration_seconds"],
}
_OPTIONAL = {"tool_calls": ["requested_line_no"], "approvals": ["requested_line_no"]}
"""Columns used when the table has them (tool calls and approvals keyed by occurrence)."""


def _select(lf: pl.LazyFrame, table: str, runs: set[str] | None) -> pl.DataFrame:
    names = lf.collect_schema().names()
    cols = _COLUMNS[table] + [c for c in _OPTIONAL.get(table, []) if c in names]
    if runs is not None:
        lf = lf.filter(pl.col("run_dir").is_in(sorted(runs)))
    return lf.select(cols).collect()


def _load(source: Source | None, *, max_depth: int, store_dir: str | None,
          cache: bool | None, changed: Callable[[dict[str, bytes]], set[str] | None] | None
          ) -> tuple[dict[str, pl.DataFrame], dict[str, bytes] | None]:
    """The tables (only the runs ``changed`` picks from the store's run fingerprints), and
    those fingerprints (None when the store is off or unusable: then every run is read in
    memory)."""
    from .read.snapshot import is_loaded, load_fleet
    from .store.core import store_enabled

    loaded = is_loaded(source)  # runs read already (load_fleet): tables in memory
    use_store = not loaded and (store_enabled() if cache is None else bool(cache))
    if use_store:
        from .errors import StoreError
        from .store.core import open_store, warn_fallback
        from .store.read import read_parts

        try:
            opened = open_store(source, store_dir=store_dir, max_depth=max_depth)
        except StoreError as exc:
            warn_fallback(exc)
        else:
            fps = {rd: bytes(e.get("fp") or b"") for rd, e in opened.manifest.runs.items()}
            wanted = changed(fps) if changed is not None else None
            tables = {t: _select(read_parts(opened.store, opened.manifest, t, lazy=True), t,
                                 None if t == "runs" else wanted)
                      for t in _COLUMNS}
            tables["all_runs"] = tables["runs"]
            if wanted is not None:
                tables["runs"] = tables["runs"].filter(pl.col("run_dir").is_in(sorted(wanted)))
            return tables, fps
    from .store.loaders import load

    fleet = source if loaded else load_fleet(source, max_depth=max_depth)
    tables = {t: _select(load(t, fleet, cache=False).lazy(), t, None) for t in _COLUMNS}
    tables["all_runs"] = tables["runs"]
    return tables, None


def _outcome(row: dict[str, Any]) -> str:
    """The run's outcome: ``runs_df.outcome``, the one definition of the run facts
    (``tables.facts``: the terminal ``run.*`` event first; ``crashed``, ``fork_not_run``, ...
    when there is none).

    >>> _outcome({"outcome": "failed"}), _outcome({"outcome": None})
    ('failed', 'unknown')
    """
    return row.get("outcome") or "unknown"


# --- building the spans ----------------------------------------------------------------------

@dataclass(slots=True)
class _Span:
    sid: int
    name: str
    start: int
    end: int
    parent: int | None
    kind: str  # INTERNAL | CLIENT
    attrs: dict[str, Any]
    line: int | None = None
    end_line: int | None = None
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    links: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None  # status description when the status is ERROR
    is_error: bool = False


@dataclass(slots=True)
class _Run:
    run_dir: str
    key: str
    tid: int
    row: dict[str, Any]
    events: list[dict[str, Any]]
    spans: list[_Span]
    root: _Span | None = None
    # (start line, end line, span) of chat/tool/verify spans, to find who holds a line
    ranges: list[tuple[int, int, _Span]] = field(default_factory=list)
    ids: set[int] = field(default_factory=set)

    def sid(self, role: str, line: int) -> int:
        """A new span id of this run: ``span_id(key, role, line)``, or, should two spans
        start at one line with one role, the same with ``#n`` after the line."""
        sid, n = span_id(self.key, role, line), 0
        while sid in self.ids:
            n += 1
            sid = _digest(8, self.key, role, f"{line}#{n}")
        self.ids.add(sid)
        return sid

    def holder(self, line: int) -> _Span | None:
        best = None
        for a, b, s in self.ranges:
            if a <= line <= b and (best is None or b - a < best[1] - best[0]):
                best = (a, b, s)
        return best[2] if best else self.root


class _Lines:
    """A run's event lines indexed by (event type, sequence)."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.at: dict[tuple[str, int], list[int]] = defaultdict(list)
        self.by_line = {e["line_no"]: e for e in events}
        self.lines = [e["line_no"] for e in events]
        for e in events:
            if e["sequence"] is not None:
                self.at[(e["event_type"], e["sequence"])].append(e["line_no"])

    def find(self, types: Iterable[str], seq: int | None, after: int = 0,
             match: tuple[str, Any] | None = None) -> int | None:
        """The first line at or after ``after`` holding one of ``types`` with ``seq`` (and,
        with ``match=(key, value)``, ``data[key] == value``: a sequence can repeat, spec
        4.5's emit race)."""
        if seq is None:
            return None
        best = None
        for t in types:
            for ln in self.at.get((t, seq), ()):
                if ln >= after and (best is None or ln < best) and (
                        match is None or _data(self.by_line[ln]).get(match[0]) == match[1]):
                    best = ln
        return best


def _ns(e: dict[str, Any] | None) -> int | None:
    return None if e is None else e["t"]


def _data(e: dict[str, Any]) -> dict[str, Any]:
    if "_d" not in e:
        try:
            d = msgspec.json.decode(e["data"]) if e["data"] is not None else {}
        except msgspec.DecodeError:
            d = {}
        e["_d"] = d if isinstance(d, dict) else {}
    return e["_d"]


def _event_attrs(e: dict[str, Any], redact: bool) -> dict[str, Any]:
    a: dict[str, Any] = {"rivumi.line_no": e["line_no"]}
    _put(a, "rivumi.sequence", e["sequence"])
    _put(a, "rivumi.event_id", e["event_id"])
    _flatten("rivumi.data", _data(e), a, redact)
    return a


def _group(df: pl.DataFrame) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in df.iter_rows(named=True):
        out[row["run_dir"]].append(row)
    return out


def _build(tables: dict[str, pl.DataFrame], *, redact: bool) -> tuple[list[_Run], list[dict]]:
    runs_t = tables["runs"]
    keys = _run_keys(tables["all_runs"])
    ev = (tables["events"].with_columns(pl.col("created_at").dt.epoch("us").alias("t"))
          .drop("created_at").sort("run_dir", "line_no"))
    events = _group(ev)
    for rows in events.values():
        for e in rows:
            e["t"] = None if e["t"] is None else e["t"] * 1000
    models = _group(tables["model_calls"].sort("run_dir", "requested_line_no"))
    tools = _group(tables["tool_calls"])
    approvals = _group(tables["approvals"])
    checks = _group(tables["verifications"])
    quarantined = _group(tables["quarantine"].sort("run_dir", "line_no"))
    built: list[_Run] = []
    skipped: list[dict[str, str]] = []
    for row in runs_t.sort("run_dir").iter_rows(named=True):
        rd = row["run_dir"]
        key = keys[rd]
        run = _Run(rd, key, trace_id(key), row, events.get(rd, []), [])
        times = [e["t"] for e in run.events if e["t"] is not None]
        if times:
            t0, t1 = min(times), max(times)
        else:
            fallback = [v for v in (row["started_at"], row["ended_at"]) if v is not None]
            if fallback:
                t0 = int(min(fallback).timestamp() * 1e6) * 1000
                t1 = int(max(fallback).timestamp() * 1e6) * 1000
            elif (found := _file_time(rd)) is not None:
                # an external run's log has no created_at (spec 9.8) and is written in one
                # go when the backend finishes; session.json is rewritten on every save
                t0 = t1 = found[1]
                row = {**row, "time_source": f"{found[0]} mtime"}
                run.row = row
            else:
                skipped.append({"run_dir": rd, "reason": "no event time and neither "
                                "session.json nor events.jsonl: a span needs a start time"})
                continue
        _build_run(run, t0, t1, models.get(rd, []), tools.get(rd, []),
                   approvals.get(rd, []), checks.get(rd, []), quarantined.get(rd, []),
                   redact=redact)
        built.append(run)
    _link(built, tables, keys)
    return built, skipped


def _file_time(run_dir: str) -> tuple[str, int] | None:
    """The mtime (ns) of the run's ``session.json``, else its ``events.jsonl``: regular files
    only, a symlink is not followed."""
    import stat

    for name in ("session.json", "events.jsonl"):
        try:
            st = os.stat(os.path.join(run_dir, name), follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            return name, st.st_mtime_ns
    return None


def _relative(message: str | None, row: dict[str, Any]) -> str | None:
    """A toolkit message with the run's absolute folder written as its path below the
    source (where the fleet lies is not part of a trace)."""
    if message is None or not row["run_path"]:
        return message
    return message.replace(row["run_dir"], row["run_path"])


def _build_run(run: _Run, t0: int, t1: int, models: list[dict], tools: list[dict],
               approvals: list[dict], checks: list[dict], quarantined: list[dict], *,
               redact: bool) -> None:
    row, key = run.row, run.key
    idx = _Lines(run.events)
    used: set[int] = set()  # lines that are a span's start or end, or another span's event
    terminal = None
    for e in run.events:
        if e["event_type"] in ("run.completed", "run.failed", "run.cancelled"):
            terminal = e
    outcome = _outcome(row)
    conv = {"gen_ai.conversation.id": row["run_id"]}

    # root
    a: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent",
                         "gen_ai.agent.name": AGENT_NAME, "gen_ai.agent.id": row["run_id"],
                         **conv, "openinference.span.kind": "AGENT"}
    _put(a, "gen_ai.provider.name", row["provider_name"])
    _put(a, "gen_ai.request.model", row["model_id"])
    reason = _data(terminal).get("terminal_reason") if terminal else None
    _put(a, "rivumi.run.kind", row["kind"])
    _put(a, "rivumi.run.path", row["run_path"])
    _put(a, "rivumi.run.key", key)
    _put(a, "rivumi.run.task_id", row["task_id"])
    a["rivumi.run.outcome"] = outcome
    _put(a, "rivumi.run.outcome_source", row["outcome_source"])
    _put(a, "rivumi.run.terminal_reason", reason if isinstance(reason, str)
         else row["terminal_reason"])
    _put(a, "rivumi.run.phase", row["phase"])
    _put(a, "rivumi.run.verdict", row["verdict"])
    _put(a, "rivumi.run.reasons", row["reasons"])
    _put(a, "rivumi.run.steps", row["step"])
    _put_all(a, "rivumi.run", row, ("input_tokens", "output_tokens", "cached_input_tokens",
                                    "reasoning_tokens", "total_tokens"))
    _put(a, "rivumi.run.active_wall_time_seconds", row["active_wall_time_seconds"])
    _put(a, "rivumi.budget.max_steps", row["max_steps"])
    _put(a, "rivumi.budget.wall_time_seconds", row["wall_time_seconds"])
    _put(a, "rivumi.budget.max_total_tokens", row["max_total_tokens"])
    _put(a, "rivumi.run.quarantined_lines", row["quarantined_lines"])
    _put(a, "rivumi.run.time_source", row.get("time_source"))
    root = _Span(run.sid("root", 0), f"invoke_agent {AGENT_NAME}", t0, t1, None, "INTERNAL",
                 a)
    if outcome == "failed":
        root.is_error, root.error = True, a.get("rivumi.run.terminal_reason")
        _put(a, "error.type", a.get("rivumi.run.terminal_reason") or "failed")
    run.root = root
    run.spans.append(root)

    def end_of(line: int | None) -> int:
        e = idx.by_line.get(line) if line is not None else None
        return e["t"] if e is not None and e["t"] is not None else t1

    # chat spans
    req_lines = [m["requested_line_no"] for m in models]
    chat_events = [e for e in run.events if e["event_type"] in _CHAT_EVENTS]
    chat_lines = [e["line_no"] for e in chat_events]
    for i, m in enumerate(models):
        ln = m["requested_line_no"]
        stop = ln
        done = idx.find(("model.completed", "model.failed"), m["completed_sequence"], ln)
        nxt = req_lines[i + 1] if i + 1 < len(req_lines) else None
        if done is not None and nxt is not None and done > nxt:
            done = None
        model = m["requested_model"] or m["model"]
        a = {"gen_ai.operation.name": "chat", **conv, "openinference.span.kind": "LLM"}
        _put(a, "gen_ai.provider.name", m["provider"] or m["requested_provider"])
        _put(a, "gen_ai.request.model", model)
        _put(a, "gen_ai.response.model", m["model"] if done is not None else None)
        _put(a, "gen_ai.usage.input_tokens", m["input_tokens"])
        _put(a, "gen_ai.usage.output_tokens", m["output_tokens"])
        _put(a, "gen_ai.usage.cache_read.input_tokens", m["cached_input_tokens"])
        _put(a, "gen_ai.usage.reasoning.output_tokens", m["reasoning_tokens"])
        _put(a, "rivumi.usage.total_tokens", m["total_tokens"])
        if m["finish_reason"] is not None:
            a["gen_ai.response.finish_reasons"] = (m["finish_reason"],)
        _put(a, "rivumi.step", m["step"])
        _put(a, "rivumi.outcome", m["outcome"])
        _put(a, "rivumi.retries", m["retries"])
        _put(a, "rivumi.fallbacks", m["fallbacks"])
        _put(a, "rivumi.tool_calls", m["tool_calls"])
        start_e = idx.by_line.get(ln)
        s = _Span(run.sid("chat", ln), f"chat {model}" if model else "chat",
                  _ns(start_e) or t0, end_of(done), root.sid, "CLIENT", a, ln, done)
        if m["outcome"] == "failed":
            s.is_error = True
            s.error = None if redact else m["failure_kind"]
            a["error.type"] = m["failure_kind"] or "model_failed"
        if done is not None:
            stop = done
            d = _data(idx.by_line[done])
            if not redact and idx.by_line[done]["event_type"] == "model.completed":
                msg = {"role": "assistant", "parts": [], "finish_reason":
                       m["finish_reason"] or "stop"}
                if isinstance(d.get("content"), str) and d["content"]:
                    msg["parts"].append({"type": "text", "content": d["content"]})
                for name in d.get("tool_calls") or []:
                    if isinstance(name, str):
                        msg["parts"].append({"type": "tool_call", "name": name})
                a["gen_ai.output.messages"] = _text(json.dumps([msg], ensure_ascii=False,
                                                                 separators=(",", ":")))
        else:
            stop = nxt - 1 if nxt is not None else (idx.lines[-1] if idx.lines else ln)
        used.update(x for x in (ln, done) if x is not None)
        for e in chat_events[bisect_right(chat_lines, ln):bisect_left(chat_lines, stop)]:
            s.events.append((e["event_type"], e["t"] or s.start, _event_attrs(e, redact)))
            used.add(e["line_no"])
        run.spans.append(s)
        run.ranges.append((ln, done if done is not None else stop, s))

    # tool spans, keyed by the line of their tool.requested
    tool_spans: dict[str, list[tuple[int, _Span]]] = defaultdict(list)
    for t in tools:
        same = ("tool_call_id", t["tool_call_id"])
        ln = t.get("requested_line_no")
        if ln is None:
            ln = idx.find(("tool.requested",), t["requested_sequence"], match=same)
        started = idx.find(("tool.started",), t["started_sequence"], ln or 0, same)
        done = idx.find(("tool.completed",), t["completed_sequence"], ln or 0, same)
        first = ln if ln is not None else (started if started is not None else done)
        if first is None:
            continue
        a = {"gen_ai.operation.name": "execute_tool", **conv, "gen_ai.tool.type": "function",
             "openinference.span.kind": "TOOL"}
        _put(a, "gen_ai.tool.name", t["name"])
        _put(a, "gen_ai.tool.call.id", t["tool_call_id"])
        _put_all(a, "rivumi.tool", t, ("effect", "outcome", "in_batch", "result_bytes"))
        _put(a, "rivumi.step", t["step"])
        if not redact:
            _put(a, "gen_ai.tool.call.arguments", t["arguments"])
            if done is not None:
                res = _data(idx.by_line[done]).get("preview")
                _put(a, "gen_ai.tool.call.result", res if isinstance(res, str) else None)
        s = _Span(run.sid("tool", first), f"execute_tool {t['name']}",
                  _ns(idx.by_line[first]) or t0, end_of(done), root.sid, "INTERNAL", a,
                  first, done)
        if t["outcome"] in ("error", "denied", "unknown_tool"):
            s.is_error = True
            s.error = t["outcome"] if redact or not t["error"] else t["error"]
            a["error.type"] = t["outcome"]
        if started is not None and started != first:
            e = idx.by_line[started]
            s.events.append(("tool.started", e["t"] or s.start, _event_attrs(e, redact)))
        used.update(x for x in (first, started, done) if x is not None)
        run.spans.append(s)
        run.ranges.append((first, done if done is not None else first, s))
        if t["tool_call_id"] is not None:
            tool_spans[t["tool_call_id"]].append((first, s))

    # verification spans
    check_spans: list[tuple[int, str, _Span]] = []
    for v in checks:
        same = ("name", v["name"])
        started = idx.find(("verification.started",), v["started_sequence"], match=same)
        done = idx.find(("verification.completed",), v["completed_sequence"], started or 0,
                        same)
        first = started if started is not None else done
        if first is None:
            continue
        a = {**conv, "openinference.span.kind": "CHAIN"}
        _put_all(a, "rivumi.verification", v,
                 ("name", "outcome", "ok", "exit_code", "duration_seconds"))
        if not redact:
            _put(a, "rivumi.verification.argv", v["argv"])
        s = _Span(run.sid("verify", first), f"verify {v['name']}",
                  _ns(idx.by_line[first]) or t0, end_of(done), root.sid, "INTERNAL", a,
                  first, done)
        if v["outcome"] in ("failed", "denied"):
            s.is_error, s.error = True, v["outcome"]
            a["error.type"] = v["outcome"]
        used.update(x for x in (first, done) if x is not None)
        run.spans.append(s)
        run.ranges.append((first, done if done is not None else first, s))
        check_spans.append((first, v["name"], s))

    # approval waits: child spans of what they gate; a reuse is an event of it
    for ap in approvals:
        same = ("request_id", ap["request_id"])
        ln = ap.get("requested_line_no")
        if ln is None:
            ln = idx.find(("approval.requested",), ap["requested_sequence"], match=same)
        closed = idx.find(("approval.resolved", "approval.abandoned", "approval.reused"),
                          ap["closed_sequence"], ln or 0, same)
        if ln is None and closed is None:
            continue
        action = ap["action_id"] or ""
        anchor = ln if ln is not None else closed
        parent: _Span = root
        if action.startswith("verification:"):
            name = action.split(":", 1)[1]
            later = [s for first, n, s in check_spans if n == name and first >= anchor]
            if later:
                parent = later[0]
        else:
            earlier = [s for first, s in tool_spans.get(action, []) if first <= anchor]
            if earlier:
                parent = earlier[-1]
        a = {**conv, "openinference.span.kind": "CHAIN"}
        _put_all(a, "rivumi.approval", ap, ("request_id", "action_id", "effect", "reason",
                                             "outcome", "decision", "wait_seconds"))
        if not redact:
            _put(a, "rivumi.approval.policy_reason", ap["policy_reason"])
        if ln is None:  # reused: no wait, an event of the gated span
            e = idx.by_line[closed]
            ea = _event_attrs(e, redact)
            ea.update(a)
            ea.pop("openinference.span.kind", None)
            ea.pop("gen_ai.conversation.id", None)
            parent.events.append((e["event_type"], e["t"] or parent.start, ea))
            used.add(closed)
            continue
        s = _Span(run.sid("approval", ln), "await_approval",
                  _ns(idx.by_line[ln]) or t0, end_of(closed), parent.sid, "INTERNAL", a, ln,
                  closed)
        used.update(x for x in (ln, closed) if x is not None)
        run.spans.append(s)

    # everything else: events of the root (gaps of a resume or continuation measured)
    prev_t = None
    for e in run.events:
        if e["line_no"] not in used:
            ea = _event_attrs(e, redact)
            if e["event_type"] in ("session.resumed", "session.continued") and \
                    prev_t is not None and e["t"] is not None:
                ea["rivumi.gap_seconds"] = (e["t"] - prev_t) / 1e9
            root.events.append((e["event_type"], e["t"] or t0, ea))
        if e["t"] is not None:
            prev_t = e["t"]
    timed = [(e["line_no"], e["t"]) for e in run.events if e["t"]]
    for q in quarantined:
        before = timed[bisect_left(timed, (q["line_no"], -1)) - 1][1] \
            if timed and timed[0][0] < q["line_no"] else None
        qa: dict[str, Any] = {"rivumi.line_no": q["line_no"]}
        _put_all(qa, "rivumi.quarantine", q, ("byte_offset", "byte_length", "reason", "sha256"))
        _put(qa, "rivumi.quarantine.file", os.path.basename(q["file"] or "") or None)
        if not redact:
            _put(qa, "rivumi.quarantine.message", _relative(q["message"], row))
        root.events.append(("rivumi.quarantined_line", before or t0, qa))
    va: dict[str, Any] = {}
    _put(va, "rivumi.verdict", row["verdict"])
    _put(va, "rivumi.reasons", row["reasons"])
    _put(va, "rivumi.warnings", row["warnings"])
    if not redact:
        _put(va, "rivumi.message", _relative(row["message"], row))
    root.events.append(("rivumi.audit", t1, va))
    root.events.sort(key=lambda x: (x[1], x[2].get("rivumi.line_no", 1 << 62)))


def _link(runs: list[_Run], tables: dict[str, pl.DataFrame], keys: dict[str, str]) -> None:
    """Subagent traces linked both ways with the parent's span that dispatched them; fork
    roots (their ``run.forked`` event) linked to the source run's span holding the fork
    point."""
    by_dir = {r.run_dir: r for r in runs}
    all_runs = tables["all_runs"]
    parent_of = dict(zip(all_runs["run_dir"], all_runs["parent_run_dir"], strict=True))
    for r in runs:
        p = parent_of.get(r.run_dir)
        if not p or r.root is None:
            continue
        name = os.path.basename(r.run_dir.rstrip("/"))
        pkey = keys.get(p) or os.path.basename(p.rstrip("/"))
        target = span_id(pkey, "root")
        pr = by_dir.get(p)
        if pr is not None and pr.root is not None:
            line = None
            for e in pr.events:
                if e["event_type"] in ("subagents.dispatch_started",
                                       "subagents.schedule_normalized"):
                    d = _data(e)
                    ids = d.get("ids") or [x.get("id") for x in d.get("agents") or []
                                            if isinstance(x, dict)]
                    if isinstance(ids, list) and name in ids:
                        line = e["line_no"]
                        break
            holder = pr.holder(line) if line is not None else pr.root
            assert holder is not None
            target = holder.sid
            holder.links.append((r.tid, r.root.sid, {"rivumi.link": "subagent",
                                                     "rivumi.run.key": r.key}))
        r.root.links.append((trace_id(pkey), target, {"rivumi.link": "parent",
                                                      "rivumi.run.key": pkey}))
    named: dict[str, list[str]] = defaultdict(list)
    for rd in all_runs["run_dir"]:
        named[os.path.basename(rd.rstrip("/"))].append(rd)
    for r in runs:
        forked = [e for e in r.events if e["event_type"] == "run.forked"]
        if not forked or r.root is None:
            continue
        f = _data(forked[0])
        name = f.get("source_run_id")
        if not isinstance(name, str) or not name:
            continue
        # the source is the folder of that name beside the fork (the runner's run root),
        # else the one folder of that name in the fleet
        here = os.path.dirname(r.run_dir.rstrip("/"))
        cands = named.get(name, [])
        src = next((c for c in cands if os.path.dirname(c.rstrip("/")) == here),
                   cands[0] if len(cands) == 1 else None)
        skey = keys[src] if src else name
        target = span_id(skey, "root")
        sr = by_dir.get(src) if src else None
        if sr is not None and f.get("fork_point_sequence") is not None:
            lines = [e["line_no"] for e in sr.events
                     if e["sequence"] == f["fork_point_sequence"]]
            if lines:
                holder = sr.holder(lines[0])
                if holder is not None:
                    target = holder.sid
        la: dict[str, Any] = {"rivumi.link": "fork_source", "rivumi.run.key": skey}
        _put(la, "rivumi.fork.point_sequence", f.get("fork_point_sequence"))
        _put(la, "rivumi.fork.point_event_type", f.get("fork_point_event_type"))
        r.root.links.append((trace_id(skey), target, la))


# --- to the SDK, OTLP/JSON and OTLP/HTTP ------------------------------------------------------

def _sdk_spans(run: _Run) -> list[Any]:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
    from opentelemetry.trace.status import Status, StatusCode

    schema = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
    resource = _resource(Resource, schema)
    scope = InstrumentationScope(SCOPE, str(MAPPING_VERSION), schema)
    flags = TraceFlags(TraceFlags.SAMPLED)
    out = []
    for s in run.spans:
        ctx = SpanContext(run.tid, s.sid, is_remote=False, trace_flags=flags)
        parent = (SpanContext(run.tid, s.parent, is_remote=False, trace_flags=flags)
                  if s.parent is not None else None)
        attrs = dict(s.attrs)
        if s.line is not None:
            attrs["rivumi.line_no"] = s.line
        if s.end_line is not None and s.end_line != s.line:  # one line: a point in time
            attrs["rivumi.end_line_no"] = s.end_line
        status = (Status(StatusCode.ERROR, s.error) if s.is_error else Status(StatusCode.UNSET))
        out.append(ReadableSpan(
            name=_text(s.name), context=ctx, parent=parent, resource=resource,
            attributes=attrs, kind=SpanKind.CLIENT if s.kind == "CLIENT" else SpanKind.INTERNAL,
            events=[Event(n, a, timestamp=t) for n, t, a in s.events],
            links=[Link(SpanContext(t, i, is_remote=True, trace_flags=flags), a)
                   for t, i, a in s.links],
            status=status, start_time=s.start, end_time=max(s.end, s.start),
            instrumentation_scope=scope))
    return out


_RESOURCE: list[Any] = []


def _resource(resource_cls: Any, schema: str) -> Any:
    # one Resource object for every span: the encoder groups spans by resource identity
    if not _RESOURCE:
        _RESOURCE.append(resource_cls({"service.name": AGENT_NAME}, schema_url=schema))
    return _RESOURCE[0]


def _hex_ids(doc: dict[str, Any]) -> None:
    """protobuf's JSON mapping writes bytes as base64; OTLP/JSON wants trace and span ids
    as hex (the one place the two mappings differ for traces)."""
    from base64 import b64decode

    for rs in doc.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                for obj in (span, *span.get("links", ())):
                    for k in ("traceId", "spanId", "parentSpanId"):
                        if k in obj:
                            obj[k] = b64decode(obj[k]).hex()


def to_otlp_json(spans: Sequence[Any]) -> str:
    """SDK spans as one OTLP/JSON ``ExportTraceServiceRequest`` (one line, no newline)."""
    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    doc = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    _hex_ids(doc)
    # ASCII: a U+2028 or NEL inside a string would split the line for readers that split
    # on every Unicode line break (Python's str.splitlines)
    return json.dumps(doc, ensure_ascii=True, separators=(",", ":"))


def run_spans(source: Any = None, *, redact: bool = False,
              max_depth: int = DEFAULT_MAX_DEPTH, store_dir: str | None = None,
              cache: bool | None = None) -> list[Any]:
    """Every run of ``source`` as OpenTelemetry SDK spans (``ReadableSpan``), run by run.

    >>> spans = run_spans("tests/fixtures/example", cache=False)
    >>> sorted({s.name.split()[0] for s in spans})
    ['await_approval', 'chat', 'execute_tool', 'invoke_agent', 'verify']
    >>> sum(s.parent is None for s in spans)
    1
    """
    tables, _ = _load(source, max_depth=max_depth, store_dir=store_dir, cache=cache,
                      changed=None)
    built, _skipped = _build(tables, redact=redact)
    return [s for r in built for s in _sdk_spans(r)]


# --- incremental state ---------------------------------------------------------------------

def _state_path(destination: str, redact: bool) -> str:
    from .read.incremental import default_cache_dir

    h = hashlib.blake2b(f"{destination}\0{redact}".encode("utf-8", "surrogatepass"),
                        digest_size=12).hexdigest()
    return os.path.join(default_cache_dir(), "otel-state", f"{h}.json")


def _run_digest(fp: bytes, redact: bool) -> str:
    h = hashlib.blake2b(fp, digest_size=16)
    h.update(f"\0{MAPPING_VERSION}\0{__version__}\0{redact}".encode())
    return h.hexdigest()


def _read_state(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return {}
    runs = doc.get("runs") if isinstance(doc, dict) else None
    return {k: v for k, v in runs.items() if isinstance(v, str)} if isinstance(runs, dict) \
        else {}


def _write_atomic(path: str, write: Callable[[Any], None]) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- the export ------------------------------------------------------------------------------

def _http_url(endpoint: str) -> str:
    """``endpoint`` with ``/v1/traces`` added when it names no path (the OTLP/HTTP default).

    >>> _http_url("http://127.0.0.1:6006"), _http_url("http://h:4318/v1/traces")
    ('http://127.0.0.1:6006/v1/traces', 'http://h:4318/v1/traces')
    """
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OtelExportError(f"--endpoint {endpoint!r} is not an http(s) URL "
                              "(e.g. http://127.0.0.1:4318)")
    return endpoint.rstrip("/") + "/v1/traces" if parts.path in ("", "/") else endpoint


def export_otel(source: Any = None, *, out: str | None = None,
                endpoint: str | None = None, redact: bool = False,
                changed_only: bool = False, state: str | None = None,
                max_depth: int = DEFAULT_MAX_DEPTH, store_dir: str | None = None,
                cache: bool | None = None, timeout: float = 30.0,
                headers: dict[str, str] | None = None) -> OtelExport:
    """Export the runs of ``source`` (paths, as the loaders take, or a fleet from
    ``load_fleet``) as traces: ``out`` (an OTLP/JSON file, one line per run)
    or ``endpoint`` (OTLP/HTTP protobuf, e.g. ``http://127.0.0.1:4318``; ``/v1/traces`` is
    added when the URL has no path).

    ``changed_only`` (or a ``state`` file): send only runs whose files changed since the
    last export to the same destination, judged by the store's fingerprint of each run; the
    state (run -> digest) is kept in ``state`` or the cache directory and updated only after
    a successful write or send. An existing ``out`` file is then appended to (a full export
    replaces it). Without the store (``$RIVUMI_ANALYSIS_STORE=0``) every run is sent.

    Raises:
        OtelExportError: neither or both destinations, a bad URL, the receiver refused.
        SourceError: as the loaders (missing source, ...).
    """
    if (out is None) == (endpoint is None):
        raise OtelExportError("give exactly one of out (a file) or endpoint (a URL)")
    url = _http_url(endpoint) if endpoint is not None else None
    destination = url if url is not None else os.path.abspath(out or "")
    t_start = time.perf_counter()
    incremental = changed_only or state is not None
    state_file = (state or _state_path(destination, redact)) if incremental else None
    previous = _read_state(state_file) if state_file else {}
    digests: dict[str, str] = {}

    def changed(fps: dict[str, bytes]) -> set[str] | None:
        digests.update({rd: _run_digest(fp, redact) for rd, fp in fps.items()})
        if not incremental:
            return None
        return {rd for rd, d in digests.items() if previous.get(rd) != d}

    tables, fps = _load(source, max_depth=max_depth, store_dir=store_dir, cache=cache,
                        changed=changed)
    built, skipped = _build(tables, redact=redact)
    n_spans = 0
    if url is not None:
        n_spans = _send(url, built, timeout=timeout, headers=headers)
    else:
        assert out is not None

        def write(fh: Any) -> None:
            nonlocal n_spans
            for r in built:
                spans = _sdk_spans(r)
                n_spans += len(spans)
                fh.write(to_otlp_json(spans) + "\n")

        if incremental and os.path.isfile(out):
            # the changed runs are appended: the file stays a stream of every export
            with open(out, "a", encoding="utf-8") as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
        else:
            _write_atomic(out, write)
    if state_file is not None and fps is not None:
        live = set(tables["all_runs"]["run_dir"])
        kept = {rd: d for rd, d in previous.items() if rd in live}
        kept.update({r.run_dir: digests[r.run_dir] for r in built if r.run_dir in digests})
        doc = {"format": 1, "mapping": MAPPING_VERSION, "destination": destination,
               "redact": redact, "runs": dict(sorted(kept.items()))}
        _write_atomic(state_file, lambda fh: json.dump(doc, fh, ensure_ascii=False))
    return OtelExport(runs=tables["all_runs"].height, sent=len(built), spans=n_spans,
                      destination=destination, seconds=time.perf_counter() - t_start,
                      incremental=incremental and fps is not None, state=state_file,
                      skipped=skipped)


def _send(url: str, runs: list[_Run], *, timeout: float,
          headers: dict[str, str] | None) -> int:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout, headers=headers)
    sent = 0
    batch: list[Any] = []

    def flush() -> None:
        nonlocal sent
        if not batch:
            return
        if exporter.export(batch) is not SpanExportResult.SUCCESS:
            raise OtelExportError(f"the receiver at {url} did not accept {len(batch)} spans "
                                  f"({sent} sent before); see the log above")
        sent += len(batch)
        batch.clear()

    try:
        for r in runs:
            spans = _sdk_spans(r)
            if batch and len(batch) + len(spans) > BATCH_SPANS:
                flush()
            batch.extend(spans)
        flush()
    finally:
        exporter.shutdown()
    return sent
