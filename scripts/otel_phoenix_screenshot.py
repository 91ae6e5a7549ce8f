"""Take docs/otel-phoenix.png: one run, exported with ``rivumi-analysis otel``, in Phoenix's UI.

Starts a local Phoenix server (127.0.0.1, a temporary working folder; the ``otel-test``
extra), sends the run to its OTLP/HTTP endpoint, opens the trace's page in headless
Chromium (Debian's /usr/bin/chromium through playwright) and saves a screenshot::

    .venv/bin/python scripts/otel_phoenix_screenshot.py [RUN_DIR] [--out docs/otel-phoenix.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.phoenix_helpers import phoenix_server  # noqa: E402

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", nargs="?",
                    default=str(ROOT / "sample_runs" / "example" /
                                "a66038f97f204cb3aaa96339f195c37e"))
    ap.add_argument("--out", default=str(ROOT / "docs" / "otel-phoenix.png"))
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=760)
    args = ap.parse_args()

    from phoenix.client import Client
    from playwright.sync_api import sync_playwright

    from rivumi_analysis.otel import export_otel, run_spans

    root = next(s for s in run_spans(args.run_dir) if s.parent is None)
    trace = f"{root.context.trace_id:032x}"
    with tempfile.TemporaryDirectory(prefix="phoenix-shot-") as work, \
            phoenix_server(Path(work)) as base:
        export_otel(args.run_dir, endpoint=base)
        client = Client(base_url=base)
        for _ in range(60):  # Phoenix inserts spans in the background
            if client.spans.get_spans(project_identifier="default", trace_ids=[trace]):
                break
            time.sleep(1)
        project = client.projects.get(project_name="default")["id"]
        url = f"{base}/projects/{project}/traces/{trace}"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                        args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.goto(url, wait_until="networkidle", timeout=120_000)
            page.get_by_text("invoke_agent rivumi").first.wait_for(timeout=60_000)
            page.wait_for_timeout(2000)
            page.screenshot(path=args.out)
            browser.close()
    print(f"wrote {args.out} ({Path(args.out).stat().st_size / 1e3:.0f} kB) from {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
