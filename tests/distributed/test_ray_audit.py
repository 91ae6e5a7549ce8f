"""The audit on Ray equals the process engine's, on one node, on two nodes, and under faults."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rivumi_analysis.audit import RECORD_FIELDS
from rivumi_analysis.distributed import RayAuditResult, audit, make_chunks
from rivumi_analysis.distributed._tasks import FAULT_ENV
from rivumi_analysis.fleet_audit import audit as local_audit

from .conftest import two_node_cluster

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_RUNS = ROOT / "sample_runs"

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


def as_json(result: Any) -> str:
    return json.dumps(result.to_json_obj(), ensure_ascii=False, indent=1)


@pytest.fixture(scope="module")
def sample_expected() -> str:
    return as_json(local_audit(SAMPLE_RUNS, jobs=1))


def test_sample_runs_equal_process_engine(ray_local: Any, sample_expected: str) -> None:
    res = audit(SAMPLE_RUNS, engine="ray", runs_per_task=8)
    assert isinstance(res, RayAuditResult)
    assert as_json(res) == sample_expected
    s = res.summary
    assert s is not None and s.failures == ()
    assert s.chunks == s.chunks_done == math.ceil(len(res.runs) / 8)
    assert s.runs == len(res.runs) and s.bytes > 0


def test_corpus_equals_process_engine(ray_local: Any, corpus_2k: str) -> None:
    expected = local_audit(corpus_2k, jobs=2)
    n = len(expected.runs)
    assert n >= 2000  # 2,000 generated runs plus the forks the corpus makes of some
    seen: list[tuple[int, int, int, int]] = []
    res = audit(corpus_2k, engine="ray", runs_per_task=128,
                on_chunk=lambda *a: seen.append(a))
    assert as_json(res) == as_json(expected)
    chunks = math.ceil(n / 128)
    assert [d for d, *_ in seen] == list(range(1, chunks + 1))
    assert {t for _d, t, _n, _b in seen} == {chunks}
    assert sum(r for _d, _t, r, _b in seen) == n


def test_relative_paths_give_the_same_records(ray_local: Any, monkeypatch: pytest.MonkeyPatch,
                                          sample_expected: str) -> None:
    monkeypatch.chdir(ROOT)
    res = audit("sample_runs/completed", engine="ray", runs_per_task=5)
    assert as_json(res) == as_json(local_audit("sample_runs/completed", jobs=1))
    # run_dir is the resolved source joined with the path below it (issue 16), either engine
    top = os.path.realpath("sample_runs/completed") + "/"
    assert all(r["run_dir"].startswith(top) for r in res.runs)


def test_cli_engine_ray_prints_the_same_json(ray_local: Any, capsys: pytest.CaptureFixture[str],
                                             sample_expected: str) -> None:
    from rivumi_analysis.cli import main

    rc_p = main(["audit", str(SAMPLE_RUNS), "--format", "json", "--no-cache"])
    out_p = capsys.readouterr().out
    rc_r = main(["audit", str(SAMPLE_RUNS), "--format", "json", "--engine", "ray",
                 "--runs-per-task", "16"])
    captured = capsys.readouterr()
    assert (rc_r, captured.out) == (rc_p, out_p)
    assert json.loads(captured.out) == json.loads(sample_expected)
    n = math.ceil(len(json.loads(sample_expected)["runs"]) / 16)
    assert f"ray: {n}/{n} chunks" in captured.err


def test_audit_dataset_rows_are_the_records(ray_local: Any, sample_expected: str) -> None:
    import pyarrow as pa

    from rivumi_analysis.distributed import audit_dataset

    ds = audit_dataset(SAMPLE_RUNS, runs_per_task=32)
    table = pa.concat_tables(list(ds.iter_batches(batch_size=None, batch_format="pyarrow")))
    assert table.column_names == list(RECORD_FIELDS)
    rows = sorted(table.to_pylist(), key=lambda r: r["run_dir"])
    assert rows == json.loads(sample_expected)["runs"]


def test_killed_worker_is_retried_no_lost_no_duplicated_runs(
        ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        sample_expected: str) -> None:
    marker = tmp_path / "killed"
    monkeypatch.setenv(FAULT_ENV, f"kill-once:{marker}")
    res = audit(SAMPLE_RUNS, engine="ray", runs_per_task=16)
    assert marker.exists()  # one worker really died (os._exit) after auditing its chunk
    killed_key = marker.read_text()
    assert res.summary is not None and res.summary.failures == ()
    assert killed_key in {c.key for c in make_chunks(_locs(res), 16)}
    dirs = [r["run_dir"] for r in res.runs]
    assert len(dirs) == len(set(dirs))
    assert as_json(res) == sample_expected


def test_chunk_that_keeps_failing_is_reported_with_its_runs(
        ray_local: Any, monkeypatch: pytest.MonkeyPatch, sample_expected: str) -> None:
    expected = {r["run_dir"]: r for r in json.loads(sample_expected)["runs"]}
    victim = next(d for d in expected if "/crashes/" in d)
    monkeypatch.setenv(FAULT_ENV, f"kill-always:{victim}")
    res = audit(SAMPLE_RUNS, engine="ray", runs_per_task=16,
                ray_remote_args={"max_retries": 1})
    assert res.summary is not None
    [failure] = res.summary.failures
    assert victim in failure.run_dirs and len(failure.run_dirs) == 16
    assert "after 2 attempts" in failure.message
    assert res.summary.chunks_done == res.summary.chunks - 1
    assert victim in res.summary.text()
    got = {r["run_dir"]: r for r in res.runs}
    assert got.keys() == expected.keys()  # never silently dropped
    for d, rec in got.items():
        if d in failure.run_dirs:
            assert (rec["verdict"], rec["reasons"]) == ("error", ["internal_error"])
            assert failure.key in rec["message"]
        else:
            assert rec == expected[d]


def _locs(res: Any) -> list[Any]:
    from rivumi_analysis.read.discovery import RunLocation

    return [RunLocation(r["run_dir"], r["kind"] == "subagent", r["parent_run_dir"])
            for r in res.runs]


DRIVER = """
import json, sys
from rivumi_analysis.distributed import audit
res = audit(sys.argv[1], engine="ray", runs_per_task=8, ray_init={"_node_ip_address": sys.argv[2]},
            ray_remote_args={"resources": {"rivumi_worker": 1}})
import ray
nodes = [n for n in ray.nodes() if n["Alive"]]
print(json.dumps({"nodes": len(nodes), "audit": res.to_json_obj(),
                  "failures": len(res.summary.failures)}))
"""


@pytest.mark.slow
def test_two_node_cluster_equals_process_engine(sample_expected: str) -> None:
    """A real cluster from ``ray start`` (head + a second node with its own resource); the
    driver is a separate process that finds it through ``RAY_ADDRESS``. Every task needs the
    second node's resource, so all chunks ran there."""
    from .conftest import LOOPBACK

    with two_node_cluster() as env:
        proc = subprocess.run([sys.executable, "-c", DRIVER, str(SAMPLE_RUNS), LOOPBACK],
                              env=env, capture_output=True, text=True, timeout=180, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["nodes"] == 2 and out["failures"] == 0
    assert out["audit"] == json.loads(sample_expected)
