"""Rewrite the check plans in rivumi_analysis/checks.py from the live pandera models.

Run after changing a model in rivumi_analysis/schemas.py (tests/test_checks.py fails until you
do): ``.venv/bin/python scripts/checkplans.py`` from the repository root.
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.oracles.check_plans import MARKER, render_plans  # noqa: E402


def main() -> None:
    path = pathlib.Path(__file__).resolve().parents[1] / "rivumi_analysis" / "checks.py"
    text = path.read_text(encoding="utf-8")
    path.write_text(text[:text.index(MARKER)] + render_plans(), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
