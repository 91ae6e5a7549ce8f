"""In-process A/B of the store's Parquet writer: another tree's ``store/build.py`` against this one.

Usage: ``python benchmarks/store_write_ab.py OTHER_BUILD_PY SOURCE REPS N [N ...]``, e.g.
``OTHER_BUILD_PY`` = ``/tmp/base/rivumi_analysis/store/build.py`` from
``git -C /work/main archive HEAD | tar -x -C /tmp/base``. For each N, the tables of an N-run
chunk of SOURCE (every ``len // N`` th run, as a refresh's chunk spreads over a fleet) are built
once with this tree's ``chunk_frames``; then each tree's ``write_parts`` writes them REPS times,
the two alternated in one process (both load the same polars and pyarrow), into a temporary
folder. Prints the CPU (``time.process_time``: this process and its writer threads) and wall
medians and minimums per tree, the load average, and whether both trees wrote the same bytes
(every file compared). Nothing is asserted.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rivumi_analysis.read.discovery import discover
from rivumi_analysis.store import build


def main(other: str, source: str, reps: int, sizes: list[int]) -> None:
    """Print the A/B of ``write_parts`` for every chunk size in ``sizes``."""
    spec = importlib.util.spec_from_file_location("rivumi_analysis.store._other_build", other)
    assert spec is not None and spec.loader is not None
    theirs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(theirs)
    runs = discover(source).runs
    root = Path(tempfile.mkdtemp(prefix="store-write-ab-"))
    try:
        for n in sizes:
            locs = runs[::max(1, len(runs) // n)][:n]
            frames = build.chunk_frames(build.read_runs_for_tables(locs))
            kinds = dict(zip(frames["runs"]["run_dir"].to_list(),
                             frames["runs"]["kind"].to_list(), strict=True))
            cpu: dict[str, list[float]] = {"other": [], "this": []}
            wall: dict[str, list[float]] = {"other": [], "this": []}
            for i in range(reps):
                order = [("other", theirs), ("this", build)]
                for name, mod in order if i % 2 else order[::-1]:
                    start, clock = time.perf_counter(), time.process_time()
                    mod.write_parts(frames, root / name, "ab", kinds=kinds)
                    cpu[name].append(time.process_time() - clock)
                    wall[name].append(time.perf_counter() - start)
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            same = _same_bytes(root / "other", root / "this")
            print(f"{n} runs ({frames['events'].height} events, kinds {sorted(set(kinds.values()))}),"
                  f" {reps} reps each, load {load}, same bytes: {same}")
            for name in ("other", "this"):
                print(f"  {name:5s} write_parts CPU median {1000 * statistics.median(cpu[name]):7.1f}"
                      f" ms (min {1000 * min(cpu[name]):7.1f}), wall median"
                      f" {1000 * statistics.median(wall[name]):7.1f} ms")
            shutil.rmtree(root / "other")
            shutil.rmtree(root / "this")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _same_bytes(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    return files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(x) for x in sys.argv[4:]])
