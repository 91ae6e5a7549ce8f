"""One definition of each run fact, in one place, with its source.

A run fact (outcome, terminal reason, steps, tokens per lane, provider and model, wall time
used, start and end) is read from ``events.jsonl`` first: the log is what the runner wrote as
it happened, and 70 % of real runs have no ``session.json``. ``session.json``,
``result.json`` and ``checkpoint.json`` are cross-checks; a fact the log cannot hold (the
tokens of a wind-down call or of the primary call that crossed the token budget, §9.1) comes
from the first of them that has it, and says so in its ``*_source``. A disagreement between
the log and a file is a run warning (``fact_disagrees``) and a ``drift_df`` row
(``field`` = ``<fact>@<file>``), never a silent choice.

:func:`run_facts` is the one definition (pure Python, no polars: it runs in forked workers);
``runs_df`` carries its values, and every chart, page, notebook and CLI command reads them
from there (:func:`outcome_group` for the charts' finer outcome groups).

>>> from rivumi_analysis.read.snapshot import read_run
>>> f = run_facts(read_run("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e"))
>>> f["outcome"], f["outcome_source"], f["terminal_reason"], f["step"], f["tokens_source"]
('completed', 'events.jsonl', 'verified', 7, 'events.jsonl')
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from ..errors import FACT_DEFINITIONS, OUTCOMES
from ..read.snapshot import RunData

__all__ = ["FACT_COLUMNS", "FACT_DEFINITIONS", "OUTCOMES", "SOURCES", "TERMINAL_OUTCOMES",
           "OUTCOME_GROUPS", "fact_drift_rows", "outcome_group", "run_facts", "unread_facts"]

TERMINAL_OUTCOMES: tuple[str, ...] = ("completed", "failed", "cancelled")
"""The outcomes of a run that ended (a terminal ``run.*`` event, or ``result.json`` for an
external run): the denominator of a success rate."""

SOURCES: tuple[str, ...] = ("events.jsonl", "session.json", "result.json", "checkpoint.json",
                            "model_usage")
"""Where a fact may come from (``model_usage``: the per-call records of ``result.json``, else
``session.json``, §9.1)."""



FACT_COLUMNS: tuple[str, ...] = (
    "outcome", "outcome_source", "terminal_reason", "terminal_reason_source", "step",
    "step_source", "total_tokens", "tokens_source", "primary_tokens", "reviewer_tokens",
    "wind_down_tokens", "provider_name", "model_id", "provider_source",
    "wall_time_used_seconds", "wall_time_source", "started_at", "ended_at", "times_source",
    "fact_disagreements")
"""The keys of :func:`run_facts` (``fact_disagreements``: the drift rows, not a column)."""

_TERMINAL = {"run.completed": "completed", "run.failed": "failed",
             "run.cancelled": "cancelled"}
_TURN_STARTS = frozenset({"run.created", "session.continued"})
_MODEL_EVENTS = frozenset({"run.created", "session.resumed", "session.continued"})
_EXTERNAL_STATUS = {"completed": "completed", "failed": "failed", "cancelled": "cancelled",
                    "timed_out": "failed"}
_TERMINAL_STATUS = frozenset(TERMINAL_OUTCOMES)


def _total(u: Any) -> int | None:
    """``Usage.total_tokens`` of a usage object: the stored total, else provider total, else
    input + output (§4.3); None when it is not a usage object."""
    if not isinstance(u, Mapping) or not u:
        return None
    tt = u.get("total_tokens")
    if type(tt) is int:
        return tt
    ptt = u.get("provider_total_tokens")
    if type(ptt) is int:
        return ptt
    inp, out = u.get("input_tokens", 0), u.get("output_tokens", 0)
    if type(inp) is int and type(out) is int:
        return inp + out
    return None


def _doc(v: Any) -> Mapping[str, Any] | None:
    return v if isinstance(v, Mapping) else None


def _log(run: RunData, checked: bool = False,
         ) -> list[tuple[str, Mapping[str, Any], datetime | None, int]]:
    """``(event_type, data, created_at, sequence)`` of each accepted event, in log order,
    whichever way the run was read (events, a clean log's columns, or a columnar decode:
    used as it is when ``checked``, its batch checks passed, else read exactly)."""
    if run.events or run.fast is None:
        return [(e.event_type, e.data, e.created_at, e.sequence) for e in run.events]
    from ..read.cleanlog import CleanLog
    from ..read.decode import parse_created_at

    fast = run.fast
    if isinstance(fast, CleanLog):
        return [(t, d if isinstance(d, Mapping) else {}, parse_created_at(c)[0]
                 if isinstance(c, str) else None, q)
                for t, d, c, q in zip(fast.event_types, fast.objects, fast.created_ats,
                                      fast.sequences, strict=True)]
    if checked:  # a clean log (tables._common.is_clean): the exact reading's events
        return [(e.event_type, d, parse_created_at(e.created_at)[0], e.sequence)
                for e, d in zip(fast.envelopes, fast.objects, strict=True)]
    from ..read.snapshot import exact_run

    return [(e.event_type, e.data, e.created_at, e.sequence) for e in exact_run(run).events]


def _lane_sums(doc: Any) -> dict[str, int] | None:
    """Tokens per lane of a document's ``model_usage`` (None: it has no such list)."""
    records = doc.get("model_usage") if isinstance(doc, Mapping) else None
    if not isinstance(records, list) or not records:
        return None
    out: dict[str, int] = {}
    for r in records:
        if not isinstance(r, Mapping):
            return None
        t = _total(r.get("usage"))
        if t is None or not isinstance(r.get("lane"), str):
            return None
        out[r["lane"]] = out.get(r["lane"], 0) + t
    return out


