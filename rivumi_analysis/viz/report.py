"""One self-contained, offline HTML audit report (``rivumi-analysis report``).

The file inlines Vega, Vega-Lite and vega-embed (bundled offline by ``vl-convert``), the chart
specs (built by :mod:`rivumi_analysis.viz.charts`), the audit table, the verdict reasons and the
quarantine summary. It loads nothing from the network: no CDN, no fonts, no images.

``redact=True`` keeps only an allowlist: run ids, event types, sequences, timestamps, numbers,
codes, tool names, effects and decisions, and ``run_dir`` relative to the PATH it was found
under. Messages, previews, arguments, error texts, replay error texts, quarantine raw bytes,
hashes of raw bytes, verification names, model names, task ids and absolute paths are dropped.
Charts never carry free text in the first place (see :mod:`rivumi_analysis.viz.charts`).

>>> html = render_html(load_tables(["tests/fixtures/example"]), redact=True,
...                    sources=["tests/fixtures/example"])
>>> "cdn." in html, html.count('class="vega-chart"') == len(CHART_SECTIONS) + 2  # 1 run page
(False, True)
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from ..errors import SourceError
from ..tables.registry import TABLES, names
from . import charts as C
from ._html import CSS as _CSS  # noqa: F401 - kept importable from here
from ._html import JS as _JS  # noqa: F401
from ._html import e as _e
from ._html import js_bundle as _js_bundle  # noqa: F401
from ._html import page as _page
from ._html import quiet as _quiet
from ._html import reason_text as _reason_text
from ._html import relative_run_dir
from ._html import script_json as _script_json  # noqa: F401
from ._html import spec as _spec
from ._html import vl_version as _vl_version

__all__ = ["CHART_SECTIONS", "FLEET_COLUMNS", "REPORT_TABLES", "RUN_PAGES_CAP", "ReportResult",
           "ReportTables", "build_charts", "is_run_dir", "load_tables", "notable_runs",
           "render_html", "run_pages", "save_images", "write_compare", "write_report"]

Tables = dict[str, pl.DataFrame | None]

# (key, title, what the reader sees, builder)
CHART_SECTIONS: list[tuple[str, str, str, Callable[[Tables], Any]]] = [
    ("outcomes", "Outcomes over time",
     "What happened to the runs, day by day (UTC, by start): completed (verified or "
     "no_changes), failed by terminal reason, cancelled, crashed or unfinished, live, and fork "
     "runs that were never run. Below: each outcome's share of all runs. Click an outcome "
     "in the legend to highlight it.",
     lambda t: C.outcome_mix(t["runs"])),
    ("cost", "Tokens and cost per model",
     "Tokens and estimated cost per model (every model call's usage record), and cost per "
     "day. Rows without a cost estimate count for tokens but not for cost; the subtitle says "
     "how many there are.",
     lambda t: C.cost_by_model(runs=t["runs"], usage=t.get("usage"))),
    ("tasks", "Success rate and cost per task kind",
     "Per task kind: the share of ended runs that completed, the median cost per run and "
     "the number of runs.",
     lambda t: C.task_kinds(runs=t["runs"], usage=t.get("usage"))),
    ("top", "Slowest and most expensive runs",
     "The runs with the most wall time used and the highest known cost, coloured by "
     "outcome, against the fleet median (dashed). Hover for the full run id.",
     lambda t: C.top_runs(runs=t["runs"], usage=t.get("usage"))),
    ("tools", "Tool error rates",
     "Per tool: the share of calls that did not succeed (error, denied, unknown tool, not "
     "executed), with the counts.",
     lambda t: C.tool_error_rates(t.get("tool_calls"))),
    ("fleet", "Fleet overview",
     "Runs by resume verdict, kind and terminal reason (all runs), then steps against tokens "
     "per run (size = wall time used; drawn from the runs that have steps and tokens, the "
     "others counted) and the distribution of wall time used. Click a verdict in the legend "
     "to highlight its runs.",
     lambda t: C.fleet_overview(t["runs"])),
    ("timeline", "Step timelines",
     "One row per run on a wall-clock axis (seconds since the run started): model calls, tool "
     "calls coloured by effect with their outcome as a point, approval waits, final "
     "verification and resume or continuation gaps. Drag on the strip below to zoom; click a "
     "segment to follow its run in every chart and the audit table. Below: how the whole "
     "fleet uses its step budget (quantile bands), with the runs that hit it drawn.",
     lambda t: C.step_timeline(runs=t["runs"], model_calls=t["model_calls"],
                               tool_calls=t["tool_calls"], approvals=t["approvals"],
                               verifications=t["verifications"], events=t["events"],
                               states=t["states"])),
    ("repeat", "Repeat guard",
     "repeat_count along each run's tool calls against the trip threshold of 3 (§10.1). Red "
     "diamonds are trips (the run failed with repeated_action), orange triangles near misses. "
     "The bars count every run by its peak repeat count.",
     lambda t: C.repeat_guard(states=t["states"], events=t["events"], runs=t["runs"])),
    ("wall", "Wall-time budget",
     "Charged wall time per run as a fraction of wall_time_seconds: active time, charged "
     "resume downtime and approval waits (pale when the clock was paused). Red crosses mark "
     "runs over budget. Then how close every run gets (ECDF per outcome), and the whole "
     "fleet's burn-down along the run as quantile bands with the runs over or closest to "
     "their budget drawn and labelled (click one to follow it everywhere).",
     lambda t: C.wall_time_budget(runs=t["runs"], states=t["states"],
                                  approvals=t["approvals"])),
    ("tokens", "Token budget",
     "Cumulative tokens along each run against its max_total_tokens (dashed), with history "
     "compactions (context_pressure.summary_fallback_applied) as black diamonds; right, "
     "final tokens as a fraction of the budget for every run that has one; below, the whole "
     "fleet's token burn-down as quantile bands with the runs over or closest to their "
     "budget drawn and labelled.",
     lambda t: C.token_budget(runs=t["runs"], states=t["states"],
                              model_calls=t["model_calls"], events=t["events"])),
    ("forks", "Fork points",
     "Fork runs linked (purple) to their source at the fork sequence, and the safe fork points "
     "(green ticks) of failed or crashed runs; the gold star is the last safe point before "
     "the failure or crash.",
     lambda t: C.fork_points(runs=t["runs"], forks=t["forks"], events=t["events"],
                             states=t["states"])),
]


# --------------------------------------------------------------------------- loading
def _try(fn: Callable[..., pl.DataFrame], fleet: Any) -> pl.DataFrame | None:
    try:
        return fn(fleet)
    except Exception as exc:  # noqa: BLE001 - one broken table must not sink the report
        print(f"rivumi-analysis report: warning: {fn.__name__} failed: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return None


Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: what the report is doing (the CLI prints it on stderr)."""


