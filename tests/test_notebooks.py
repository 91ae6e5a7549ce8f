"""Execute every notebook headless (nbclient) on sample_runs/ and fail on any error.

The kernel is this interpreter (the venv's python): a throwaway kernelspec pointing at
``sys.executable`` is installed in a temp JUPYTER_PATH, so no system kernel is picked up.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = {"00_fleet_overview", "01_load_and_validate", "02_step_timelines",
            "03_repeat_guards_and_budgets", "04_replay_and_forks", "05_live_fleet",
            "06_relay_channels"}


def _run_root() -> Path:
    sample = ROOT / "sample_runs"
    if sample.is_dir() and any(p.is_dir() for p in sample.iterdir()):
        return sample
    return ROOT / "tests" / "fixtures" / "example"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    jp = tmp_path_factory.mktemp("jupyter")
    spec_dir = jp / "kernels" / "rivumi-venv"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "rivumi venv", "language": "python"}))
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(jp))
    mp.setenv("RIVUMI_NOTEBOOK_RUN_ROOT", str(_run_root()))
    mp.setenv("PYTHONPATH", str(ROOT))
    yield "rivumi-venv"
    mp.undo()


def test_all_notebooks_present_and_stored_without_outputs():
    assert {p.stem for p in NOTEBOOKS} >= EXPECTED
    for p in NOTEBOOKS:
        nb = nbformat.read(p, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert "RUN_ROOT" in code[0].source, p.name  # the one parameter, first code cell
        assert all(not c.outputs and c.execution_count is None for c in code), p.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path: Path, kernel_env: str):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name=kernel_env, timeout=120, allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    # every chart cell produced a Vega-Lite bundle
    assert any("application/vnd.vegalite.v6+json" in o.get("data", {}) or
               "text/html" in o.get("data", {}) for o in outputs) or path.stem.startswith("01")
