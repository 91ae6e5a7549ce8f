"""The README's Python blocks run as pasted (from the repository root) and pandas interop
works as documented."""

from __future__ import annotations

import contextlib
import io
import os
import re

import pytest

from tests.conftest import ROOT


def _python_blocks() -> list[str]:
    readme = (ROOT / "README.md").read_text("utf-8")
    return re.findall(r"```python\n(.*?)```", readme, flags=re.S)


def test_readme_has_python_blocks() -> None:
    assert _python_blocks()


@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_readme_python_block_runs_as_pasted(index: int) -> None:
    code = _python_blocks()[index]
    cwd = os.getcwd()
    os.chdir(ROOT)  # the README's paths are relative to the repository root
    try:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"README.md python block {index}", "exec"), {})
    finally:
        os.chdir(cwd)


def test_strict_block_shows_the_quarantine() -> None:
    """The block's try/except is not decoration: sample_runs really has quarantined lines."""
    from rivumi_analysis import events_df
    from rivumi_analysis.errors import QuarantineError

    with pytest.raises(QuarantineError) as info:
        events_df(str(ROOT / "sample_runs"), strict=True)
    assert info.value.quarantine.height > 0


def test_to_pandas_after_the_documented_extra() -> None:
    import pandas as pd  # the dev setup installs the notebooks extra, which includes pandas

    from rivumi_analysis import runs_df

    df = runs_df(str(ROOT / "tests" / "fixtures" / "example")).to_pandas()
    assert isinstance(df, pd.DataFrame) and df["verdict"].tolist() == ["terminal"]


def test_pandas_extras_are_declared_and_documented() -> None:
    """`pip install 'rivumi-analysis[pandas]'` (or `[notebooks]`) brings pandas, as the README
    says; to_pandas() also needs pyarrow, a core dependency."""
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    extras = meta["optional-dependencies"]
    for extra in ("pandas", "notebooks"):
        assert any(d.startswith("pandas") for d in extras[extra]), extra
    assert any(d.startswith("pyarrow") for d in meta["dependencies"])
    assert "rivumi-analysis[pandas]" in (ROOT / "README.md").read_text("utf-8")
