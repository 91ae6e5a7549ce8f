"""The check plans of :mod:`rivumi_analysis.checks`, derived from pandera's own models.

pandera is the oracle: a model's plan is what pandera checks of it (its schema, the non-null
and unique columns, each check's ``name`` and ``statistics``), or no checks (``None``: pandera
alone validates that model) when the model uses anything the plan cannot express exactly.
``scripts/checkplans.py`` writes :func:`render_plans` into
``rivumi_analysis/data/check_plans.json``;
``tests/test_checks.py`` fails when the committed plans are not these.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from rivumi_analysis import schemas
from rivumi_analysis.checks import _COLUMN, FRAME_CHECKS


def models() -> dict[str, type]:
    """Every pandera model of :mod:`rivumi_analysis.schemas`, in declaration order."""
    return {n: m for n, m in vars(schemas).items()
            if isinstance(m, type) and issubclass(m, schemas._Base) and m is not schemas._Base}


def _plain(check: Any) -> bool:
    return check.groupby is None and not getattr(check, "raise_warning", False)


def derive_plan(model: type) -> dict[str, Any]:
    """``model``'s plan: ``schema`` (column -> polars dtype, declaration order), ``not_null``,
    ``unique`` and ``checks``, each ``(column or None for a dataframe check, check name,
    sorted statistics, ignore_na)``; ``checks`` (and the column lists) None when the plan
    cannot stand for pandera on the model."""
    schema = model.to_schema()  # type: ignore[attr-defined]
    out: dict[str, Any] = {
        "schema": {name: col.dtype.type for name, col in schema.columns.items()},
        "not_null": None, "unique": None, "checks": None}
    if (schema.strict is not True or schema.ordered or schema.coerce or schema.unique
            or schema.dtype is not None or getattr(schema, "add_missing_columns", False)
            or getattr(schema, "drop_invalid_rows", False) or getattr(schema, "parsers", None)
            or getattr(schema, "metadata_checks", None)):
        return out
    not_null: list[str] = []
    unique: list[str] = []
    checks: list[tuple[Any, ...]] = []
    for name, col in schema.columns.items():
        if (col.name != name or col.regex or not col.required or col.coerce
                or col.default is not None or getattr(col, "parsers", None)
                or getattr(col, "drop_invalid_rows", False) or col.dtype is None):
            return out
        if not col.nullable:
            not_null.append(name)
        if col.unique:
            unique.append(name)
        for c in col.checks:
            if (not _plain(c) or c.name not in _COLUMN or not c.is_builtin_check(c.name)
                    or c.element_wise):
                return out
            checks.append((name, c.name, tuple(sorted(c.statistics.items())),
                           bool(c.ignore_na)))
    for c in schema.checks:
        if not _plain(c) or c.name not in FRAME_CHECKS:
            return out
        checks.append((None, c.name, (), bool(c.ignore_na)))
    out.update(not_null=tuple(not_null), unique=tuple(unique), checks=tuple(checks))
    return out


def _dtype_json(dt: Any) -> Any:
    """The plan file's form of a polars dtype (``checks._dtype`` reads it back)."""
    if isinstance(dt, pl.Datetime):
        return ["Datetime", dt.time_unit, dt.time_zone]
    if isinstance(dt, pl.Duration):
        return ["Duration", dt.time_unit]
    if isinstance(dt, pl.List):
        return ["List", _dtype_json(dt.inner)]
    if isinstance(dt, pl.Struct):
        return ["Struct", [[f.name, _dtype_json(f.dtype)] for f in dt.fields]]
    name = dt.__name__ if isinstance(dt, type) else type(dt).__name__
    if not isinstance(getattr(pl, name, None), type) or getattr(pl, name)() != dt:
        raise ValueError(f"no plan form for the dtype {dt!r}")
    return name


def render_plans(by_name: dict[str, type] | None = None) -> str:
    """The text of ``rivumi_analysis/data/check_plans.json``: every model's plan."""
    out = {}
    for name, model in (by_name or models()).items():
        d = derive_plan(model)
        out[name] = {"schema": [[c, _dtype_json(dt)] for c, dt in d["schema"].items()],
                     "not_null": d["not_null"], "unique": d["unique"], "checks": d["checks"]}
    lines = ["{"]
    for i, (name, plan) in enumerate(out.items()):
        lines.append(f"{json.dumps(name)}: {{")
        for j, (key, value) in enumerate(plan.items()):
            sep = "," if j < len(plan) - 1 else ""
            if isinstance(value, list | tuple) and value:
                lines.append(f" {json.dumps(key)}: [")
                lines.extend(f"  {json.dumps(v, ensure_ascii=False)}"
                             + ("," if k < len(value) - 1 else "") for k, v in enumerate(value))
                lines.append(f" ]{sep}")
            else:
                lines.append(f" {json.dumps(key)}: {json.dumps(value)}{sep}")
        lines.append("}" + ("," if i < len(out) - 1 else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"
