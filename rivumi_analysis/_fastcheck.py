"""Validation of a polars DataFrame against a pandera model in one polars query.

pandera's polars backend runs every check of every column as its own query (a table of 46
columns costs ~550 small collects and ~45 ms, whatever its size). :func:`passes` evaluates
the same checks together: the model's plan (columns, nullability, uniqueness, the
``Check`` objects and dataframe checks) is built once per process, each ``Check`` gives its
own lazy output (pandera's check backend ``apply``, the very expressions pandera
evaluates), and one ``collect_all`` reduces them to booleans. It is at least as strict as
pandera: a frame it passes, pandera passes; any other frame (or a model it cannot plan:
coercion, defaults, parsers, regex or optional columns, ...) goes to pandera, whose result
or error is the answer (``schemas._Base.validate``). pandera is the oracle:
``tests/test_fastcheck.py`` proves the two agree on real tables and on mutated ones. Any
exception while planning or checking means "cannot tell" (pandera decides).

``tables/events.py::_surely_valid`` is a separate check for the same purpose that needs no
pandera at all (``events_df``'s parent process never imports pandera or pandas).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl
from pandera.api.checks import Check
from pandera.api.polars.types import PolarsData
from pandera.constants import CHECK_OUTPUT_KEY

_FLOATS = (pl.Float32, pl.Float64)


@dataclass(frozen=True, slots=True)
class Plan:
    """What pandera checks of a model, gathered once."""

    schema: Any
    names: frozenset[str]
    not_null: tuple[str, ...]
    unique: tuple[str, ...]
    checks: tuple[tuple[str | None, Check], ...]
    """``(column, check)``; ``None``: a dataframe-level check."""


_PLANS: dict[type, Plan | None] = {}
_SHAPES: dict[tuple[type, tuple[Any, ...]], bool] = {}


def plan(model: type) -> Plan | None:
    """The model's plan, or None when :func:`passes` cannot stand for pandera on it (also
    when planning raised: another pandera version's internals, say)."""
    if model in _PLANS:
        return _PLANS[model]
    try:
        p = _make_plan(model)
    except Exception:  # noqa: BLE001 (pandera decides)
        p = None
    _PLANS[model] = p
    return p


def _make_plan(model: type) -> Plan | None:
    schema = model.to_schema()  # type: ignore[attr-defined]
    if (schema.strict is not True or schema.ordered or schema.coerce or schema.unique
            or schema.dtype is not None or getattr(schema, "add_missing_columns", False)
            or getattr(schema, "drop_invalid_rows", False) or getattr(schema, "parsers", None)
            or getattr(schema, "metadata_checks", None)):
        return None
    not_null, unique, checks = [], [], []
    for name, col in schema.columns.items():
        if (col.name != name or col.regex or not col.required or col.coerce
                or col.default is not None or getattr(col, "parsers", None)
                or getattr(col, "drop_invalid_rows", False) or col.dtype is None):
            return None
        if not col.nullable:
            not_null.append(name)
        if col.unique:
            unique.append(name)
        for c in col.checks:
            if not _plain(c):
                return None
            checks.append((name, c))
    for c in schema.checks:
        if not _plain(c):
            return None
        checks.append((None, c))
    return Plan(schema, frozenset(schema.columns), tuple(not_null), tuple(unique),
                tuple(checks))


def _plain(check: Check) -> bool:
    return (check.groupby is None and not getattr(check, "raise_warning", False)
            and check._check_fn is not None)


def _shape_ok(model: type, p: Plan, df: pl.DataFrame) -> bool:
    """Exactly the model's columns, each of a dtype pandera's own dtype check accepts."""
    key = (model, tuple(df.schema.items()))
    ok = _SHAPES.get(key)
    if ok is None:
        try:
            ok = set(df.columns) == p.names and all(
                p.schema.columns[c].dtype.check(dt, PolarsData(df.lazy().select(c), c)) is True
                for c, dt in df.schema.items())
        except Exception:  # noqa: BLE001 (pandera decides)
            ok = False
        _SHAPES[key] = ok
    return ok


def _output(check: Check, lf: pl.LazyFrame, key: str | None) -> Any:
    """The check's output as pandera's polars check backend produces it (a LazyFrame with
    one boolean column ``CHECK_OUTPUT_KEY``, or a bool)."""
    name = getattr(check._check_fn, "__name__", None)
    if name is not None and check.is_builtin_check(name):  # as Check.__call__ does
        check._check_fn = check.get_builtin_check_fn(name)
    backend = check.get_backend(lf)(check)
    return backend.apply(PolarsData(backend.preprocess(lf, key), key or "*"))


def passes(model: type, df: pl.DataFrame) -> bool:
    """Whether ``df`` passes every check pandera runs for ``model`` (False also when it
    cannot tell: the caller then runs pandera).

    >>> from rivumi_analysis.schemas import VerificationsSchema
    >>> from rivumi_analysis.tables._common import polars_schema
    >>> passes(VerificationsSchema, pl.DataFrame(schema=polars_schema(VerificationsSchema)))
    True
    >>> passes(VerificationsSchema, pl.DataFrame({"x": [1]}))
    False
    """
    p = plan(model)
    if p is None or not _shape_ok(model, p, df):
        return False
    lf = df.lazy()
    exprs: list[pl.Expr] = []
    for c in p.not_null:
        exprs.append(pl.col(c).is_not_null().all().alias(f"n{len(exprs)}"))
        if df.schema[c] in _FLOATS:
            exprs.append(pl.col(c).is_not_nan().all().alias(f"n{len(exprs)}"))
    for c in p.unique:
        exprs.append(pl.col(c).is_duplicated().any().not_().alias(f"n{len(exprs)}"))
    frames = [lf.select(exprs)] if exprs else []
    try:
        for i, (key, check) in enumerate(p.checks):
            out = _output(check, lf, key)
            if isinstance(out, bool):
                if out is not True:
                    return False
                continue
            k = pl.col(CHECK_OUTPUT_KEY)
            ok = (k | k.is_null()).all() if check.ignore_na else k.fill_null(False).all()
            frames.append(out.select(ok.alias(f"c{i}")))
        if not frames:
            return True
        results = pl.collect_all(frames)
    except Exception:  # noqa: BLE001 (pandera reports what the check raised)
        return False
    return all(v is True for r in results for v in r.row(0))
