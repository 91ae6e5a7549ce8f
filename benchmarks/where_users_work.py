"""Issue 30's figures where users meet the toolkit: notebooks, the report and ``watch``.

Usage::

    python benchmarks/where_users_work.py --source /work/corpus/runs-10000 [--notebooks 00,03,04]
        [--report] [--watch] [--reps 2]

All in one run, against a same-run baseline (the store's first build of the same fleet):

- **store first build**: ``rivumi-analysis store SOURCE`` into an empty store folder (the
  baseline the issue's "first run" goals are stated against);
- **notebooks**: each notebook executed headless (nbclient) on SOURCE, first into an empty
  store (first run), then ``--reps`` times again (re-runs, warm store): wall seconds and the
  kernel's peak RSS (its own ``getrusage`` read by a cell appended in memory);
- **report**: ``rivumi-analysis report SOURCE`` cold (empty store) and warm: seconds and peak
  RSS of the process;
- **watch**: ``rivumi-analysis watch SOURCE --iterations 1`` on a pipe with a warm store:
  seconds to the first frame and peak RSS.

Goals (issue 30): 00 re-run <= 10 s and <= 1.5 GB; 03 and 04 <= 20 s and <= 2 GB; first run
<= first build + 10 s; report warm <= 5 s and <= 1 GB, cold <= first build + 10 s; watch first
frame <= 3 s and <= 500 MB. Figures go to stdout (one line each) and, with ``--json FILE``,
to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
CLI = [PY, "-m", "rivumi_analysis.cli"]
NOTEBOOKS = {"00": "00_fleet_overview", "01": "01_load_and_validate", "02": "02_step_timelines",
             "03": "03_repeat_guards_and_budgets", "04": "04_replay_and_forks"}
GOALS = {"00": (10.0, 1.5e9), "03": (20.0, 2e9), "04": (20.0, 2e9)}

_RSS_CELL = ("import resource as _r, json as _j\n"
             "print('PEAK_RSS_KB', _r.getrusage(_r.RUSAGE_SELF).ru_maxrss)")


def _env(store_root: str, source: str) -> dict[str, str]:
    return {**os.environ, "RIVUMI_ANALYSIS_STORE_DIR": store_root,
            "RIVUMI_NOTEBOOK_RUN_ROOT": source, "PYTHONPATH": str(ROOT)}


def _own_peak(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run ``cmd`` in a wrapper process that reports the command's own peak RSS."""
    wrapper = ("import resource, subprocess, sys, time\n"
               "t = time.perf_counter()\n"
               f"p = subprocess.run({cmd!r}, capture_output=True)\n"
               "s = time.perf_counter() - t\n"
               "if p.returncode not in (0, 1): sys.stderr.buffer.write(p.stderr); sys.exit(9)\n"
               "print(s, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n")
    p = subprocess.run([PY, "-c", wrapper], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=3600)
    if p.returncode:
        raise RuntimeError(f"{cmd}: {p.stderr[-2000:]}")
    secs, rss = p.stdout.split()
    return float(secs), float(rss)


def run_notebook(name: str, env: dict[str, str]) -> tuple[float, float]:
    """Seconds to execute the notebook and the kernel's peak RSS (bytes)."""
    import nbformat
    from nbclient import NotebookClient

    path = ROOT / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(_RSS_CELL))
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        t0 = time.perf_counter()
        NotebookClient(nb, timeout=1800, allow_errors=False,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        secs = time.perf_counter() - t0
    finally:
        os.environ.clear()
        os.environ.update(saved)
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    kb = int(text.split("PEAK_RSS_KB")[1].split()[0])
    return secs, kb * 1024.0


def _fmt(secs: float, rss: float) -> str:
    return f"{secs:7.1f} s  {rss / 1e9:5.2f} GB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", required=True, help="a fleet (e.g. a generated corpus)")
    ap.add_argument("--notebooks", default="00,03,04", help="comma list of 00..04 ('' none)")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--watch", action="store_true")
    ap.add_argument("--reps", type=int, default=2, help="warm repetitions")
    ap.add_argument("--json", default=None, metavar="FILE")
    a = ap.parse_args(argv)
    out: dict[str, object] = {"source": a.source, "load_at_start": os.getloadavg()[0]}
    tmp = Path(tempfile.mkdtemp(prefix="rivumi-users-"))
    try:
        base_root = str(tmp / "baseline")
        secs, rss = _own_peak(CLI + ["store", a.source], _env(base_root, a.source))
        out["store_first_build"] = [secs, rss]
        print(f"store first build          {_fmt(secs, rss)}", flush=True)
        for key in [k for k in a.notebooks.split(",") if k]:
            name = NOTEBOOKS[key]
            env = _env(str(tmp / f"nb-{key}"), a.source)
            first = run_notebook(name, env)
            warm = [run_notebook(name, env) for _ in range(a.reps)]
            out[f"notebook_{key}"] = {"first": first, "warm": warm}
            goal = GOALS.get(key)
            print(f"notebook {key} first run      {_fmt(*first)}   "
                  f"(first build + {first[0] - out['store_first_build'][0]:.1f} s)", flush=True)
            for w in warm:
                print(f"notebook {key} re-run         {_fmt(*w)}"
                      + (f"   goal <= {goal[0]:.0f} s, {goal[1] / 1e9:.1f} GB" if goal else ""),
                      flush=True)
        if a.report:
            env = _env(str(tmp / "report"), a.source)
            page = str(tmp / "report.html")
            cold = _own_peak(CLI + ["report", a.source, "--out", page], env)
            warm = [_own_peak(CLI + ["report", a.source, "--out", page], env)
                    for _ in range(a.reps)]
            out["report"] = {"cold": cold, "warm": warm, "bytes": os.path.getsize(page)}
            print(f"report cold                {_fmt(*cold)}   "
                  f"(first build + {cold[0] - out['store_first_build'][0]:.1f} s)", flush=True)
            for w in warm:
                print(f"report warm                {_fmt(*w)}   goal <= 5 s, 1 GB", flush=True)
        if a.watch:
            env = _env(base_root, a.source)  # the baseline's store: warm
            frames = [_own_peak(CLI + ["watch", a.source, "--iterations", "1"], env)
                      for _ in range(max(a.reps, 1))]
            out["watch_first_frame"] = frames
            for f in frames:
                print(f"watch first frame (pipe)   {_fmt(*f)}   goal <= 3 s, 500 MB", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["load_at_end"] = os.getloadavg()[0]
    print(f"load average at start {out['load_at_start']:.1f}, at end {out['load_at_end']:.1f}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
