"""Differential test: the toolkit against an independent oracle of the runner (issue 11).

Seeded mutations of every sample run and of the shared example (``tests/differential/
mutations.py``) are compared with ``tests/differential/runner_oracle.py``, a from-the-spec
re-implementation of the runner's resume (§8.1, §8.2–§8.4), replay and fork seeds (§9,
§9.8). Each case checks the audit verdict, ``readers_disagree``, ``replay --json``, the
audit's ``replay_accepts``/``replay_error`` against the toolkit's own replay, and fork seeds.
``scripts/differential.py`` runs thousands of the same cases and prints agreement per family.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.differential import runner_oracle as oracle
from tests.differential.compare import compare_run
from tests.differential.mutations import FAMILIES, cases, load_sources

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.differential

SEED = 20261201
PER_FAMILY = 40  # x 7 families = 280 cases in CI

_SOURCES = None


def _sources():
    global _SOURCES
    if _SOURCES is None:
        _SOURCES = load_sources(ROOT / "sample_runs", ROOT / "tests" / "fixtures" / "example")
    return _SOURCES


def _run_family(family: str, tmp_path: Path) -> list[str]:
    failures = []
    for k, mut in cases(_sources(), SEED, PER_FAMILY, (family,)):
        run_dir = mut.write(tmp_path / f"c{k}" / mut.source.rsplit("/", 1)[-1])
        res = compare_run(run_dir, fork=k % 2 == 0)
        if not res.ok:
            bad = [a for a, ok in res.aspects.items() if not ok]
            failures.append(f"case {k} {mut.name} from {mut.source}: {bad} "
                            f"{json.dumps(res.details, default=str)[:600]}")
    return failures


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_toolkit_agrees_with_the_runner_oracle(family: str, tmp_path: Path) -> None:
    failures = _run_family(family, tmp_path)
    assert not failures, f"{len(failures)} disagreement(s):\n" + "\n".join(failures[:10])


def test_every_unmutated_source_agrees(tmp_path: Path) -> None:
    """The baseline: every sample run and the example, as shipped, agree on every aspect."""
    from tests.differential.mutations import Mutation

    for src in _sources():
        run_dir = Mutation("none", "none", src.files, src.label).write(
            tmp_path / src.label.replace("/", "_") / src.name)
        res = compare_run(run_dir, fork=False)
        assert res.ok, (src.label, res.aspects, res.details)


def test_the_oracle_reads_like_resume_and_replay() -> None:
    """The oracle itself: splitlines, Unicode strip, unstripped validation, byte-level replay."""
    ev = ('{"created_at":"2026-08-20T21:02:47Z","data":{},"event_id":"e","event_type":"a",'
          '"run_id":"r","sequence":%d,"task_id":"t"}')
    joined = (ev % 0) + "\u2028" + (ev % 1) + "\n"
    assert [e.sequence for e in _resume_events(joined)] == [0, 1]
    ok, msg = oracle.replay_outcome(joined.encode())
    assert not ok and msg == "event JSONL line 1 is not valid JSON"
    assert _resume_events("\u00a0\n" + ev % 0 + "\r \n") is not None
    ok, msg = oracle.replay_outcome(("\u00a0\n" + ev % 0 + "\n").encode())
    assert (ok, msg) == (False, "event JSONL line 1 is not valid JSON")
    hour24 = (ev % 0).replace("21:02:47Z", "24:00:00Z") + "\n"
    assert _resume_events(hour24) is None
    assert oracle.replay_outcome(hour24.encode())[0]


def _resume_events(text: str):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d, "events.jsonl")
        p.write_bytes(text.encode("utf-8", "surrogatepass"))
        events, err = oracle.resume_read_events(p)
        return None if err else events


def test_fast_and_exact_paths_agree_on_mutations(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every speed path (the line decoder's msgspec path, the columnar engine selected by
    ``RIVUMI_ENGINE``) gives the exact path's audit record and tables on mutated runs."""
    from rivumi_analysis import events_df, quarantine_df
    from rivumi_analysis.audit import audit_run
    from rivumi_analysis.read import decode

    runs = []
    for k, mut in cases(_sources(), SEED + 1, 70):
        runs.append(str(mut.write(tmp_path / f"c{k}" / mut.source.rsplit("/", 1)[-1])))

    def snapshot() -> list[tuple]:
        out = []
        for run in runs:
            rec = audit_run(run)
            out.append((rec, events_df(run).rows(),
                        quarantine_df(run).rows()))
        return out

    monkeypatch.setenv("RIVUMI_ENGINE", "auto")
    fast = snapshot()
    monkeypatch.setenv("RIVUMI_ENGINE", "exact")
    monkeypatch.setattr(decode, "FAST_PATH", False)
    exact = snapshot()
    for run, a, b in zip(runs, fast, exact, strict=True):
        assert a == b, run
