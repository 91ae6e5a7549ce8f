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

import inspect
import os
from collections.abc import Callable
from typing import Any

import polars as pl

from ..errors import QuarantineError, SourceError, StoreError
from ..read.discovery import DEFAULT_MAX_DEPTH
from ..tables.registry import TABLES, TableSpec
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
    if "runs" in out:
        out["runs"] = _with_unread(out["runs"], m)
    if strict:
        q = out.get("quarantine")
        if q is None:
            q = read_parts(store, m, "quarantine", columns=["run_dir"])
        if q.height:
            return QuarantineError(read_table(store, m, "quarantine"))
    return out


def _with_unread(runs: pl.DataFrame, m: Any) -> pl.DataFrame:
    """``runs`` with a row for each folder the store's discovery could not list, as a cold
    ``runs_df`` has (recorded with the discovery; a manifest without a discovery record
    discovers its sources again)."""
    from ..read.discovery import Skipped, discover
    from ..tables._common import frame
    from ..tables.runs import skipped_rows

    memo = m.discovery
    if memo is not None and "unreadable" in memo:
        skipped = [Skipped(p, "unreadable") for p in memo["unreadable"]]
    elif memo is None:
        import warnings

        with warnings.catch_warnings():  # (the store's own discovery warned already)
            warnings.simplefilter("ignore")
            skipped = discover(m.sources, max_depth=m.max_depth).skipped
    else:  # a discovery recorded before unreadable folders were (an older store)
        skipped = []
    rows = skipped_rows(skipped)
    if not rows:
        return runs
    return pl.concat([runs, frame(rows, "RunsSchema")]).sort("run_dir", maintain_order=True)


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


# --- one loader per table (generated from the registry) ----------------------------------------

def load(table: str, source: Any = None, *, strict: bool = False,
         max_depth: int = DEFAULT_MAX_DEPTH, cache: bool | None = None,
         store_dir: StoreDir = None, **options: Any) -> pl.DataFrame:
    """One table of the registry (``tables.registry.TABLES``), read through the store.

    Args:
        table: the table's name (``"events"``).
        source: a run directory, a folder of runs, or a list of either (None: the default
            run root); a fleet from ``load_fleet`` is loaded in memory.
        strict: raise ``QuarantineError`` if any line was quarantined.
        max_depth: discovery depth limit.
        cache: read through the store (default: yes unless ``$RIVUMI_ANALYSIS_STORE=0``);
            ``False`` loads in memory. Both give the same table.
        store_dir: the store folder (default: under the user cache dir, keyed by source).
        **options: the table's own options (``TableSpec.options``, e.g. ``states``'
            ``charge_approval_waits`` and ``engine``); the store holds their defaults, any
            other value loads in memory.

    Raises:
        KeyError: an unknown table, or a relayflowd one (``rivumi_analysis.relay`` loads
            those); TypeError: an option the table does not take.

    >>> load("runs", "tests/fixtures/example").height
    1
    >>> load("events", "tests/fixtures/example")["sequence"].max()
    49
    >>> load("states", "tests/fixtures/example").select("step").row(-1)
    (7,)
    """
    spec = TABLES[table]
    if spec.source != "rivumi":  # (their loaders live above the store: rivumi_analysis.relay)
        raise KeyError(f"{table} is a {spec.source} table: rivumi_analysis.relay.{spec.loader}")
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        raise TypeError(f"{spec.loader}() got an unexpected keyword argument {unknown[0]!r}")

    def cold() -> pl.DataFrame:
        return spec.cold_loader()(source, strict=strict, max_depth=max_depth, **options)

    if not spec.stored or any(v != spec.options[k] for k, v in options.items()):
        return cold()
    return load_table(table, source, strict=strict, max_depth=max_depth, cache=cache,
                      store_dir=store_dir, cold=cold)


_PARAMS = [inspect.Parameter("source", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                             annotation="Any"),
           *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                               annotation=note)
             for name, default, note in (("strict", False, "bool"),
                                         ("max_depth", DEFAULT_MAX_DEPTH, "int"),
                                         ("cache", None, "bool | None"),
                                         ("store_dir", None, "StoreDir")))]


def _loader(spec: TableSpec) -> Callable[..., pl.DataFrame]:
    """``<table>_df``: :func:`load` of one table, with its own signature and docstring."""
    def loader(source: Any = None, **kwargs: Any) -> pl.DataFrame:
        return load(spec.name, source, **kwargs)

    options = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v)
               for k, v in spec.options.items()]
    loader.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [*_PARAMS[:3], *options, *_PARAMS[3:]], return_annotation="pl.DataFrame")
    loader.__name__ = loader.__qualname__ = spec.loader
    loader.__doc__ = (f"One row per {spec.row}; key ({', '.join(spec.key)}), model "
                      f"``schemas.{spec.schema}`` (see ``{spec.cold.partition(':')[0]}``).\n\n"
                      "Arguments as :func:`load`"
                      + (f" (options: {', '.join(spec.options)})." if spec.options else "."))
    return loader


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


for _spec in TABLES.values():
    if _spec.stored:
        globals()[_spec.loader] = _loader(_spec)
        globals()[f"scan_{_spec.name}"] = _scan(_spec.name)
del _spec
