"""Start-up time of the CLI commands scripts call once per run (issue 30 §8).

Each command runs in a fresh process, as the console script does (``from rivumi_analysis.cli
import main``), REPS times in alternating order; printed: the median wall time, its range, and
its ratio to ``--version`` (the interpreter and the argument parser, nothing else). With
``--baseline DIR`` (another checkout, e.g. ``/work/main``) the same commands run from that
tree in the same loop, alternating with this one, so both see the same machine load::

    .venv/bin/python benchmarks/cli_startup.py --reps 15
    .venv/bin/python benchmarks/cli_startup.py --reps 15 --baseline /work/main

Default run: the bundled 50-event example (``sample_runs/example/...``). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "sample_runs" / "example" / "a66038f97f204cb3aaa96339f195c37e"
MAIN = "import sys; from rivumi_analysis.cli import main; sys.exit(main())"


def commands(run: str, sequence: int) -> dict[str, list[str]]:
    """The measured commands (argument lists after the program name)."""
    return {
        "--version": ["--version"],
        "replay RUN --json": ["replay", run, "--json"],
        f"fork-seed RUN --sequence {sequence}": ["fork-seed", run, "--sequence", str(sequence)],
        "replay RUN (readable)": ["replay", run],
    }


def once(tree: Path, argv: list[str]) -> float:
    """Wall seconds of one process running the CLI of ``tree`` (its folder first on
    ``sys.path``, so its package is the one imported)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", MAIN, *argv], cwd=tree, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(argv)} exited {proc.returncode}: "
                         f"{proc.stderr.decode(errors='replace')[-2000:]}")
    return took


def which(tree: Path) -> str:
    """The package file ``tree``'s command imports (to show the trees really differ)."""
    out = subprocess.run([sys.executable, "-c", "import rivumi_analysis; "
                          "print(rivumi_analysis.__file__)"], cwd=tree, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tree)}, timeout=60)
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=15, help="runs per command and tree")
    p.add_argument("--run", default=str(EXAMPLE), help="the run directory")
    p.add_argument("--sequence", type=int, default=10, help="fork-seed's sequence")
    p.add_argument("--baseline", default=None, metavar="DIR",
                   help="another checkout to measure in the same loop")
    args = p.parse_args(argv)
    run = os.path.abspath(args.run)
    trees = {"this": ROOT}
    if args.baseline:
        trees["baseline"] = Path(args.baseline).resolve()
    for name, tree in trees.items():
        print(f"{name}: {which(tree)}")
    print(f"load average at start: {os.getloadavg()}")
    cmds = commands(run, args.sequence)
    times: dict[tuple[str, str], list[float]] = {(t, c): [] for t in trees for c in cmds}
    for _warm in range(1):  # fill the page cache and the bytecode caches
        for tree in trees.values():
            for c in cmds.values():
                once(tree, c)
    for rep in range(args.reps):
        order = list(trees.items())
        if rep % 2:
            order.reverse()
        for tname, tree in order:
            for cname, c in cmds.items():
                times[(tname, cname)].append(once(tree, c))
    print(f"load average at end: {os.getloadavg()}")
    print(f"\nmedian wall seconds over {args.reps} runs each (range), ratio to --version")
    width = max(map(len, cmds))
    for tname in trees:
        version = statistics.median(times[(tname, "--version")])
        print(f"\n[{tname}]")
        for cname in cmds:
            xs = times[(tname, cname)]
            med = statistics.median(xs)
            print(f"  {cname:<{width}}  {med:6.3f} s  ({min(xs):.3f}-{max(xs):.3f})  "
                  f"x{med / version:.2f}")
    if args.baseline:
        print("\nthis / baseline (medians)")
        for cname in cmds:
            a = statistics.median(times[("this", cname)])
            b = statistics.median(times[("baseline", cname)])
            print(f"  {cname:<{width}}  {a:6.3f} / {b:6.3f} = {a / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
