"""Benchmark of the Parquet store (issue 12): figures against baselines measured in the same run.

Usage (a corpus outside the repo; the script APPENDS to 100 of its runs, so use a copy)::

    python -m rivumi_analysis.synth.corpus --runs 10000 --target-mb 1000 --out /tmp/store10k
    python benchmarks/store_bench.py /tmp/store10k [--reps 3] [--store DIR]

It measures this tree's package, or the one ``PYTHONPATH`` names (an A/B of two trees with
one script: ``PYTHONPATH=/tmp/base python benchmarks/store_bench.py ...``); the second line
of its output says which.

Prints, each with min / median / max over ``--reps`` and a ratio to its baseline:
cold ``events_df`` and ``states_df`` (``cache=False``) as the baselines; the first build of
the store; warm ``events_df`` / ``states_df`` through the store; a ``scan_events`` filter
query; a refresh with nothing changed against the stat floor (discovery plus one ``lstat``
of every entry of every run); a refresh after appending one event to 100 runs (``--reps``
times, 100 other runs each time, from a settled store); store bytes per event.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# This tree's package, unless PYTHONPATH names another one: an A/B runs one script against
# two trees by PYTHONPATH alone (the header line says which package was measured).
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT))


def cpu_seconds() -> float:
    """CPU time of this process and its waited-for children (worker pools): a figure that
    depends far less on the machine's load than wall time does."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[[], Any], reps: int, cpu: list[float] | None = None,
          ) -> tuple[list[float], Any]:
    out = []
    value = None
    for _ in range(reps):
        c0 = cpu_seconds()
        t0 = time.perf_counter()
        value = fn()
        out.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append(cpu_seconds() - c0)
    return out, value


def fmt(ts: list[float]) -> str:
    return (f"min {min(ts):7.3f} s  median {statistics.median(ts):7.3f} s  "
            f"max {max(ts):7.3f} s")


def stat_floor(src: str) -> None:
    from rivumi_analysis.read.discovery import discover

    for loc in discover(src).runs:
        with os.scandir(loc.run_dir) as it:
            for e in it:
                e.stat(follow_symlinks=False)


