"""CPU split of one store chunk against the cold `events_df` + `states_df` chunks.

Usage: ``python benchmarks/store_cpu_split.py SOURCE N [--exact] [--whole]`` (the first N runs
of SOURCE). Prints the CPU seconds (``time.process_time``, this process only) of the cold events
and states chunk workers, then of every stage the store's chunk spends on the same runs
(``store.build.read_runs_for_tables`` + ``chunk_frames``: the one clean read, each table,
the reference replay that drift and forks use, the part writes), and with ``--exact`` also
the exact builder's (``read_runs`` + ``build_frames``, the oracle; the store's chunk until
session 4). ``--whole`` also splits what a worker spends beyond those stages: ``run_chunk``
on the same runs (read, tables, writes, the rest: fingerprints after the read, manifest
entries; and the cyclic garbage collector's share, from ``gc.callbacks``), and a fresh
process's one-off cost (imports, first validations) as its first 20-run chunk minus its
second. It measures the store's first-build goal (issue 12) stage by stage; nothing is
asserted.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import tempfile
import time

from rivumi_analysis.read.discovery import discover
from rivumi_analysis.store.build import (
    build_frames,
    chunk_frames,
    read_runs,
    read_runs_for_tables,
    write_parts,
)
from rivumi_analysis.tables._common import quarantine_frame
from rivumi_analysis.tables.approvals import approvals_frame
from rivumi_analysis.tables.drift import drift_frame
from rivumi_analysis.tables.events import _events_chunk, events_frame
from rivumi_analysis.tables.forks import forks_frame
from rivumi_analysis.tables.manifests import manifests_frame
from rivumi_analysis.tables.messages import messages_frame
from rivumi_analysis.tables.model_calls import model_calls_frame
from rivumi_analysis.tables.runs import runs_frame
from rivumi_analysis.tables.states import _finish_chunk, _prepare_chunk, replay_run, states_df
from rivumi_analysis.tables.tool_calls import tool_calls_frame
from rivumi_analysis.tables.usage import usage_frame
from rivumi_analysis.tables.verifications import verifications_frame


def main(source: str, n: int, exact: bool = False, whole: bool = False) -> None:
    """Print the CPU split of the store's build of the first ``n`` runs of ``source``."""
    locations = discover(source).runs[:n]
    clock = time.process_time
    build_frames(read_runs(locations[:5]))  # imports and one-off kernel set-up off the clock
    chunk_frames(read_runs_for_tables(locations[:5]))
    start = clock()
    _events_chunk(locations)
    events_cpu = clock() - start
    start = clock()
    _finish_chunk(_prepare_chunk(locations, None), None, "auto")
    states_cpu = clock() - start
    cold = events_cpu + states_cpu
    print(f"{n} runs: cold events chunk {events_cpu:.2f} s + states chunk {states_cpu:.2f} s"
          f" = {cold:.2f} s CPU")
    stages: dict[str, float] = {}
    start = clock()
    runs = read_runs_for_tables(locations)
    stages["read_for_tables"] = clock() - start
    frames = chunk_frames(runs, stages=stages)
    del runs
    start = clock()
    write_parts(frames, tempfile.mkdtemp(), "x")
    stages["write_parts"] = clock() - start
    _report("store chunk (one clean read, chunk_frames)", stages, cold, n)
    if exact:
        _report("exact builder (read_runs, build_frames)", _exact(locations), cold, n)
    if whole:
        _report("run_chunk (what a worker runs per chunk)", _whole(locations), cold, n)
        out = subprocess.run([sys.executable, __file__, source, "20", "--fixed"], check=True,
                             capture_output=True, text=True).stdout
        print(out.strip())


