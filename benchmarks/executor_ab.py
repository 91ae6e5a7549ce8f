"""A/B in one run: the fleet-wide calls of this checkout against another checkout of the
package (e.g. ``git archive main | tar -x -C /tmp/base``), alternating, each in a fresh
process as a script meets it (start-up and the workers' start-up included).

    .venv/bin/python benchmarks/executor_ab.py CORPUS --baseline-code /tmp/base --reps 3

Measured per call: wall seconds, CPU seconds (the child and every process it waited for,
workers included) and peak RSS summed over the child's process tree (sampled every 5 ms).
Calls: the CLI audit with ``--no-cache`` and cold with the cache on (an empty cache
directory); ``events_df``, ``runs_df`` and ``states_df`` with the store off (the cold loaders
the executor runs); the store's first build (``open_store`` into an empty folder). Prints the
medians [min-max] and the ratio B/A of the medians. Nothing is asserted.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench import run_child  # noqa: E402

TABLE = ("import sys; import rivumi_analysis as ra; "
         "df = getattr(ra, sys.argv[1])(sys.argv[2]); print(df.height)")
STORE = ("import sys; from rivumi_analysis.store import open_store; "
         "print(len(open_store(sys.argv[2], store_dir=sys.argv[3]).manifest.order))")


def _cmd(call: str, corpus: str, scratch: str) -> tuple[list[str], dict[str, str]]:
    py = sys.executable
    if call == "audit_no_cache":
        return [py, "-m", "rivumi_analysis.cli", "audit", "--format", "json", "--no-cache",
                corpus], {}
    if call == "audit_cold_cache":
        return [py, "-m", "rivumi_analysis.cli", "audit", "--format", "json", "--cache-dir",
                scratch, corpus], {}
    if call == "store_first_build":
        return [py, "-c", STORE, "", corpus, os.path.join(scratch, "store")], {}
    return [py, "-c", TABLE, call, corpus], {"RIVUMI_ANALYSIS_STORE": "0"}


CALLS = ("audit_no_cache", "audit_cold_cache", "events_df", "runs_df", "states_df",
         "store_first_build")


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak tree RSS MB) of ``cmd``, run outside any checkout (so the
    ``PYTHONPATH`` of ``env`` decides which package is imported)."""
    wall, peak, _out, cpu = run_child(cmd, env=env, cwd=tempfile.gettempdir())
    return wall, cpu, peak / 2**20


def _fmt(xs: list[float], unit: str) -> str:
    return f"{statistics.median(xs):.2f}{unit} [{min(xs):.2f}-{max(xs):.2f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("--baseline-code", required=True,
                    help="folder holding the baseline's rivumi_analysis package")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--calls", default=",".join(CALLS))
    args = ap.parse_args()
    sides = {"A": {**os.environ, "PYTHONPATH": os.path.abspath(args.baseline_code)},
             "B": {**os.environ, "PYTHONPATH": str(ROOT)}}
    print(f"A = {args.baseline_code}, B = {ROOT}; corpus {args.corpus}; "
          f"load {os.getloadavg()[0]:.1f}; {time.strftime('%H:%M:%S')}", flush=True)
    for call in args.calls.split(","):
        got: dict[str, list[tuple[float, float, float]]] = {"A": [], "B": []}
        for rep in range(args.reps):
            for side in ("AB" if rep % 2 == 0 else "BA"):  # alternating order
                scratch = tempfile.mkdtemp(prefix="executor-ab-")
                try:
                    env = dict(sides[side])
                    env["RIVUMI_ANALYSIS_STORE_DIR"] = os.path.join(scratch, "default-store")
                    cmd, extra = _cmd(call, args.corpus, scratch)
                    got[side].append(_run(cmd, {**env, **extra}))
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
        for side in "AB":
            walls, cpus, rss = (list(x) for x in zip(*got[side], strict=True))
            print(f"{call:18} {side}: wall {_fmt(walls, ' s')}  CPU {_fmt(cpus, ' s')}  "
                  f"peak RSS {_fmt(rss, ' MB')}", flush=True)
        ratio = [statistics.median(x[i] for x in got["B"]) / statistics.median(
            x[i] for x in got["A"]) for i in range(3)]
        print(f"{call:18} B/A: wall {ratio[0]:.2f}x  CPU {ratio[1]:.2f}x  "
              f"peak RSS {ratio[2]:.2f}x", flush=True)
    print(f"done {time.strftime('%H:%M:%S')}; load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
