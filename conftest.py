"""Keep every store the suite (doctests included) opens in a temporary folder."""

from __future__ import annotations

import os
import shutil
import tempfile

_TMP: list[str] = []


def pytest_configure(config: object) -> None:
    if not os.environ.get("RIVUMI_ANALYSIS_STORE_DIR"):
        _TMP.append(tempfile.mkdtemp(prefix="rivumi-store-tests-"))
        os.environ["RIVUMI_ANALYSIS_STORE_DIR"] = _TMP[0]


def pytest_unconfigure(config: object) -> None:
    for d in _TMP:
        shutil.rmtree(d, ignore_errors=True)
