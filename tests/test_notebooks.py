"""Execute every notebook headless (nbclient) on sample_runs/ and fail on any error.

The kernel is this interpreter (the venv's python): a throwaway kernelspec pointing at
``sys.executable`` is installed in a temp JUPYTER_PATH, so no system kernel is picked up.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.notebook

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


STARTING_POINTS = ["00_fleet_overview", "01_load_and_validate", "02_step_timelines",
                   "03_repeat_guards_and_budgets", "04_replay_and_forks"]


@pytest.mark.parametrize("name", STARTING_POINTS)
def test_starting_points_load_once_and_end_with_adapt_this(name: str):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])  # papermill's parameter cell
    assert "RIVUMI_RUN_ROOT" in code[0].source and "RIVUMI_NOTEBOOK_RUN_ROOT" in code[0].source
    src = "\n".join(c.source for c in code)
    # every table through the store (re-runs read Parquet), never a whole read in memory
    assert "load_fleet" not in src and "ra.runs_df(RUN_ROOT)" in code[1].source
    assert "offline_charts.enable()" in code[1].source  # the offline renderer
    heads = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
             and c.source.startswith("## Adapt this")]
    assert heads and any(c.cell_type == "code" for c in nb.cells[heads[-1]:])


def _execute(name: str, env: dict[str, str | None], kernel: str):
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        if v is None:
            mp.delenv(k, raising=False)
        else:
            mp.setenv(k, v)
    try:
        path = ROOT / "notebooks" / f"{name}.ipynb"
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, kernel_name=kernel, timeout=120, allow_errors=False,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        return nb
    finally:
        mp.undo()


def _text(nb) -> str:
    out = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            out.append(o.get("text", "") or o.get("data", {}).get("text/plain", ""))
    return "\n".join(out)


def test_rivumi_run_root_is_honoured_and_html_export_is_offline(kernel_env: str):
    from nbconvert import HTMLExporter

    root = str(ROOT / "tests" / "fixtures" / "example")
    nb = _execute("00_fleet_overview", {"RIVUMI_NOTEBOOK_RUN_ROOT": None,
                                        "RIVUMI_RUN_ROOT": root}, kernel_env)
    assert f"1 runs from {root}" in _text(nb)
    html, _ = HTMLExporter(template_name="basic").from_notebook_node(nb)
    assert "vegaEmbed(" in html  # the charts are there, with Vega inlined ...
    assert not re.search(r"<script[^>]+src=", html)  # ... and nothing is fetched
    assert not re.search(r"<link[^>]+href=[\"']https?:", html)
    assert not re.search(r"import\s*\(\s*[\"']https?:", html)


def test_replay_notebook_replays_a_run_and_shows_a_fork_seed(kernel_env: str):
    nb = _execute("04_replay_and_forks", {}, kernel_env)
    text = _text(nb)
    assert re.search(r"\d+ events, last run\.\w+; fork at sequence \d+", text), text[-2000:]
    assert '"events_included":' in text and '"run_started":false' in text
