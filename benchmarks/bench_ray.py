"""Ray engine vs the process pool on one corpus, in one run (the same machine state for both).

    python -m rivumi_analysis.synth.corpus --runs 10000 --target-mb 1000 --out /tmp/ray10k
    .venv/bin/python benchmarks/bench_ray.py /tmp/ray10k --reps 3

Prints: the process engine's audit wall time (median and spread of ``--reps``, measured first,
before Ray exists in the process); Ray's fixed costs (``ray.init`` of a local cluster, the
first job's extra time over the warm median, shutdown); Ray's audit wall time; the ratio
Ray / process; whether the audit JSON is identical; and the per-chunk throughput (runs and MB
per second of one task slot, from the tasks' own timers), with the estimate
``T(N slots) = fixed + runs / (N * runs_per_slot_second)`` for a cluster. Nothing is asserted:
the machine is shared, so read the spreads and ratios, not absolute seconds.

``--what export`` (or ``store``) measures ``export`` (a store build into a fresh folder) the
same way instead of the audit: "identical" then means every table equal (``export``: all 13
tables of the two datasets after sorting, and the same ``_dataset.json`` tables; ``store``:
all 12 tables read back from the two stores). Outputs go to a temporary folder (``--tmp``)
and are deleted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def _timed(fn):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _spread(xs: list[float]) -> str:
    return (f"median {statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f}, "
            f"n={len(xs)})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", help="a folder of runs (e.g. from rivumi_analysis.synth.corpus)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runs-per-task", type=int, default=256)
    ap.add_argument("--jobs", type=int, default=None, help="process engine workers")
    ap.add_argument("--num-cpus", type=int, default=None, help="Ray local cluster CPUs")
    ap.add_argument("--node-ip", default="127.0.0.2",
                    help="loopback address for the local Ray node (Ray rewrites 127.0.0.1)")
    ap.add_argument("--what", choices=("audit", "export", "store"), default="audit")
    ap.add_argument("--tmp", default=None, help="folder for export/store outputs")
    args = ap.parse_args(argv)

    import tempfile

    n_cpus = args.num_cpus or len(os.sched_getaffinity(0))
    print(f"corpus {args.corpus}, {args.what}, {n_cpus} CPUs, runs_per_task "
          f"{args.runs_per_task}, reps {args.reps}", flush=True)
    tmp = tempfile.mkdtemp(prefix="bench-ray-", dir=args.tmp)
    counter = iter(range(10**6))

    def job(engine: str):  # type: ignore[no-untyped-def]
        """One measured job; returns (seconds, summary, a comparable signature)."""
        out = os.path.join(tmp, f"{engine}-{next(counter)}")
        if args.what == "audit":
            from rivumi_analysis.distributed import audit

            kw = ({"jobs": args.jobs} if engine == "process"
                  else {"runs_per_task": args.runs_per_task})
            dt, res = _timed(lambda: audit(args.corpus, engine=engine, **kw))
            return dt, getattr(res, "summary", None), json.dumps(res.to_json_obj())
        if args.what == "export":
            from rivumi_analysis.distributed import export

            dt, res = _timed(lambda: export(args.corpus, out, engine=engine,
                                            runs_per_task=args.runs_per_task))
            return dt, res.summary, _dataset_signature(out)
        from rivumi_analysis.distributed import store

        dt, res = _timed(lambda: store(args.corpus, store_dir=out, engine=engine,
                                       jobs=args.jobs))
        return dt, res.summary, _store_signature(res.opened)

    proc_times = []
    expected = None
    for _ in range(args.reps):
        dt, _s, expected = job("process")
        proc_times.append(dt)
        _drop_outputs(tmp)
    assert expected is not None
    from rivumi_analysis.read.discovery import discover

    runs = len(discover(args.corpus).runs)
    print(f"process engine: {runs} runs, {_spread(proc_times)}", flush=True)

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import logging

    import ray
    import ray.data

    def start() -> None:
        for attempt in (1, 2, 3):  # Ray gives its raylet 30 s: a busy machine can miss it
            try:
                ray.init(address="local", num_cpus=n_cpus, include_dashboard=False,
                         logging_level="ERROR", log_to_driver=False,
                         _node_ip_address=args.node_ip)
                return
            except Exception:
                ray.shutdown()
                if attempt == 3:
                    raise

    init_s, _ = _timed(start)
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    ray_times = []
    identical = True
    summaries = []
    try:
        for _ in range(args.reps + 1):  # the first job also starts the workers
            dt, summary, got = job("ray")
            ray_times.append(dt)
            summaries.append(summary)
            identical &= got == expected
            _drop_outputs(tmp)
    finally:
        stop_s, _ = _timed(ray.shutdown)
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    cold, warm = ray_times[0], ray_times[1:]
    warm_med = statistics.median(warm)
    proc_med = statistics.median(proc_times)
    print(f"ray start-up (ray.init, local cluster): {init_s:.2f} s; first job "
          f"{cold:.2f} s (+{cold - warm_med:.2f} s worker start); shutdown {stop_s:.2f} s")
    print(f"ray engine (warm): {_spread(warm)}")
    print(f"ratio ray / process (warm medians): {warm_med / proc_med:.2f}x; "
          f"with start-up and first-job costs: {(init_s + cold) / proc_med:.2f}x")
    print(f"identical {'audit JSON' if args.what == 'audit' else 'tables'}: {identical}")
    s = summaries[-1]
    per_slot = s.runs / s.task_seconds if s.task_seconds else float("nan")
    mb_slot = s.bytes / 1e6 / s.task_seconds if s.task_seconds else float("nan")
    per_chunk = s.task_seconds / max(1, s.chunks_done)
    overhead = warm_med - s.task_seconds / n_cpus
    print(f"per chunk ({s.runs / max(1, s.chunks_done):.0f} runs): {per_chunk:.2f} s of one "
          "task slot; "
          f"{per_slot:.0f} runs/s, {mb_slot:.1f} MB/s per slot ({s.runs} runs, "
          f"{s.bytes / 1e6:.0f} MB, {s.chunks_done} chunks)")
    print(f"scheduling overhead here: {overhead:.2f} s (warm wall - task seconds / {n_cpus})")
    print("estimate for a cluster of N task slots: "
          f"T ~ {init_s:.1f} s start-up + {max(0.0, overhead):.1f} s + runs / (N x "
          f"{per_slot:.0f}) s; e.g. 1,000,000 runs on 64 slots ~ "
          f"{init_s + max(0.0, overhead) + 1e6 / (64 * per_slot):.0f} s")
    return 0 if identical else 1


def _drop_outputs(tmp: str) -> None:
    import shutil

    for name in os.listdir(tmp):
        shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)


def _frames_signature(frames: dict) -> str:  # type: ignore[type-arg]
    """A digest of tables in a canonical row order (equal tables, equal digest)."""
    import hashlib

    import polars as pl

    h = hashlib.blake2b(digest_size=16)
    for name in sorted(frames):
        df = frames[name]
        df = df.select(sorted(df.columns))
        keys = [c for c, t in df.schema.items() if not isinstance(t, (pl.List, pl.Struct))]
        df = df.sort(keys, nulls_last=True)
        h.update(f"{name}:{df.schema}:{df.height}".encode())
        h.update(df.hash_rows(seed=1).to_numpy().tobytes())
    return h.hexdigest()


def _dataset_signature(out: str) -> str:
    import polars as pl

    from rivumi_analysis.export import TABLES

    frames = {t: pl.scan_parquet(f"{out}/{t}/**/*.parquet", hive_partitioning=True).collect()
              for t in TABLES}
    with open(os.path.join(out, "_dataset.json"), encoding="utf-8") as fh:
        tables = json.load(fh)["tables"]
    return _frames_signature(frames) + json.dumps(tables, sort_keys=True)


def _store_signature(opened) -> str:  # type: ignore[no-untyped-def]
    from rivumi_analysis.store import TABLES
    from rivumi_analysis.store.read import ordered, read_parts

    m = opened.manifest
    return _frames_signature({t: ordered(read_parts(opened.store, m, t), t, m) for t in TABLES})


if __name__ == "__main__":
    sys.exit(main())
