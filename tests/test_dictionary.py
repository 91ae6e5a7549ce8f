"""The data dictionary is the code: every column documented, printed by the CLI, and the
README / docs/data-dictionary.md generated from it."""

from __future__ import annotations

import json

import pandera.polars as pa
import pytest

from rivumi_analysis import cli, schemas
from rivumi_analysis.dictionary import TABLES, describe, dictionary, main, readme_section
from tests.conftest import ROOT

MODELS = {name: obj for name, obj in vars(schemas).items()
          if isinstance(obj, type) and issubclass(obj, pa.DataFrameModel)
          and name.endswith("Schema")}


def test_every_model_is_a_documented_table() -> None:
    # relay_* models (issue 14) are documented tables too
    assert {t.model for t in TABLES.values()} == set(MODELS.values())
    assert tuple(TABLES) == cli.TABLE_NAMES


@pytest.mark.parametrize("table", list(TABLES))
def test_every_column_has_description_unit_and_source(table: str) -> None:
    d = dictionary(table)
    cols = TABLES[table].model.to_schema().columns
    assert [c["column"] for c in d["columns"]] == list(cols)
    for c in d["columns"]:
        assert c["description"] and len(c["description"]) >= 10, c["column"]
        assert c["source"], c["column"]
        assert "unit" in cols[c["column"]].metadata, c["column"]
    assert set(d["key"]) <= set(cols)


def test_look_alike_columns_say_how_they_differ() -> None:
    """Columns that share a name across tables but not a meaning point at each other."""
    runs = {c["column"]: c["description"] for c in dictionary("runs")["columns"]}
    calls = {c["column"]: c["description"] for c in dictionary("model_calls")["columns"]}
    states = {c["column"]: c["description"] for c in dictionary("states")["columns"]}
    assert "usage_df" in runs["total_tokens"] and "model_calls_df" in runs["total_tokens"]
    assert "wind-down" in calls["total_tokens"] and "budget" in calls["total_tokens"]
    assert "charged_wall_seconds" in runs["active_wall_time_seconds"]
    assert "ended_at - started_at" in runs["active_wall_time_seconds"]
    assert "active_wall_time_seconds" in states["charged_wall_seconds"]
    assert "event_run_id" in dictionary("events")["columns"][1]["description"]


def test_readme_and_data_dictionary_doc_are_generated_from_the_code() -> None:
    assert main(["--check", "--root", str(ROOT)]) == 0, (
        "run: python -m rivumi_analysis.dictionary --write")
    readme = (ROOT / "README.md").read_text("utf-8")
    assert readme_section() in readme


def test_cli_schema_prints_a_readable_dictionary(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["schema", "events"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("events_df: one row per accepted event")
    for c in dictionary("events")["columns"]:
        assert f"\n{c['column']}  (" in out
        assert f"source: {c['source']}" in out.replace("\n    ", " ")
    assert cli.main(["schema", "usage", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d == dictionary("usage")
    assert cli.main(["schema", "audit-record"]) == 0
    assert json.loads(capsys.readouterr().out)["$schema"].startswith("https://json-schema")


def test_describe_is_a_dataframe() -> None:
    df = describe("tool_calls")
    assert df.height == len(TABLES["tool_calls"].model.to_schema().columns)
    assert df.filter(df["column"] == "duration_seconds")["unit"].item() == "seconds"


def test_schema_events_reads_for_a_newcomer(capsys: pytest.CaptureFixture[str]) -> None:
    """The header says how to load the table, what a row and the key are, how to read each
    entry and where § and codes point; lines fit a terminal."""
    assert cli.main(["schema", "events"]) == 0
    out = capsys.readouterr().out
    head = out.split("\n\n")[0].replace("\n", " ")
    for needle in ("load: rivumi_analysis.events_df(PATH)", "quarantine_df",
                   "key: (run_dir, line_no)", "each column:", "docs/run-format.md",
                   "rivumi-analysis codes"):
        assert needle in head, needle
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "Datetime(µs, UTC)" in out and "time_unit=" not in out
    body = out.replace("\n    ", " ")
    for c in dictionary("events")["columns"]:
        assert c["description"] in body, c["column"]  # every meaning printed in full
