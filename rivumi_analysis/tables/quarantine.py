"""``quarantine_df``: one row per quarantined line: file, ``line_no``, ``byte_offset``, ``byte_length``, reason code, message, raw bytes (first 4 KiB) and their sha256."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ._common import load_rows, quarantine_rows


def quarantine_df(source: Any = None, *, strict: bool = False,
                  max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per quarantined line: file, ``line_no``, ``byte_offset``, ``byte_length``, reason code, message, raw bytes (first 4 KiB) and their sha256.

    Args:
        source: a run directory, a folder of runs, or a list of either; ``None`` uses the
            default run root (``$RIVUMI_RUN_ROOT``, ``$LOOPLANE_RUN_ROOT``, ...). A fleet read
            once with :func:`rivumi_analysis.load_fleet` is accepted too, so several tables
            share one read.
        strict: raise :class:`~rivumi_analysis.errors.QuarantineError` (carrying the
            quarantine table) if and only if at least one line was quarantined.
        max_depth: how many folder levels to descend looking for runs.

    Returns:
        An eager polars DataFrame validated by :class:`rivumi_analysis.schemas.QuarantineSchema`.

    Raises:
        SourceError: a missing source, a regular file, or no default run root.

    >>> df = quarantine_df("tests/fixtures/example")
    >>> df.height
    0
    """
    return load_rows(source, strict=strict, max_depth=max_depth, rows=quarantine_rows,
                     model="QuarantineSchema")
