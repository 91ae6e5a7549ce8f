"""Benchmark corpora: many realistic runs of a target total size, or one very large log.

Uses the same writer and encodings as ``sample_runs/`` in a fast mode: no fsync, the manifest
rewritten every ``k`` events (and always at the end), intermediate checkpoints skipped. Output
is deterministic for a given seed and is not committed.

Examples::

    python -m rivumi_analysis.synth.corpus --runs 2000 --target-mb 200 --out /tmp/corpus
    python -m rivumi_analysis.synth.corpus --single-log-mb 200 --out /tmp/biglog
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from rivumi_analysis.synth.scenarios import Build, Driver, ScriptStop
from rivumi_analysis.synth.truth import TRUTH_FILE, TruthLog, write_truth
from rivumi_analysis.synth.writer import Ids, VirtualClock, write_fork_run

__all__ = ["corpus_run_ops", "generate_corpus", "generate_single_log"]

_WORDS = ("def", "return", "self", "import", "value", "items", "for", "in", "if", "else",
          "config", "path", "result", "None", "True", "raise", "class", "assert", "data",
          "len", "range", "str", "int", "dict", "list", "open", "with", "as", "yield")


_POOLS: dict[int, list[str]] = {}


def _text_pool(seed: int, n: int = 48) -> list[str]:
    """Seeded code-like text blocks of varied length (cached: cheap to reuse across runs)."""
    if seed in _POOLS:
        return _POOLS[seed]
    rng = random.Random(seed)
    pool = []
    for _ in range(n):
        size = int(rng.lognormvariate(7.0, 0.7))  # median ~1.1 KB, long tail
        lines, total = [], 0
        while total < size:
            ln = "    " * rng.randint(0, 3) + " ".join(rng.choice(_WORDS)
                                                      for _ in range(rng.randint(2, 9)))
            lines.append(ln)
            total += len(ln) + 1
        pool.append("\n".join(lines) + "\n")
    _POOLS[seed] = pool
    return pool


def _drain(b: Build, tally: list[int] | None = None) -> Iterator[dict[str, Any]]:
    ops, b.ops = b.ops, []
    if tally is not None:
        for op in ops:
            if op["op"] == "model":
                u = op["usage"]
                tally[0] += u["input_tokens"] + u["output_tokens"]
    yield from ops


ENDINGS: dict[str, float] = {
    "verified": 56, "no_changes": 8, "wall_time": 6, "max_steps": 5, "repeated_action": 4,
    "token_budget": 4, "crash": 7, "resumed": 6, "torn": 2, "duplicate": 1, "provider_failed": 1,
}
"""How corpus runs end (weights). ``crash`` stops without a terminal event; ``resumed`` dies
mid-run and resumes after a drawn downtime; ``torn`` dies between the two halves of a line
(a quarantined torn tail); ``duplicate`` carries the §4.5 emit race (a duplicate sequence)."""

WALL_BUDGETS = ((600.0, 15), (900.0, 35), (1800.0, 25), (3600.0, 15), (7200.0, 10))
TOKEN_BUDGETS = (None, None, None, 200_000, 500_000, 1_000_000, 2_000_000, 5_000_000)
STEP_LIMITS = (30, 50, 100, 200, 500)


def corpus_run_ops(b: Build, steps: int, pool: list[str], *, ending: str,
                   compact_every: int | None = None,
                   session_grants: bool = False, pace: float = 0.0,
                   resume_at: int | None = None, downtime: float = 0.0
                   ) -> Iterator[dict[str, Any]]:
    """Lazily yield the ops of one corpus run (``steps`` working steps, then ``ending``).

    Args:
        pace: extra charged seconds per step (thinking, slow tools), so runs use a drawn
            share of their wall-time budget.
        resume_at: step at which the process dies and is resumed after ``downtime`` seconds.
    """
    rng = b.rng
    tally = [0]
    budget = b.request.get("limits", {}).get("max_total_tokens")
    yield from _drain(b, tally)
    b.explore()
    yield from _drain(b, tally)
    files = list(b.task.files)
    granted: set[str] = set()

    def decide(effect: str) -> str:
        # Long runs grant read/execute for the session early, so later calls take the
        # approval.reused path and approval_history stays short (as in long real sessions).
        if not session_grants:
            return "allow_once"
        if effect in granted:
            return "reuse"
        granted.add(effect)
        return "allow_session"

    for i in range(steps):
        if budget and tally[0] + 2 * b.ctx + 400 > budget:
            if ending == "token_budget":
                break  # the next primary call crosses the budget
            if ending not in ("max_steps", "crash", "torn"):
                break  # a run that stays within its budget ends its work earlier
        if i == resume_at:
            b.add("flush")
            b.add("crash")
            b.add("resume", downtime=round(downtime, 6))
        if pace:
            b.add("advance", seconds=round(pace * rng.uniform(0.5, 1.5), 6))
        r = rng.random()
        if r < 0.12 and i:
            paths = [f"{rng.choice(files)}#{i}.{k}" for k in range(rng.randint(2, 3))]
            ids = b.model([("read_file", {"path": p}) for p in paths])
            dec = decide("read")
            b.add("batch", calls=[{"tool_call_id": c, "content": rng.choice(pool),
                                   "decision": None if dec == "reuse" else dec,
                                   "duration": round(rng.uniform(0.001, 0.05), 6)}
                                  for c in ids])
        elif r < 0.22:
            [c] = b.model([("search_text", {"query": f"{rng.choice(_WORDS)} {i}"})])
            b.tool(c, content=rng.choice(pool)[:400], decision=decide("read"))
        elif r < 0.27 and b.profile == "current":
            b.run_tests(False, decision=decide("execute"))
        elif r < 0.29:
            # A tool error the model recovers from (a path that does not exist).
            [c] = b.model([("read_file", {"path": f"missing/{rng.choice(files)}?{i}"})])
            b.tool(c, ok=False, error="No such file or directory", decision=decide("read"))
        else:
            [c] = b.model([("read_file", {"path": f"{rng.choice(files)}?v={i}"})])
            b.tool(c, content=rng.choice(pool), decision=decide("read"))
        if compact_every and i and i % compact_every == 0:
            b.add("compaction", max_total_tokens=budget or 10_000_000, keep_tail=4)
            b.ctx = 900
        else:
            b.ctx = min(b.ctx, 180_000)
        yield from _drain(b, tally)
    if ending in ("crash", "torn"):
        b.add("flush")
        yield from _drain(b, tally)
        return
    if ending == "wall_time":
        b.add("model_timeout")
        b.finish("failed", "wall_time_exceeded",
                 error="Model request exceeded the remaining wall-time budget.")
    elif ending == "max_steps":
        u = b.usage(60, 250)
        b.add("wind_down", usage=u, content="I ran out of steps before finishing the fix.")
        b.finish("failed", "max_steps_exceeded",
                 error=f"Step limit of {b.request['limits']['max_steps']} reached.")
    elif ending == "repeated_action":
        args = {"path": f"{b.task.path}", "start_line": rng.randint(1, 400)}
        for _ in range(3):
            [c] = b.model([("read_file", args)])
            b.tool(c, content=rng.choice(pool), decision=decide("read"))  # third: trips
        b.finish("failed", "repeated_action", error="Repeated identical tool call (3 times).")
    elif ending == "token_budget" and budget:
        b.ctx = max(budget - tally[0] + rng.randint(1, 4000), 1)
        b.model(content=None, budget_exceeded=True)
        yield from _drain(b, tally)
        b.finish("failed", "token_budget_exceeded",
                 error=f"Token budget exceeded: {tally[0]} tokens > limit {budget}.")
    elif ending == "provider_failed":
        reason, error = rng.choice([
            ("provider_rate_limit", "Provider rate limit: 429 Too Many Requests after retries."),
            ("provider_quota_exhausted", "Provider quota exhausted for this billing period."),
            ("provider_auth", "Provider rejected the API key: 401 Unauthorized.")])
        b.finish("failed", reason, error=error)
    elif ending == "no_changes":
        b.final("Nothing needs to change.")
        b.finish("completed", "no_changes")
    else:
        b.edit()
        b.run_tests(True)
        b.final()
        b.verify(True)
        b.finish("completed", "verified")
    b.close()
    yield from _drain(b, tally)


def _torn_hook(point: str, seq: int | None, event_type: str | None) -> None:
    if point == "torn":  # the process dies between the two halves of one line
        raise ScriptStop()


def _write_run(args: tuple[str, int, int, int, int]) -> tuple[int, list[dict[str, Any]]]:
    """Write corpus run ``index``; returns its bytes on disk and its truth records (the run
    and its fork, if any)."""
    out, index, seed, target_bytes, every = args
    rng = random.Random(f"corpus:{seed}:{index}")
    profile = "m4" if rng.random() < 0.2 else "current"
    # ~11 KB on disk per working step (events plus the message copies in session.json and
    # checkpoint.json); the lognormal factor gives the realistic spread between runs.
    steps = max(1, int(target_bytes * rng.lognormvariate(-0.06, 0.35) / 11_300))
    ending = rng.choices(list(ENDINGS), list(ENDINGS.values()))[0]
    if ending in ("token_budget", "provider_failed") and profile != "current":
        ending = "verified"
    wall = rng.choices([w for w, _ in WALL_BUDGETS], [n for _, n in WALL_BUDGETS])[0]
    while steps * 6.0 > 0.4 * wall and wall < 86_400:  # long runs get long budgets
        wall *= 2
    # Share of the budget the run uses: most runs use little, a tail comes close to it;
    # wall-time failures use it all (the last model request times out at the budget).
    used = rng.uniform(0.85, 0.97) if ending == "wall_time" else min(rng.betavariate(1.3, 5.0),
                                                                         0.9)
    pace = max(0.0, (used * wall - steps * 5.0) / (steps + 2))
    max_steps = (steps + 2 if ending == "max_steps" else
                 rng.choice([n for n in STEP_LIMITS if n >= steps + 8] or [steps + 20]))
    tokens = rng.choice(TOKEN_BUDGETS) if profile == "current" else None
    if ending == "token_budget" and tokens is None:
        tokens = rng.choice([t for t in TOKEN_BUDGETS if t])
    b = Build("corpus", seed * 1_000_003 + index, profile=profile, max_steps=max_steps,
              wall=wall, max_total_tokens=tokens)
    pool = _text_pool(seed)
    resume_at = downtime = None
    if ending == "resumed" and steps > 2:
        resume_at = rng.randrange(1, steps)
        # Downtime: minutes to hours, but within what the budget can still absorb.
        downtime = min(rng.lognormvariate(6.0, 1.2), 0.3 * wall)
    faults: dict[str, Any] = {}
    if ending == "torn":
        faults["torn_at"] = rng.randint(12, 12 + 6 * steps)
    elif ending == "duplicate":
        faults["duplicate_at"] = rng.randint(8, 8 + 4 * steps)
    script = {"name": "corpus", "profile": profile, "seed": b.seed, "run_id": b.run_id,
              "clock": {"start": b.ops and _start(b), "mono": 0.0}, "ops": [], "faults": faults}
    # A torn line needs the line-by-line write path (fast mode buffers lines).
    truth = TruthLog(out)
    drv = Driver(out, script, manifest_every=1 if ending == "torn" else every,
                 hook=_torn_hook if ending == "torn" else None, truth=truth)
    dead = False
    for op in corpus_run_ops(b, steps, pool,
                             ending=ending if ending in ENDINGS and ending not in (
                                 "resumed", "duplicate") else "verified",
                             compact_every=40 if steps > 60 else None,
                             session_grants=steps > 60 or rng.random() < 0.3,
                             pace=pace, resume_at=resume_at, downtime=downtime or 0.0):
        if dead and op["op"] != "resume":
            continue  # the process is dead until the resume
        dead = False
        try:
            drv.apply(op)
        except ScriptStop:
            if ending == "torn":
                break
            dead = True
    if ending == "crash" and drv.truth is not None:
        drv.truth.die()  # the process stops here without its finally (no close)
    drv.done()
    size = _dir_size(drv.run_dir)
    if rng.random() < 0.04 and ending not in ("torn", "duplicate"):
        size += _fork(out, drv.run_dir, rng, b, truth)
    return size, truth.records()


def _fork(out: str, source: str, rng: random.Random, b: Build, truth: TruthLog) -> int:
    """A fork of ``source`` (``sessions --fork-from-event``) a few hours to days later."""
    from datetime import timedelta

    with open(os.path.join(source, "events.jsonl"), "rb") as fh:
        n = sum(1 for _ in fh)
    if n < 4:
        return 0
    start = b.start + timedelta(hours=rng.uniform(1, 96))
    clock = VirtualClock(start, seed=rng.getrandbits(32))
    fork_dir = write_fork_run(source, out, sequence=rng.randrange(1, n - 1), clock=clock,
                              ids=Ids(rng.getrandbits(48)))
    t = truth.add(fork_dir, run_id=os.path.basename(fork_dir), kind="fork", scenario="fork")
    t.lines, t.outcome_override = 1, ("fork", None)
    t.look_at_files(fork_dir)
    return _dir_size(fork_dir)


def _start(b: Build) -> str:
    from rivumi_analysis.synth.writer import fmt_ts

    return fmt_ts(b.start)


def _dir_size(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total


def generate_corpus(out: str, *, runs: int, target_mb: float, seed: int = 0,
                    manifest_every: int = 100, workers: int | None = None) -> int:
    """Write ``runs`` runs totalling about ``target_mb`` MB into ``out`` (wiped first), and
    their ground truth into ``out/truth.jsonl`` (:mod:`rivumi_analysis.synth.truth`).

    Returns:
        Bytes written (the runs; the truth file not counted).
    """
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    per_run = int(target_mb * 1024 * 1024 / max(1, runs))
    jobs = [(out, i, seed, per_run, manifest_every) for i in range(runs)]
    workers = workers or os.cpu_count() or 1
    if workers == 1:
        done = list(map(_write_run, jobs))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = list(pool.map(_write_run, jobs, chunksize=max(1, runs // (workers * 8))))
    write_truth(os.path.join(out, TRUTH_FILE), [r for _, recs in done for r in recs])
    return sum(size for size, _ in done)


def generate_single_log(out: str, *, log_mb: float, seed: int = 0,
                        manifest_every: int = 200) -> str:
    """Write one run whose ``events.jsonl`` is about ``log_mb`` MB; returns its directory.

    History compaction runs every 100 steps so the manifest (rewritten every
    ``manifest_every`` events) stays small while the log grows.
    """
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    # m4 profile: no per-call model_usage list, so the manifest stays small on huge logs.
    b = Build("single-log", seed, profile="m4", max_steps=10_000_000, wall=10_000_000.0)
    pool = _text_pool(seed)
    steps = max(1, math.ceil(log_mb * 1024 * 1024 / 3_900))
    script = {"name": "single-log", "profile": "m4", "seed": b.seed, "run_id": b.run_id,
              "clock": {"start": _start(b), "mono": 0.0}, "ops": []}
    drv = Driver(out, script, manifest_every=manifest_every)
    for op in corpus_run_ops(b, steps, pool, ending="verified", compact_every=100,
                             session_grants=True):
        drv.apply(op)
    return drv.run_dir


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    ap = argparse.ArgumentParser(prog="python -m rivumi_analysis.synth.corpus",
                                 description="Generate a benchmark corpus (not committed).")
    ap.add_argument("--out", required=True, help="output folder (wiped first)")
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--target-mb", type=float, default=200.0)
    ap.add_argument("--single-log-mb", type=float, default=None,
                    help="write one run with an events.jsonl of about this size instead")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--manifest-every", type=int, default=None)
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.single_log_mb:
        rd = generate_single_log(args.out, log_mb=args.single_log_mb, seed=args.seed,
                                 manifest_every=args.manifest_every or 200)
        size = os.path.getsize(os.path.join(rd, "events.jsonl"))
        print(f"wrote {rd}: events.jsonl {size / 1e6:.1f} MB in "
              f"{time.perf_counter() - t0:.1f}s")
        return 0
    total = generate_corpus(args.out, runs=args.runs, target_mb=args.target_mb, seed=args.seed,
                            manifest_every=args.manifest_every or 100, workers=args.workers)
    print(f"wrote {args.runs} runs, {total / 1024 / 1024:.1f} MiB in "
          f"{time.perf_counter() - t0:.1f}s to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
