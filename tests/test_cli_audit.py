"""The audit command: formats, exit codes, usage errors before output, read-only sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rivumi_analysis.cli import main
from tests.conftest import EXAMPLE_DIR, first_lines, running_manifest, tree_snapshot

CLI = [sys.executable, "-m", "rivumi_analysis.cli"]


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def fleet(tmp_path: Path, make_run) -> Path:
    root = tmp_path / "fleet"
    make_run("done", root=root)
    make_run("crashed", root=root, events=first_lines(20), manifest=running_manifest(20))
    make_run("torn", root=root, events=first_lines(5) + b'{"seq', manifest=running_manifest(5))
    return root


def test_json_format_and_sorting(fleet: Path) -> None:
    p = run_cli("audit", str(fleet), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["schema_version"] == 1 and doc["skipped"] == []
    dirs = [r["run_dir"] for r in doc["runs"]]
    assert dirs == sorted(dirs) and dirs[0] == os.path.join(str(fleet), "crashed")
    verdicts = {Path(r["run_dir"]).name: r["verdict"] for r in doc["runs"]}
    assert verdicts == {"done": "terminal", "crashed": "resync", "torn": "corrupt"}
    from rivumi_analysis.audit import RECORD_FIELDS

    assert all(list(r) == list(RECORD_FIELDS) for r in doc["runs"])


def test_record_matches_shipped_json_schema(fleet: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(run_cli("schema", "audit-record").stdout)
    doc = json.loads(run_cli("audit", str(fleet), "--format", "json").stdout)
    for rec in doc["runs"]:
        jsonschema.validate(rec, schema)


def test_jsonl_and_skipped_on_stderr(fleet: Path) -> None:
    os.symlink(fleet / "done", fleet / "alias")
    p = run_cli("audit", str(fleet), "--format", "jsonl")
    assert p.returncode == 0
    recs = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(recs) == 3
    assert f"skipped: {fleet / 'alias'} (symlink)" in p.stderr


def test_table_format(fleet: Path) -> None:
    p = run_cli("audit", str(fleet), "--format", "table")
    assert "VERDICT" in p.stdout and "3 run(s): resync 1, terminal 1, corrupt 1" in p.stdout


def test_fail_on(fleet: Path) -> None:
    assert run_cli("audit", str(fleet), "--fail-on", "corrupt").returncode == 1
    assert run_cli("audit", str(fleet), "--fail-on", "side_effect_uncertain").returncode == 0


@pytest.mark.parametrize("args", [("audit", "/does/not/exist"),
                                  ("audit", "--fail-on", "nonsense", "."),
                                  ("audit", str(EXAMPLE_DIR / "events.jsonl"))])
def test_usage_errors_exit_2_before_output(args: tuple[str, ...]) -> None:
    p = run_cli(*args)
    assert p.returncode == 2 and p.stdout == "" and "error:" in p.stderr


def test_default_root_from_env(fleet: Path, tmp_path: Path) -> None:
    env = {"RIVUMI_RUN_ROOT": "", "LOOPLANE_RUN_ROOT": str(fleet), "PCA_RUN_ROOT": "",
           "XDG_STATE_HOME": str(tmp_path / "nostate")}
    p = run_cli("audit", "--format", "json", env=env)
    assert p.returncode == 0 and f"using run root {fleet}" in p.stderr
    env["LOOPLANE_RUN_ROOT"] = ""
    p = run_cli("audit", env={**env, "HOME": str(tmp_path / "nohome")})
    assert p.returncode == 2 and p.stdout == ""


def test_empty_folder_exit_2(tmp_path: Path) -> None:
    """An empty source exits 2, as every command does on one (issue 29), after its output."""
    p = run_cli("audit", str(tmp_path), "--format", "json")
    assert p.returncode == 2 and json.loads(p.stdout)["runs"] == []
    assert "no runs found below" in p.stderr


def test_internal_error_exit_3(fleet: Path, monkeypatch, capsys) -> None:
    import rivumi_analysis.audit as audit_mod

    real = audit_mod.record_from_run

    def boom(run):
        if run.run_dir.endswith("torn"):
            raise RuntimeError("synthetic failure")
        return real(run)

    monkeypatch.setattr(audit_mod, "record_from_run", boom)
    rc = main(["audit", str(fleet), "--format", "json", "--no-cache"]) if "--no-cache" in (
        run_cli("audit", "--help").stdout) else main(["audit", str(fleet), "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 3
    bad = [r for r in out["runs"] if r["verdict"] == "error"]
    assert len(bad) == 1 and bad[0]["reasons"] == ["internal_error"]
    assert "synthetic failure" in bad[0]["message"]
    assert len(out["runs"]) == 3  # the others were still audited


def test_version() -> None:
    p = run_cli("--version")
    assert p.returncode == 0 and p.stdout.startswith("rivumi-analysis ")


def test_sources_are_never_modified(fleet: Path, tmp_path: Path) -> None:
    """Bytes, mtimes, modes and listings are identical after every public call and command."""
    import rivumi_analysis as ra

    (fleet / "done" / ".writer.lock").write_text("pid=7 token=abc\n")
    os.mkfifo(fleet / "crashed" / "checkpoint.json")
    before = tree_snapshot(str(fleet))
    for name in ("runs_df", "events_df", "quarantine_df", "manifests_df", "tool_calls_df",
                 "approvals_df", "model_calls_df", "usage_df", "verifications_df"):
        getattr(ra, name)(str(fleet))
    for optional in ("states_df", "drift_df", "forks_df"):
        try:
            getattr(ra, optional)(str(fleet))
        except (ImportError, AttributeError):
            pass
    from rivumi_analysis.fleet_audit import audit as audit_fleet

    audit_fleet(str(fleet))
    for args in (("audit", str(fleet), "--format", "json"),
                 ("audit", str(fleet), "--format", "table"),
                 ("replay", str(fleet / "done"), "--json"),
                 ("replay", str(fleet / "done")),
                 ("fork-seed", str(fleet / "done"), "--sequence", "3")):
        run_cli(*args)
    assert tree_snapshot(str(fleet)) == before
