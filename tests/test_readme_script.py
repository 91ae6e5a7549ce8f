"""The README's Python API snippets run as a plain script (no ``if __name__ == "__main__":``
guard) on a generated 300-run fleet: large enough for worker processes, which must neither run
the script again (results printed several times, ``BrokenProcessPool``) nor keep it from
exiting (issue 30, item 2)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rivumi_analysis.read.discovery import discover
from rivumi_analysis.synth.corpus import generate_corpus
from tests.conftest import ROOT

RUNS = 300


def _api_snippets() -> str:
    """The ```python blocks of the README's "Python API" section, as one script."""
    readme = (ROOT / "README.md").read_text("utf-8")
    section = readme.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "the README's Python API section has no python block"
    return "\n".join(blocks)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("readme-script") / "runs"
    generate_corpus(str(out), runs=RUNS, target_mb=6, workers=2)
    return out


@pytest.mark.slow
def test_readme_snippets_run_as_a_plain_script_on_300_runs(fleet: Path, tmp_path: Path) -> None:
    code = _api_snippets()
    assert "sample_runs" in code and "__main__" not in code
    n_runs = len(discover(str(fleet)).runs)
    assert n_runs >= RUNS
    script = tmp_path / "readme_snippets.py"
    script.write_text(code.replace('"sample_runs"', repr(str(fleet)))
                      + '\nprint("RESULT runs", runs.height, "events", events.height)\n')
    env = {**os.environ, "RIVUMI_ANALYSIS_STORE_DIR": str(tmp_path / "store"),
           "RIVUMI_ANALYSIS_CACHE_DIR": str(tmp_path / "cache"), "PYTHONWARNINGS": "default",
           # worker processes from 256 runs (the default threshold is higher): the loaders
           # and the store's build read this fleet in them
           "RIVUMI_ANALYSIS_POOL_MIN_RUNS": "256"}
    try:
        done = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), env=env,
                              capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as exc:  # a worker that keeps the script alive
        pytest.fail(f"the script did not exit within 600 s; stdout so far:\n{exc.stdout}\n"
                    f"stderr:\n{exc.stderr}")
    diag = f"exit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, diag
    results = re.findall(r"^RESULT runs (\d+) events (\d+)$", done.stdout, flags=re.M)
    assert len(results) == 1, diag  # printed once: no worker ran the script again
    assert int(results[0][0]) == n_runs and int(results[0][1]) > 0, diag
    # describe("events") is printed once too
    assert done.stdout.count("run_dir") >= 1
    first = done.stdout.splitlines()[0]
    assert done.stdout.count(first + "\n") == 1, diag
    assert "Warning" not in done.stderr and "Traceback" not in done.stderr, diag
