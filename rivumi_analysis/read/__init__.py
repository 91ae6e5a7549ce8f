"""Bytes to runs: discovery, bounded reads, line decoding, the runner's pydantic models, run
snapshots (:class:`~rivumi_analysis.read.snapshot.RunData`) and the incremental record cache.

Imports only the foundation (``errors``, ``_version``). See ``docs/ARCHITECTURE.md``.
"""
