"""The incremental Parquet store of every table (issue 12), its lazy scans and ``watch``.

The shared primitive (also used by the distributed engine): :func:`build_tables` builds every
table for a chunk of runs with one read per run, :func:`write_parts` writes them in the one
dataset layout (``OUT/<table>/kind=<kind>/part-<key>.parquet``) that ``export`` writes too.
"""

from __future__ import annotations

from .build import TABLES, build_frames, build_tables, write_parts
from .core import ChunkExecutor, ChunkResult, ChunkTask, local_executor, open_store, run_chunk

__all__ = ["TABLES", "ChunkExecutor", "ChunkResult", "ChunkTask", "build_frames",
           "build_tables", "local_executor", "open_store", "run_chunk", "write_parts"]
