"""``states_df``: the state of every run after every accepted event, from the log alone.

One row per accepted event (``RunData.events``), in file order, keyed by (``run_dir``,
``line_no``), computed by the reference reducer (:mod:`rivumi_analysis.replay.reducer`). Events the
reducer rejects (a second event with an already-seen sequence) keep their row, carry the
reason in ``rejected`` and leave the state columns as they were before the event.

External runs (§11.8) are left out: their events are not native RunEvents, so step, usage,
repeat-guard and approval state do not apply to them.

``charge_approval_waits``: None (default) infers the runner generation per run
(:func:`rivumi_analysis.replay.reducer.infer_generation`) and charges approval waits only for M4-era
runs, whose clock did not pause during approvals; True/False forces the rule for every run.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import polars as pl

from ..read.discovery import discover
from ..read.snapshot import (
    RunData,
    exact_run,
    gc_paused,
    is_loaded,
    read_run,
    runs_of,
    stream_runs,
)
from ..replay.proof import run_replay_verdict
from ..replay.reducer import (
    Limits,
    RunState,
    Transition,
    charge_waits_default,
    events_from_run,
    infer_generation,
    iter_transitions,
    state_row,
)
from ..replay.vectorised import STATE_COLUMNS
from ._common import check_strict, quarantine_frame, validate_table  # noqa: F401  (re-exported)

STATES_BATCH_RUNS = 256
T = TypeVar("T")

__all__ = ["ReplayChunk", "RunReplay", "load_runs", "replay_chunk", "replay_run", "states_df",
           "STATE_COLUMNS"]

@dataclass(frozen=True, slots=True)
class RunReplay:
    """One run run through the reference reducer, with what the tables need besides states."""

    run: RunData
    transitions: tuple[Transition, ...]
    final: RunState
    generation: str
    charge_approval_waits: bool
    limits: Limits | None
    replay_accepts: bool
    replay_error: str | None


def replay_run(run: RunData, *, charge_approval_waits: bool | None = None) -> RunReplay:
    """Reduce one ``RunData`` and gather the run-level facts (generation, limits, replay).

    Args:
        run: a run read by the loader.
        charge_approval_waits: force the §10.3 rule, or None to infer it from the generation.

    Returns:
        A :class:`RunReplay`.

    >>> from rivumi_analysis.read.snapshot import read_run
    >>> rr = replay_run(read_run("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e"))
    >>> (rr.generation, rr.charge_approval_waits, rr.replay_accepts, rr.final.step)
    ('m4', True, True, 7)
    """
    events = events_from_run(run)
    transitions = tuple(iter_transitions(events))
    final = transitions[-1].state if transitions else RunState()
    generation = infer_generation(events, run.manifest)
    charge = (charge_waits_default(generation) if charge_approval_waits is None
              else bool(charge_approval_waits))
    accepts, error = run_replay_verdict(run)
    return RunReplay(run, transitions, final, generation, charge,
                     Limits.from_request(run.request), accepts, error)


def load_runs(source: Any = None, *, max_depth: int = 8) -> list[RunData]:
    """Runs for a loader (see :func:`rivumi_analysis.read.snapshot.runs_of`)."""
    return runs_of(source, max_depth=max_depth)


def _rows_for(rr: RunReplay, cols: dict[str, list[Any]]) -> None:
    run = rr.run
    by_line = {e.line_no: e for e in run.events}
    events = [by_line[t.event.line_no] for t in rr.transitions]
    rows = [state_row(t.state, charge_approval_waits=rr.charge_approval_waits, limits=rr.limits)
            for t in rr.transitions]
    n = len(rows)
    # Column-wise extends: far cheaper than appending cell by cell.
    per_run = {"run_dir": run.run_dir, "run_id": run.run_id, "kind": run.kind,
               "fork_accepted": rr.replay_accepts, "runner_generation": rr.generation,
               "charge_approval_waits": rr.charge_approval_waits}
    for name, value in per_run.items():
        cols[name].extend([value] * n)
    cols["line_no"].extend([e.line_no for e in events])
    cols["sequence"].extend([e.sequence for e in events])
    cols["event_type"].extend([e.event_type for e in events])
    cols["created_at"].extend([e.created_at for e in events])
    cols["rejected"].extend([t.rejected for t in rr.transitions])
    for name in rows[0] if rows else ():
        cols[name].extend([r[name] for r in rows])


def states_frame(replays: Iterable[RunReplay], *, validate: bool = True) -> pl.DataFrame:
    """Build (and validate) the states table from already reduced runs."""
    cols: dict[str, list[Any]] = {name: [] for name in STATE_COLUMNS}
    for rr in replays:
        _rows_for(rr, cols)
    df = pl.DataFrame(cols, schema=STATE_COLUMNS)
    return _validate(df) if validate else df


def _validate(df: pl.DataFrame) -> pl.DataFrame:
    return validate_table(df, "StatesSchema", "states_df")


ENGINES = ("auto", "reference", "vectorized")


def states_df(source: Any = None, *, strict: bool = False, max_depth: int = 8,
              charge_approval_waits: bool | None = None,
              engine: str = "auto") -> pl.DataFrame:
    """The state after every accepted event of every non-external run.

    Args:
        source: run directories or folders of runs (None: the default run root); a
            ``RunData`` or a list of them is also accepted.
        strict: raise ``QuarantineError`` if any line was quarantined.
        max_depth: discovery depth limit.
        charge_approval_waits: §10.3 rule for charged wall time; None infers it per run (M4
            runners charged approval waits; current ones do not).
        engine: ``"auto"`` (default): the vectorised engine (:mod:`rivumi_analysis.replay.vectorised`), with the
            runs it cannot express exactly handed to the reference reducer, so the result
            always equals ``"reference"`` (the reducer alone, event by event);
            ``"vectorized"``: the vectorised engine only, raising
            ``replay.vectorised.NotVectorizable`` for a run that would need the fallback.

    Returns:
        A DataFrame validated by ``schemas.StatesSchema``, one row per accepted event.

    >>> df = states_df("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e")
    >>> df.select("sequence", "step", "total_tokens").row(-1)
    (49, 7, 7583)
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    locations = _locations(source, max_depth, engine)
    if locations is not None:
        done = _states_in_pool(locations, charge_approval_waits, engine)
        if done is not None:
            pieces, quarantined = done
            check_strict(quarantined, strict)
            return _validate(pl.concat(pieces) if len(pieces) > 1 else pieces[0])
    runs = (stream_runs(source, max_depth=max_depth) if locations is None
            else _read(locations))
    pieces, quarantined = _states_batches(runs, charge_approval_waits, engine)
    check_strict(quarantined, strict)
    return _validate(pl.concat(pieces) if len(pieces) > 1 else pieces[0])


