"""The audit over a clean log's columns equals the audit over per-event objects (the oracle).

``read_run(clean=True)`` keeps a clean native log as columns (``read.cleanlog``) and the
verdict rules, the line accounting and the replay proof read those columns; the exact path
builds a ``Line`` and an ``Event`` per line and walks resume's pieces. The records must be
identical (verdict, reasons, warnings, messages, line accounting, replay answer): on every
sample run, at every newline cut of the shared example (the other cuts are never clean), and
on 400 generated logs built from the example's real lines with the mutations of
``tests/test_columnar.py`` (many of them only just fail the clean checks), renumbered or not,
with drifting ids, odd tails and manifests that are behind, level or ahead.
"""

from __future__ import annotations

import atexit
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rivumi_analysis.audit import record_from_run
from rivumi_analysis.fleet_audit import audit
from rivumi_analysis.read import columnar as _columnar
from rivumi_analysis.read.cleanlog import CleanLog, clean_log
from rivumi_analysis.read.discovery import discover
from rivumi_analysis.read.snapshot import read_run
from rivumi_analysis.resume import decide
from tests.conftest import EXAMPLE_DIR, SAMPLE_RUNS, example_events, example_request, examples
from tests.oracles.resume_objects import decide as oracle_decide
from tests.test_columnar import LINES, MUTATIONS, _mutate


def records(run_dir: str, **kw: Any) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """(exact record, record from the columns, whether the log was read as columns)."""
    exact_read = read_run(run_dir, **kw)
    exact = record_from_run(exact_read)
    run = read_run(run_dir, clean=True, **kw)
    # the rules run once, over columns, for both readings: each verdict equals the oracle's
    # over event objects (tests/oracles/resume_objects.py)
    want = oracle_decide(exact_read)
    assert decide(exact_read) == want, run_dir
    assert decide(run) == want, run_dir
    return exact, record_from_run(run), isinstance(run.fast, CleanLog)


def test_every_sample_run() -> None:
    taken = 0
    for loc in discover(str(SAMPLE_RUNS)).runs:
        exact, fast, was_clean = records(loc.run_dir, is_subagent=loc.is_subagent,
                                         parent_run_dir=loc.parent_run_dir)
        assert fast == exact, loc.run_dir
        taken += was_clean
    assert taken > 70  # most sample runs are clean; the odd ones take the exact path


def test_engine_exact_never_reads_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_columnar.ENGINE_ENV, "exact")
    assert read_run(str(EXAMPLE_DIR), clean=True).fast is None
    monkeypatch.setenv(_columnar.ENGINE_ENV, "fast")
    assert isinstance(read_run(str(EXAMPLE_DIR), clean=True).fast, CleanLog)


def test_audit_api_equal_under_both_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_columnar.ENGINE_ENV, "exact")
    ref = audit(str(SAMPLE_RUNS), jobs=1, cache=False)
    monkeypatch.setenv(_columnar.ENGINE_ENV, "fast")
    assert audit(str(SAMPLE_RUNS), jobs=1, cache=False) == ref


# --- the example, cut and mutated ---------------------------------------------------------------

_TMP = Path(tempfile.mkdtemp(prefix="rivumi-cleanlog-"))  # hypothesis reuses it across examples
atexit.register(shutil.rmtree, _TMP, True)
_RUN = _TMP / EXAMPLE_DIR.name


def _write(events: bytes, manifest_shift: int | None = 0, terminal: bool = False) -> str:
    """The example run with ``events`` and a manifest ``manifest_shift`` ahead of the log's
    last sequence (None: the example's own manifest)."""
    if not _RUN.exists():
        shutil.copytree(EXAMPLE_DIR, _RUN)
        (_RUN / "request.json").write_text(json.dumps(example_request()))
    (_RUN / "events.jsonl").write_bytes(events)
    manifest = json.loads((EXAMPLE_DIR / "session.json").read_text("utf-8"))
    if manifest_shift is not None:
        seqs = [int(m) for m in re.findall(rb'"sequence":(\d+)', events)]
        manifest.update(phase="completed" if terminal else "running", terminal=terminal,
                        last_event_sequence=(seqs[-1] if seqs else -1) + manifest_shift)
    (_RUN / "session.json").write_text(json.dumps(manifest))
    return str(_RUN)


def test_every_cut_of_the_example() -> None:
    data = example_events()
    taken = 0
    for cut in range(len(data) + 1):
        piece = data[:cut]
        if not piece.endswith(b"\n"):
            assert clean_log(piece) is None  # a torn tail is never clean
            continue
        for shift in (None, 0, 1):
            exact, fast, was_clean = records(_write(piece, shift))
            assert fast == exact, (cut, shift)
            taken += was_clean
    assert taken == 3 * len(LINES)


def _drift(line: bytes, key: bytes) -> bytes:
    return re.sub(rb'"' + key + rb'":"[^"]*"', b'"' + key + b'":"other-id"', line, count=1)


