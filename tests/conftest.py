"""Shared fixtures: the real example run and a factory for hand-made bad-input runs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]

# Hypothesis profiles: "default" (the whole suite, CI) and "dev" (scripts/test.sh --fast, the
# inner loop: HYPOTHESIS_PROFILE=dev). Tests that set their own max_examples take it through
# examples(n), so the dev profile reaches them too.
DEV_MAX_EXAMPLES = 15
settings.register_profile("dev", max_examples=DEV_MAX_EXAMPLES)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def examples(n: int) -> int:
    """``max_examples`` for a test that wants ``n``: ``n``, or at most the dev profile's.

    >>> examples(400) in (400, DEV_MAX_EXAMPLES)
    True
    """
    if os.environ.get("HYPOTHESIS_PROFILE") == "dev":
        return min(n, DEV_MAX_EXAMPLES)
    return n

EXAMPLE_ID = "a66038f97f204cb3aaa96339f195c37e"
EXAMPLE_DIR = ROOT / "tests" / "fixtures" / "example" / EXAMPLE_ID
SAMPLE_RUNS = ROOT / "sample_runs"


def example_events() -> bytes:
    return (EXAMPLE_DIR / "events.jsonl").read_bytes()


def example_manifest() -> dict[str, Any]:
    return json.loads((EXAMPLE_DIR / "session.json").read_text("utf-8"))


def example_request() -> dict[str, Any]:
    m = example_manifest()
    return {
        "allowed_paths": ["src/**", "tests/**"], "base_sha": m["base_sha"],
        "instruction": "Fix the addition bug.", "limits": {"max_steps": 12,
                                                         "wall_time_seconds": 900.0},
        "repository": "/tmp/repo", "task_id": m["task_id"],
        "verification": [{"argv": ["pytest", "-q"], "name": "check-1"}],
    }


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


def running_manifest(last_seq: int) -> dict[str, Any]:
    """The example manifest as it would look mid-run, after event ``last_seq``."""
    m = example_manifest()
    m.update(phase="running", terminal=False, last_event_sequence=last_seq)
    return m


def first_lines(n: int) -> bytes:
    return b"".join(example_events().splitlines(keepends=True)[:n])


MakeRun = Callable[..., str]


@pytest.fixture
def make_run(tmp_path: Path) -> MakeRun:
    """Build a run directory by hand: ``make_run(name, events=..., manifest=..., request=...)``.

    ``events``/``manifest``/``request`` may be bytes (written as is), a dict (compact JSON),
    ``None`` (file absent) or the string ``"default"`` (a consistent terminal example run).
    """

    def _make(name: str = EXAMPLE_ID, *, events: Any = "default", manifest: Any = "default",
              request: Any = "default", root: Path | None = None) -> str:
        run = (root or tmp_path) / name
        run.mkdir(parents=True, exist_ok=True)
        files = {
            "events.jsonl": example_events() if events == "default" else events,
            "session.json": example_manifest() if manifest == "default" else manifest,
            "request.json": example_request() if request == "default" else request,
        }
        for fname, content in files.items():
            if content is None:
                continue
            data = content if isinstance(content, bytes) else dumps(content)
            (run / fname).write_bytes(data)
        return str(run)

    return _make


@pytest.fixture
def example_copy(tmp_path: Path) -> str:
    dst = tmp_path / EXAMPLE_ID
    shutil.copytree(EXAMPLE_DIR, dst)
    return str(dst)


def tree_snapshot(top: str) -> dict[str, Any]:
    """Bytes hash, mtime and mode of every entry below ``top`` (symlinks not followed)."""
    snap: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        st = os.lstat(dirpath)
        snap[dirpath] = ("dir", sorted(dirnames + filenames), st.st_mtime_ns, st.st_mode)
        for f in filenames:
            p = os.path.join(dirpath, f)
            st = os.lstat(p)
            if os.path.isfile(p) and not os.path.islink(p):
                try:
                    digest = hashlib.sha256(Path(p).read_bytes()).hexdigest()
                except PermissionError:  # pragma: no cover
                    digest = None
            else:
                digest = None
            snap[p] = ("file", digest, st.st_mtime_ns, st.st_mode, st.st_size)
    return snap


# fixture generators are scripts, not test modules: never import them during collection
collect_ignore_glob = ["fixtures/*"]


@pytest.fixture(scope="session")
def relay_catalog(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The whole relayflowd scenario catalog, regenerated once per session (real SIGKILLs)."""
    from rivumi_analysis.synth.relay_scenarios import write_catalog

    root = tmp_path_factory.mktemp("relay-catalog") / "relayflowd"
    out = write_catalog(str(root))
    out["root"] = str(root)
    return out


# Test tiers: scripts/test.sh --fast deselects these markers (pyproject [tool.pytest]). A few are
# given here by what a test uses, so no test can forget them.
_MARK_BY_FIXTURE = {"relay_catalog": "crash"}  # the catalog is written with real SIGKILLs


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, mark in _MARK_BY_FIXTURE.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(mark)
