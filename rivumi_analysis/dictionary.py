"""The data dictionary: what every column of every table means, read from the pandera models.

The descriptions, units and sources live on the models' fields (:mod:`rivumi_analysis.schemas`),
what a row is and its key in the table registry (:data:`rivumi_analysis.tables.registry.TABLES`);
this module only collects and renders them. ``rivumi-analysis schema TABLE`` prints a table's
dictionary; ``python -m rivumi_analysis.dictionary --write`` regenerates the README's table
section and ``docs/data-dictionary.md`` (a test keeps both equal to the code).

>>> describe("events").filter(pl.col("column") == "line_no")["unit"].item()
'line number (1-based)'
>>> TABLES["tool_calls"].key
('run_dir', 'line_no')
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import polars as pl

from .errors import FACT_DEFINITIONS
from .tables.registry import TABLES

__all__ = ["TABLES", "describe", "dictionary", "render_text", "render_markdown"]


def _dtype(col: Any) -> str:
    return str(col.dtype)


_OPS = {"greater_than_or_equal_to": "≥", "less_than_or_equal_to": "≤", "equal_to": "=",
        "greater_than": ">", "less_than": "<", "str_matches": "matches"}


def _checks(col: Any) -> list[str]:
    out = []
    for chk in col.checks:
        stats = {k: v for k, v in (chk.statistics or {}).items() if v is not None}
        name = chk.name or "check"
        if name == "str_length":
            out.append("length " + ", ".join(f"{'≥' if k == 'min_value' else '≤'} {v}"
                                             for k, v in stats.items()))
        elif name == "isin":
            out.append("one of " + ", ".join(map(str, stats.get("allowed_values", []))))
        elif len(stats) == 1:
            out.append(f"{_OPS.get(name, name)} {next(iter(stats.values()))}")
        else:
            out.append(f"{name} {stats}" if stats else name)
    return out


def dictionary(table: str) -> dict[str, Any]:
    """The dictionary of one table as a JSON-ready dict (what ``schema TABLE --format json``
    prints).

    Raises:
        KeyError: an unknown table name (see :data:`TABLES`).
    """
    t = TABLES[table]
    schema = t.model.to_schema()
    cols = []
    for name, col in schema.columns.items():
        meta = col.metadata or {}
        cols.append({
            "column": name, "dtype": _dtype(col), "nullable": bool(col.nullable),
            "unique": bool(col.unique), "unit": meta.get("unit"), "source": meta.get("source"),
            "description": col.description, "checks": _checks(col),
        })
    return {"table": t.name, "loader": t.loader, "model": t.model.__name__, "row": t.row,
            "key": list(t.key), "columns": cols}


def describe(table: str) -> pl.DataFrame:
    """The dictionary of one table as a polars DataFrame (one row per column).

    >>> describe("usage").columns
    ['column', 'dtype', 'nullable', 'unit', 'source', 'description']
    """
    d = dictionary(table)
    return pl.DataFrame([{k: c[k] for k in ("column", "dtype", "nullable", "unit", "source",
                                            "description")} for c in d["columns"]],
                        schema={"column": pl.Utf8, "dtype": pl.Utf8, "nullable": pl.Boolean,
                                "unit": pl.Utf8, "source": pl.Utf8, "description": pl.Utf8})


def _wrap(text: str, width: int, indent: str) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False) or [indent]


def render_text(table: str, width: int = 100) -> str:
    """A plain-text dictionary for a terminal (what ``rivumi-analysis schema TABLE`` prints)."""
    d = dictionary(table)
    relay = TABLES[table].source == "relayflowd"
    head = [f"{d['loader']}: one row per {d['row']}",
            f"load: rivumi_analysis{'.relay' if relay else ''}.{d['loader']}(PATH)   "
            f"model: rivumi_analysis.schemas.{d['model']}",
            f"key: ({', '.join(d['key'])}), unique per row"
            + ("" if relay else "; join any table to runs_df on run_dir"),
            "each column: name (type, nullable; unit), what it means, source (the file and "
            "field, or how it is derived), values (checks every row passes)",
            ("section numbers refer to docs/relayflowd-journal.md" if relay else
             "section numbers (§N) refer to docs/run-format.md")
            + "; reason and warning codes: rivumi-analysis codes"]
    lines = [w for h in head for w in _wrap(h, width, "")] + [""]
    for c in d["columns"]:
        dtype = c["dtype"].replace("Datetime(time_unit='us', time_zone='UTC')", "Datetime(µs, UTC)")
        facts = [dtype + (", nullable" if c["nullable"] else "")
                 + (", unique" if c["unique"] else "")]
        if c["unit"]:
            facts.append(f"unit: {c['unit']}")
        lines.append(f"{c['column']}  ({'; '.join(facts)})")
        lines += _wrap(c["description"], width, "    ")
        lines += _wrap(f"source: {c['source']}", width, "    ")
        if c["checks"]:
            lines += _wrap("values: " + "; ".join(c["checks"]), width, "    ")
        lines.append("")
    if table == "runs":
        lines += _wrap(_FACTS_HEAD, width, "") + [""]
        for fact, text in FACT_DEFINITIONS.items():
            lines.append(fact)
            lines += _wrap(text, width, "    ")
        lines.append("")
    return "\n".join(lines)


_FACTS_HEAD = ("Run facts (one definition each, rivumi_analysis.tables.facts): read from "
               "events.jsonl first; session.json, result.json and checkpoint.json cross-check "
               "them (a disagreement is the warning fact_disagrees and a drift_df row "
               "<fact>@<file>); each *_source column says where the value came from.")


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(table: str) -> str:
    """One table's dictionary as a Markdown section (used for docs/data-dictionary.md)."""
    d = dictionary(table)
    out = [f"## `{d['loader']}`", "",
           f"One row per {d['row']}. Key: ({', '.join(f'`{k}`' for k in d['key'])}). "
           f"Model: `rivumi_analysis.schemas.{d['model']}`.", "",
           "| column | type | unit | meaning | source |", "|---|---|---|---|---|"]
    for c in d["columns"]:
        typ = c["dtype"] + ("?" if c["nullable"] else "")
        out.append(f"| `{c['column']}` | {_md(typ)} | {_md(c['unit'] or '')} | "
                   f"{_md(c['description'])} | {_md(c['source'])} |")
    if table == "runs":
        out += ["", _FACTS_HEAD, "", "| fact | definition |", "|---|---|"]
        out += [f"| `{f}` | {_md(t)} |" for f, t in FACT_DEFINITIONS.items()]
    return "\n".join(out) + "\n"


