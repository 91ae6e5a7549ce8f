"""Export speed of ``rivumi-analysis otel`` on a generated fleet (issue 31).

Usage::

    python -m rivumi_analysis.synth.corpus --runs 10000 --target-mb 1000 --out /tmp/runs-10000
    python benchmarks/otel_bench.py --source /tmp/runs-10000 [--store DIR] [--reps 2]
        [--endpoint http://127.0.0.1:6006]

Builds (or refreshes) the fleet's Parquet store first, timed apart: the export reads its tables
through the store (a changed toolkit file changes the store's code fingerprint: a rebuild).
Then, ``--reps`` times, a full export to an OTLP/JSON file, split into its phases (the tables
read from the store, the spans built, the SDK spans encoded and written); the public call
``export_otel`` once, full, keeping a state file; and once more with that state and nothing
changed (``--changed-only``: the stat pass and the state compare, nothing sent). The baseline in the same run is the store read of the same columns alone,
so the export's own cost shows as a ratio to it. Load average beside each figure.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, help="a folder of runs")
    ap.add_argument("--store", default=None, help="store folder (default: a temporary one)")
    ap.add_argument("--reps", type=int, default=2, help="phase-split exports (0: none)")
    ap.add_argument("--endpoint", default=None,
                    help="also time a full OTLP/HTTP export to this receiver (one on this "
                         "machine, e.g. a local Phoenix)")
    args = ap.parse_args()

    from rivumi_analysis import otel
    from rivumi_analysis.store.core import open_store

    store = args.store or tempfile.mkdtemp(prefix="otel-bench-store-")
    out_dir = tempfile.mkdtemp(prefix="otel-bench-out-")
    out = os.path.join(out_dir, "traces.jsonl")
    t = time.perf_counter()
    opened = open_store([args.source], store_dir=store)
    n = len(opened.manifest.runs)
    print(f"store {store}: {n} runs ready in {time.perf_counter() - t:.1f} s "
          f"(load {os.getloadavg()[0]:.1f})", flush=True)

    print(f"{'rep':>3} {'tables s':>8} {'build s':>7} {'encode+write s':>14} {'total s':>7} "
          f"{'CPU s':>6} {'runs/s':>7} {'spans':>8} {'MB':>7}  load")
    for i in range(args.reps):
        c0 = time.process_time()
        t0 = time.perf_counter()
        tables, _fps = otel._load([args.source], max_depth=8, store_dir=store, cache=None,
                                  changed=None)
        t1 = time.perf_counter()
        built, _skipped = otel._build(tables, redact=False)
        t2 = time.perf_counter()
        spans = 0
        with open(out, "w", encoding="utf-8") as fh:
            for r in built:
                s = otel._sdk_spans(r)
                spans += len(s)
                fh.write(otel.to_otlp_json(s) + "\n")
        t3 = time.perf_counter()
        print(f"{i:>3} {t1 - t0:>8.2f} {t2 - t1:>7.2f} {t3 - t2:>14.2f} {t3 - t0:>7.2f} "
              f"{time.process_time() - c0:>6.1f} {len(built) / (t3 - t0):>7.0f} {spans:>8} {os.path.getsize(out) / 1e6:>7.1f}  "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        del tables, built

    state = os.path.join(out_dir, "state.json")
    t, c = time.perf_counter(), time.process_time()
    res = otel.export_otel([args.source], out=out, store_dir=store, state=state)
    print(f"export_otel (public call, full, OTLP/JSON file): {res.sent} runs, {res.spans} "
          f"spans in {time.perf_counter() - t:.2f} s, {time.process_time() - c:.1f} CPU s "
          f"(load {os.getloadavg()[0]:.1f})", flush=True)
    t = time.perf_counter()
    res = otel.export_otel([args.source], out=out, store_dir=store, state=state)
    print(f"export_otel --changed-only, nothing changed: {res.sent} of {res.runs} runs sent in "
          f"{time.perf_counter() - t:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    if args.endpoint:
        t, c = time.perf_counter(), time.process_time()
        res = otel.export_otel([args.source], endpoint=args.endpoint, store_dir=store)
        print(f"export_otel (public call, full, OTLP/HTTP to {args.endpoint}): {res.sent} "
              f"runs, {res.spans} spans in {time.perf_counter() - t:.2f} s, "
              f"{time.process_time() - c:.1f} CPU s in this process "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
