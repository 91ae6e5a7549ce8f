"""What every table shares: frame building and validation, the one loader flow, strictness.

Each table's own logic (what a row is, how rows are built from events) lives in its module
(``tables/<table>.py``). The quarantine rows are built here because every loader's
``strict=True`` raises a :class:`~rivumi_analysis.errors.QuarantineError` carrying them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from ..errors import QuarantineError, SchemaValidationError
from ..read.decode import _without_lone_surrogates
from ..read.discovery import Source
from ..read.snapshot import RunData, gc_paused, is_loaded, stream_runs

if TYPE_CHECKING:
    import pandera.polars as pa

RAW_KEEP_BYTES = 4096


# a model is a pandera model of rivumi_analysis.schemas or its class name: a model's schema, and
# the validation of a frame its check plan passes, need no pandera (rivumi_analysis.checks)


def _model(model: type[pa.DataFrameModel] | str) -> type[pa.DataFrameModel]:
    """A pandera model of :mod:`rivumi_analysis.schemas`, given as it is or by class name
    (None for a name that is not one)."""
    if isinstance(model, str):
        from .. import schemas

        return getattr(schemas, model, None)
    return model


def polars_schema(model: type[pa.DataFrameModel] | str) -> dict[str, pl.DataType]:
    """The polars schema (column -> dtype) a pandera model (or its class name) declares, in
    declaration order (by name: from its check plan, without pandera).

    >>> list(polars_schema("VerificationsSchema"))[:2]
    ['run_dir', 'run_id']
    """
    if isinstance(model, str):
        from ..checks import schema

        return schema(model)
    return {name: col.dtype.type for name, col in model.to_schema().columns.items()}


def frame(rows: list[dict[str, Any]] | dict[str, list[Any]],
          model: type[pa.DataFrameModel] | str) -> pl.DataFrame:
    """Build a DataFrame with exactly the model's columns and validate it eagerly."""
    return validate(rows_frame(rows, polars_schema(model), strict=False), model)


def rows_frame(rows: list[dict[str, Any]] | dict[str, list[Any]],
               schema: Mapping[str, pl.DataType], *, strict: bool = True) -> pl.DataFrame:
    """``pl.DataFrame(rows, schema=schema)`` (dict rows or a dict of columns), with every
    lone surrogate shown as U+FFFD: a lone surrogate escape in a JSON document (``json.loads``
    keeps it, as the runner does) or a run folder name that is not UTF-8 cannot enter Arrow.
    Verdicts read the documents and paths themselves.

    >>> rows_frame([{"run_dir": "run-" + chr(0xDCFF)}], {"run_dir": pl.String}).item()
    'run-�'
    """
    try:
        return _rows_frame(rows, schema, strict)
    except UnicodeEncodeError:
        return _rows_frame(_without_lone_surrogates(rows), schema, strict)


_STRING_LIST = pl.List(pl.String)
_LIST_TYPES = frozenset({list})
_STR_TYPES = frozenset({str})


def _rows_frame(rows: list[dict[str, Any]] | dict[str, list[Any]],
                schema: Mapping[str, pl.DataType], strict: bool) -> pl.DataFrame:
    """``pl.DataFrame(rows, schema=schema, strict=strict)``; dict rows' string-list columns
    whose every value is a list of strings (audit reasons and warnings, ...) as one Arrow
    list array (:func:`string_lists`): polars builds a list column from Python lists at
    ~5 µs per row, 20 times the rest of a row (same frame: ``tests/test_derived_columns.py``)."""
    lists = [n for n, dt in schema.items() if dt == _STRING_LIST]
    by_column = isinstance(rows, dict)
    if not lists or not rows:
        return pl.DataFrame(rows, schema=schema, strict=strict)
    built = {}
    for name in lists:
        if by_column and name not in rows:
            continue
        values = rows[name] if by_column else list(map(dict.get, rows, itertools.repeat(name)))
        if set(map(type, values)) <= _LIST_TYPES and set(
                map(type, itertools.chain.from_iterable(values))) <= _STR_TYPES:
            built[name] = string_lists(name, values)
    if not built:
        return pl.DataFrame(rows, schema=schema, strict=strict)
    rest = {n: dt for n, dt in schema.items() if n not in built}
    df = pl.DataFrame({n: v for n, v in rows.items() if n not in built} if by_column else rows,
                      schema=rest, strict=strict)
    return df.with_columns(**built).select(list(schema))


