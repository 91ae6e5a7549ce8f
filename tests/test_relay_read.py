"""relayflowd journals: the read-only loader, the three JSON shapes and every bad input of
issue 14 (each with its precise code; source bytes and mtimes, ``-shm`` included, unchanged)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rivumi_analysis.relay import load_journals, relay_audit
from rivumi_analysis.relay import tables as T
from rivumi_analysis.relay.read import read_sqlite
from rivumi_analysis.synth.relayflowd import (
    JournalWriter,
    agent_step,
    dump_jsonl,
    envelopes,
    spec_of,
)

from .relay_helpers import EXAMPLE, only, rules, snapshot

LOADERS = [T.relay_entries_df, T.relay_quarantine_df, T.relay_attempts_df,
           T.relay_channel_messages_df, T.relay_channel_deliveries_df, T.relay_channel_acks_df,
           T.relay_channel_cursor_df, T.relay_violations_df]


def audit_unchanged(path: str | Path) -> dict:
    """relay_audit + every loader + the CLI, asserting the files below ``path`` never change."""
    root = path if os.path.isdir(path) else os.path.dirname(path)
    before = snapshot(root)
    doc = relay_audit([str(path)])
    for loader in LOADERS:
        loader(str(path))
    load_journals([str(path)])
    cli = subprocess.run([sys.executable, "-m", "rivumi_analysis.cli", "relay", "audit",
                          str(path), "--format", "json"], capture_output=True, text=True,
                         timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["journals"] == doc["journals"]
    assert snapshot(root) == before
    return doc


def codes(doc: dict, kind: str) -> list[str]:
    return [d["code"] for d in doc["diagnostics"] if d["kind"] == kind]


def small_journal(path: str, run_id: str = "01TESTRUN", **kw) -> JournalWriter:
    w = JournalWriter.create(path, run_id, **kw)
    w.spawn(spec_of("t", [agent_step("alice", ["requests"]), agent_step("bob", [])]))
    w.route("alice")
    w.start("alice", 1)
    w.route("bob")
    w.start("bob", 1)
    return w


# --- the real example ------------------------------------------------------------------------


def test_example_matches_its_readme():
    assert hashlib.sha256(EXAMPLE.read_bytes()).hexdigest() == (
        "2275ee0dac085d2ac148b5dcd792bee40574776503f449d2c9925bd309bcf23a")
    doc = audit_unchanged(EXAMPLE.parent)
    rec = only(doc)
    assert rec == {"path": "completed.journal.jsonl", "source_kind": "jsonl",
                   "run_id": "01M2369FGQYCC0WB7STBMZZGZM", "entries": 11, "quarantined": 0,
                   "verdict": "consistent", "violations": [], "channels": [],
                   "dead_attempts_unexplained": 0, "effects_confirmed": 0}
    # seq 8 -> 9 steps back in at_ms: a warning, never a violation
    assert codes(doc, "warning") == ["at_ms_backwards"]
    entries = T.relay_entries_df(str(EXAMPLE))
    assert entries["seq"].to_list() == list(range(1, 12))
    assert entries["entry_type"].value_counts().sort("entry_type").rows() == [
        ("run.completed", 1), ("run.spawned", 1), ("step.attempt.started", 3),
        ("step.completed", 3), ("step.routed", 3)]
    att = T.relay_attempts_df(str(EXAMPLE))
    assert att.select("step_id", "attempt", "status").rows() == [
        ("implement", 1, "completed"), ("verify", 1, "completed"), ("report", 1, "completed")]


@pytest.mark.parametrize("shape", ["jsonl", "replay_json", "journal_read"])
def test_three_shapes_give_the_same_record(tmp_path, shape):
    envs = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    p = tmp_path / f"dump.{shape}.jsonl"
    p.write_bytes(dump_jsonl(envs, shape, page=3))
    rec = only(audit_unchanged(p))
    assert rec["source_kind"] == shape
    assert (rec["entries"], rec["quarantined"], rec["verdict"]) == (11, 0, "consistent")
    assert rec["run_id"] == "01M2369FGQYCC0WB7STBMZZGZM"


def test_sqlite_and_its_dump_agree(tmp_path):
    w = small_journal(str(tmp_path / "01TESTRUN.sqlite3"))
    w.channel_append("alice", 1, "requests", "m", {"x": [1, 2.5, None]})
    d = w.channel_receive("bob", 1, "requests")
    w.channel_ack("bob", 1, "requests", d.seq)
    w.close()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.jsonl").write_bytes(dump_jsonl(envelopes(w.path), "jsonl"))
    a = only(audit_unchanged(w.path))
    b = only(audit_unchanged(tmp_path / "d"))
    assert a["source_kind"] == "sqlite" and b["source_kind"] == "jsonl"
    for k in ("run_id", "entries", "quarantined", "verdict", "violations", "channels"):
        assert a[k] == b[k], k
    assert a["channels"][0]["acked_offset"] == 1


# --- discovery -------------------------------------------------------------------------------


def test_discovery_registry_sidecars_symlinks_fifos(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    w = small_journal(str(runs / "01TESTRUN.sqlite3"))
    w.close()
    (tmp_path / "relayflowd.sqlite3").write_bytes(b"registry")
    (runs / "01GONE.sqlite3-wal").write_bytes(b"x" * 32)  # a -wal without its database
    (runs / "01GONE.sqlite3-shm").write_bytes(b"x" * 32)
    os.symlink(runs / "01TESTRUN.sqlite3", tmp_path / "linked.sqlite3")
    os.symlink(EXAMPLE, tmp_path / "linked.jsonl")
    os.mkfifo(tmp_path / "fifo.jsonl")
    (tmp_path / "notes.jsonl").write_text('{"hello": 1}\n')
    (tmp_path / "other.txt").write_text("ignored")
    os.symlink(runs, tmp_path / "linkdir")
    doc = relay_audit([str(tmp_path)])
    assert [r["path"] for r in doc["journals"]] == ["runs/01TESTRUN.sqlite3"]
    assert {(s["path"], s["reason"]) for s in doc["skipped"]} == {
        ("relayflowd.sqlite3", "registry"), ("runs/01GONE.sqlite3-wal", "wal_without_database"),
        ("runs/01GONE.sqlite3-shm", "shm_without_database"), ("linked.sqlite3", "symlink"),
        ("linked.jsonl", "symlink"), ("fifo.jsonl", "not_regular"),
        ("notes.jsonl", "not_a_journal"), ("linkdir", "symlink")}
    # named explicitly, a symlinked or FIFO journal is skipped too (never followed/opened)
    doc = relay_audit([str(tmp_path / "linked.jsonl"), str(tmp_path / "fifo.jsonl")])
    assert doc["journals"] == []
    assert sorted(s["reason"] for s in doc["skipped"]) == ["not_regular", "symlink"]


# --- SQLite bad input ------------------------------------------------------------------------


def test_wal_holds_the_last_committed_entries(tmp_path):
    src = tmp_path / "live"
    src.mkdir()
    w = small_journal(str(src / "01TESTRUN.sqlite3"), autocheckpoint=False)
    w.channel_append("alice", 1, "requests", "m", {"n": 1})
    w.channel_receive("bob", 1, "requests")
    ev = tmp_path / "evidence"
    ev.mkdir()
    for suffix in ("", "-wal", "-shm"):  # copied while uncheckpointed, -shm included
        shutil.copyfile(f"{w.path}{suffix}", ev / f"01TESTRUN.sqlite3{suffix}")
    w.close()
    assert (ev / "01TESTRUN.sqlite3-wal").stat().st_size > 0
    rec = only(audit_unchanged(ev))
    assert rec["entries"] == 7 and rec["verdict"] == "consistent"
    assert rec["channels"][0]["delivered"] == 1
    # the main file alone misses the committed entries: the -wal is part of the journal
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copyfile(ev / "01TESTRUN.sqlite3", alone / "01TESTRUN.sqlite3")
    got = only(relay_audit([str(alone)]))
    assert got["entries"] < 7


def test_truncated_corrupt_and_empty_sqlite(tmp_path):
    w = small_journal(str(tmp_path / "01TESTRUN.sqlite3"))
    w.close()
    data = (tmp_path / "01TESTRUN.sqlite3").read_bytes()
    cases = {"trunc": data[: len(data) // 2], "header_only": data[:100],
             "garbage": b"SQLite format 3\x00" + bytes(range(256)) * 20,
             "empty": b"", "text": b"not a database at all"}
    for name, blob in cases.items():
        d = tmp_path / name
        d.mkdir()
        (d / "01X.sqlite3").write_bytes(blob)
    doc = audit_unchanged(tmp_path)
    by = {r["path"].split("/")[0]: r for r in doc["journals"]}
    diag = {d["path"].split("/")[0]: d["code"] for d in doc["diagnostics"]
            if d["kind"] == "unreadable"}
    assert by["01TESTRUN.sqlite3"]["verdict"] == "consistent"
    for name in cases:
        assert by[name] == {"path": f"{name}/01X.sqlite3", "source_kind": "sqlite",
                            "run_id": None, "entries": 0, "quarantined": 0,
                            "verdict": "unreadable", "violations": [], "channels": [],
                            "dead_attempts_unexplained": 0, "effects_confirmed": 0}
    assert diag["empty"] == diag["text"] == "not_sqlite"
    assert diag["garbage"] == "sqlite_error"
    assert diag["trunc"] in ("sqlite_error", "quick_check_failed")
    assert diag["header_only"] in ("sqlite_error", "quick_check_failed", "meta_invalid")


def test_journal_version_and_run_id_file_name(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    small_journal(str(a / "01TESTRUN.sqlite3"), journal_version="2").close()
    doc = relay_audit([str(a)])
    assert only(doc)["verdict"] == "unreadable"
    assert codes(doc, "unreadable") == ["journal_version_unsupported"]
    b = tmp_path / "b"
    b.mkdir()
    small_journal(str(b / "renamed.sqlite3"), run_id="01REALID").close()
    doc = relay_audit([str(b)])
    assert only(doc)["run_id"] == "01REALID" and only(doc)["verdict"] == "consistent"
    assert codes(doc, "warning") == ["run_id_file_mismatch"]


def test_payloads_integers_types_and_at_ms(tmp_path):
    w = small_journal(str(tmp_path / "01TESTRUN.sqlite3"))
    w.append("event.received", payload_text="[1, 2]", raw=True)              # 6
    w.append("event.received", payload_text='{"b":1, "a":2}', raw=True)      # 7 accepted
    w.append("event.received", payload_text="{not json", raw=True)           # 8
    w.append("event.received", at_ms=2**53, raw=True)                        # 9
    w.append("event.received", payload={"big": 2**60}, raw=True)             # 10 accepted
    w.append("step.heartbeat", "alice", 1, {"lease_deadline_ms": 1}, raw=True)  # 11
    w.append("event.received", at_ms=5, raw=True)                            # 12 backwards
    w.close()
    doc = audit_unchanged(tmp_path)
    rec = only(doc)
    assert (rec["entries"], rec["quarantined"], rec["verdict"]) == (8, 4, "consistent")
    q = T.relay_quarantine_df(str(tmp_path))
    assert q.select("seq", "reason").rows() == [
        (6, "payload_not_object"), (8, "payload_invalid_json"), (9, "unsafe_integer"),
        (11, "unknown_entry_type")]
    assert q.filter(q["seq"] == 11)["entry_type"].to_list() == ["step.heartbeat"]
    assert sorted(codes(doc, "warning")) == ["at_ms_backwards", "payload_not_canonical",
                                             "payload_unsafe_integer"]
    with pytest.raises(Exception) as err:
        T.relay_entries_df(str(tmp_path), strict=True)
    assert getattr(err.value, "code", None) == "relay_quarantined"
    assert err.value.quarantine.height == 4


def test_writer_in_another_process_busy_or_consistent(tmp_path):
    path = tmp_path / "01BUSY.sqlite3"
    small_journal(str(path), run_id="01BUSY").close()
    code = ("import sys,time\n"
            "from rivumi_analysis.synth.relayflowd import JournalWriter\n"
            "w = JournalWriter.open(sys.argv[1])\n"
            "print('ready', flush=True)\n"
            "end = time.time() + 1.5\n"
            "while time.time() < end:\n"
            "    w.append('event.received', payload={'pad': 'x' * 2000}, raw=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        outcomes = []
        for _ in range(6):
            j = read_sqlite(str(path))
            if j.unreadable is not None:
                assert j.unreadable.code == "journal_busy", j.unreadable
                outcomes.append("busy")
            else:  # a consistent read: every committed seq, nothing torn
                assert not j.quarantine
                assert [e.seq for e in j.entries] == list(range(1, len(j.entries) + 1))
                outcomes.append(len(j.entries))
            time.sleep(0.05)
        assert len(outcomes) == 6
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == 0
    final = read_sqlite(str(path))
    assert final.unreadable is None and len(final.entries) > 5


# --- JSON bad input --------------------------------------------------------------------------


def test_torn_tail_bad_lines_and_positions(tmp_path):
    lines = EXAMPLE.read_bytes().splitlines(keepends=True)
    body = (lines[0] + b"\n" + lines[1].replace(b"\n", b"\r\n") + b"[1,2]\n"
            + b'{"kind":"x","event":{}}\n' + b"\xff\xfe{}\n" + b'{"a": NaN}\n'
            + lines[2].replace(b'"step.attempt.started"', b'"step.retried"')
            + lines[3].replace(b'"seq":4', b'"seq":4.0') + b"".join(lines[4:])
            + lines[10][:40])
    p = tmp_path / "torn.jsonl"
    p.write_bytes(body)
    doc = audit_unchanged(p)
    rec = only(doc)
    assert rec["entries"] == 9 and rec["quarantined"] == 7
    q = T.relay_quarantine_df(str(p))
    assert q.select("line_no", "reason").rows() == [
        (4, "not_object"), (5, "shape_mismatch"), (6, "invalid_utf8"), (7, "json_syntax"),
        (8, "unknown_entry_type"), (9, "bad_field_type"), (17, "torn_tail")]
    assert q.filter(q["line_no"] == 8)["seq"].to_list() == [3]
    assert sorted(codes(doc, "warning")) == ["at_ms_backwards", "blank_lines", "crlf"]
    # dropping seq 3 and 4 leaves seq 3's start unexplained but the run completed: DEAD is
    # not reported because the start itself was quarantined, never applied
    assert rec["verdict"] == "consistent"


def test_complete_last_line_without_newline_is_accepted(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(EXAMPLE.read_bytes().rstrip(b"\n"))
    doc = relay_audit([str(p)])
    assert only(doc)["entries"] == 11 and only(doc)["quarantined"] == 0
    assert "final_newline_missing" in codes(doc, "warning")


def test_int_versus_float_in_a_delivered_message_is_c8(tmp_path):
    w = small_journal(str(tmp_path / "01TESTRUN.sqlite3"))
    w.channel_append("alice", 1, "requests", "m", {"n": 1})
    w.close()
    envs = envelopes(w.path)
    base = dict(envs[-1], entry_type="channel.delivered", step_id="bob", seq=len(envs) + 1)
    good = dict(base, payload={"channel": "requests", "consumer": "bob", "offset": 1,
                               "message": {"n": 1}})
    bad = dict(good, seq=len(envs) + 1, payload=dict(good["payload"], message={"n": 1.0}))
    for name, extra, want in (("good", good, []), ("bad", bad, [("C8", len(envs) + 1)])):
        p = tmp_path / f"{name}.jsonl"
        p.write_bytes(dump_jsonl([*envs, extra], "jsonl"))
        assert rules(only(relay_audit([str(p)]))) == want
    # replay_json passes numbers through a JS number: 1.0 prints as 1, no difference left
    p = tmp_path / "replay.jsonl"
    p.write_bytes(dump_jsonl([*envs, bad], "replay_json"))
    assert rules(only(relay_audit([str(p)]))) == []


def test_unsafe_integer_and_envelope_checks_in_json(tmp_path):
    envs = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    envs[4]["seq"] = 2**53
    envs[5]["attempt"] = 2**32
    envs[6]["run_id"] = ""
    del envs[7]["at_ms"]
    envs[8]["payload"] = [1]
    p = tmp_path / "x.jsonl"
    p.write_bytes(dump_jsonl(envs, "jsonl"))
    q = T.relay_quarantine_df(str(p))
    assert q.select("line_no", "reason").rows() == [
        (5, "unsafe_integer"), (6, "bad_field_value"), (7, "bad_field_value"),
        (8, "missing_field"), (9, "payload_not_object")]


def test_journal_read_element_quarantine_and_other_runs(tmp_path):
    envs = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    envs[2]["entry_type"] = "future.type"
    envs[9]["run_id"] = "01OTHER"
    p = tmp_path / "pages.jsonl"
    p.write_bytes(dump_jsonl(envs, "journal_read", page=4) + b'{"entries": 5}\n')
    rec = only(relay_audit([str(p)]))
    assert rec["source_kind"] == "journal_read"
    assert (rec["entries"], rec["quarantined"]) == (10, 2)
    # an entry of another run is refused (J1), so report's attempt 1 is never explained
    assert rules(rec) == [("DEAD", 9), ("J1", 10)]
    q = T.relay_quarantine_df(str(p))
    assert q.select("line_no", "element", "seq", "reason").rows() == [
        (1, 2, 3, "unknown_entry_type"), (4, None, None, "entries_not_array")]
