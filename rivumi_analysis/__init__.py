"""rivumi-analysis: load, audit, replay and chart Rivumi / Looplane run directories.

The public surface is small: one ``*_df`` loader per table (all with the same signature,
reading through the incremental Parquet store by default) and its lazy ``scan_*`` twin,
the audit, ``show_run`` (a run's transcript in a notebook), and the pandera models in :mod:`rivumi_analysis.schemas`. Heavy modules are
imported lazily, so ``import rivumi_analysis`` stays cheap. The package layout (layers as
subpackages) is described in ``docs/ARCHITECTURE.md``.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__
from .tables import registry as _registry

# The *_df loaders read through the Parquet store by default (cache=False: in memory); each
# table has a lazy twin scan_<table> over the store. The tables are the registry's.
_STORE = "rivumi_analysis.store.loaders"
_TABLES = _registry.names(stored=True)
_LAZY = {
    **{f"{t}_df": _STORE for t in _TABLES},
    **{f"scan_{t}": _STORE for t in _TABLES},
    "open_store": "rivumi_analysis.store.core",
    "search": "rivumi_analysis.text_search",
    "audit_run": "rivumi_analysis.audit",
    "load_fleet": "rivumi_analysis.read.snapshot",
    "show_run": "rivumi_analysis.viz.notebook",
    "compare_groups": "rivumi_analysis.tables.groups",
}

__all__ = ["__version__", *_LAZY]


def __dir__() -> list[str]:
    """The public names (what tab completion and ``dir(rivumi_analysis)`` show)."""
    return sorted(__all__)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rivumi_analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