def string_lists(name: str, values: list[list[str]]) -> pl.Series:
    """A ``List(String)`` Series of lists of strings, built as one Arrow list array from
    polars' buffers (a polars Series of Python lists costs 20 times more, and ``pa.array``
    of Python objects imports pandas).

    >>> string_lists("l", [["a", "b"], [], ["c"]]).to_list()
    [['a', 'b'], [], ['c']]
    """
    import pyarrow as pa_

    offsets = pl.Series(list(itertools.accumulate(map(len, values), initial=0)),
                        dtype=pl.Int64)
    flat = pl.Series(list(itertools.chain.from_iterable(values)), dtype=pl.String)
    return pl.Series(name, pa_.LargeListArray.from_arrays(offsets.to_arrow(), flat.to_arrow()))


def validate(df: pl.DataFrame, model: type[pa.DataFrameModel] | str) -> pl.DataFrame:
    """``df`` validated by ``model`` (a pandera model or its class name): a frame its check
    plan passes (:func:`rivumi_analysis.checks.surely_valid`, no pandera) as it is, any other
    by pandera, whose result or error (as a
    :class:`~rivumi_analysis.errors.SchemaValidationError`) is the answer."""
    from ..checks import surely_valid

    name = model if isinstance(model, str) else model.__name__
    if (isinstance(model, str) or _model(name) is model) and surely_valid(name, df):
        return df
    model = _model(model)
    import pandera.polars as pa

    try:
        return model.validate(df, lazy=True)
    except (pa.errors.SchemaErrors, pa.errors.SchemaError) as exc:
        raise SchemaValidationError(
            f"{model.__name__} validation failed: {str(exc)[:2000]}",
            hint="this is a toolkit bug if the frame came from a loader; please report it",
        ) from exc


def validate_table(df: pl.DataFrame, model: str, table: str) -> pl.DataFrame:
    """``df`` checked by the plan of the model named ``model`` (no pandera for a passing
    frame), else by the model's own non-lazy ``validate``, whose error becomes a
    ``SchemaValidationError`` ``"<table> failed <model>: ..."`` (the replay tables' check)."""
    from ..checks import surely_valid

    if surely_valid(model, df):
        return df
    try:
        return _model(model).validate(df)
    except Exception as exc:  # pandera raises its own error types
        raise SchemaValidationError(f"{table} failed {model}: {exc}") from exc


def load(source: Source | None, *, strict: bool, max_depth: int,
         builder: Callable[[Iterable[RunData]], pl.DataFrame],
         columnar: bool = False) -> pl.DataFrame:
    """The one loader flow: discover, read, build the table, check strictness.

    Runs are read one at a time and dropped once their rows are built, so memory follows
    the table, not the parsed fleet; the quarantined runs are kept for a strict error.
    ``columnar``: the builder takes runs read for columns (``RunData.fast``).
    """
    quarantined: list[RunData] = []

    def runs() -> Iterator[RunData]:
        for run in stream_runs(source, max_depth=max_depth, columnar=columnar):
            if run.quarantined:
                quarantined.append(run)
            yield run

    with gc_paused():
        table = builder(runs())
    check_strict(quarantined, strict)
    return table


RowsBuilder = Callable[[Iterable[RunData]], list[dict[str, Any]]]
"""A table's rows (dicts of plain values) of some runs read in full, in run order (no
polars: it runs in forked workers). A module-level function: it travels to worker
processes."""
Columns = dict[str, list[Any]]


