"""Report size and time for a generated fleet (issue 15 goal: <= 6 MB, <= 15 s at 10,000 runs).

Usage::

    python benchmarks/report_bench.py --runs 2000 [--runs 10000] [--corpus-dir DIR] [--repeat 2]
    python benchmarks/report_bench.py --source /tmp/rivumi-bench/runs-10000 --phases

Writes each corpus once with ``rivumi_analysis.synth.corpus`` (reused when DIR/<runs> exists),
then times ``write_report`` ``--repeat`` times and prints size, time (min / max, so the spread
on a shared machine is visible) and seconds per 1,000 runs, so sizes compare as ratios.

``--phases`` separates the two halves: loading the tables (``load_tables``: reading the runs
and building every table, owned by the loaders) once, then the report's own part (chart
builders, run pages, HTML) ``--repeat`` times on those tables; the load average is printed
beside each figure.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def _phases(src: str, repeat: int) -> None:
    from rivumi_analysis.viz import report as R

    print(f"source {src}  load {os.getloadavg()[0]:.1f}", flush=True)
    t0, c0 = time.perf_counter(), time.process_time()
    tables = R.load_tables([src])
    n = tables["runs"].height if tables["runs"] is not None else 0
    print(f"load_tables: {time.perf_counter() - t0:.1f} s ({time.process_time() - c0:.1f} CPU s "
          f"in this process) for {n} runs  load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'rep':>3} {'charts s':>8} {'pages s':>7} {'html s':>6} {'total s':>7} {'CPU s':>6} "
          f"{'MB':>5}  load")
    for i in range(repeat):
        cpu = time.process_time()
        a = time.perf_counter()
        charts = R.build_charts(tables)
        b = time.perf_counter()
        pages = R.run_pages(tables, sources=[src])
        c = time.perf_counter()
        html = R.render_html(tables, sources=[src], charts=charts, pages=pages)
        d = time.perf_counter()
        print(f"{i:>3} {b - a:>8.2f} {c - b:>7.2f} {d - c:>6.2f} {d - a:>7.2f} "
              f"{time.process_time() - cpu:>6.2f} {len(html.encode()) / 1e6:>5.2f}  "
              f"{os.getloadavg()[0]:.1f}", flush=True)


def _store_reports(src: str, store: str, repeat: int) -> None:
    """The report through the store: the first one builds the store (it is removed before),
    the next ones find it warm. Phases from the report's own progress calls."""
    import resource

    from rivumi_analysis.store.core import remove_store
    from rivumi_analysis.viz.report import write_report

    remove_store(store)
    print(f"source {src}  store {store} (removed first)  load {os.getloadavg()[0]:.1f}",
          flush=True)
    print(f"{'report':>6} {'total s':>7} {'store s':>7} {'tables s':>8} {'charts+pages s':>14} "
          f"{'html s':>6} {'CPU s':>6} {'child CPU s':>11} {'MB':>5} {'read':>6}  "
          "load")
    with tempfile.TemporaryDirectory() as d:
        for i in range(1 + repeat):
            marks: dict[str, float] = {}

            def progress(phase: str, done: int, total: int,
                         marks: dict[str, float] = marks) -> None:
                marks.setdefault(phase, time.perf_counter())

            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = time.process_time()
            t0 = time.perf_counter()
            res = write_report([src], os.path.join(d, "r.html"), store=True, store_dir=store,
                               progress=progress)
            t1 = time.perf_counter()
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            child = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
            tables = marks.get("reading tables", t0)
            charts = marks.get("building charts", tables)
            print(f"{'first' if i == 0 else 'warm':>6} {t1 - t0:>7.2f} {tables - t0:>7.2f} "
                  f"{charts - tables:>8.2f} {marks.get('writing html', t1) - charts:>14.2f} "
                  f"{t1 - marks.get('writing html', t1):>6.2f} "
                  f"{time.process_time() - cpu:>6.1f} {child:>11.1f} {res.bytes / 1e6:>5.2f} "
                  f"{res.store_read:>6}  {os.getloadavg()[0]:.1f}", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS: this process {peak:.0f} MB, largest worker {kids:.0f} MB")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, action="append", default=None)
    ap.add_argument("--corpus-dir", default=os.path.join(tempfile.gettempdir(), "report-bench"))
    ap.add_argument("--source", default=None, help="an existing corpus (read only)")
    ap.add_argument("--phases", action="store_true",
                    help="time table loading and the report's own part separately")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--store", default=None, metavar="DIR",
                    help="with --phases: the report through the store in DIR (removed "
                         "first): the first report builds it, --repeat more find it warm")
    args = ap.parse_args(argv)
    if args.phases and args.store:
        for src in [args.source] if args.source else [
                os.path.join(args.corpus_dir, str(n)) for n in args.runs or [2000]]:
            _store_reports(src, args.store, args.repeat)
        return 0
    if args.phases:
        srcs = [args.source] if args.source else [
            os.path.join(args.corpus_dir, str(n)) for n in args.runs or [2000]]
        for src in srcs:
            _phases(src, args.repeat)
        return 0
    from rivumi_analysis.synth.corpus import generate_corpus
    from rivumi_analysis.viz.report import write_report

    print(f"{'runs':>7} {'MB':>6} {'min s':>7} {'max s':>7} {'s/1k runs':>9}  load")
    for n in args.runs or [2000]:
        src = args.source or os.path.join(args.corpus_dir, str(n))
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
