"""Pairing by occurrence: the events of one tool call or approval, when ids repeat.

A ``tool_call_id`` is the provider's id or a uuid hex (docs/run-format.md §6.2), and providers
reuse ids across the turns of a continued session (some number them per reply); a
``request_id`` is a uuid hex the runner draws, but copies of logs repeat them too. An id is
therefore a join hint, not a key: the key of a call is the line that opened it. The runner's
event order (docs/run-format.md §5.10) says which open occurrence a later event belongs to: the
most recent one with its id (one reply never names an id twice; a read-only batch prepares
distinct calls before running them), and a tool call never outlives its model step.
``tool_calls_df``, ``approvals_df`` and the auditor's ``duplicate_tool_call_id`` /
``duplicate_request_id`` warnings all pair with this one class.

>>> occ = Occurrences()
>>> occ.open("fc_1", "first")
>>> occ.close("fc_1")
'first'
>>> occ.open("fc_1", "second")  # the id again, in a later turn: a new occurrence
>>> occ.latest("fc_1"), sorted(occ.reused)
('second', ['fc_1'])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["Occurrences", "reused_ids"]


class Occurrences:
    """The open occurrences of each id, and the ids that opened more than one.

    Attributes:
        reused: ids that opened two or more occurrences (rows) in the run.
    """

    __slots__ = ("_open", "_seen", "reused")

    def __init__(self) -> None:
        self._open: dict[str, list[Any]] = {}
        self._seen: set[str] = set()
        self.reused: set[str] = set()

    def open(self, key: str, row: Any) -> None:
        """A line opened occurrence ``row`` of ``key`` (a new row, whatever is open)."""
        if key in self._seen:
            self.reused.add(key)
        else:
            self._seen.add(key)
        self._open.setdefault(key, []).append(row)

    def latest(self, key: str) -> Any:
        """The most recent open occurrence of ``key``, or None."""
        stack = self._open.get(key)
        return stack[-1] if stack else None

    def close(self, key: str) -> Any:
        """Close and return the most recent open occurrence of ``key`` (None: none open)."""
        stack = self._open.get(key)
        return stack.pop() if stack else None

    def forget_open(self) -> None:
        """A boundary no open occurrence survives (a new model step, turn or process)."""
        self._open.clear()


_TOOL_STEP_BOUNDARIES = frozenset({"model.requested", "session.resumed", "session.continued"})
_APPROVAL_CLOSERS = frozenset({"approval.resolved", "approval.abandoned"})


def reused_ids(events: Iterable[tuple[str, Any]]) -> tuple[set[str], set[str]]:
    """The ``tool_call_id`` and ``request_id`` values that open two or more occurrences
    (rows of ``tool_calls_df`` / ``approvals_df``) among ``(event_type, data)`` in log order,
    paired with the tables' rules.

    >>> ev = [("model.requested", {}), ("tool.requested", {"tool_call_id": "a"}),
    ...       ("tool.completed", {"tool_call_id": "a"}), ("model.requested", {}),
    ...       ("tool.requested", {"tool_call_id": "a"})]
    >>> reused_ids(ev)
    ({'a'}, set())
    """
    calls, approvals = Occurrences(), Occurrences()
    for et, d in events:
        if et in _TOOL_STEP_BOUNDARIES:
            calls.forget_open()
        elif et.startswith("tool."):
            tcid = d.get("tool_call_id") if isinstance(d, dict) else None
            if not isinstance(tcid, str):
                continue
            if et == "tool.requested":
                calls.open(tcid, [False])
            elif et == "tool.started":
                row = calls.latest(tcid)
                if row is None or row[0]:
                    row = [False]
                    calls.open(tcid, row)
                row[0] = True
            elif et == "tool.completed" and calls.close(tcid) is None:
                calls.open(tcid, [True])
                calls.close(tcid)
        elif et.startswith("approval."):
            rid = d.get("request_id") if isinstance(d, dict) else None
            if not isinstance(rid, str):
                continue
            if et == "approval.requested":
                approvals.open(rid, True)
            elif et == "approval.reused" or (et in _APPROVAL_CLOSERS
                                             and approvals.close(rid) is None):
                approvals.open(rid, True)
                approvals.close(rid)
    return calls.reused, approvals.reused
