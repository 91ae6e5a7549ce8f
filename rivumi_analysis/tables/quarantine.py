"""``quarantine_df``: one row per quarantined line: file, ``line_no``, ``byte_offset``, ``byte_length``, reason code, message, raw bytes (first 4 KiB) and their sha256."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ._common import load_rows, quarantine_rows


def quarantine_df(source: Any = None, *, strict: bool = False,
                  max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per quarantined line: file, ``line_no``, ``byte_offset``, ``byte_length``, reason code, message, raw bytes (first 4 KiB) and their sha256.

    The in-memory loader behind the public one (``store/loaders.py``, which documents
    ``source``, ``strict`` and ``max_depth``); validated by
    :class:`~rivumi_analysis.schemas.QuarantineSchema`.

    >>> df = quarantine_df("tests/fixtures/example")
    >>> df.height
    0
    """
    return load_rows(source, strict=strict, max_depth=max_depth, rows=quarantine_rows,
                     model="QuarantineSchema")