def _states_batches(runs: Iterable[RunData], charge_approval_waits: bool | None,
                    engine: str) -> tuple[list[pl.DataFrame], list[RunData]]:
    """State rows (unvalidated, a frame per batch) and the runs with quarantined lines.

    With the vectorised engine, each batch's window expressions (polars, which releases the
    GIL) run in a helper thread while this thread prepares the next batch (Python): the
    frames are those of :func:`_states_of`, in order. At most one batch waits for its
    window expressions, so memory follows one batch more than before."""
    if engine == "reference":
        return _in_batches(runs, lambda batch: _states_of(batch, charge_approval_waits, engine))
    from concurrent.futures import ThreadPoolExecutor

    done: list[pl.DataFrame] = []
    pending: list[Callable[[], pl.DataFrame]] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rivumi-states") as pool:

        def reduce(batch: list[RunData]) -> None:
            finish = _states_begun(batch, charge_approval_waits, engine, pool)
            if pending:  # the previous batch, finished meanwhile in the helper thread
                done.append(pending.pop()())
            pending.append(finish)

        _, quarantined = _in_batches(runs, reduce)
        done.extend(finish() for finish in pending)
    return done, quarantined


def _states_begun(native: list[RunData], charge_approval_waits: bool | None, engine: str,
                  pool: Any) -> Callable[[], pl.DataFrame]:
    """:func:`_states_of` in two steps: the engine's sequential part here, its window
    expressions submitted to ``pool``; the returned call gives the frame (and hands the
    runs the engine could not express to the reference reducer, in this thread)."""
    if not native:
        frame = _states_of(native, charge_approval_waits, engine)
        return lambda: frame
    from ..replay.vectorised import finish_columnar, prepare_columnar

    rows = _with_columns(native)
    events, per_run, reasons = prepare_columnar(native, charge_approval_waits, rows)
    future = pool.submit(finish_columnar, events, per_run, reasons)
    return lambda: _with_fallbacks(future.result()[0], reasons, native,
                                   charge_approval_waits, engine)


