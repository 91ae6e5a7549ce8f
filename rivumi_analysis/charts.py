"""Compatibility path: the charts live in :mod:`rivumi_analysis.viz.charts`.

``from rivumi_analysis import charts`` and ``rivumi_analysis.charts.<name>`` keep working (every
name of the real module, public or not, resolves here).
"""

from __future__ import annotations

from typing import Any

from .viz import charts as _impl
from .viz.charts import *  # noqa: F403
from .viz.charts import __all__  # noqa: F401


def __getattr__(name: str) -> Any:
    return getattr(_impl, name)


def __dir__() -> list[str]:
    return dir(_impl)
