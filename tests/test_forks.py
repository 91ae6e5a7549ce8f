"""Tests of forks_df (issue 4, deliverable 5)."""

from __future__ import annotations

from rivumi_analysis.tables.forks import forks_df
from tests.test_replay_helpers import Log, manifest, write_run


def test_fork_link_and_last_safe_points(tmp_path):
    src = Log("srcrun").add("run.created").model(1).tool("a", "read_file", {"p": 1})
    src.add("tool.requested", tool_call_id="b", name="shell", effect="execute",
            arguments={"c": 1})
    src.add("tool.started", tool_call_id="b", name="shell", effect="execute")
    src.add("run.error", error_type="X", error="boom").add("run.failed", terminal_reason="e")
    write_run(tmp_path, "srcrun", src, manifest(run_id="srcrun"))
    fork = Log("forkrun").add("run.forked", source_run_id="srcrun", fork_point_sequence=5,
                              fork_point_event_type="tool.completed", events_included=6,
                              side_effects_replayed=False, workspace="workspace", base_sha="x")
    write_run(tmp_path, "forkrun", fork, manifest(run_id="forkrun", provider_name="fork"))
    crash = Log("crashrun").add("run.created").model(1)
    crash.add("tool.requested", tool_call_id="z", name="shell", effect="execute",
              arguments={}).add("tool.started", tool_call_id="z", name="shell", effect="execute")
    write_run(tmp_path, "crashrun", crash, manifest(run_id="crashrun", terminal=False,
                                                   phase="running"))
    df = forks_df(str(tmp_path))
    link = df.filter(df["row_kind"] == "fork_link").to_dicts()
    assert len(link) == 1
    assert link[0]["source_run_dir"].endswith("srcrun") and link[0]["fork_point_matches"]
    src_rows = df.filter((df["row_kind"] == "candidate") & (df["run_id"] == "srcrun"))
    marked = src_rows.filter(src_rows["last_safe_before"].is_not_null()).to_dicts()
    # seq 6 tool.requested is the last safe point before run.error (seq 8): 7 is in flight.
    assert [(r["sequence"], r["last_safe_before"], r["failure_sequence"]) for r in marked] == [
        (6, "failure", 8)]
    crash_rows = df.filter((df["row_kind"] == "candidate") & (df["run_id"] == "crashrun"))
    marked = crash_rows.filter(crash_rows["last_safe_before"].is_not_null()).to_dicts()
    assert [(r["sequence"], r["last_safe_before"], r["failure_sequence"]) for r in marked] == [
        (3, "crash", 4)]
    assert crash_rows["fork_accepted"].all()


def test_sample_run_forks_link_to_their_sources():
    from pathlib import Path

    import pytest

    root = Path(__file__).resolve().parents[1] / "sample_runs" / "forks"
    if not root.is_dir():  # pragma: no cover
        pytest.skip("sample_runs not generated")
    df = forks_df(str(root))
    links = df.filter(df["row_kind"] == "fork_link")
    assert links.height == 3
    assert links["source_found"].all() and links["fork_point_matches"].all()
    assert all(Path(d).name.startswith("fork-") for d in links["run_dir"])
    # every fork point the runner chose is one of the source's candidate rows or an in-flight
    # point; the candidates of the sources are replay-accepted
    cands = df.filter((df["row_kind"] == "candidate") & (df["kind"] == "native"))
    assert cands.height > 0 and cands["fork_accepted"].all()
