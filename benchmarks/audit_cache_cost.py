"""What the audit's cache costs on a cold start: ``rivumi-analysis audit --format json`` with the
cache on (an empty cache directory: the store is built for the audit) against ``--no-cache``,
alternating, in one run (issue 28: at most 1.2x in time and memory).

    .venv/bin/python benchmarks/audit_cache_cost.py CORPUS --reps 3

Per mode: wall seconds, CPU seconds (the CLI and every process it waited for, workers
included) and peak RSS summed over its process tree (sampled every 5 ms); then the ratios
cold cache / no cache of the medians, and a warm audit (the cache filled) for reference.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from executor_ab import _fmt, _run  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    py = sys.executable
    base = [py, "-m", "rivumi_analysis.cli", "audit", "--format", "json"]
    print(f"corpus {args.corpus}; load {os.getloadavg()[0]:.1f}; {time.strftime('%H:%M:%S')}",
          flush=True)
    got: dict[str, list[tuple[float, float, float]]] = {"no_cache": [], "cold_cache": [],
                                                        "warm_cache": []}
    for rep in range(args.reps):
        for mode in (("no_cache", "cold_cache") if rep % 2 == 0 else ("cold_cache", "no_cache")):
            scratch = tempfile.mkdtemp(prefix="audit-cache-cost-")
            try:
                if mode == "no_cache":
                    got[mode].append(_run([*base, "--no-cache", args.corpus], dict(os.environ)))
                else:
                    cmd = [*base, "--cache-dir", scratch, args.corpus]
                    got[mode].append(_run(cmd, dict(os.environ)))
                    if rep == 0:  # the same cache again: warm
                        got["warm_cache"].append(_run(cmd, dict(os.environ)))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    for mode, runs in got.items():
        walls, cpus, rss = (list(x) for x in zip(*runs, strict=True))
        print(f"{mode:11} wall {_fmt(walls, ' s')}  CPU {_fmt(cpus, ' s')}  "
              f"peak RSS {_fmt(rss, ' MB')}", flush=True)
    ratio = [statistics.median(x[i] for x in got["cold_cache"]) / statistics.median(
        x[i] for x in got["no_cache"]) for i in range(3)]
    print(f"cold cache / no cache: wall {ratio[0]:.2f}x  CPU {ratio[1]:.2f}x  "
          f"peak RSS {ratio[2]:.2f}x")
    print(f"done {time.strftime('%H:%M:%S')}; load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
