"""The store's first build against the cold ``events_df`` + ``states_df``, each in a fresh
process, for one or more trees, alternated (an A/B in the same minutes).

Usage: ``python benchmarks/store_first_build.py CORPUS ROUNDS TREE [TREE ...]`` where each
TREE is a source tree of the package (e.g. ``git archive`` of main, and your worktree); the
child processes run with ``PYTHONPATH=TREE`` and this interpreter. ``ONLY=build`` (env)
skips the cold pair. Prints per round and tree: wall seconds and CPU seconds (the child and
its worker processes, from ``RUSAGE_CHILDREN``), and the load average. Reads the corpus
only (the store goes to a fresh temporary folder, removed after each build).
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

JOBS = {
    "events": "import rivumi_analysis as ra; ra.events_df({c!r}, cache=False)",
    "states": "import rivumi_analysis as ra; ra.states_df({c!r}, cache=False)",
    "build": "from rivumi_analysis.store.core import open_store; "
             "open_store({c!r}, store_dir={d!r})",
}


def run(tree: str, code: str, corpus: str) -> tuple[float, float]:
    """Wall and CPU seconds of ``code`` in a fresh process importing the package from
    ``tree``."""
    d = tempfile.mkdtemp(prefix="store-first-build-")
    shutil.rmtree(d)  # the store creates it
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code.format(c=corpus, d=d)],
                       env={**os.environ, "PYTHONPATH": tree}, cwd=tree,
                       capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(d, ignore_errors=True)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main(argv: list[str]) -> None:
    corpus, rounds, trees = argv[0], int(argv[1]), [os.path.abspath(t) for t in argv[2:]]
    only = os.environ.get("ONLY", "events,states,build").split(",")
    for rnd in range(rounds):
        for tree in trees:
            out = []
            for job in only:
                wall, cpu = run(tree, JOBS[job], corpus)
                out.append(f"{job} {wall:6.2f} s CPU {cpu:6.2f}")
            print(f"r{rnd} {tree}: " + " | ".join(out),
                  f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