def _no_progress(phase: str, done: int, total: int) -> None:
    return None


REPORT_TABLES = names(report=True)
"""The tables the report reads (the registry's marked ``report``)."""

DETAIL_ONLY = frozenset({"messages"})
"""Tables only the run pages read (their transcript): a fleet report read through the store
reads them for the runs that get a page (:attr:`ReportTables.detail`), not for the fleet."""

FLEET_COLUMNS: dict[str, tuple[str, ...]] = {
    "events": ("run_dir", "run_id", "kind", "sequence", "event_type", "created_at"),
    "states": ("run_dir", "run_id", "kind", "sequence", "event_type", "created_at", "step",
               "total_tokens", "repeat_count", "phase", "terminal", "terminal_reason",
               "wall_elapsed_seconds", "approval_wait_seconds", "resume_downtime_seconds",
               "charged_wall_seconds", "fork_safe", "charge_approval_waits"),
}
"""Columns of the two per-event tables the fleet charts read from the store (the others are
read whole); run pages read every column of their own runs (:attr:`ReportTables.detail`).
The charts' fallbacks that parse ``events.data`` are used only without ``states``/``forks``."""


class ReportTables(dict[str, pl.DataFrame | None]):
    """The report's tables (``{name: DataFrame}``), plus how they were loaded.

    Attributes:
        detail: ``detail(run_dirs)`` gives every column of those runs' rows of every table
            (the run pages' input), or None when the tables are already whole (in memory).
        store: the store folder the tables were read from (None: loaded in memory).
        store_read: runs (re-)read into the store by this load.
    """

    detail: Callable[[Sequence[str]], Tables] | None = None
    store: str | None = None
    store_read: int = 0


def _ordered(df: pl.DataFrame, table: str, rank: pl.DataFrame) -> pl.DataFrame:
    """Rows in a cold load's order: ``runs`` by ``run_dir``, others by discovery order
    (stable: a run's rows keep their order)."""
    if table == "runs":
        return df.sort("run_dir", maintain_order=True)
    return (df.join(rank, on="run_dir", how="left", maintain_order="left")
            .sort("__rank", maintain_order=True, nulls_last=True).drop("__rank"))


def _store_tables(paths: Sequence[str], *, max_depth: int, store_dir: str | None,
                  progress: Progress) -> ReportTables | None:
    """The report's tables read through the store (built or refreshed first, runs counted
    by ``progress``); None when no run is found or the store cannot be used (a warning on
    stderr: the caller loads in memory)."""
    from functools import partial

    from ..errors import StoreError
    from ..read.discovery import discover
    from ..store import local_executor, open_store
    from ..store.read import read_parts

    found = discover(list(paths), max_depth=max_depth)
    n = len(found.runs)
    if n == 0:
        return None
    progress("reading runs", 0, n)
    done = [0]

    def step(k: int) -> None:
        done[0] += k
        progress("reading runs", min(done[0], n), n)

    try:
        opened = open_store(list(paths), store_dir=store_dir, max_depth=max_depth,
                            executor=partial(local_executor, progress=step))
        if done[0] < n:  # the others were up to date in the store
            progress("reading runs", n, n)
        rank = pl.DataFrame({"run_dir": opened.manifest.order},
                            schema={"run_dir": pl.String}).with_row_index("__rank")
        d = opened.store.directory

        def scan(table: str) -> pl.LazyFrame:
            # the store opened (and refreshed) once above: every scan reads its manifest as
            # it is (re-opening it per table decoded the 10,000-run manifest 20 times)
            return read_parts(opened.store, opened.manifest, table, lazy=True)

        out = ReportTables()
        for i, t in enumerate(REPORT_TABLES):
            progress("reading tables", i, len(REPORT_TABLES))
            if t in DETAIL_ONLY:
                out[t] = None
                continue
            lf = scan(t)
            if t in FLEET_COLUMNS:
                lf = lf.select(FLEET_COLUMNS[t])
            out[t] = _ordered(lf.collect(), t, rank)
        progress("reading tables", len(REPORT_TABLES), len(REPORT_TABLES))
        unread = _unread_runs(found.skipped)
        if unread is not None:  # a folder that cannot be listed is a row, as in runs_df
            out["runs"] = pl.concat([out["runs"], unread]).sort("run_dir", maintain_order=True)
    except (StoreError, pl.exceptions.PolarsError, OSError) as exc:
        print(f"rivumi-analysis report: warning: the store could not be used "
              f"({type(exc).__name__}: {exc}); loading in memory", file=sys.stderr)
        return None

    def detail(run_dirs: Sequence[str]) -> Tables:
        want = list(dict.fromkeys(run_dirs))
        return {t: _ordered(scan(t).filter(pl.col("run_dir").is_in(want)).collect(), t, rank)
                for t in REPORT_TABLES}

    out.detail = detail
    out.store = d
    stats = opened.store.last_stats
    out.store_read = stats.reread if stats is not None else 0
    return out


