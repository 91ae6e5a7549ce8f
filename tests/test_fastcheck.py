"""The one-query validation (``rivumi_analysis._fastcheck``) never passes a frame pandera fails.

``schemas._Base.validate`` returns a frame as it is when :func:`_fastcheck.passes` accepts it
and runs pandera otherwise, so the fast path must be at least as strict as pandera, and it must
accept the tables the loaders build (else it saves nothing). The oracle is pandera's own
``DataFrameModel.validate``. Checked: every model of ``schemas`` gets a plan; every table of
the sample runs passes both; single-value mutations of every column (nulls, NaN, negative,
huge, empty and foreign strings, another row's value: duplicate keys), dtype changes, extra and
missing columns are judged alike by both; a model the plan cannot stand for goes to pandera.
"""

from __future__ import annotations

import math

import pandera.polars as pa
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from rivumi_analysis import _fastcheck, schemas
from rivumi_analysis.errors import SchemaValidationError
from rivumi_analysis.read.discovery import discover
from rivumi_analysis.store.build import TABLES, build_frames, read_runs
from rivumi_analysis.tables._common import validate
from tests.conftest import SAMPLE_RUNS

MODELS = {"runs": schemas.RunsSchema, "events": schemas.EventsSchema,
          "quarantine": schemas.QuarantineSchema, "manifests": schemas.ManifestsSchema,
          "tool_calls": schemas.ToolCallsSchema, "approvals": schemas.ApprovalsSchema,
          "model_calls": schemas.ModelCallsSchema, "usage": schemas.UsageSchema,
          "verifications": schemas.VerificationsSchema, "states": schemas.StatesSchema,
          "drift": schemas.DriftSchema, "forks": schemas.ForksSchema,
          "messages": schemas.MessagesSchema}


def pandera_ok(model: type, df: pl.DataFrame) -> bool:
    """The oracle: pandera's own validate (not the override)."""
    try:
        pa.DataFrameModel.validate.__func__(model, df)  # type: ignore[attr-defined]
    except (pa.errors.SchemaErrors, pa.errors.SchemaError):
        return False
    return True


@pytest.fixture(scope="module")
def tables() -> dict[str, pl.DataFrame]:
    locs = discover(SAMPLE_RUNS).runs
    return build_frames(read_runs(locs))


def test_every_model_has_a_plan() -> None:
    models = [m for m in vars(schemas).values()
              if isinstance(m, type) and issubclass(m, schemas._Base) and m is not schemas._Base]
    assert len(models) >= 20
    assert [m.__name__ for m in models if _fastcheck.plan(m) is None] == []


def test_sample_tables_pass_both(tables: dict[str, pl.DataFrame]) -> None:
    assert sorted(tables) == sorted(TABLES)
    for name, df in tables.items():
        assert df.height, name
        assert _fastcheck.passes(MODELS[name], df), name
        assert pandera_ok(MODELS[name], df), name
        assert MODELS[name].validate(df) is df  # the override returns the frame itself
        # ... which is what pandera returns (dtypes, column order, values)
        theirs = pa.DataFrameModel.validate.__func__(MODELS[name], df)  # type: ignore[attr-defined]
        assert_frame_equal(df, theirs)
        empty = df.clear()
        assert _fastcheck.passes(MODELS[name], empty) == pandera_ok(MODELS[name], empty)


def _candidates(model: type, df: pl.DataFrame, col: str) -> list[object]:
    """Values likely to break what pandera checks of ``col``: its nullability, its checks,
    its uniqueness and the tables' key checks (another row's value)."""
    spec = model.to_schema().columns[col]
    dt = df.schema[col]
    pool: list[object] = [df[col][df.height - 1]] if spec.unique or col in ("run_dir", "line_no") else []
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
    return pool


def _with_value(df: pl.DataFrame, col: str, row: int, value: object) -> pl.DataFrame:
    vals = df[col].to_list()
    vals[row] = value
    return df.with_columns(pl.Series(col, vals, dtype=df.schema[col]))


