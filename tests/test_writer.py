"""Unit tests of the run writer's encodings and protocol details."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from rivumi_analysis.synth.scenarios import CATALOG, get_script, run_script
from rivumi_analysis.synth.writer import (
    Ids,
    RunWriter,
    VirtualClock,
    add_usage,
    fmt_ts,
    zero_usage,
)


def _writer(tmp_path: Path, hook=None, profile: str = "current") -> RunWriter:
    clock = VirtualClock(datetime(2026, 9, 1, 12, 0, 0, 5, tzinfo=UTC), seed=1)
    return RunWriter(tmp_path / "r1", profile=profile, clock=clock, ids=Ids(1), hook=hook)


REQ = {"allowed_paths": ["**"], "instruction": "x", "repository": "/r", "task_id": "t1",
       "limits": {"max_steps": 3}, "verification": [{"argv": ["true"], "name": "c"}]}


def test_timestamp_format() -> None:
    assert fmt_ts(datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01T00:00:00Z"
    assert fmt_ts(datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=UTC)) == "2026-01-01T00:00:00.000001Z"


def test_usage_sum_uses_computed_totals() -> None:
    u = add_usage(zero_usage(), {"input_tokens": 10, "output_tokens": 5, "cached_input_tokens": 0,
                                 "reasoning_tokens": 0, "provider_total_tokens": None})
    assert u["provider_total_tokens"] == 15


def test_manifest_saved_before_append_and_log_created_lazily(tmp_path: Path) -> None:
    seen: list[tuple[str, int | None, bool, int]] = []

    def hook(point: str, seq: int | None, etype: str | None) -> None:
        rd = tmp_path / "r1"
        exists = (rd / "events.jsonl").exists()
        m = json.loads((rd / "session.json").read_text()) if (rd / "session.json").exists() else {}
        seen.append((point, seq, exists, m.get("last_event_sequence", -99)))

    w = _writer(tmp_path, hook)
    w.create(run_id="r1", request=REQ, provider="p", model="m", protocol="scripted",
             prompt_version="v", base_sha="a" * 40, workspace=False)
    saved = [s for s in seen if s[0] == "manifest_saved"]
    assert saved == [("manifest_saved", 0, False, 0)]
    assert ("appended", 0, True, 0) in seen
    lock = (tmp_path / "r1/.writer.lock").read_text()
    assert lock.startswith("pid=4242 token=") and lock.endswith("\n")
    m = json.loads((tmp_path / "r1/session.json").read_text())
    assert m["active_writer_token"] == lock.strip().split("token=")[1]


def test_atomic_write_temp_names_and_no_leftovers(tmp_path: Path) -> None:
    names: list[str] = []

    def hook(point: str, seq: int | None, etype: str | None) -> None:
        if point.startswith("temp_written"):
            names.extend(n for n in os.listdir(tmp_path / "r1") if n.startswith("."))

    w = _writer(tmp_path, hook)
    w.create(run_id="r1", request=REQ, provider="p", model="m", protocol="scripted",
             prompt_version="v", base_sha="a" * 40)
    assert any(n.startswith(".session.json.") and len(n) == len(".session.json.") + 8
               for n in names)
    assert sorted(os.listdir(tmp_path / "r1")) == [".writer.lock", "events.jsonl",
                                                   "request.json", "session.json"]


def test_session_excludes_computed_fields_events_include_them(tmp_path: Path) -> None:
    rd = Path(run_script(get_script("lanes", 1), str(tmp_path)))
    m = json.loads((rd / "session.json").read_text("utf-8"))
    assert "total_tokens" not in m["usage"]
    assert all("total_tokens" not in r["usage"] and
               (r["cost"] is None or "total_cost" not in r["cost"]) for r in m["model_usage"])
    assert {r["lane"] for r in m["model_usage"]} == {"primary", "reviewer"}
    res = json.loads((rd / "result.json").read_text("utf-8"))
    assert "total_tokens" in res["usage"]
    lines = [json.loads(x) for x in (rd / "events.jsonl").read_text("utf-8").splitlines()]
    lane = next(e for e in lines if e["event_type"] == "role_lane.completed")
    assert "total_cost" in lane["data"]["cost"] and "total_tokens" in lane["data"]["usage"]
    raw = (rd / "events.jsonl").read_bytes().split(b"\n")[0]
    assert raw.startswith(b'{"created_at":') and b", " not in raw[:60]


def test_fork_run_encoding(tmp_path: Path) -> None:
    rd = Path(run_script(get_script("fork", 1), str(tmp_path)))
    assert rd.name.startswith("fork-")
    ev = (rd / "events.jsonl").read_text("utf-8")
    assert ev.startswith('{"event_type":"run.forked","run_id":') and ev.endswith("}\n")
    assert ev.count("\n") == 1
    sess = (rd / "session.json").read_text("utf-8")
    assert sess.startswith('{"schema_version":1,"run_id":') and sess.endswith("}\n")
    assert '"total_tokens":0}' in sess
    req = (rd / "request.json").read_text("utf-8")
    assert req.startswith('{"repository":') and req.endswith("}\n")


def test_external_run_encoding(tmp_path: Path) -> None:
    rd = Path(run_script(get_script("external", 1), str(tmp_path)))
    assert not (rd / "session.json").exists()
    first = (rd / "events.jsonl").read_text("utf-8").splitlines()[0]
    assert first.startswith('{"data": {') and '"sequence": 0' in first
    assert (rd / "backend-result.json").exists()


def test_repeat_guard_trip_emits_nothing_for_the_third_call(tmp_path: Path) -> None:
    rd = Path(run_script(get_script("repeated_action", 0), str(tmp_path)))
    evs = [json.loads(x) for x in (rd / "events.jsonl").read_text("utf-8").splitlines()]
    assert evs[-1]["event_type"] == "run.failed"
    assert evs[-1]["data"]["terminal_reason"] == "repeated_action"
    assert evs[-2]["event_type"] == "model.completed"
    assert json.loads((rd / "session.json").read_text("utf-8"))["repeat_count"] == 3


def test_resume_charges_downtime_and_abandons(tmp_path: Path) -> None:
    rd = Path(run_script(get_script("resume", 2), str(tmp_path)))  # m4 profile, dies in approval
    evs = [json.loads(x) for x in (rd / "events.jsonl").read_text("utf-8").splitlines()]
    types = [e["event_type"] for e in evs]
    i = types.index("session.resumed")
    assert types[i + 1] == "approval.abandoned" and types[i - 1] == "approval.requested"
    m = json.loads((rd / "session.json").read_text("utf-8"))
    start = datetime.fromisoformat(evs[0]["created_at"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(evs[-1]["created_at"].replace("Z", "+00:00"))
    assert m["active_wall_time_seconds"] >= (end - start).total_seconds() - 1


def test_continuation_has_two_terminal_events(tmp_path: Path) -> None:
    rd = Path(run_script(get_script("continuation", 1), str(tmp_path)))
    types = [json.loads(x)["event_type"] for x in (rd / "events.jsonl").read_text().splitlines()]
    assert types.count("run.completed") == 2 and "session.continued" in types


def test_every_scenario_is_deterministic(tmp_path: Path) -> None:
    for name in CATALOG:
        a = run_script(get_script(name, 3), str(tmp_path / "a"))
        b = run_script(get_script(name, 3), str(tmp_path / "b"))
        for dirpath, _, files in os.walk(a):
            for f in files:
                pa = Path(dirpath, f)
                pb = Path(b) / pa.relative_to(a)
                assert pa.read_bytes() == pb.read_bytes(), (name, f)


def test_corpus_fast_mode_runs_are_consistent(tmp_path: Path) -> None:
    from rivumi_analysis.synth.corpus import generate_corpus, generate_single_log

    total = generate_corpus(str(tmp_path / "c"), runs=12, target_mb=1.2, workers=1)
    assert 0.6e6 < total < 2.5e6
    again = generate_corpus(str(tmp_path / "d"), runs=12, target_mb=1.2, workers=1)
    assert again == total
    rd = Path(generate_single_log(str(tmp_path / "big"), log_mb=1.0))
    assert (rd / "events.jsonl").stat().st_size > 0.9e6
    try:
        from rivumi_analysis.fleet_audit import audit
    except ImportError:
        return
    verdicts = {r["verdict"] for r in audit(str(tmp_path / "c")).runs}
    # crashes (resumable), torn tails and emit races (corrupt), forks (not_resumable)
    assert verdicts <= {"terminal", "resumable", "corrupt", "not_resumable"}
    assert {r["verdict"] for r in audit(str(tmp_path / "big")).runs} == {"terminal"}
