"""``verifications_df``: one row per final-verification check: started/completed (or reused or denied), exit code and duration."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ..read.snapshot import Event, RunData
from ._common import _bool, _float, _int, _str, frame, load_columnar

WANTS = (frozenset({"verification.started", "verification.completed",
                   "verification.reused"}), ())
"""The event types this table reads (names, prefixes): the columnar loader builds no other."""


def verifications_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    from ..schemas import VerificationsSchema

    return frame(verifications_rows(runs), VerificationsSchema)


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


def verifications_df(source: Any = None, *, strict: bool = False,
                     max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per final-verification check: started/completed (or reused or denied), exit code and duration.

    Args:
        source: a run directory, a folder of runs, or a list of either; ``None`` uses the
            default run root (``$RIVUMI_RUN_ROOT``, ``$LOOPLANE_RUN_ROOT``, ...). A fleet read
            once with :func:`rivumi_analysis.load_fleet` is accepted too, so several tables
            share one read.
        strict: raise :class:`~rivumi_analysis.errors.QuarantineError` (carrying the
            quarantine table) if and only if at least one line was quarantined.
        max_depth: how many folder levels to descend looking for runs.

    Returns:
        An eager polars DataFrame validated by :class:`rivumi_analysis.schemas.VerificationsSchema`.

    Raises:
        SourceError: a missing source, a regular file, or no default run root.

    >>> df = verifications_df("tests/fixtures/example")
    >>> df["outcome"].to_list()
    ['passed']
    """
    return load_columnar(source, strict=strict, max_depth=max_depth, rows=verifications_rows,
                         model=_model(), wants=WANTS)


def _model() -> Any:
    from ..schemas import VerificationsSchema

    return VerificationsSchema
