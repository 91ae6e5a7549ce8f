"""``states``, ``drift`` and ``forks`` of runs already read, from one vectorised engine pass.

The store builds a chunk's three replay tables with :func:`replay_tables`: one pass of the
vectorised engine (:mod:`rivumi_analysis.replay.vectorised`) gives the state rows, each run's
final state and the run facts drift and forks read, instead of one reference replay per run;
the runs the engine cannot express are reduced by the reference reducer, so every table
equals its loader's (``states_df``, ``drift_df``, ``forks_df`` with ``engine="reference"``).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from ..read.snapshot import RunData, gc_paused
from .drift import chunk_rows, drift_manifest, drift_of_rows
from .forks import forks_of_states
from .states import _validate, replay_chunk

__all__ = ["REPLAY_TABLES", "replay_chunk_tables", "replay_tables"]

REPLAY_TABLES = ("states", "drift", "forks")


def replay_tables(runs: Sequence[RunData], *, charge_approval_waits: bool | None = None,
                  tables: Sequence[str] = REPLAY_TABLES, validate: bool = True,
                  events: pl.DataFrame | None = None) -> dict[str, pl.DataFrame]:
    """``states``, ``drift`` and ``forks`` of some runs already read, from one engine pass.

    Equal to ``states_df(runs)``, ``drift_df(runs)`` and ``forks_df(runs)`` (fork sources
    are looked up among ``runs``).

    Args:
        runs: runs read by the loader, in order (external runs are skipped), read any way
            (``read_run`` with or without ``columnar=True``).
        charge_approval_waits: as ``states_df``.
        tables: which of :data:`REPLAY_TABLES` to build.
        validate: validate each table with its pandera model (as the loaders do).
        events: optionally, the ``events_df`` rows of ``runs`` when their logs were read
            clean (``read_run(clean=True)``, as the store's chunk does): the engine takes
            those runs' columns from it instead of deriving them again (same tables).

    Returns:
        Table name -> polars DataFrame, for each name in ``tables``.

    >>> from rivumi_analysis.read.snapshot import read_run
    >>> t = replay_tables([read_run("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e")])
    >>> t["states"].height, t["drift"].height, t["forks"]["row_kind"].n_unique()
    (50, 13, 1)
    """
    unknown = set(tables) - set(REPLAY_TABLES)
    if unknown:
        raise ValueError(f"tables must be among {REPLAY_TABLES}, not {sorted(unknown)}")
    native = [r for r in runs if r.kind != "external"]
    with gc_paused():
        chunk = replay_chunk(native, charge_approval_waits=charge_approval_waits,
                             manifest_of=drift_manifest if "drift" in tables else None,
                             keep_states="states" in tables or "forks" in tables,
                             events=events)
    out: dict[str, pl.DataFrame] = {}
    if "states" in tables:
        states = chunk.states.drop("_r")
        out["states"] = _validate(states) if validate else states
    if "drift" in tables:
        out["drift"] = drift_of_rows(chunk_rows(chunk), validate=validate)
    if "forks" in tables:
        out["forks"] = forks_of_states([(chunk.states, chunk.forked, chunk.run_dirs)],
                                       validate=validate)
    return {t: out[t] for t in tables}


def replay_chunk_tables(runs: Sequence[RunData], *,
                        events: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The store's chunk builder of ``states``, ``drift`` and ``forks`` (registry): runs read
    once for every table (``store.build.read_for_tables``), the clean runs' columns taken
    from the chunk's ``events`` frame (not derived again)."""
    return replay_tables(runs, events=events)
