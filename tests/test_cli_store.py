"""``rivumi-analysis store PATH`` prints the store it built or refreshed: the folder the loaders
then read (``--store DIR``, or the default under ``$RIVUMI_ANALYSIS_STORE_DIR``)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from rivumi_analysis import cli, runs_df
from rivumi_analysis.store.core import ENV_DIR, MANIFEST, Store
from tests.test_store import _age

SAMPLES = Path(__file__).resolve().parents[1] / "sample_runs"


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    src = tmp_path / "fleet"
    runs = sorted(p for p in (SAMPLES / "completed").iterdir() if p.is_dir())[:3]
    for run in runs:
        shutil.copytree(run, src / run.name)
    _age(src)  # settled: a second refresh reads nothing
    return src


def _store_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[Path, int]:
    """Run ``store`` and return the folder it printed and how many runs it says it read."""
    assert cli.main(["store", *args]) == 0
    out = capsys.readouterr().out
    found = re.fullmatch(r"rivumi-analysis: store (.+): 3 runs, (\d+) read, .*\n", out)
    assert found, out
    return Path(found.group(1)), int(found.group(2))


def _holds_the_fleet(store: Path, fleet: Path) -> None:
    m = Store(store).manifest()
    assert (store / MANIFEST).is_file() and m is not None
    assert sorted(m.order) == sorted(str(p) for p in fleet.iterdir())


def test_store_prints_the_store_given_with_store_dir(fleet: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    chosen = tmp_path / "chosen"
    printed, read = _store_cli([str(fleet), "--store", str(chosen)], capsys)
    assert printed == chosen and read == 3
    _holds_the_fleet(printed, fleet)
    # the loaders read that store: a refresh there reads nothing
    runs_df(str(fleet), store_dir=chosen)
    assert _store_cli([str(fleet), "--store", str(chosen)], capsys) == (chosen, 0)


def test_store_prints_the_default_store_it_used(fleet: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "stores"
    monkeypatch.setenv(ENV_DIR, str(root))
    printed, read = _store_cli([str(fleet)], capsys)
    assert read == 3
    assert [printed] == list(root.iterdir())  # the only store made under the default root
    _holds_the_fleet(printed, fleet)
    runs_df(str(fleet))  # the loaders' default store is the printed one: nothing made anew
    assert [printed] == list(root.iterdir())
    assert _store_cli([str(fleet)], capsys) == (printed, 0)
