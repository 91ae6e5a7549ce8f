"""Cutting real-protocol logs at byte offsets never crashes, never loses a line, always decides.

Runs on the verdict core (``read_run`` + ``decide``) without pandera, so every byte offset of a
small log is affordable.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rivumi_analysis.errors import VERDICTS
from rivumi_analysis.read.snapshot import read_run
from rivumi_analysis.resume import decide
from tests.conftest import SAMPLE_RUNS, dumps, example_events, examples, running_manifest


def _check(run_dir: Path, cut: bytes) -> None:
    (run_dir / "events.jsonl").write_bytes(cut)
    run = read_run(str(run_dir))
    v = decide(run)
    assert v.verdict in VERDICTS and v.verdict != "error"
    counts = {"accepted": 0, "quarantined": 0, "blank": 0}
    for ln in run.lines:
        counts[ln.status] += 1
    assert len(run.lines) == sum(counts.values()) == cut.count(b"\n") + (
        0 if cut.endswith(b"\n") or not cut else 1)
    assert counts["accepted"] == len(run.events)
    # a cut inside a line leaves exactly one torn tail; a cut at a line end leaves none
    torn = [ln for ln in run.lines if ln.reason == "torn_tail"]
    assert len(torn) <= 1
    if cut and not cut.endswith(b"\n") and torn:
        assert "torn_tail" in v.reasons and v.verdict == "corrupt"
    # bytes are all accounted for, in order (raw bytes are kept for quarantined lines only)
    assert b"".join(cut[ln.byte_offset:ln.byte_offset + ln.byte_length]
                    + (b"\n" if ln.has_newline else b"") for ln in run.lines) == cut
    for ln in run.lines:
        assert ln.raw == (cut[ln.byte_offset:ln.byte_offset + ln.byte_length]
                          if ln.status == "quarantined" else b"")


@pytest.mark.differential
def test_every_byte_cut_of_a_small_real_log(tmp_path: Path) -> None:
    # the first 12 events of the runner's own example (one full tool call), every offset
    data = b"".join(example_events().splitlines(keepends=True)[:12])
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "session.json").write_bytes(dumps(running_manifest(49)))
    for k in range(len(data) + 1):
        _check(run_dir, data[:k])


def _sample_logs() -> list[Path]:
    return sorted(p for p in SAMPLE_RUNS.rglob("events.jsonl") if p.is_file()
                  and not p.is_symlink())[:12] if SAMPLE_RUNS.is_dir() else []


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_sampled_cuts_of_sample_runs(tmp_path_factory, data) -> None:
    logs = _sample_logs() or [None]
    src = data.draw(st.sampled_from(logs))
    payload = src.read_bytes() if src is not None else example_events() * 3
    k = data.draw(st.integers(0, len(payload)))
    k2 = data.draw(st.integers(0, k))
    run_dir = tmp_path_factory.mktemp("cut")
    (run_dir / "session.json").write_bytes(dumps(running_manifest(10)))
    _check(run_dir, payload[:k])
    _check(run_dir, payload[:k2] + payload[k:])  # two cuts: a hole in the middle
