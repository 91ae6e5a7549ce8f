"""``search``: a regular expression over event text, tool calls (arguments, errors), transcript
messages (model replies, tool results, errors) and run instructions.

>>> hits = search("tests/fixtures/example", r"def add")
>>> sorted(set(hits["table"]))[:1], hits.columns[:4]
(['events'], ['run_dir', 'run_id', 'table', 'sequence'])
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from .read.discovery import DEFAULT_MAX_DEPTH

__all__ = ["search", "SEARCH_TABLES"]

# table -> the text columns searched (their order is the order hits are reported in)
SEARCH_TABLES: dict[str, tuple[str, ...]] = {
    "events": ("text", "data"),
    "tool_calls": ("arguments", "error"),
    "messages": ("content", "tool_calls_json", "error"),
    "runs": ("instruction_summary",),
}
_SNIPPET = 60

SCHEMA = {"run_dir": pl.Utf8, "run_id": pl.Utf8, "table": pl.Utf8, "sequence": pl.Int64,
          "line_no": pl.Int64, "column": pl.Utf8, "snippet": pl.Utf8}


def _snippet(text: str, rx: re.Pattern[str]) -> str:
    m = rx.search(text)
    if m is None:  # polars and Python regex dialects can differ on exotic patterns
        return text[:2 * _SNIPPET]
    a, b = max(0, m.start() - _SNIPPET), min(len(text), m.end() + _SNIPPET)
    out = text[a:b].replace("\n", "⏎")
    return ("…" if a else "") + out + ("…" if b < len(text) else "")


def _rust_accepts(pattern: str) -> bool:
    """Whether polars' Rust ``regex`` engine compiles ``pattern`` (no look-around etc.)."""
    try:
        pl.Series([""], dtype=pl.Utf8).str.contains(pattern)
    except pl.exceptions.ComputeError:
        return False
    return True


def _matcher(col: str, pattern: str, rx: re.Pattern[str], rust: bool) -> pl.Expr:
    if rust:
        return pl.col(col).str.contains(pattern)
    # Python ``re`` row by row: slower, but look-around and backreferences work
    return pl.col(col).map_elements(lambda t: rx.search(t) is not None, return_dtype=pl.Boolean)


def search(source: Any, pattern: str, *, tables: tuple[str, ...] | list[str] | None = None,
           ignore_case: bool = False, max_depth: int = DEFAULT_MAX_DEPTH,
           cache: bool | None = None, store_dir: Any = None) -> pl.DataFrame:
    """Every place ``pattern`` (a regular expression) matches, one row per (row, column).

    Args:
        source: run directories, folders of runs, or a fleet from ``load_fleet``.
        pattern: a regular expression in Python ``re`` syntax. Patterns polars' Rust
            engine accepts run there (fast, vectorised; for these both dialects agree on
            ordinary patterns); the others, such as look-ahead/look-behind (``(?=…)``,
            ``(?<!…)``) and backreferences (``(a)\\1``, ``(?P=name)``), fall back to Python
            ``re`` row by row, which is slower on a large fleet.
        tables: which of ``events`` (text and exact data JSON, which includes tool
            arguments and previews), ``tool_calls`` (exact argument JSON and the error
            text), ``messages`` (transcript content: instructions, model replies, tool
            results; the tool calls asked for; observation errors) and ``runs`` (the task's
            instruction, ``instruction_summary``) to search; default all four.
        ignore_case: match case-insensitively.
        max_depth: discovery depth limit.
        cache: read the tables through the Parquet store (default: as the ``*_df`` loaders;
            ``False``: in memory; a fleet from ``load_fleet`` is always searched in memory).
        store_dir: the store folder (default: under the user cache dir, keyed by source).

    Returns:
        A DataFrame with ``run_dir``, ``run_id``, ``table``, ``sequence`` (of the event; for
        tool calls the request, for session.json messages and runs null), ``line_no`` (for
        tool calls the line that opened the call; runs: null), ``column`` and ``snippet``
        (the match with up to 60 characters around it).

    Raises:
        ValueError: an unknown table name or an invalid pattern (neither engine compiles
            it).

    >>> hits = search("tests/fixtures/example", r"(?<=def )add\\b", tables=["messages"])
    >>> hits.height, "def add(" in hits["snippet"][0]
    (2, True)
    """
    names = tuple(tables) if tables else tuple(SEARCH_TABLES)
    unknown = sorted(set(names) - set(SEARCH_TABLES))
    if unknown:
        raise ValueError(f"unknown table(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(SEARCH_TABLES)}")
    flags = "(?i)" if ignore_case else ""
    try:
        rx = re.compile(pattern, re.I if ignore_case else 0)
    except re.error as exc:
        raise ValueError(f"invalid pattern {pattern!r}: {exc}") from None
    rust = _rust_accepts(flags + pattern)
    from .read.snapshot import Fleet, load_fleet

    frames = None
    if not isinstance(source, Fleet):
        from .store.loaders import load_tables

        frames = load_tables(names, source, max_depth=max_depth, cache=cache,
                             store_dir=store_dir)
    if frames is None:
        fleet = source if isinstance(source, Fleet) else load_fleet(source, max_depth=max_depth)
        frames = {name: _table(name, fleet) for name in names}
    parts = []
    for name in names:
        df = frames[name]
        for col in SEARCH_TABLES[name]:
            if col not in df.columns:
                continue
            hit = df.filter(_matcher(col, flags + pattern, rx, rust))
            if hit.is_empty():
                continue
            parts.append(hit.select(
                "run_dir", "run_id", pl.lit(name).alias("table"),
                _seq_expr(name).alias("sequence"), _line_expr(name).alias("line_no"),
                pl.lit(col).alias("column"),
                pl.col(col).map_elements(lambda t: _snippet(t, rx), return_dtype=pl.Utf8)
                .alias("snippet")))
    if not parts:
        return pl.DataFrame(schema=SCHEMA)
    return pl.concat(parts).cast(SCHEMA).sort("run_dir", "table", "sequence", nulls_last=True,
                                              maintain_order=True)


def _table(name: str, fleet: Any) -> pl.DataFrame:
    if name == "events":
        from .tables.events import events_df

        return events_df(fleet)
    if name == "tool_calls":
        from .tables.tool_calls import tool_calls_df

        return tool_calls_df(fleet)
    if name == "runs":
        from .tables.runs import runs_df

        return runs_df(fleet)
    from .tables.messages import messages_df

    return messages_df(fleet)


def _seq_expr(name: str) -> pl.Expr:
    if name == "runs":
        return pl.lit(None, dtype=pl.Int64)
    return pl.col("requested_sequence") if name == "tool_calls" else pl.col("sequence")


def _line_expr(name: str) -> pl.Expr:
    return pl.lit(None, dtype=pl.Int64) if name == "runs" else pl.col("line_no")
