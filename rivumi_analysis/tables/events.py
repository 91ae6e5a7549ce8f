"""``events_df``: one row per accepted event: typed envelope, ``data`` as its exact JSON text, ``line_no``, ``byte_offset`` and the event's warnings."""

from __future__ import annotations

from typing import Any

import polars as pl

from ._discovery import DEFAULT_MAX_DEPTH
from ._frames import events_frame, load


def events_df(source: Any = None, *, strict: bool = False,
              max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per accepted event: typed envelope, ``data`` as its exact JSON text, ``line_no``, ``byte_offset`` and the event's warnings.

    Args:
        source: a run directory, a folder of runs, or a list of either; ``None`` uses the
            default run root (``$RIVUMI_RUN_ROOT``, ``$LOOPLANE_RUN_ROOT``, ...). A fleet read
            once with :func:`rivumi_analysis.load_fleet` is accepted too, so several tables
            share one read.
        strict: raise :class:`~rivumi_analysis.errors.QuarantineError` (carrying the
            quarantine table) if and only if at least one line was quarantined.
        max_depth: how many folder levels to descend looking for runs.

    Returns:
        An eager polars DataFrame validated by :class:`rivumi_analysis.schemas.EventsSchema`.

    Raises:
        SourceError: a missing source, a regular file, or no default run root.

    >>> df = events_df("tests/fixtures/example")
    >>> df.height, df["sequence"].max()
    (50, 49)
    """
    return load(source, strict=strict, max_depth=max_depth, builder=events_frame)