def row_columns(rows: list[dict[str, Any]], names: Iterable[str]) -> Columns:
    """``rows`` as the columns ``names`` (None where a row has no such key, as a frame of the
    rows has): unpickled in a third of the time of the same rows as dicts, and a frame built
    in half the time (``messages_df``'s rows of 2,000 runs: 0.27 -> 0.10 s, 0.56 -> 0.23 s).

    >>> row_columns([{"a": 1, "b": 2}, {"a": 3}], ("a", "b"))
    {'a': [1, 3], 'b': [2, None]}
    """
    return {name: list(map(dict.get, rows, itertools.repeat(name))) for name in names}


def load_rows(source: Source | None, *, strict: bool, max_depth: int, rows: RowsBuilder,
              model: str, table: Callable[[Columns], pl.DataFrame] | None = None,
              jobs: int | None = None,
              skipped_rows: Callable[[list[Any]], list[dict[str, Any]]] | None = None,
              ) -> pl.DataFrame:
    """The loader flow of a table built from runs read in full (``read_run``'s default
    reading): the runs' ``rows``, in worker processes for a large fleet (:func:`map_chunks`),
    handed back as the columns of ``model``; then ``table`` (default: :func:`frame` of
    ``model``) builds and validates the frame of every run's columns in run order, once, here.

    ``skipped_rows``: rows for the paths discovery skipped (of a loaded fleet: its
    ``skipped``), added before the table is built.

    A strict load's workers hand back the quarantine rows of their runs, not the runs. Loaded
    runs (a fleet) take :func:`load`. Runs on object storage are read in this process
    (``read.executor.map_chunks``: a worker would not have the filesystems registered here).
    """
    names = tuple(polars_schema(model))
    table = table or functools.partial(frame, model=model)
    if is_loaded(source):
        extra = skipped_rows(getattr(source, "skipped", None) or []) if skipped_rows else []
        return load(source, strict=strict, max_depth=max_depth,
                    builder=lambda runs: table(row_columns(rows(runs) + extra, names)))
    from ..read.discovery import discover

    found = discover(source, max_depth=max_depth)
    locations = found.runs
    columns: Columns = {name: [] for name in names}
    bad: list[dict[str, Any]] = []
    work = functools.partial(_rows_chunk, rows=rows, names=names, keep_quarantined=strict)
    # (the collector paused here too: unpickling the workers' values builds as many objects
    # as building them did)
    with gc_paused():
        for part, quarantine in map_chunks(work, locations, jobs):
            for name, values in part.items():
                columns[name] += values
            bad += quarantine
        if skipped_rows is not None:  # rows for what discovery found but could not read
            for name, values in row_columns(skipped_rows(found.skipped), names).items():
                columns[name] += values
        out = table(columns)
    if bad:  # (only kept by a strict load)
        raise QuarantineError(frame(bad, "QuarantineSchema"))
    return out


def _rows_chunk(locations: list[Any], *, rows: RowsBuilder, names: tuple[str, ...],
                keep_quarantined: bool) -> tuple[Columns, list[dict[str, Any]]]:
    """The columns ``names`` of the ``rows`` of some runs read one at a time and, when
    ``keep_quarantined`` (a strict load), the quarantine rows of their quarantined lines:
    plain values, cheap to pickle (a run read in full is not)."""
    from ..read.snapshot import iter_runs

    bad: list[dict[str, Any]] = []

    def runs() -> Iterator[RunData]:
        for run in iter_runs(locations):
            if keep_quarantined and run.quarantined:
                bad.extend(quarantine_rows((run,)))
            yield run

    with gc_paused():
        return row_columns(rows(runs()), names), bad


Wants = tuple[frozenset[str], tuple[str, ...]]
"""Event types a table reads: exact names and name prefixes."""


# --- derived tables as columns --------------------------------------------------------------

