"""Validation of a table's frame by its model's check plan, in one polars select, without pandera.

Importing pandera costs a fresh process ~0.2-0.5 CPU-s (more with pandas installed), and its
polars backend runs each check as its own query: every store worker paid both for every chunk.
Each pandera model of :mod:`rivumi_analysis.schemas` is held as DATA (:data:`PLANS`, read from
``data/check_plans.json``, which ``scripts/checkplans.py`` writes from the live models;
``tests/test_checks.py`` fails when a model changes and the plans were not regenerated): its exact polars schema, the
columns that may not be null (nor NaN), the unique ones, and the checks pandera runs as
``(column or None for a dataframe check, check name, sorted statistics, ignore_na)``, taken
from pandera's check objects (their ``name`` and ``statistics``). A dataframe check is one of
:data:`FRAME_CHECKS`, which the models' own dataframe checks evaluate (one definition).
:func:`surely_valid` evaluates a plan in one polars select.

It is at least as strict as pandera: a frame it passes, pandera passes (``tests/test_checks.py``
judges mutated tables by both); any other frame, or a model without a plan, goes to pandera,
whose result or error is the answer (``tables._common.validate``). The A/B against pandera
alone: ``benchmarks/validation_ab.py``.

>>> import polars as pl
>>> surely_valid("VerificationsSchema", pl.DataFrame(schema=schema("VerificationsSchema")))
True
>>> surely_valid("VerificationsSchema", pl.DataFrame({"x": [1]}))
False
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from typing import Any

import polars as pl

_FLOATS = (pl.Float32, pl.Float64)

# A column check's polars expression, per pandera builtin check name (pandera's own polars
# builtins: backends/polars/builtin_checks.py), from the check's ``statistics``.
_COLUMN: dict[str, Callable[..., pl.Expr]] = {
    "equal_to": lambda c, value: pl.col(c).eq(value),
    "not_equal_to": lambda c, value: pl.col(c).ne(value),
    "greater_than": lambda c, min_value: pl.col(c).gt(min_value),
    "greater_than_or_equal_to": lambda c, min_value: pl.col(c).ge(min_value),
    "less_than": lambda c, max_value: pl.col(c).lt(max_value),
    "less_than_or_equal_to": lambda c, max_value: pl.col(c).le(max_value),
    "isin": lambda c, allowed_values: pl.col(c).is_in(allowed_values),
    "notin": lambda c, forbidden_values: pl.col(c).is_in(forbidden_values).not_(),
    "str_matches": lambda c, pattern: pl.col(c).str.contains(
        pattern if pattern.startswith("^") else f"^{pattern}"),
    "str_startswith": lambda c, string: pl.col(c).str.starts_with(string),
    "str_endswith": lambda c, string: pl.col(c).str.ends_with(string),
    "str_length": lambda c, min_value=None, max_value=None, exact_value=None: _str_length(
        pl.col(c).str.len_chars(), min_value, max_value, exact_value),
}


def _str_length(n: pl.Expr, low: Any, high: Any, exact: Any) -> pl.Expr:
    if exact is not None:
        return n.eq(exact)
    if low is None and high is None:
        raise ValueError("str_length needs a bound")  # pandera raises too: no plan
    if low is None:
        return n.le(high)
    if high is None:
        return n.ge(low)
    return n.is_between(low, high)


FRAME_CHECKS: dict[str, Callable[[], pl.Expr]] = {
    "key_unique": lambda: ~pl.struct("run_dir", "line_no").is_duplicated(),
    "unexplained_means_no_rule": lambda: pl.col("unexplained") == (
        ~pl.col("matches") & pl.col("explanation").is_null()),
}
"""The dataframe checks of :mod:`rivumi_analysis.schemas` by name: each model's dataframe check
of that name evaluates this expression (:func:`frame_check`), so the plan's name is the
check."""


def frame_check(name: str, lf: pl.LazyFrame) -> pl.LazyFrame:
    """The dataframe check ``name`` of :data:`FRAME_CHECKS` over ``lf``, as pandera's
    dataframe checks return it (one boolean column named after the check).

    >>> frame_check("key_unique", pl.LazyFrame({"run_dir": ["r", "r"], "line_no": [1, 1]})
    ...             ).collect()["key_unique"].to_list()
    [False, False]
    """
    return lf.select(FRAME_CHECKS[name]().alias(name))


def _dtype(spec: Any) -> pl.DataType:
    """The polars dtype a plan writes as a name or ``[name, arguments...]``.

    >>> _dtype("Int64"), _dtype(["List", ["Datetime", "us", "UTC"]])
    (Int64, List(Datetime(time_unit='us', time_zone='UTC')))
    """
    if isinstance(spec, str):
        return getattr(pl, spec)()
    kind, *args = spec
    if kind == "List":
        return pl.List(_dtype(args[0]))
    if kind == "Struct":
        return pl.Struct({name: _dtype(d) for name, d in args[0]})
    return getattr(pl, kind)(*args)  # Datetime(unit, zone), Duration(unit)


def _load_plans() -> dict[str, dict[str, Any]]:
    """``data/check_plans.json`` as plans: ``schema`` (column -> dtype), ``not_null``,
    ``unique`` and ``checks`` as tuples, each check ``(column or None, name, sorted
    statistics, ignore_na)`` (None: no plan, pandera alone decides)."""
    text = resources.files("rivumi_analysis").joinpath("data", "check_plans.json").read_text(
        encoding="utf-8")
    out = {}
    for name, plan in json.loads(text).items():
        checks = plan["checks"]
        out[name] = {
            "schema": {column: _dtype(d) for column, d in plan["schema"]},
            "not_null": None if plan["not_null"] is None else tuple(plan["not_null"]),
            "unique": None if plan["unique"] is None else tuple(plan["unique"]),
            "checks": None if checks is None else tuple(
                (column, kind, tuple(map(tuple, args)), ignore_na)
                for column, kind, args, ignore_na in checks)}
    return out


PLANS = _load_plans()
"""Every model's plan by class name (see :func:`_load_plans`)."""