def _unread_runs(skipped: Sequence[Any]) -> pl.DataFrame | None:
    """``runs_df`` rows of the folders discovery could not list (None: there is none)."""
    from ..tables._common import frame
    from ..tables.runs import skipped_rows

    rows = skipped_rows(skipped)
    return frame(rows, "RunsSchema") if rows else None


def load_tables(paths: Sequence[str], *, max_depth: int = 8,
                progress: Progress | None = None, store: bool | None = False,
                store_dir: str | None = None) -> ReportTables:
    """Load every table the report needs, reading the runs once.

    Args:
        paths: run directories or folders of runs.
        max_depth: discovery depth limit.
        progress: ``progress(phase, done, total)``.
        store: read through the Parquet store (built or refreshed first; only the columns
            the fleet charts use of the per-event tables, see :data:`FLEET_COLUMNS`);
            None: unless ``$RIVUMI_ANALYSIS_STORE=0``; False (default): in memory.
        store_dir: the store folder (default: the store's own default for these paths).

    Raises:
        SourceError: a PATH does not exist or is a regular file.

    >>> t = load_tables(["tests/fixtures/example"])
    >>> t["runs"].height, sorted(k for k, v in t.items() if v is None)
    (1, [])
    >>> s = load_tables(["tests/fixtures/example"], store=True)
    >>> s["runs"].equals(t["runs"]), s["events"].columns == list(FLEET_COLUMNS["events"])
    (True, True)
    """
    progress = progress or _no_progress
    if store is None:
        from ..store.core import store_enabled

        store = store_enabled()
    if store:
        from ..read.discovery import check_sources, normalize_sources

        check_sources(normalize_sources(list(paths))[0])  # usage errors first
        via = _store_tables(paths, max_depth=max_depth, store_dir=store_dir,
                            progress=progress)
        if via is not None:
            return via
    from ..read.snapshot import load_fleet

    fleet = load_fleet(list(paths), max_depth=max_depth,
                       progress=lambda done, total: progress("reading runs", done, total))
    loaders = [(t, TABLES[t].cold_loader()) for t in REPORT_TABLES if t != "runs"]
    progress("building tables", 0, len(loaders) + 1)
    tables = ReportTables(runs=TABLES["runs"].cold_loader()(fleet))
    for i, (name, fn) in enumerate(loaders, 2):
        tables[name] = _try(fn, fleet)
        progress("building tables", i, len(loaders) + 1)
    return tables


def build_charts(tables: Tables, *, progress: Progress | None = None) -> dict[str, Any]:
    """``{key: chart}`` for every section of :data:`CHART_SECTIONS` (a failing builder becomes
    a placeholder chart that says so).

    >>> sorted(build_charts(load_tables(["tests/fixtures/example"])))[:3]
    ['cost', 'fleet', 'forks']
    """
    progress = progress or _no_progress
    out: dict[str, Any] = {}
    for i, (key, title, _, builder) in enumerate(CHART_SECTIONS):
        progress("building charts", i, len(CHART_SECTIONS))
        try:
            with _quiet():
                out[key] = builder(tables)
        except Exception as exc:  # noqa: BLE001
            out[key] = C._empty(title, f"chart failed: {type(exc).__name__}")
    progress("building charts", len(CHART_SECTIONS), len(CHART_SECTIONS))
    return out


# --------------------------------------------------------------------------- html
AUDIT_TABLE_CAP = 5000
AUDIT_PAGE_ROWS = 50
"""Rows of the audit table shown at a time (the page's script pages them)."""
QUARANTINE_TABLE_CAP = 500


def _audit_rows(runs: pl.DataFrame, sources: Sequence[str], redact: bool,
                anchors: Mapping[str, str] | None = None) -> str:
    """The audit table, compact (it is the largest part of a 10,000-run report): run dirs
    relative to the PATH given (the header names it), messages without the run's own path,
    verdict colours by CSS class, numbers sorted by their text."""
    r = runs.with_columns(
        (pl.col("verdict") == "terminal").alias("_t")).sort(["_t", "verdict", "run_dir"])
    cols = [("run_dir", "run"), ("run_id", "run id"), ("kind", "kind"),
            ("verdict", "verdict"), ("reasons", "reasons"), ("warnings", "warnings"),
            ("terminal_reason", "terminal reason"), ("events", "events"),
            ("quarantined_lines", "quarantined"), ("step", "steps"),
            ("total_tokens", "tokens"), ("active_wall_time_seconds", "charged s")]
    if not redact:
        cols += [("message", "message"), ("replay_error", "replay error")]
    head = "".join(f'<th data-col="{c}">{_e(t)}</th>' for c, t in cols)
    body = []
    for row in r.head(AUDIT_TABLE_CAP).iter_rows(named=True):
        cells = []
        rd = row.get("run_dir")
        for c, _ in cols:
            v = row.get(c)
            if c == "run_dir":
                shown = relative_run_dir(v, sources)
                if anchors and v in anchors:
                    cells.append(f'<td><a href="#{anchors[v]}">{_e(shown)}</a></td>')
                    continue
                v = shown
            elif c == "message" and isinstance(v, str) and rd:
                v = v.replace(rd + os.sep, "").replace(rd, ".")
            if c == "verdict":
                cells.append(f'<td><span class="v v-{_e(v)}">{_e(v)}</span></td>')
            elif isinstance(v, int | float) and not isinstance(v, bool):
                cells.append(f'<td class="n">{_e(v)}</td>')
            elif isinstance(v, list):
                # one line per run: a cut cell shows its whole text on hover
                cells.append(f'<td title="{_e(" ".join(map(str, v)))}">'
                             + " ".join(f"<code>{_e(x)}</code>" for x in v) + "</td>")
            elif isinstance(v, str) and len(v) > 24:
                cells.append(f'<td title="{_e(v)}">{_e(v)}</td>')
            else:
                cells.append(f"<td>{_e(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = (f'<p class="muted">First {AUDIT_TABLE_CAP} of {r.height} runs shown (cap; '
            "non-terminal verdicts first): <code>rivumi-analysis audit</code> lists them "
            "all.</p>" if r.height > AUDIT_TABLE_CAP else "")
    # the verdict colours are in the page's stylesheet (_html.page_css): an inline <style>
    # here would not be allowed by the page's Content-Security-Policy. The page's script
    # shows AUDIT_PAGE_ROWS rows at a time (filter and sort work on every row); without
    # scripts every row shows.
    return (f'<p class="muted">Run directories relative to the PATH given; one line per run '
            "(hover a cut cell for its whole text).</p>"
            f'<div class="tabletools"><input class="filter" data-table="audit-table" '
            f'placeholder="filter runs…"><span class="pager" data-table="audit-table" '
            f'data-size="{AUDIT_PAGE_ROWS}"><button type="button" data-step="-1">‹ prev'
            '</button><span class="pinfo"></span><button type="button" data-step="1">next ›'
            '</button></span></div>'
            f'<div class="tablewrap"><table id="audit-table" class="compact"><thead><tr>{head}'
            f'</tr></thead><tbody>{"".join(body)}</tbody></table></div>{more}')