def unread_facts(reason: str) -> dict[str, Any]:
    """The facts of a run that could not be read: outcome ``unreadable``, nothing else known.

    >>> unread_facts("unreadable")["outcome"], unread_facts("unreadable")["outcome_source"]
    ('unreadable', 'discovery: unreadable')
    """
    out: dict[str, Any] = dict.fromkeys(FACT_COLUMNS)
    out.update(outcome="unreadable", outcome_source=f"discovery: {reason}",
               fact_disagreements=[])
    return out


def run_facts(run: RunData, *, checked: bool = False) -> dict[str, Any]:
    """Every run fact of ``run`` with its source, and the log's disagreements with the
    run's other files (:data:`FACT_COLUMNS`; :data:`FACT_DEFINITIONS` says what each is).

    ``fact_disagreements`` holds ``(fact, file, log value, file value, explanation)`` tuples
    (:func:`fact_drift_rows` makes them ``drift_df`` rows; ``explanation`` names the spec
    rule that accounts for the difference, or is None). ``checked``: a run read for
    columns whose batch checks passed (``tables.states``' chunks): its decode is used as
    the exact reading's events.
    """
    man, res, chk = _doc(run.manifest), _doc(run.result), _doc(run.checkpoint)
    log = _log(run, checked)
    out: dict[str, Any] = dict.fromkeys(FACT_COLUMNS)
    dis: list[tuple[str, str, Any, Any, str | None]] = []
    out["fact_disagreements"] = dis

    term_i = turn_i = -1
    step = None
    primary = reviewer = 0
    wind_down_done = False
    provider = model = None
    times = [ts for _t, _d, ts, _q in log if ts is not None]
    last_seq = max((q for *_x, q in log), default=None)
    for i, (t, d, _ts, _q) in enumerate(log):
        if t in _TERMINAL:
            term_i = i
        elif t in _MODEL_EVENTS:
            provider = d.get("provider") if isinstance(d.get("provider"), str) else provider
            model = d.get("model") if isinstance(d.get("model"), str) else model
            if t in _TURN_STARTS:
                turn_i = i
        elif t == "model.requested":
            s = d.get("step")
            if type(s) is int and (step is None or s > step):
                step = s
        elif t == "model.completed":
            primary += _total(d.get("usage")) or 0
        elif t == "role_lane.completed":
            reviewer += _total(d.get("usage")) or 0
        elif t == "loop.wind_down_completed":
            wind_down_done = True

    # ---- outcome and terminal reason
    ended = term_i >= 0 and term_i > turn_i
    status = reason = None
    if ended:
        et, d, _ts, _q = log[term_i]
        status = _TERMINAL[et]
        reason = d.get("terminal_reason") if isinstance(d.get("terminal_reason"), str) else None
        out.update(outcome=status, outcome_source="events.jsonl",
                   terminal_reason=reason, terminal_reason_source="events.jsonl")
    elif run.kind == "external":
        rs = res.get("status") if res else None
        st = _EXTERNAL_STATUS.get(rs) if isinstance(rs, str) else None
        if st is not None:
            tr = res.get("terminal_reason") if res else None
            out.update(outcome=st, outcome_source="result.json",
                       terminal_reason=tr if isinstance(tr, str) else None,
                       terminal_reason_source="result.json" if isinstance(tr, str) else None)
        else:
            out.update(outcome="live" if run.writer_active else "crashed",
                       outcome_source="events.jsonl")
    elif run.writer_active:
        out.update(outcome="live", outcome_source=".writer.lock")
    elif log and all(e[0] == "run.forked" for e in log) or (
            not log and run.kind == "fork"):
        out.update(outcome="fork_not_run", outcome_source="events.jsonl")
    elif man is not None and _orderly_stop(man, run, log, last_seq):
        out.update(outcome="interrupted", outcome_source="events.jsonl+session.json")
    else:
        out.update(outcome="crashed", outcome_source="events.jsonl")

    # cross-checks of the outcome (result.json and a terminal checkpoint are written only at
    # the end of a turn: a later turn that did not end makes them stale, not wrong). The
    # log's side is what the log says, whatever else was read (the writer lock is not read
    # for every table)
    later_turn = turn_i > term_i >= 0
    logged = status or "no terminal event"
    ahead = (man is not None and type(man.get("last_event_sequence")) is int
             and last_seq is not None and man["last_event_sequence"] == last_seq + 1)
    if res is not None and run.kind != "external" and not later_turn:
        rs = res.get("status")
        if isinstance(rs, str) and rs != logged:
            dis.append(("outcome", "result.json", logged, rs, None))
        rr = res.get("terminal_reason")
        if ended and isinstance(rr, str) and rr != reason:
            dis.append(("terminal_reason", "result.json", reason, rr, None))
    cs = chk.get("status") if chk else None
    chk_final = isinstance(cs, str) and cs in _TERMINAL_STATUS and run.kind != "external"
    if chk_final and not later_turn and cs != logged:
        # the terminal checkpoint is written just before the run.* event (§1.3)
        dis.append(("outcome", "checkpoint.json", logged, cs,
                    None if ended else "terminal_event_unlogged"))
    if man is not None and run.kind != "external" and ended != (man.get("terminal") is True) \
            and not later_turn and isinstance(man.get("terminal"), bool):
        dis.append(("outcome", "session.json", logged, man.get("phase"),
                    "manifest_ahead_by_one" if ahead else None))

    # ---- steps
    if log or run.kind == "fork":
        out.update(step=step or 0, step_source="events.jsonl")
    if run.kind == "external":
        out.update(step=None, step_source=None)
    elif not log:
        for name, doc in (("session.json", man), ("checkpoint.json", chk)):
            s = doc.get("step") if doc else None
            if type(s) is int:
                out.update(step=s, step_source=name)
                break
    if out["step_source"] == "events.jsonl" and chk_final and ended:
        s = chk.get("step") if chk else None
        if type(s) is int and s != out["step"]:
            dis.append(("step", "checkpoint.json", out["step"], s, None))

    # ---- tokens (§9.1: lanes, and what the log cannot hold)
    if run.kind != "external" and (log or run.kind == "fork"):
        _tokens(out, dis, man, res, chk, primary, reviewer, wind_down_done,
                budget=reason == "token_budget_exceeded", ended=ended,
                later_turn=later_turn)
    elif run.kind != "external":
        _tokens_from_files(out, man, res, chk)

    # ---- provider and model
    if provider is not None or model is not None:
        out.update(provider_name=provider, model_id=model, provider_source="events.jsonl")
        if man is not None:
            for fact, key, value in (("provider_name", "provider_name", provider),
                                     ("model_id", "model_id", model)):
                mv = man.get(key)
                if isinstance(mv, str) and value is not None and mv != value:
                    dis.append((fact, "session.json", value, mv, None))
    elif man is not None and (isinstance(man.get("provider_name"), str)
                              or isinstance(man.get("model_id"), str)):
        pv, mv = man.get("provider_name"), man.get("model_id")
        out.update(provider_name=pv if isinstance(pv, str) else None,
                   model_id=mv if isinstance(mv, str) else None, provider_source="session.json")

    # ---- times
    if times:
        out.update(started_at=min(times), ended_at=max(times), times_source="events.jsonl")
        turn_start = next((e[2] for e in log[max(turn_i, 0):] if e[2] is not None), None)
        if turn_start is not None:
            out.update(wall_time_used_seconds=(max(times) - turn_start).total_seconds(),
                       wall_time_source="events.jsonl")
    if out["wall_time_source"] is None and man is not None:
        w = man.get("active_wall_time_seconds")
        if isinstance(w, int | float) and not isinstance(w, bool):
            out.update(wall_time_used_seconds=float(w), wall_time_source="session.json")
    if dis and run.quarantined:  # what the quarantined lines held is missing from the log
        dis[:] = [(f, w, a, b, why or "log_lines_quarantined") for f, w, a, b, why in dis]
    return out