def _in_batches(runs: Iterable[RunData], reduce: Callable[[list[RunData]], T],
                ) -> tuple[list[T], list[RunData]]:
    """``reduce`` of the non-external runs, :data:`STATES_BATCH_RUNS` at a time (once at
    least, so an empty fleet still gives a piece), and the runs with quarantined lines."""
    quarantined: list[RunData] = []
    pieces: list[T] = []
    batch: list[RunData] = []
    # Runs are read and reduced a batch at a time, so memory follows the table, not the
    # parsed fleet; batches keep file order, and the result equals one pass over all runs.
    with gc_paused():
        for run in runs:
            if run.quarantined:
                quarantined.append(run)
            if run.kind != "external":
                batch.append(run)
            if len(batch) >= STATES_BATCH_RUNS:
                pieces.append(reduce(batch))
                batch = []
        if batch or not pieces:
            pieces.append(reduce(batch))
    return pieces, quarantined


def _locations(source: Any, max_depth: int, engine: str) -> list[Any] | None:
    """The run locations of a path source for the vectorised engine (None: the reference
    engine, or runs already loaded, which take the snapshots as they are)."""
    if engine == "reference" or is_loaded(source):
        return None
    return discover(source, max_depth=max_depth).runs


def _read(locations: list[Any]) -> Iterator[RunData]:
    """Runs read for columns (``read_run(columnar=True)``: a log on the columnar fast path is
    not turned into per-event objects; ``request.json`` is read for the limits)."""
    return (read_run(loc.run_dir, is_subagent=loc.is_subagent,
                     parent_run_dir=loc.parent_run_dir, source_root=loc.source_root,
                     columnar=True, with_request=True) for loc in locations)


_ENGINE_COLUMNS = ("line_no", "byte_offset", "byte_length", "sequence", "event_type",
                   "event_run_id", "created_at")


def _rows_from_events(runs: list[RunData], events: Any) -> dict[int, Any]:
    """The engine's columns of the runs read clean (``fast`` set) from their ``events_df``
    rows (``events``: the rows of ``runs``, each run's together in line order). A clean log
    has one event per line, so a run's rows are used only when they are one block whose
    ``line_no`` are exactly 1..n for its n events; any other run is left out (its columns
    are derived again by :func:`_with_columns`)."""
    block = pl.col("run_dir").rle_id()
    ev = events.select(*_ENGINE_COLUMNS, block.alias("_b"), pl.col("run_dir"))
    blocks = ev.group_by("_b", maintain_order=True).agg(
        pl.col("run_dir").first(), pl.len().alias("_n"),
        (pl.col("line_no") == pl.int_range(1, pl.len() + 1)).all().alias("_ok"))
    where: dict[str, tuple[int, int]] = {}
    start = 0
    for run_dir, n, ok in blocks.select("run_dir", "_n", "_ok").iter_rows():
        where[run_dir] = (-1, -1) if run_dir in where or not ok else (start, n)
        start += n
    table = ev.select(_ENGINE_COLUMNS).to_arrow()
    rows: dict[int, Any] = {}
    for k, run in enumerate(runs):
        at = where.get(run.run_dir)
        if run.fast is not None and at is not None and at[0] >= 0 and at[1] == len(run.fast):
            rows[k] = table.slice(*at)
    return rows


def _with_columns(runs: list[RunData], events: Any = None) -> dict[int, Any]:
    """The engine's columns of the runs read clean (``fast`` set), by index in ``runs``: one
    batch of :func:`rivumi_analysis.read.columnar.columns` (the engine reduces every other
    run from its ``events``).

    ``events``: the ``events_df`` rows of runs whose logs were read clean: their columns are
    taken from it instead of being derived again."""
    rows = _rows_from_events(runs, events) if events is not None else {}
    fast = [k for k, r in enumerate(runs) if r.fast is not None and k not in rows]
    if not fast:
        return rows
    from ..read.columnar import columns

    table = columns([runs[k].fast for k in fast])
    start = 0
    for k in fast:
        size = len(runs[k].fast)
        rows[k] = table.slice(start, size)
        start += size
    return rows


