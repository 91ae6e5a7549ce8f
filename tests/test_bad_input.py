"""Every bad-input case of the foundation issue: verdict or reason code, message, accounting."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rivumi_analysis import events_df, quarantine_df
from rivumi_analysis.audit import audit_run
from tests.conftest import (
    EXAMPLE_ID,
    dumps,
    example_events,
    examples,
    first_lines,
    running_manifest,
)

LINES = example_events().splitlines(keepends=True)


def accounting(rec: dict) -> None:
    assert rec["lines"] == rec["events"] + rec["quarantined_lines"] + rec["blank_lines"]


def audit(path: str) -> dict:
    rec = audit_run(path)
    accounting(rec)
    assert rec["message"] is None or isinstance(rec["message"], str)
    return rec


def with_line(i: int, new: bytes) -> bytes:
    lines = list(LINES)
    lines[i] = new
    return b"".join(lines)


def test_example_is_clean_terminal(example_copy: str) -> None:
    rec = audit(example_copy)
    assert rec["verdict"] == "terminal" and rec["reasons"] == ["terminal"]
    assert rec["quarantined_lines"] == 0 and rec["events"] == 50
    assert rec["terminal_reason"] == "verified"


def test_torn_final_line(make_run) -> None:
    # killed mid-append: manifest already says 10, line 10 half-written
    data = first_lines(10) + LINES[10][:57]
    path = make_run(events=data, manifest=running_manifest(10))
    rec = audit(path)
    assert rec["verdict"] == "corrupt"
    assert "torn_tail" in rec["reasons"] and "manifest_ahead" in rec["reasons"]
    q = quarantine_df(path)
    assert q.row(0, named=True)["reason"] == "torn_tail"
    assert q["line_no"].to_list() == [11]
    assert q["byte_offset"].to_list() == [len(first_lines(10))]
    assert f"events.jsonl:11:{len(first_lines(10))}" in q["message"][0]


def test_invalid_json_mid_file(make_run) -> None:
    path = make_run(events=with_line(5, b'{"sequence": 5, oops\n'))
    rec = audit(path)
    assert rec["verdict"] == "corrupt" and "invalid_event_line" in rec["reasons"]
    q = quarantine_df(path)
    assert q["reason"].to_list() == ["json_syntax"] and q["line_no"].to_list() == [6]


def test_invalid_utf8(make_run) -> None:
    path = make_run(events=with_line(3, LINES[3].replace(b'"step":1', b'"step":1,"x":"\xff"')))
    rec = audit(path)
    assert rec["verdict"] == "corrupt" and "invalid_event_line" in rec["reasons"]
    assert quarantine_df(path)["reason"].to_list() == ["invalid_utf8"]


def test_bom(make_run) -> None:
    path = make_run(events=b"\xef\xbb\xbf" + example_events())
    rec = audit(path)
    assert rec["events"] == 50 and rec["quarantined_lines"] == 0
    assert rec["verdict"] == "corrupt" and "bom" in rec["reasons"]
    ev = events_df(path)
    assert "bom" in ev["warnings"][0].to_list()
    assert ev["byte_offset"][0] == 0 and ev["byte_offset"][1] == len(LINES[0]) + 3
    assert rec["replay_accepts"] is True and "readers_disagree" in rec["warnings"]


def test_crlf(make_run) -> None:
    path = make_run(events=b"".join(ln.replace(b"\n", b"\r\n") for ln in LINES))
    rec = audit(path)
    assert rec["verdict"] == "terminal" and "crlf" in rec["warnings"]
    assert rec["events"] == 50


def test_u2028_inside_string(make_run) -> None:
    line = LINES[45].replace(b"All tests now pass", "All\u2028tests".encode())
    assert line != LINES[45]
    path = make_run(events=with_line(45, line))
    rec = audit(path)
    assert rec["verdict"] == "corrupt" and "line_separator_split" in rec["reasons"]
    assert rec["events"] == 50 and rec["replay_accepts"] is True
    assert "readers_disagree" in rec["warnings"]


def test_blank_lines(make_run) -> None:
    data = LINES[0] + b"\n   \n" + b"".join(LINES[1:]) + b"\t\n"
    rec = audit(make_run(events=data))
    assert rec["blank_lines"] == 3 and rec["verdict"] == "terminal"
    assert "blank_lines" in rec["warnings"]


def test_nan_in_data(make_run) -> None:
    rec = audit(make_run(events=with_line(3, LINES[3].replace(b'"step":1', b'"step":1,"x":NaN'))))
    assert rec["verdict"] == "terminal" and "nan_or_infinity" in rec["warnings"]


@pytest.mark.parametrize("seq", [b'"5"', b'" 5 "', b'"+5"', b'5.0', b'"5.0"'])
def test_numeric_strings_and_floats_for_sequence(make_run, seq: bytes) -> None:
    rec = audit(make_run(events=with_line(5, LINES[5].replace(b'"sequence":5', b'"sequence":' + seq))))
    assert rec["events"] == 50 and "coerced_value" in rec["warnings"]
    assert rec["verdict"] == "terminal"


@pytest.mark.parametrize("seq", [b'"1e2"', b"-5", b"5.5", b"null", b'"five"'])
def test_bad_sequence_quarantined(make_run, seq: bytes) -> None:
    path = make_run(events=with_line(5, LINES[5].replace(b'"sequence":5', b'"sequence":' + seq)))
    rec = audit(path)
    assert rec["quarantined_lines"] == 1 and rec["verdict"] == "corrupt"
    assert quarantine_df(path)["reason"].to_list() == ["bad_sequence"]


def test_duplicate_keys(make_run) -> None:
    line = LINES[2].replace(b'"data":{"step":1}', b'"data":{"step":0,"step":1}')
    rec = audit(make_run(events=with_line(2, line)))
    assert "duplicate_key" in rec["warnings"] and rec["verdict"] == "terminal"


def test_duplicate_sequence(make_run) -> None:
    data = with_line(6, LINES[6].replace(b'"sequence":6', b'"sequence":5'))
    rec = audit(make_run(events=data))
    assert rec["verdict"] == "corrupt" and "duplicate_sequence" in rec["reasons"]
    assert rec["replay_accepts"] is False and "duplicate" in rec["replay_error"]


def test_missing_sequence_gap(make_run) -> None:
    data = b"".join(LINES[:5] + LINES[6:])
    rec = audit(make_run(events=data))
    assert rec["verdict"] == "corrupt" and "sequence_not_contiguous" in rec["reasons"]
    assert rec["replay_accepts"] is True  # replay allows gaps (§9.3)
    assert "readers_disagree" in rec["warnings"]


def test_out_of_order_sequences(make_run) -> None:
    data = b"".join(LINES[:5] + [LINES[6], LINES[5]] + LINES[7:])
    rec = audit(make_run(events=data))
    assert rec["verdict"] == "corrupt" and "sequence_not_contiguous" in rec["reasons"]


def test_run_id_drift(make_run) -> None:
    data = with_line(7, LINES[7].replace(EXAMPLE_ID.encode(), b"someotherrun"))
    rec = audit(make_run(events=data))
    assert rec["verdict"] == "corrupt" and "run_id_drift" in rec["reasons"]
    assert "events.jsonl:8:" in rec["message"] or "run_id" in rec["message"]


def test_task_id_drift(make_run) -> None:
    data = with_line(7, LINES[7].replace(b'"task_id":"3e1bd', b'"task_id":"XXXXX'))
    rec = audit(make_run(events=data))
    assert rec["verdict"] == "corrupt" and "task_id_drift" in rec["reasons"]


def test_manifest_behind(make_run) -> None:
    rec = audit(make_run(events=first_lines(20), manifest=running_manifest(15)))
    assert rec["verdict"] == "corrupt" and "manifest_behind" in rec["reasons"]


def test_manifest_two_ahead(make_run) -> None:
    rec = audit(make_run(events=first_lines(20), manifest=running_manifest(21)))
    assert rec["verdict"] == "corrupt" and "manifest_ahead_by_more" in rec["reasons"]


def test_manifest_one_ahead_resyncs(make_run) -> None:
    rec = audit(make_run(events=first_lines(20), manifest=running_manifest(20)))
    assert rec["verdict"] == "resync" and rec["reasons"] == ["manifest_ahead"]


def test_manifest_unknown_key(make_run) -> None:
    m = running_manifest(49)
    m["surprise"] = 1
    rec = audit(make_run(manifest=m))
    assert rec["verdict"] == "corrupt" and "manifest_schema" in rec["reasons"]
    assert "manifest_unknown_key" in rec["warnings"]


def test_manifest_terminal_disagrees_with_phase(make_run) -> None:
    m = running_manifest(49)
    m["terminal"] = True
    rec = audit(make_run(manifest=m))
    assert rec["verdict"] == "corrupt" and "manifest_schema" in rec["reasons"]
    assert "terminal_phase_mismatch" in rec["warnings"]


@pytest.mark.parametrize("content,code", [(b"", "manifest_invalid_json"),
                                          (b"{not json", "manifest_invalid_json"),
                                          (b"[]", "manifest_invalid_json"),
                                          (b'{"run_id": 3}', "manifest_schema")])
def test_bad_manifest_files(make_run, content: bytes, code: str) -> None:
    rec = audit(make_run(manifest=content))
    assert rec["verdict"] == "corrupt" and code in rec["reasons"]


def test_missing_manifest(make_run) -> None:
    rec = audit(make_run(manifest=None))
    assert rec["verdict"] == "not_resumable" and "manifest_missing" in rec["reasons"]
    assert rec["run_id"] == EXAMPLE_ID  # from the first accepted event


def test_missing_events_file(make_run) -> None:
    rec = audit(make_run(events=None, manifest=running_manifest(0)))
    assert rec["verdict"] == "corrupt" and "events_missing" in rec["reasons"]
    fresh = running_manifest(-1)
    fresh["phase"] = "created"
    rec = audit(make_run("fresh", events=None, manifest=fresh))
    assert rec["verdict"] == "resumable" and rec["lines"] == 0


def test_zero_byte_events(make_run) -> None:
    rec = audit(make_run(events=b"", manifest=running_manifest(49)))
    assert rec["lines"] == 0 and rec["verdict"] == "corrupt"
    assert "manifest_ahead_by_more" in rec["reasons"]


def test_request_checks(make_run) -> None:
    rec = audit(make_run("missing_req", request=None))
    assert "request_missing" in rec["warnings"] and rec["verdict"] == "terminal"
    bad = {"instruction": "x"}
    rec = audit(make_run("bad_req", request=bad))
    assert rec["verdict"] == "corrupt" and "request_invalid" in rec["reasons"]
    from tests.conftest import example_request

    other = example_request()
    other["task_id"] = "different"
    rec = audit(make_run("mismatch", request=other))
    assert rec["verdict"] == "corrupt" and "request_mismatch" in rec["reasons"]


def test_line_over_128_kib(make_run) -> None:
    big = LINES[45].replace(b'"content":"', b'"content":"' + b"x" * 140_000)
    path = make_run(events=with_line(45, big))
    rec = audit(path)
    assert rec["verdict"] == "terminal" and "line_too_long_for_replay" in rec["warnings"]
    assert rec["replay_accepts"] is False and "exceeds 131072 bytes" in rec["replay_error"]
    assert "readers_disagree" in rec["warnings"]
    ev = events_df(path)
    assert ev.filter(ev["sequence"] == 45)["byte_length"][0] == len(big) - 1


def test_file_over_16_mib_still_loads(make_run) -> None:
    line = LINES[45].replace(b'"content":"', b'"content":"' + b"y" * 100_000)
    body = LINES[:45] + [line] * 1 + LINES[46:]
    # pad with blank lines to cross the 16 MiB limit without breaking the sequence
    data = b"".join(body) + b" " * (17 * 1024 * 1024) + b"\n"
    path = make_run(events=data)
    rec = audit(path)
    assert rec["verdict"] == "corrupt" and "events_too_large" in rec["reasons"]
    assert rec["events"] == 50 and rec["blank_lines"] == 1


def test_symlinked_run_directory_below_root(tmp_path: Path, make_run) -> None:
    real = make_run(root=tmp_path / "real")
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(real, root / "link")
    from rivumi_analysis.fleet_audit import audit as audit_fleet

    res = audit_fleet(str(root))
    assert res.runs == [] and res.skipped == [{"path": str(root / "link"), "reason": "symlink"}]
    # given directly, a symlinked run directory is read (the link is followed once, like a
    # shell would); run_dir is the resolved source, so one run has one run_dir
    res = audit_fleet(str(root / "link"))
    assert [r["run_dir"] for r in res.runs] == [os.path.realpath(real)]


@pytest.mark.parametrize("fname,code", [("session.json", "symlinked_file"),
                                        ("events.jsonl", "symlinked_file"),
                                        ("request.json", "symlinked_file")])
def test_symlinked_files(tmp_path: Path, make_run, fname: str, code: str) -> None:
    path = Path(make_run())
    target = tmp_path / f"elsewhere-{fname}"
    shutil.move(path / fname, target)
    os.symlink(target, path / fname)
    rec = audit(str(path))
    assert rec["verdict"] in ("corrupt", "not_resumable") and code in rec["reasons"]
    if fname == "events.jsonl":
        assert rec["lines"] == 0  # never read


@pytest.mark.timeout(30)
def test_fifo_named_events_jsonl(make_run) -> None:
    path = Path(make_run(events=None))
    os.mkfifo(path / "events.jsonl")
    rec = audit(str(path))  # must not block
    assert rec["verdict"] == "corrupt" and "not_regular_file" in rec["reasons"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fname,code", [("events.jsonl", "unreadable"),
                                        ("session.json", "unreadable")])
def test_unreadable_file_as_unprivileged_user(fname: str, code: str) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test drops root privileges in a child; run it as root (CI does)")
    top = Path(tempfile.mkdtemp(prefix="rivumi-unreadable-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        run = top / EXAMPLE_ID
        run.mkdir()
        os.chmod(run, 0o755)
        (run / "events.jsonl").write_bytes(example_events())
        (run / "session.json").write_bytes(dumps(running_manifest(49)))
        for f in run.iterdir():
            os.chmod(f, 0o644)
        os.chmod(run / fname, 0)
        # Import (and warm every lazy import) as root, then drop to "nobody": the
        # interpreter itself lives where nobody cannot read.
        code_py = ("import json,os,sys; from rivumi_analysis.audit import audit_run;"
                   f"audit_run({str(run)!r}); os.setgid(65534); os.setuid(65534);"
                   f"print(json.dumps(audit_run({str(run)!r})))")
        proc = subprocess.run([sys.executable, "-c", code_py], capture_output=True, text=True,
                              timeout=50, cwd=str(Path(__file__).resolve().parents[1]))
        assert proc.returncode == 0, proc.stderr
        rec = json.loads(proc.stdout)
        accounting(rec)
        assert rec["verdict"] == "corrupt" and code in rec["reasons"], rec
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_directory_that_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hello")
    from rivumi_analysis.fleet_audit import audit as audit_fleet

    res = audit_fleet(str(tmp_path))
    assert res.runs == [] and res.skipped == []


def test_external_run(tmp_path: Path) -> None:
    run = tmp_path / "ext1"
    run.mkdir()
    lines = [{"data": {"source": "codex"}, "event_type": "system", "sequence": 0, "text": "hi"},
             {"data": {"source": "codex"}, "event_type": "result", "sequence": 1, "text": "done"}]
    (run / "events.jsonl").write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
    (run / "checkpoint.json").write_text(json.dumps(
        {"backend_name": "codex", "resumable": False, "run_id": "ext1", "status": "completed",
         "task_id": "t"}))
    rec = audit(str(run))
    assert rec["kind"] == "external" and rec["verdict"] == "not_resumable"
    assert set(rec["reasons"]) == {"external_run", "manifest_missing"}
    assert rec["run_id"] == "ext1"  # from checkpoint.json
    ev = events_df(str(run))
    assert ev["text"].to_list() == ["hi", "done"] and ev["kind"].unique().to_list() == ["external"]


def test_every_line_accounted_on_a_messy_log(make_run) -> None:
    data = (b"\xef\xbb\xbf" + LINES[0] + b"\r\n" + LINES[1].replace(b"\n", b"\r\n") + b"[1,2]\n"
            + b'{"sequence":true,"event_type":""}\n' + b"\xff\xfe\n" + LINES[2] + b"{")
    path = make_run(events=data, manifest=running_manifest(2))
    rec = audit(path)
    q = quarantine_df(path)
    assert sorted(q["reason"].to_list()) == ["bad_event_type", "invalid_utf8", "not_object",
                                            "torn_tail"]
    assert rec["events"] == 3 and rec["blank_lines"] == 1 and rec["lines"] == 8
    assert all(len(h) == 64 for h in q["sha256"])
    assert q.filter(q["reason"] == "torn_tail")["raw"][0] == b"{"


def test_pydantic_is_the_oracle_for_accepted_events() -> None:
    """The accepted-event rule equals pydantic's lax validation of sequence and event_type."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    from rivumi_analysis.read.decode import decode_line

    class Envelope(BaseModel):
        model_config = ConfigDict(extra="allow")
        sequence: int = Field(ge=0)
        event_type: str = Field(min_length=1)

    values = st.one_of(
        st.integers(-3, 10**12), st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(), st.none(), st.text(max_size=6),
        st.sampled_from([" 5 ", "+5", "5.0", "1e2", "-1", "0x10", "5_0", "٣", "", "  ", "07"]),
    )

    @settings(max_examples=examples(400), deadline=None)
    @given(seq=values, etype=st.one_of(st.text(max_size=3), st.integers(), st.none()))
    def check(seq, etype) -> None:
        line = json.dumps({"sequence": seq, "event_type": etype}).encode()
        d = decode_line(line, line_no=2, has_newline=True)
        try:
            Envelope.model_validate_json(line)
            oracle = True
        except ValidationError:
            oracle = False
        assert (d.reason is None) == oracle, (line, d)

    check()