def _orderly_stop(man: Mapping[str, Any], run: RunData, log: list[Any],
                  last_seq: int | None) -> bool:
    """Whether ``session.json`` shows the process stopped in order (its ``finally`` ran:
    clock stopped, §8.3), not waiting on an approval prompt, with every saved event logged
    and no side effect left open at the log's tail."""
    if man.get("active_started_at") is not None or man.get("phase") == "waiting_approval":
        return False
    if man.get("pending_action") is not None:
        return False
    if last_seq is None or man.get("last_event_sequence") != last_seq or run.quarantined:
        return False
    return log[-1][0] not in ("tool.started", "verification.started")


def _tokens(out: dict[str, Any], dis: list[Any], man: Mapping[str, Any] | None,
            res: Mapping[str, Any] | None, chk: Mapping[str, Any] | None, primary: int,
            reviewer: int, wind_down_done: bool, *, budget: bool, ended: bool,
            later_turn: bool) -> None:
    """The token facts of a native run with a log (§9.1)."""
    # the documents that describe the same moment as the log's end: result.json and a
    # terminal checkpoint only when the log's last turn ended, session.json always
    final_docs = [("result.json", res), ("checkpoint.json", chk)] if ended else []
    lanes_doc = next(((n, ls) for n, d in (("result.json", res if ended else None),
                                           ("session.json", man))
                      if (ls := _lane_sums(d)) is not None), None)
    out["reviewer_tokens"] = reviewer
    out["primary_tokens"] = None if budget else primary
    out["wind_down_tokens"] = 0 if not wind_down_done else None
    if lanes_doc is not None:
        name, ls = lanes_doc
        if budget:
            out["primary_tokens"] = ls.get("primary", 0)
        if wind_down_done:
            out["wind_down_tokens"] = ls.get("wind_down", 0)
        for lane, value in (("primary", None if budget else primary), ("reviewer", reviewer)):
            fv = ls.get(lane, 0)
            if value is not None and fv != value:
                dis.append((f"{lane}_tokens", f"{name} model_usage", value, fv, None))
    complete = not budget and not wind_down_done
    if complete:
        out.update(total_tokens=primary + reviewer, tokens_source="events.jsonl")
    elif out["primary_tokens"] is not None and out["wind_down_tokens"] is not None:
        out.update(total_tokens=out["primary_tokens"] + reviewer + out["wind_down_tokens"],
                   tokens_source="model_usage")
    else:
        for name, doc in (*final_docs, ("session.json", man)):
            t = _total(doc.get("usage")) if doc else None
            if t is not None:
                out.update(total_tokens=t, tokens_source=name)
                break
    # cross-checks: a document that has a total for the same moment
    logged = primary + reviewer
    for name, doc in final_docs:
        t = _total(doc.get("usage")) if doc else None
        if name == "checkpoint.json" and not (
                doc and isinstance(doc.get("status"), str) and doc["status"] in _TERMINAL_STATUS):
            continue
        if t is None or name == out["tokens_source"]:
            continue
        if complete and t != out["total_tokens"]:
            dis.append(("total_tokens", name, out["total_tokens"], t, None))
        elif not complete and t < logged:
            dis.append(("total_tokens", name, logged, t, None))