def _reasons_table(runs: pl.DataFrame) -> str:
    rows = []
    for col, kind in (("reasons", "reason"), ("warnings", "warning")):
        if col not in runs.columns:
            continue
        counts = (runs.select("verdict", pl.col(col)).explode(col).drop_nulls(col)
                  .group_by(col, maintain_order=True).agg(pl.len().alias("runs"),
                                     pl.col("verdict").unique().sort().alias("verdicts"))
                  .sort("runs", descending=True))
        for code, n, verdicts in counts.iter_rows():
            rows.append(f"<tr><td><code>{_e(code)}</code></td><td>{kind}</td>"
                        f'<td class="num">{n}</td><td>{_e(verdicts)}</td>'
                        f"<td>{_e(_reason_text(code))}</td></tr>")
    if not rows:
        return '<p class="muted">No reasons recorded.</p>'
    return ('<div class="tablewrap"><table><thead><tr><th>code</th><th>type</th><th>runs</th>'
            "<th>verdicts</th><th>meaning</th></tr></thead><tbody>" + "".join(rows)
            + "</tbody></table></div>")


def _quarantine_table(q: pl.DataFrame | None, sources: Sequence[str], redact: bool) -> str:
    if q is None or q.height == 0:
        return '<p class="muted">No quarantined lines.</p>'
    cols = ["run_dir", "file", "line_no", "byte_offset", "byte_length", "reason"]
    if not redact:
        cols += ["message", "raw"]
    head = "".join(f'<th data-col="{c}">{c}</th>' for c in cols)
    body = []
    for row in q.head(QUARANTINE_TABLE_CAP).iter_rows(named=True):
        cells = []
        for c in cols:
            v = row.get(c)
            if c == "run_dir":
                v = relative_run_dir(v, sources) if redact else v
            elif c == "file" and redact and v is not None:
                v = os.path.basename(str(v))
            elif c == "raw" and v is not None:
                v = bytes(v[:160]).decode("utf-8", "backslashreplace")
                cells.append(f"<td><code>{_e(v)}</code></td>")
                continue
            elif c == "reason":
                cells.append(f'<td><code>{_e(v)}</code></td>')
                continue
            cls = ' class="num"' if isinstance(v, int) else ""
            cells.append(f"<td{cls}>{_e(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = (f'<p class="muted">First {QUARANTINE_TABLE_CAP} of {q.height} lines shown.</p>'
            if q.height > QUARANTINE_TABLE_CAP else "")
    return (f'<div class="tablewrap"><table><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>{more}')


def redact_tables(tables: Tables) -> Tables:
    """Drop free-text columns the charts could otherwise see (verification names, errors).

    >>> t = redact_tables({"verifications": pl.DataFrame({"name": ["secret"]}), "runs": None})
    >>> t["verifications"]["name"].to_list()
    [None]
    """
    out = ReportTables(tables)  # keeps how they were loaded (run pages redact their own)
    out.detail = getattr(tables, "detail", None)
    out.store = getattr(tables, "store", None)
    out.store_read = getattr(tables, "store_read", 0)
    v = out.get("verifications")
    if v is not None and "name" in v.columns:
        out["verifications"] = v.with_columns(pl.lit(None, pl.Utf8).alias("name"))
    tc = out.get("tool_calls")
    if tc is not None and "error" in tc.columns:
        out["tool_calls"] = tc.with_columns(pl.lit(None, pl.Utf8).alias("error"))
    if tc is not None:
        out["tool_calls"] = out["tool_calls"].with_columns(  # type: ignore[union-attr]
            [pl.lit(None, pl.Utf8).alias(c) for c in ("arguments", "arguments_preview")
             if c in tc.columns])
    m = out.get("messages")
    if m is not None:
        out["messages"] = m.with_columns(
            [pl.lit(None, pl.Utf8).alias(c) for c in ("content", "error", "tool_calls_json")
             if c in m.columns])
    ap = out.get("approvals")
    if ap is not None and "policy_reason" in ap.columns:
        out["approvals"] = ap.with_columns(pl.lit(None, pl.Utf8).alias("policy_reason"))
    return out


RUN_PAGES_CAP = 12
"""Run pages inside the fleet report (``rivumi-analysis report RUN_DIR`` makes any run's)."""


