"""Where worker processes start to pay: each fleet-wide call in a fresh process (as a script
meets it: the workers' start-up counted), in this process (``jobs=1``) against local workers
(``read.executor.POOL_MIN_RUNS`` forced to 0), on the first N runs of a corpus.

    .venv/bin/python benchmarks/executor_threshold.py CORPUS --sizes 64,128,256,512 --reps 3

Prints, per call and size, the median wall seconds of both and their ratio (pool / in process;
below 1: the pool is faster). The tables are read with the store off (``RIVUMI_ANALYSIS_STORE=0``,
the cold path the executor serves). Repetitions alternate the two modes. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CALLS = {
    "audit": "from rivumi_analysis.fleet_audit import audit; audit(src, cache=False, jobs=J)",
    "events_df": "from rivumi_analysis.tables.events import load_events; "
                 "load_events(src, strict=False, max_depth=8, jobs=J)",
    "runs_df": "from rivumi_analysis.tables.runs import runs_rows, runs_table; "
               "from rivumi_analysis.tables._common import load_rows; "
               "load_rows(src, strict=False, max_depth=8, rows=runs_rows, model='RunsSchema', "
               "table=runs_table, jobs=J)",
    "states_df": "from rivumi_analysis import states_df; states_df(src)",
}


def _child(call: str, runs: list[str], pooled: bool) -> float:
    code = ("import json, sys, time\n"
            "import rivumi_analysis.read.executor as X\n"
            f"X.POOL_MIN_RUNS = {0 if pooled else 10 ** 9}\n"
            f"J = {None if pooled else 1}\n"
            "src = json.load(sys.stdin)\n"
            "t = time.perf_counter()\n"
            f"{CALLS[call]}\n"
            "print(time.perf_counter() - t)\n")
    env = {**os.environ, "RIVUMI_ANALYSIS_STORE": "0"}
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], input=json.dumps(runs), text=True,
                       capture_output=True, cwd=ROOT, env=env, timeout=1800)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{call} failed: {p.stderr[-2000:]}")
    return wall  # the whole process: start-up, the workers' start-up and exit included


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("--sizes", default="64,128,256,512")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--calls", default=",".join(CALLS))
    args = ap.parse_args()
    from rivumi_analysis.read.discovery import discover

    all_runs = sorted(loc.run_dir for loc in discover(args.corpus).runs
                      if not loc.is_subagent)
    print(f"corpus {args.corpus}: {len(all_runs)} top-level runs; load {os.getloadavg()[0]:.1f}")
    print(f"{'call':10} {'runs':>5} {'in process s':>13} {'pool s':>8} {'pool/in':>8}")
    for call in args.calls.split(","):
        for n in map(int, args.sizes.split(",")):
            runs = all_runs[:n]
            one: list[float] = []
            pool: list[float] = []
            for _ in range(args.reps):  # alternating
                one.append(_child(call, runs, False))
                pool.append(_child(call, runs, True))
            a, b = statistics.median(one), statistics.median(pool)
            print(f"{call:10} {len(runs):>5} {a:>13.2f} {b:>8.2f} {b / a:>8.2f}", flush=True)
    print(f"done {time.strftime('%H:%M:%S')}; load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
