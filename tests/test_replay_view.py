"""The readable replay view and readable refusals; fork-seed warns on unsafe points while its
stdout stays the runner's seed byte for byte."""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import pytest

from rivumi_analysis import replay_view as replay
from rivumi_analysis.read.snapshot import read_run
from rivumi_analysis.replay import runner
from rivumi_analysis.replay_view import explain_refusal
from tests.conftest import EXAMPLE_DIR, SAMPLE_RUNS

DUP = SAMPLE_RUNS / "bad_input" / "6f2713cc42224f66a2b04514971ac720"   # duplicate sequence 14
TORN = SAMPLE_RUNS / "bad_input" / "8a3a44109fb745459021061a821550f7"  # torn tail
DONE = SAMPLE_RUNS / "completed" / "b7423824b1fa434fb77cea7738a4d5e2"
TAIL = SAMPLE_RUNS / "crashes" / "27707e7d35fc40c48e737711278f41a4"    # ends at a side effect


def _replay(path: Path | str, capsys, as_json: bool = False) -> tuple[int, str, str]:
    code = replay.cmd_replay(argparse.Namespace(run_dir=str(path), json=as_json))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_refusal_has_code_location_and_hint(capsys) -> None:
    code, out, err = _replay(DUP, capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: duplicate_sequence: {DUP}/events.jsonl:16:6006: "
                          "duplicate event sequence: 14; hint: ")
    # the audit names the same line and byte
    assert f"audit: {DUP}/events.jsonl:16:6006:" in err
    code, _, err = _replay(TORN, capsys)
    assert code == 2 and err.startswith(f"error: torn_tail: {TORN}/events.jsonl:7:2199: ")
    # --json keeps the runner's exact text
    code, _, err = _replay(DUP, capsys, as_json=True)
    assert (code, err) == (2, "error: duplicate event sequence: 14\n")


def test_a_file_path_is_refused_readably(capsys) -> None:
    code, out, err = _replay(DUP / "events.jsonl", capsys)
    assert (code, out) == (2, "")
    assert "events.jsonl/events.jsonl" not in err
    assert err == (f"error: source_not_directory: {DUP}/events.jsonl: a file, not a run "
                   f"directory; hint: pass the run directory that holds events.jsonl ({DUP})\n")


def test_every_refusal_pattern_maps_to_a_code(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "events.jsonl").write_bytes(b'{"sequence":0,"event_type":"a"}\nnot json\n')
    text = explain_refusal(read_run(str(run)), "event JSONL line 2 is not valid JSON")
    assert text.startswith(f"json_syntax: {run}/events.jsonl:2:32: ")


def test_view_shows_timestamps_durations_and_changes(capsys) -> None:
    code, out, err = _replay(DONE, capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[2] == "verdict terminal (terminal)"
    row = next(ln for ln in lines if ln.startswith("    7  "))
    assert " tool.started  [list_files]  " in row
    assert "side_effects_in_flight 0→1" in row and "fork_safe True→False" in row
    assert "2026-08-06 08:01:06.994" in row


@pytest.mark.parametrize("seq,unsafe", [(7, True), (8, False), (5, True)])
def test_fork_seed_warns_on_unsafe_points(seq: int, unsafe: bool, capsysbinary) -> None:
    code = replay.cmd_fork_seed(argparse.Namespace(run_dir=str(DONE), sequence=seq))
    out = capsysbinary.readouterr()
    assert code == 0
    assert out.out == (runner.canonical_json(runner.fork_seed(str(DONE), seq)) + "\n").encode()
    if unsafe:
        assert out.err.startswith(b"warning: unsafe_fork_point: ")
        assert f"sequence {seq} ".encode() in out.err
    else:
        assert out.err == b""


def test_fork_seed_at_a_side_effect_tail_warns(capsysbinary, tmp_path: Path) -> None:
    run = tmp_path / TAIL.name
    shutil.copytree(TAIL, run)
    last = runner.replay_state(str(run))["last_sequence"]
    assert replay.cmd_fork_seed(argparse.Namespace(run_dir=str(run), sequence=last)) == 0
    err = capsysbinary.readouterr().err.decode()
    assert "side effect(s) in flight" in err


def test_example_view(capsys) -> None:
    code, out, err = _replay(EXAMPLE_DIR, capsys)
    assert (code, err) == (0, "")
    assert out.startswith(f"Replay {EXAMPLE_DIR}\nrun_id {EXAMPLE_DIR.name}  kind native  "
                          "runner m4\nverdict terminal (terminal)\n50 event(s), sequences 0..49")
    # timestamp, seconds since the previous event, the runner's detail, what changed
    last = next(ln for ln in out.splitlines() if ln.startswith("   49  "))
    assert re.match(r"   49  2026-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}  +\d+\.\d{3}  "
                    r"run\.completed  \[verified\]  .*phase \w+→completed", last), last
    assert "terminal False→True" in last and "terminal_reason null→verified" in last
    assert "time: elapsed 44.917 s, charged 44.917 s (with approval waits)" in out


def _run_dirs() -> list[Path]:
    return sorted(p.parent for p in SAMPLE_RUNS.rglob("events.jsonl"))


def test_fork_warning_of_a_folder_equals_the_whole_runs() -> None:
    """``fork-seed``'s warning from the log alone (a clean log, without ``read_run``) equals
    the warning of the run read whole (the oracle), at every sequence of every sample run
    and one past the end; the clean path is really taken (most sample logs are clean)."""
    from rivumi_analysis.read.columnar import decode
    from rivumi_analysis.replay.reducer import events_from_run

    clean = warned = 0
    for run_dir in _run_dirs():
        run = read_run(str(run_dir))
        data = (run_dir / "events.jsonl").read_bytes()
        clean += decode(data) is not None
        for seq in [*{e.sequence for e in events_from_run(run)}, 10**6]:
            want = replay.fork_point_warning(run, seq)
            assert replay.fork_warning_of_dir(str(run_dir), seq) == want, (run_dir, seq)
            warned += want is not None
    assert clean >= 20 and warned >= 20, (clean, warned)
