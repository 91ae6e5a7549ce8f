"""``verifications_df``: one row per final-verification check: started/completed (or reused or denied), exit code and duration."""

from __future__ import annotations

from typing import Any

import polars as pl

from ._discovery import DEFAULT_MAX_DEPTH
from ._frames import load, verifications_frame


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
    return load(source, strict=strict, max_depth=max_depth, builder=verifications_frame)