def notable_runs(tables: Tables, cap: int = RUN_PAGES_CAP) -> list[str]:
    """The runs that get a page in the fleet report, at most ``cap``: for every outcome that
    is not a completion (failures by reason, cancelled, interrupted, crashed, live, fork), its
    run with the most wall time used; then the slowest and the most expensive runs of the
    fleet; then the runs the other charts put first (:func:`charts.pick_runs`).

    >>> import polars as pl
    >>> r = pl.DataFrame({"run_dir": list("abc"), "outcome": ["completed", "failed", "crashed"],
    ...     "terminal_reason": ["verified", "max_steps_exceeded", None],
    ...     "wall_time_used_seconds": [9.0, 1.0, 2.0]})
    >>> notable_runs({"runs": r, "usage": None})
    ['b', 'c', 'a']
    """
    runs = tables["runs"]
    if runs is None or runs.height == 0 or cap <= 0:
        return []
    r = runs.drop("outcome", strict=False).join(C.outcomes(runs), on="run_dir",
                                                how="left").with_columns(
        C._col(runs, "wall_time_used_seconds", pl.Float64).fill_null(-1.0).alias("_w"))
    order = {o: i for i, o in enumerate(C.OUTCOME_ORDER)}
    picked: list[str] = []
    firsts = (r.filter(~pl.col("outcome").str.starts_with("completed"))
              .sort(["_w", "run_dir"], descending=[True, False])
              .unique("outcome", keep="first", maintain_order=True))
    for rd, _o in sorted(firsts.select("run_dir", "outcome").iter_rows(),
                         key=lambda x: order.get(x[1], 99)):
        picked.append(rd)
    picked.append(r.sort(["_w", "run_dir"], descending=[True, False])["run_dir"][0])
    usage = tables.get("usage")
    if usage is not None and {"run_dir", "total_cost"} <= set(usage.columns) and usage.height:
        cost = (usage.group_by("run_dir", maintain_order=True).agg(pl.col("total_cost").sum())
                .filter(pl.col("total_cost") > 0).sort(["total_cost", "run_dir"],
                                                        descending=[True, False]))
        if cost.height:
            picked.append(cost["run_dir"][0])
    picked += C.pick_runs(runs, cap, size="wall_time_used_seconds", ordered=True
                          )["run_dir"].to_list()
    return list(dict.fromkeys(picked))[:cap]


def run_pages(tables: Tables, *, sources: Sequence[str], redact: bool = False,
              cap: int = RUN_PAGES_CAP,
              detail: Callable[[Sequence[str]], Tables] | None = None) -> list[Any]:
    """The fleet report's run pages (:func:`notable_runs`), as
    :class:`rivumi_analysis.viz.run_page.RunPage` objects keyed ``run-1`` …

    ``detail(run_dirs)`` gives those runs' whole rows when ``tables`` hold only the fleet
    charts' columns (default: ``tables.detail`` of a :class:`ReportTables`)."""
    from .run_page import run_page, run_tables

    chosen = notable_runs(tables, cap)
    if not chosen:
        return []
    detail = detail or getattr(tables, "detail", None)
    if detail is not None:
        tables = detail(chosen)
        if redact:
            tables = redact_tables(tables)
    per = run_tables(tables, chosen)
    labels = dict(C.run_labels(tables["runs"].filter(  # type: ignore[union-attr]
        pl.col("run_dir").is_in(chosen))).select("run_dir", "run").iter_rows())
    with _quiet():
        return [run_page(tables, rd, sources=sources, redact=redact, key=f"run-{i}",
                         embedded=True, per_run=per[rd], label=labels.get(rd))
                for i, rd in enumerate(chosen, 1)]


def group_by_error(column: str, redact: bool) -> str | None:
    """Why ``report --group-by column`` cannot be done (None: it can): not a ``runs_df``
    column, or, with ``--redact``, a text column outside the redaction allowlist (its values,
    e.g. model names or repositories, would be shown).

    >>> group_by_error("kind", True), group_by_error("model", True) is not None
    (None, True)
    """
    from ..export import REDACT_KEEP_STRINGS
    from ..tables._common import polars_schema
    from ..tables.groups import GROUP_ALIASES

    col = GROUP_ALIASES.get(column, column)
    schema = polars_schema("RunsSchema")
    if col not in schema:
        return (f"--group-by {column}: not a runs_df column (rivumi-analysis schema runs lists "
                f"them; also {', '.join(sorted(GROUP_ALIASES))})")
    if redact and schema[col] == pl.String and col not in REDACT_KEEP_STRINGS:
        return (f"--group-by {column} with --redact: {col} holds text --redact drops; group "
                "by a code column (kind, verdict, outcome, terminal_reason, ...)")
    return None


def outcome_cards(runs: pl.DataFrame) -> list[tuple[str, str]]:
    """The headline cards of the run facts: one per outcome present (they add up to the
    runs), then the success rate (completed among the runs that ended) with its counts.

    >>> outcome_cards(pl.DataFrame({"outcome": ["completed", "crashed", "failed"]}))
    [('1', 'completed'), ('1', 'failed'), ('1', 'crashed'), ('50%', 'success: 1 completed of 2 ended')]
    """
    from ..errors import OUTCOMES
    from ..tables.facts import TERMINAL_OUTCOMES

    if "outcome" not in runs.columns:
        return []
    counts = dict(runs.group_by("outcome").len().iter_rows())
    cards = [(str(counts[o]), o) for o in OUTCOMES if counts.get(o)]
    ended = sum(counts.get(o, 0) for o in TERMINAL_OUTCOMES)
    done = counts.get("completed", 0)
    if ended:
        cards.append((f"{done / ended:.0%}", f"success: {done} completed of {ended} ended"))
    return cards


