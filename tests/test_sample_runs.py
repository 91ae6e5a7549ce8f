"""sample_runs/ regenerates byte for byte and covers every scenario, kind and verdict."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rivumi_analysis.synth.scenarios import CATALOG, SAMPLE_PLAN, generate_sample_runs

ROOT = Path(__file__).resolve().parents[1] / "sample_runs"

pytestmark = [pytest.mark.crash, pytest.mark.timeout(240)]  # the catalog has real kills


def _tree(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, dirs, names in os.walk(root):
        if Path(dirpath) == root and "relayflowd" in dirs:  # relay catalog: test_relay_catalog
            dirs.remove("relayflowd")
        for n in names:
            p = Path(dirpath, n)
            out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A different folder name: nothing written may depend on where the runs are generated.
    out = tmp_path_factory.mktemp("regen") / "elsewhere"
    generate_sample_runs(str(out))
    return out


def test_regeneration_is_byte_identical(regenerated: Path) -> None:
    assert ROOT.is_dir(), "run: python -m rivumi_analysis.synth.scenarios --out sample_runs"
    committed, fresh = _tree(ROOT), _tree(regenerated)
    assert sorted(committed) == sorted(fresh)
    differing = [k for k in committed if committed[k] != fresh[k]]
    assert not differing, differing[:10]


def test_size_and_count() -> None:
    runs = [p for g in ROOT.iterdir() if g.is_dir() and g.name != "relayflowd"
            for p in g.iterdir() if p.is_dir()]
    assert 60 <= len(runs) <= 150
    total = sum(len(b) for b in _tree(ROOT).values())
    assert total < 15 * 1024 * 1024


def test_every_scenario_is_sampled() -> None:
    planned = {name for _, name, _ in SAMPLE_PLAN}
    assert set(CATALOG) <= planned | {"verified"}


def test_every_verdict_and_kind() -> None:
    from rivumi_analysis.fleet_audit import audit

    res = audit(str(ROOT))
    verdicts = {r["verdict"] for r in res.runs}
    kinds = {r["kind"] for r in res.runs}
    assert {"resumable", "resync", "side_effect_uncertain", "terminal", "corrupt",
            "not_resumable"} <= verdicts
    assert {"native", "fork", "subagent", "external"} <= kinds
    assert "error" not in verdicts
