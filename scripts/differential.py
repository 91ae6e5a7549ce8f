"""Long differential run: thousands of seeded mutations of real runs, toolkit vs oracle.

Usage (from the repository root)::

    .venv/bin/python scripts/differential.py --count 5600 --seed 11 --dump /tmp/diff-cases

Prints the agreement per family and per aspect (verdict, readers, replay, audit_replay,
fork) and writes every disagreeing case to ``--dump`` (the mutated run directory plus
``case.json`` with the details), so ``rivumi-analysis audit DIR`` reproduces it. The oracle is
``tests/differential/runner_oracle.py`` (independent of the package); the mutation families
are in ``tests/differential/mutations.py``. Exit code 1 when any case disagrees.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.differential.compare import compare_run  # noqa: E402
from tests.differential.mutations import FAMILIES, cases, load_sources  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=5600)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--dump", type=Path, default=None,
                    help="folder for disagreeing cases (default: none)")
    ap.add_argument("--no-fork", action="store_true", help="skip the fork-seed aspect")
    ap.add_argument("--tables", action="store_true",
                    help="also build every table of each mutated run (aspect: no exception)")
    ap.add_argument("--start", type=int, default=0, help="first case index (resume a run)")
    args = ap.parse_args(argv)
    families = tuple(f for f in args.families.split(",") if f)
    sources = load_sources(ROOT / "sample_runs", ROOT / "tests" / "fixtures" / "example")
    total: Counter[str] = Counter()
    agree: Counter[str] = Counter()
    aspect_bad: dict[str, Counter[str]] = defaultdict(Counter)
    bad_names: dict[str, Counter[str]] = defaultdict(Counter)
    t0 = time.perf_counter()
    all_cases = cases(sources, args.seed, args.start + args.count, families)[args.start:]
    with tempfile.TemporaryDirectory(prefix="rivumi-diff-") as tmp:
        for k, mut in all_cases:
            run_dir = Path(tmp, f"c{k}", mut.files and _dirname(mut))
            mut.write(run_dir)
            res = compare_run(run_dir, fork=not args.no_fork, tables=args.tables)
            total[mut.family] += 1
            if res.ok:
                agree[mut.family] += 1
            else:
                for a, ok in res.aspects.items():
                    if not ok:
                        aspect_bad[mut.family][a] += 1
                        bad_names[a][mut.name.split("@")[0][:40]] += 1
                if args.dump is not None:
                    dest = args.dump / f"{mut.family}-{k:05d}"
                    if dest.exists():
                        shutil.rmtree(dest)
                    shutil.copytree(run_dir.parent, dest)
                    (dest / "case.json").write_text(json.dumps(
                        {"index": k, "seed": args.seed, "family": mut.family,
                         "mutation": mut.name, "source": mut.source,
                         "aspects": res.aspects, "details": res.details},
                        indent=2, default=str, ensure_ascii=False))
            shutil.rmtree(Path(tmp, f"c{k}"))
            if (k + 1) % 500 == 0:
                print(f"... {k + 1} cases, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    elapsed = time.perf_counter() - t0
    print(f"{sum(total.values())} mutations, seed {args.seed}, {elapsed:.0f} s")
    print(f"{'family':<12} {'cases':>6} {'agree':>6} {'%':>7}  disagreeing aspects")
    for fam in families:
        n, a = total[fam], agree[fam]
        pct = 100.0 * a / n if n else 100.0
        bad = ", ".join(f"{k}={v}" for k, v in sorted(aspect_bad[fam].items()))
        print(f"{fam:<12} {n:>6} {a:>6} {pct:>6.2f}%  {bad}")
    n, a = sum(total.values()), sum(agree.values())
    print(f"{'all':<12} {n:>6} {a:>6} {100.0 * a / max(n, 1):>6.2f}%")
    for aspect, names in sorted(bad_names.items()):
        print(f"\n{aspect}: most frequent disagreeing mutations")
        for name, c in names.most_common(12):
            print(f"  {c:>5}  {name}")
    return 0 if a == n else 1


def _dirname(mut) -> str:
    return mut.source.rstrip("/").rsplit("/", 1)[-1] or "run"


if __name__ == "__main__":
    sys.exit(main())