def is_clean(run: RunData) -> bool:
    """Whether ``run`` is a clean log handed over as columns: ``fast`` is the
    ``cleanlog.CleanLog`` of a log the clean-log test accepted, so the exact reading would
    give one warning-free event per line, in the same order, with the same ``data`` (every
    value re-encodes to the line's exact bytes)."""
    return run.fast is not None


def wanted_lines(fast: Any, wants: Wants) -> list[int]:
    """The 0-based lines of a clean log's events (``fast``: its ``cleanlog.CleanLog``) whose
    type ``wants`` names or prefixes, in log order: a column builder walks only these
    (C-level passes, no Python step per event).

    >>> from rivumi_analysis.read.cleanlog import clean_log
    >>> line = (b'{"created_at":"2026-08-20T21:02:47Z","data":{},"event_id":"e",'
    ...         b'"event_type":"%s","run_id":"r","sequence":0,"task_id":"t"}\\n')
    >>> log = clean_log(b"".join(line % t for t in (b"tool.x", b"model.requested", b"run.created")))
    >>> wanted_lines(log, (frozenset({"model.requested"}), ("tool.",)))
    [0, 1]
    """
    types = fast.event_types
    keep = _wanted_types(wants, frozenset(types))
    return list(itertools.compress(range(len(types)), map(keep.__contains__, types)))


@functools.lru_cache(maxsize=4096)
def _wanted_types(wants: Wants, types: frozenset[str]) -> frozenset[str]:
    """The ``types`` that ``wants`` names or prefixes (logs share a handful of type sets)."""
    names, prefixes = wants
    return frozenset(t for t in types if t in names or t.startswith(prefixes))


@dataclasses.dataclass(frozen=True)
class Builders:
    """How a derived table is built from runs: ``fast_rows`` for the runs ``clean`` accepts
    (the table's column builder over the clean log: positional rows in ``names`` order,
    timestamps as the log's ``created_at`` text), ``exact_rows`` for every other run (the
    table's row builder over ``RunData.events``: the oracle). ``times``, ``lists`` and
    ``seconds`` (column, start, end) as for :func:`columns_frame`. Plain functions only: the
    builders travel to worker processes."""

    fast_rows: Callable[[list[RunData]], list[Any]]
    exact_rows: Callable[[list[RunData]], list[dict[str, Any]]]
    names: tuple[str, ...]
    times: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()
    seconds: tuple[tuple[str, str, str], ...] = ()
    clean: Callable[[RunData], bool] = is_clean


Parts = list[tuple[bool, list[Any]]]
"""Rows of runs in order, in groups: (built by the column builder, rows)."""


def load_columnar(source: Source | None, *, strict: bool, max_depth: int,
                  model: type[pa.DataFrameModel], builders: Builders,
                  jobs: int | None = None) -> pl.DataFrame:
    """The loader flow of a table derived from some event types, on the columnar engine.

    Runs are read for columns (``read_run(columnar=True)``), in worker processes for a large
    fleet. A clean log (:func:`checked_views`) is built by the table's column builder, any
    other log is read exactly and built by its row builder (:func:`derived_parts`). The workers hand back plain rows; the parent builds and
    validates the frame. Loaded runs (a fleet) take :func:`load` and the row builder.
    """
    if is_loaded(source):
        return load(source, strict=strict, max_depth=max_depth,
                    builder=lambda runs: frame(builders.exact_rows(runs), model))
    from ..read.discovery import discover

    locations = discover(source, max_depth=max_depth).runs
    parts: Parts = []
    quarantined: list[RunData] = []
    for part, bad in map_chunks(functools.partial(_parts_chunk, builders=builders,
                                                  keep_quarantined=strict), locations, jobs):
        parts.extend(part)
        quarantined.extend(bad)
    table = parts_frame(parts, builders, model)
    check_strict(quarantined, strict)
    return table