def _states_in_pool(locations: list[Any], charge_approval_waits: bool | None,
                    engine: str) -> tuple[list[pl.DataFrame], list[RunData]] | None:
    """State rows of a large fleet: workers read chunks of runs and run the sequential part
    of the vectorised engine (:func:`rivumi_analysis.replay.vectorised.prepare_columnar`); this
    process runs the window expressions. ``None`` when the fleet is read in this process
    (``read.executor.choose``: a small fleet, one job, or runs on object storage).
    """
    import functools

    from ..read.executor import InProcess, choose, chunked, on_object_storage

    executor, workers = choose(len(locations), runs_per_worker=16,
                               local_only=on_object_storage(locations))
    if isinstance(executor, InProcess):
        return None
    chunks = chunked(locations, workers=workers, most=STATES_BATCH_RUNS)
    work = functools.partial(_pickled, functools.partial(
        _prepare_chunk, charge_approval_waits=charge_approval_waits))
    pieces: list[pl.DataFrame] = []
    quarantined: list[RunData] = []
    for chunk, blob in zip(chunks, executor.map(work, chunks), strict=True):
        if blob is None:  # too deeply nested to send back: this chunk here
            more, bad = _states_batches(_read(chunk), charge_approval_waits, engine)
            pieces.extend(more)
            quarantined.extend(bad)
            continue
        prepared = pickle.loads(blob)
        quarantined.extend(prepared[-1])
        pieces.append(_finish_chunk(prepared, charge_approval_waits, engine))
    return pieces, quarantined


def _pickled(work: Any, locations: list[Any]) -> bytes | None:
    """``work(locations)`` pickled in the worker, or None when it cannot be pickled: a JSON
    value nested deeper than the pickler's recursion limit (a run's document or event, kept
    whole); the parent then reduces that chunk itself. (The pool's own pickling would fail
    the whole ``map``.)"""
    result = work(locations)
    try:
        return pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    except RecursionError:
        return None


def _prepare_chunk(locations: list[Any], charge_approval_waits: bool | None) -> tuple[Any, ...]:
    """A worker's part (no polars): read some runs for columns and run the sequential part
    of the engine on all of them (from the columns on the fast path, from the events off
    it); only the runs the engine hands to the reference reducer go back as snapshots."""
    from ..replay.vectorised import prepare_columnar

    with gc_paused():
        runs = list(_read(locations))
        quarantined = [run for run in runs if run.quarantined]
        native = [run for run in runs if run.kind != "external"]
        rows = _with_columns(native)
        events, per_run, reasons = prepare_columnar(native, charge_approval_waits, rows)
        others = {k: _lean(exact_run(native[k])) for k in reasons}
        return events, per_run, reasons, others, quarantined


def _lean(run: RunData) -> RunData:
    """``run`` without the file bytes the reduction never reads (less to send back)."""
    import dataclasses

    from ..read.io import FileRead

    return dataclasses.replace(run, files={
        name: FileRead(fr.status, None, fr.size, fr.identity, fr.error)
        for name, fr in run.files.items()})


def _finish_chunk(prepared: tuple[Any, ...], charge_approval_waits: bool | None,
                  engine: str) -> pl.DataFrame:
    """The state rows of a prepared chunk, in run order (equal to :func:`_states_of`)."""
    from ..replay.vectorised import finish_columnar

    events, per_run, reasons, others, _ = prepared
    df, _ = finish_columnar(events, per_run, reasons)
    return _with_fallbacks(df, reasons, others, charge_approval_waits, engine)


def _with_fallbacks(df: pl.DataFrame, reasons: dict[int, str], runs: Any,
                    charge_approval_waits: bool | None, engine: str) -> pl.DataFrame:
    """The engine's rows (with ``_r``) and the reference reducer's rows of the runs it could
    not express (``runs[k]`` for each ``k`` in ``reasons``), in run order, without ``_r``."""
    from ..replay.vectorised import NotVectorizable

    if reasons and engine == "vectorized":
        k, why = next(iter(sorted(reasons.items())))
        raise NotVectorizable(f"{runs[k].run_dir}: {why} (use engine='auto')")
    if reasons:
        pieces = [df] + [
            states_frame([replay_run(exact_run(runs[k]),
                                     charge_approval_waits=charge_approval_waits)],
                         validate=False).select(pl.lit(k, dtype=pl.Int64).alias("_r"), pl.all())
            for k in sorted(reasons)]
        df = pl.concat(pieces).sort("_r", maintain_order=True)
    return df.drop("_r")


