"""relayflowd run journals as a second source, with a durable-channel audit (issue 14).

Spec: ``relayflowd-journal.md``. Layers (bottom to top): :mod:`.read` (discovery, copy-then-open
SQLite reader, JSON shapes, envelope checks) → :mod:`.rules` (state-atomic reducer) →
:mod:`.tables` (one DataFrame per table) and :mod:`.audit` (the journal §8 record) → :mod:`.charts`.
Heavy modules (polars, altair) are imported lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..tables.registry import names as _names
from .audit import journal_record, relay_audit
from .read import Journal, load_journals
from .rules import fold_journal

# one loader per relayflowd table of the registry (relay/tables.py)
_LAZY = {f"{t}_df": "tables" for t in _names(source="relayflowd")}

__all__ = ["Journal", "fold_journal", "journal_record", "load_journals", "relay_audit",
           *_LAZY]


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
