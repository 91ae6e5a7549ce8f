"""The child side of a crash cut (see :mod:`rivumi_analysis.synth.crash`).

``python -m rivumi_analysis.synth.crash_child --scenario S --seed N --out DIR --cut SPEC`` runs a
scenario script with a hook on every protocol point of the writer; at the requested cut it
writes ``CUT <run_dir>`` to stdout and blocks on stdin until the parent's ``SIGKILL``. It lives
apart from ``crash`` because it needs the scenarios, which use ``crash`` to make sample runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rivumi_analysis.synth.crash import CutSpec
from rivumi_analysis.synth.scenarios import Driver, get_script


def child(scenario: str, seed: int, out_root: str, cut: str) -> int:
    spec = CutSpec.parse(cut)
    script = get_script(scenario, seed)
    if spec.point == "torn":
        if spec.sequence is None:
            raise SystemExit("torn cuts need a sequence selector")
        script = {**script, "faults": {**script.get("faults", {}), "torn_at": spec.sequence}}
    at_cut = spec.matcher()
    drv: Driver | None = None

    def hook(point: str, seq: int | None, event_type: str | None) -> None:
        if not at_cut(point, seq, event_type):
            return
        assert drv is not None
        sys.stdout.write(f"CUT {drv.run_dir}\n")
        sys.stdout.flush()
        # Wait for the SIGKILL. EOF means the parent is gone: stop without writing more.
        sys.stdin.read()
        os._exit(3)

    drv = Driver(out_root, script, hook=hook)
    drv.run()
    sys.stdout.write(f"END {drv.run_dir}\n")
    sys.stdout.flush()
    return 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rivumi_analysis.synth.crash_child")
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cut", required=True)
    args: Any = ap.parse_args(argv)
    return child(args.scenario, args.seed, args.out, args.cut)


if __name__ == "__main__":
    sys.exit(main())