def _states_of(native: list[RunData], charge_approval_waits: bool | None,
               engine: str) -> pl.DataFrame:
    """The (unvalidated) state rows of some non-external runs, in order."""
    if engine == "reference" or not native:
        return states_frame((replay_run(r, charge_approval_waits=charge_approval_waits)
                             for r in native), validate=False)
    from ..replay.vectorised import vector_states

    rows = _with_columns(native)
    df, fallbacks = vector_states(native, charge_approval_waits=charge_approval_waits,
                                  columns=rows)
    return _with_fallbacks(df, fallbacks, native, charge_approval_waits, engine)


# --------------------------------------------------------------------------------------------
# drift and forks from one pass of the vectorised engine (tables.drift, tables.forks and
# tables.replayed build their rows from a ReplayChunk)
# --------------------------------------------------------------------------------------------
FINAL_COLUMNS = ("step", "repeat_count", "last_action_fingerprint", "input_tokens",
                 "output_tokens", "cached_input_tokens", "reasoning_tokens",
                 "provider_total_tokens", "sequence", "phase", "terminal",
                 "charged_wall_seconds", "terminal_reason", "fingerprint_unknown",
                 "unlogged_guard_calls", "_aw", "resume_downtime_seconds",
                 "charge_approval_waits")
"""The columns of :attr:`ReplayChunk.final` after ``_r`` (then ``_last_us``)."""


@dataclass(slots=True)
class ReplayChunk:
    """One engine pass over a chunk of (non-external) runs, for the replay tables.

    * ``states``: the state rows (unvalidated) with ``_r``, the run's index in the chunk, in
      run order (the reference reducer's rows for the runs the engine hands to it); an
      empty frame when the caller did not keep them;
    * ``final``: when manifests were asked for, the last row of each run the engine reduced
      (``_r``, :data:`FINAL_COLUMNS`, ``_last_us``: its latest ``created_at`` in us);
    * ``facts``: the engine's ``replay.vectorised.RunFacts``;
    * ``manifests``: ``manifest_of(run)`` of each run (None when not asked);
    * ``replays``: ``{_r: RunReplay}`` of the runs the engine handed to the reference;
    * ``forked``: ``{_r: data}`` of the runs whose first event is ``run.forked``;
    * ``run_dirs``, ``run_ids``, ``kinds``: every run of the chunk in order.
    """

    states: pl.DataFrame
    final: pl.DataFrame | None
    facts: Any
    manifests: list[Any] | None
    replays: dict[int, RunReplay]
    forked: dict[int, Any]
    run_dirs: list[str]
    run_ids: list[str | None]
    kinds: list[str]


def _replay_finish(prepared: tuple[Any, ...], manifests: list[Any] | None,
                   charge_approval_waits: bool | None, engine: str,
                   keep_states: bool) -> ReplayChunk:
    """A :class:`ReplayChunk` from what :func:`rivumi_analysis.replay.vectorised.prepare_with_facts`
    prepared (``prepared`` = ``(events, per_run, reasons, facts, others)``, ``others[k]``
    the complete snapshot of each run in ``reasons``)."""
    from ..replay.vectorised import NotVectorizable, finish_columnar

    events, per_run, reasons, facts, others = prepared
    if reasons and engine == "vectorized":
        k, why = next(iter(sorted(reasons.items())))
        raise NotVectorizable(f"{others[k].run_dir}: {why} (use engine='auto')")
    df, _ = finish_columnar(events, per_run, reasons, keep=("_aw",))
    final = None
    if manifests is not None:
        final = df.group_by("_r", maintain_order=True).agg(
            *[pl.col(c).last() for c in FINAL_COLUMNS],
            pl.col("created_at").cast(pl.Int64).max().alias("_last_us"))
    replays = {k: replay_run(exact_run(others[k]), charge_approval_waits=charge_approval_waits)
               for k in sorted(reasons)}
    forked = {k: d for k, d in facts.forked.items() if k not in reasons}
    for k, rr in replays.items():
        first = rr.run.events[0] if rr.run.events else None
        if first is not None and first.event_type == "run.forked":
            forked[k] = first.data
    if not keep_states:
        df = df.clear().drop("_aw")
    else:
        df = df.drop("_aw")
        if replays:
            df = pl.concat([df] + [
                states_frame([rr], validate=False)
                .select(pl.lit(k, dtype=pl.Int64).alias("_r"), pl.all())
                for k, rr in replays.items()]).sort("_r", maintain_order=True)
    return ReplayChunk(df, final, facts, manifests, replays, dict(sorted(forked.items())),
                       per_run.column("run_dir").to_pylist(),
                       per_run.column("run_id").to_pylist(), per_run.column("kind").to_pylist())


