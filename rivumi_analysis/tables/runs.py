"""``runs_df``: one row per run: the audit record (verdict, reasons, warnings, line accounting) plus manifest, request-limit and result fields."""

from __future__ import annotations

from typing import Any

import polars as pl

from ._discovery import DEFAULT_MAX_DEPTH
from ._frames import load, runs_frame


def runs_df(source: Any = None, *, strict: bool = False,
            max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per run: the audit record (verdict, reasons, warnings, line accounting) plus manifest, request-limit and result fields.

    Args:
        source: a run directory, a folder of runs, or a list of either; ``None`` uses the
            default run root (``$RIVUMI_RUN_ROOT``, ``$LOOPLANE_RUN_ROOT``, ...). A fleet read
            once with :func:`rivumi_analysis.load_fleet` is accepted too, so several tables
            share one read.
        strict: raise :class:`~rivumi_analysis.errors.QuarantineError` (carrying the
            quarantine table) if and only if at least one line was quarantined.
        max_depth: how many folder levels to descend looking for runs.

    Returns:
        An eager polars DataFrame validated by :class:`rivumi_analysis.schemas.RunsSchema`.

    Raises:
        SourceError: a missing source, a regular file, or no default run root.

    >>> df = runs_df("tests/fixtures/example")
    >>> df["verdict"].to_list()
    ['terminal']
    """
    return load(source, strict=strict, max_depth=max_depth, builder=runs_frame)
