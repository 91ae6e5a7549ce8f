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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import polars as pl

from ._common import rows_frame, validate_table
from .states import ENGINES, RunReplay, check_strict, load_runs, replay_chunks, replay_run

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

    def source_of(name: str) -> tuple[str, list[int], list[str]] | None:
        src = by_name.get(name)
        if src is None:
            return None
        return (src.run.run_dir, [e.sequence for e in src.run.events],
                [e.event_type for e in src.run.events])

    return link_row(run.run_dir, run.run_id, run.kind,
                    (first.sequence, first.line_no, first.event_type, first.data), source_of)


def link_row(run_dir: str, run_id: str | None, kind: str, first: tuple[int, int, str, Any],
             source_of: Callable[[str], tuple[str, list[int], list[str]] | None],
             ) -> dict[str, Any]:
    """The ``fork_link`` row of a run whose first event (``(sequence, line_no, event_type,
    data)``) is ``run.forked``; ``source_of(name)`` gives the loaded run with that folder
    name as ``(run_dir, sequences, event_types)`` of its events in file order, or None."""
    seq, line_no, event_type, d = first
    src = d.get("source_run_id") if isinstance(d.get("source_run_id"), str) else None
    n = d.get("fork_point_sequence")
    n = n if isinstance(n, int) and not isinstance(n, bool) else None
    etype = d.get("fork_point_event_type") if isinstance(d.get("fork_point_event_type"),
                                                           str) else None
    included = d.get("events_included")
    included = included if isinstance(included, int) and not isinstance(included, bool) else None
    source = source_of(src) if src is not None else None
    matches = None
    if source is not None and n is not None:
        _, seqs, types = source
        at = [t for q, t in zip(seqs, types, strict=True) if q == n]
        matches = (len(at) == 1 and at[0] == etype
                   and sum(1 for q in seqs if q <= n) == included)
    row = _empty_row()
    row.update(row_kind="fork_link", run_dir=run_dir, run_id=run_id, kind=kind,
               sequence=seq, line_no=line_no, event_type=event_type,
               source_run_id=src, source_run_dir=source[0] if source else None,
               fork_point_sequence=n, fork_point_event_type=etype, events_included=included,
               source_found=source is not None, fork_point_matches=matches)
    return row


def candidates_of_states(states: pl.DataFrame) -> pl.DataFrame:
    """The ``candidate`` rows (:func:`_candidates`'s, run by run) of a state table with
    ``_r`` (one id per run, rows grouped by run in file order): every accepted ``fork_safe``
    row; ``last_safe_before`` ``"failure"`` on the last such row strictly before an accepted
    ``run.failed``/``run.error`` (the first one after it), else ``"crash"`` on a run's last
    candidate when its final state is not terminal. Columns: the forks schema plus ``_r``."""
    acc = pl.col("rejected").is_null()
    cand = acc & pl.col("fork_safe")
    df = states.select("_r", "run_dir", "run_id", "kind", "sequence", "line_no", "event_type",
                       "fork_accepted", "terminal", acc.alias("_acc"), cand.alias("_cand"))
    df = df.with_columns(pl.col("_cand").cast(pl.Int64).cum_sum().over("_r").alias("_cid"))
    fail = (df.filter(pl.col("_acc") & pl.col("event_type").is_in(list(_FAILURES)))
            .select("_r", (pl.col("_cid") - pl.col("_cand").cast(pl.Int64)).alias("_cid"),
                    pl.col("sequence").alias("_fseq"))
            .filter(pl.col("_cid") >= 1)
            .group_by("_r", "_cid", maintain_order=True).agg(pl.col("_fseq").first()))
    ends = (df.group_by("_r", maintain_order=True)
            .agg(pl.col("terminal").last().alias("_term"), pl.col("sequence").last()
                 .alias("_cseq"), pl.col("_cid").last())
            .filter(~pl.col("_term") & (pl.col("_cid") >= 1)).select("_r", "_cid", "_cseq"))
    out = (df.filter(pl.col("_cand"))
           .join(fail, on=["_r", "_cid"], how="left", maintain_order="left")
           .join(ends, on=["_r", "_cid"], how="left", maintain_order="left"))
    failed = pl.col("_fseq").is_not_null()
    crashed = pl.col("_cseq").is_not_null()
    return out.select(
        "_r", pl.lit("candidate").alias("row_kind"), "run_dir", "run_id", "kind", "sequence",
        "line_no", "event_type", "fork_accepted",
        pl.when(failed).then(pl.lit("failure")).when(crashed).then(pl.lit("crash"))
        .alias("last_safe_before"),
        pl.when(failed).then(pl.col("_fseq")).otherwise(pl.col("_cseq"))
        .alias("failure_sequence"),
        *[pl.lit(None, dtype=_SCHEMA[c]).alias(c) for c in _LINK_ONLY])