def facts_note(runs: pl.DataFrame) -> str:
    """The closing note: each run fact's definition (``tables.facts.FACT_DEFINITIONS``, as
    the data dictionary says) and where this report's values came from."""
    from ..tables.facts import FACT_DEFINITIONS

    src_cols = {"outcome": "outcome_source", "terminal_reason": "terminal_reason_source",
                "step": "step_source", "total_tokens": "tokens_source",
                "provider_name": "provider_source", "wall_time_used_seconds": "wall_time_source",
                "started_at": "times_source"}
    rows = []
    for fact, text in FACT_DEFINITIONS.items():
        col = src_cols.get(fact)
        where = ""
        if col is not None and col in runs.columns:
            counts = (runs.group_by(col).len().sort(["len", col], descending=[True, False],
                                                   nulls_last=True).iter_rows())
            where = ", ".join(f"{src or 'unknown'} {n}" for src, n in counts)
        rows.append(f"<tr><th><code>{_e(fact)}</code></th><td>{_e(text)}</td>"
                    f"<td>{_e(where)}</td></tr>")
    return ('<section id="sec-facts"><h2>Run facts</h2><p class="what">How each run fact '
            "is defined (events.jsonl first; session.json, result.json and checkpoint.json "
            "cross-check it: a disagreement is the warning fact_disagrees and a drift_df row), "
            "and where this report's values came from (runs per source).</p>"
            '<div class="tablewrap"><table><thead><tr><th>fact</th><th>definition</th>'
            f"<th>source (runs)</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
            "</section>")


def groups_html(groups: pl.DataFrame) -> str:
    """The group comparison section (``report --group-by``): per group, runs and outcome
    counts, success rate with its 95 % Wilson interval, tokens, cost (known share), wall
    time and steps."""
    key = groups.columns[0]

    def pct(v: Any) -> str:
        return "" if v is None else f"{v:.0%}"

    def num(v: Any, fmt: str = ",.0f") -> str:
        return "" if v is None else format(v, fmt)

    heads = (key, "runs", "completed", "failed", "cancelled", "crashed / interrupted",
             "other", "success (95 % CI)", "median tokens (known)", "cost (known share)",
             "median wall s", "median steps")
    body = []
    for g in groups.iter_rows(named=True):
        other = g["live"] + g["fork_not_run"] + g["unreadable"]
        ci = (f"{pct(g['success_rate'])} ({pct(g['success_rate_low'])}–"
              f"{pct(g['success_rate_high'])}) of {g['ended']}" if g["ended"] else "no run ended")
        cost = (f"${num(g['cost_total'], ',.2f')} ({pct(g['cost_known_share'])} of runs)"
                if g["cost_known_runs"] else f"unknown ({g['runs']} runs)")
        cells = (g[key], g["runs"], g["completed"], g["failed"], g["cancelled"],
                 g["crashed"] + g["interrupted"], other, ci,
                 f"{num(g['tokens_median'])} ({g['tokens_known']})", cost,
                 num(g["wall_time_median"], ",.1f"), num(g["steps_median"], ",.1f"))
        body.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    return (f'<section id="sec-groups"><h2>Groups by {_e(key)}</h2><p class="what">One row '
            "per value of the column (compare_groups): outcome counts (they add up to the "
            "runs), the success rate among the runs that ended with its 95 % Wilson interval, "
            "the median of each run fact over the runs that have it, and cost summed over the "
            "runs whose every model call has a cost.</p>"
            '<div class="tablewrap"><table><thead><tr>'
            + "".join(f"<th>{_e(h)}</th>" for h in heads)
            + f"</tr></thead><tbody>{''.join(body)}</tbody></table></div></section>")


