"""Progress bars on long public calls (issue 30 item 4): a table loader's pass over runs and
the store's first build draw a tqdm bar on stderr; ``progress=False``, ``set_enabled`` and
``$RIVUMI_ANALYSIS_PROGRESS=0`` turn it off; the CLI's commands with their own progress lines
draw no second bar; nothing is drawn when stderr is not a terminal."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

import rivumi_analysis as ra
from rivumi_analysis import cli, progress
from rivumi_analysis.read.executor import map_chunks

SAMPLES = Path(__file__).resolve().parents[1] / "sample_runs" / "completed"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _terminal(monkeypatch: pytest.MonkeyPatch) -> _Terminal:
    """stderr is a terminal (read back as a string); every pass counts as long (the bar
    shows at once). Called in the test's body: pytest sets sys.stderr again between a
    fixture's setup and the test's call."""
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setattr(progress, "MIN_RUNS", 1)
    monkeypatch.delenv(progress.ENV, raising=False)
    return term


def _drawn(term: _Terminal) -> str:
    out = term.getvalue()
    term.seek(0)
    term.truncate()
    return out


def _runs() -> int:
    return sum(1 for p in SAMPLES.iterdir() if p.is_dir())


def test_a_loader_and_the_store_build_draw_a_bar(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    tty = _terminal(monkeypatch)
    n = _runs()
    assert ra.runs_df(str(SAMPLES), cache=False).height == n
    err = _drawn(tty)
    assert "reading runs" in err and f"0/{n} " in err, err  # the bar, over every run
    assert ra.runs_df(str(SAMPLES), store_dir=tmp_path / "s").height == n  # first build
    err = _drawn(tty)
    assert "reading runs" in err and f"/{n} " in err, err
    ra.runs_df(str(SAMPLES), store_dir=tmp_path / "s")  # warm: nothing read, no bar
    assert "reading runs" not in _drawn(tty)


def test_the_option_the_switch_and_the_environment_turn_it_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tty = _terminal(monkeypatch)
    assert list(map_chunks(len, list(range(5)), progress=False)) == [5]
    assert _drawn(tty) == ""
    assert list(map_chunks(len, list(range(5)))) == [5]
    assert "reading runs:   0%" in _drawn(tty)
    progress.set_enabled(False)
    try:
        ra.runs_df(str(SAMPLES), cache=False)
        assert _drawn(tty) == ""
    finally:
        progress.set_enabled(None)
    monkeypatch.setenv(progress.ENV, "0")
    ra.runs_df(str(SAMPLES), cache=False)
    assert _drawn(tty) == ""


def test_no_bar_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "MIN_RUNS", 1)
    monkeypatch.delenv(progress.ENV, raising=False)
    assert list(map_chunks(len, list(range(5)))) == [5]
    assert capsys.readouterr().err == ""  # a log file gets no carriage-return lines


def test_the_cli_store_draws_the_bar_and_the_audit_only_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tty = _terminal(monkeypatch)
    monkeypatch.setenv("RIVUMI_ANALYSIS_STORE_DIR", str(tmp_path / "stores"))
    assert cli.main(["store", str(SAMPLES)]) == 0
    assert "reading runs" in _drawn(tty)
    assert cli.main(["audit", str(SAMPLES), "--format", "json", "--no-cache"]) == 0
    err = _drawn(tty)
    assert "auditing" in err and "reading runs" not in err  # one bar, the CLI's
    assert progress.enabled()  # the library's bars are on again after the command
