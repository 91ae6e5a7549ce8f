"""A run folder whose name is not UTF-8 never crashes a table.

Python keeps such a name's bytes as lone surrogates (``surrogateescape``), which Arrow
refuses. Every table shows that run's ``run_dir`` with U+FFFD, as ``runs_df`` does, and holds
exactly the rows of the same run under a UTF-8 name; through the store too.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import rivumi_analysis as ra

EXAMPLE = next(p for p in (Path(__file__).parent / "fixtures" / "example").iterdir()
               if p.is_dir())
TABLES = tuple(n for n in ra.__all__ if n.endswith("_df"))
SHOWN = "run-\ufffd"


def _fleet(tmp_path: Path) -> Path:
    root = tmp_path / "fleet"
    root.mkdir()
    shutil.copytree(EXAMPLE, root / "plain")
    shutil.copytree(EXAMPLE, root / os.fsdecode(b"run-\xff"))  # surrogateescape
    return root


def _halves(df: pl.DataFrame, root: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The odd run's rows with its name spelled ``plain``, and the plain run's rows."""
    odd = df.filter(pl.col("run_dir") == str(root / SHOWN)).with_columns(
        pl.col(pl.String).str.replace_all(SHOWN, "plain", literal=True))
    return odd, df.filter(pl.col("run_dir") == str(root / "plain"))


@pytest.mark.parametrize("engine", ["auto", "exact"])
def test_every_table_shows_the_replacement_char_and_the_same_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    monkeypatch.setenv("RIVUMI_ENGINE", engine)
    root = _fleet(tmp_path)
    for name in TABLES:  # before the fix: UnicodeEncodeError (events, states, drift, forks)
        df = getattr(ra, name)(root, cache=False)
        if "run_dir" not in df.columns or name == "quarantine_df":
            continue
        assert set(df["run_dir"]) == {str(root / SHOWN), str(root / "plain")}, name
        odd, plain = _halves(df, root)
        assert plain.height > 0, name
        assert_frame_equal(odd, plain, check_row_order=name != "forks_df"), name


def test_the_store_serves_them_equal_to_a_cold_load(tmp_path: Path) -> None:
    root = _fleet(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no StoreWarning: the store is used, not bypassed
        for name in TABLES:
            warm = getattr(ra, name)(root, store_dir=tmp_path / "store")
            assert_frame_equal(warm, getattr(ra, name)(root, cache=False)), name