def map_chunks(work: Callable[[list[Any]], Any], locations: list[Any],
               jobs: int | None = None) -> list[Any]:
    """``work`` over chunks of ``locations`` in run order (``read.executor.map_chunks``:
    worker processes for a large fleet on local disk, else this process)."""
    from ..read.executor import map_chunks as run

    return list(run(work, locations, jobs=jobs))


def _parts_chunk(locations: list[Any], *, builders: Builders,
                 keep_quarantined: bool = True) -> tuple[Parts, list[RunData]]:
    """:func:`derived_parts` of some runs (read for columns) and, when ``keep_quarantined``
    (a strict load, the only one that reads them), the runs with quarantined lines: a run
    read whole is costly to send back from a worker."""
    from ..read.snapshot import iter_runs

    with gc_paused():
        runs = list(iter_runs(locations, columnar=True))
        quarantined = [run for run in runs if run.quarantined] if keep_quarantined else []
        return derived_parts(checked_views(runs, builders.clean), builders), quarantined


def checked_views(runs: list[RunData], clean: Callable[[RunData], bool] = is_clean,
                  ) -> list[RunData]:
    """``runs`` (read for columns) as the column builders take them: a clean log keeps its
    ``cleanlog.CleanLog`` when ``clean`` accepts the run; any other run read clean is its
    complete snapshot (:func:`rivumi_analysis.read.snapshot.exact_run`)."""
    from ..read.snapshot import exact_run

    return [r if r.fast is None or clean(r) else exact_run(r) for r in runs]


def derived_parts(runs: Iterable[RunData], builders: Builders) -> Parts:
    """The rows of ``runs`` (no polars: safe in a forked worker), each run by the builder that
    fits it, in run order."""
    return [(fast, (builders.fast_rows if fast else builders.exact_rows)(list(group)))
            for fast, group in itertools.groupby(runs, key=builders.clean)]


def derived_frame(runs: Iterable[RunData], builders: Builders,
                  model: type[pa.DataFrameModel]) -> pl.DataFrame:
    """The derived table of ``runs``, validated (:func:`derived_parts`, :func:`parts_frame`)."""
    return parts_frame(derived_parts(runs, builders), builders, model)


def parts_frame(parts: Parts, builders: Builders,
                model: type[pa.DataFrameModel]) -> pl.DataFrame:
    """The validated frame of :func:`derived_parts`: one frame of every column-built row and
    one of every row-built row, cut back into run order (zero-copy slices; a frame per group
    costs a fixed price per group in a fleet whose clean and other runs alternate)."""
    schema = polars_schema(model)
    fast = [row for is_fast, rows in parts if is_fast for row in rows]
    exact = [row for is_fast, rows in parts if not is_fast for row in rows]
    frames = {}
    if fast or not exact:
        frames[True] = columns_frame(fast, builders.names, schema, times=builders.times,
                                     lists=builders.lists,
                                     seconds={c: (a, b) for c, a, b in builders.seconds})
    if exact:
        frames[False] = rows_frame(exact, schema, strict=False)
    if len(frames) == 1:
        return validate(next(iter(frames.values())), model)
    pieces, start = [], {True: 0, False: 0}
    for is_fast, rows in parts:
        if rows:
            pieces.append(frames[is_fast].slice(start[is_fast], len(rows)))
            start[is_fast] += len(rows)
    return validate(pl.concat(pieces, how="vertical", rechunk=False), model)


