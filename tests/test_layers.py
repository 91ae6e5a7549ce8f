"""The package layout is enforced: import-linter's contracts (pyproject ``[tool.importlinter]``)
hold for the package, and they really break on an upward import or an import cycle."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "rivumi_analysis"

pytestmark = pytest.mark.timeout(120)


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports --no-cache`` with the repository's config, importing from ``cwd``."""
    code = ("import sys; from importlinter.cli import lint_imports_command; "
            "sys.exit(lint_imports_command())")
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=cwd, capture_output=True, text=True, timeout=100,
        # the copy in cwd, not the installed package, is the one analysed
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd), "PYTHONIOENCODING": "utf-8"})


def test_the_package_keeps_every_contract() -> None:
    p = _lint(ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "3 kept, 0 broken" in p.stdout


def test_every_module_is_in_a_layer() -> None:
    """Each module and subpackage right below the package is a part of one layer of the
    layers contract (a module outside every layer is checked by no layer rule)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (layers,) = [c["layers"] for c in config["tool"]["importlinter"]["contracts"]
                 if c["id"] == "layers"]
    parts = [p.strip() for layer in layers for p in layer.split(":")]
    assert not [p for p in parts if p.startswith("(")], "every layer part exists now"
    modules = {p.stem for p in PKG.glob("*.py") if p.stem != "__init__"}
    modules |= {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()}
    assert sorted(modules - set(parts)) == [] and sorted(set(parts) - modules) == []
    assert len(parts) == len(set(parts))


@pytest.mark.parametrize(("module", "line", "expected"), [
    # an upward import from read/ into audit
    ("read/incremental.py", "from ..audit import SCHEMA_VERSION",
     "rivumi_analysis.read.incremental -> rivumi_analysis.audit"),
    # the states <-> vectorised cycle coming back: replay/ importing a table
    ("replay/vectorised.py", "from ..tables.states import states_df",
     "rivumi_analysis.replay.vectorised -> rivumi_analysis.tables.states"),
    # the scenarios <-> crash cycle coming back (same layer: caught as a cycle)
    ("synth/crash.py", "from .scenarios import Driver", ".scenarios -> .crash"),
    # a cycle between two tables
    ("tables/_common.py", "from .quarantine import quarantine_df", "rivumi_analysis.tables"),
    # the analysis side importing test-data generation, or anything importing the CLI
    ("tables/events.py", "from ..synth.writer import fmt_ts",
     "rivumi_analysis.tables.events -> rivumi_analysis.synth.writer"),
    ("viz/report.py", "from ..cli import main", "rivumi_analysis.viz.report -> rivumi_analysis.cli"),
    ("synth/corpus.py", "from rivumi_analysis.cli import main", "rivumi_analysis.synth.corpus -> "
     "rivumi_analysis.cli"),
])
def test_a_violation_breaks_the_contract(tmp_path: Path, module: str, line: str,
                                         expected: str) -> None:
    shutil.copytree(PKG, tmp_path / "rivumi_analysis",
                    ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    target = tmp_path / "rivumi_analysis" / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # noqa\n",
                      encoding="utf-8")
    p = _lint(tmp_path)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "broken" in p.stdout and expected in p.stdout, p.stdout + p.stderr
