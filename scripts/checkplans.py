"""Write rivumi_analysis/_checkplans.py: every pandera model's check plan as data.

Run after changing a model in rivumi_analysis/schemas.py (tests/test_plancheck.py fails until
you do): ``.venv/bin/python scripts/checkplans.py``.
"""

from __future__ import annotations

import pathlib

from rivumi_analysis import _fastcheck, schemas


def models() -> dict[str, type]:
    """Every model of ``schemas`` (name -> class), in definition order."""
    return {n: m for n, m in vars(schemas).items()
            if isinstance(m, type) and issubclass(m, schemas._Base) and m is not schemas._Base}


def main() -> None:
    path = pathlib.Path(_fastcheck.__file__).with_name("_checkplans.py")
    path.write_text(_fastcheck.render_plans(models()), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
