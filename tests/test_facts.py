"""The run facts (``tables.facts``) against ground truth: what the synthetic writer was told
to write (the script's ops), never our own tables. Runs with and without ``session.json``
and ``result.json``, wind-down and reviewer lanes, the token-budget crossing call,
continuations, resumes, interrupted and crashed runs, forks, external runs and folders that
cannot be listed."""

from __future__ import annotations

import copy
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from rivumi_analysis.errors import OUTCOMES, EmptySourceWarning
from rivumi_analysis.synth.scenarios import get_script, run_script
from rivumi_analysis.tables.facts import run_facts
from rivumi_analysis.tables.runs import runs_df


def _total(u: dict[str, Any]) -> int:
    """Computed ``Usage.total_tokens`` of a usage the script handed the writer (§4.3)."""
    full = {"input_tokens": 0, "output_tokens": 0, "provider_total_tokens": None, **u}
    if full["provider_total_tokens"] is not None:
        return int(full["provider_total_tokens"])
    return int(full["input_tokens"]) + int(full["output_tokens"])


def truth(script: dict[str, Any]) -> dict[str, Any]:
    """The facts of the run a script writes, from its ops as the driver executes them (a
    ``crash`` skips to the next ``resume``, as ``Driver.run`` does)."""
    ops = script["ops"]
    ran: list[dict[str, Any]] = []
    i = 0
    stopped = False
    while i < len(ops):
        op = ops[i]
        if op["op"] in ("crash", "crash_in_approval"):
            if op["op"] == "crash_in_approval":
                ran.append(op)
            nxt = [j for j in range(i + 1, len(ops)) if ops[j]["op"] == "resume"]
            if not nxt:
                stopped = True
                break
            i = nxt[0]
            continue
        ran.append(op)
        i += 1
    names = [o["op"] for o in ran]
    create = next(o for o in ran if o["op"] == "create")
    last_continue = max((k for k, n in enumerate(names) if n == "continue"), default=-1)
    last_finish = max((k for k, n in enumerate(names) if n == "finish"), default=-1)
    if last_finish > last_continue:
        outcome = ran[last_finish]["status"]
        reason = ran[last_finish]["terminal_reason"]
    else:
        outcome = "crashed" if stopped or names[-1] != "close" else "interrupted"
        reason = None
    primary = sum(_total(o["usage"]) for o in ran if o["op"] == "model")
    reviewer = sum(_total(o["usage"]) for o in ran if o["op"] == "review")
    wind = sum(_total(o["usage"]) for o in ran
               if o["op"] == "wind_down" and o.get("content") is not None)
    return {"outcome": outcome, "terminal_reason": reason,
            "step": sum(1 for n in names if n in ("model", "model_timeout", "step")),
            "primary_tokens": primary, "reviewer_tokens": reviewer, "wind_down_tokens": wind,
            "total_tokens": primary + reviewer + wind,
            "provider_name": create["provider"], "model_id": create["model"]}


SCENARIOS = [("verified", 1), ("verified_m4", 2), ("lanes", 1), ("lanes", 2),
             ("max_steps", 1), ("max_steps", 2), ("token_budget", 1), ("token_budget", 2),
             ("continuation", 1), ("resume", 1), ("resume", 2), ("provider_failed", 1),
             ("wall_time", 1), ("no_changes", 1), ("repeated_action", 1)]


def _stopped(name: str, seed: int, how: str, before: str = "finish") -> dict[str, Any]:
    """A scenario cut before its first ``before`` op, ending with ``how`` (``close``: the
    process stops in order; ``crash``: it dies)."""
    s = copy.deepcopy(get_script(name, seed))
    ops = s["ops"]
    k = next(i for i, o in enumerate(ops) if o["op"] == before)
    s["ops"] = ops[:k] + [{"op": how}]
    return s


