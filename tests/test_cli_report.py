"""The CLI around ``report`` and ``export``: no runs, bad ``--out``, progress on stderr."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rivumi_analysis.cli import main

from .conftest import EXAMPLE_DIR

ROOT = Path(__file__).resolve().parents[1]


def _listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_report_no_runs_exits_2_and_writes_nothing(tmp_path, capsys):
    empty = tmp_path / "empty"
    (empty / "not-a-run").mkdir(parents=True)
    out = tmp_path / "r.html"
    assert main(["report", str(empty), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no runs found below" in err and str(empty) in err and "hint:" in err
    assert "Traceback" not in err
    assert _listing(tmp_path) == ["empty"]  # no report, no temp file


def test_export_no_runs_exits_2_and_leaves_out_alone(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", str(empty), "--out", str(tmp_path / "ds")]) == 2
    assert "no runs found below" in capsys.readouterr().err
    assert not (tmp_path / "ds").exists()


def test_audit_no_runs_says_so_on_stderr(tmp_path, capsys):
    assert main(["audit", str(tmp_path), "--format", "json", "--no-cache"]) == 2
    cap = capsys.readouterr()
    assert "no runs found below" in cap.err
    assert '"runs": []' in cap.out


def test_report_out_is_a_directory_is_a_usage_error_before_any_work(tmp_path, capsys):
    target = tmp_path / "out"
    target.mkdir()
    assert main(["report", str(EXAMPLE_DIR), "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and "report.html" in err  # says what to give instead
    assert "found" not in err and "reading" not in err  # failed before discovery
    assert _listing(target) == [] and _listing(tmp_path) == ["out"]


def test_report_png_that_is_a_file_is_a_usage_error(tmp_path, capsys):
    png = tmp_path / "png"
    png.write_text("x")
    out = tmp_path / "r.html"
    assert main(["report", str(EXAMPLE_DIR), "--out", str(out), "--png", str(png)]) == 2
    assert "--png" in capsys.readouterr().err
    assert not out.exists()


def test_export_out_that_is_a_file_is_a_usage_error(tmp_path, capsys):
    f = tmp_path / "ds"
    f.write_text("keep")
    assert main(["export", str(EXAMPLE_DIR), "--out", str(f)]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert f.read_text() == "keep"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["report", "export"])
def test_unwritable_out_is_a_usage_error_without_traceback(command):
    """Run as an unprivileged user (root can write anywhere), in a read-only folder.

    The run is copied to a folder of its own that the unprivileged user can read: the
    checkout (and pytest's ``tmp_path``) may sit below a folder only its owner may enter, as
    ``mktemp -d`` makes them, and the CLI would then rightly say the source does not exist.
    """
    shared = Path(tempfile.mkdtemp(prefix="rivumi-report-"))
    try:
        _unwritable_out_case(shared, command)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _unwritable_out_case(tmp_path: Path, command: str) -> None:
    tmp_path.chmod(0o755)
    source = tmp_path / "runs" / EXAMPLE_DIR.name
    shutil.copytree(EXAMPLE_DIR, source)
    for d in (source.parent, source):
        d.chmod(0o755)
    for f in source.iterdir():
        f.chmod(0o644)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    out = locked / ("r.html" if command == "report" else "ds")
    code = ("import os,sys; from rivumi_analysis.cli import main; import rivumi_analysis.viz.report;"
            "import rivumi_analysis.export;"
            "os.geteuid()==0 and (os.setgid(65534), os.setuid(65534));"
            f"sys.exit(main([{command!r}, {str(source)!r}, '--out', {str(out)!r}]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60,
                       cwd=str(ROOT))
    assert p.returncode == 2, p.stderr
    assert b"not writable" in p.stderr and b"Traceback" not in p.stderr
    assert _listing(locked) == []


def test_report_failure_leaves_no_temp_file(tmp_path, monkeypatch):
    import rivumi_analysis.viz.report as report

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(report.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        report.write_report([str(EXAMPLE_DIR)], str(tmp_path / "r.html"))
    assert _listing(tmp_path) == []


def test_report_progress_on_stderr(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(EXAMPLE_DIR), "--out", str(out)]) == 0
    cap = capsys.readouterr()
    err = cap.err.splitlines()
    assert err[0] == "rivumi-analysis report: found 1 run(s)"
    phases = [ln for ln in err if ln.endswith("…")]
    assert phases == [f"rivumi-analysis report: {p}…" for p in
                      ("reading runs", "building tables", "building charts", "writing html")]
    assert "read 1/1 runs" in cap.err
    assert "wrote" in cap.out and "wrote" not in cap.err
    assert out.exists()


def test_export_progress_on_stderr(tmp_path, capsys):
    assert main(["export", str(EXAMPLE_DIR), "--out", str(tmp_path / "ds")]) == 0
    err = capsys.readouterr().err
    for phase in ("found 1 run(s)", "reading runs…", "building tables…", "writing tables…"):
        assert f"rivumi-analysis export: {phase}" in err


def test_progress_reports_every_run_on_a_many_run_folder(tmp_path, capsys):
    import shutil

    for i in range(8):
        shutil.copytree(EXAMPLE_DIR, tmp_path / "runs" / f"r{i}")
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    assert "found 8 run(s)" in err
    lines = [ln for ln in err.splitlines() if " read " in ln]
    assert lines[-1].endswith("read 8/8 runs") and len(lines) == 4  # 2, 4, 6, 8
    assert os.path.getsize(tmp_path / "r.html") > 100_000
