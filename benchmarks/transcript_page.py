"""The run page of a long run (issue 32): its size, the time to build it and the time
headless Chromium takes to render it (load to every chart drawn), for a run of about N events
written by the synthetic writer (rivumi_analysis.synth: explore, edit and test steps with
approvals, one final check).

    .venv/bin/python benchmarks/transcript_page.py --events 2000 --reps 3

Prints figures only (medians over the reps, with the range); nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--proxy-server=127.0.0.1:9"]


def long_run(out: str, events: int) -> str:
    """One verified run of about ``events`` events (7 per tool-calling step)."""
    from rivumi_analysis.synth.scenarios import Build, run_script

    steps = max(1, (events - 12) // 7)
    b = Build("long", 0, max_steps=steps + 5, wall=10_000_000.0)
    for i in range(steps):
        kind = i % 3
        if kind == 0:
            [c] = b.model([("read_file", {"path": f"{b.task.path}#{i}"})],
                          content=f"Step {i}: reading the file again.")
            b.tool(c, content=b.task.before * 3)
        elif kind == 1:
            [c] = b.model([("search_text", {"pattern": f"def .*{i}"})])
            b.tool(c, ok=i % 7 != 1, content="\n".join(b.task.files) * 4,
                   error=None if i % 7 != 1 else "pattern not found")
        else:
            [c] = b.model([("shell", {"command": f"pytest -q -k case_{i}"})])
            b.tool(c, content=f"$ pytest -q -k case_{i}\n" + "." * 80 + "\n1 passed")
    b.edit()
    b.final()
    b.verify(True)
    b.finish("completed", "verified")
    b.close()
    return run_script(b.script(), out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import sync_playwright

    from rivumi_analysis.viz.report import write_report

    with tempfile.TemporaryDirectory() as tmp:
        run = long_run(tmp, a.events)
        with open(os.path.join(run, "events.jsonl"), "rb") as fh:
            n_events = sum(1 for _ in fh)
        out = os.path.join(tmp, "run.html")
        build = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            write_report([run], out)
            build.append(time.perf_counter() - t0)
        size = os.path.getsize(out)
        # the same page without its transcript section (baseline, same run, same browser)
        bare = os.path.join(tmp, "bare.html")
        import rivumi_analysis.viz.run_page as RP

        real = RP.transcript_html
        RP.transcript_html = lambda *_a, **_k: ""  # type: ignore[assignment]
        try:
            write_report([run], bare)
        finally:
            RP.transcript_html = real
        bare_size = os.path.getsize(bare)
        render: dict[str, list[float]] = {"run": [], "bare": []}
        entries = 0
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            for _ in range(a.reps):
                for name, path in (("run", out), ("bare", bare)):
                    page = browser.new_page(viewport={"width": 1280, "height": 1000})
                    t0 = time.perf_counter()
                    page.goto(Path(path).as_uri(), wait_until="load", timeout=300_000)
                    page.wait_for_selector("body[data-charts-done='1']", timeout=300_000)
                    render[name].append(time.perf_counter() - t0)
                    if name == "run":
                        entries = page.evaluate("document.querySelectorAll('.tx-e').length")
                    page.close()
            browser.close()

    def fig(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f} s [{min(xs):.2f}-{max(xs):.2f}]"

    print(f"run: {n_events:,} events; page: {size:,} bytes ({size / 1e6:.2f} MB), "
          f"{entries:,} transcript entries")
    print(f"build (write_report, in process): {fig(build)}")
    print(f"render in Chromium (load to every chart drawn): {fig(render['run'])}; the same "
          f"page without its transcript ({bare_size:,} "
          f"bytes): {fig(render['bare'])}")
    print(f"load average: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
