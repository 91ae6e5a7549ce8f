"""rivumi-analysis: load, audit, replay and chart Rivumi / Looplane run directories.

The public surface is small: one ``*_df`` loader per table (all with the same signature),
the audit, and the pandera models in :mod:`rivumi_analysis.schemas`. Heavy modules are
imported lazily, so ``import rivumi_analysis`` stays cheap. The package layout (layers as
subpackages) is described in ``docs/ARCHITECTURE.md``.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY = {
    "runs_df": "rivumi_analysis.tables.runs",
    "events_df": "rivumi_analysis.tables.events",
    "quarantine_df": "rivumi_analysis.tables.quarantine",
    "manifests_df": "rivumi_analysis.tables.manifests",
    "tool_calls_df": "rivumi_analysis.tables.tool_calls",
    "approvals_df": "rivumi_analysis.tables.approvals",
    "model_calls_df": "rivumi_analysis.tables.model_calls",
    "usage_df": "rivumi_analysis.tables.usage",
    "verifications_df": "rivumi_analysis.tables.verifications",
    "states_df": "rivumi_analysis.tables.states",
    "drift_df": "rivumi_analysis.tables.drift",
    "forks_df": "rivumi_analysis.tables.forks",
    "messages_df": "rivumi_analysis.tables.messages",
    "search": "rivumi_analysis.text_search",
    "audit_run": "rivumi_analysis.audit",
    "load_fleet": "rivumi_analysis.read.snapshot",
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
