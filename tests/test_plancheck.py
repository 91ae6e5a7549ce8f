"""The pandera-free check (``rivumi_analysis._plancheck``) never passes a frame pandera fails.

``tables._common.validate(df, "<Model>")`` returns a frame as it is when
:func:`_plancheck.surely_valid` accepts it and asks pandera otherwise, so the committed plans
(``rivumi_analysis/_checkplans.py``, data) must be exactly the live models' (they cannot drift:
the first test fails when a model changes and ``scripts/checkplans.py`` was not re-run), the
check must be at least as strict as pandera (the oracle: pandera's own
``DataFrameModel.validate``), and it must accept the tables the loaders build (else it saves
nothing). The mutations are those of ``tests/test_fastcheck.py`` plus flipped booleans (the
dataframe checks) and duplicated keys.
"""

from __future__ import annotations

import pathlib

import polars as pl
import pytest

from rivumi_analysis import _checkplans, _fastcheck, _plancheck, schemas
from rivumi_analysis.errors import SchemaValidationError
from rivumi_analysis.store.build import TABLES, empty_tables
from rivumi_analysis.tables._common import polars_schema, validate
from tests.test_fastcheck import MODELS, _candidates, _with_value, pandera_ok, tables  # noqa: F401


def _all_models() -> dict[str, type]:
    return {n: m for n, m in vars(schemas).items()
            if isinstance(m, type) and issubclass(m, schemas._Base) and m is not schemas._Base}


def test_the_committed_plans_are_the_live_models() -> None:
    models = _all_models()
    assert len(models) >= 20
    assert list(_checkplans.PLANS) == list(models)
    for name, model in models.items():
        derived = _fastcheck.derive_plan(model)
        assert _checkplans.PLANS[name] == derived, name
        assert list(_checkplans.PLANS[name]["schema"]) == list(derived["schema"]), name
        assert derived["checks"] is not None, name  # every model is planned (no pandera)
        assert _plancheck._exprs(name) is not None, name
    # and the file is exactly what the script writes (regenerated, not hand-edited)
    text = pathlib.Path(_checkplans.__file__).read_text(encoding="utf-8")
    assert text == _fastcheck.render_plans(models)


def test_the_plans_schemas_are_the_models() -> None:
    for name, model in _all_models().items():
        assert polars_schema(name) == polars_schema(model), name
        assert list(polars_schema(name)) == list(polars_schema(model)), name
    for table, df in empty_tables().items():
        if table != "states":
            assert dict(df.schema) == polars_schema(MODELS[table]), table


def test_a_changed_model_is_noticed(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the drift test rests on: changing a check, a column's nullability or a dataframe
    check's body changes the derived plan (or leaves the model unplanned)."""
    import pandera.polars as pa

    class Before(schemas._Base):
        a: pl.Int64 = pa.Field(ge=0)

    class After(schemas._Base):
        a: pl.Int64 = pa.Field(ge=1)

    class Nullable(schemas._Base):
        a: pl.Int64 = pa.Field(ge=0, nullable=True)

    class Other(schemas._Base):
        run_dir: pl.Utf8
        line_no: pl.Int64

        @pa.dataframe_check
        def key_unique(cls, data: pa.PolarsData) -> pl.LazyFrame:
            return data.lazyframe.select(~pl.col("run_dir").is_duplicated())

    plans = [_fastcheck.derive_plan(m) for m in (Before, After, Nullable)]
    assert plans[0] != plans[1] and plans[0] != plans[2]
    assert _fastcheck.derive_plan(Other)["checks"] is None  # a body it does not know
    assert _fastcheck.derive_plan(schemas.EventsSchema)["checks"] is not None


def test_sample_tables_pass(tables: dict[str, pl.DataFrame]) -> None:  # noqa: F811
    assert sorted(tables) == sorted(TABLES)
    for name, df in tables.items():
        model = MODELS[name].__name__
        assert df.height, name
        assert _plancheck.surely_valid(model, df), name
        assert pandera_ok(MODELS[name], df), name
        assert validate(df, model) is df
        empty = df.clear()
        assert _plancheck.surely_valid(model, empty) == pandera_ok(MODELS[name], empty), name


def _flips(df: pl.DataFrame, col: str) -> list[object]:
    """A boolean's other value (what the dataframe checks over booleans look at)."""
    if df.schema[col] != pl.Boolean:
        return []
    v = df[col][0]
    return [not v] if v is not None else [True, False]


def test_mutations_are_judged_alike(tables: dict[str, pl.DataFrame]) -> None:  # noqa: F811
    judged = rejected = 0
    for name, full in tables.items():
        model = MODELS[name]
        df = full.head(12)
        for col in df.columns:
            for value in [*_candidates(model, df, col), *_flips(df, col)]:
                bad = _with_value(df, col, 0, value)
                fast, slow = _plancheck.surely_valid(model.__name__, bad), pandera_ok(model, bad)
                assert fast == slow, (name, col, value, fast, slow)
                judged += 1
                rejected += not slow
    assert judged > 280 and rejected > 200, (judged, rejected)  # they do break things


def test_shape_changes_and_duplicate_keys_are_rejected(
        tables: dict[str, pl.DataFrame]) -> None:  # noqa: F811
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
            fast = _plancheck.surely_valid(model.__name__, v)
            assert fast == pandera_ok(model, v) or not fast, (name, v.schema)


def test_a_failing_frame_gets_pandera_s_error(tables: dict[str, pl.DataFrame]) -> None:  # noqa: F811
    df = _with_value(tables["events"].head(4), "sequence", 0, -5)
    assert not _plancheck.surely_valid("EventsSchema", df)
    with pytest.raises(SchemaValidationError, match="EventsSchema validation failed"):
        validate(df, "EventsSchema")
    drift = tables["drift"].head(3)
    bad = _with_value(drift, "unexplained", 0, not drift["unexplained"][0])
    assert not _plancheck.surely_valid("DriftSchema", bad)
    from rivumi_analysis.tables.drift import drift_of_rows

    with pytest.raises(SchemaValidationError, match="drift_df failed DriftSchema"):
        drift_of_rows(bad.to_dicts())


def test_an_unknown_model_or_plan_goes_to_pandera(monkeypatch: pytest.MonkeyPatch) -> None:
    df = pl.DataFrame({"a": [1]})
    assert not _plancheck.surely_valid("NoSuchSchema", df)
    monkeypatch.setitem(_checkplans.PLANS, "VerificationsSchema",
                        {**_checkplans.PLANS["VerificationsSchema"], "checks": None})
    monkeypatch.setattr(_plancheck, "_EXPRS", {})
    empty = pl.DataFrame(schema=polars_schema("VerificationsSchema"))
    assert not _plancheck.surely_valid("VerificationsSchema", empty)
    assert validate(empty, "VerificationsSchema").height == 0  # pandera said yes


def test_the_states_plan_is_the_replay_engine_s_columns() -> None:
    """``store.build.empty_tables`` takes the states schema from the plan, not from the
    replay engine (which a fresh parent process would import for it)."""
    from rivumi_analysis.replay.vectorised import STATE_COLUMNS

    assert list(polars_schema("StatesSchema").items()) == list(dict(STATE_COLUMNS).items())
    assert dict(empty_tables()["states"].schema) == dict(STATE_COLUMNS)