README_BEGIN = "<!-- tables: generated by `python -m rivumi_analysis.dictionary --write` -->"
README_END = "<!-- end of generated tables -->"


def readme_section() -> str:
    """The README's table overview (between :data:`README_BEGIN` and :data:`README_END`)."""
    rows = ["| table | one row per | key | columns |", "|---|---|---|---|"]
    for t in TABLES.values():
        cols = ", ".join(f"`{c}`" for c in t.model.to_schema().columns)
        rows.append(f"| `{t.loader}` | {_md(t.row)} | {', '.join(f'`{k}`' for k in t.key)} | "
                    f"{cols} |")
    return "\n".join([README_BEGIN, *rows, "", "What every column means, its unit and where it "
                      "comes from: `rivumi-analysis schema TABLE` (or `--format json`), "
                      "`rivumi_analysis.dictionary.describe(\"TABLE\")`, and "
                      "[docs/data-dictionary.md](docs/data-dictionary.md).", README_END])


def dictionary_document() -> str:
    """The whole of docs/data-dictionary.md."""
    head = ("# Data dictionary\n\n"
            "Generated from the pandera models in `rivumi_analysis/schemas.py` by\n"
            "`python -m rivumi_analysis.dictionary --write`; do not edit by hand (a test keeps\n"
            "it equal to the code). `type?` means nullable. Section numbers (§N) refer to\n"
            "[run-format.md](run-format.md).\n")
    return head + "".join("\n" + render_markdown(name) for name in TABLES)


def replace_readme_section(readme: str) -> str:
    """``readme`` with its generated section replaced by :func:`readme_section`."""
    start, end = readme.index(README_BEGIN), readme.index(README_END) + len(README_END)
    return readme[:start] + readme_section() + readme[end:]


def main(argv: list[str] | None = None) -> int:
    """``python -m rivumi_analysis.dictionary [--write | --check] [--root DIR]``."""
    p = argparse.ArgumentParser(prog="python -m rivumi_analysis.dictionary")
    p.add_argument("--root", default=".", help="repository root (README.md, docs/)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the generated parts")
    mode.add_argument("--check", action="store_true", help="exit 1 if they are stale")
    args = p.parse_args(argv)
    root = Path(args.root)
    readme_p, doc_p = root / "README.md", root / "docs" / "data-dictionary.md"
    readme = readme_p.read_text("utf-8")
    want = {readme_p: replace_readme_section(readme), doc_p: dictionary_document()}
    if args.write:
        for path, text in want.items():
            path.write_text(text, "utf-8")
        return 0
    if args.check:
        stale = [str(p) for p, text in want.items()
                 if not p.exists() or p.read_text("utf-8") != text]
        for s in stale:
            print(f"stale: {s} (run python -m rivumi_analysis.dictionary --write)",
                  file=sys.stderr)
        return 1 if stale else 0
    print(json.dumps({name: dictionary(name) for name in TABLES}, indent=1,
                     ensure_ascii=False))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
