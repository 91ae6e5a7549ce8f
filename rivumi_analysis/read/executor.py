"""Run a function over chunks of runs: in this process or in local worker processes.

Every fleet-wide pass (the audit, the table loaders, the store's build and refresh, export)
cuts its runs into chunks and calls :func:`map_chunks`, which picks where the chunks run:

- in this process when the fleet is small (below :func:`pool_min_runs` runs), when one job is
  asked for, or when the runs are on object storage (a ``pyarrow.fs`` filesystem registered in
  this process, ``read.uri.register_filesystem``, does not exist in a worker);
- else in loky's reusable pool of worker processes (:func:`local_pool`). loky (the pool
  joblib uses) starts each worker as a fresh interpreter that does not run the caller's
  ``__main__`` again and pickles functions with cloudpickle, so a plain script without an
  ``if __name__ == "__main__":`` guard and a notebook work as written; the workers stay up
  for :data:`IDLE_SECONDS` between calls, so a notebook's next load does not start them
  again.

A caller may pass its own :class:`Executor` instead (anything with ``map(work, chunks)``
yielding one result per chunk, in order): the distributed engine's Ray executor is one.

Results come back in chunk order whatever ran them, so a result never depends on where it
was computed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

C = TypeVar("C")
R = TypeVar("R")

POOL_MIN_RUNS = 1000
"""From this many runs on, chunks run in worker processes (unless one job is asked for;
``$RIVUMI_ANALYSIS_POOL_MIN_RUNS`` overrides it).