def columns_frame(rows: list[Any], names: tuple[str, ...], schema: Mapping[str, pl.DataType], *,
                  times: tuple[str, ...] = (), lists: tuple[str, ...] = (),
                  seconds: Mapping[str, tuple[str, str]] | None = None) -> pl.DataFrame:
    """The frame of positional ``rows`` (each a tuple or list in ``names`` order), columns in
    ``schema`` order: ``times`` hold the runner's ``created_at`` text (parsed as the exact
    reading's ``datetime.fromisoformat``), ``lists`` lists of strings (built as one Arrow list
    array: a polars Series of Python lists costs 20 times more), ``seconds`` maps a column to
    the two ``times`` it is the difference of (``(b - a).total_seconds()``, exactly). Every
    lone surrogate is shown as U+FFFD, as :func:`rows_frame` does.

    >>> df = columns_frame([("r", "2026-08-20T21:02:47.5Z", "2026-08-20T21:02:48Z", None, ["a"])],
    ...     ("run_dir", "a", "b", "s", "l"), {"run_dir": pl.String, "a": pl.Datetime("us", "UTC"),
    ...     "b": pl.Datetime("us", "UTC"), "s": pl.Float64, "l": pl.List(pl.String)},
    ...     times=("a", "b"), lists=("l",), seconds={"s": ("a", "b")})
    >>> df.row(0)[3:]
    (0.5, ['a'])
    """
    columns = ({n: list(c) for n, c in zip(names, zip(*rows, strict=True), strict=True)}
               if rows else {n: [] for n in names})
    try:
        return _columns_frame(columns, schema, times, lists, seconds or {})
    except UnicodeEncodeError:
        return _columns_frame(_without_lone_surrogates(columns), schema, times, lists,
                              seconds or {})


def _columns_frame(columns: dict[str, list[Any]], schema: Mapping[str, pl.DataType],
                   times: tuple[str, ...], lists: tuple[str, ...],
                   seconds: Mapping[str, tuple[str, str]]) -> pl.DataFrame:
    import pyarrow as pa_

    out: dict[str, pl.Series] = {}
    for name in times:
        # Arrow's cast of polars' buffers: pa.array over Python objects imports pandas
        # (~0.2 CPU-s in a fresh process, e.g. a spawned store worker)
        out[name] = pl.Series(name, pl.Series(name, columns[name], dtype=pl.String).to_arrow()
                              .cast(pa_.timestamp("us", "UTC")))
    for name, (a, b) in seconds.items():
        # timedelta.total_seconds() is the int microseconds / 10**6 (correctly rounded)
        micros = (out[b] - out[a]).dt.total_microseconds().to_list()
        out[name] = pl.Series(name, [None if us is None else us / 1_000_000 for us in micros],
                              dtype=pl.Float64)
    for name in lists:
        out[name] = string_lists(name, columns[name])
    return pl.DataFrame([out[name] if name in out else
                         pl.Series(name, columns[name], dtype=dtype, strict=False)
                         for name, dtype in schema.items()]).cast(dict(schema))


def check_strict(runs: list[RunData], strict: bool) -> None:
    """Raise :class:`QuarantineError` when ``strict`` and any line was quarantined."""
    if strict and any(run.quarantined for run in runs):
        raise QuarantineError(quarantine_frame(runs))


# --- helpers ---------------------------------------------------------------------------------

def _int(v: Any) -> int | None:
    return v if type(v) is int else None


def _float(v: Any) -> float | None:
    if type(v) is bool:
        return None
    return float(v) if isinstance(v, (int, float)) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def parse_ts(v: Any) -> datetime | None:
    from ..read.decode import parse_created_at

    return parse_created_at(v)[0] if isinstance(v, str) else None


def _seconds(a: datetime | None, b: datetime | None) -> float | None:
    if a is None or b is None:
        return None
    return (b - a).total_seconds()


def usage_columns(u: Any) -> dict[str, int | None]:
    u = u if isinstance(u, dict) else {}
    out = {k: _int(u.get(k)) for k in (
        "input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens",
        "provider_total_tokens")}
    tt = _int(u.get("total_tokens"))
    if tt is None and u:
        ptt = out["provider_total_tokens"]
        tt = ptt if ptt is not None else (out["input_tokens"] or 0) + (out["output_tokens"] or 0)
    out["total_tokens"] = tt
    return out


_NO_USAGE = (None,) * 6


