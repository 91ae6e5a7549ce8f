"""The public ``*_df`` loaders (read through the store by default) and their lazy ``scan_*`` twins.

``x_df(source)`` opens the store of ``source`` (refreshing what changed) and returns the
table, equal to a cold load (``x_df(source, cache=False)``: same rows, order and dtypes).
A loaded ``Fleet``/``RunData`` source, non-default table options, ``cache=False`` or
``$RIVUMI_ANALYSIS_STORE=0`` load in memory as before. When the store cannot be used (not
writable, locked for too long, damaged beyond repair) a :class:`StoreWarning` is issued and
the table is loaded in memory.

``scan_x(source)`` returns a ``pl.LazyFrame`` over the store's Parquet files (projection and
predicate pushdown; row order is not part of the contract).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import polars as pl

from ..errors import QuarantineError, SourceError, StoreError
from ..read.discovery import DEFAULT_MAX_DEPTH
from .core import open_and_read, open_store, store_enabled, warn_fallback
from .read import read_parts, read_table

StoreDir = str | os.PathLike[str] | None


def _path_source(source: Any) -> bool:
    from ..read.snapshot import Fleet, RunData

    if isinstance(source, (Fleet, RunData)):
        return False
    return not (isinstance(source, (list, tuple)) and any(
        isinstance(r, RunData) for r in source))


def _read(store: Any, m: Any, tables: tuple[str, ...] | list[str],
          strict: bool) -> dict[str, pl.DataFrame] | QuarantineError:
    """The tables of one manifest, as a cold load orders them (``strict``: the
    ``QuarantineError`` to raise when the fleet has quarantined lines)."""
    out = {t: read_table(store, m, t) for t in tables}
    if strict:
        q = out.get("quarantine")
        if q is None:
            q = read_parts(store, m, "quarantine", columns=["run_dir"])
        if q.height:
            return QuarantineError(read_table(store, m, "quarantine"))
    return out


def load_tables(tables: tuple[str, ...] | list[str], source: Any, *, strict: bool = False,
                max_depth: int = DEFAULT_MAX_DEPTH, cache: bool | None = None,
                store_dir: StoreDir = None) -> dict[str, pl.DataFrame] | None:
    """Some tables through the store, from one refresh (one consistent version), or None
    when the store is off, the source is not a path, or the store is unusable (then a
    :class:`StoreWarning` was issued and the caller loads in memory)."""
    use = store_enabled() if cache is None else bool(cache)
    if not use or not _path_source(source):
        return None
    from ..read.discovery import check_sources, normalize_sources

    check_sources(normalize_sources(source)[0])  # usage errors first, as a cold load
    for verify in (False, True):
        try:
            # the Parquet read of the manifest in force overlaps the stat pass
            # (``tables``: a load of only events/quarantine may skip the full stat pass)
            out = open_and_read(source, lambda store, m: _read(store, m, tables, strict),
                                store_dir=store_dir, max_depth=max_depth, verify=verify,
                                tables=tables)[1]
            if isinstance(out, QuarantineError):
                raise out
            return out
        except StoreError as exc:
            warn_fallback(exc)
            return None
        except pl.exceptions.PolarsError as exc:  # a part damaged with its size and mtime kept
            if verify:
                warn_fallback(StoreError(f"the store could not be read: {exc}",
                                         code="store_damaged"))
                return None
        except (QuarantineError, SourceError):
            raise
        except Exception as exc:  # never worse than a cold load: say why and load in memory
            warn_fallback(StoreError(f"the store failed: {type(exc).__name__}: {exc}",
                                     code="store_failed"))
            return None
    return None


def load_table(table: str, source: Any, *, strict: bool, max_depth: int, cache: bool | None,
               store_dir: StoreDir, cold: Callable[[], pl.DataFrame]) -> pl.DataFrame:
    """One table through the store, or ``cold()`` when the store is off or unusable."""
    out = load_tables((table,), source, strict=strict, max_depth=max_depth, cache=cache,
                      store_dir=store_dir)
    return cold() if out is None else out[table]


def scan_table(table: str, source: Any = None, *, max_depth: int = DEFAULT_MAX_DEPTH,
               store_dir: StoreDir = None, refresh: bool = True) -> pl.LazyFrame:
    """A LazyFrame over one table of the (refreshed) store of ``source``; ``refresh=False``
    serves the store as it is, without the stat pass over the sources (see ``open_store``).

    Raises:
        SourceError: a missing source, a regular file, or no default run root.
        StoreError: the store cannot be used (scans have no in-memory fallback).
    """
    opened = open_store(source, store_dir=store_dir, max_depth=max_depth, refresh=refresh)
    return read_parts(opened.store, opened.manifest, table, lazy=True)


# --- one loader per table ----------------------------------------------------------------------

def runs_df(source: Any = None, *, strict: bool = False, max_depth: int = DEFAULT_MAX_DEPTH,
            cache: bool | None = None, store_dir: StoreDir = None) -> pl.DataFrame:
    """One row per run: verdict, reasons, counts, limits and usage (see ``tables.runs``).

    Args:
        source: a run directory, a folder of runs, or a list of either (None: the default
            run root); a fleet from ``load_fleet`` is loaded in memory.
        strict: raise ``QuarantineError`` if any line was quarantined.
        max_depth: discovery depth limit.
        cache: read through the store (default: yes unless ``$RIVUMI_ANALYSIS_STORE=0``);
            ``False`` loads in memory. Both give the same table.
        store_dir: the store folder (default: under the user cache dir, keyed by source).

    >>> runs_df("tests/fixtures/example").height
    1
    """
    from ..tables.runs import runs_df as cold

    return load_table("runs", source, strict=strict, max_depth=max_depth, cache=cache,
                      store_dir=store_dir,
                      cold=lambda: cold(source, strict=strict, max_depth=max_depth))


def events_df(source: Any = None, *, strict: bool = False, max_depth: int = DEFAULT_MAX_DEPTH,
              cache: bool | None = None, store_dir: StoreDir = None) -> pl.DataFrame:
    """One row per accepted event (see ``tables.events``); arguments as :func:`runs_df`.

    >>> events_df("tests/fixtures/example")["sequence"].max()
    49
    """
    from ..tables.events import events_df as cold

    return load_table("events", source, strict=strict, max_depth=max_depth, cache=cache,
                      store_dir=store_dir,
                      cold=lambda: cold(source, strict=strict, max_depth=max_depth))


def _simple(table: str, module: str, doc: str) -> Callable[..., pl.DataFrame]:
    def loader(source: Any = None, *, strict: bool = False,
               max_depth: int = DEFAULT_MAX_DEPTH, cache: bool | None = None,
               store_dir: StoreDir = None) -> pl.DataFrame:
        import importlib

        cold = getattr(importlib.import_module(f"rivumi_analysis.tables.{module}"), f"{table}_df")
        return load_table(table, source, strict=strict, max_depth=max_depth, cache=cache,
                          store_dir=store_dir,
                          cold=lambda: cold(source, strict=strict, max_depth=max_depth))

    loader.__name__ = loader.__qualname__ = f"{table}_df"
    loader.__doc__ = doc + "\n\nArguments as :func:`runs_df`."
    return loader


quarantine_df = _simple("quarantine", "quarantine", "One row per quarantined line.")
manifests_df = _simple("manifests", "manifests", "One row per run with a session.json.")
tool_calls_df = _simple("tool_calls", "tool_calls", "One row per tool call.")
approvals_df = _simple("approvals", "approvals", "One row per approval request.")
model_calls_df = _simple("model_calls", "model_calls", "One row per model call.")
usage_df = _simple("usage", "usage", "One row per usage record.")
verifications_df = _simple("verifications", "verifications", "One row per verification.")
forks_df = _simple("forks", "forks", "Fork links and candidate fork points.")
messages_df = _simple("messages", "messages",
                      "One row per transcript message: the manifest's conversation and the "
                      "log's exchanges (see ``tables.messages``).")


def states_df(source: Any = None, *, strict: bool = False, max_depth: int = DEFAULT_MAX_DEPTH,
              charge_approval_waits: bool | None = None, engine: str = "auto",
              cache: bool | None = None, store_dir: StoreDir = None) -> pl.DataFrame:
    """The state after every accepted event (see ``tables.states``); the store holds the
    default options (``charge_approval_waits=None``, any engine: they give the same table).

    >>> states_df("tests/fixtures/example").select("step").row(-1)
    (7,)
    """
    from ..tables.states import states_df as cold

    def load() -> pl.DataFrame:
        return cold(source, strict=strict, max_depth=max_depth,
                    charge_approval_waits=charge_approval_waits, engine=engine)

    if charge_approval_waits is not None or engine == "vectorized":
        return load()
    return load_table("states", source, strict=strict, max_depth=max_depth, cache=cache,
                      store_dir=store_dir, cold=load)


def drift_df(source: Any = None, *, strict: bool = False, max_depth: int = DEFAULT_MAX_DEPTH,
             charge_approval_waits: bool | None = None, cache: bool | None = None,
             store_dir: StoreDir = None) -> pl.DataFrame:
    """Replayed final state vs ``session.json`` (see ``tables.drift``); the store holds the
    default ``charge_approval_waits=None``."""
    from ..tables.drift import drift_df as cold

    def load() -> pl.DataFrame:
        return cold(source, strict=strict, max_depth=max_depth,
                    charge_approval_waits=charge_approval_waits)

    if charge_approval_waits is not None:
        return load()
    return load_table("drift", source, strict=strict, max_depth=max_depth, cache=cache,
                      store_dir=store_dir, cold=load)


def _scan(table: str) -> Callable[..., pl.LazyFrame]:
    def scan(source: Any = None, *, max_depth: int = DEFAULT_MAX_DEPTH,
             store_dir: StoreDir = None, refresh: bool = True) -> pl.LazyFrame:
        return scan_table(table, source, max_depth=max_depth, store_dir=store_dir,
                          refresh=refresh)

    scan.__name__ = scan.__qualname__ = f"scan_{table}"
    scan.__doc__ = (f"A ``pl.LazyFrame`` over the store's ``{table}`` table (refreshed first "
                    "unless ``refresh=False``; projection and predicate pushdown into the "
                    "Parquet parts).")
    return scan


scan_runs = _scan("runs")
scan_events = _scan("events")
scan_quarantine = _scan("quarantine")
scan_manifests = _scan("manifests")
scan_tool_calls = _scan("tool_calls")
scan_approvals = _scan("approvals")
scan_model_calls = _scan("model_calls")
scan_usage = _scan("usage")
scan_verifications = _scan("verifications")
scan_states = _scan("states")
scan_drift = _scan("drift")
scan_forks = _scan("forks")
scan_messages = _scan("messages")