# verdict-level mutations that keep a log clean (and a few that do not)
VERDICT_MUTATIONS = {
    "run_id_drift": lambda ln: _drift(ln, b"run_id"),
    "task_id_drift": lambda ln: _drift(ln, b"task_id"),
    "task_id_null": MUTATIONS["task_id_null"],
    "tool_started": lambda ln: re.sub(rb'"event_type":"[^"]*"', b'"event_type":"tool.started"',
                                      ln, count=1),
    "approval_requested": lambda ln: re.sub(
        rb'"event_type":"[^"]*"', b'"event_type":"approval.requested"', ln, count=1),
    "run_completed": lambda ln: re.sub(rb'"event_type":"[^"]*"', b'"event_type":"run.completed"',
                                       ln, count=1),
    "sequence_7": lambda ln: re.sub(rb'"sequence":\d+', b'"sequence":7', ln, count=1),
    "brackets_in_run_id": lambda ln: ln.replace(b'"run_id":"', b'"run_id":"' + b"[" * 250, 1),
    # ids a provider numbers per reply: duplicate_tool_call_id / duplicate_request_id
    "tool_call_id_reused": lambda ln: re.sub(rb'"tool_call_id":"[^"]*"', b'"tool_call_id":"call_0"',
                                             ln, count=1),
    "request_id_reused": lambda ln: re.sub(rb'"request_id":"[^"]*"', b'"request_id":"r0"', ln,
                                           count=1),
}
_ALL = {**MUTATIONS, **VERDICT_MUTATIONS}


def _apply(name: str, line: bytes) -> bytes:
    if name in VERDICT_MUTATIONS:
        return VERDICT_MUTATIONS[name](line)
    return _mutate(name, line)


_MUTATION = st.one_of(st.just("none"), st.just("none"), st.sampled_from(sorted(MUTATIONS)),
                      st.sampled_from(sorted(VERDICT_MUTATIONS)))


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(LINES) - 1), _MUTATION), min_size=1, max_size=10),
       _MUTATION, st.booleans(), st.sampled_from([None, -1, 0, 1, 2]), st.booleans())
def test_generated_logs(picks: list[tuple[int, str]], tail_mutation: str, renumber: bool,
                        shift: int | None, terminal: bool) -> None:
    out = []
    for seq, (i, name) in enumerate(picks):
        line = LINES[i]
        if renumber:
            line = line.replace(f'"sequence":{i},'.encode(), f'"sequence":{seq},'.encode(), 1)
        out.append(_apply(name, line))
    out[-1] = _apply(tail_mutation, out[-1])
    exact, fast, _was_clean = records(_write(b"".join(out), shift, terminal))
    assert fast == exact


def test_verdict_mutations_stay_clean_and_equal() -> None:
    """The verdict-level mutations are read as columns (so the rules above are exercised),
    except 250 brackets in a run id (over the per-line bracket bound: the exact path)."""
    body = LINES[:12]
    for name, mut in VERDICT_MUTATIONS.items():
        for where in (0, 5, 11):
            lines = list(body)
            lines[where] = mut(lines[where])
            exact, fast, was_clean = records(_write(b"".join(lines), 0))
            assert fast == exact, (name, where)
            assert was_clean == (name != "brackets_in_run_id"), name


def _audit_reading_documents_whole(loc: Any) -> Any:
    """The oracle of ``whole_docs``: the audit's reading (``read_run(clean=True)``) with
    ``session.json`` parsed whole afterwards (``checkpoint.json`` and ``result.json`` as the
    audit reads them: no table reads another of their keys)."""
    import dataclasses

    from rivumi_analysis.read.snapshot import _parse_json_doc

    run = read_run(loc.run_dir, is_subagent=loc.is_subagent, parent_run_dir=loc.parent_run_dir,
                   source_root=loc.source_root, clean=True)
    if _columnar.engine() == "exact":  # every document parsed whole already
        return run
    files, manifest = run.files, run.manifest
    if run.manifest_model is not None:
        doc, _err = _parse_json_doc(files["session.json"])
        manifest = doc if isinstance(doc, dict) else manifest
    return dataclasses.replace(run, manifest=manifest)


def test_whole_docs_reads_what_the_store_reads(tmp_path: Path) -> None:
    """``read_run(clean=True, whole_docs=True)`` (the store's reading mode) gives the
    audit's reading with ``session.json`` parsed whole afterwards: the manifest whole, the
    manifest twin where it accepts the bytes, checkpoint and result as the audit reads them,
    the same kind, run id and clean log; on every
    sample run, with damaged manifests, checkpoints and results. The store reads so
    (``store.build.read_for_tables``)."""
    from rivumi_analysis.store.build import read_for_tables

    copy = tmp_path / "runs"
    shutil.copytree(SAMPLE_RUNS, copy)
    locs = discover(str(copy)).runs
    edits = {"session.json": [b"", b"[1]", b"{", b'{"run_id":"x"}', b'{"provider_name":"fork"}'],
             "checkpoint.json": [b'{"backend_name":"b","resumable":false}', b"{", b"7"],
             "result.json": [b"{", b'{"status":"done"}']}
    k = 0
    for name, docs in edits.items():
        for doc in docs:
            (Path(locs[k].run_dir) / name).write_bytes(doc)
            k += 3
    fields = ("manifest", "manifest_error", "result", "checkpoint", "kind", "run_id", "lines",
              "events", "files", "listing", "manifest_model", "request", "backend_result")
    clean = 0
    for loc in locs:
        want = _audit_reading_documents_whole(loc)
        got = read_run(loc.run_dir, is_subagent=loc.is_subagent,
                       parent_run_dir=loc.parent_run_dir, source_root=loc.source_root,
                       clean=True, whole_docs=True)
        store = read_for_tables(loc)
        for f in fields:
            assert getattr(got, f) == getattr(want, f) == getattr(store, f), (loc.run_dir, f)
        assert type(got.fast) is type(want.fast) is type(store.fast)
        clean += isinstance(got.fast, CleanLog) and got.manifest_model is not None
    assert clean  # the twin and the columns are exercised