def _check(got: dict[str, Any], want: dict[str, Any], *, skip: tuple[str, ...] = ()) -> None:
    for key, value in want.items():
        if key not in skip:
            assert got[key] == value, (key, got[key], value, got)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every scenario written three times: complete, without session.json, and without
    session.json and result.json; plus interrupted and crashed cuts."""
    root = tmp_path_factory.mktemp("facts")
    out: dict[str, Any] = {}
    scripts = {f"{n}-{s}": get_script(n, s) for n, s in SCENARIOS}
    scripts["interrupted"] = _stopped("verified", 3, "close")
    scripts["crashed"] = _stopped("verified", 4, "crash")
    # a continuation whose second turn dies before its verification
    s = copy.deepcopy(get_script("continuation", 2))
    k = max(i for i, o in enumerate(s["ops"]) if o["op"] == "verify")
    s["ops"] = s["ops"][:k] + [{"op": "crash"}]
    scripts["continued-then-crashed"] = s
    for key, script in scripts.items():
        for variant in ("full", "no_session", "log_only"):
            d = root / variant / key
            d.mkdir(parents=True)
            run_dir = Path(run_script(script, str(d)))
            if variant != "full":
                (run_dir / "session.json").unlink(missing_ok=True)
                for lock in run_dir.glob(".writer.lock"):
                    lock.unlink()
            if variant == "log_only":
                (run_dir / "result.json").unlink(missing_ok=True)
                (run_dir / "checkpoint.json").unlink(missing_ok=True)
            out[(variant, key)] = (str(run_dir), truth(script))
    return {"root": root, "runs": out}


def _facts(path: str) -> dict[str, Any]:
    from rivumi_analysis.read.snapshot import read_run

    return run_facts(read_run(path))


def test_facts_equal_the_writers_truth_with_every_file(fleet: dict[str, Any]) -> None:
    for (variant, key), (path, want) in fleet["runs"].items():
        if variant != "full":
            continue
        got = _facts(path)
        _check(got, want)
        assert got["outcome_source"] in ("events.jsonl", "events.jsonl+session.json"), key
        assert got["step_source"] == "events.jsonl"
        assert got["provider_source"] == "events.jsonl"
        assert got["fact_disagreements"] == [], (key, got["fact_disagreements"])
        # tokens from the log exactly when it holds every call (§9.1)
        log_complete = want["wind_down_tokens"] == 0 and want["terminal_reason"] != (
            "token_budget_exceeded")
        assert (got["tokens_source"] == "events.jsonl") == log_complete, (key, got)


def test_facts_from_the_log_alone(fleet: dict[str, Any]) -> None:
    """Without session.json (70 % of real runs) every fact but interrupted-vs-crashed and
    the tokens the log cannot hold comes from the log; result.json, then checkpoint.json,
    supply those tokens; with neither, the total is unknown, never a wrong number."""
    for (variant, key), (path, want) in fleet["runs"].items():
        if variant == "full":
            continue
        got = _facts(path)
        want = dict(want)
        if want["outcome"] == "interrupted":  # only session.json shows an orderly stop
            want["outcome"] = "crashed"
        log_complete = want["wind_down_tokens"] == 0 and want["terminal_reason"] != (
            "token_budget_exceeded")
        if variant == "log_only" and not log_complete:
            assert got["total_tokens"] is None and got["tokens_source"] is None, (key, got)
            _check(got, want, skip=("total_tokens", "primary_tokens", "wind_down_tokens"))
            if want["terminal_reason"] != "token_budget_exceeded":
                assert got["primary_tokens"] == want["primary_tokens"]
            continue
        _check(got, want)
        assert got["fact_disagreements"] == [], (key, got["fact_disagreements"])
        if not log_complete:
            assert got["tokens_source"] in ("model_usage", "result.json"), (key, got)


def test_runs_df_carries_the_facts_and_adds_up(fleet: dict[str, Any]) -> None:
    df = runs_df(str(fleet["root"] / "full"))
    by_dir = {r["run_dir"]: r for r in df.iter_rows(named=True)}
    n = 0
    for (variant, _key), (path, want) in fleet["runs"].items():
        if variant == "full":
            _check(by_dir[path], want)
            n += 1
    assert df.height == n
    assert set(df["outcome"]) <= set(OUTCOMES)
    assert int(df["outcome"].value_counts()["count"].sum()) == df.height


def test_a_disagreement_is_a_warning_and_a_drift_row(fleet: dict[str, Any],
                                                     tmp_path: Path) -> None:
    import json

    from rivumi_analysis.tables.drift import drift_df

    path, want = fleet["runs"][("full", "lanes-1")]
    run = tmp_path / os.path.basename(path)
    shutil.copytree(path, run)
    doc = json.loads((run / "result.json").read_text())
    doc["status"] = "failed"
    doc["usage"]["provider_total_tokens"] = doc["usage"]["total_tokens"] = 7
    (run / "result.json").write_text(json.dumps(doc))
    row = runs_df(str(run)).row(0, named=True)
    assert row["outcome"] == "completed" and row["total_tokens"] == want["total_tokens"]
    assert "fact_disagrees" in row["warnings"]
    for engine in ("auto", "reference"):
        d = drift_df(str(run), engine=engine).filter(pl.col("field").str.contains("@"))
        assert sorted(d["field"]) == ["outcome@result.json", "total_tokens@result.json"]
        got = {f: (json.loads(a), json.loads(b)) for f, a, b in
               d.select("field", "replayed", "manifest").iter_rows()}
        assert got["outcome@result.json"] == ("completed", "failed")
        assert got["total_tokens@result.json"] == (want["total_tokens"], 7)
        assert d["unexplained"].all()


def test_fork_and_external_runs(tmp_path: Path) -> None:
    fork = get_script("fork", 1)
    ext = get_script("external", 1)
    for s in (fork, ext):
        run_script(s, str(tmp_path))
    df = runs_df(str(tmp_path))
    f = df.filter(pl.col("kind") == "fork").row(0, named=True)
    assert f["outcome"] == "fork_not_run" and f["step"] == 0
    e = df.filter(pl.col("kind") == "external").row(0, named=True)
    status = ext["external"]["status"]
    assert e["outcome"] == {"timed_out": "failed"}.get(status, status)
    assert e["outcome_source"] == "result.json" and e["total_tokens"] is None


def test_an_unreadable_folder_is_a_row(tmp_path: Path, monkeypatch) -> None:
    """A folder discovery cannot list is a runs_df row (cold and through the store), with
    its reason, never left out."""
    from rivumi_analysis.read import discovery
    from rivumi_analysis.store.loaders import runs_df as public_runs_df

    run_script(get_script("verified", 1), str(tmp_path))
    locked = tmp_path / "locked"
    locked.mkdir()
    real = discovery._names
    monkeypatch.setattr(discovery, "_names",
                        lambda p: None if p == str(locked) else real(p))
    for df in (runs_df(str(tmp_path)), public_runs_df(str(tmp_path), cache=False),
               public_runs_df(str(tmp_path), store_dir=str(tmp_path.parent / "store"))):
        assert df.height == 2
        row = df.filter(pl.col("run_dir") == str(locked)).row(0, named=True)
        assert (row["verdict"], row["reasons"], row["outcome"]) == (
            "error", ["unreadable"], "unreadable")
        assert "could not be listed" in row["message"]


def test_empty_and_wrong_sources(tmp_path: Path) -> None:
    with pytest.warns(EmptySourceWarning, match="no run directory found below"):
        assert runs_df(str(tmp_path)).height == 0
    for bad in (42, [str(tmp_path), 3.5], b"bytes"):
        with pytest.raises(TypeError, match="source must be a run directory"):
            runs_df(bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_script(get_script("verified", 1), str(tmp_path))
        assert runs_df(str(tmp_path)).height == 1  # no warning once there is a run


def test_the_store_gives_the_same_facts(fleet: dict[str, Any], tmp_path: Path) -> None:
    """Through the Parquet store (which reads the audit's few keys of result.json and
    checkpoint.json) the facts equal a cold load's, for runs with and without manifests."""
    from polars.testing import assert_frame_equal

    from rivumi_analysis.store.loaders import runs_df as public_runs_df

    src = str(fleet["root"])
    assert_frame_equal(public_runs_df(src, store_dir=str(tmp_path / "store")), runs_df(src))