def test_mutations_are_judged_alike(tables: dict[str, pl.DataFrame]) -> None:
    judged = rejected = 0
    for name, full in tables.items():
        model = MODELS[name]
        df = full.head(12)
        for col in df.columns:
            for value in _candidates(model, df, col):
                bad = _with_value(df, col, 0, value)
                fast, slow = _fastcheck.passes(model, bad), pandera_ok(model, bad)
                assert fast == slow, (name, col, value, fast, slow)
                judged += 1
                rejected += not slow
    assert judged > 250 and rejected > 200, (judged, rejected)  # they do break things


def test_shape_changes_are_rejected(tables: dict[str, pl.DataFrame]) -> None:
    for name, full in tables.items():
        model = MODELS[name]
        df = full.head(5)
        variants = [df.with_columns(pl.lit(1).alias("extra")), df.drop(df.columns[-1]),
                    df.select(reversed(df.columns))]
        seen: set[str] = set()
        for col, dt in df.schema.items():
            if dt == pl.Int64 and "int" not in seen:
                variants.append(df.with_columns(pl.col(col).cast(pl.Int32)))
                seen.add("int")
            elif isinstance(dt, pl.Datetime) and "time" not in seen:
                variants.append(df.with_columns(pl.col(col).dt.replace_time_zone(None)))
                seen.add("time")
            elif dt == pl.String and "str" not in seen:
                variants.append(df.with_columns(pl.col(col).cast(pl.Categorical)))
                seen.add("str")
        for v in variants:
            assert _fastcheck.passes(model, v) == pandera_ok(model, v), (name, v.schema)


def test_duplicate_keys_are_rejected(tables: dict[str, pl.DataFrame]) -> None:
    for name in ("events", "states", "runs", "manifests"):
        df = tables[name].head(6)
        dup = pl.concat([df, df.head(1)])
        assert not _fastcheck.passes(MODELS[name], dup)
        assert not pandera_ok(MODELS[name], dup)


def test_a_failing_frame_raises_pandera_error(tables: dict[str, pl.DataFrame]) -> None:
    df = _with_value(tables["events"].head(4), "sequence", 0, -5)
    with pytest.raises(SchemaValidationError, match="EventsSchema validation failed"):
        validate(df, schemas.EventsSchema)
    with pytest.raises(pa.errors.SchemaError):
        schemas.EventsSchema.validate(df)  # lazy=False: pandera's first error
    lazy = schemas.EventsSchema.validate(tables["events"].lazy())  # a LazyFrame: pandera's
    assert isinstance(lazy, pl.LazyFrame)


def test_planning_that_raises_means_pandera(monkeypatch: pytest.MonkeyPatch,
                                            tables: dict[str, pl.DataFrame]) -> None:
    """Another pandera version's internals (an attribute gone, say) never break a validate:
    the model gets no plan and pandera validates it."""

    class Fresh(schemas._Base):
        a: pl.Int64 = pa.Field(ge=0)

    def broken(model: type) -> None:
        raise AttributeError("regex")

    monkeypatch.setattr(_fastcheck, "_make_plan", broken)
    assert _fastcheck.plan(Fresh) is None
    assert Fresh.validate(pl.DataFrame({"a": [1]})).height == 1
    with pytest.raises(pa.errors.SchemaError):
        Fresh.validate(pl.DataFrame({"a": [-1]}))


def test_a_model_without_plan_goes_to_pandera() -> None:
    class Coerced(schemas._Base):
        a: pl.Int64 = pa.Field(ge=0)

        class Config:
            coerce = True

    class Defaulted(schemas._Base):
        a: pl.Int64 = pa.Field(default=3, nullable=True)

    assert _fastcheck.plan(Coerced) is None and _fastcheck.plan(Defaulted) is None
    out = Coerced.validate(pl.DataFrame({"a": [1, 2]}, schema={"a": pl.Int32}))
    assert out.schema["a"] == pl.Int64  # pandera's coercion, not the frame as it was
    with pytest.raises(pa.errors.SchemaError):
        Coerced.validate(pl.DataFrame({"a": [-1]}))