def render_html(tables: Tables, *, sources: Sequence[str], redact: bool = False,
                charts: Mapping[str, Any] | None = None,
                generated: datetime | None = None, relay: Any = None,
                pages: Sequence[Any] | None = None,
                groups: pl.DataFrame | None = None) -> str:
    """The whole report as one HTML string (no external references).

    Args:
        tables: from :func:`load_tables`.
        sources: the PATHs the runs were loaded from (for relative run dirs).
        redact: keep only the allowlist (module docstring).
        charts: prebuilt charts (default: :func:`build_charts`).
        generated: timestamp shown in the header (default: now, UTC).
        relay: the relayflowd section (``relay.report.relay_section``), or None.
        pages: the run pages (default: :func:`run_pages`; ``[]`` for none).
        groups: a :func:`~rivumi_analysis.tables.groups.compare_groups` table, shown as
            its own section (``report --group-by``), or None.
    """
    if redact:
        tables = redact_tables(tables)
    charts = dict(charts) if charts is not None else build_charts(tables)
    runs = tables["runs"]
    assert runs is not None
    pages = list(pages) if pages is not None else run_pages(tables, sources=sources,
                                                            redact=redact)
    specs = {key: _spec(charts[key]) for key, *_ in CHART_SECTIONS if key in charts}
    # --- relayflowd section (issue 14): its own HTML and charts, rendered like the others
    relay_html = relay.html if relay is not None else ""
    if relay is not None:
        specs.update({key: _spec(chart) for key, chart in relay.charts.items()})
    # --- end of relayflowd section
    for p in pages:
        specs.update({key: _spec(chart) for key, chart in p.charts.items()})
    verdicts = runs.group_by("verdict", maintain_order=True).len().sort("len", descending=True)
    q = tables.get("quarantine")
    cards = [(str(runs.height), "runs")] + outcome_cards(runs)
    cards += [(str(n), f"verdict {v}") for v, n in verdicts.iter_rows()]
    cards.append((str(int(runs["events"].sum() or 0)), "events"))
    cards.append((str(q.height if q is not None else 0), "quarantined lines"))
    src_text = (", ".join(os.path.basename(os.path.normpath(s)) or s for s in sources)
                if redact else ", ".join(sources))
    nav = "".join(f'<a href="#sec-{k}">{_e(t)}</a>' for k, t, *_ in CHART_SECTIONS)
    nav += '<a href="#sec-groups">Groups</a>' if groups is not None else ""
    nav += '<a href="#sec-reasons">Verdict reasons</a><a href="#sec-audit">Audit table</a>'
    nav += '<a href="#sec-quarantine">Quarantine</a><a href="#sec-facts">Run facts</a>'
    nav += '<a href="#sec-runs">Run pages</a>' if pages else ""
    nav += '<a href="#sec-relay">relayflowd journals</a>' if relay is not None else ""
    sections = "".join(
        f'<section id="sec-{k}"><h2>{_e(t)}</h2><p class="what">{_e(what)}</p>'
        f'<div class="vega-chart" id="chart-{k}" data-chart="{k}"></div></section>'
        for k, t, what, _ in CHART_SECTIONS if k in specs)
    anchors = {p.run_dir: p.anchor for p in pages}
    runs_html = ""
    if pages:
        index = "".join(f'<li><a href="#{p.anchor}">{_e(p.label)}</a></li>' for p in pages)
        runs_html = (f'<section id="sec-runs"><h2>Run pages</h2><p class="what">{len(pages)} '
                     f"of {runs.height} runs have a page here (cap {RUN_PAGES_CAP}): for each "
                     "outcome that is not a completion, its run with the most wall time "
                     "used, then the slowest and the most expensive run. Any run's page: "
                     "<code>rivumi-analysis report RUN_DIR</code>; two runs side by side: "
                     "<code>rivumi-analysis report --compare A B</code>.</p>"
                     f'<ul class="runindex">{index}</ul></section>'
                     + "".join(p.html for p in pages))
    body = f"""<div class="cards">{"".join(f'<div class="card"><b>{_e(a)}</b><span>{_e(b)}</span></div>'
                            for a, b in cards)}</div>
<nav>{nav}</nav>
{sections}
{groups_html(groups) if groups is not None else ""}
<section id="sec-reasons"><h2>Verdict reasons</h2><p class="what">Every reason and warning
code found, how many runs carry it, under which verdicts, and what it means.</p>
{_reasons_table(runs)}</section>
<section id="sec-audit"><h2>Audit table</h2><p class="what">One row per run, non-terminal
verdicts first. Click a header to sort; type to filter{"; a linked run has a page below" if pages else ""}.</p>
{_audit_rows(runs, sources, redact, anchors)}</section>
<section id="sec-quarantine"><h2>Quarantine</h2><p class="what">Lines that were not accepted
as events, with the reason code{"" if redact else ", the loader's message and the start of the raw bytes"}.</p>
{_quarantine_table(q, sources, redact)}</section>
{relay_html}
{runs_html}
{facts_note(runs)}
<footer>Charts cap the runs they draw (most notable first); counts and distributions use every
run. Rendered offline with inlined Vega, Vega-Lite and vega-embed.</footer>"""
    return _page("Rivumi run audit report", f"{runs.height} run(s) from {src_text}", body,
                 {}, redact=redact, generated=generated, specs=specs)


# --------------------------------------------------------------------------- files
def save_images(charts: Mapping[str, Any], out_dir: str, *, scale: float = 2.0) -> list[str]:
    """Save each chart as ``<key>.png`` and ``<key>.svg`` in ``out_dir`` (offline, vl-convert).

    Returns the written paths.
    """
    import vl_convert as vlc

    os.makedirs(out_dir, exist_ok=True)
    written = []
    vlv = _vl_version()
    for key, chart in charts.items():
        spec = chart.to_dict()
        png = os.path.join(out_dir, f"{key}.png")
        with open(png, "wb") as fh:
            fh.write(vlc.vegalite_to_png(spec, vl_version=vlv, scale=scale))
        svg = os.path.join(out_dir, f"{key}.svg")
        with open(svg, "w", encoding="utf-8") as fh:
            fh.write(vlc.vegalite_to_svg(spec, vl_version=vlv))
        written += [png, svg]
    return written


@dataclass
class ReportResult:
    """What :func:`write_report` produced."""

    path: str
    bytes: int
    runs: int
    charts: int
    images: list[str] = field(default_factory=list)
    seconds: float = 0.0
    run_pages: int = 0
    """Run pages inside the fleet report (:data:`RUN_PAGES_CAP`)."""
    run_page_charts: int = 0
    """Charts of those run pages (not counted in ``charts``)."""
    store: str | None = None
    """The store folder the tables were read through (None: loaded in memory)."""
    store_read: int = 0
    """Runs (re-)read into the store by this report."""


