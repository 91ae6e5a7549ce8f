"""The check plans (``rivumi_analysis.checks``) never pass a frame pandera fails.

``tables._common.validate`` returns a frame as it is when :func:`checks.surely_valid` accepts
it and asks pandera otherwise, so the committed plans must be exactly the live models' (the
first test fails when a model changes and ``scripts/checkplans.py`` was not re-run), the plan
must be at least as strict as pandera (the oracle: the models' own ``validate``), and it must
accept the tables the loaders build (else it saves nothing). Mutations: single values of every
column (nulls, NaN, negative, huge, empty and foreign strings, another row's value: duplicate
keys, flipped booleans: the dataframe checks), dtype changes, extra, missing and reordered
columns.
"""

from __future__ import annotations

import math
import pathlib

import pandera.polars as pa
import polars as pl
import pytest

from rivumi_analysis import checks, schemas
from rivumi_analysis.errors import SchemaValidationError
from rivumi_analysis.read.discovery import discover
from rivumi_analysis.store.build import TABLES, build_frames, empty_tables, read_runs
from rivumi_analysis.tables._common import polars_schema, validate
from tests.conftest import SAMPLE_RUNS
from tests.oracles.check_plans import derive_plan, models, render_plans

MODELS = {"runs": schemas.RunsSchema, "events": schemas.EventsSchema,
          "quarantine": schemas.QuarantineSchema, "manifests": schemas.ManifestsSchema,
          "tool_calls": schemas.ToolCallsSchema, "approvals": schemas.ApprovalsSchema,
          "model_calls": schemas.ModelCallsSchema, "usage": schemas.UsageSchema,
          "verifications": schemas.VerificationsSchema, "states": schemas.StatesSchema,
          "drift": schemas.DriftSchema, "forks": schemas.ForksSchema,
          "messages": schemas.MessagesSchema}


def pandera_ok(model: type, df: pl.DataFrame) -> bool:
    """The oracle: pandera's own validate."""
    try:
        model.validate(df)
    except (pa.errors.SchemaErrors, pa.errors.SchemaError):
        return False
    return True


@pytest.fixture(scope="module")
def tables() -> dict[str, pl.DataFrame]:
    return build_frames(read_runs(discover(SAMPLE_RUNS).runs))


def test_the_committed_plans_are_the_live_models() -> None:
    live = models()
    assert len(live) >= 20
    assert list(checks.PLANS) == list(live)
    for name, model in live.items():
        derived = derive_plan(model)
        assert checks.PLANS[name] == derived, name
        assert list(checks.PLANS[name]["schema"]) == list(derived["schema"]), name
        assert derived["checks"] is not None, name  # every model is planned (no pandera)
        assert checks._exprs(name) is not None, name
    # and the file is exactly what the script writes (regenerated, not hand-edited)
    path = pathlib.Path(checks.__file__).with_name("data") / "check_plans.json"
    assert path.read_text(encoding="utf-8") == render_plans(live)


def test_the_plans_schemas_are_the_models() -> None:
    for name, model in models().items():
        assert list(polars_schema(name).items()) == list(polars_schema(model).items()), name
    for table, df in empty_tables().items():
        assert dict(df.schema) == polars_schema(MODELS[table]), table


def test_a_changed_model_is_noticed() -> None:
    """What the drift test rests on: changing a check or a column's nullability changes the
    derived plan; a dataframe check the plan does not know leaves the model unplanned."""

    class Before(schemas._Base):
        a: pl.Int64 = pa.Field(ge=0)

    class After(schemas._Base):
        a: pl.Int64 = pa.Field(ge=1)

    class Nullable(schemas._Base):
        a: pl.Int64 = pa.Field(ge=0, nullable=True)

    class Other(schemas._Base):
        run_dir: pl.Utf8

        @pa.dataframe_check
        def no_blank_dir(cls, data: pa.PolarsData) -> pl.LazyFrame:
            return data.lazyframe.select(pl.col("run_dir") != "")

    plans = [derive_plan(m) for m in (Before, After, Nullable)]
    assert plans[0] != plans[1] and plans[0] != plans[2]
    assert derive_plan(Other)["checks"] is None


def test_the_models_dataframe_checks_are_the_plans() -> None:
    """Each model's dataframe check evaluates the plan's expression of its name
    (``checks.frame_check``): pandera and the plan judge a frame by the same expression."""
    for name, model in models().items():
        for c in model.to_schema().checks:
            assert c.name in checks.FRAME_CHECKS, (name, c.name)


def test_sample_tables_pass(tables: dict[str, pl.DataFrame]) -> None:
    assert sorted(tables) == sorted(TABLES)
    for name, df in tables.items():
        model = MODELS[name].__name__
        assert df.height, name
        assert checks.surely_valid(model, df), name
        assert pandera_ok(MODELS[name], df), name
        assert validate(df, model) is df and validate(df, MODELS[name]) is df
        empty = df.clear()
        assert checks.surely_valid(model, empty) == pandera_ok(MODELS[name], empty), name