def _whole(locations: list) -> dict[str, float]:
    """``run_chunk`` of ``locations`` in this process, split by stage (CPU seconds)."""
    from rivumi_analysis.store import core

    clock = time.process_time
    stages: dict[str, float] = {}
    gc_time = [0.0, 0.0]

    def timed(name: str, f):  # noqa: ANN001, ANN202
        def wrapper(*a, **k):  # noqa: ANN002, ANN003, ANN202
            start = clock()
            try:  # (the chunk's reads, a generator: consumed here to be timed)
                out = f(*a, **k)
                return iter(list(out)) if name == "_read_runs" else out
            finally:
                stages[name] = stages.get(name, 0.0) + clock() - start
        return wrapper

    def on_gc(phase: str, _info: dict) -> None:
        if phase == "start":
            gc_time[1] = clock()
        else:
            gc_time[0] += clock() - gc_time[1]

    saved = {name: getattr(core, name) for name in ("_read_runs", "chunk_frames",
                                                    "write_parts", "write_prefixes")}
    for name, f in saved.items():
        setattr(core, name, timed(name, f))
    task = _task(core, locations, 0)
    gc.callbacks.append(on_gc)
    try:
        start = clock()
        core.run_chunk(task)
        total = clock() - start
    finally:
        gc.callbacks.remove(on_gc)
        for name, f in saved.items():
            setattr(core, name, f)
    stages["rest (fingerprints, entries)"] = total - sum(stages.values())
    print(f"(the cyclic garbage collector ran {gc_time[0]:.2f} CPU-s inside run_chunk)")
    return stages


def _task(core, locations: list, i: int):  # noqa: ANN001, ANN202
    """A chunk task with the fingerprints the store takes before reading (a run without one
    is volatile: it would keep a prefix, which a settled fleet's build does not)."""
    held = core._held_keys()
    fps = {loc.run_dir: core._fp_blob(core.run_fingerprint(loc.run_dir, held))
           for loc in locations}
    return core.ChunkTask(tempfile.mkdtemp(), f"g0000001-{i:04d}", tuple(locations), fps)


def _fixed(source: str, n: int) -> None:
    """A fresh process's one-off cost: its CPU so far (interpreter, imports), then two
    ``run_chunk`` of ``n`` runs each (the first pays the lazy imports and first calls)."""
    from rivumi_analysis.store import core

    clock = time.process_time
    imports = clock()  # CPU of this process since it started
    locations = discover(source).runs[:2 * n]
    cpu = []
    for i in (0, 1):
        part = locations[i * n:(i + 1) * n]
        task = _task(core, part, i)
        start = clock()
        core.run_chunk(task)
        cpu.append(clock() - start)
    print(f"a worker's one-off cost: imports {imports:.2f} s + first {n}-run chunk {cpu[0]:.2f}"
          f" s - second {cpu[1]:.2f} s = {imports + cpu[0] - cpu[1]:.2f} CPU-s per worker process")


def _exact(locations: list) -> dict[str, float]:
    clock = time.process_time
    stages: dict[str, float] = {}
    start = clock()
    runs = read_runs(locations)
    stages["read_run"] = clock() - start
    start = clock()
    replays = [replay_run(r) for r in runs if r.kind != "external"]
    stages["replay (drift+forks)"] = clock() - start
    builders = [("runs", runs_frame, runs), ("events", events_frame, runs),
                ("quarantine", quarantine_frame, runs), ("manifests", manifests_frame, runs),
                ("tool_calls", tool_calls_frame, runs), ("approvals", approvals_frame, runs),
                ("model_calls", model_calls_frame, runs), ("usage", usage_frame, runs),
                ("verifications", verifications_frame, runs), ("states", states_df, runs),
                ("drift", drift_frame, replays), ("forks", forks_frame, replays),
                ("messages", messages_frame, runs)]
    frames = {}
    for name, build, arg in builders:
        start = clock()
        frames[name] = build(arg)
        stages[name] = clock() - start
    start = clock()
    write_parts(frames, tempfile.mkdtemp(), "x")
    stages["write_parts"] = clock() - start
    return stages


def _report(title: str, stages: dict[str, float], cold: float, n: int) -> None:
    total = sum(stages.values())
    print(f"{title}: {total:.2f} s = {total / cold:.2f}x the cold pair")
    for name, cpu in sorted(stages.items(), key=lambda kv: -kv[1]):
        print(f"  {name:22s} {cpu:6.2f} s {100 * cpu / total:5.1f} %  {1000 * cpu / n:.2f} ms/run")


if __name__ == "__main__":
    if "--fixed" in sys.argv[3:]:
        _fixed(sys.argv[1], int(sys.argv[2]))
    else:
        main(sys.argv[1], int(sys.argv[2]), "--exact" in sys.argv[3:], "--whole" in sys.argv[3:])
