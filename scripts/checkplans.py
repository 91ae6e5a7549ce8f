"""Write rivumi_analysis/data/check_plans.json from the live pandera models.

Run after changing a model in rivumi_analysis/schemas.py (tests/test_checks.py fails until you
do): ``.venv/bin/python scripts/checkplans.py`` from the repository root.
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.oracles.check_plans import render_plans  # noqa: E402


def main() -> None:
    path = ROOT / "rivumi_analysis" / "data" / "check_plans.json"
    path.write_text(render_plans(), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
