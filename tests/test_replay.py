"""Tests of the runner-compatible replay and fork seed (§9.3-§9.6)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rivumi_analysis import replay_view
from rivumi_analysis.errors import ReplayRefused
from rivumi_analysis.replay import runner as replay
from tests.conftest import examples

SPEC = Path(__file__).resolve().parent / "fixtures"  # copies of ../shared/spec (see fixtures/README.md)
EXAMPLE = SPEC / "example" / "a66038f97f204cb3aaa96339f195c37e"
REFERENCE = SPEC / "reference-outputs" / "a66038f97f204cb3aaa96339f195c37e"
FIXTURES = Path(__file__).parent / "fixtures" / "replay"

REFUSALS = sorted(p.name for p in FIXTURES.iterdir()
                  if (p / "expected.txt").exists() and not p.name.startswith(("fork_", "accept_")))
FORKS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and p.name.startswith("fork_"))
ACCEPTS = sorted(p.name for p in FIXTURES.iterdir()
                 if p.is_dir() and (p / "expected.json").exists())


def _run_replay(run_dir: str, capsysbinary, as_json: bool = True) -> tuple[int, bytes, bytes]:
    code = replay_view.cmd_replay(argparse.Namespace(run_dir=run_dir, json=as_json))
    out = capsysbinary.readouterr()
    return code, out.out, out.err


def _run_fork(run_dir: str, n, capsysbinary) -> tuple[int, bytes, bytes]:
    code = replay_view.cmd_fork_seed(argparse.Namespace(run_dir=run_dir, sequence=n))
    out = capsysbinary.readouterr()
    return code, out.out, out.err


# ---------------------------------------------------------------------------- golden outputs
def test_golden_replay_json(capsysbinary):
    code, out, err = _run_replay(str(EXAMPLE), capsysbinary)
    assert (code, err) == (0, b"")
    assert out == (REFERENCE / "replay-json.stdout").read_bytes()


@pytest.mark.parametrize("n", [0, 7, 49])
def test_golden_fork_seed(n, capsysbinary):
    code, out, err = _run_fork(str(EXAMPLE), n, capsysbinary)
    assert code == 0
    # the CLI warns (stderr) at a fork point with a side effect in flight: sequence 7
    assert err.startswith(b"warning: unsafe_fork_point: ") if n == 7 else err == b""
    assert out == (REFERENCE / f"fork-seed-{n}.stdout").read_bytes()


def test_functions_match_golden():
    state = replay.replay_state(EXAMPLE)
    assert replay.canonical_json(state) + "\n" == (REFERENCE / "replay-json.stdout").read_text()
    seed = replay.fork_seed(str(EXAMPLE), 7)
    assert seed["run_started"] is False and "new_run_id" not in seed
    assert replay.canonical_json(seed) + "\n" == (REFERENCE / "fork-seed-7.stdout").read_text()


def test_fork_seed_creates_nothing(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    before = sorted(os.listdir(tmp_path)) + sorted(os.listdir(run))
    replay.fork_seed(str(run), 49)
    assert sorted(os.listdir(tmp_path)) + sorted(os.listdir(run)) == before


def test_human_view(capsysbinary):
    code, out, err = _run_replay(str(EXAMPLE), capsysbinary, as_json=False)
    text = out.decode()
    assert code == 0 and err == b""
    assert text.startswith(f"Replay {EXAMPLE}\n")
    assert "\n50 event(s), sequences 0..49, last terminal event run.completed\n" in text
    assert "run.completed  [verified]  phase running→completed" in text


# ---------------------------------------------------------------------------- §9.6 refusals
@pytest.mark.parametrize("name", REFUSALS)
def test_refusal_fixture(name, capsysbinary):
    expected = (FIXTURES / name / "expected.txt").read_bytes()
    code, out, err = _run_replay(str(FIXTURES / name), capsysbinary)
    assert (code, out, err) == (2, b"", expected)
    with pytest.raises(ReplayRefused) as info:
        replay.replay_bytes((FIXTURES / name / "events.jsonl").read_bytes())
    assert f"error: {info.value.message}\n".encode() == expected


@pytest.mark.parametrize("name", FORKS)
def test_fork_refusal_fixture(name, capsysbinary):
    expected = (FIXTURES / name / "expected.txt").read_bytes()
    n = int((FIXTURES / name / "sequence.txt").read_text())
    code, out, err = _run_fork(str(FIXTURES / name), n, capsysbinary)
    assert (code, out, err) == (2, b"", expected)


@pytest.mark.parametrize("name", ACCEPTS)
def test_accept_fixture(name, capsysbinary):
    code, out, err = _run_replay(str(FIXTURES / name), capsysbinary)
    assert (code, err) == (0, b"")
    assert out == (FIXTURES / name / "expected.json").read_bytes()


def test_exact_line_bound_accepted():
    state = replay.replay_state(FIXTURES / "accept_exact_line_bound")
    assert state["event_count"] == 2 and len(state["timeline"][1]["text"]) == 16000


def test_fork_sequence_rule16_before_reading(capsysbinary):
    msg = b"error: fork sequence must be a non-negative integer\n"
    assert _run_fork("/nonexistent/run", -1, capsysbinary) == (2, b"", msg)
    for bad in (True, 1.0, "1"):
        with pytest.raises(ReplayRefused, match="^fork sequence must be a non-negative integer$"):
            replay.fork_seed(str(EXAMPLE), bad)


def test_missing_file_message(tmp_path, capsysbinary):
    run = tmp_path / "r"
    run.mkdir()
    path = os.path.join(str(run), "events.jsonl")
    expected = f"error: could not read event JSONL: [Errno 2] No such file or directory: '{path}'\n"
    assert _run_replay(str(run), capsysbinary) == (2, b"", expected.encode())
    assert _run_fork(str(run), 0, capsysbinary) == (2, b"", expected.encode())


def test_path_is_joined_as_given(tmp_path, monkeypatch, capsysbinary):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r").mkdir()
    expected = b"error: could not read event JSONL: [Errno 2] No such file or directory: './r/events.jsonl'\n"
    assert _run_replay("./r/", capsysbinary) == (2, b"", expected)


@pytest.mark.parametrize("kind", ["symlink", "dangling_symlink", "directory", "fifo"])
def test_not_regular_never_opened(kind, tmp_path, capsysbinary):
    run = tmp_path / "r"
    run.mkdir()
    target = run / "events.jsonl"
    if kind == "symlink":
        real = tmp_path / "real.jsonl"
        real.write_bytes((EXAMPLE / "events.jsonl").read_bytes())
        target.symlink_to(real)
    elif kind == "dangling_symlink":
        target.symlink_to(tmp_path / "nowhere")
    elif kind == "directory":
        target.mkdir()
    else:
        os.mkfifo(target)
    result: list = []
    # A FIFO would block a naive reader forever; run in a thread so a bug fails, not hangs.
    worker = threading.Thread(target=lambda: result.append(
        replay.replay_verdict(None, "not_regular", str(run)) and
        _run_replay(str(run), capsysbinary)), daemon=True)
    worker.start()
    worker.join(10)
    assert result, "replay blocked on a non-regular events.jsonl"
    expected = f"error: could not read event JSONL: {target} is not a regular file\n".encode()
    assert result[0] == (2, b"", expected)


@pytest.mark.timeout(60)
def test_permission_denied():
    """An unreadable events.jsonl: the CLI prints the OS error (run as "nobody" when root)."""
    import shutil
    import subprocess
    import sys
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="rivumi-perm-", dir="/tmp"))
    try:
        top.chmod(0o755)
        run = top / "r"
        run.mkdir()
        run.chmod(0o755)
        (run / "events.jsonl").write_bytes(b"")
        (run / "events.jsonl").chmod(0)
        # import everything as the current user, then drop root (the interpreter may live
        # where "nobody" cannot read)
        code = ("import contextlib,io,os,sys; from rivumi_analysis.cli import main;"
                "out=io.StringIO(); err=io.StringIO();"
                "ctx=(contextlib.redirect_stdout(out), contextlib.redirect_stderr(err));"
                f"[c.__enter__() for c in ctx]; main(['replay', {str(run)!r}, '--json']);"
                "[c.__exit__(None, None, None) for c in ctx];"
                "os.geteuid()==0 and (os.setgid(65534), os.setuid(65534));"
                f"sys.exit(main(['replay', {str(run)!r}, '--json']))")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=50,
                           cwd=str(Path(__file__).resolve().parents[1]))
        assert p.returncode == 2, p.stderr
        assert p.stdout == b""
        assert p.stderr == (f"error: could not read event JSONL: [Errno 13] Permission denied: "
                            f"'{run}/events.jsonl'\n").encode()
    finally:
        shutil.rmtree(top, ignore_errors=True)


# ---------------------------------------------------------------------------- replay_verdict
def test_replay_verdict():
    data = (EXAMPLE / "events.jsonl").read_bytes()
    assert replay.replay_verdict(data, "ok", str(EXAMPLE)) == (True, None)
    assert replay.replay_verdict(data[:-1], "ok", "x") == (
        False, "event JSONL has a partial final line")
    assert replay.replay_verdict(None, "missing", "x") == (
        False, "could not read event JSONL: [Errno 2] No such file or directory: 'x/events.jsonl'")
    assert replay.replay_verdict(None, "symlink", "x") == (
        False, "could not read event JSONL: x/events.jsonl is not a regular file")


# ---------------------------------------------------------------------------- properties
EXAMPLE_BYTES = (EXAMPLE / "events.jsonl").read_bytes()
EXAMPLE_LINES = EXAMPLE_BYTES.splitlines(keepends=True)
FULL = replay.replay_bytes(EXAMPLE_BYTES)


@given(st.integers(min_value=0, max_value=len(EXAMPLE_LINES)))
def test_prefix_replay_is_prefix_of_full(k):
    state = replay.replay_bytes(b"".join(EXAMPLE_LINES[:k]))
    assert state["timeline"] == FULL["timeline"][:k]
    assert state["event_count"] == k
    if k:
        assert replay.fork_seed_bytes(EXAMPLE_BYTES, k - 1)["replay_state"] == state


@given(st.integers(min_value=0, max_value=len(EXAMPLE_BYTES)))
@settings(max_examples=examples(150))
def test_byte_cuts_never_crash(cut):
    try:
        state = replay.replay_bytes(EXAMPLE_BYTES[:cut])
    except ReplayRefused as exc:
        assert exc.message == "event JSONL has a partial final line"
    else:
        assert state["event_count"] == EXAMPLE_BYTES[:cut].count(b"\n")


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["sequence", "event_type", "run_id", "data", "text", "error", "turn_id",
                         "name"]), inner, max_size=4),
    max_leaves=8)


@given(st.lists(_json_values, max_size=6), st.binary(max_size=20))
@settings(max_examples=examples(200))
def test_arbitrary_input_only_refuses(values, junk):
    lines = [json.dumps(v).encode() for v in values]
    data = b"\n".join(lines) + b"\n" + junk
    try:
        state = replay.replay_bytes(data)
    except ReplayRefused:
        return
    assert state["schema_version"] == 1
    replay.canonical_json(state)


# ---------------------------------------------------------------------------- through cli.main
def test_cli_main_replay_and_fork(capsysbinary):
    from rivumi_analysis.cli import main

    assert main(["replay", str(EXAMPLE), "--json"]) == 0
    assert capsysbinary.readouterr().out == (REFERENCE / "replay-json.stdout").read_bytes()
    for n in (0, 7, 49):
        assert main(["fork-seed", str(EXAMPLE), "--sequence", str(n)]) == 0
        assert capsysbinary.readouterr().out == (REFERENCE / f"fork-seed-{n}.stdout").read_bytes()
    name = "duplicate_sequence"
    assert main(["replay", str(FIXTURES / name), "--json"]) == 2
    out = capsysbinary.readouterr()
    assert (out.out, out.err) == (b"", (FIXTURES / name / "expected.txt").read_bytes())
    assert main(["fork-seed", "/nonexistent", "--sequence", "-1"]) == 2
    assert capsysbinary.readouterr().err == b"error: fork sequence must be a non-negative integer\n"


def test_cli_non_integer_sequence_is_usage_error(capsysbinary):
    from rivumi_analysis.cli import main

    with pytest.raises(SystemExit) as info:
        main(["fork-seed", str(EXAMPLE), "--sequence", "1.5"])
    assert info.value.code == 2
    err = capsysbinary.readouterr().err
    assert b"usage:" in err and b"invalid int value" in err


# ---------------------------------------------------------------------------- streaming reader
def _outcome(fn):
    try:
        return ("ok", replay.canonical_json(fn()))
    except ReplayRefused as exc:
        return ("refused", exc.message)


@given(st.sampled_from(REFUSALS + ACCEPTS + ["__example__"]), st.lists(st.integers(1, 70000),
                                                                       max_size=6))
@settings(max_examples=examples(120), deadline=None)
def test_streaming_chunks_match_whole_bytes(name, cuts):
    path = EXAMPLE if name == "__example__" else FIXTURES / name
    data = (path / "events.jsonl").read_bytes()
    bounds = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *bounds], [*bounds, len(data)], strict=True)]
    streamed = _outcome(lambda: replay.reduce_normalized(replay._load_normalized(chunks)))
    assert streamed == _outcome(lambda: replay.replay_bytes(data))
    # the two-phase public helpers give the same answer as the streaming loader
    two_phase = _outcome(lambda: replay.reduce_normalized(
        replay.normalize_events(replay.parse_lines(data))))
    assert two_phase == streamed


def test_replay_verdict_streams_when_loader_did_not_read(tmp_path):
    run = tmp_path / "r"
    shutil.copytree(FIXTURES / "duplicate_sequence", run)
    assert replay.replay_verdict(None, "too_large", str(run)) == (
        False, "duplicate event sequence: 1")
    shutil.copy(EXAMPLE / "events.jsonl", run / "events.jsonl")
    assert replay.replay_verdict(None, "too_large", str(run)) == (True, None)
