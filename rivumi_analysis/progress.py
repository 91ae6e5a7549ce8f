"""Progress bars for long public calls: tqdm's auto mode (a widget in Jupyter, text on a
terminal), shown when a pass reads at least :data:`MIN_RUNS` runs at once, or else only once
it has taken :data:`DELAY_SECONDS`.

Off with ``progress=False`` on a call, :func:`set_enabled(False) <set_enabled>` for the
process, or ``$RIVUMI_ANALYSIS_PROGRESS=0`` (``off``, ``false``, ``no``). The CLI draws its
own progress lines, so it turns these off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

ENV = "RIVUMI_ANALYSIS_PROGRESS"
MIN_RUNS = 300
"""A pass over this many runs shows its bar at once ("more than a few hundred runs")."""
DELAY_SECONDS = 2.0
"""A smaller pass shows its bar only once it has run this long."""
_OFF = frozenset({"0", "off", "false", "no"})
_default: bool | None = None


def set_enabled(on: bool | None) -> None:
    """Turn the bars on or off for this process (``None``: back to ``$RIVUMI_ANALYSIS_PROGRESS``)."""
    global _default
    _default = on


def enabled(option: bool | None = None, environ: dict[str, str] | None = None) -> bool:
    """Whether a call shows a bar: its ``progress=`` option, else :func:`set_enabled`'s
    choice, else ``$RIVUMI_ANALYSIS_PROGRESS`` (on by default).

    >>> enabled(), enabled(environ={ENV: "off"}), enabled(True, {ENV: "0"})
    (True, False, True)
    """
    if option is not None:
        return option
    if _default is not None and environ is None:
        return _default
    env = os.environ if environ is None else environ
    return env.get(ENV, "1").strip().lower() not in _OFF


def track(results: Iterable[T], sizes: Sequence[int], desc: str,
          option: bool | None = None) -> Iterator[T]:
    """``results`` (one per chunk of runs, in order) with a bar counting the runs done.

    >>> list(track(iter(["a", "b"]), [3, 4], "reading runs", option=False))
    ['a', 'b']
    """
    if not enabled(option) or not sizes:
        yield from results
        return
    bar = _tqdm(sum(sizes), desc)
    try:
        for size, result in zip(sizes, results, strict=False):
            bar.update(size)
            yield result
    finally:
        bar.close()


def bar(total: int, desc: str, option: bool | None = None) -> Any:
    """A bar to ``update(n)`` and ``close()`` by hand (a no-op object when off)."""
    if not enabled(option):
        return _NoBar()
    return _tqdm(total, desc)


def _tqdm(total: int, desc: str) -> Any:
    """tqdm's auto class: a widget in Jupyter; on a terminal text on stderr, and nothing when
    stderr is not a terminal (a log file or CI gets no carriage-return lines)."""
    from tqdm.auto import tqdm

    in_notebook = tqdm.__module__ not in ("tqdm.std", "tqdm.asyncio")  # else tqdm.auto's own
    return tqdm(total=total, desc=desc, unit="run", file=sys.stderr, leave=False,
                delay=0 if total >= MIN_RUNS else DELAY_SECONDS,
                disable=False if in_notebook else None)


class _NoBar:
    def update(self, n: int = 1) -> None:
        return None

    def close(self) -> None:
        return None