def test_strict_raises_iff_quarantine(make_run, example_copy: str) -> None:
    from rivumi_analysis.errors import QuarantineError

    assert events_df(example_copy, strict=True).height == 50
    bad = make_run("bad", events=first_lines(3) + b"garbage\n")
    with pytest.raises(QuarantineError) as info:
        events_df(bad, strict=True)
    err = info.value
    assert err.quarantine.height == 1 and err.code == "quarantined_lines"
    assert "events.jsonl:4:" in str(err) and "hint:" in str(err)
    assert events_df(bad).height == 3  # lenient by default


def test_regular_file_source_is_a_usage_error(example_copy: str) -> None:
    from rivumi_analysis.errors import SourceError

    with pytest.raises(SourceError) as info:
        events_df(os.path.join(example_copy, "events.jsonl"))
    assert info.value.code == "source_not_directory" and info.value.hint


def test_dot_names_skipped_and_depth_limit(tmp_path: Path, make_run) -> None:
    from rivumi_analysis.fleet_audit import audit as audit_fleet

    make_run("r1", root=tmp_path / ".hidden")
    make_run("r2", root=tmp_path / "a" / "b" / "c")
    res = audit_fleet(str(tmp_path), max_depth=2)
    assert res.runs == []
    assert res.skipped == [{"path": str(tmp_path / "a" / "b" / "c"), "reason": "depth_limit"}]
    res = audit_fleet(str(tmp_path))
    assert [Path(r["run_dir"]).name for r in res.runs] == ["r2"]


