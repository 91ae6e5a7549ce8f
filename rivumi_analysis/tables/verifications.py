"""``verifications_df``: one row per final-verification check: started/completed (or reused or denied), exit code and duration."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ..read.snapshot import Event, RunData
from ._common import (
    Builders,
    _bool,
    _float,
    _int,
    _str,
    derived_frame,
    frame,
    load_columnar,
    wanted_lines,
)

WANTS = (frozenset({"verification.started", "verification.completed",
                   "verification.reused"}), ())
"""The event types this table reads (names, prefixes); its builders read no other."""


def verifications_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    return frame(verifications_rows(runs), "VerificationsSchema")


def verifications_rows(runs: Iterable[RunData]) -> list[dict[str, Any]]:
    """The rows of ``runs`` (no polars: safe in a forked worker); events of other types than
    :data:`WANTS` are never read."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        open_checks: dict[str, dict[str, Any]] = {}
        for e in run.events:
            d = e.data
            et = e.event_type
            if et not in ("verification.started", "verification.completed",
                          "verification.reused"):
                continue
            name = _str(d.get("name"))
            argv = d.get("argv")
            argv = [a for a in argv if isinstance(a, str)] if isinstance(argv, list) else []
            if et == "verification.reused":
                rows.append(_ver_row(run, name, argv, "reused", None, e, True,
                                     _int(d.get("exit_code")), None))
            elif et == "verification.started":
                row = _ver_row(run, name, argv, "in_flight", e, None, None, None, None)
                open_checks[name or ""] = row
                rows.append(row)
            else:
                row = open_checks.pop(name or "", None)
                ok = _bool(d.get("ok"))
                outcome = ("denied" if d.get("error") == "approval denied"
                           else "passed" if ok else "failed")
                if row is None:
                    row = _ver_row(run, name, argv, outcome, None, e, ok,
                                   _int(d.get("exit_code")), _float(d.get("duration_seconds")))
                    rows.append(row)
                else:
                    row.update(outcome=outcome, completed_sequence=e.sequence,
                               completed_at=e.created_at, ok=ok, exit_code=_int(d.get("exit_code")),
                               duration_seconds=_float(d.get("duration_seconds")))
                    if argv and not row["argv"]:
                        row["argv"] = argv
    return rows


def _ver_row(run: RunData, name: str | None, argv: list[str], outcome: str, started: Event | None,
             completed: Event | None, ok: bool | None, exit_code: int | None,
             duration: float | None) -> dict[str, Any]:
    return {"run_dir": run.run_dir, "run_id": run.run_id, "name": name, "argv": argv,
            "outcome": outcome,
            "started_sequence": started.sequence if started else None,
            "completed_sequence": completed.sequence if completed else None,
            "started_at": started.created_at if started else None,
            "completed_at": completed.created_at if completed else None,
            "ok": ok, "exit_code": exit_code, "duration_seconds": duration}


def verifications_table(runs: Sequence[RunData]) -> pl.DataFrame:
    """The table of ``runs``: clean logs handed over as columns (``fast``, the store's chunk)
    by :func:`_fast_rows`, every other run by :func:`verifications_rows` (the oracle)."""
    return derived_frame(runs, BUILDERS, _model())


_COLUMNS = ("run_dir", "run_id", "name", "argv", "outcome", "started_sequence",
            "completed_sequence", "started_at", "completed_at", "ok", "exit_code",
            "duration_seconds")
_ARGV, _OUTCOME, _DONE_SEQ, _DONE_AT, _OK, _EXIT, _DURATION = map(_COLUMNS.index, (
    "argv", "outcome", "completed_sequence", "completed_at", "ok", "exit_code",
    "duration_seconds"))


def _fast_rows(runs: list[RunData]) -> list[list[Any]]:
    """:func:`verifications_rows` of clean logs, from their columns (``fast``: envelopes and
    parsed ``data``), as positional rows: no ``Event``, no row dict; only the events of
    :data:`WANTS` are visited (``wanted_lines``)."""
    rows: list[list[Any]] = []
    for run in runs:
        dec = run.fast
        envelopes, objects = dec.envelopes, dec.objects
        open_checks: dict[str, list[Any]] = {}
        for j in wanted_lines(dec, WANTS):
            e = envelopes[j]
            et = e.event_type
            d = objects[j]
            name = _str(d.get("name"))
            argv = d.get("argv")
            argv = [a for a in argv if isinstance(a, str)] if isinstance(argv, list) else []
            if et == "verification.reused":
                rows.append([run.run_dir, run.run_id, name, argv, "reused", None, e.sequence,
                             None, e.created_at, True, _int(d.get("exit_code")), None])
            elif et == "verification.started":
                row = [run.run_dir, run.run_id, name, argv, "in_flight", e.sequence, None,
                       e.created_at, None, None, None, None]
                open_checks[name or ""] = row
                rows.append(row)
            else:
                row = open_checks.pop(name or "", None)
                ok = _bool(d.get("ok"))
                outcome = ("denied" if d.get("error") == "approval denied"
                           else "passed" if ok else "failed")
                if row is None:
                    rows.append([run.run_dir, run.run_id, name, argv, outcome, None, e.sequence,
                                 None, e.created_at, ok, _int(d.get("exit_code")),
                                 _float(d.get("duration_seconds"))])
                else:
                    row[_OUTCOME], row[_DONE_SEQ], row[_DONE_AT] = outcome, e.sequence, e.created_at
                    row[_OK], row[_EXIT] = ok, _int(d.get("exit_code"))
                    row[_DURATION] = _float(d.get("duration_seconds"))
                    if argv and not row[_ARGV]:
                        row[_ARGV] = argv
    return rows


BUILDERS = Builders(
    _fast_rows,
    verifications_rows,
    _COLUMNS,
    times=("started_at", "completed_at"),
    lists=("argv",))
"""How the loader and the store build this table (``tables._common.Builders``)."""


def verifications_df(source: Any = None, *, strict: bool = False,
                     max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per final-verification check: started/completed (or reused or denied), exit code and duration.

    The in-memory loader behind the public one (``store/loaders.py``, which documents
    ``source``, ``strict`` and ``max_depth``); validated by
    :class:`~rivumi_analysis.schemas.VerificationsSchema`.

    >>> df = verifications_df("tests/fixtures/example")
    >>> df["outcome"].to_list()
    ['passed']
    """
    return load_columnar(source, strict=strict, max_depth=max_depth, model=_model(),
                         builders=BUILDERS)


def _model() -> Any:
    return "VerificationsSchema"  # by name: pandera only for a failing frame
