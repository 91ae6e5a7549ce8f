"""The README lists every reason and warning code, and the fixture copy equals the spec's."""

from __future__ import annotations

import pytest

from rivumi_analysis.errors import ALL_CODES
from tests.conftest import EXAMPLE_DIR, ROOT


def test_readme_lists_every_code() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    missing = [c for fam in ALL_CODES.values() for c in fam if f"`{c}`" not in readme]
    assert not missing


def test_example_fixture_is_an_unmodified_copy() -> None:
    shared = ROOT.parent / "shared" / "spec" / "examples" / EXAMPLE_DIR.name
    if not shared.is_dir():
        pytest.fail(f"the spec's example run is expected beside the checkout at {shared}")
    for f in shared.iterdir():
        assert (EXAMPLE_DIR / f.name).read_bytes() == f.read_bytes(), f.name


def test_readme_export_section_names_every_exported_table() -> None:
    """``export`` writes every store table (one layout, one writer): the README says which."""
    from rivumi_analysis.export import TABLES

    readme = (ROOT / "README.md").read_text("utf-8")
    section = readme.split("## Parquet export and the cache", 1)[1].split("\n## ", 1)[0]
    assert [t for t in TABLES if f"`{t}`" not in section] == []