@pytest.mark.timeout(120)
def test_an_unreadable_folder_as_an_unprivileged_user() -> None:
    """The same with real permissions: a folder ``nobody`` cannot list is a row (the child
    drops root after warming its imports, as tests/test_bad_input.py does)."""
    import json
    import subprocess
    import sys
    import tempfile

    if os.geteuid() != 0:
        pytest.fail("this test drops root privileges in a child; run it as root (CI does)")
    top = Path(tempfile.mkdtemp(prefix="rivumi-facts-unreadable-", dir="/tmp"))
    try:
        run_dir = Path(run_script(get_script("verified", 1), str(top)))
        locked = top / "locked"
        (locked / "inner").mkdir(parents=True)
        for dirpath, _dirs, files in os.walk(top):
            os.chmod(dirpath, 0o755)
            for f in files:
                os.chmod(os.path.join(dirpath, f), 0o644)
        os.chmod(locked, 0)
        code = ("import json,os,warnings; from rivumi_analysis.tables.runs import runs_df;"
                f"runs_df({str(top)!r}); os.setgid(65534); os.setuid(65534);"
                f"df = runs_df({str(top)!r});"
                "print(json.dumps(df.select('run_dir','outcome','reasons').to_dicts()))")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=100, cwd=str(Path(__file__).resolve().parents[1]))
        assert proc.returncode == 0, proc.stderr
        rows = {r["run_dir"]: r for r in json.loads(proc.stdout)}
        assert rows[str(locked)]["outcome"] == "unreadable"
        assert rows[str(locked)]["reasons"] == ["unreadable"]
        assert rows[str(run_dir)]["outcome"] == "completed"
    finally:
        os.chmod(top / "locked", 0o755)
        shutil.rmtree(top, ignore_errors=True)