Measured on this shared 2-core machine (``benchmarks/executor_threshold.py``, README there):
up to 1,024 runs two workers never beat this process for the audit, ``events_df`` or
``runs_df`` (a worker is a fresh interpreter importing the toolkit, ~0.2-0.4 CPU-s each,
against ~1.5-2.5 CPU-ms per run)."""

ENV_POOL_MIN_RUNS = "RIVUMI_ANALYSIS_POOL_MIN_RUNS"

IDLE_SECONDS = 60
"""A worker with nothing to do for this long exits (the next call starts it again)."""

WORKER_ENV = {"_RJEM_MALLOC_CONF": "background_thread:false,dirty_decay_ms:-1,muzzy_decay_ms:-1",
              "RIVUMI_ANALYSIS_PROGRESS": "0"}
"""Set in every worker before it imports anything (a worker never draws a progress bar: the
caller's process does). polars' jemalloc keeps the pages a chunk
freed for the next chunk instead of giving them back within half a second and faulting them
in again (a 500-run store chunk: ~33k -> ~6k page faults), and runs no purging thread. A
worker's memory goes back when it exits."""


class Executor(Protocol):
    """Runs ``work`` over chunks: one result per chunk, in the chunks' order."""

    def map(self, work: Callable[[C], R], chunks: Sequence[C]) -> Iterator[R]: ...


def default_jobs() -> int:
    """Worker processes by default: one per core this process may run on.

    >>> default_jobs() >= 1
    True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def chunked(items: Sequence[C], *, workers: int, most: int = 64, least: int = 8,
            per_worker: int = 4) -> list[list[C]]:
    """``items`` cut into chunks of ``least``..``most`` items, about ``per_worker`` chunks
    per worker (small chunks keep a worker's memory to one chunk at a time; enough of them
    keep every worker busy to the end).

    >>> [len(c) for c in chunked(list(range(100)), workers=2)]
    [12, 12, 12, 12, 12, 12, 12, 12, 4]
    """
    size = max(least, min(most, len(items) // max(1, workers * per_worker)))
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def pool_min_runs(environ: dict[str, str] | None = None) -> int:
    """The threshold in force: ``$RIVUMI_ANALYSIS_POOL_MIN_RUNS`` when set to a number, else
    :data:`POOL_MIN_RUNS`.

    >>> pool_min_runs({"RIVUMI_ANALYSIS_POOL_MIN_RUNS": "64"}), pool_min_runs({}) > 0
    (64, True)
    """
    env = os.environ if environ is None else environ
    try:
        return max(0, int(env[ENV_POOL_MIN_RUNS]))
    except (KeyError, ValueError):
        return POOL_MIN_RUNS


def pool_workers(n_runs: int, jobs: int | None = None, *, runs_per_worker: int = 8) -> int:
    """How many worker processes a pass over ``n_runs`` runs uses: 1 (this process) below
    :func:`pool_min_runs` or when ``jobs`` is 1, else ``jobs`` (default
    :func:`default_jobs`) but no more than one per ``runs_per_worker`` runs.

    >>> pool_workers(10), pool_workers(10_000, 1), pool_workers(10_000, 2)
    (1, 1, 2)
    """
    n = default_jobs() if jobs is None else max(1, jobs)
    if n <= 1 or n_runs < pool_min_runs():
        return 1
    return max(1, min(n, n_runs // runs_per_worker))


class InProcess:
    """Runs every chunk here, one after the other (lazily: a chunk when its result is asked
    for)."""

    def map(self, work: Callable[[C], R], chunks: Sequence[C]) -> Iterator[R]:
        return map(work, chunks)


class LocalPool:
    """Runs chunks in ``workers`` local processes (loky's reusable executor)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def map(self, work: Callable[[C], R], chunks: Sequence[C]) -> Iterator[R]:
        # every chunk is submitted now (the workers start on them at once); results in order
        try:
            pool = local_pool(self.workers)
            futures = [pool.submit(work, chunk) for chunk in chunks]
        except (ImportError, OSError):
            # no worker processes here (a sandbox, or privileges dropped after import so a
            # worker cannot load the modules): the same work, in this process
            return map(work, chunks)
        return _results(futures)

    def warm(self, work: Callable[[], Any]) -> None:
        """Start the workers now, each calling ``work`` (imports a chunk will need), so their
        start-up overlaps what this process does next."""
        pool = local_pool(self.workers)
        for _ in range(self.workers):
            pool.submit(work)


def _results(futures: list[Any]) -> Iterator[Any]:
    try:
        for fut in futures:
            yield fut.result()
    finally:  # a caller that stops early (or an error): the rest is not waited for
        for fut in futures:
            fut.cancel()


def local_pool(workers: int) -> Any:
    """loky's reusable executor with ``workers`` processes (started or resized as needed).

    The toolkit's own environment variables (``RIVUMI_*``, e.g. ``RIVUMI_ENGINE``) are
    passed as they are now: when one changed since the workers started, loky starts new
    ones (a worker would otherwise keep the value it started with)."""
    from loky import get_reusable_executor

    env = {k: v for k, v in os.environ.items() if k.startswith(("RIVUMI", "LOOPLANE"))}
    return get_reusable_executor(max_workers=workers, timeout=IDLE_SECONDS,
                                 env={**env, **WORKER_ENV})


def choose(n_runs: int, jobs: int | None = None, *, executor: Executor | None = None,
           local_only: bool = False, runs_per_worker: int = 8) -> tuple[Executor, int]:
    """The executor for a pass over ``n_runs`` runs and its number of workers: ``executor``
    when given, else :class:`LocalPool` when :func:`pool_workers` gives more than one and
    the runs are on local disk (``local_only`` False), else :class:`InProcess`."""
    if executor is not None:
        return executor, max(1, jobs or default_jobs())
    workers = pool_workers(n_runs, jobs, runs_per_worker=runs_per_worker)
    if workers <= 1 or local_only:
        return InProcess(), 1
    return LocalPool(workers), workers


def on_object_storage(locations: Sequence[Any]) -> bool:
    """Whether any run is on object storage (a URI: such runs are read in this process)."""
    dirs = (getattr(loc, "run_dir", loc) for loc in locations)
    return any(isinstance(d, str) and "://" in d for d in dirs)


def map_chunks(work: Callable[[list[C]], R], items: Sequence[C], *, jobs: int | None = None,
               executor: Executor | None = None, most: int = 64, least: int = 8,
               per_worker: int = 4, desc: str = "reading runs",
               progress: bool | None = None) -> Iterator[R]:
    """``work`` over chunks of ``items`` (run locations), results in chunk order: in this
    process as one chunk when the pass is small (:func:`choose`), else in chunks of
    ``least``..``most`` runs (:func:`chunked`) on the chosen executor. A progress bar
    (``rivumi_analysis.progress``: ``desc``, ``progress=False`` or
    ``$RIVUMI_ANALYSIS_PROGRESS=0`` turns it off) counts the runs done.

    >>> list(map_chunks(len, list(range(10))))
    [10]
    """
    from ..progress import bar, track

    ex, workers = choose(len(items), jobs, executor=executor,
                         local_only=on_object_storage(items))
    if isinstance(ex, InProcess):
        if not items:
            return iter([])
        shown = bar(len(items), desc, progress)
        try:
            result = work(list(items))
            shown.update(len(items))
        finally:
            shown.close()
        return iter([result])
    chunks = chunked(items, workers=workers, most=most, least=least, per_worker=per_worker)
    return track(ex.map(work, chunks), [len(c) for c in chunks], desc, progress)
