"""The table registry is the one list of tables: every consumer follows it, the public loaders
have one signature, and the CLI's start-up imports nothing a command does not need."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import rivumi_analysis as ra
from rivumi_analysis import dictionary, export, relay
from rivumi_analysis.store import build
from rivumi_analysis.tables.registry import TABLES, build_order, names
from rivumi_analysis.viz import report
from tests.conftest import EXAMPLE_DIR, ROOT

PACKAGE = ROOT / "rivumi_analysis"


def _listed(path: Path, table_names: set[str]) -> int:
    """The most table names one literal (tuple, list, set, dict keys) of ``path`` holds."""
    most = 0
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        items = (node.keys if isinstance(node, ast.Dict) else node.elts
                 if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [])
        found = {n.value for n in items if isinstance(n, ast.Constant) and n.value in table_names}
        most = max(most, len(found))
    return most


def test_the_table_list_is_spelled_out_once_outside_the_oracle() -> None:
    """Outside ``synth/`` and the registry (whose entries are calls), only
    ``store/build.py``'s exact oracle (``build_frames``) lists the tables by name: eight names
    or more in one literal, more than half of the 13 run tables (a chart's own inputs, such
    as the run page's six timeline tables, are not the list; the report's ten were)."""
    table_names = set(TABLES)
    spelled = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if "synth" not in p.parts and _listed(p, table_names) >= 8)
    assert spelled == ["store/build.py"]


def test_every_consumer_iterates_the_registry() -> None:
    stored = names(stored=True)
    assert ra._TABLES == stored == build.TABLES
    assert export.TABLES == names(exported=True) == stored  # (relay tables: neither)
    assert tuple(dictionary.TABLES) == tuple(TABLES)
    assert report.REPORT_TABLES == names(report=True)
    assert set(names(source="relayflowd")) == {t for t in TABLES if t.startswith("relay_")}
    for t in stored:
        assert f"{t}_df" in ra.__all__ and f"scan_{t}" in ra.__all__
    for t in names(source="relayflowd"):
        assert f"{t}_df" in relay.__all__ and callable(getattr(relay, f"{t}_df"))
    assert sorted(build.empty_tables()) == sorted(stored)


def test_every_entry_resolves() -> None:
    """Models, in-memory loaders and chunk builders named by path exist; a builder's
    ``needs`` come before it in the build order."""
    order = [t.name for t in build_order()]
    assert sorted(order) == sorted(names(stored=True))
    for spec in TABLES.values():
        assert spec.model.__name__ == spec.schema
        assert set(spec.key) <= set(spec.model.to_schema().columns)
        assert callable(spec.cold_loader())
        assert set(spec.options) <= set(inspect.signature(spec.cold_loader()).parameters)
        if spec.stored:
            assert callable(spec.builder())
            assert all(order.index(n) < order.index(spec.name) for n in spec.needs)
        else:
            with pytest.raises(ValueError):
                spec.builder()


@pytest.mark.parametrize("name", names(stored=True))
def test_one_public_loader_signature(name: str) -> None:
    """``<table>_df(source=None, *, strict=False, max_depth=8, <options>, cache=None,
    store_dir=None)`` for every table; an option another table has is refused."""
    params = inspect.signature(getattr(ra, f"{name}_df")).parameters
    spec = TABLES[name]
    assert list(params) == ["source", "strict", "max_depth", *spec.options, "cache",
                            "store_dir"]
    assert params["source"].default is None and params["max_depth"].default == 8
    assert all(params[k].default == v for k, v in spec.options.items())
    if "engine" not in spec.options:
        with pytest.raises(TypeError, match="engine"):
            getattr(ra, f"{name}_df")(str(EXAMPLE_DIR), engine="reference")


def test_load_by_name() -> None:
    """``store.loaders.load(name, ...)`` is what every ``<table>_df`` calls; relayflowd
    tables load from ``rivumi_analysis.relay`` (above the store), unknown names not at all."""
    from rivumi_analysis.store.loaders import load

    assert load("usage", str(EXAMPLE_DIR)).equals(ra.usage_df(str(EXAMPLE_DIR)))
    for name in ("relay_entries", "nope"):
        with pytest.raises(KeyError):
            load(name, str(EXAMPLE_DIR))


def test_a_non_default_option_loads_in_memory(tmp_path: Path) -> None:
    """The store holds the default options: any other value loads in memory (no store is
    opened), and gives the table that option asks for."""
    store_dir = tmp_path / "store"
    df = ra.states_df(str(EXAMPLE_DIR), engine="reference", store_dir=store_dir)
    assert not store_dir.exists()
    assert df.equals(ra.states_df(str(EXAMPLE_DIR), cache=False))
    waits = ra.drift_df(str(EXAMPLE_DIR), charge_approval_waits=True, store_dir=store_dir)
    assert not store_dir.exists() and waits.height == 13


def _modules_after(argv: list[str]) -> tuple[int, list[str]]:
    """The exit code of the CLI run with ``argv`` in a fresh interpreter, and which heavy
    libraries it imported."""
    code = ("import sys\nfrom rivumi_analysis.cli import main\n"
            "try:\n    rc = main(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code\n"
            "heavy = ('polars', 'pandera', 'pydantic', 'pyarrow', 'numpy', 'pandas', 'altair')\n"
            "print(rc, *[m for m in heavy if m in sys.modules], file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    last = proc.stderr.strip().splitlines()[-1].split()
    return int(last[0]), last[1:]


@pytest.mark.parametrize("argv", [
    ["--version"],
    ["replay", str(EXAMPLE_DIR), "--json"],
    ["fork-seed", str(EXAMPLE_DIR), "--sequence", "10"],
    ["codes"],
])
def test_scripted_commands_import_no_heavy_library(argv: list[str]) -> None:
    """What scripts call once per run starts without polars, pandera, pydantic or pyarrow
    (issue 30 §8; the figures: ``benchmarks/cli_startup.py``)."""
    rc, heavy = _modules_after(argv)
    assert rc == 0 and heavy == [], (argv, rc, heavy)


def test_the_readable_replay_still_reads_the_whole_run() -> None:
    """The readable view needs the verdict (the whole run, pydantic's models): the lazy
    imports moved, they were not dropped."""
    rc, heavy = _modules_after(["replay", str(EXAMPLE_DIR)])
    assert rc == 0 and "pydantic" in heavy
