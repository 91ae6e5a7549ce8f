"""The fleet audit: every run's audit record (:mod:`rivumi_analysis.audit`), what the ``audit``
command prints.

Without the cache, the runs are audited in chunks by ``read.executor`` (worker processes for a
large fleet). With it, the records come from the store (:mod:`rivumi_analysis.store`, the
toolkit's one incremental cache): the store is refreshed for the audit only (a run whose
fingerprint changed is read as the audit reads it and only its record is written; runs a table
load read already serve the records of their ``runs`` rows), then every record is read from it.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from typing import Any

from .audit import AuditResult, audit_chunk
from .errors import StoreError
from .read.discovery import DEFAULT_MAX_DEPTH, Source, discover
from .read.snapshot import gc_paused


def audit(source: Source | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH,
          progress: Callable[[int], None] | None = None, jobs: int | None = None,
          cache: bool | None = None, cache_dir: str | os.PathLike[str] | None = None,
          ) -> AuditResult:
    """Audit every run below ``source``; records sorted by ``run_dir``.

    Args:
        jobs: worker processes (None: one per available core for a large fleet; 1: in this
            process). Results are identical whatever the number.
        cache: serve unchanged runs' records from the store (the incremental cache). None
            means "only when ``cache_dir`` is given"; True with no ``cache_dir`` uses the
            store the table loaders use (``$RIVUMI_ANALYSIS_STORE_DIR`` or
            ``~/.cache/rivumi-analysis/store``). A warm result always equals a cold one.
            When the store cannot be used (not writable, locked, inside a source) the runs
            are audited without it, with a ``StoreWarning``.
        cache_dir: the cache directory: the store lives in ``<cache_dir>/store/<name>-<hash>``
            (never inside a source).

    Raises:
        SourceError: a missing source, a regular file, or no default run root.

    >>> audit("tests/fixtures/example").runs[0]["verdict"]
    'terminal'
    """
    use_cache = cache if cache is not None else cache_dir is not None
    if use_cache:
        try:
            result = _from_store(source, max_depth=max_depth, progress=progress, jobs=jobs,
                                 cache_dir=cache_dir)
        except StoreError as exc:
            from .store.core import StoreWarning

            warnings.warn(f"{exc}; auditing without the cache", StoreWarning, stacklevel=2)
        else:
            if result is not None:
                return result
    # discovery and the records build many small acyclic objects: no collector passes
    with gc_paused():
        found = discover(source, max_depth=max_depth)
        records = []
        for chunk in _chunks(found.runs, jobs):
            records.extend(chunk)
            if progress is not None:
                progress(len(chunk))
    runs = sorted(records, key=lambda r: r["run_dir"])
    skipped = [{"path": s.path, "reason": s.reason} for s in found.skipped]
    return AuditResult(runs=runs, skipped=skipped, root_used=found.root_used)


def _chunks(locations: list[Any], jobs: int | None) -> Any:
    from .read.executor import map_chunks

    return map_chunks(audit_chunk, locations, jobs=jobs)


def _from_store(source: Source | None, *, max_depth: int,
                progress: Callable[[int], None] | None, jobs: int | None,
                cache_dir: str | os.PathLike[str] | None) -> AuditResult | None:
    """The audit served from the store (None: its records could not all be read)."""
    from .store.core import local_executor, open_store

    store_dir = _store_dir(source, max_depth, cache_dir)
    executor = (functools.partial(local_executor, progress=progress)
                if progress is not None else None)
    opened = open_store(source, store_dir=store_dir, max_depth=max_depth, jobs=jobs,
                        executor=executor, audit_only=True)
    records = opened.store.audit_records(opened.manifest)
    if records is None:
        return None
    if progress is not None:
        stats = opened.store.last_stats
        progress(len(records) - (stats.reread if stats is not None else 0))
    return AuditResult(runs=sorted(records, key=lambda r: r["run_dir"]),
                       skipped=[{"path": p, "reason": r} for p, r in opened.skipped],
                       root_used=opened.root_used)


def _store_dir(source: Source | None, max_depth: int,
               cache_dir: str | os.PathLike[str] | None) -> str | None:
    """The store folder under ``cache_dir`` (None: the loaders' default store)."""
    if cache_dir is None:
        return None
    from .read.discovery import normalize_sources
    from .store.core import store_key

    tops, _root = normalize_sources(source)
    return os.path.join(os.fspath(cache_dir), "store", store_key(tops, max_depth))
