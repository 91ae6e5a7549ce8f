"""sample_runs/relayflowd: the committed catalog audits as the spec says, and a regeneration
(real SIGKILLs, 8 racing threads) gives the same audit records (SQLite bytes are not
reproducible: WAL salts are random)."""

from __future__ import annotations

import pytest

from rivumi_analysis.relay import relay_audit

from .conftest import SAMPLE_RUNS
from .relay_helpers import snapshot

CATALOG = SAMPLE_RUNS / "relayflowd"


@pytest.fixture(scope="module")
def committed():
    assert CATALOG.is_dir(), "run: python -m rivumi_analysis.synth.relay_scenarios " \
                             "sample_runs/relayflowd"
    before = snapshot(CATALOG)
    doc = relay_audit([str(CATALOG)])
    assert snapshot(CATALOG) == before  # auditing never changes the evidence
    return doc


def test_regeneration_gives_the_same_records(committed, relay_catalog):
    fresh = relay_audit([relay_catalog["root"]])
    assert fresh["journals"] == committed["journals"]
    assert fresh["skipped"] == committed["skipped"] == []


def test_committed_catalog_verdicts(committed):
    by = {r["path"]: r for r in committed["journals"]}
    assert len(by) == 4 * 2 + 3 + 25 + 6
    for path, rec in by.items():
        assert rec["quarantined"] == 0, path
        if path.startswith("violations/"):
            rule = path.split("/")[1]
            assert {v["rule"] for v in rec["violations"]} == {rule}, path
        else:
            assert rec["verdict"] == "consistent", path
    kinds = {r["source_kind"] for r in by.values()}
    assert kinds == {"sqlite", "jsonl", "replay_json", "journal_read"}
    # the three dumps of one journal agree with each other and with the SQLite original
    crash = next(r for p, r in by.items() if p.startswith("crash/delivery/resumed/"))
    for shape in ("envelopes", "replay_json", "journal_read"):
        dump = by[f"dumps/crash-delivery.{shape}.jsonl"]
        assert {k: v for k, v in dump.items() if k not in ("path", "source_kind")} == {
            k: v for k, v in crash.items() if k not in ("path", "source_kind")}
