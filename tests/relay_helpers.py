"""Shared helpers of the relayflowd tests (not a test module)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "relayflowd"
EXAMPLE = FIXTURES / "completed.journal.jsonl"


def snapshot(directory: str | os.PathLike[str]) -> dict[str, tuple[str, int]]:
    """sha256 and mtime_ns of every regular file below ``directory`` (``-shm`` included)."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            p = os.path.join(root, name)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
            out[os.path.relpath(p, directory)] = (digest, os.lstat(p).st_mtime_ns)
    return out


def only(doc: dict[str, Any]) -> dict[str, Any]:
    assert len(doc["journals"]) == 1, doc
    return doc["journals"][0]


def rules(record: dict[str, Any]) -> list[tuple[str, int]]:
    return [(v["rule"], v["seq"]) for v in record["violations"]]

