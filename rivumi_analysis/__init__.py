"""rivumi-analysis: load, audit, replay and chart Rivumi / Looplane run directories.

The public surface is small: one ``*_df`` loader per table (all with the same signature),
the audit, and the pandera models in :mod:`rivumi_analysis.schemas`. Heavy modules are
imported lazily, so ``import rivumi_analysis`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY = {
    "runs_df": "rivumi_analysis.runs",
    "events_df": "rivumi_analysis.events",
    "quarantine_df": "rivumi_analysis.quarantine",
    "manifests_df": "rivumi_analysis.manifests",
    "tool_calls_df": "rivumi_analysis.tool_calls",
    "approvals_df": "rivumi_analysis.approvals",
    "model_calls_df": "rivumi_analysis.model_calls",
    "usage_df": "rivumi_analysis.usage",
    "verifications_df": "rivumi_analysis.verifications",
    "states_df": "rivumi_analysis.states",
    "drift_df": "rivumi_analysis.drift",
    "forks_df": "rivumi_analysis.forks",
    "audit_run": "rivumi_analysis.audit",
    "load_fleet": "rivumi_analysis._snapshot",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rivumi_analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
