"""Golden tests: ``replay --json`` and ``fork-seed`` output pinned for every sample run.

The example run is pinned against the runner's own outputs in ``test_replay.py``. For the
generated sample runs (``sample_runs/``) the expected outputs live in
``tests/fixtures/replay/golden/<run path with "/" as "__">.json``; regenerate them after a
deliberate change with ``RIVUMI_UPDATE_GOLDEN=1 pytest tests/test_replay_golden.py`` and review
the diff. A sample run without a golden file is skipped with that hint.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from rivumi_analysis import replay_view
from rivumi_analysis.replay import runner as replay

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_RUNS = ROOT / "sample_runs"
GOLDEN = Path(__file__).parent / "fixtures" / "replay" / "golden"


def _sample_run_dirs() -> list[Path]:
    if not SAMPLE_RUNS.is_dir():
        return []
    found = []
    for dirpath, dirnames, filenames in os.walk(SAMPLE_RUNS, followlinks=False):
        dirnames.sort()
        if "events.jsonl" in filenames or "session.json" in filenames:
            found.append(Path(dirpath))
    return found


RUNS = _sample_run_dirs()


def _capture(fn, args, capsysbinary) -> dict:
    code = fn(args)
    out = capsysbinary.readouterr()
    return {"exit": code, "stdout": out.out.decode("utf-8", "surrogateescape"),
            "stderr": out.err.decode("utf-8", "surrogateescape")}


def _outputs(run: Path, capsysbinary) -> dict:
    result = {"replay": _capture(replay_view.cmd_replay,
                                 argparse.Namespace(run_dir=str(run), json=True), capsysbinary)}
    try:
        seqs = [item["sequence"] for item in replay.replay_state(run)["timeline"]]
    except replay.ReplayRefused:
        seqs = [0]
    for n in sorted({seqs[0] if seqs else 0, seqs[-1] if seqs else 0}):
        result[f"fork_seed_{n}"] = _capture(
            replay_view.cmd_fork_seed, argparse.Namespace(run_dir=str(run), sequence=n), capsysbinary)
    return result


@pytest.mark.parametrize("run", RUNS, ids=[str(p.relative_to(SAMPLE_RUNS)) for p in RUNS])
def test_sample_run_golden(run: Path, capsysbinary, monkeypatch):
    golden = GOLDEN / (str(run.relative_to(SAMPLE_RUNS)).replace(os.sep, "__") + ".json")
    monkeypatch.chdir(ROOT)  # messages that name the path stay independent of the checkout
    got = _outputs(run.relative_to(ROOT), capsysbinary)
    if os.environ.get("RIVUMI_UPDATE_GOLDEN") == "1":
        golden.write_text(json.dumps(got, ensure_ascii=False, indent=1, sort_keys=True) + "\n")
    if not golden.exists():
        pytest.skip(f"no golden for {run.name}; run with RIVUMI_UPDATE_GOLDEN=1 and review")
    assert got == json.loads(golden.read_text())


def test_golden_files_have_runs():
    """A golden file whose sample run disappeared is stale."""
    names = {str(p.relative_to(SAMPLE_RUNS)).replace(os.sep, "__") + ".json" for p in RUNS}
    stale = sorted(p.name for p in GOLDEN.glob("*.json") if p.name not in names)
    assert not stale, f"stale golden files: {stale}"


def test_sample_example_golden_is_the_runner_output():
    """The re-created example run replays to the runner's own reference bytes."""
    golden = GOLDEN / "example__a66038f97f204cb3aaa96339f195c37e.json"
    if not golden.exists():  # pragma: no cover
        pytest.skip("sample example run not generated")
    ref = Path(__file__).resolve().parent / "fixtures/reference-outputs/a66038f97f204cb3aaa96339f195c37e"
    got = json.loads(golden.read_text())
    assert got["replay"]["stdout"].encode() == (ref / "replay-json.stdout").read_bytes()
    assert got["fork_seed_49"]["stdout"].encode() == (ref / "fork-seed-49.stdout").read_bytes()
    assert got["fork_seed_0"]["stdout"].encode() == (ref / "fork-seed-0.stdout").read_bytes()
