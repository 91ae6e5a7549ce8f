"""Deterministic chunks of run locations: the unit of work of every engine."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_RUNS_PER_TASK = 256
"""Runs per task: large enough to amortise a task's overhead, small enough to balance load."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """A batch of runs processed by one task.

    Attributes:
        key: ``sha1`` of the chunk's run locations (names its output; stable across re-runs).
        run_dirs: run directories (or URIs), sorted.
        subagent: per run, whether it was found in a parent's ``subagents/`` folder.
        parents: per run, the parent's ``run_dir`` for subagents.
        base: the driver's working directory when a ``run_dir`` is relative (workers resolve
            relative paths against it, so records keep the paths as given), else ``""``.
        roots: per run, its ``source_root`` (``run_path`` in the tables), or None.
    """

    key: str
    run_dirs: tuple[str, ...]
    subagent: tuple[bool, ...]
    parents: tuple[str | None, ...]
    base: str = ""
    roots: tuple[str | None, ...] = ()

    def __len__(self) -> int:
        return len(self.run_dirs)

    def to_item(self) -> dict[str, Any]:
        """The row this chunk becomes in a Ray Dataset (plain lists, Arrow-friendly)."""
        return {"key": self.key, "run_dirs": list(self.run_dirs),
                "subagent": list(self.subagent), "parents": list(self.parents),
                "base": self.base,
                "roots": list(self.roots) if self.roots else [None] * len(self.run_dirs)}

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Chunk:
        return cls(item["key"], tuple(item["run_dirs"]), tuple(bool(s) for s in item["subagent"]),
                   tuple(item["parents"]), item.get("base") or "",
                   tuple(item.get("roots") or [None] * len(item["run_dirs"])))

    def locations(self) -> list[Any]:
        """The chunk's runs as ``RunLocation`` values (what discovery gave the driver)."""
        from ..read.discovery import RunLocation

        roots = self.roots or (None,) * len(self.run_dirs)
        return [RunLocation(d, s, p, r) for d, s, p, r in zip(
            self.run_dirs, self.subagent, self.parents, roots, strict=True)]


def chunk_key(entries: Iterable[tuple[str, bool, str | None]], base: str = "") -> str:
    """``sha1`` over the chunk's ``(run_dir, is_subagent, parent_run_dir)`` entries.

    >>> k = chunk_key([("/runs/a", False, None)])
    >>> len(k), k == chunk_key([("/runs/a", False, None)]), k == chunk_key([("/runs/a", True, "/p")])
    (40, True, False)
    """
    h = hashlib.sha1(base.encode("utf-8", "surrogatepass") + b"\0")
    for run_dir, sub, parent in entries:
        h.update(run_dir.encode("utf-8", "surrogatepass"))
        h.update(b"\0\1" if sub else b"\0\0")
        h.update(b"\2" if parent is None else parent.encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.hexdigest()


def make_chunks(locations: Sequence[Any], runs_per_task: int = DEFAULT_RUNS_PER_TASK, *,
                base: str | None = None) -> list[Chunk]:
    """Sort run locations by ``run_dir`` and cut them into chunks of ``runs_per_task``.

    The same locations always give the same chunks and keys, whatever order they came in.
    ``base`` (default: the working directory when some ``run_dir`` is relative) travels with
    each chunk so that workers with another working directory read the same runs.

    >>> from rivumi_analysis.read.discovery import RunLocation
    >>> cs = make_chunks([RunLocation("/r/b"), RunLocation("/r/a"), RunLocation("/r/c")], 2)
    >>> [c.run_dirs for c in cs]
    [('/r/a', '/r/b'), ('/r/c',)]
    >>> cs == make_chunks([RunLocation("/r/c"), RunLocation("/r/a"), RunLocation("/r/b")], 2)
    True
    """
    if runs_per_task < 1:
        raise ValueError(f"runs_per_task must be at least 1, not {runs_per_task}")
    entries = sorted(((loc.run_dir, bool(loc.is_subagent), loc.parent_run_dir,
                       getattr(loc, "source_root", None)) for loc in locations),
                     key=lambda e: (e[0], e[1], e[2] or "", e[3] or ""))
    if base is None:
        base = os.getcwd() if any(_is_relative(e[0]) for e in entries) else ""
    chunks = []
    for i in range(0, len(entries), runs_per_task):
        part = entries[i:i + runs_per_task]
        chunks.append(Chunk(chunk_key([e[:3] for e in part], base), tuple(e[0] for e in part),
                            tuple(e[1] for e in part), tuple(e[2] for e in part), base,
                            tuple(e[3] for e in part)))
    return chunks


def _is_relative(path: str) -> bool:
    return "://" not in path and not os.path.isabs(path)


@contextlib.contextmanager
def working_dir(base: str) -> Iterator[None]:
    """Run with ``base`` as the working directory (a worker runs one task at a time)."""
    if not base:
        yield
        return
    old = os.getcwd()
    os.chdir(base)
    try:
        yield
    finally:
        os.chdir(old)