def write_report(paths: Sequence[str], out: str, *, png_dir: str | None = None,
                 redact: bool = False, max_depth: int = 8,
                 progress: Progress | None = None, run_page: bool | None = None,
                 store: bool | None = None, store_dir: str | None = None,
                 group_by: str | None = None) -> ReportResult:
    """Load ``paths``, build every chart and write the self-contained report to ``out``.

    One PATH that is itself a run directory (``rivumi-analysis report RUN_DIR``) gives that
    run's page instead of the fleet report (``run_page=False`` forces the fleet report).

    The file is written to a temporary name beside ``out`` and renamed into place, so a
    failure never leaves a half-written report or a stray temporary file.

    A fleet report reads its tables through the Parquet store (``store=None``: unless
    ``$RIVUMI_ANALYSIS_STORE=0``; ``store_dir``: its folder), so a second report of the same
    runs reads only what changed; ``store=False`` loads in memory. A run's page loads in
    memory. ``group_by``: a ``runs_df`` column; the report then compares its groups
    (:func:`~rivumi_analysis.tables.groups.compare_groups`).

    Raises:
        SourceError: a PATH is missing, or (code ``no_runs``) no run was found below them;
            nothing is written then.
        ValueError: ``group_by`` is not a ``runs_df`` column, or (``redact``) holds text
            the redaction drops (:func:`group_by_error`).

    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as d:
    ...     r = write_report(["tests/fixtures/example"], os.path.join(d, "r.html"))
    ...     (r.runs, r.charts == len(CHART_SECTIONS), r.bytes > 500_000)
    (1, True, True)
    """
    progress = progress or _no_progress
    t0 = time.perf_counter()
    if run_page is None:
        run_page = len(paths) == 1 and is_run_dir(paths[0])
    loaded = load_tables(paths, max_depth=max_depth, progress=progress,
                         store=False if run_page else store, store_dir=store_dir)
    tables: Tables = loaded
    runs = tables["runs"]
    if runs is None or runs.height == 0:
        raise SourceError(f"no runs found below {', '.join(paths)}", code="no_runs",
                          hint="a run directory holds events.jsonl, session.json or "
                               "result.json; check the PATH and --max-depth")
    if redact:
        tables = redact_tables(tables)
    if run_page:
        from .run_page import run_page as _one_page

        rd = _run_dir_of(paths[0], runs)
        progress("building charts", 0, 1)
        with _quiet():
            page = _one_page(tables, rd, sources=paths, redact=redact)
        progress("building charts", 1, 1)
        progress("writing html", 0, 1)
        _atomic_write_text(out, _page(f"Rivumi run: {page.label}",
                                      f"one run: {relative_run_dir(rd, paths) if redact else rd}",
                                      page.html, page.charts, redact=redact))
        progress("writing html", 1, 1)
        images = save_images(page.charts, png_dir) if png_dir else []
        return ReportResult(path=out, bytes=os.path.getsize(out), runs=runs.height,
                            charts=len(page.charts), images=images,
                            seconds=time.perf_counter() - t0)
    groups = None
    if group_by is not None:
        from ..tables.groups import compare_groups

        err = group_by_error(group_by, redact)
        if err:
            raise ValueError(err)
        groups = compare_groups(tables["runs"], by=group_by, usage=tables.get("usage"))
    charts = build_charts(tables, progress=progress)
    from ..relay.report import relay_section  # relayflowd journals under the PATHs (issue 14)

    relay = relay_section(paths, redact=redact, max_depth=max_depth)
    if relay is not None:
        charts = {**charts, **relay.charts}
    pages = run_pages(tables, sources=paths, redact=redact, detail=loaded.detail)
    progress("writing html", 0, 1)
    text = render_html(tables, sources=paths, redact=redact, charts=charts, relay=relay,
                       pages=pages, groups=groups)
    _atomic_write_text(out, text)
    progress("writing html", 1, 1)
    images: list[str] = []
    if png_dir:
        progress("saving images", 0, len(charts))
        images = save_images(charts, png_dir)
        progress("saving images", len(charts), len(charts))
    return ReportResult(path=out, bytes=os.path.getsize(out), runs=runs.height,
                        charts=len(charts), images=images, seconds=time.perf_counter() - t0,
                        run_pages=len(pages),
                        run_page_charts=sum(len(p.charts) for p in pages),
                        store=loaded.store, store_read=loaded.store_read)


def is_run_dir(path: str) -> bool:
    """True when ``path`` is itself a run directory (holds one of the run files directly;
    a symlinked directory is not followed, as discovery does).

    >>> is_run_dir("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e"), is_run_dir(
    ...            "tests/fixtures/example")
    (True, False)
    """
    from ..read.discovery import RUN_MARKERS

    p = os.path.expanduser(path)
    if os.path.islink(p.rstrip(os.sep)) or not os.path.isdir(p):
        return False
    return any(os.path.lexists(os.path.join(p, m)) for m in RUN_MARKERS)


def _run_dir_of(path: str, runs: pl.DataFrame) -> str:
    """The ``run_dir`` of the run at ``path`` (the resolved path, as discovery writes it)."""
    want = os.path.realpath(os.path.expanduser(path))
    found = runs.filter(pl.col("run_dir") == want)
    if found.height:
        return want
    # not a top-level run (e.g. given through an odd path): the shortest run_dir is the run
    return min(runs["run_dir"].to_list(), key=len)


def write_compare(run_a: str, run_b: str, out: str, *, png_dir: str | None = None,
                  redact: bool = False, progress: Progress | None = None
                  ) -> tuple[ReportResult, Any]:
    """Write two runs side by side (``rivumi-analysis report --compare A B``) to ``out``.

    Returns the result and the :class:`~rivumi_analysis.viz.run_page.Divergence`.

    Raises:
        SourceError: A or B is not a run directory (code ``not_a_run``); nothing is written.
    """
    from .run_page import render_compare_html

    progress = progress or _no_progress
    t0 = time.perf_counter()
    for p in (run_a, run_b):
        if not is_run_dir(p):
            raise SourceError(f"{p} is not a run directory", code="not_a_run",
                              hint="--compare takes two run directories (each holds "
                                   "events.jsonl or session.json)")
    tables = load_tables([run_a, run_b], max_depth=0, progress=progress)
    runs = tables["runs"]
    assert runs is not None
    if redact:
        tables = redact_tables(tables)
    a, b = _run_dir_of(run_a, runs), _run_dir_of(run_b, runs)
    progress("building charts", 0, 1)
    with _quiet():
        html, n, div = render_compare_html(tables, a, b, sources=[run_a, run_b],
                                           redact=redact)
    progress("writing html", 0, 1)
    _atomic_write_text(out, html)
    progress("writing html", 1, 1)
    images: list[str] = []
    if png_dir:
        from .run_page import compare_page

        images = save_images(compare_page(tables, a, b, sources=[run_a, run_b],
                                          redact=redact)[1], png_dir)
    return (ReportResult(path=out, bytes=os.path.getsize(out), runs=2, charts=n,
                         images=images, seconds=time.perf_counter() - t0), div)


def _atomic_write_text(out: str, text: str) -> None:
    """Write ``text`` to a temporary file beside ``out`` and rename it into place."""
    import tempfile

    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{os.path.basename(out)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------- CLI
