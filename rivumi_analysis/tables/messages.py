"""``messages_df``: the transcript: one row per model request/response message the logs carry.

Two sources, told apart by ``source``:

* ``session.json``: every item of the manifest's ``messages`` (system and user prompts,
  assistant replies with their tool calls, tool observations, injected context), as the runner
  would resend them — after any history compaction (docs/run-format.md §6.2, §11.2);
* ``events``: what the log keeps of each exchange, also for runs without a manifest and for
  items compaction dropped: ``model.completed`` (assistant content, tool call names, usage),
  ``tool.completed`` (the observation preview), ``loop.wind_down_completed``,
  ``thinking.healed``, ``role_lane.completed`` (the reviewer's reply preview, usage), and the
  ``message`` events of external runs. Event texts are clipped by the runner (2,000 bytes for
  content and previews, §4.4): ``content_clipped`` says so.

Token columns are filled only where the log carries a figure for that very message: the
``model.completed`` and ``role_lane.completed`` rows. session.json messages carry no usage,
tool observations are not model output, the wind-down reply's usage is only in session.json
``model_usage`` (``usage_df`` lane ``wind_down``, not tied to the event), and external runs log
none; those rows stay null rather than estimated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ..read.snapshot import RunData
from ._common import (
    Builders,
    _bool,
    _int,
    _str,
    derived_frame,
    frame,
    is_clean,
    load_rows,
    usage_columns,
    usage_values,
    wanted_lines,
)

__all__ = ["messages_df", "messages_frame"]

_CLIP_MARKER = "... output truncated ("
_EVENT_TEXT = {  # event type -> (item, role, data key holding the text)
    "model.completed": ("model.completed", "assistant", "content"),
    "tool.completed": ("tool.completed", "tool", "preview"),
    "loop.wind_down_completed": ("loop.wind_down_completed", "assistant", "content"),
    "thinking.healed": ("thinking.healed", "assistant", "text"),
    "role_lane.completed": ("role_lane.completed", "reviewer", "preview"),
}
_WITH_USAGE = ("model.completed", "role_lane.completed")  # the only ones whose event has usage
WANTS = (frozenset({"model.requested", "message", *_EVENT_TEXT}), ())
"""The event types this table reads (names, prefixes; ``message``: external runs only, which
the row builder reads); its builders read no other."""


def _row(run: RunData, source: str, item: str, role: str | None, **cols: Any) -> dict[str, Any]:
    row = dict.fromkeys(_COLUMNS)
    row.update(run_dir=run.run_dir, run_id=run.run_id, source=source, item=item, role=role,
               tool_calls=[], tool_call_ids=[])
    row.update(cols)
    content = row.get("content")
    row["content_clipped"] = isinstance(content, str) and _CLIP_MARKER in content
    return row


def _manifest_rows(run: RunData) -> list[dict[str, Any]]:
    m = run.manifest if isinstance(run.manifest, dict) else {}
    items = m.get("messages")
    if not isinstance(items, list):
        return []
    rows = []
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            continue
        content = _str(it.get("content"))
        if "role" in it:
            calls = it.get("tool_calls") if isinstance(it.get("tool_calls"), list) else []
            calls = [c for c in calls if isinstance(c, dict)]
            rows.append(_row(
                run, "session.json", "message", _str(it.get("role")), position=i,
                content=content, tool_calls=[c["name"] for c in calls
                                             if isinstance(c.get("name"), str)],
                tool_call_ids=[c["tool_call_id"] for c in calls
                               if isinstance(c.get("tool_call_id"), str)],
                tool_calls_json=json.dumps(calls, ensure_ascii=False, sort_keys=True,
                                           separators=(",", ":")) if calls else None))
        elif "item_type" in it:
            rows.append(_row(run, "session.json", "injected_context", "context", position=i,
                             content=content, context_source=_str(it.get("source"))))
        elif "ok" in it:
            rows.append(_row(run, "session.json", "tool_observation", "tool", position=i,
                             content=content, tool_call_id=_str(it.get("tool_call_id")),
                             tool_name=_str(it.get("name")), ok=_bool(it.get("ok")),
                             error=_str(it.get("error"))))
    return rows


def _event_rows(run: RunData) -> list[dict[str, Any]]:
    rows = []
    step = None
    for e in run.events:
        d = e.data
        et = e.event_type
        if et == "model.requested":
            step = _int(d.get("step"))
            continue
        if run.kind == "external":
            if et == "message":
                rows.append(_row(run, "events", "message", "assistant", sequence=e.sequence,
                                 line_no=e.line_no, created_at=e.created_at, content=e.text))
            continue
        spec = _EVENT_TEXT.get(et)
        if spec is None:
            continue
        item, role, key = spec
        if et == "role_lane.completed":
            role = _str(d.get("role")) or role
        cols: dict[str, Any] = {"sequence": e.sequence, "line_no": e.line_no,
                                "created_at": e.created_at, "content": _str(d.get(key)),
                                "step": _int(d.get("step")) if et == "model.completed" else step}
        if et == "model.completed":
            names = d.get("tool_calls") if isinstance(d.get("tool_calls"), list) else []
            cols["tool_calls"] = [n for n in names if isinstance(n, str)]
        if et in _WITH_USAGE:
            u = usage_columns(d.get("usage"))
            cols.update(input_tokens=u["input_tokens"], output_tokens=u["output_tokens"],
                        total_tokens=u["total_tokens"])
        elif et == "tool.completed":
            cols.update(tool_call_id=_str(d.get("tool_call_id")), tool_name=_str(d.get("name")),
                        ok=_bool(d.get("ok")), error=_str(d.get("error")))
        rows.append(_row(run, "events", item, role, **cols))
    return rows


def messages_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    """The transcript of ``runs`` (read in full), validated (the row builders)."""
    return frame(_exact_rows(runs), "MessagesSchema")


def messages_table(runs: Sequence[RunData]) -> pl.DataFrame:
    """The table of ``runs``: native clean logs handed over as columns (``fast``, the store's
    chunk) by :func:`_fast_rows`, every other run by the row builders (the oracle)."""
    return derived_frame(runs, BUILDERS, _model())


def _clean(run: RunData) -> bool:
    return run.kind != "external" and is_clean(run)


def _exact_rows(runs: Iterable[RunData]) -> list[dict[str, Any]]:
    """:func:`_manifest_rows` and :func:`_event_rows` of each run, in run order (no polars:
    safe in a forked worker)."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        rows += _manifest_rows(run)
        rows += _event_rows(run)
    return rows


