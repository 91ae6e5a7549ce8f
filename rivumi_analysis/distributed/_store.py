"""Store build/refresh on Ray: the store plans, Ray runs its chunks.

The store (``rivumi_analysis.store``) stats the fleet, compares it with its manifest and cuts
the runs to (re)read into ``ChunkTask``s; it calls an executor once with all of them and then
publishes the manifest (lock, atomic rename). :class:`RayExecutor` is such an executor: one
Ray Data task per chunk calls ``store.run_chunk`` — the store's own per-chunk function, which
reads the runs once and writes the part under the store folder (deterministic names: a
retried task overwrites). The driver gets back only the small ``ChunkResult`` of each task.
A chunk that keeps failing makes the executor raise :class:`ChunkFailedError` naming its runs;
the store then publishes nothing and the previous version stays readable.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

RESULT_SCHEMA = pa.schema([
    ("key", pa.string()), ("result", pa.binary()), ("runs", pa.int64()),
    ("bytes", pa.int64()), ("seconds", pa.float64()),
])


def store_chunk_task(batch: pa.Table, fault: str | None = None,
                     filesystems: dict[str, Any] | None = None) -> pa.Table:
    """One ``ChunkTask`` in (pickled), its ``ChunkResult`` out (pickled), with counts."""
    from ..store import run_chunk
    from ._tasks import maybe_fault, run_bytes, use_filesystems

    t0 = time.perf_counter()
    use_filesystems(filesystems)
    if batch.num_rows != 1:
        raise ValueError(f"a task gets exactly one chunk, not {batch.num_rows}")
    task = pickle.loads(batch.column("task")[0].as_py())
    result = run_chunk(task)
    dirs = [loc.run_dir for loc in task.locations]
    nbytes = sum(run_bytes(d) for d in dirs)
    maybe_fault(fault, SimpleNamespace(key=task.key, run_dirs=dirs))  # after the part is written
    return pa.table({"key": [task.key], "result": [pickle.dumps(result)], "runs": [len(dirs)],
                     "bytes": [nbytes], "seconds": [time.perf_counter() - t0]},
                    schema=RESULT_SCHEMA)


def call_task(batch: pa.Table, fault: str | None = None,
              filesystems: dict[str, Any] | None = None) -> pa.Table:
    """One ``(work, chunk)`` in (cloudpickled), ``work(chunk)`` out (pickled)."""
    import cloudpickle

    from ._tasks import use_filesystems

    use_filesystems(filesystems)
    if batch.num_rows != 1:
        raise ValueError(f"a task gets exactly one chunk, not {batch.num_rows}")
    t0 = time.perf_counter()
    work, chunk = cloudpickle.loads(batch.column("task")[0].as_py())
    out = pickle.dumps(work(chunk), protocol=pickle.HIGHEST_PROTOCOL)
    key = batch.column("key")[0].as_py()
    return pa.table({"key": [key], "result": [out], "runs": [_runs_in(chunk)], "bytes": [0],
                     "seconds": [time.perf_counter() - t0]}, schema=RESULT_SCHEMA)


def _runs_in(chunk: Any) -> int:
    try:
        return len(getattr(chunk, "locations", chunk))
    except TypeError:
        return 1


class RayExecutor:
    """Runs chunks in Ray tasks, behind the same interface as the local pool
    (``read.executor.Executor``: :meth:`map`), and as the store's ``ChunkExecutor``
    (calling it with ``ChunkTask``s runs ``store.run_chunk`` on each).

    After a call, :attr:`summary` holds the engine summary (chunks, runs, bytes, start-up and
    job seconds, failed chunks with their runs).
    """

    def __init__(self, *, ray_remote_args: dict[str, Any] | None = None,
                 ray_init: dict[str, Any] | None = None,
                 on_chunk: Callable[[int, int, int, int], None] | None = None) -> None:
        self.ray_remote_args = ray_remote_args
        self.ray_init = ray_init
        self.on_chunk = on_chunk
        self.summary: Any = None

    def map(self, work: Callable[[Any], Any], chunks: Sequence[Any]) -> Iterator[Any]:
        """``work`` over ``chunks`` in Ray tasks (``work`` and each chunk cloudpickled, so a
        function defined in a script or notebook works); results in chunk order. A chunk
        that gives no result after Ray's retries raises :class:`ChunkFailedError`."""
        import cloudpickle

        from . import ChunkFailedError, ChunkFailure, EngineSummary, _ray, _task_kwargs_for

        chunks = list(chunks)
        _started, startup = _ray.ensure_ray(self.ray_init)
        t0 = time.perf_counter()
        results: dict[str, Any] = {}
        secs = 0.0
        if chunks:
            paths = [getattr(loc, "run_dir", loc) for c in chunks
                     for loc in getattr(c, "locations", c if isinstance(c, list) else [])
                     if isinstance(getattr(loc, "run_dir", loc), str)]
            items = [{"key": str(i), "task": cloudpickle.dumps((work, c))}
                     for i, c in enumerate(chunks)]
            ds = _ray.item_dataset(items, call_task, fn_kwargs=_task_kwargs_for(paths),
                                   ray_remote_args=self.ray_remote_args)
            for batch in _ray.iter_result_batches(ds):
                for row in batch.to_pylist():
                    if row["key"] not in results:  # a chunk delivered twice counts once
                        results[row["key"]] = pickle.loads(row["result"])
                        secs += row["seconds"]
                        if self.on_chunk is not None:
                            self.on_chunk(len(results), len(chunks), row["runs"], 0)
        missing = [i for i in range(len(chunks)) if str(i) not in results]
        failures = tuple(ChunkFailure(str(i), (), f"chunk {i} gave no result on the cluster")
                         for i in missing)
        self.summary = EngineSummary("ray", len(chunks), len(results),
                                     sum(_runs_in(c) for c in chunks), 0, startup,
                                     time.perf_counter() - t0, failures, secs)
        if failures:
            raise ChunkFailedError(self.summary.text(), failures)
        return iter([results[str(i)] for i in range(len(chunks))])

    def __call__(self, tasks: Sequence[Any]) -> list[Any]:
        from . import ChunkFailedError, ChunkFailure, EngineSummary, _ray, _task_kwargs_for

        tasks = list(tasks)
        _started, startup = _ray.ensure_ray(self.ray_init)
        t0 = time.perf_counter()
        results: dict[str, Any] = {}
        task_secs = 0.0
        total_bytes = 0
        if tasks:
            dirs = [loc.run_dir for t in tasks for loc in t.locations]
            items = [{"key": t.key, "task": pickle.dumps(t)} for t in tasks]
            ds = _ray.item_dataset(items, store_chunk_task, fn_kwargs=_task_kwargs_for(dirs),
                                   ray_remote_args=self.ray_remote_args)
            for batch in _ray.iter_result_batches(ds):
                for row in batch.to_pylist():
                    if row["key"] in results:  # a chunk delivered twice is counted once
                        continue
                    results[row["key"]] = pickle.loads(row["result"])
                    task_secs += row["seconds"]
                    total_bytes += row["bytes"]
                    if self.on_chunk is not None:
                        self.on_chunk(len(results), len(tasks), row["runs"], row["bytes"])
        attempts = 1 + int((self.ray_remote_args or {}).get("max_retries",
                                                            _ray.DEFAULT_MAX_RETRIES))
        failures = tuple(
            ChunkFailure(t.key, tuple(loc.run_dir for loc in t.locations),
                         f"chunk {t.key} ({len(t.locations)} runs) gave no result after "
                         f"{attempts} attempts on the cluster; the store was not updated")
            for t in tasks if t.key not in results)
        self.summary = EngineSummary("ray", len(tasks), len(results),
                                     sum(len(t.locations) for t in tasks), total_bytes,
                                     startup, time.perf_counter() - t0, failures, task_secs)
        if failures:
            raise ChunkFailedError(self.summary.text(), failures)
        return [results[t.key] for t in tasks]
