"""Ray is optional: nothing imports it unless engine="ray" is asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rivumi_analysis.distributed import ENGINES, audit, make_chunks
from rivumi_analysis.distributed._chunks import Chunk
from rivumi_analysis.read.discovery import RunLocation

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
import rivumi_analysis, rivumi_analysis.distributed
from rivumi_analysis.cli import main
rc = main(["audit", sys.argv[1], "--format", "json", "--no-cache", "--jobs", "1"])
assert rc == 0, rc
from rivumi_analysis.distributed import audit
audit(sys.argv[1], engine="process", jobs=1)
bad = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))
print("RAY_MODULES", bad, file=sys.stderr)
sys.exit(1 if bad else 0)
"""


def test_normal_paths_never_import_ray() -> None:
    p = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "tests" / "fixtures" / "example")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "RAY_MODULES []" in p.stderr


def test_process_engine_is_the_local_audit() -> None:
    from rivumi_analysis.fleet_audit import audit as local

    src = ROOT / "tests" / "fixtures" / "example"
    assert audit(src, engine="process", jobs=1) == local(src, jobs=1)
    with pytest.raises(ValueError, match="unknown engine"):
        audit(src, engine="spark")
    assert ENGINES == ("process", "ray")


def test_chunks_are_deterministic_sorted_and_keyed() -> None:
    locs = [RunLocation(f"/r/{i:03d}") for i in range(10)]
    locs.append(RunLocation("/r/005/subagents/s1", True, "/r/005"))
    a = make_chunks(locs, 4)
    b = make_chunks(list(reversed(locs)), 4)
    assert a == b
    assert [len(c) for c in a] == [4, 4, 3]
    flat = [d for c in a for d in c.run_dirs]
    assert flat == sorted(flat) and len(flat) == 11
    assert len({c.key for c in a}) == 3
    # the key changes with any member, its subagent flag or its parent
    other = make_chunks([*locs[:-1], RunLocation("/r/005/subagents/s1", True, "/r/006")], 4)
    assert [c.key for c in other] != [c.key for c in a]
    assert all(Chunk.from_item(c.to_item()) == c for c in a)
    with pytest.raises(ValueError):
        make_chunks(locs, 0)


def test_relative_paths_carry_the_driver_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    [c] = make_chunks([RunLocation("sample_runs/x")], 8)
    assert c.base == str(ROOT)
    [d] = make_chunks([RunLocation(str(ROOT / "sample_runs/x"))], 8)
    assert d.base == ""
