"""relayflowd run journals as a second source, with a durable-channel audit (issue 14).

Spec: ``relayflowd-journal.md``. Layers (bottom to top): :mod:`.read` (discovery, copy-then-open
SQLite reader, JSON shapes, envelope checks) → :mod:`.rules` (state-atomic reducer) →
:mod:`.tables` (one DataFrame per table) and :mod:`.audit` (the journal §8 record) → :mod:`.charts`.
Heavy modules (polars, altair) are imported lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

from .audit import journal_record, relay_audit
from .read import Journal, load_journals
from .rules import fold_journal

_LAZY = {
    "relay_entries_df": "tables", "relay_quarantine_df": "tables", "relay_attempts_df": "tables",
    "relay_channel_messages_df": "tables", "relay_channel_deliveries_df": "tables",
    "relay_channel_acks_df": "tables", "relay_channel_cursor_df": "tables",
    "relay_violations_df": "tables", "channel_summary": "vectorised",
}

__all__ = ["Journal", "fold_journal", "journal_record", "load_journals", "relay_audit",
           *_LAZY]


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
