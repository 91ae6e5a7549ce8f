"""How the relayflowd reference reducer scales with channel length (issue 14).

A synthetic journal: one producer and one consumer exchanging N messages (append, delivery,
ack each). Baseline measured in the same run: one pass that only canonicalises every payload
(the reducer's unavoidable per-entry JSON work). Prints entries/s and the ratio to the baseline;
medians of ``--reps`` runs with their spread.

    .venv/bin/python benchmarks/bench_relay_fold.py --sizes 1000,2000,4000 --reps 3
"""

from __future__ import annotations

import argparse
import statistics
import time

from rivumi_analysis.relay.read import Envelope, canonical
from rivumi_analysis.relay.rules import fold_entries


def build(n: int) -> list[Envelope]:
    spec = {"steps": [{"id": "p", "type": "agent", "surfaces": {"streams": [{"stream": "c"}]}},
                      {"id": "q", "type": "agent"}]}
    out = [Envelope(1, 1, "run.spawned", "r", None, None, 0, {"spec": spec}, 0),
           Envelope(2, 1, "step.attempt.started", "r", "p", 1, 0, {}, 1),
           Envelope(3, 1, "step.attempt.started", "r", "q", 1, 0, {}, 2)]
    seq = 3
    for i in range(1, n + 1):
        msg = {"i": i}
        seq += 1
        out.append(Envelope(seq, 1, "channel.appended", "r", "p", 1, 0, {
            "channel": "c", "offset": i, "producer": "p", "message_id": f"m{i}",
            "message": msg}, seq))
        seq += 1
        d = seq
        out.append(Envelope(seq, 1, "channel.delivered", "r", "q", 1, 0, {
            "channel": "c", "consumer": "q", "offset": i, "message": msg}, seq))
        seq += 1
        out.append(Envelope(seq, 1, "channel.acknowledged", "r", "q", 1, 0, {
            "channel": "c", "consumer": "q", "offset": i, "delivery_seq": d}, seq))
    return out


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,2000,4000")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    print("messages  entries  fold_s (min-max)        baseline_s  fold/baseline  entries/s")
    for n in (int(x) for x in args.sizes.split(",")):
        entries = build(n)
        fold, base = [], []
        for _ in range(args.reps):
            base.append(timed(lambda e=entries: [canonical(x.payload) for x in e]))
            fold.append(timed(lambda e=entries: fold_entries(e, run_id="r")))
        f, b = statistics.median(fold), statistics.median(base)
        print(f"{n:8d} {len(entries):8d}  {f:7.3f} ({min(fold):.3f}-{max(fold):.3f})"
              f"  {b:10.4f}  {f / b:13.1f}  {len(entries) / f:9.0f}")


if __name__ == "__main__":
    main()
