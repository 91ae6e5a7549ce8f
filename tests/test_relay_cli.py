"""``rivumi-analysis relay audit``: formats, --fail-on, exit codes, usage errors before output;
``codes`` lists the relay codes."""

from __future__ import annotations

import json

from rivumi_analysis.cli import main
from rivumi_analysis.errors import (
    RELAY_QUARANTINE_REASONS,
    RELAY_RULES,
    RELAY_SKIP_REASONS,
    RELAY_UNREADABLE_REASONS,
    RELAY_WARNINGS,
)
from rivumi_analysis.synth import relay_scenarios as S

from .relay_helpers import EXAMPLE, snapshot


def _violating(tmp_path) -> str:
    with S._new(str(tmp_path / "v"), "cli-C8") as w:
        S._base(w)
        S._v_c8(w)
        return w.path


def test_json_document(capsys, tmp_path):
    path = _violating(tmp_path)
    assert main(["relay", "audit", str(EXAMPLE), path, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1
    by_kind = {r["source_kind"]: r for r in doc["journals"]}
    assert by_kind["jsonl"]["verdict"] == "consistent"
    rec = by_kind["sqlite"]
    assert rec["verdict"] == "violations"
    assert list(rec) == ["path", "source_kind", "run_id", "entries", "quarantined", "verdict",
                         "violations", "channels", "dead_attempts_unexplained",
                         "effects_confirmed"]
    assert [(v["rule"], v["seq"]) for v in rec["violations"]] == [("C8", 7)]
    assert "differs from appended message" in rec["violations"][0]["message"]
    assert doc["skipped"] == []


def test_fail_on_and_jsonl(capsys, tmp_path):
    path = _violating(tmp_path)
    before = snapshot(tmp_path)
    assert main(["relay", "audit", path, "--format", "jsonl", "--fail-on", "violations"]) == 1
    cap = capsys.readouterr()
    assert "--fail-on matched 1 journal(s)" in cap.err and "(violations)" in cap.err
    lines = cap.out.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["verdict"] == "violations"
    assert main(["relay", "audit", str(EXAMPLE), "--format", "jsonl",
                 "--fail-on", "violations,unreadable"]) == 0
    capsys.readouterr()
    (tmp_path / "bad.sqlite3").write_bytes(b"nope")
    assert main(["relay", "audit", str(tmp_path / "bad.sqlite3"), "--format", "json",
                 "--fail-on", "unreadable"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["diagnostics"][0]["code"] == "not_sqlite"
    assert snapshot(tmp_path) == {**before, "bad.sqlite3": snapshot(tmp_path)["bad.sqlite3"]}


def test_table_format(capsys, tmp_path):
    path = _violating(tmp_path)
    assert main(["relay", "audit", str(EXAMPLE), path, "--format", "table"]) == 0
    out = capsys.readouterr().out
    assert "JOURNAL" in out and "C8" in out and "consistent 1, violations 1" in out


def test_usage_errors_before_output(capsys, tmp_path):
    assert main(["relay"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "audit" in cap.err
    assert main(["relay", "audit", str(tmp_path / "missing"), "--format", "json"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "does not exist" in cap.err
    assert main(["relay", "audit", str(EXAMPLE), "--fail-on", "bogus"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "unknown verdict" in cap.err


def test_internal_error_exit_3(capsys, monkeypatch):
    import rivumi_analysis.relay.audit as A

    def boom(j, fold=None):
        if j.unreadable is None:
            raise RuntimeError("boom")
        return real(j, fold)

    real = A.journal_record
    monkeypatch.setattr(A, "journal_record", boom)
    assert main(["relay", "audit", str(EXAMPLE), "--format", "json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["journals"][0]["verdict"] == "unreadable"
    assert doc["diagnostics"][0]["code"] == "internal_error"


def test_codes_lists_relay_codes(capsys):
    assert main(["codes"]) == 0
    out = capsys.readouterr().out
    for fam in (RELAY_UNREADABLE_REASONS, RELAY_QUARANTINE_REASONS, RELAY_WARNINGS,
                RELAY_SKIP_REASONS, RELAY_RULES):
        for code in fam:
            assert f"\n{code}\t" in out
    assert "# relay rules" in out


def test_json_top_level_keys_and_diagnostics_are_documented(capsys, tmp_path):
    """The "diagnostics" (and "skipped") keys: their shape is the one journal §8 and --help
    document, with every kind of finding."""
    from pathlib import Path

    (tmp_path / "a.journal.jsonl").write_bytes(
        EXAMPLE.read_bytes() + b'\n{"nope": 1, "seq": "x"}\n')  # a blank line and a bad line
    (tmp_path / "b.sqlite3").write_bytes(b"nope")
    assert main(["relay", "audit", str(tmp_path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["schema_version", "journals", "skipped", "diagnostics"]
    diags = doc["diagnostics"]
    assert {d["kind"] for d in diags} == {"unreadable", "warning", "quarantine"}
    for d in diags:
        assert list(d) == ["path", "kind", "code", "message", "where"]
        known = {"unreadable": RELAY_UNREADABLE_REASONS, "warning": RELAY_WARNINGS,
                 "quarantine": RELAY_QUARANTINE_REASONS}[d["kind"]]
        assert d["code"] in known and d["message"] and d["where"].startswith(str(tmp_path))
    quarantined = [d for d in diags if d["kind"] == "quarantine"]
    assert quarantined[0]["where"].count(":") >= 2  # file:line:byte
    root = Path(__file__).resolve().parents[1]
    section = (root / "docs" / "relayflowd-journal.md").read_text("utf-8").split(
        "## 8.")[1].split("\n## ")[0]
    for key in ("schema_version", "journals", "skipped", "diagnostics", "unreadable",
                "warning", "quarantine", "{path, kind, code, message, where}"):
        assert key in section, key
    try:
        main(["relay", "audit", "--help"])
    except SystemExit:
        pass
    assert "diagnostics" in capsys.readouterr().out