def schema(model: str) -> dict[str, pl.DataType]:
    """The exact polars schema (column -> dtype, in declaration order) of a model by name.

    >>> list(schema("VerificationsSchema"))[:2]
    ['run_dir', 'run_id']
    """
    return dict(PLANS[model]["schema"])


_EXPRS: dict[str, list[tuple[pl.Expr, bool]] | None] = {}


def _exprs(model: str) -> list[tuple[pl.Expr, bool]] | None:
    """The plan's checks as ``(boolean column expression, ignore_na)``, built once."""
    if model in _EXPRS:
        return _EXPRS[model]
    plan = PLANS.get(model)
    out: list[tuple[pl.Expr, bool]] | None = None
    if plan is not None and plan["checks"] is not None:
        try:
            out = []
            for col, kind, args, ignore_na in plan["checks"]:
                if col is None:
                    out.append((FRAME_CHECKS[kind](), ignore_na))
                else:
                    out.append((_COLUMN[kind](col, **dict(args)), ignore_na))
        except Exception:  # noqa: BLE001 (pandera decides)
            out = None
    _EXPRS[model] = out
    return out


def surely_valid(model: str, df: pl.DataFrame) -> bool:
    """Whether ``df`` passes every check pandera runs for the model named ``model`` (a class
    name of :mod:`rivumi_analysis.schemas`); False also when it cannot tell (the caller then
    asks pandera). Imports neither pandera nor pandas."""
    plan = PLANS.get(model)
    exprs = _exprs(model)
    if plan is None or exprs is None:
        return False
    want = plan["schema"]
    if len(df.schema) != len(want) or any(want.get(c) != dt for c, dt in df.schema.items()):
        return False  # strict: exactly the model's columns, each of exactly its dtype
    sel: list[pl.Expr] = []
    for c in plan["not_null"]:
        sel.append(pl.col(c).is_not_null().all())
        if want[c] in _FLOATS:
            sel.append(pl.col(c).is_not_nan().all())
    sel.extend(pl.col(c).is_duplicated().any().not_() for c in plan["unique"])
    for e, ignore_na in exprs:
        sel.append((e | e.is_null()).all() if ignore_na else e.fill_null(False).all())
    if not sel:
        return True
    try:
        row = df.select(e.alias(f"c{i}") for i, e in enumerate(sel)).row(0)
    except Exception:  # noqa: BLE001 (pandera reports what the check raised)
        return False
    return all(v is True for v in row)
