"""``read.executor``: where chunks of runs run, and that the result never depends on it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import rivumi_analysis.read.executor as X
from rivumi_analysis.read.discovery import RunLocation

pytestmark = [pytest.mark.timeout(240)]


def _pid_and_engine(chunk: list[int]) -> tuple[int, str | None, list[int]]:
    return os.getpid(), os.environ.get("RIVUMI_ENGINE"), chunk


def test_small_or_single_job_or_object_storage_stays_in_this_process() -> None:
    locs = [RunLocation(f"/r/{i}") for i in range(40)]
    assert isinstance(X.choose(len(locs))[0], X.InProcess)  # below the threshold
    assert isinstance(X.choose(10_000, 1)[0], X.InProcess)
    assert isinstance(X.choose(10_000, 2, local_only=True)[0], X.InProcess)
    assert isinstance(X.choose(10_000, 2)[0], X.LocalPool)
    assert X.on_object_storage([RunLocation("s3://b/r"), *locs])
    assert not X.on_object_storage(locs)
    assert X.pool_min_runs({X.ENV_POOL_MIN_RUNS: "7"}) == 7
    assert X.pool_min_runs({X.ENV_POOL_MIN_RUNS: "x"}) == X.POOL_MIN_RUNS


def test_pool_results_come_in_chunk_order_and_equal_in_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(X, "POOL_MIN_RUNS", 10)
    items = list(range(200))
    here = list(X.map_chunks(sum, items, jobs=1))
    pooled = [(pid, chunk) for pid, _e, chunk in
              X.map_chunks(_pid_and_engine, items, jobs=2, most=16)]
    assert here == [sum(items)]
    assert [x for _pid, chunk in pooled for x in chunk] == items
    assert os.getpid() not in {pid for pid, _chunk in pooled}


def test_workers_see_the_toolkit_environment_as_it_is_now(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """loky's workers outlive a call: a changed ``RIVUMI_*`` variable starts new ones."""
    monkeypatch.delenv("RIVUMI_ENGINE", raising=False)
    pool = X.LocalPool(2)
    assert {e for _p, e, _c in pool.map(_pid_and_engine, [[1], [2]])} == {None}
    monkeypatch.setenv("RIVUMI_ENGINE", "exact")
    assert {e for _p, e, _c in pool.map(_pid_and_engine, [[1], [2]])} == {"exact"}


def test_an_interactively_defined_function_runs_in_a_worker(tmp_path: Path) -> None:
    """A function defined in ``__main__`` (a script, a notebook cell) reaches the workers
    by value (cloudpickle), and the script is not run again in them."""
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text(
        "import os\n"
        "import rivumi_analysis.read.executor as X\n"
        "X.POOL_MIN_RUNS = 0\n"
        "print('START', os.getpid())\n"
        "def square(chunk):\n"
        "    return [x * x for x in chunk], os.getpid()\n"
        "out = list(X.map_chunks(square, list(range(64)), jobs=2))\n"
        "print('RESULT', sum(sum(v) for v, _ in out), len({p for _, p in out} - {os.getpid()}))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=180, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("START") == 1, done.stdout  # the script ran once
    result = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT")]
    assert result == [f"RESULT {sum(x * x for x in range(64))} " + result[0].split()[-1]]
    assert int(result[0].split()[-1]) >= 1  # computed in worker processes
    assert "Traceback" not in done.stderr and "Warning" not in done.stderr, done.stderr
