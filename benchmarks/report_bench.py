"""Report size and time for a generated fleet (issue 15 goal: <= 6 MB, <= 15 s at 10,000 runs).

Usage::

    python benchmarks/report_bench.py --runs 2000 [--runs 10000] [--corpus-dir DIR] [--repeat 2]

Writes each corpus once with ``rivumi_analysis.synth.corpus`` (reused when DIR/<runs> exists),
then times ``write_report`` ``--repeat`` times and prints size, time (min / max, so the spread
on a shared machine is visible) and seconds per 1,000 runs, so sizes compare as ratios.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    from rivumi_analysis.synth.corpus import generate_corpus
    from rivumi_analysis.viz.report import write_report

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, action="append", default=None)
    ap.add_argument("--corpus-dir", default=os.path.join(tempfile.gettempdir(), "report-bench"))
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    print(f"{'runs':>7} {'MB':>6} {'min s':>7} {'max s':>7} {'s/1k runs':>9}  load")
    for n in args.runs or [2000]:
        src = os.path.join(args.corpus_dir, str(n))
        if not os.path.isdir(src):
            generate_corpus(src, runs=n, target_mb=n / 10)
        times, size, found = [], 0, 0
        with tempfile.TemporaryDirectory() as d:
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                res = write_report([src], os.path.join(d, "r.html"))
                times.append(time.perf_counter() - t0)
                size, found = res.bytes, res.runs
        load = os.getloadavg()[0]
        print(f"{found:>7} {size / 1e6:>6.2f} {min(times):>7.1f} {max(times):>7.1f} "
              f"{1000 * min(times) / max(found, 1):>9.2f}  {load:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