def _candidates(model: type, df: pl.DataFrame, col: str) -> list[object]:
    """Values likely to break what pandera checks of ``col``: its nullability, its checks,
    its uniqueness and the tables' key checks (another row's value), a flipped boolean."""
    spec = model.to_schema().columns[col]
    dt = df.schema[col]
    pool: list[object] = ([df[col][df.height - 1]]
                          if spec.unique or col in ("run_dir", "line_no") else [])
    if not spec.nullable:
        pool.append(None)
    if spec.checks:
        if dt.is_integer():
            pool += [-1, 2**62]
        elif dt.is_float():
            pool += [math.nan, -1.0]
        elif dt == pl.String:
            pool += ["", "not-a-known-value"]
        elif isinstance(dt, pl.List):
            pool += [[""]]
    elif dt.is_float() and not spec.nullable:
        pool.append(math.nan)
    if dt == pl.Boolean:
        v = df[col][0]
        pool += [not v] if v is not None else [True, False]
    return pool


def _with_value(df: pl.DataFrame, col: str, row: int, value: object) -> pl.DataFrame:
    vals = df[col].to_list()
    vals[row] = value
    return df.with_columns(pl.Series(col, vals, dtype=df.schema[col]))


@pytest.mark.differential
def test_mutations_are_judged_alike(tables: dict[str, pl.DataFrame]) -> None:
    judged = rejected = 0
    for name, full in tables.items():
        model = MODELS[name]
        df = full.head(12)
        for col in df.columns:
            for value in _candidates(model, df, col):
                bad = _with_value(df, col, 0, value)
                fast, slow = checks.surely_valid(model.__name__, bad), pandera_ok(model, bad)
                assert fast == slow, (name, col, value, fast, slow)
                judged += 1
                rejected += not slow
    assert judged > 280 and rejected > 200, (judged, rejected)  # they do break things


@pytest.mark.differential
def test_shape_changes_and_duplicate_keys_are_rejected(tables: dict[str, pl.DataFrame]) -> None:
    for name, full in tables.items():
        model = MODELS[name]
        df = full.head(5)
        variants = [df.with_columns(pl.lit(1).alias("extra")), df.drop(df.columns[-1]),
                    df.select(reversed(df.columns)), pl.concat([df, df.head(1)])]
        for col, dt in df.schema.items():
            if dt == pl.Int64:
                variants.append(df.with_columns(pl.col(col).cast(pl.Int32)))
            elif isinstance(dt, pl.Datetime):
                variants.append(df.with_columns(pl.col(col).dt.replace_time_zone(None)))
                variants.append(df.with_columns(pl.col(col).dt.cast_time_unit("ns")))
            elif dt == pl.String:
                variants.append(df.with_columns(pl.col(col).cast(pl.Categorical)))
        for v in variants:
            fast = checks.surely_valid(model.__name__, v)
            assert fast == pandera_ok(model, v) or not fast, (name, v.schema)


def test_a_failing_frame_gets_pandera_s_error(tables: dict[str, pl.DataFrame]) -> None:
    df = _with_value(tables["events"].head(4), "sequence", 0, -5)
    assert not checks.surely_valid("EventsSchema", df)
    with pytest.raises(SchemaValidationError, match="EventsSchema validation failed"):
        validate(df, "EventsSchema")
    drift = tables["drift"].head(3)
    bad = _with_value(drift, "unexplained", 0, not drift["unexplained"][0])
    assert not checks.surely_valid("DriftSchema", bad)
    from rivumi_analysis.tables.drift import drift_of_rows

    with pytest.raises(SchemaValidationError, match="drift_df failed DriftSchema"):
        drift_of_rows(bad.to_dicts())


def test_an_unknown_model_or_plan_goes_to_pandera(monkeypatch: pytest.MonkeyPatch) -> None:
    df = pl.DataFrame({"a": [1]})
    assert not checks.surely_valid("NoSuchSchema", df)
    monkeypatch.setitem(checks.PLANS, "VerificationsSchema",
                        {**checks.PLANS["VerificationsSchema"], "checks": None})
    monkeypatch.setattr(checks, "_EXPRS", {})
    empty = pl.DataFrame(schema=polars_schema("VerificationsSchema"))
    assert not checks.surely_valid("VerificationsSchema", empty)
    assert validate(empty, "VerificationsSchema").height == 0  # pandera said yes


def test_the_states_plan_is_the_replay_engine_s_columns() -> None:
    """``store.build.empty_tables`` takes the states schema from the plan, not from the
    replay engine (which a fresh parent process would import for it)."""
    from rivumi_analysis.replay.vectorised import STATE_COLUMNS

    assert list(polars_schema("StatesSchema").items()) == list(dict(STATE_COLUMNS).items())
    assert dict(empty_tables()["states"].schema) == dict(STATE_COLUMNS)
