"""CLI polish of issue 16: ~ and $VARS in every path argument, --fail-on names the matched
runs on stderr, live runs are marked in the audit table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rivumi_analysis import cli
from tests.conftest import example_events, running_manifest


def test_home_and_env_vars_are_expanded_in_paths(tmp_path: Path, make_run, monkeypatch,
                                                 capsys) -> None:
    run = Path(make_run())
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RA_RUNS", str(tmp_path))
    for arg in (f"~/{run.name}", f"$RA_RUNS/{run.name}", f"${{RA_RUNS}}/{run.name}"):
        assert cli.main(["audit", arg, "--format", "json", "--no-cache"]) == 0
        assert f'"run_dir": "{run}"' in capsys.readouterr().out
    assert cli.main(["replay", f"~/{run.name}", "--json"]) == 0
    assert capsys.readouterr().out.startswith('{"completed_turn_ids"')
    out = tmp_path / "x"
    assert cli.main(["export", f"~/{run.name}", "--out", "$RA_RUNS/x"]) == 0
    assert out.is_dir()


def test_fail_on_names_the_matched_runs(tmp_path: Path, make_run, capsys) -> None:
    done = make_run("done")
    make_run("open", manifest=running_manifest(49))
    assert cli.main(["audit", str(tmp_path), "--fail-on", "terminal", "--format", "json",
                     "--no-cache"]) == 1
    err = capsys.readouterr().err
    assert "--fail-on matched 1 run(s):" in err
    assert f"  {done}  terminal  terminal" in err and "open" not in err
    assert cli.main(["audit", str(tmp_path), "--fail-on", "corrupt", "--format", "json",
                     "--no-cache"]) == 0
    assert "matched" not in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_live_runs_are_marked_in_the_table(tmp_path: Path, make_run, capsys) -> None:
    run = Path(make_run(events=b"".join(example_events().splitlines(keepends=True)[:10]),
                        manifest=running_manifest(9)))
    lock = run / ".writer.lock"
    lock.write_text("pid=1 token=c01295ad5e1d4fceb808cfd63c3a0e41\n")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1],'r+');"
         "fcntl.flock(f, fcntl.LOCK_EX|fcntl.LOCK_NB); print('locked', flush=True);"
         "time.sleep(60)", str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert cli.main(["audit", str(run), "--format", "table", "--no-cache"]) == 0
        out = capsys.readouterr().out
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert "resumable (live)" in out and "1 live (being written)" in out
    assert cli.main(["audit", str(run), "--format", "table", "--no-cache"]) == 0
    assert "(live)" not in capsys.readouterr().out


def test_python_api_expands_home_and_env_vars(tmp_path: Path, make_run, monkeypatch) -> None:
    import rivumi_analysis as ra

    run = Path(make_run())
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RA_RUNS", str(tmp_path))
    for src in (f"~/{run.name}", f"$RA_RUNS/{run.name}", [f"~/{run.name}"]):
        assert ra.runs_df(src)["run_dir"].to_list() == [str(run)]
    assert ra.events_df(f"~/{run.name}").height == 50
    assert ra.audit_run(f"~/{run.name}")["verdict"] == ra.audit_run(str(run))["verdict"]
    assert ra.audit_run(f"$RA_RUNS/{run.name}")["run_dir"] == str(run)
    assert ra.search(f"~/{run.name}", r"\w")["run_dir"].unique().to_list() == [str(run)]
    assert ra.messages_df(f"~/{run.name}").height > 0


def test_export_writes_every_run_table(tmp_path: Path) -> None:
    import json

    from rivumi_analysis.dictionary import TABLES as DOCUMENTED
    from rivumi_analysis.export import TABLES, export
    from tests.conftest import SAMPLE_RUNS

    assert set(TABLES) == {t for t in DOCUMENTED if not t.startswith("relay_")}
    manifest = export(str(SAMPLE_RUNS / "forks"), str(tmp_path / "out"))
    assert set(manifest["tables"]) == set(TABLES)
    for table in ("forks", "drift", "manifests", "verifications", "messages"):
        assert manifest["tables"][table]["rows"] > 0, table
    on_disk = json.loads((tmp_path / "out" / "_dataset.json").read_text("utf-8"))
    assert set(on_disk["tables"]) == set(TABLES)


def test_dir_lists_the_public_names() -> None:
    import rivumi_analysis

    names = set(dir(rivumi_analysis))
    assert {"runs_df", "events_df", "messages_df", "search", "load_fleet", "audit_run",
            "__version__"} <= names
    assert all(callable(getattr(rivumi_analysis, n)) for n in names - {"__version__"})


def _path_actions(parser, prefix: tuple[str, ...] = ()):
    """(subcommand, action) for every argument whose metavar names a file or folder."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _path_actions(sub, (*prefix, name))
        elif action.metavar in ("PATH", "RUN_DIR", "DIR", "FILE"):
            yield prefix, action


def test_every_path_argument_of_every_command_is_expanded(monkeypatch) -> None:
    monkeypatch.setenv("HOME", "/home/ra-test")
    monkeypatch.setenv("RA_X", "/data")
    found = list(_path_actions(cli._build_parser()))
    assert len(found) >= 14 and {p for p, _ in found} >= {
        ("audit",), ("replay",), ("fork-seed",), ("search",), ("report",), ("export",),
        ("store",), ("watch",), ("relay", "audit")}
    for prefix, action in found:
        assert action.dest in cli._PATH_ARGS, (prefix, action.dest)
        value = ["~/r", "$RA_X/r"] if action.nargs in ("*", "+") else "~/r"
        args = type("A", (), {action.dest: value})()
        cli._expand_args(args)
        got = getattr(args, action.dest)
        want = ["/home/ra-test/r", "/data/r"] if isinstance(value, list) else "/home/ra-test/r"
        assert got == want, (prefix, action.dest)
