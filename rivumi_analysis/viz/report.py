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
>>> "cdn." in html, html.count('class="vega-chart"') == len(CHART_SECTIONS)
(False, True)
"""

from __future__ import annotations

import contextlib
import functools
import html as _html
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import altair as alt
import polars as pl

from .._version import __version__
from ..errors import SourceError
from . import charts as C

__all__ = ["CHART_SECTIONS", "ReportResult", "build_charts", "load_tables", "render_html",
           "save_images", "write_report"]

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
     "Per task kind: the share of finished runs that completed, the median cost per run and "
     "the number of runs.",
     lambda t: C.task_kinds(runs=t["runs"], usage=t.get("usage"))),
    ("top", "Slowest and most expensive runs",
     "The runs with the most charged wall time and the highest known cost, coloured by "
     "outcome, against the fleet median (dashed). Hover for the full run id.",
     lambda t: C.top_runs(runs=t["runs"], usage=t.get("usage"))),
    ("tools", "Tool error rates",
     "Per tool: the share of calls that did not succeed (error, denied, unknown tool, not "
     "executed), with the counts.",
     lambda t: C.tool_error_rates(t.get("tool_calls"))),
    ("fleet", "Fleet overview",
     "Runs by resume verdict, kind and terminal reason (all runs), then steps against tokens "
     "per run (size = charged wall time) and the distribution of charged wall time. Click a "
     "verdict in the legend to highlight its runs.",
     lambda t: C.fleet_overview(t["runs"])),
    ("timeline", "Step timelines",
     "One row per run on a wall-clock axis (seconds since the run started): model calls, tool "
     "calls coloured by effect with their outcome as a point, approval waits, final "
     "verification and resume or continuation gaps. Drag on the strip below to zoom; click a "
     "segment to highlight its run.",
     lambda t: C.step_timeline(runs=t["runs"], model_calls=t["model_calls"],
                               tool_calls=t["tool_calls"], approvals=t["approvals"],
                               verifications=t["verifications"], events=t["events"])),
    ("repeat", "Repeat guard",
     "repeat_count along each run's tool calls against the trip threshold of 3 (§10.1). Red "
     "diamonds are trips (the run failed with repeated_action), orange triangles near misses. "
     "The bars count every run by its peak repeat count.",
     lambda t: C.repeat_guard(states=t["states"], events=t["events"], runs=t["runs"])),
    ("wall", "Wall-time budget",
     "Charged wall time per run as a fraction of wall_time_seconds: active time, charged "
     "resume downtime and approval waits (pale when the clock was paused). Red crosses mark "
     "runs over budget. Below: burn-down along the run, approval waits and downtime shaded.",
     lambda t: C.wall_time_budget(runs=t["runs"], states=t["states"],
                                  approvals=t["approvals"])),
    ("tokens", "Token budget",
     "Cumulative tokens along each run against its max_total_tokens (dashed), with history "
     "compactions (context_pressure.summary_fallback_applied) as black diamonds; right, "
     "final tokens as a fraction of the budget for every run that has one.",
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


def load_tables(paths: Sequence[str], *, max_depth: int = 8,
                progress: Progress | None = None) -> Tables:
    """Load every table the report needs, reading the runs once.

    Raises:
        SourceError: a PATH does not exist or is a regular file.

    >>> t = load_tables(["tests/fixtures/example"])
    >>> t["runs"].height, sorted(k for k, v in t.items() if v is None)
    (1, [])
    """
    progress = progress or _no_progress
    from ..read.snapshot import load_fleet
    from ..tables.approvals import approvals_df
    from ..tables.events import events_df
    from ..tables.forks import forks_df
    from ..tables.model_calls import model_calls_df
    from ..tables.quarantine import quarantine_df
    from ..tables.runs import runs_df
    from ..tables.states import states_df
    from ..tables.tool_calls import tool_calls_df
    from ..tables.usage import usage_df
    from ..tables.verifications import verifications_df

    fleet = load_fleet(list(paths), max_depth=max_depth,
                       progress=lambda done, total: progress("reading runs", done, total))
    loaders = (("events", events_df), ("model_calls", model_calls_df), ("usage", usage_df),
               ("tool_calls", tool_calls_df), ("approvals", approvals_df),
               ("verifications", verifications_df), ("quarantine", quarantine_df),
               ("states", states_df), ("forks", forks_df))
    progress("building tables", 0, len(loaders) + 1)
    tables: Tables = {"runs": runs_df(fleet)}
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
            out[key] = builder(tables)
        except Exception as exc:  # noqa: BLE001
            out[key] = C._empty(title, f"chart failed: {type(exc).__name__}")
    progress("building charts", len(CHART_SECTIONS), len(CHART_SECTIONS))
    return out


# --------------------------------------------------------------------------- redaction
def _norm(p: str) -> str:
    # run_dir is the resolved source joined with the path below it (discovery), so the
    # given PATH is resolved the same way before comparing
    return os.path.realpath(p)


def relative_run_dir(run_dir: str | None, sources: Sequence[str]) -> str | None:
    """``run_dir`` relative to the given PATH it lies under (the PATH's own name when it *is*
    the run). Never returns an absolute path.

    >>> relative_run_dir("/x/runs/abc", ["/x/runs"])
    'abc'
    >>> relative_run_dir("/x/runs/abc", ["/x/runs/abc"])
    'abc'
    >>> relative_run_dir("/elsewhere/r", ["/x"])
    'r'
    """
    if run_dir is None:
        return None
    rd = _norm(run_dir)
    best: str | None = None
    for s in sources:
        sn = _norm(s)
        if rd == sn:
            cand = os.path.basename(sn) or "."
        elif rd.startswith(sn.rstrip(os.sep) + os.sep):
            cand = os.path.relpath(rd, sn)
        else:
            continue
        if best is None or len(cand) < len(best):
            best = cand
    return best if best is not None else os.path.basename(rd)


# --------------------------------------------------------------------------- html
def _e(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, list):
        return ", ".join(_e(x) for x in v)
    return _html.escape(str(v), quote=True)


def _reason_text(code: str) -> str:
    from ..errors import describe

    try:
        return describe(code)
    except KeyError:
        return ""


@functools.lru_cache(maxsize=4)
def _js_bundle(vl_version: str | None) -> str:
    import vl_convert as vlc

    return vlc.javascript_bundle(vl_version=vl_version)


def _vl_version() -> str | None:
    import vl_convert as vlc

    want = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return want if want in vlc.get_vegalite_versions() else None


def _spec(chart: Any) -> dict[str, Any]:
    d = chart.to_dict()
    d.pop("$schema", None)  # not needed offline: mode is passed to vega-embed explicitly
    d.setdefault("config", {}).update({"font": "system-ui, sans-serif",
                                       "view": {"stroke": "#ddd"}})
    return d


def _script_json(obj: Any) -> str:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


_CSS = """
:root{--fg:#1d2330;--muted:#5b6473;--line:#e3e6eb;--bg:#f7f8fa;--accent:#2457c5}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",
Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{background:#1d2330;color:#fff;padding:18px 28px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#c9cfda;font-size:13px}
main{max-width:1320px;margin:0 auto;padding:18px 28px 60px}
nav{margin:8px 0 16px;display:flex;flex-wrap:wrap;gap:6px}nav a{color:var(--accent);
text-decoration:none;background:#fff;border:1px solid var(--line);border-radius:14px;
padding:3px 10px;font-size:13px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:6px 0 18px}.card{background:#fff;
border:1px solid var(--line);border-radius:8px;padding:10px 14px;min-width:130px}
.card b{display:block;font-size:20px}.card span{color:var(--muted);font-size:12px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;padding:14px 18px;
margin:0 0 18px}section h2{margin:0 0 4px;font-size:17px}
section p.what{margin:0 0 10px;color:var(--muted);max-width:980px}
.vega-chart{overflow-x:auto;min-height:60px}
.chart-error{color:#b00020;font-weight:600}
table{border-collapse:collapse;width:100%;font-size:12.5px}th,td{border-bottom:1px solid
var(--line);padding:4px 6px;text-align:left;vertical-align:top}th{position:sticky;top:0;
background:#f0f2f5;cursor:pointer;user-select:none}td.num{text-align:right;
font-variant-numeric:tabular-nums}
.tablewrap{max-height:560px;overflow:auto;border:1px solid var(--line);border-radius:6px}
.v{display:inline-block;padding:1px 7px;border-radius:9px;color:#fff;font-size:11.5px}
code{font-size:12px;background:#f0f2f5;padding:0 4px;border-radius:3px}
input.filter{margin:0 0 8px;padding:5px 8px;width:320px;border:1px solid var(--line);
border-radius:6px}.muted{color:var(--muted)}footer{color:var(--muted);font-size:12px}
"""

_JS = r"""
(function(){
  var specs = JSON.parse(document.getElementById('rivumi-specs').textContent);
  var opts = {mode:'vega-lite', renderer:'svg',
              actions:{export:true, source:false, compiled:false, editor:false},
              tooltip:{theme:'light'}};
  var pending = [];
  Object.keys(specs).forEach(function(key){
    var el = document.getElementById('chart-' + key);
    pending.push(vegaEmbed(el, specs[key], opts).then(function(){
      el.setAttribute('data-rendered', '1');
    }).catch(function(err){
      el.setAttribute('data-rendered', 'error');
      el.innerHTML = '<p class="chart-error">chart failed to render</p>';
      console.error('rivumi chart ' + key + ': ' + err);
    }));
  });
  Promise.all(pending).then(function(){ document.body.setAttribute('data-charts-done','1'); });
  document.querySelectorAll('input.filter').forEach(function(inp){
    var tbody = document.getElementById(inp.getAttribute('data-table')).tBodies[0];
    inp.addEventListener('input', function(){
      var q = inp.value.toLowerCase();
      Array.prototype.forEach.call(tbody.rows, function(tr){
        tr.style.display = tr.textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none';
      });
    });
  });
  document.querySelectorAll('th[data-col]').forEach(function(th){
    th.addEventListener('click', function(){
      var table = th.closest('table'), tb = table.tBodies[0], i = th.cellIndex;
      var asc = th.getAttribute('data-asc') !== '1'; th.setAttribute('data-asc', asc?'1':'0');
      var rows = Array.prototype.slice.call(tb.rows);
      rows.sort(function(a,b){
        var x=a.cells[i].getAttribute('data-v')||a.cells[i].textContent,
            y=b.cells[i].getAttribute('data-v')||b.cells[i].textContent;
        var nx=parseFloat(x), ny=parseFloat(y);
        var c = (!isNaN(nx)&&!isNaN(ny)) ? nx-ny : x.localeCompare(y);
        return asc ? c : -c;
      });
      rows.forEach(function(r){ tb.appendChild(r); });
    });
  });
})();
"""

AUDIT_TABLE_CAP = 5000
QUARANTINE_TABLE_CAP = 500


def _audit_rows(runs: pl.DataFrame, sources: Sequence[str], redact: bool) -> str:
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
        for c, _ in cols:
            v = row.get(c)
            if c == "run_dir":
                v = relative_run_dir(v, sources) if redact else v
            if c == "verdict":
                color = C.VERDICT_COLORS.get(str(v), "#555")
                cells.append(f'<td data-v="{_e(v)}"><span class="v" style="background:{color}">'
                             f'{_e(v)}</span></td>')
                continue
            if isinstance(v, int | float) and not isinstance(v, bool):
                cells.append(f'<td class="num" data-v="{v}">{_e(v)}</td>')
            elif isinstance(v, list):
                cells.append("<td>" + " ".join(f"<code>{_e(x)}</code>" for x in v) + "</td>")
            else:
                cells.append(f"<td>{_e(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = (f'<p class="muted">First {AUDIT_TABLE_CAP} of {r.height} runs shown.</p>'
            if r.height > AUDIT_TABLE_CAP else "")
    return (f'<input class="filter" data-table="audit-table" placeholder="filter runs…">'
            f'<div class="tablewrap"><table id="audit-table"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>{more}')


def _reasons_table(runs: pl.DataFrame) -> str:
    rows = []
    for col, kind in (("reasons", "reason"), ("warnings", "warning")):
        if col not in runs.columns:
            continue
        counts = (runs.select("verdict", pl.col(col)).explode(col).drop_nulls(col)
                  .group_by(col).agg(pl.len().alias("runs"),
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
    out = dict(tables)
    v = out.get("verifications")
    if v is not None and "name" in v.columns:
        out["verifications"] = v.with_columns(pl.lit(None, pl.Utf8).alias("name"))
    tc = out.get("tool_calls")
    if tc is not None and "error" in tc.columns:
        out["tool_calls"] = tc.with_columns(pl.lit(None, pl.Utf8).alias("error"))
    ap = out.get("approvals")
    if ap is not None and "policy_reason" in ap.columns:
        out["approvals"] = ap.with_columns(pl.lit(None, pl.Utf8).alias("policy_reason"))
    return out


def render_html(tables: Tables, *, sources: Sequence[str], redact: bool = False,
                charts: Mapping[str, Any] | None = None,
                generated: datetime | None = None, relay: Any = None) -> str:
    """The whole report as one HTML string (no external references).

    Args:
        tables: from :func:`load_tables`.
        sources: the PATHs the runs were loaded from (for relative run dirs).
        redact: keep only the allowlist (module docstring).
        charts: prebuilt charts (default: :func:`build_charts`).
        generated: timestamp shown in the header (default: now, UTC).
        relay: the relayflowd section (``relay.report.relay_section``), or None.
    """
    if redact:
        tables = redact_tables(tables)
    charts = dict(charts) if charts is not None else build_charts(tables)
    runs = tables["runs"]
    assert runs is not None
    specs = {key: _spec(charts[key]) for key, *_ in CHART_SECTIONS if key in charts}
    # --- relayflowd section (issue 14): its own HTML and charts, rendered like the others
    relay_html = relay.html if relay is not None else ""
    if relay is not None:
        specs.update({key: _spec(chart) for key, chart in relay.charts.items()})
    # --- end of relayflowd section
    gen = (generated or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    verdicts = runs.group_by("verdict").len().sort("len", descending=True)
    q = tables.get("quarantine")
    cards = [(str(runs.height), "runs")]
    cards += [(str(n), f"verdict {v}") for v, n in verdicts.iter_rows()]
    cards.append((str(int(runs["events"].sum() or 0)), "events"))
    cards.append((str(q.height if q is not None else 0), "quarantined lines"))
    src_text = (", ".join(os.path.basename(os.path.normpath(s)) or s for s in sources)
                if redact else ", ".join(sources))
    red = " · redacted (allowlist only)" if redact else ""
    nav = "".join(f'<a href="#sec-{k}">{_e(t)}</a>' for k, t, *_ in CHART_SECTIONS)
    nav += '<a href="#sec-reasons">Verdict reasons</a><a href="#sec-audit">Audit table</a>'
    nav += '<a href="#sec-quarantine">Quarantine</a>'
    nav += '<a href="#sec-relay">relayflowd journals</a>' if relay is not None else ""
    sections = "".join(
        f'<section id="sec-{k}"><h2>{_e(t)}</h2><p class="what">{_e(what)}</p>'
        f'<div class="vega-chart" id="chart-{k}" data-chart="{k}"></div></section>'
        for k, t, what, _ in CHART_SECTIONS if k in specs)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data: blob:">
<title>Rivumi run audit report</title><style>{_CSS}</style></head>
<body data-charts="{len(specs)}">
<header><h1>Rivumi run audit report</h1>
<p>{runs.height} run(s) from {_e(src_text)} · generated {gen} by rivumi-analysis {__version__}{red}</p>
</header><main>
<div class="cards">{"".join(f'<div class="card"><b>{_e(a)}</b><span>{_e(b)}</span></div>'
                            for a, b in cards)}</div>
<nav>{nav}</nav>
{sections}
<section id="sec-reasons"><h2>Verdict reasons</h2><p class="what">Every reason and warning
code found, how many runs carry it, under which verdicts, and what it means.</p>
{_reasons_table(runs)}</section>
<section id="sec-audit"><h2>Audit table</h2><p class="what">One row per run, non-terminal
verdicts first. Click a header to sort; type to filter.</p>
{_audit_rows(runs, sources, redact)}</section>
<section id="sec-quarantine"><h2>Quarantine</h2><p class="what">Lines that were not accepted
as events, with the reason code{"" if redact else ", the loader's message and the start of the raw bytes"}.</p>
{_quarantine_table(q, sources, redact)}</section>
{relay_html}
<footer>Charts cap the runs they draw (most notable first); counts and distributions use every
run. Rendered offline with inlined Vega, Vega-Lite and vega-embed.</footer>
</main>
<script>{_js_bundle(_vl_version())}</script>
<script type="application/json" id="rivumi-specs">{_script_json(specs)}</script>
<script>{_JS}</script>
</body></html>
"""


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


def write_report(paths: Sequence[str], out: str, *, png_dir: str | None = None,
                 redact: bool = False, max_depth: int = 8,
                 progress: Progress | None = None) -> ReportResult:
    """Load ``paths``, build every chart and write the self-contained report to ``out``.

    The file is written to a temporary name beside ``out`` and renamed into place, so a
    failure never leaves a half-written report or a stray temporary file.

    Raises:
        SourceError: a PATH is missing, or (code ``no_runs``) no run was found below them;
            nothing is written then.

    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as d:
    ...     r = write_report(["tests/fixtures/example"], os.path.join(d, "r.html"))
    ...     (r.runs, r.charts == len(CHART_SECTIONS), r.bytes > 500_000)
    (1, True, True)
    """
    progress = progress or _no_progress
    t0 = time.perf_counter()
    tables = load_tables(paths, max_depth=max_depth, progress=progress)
    runs = tables["runs"]
    if runs is None or runs.height == 0:
        raise SourceError(f"no runs found below {', '.join(paths)}", code="no_runs",
                          hint="a run directory holds events.jsonl, session.json or "
                               "result.json; check the PATH and --max-depth")
    if redact:
        tables = redact_tables(tables)
    charts = build_charts(tables, progress=progress)
    from ..relay.report import relay_section  # relayflowd journals under the PATHs (issue 14)

    relay = relay_section(paths, redact=redact, max_depth=max_depth)
    if relay is not None:
        charts = {**charts, **relay.charts}
    progress("writing html", 0, 1)
    text = render_html(tables, sources=paths, redact=redact, charts=charts, relay=relay)
    _atomic_write_text(out, text)
    progress("writing html", 1, 1)
    images: list[str] = []
    if png_dir:
        progress("saving images", 0, len(charts))
        images = save_images(charts, png_dir)
        progress("saving images", len(charts), len(charts))
    return ReportResult(path=out, bytes=os.path.getsize(out), runs=runs.height,
                        charts=len(charts), images=images, seconds=time.perf_counter() - t0)


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
