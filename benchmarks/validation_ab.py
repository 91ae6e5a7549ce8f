"""Alternating A/B of two revisions of the package on public calls (issue 28.5).

Written to decide whether a pandera-free validation may stay: A is the working tree, where a
frame its model's check plan passes (``rivumi_analysis.checks``) needs no pandera, B a revision
where pandera validates every frame (``--b`` the commit "One validation path: pandera
validates every frame": the shortcuts deleted). Any revision pair
works (``--a REV --b REV``). Each measurement runs in a fresh child process (imports included:
pandera's costs a fresh process 0.2-0.5 CPU-s), A and B alternating, on a generated corpus,
with the revision's tree first on ``PYTHONPATH``:

* ``tables``: every public table loader, ``cache=False`` (in memory, no store), one after the
  other in one process;
* ``events``: ``events_df(root, cache=False)`` alone;
* ``store``: the first (cold) store build through ``events_df(root)`` into an empty store.

Wall and CPU seconds (the child's and its reaped workers') are medians over ``--reps``; the
machine is shared, so CPU is the steadier figure.

Usage: ``.venv/bin/python benchmarks/validation_ab.py --b REV [--a REV] [--runs 500]
[--reps 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TABLES = ("runs_df", "events_df", "quarantine_df", "manifests_df", "tool_calls_df",
          "approvals_df", "model_calls_df", "usage_df", "verifications_df", "states_df",
          "drift_df", "forks_df", "messages_df")

CHILD = r"""
import json, sys, time
what, root, tree = sys.argv[1:4]
t0 = time.perf_counter()
import rivumi_analysis
assert rivumi_analysis.__file__.startswith(tree), (rivumi_analysis.__file__, tree)
rows = 0
if what == "tables":
    for name in json.loads(sys.argv[4]):
        rows += getattr(rivumi_analysis, name)(root, cache=False).height
elif what == "events":
    rows = rivumi_analysis.events_df(root, cache=False).height
else:
    rows = rivumi_analysis.events_df(root).height
print(json.dumps({"wall": time.perf_counter() - t0, "rows": rows}))
"""


def _tree(rev: str | None, into: str) -> str:
    """The package tree of ``rev`` (None: this working tree) as a folder for PYTHONPATH."""
    if rev is None:
        return str(ROOT)
    os.makedirs(into)
    archive = subprocess.run(["git", "archive", rev, "rivumi_analysis"], cwd=ROOT,
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def child(what: str, root: str, tree: str) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    with tempfile.TemporaryDirectory(prefix="vab-store-") as store:
        env["RIVUMI_ANALYSIS_STORE_DIR"] = store
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([PY, "-c", CHILD, what, root, tree, json.dumps(TABLES)],
                             capture_output=True, text=True, env=env, check=True, cwd="/")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return got


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--corpus", default=None, help="an existing corpus folder")
    ap.add_argument("--a", default=None, help="revision A (default: the working tree)")
    ap.add_argument("--b", required=True, help="revision B")
    ap.add_argument("--only", default="tables,events,store")
    args = ap.parse_args()
    root = args.corpus
    if root is None:
        root = os.path.join(tempfile.gettempdir(), f"validation-ab-{args.runs}")
        if not os.path.isdir(root):
            subprocess.run([PY, "-m", "rivumi_analysis.synth.corpus", "--out", root,
                            "--runs", str(args.runs), "--target-mb", str(args.runs / 10)],
                           check=True, cwd=ROOT)
    with tempfile.TemporaryDirectory(prefix="vab-trees-") as trees:
        tree = {"A": _tree(args.a, os.path.join(trees, "a")),
                "B": _tree(args.b, os.path.join(trees, "b"))}
        print(f"A {args.a or 'working tree'} | B {args.b} | corpus {root} | load average "
              f"{os.getloadavg()[0]:.1f} | {time.strftime('%H:%M:%S')}", flush=True)
        for what in args.only.split(","):
            got: dict[str, list[dict]] = {"A": [], "B": []}
            for rep in range(args.reps):
                for side in ("A", "B") if rep % 2 == 0 else ("B", "A"):
                    got[side].append(child(what, root, tree[side]))
            assert {r["rows"] for r in got["A"]} == {r["rows"] for r in got["B"]}, got
            med = {s: {k: statistics.median(r[k] for r in got[s]) for k in ("wall", "cpu")}
                   for s in got}
            print(f"{what:7} A wall {med['A']['wall']:.2f} s cpu {med['A']['cpu']:.2f} s | "
                  f"B wall {med['B']['wall']:.2f} s cpu {med['B']['cpu']:.2f} s | "
                  f"B/A wall {med['B']['wall'] / med['A']['wall']:.2f} "
                  f"cpu {med['B']['cpu'] / med['A']['cpu']:.2f} | "
                  f"walls A {[round(r['wall'], 2) for r in got['A']]} "
                  f"B {[round(r['wall'], 2) for r in got['B']]} | "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