def test_subagents_are_descended(tmp_path: Path, make_run) -> None:
    from rivumi_analysis.fleet_audit import audit as audit_fleet

    parent = Path(make_run("parent", root=tmp_path))
    make_run("child1", root=parent / "subagents")
    res = audit_fleet(str(tmp_path))
    kinds = {Path(r["run_dir"]).name: (r["kind"], r["parent_run_dir"]) for r in res.runs}
    assert kinds == {"parent": ("native", str(parent)),
                     "child1": ("subagent", str(parent))} or kinds["child1"] == (
        "subagent", str(parent))


def test_atomic_leftover_and_writer_token(make_run) -> None:
    path = Path(make_run())
    (path / ".session.json.a8Kz91").write_text("{}")
    (path / ".writer.lock").write_text("pid=1 token=deadbeef\n")
    rec = audit(str(path))
    assert {"atomic_write_leftover", "writer_token_mismatch"} <= set(rec["warnings"])
    assert not (stat.S_IMODE(os.stat(path).st_mode) & 0)  # directory untouched (see readonly)


def test_audit_run_of_a_wrong_path_is_a_usage_error(tmp_path: Path) -> None:
    """A path that is not there (or is a file) raises SourceError with the CLI's codes, instead
    of a record that calls it an external run; a run that vanished during a fleet audit is an
    error record, not an exception."""
    from rivumi_analysis.audit import iter_records
    from rivumi_analysis.errors import SourceError
    from rivumi_analysis.read.discovery import RunLocation

    with pytest.raises(SourceError) as missing:
        audit_run(str(tmp_path / "no-such-run"))
    assert missing.value.code == "source_missing"
    assert "no-such-run" in str(missing.value) and "hint" in str(missing.value)
    (tmp_path / "events.jsonl").write_text("")
    with pytest.raises(SourceError) as a_file:
        audit_run(str(tmp_path / "events.jsonl"))
    assert a_file.value.code == "source_not_directory"
    [rec] = iter_records([RunLocation(str(tmp_path / "vanished"), False, None)])
    assert rec["run_dir"] == str(tmp_path / "vanished")  # a record, not an exception
