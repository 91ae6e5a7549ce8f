"""``manifests_df``: one row per run whose ``session.json`` parses as JSON, with ``schema_valid`` and the first schema error."""

from __future__ import annotations

from typing import Any

import polars as pl

from ._discovery import DEFAULT_MAX_DEPTH
from ._frames import load, manifests_frame


def manifests_df(source: Any = None, *, strict: bool = False,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per run whose ``session.json`` parses as JSON, with ``schema_valid`` and the first schema error.

    Args:
        source: a run directory, a folder of runs, or a list of either; ``None`` uses the
            default run root (``$RIVUMI_RUN_ROOT``, ``$LOOPLANE_RUN_ROOT``, ...). A fleet read
            once with :func:`rivumi_analysis.load_fleet` is accepted too, so several tables
            share one read.
        strict: raise :class:`~rivumi_analysis.errors.QuarantineError` (carrying the
            quarantine table) if and only if at least one line was quarantined.
        max_depth: how many folder levels to descend looking for runs.

    Returns:
        An eager polars DataFrame validated by :class:`rivumi_analysis.schemas.ManifestsSchema`.

    Raises:
        SourceError: a missing source, a regular file, or no default run root.

    >>> df = manifests_df("tests/fixtures/example")
    >>> df["step"].to_list()
    [7]
    """
    return load(source, strict=strict, max_depth=max_depth, builder=manifests_frame)