_LINK_ONLY = ("source_run_id", "source_run_dir", "fork_point_sequence",
              "fork_point_event_type", "events_included", "source_found",
              "fork_point_matches")


def forks_of_states(parts: Sequence[tuple[pl.DataFrame, Mapping[int, Any], Sequence[str]]],
                    *, validate: bool = True) -> pl.DataFrame:
    """The forks table from state tables (equal to :func:`forks_frame` of the same runs).

    Args:
        parts: per chunk of runs, in order: its state rows with ``_r`` (the run's index in
            the chunk; every accepted event's row, ``rejected`` set on the others), the
            ``data`` of the first event of each run whose first event is ``run.forked``
            (keyed by that index) and the ``run_dir`` of every (non-external) run of the
            chunk in order (runs without events too: fork sources are looked up by folder
            name among all of them).
        validate: validate with ``schemas.ForksSchema``.
    """
    pieces: list[pl.DataFrame] = []
    by_name: dict[str, tuple[int, int]] = {}
    for c, (_, _, run_dirs) in enumerate(parts):
        for r, run_dir in enumerate(run_dirs):
            by_name.setdefault(os.path.basename(os.path.normpath(run_dir)), (c, r))

    def source_of(name: str) -> tuple[str, list[int], list[str]] | None:
        at = by_name.get(name)
        if at is None:
            return None
        c, r = at
        mine = parts[c][0].filter(pl.col("_r") == r)
        return (parts[c][2][r], mine["sequence"].to_list(), mine["event_type"].to_list())

    offset = 0
    any_links = False
    for states, forked, run_dirs in parts:
        cand = candidates_of_states(states).with_columns(
            (pl.col("_r") + offset).alias("_r"), pl.lit(1, pl.Int8).alias("_o"))
        pieces.append(cand)
        links = []
        for r in sorted(forked):
            first = states.filter(pl.col("_r") == r).row(0, named=True)
            row = link_row(first["run_dir"], first["run_id"], first["kind"],
                           (first["sequence"], first["line_no"], first["event_type"],
                            forked[r]), source_of)
            links.append({"_r": r + offset, **row, "_o": 0})
        if links:
            any_links = True
            pieces.append(rows_frame(links, {"_r": pl.Int64, **_SCHEMA, "_o": pl.Int8}))
        offset += len(run_dirs)
    cols = list(_SCHEMA)
    if not pieces:
        df = pl.DataFrame(schema=_SCHEMA)
    else:
        df = pl.concat([p.select("_r", "_o", *[pl.col(c).cast(_SCHEMA[c]) for c in cols])
                        for p in pieces])
        if any_links:  # a link row goes before its run's candidates
            df = df.sort("_r", "_o", maintain_order=True)
        df = df.select(cols)
    return _validate(df) if validate else df


def forks_df(source: Any = None, *, strict: bool = False, max_depth: int = 8,
             engine: str = "auto") -> pl.DataFrame:
    """Fork links and candidate fork points.

    Args:
        source: run directories or folders of runs (None: the default run root); a
            ``RunData`` or a list of them is also accepted. Fork sources are looked up among
            the runs loaded from ``source``.
        strict: raise ``QuarantineError`` if any line was quarantined.
        max_depth: discovery depth limit.
        engine: ``"auto"`` (default): from the state rows of the vectorised engine (the
            runs it cannot express from the reference reducer, as ``states_df``);
            ``"reference"``: one reference replay per run (the oracle); both give the
            same table.

    Returns:
        A DataFrame validated by ``schemas.ForksSchema`` (see the module docstring).

    >>> df = forks_df("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e")
    >>> df.filter(pl.col("sequence") == 49).select("row_kind", "fork_accepted").row(0)
    ('candidate', True)
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    if engine == "reference":
        runs = load_runs(source, max_depth=max_depth)
        check_strict(runs, strict)
        return forks_frame([replay_run(r) for r in runs if r.kind != "external"])
    chunks, quarantined = replay_chunks(source, max_depth=max_depth, engine=engine)
    check_strict(quarantined, strict)
    return forks_of_states([(c.states, c.forked, c.run_dirs) for c in chunks])


def forks_frame(replays: list[RunReplay], *, validate: bool = True) -> pl.DataFrame:
    """The forks table of already replayed (non-external) runs, validated unless
    ``validate=False``; fork sources are looked up among these runs."""
    by_name: dict[str, RunReplay] = {}
    for rr in replays:
        by_name.setdefault(os.path.basename(os.path.normpath(rr.run.run_dir)), rr)
    rows: list[dict[str, Any]] = []
    for rr in replays:
        link = _link(rr, by_name)
        if link is not None:
            rows.append(link)
        rows.extend(_candidates(rr))
    df = rows_frame(rows, _SCHEMA)
    return _validate(df) if validate else df


def _validate(df: pl.DataFrame) -> pl.DataFrame:
    return validate_table(df, "ForksSchema", "forks_df")