def _tokens_from_files(out: dict[str, Any], man: Any, res: Any, chk: Any) -> None:
    """Tokens of a run with no readable log: the first document that has a total."""
    for name, doc in (("session.json", man), ("result.json", res), ("checkpoint.json", chk)):
        t = _total(doc.get("usage")) if doc else None
        if t is not None:
            out.update(total_tokens=t, tokens_source=name)
            return


def fact_drift_rows(run_dir: str, run_id: str | None, kind: str,
                    disagreements: Iterable[tuple[str, str, Any, Any, str | None]],
                    ) -> list[tuple[Any, ...]]:
    """``drift_df`` rows (``run_dir, run_id, kind, field, replayed, manifest, matches,
    explanation, unexplained``) of a run's fact disagreements: ``field`` is
    ``<fact>@<file>``, ``replayed`` the log's value and ``manifest`` the file's, as JSON.

    >>> fact_drift_rows("r", "i", "native", [("outcome", "result.json", "crashed",
    ...                                       "completed", None)])[0][3:]
    ('outcome@result.json', '"crashed"', '"completed"', False, None, True)
    """
    return [(run_dir, run_id, kind, f"{fact}@{where}", _json(a), _json(b), False, why,
             why is None) for fact, where, a, b, why in disagreements]


def _json(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


OUTCOME_GROUPS: tuple[str, ...] = (
    "completed: verified", "completed: no_changes", "completed: other", "cancelled",
    "failed: wall_time_exceeded", "failed: max_steps_exceeded", "failed: token_budget_exceeded",
    "failed: repeated_action", "failed: provider", "failed: other", "interrupted", "crashed",
    "live", "fork_not_run", "unreadable")
"""The charts' outcome groups (:func:`outcome_group`), in legend order."""


def outcome_group(outcome: Any = "outcome", terminal_reason: Any = "terminal_reason") -> Any:
    """The charts' outcome group of each run, as a polars expression over ``runs_df``'s
    ``outcome`` and ``terminal_reason`` (column names or expressions): ``completed:
    <reason>`` (verified, no_changes, else other), ``failed: <reason>`` (every
    ``provider_*`` reason is ``failed: provider``, a reason outside :data:`OUTCOME_GROUPS`
    is ``failed: other``), else the outcome itself.

    >>> import polars as pl
    >>> df = pl.DataFrame({"outcome": ["failed", "crashed", "completed"],
    ...                    "terminal_reason": ["provider_auth", None, "odd"]})
    >>> df.select(outcome_group())["outcome"].to_list()
    ['failed: provider', 'crashed', 'completed: other']
    """
    import polars as pl

    o = pl.col(outcome) if isinstance(outcome, str) else outcome
    r = (pl.col(terminal_reason) if isinstance(terminal_reason, str)
         else terminal_reason).fill_null("")
    raw = (pl.when(o == "failed").then(
        pl.when(r.str.starts_with("provider_")).then(pl.lit("failed: provider"))
        .otherwise(pl.lit("failed: ") + r))
        .when(o == "completed").then(pl.lit("completed: ") + r)
        .otherwise(o))
    return (pl.when(raw.is_in(list(OUTCOME_GROUPS))).then(raw)
            .when(raw.str.starts_with("completed")).then(pl.lit("completed: other"))
            .when(raw.str.starts_with("failed")).then(pl.lit("failed: other"))
            .otherwise(raw).alias("outcome"))
