"""Fleet-level entry points on a choice of engine: the local process pool or a Ray cluster.

``engine="process"`` (the default) is the toolkit's own process pool. ``engine="ray"`` runs
the same per-run function in Ray Data tasks (extra ``pip install 'rivumi-analysis[ray]'``):
runs are sorted and cut into chunks of ``runs_per_task`` (``sha1`` of the chunk names its
output), ``from_items(chunks).map_batches(task, batch_format="pyarrow", batch_size=1)``
processes them, and the driver sees only small per-chunk results and counts. Ray is imported
only when ``engine="ray"`` (or :func:`audit_dataset`) is used.

``ray.init()`` is called only when Ray is not initialised yet, so ``RAY_ADDRESS``,
``ray job submit`` and a cluster started with ``ray start`` on this machine are used as they
are. Call ``ray.init(...)`` yourself first to choose the cluster and its options.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..audit import AuditResult, error_record
from ..read.discovery import DEFAULT_MAX_DEPTH, RunLocation, Source, discover
from ._chunks import DEFAULT_RUNS_PER_TASK, Chunk, chunk_key, make_chunks

__all__ = ["ENGINES", "Chunk", "ChunkBar", "ChunkFailedError", "ChunkFailure", "EngineSummary",
           "ExportResult", "RayAuditResult", "RayExecutor", "StoreResult", "audit",
           "audit_dataset", "chunk_key", "export", "make_chunks", "store"]


def __getattr__(name: str) -> Any:
    """``RayExecutor`` (``read.executor``'s interface on Ray), imported when asked for."""
    if name == "RayExecutor":
        from ._store import RayExecutor

        return RayExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

ENGINES = ("process", "ray")


@dataclass(frozen=True, slots=True)
class ChunkFailure:
    """A chunk that gave no result after every retry, with the runs it held."""

    key: str
    run_dirs: tuple[str, ...]
    message: str


@dataclass(frozen=True, slots=True)
class EngineSummary:
    """What a distributed job did: counts, bytes, time, and every chunk that failed.

    Attributes:
        startup_seconds: time to start or connect to Ray (0 when it was already running).
        seconds: wall time of the job itself, after start-up.
        task_seconds: compute time summed over the chunks' tasks (runs / task_seconds is
            the throughput of one task slot, from which a cluster's time can be estimated).
    """

    engine: str
    chunks: int
    chunks_done: int
    runs: int
    bytes: int
    startup_seconds: float
    seconds: float
    failures: tuple[ChunkFailure, ...] = ()
    task_seconds: float = 0.0

    def text(self) -> str:
        """One line, then one line per failed chunk with its runs."""
        mb = self.bytes / 1e6
        head = (f"{self.engine}: {self.chunks_done}/{self.chunks} chunks, {self.runs} runs, "
                f"{mb:.1f} MB in {self.seconds:.1f} s (start-up {self.startup_seconds:.1f} s)")
        lines = [head]
        for f in self.failures:
            lines.append(f"failed chunk {f.key[:12]} ({len(f.run_dirs)} runs): {f.message}")
            lines += [f"  {d}" for d in f.run_dirs]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class RayAuditResult(AuditResult):
    """An :class:`~rivumi_analysis.audit.AuditResult` plus the engine's summary."""

    summary: EngineSummary | None = field(default=None, compare=False)


class ChunkFailedError(RuntimeError):
    """A chunk's task kept failing on the cluster.

    In the audit its runs get ``internal_error`` records; a store refresh raises it (and
    publishes nothing) with every failed chunk and its runs in ``failures``.
    """

    def __init__(self, message: str, failures: tuple[ChunkFailure, ...] = ()) -> None:
        super().__init__(message)
        self.failures = failures


def audit(source: Source | None = None, *, engine: str = "process",
          runs_per_task: int = DEFAULT_RUNS_PER_TASK, max_depth: int = DEFAULT_MAX_DEPTH,
          jobs: int | None = None, cache: bool | None = None,
          cache_dir: str | os.PathLike[str] | None = None,
          progress: Callable[[int], None] | None = None,
          on_chunk: Callable[[int, int, int, int], None] | None = None,
          ray_remote_args: dict[str, Any] | None = None,
          ray_init: dict[str, Any] | None = None,
          runs_from: str | None = None) -> AuditResult:
    """Audit every run below ``source`` on the chosen engine; the same records either way.

    Args:
        engine: ``"process"`` (local pool, see :func:`rivumi_analysis.fleet_audit.audit`) or
            ``"ray"``.
        runs_per_task: runs per Ray task (``"ray"`` only).
        jobs, cache, cache_dir: the process engine's options (see
            :func:`rivumi_analysis.fleet_audit.audit`; a listing, ``runs_from``, is audited
            without the store). The Ray engine never uses the local store.
        progress: called with the number of runs just finished.
        on_chunk: (``"ray"``) called after each finished chunk with ``(chunks done, chunks,
            runs, bytes)`` of that chunk (see :class:`ChunkBar`).
        ray_remote_args: extra Ray task options (``num_cpus``, ``max_retries``, ...).
        ray_init: keyword arguments for ``ray.init`` when Ray is not initialised yet.
        runs_from: a listing file (Parquet or CSV with a ``path`` column, local or a URI)
            naming the runs instead of walking ``source`` (which is then ignored).

    Returns:
        The audit result; with ``"ray"`` a :class:`RayAuditResult` whose ``summary`` lists
        every chunk that failed (its runs carry ``internal_error`` records, never dropped).

    Raises:
        SourceError: a missing source, a regular file, or no default run root.
        ValueError: an unknown engine.

    >>> audit("tests/fixtures/example").runs[0]["verdict"]
    'terminal'
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    if engine == "process" and runs_from is None:
        from ..fleet_audit import audit as local_audit

        return local_audit(source, max_depth=max_depth, progress=progress, jobs=jobs,
                           cache=cache, cache_dir=cache_dir)
    found = _find(source, max_depth, runs_from)
    if engine == "process":  # the runs of a listing: no store (it is keyed by sources)
        from ..audit import audit_chunk
        from ..read.executor import map_chunks

        records = []
        for chunk in map_chunks(audit_chunk, found.runs, jobs=jobs):
            records.extend(chunk)
            if progress is not None:
                progress(len(chunk))
        return AuditResult(runs=sorted(records, key=lambda r: r["run_dir"]), skipped=[],
                           root_used=None)
    records, summary = _ray_audit_records(found.runs, runs_per_task=runs_per_task,
                                          progress=progress, on_chunk=on_chunk,
                                          ray_remote_args=ray_remote_args, ray_init=ray_init)
    runs = sorted(records, key=lambda r: r["run_dir"])
    skipped = [{"path": s.path, "reason": s.reason} for s in found.skipped]
    return RayAuditResult(runs=runs, skipped=skipped, root_used=found.root_used,
                          summary=summary)


def _find(source: Source | None, max_depth: int, runs_from: str | None) -> Any:
    if runs_from is not None:
        from ..read.discovery import discover_listing

        return discover_listing(runs_from)
    return discover(source, max_depth=max_depth)


def _ray_audit_records(locations: list[RunLocation], *, runs_per_task: int,
                       progress: Callable[[int], None] | None,
                       on_chunk: Callable[[int, int, int, int], None] | None,
                       ray_remote_args: dict[str, Any] | None,
                       ray_init: dict[str, Any] | None,
                       ) -> tuple[list[dict[str, Any]], EngineSummary]:
    import msgspec

    from . import _ray
    from ._tasks import audit_chunk_task

    chunks = make_chunks(locations, runs_per_task)
    _started, startup = _ray.ensure_ray(ray_init)
    t0 = time.perf_counter()
    records: list[dict[str, Any]] = []
    done: set[str] = set()
    task_secs: dict[str, float] = {}
    total_bytes = 0
    if chunks:
        ds = _ray.chunk_dataset(chunks, audit_chunk_task, fn_kwargs=_task_kwargs(chunks),
                                ray_remote_args=ray_remote_args)
        dec = msgspec.json.Decoder()
        for batch in _ray.iter_result_batches(ds):
            keys = batch.column("key").to_pylist()
            recs = batch.column("record").to_pylist()
            sizes = batch.column("bytes").to_pylist()
            secs = batch.column("seconds").to_pylist()
            per_chunk: dict[str, tuple[int, int]] = {}
            for key, rec, size, sec in zip(keys, recs, sizes, secs, strict=True):
                if key in done:  # a chunk delivered twice is counted once
                    continue
                records.append(dec.decode(rec))
                n, b = per_chunk.get(key, (0, 0))
                per_chunk[key] = (n + 1, b + size)
                task_secs[key] = sec
            for key, (n, b) in per_chunk.items():
                done.add(key)
                total_bytes += b
                if on_chunk is not None:
                    on_chunk(len(done), len(chunks), n, b)
                if progress is not None:
                    progress(n)
    failures = []
    attempts = 1 + int((ray_remote_args or {}).get("max_retries", _ray.DEFAULT_MAX_RETRIES))
    for c in chunks:
        if c.key in done:
            continue
        msg = (f"chunk {c.key} ({len(c)} runs) gave no result after {attempts} attempts on "
               "the cluster (task error or worker died; see the Ray logs)")
        failures.append(ChunkFailure(c.key, c.run_dirs, msg))
        exc = ChunkFailedError(msg)
        for d, s, p in zip(c.run_dirs, c.subagent, c.parents, strict=True):
            records.append(error_record(RunLocation(d, s, p), exc))
        if progress is not None:
            progress(len(c))
    summary = EngineSummary("ray", len(chunks), len(done), len(locations), total_bytes,
                            startup, time.perf_counter() - t0, tuple(failures),
                            sum(task_secs.values()))
    return records, summary


@dataclass(frozen=True, slots=True)
class ExportResult:
    """What :func:`export` wrote: the dataset manifest (``_dataset.json``) and, with Ray, the
    engine's summary (``complete`` is False when a chunk failed: no ``_dataset.json`` then)."""

    out: str
    manifest: dict[str, Any]
    summary: EngineSummary | None = None

    @property
    def complete(self) -> bool:
        return self.summary is None or not self.summary.failures


def export(source: Source | None, out: str | os.PathLike[str], *, engine: str = "process",
           runs_per_task: int = DEFAULT_RUNS_PER_TASK, redact_output: bool = False,
           max_depth: int = DEFAULT_MAX_DEPTH, runs_from: str | None = None,
           on_chunk: Callable[[int, int, int, int], None] | None = None,
           ray_remote_args: dict[str, Any] | None = None,
           ray_init: dict[str, Any] | None = None) -> ExportResult:
    """Write every table of the fleet as the Parquet dataset of :mod:`rivumi_analysis.export`.

    ``engine="process"`` is :func:`rivumi_analysis.export.export` (one part per table and
    kind). ``engine="ray"`` builds each chunk of ``runs_per_task`` runs in a Ray task with the
    same table builders and the same writer (``store.build.write_parts``): the same layout,
    columns and rows, one part per chunk (``part-<chunk key>.parquet``), so
    ``polars.scan_parquet(f"{out}/<table>/**/*.parquet", hive_partitioning=True)`` reads
    either. Fork links whose source is in another chunk are resolved fleet-wide by the
    driver before ``_dataset.json`` is written. ``out`` must be a folder every node sees
    (a shared file system) or an object-store prefix (``s3://bucket/prefix``: each task
    uploads its parts; the process engine then runs the same tasks in this process).

    Args:
        source: run directories or folders of runs (ignored with ``runs_from``).
        out: the dataset folder (see :func:`rivumi_analysis.export.check_out`).
        engine: ``"process"`` or ``"ray"``.
        runs_per_task: runs per Ray task.
        redact_output: ``export --redact``.
        runs_from: a listing file naming the runs (Parquet or CSV with a ``path`` column).
        on_chunk: called after each chunk with ``(chunks done, chunks, runs, bytes)``.
        ray_remote_args, ray_init: as for :func:`audit`.

    Returns:
        An :class:`ExportResult`; with Ray, ``complete`` is False when a chunk kept failing
        (its runs are listed in ``summary.failures``; ``_dataset.json`` is not written).

    Raises:
        ExportError: ``out`` cannot be used (checked before anything is read).
        SourceError: a bad source, or (code ``no_runs``) no run below it.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     export("tests/fixtures/example", d + "/ds").manifest["tables"]["events"]["rows"]
    50
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    from ..read.uri import is_uri

    out = os.fspath(out)
    to_uri = is_uri(out)
    if not to_uri:
        out = os.path.abspath(out)
    if engine == "process" and runs_from is None and not to_uri:
        from ..export import export as local_export

        return ExportResult(out, local_export(source, out, redact_output=redact_output,
                                              max_depth=max_depth))
    from ..errors import SourceError
    from ..read.discovery import normalize_sources
    from ._dest import check_out, prepare_out

    check_out(out)
    found = _find(source, max_depth, runs_from)
    if not found.runs:
        raise SourceError("no runs found", code="no_runs",
                          hint="a run directory holds events.jsonl, session.json or "
                               "result.json; check the PATH and --max-depth")
    tops = normalize_sources(source)[0] if runs_from is None else []
    prepare_out(out)
    return _chunked_export(found.runs, out, tops, runs_per_task=runs_per_task,
                           redact_output=redact_output, on_chunk=on_chunk,
                           ray_remote_args=ray_remote_args, ray_init=ray_init,
                           engine=engine)


def _chunked_export(locations: list[RunLocation], out: str, tops: list[str], *,
                    runs_per_task: int, redact_output: bool,
                    on_chunk: Callable[[int, int, int, int], None] | None,
                    ray_remote_args: dict[str, Any] | None, ray_init: dict[str, Any] | None,
                    engine: str) -> ExportResult:
    from . import _export, _ray

    chunks = make_chunks(locations, runs_per_task)
    kwargs: dict[str, Any] = {**_task_kwargs(chunks, out), "out": out,
                              "redact_tops": tops if redact_output else None}
    startup = 0.0
    if engine == "process":  # --runs-from without Ray: the same tasks, in this process
        import pyarrow as pa

        t0 = time.perf_counter()
        batches: Any = (_export.export_chunk_task(pa.Table.from_pylist([c.to_item()]), **kwargs)
                        for c in chunks)
    else:
        _started, startup = _ray.ensure_ray(ray_init)
        t0 = time.perf_counter()
        ds = _ray.chunk_dataset(chunks, _export.export_chunk_task, fn_kwargs=kwargs,
                                ray_remote_args=ray_remote_args)
        batches = _ray.iter_result_batches(ds)
    got = _export.Collected()
    for batch in batches:
        by_key: dict[str, list[dict[str, Any]]] = {}
        for row in batch.to_pylist():
            by_key.setdefault(row["key"], []).append(row)
        for key, rows in by_key.items():
            if key in got.files:  # a chunk delivered twice is counted once
                continue
            got.add(key, rows)
            if on_chunk is not None:
                on_chunk(len(got.files), len(chunks), rows[0]["runs"], rows[0]["bytes"])
    attempts = 1 + int((ray_remote_args or {}).get("max_retries", _ray.DEFAULT_MAX_RETRIES))
    failures = tuple(
        ChunkFailure(c.key, c.run_dirs, f"chunk {c.key} ({len(c)} runs) gave no result after "
                     f"{attempts} attempts on the cluster; its parts are missing and "
                     "_dataset.json was not written")
        for c in chunks if c.key not in got.files)
    if not failures:
        resolved: dict[str, str] = {}
        for c in chunks:
            resolved.update(zip(c.run_dirs, got.chunk_dirs[c.key], strict=True))
        rel = None
        if redact_output:
            from ..export import _relative

            def rel(p: str) -> str | None:
                return _relative(p, tops)
        _export.resolve_fork_links(out, got, [resolved[loc.run_dir] for loc in locations],
                                   rel)
    manifest = _export.finish(out, got, chunks, redacted=redact_output, engine=engine,
                              complete=not failures)
    summary = EngineSummary(engine, len(chunks), len(got.files), len(locations), got.bytes,
                            startup, time.perf_counter() - t0, failures, got.task_seconds)
    return ExportResult(out, manifest, summary)


@dataclass(frozen=True, slots=True)
class StoreResult:
    """What :func:`store` did: the opened store (``opened.store.directory``, the fresh
    ``opened.manifest``) and, with Ray, the engine's summary of the runs it re-read."""

    opened: Any
    summary: EngineSummary | None = None


def store(source: Source | None = None, *, engine: str = "process",
          store_dir: str | os.PathLike[str] | None = None, max_depth: int = DEFAULT_MAX_DEPTH,
          verify: bool = False, compact: bool = False, jobs: int | None = None,
          on_chunk: Callable[[int, int, int, int], None] | None = None,
          ray_remote_args: dict[str, Any] | None = None,
          ray_init: dict[str, Any] | None = None) -> StoreResult:
    """Build or refresh the Parquet store of ``source`` (see :mod:`rivumi_analysis.store`).

    The store plans as always (stat the fleet, compare with its manifest, cut the runs to
    re-read into chunks) and publishes the manifest last. ``engine="ray"`` runs its chunks in
    Ray tasks, each calling the store's own ``run_chunk`` (one read per run, one part written
    under the store folder, which must be at the same path on every node). ``jobs`` (default:
    the cluster's CPUs with Ray) sets how many chunks the runs are cut into.

    Raises:
        ChunkFailedError: (Ray) a chunk kept failing; nothing was published (the previous
            version stays readable); ``failures`` lists the chunks and their runs.
        SourceError, StoreError: as :func:`rivumi_analysis.store.open_store`.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     len(store("tests/fixtures/example", store_dir=d).opened.manifest.runs)
    1
    """
    from ..store import open_store

    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    if engine == "process":
        return StoreResult(open_store(source, store_dir=store_dir, max_depth=max_depth,
                                      verify=verify, compact=compact, jobs=jobs))
    from . import _ray
    from ._store import RayExecutor

    _started, startup = _ray.ensure_ray(ray_init)
    if jobs is None:
        import ray

        jobs = max(1, int(ray.cluster_resources().get("CPU", 1)))
    executor = RayExecutor(ray_remote_args=ray_remote_args, on_chunk=on_chunk)
    opened = open_store(source, store_dir=store_dir, max_depth=max_depth, verify=verify,
                        compact=compact, jobs=jobs, executor=executor)
    summary = executor.summary
    if summary is not None:
        import dataclasses

        summary = dataclasses.replace(summary, startup_seconds=startup)
    return StoreResult(opened, summary)


class ChunkBar:
    """A tqdm bar on stderr for ``on_chunk``: runs done, with chunks and megabytes read.

    >>> import io
    >>> bar = ChunkBar(file=io.StringIO(), disable=True)
    >>> bar(1, 4, 10, 2_000_000); bar.runs, bar.bytes
    (10, 2000000)
    >>> bar.close()
    """

    def __init__(self, **tqdm_kwargs: Any) -> None:
        from tqdm import tqdm

        tqdm_kwargs.setdefault("leave", False)
        tqdm_kwargs.setdefault("desc", "auditing (ray)")
        self._bar = tqdm(unit="run", **tqdm_kwargs)
        self.runs = 0
        self.bytes = 0

    def __call__(self, done: int, total: int, runs: int, nbytes: int) -> None:
        self.runs += runs
        self.bytes += nbytes
        self._bar.set_postfix_str(f"chunks {done}/{total}, {self.bytes / 1e6:.0f} MB",
                                  refresh=False)
        self._bar.update(runs)

    def close(self) -> None:
        self._bar.close()


def _task_kwargs(chunks: list[Chunk], *more: str) -> dict[str, Any]:
    """What every task needs from the driver: the test hook and object-storage filesystems."""
    return _task_kwargs_for([*(d for c in chunks for d in c.run_dirs), *more])


def _task_kwargs_for(paths: list[str]) -> dict[str, Any]:
    """The test hook, and the registered filesystems when some path is a URI."""
    from ._tasks import fault_from_env

    kwargs: dict[str, Any] = {"fault": fault_from_env()}
    if any("://" in d for d in paths):
        from ..read.uri import registered_filesystems

        kwargs["filesystems"] = registered_filesystems()
    return kwargs


def audit_dataset(source: Source | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH,
                  runs_per_task: int = DEFAULT_RUNS_PER_TASK,
                  ray_remote_args: dict[str, Any] | None = None,
                  ray_init: dict[str, Any] | None = None,
                  runs_from: str | None = None) -> Any:
    """A lazy ``ray.data.Dataset`` of audit records, one row per run (columns of
    ``audit.RECORD_FIELDS``), for composing your own Ray pipeline.

    One table per pipeline: each Dataset decodes the logs it needs, so a second table built
    the same way reads the runs again. Discovery runs here, on the driver; nothing else runs
    until the dataset is consumed. Rows come in chunk order, not sorted.

    Example (needs the ``ray`` extra)::

        ds = audit_dataset("/runs")
        ds.filter(lambda r: r["verdict"] != "terminal").write_parquet("/tmp/not-terminal")
    """
    from . import _ray
    from ._tasks import audit_rows_task

    found = _find(source, max_depth, runs_from)
    _ray.ensure_ray(ray_init)
    chunks = make_chunks(found.runs, runs_per_task)
    ds = _ray.chunk_dataset(chunks, audit_rows_task, fn_kwargs=_task_kwargs(chunks),
                            ray_remote_args=ray_remote_args)
    ds.context.max_errored_blocks = 0  # a user's pipeline fails loudly instead
    return ds