def _calls_encoder() -> Any:
    """``json.dumps(calls, ensure_ascii=False, sort_keys=True, separators=(",", ":"))``, the
    row builder's text, by the C encoder ``json.dumps`` itself runs, made once (``dumps``
    makes an encoder per call: a third of the cost for a short list); without the circular
    check, which parsed JSON never needs."""
    from json.encoder import c_make_encoder, encode_basestring

    dumps = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    if c_make_encoder is None:  # pragma: no cover (CPython has it)
        return dumps.encode
    chunks = c_make_encoder(None, dumps.default, encode_basestring, None, ":", ",", True,
                            False, True)
    return lambda calls: "".join(chunks(calls, 0))


_ENCODE_CALLS = _calls_encoder()
# event type -> what _fast_rows does with it: 0 a step starts, 1-3 a row of its own kind,
# 4 a plain text row (item, role, key as _EVENT_TEXT)
_FAST_KIND = {"model.requested": 0, "model.completed": 1, "tool.completed": 2,
              "role_lane.completed": 3, "loop.wind_down_completed": 4, "thinking.healed": 4}


def _fast_rows(runs: list[RunData]) -> list[tuple[Any, ...]]:
    """:func:`_manifest_rows` and :func:`_event_rows` of native clean logs, from their columns
    (``fast``: envelopes and parsed ``data``), as positional rows in :data:`_COLUMNS` order:
    no ``Event``, no row dict. (Values of parsed JSON are of exact types: ``type(v) is str``
    is ``_str``'s ``isinstance``.)"""
    rows: list[tuple[Any, ...]] = []
    add = rows.append
    marker = _CLIP_MARKER
    kinds = _FAST_KIND.get
    for run in runs:
        run_dir, run_id = run.run_dir, run.run_id
        m = run.manifest if isinstance(run.manifest, dict) else {}
        items = m.get("messages")
        for i, it in enumerate(items if isinstance(items, list) else ()):
            if type(it) is not dict:
                continue
            content = it.get("content")
            if type(content) is not str:
                content = None
                clipped = False
            else:
                clipped = marker in content
            if "role" in it:
                role = it["role"]
                calls = it.get("tool_calls")
                if type(calls) is list and calls:
                    calls = [c for c in calls if type(c) is dict]
                if calls and type(calls) is list:
                    names = [n for c in calls if type(n := c.get("name")) is str]
                    ids = [t for c in calls if type(t := c.get("tool_call_id")) is str]
                    text = _ENCODE_CALLS(calls)
                else:
                    names, ids, text = [], [], None
                add((run_dir, run_id, "session.json", i, None, None, None, None, "message",
                     role if type(role) is str else None, content, clipped, names, ids, text,
                     None, None, None, None, None, None, None, None))
            elif "item_type" in it:
                source = it.get("source")
                add((run_dir, run_id, "session.json", i, None, None, None, None,
                     "injected_context", "context", content, clipped, [], [], None, None,
                     None, None, None, source if type(source) is str else None, None, None,
                     None))
            elif "ok" in it:
                add((run_dir, run_id, "session.json", i, None, None, None, None,
                     "tool_observation", "tool", content, clipped, [], [], None,
                     _str(it.get("tool_call_id")), _str(it.get("name")), _bool(it.get("ok")),
                     _str(it.get("error")), None, None, None, None))
        dec = run.fast
        envelopes, objects = dec.envelopes, dec.objects
        step = None
        for j in wanted_lines(dec, WANTS):
            e, d = envelopes[j], objects[j]
            kind = kinds(e.event_type)
            if kind is None:
                continue
            line_no = j + 1
            if kind == 0:
                step = d.get("step")
                if type(step) is not int:
                    step = None
                continue
            et = e.event_type
            item, role, key = _EVENT_TEXT[et]
            content = d.get(key)
            if type(content) is not str:
                content = None
                clipped = False
            else:
                clipped = marker in content
            if kind == 1:
                names = d.get("tool_calls")
                own_step = d.get("step")
                inp, out, _c, _r, _p, total = usage_values(d.get("usage"))
                add((run_dir, run_id, "events", None, e.sequence, line_no, e.created_at,
                     own_step if type(own_step) is int else None, item, role, content, clipped,
                     [n for n in names if type(n) is str] if type(names) is list else [], [],
                     None, None, None, None, None, None, inp, out, total))
            elif kind == 2:
                add((run_dir, run_id, "events", None, e.sequence, line_no, e.created_at,
                     step, item, role, content, clipped, [], [], None,
                     _str(d.get("tool_call_id")), _str(d.get("name")), _bool(d.get("ok")),
                     _str(d.get("error")), None, None, None, None))
            elif kind == 3:
                inp, out, _c, _r, _p, total = usage_values(d.get("usage"))
                add((run_dir, run_id, "events", None, e.sequence, line_no, e.created_at,
                     step, item, _str(d.get("role")) or role, content, clipped, [], [],
                     None, None, None, None, None, None, inp, out, total))
            else:
                add((run_dir, run_id, "events", None, e.sequence, line_no, e.created_at,
                     step, item, role, content, clipped, [], [], None, None, None, None,
                     None, None, None, None, None))
    return rows