def replay_chunk(native: list[RunData], *, charge_approval_waits: bool | None = None,
                 engine: str = "auto", manifest_of: Any = None,
                 keep_states: bool = True, events: Any = None) -> ReplayChunk:
    """A :class:`ReplayChunk` of some non-external runs (read any way), in this process.

    ``manifest_of``: applied to each run for :attr:`ReplayChunk.manifests` (and
    :attr:`ReplayChunk.final` is computed); None: neither. ``events``: see
    :func:`_with_columns`.
    """
    from ..replay.vectorised import prepare_with_facts

    rows = _with_columns(native, events)
    events, per_run, reasons, facts = prepare_with_facts(native, charge_approval_waits, rows)
    manifests = [manifest_of(r) for r in native] if manifest_of else None
    return _replay_finish((events, per_run, reasons, facts, native), manifests,
                          charge_approval_waits, engine, keep_states)


def _prepare_replay_chunk(locations: list[Any], charge_approval_waits: bool | None,
                          manifest_of: Any) -> tuple[Any, ...]:
    """A worker's part for :func:`replay_chunks` (no polars): as :func:`_prepare_chunk`,
    plus the engine's run facts and ``manifest_of`` of each run."""
    from ..replay.vectorised import prepare_with_facts

    with gc_paused():
        runs = list(_read(locations))
        quarantined = [run for run in runs if run.quarantined]
        native = [run for run in runs if run.kind != "external"]
        rows = _with_columns(native)
        events, per_run, reasons, facts = prepare_with_facts(native, charge_approval_waits,
                                                             rows)
        others = {k: _lean(exact_run(native[k])) for k in reasons}
        manifests = [manifest_of(r) for r in native] if manifest_of else None
        return (events, per_run, reasons, facts, others), manifests, quarantined


def replay_chunks(source: Any = None, *, max_depth: int = 8,
                  charge_approval_waits: bool | None = None, engine: str = "auto",
                  manifest_of: Any = None, keep_states: bool = True,
                  ) -> tuple[list[ReplayChunk], list[RunData]]:
    """The engine pass of the cold ``drift_df``/``forks_df``: a source read and reduced chunk
    by chunk (in worker processes for a large fleet, ``read.executor.choose``, as
    ``states_df``), and the runs that have quarantined lines (for ``strict``). Arguments as
    :func:`replay_chunk` (``manifest_of`` must be picklable: a module-level function).
    """
    import functools

    locations = _locations(source, max_depth, engine)
    if locations is not None:
        from ..read.executor import InProcess, choose, chunked, on_object_storage

        executor, workers = choose(len(locations), runs_per_worker=16,
                                   local_only=on_object_storage(locations))
        if not isinstance(executor, InProcess):
            parts = chunked(locations, workers=workers, most=STATES_BATCH_RUNS)
            work = functools.partial(_pickled, functools.partial(
                _prepare_replay_chunk, charge_approval_waits=charge_approval_waits,
                manifest_of=manifest_of))
            chunks: list[ReplayChunk] = []
            quarantined: list[RunData] = []
            for part, blob in zip(parts, executor.map(work, parts), strict=True):
                if blob is None:  # too deeply nested to send back: here
                    runs = list(_read(part))
                    quarantined.extend(r for r in runs if r.quarantined)
                    chunks.append(replay_chunk(
                        [r for r in runs if r.kind != "external"],
                        charge_approval_waits=charge_approval_waits, engine=engine,
                        manifest_of=manifest_of, keep_states=keep_states))
                    continue
                prepared, manifests, bad = pickle.loads(blob)
                quarantined.extend(bad)
                chunks.append(_replay_finish(prepared, manifests, charge_approval_waits,
                                             engine, keep_states))
            return chunks, quarantined
    runs = (stream_runs(source, max_depth=max_depth) if locations is None
            else _read(locations))
    return _in_batches(runs, functools.partial(
        replay_chunk, charge_approval_waits=charge_approval_waits, engine=engine,
        manifest_of=manifest_of, keep_states=keep_states))
