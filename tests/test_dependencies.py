"""Every package the code imports is declared in pyproject.toml: the package's in the core
dependencies (an extra only for the Ray engine and the OpenTelemetry export), the tests' in
the core dependencies or the extras the dev setup installs. A clean install (no extras) must run the package:
``scripts/clean_install.sh`` runs its main commands that way in CI."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _names(requirements: list[str]) -> set[str]:
    """Normalised distribution names of requirement strings (``pandera[polars]>=0.22`` ->
    ``pandera``)."""
    return {re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", r).group()).lower()
            for r in requirements}


def _imported(folder: str) -> dict[str, set[str]]:
    """Top-level third-party modules imported below ``folder`` -> the files importing them."""
    out: dict[str, set[str]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        if "fixtures" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in (
                        "rivumi_analysis", "tests", "__future__"):
                    out.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return out


def _undeclared(folder: str, allowed: set[str]) -> dict[str, list[str]]:
    dists = importlib.metadata.packages_distributions()
    missing = {}
    for module, files in _imported(folder).items():
        names = _names(dists.get(module, [module]))
        if not names & allowed:
            missing[module] = sorted(files)
    return missing


EXTRAS = PROJECT["optional-dependencies"]
# the extras the package imports, and the only places that may import them (lazily)
EXTRA_USERS = {"ray": ("rivumi_analysis/distributed/",),
               "otel": ("rivumi_analysis/otel.py", "rivumi_analysis/cli.py")}


def test_the_package_imports_only_declared_packages() -> None:
    allowed = _names(PROJECT["dependencies"])
    for extra in EXTRA_USERS:
        allowed |= _names(EXTRAS[extra])
    assert _undeclared("rivumi_analysis", allowed) == {}


def test_only_the_ray_engine_and_the_otel_export_import_an_extra() -> None:
    outside = _undeclared("rivumi_analysis", _names(PROJECT["dependencies"]))
    dists = importlib.metadata.packages_distributions()
    for module, files in outside.items():
        names = _names(dists.get(module, [module]))
        users = [prefixes for extra, prefixes in EXTRA_USERS.items()
                 if names & _names(EXTRAS[extra])]
        assert users, (module, files)
        assert all(f.startswith(users[0]) for f in files), (module, files)


def test_the_tests_import_only_declared_packages() -> None:
    allowed = _names(PROJECT["dependencies"])
    for extra in ("dev", "notebooks", "ray", "otel", "otel-test"):
        allowed |= _names(EXTRAS[extra])
    assert _undeclared("tests", allowed) == {}
