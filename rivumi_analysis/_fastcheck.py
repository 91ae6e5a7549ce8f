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


# --- the plans as data (rivumi_analysis._checkplans, read by the pandera-free _plancheck) ----

def derive_plan(model: type) -> dict[str, Any]:
    """A model's check plan as plain data: ``schema`` (column -> polars dtype, declaration
    order), ``not_null``, ``unique`` and ``checks``, each ``(column or None for a dataframe
    check, kind, sorted (argument, value) pairs, ignore_na)``; ``checks`` is None when
    :mod:`rivumi_analysis._plancheck` cannot stand for pandera on the model (then only the
    schema is used). ``scripts/checkplans.py`` writes every model's into ``_checkplans.py``;
    ``tests/test_plancheck.py`` checks that the committed plans are these."""
    import ast
    import inspect
    import textwrap

    from ._plancheck import _COLUMN, FRAME_CHECKS

    schema = model.to_schema()  # type: ignore[attr-defined]
    out: dict[str, Any] = {
        "schema": {name: col.dtype.type for name, col in schema.columns.items()},
        "not_null": None, "unique": None, "checks": None}
    p = plan(model)
    if p is None:
        return out
    checks: list[tuple[Any, ...]] = []
    for col, check in p.checks:
        name = check.name
        if col is not None:
            if (name not in _COLUMN or not check.is_builtin_check(name) or check.element_wise
                    or getattr(check._check_fn, "__name__", None) != name):
                return out
            args = tuple(sorted((k, v) for k, v in check.statistics.items()))
        else:
            fn = getattr(model, name, None)
            if fn is None or name not in FRAME_CHECKS:
                return out
            f = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
            body = f.body  # type: ignore[attr-defined]
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                body = body[1:]
            if "\n".join(ast.unparse(s) for s in body) != FRAME_CHECKS[name][0]:
                return out
            args = ()
        checks.append((col, name, args, bool(check.ignore_na)))
    out.update(not_null=p.not_null, unique=p.unique, checks=tuple(checks))
    return out


def _dtype_source(dt: Any) -> str:
    """Python source that builds the polars dtype ``dt`` (``pl.`` names)."""
    if isinstance(dt, pl.Datetime):
        return f"pl.Datetime({dt.time_unit!r}, {dt.time_zone!r})"
    if isinstance(dt, pl.Duration):
        return f"pl.Duration({dt.time_unit!r})"
    if isinstance(dt, pl.List):
        return f"pl.List({_dtype_source(dt.inner)})"
    if isinstance(dt, pl.Struct):
        fields = ", ".join(f"{f.name!r}: {_dtype_source(f.dtype)}" for f in dt.fields)
        return f"pl.Struct({{{fields}}})"
    name = dt.__name__ if isinstance(dt, type) else type(dt).__name__
    if not isinstance(getattr(pl, name, None), type) or getattr(pl, name)() != dt:
        raise ValueError(f"no source for the dtype {dt!r}")
    return f"pl.{name}"


def render_plans(models: dict[str, type]) -> str:
    """The source of ``rivumi_analysis/_checkplans.py`` for ``models`` (name -> model)."""
    lines = ['"""Every pandera model\'s check plan as data (GENERATED by scripts/checkplans.py',
             "from the live models of rivumi_analysis.schemas: do not edit; re-run the script",
             'after changing a model; tests/test_plancheck.py fails until you do)."""', "",
             "import polars as pl", "", "PLANS = {"]
    for name, model in models.items():
        d = derive_plan(model)
        lines.append(f"    {name!r}: {{")
        lines.append('        "schema": {')
        lines.extend(f"            {c!r}: {_dtype_source(dt)},"
                     for c, dt in d["schema"].items())
        lines.append("        },")
        for key in ("not_null", "unique"):
            lines.append(f"        {key!r}: {d[key]!r},")
        if d["checks"] is None:
            lines.append('        "checks": None,')
        else:
            lines.append('        "checks": (')
            lines.extend(f"            {c!r}," for c in d["checks"])
            lines.append("        ),")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"
