"""``forks_df``: fork runs linked to their source, and candidate fork points per run.

Two kinds of rows (``row_kind``):

* ``fork_link``: one per fork run (its first event is ``run.forked``). ``source_run_id`` is
  ``run.forked.data.source_run_id``, which the runner sets to the source **directory name**
  (§9.5); ``source_run_dir`` is the loaded run with that directory name (null when it was not
  loaded), and ``fork_point_matches`` says whether the source log has an event with the
  fork point's sequence and type and ``events_included`` events up to it.
* ``candidate``: one per ``fork_safe`` event of every non-external run (no side effect in
  flight, no pending approval). ``fork_accepted`` says whether the runner would build a seed
  there (the whole log replays). ``last_safe_before`` is ``"failure"`` on the last safe point
  strictly before a ``run.failed``/``run.error`` event (``failure_sequence`` names it), and
  ``"crash"`` on the last safe point of a log that does not end terminal.
"""

from __future__ import annotations

import os
from typing import Any

import polars as pl

from ..errors import SchemaValidationError
from .states import RunReplay, check_strict, load_runs, replay_run

__all__ = ["forks_df"]

_SCHEMA = {
    "row_kind": pl.Utf8, "run_dir": pl.Utf8, "run_id": pl.Utf8, "kind": pl.Utf8,
    "sequence": pl.Int64, "line_no": pl.Int64, "event_type": pl.Utf8,
    "fork_accepted": pl.Boolean, "last_safe_before": pl.Utf8, "failure_sequence": pl.Int64,
    "source_run_id": pl.Utf8, "source_run_dir": pl.Utf8, "fork_point_sequence": pl.Int64,
    "fork_point_event_type": pl.Utf8, "events_included": pl.Int64, "source_found": pl.Boolean,
    "fork_point_matches": pl.Boolean,
}
_FAILURES = frozenset({"run.failed", "run.error"})


def _empty_row() -> dict[str, Any]:
    return dict.fromkeys(_SCHEMA)


def _candidates(rr: RunReplay) -> list[dict[str, Any]]:
    run = rr.run
    rows: list[dict[str, Any]] = []
    last_safe: int | None = None  # index into rows
    for t in rr.transitions:
        ev = t.event
        if not t.rejected and ev.event_type in _FAILURES and last_safe is not None:
            target = rows[last_safe]
            if target["last_safe_before"] is None:
                target["last_safe_before"] = "failure"
                target["failure_sequence"] = ev.sequence
        if t.rejected or not t.state.fork_safe:
            continue
        row = _empty_row()
        row.update(row_kind="candidate", run_dir=run.run_dir, run_id=run.run_id, kind=run.kind,
                   sequence=ev.sequence, line_no=ev.line_no, event_type=ev.event_type,
                   fork_accepted=rr.replay_accepts)
        rows.append(row)
        last_safe = len(rows) - 1
    if rr.transitions and not rr.final.terminal and last_safe is not None:
        target = rows[last_safe]
        if target["last_safe_before"] is None:
            target["last_safe_before"] = "crash"
            target["failure_sequence"] = rr.transitions[-1].event.sequence
    return rows


def _link(rr: RunReplay, by_name: dict[str, RunReplay]) -> dict[str, Any] | None:
    run = rr.run
    first = run.events[0] if run.events else None
    if first is None or first.event_type != "run.forked":
        return None
    d = first.data
    src = d.get("source_run_id") if isinstance(d.get("source_run_id"), str) else None
    n = d.get("fork_point_sequence")
    n = n if isinstance(n, int) and not isinstance(n, bool) else None
    etype = d.get("fork_point_event_type") if isinstance(d.get("fork_point_event_type"),
                                                           str) else None
    included = d.get("events_included")
    included = included if isinstance(included, int) and not isinstance(included, bool) else None
    source = by_name.get(src) if src is not None else None
    matches = None
    if source is not None and n is not None:
        at = [e for e in source.run.events if e.sequence == n]
        matches = (len(at) == 1 and at[0].event_type == etype
                   and sum(1 for e in source.run.events if e.sequence <= n) == included)
    row = _empty_row()
    row.update(row_kind="fork_link", run_dir=run.run_dir, run_id=run.run_id, kind=run.kind,
               sequence=first.sequence, line_no=first.line_no, event_type=first.event_type,
               source_run_id=src, source_run_dir=source.run.run_dir if source else None,
               fork_point_sequence=n, fork_point_event_type=etype, events_included=included,
               source_found=source is not None, fork_point_matches=matches)
    return row


def forks_df(source: Any = None, *, strict: bool = False, max_depth: int = 8) -> pl.DataFrame:
    """Fork links and candidate fork points.

    Args:
        source: run directories or folders of runs (None: the default run root); a
            ``RunData`` or a list of them is also accepted. Fork sources are looked up among
            the runs loaded from ``source``.
        strict: raise ``QuarantineError`` if any line was quarantined.
        max_depth: discovery depth limit.

    Returns:
        A DataFrame validated by ``schemas.ForksSchema`` (see the module docstring).

    >>> df = forks_df("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e")
    >>> df.filter(pl.col("sequence") == 49).select("row_kind", "fork_accepted").row(0)
    ('candidate', True)
    """
    runs = load_runs(source, max_depth=max_depth)
    check_strict(runs, strict)
    return forks_frame([replay_run(r) for r in runs if r.kind != "external"])


def forks_frame(replays: list[RunReplay]) -> pl.DataFrame:
    """The forks table of already replayed (non-external) runs, validated; fork sources are
    looked up among these runs."""
    by_name: dict[str, RunReplay] = {}
    for rr in replays:
        by_name.setdefault(os.path.basename(os.path.normpath(rr.run.run_dir)), rr)
    rows: list[dict[str, Any]] = []
    for rr in replays:
        link = _link(rr, by_name)
        if link is not None:
            rows.append(link)
        rows.extend(_candidates(rr))
    df = pl.DataFrame(rows, schema=_SCHEMA)
    from ..schemas import ForksSchema

    try:
        return ForksSchema.validate(df)
    except Exception as exc:  # pandera raises its own error types
        raise SchemaValidationError(f"forks_df failed ForksSchema: {exc}") from exc
