"""``approvals_df``: one row per approval in the log (by occurrence: ids may repeat): requested then resolved or abandoned, or reused, with the decision and the wait time."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ..read.occurrences import Occurrences
from ..read.snapshot import RunData
from ._common import (
    Builders,
    _seconds,
    _str,
    derived_frame,
    frame,
    load_columnar,
    wanted_lines,
)

WANTS = (frozenset({"tool.requested"}), ("approval.",))
"""The event types this table reads (names, prefixes); its builders read no other."""


def approvals_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    return frame(approvals_rows(runs), "ApprovalsSchema")


def approvals_rows(runs: Iterable[RunData]) -> list[dict[str, Any]]:
    """The rows of ``runs`` (no polars: safe in a forked worker); events of other types than
    :data:`WANTS` are never read. One row per approval occurrence; ``tool_call_line_no`` is
    the line of the latest ``tool.requested`` of its ``action_id`` (the call it approves:
    the grammar puts a call's approval right after its request): ``approval.requested``
    and ``approval.reused`` open one (whatever the id); ``approval.resolved`` and
    ``approval.abandoned`` close the most recent open request of their id, or open their own
    row when none is open (:class:`~rivumi_analysis.read.occurrences.Occurrences`)."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        reqs = Occurrences()
        requested: dict[str, int] = {}  # tool_call_id -> line of its latest tool.requested
        for e in run.events:
            et = e.event_type
            if et == "tool.requested":
                tcid = e.data.get("tool_call_id")
                if isinstance(tcid, str):
                    requested[tcid] = e.line_no
                continue
            if not et.startswith("approval."):
                continue
            d = e.data
            rid = d.get("request_id")
            if not isinstance(rid, str):
                continue
            outcome = _CLOSING.get(et)
            if et != "approval.requested" and outcome is None:
                continue
            row = reqs.close(rid) if outcome in ("resolved", "abandoned") else None
            if row is None:
                action = _str(d.get("action_id"))
                row = {
                    "run_dir": run.run_dir, "run_id": run.run_id, "line_no": e.line_no,
                    "request_id": rid, "action_id": action,
                    "tool_call_line_no": requested.get(action) if action is not None else None,
                    "effect": _str(d.get("effect")), "reason": _str(d.get("reason")),
                    "policy_reason": _str(d.get("policy_reason")), "outcome": "open",
                    "decision": None, "requested_sequence": None, "closed_sequence": None,
                    "requested_line_no": None, "closed_line_no": None, "requested_at": None,
                    "closed_at": None,
                }
                rows.append(row)
                reqs.open(rid, row)
                if outcome is not None:
                    reqs.close(rid)
            if et == "approval.requested":
                row["requested_sequence"], row["requested_at"] = e.sequence, e.created_at
                row["requested_line_no"] = e.line_no
                continue
            row["outcome"] = outcome
            row["closed_sequence"], row["closed_at"] = e.sequence, e.created_at
            row["closed_line_no"] = e.line_no
            row["decision"] = (_str(d.get("decision")) if outcome == "resolved"
                               else "allow_once" if outcome == "reused" else None)
            if row["policy_reason"] is None:
                row["policy_reason"] = _str(d.get("policy_reason"))
    for row in rows:
        row["wait_seconds"] = _seconds(row["requested_at"], row["closed_at"])
    return rows


def approvals_table(runs: Sequence[RunData]) -> pl.DataFrame:
    """The table of ``runs``: clean logs handed over as columns (``fast``, the store's chunk)
    by :func:`_fast_rows`, every other run by :func:`approvals_rows` (the oracle)."""
    return derived_frame(runs, BUILDERS, _model())


_COLUMNS = ("run_dir", "run_id", "line_no", "request_id", "action_id", "tool_call_line_no",
            "effect", "reason",
            "policy_reason", "outcome", "decision", "requested_sequence", "closed_sequence",
            "requested_line_no", "closed_line_no", "requested_at", "closed_at", "wait_seconds")
(_POLICY, _OUTCOME, _DECISION, _REQ_SEQ, _CLOSED_SEQ, _REQ_LINE, _CLOSED_LINE, _REQ_AT,
 _CLOSED_AT) = map(_COLUMNS.index, (
    "policy_reason", "outcome", "decision", "requested_sequence", "closed_sequence",
    "requested_line_no", "closed_line_no", "requested_at", "closed_at"))
_CLOSING = {"approval.resolved": "resolved", "approval.reused": "reused",
            "approval.abandoned": "abandoned"}


def _fast_rows(runs: list[RunData]) -> list[list[Any]]:
    """:func:`approvals_rows` of clean logs, from their columns (``fast``: envelopes and
    parsed ``data``), as positional rows: no ``Event``, no row dict; only the events of
    :data:`WANTS` are visited (``wanted_lines``). A clean log's line ``j`` (0-based) is its
    physical line ``j + 1``."""
    rows: list[list[Any]] = []
    for run in runs:
        dec = run.fast
        envelopes, objects = dec.envelopes, dec.objects
        run_dir, run_id = run.run_dir, run.run_id
        reqs = Occurrences()
        requested: dict[str, int] = {}
        for j in wanted_lines(dec, WANTS):
            d = objects[j]
            e = envelopes[j]
            et = e.event_type
            if et == "tool.requested":
                tcid = d.get("tool_call_id")
                if type(tcid) is str:
                    requested[tcid] = j + 1
                continue
            rid = d.get("request_id")
            if type(rid) is not str:
                continue
            outcome = _CLOSING.get(et)
            if et != "approval.requested" and outcome is None:
                continue
            row = reqs.close(rid) if outcome in ("resolved", "abandoned") else None
            if row is None:
                action = _str(d.get("action_id"))
                row = [run_dir, run_id, j + 1, rid, action,
                       requested.get(action) if action is not None else None,
                       _str(d.get("effect")), _str(d.get("reason")),
                       _str(d.get("policy_reason")), "open", None, None, None, None, None,
                       None, None, None]
                rows.append(row)
                reqs.open(rid, row)
                if outcome is not None:
                    reqs.close(rid)
            if et == "approval.requested":
                row[_REQ_SEQ], row[_REQ_AT], row[_REQ_LINE] = e.sequence, e.created_at, j + 1
                continue
            row[_OUTCOME] = outcome
            row[_CLOSED_SEQ], row[_CLOSED_AT], row[_CLOSED_LINE] = e.sequence, e.created_at, j + 1
            row[_DECISION] = (_str(d.get("decision")) if outcome == "resolved"
                              else "allow_once" if outcome == "reused" else None)
            if row[_POLICY] is None:
                row[_POLICY] = _str(d.get("policy_reason"))
    return rows


BUILDERS = Builders(
    _fast_rows,
    approvals_rows,
    _COLUMNS,
    times=("requested_at", "closed_at"),
    seconds=(("wait_seconds", "requested_at", "closed_at"),))
"""How the loader and the store build this table (``tables._common.Builders``)."""


def approvals_df(source: Any = None, *, strict: bool = False,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per approval in the log (by occurrence: ids may repeat): requested then resolved or abandoned, or reused, with the decision and the wait time.

    An approval is keyed by ``(run_dir, line_no)``, the line that opened it; a reused
    ``request_id`` is the run warning ``duplicate_request_id``.

    The in-memory loader behind the public one (``store/loaders.py``, which documents
    ``source``, ``strict`` and ``max_depth``); validated by
    :class:`~rivumi_analysis.schemas.ApprovalsSchema`.

    >>> df = approvals_df("tests/fixtures/example")
    >>> df["decision"].to_list().count("allow_session")
    1
    """
    return load_columnar(source, strict=strict, max_depth=max_depth, model=_model(),
                         builders=BUILDERS)


def _model() -> Any:
    return "ApprovalsSchema"  # by name: pandera only for a failing frame
