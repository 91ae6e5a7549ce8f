"""Tables: schemas, exact ``data`` text, event-derived joins, and the example's token sums."""

from __future__ import annotations

import json

import polars as pl
import pytest

import rivumi_analysis as ra
from rivumi_analysis import schemas
from tests.conftest import EXAMPLE_DIR, SAMPLE_RUNS, example_manifest

TABLES = {
    "runs_df": schemas.RunsSchema, "events_df": schemas.EventsSchema,
    "quarantine_df": schemas.QuarantineSchema, "manifests_df": schemas.ManifestsSchema,
    "tool_calls_df": schemas.ToolCallsSchema, "approvals_df": schemas.ApprovalsSchema,
    "model_calls_df": schemas.ModelCallsSchema, "usage_df": schemas.UsageSchema,
    "verifications_df": schemas.VerificationsSchema,
}


def test_example_model_call_tokens_equal_manifest_usage() -> None:
    mc = ra.model_calls_df(str(EXAMPLE_DIR))
    usage = example_manifest()["usage"]
    for k in ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens"):
        assert int(mc[k].sum()) == usage[k], k
    assert int(mc["total_tokens"].sum()) == usage["provider_total_tokens"] == 7583
    assert mc["step"].to_list() == list(range(1, 8))


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_table_validates_on_sample_runs(name: str) -> None:
    df = getattr(ra, name)(str(SAMPLE_RUNS))
    assert isinstance(df, pl.DataFrame)
    TABLES[name].validate(df)  # the public models accept the loaders' own frames
    assert {"run_dir", "run_id"} <= set(df.columns)


def test_data_column_is_the_exact_json_text() -> None:
    ev = ra.events_df(str(SAMPLE_RUNS))
    by_run: dict[str, bytes] = {}
    checked = 0
    for row in ev.filter(pl.col("data").is_not_null()).head(3000).iter_rows(named=True):
        raw = by_run.setdefault(row["run_dir"], open(f"{row['run_dir']}/events.jsonl", "rb").read())
        line = raw[row["byte_offset"]: row["byte_offset"] + row["byte_length"]]
        assert row["data"].encode() in line
        assert json.loads(row["data"]) == json.loads(line.lstrip(b"\xef\xbb\xbf"))["data"]
        checked += 1
    assert checked > 1000


def test_pandera_rejects_a_broken_frame() -> None:
    import pandera.errors

    df = ra.events_df(str(EXAMPLE_DIR)).with_columns(pl.lit(-1).cast(pl.Int64).alias("sequence"))
    with pytest.raises(pandera.errors.SchemaErrors):
        schemas.EventsSchema.validate(df, lazy=True)


def test_event_derived_tables_on_the_example() -> None:
    ap = ra.approvals_df(str(EXAMPLE_DIR))
    assert ap.height == 7 and ap["outcome"].to_list().count("reused") == 1  # final check reuses the grant
    assert ap.filter(pl.col("decision") == "allow_session").height == 1
    assert (ap["wait_seconds"] >= 0).all()
    ver = ra.verifications_df(str(EXAMPLE_DIR))
    assert ver.rows(named=True)[0]["outcome"] == "passed"
    assert ver["exit_code"].to_list() == [0]


def test_usage_lanes_with_cost_on_current_profile_runs() -> None:
    u = ra.usage_df(str(SAMPLE_RUNS))
    man = u.filter(pl.col("source") == "manifest.model_usage")
    assert man.height > 0
    assert set(man["lane"]) >= {"primary"}
    with_cost = man.filter(pl.col("total_cost").is_not_null())
    assert with_cost.height > 0
    assert (with_cost["total_cost"] - (with_cost["input_cost"] + with_cost["cached_input_cost"]
                                       + with_cost["output_cost"])).abs().max() < 1e-9


def test_runs_df_has_manifest_and_request_fields() -> None:
    runs = ra.runs_df(str(SAMPLE_RUNS))
    assert runs.height == runs["run_dir"].n_unique()
    assert runs.filter(pl.col("max_steps").is_not_null()).height > 0
    assert set(runs["verdict"]) >= {"resumable", "resync", "side_effect_uncertain", "terminal",
                                    "corrupt", "not_resumable"}
    assert set(runs["kind"]) == {"native", "fork", "subagent", "external"}


@pytest.mark.parametrize("name", ["model_calls_df", "usage_df", "tool_calls_df"])
def test_fleet_table_is_the_concatenation_of_its_runs(name: str) -> None:
    # rows of one run never depend on other runs (model_calls_df and usage_df once scanned
    # every earlier row of the fleet per run: quadratic, and a run's index could leak)
    fleet = ra.load_fleet(str(SAMPLE_RUNS))
    runs = [r for r in fleet.runs if r.events][:12]
    loader = getattr(ra, name)
    whole = loader(runs)
    parts = pl.concat([loader(r) for r in runs])
    assert whole.height > 0
    assert whole.equals(parts)