def usage_values(u: Any) -> tuple[int | None, ...]:
    """:func:`usage_columns` as a tuple in its key order (input, output, cached input,
    reasoning, provider total, total tokens): the column builders' form, no dict per call.

    >>> usage_values({"input_tokens": 3, "output_tokens": True}), usage_values({})
    ((3, None, None, None, None, 3), (None, None, None, None, None, None))
    """
    if not isinstance(u, dict) or not u:
        return _NO_USAGE
    get = u.get
    inp, out, cached, reasoning, ptt, tt = (
        get("input_tokens"), get("output_tokens"), get("cached_input_tokens"),
        get("reasoning_tokens"), get("provider_total_tokens"), get("total_tokens"))
    inp = inp if type(inp) is int else None
    out = out if type(out) is int else None
    cached = cached if type(cached) is int else None
    reasoning = reasoning if type(reasoning) is int else None
    ptt = ptt if type(ptt) is int else None
    if type(tt) is not int:
        tt = ptt if ptt is not None else (inp or 0) + (out or 0)
    return inp, out, cached, reasoning, ptt, tt


# --- quarantine (the rows every strict loader raises) --------------------------------------------------------------------------

PREVIEW_CHARS = 80
INSTRUCTION_CHARS = 160
_TRUNCATED = re.compile(r"\n\.\.\. output truncated \((\d+) bytes omitted\) \.\.\.\n")


def raw_value(data_json: str | None, key: str, value: Any) -> str | None:
    """The exact JSON text of ``data[key]`` as the line holds it (``None`` when absent).

    >>> raw_value('{"arguments":{"b":1.0,"a":[1e-05]},"x":1}', "arguments", None)
    '{"b":1.0,"a":[1e-05]}'
    """
    if data_json is not None:
        import msgspec

        try:
            raw = msgspec.json.decode(data_json, type=dict[str, msgspec.Raw]).get(key)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raw = None
        if raw is not None:
            return bytes(raw).decode("utf-8", "surrogatepass")
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def preview(text: str | None, n: int = PREVIEW_CHARS) -> str | None:
    """One line of at most ``n`` characters (whitespace runs shown as one space, "…" when cut).

    >>> preview("a   b", 80), preview("x" * 90, 5)
    ('a b', 'xxxx…')
    """
    if text is None:
        return None
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[:n - 1] + "…"


def clipped_size(text: str | None) -> tuple[int | None, bool]:
    """UTF-8 size of a runner-clipped text before clipping, and whether it was clipped
    (``bounded_text`` keeps head and tail and says how many bytes it omitted, §4.4)."""
    if text is None:
        return None, False
    raw = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    m = _TRUNCATED.search(text)
    if m is None:
        return raw, False
    return raw - len(m.group(0).encode()) + int(m.group(1)), True


def instruction_summary(text: Any) -> str | None:
    """The instruction's first non-blank line, at most 160 characters ("…" when cut)."""
    if not isinstance(text, str):
        return None
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return preview(first, INSTRUCTION_CHARS) if first else None


def quarantine_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    """The quarantine table of ``runs``, validated (:func:`quarantine_rows`)."""
    return frame(quarantine_rows(runs), "QuarantineSchema")


def quarantine_rows(runs: Iterable[RunData]) -> list[dict[str, Any]]:
    """One row per quarantined line of ``runs``, in run and line order (no polars: safe in a
    forked worker)."""
    rows = []
    for run in runs:
        path = f"{run.run_dir}/events.jsonl"
        for ln in run.lines:
            if ln.status != "quarantined":
                continue
            rows.append({
                "run_dir": run.run_dir, "run_id": run.run_id, "file": path,
                "line_no": ln.line_no, "byte_offset": ln.byte_offset,
                "byte_length": ln.byte_length, "reason": ln.reason,
                "message": f"{path}:{ln.line_no}:{ln.byte_offset}: {ln.message}",
                "raw": ln.raw[:RAW_KEEP_BYTES], "raw_truncated": len(ln.raw) > RAW_KEEP_BYTES,
                "sha256": hashlib.sha256(ln.raw).hexdigest(),
            })
    return rows
