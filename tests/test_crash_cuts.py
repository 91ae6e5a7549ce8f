"""Crash cuts from real kills: the writer child is SIGKILLed at exact protocol points.

Verdicts follow the table of issue 3. Every test starts a process, so each has a timeout and
the harness prints the run's files when a child stalls.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rivumi_analysis.audit import audit_run
from rivumi_analysis.synth.crash import CutSpec, cut_run, describe_run_files

pytestmark = [pytest.mark.crash, pytest.mark.timeout(90)]

# (scenario, seed, cut, verdict, required reasons, required warnings)
TABLE = [
    ("verified", 0, "manifest_saved@0", "corrupt", {"events_missing"}, set()),
    ("verified", 0, "manifest_saved@model.requested#2", "resync", {"manifest_ahead"}, set()),
    ("verified", 0, "appended@model.completed#2", "resumable", set(), set()),
    ("verified", 0, "appended@tool.started", "side_effect_uncertain", {"side_effect_tail"}, set()),
    ("allow_session", 3, "appended@tool.started#3", "side_effect_uncertain",
     {"side_effect_tail"}, set()),
    ("verified", 0, "appended@verification.started", "side_effect_uncertain",
     {"side_effect_tail"}, set()),
    ("verified", 0, "manifest_saved@tool.completed", "resync", {"manifest_ahead"},
     {"completion_unlogged"}),
    ("example_m4", 0, "manifest_saved@verification.completed", "resync", {"manifest_ahead"},
     {"completion_unlogged"}),
    ("verified", 0, "waiting_approval@approval.requested#3", "resumable", set(), set()),
    ("verified_m4", 0, "waiting_approval", "resumable", set(), set()),
    ("verified", 0, "manifest_saved@run.completed", "terminal", {"manifest_ahead"}, set()),
    ("verified", 0, "temp_written:session.json@model.requested#2", "resumable", set(),
     {"atomic_write_leftover"}),
    ("verified", 0, "torn@6", "corrupt", {"torn_tail"}, set()),
]


def _files(root: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, root)] = Path(p).read_bytes()
    return out


def _lines(run_dir: str) -> list[bytes]:
    p = Path(run_dir, "events.jsonl")
    return p.read_bytes().split(b"\n") if p.exists() else []


@pytest.mark.parametrize(("scenario", "seed", "cut", "verdict", "reasons", "warnings"), TABLE,
                         ids=[f"{t[0]}-{t[2]}" for t in TABLE])
def test_cut_verdict(tmp_path: Path, scenario: str, seed: int, cut: str, verdict: str,
                     reasons: set[str], warnings: set[str]) -> None:
    res = cut_run(scenario, seed, cut, str(tmp_path), timeout=30)
    assert res.returncode == -9, describe_run_files(str(tmp_path))
    manifest = json.loads(Path(res.run_dir, "session.json").read_text("utf-8"))
    lines = [ln for ln in _lines(res.run_dir) if ln]
    spec = CutSpec.parse(cut)
    # File-level facts that hold whatever the auditor says.
    if spec.point == "manifest_saved":
        assert manifest["last_event_sequence"] == len(lines)
    elif spec.point in ("appended", "waiting_approval"):
        assert manifest["last_event_sequence"] == json.loads(lines[-1])["sequence"]
    if spec.point == "waiting_approval":
        assert manifest["phase"] == "waiting_approval" and manifest["pending_action"]
    if spec.point.startswith("temp_written"):
        assert any(n.startswith(".session.json.") for n in os.listdir(res.run_dir))
    if spec.point == "torn":
        assert not Path(res.run_dir, "events.jsonl").read_bytes().endswith(b"\n")
    rec = audit_run(res.run_dir)
    detail = f"{rec}\n{describe_run_files(res.run_dir)}"
    assert rec["verdict"] == verdict, detail
    assert reasons <= set(rec["reasons"]), detail
    assert warnings <= set(rec["warnings"]), detail


def test_killed_runs_are_byte_identical(tmp_path: Path) -> None:
    a = cut_run("verified", 5, "temp_written:session.json@tool.completed#2", str(tmp_path / "a"))
    b = cut_run("verified", 5, "temp_written:session.json@tool.completed#2", str(tmp_path / "b"))
    fa, fb = _files(str(tmp_path / "a")), _files(str(tmp_path / "b"))
    assert fa == fb
    assert any(os.path.basename(k).startswith(".session.json.") for k in fa)
    assert os.path.basename(a.run_dir) == os.path.basename(b.run_dir)


def test_torn_cut_is_byte_identical(tmp_path: Path) -> None:
    cut_run("verified_m4", 2, "torn@9", str(tmp_path / "a"))
    cut_run("verified_m4", 2, "torn@9", str(tmp_path / "b"))
    assert _files(str(tmp_path / "a")) == _files(str(tmp_path / "b"))


def test_unreached_cut_reports_files(tmp_path: Path) -> None:
    from rivumi_analysis.synth.crash import CrashHarnessError

    with pytest.raises(CrashHarnessError, match="without reaching cut"):
        cut_run("no_changes", 0, "appended@9999", str(tmp_path), timeout=30)