def append_event(run_dir: str, n: int) -> bool:
    """Append one valid next event (the last event's envelope, next sequence) to a log that
    ends with a newline; False when the log has no parsable last line."""
    path = os.path.join(run_dir, "events.jsonl")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        last = json.loads(data.rstrip(b"\n").rsplit(b"\n", 1)[-1])
    except (OSError, ValueError):
        return False
    if not data.endswith(b"\n") or not isinstance(last, dict) or type(
            last.get("sequence")) is not int:
        return False
    ev = {**last, "sequence": last["sequence"] + 1, "event_id": f"store-bench-{n:032d}",
          "event_type": "note.added", "data": {"store_bench": n}}
    with open(path, "ab") as fh:
        fh.write(json.dumps(ev, separators=(",", ":")).encode() + b"\n")
    return True


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def live_appends(src: str, store: str) -> int:
    """Refresh after appending one event to 100 runs that are being written (their writer
    lock held, as by the runner): their grown logs are decoded from the first incomplete
    line (the prefix kept when they were read while live)."""
    import fcntl

    from rivumi_analysis.store.core import open_store

    names = sorted(n for n in os.listdir(src) if not n.startswith("."))
    runs = [os.path.join(src, n) for n in names[1:: max(1, len(names) // 100)]][:100]
    t, op = timed(lambda: open_store(src, store_dir=store), 1)
    print(f"refresh before (nothing changed)      {fmt(t)}  ({op.store.last_stats.reread} "
          f"re-read; {load()})", flush=True)
    fds = []
    for r in runs:
        fd = os.open(os.path.join(r, ".writer.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        fds.append(fd)
    try:
        t, op = timed(lambda: open_store(src, store_dir=store), 1)
        s = op.store.last_stats
        print(f"refresh after 100 writer locks taken  {fmt(t)}  ({s.reread} re-read, read "
              f"whole; {load()})", flush=True)
        for k in (1, 2, 3):
            appended = sum(append_event(r, 100 + k) for r in runs)
            t, op = timed(lambda: open_store(src, store_dir=store), 1)
            s = op.store.last_stats
            print(f"refresh after appending one event to {appended} live runs (#{k}) {fmt(t)}  "
                  f"({s.reread} re-read, {s.incremental} from their first incomplete line; "
                  f"{load()})", flush=True)
        import rivumi_analysis as ra

        assert ra.events_df(src, store_dir=store).equals(ra.events_df(src, cache=False))
        assert ra.states_df(src, store_dir=store).equals(ra.states_df(src, cache=False))
        print("warm events_df and states_df equal cold ones after the live appends", flush=True)
    finally:
        for fd in fds:
            os.close(fd)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--store", default=None, help="store folder (default: a temp folder)")
    ap.add_argument("--live-appends", action="store_true",
                    help="only the live-run appends, on an existing --store: 100 runs get a "
                         "held writer lock (as the runner holds it), then events appended")
    args = ap.parse_args()
    if args.live_appends:
        return live_appends(args.corpus, args.store)
    os.environ["RIVUMI_ANALYSIS_STORE"] = "1"
    import polars as pl

    import rivumi_analysis as ra
    from rivumi_analysis.store.core import open_store

    src = args.corpus
    store = args.store or tempfile.mkdtemp(prefix="rivumi-store-bench-")
    if os.path.exists(store):
        shutil.rmtree(store)
    lines = [f"corpus {src}: {len(os.listdir(src))} entries; store {store}; {load()}",
             f"rivumi_analysis {ra.__version__} from {Path(ra.__file__).parent}"]
    print(*lines, sep="\n", flush=True)

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    cpu_ev: list[float] = []
    cpu_st: list[float] = []
    cpu_first: list[float] = []
    med = statistics.median
    # every baseline and the first build --reps times: a single cold run moved the ratios by
    # +-0.05 between two runs of the same code
    cold_ev, ev = timed(lambda: ra.events_df(src, cache=False), args.reps, cpu_ev)
    say(f"cold events_df ({ev.height} rows)          {fmt(cold_ev)}  (CPU {med(cpu_ev):.1f} s; "
        f"{load()})")
    cold_st, st = timed(lambda: ra.states_df(src, cache=False), args.reps, cpu_st)
    say(f"cold states_df ({st.height} rows)          {fmt(cold_st)}  (CPU {med(cpu_st):.1f} s; "
        f"{load()})")
    cold_sum = med(cold_ev) + med(cold_st)

    def first_build() -> Any:
        shutil.rmtree(store, ignore_errors=True)  # each repetition builds from nothing
        return open_store(src, store_dir=store)

    first, opened = timed(first_build, args.reps, cpu_first)
    say(f"first build (all tables)             {fmt(first)}  = "
        f"{med(first) / cold_sum:.2f}x cold events_df+states_df; CPU {med(cpu_first):.1f} s = "
        f"{med(cpu_first) / (med(cpu_ev) + med(cpu_st)):.2f}x theirs (medians; {load()})")
    warm_ev, wev = timed(lambda: ra.events_df(src, store_dir=store), args.reps)
    say(f"warm events_df                       {fmt(warm_ev)}  = "
        f"{100 * med(warm_ev) / med(cold_ev):.1f}% of cold  ({load()})")
    warm_st, wst = timed(lambda: ra.states_df(src, store_dir=store), args.reps)
    say(f"warm states_df                       {fmt(warm_st)}  = "
        f"{100 * med(warm_st) / med(cold_st):.1f}% of cold  ({load()})")
    assert wev.equals(ev) and wst.equals(st), "warm tables differ from cold ones"

    def query() -> Any:
        return (ra.scan_events(src, store_dir=store)
                .filter(pl.col("event_type") == "tool.completed")
                .select("run_dir", "sequence", "created_at").collect())

    q, qdf = timed(query, args.reps)
    say(f"scan_events filter query ({qdf.height} rows) {fmt(q)}  ({load()})")

    def query_stale() -> Any:
        return (ra.scan_events(src, store_dir=store, refresh=False)
                .filter(pl.col("event_type") == "tool.completed")
                .select("run_dir", "sequence", "created_at").collect())

    q2, q2df = timed(query_stale, args.reps)
    assert q2df.equals(qdf)
    say(f"the same query, refresh=False (no stat pass) {fmt(q2)}  ({load()})")
    floor: list[float] = []
    nochange: list[float] = []
    for _ in range(args.reps):  # interleaved: both see the same load
        floor += timed(lambda: stat_floor(src), 1)[0]
        nochange += timed(lambda: open_store(src, store_dir=store), 1)[0]
    say(f"stat floor (discover + lstat all)    {fmt(floor)}")
    say(f"refresh, nothing changed             {fmt(nochange)}  = "
        f"{statistics.median(nochange) / statistics.median(floor):.2f}x the stat floor  "
        f"({load()})")
    names = sorted(n for n in os.listdir(src) if not n.startswith("."))
    stride = max(1, len(names) // 120)  # ~120 candidates per rep: some logs take no event
    app: list[float] = []
    cpu_app: list[float] = []
    for k in range(args.reps):
        # each rep appends one event to 100 other runs (a stride through the fleet, offset
        # k; a run whose log cannot take an event is skipped), from a settled store: the
        # previous rep's runs are re-read once more after the racy window, untimed
        runs = [os.path.join(src, n) for n in names[k::stride]]
        appended = []
        for r in runs:
            if len(appended) == 100:
                break
            if append_event(r, 1):
                appended.append(r)
        app_k, op = timed(lambda: open_store(src, store_dir=store), 1, cpu_app)
        app += app_k
        s = op.store.last_stats
        say(f"  rep {k + 1}: refresh after appending one event to {len(appended)} runs "
            f"{app_k[0]:.3f} s  ({s.reread} runs re-read, {s.incremental} from their first "
            f"incomplete line, {s.parts_written} part(s) written; CPU {cpu_app[-1]:.2f} s; "
            f"{load()})")
        if k + 1 < args.reps:
            time.sleep(2.5)
            open_store(src, store_dir=store)
    say(f"refresh after appending one event to 100 runs {fmt(app)}  (CPU median "
        f"{statistics.median(cpu_app):.2f} s; a new set of runs each rep)")
    for r in appended:  # the same runs grow again while still live (just modified)
        append_event(r, 2)
    app2, op2 = timed(lambda: open_store(src, store_dir=store), 1)
    s = op2.store.last_stats
    say(f"refresh after a second append to them {fmt(app2)}  ({s.reread} runs re-read, "
        f"{s.incremental} from their first incomplete line; {load()})")
    time.sleep(2.5)  # let them settle past the racy window
    settle, op3 = timed(lambda: open_store(src, store_dir=store), 1)
    say(f"next refresh (the runs settled)      {fmt(settle)}  "
        f"({op3.store.last_stats.reread} re-read)")
    check = ra.events_df(src, store_dir=store)
    assert check.equals(ra.events_df(src, cache=False)), "warm events differ after appends"
    m = op3.manifest
    total = sum(f["bytes"] for p in m.parts.values() for f in p["files"])
    ev_bytes = sum(f["bytes"] for _k, f in m.files("events"))
    n_ev = ra.scan_events(src, store_dir=store).select(pl.len()).collect().item()
    say(f"store size {total / 1e6:.1f} MB in {len(m.parts)} parts: {total / n_ev:.0f} bytes "
        f"per event (events table alone {ev_bytes / n_ev:.0f} bytes per event)")
    if not args.store:
        shutil.rmtree(store, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