def _model() -> Any:
    return "MessagesSchema"  # by name: pandera only for a failing frame


def messages_df(source: Any = None, *, strict: bool = False,
                max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per transcript message: the manifest's conversation and the log's exchanges.

    Args:
        source: a run directory, a folder of runs, a list of either, or a fleet from
            :func:`rivumi_analysis.load_fleet`; ``None`` uses the default run root.
        strict: raise :class:`~rivumi_analysis.errors.QuarantineError` if any line was
            quarantined.
        max_depth: how many folder levels to descend looking for runs.

    Returns:
        An eager polars DataFrame validated by :class:`rivumi_analysis.schemas.MessagesSchema`.

    >>> df = messages_df("tests/fixtures/example")
    >>> sorted(set(df["source"]))
    ['events', 'session.json']
    >>> df.filter(pl.col("source") == "session.json")["role"].head(2).to_list()
    ['system', 'user']
    """
    return load_rows(source, strict=strict, max_depth=max_depth, rows=_exact_rows,
                     model="MessagesSchema")


_COLUMNS = ("run_dir", "run_id", "source", "position", "sequence", "line_no", "created_at",
            "step", "item", "role", "content", "content_clipped", "tool_calls",
            "tool_call_ids", "tool_calls_json", "tool_call_id", "tool_name", "ok", "error",
            "context_source", "input_tokens", "output_tokens", "total_tokens")


BUILDERS = Builders(
    _fast_rows,
    _exact_rows,
    _COLUMNS,
    times=("created_at",),
    lists=("tool_calls", "tool_call_ids"),
    clean=_clean)
"""How the store builds this table from runs read clean (``tables._common.Builders``)."""
