"""Benchmark corpora: many realistic runs of a target total size, or one very large log.

Uses the same writer and encodings as ``sample_runs/`` in a fast mode: no fsync, the manifest
rewritten every ``k`` events (and always at the end), intermediate checkpoints skipped. Output
is deterministic for a given seed and is not committed.

Examples::

    python -m rivumi_analysis.corpus --runs 2000 --target-mb 200 --out /tmp/corpus
    python -m rivumi_analysis.corpus --single-log-mb 200 --out /tmp/biglog
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

from rivumi_analysis.scenarios import Build, Driver

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


def _drain(b: Build) -> Iterator[dict[str, Any]]:
    ops, b.ops = b.ops, []
    yield from ops


def corpus_run_ops(b: Build, steps: int, pool: list[str], *, ending: str,
                   compact_every: int | None = None,
                   session_grants: bool = False) -> Iterator[dict[str, Any]]:
    """Lazily yield the ops of one corpus run (``steps`` working steps, then ``ending``)."""
    rng = b.rng
    yield from _drain(b)
    b.explore()
    yield from _drain(b)
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
        else:
            [c] = b.model([("read_file", {"path": f"{rng.choice(files)}?v={i}"})])
            b.tool(c, content=rng.choice(pool), decision=decide("read"))
        if compact_every and i and i % compact_every == 0:
            b.add("compaction", max_total_tokens=10_000_000, keep_tail=4)
            b.ctx = 900
        else:
            b.ctx = min(b.ctx, 180_000)
        yield from _drain(b)
    if ending == "crash":
        b.add("flush")
        yield from _drain(b)
        return
    if ending == "wall_time":
        b.finish("failed", "wall_time_exceeded",
                 error="Task execution exceeded the remaining wall-time budget.")
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
    yield from _drain(b)


def _write_run(args: tuple[str, int, int, int, int]) -> int:
    out, index, seed, target_bytes, every = args
    rng = random.Random(f"corpus:{seed}:{index}")
    profile = "m4" if rng.random() < 0.2 else "current"
    b = Build("corpus", seed * 1_000_003 + index, profile=profile, max_steps=10_000,
              wall=86_400.0)
    pool = _text_pool(seed)
    # ~11 KB on disk per working step (events plus the message copies in session.json and
    # checkpoint.json); the lognormal factor gives the realistic spread between runs.
    steps = max(1, int(target_bytes * rng.lognormvariate(-0.06, 0.35) / 11_300))
    ending = rng.choices(["verified", "no_changes", "wall_time", "crash"], [70, 10, 10, 10])[0]
    script = {"name": "corpus", "profile": profile, "seed": b.seed, "run_id": b.run_id,
              "clock": {"start": b.ops and _start(b), "mono": 0.0}, "ops": []}
    drv = Driver(out, script, manifest_every=every)
    for op in corpus_run_ops(b, steps, pool, ending=ending,
                             compact_every=40 if steps > 60 else None,
                             session_grants=steps > 60 or rng.random() < 0.3):
        drv.apply(op)
    return _dir_size(drv.run_dir)


def _start(b: Build) -> str:
    from rivumi_analysis.writer import fmt_ts

    return fmt_ts(b.start)


def _dir_size(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total


def generate_corpus(out: str, *, runs: int, target_mb: float, seed: int = 0,
                    manifest_every: int = 100, workers: int | None = None) -> int:
    """Write ``runs`` runs totalling about ``target_mb`` MB into ``out`` (wiped first).

    Returns:
        Bytes written.
    """
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    per_run = int(target_mb * 1024 * 1024 / max(1, runs))
    jobs = [(out, i, seed, per_run, manifest_every) for i in range(runs)]
    workers = workers or os.cpu_count() or 1
    if workers == 1:
        return sum(map(_write_run, jobs))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(_write_run, jobs, chunksize=max(1, runs // (workers * 8))))


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
    ap = argparse.ArgumentParser(prog="python -m rivumi_analysis.corpus",
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
