"""Store housekeeping: list the stores under the store root, and remove old or surplus ones.

Every source path gets its own store folder under :func:`~.core.default_store_root`
(``<name>-<hash>``). Each open of a store touches its ``.last-used`` stamp, so ``store ls``
can say when a store was last read and ``store gc`` can remove the least recently used first.
A refresh that wrote something keeps the stores under the default root within a size cap
(``$RIVUMI_ANALYSIS_STORE_MAX_SIZE``, default :data:`DEFAULT_MAX_BYTES`; ``0`` or ``off``:
no cap), never removing the store it just refreshed.

A store is removed only while nobody refreshes it (its ``.lock`` is taken without waiting;
a busy store is skipped) and only when its folder holds a store manifest, so nothing that is
not a store is ever deleted.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .paths import LAST_USED, LOCK, MANIFEST, default_store_root, manifest_doc

ENV_MAX_SIZE = "RIVUMI_ANALYSIS_STORE_MAX_SIZE"
DEFAULT_MAX_BYTES = 10 * 1024**3
"""The default cap on all stores under the default root together (10 GiB)."""

_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """One store folder: what it holds and when it was last used."""

    directory: str
    sources: tuple[str, ...]
    runs: int
    bytes: int
    last_used: float
    """Epoch seconds of the last open (the stamp's mtime; the manifest's for older stores)."""


def parse_size(text: str) -> int:
    """Bytes from ``500M``, ``10G``, ``2.5g``, ``1024`` (binary units).

    >>> parse_size("10G"), parse_size("1.5k"), parse_size("0")
    (10737418240, 1536, 0)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text.lower())
    if m is None:
        raise ValueError(f"not a size: {text!r} (e.g. 500M, 10G)")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def parse_age(text: str) -> float:
    """Seconds from ``30d``, ``12h``, ``90m``, ``2w``, ``45s``.

    >>> parse_age("30d"), parse_age("1.5h")
    (2592000.0, 5400.0)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text.lower())
    if m is None:
        raise ValueError(f"not an age: {text!r} (e.g. 30d, 12h, 2w)")
    return float(m.group(1)) * _AGE_UNITS[m.group(2)]


def max_bytes_from_env(environ: dict[str, str] | None = None) -> int | None:
    """The default cap: ``$RIVUMI_ANALYSIS_STORE_MAX_SIZE`` (``0``/``off``: none).

    >>> max_bytes_from_env({}) == DEFAULT_MAX_BYTES, max_bytes_from_env({ENV_MAX_SIZE: "off"})
    (True, None)
    """
    env = os.environ if environ is None else environ
    raw = env.get(ENV_MAX_SIZE, "").strip().lower()
    if not raw:
        return DEFAULT_MAX_BYTES
    if raw in ("0", "off", "none", "no"):
        return None
    return parse_size(raw)


def _tree_bytes(directory: str) -> int:
    total, stack = 0, [directory]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as it:
            for e in it:
                with contextlib.suppress(OSError):
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    else:
                        total += e.stat(follow_symlinks=False).st_size
    return total


def store_info(directory: str) -> StoreInfo | None:
    """What the store in ``directory`` holds, or None when it holds no store manifest."""
    try:
        with open(os.path.join(directory, MANIFEST), "rb") as fh:
            mtime = os.fstat(fh.fileno()).st_mtime
            d = manifest_doc(fh.read()) or {}
    except OSError:
        return None
    try:
        used = os.stat(os.path.join(directory, LAST_USED)).st_mtime
    except OSError:
        used = mtime
    sources = d.get("sources")
    runs = d.get("runs")
    return StoreInfo(directory,
                     tuple(os.fsdecode(s) for s in sources) if isinstance(sources, list) else (),
                     len(runs) if isinstance(runs, dict) else 0, _tree_bytes(directory), used)


def list_stores(root: str | None = None) -> list[StoreInfo]:
    """The stores under ``root`` (default: the store root), most recently used first."""
    root = default_store_root() if root is None else root
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    out = [info for n in names
           if os.path.isdir(d := os.path.join(root, n)) and not os.path.islink(d)
           and (info := store_info(d)) is not None]
    return sorted(out, key=lambda s: -s.last_used)


@contextlib.contextmanager
def _unused(directory: str) -> Iterator[bool]:
    """Holds the store's lock if nobody else does (yields False when the store is busy)."""
    try:
        fd = os.open(os.path.join(directory, LOCK), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        yield True  # never refreshed by anyone holding a lock now
        return
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                yield False
                return
            raise
        yield True
    finally:
        os.close(fd)


def gc_stores(root: str | None = None, *, older_than: float | None = None,
              max_bytes: int | None = None, keep: str | None = None,
              dry_run: bool = False, now: float | None = None) -> list[StoreInfo]:
    """Remove the stores unused for ``older_than`` seconds, then the least recently used
    ones until all left under ``root`` take at most ``max_bytes``.

    Args:
        root: the folder of stores (default: the store root).
        older_than: remove stores last used longer ago than this many seconds.
        max_bytes: then remove the least recently used until the rest fit.
        keep: a store folder never removed (the one in use).
        dry_run: only say what would go.
        now: the clock (tests).

    Returns:
        The stores removed (or that would be), in the order they went. A store being
        refreshed by another process is skipped, never waited for.
    """
    now = time.time() if now is None else now
    stores = list_stores(root)
    keep_real = os.path.realpath(keep) if keep else None
    candidates = [s for s in reversed(stores)  # least recently used first
                  if os.path.realpath(s.directory) != keep_real]
    removed: list[StoreInfo] = []
    total = sum(s.bytes for s in stores)
    for s in candidates:
        too_old = older_than is not None and now - s.last_used > older_than
        too_big = max_bytes is not None and total > max_bytes
        if not (too_old or too_big):
            continue
        if not dry_run:
            with _unused(s.directory) as free:
                if not free:
                    continue
                shutil.rmtree(s.directory, ignore_errors=True)
        removed.append(s)
        total -= s.bytes
    return removed


def enforce_cap(directory: str, environ: dict[str, str] | None = None) -> list[StoreInfo]:
    """After a refresh of the store in ``directory``: keep the default root within the cap.

    Only stores under the default root are ever removed, and never ``directory`` itself.
    """
    root = default_store_root(environ)
    cap = max_bytes_from_env(environ)
    if cap is None or os.path.dirname(os.path.abspath(directory)) != os.path.abspath(root):
        return []
    return gc_stores(root, max_bytes=cap, keep=directory)
