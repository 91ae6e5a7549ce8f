"""A page per run, and two runs side by side (``rivumi-analysis report RUN_DIR``,
``rivumi-analysis report --compare A B``, and the run pages of the fleet report).

A run page shows one run: its verdict with the reasons, warnings and messages, a timeline of
its model and tool calls (seconds since the start), its budget burn-down along the events
(fraction of each budget used after every event, from ``states_df``) with the repeat count,
the state after each event (``states_df``, with the fields that changed), its tool calls with
their outcomes and its quarantined lines.

A comparison puts two runs side by side and says where they diverge: for a fork and its
source, the fork point (the fork starts from the source's state after that event); otherwise
the first sequence whose event differs (type or data), and the state fields that differ there
and at the end.

Everything is built from the same tables as the fleet report (no second read), aggregated in
polars; chart data is capped (:data:`PAGE_CAPS`) and every cap says what it cut.

>>> from rivumi_analysis.viz.report import load_tables
>>> t = load_tables(["tests/fixtures/example"])
>>> page = run_page(t, t["runs"]["run_dir"][0], sources=["tests/fixtures/example"])
>>> sorted(page.charts), "State after each event" in page.html
(['burn', 'timeline'], True)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import altair as alt
import polars as pl

from ..tables.registry import names
from . import charts as C
from ._html import e as _e
from ._html import page as _page
from ._html import reason_text as _reason_text
from ._html import relative_run_dir
from .transcript import TRANSCRIPT_CAPS, transcript_entries, transcript_html

__all__ = ["PAGE_CAPS", "RunPage", "compare_page", "divergence", "render_compare_html",
           "render_run_html", "run_page", "run_tables"]

Tables = dict[str, pl.DataFrame | None]

PAGE_CAPS: Mapping[str, int] = {
    "state_rows": 400,        # rows of the state table on a run's own page
    "state_rows_embedded": 40,  # ... on a run page inside the fleet report (its last events)
    "tool_rows": 300,         # rows of the tool-call table
    "tool_rows_embedded": 40,
    "burn_points": 1500,      # events drawn in the burn-down (evenly thinned, last kept)
    "burn_points_embedded": 120,
    "diff_rows": 200,         # rows of the state-difference table in a comparison
}
"""Row caps of the run pages. Each table says when it was cut."""

# state columns shown and compared (the per-event replayed state of ``states_df``)
STATE_COLUMNS: tuple[str, ...] = (
    "step", "phase", "model_requests", "model_completions", "model_failures", "tool_requests",
    "tool_completions", "total_tokens", "repeat_count", "side_effects_in_flight",
    "open_approvals", "terminal", "terminal_reason", "resume_count",
    "charged_wall_seconds", "steps_remaining", "wall_time_remaining_seconds",
    "tokens_remaining", "fork_safe")
_TABLE_STATE = ("step", "phase", "total_tokens", "charged_wall_seconds", "repeat_count",
                "side_effects_in_flight", "open_approvals", "fork_safe")
# the columns whose change is listed in "changed" (counters that move on every event of
# their kind are left out: the event type says it)
_CHANGE_COLUMNS = ("step", "phase", "repeat_count", "side_effects_in_flight", "open_approvals",
                   "terminal", "terminal_reason", "resume_count", "fork_safe", "model_failures")


@dataclass
class RunPage:
    """One run's page: its HTML body (a ``<section>``) and its charts keyed for the page."""

    run_dir: str
    anchor: str
    label: str
    html: str
    charts: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- tables
def run_tables(tables: Mapping[str, pl.DataFrame | None],
               run_dirs: Sequence[str]) -> dict[str, Tables]:
    """``{run_dir: tables of that run only}`` for each of ``run_dirs`` (one pass per table).

    >>> import polars as pl
    >>> t = {"runs": pl.DataFrame({"run_dir": ["a", "b"]}), "events": None}
    >>> {k: v["runs"].height for k, v in run_tables(t, ["a"]).items()}
    {'a': 1}
    """
    want = list(dict.fromkeys(run_dirs))
    out: dict[str, Tables] = {rd: {} for rd in want}
    for name in names(report=True):
        df = tables.get(name)
        if df is None or "run_dir" not in df.columns:
            for rd in want:
                out[rd][name] = df if df is None else df.clear()
            continue
        sub = df.filter(pl.col("run_dir").is_in(want))
        parts = {k[0]: v for k, v in sub.partition_by("run_dir", as_dict=True).items()}
        for rd in want:
            out[rd][name] = parts.get(rd, df.clear())
    return out


def _thin(df: pl.DataFrame, limit: int) -> pl.DataFrame:
    """At most ``limit`` rows, evenly spaced, always keeping the last."""
    if df.height <= limit:
        return df
    step = -(-df.height // limit)
    idx = pl.int_range(pl.len())
    return df.filter((idx % step == 0) | (idx == pl.len() - 1))


def _budget(run: Mapping[str, Any], col: str) -> float | None:
    v = run.get(col)
    return float(v) if isinstance(v, int | float) and v and v > 0 else None


def burn_down_data(states: pl.DataFrame, run: Mapping[str, Any]) -> pl.DataFrame:
    """Fraction of each budget used after every event of one run (long form).

    Columns ``sequence, event_type, budget, used, limit, fraction``; a budget the run does
    not have gives no rows. The fractions come from the replayed state's own remaining
    counters (``steps_remaining``, ``wall_time_remaining_seconds``, ``tokens_remaining``), so
    they equal what the runner's limits see.

    >>> import polars as pl
    >>> s = pl.DataFrame({"sequence": [0, 1], "event_type": ["a", "b"], "step": [0, 1],
    ...     "steps_remaining": [4, 3], "charged_wall_seconds": [0.0, 30.0],
    ...     "wall_time_remaining_seconds": [120.0, 90.0], "total_tokens": [0, 10],
    ...     "tokens_remaining": [None, None]})
    >>> d = burn_down_data(s, {"max_steps": 4, "wall_time_seconds": 120})
    >>> d.filter(pl.col("sequence") == 1).select("budget", "fraction").rows()
    [('steps', 0.25), ('wall time', 0.25)]
    """
    parts = []
    for name, used, remaining, limit_col in (
            ("steps", "step", "steps_remaining", "max_steps"),
            ("wall time", "charged_wall_seconds", "wall_time_remaining_seconds",
             "wall_time_seconds"),
            ("tokens", "total_tokens", "tokens_remaining", "max_total_tokens")):
        limit = _budget(run, limit_col)
        if limit is None or used not in states.columns:
            continue
        frac = (1.0 - pl.col(remaining).cast(pl.Float64) / limit
                if remaining in states.columns else pl.col(used).cast(pl.Float64) / limit)
        parts.append(states.select(
            "sequence", "event_type", pl.lit(name).alias("budget"),
            pl.col(used).cast(pl.Float64).alias("used"), pl.lit(limit).alias("limit"),
            pl.coalesce(frac, pl.col(used).cast(pl.Float64) / limit).round(5)
            .alias("fraction")))
    if not parts:
        return pl.DataFrame(schema={"sequence": pl.Int64, "event_type": pl.Utf8,
                                    "budget": pl.Utf8, "used": pl.Float64,
                                    "limit": pl.Float64, "fraction": pl.Float64})
    return pl.concat(parts)


def final_fractions(run: Mapping[str, Any]) -> pl.DataFrame:
    """Each budget's fraction used by the run's final manifest values (``runs_df``: steps,
    charged wall time, total tokens). The log's replayed state can end lower: a model call
    that crossed the token budget, for one, is charged in ``session.json`` but has no
    ``model.completed`` event.

    >>> final_fractions({"step": 3, "max_steps": 4, "total_tokens": 150,
    ...                  "max_total_tokens": 100})["fraction"].to_list()
    [0.75, 1.5]
    """
    rows = []
    for name, used, limit_col in (("steps", "step", "max_steps"),
                                  ("wall time", "active_wall_time_seconds",
                                   "wall_time_seconds"),
                                  ("tokens", "total_tokens", "max_total_tokens")):
        limit, v = _budget(run, limit_col), run.get(used)
        if limit is not None and isinstance(v, int | float):
            rows.append({"budget": name, "used": float(v), "limit": limit,
                         "fraction": round(float(v) / limit, 5)})
    return pl.DataFrame(rows, schema={"budget": pl.Utf8, "used": pl.Float64,
                                      "limit": pl.Float64, "fraction": pl.Float64})


def _lane(col: str = "event_type") -> pl.Expr:
    et = pl.col(col).fill_null("")
    return (pl.when(et.str.starts_with("model.")).then(pl.lit("model"))
            .when(et.str.starts_with("tool.")).then(pl.lit("tool"))
            .when(et.str.starts_with("approval.")).then(pl.lit("approval"))
            .when(et.str.starts_with("verification.")).then(pl.lit("verification"))
            .otherwise(pl.lit("run")))


def burn_chart(states: pl.DataFrame | None, run: Mapping[str, Any], *,
               max_points: int = PAGE_CAPS["burn_points"], width: int = 560,
               mark_sequence: int | None = None) -> Any:
    """Budget burn-down and repeat count along one run's events (x = sequence).

    Top: the fraction of each budget (steps, charged wall time, tokens) used after every
    event, with 100 % as a red rule. Middle: the repeat count against the trip threshold.
    Bottom: every event as a tick in its lane (model, tool, approval, verification, run).
    ``mark_sequence`` draws a dashed rule there (the divergence point of a comparison).
    """
    title = "Budgets along the run"
    if states is None or states.height == 0 or "sequence" not in states.columns:
        return C._empty(title, "no replayed state (states_df) for this run")
    s = states.sort("sequence")
    n = s.height
    drawn = _thin(s, max_points)
    sub = (f"{n} events; diamonds: the final values in session.json"
           + (f"; every {-(-n // max_points)}th event drawn (cap)" if drawn.height < n else ""))
    seq_max = int(s["sequence"].max() or 0)
    x = alt.X("sequence:Q", title="event sequence",
              axis=alt.Axis(tickMinStep=1, format="d"),
              scale=alt.Scale(domain=[int(s["sequence"].min() or 0), max(seq_max, 1)],
                              nice=False))
    burn = burn_down_data(drawn, run)
    marks = []
    if mark_sequence is not None:
        marks.append(alt.Chart(alt.Data(values=[{"sequence": mark_sequence}]))
                     .mark_rule(strokeDash=[5, 3], color="#6a1b9a").encode(x=x))
    final = final_fractions(run).with_columns(pl.lit(seq_max).alias("sequence"))
    final_pts = []
    if final.height:
        final_pts.append(alt.Chart(C._values(final)).mark_point(
            shape="diamond", filled=True, size=70, stroke="#222", strokeWidth=0.6).encode(
            x=x, y="fraction:Q", color=alt.Color("budget:N"),
            tooltip=[alt.Tooltip("budget:N", title="final (session.json)"),
                     alt.Tooltip("used:Q", format=",.1f"), alt.Tooltip("limit:Q", format=",.0f"),
                     alt.Tooltip("fraction:Q", format=".1%")]))
    # One wide row per drawn event, given once to the vconcat (all three views inherit it);
    # the budget lines fold their columns back into (budget, fraction) in Vega-Lite.
    budgets = [b for b in ("steps", "wall time", "tokens")
               if b in set(burn["budget"].to_list())]
    wide = drawn.select("sequence", "event_type", _lane().alias("lane"),
                        C._col(drawn, "step", pl.Int64).alias("step"),
                        C._col(drawn, "repeat_count", pl.Int64, 0).fill_null(0)
                        .alias("repeat_count"))
    if budgets:
        wide = wide.join(burn.pivot(on="budget", index="sequence", values="fraction",
                                    aggregate_function="first"),
                         on="sequence", how="left")
    if budgets:
        peak = max(float(burn["fraction"].max() or 0.0),
                   float(final["fraction"].max() or 0.0) if final.height else 0.0)
        lines = (alt.Chart().transform_fold(budgets, as_=["budget", "fraction"])
                 .mark_line(interpolate="step-after", point=False)
                 .encode(x=x, y=alt.Y("fraction:Q", title="budget used",
                                      axis=alt.Axis(format="%"),
                                      scale=alt.Scale(domain=[0, max(1.0, peak)])),
                         color=alt.Color("budget:N", scale=alt.Scale(
                             domain=["steps", "wall time", "tokens"],
                             range=["#1f77b4", "#ff7f0e", "#2ca02c"]),
                             legend=C._legend("budget", orient="right")),
                         tooltip=["sequence:Q", "event_type:N", "budget:N",
                                  alt.Tooltip("fraction:Q", format=".1%")]))
        full = alt.Chart(alt.Data(values=[{"y": 1.0}])).mark_rule(color="#d62728").encode(
            y="y:Q")
        top = alt.layer(lines, full, *final_pts, *marks).properties(
            width=width, height=150,
            title=alt.TitleParams(title, subtitle=sub, anchor="start"))
    else:
        top = C._empty(title, "this run has no step, wall-time or token budget")
    repeat = alt.layer(
        alt.Chart().mark_line(interpolate="step-after", color="#8c564b")
        .encode(x=x, y=alt.Y("repeat_count:Q", title="repeat count",
                             scale=alt.Scale(domain=[0, C.REPEAT_THRESHOLD])),
                tooltip=["sequence:Q", "event_type:N", "repeat_count:Q"]),
        alt.Chart(alt.Data(values=[{"y": C.REPEAT_THRESHOLD}]))
        .mark_rule(color="#d62728", strokeDash=[3, 3]).encode(y="y:Q"),
        *marks).properties(width=width, height=60)
    lanes = alt.layer(
        alt.Chart().mark_tick(thickness=2).encode(
            x=x, y=alt.Y("lane:N", title=None,
                         sort=["run", "model", "tool", "approval", "verification"]),
            color=alt.Color("lane:N", legend=None),
            tooltip=["sequence:Q", "event_type:N", "step:Q"]),
        *marks).properties(width=width, height=alt.Step(14))
    return alt.vconcat(top, repeat, lanes, data=C._values(wide)).resolve_scale(
        color="independent")



# --------------------------------------------------------------------------- html parts
def _verdict_badge(v: Any) -> str:
    color = C.VERDICT_COLORS.get(str(v), "#555")
    return f'<span class="v" style="background:{color}">{_e(v)}</span>'


def _kv_table(rows: Sequence[tuple[str, str]]) -> str:
    return ('<table class="kv"><tbody>' + "".join(
        f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</tbody></table>")


def _num(v: Any, fmt: str = ",") -> str:
    if v is None:
        return '<span class="muted">–</span>'
    try:
        return format(v, fmt)
    except (TypeError, ValueError):
        return _e(v)


def _source(run: Mapping[str, Any], column: str) -> str:
    """`` <span>from FILE</span>``: where a run fact came from (``tables.facts``)."""
    src = run.get(column)
    return f' <span class="muted">from {_e(src)}</span>' if src else ""


def _summary_html(run: Mapping[str, Any], sources: Sequence[str], redact: bool,
                  outcome: str | None, quarantined: int) -> str:
    codes = []
    for col, what in (("reasons", "reason"), ("warnings", "warning")):
        for code in run.get(col) or []:
            meaning = _reason_text(code)
            codes.append(f"<li><code>{_e(code)}</code> <span class=\"muted\">{what}"
                         f"{' · ' + _e(meaning) if meaning else ''}</span></li>")
    rd = run.get("run_dir")
    rows = [("run", _e(relative_run_dir(rd, sources) if redact else rd)),
            ("run id", f"<code>{_e(run.get('run_id'))}</code>"),
            ("kind", _e(run.get("kind"))),
            ("verdict", _verdict_badge(run.get("verdict"))),
            ("outcome", _e(outcome) + _source(run, "outcome_source")),
            ("terminal reason", _e(run.get("terminal_reason"))
             + _source(run, "terminal_reason_source")),
            ("started / ended", f"{_e(run.get('started_at'))} → {_e(run.get('ended_at'))}"),
            ("events / quarantined lines",
             f"{_num(run.get('events'))} / {_num(quarantined)}"),
            ("steps (max)", f"{_num(run.get('step'))} ({_num(run.get('max_steps'))})"
             + _source(run, "step_source")),
            ("tokens (budget)",
             f"{_num(run.get('total_tokens'))} ({_num(run.get('max_total_tokens'))})"
             + _source(run, "tokens_source")),
            ("tokens by lane", f"primary {_num(run.get('primary_tokens'))} · reviewer "
             f"{_num(run.get('reviewer_tokens'))} · wind-down "
             f"{_num(run.get('wind_down_tokens'))}"),
            ("wall s used (last turn)", f"{_num(run.get('wall_time_used_seconds'), ',.1f')}"
             + _source(run, "wall_time_source")),
            ("charged wall s (budget)",
             f"{_num(run.get('active_wall_time_seconds'), ',.1f')} "
             f"({_num(run.get('wall_time_seconds'), ',.0f')})")]
    if not redact:
        rows += [("provider / model", f"{_e(run.get('provider_name'))} / "
                  f"{_e(run.get('model_id'))}" + _source(run, "provider_source")),
                 ("message", _e(run.get("message"))),
                 ("replay error", _e(run.get("replay_error")))]
        if run.get("parent_run_dir"):
            rows.append(("parent run", _e(run.get("parent_run_dir"))))
    reasons = ("<ul class=\"codes\">" + "".join(codes) + "</ul>" if codes
               else '<p class="muted">No reasons or warnings.</p>')
    return f'<div class="runhead">{_kv_table(rows)}<div><h3>Verdict reasons</h3>{reasons}</div></div>'


def _cell(v: Any) -> str:
    if isinstance(v, bool):
        return f"<td>{'yes' if v else 'no'}</td>"
    if isinstance(v, int | float):
        return f'<td class="num">{_e(v) if isinstance(v, float) else format(v, ",")}</td>'
    return f"<td>{_e(v)}</td>"


def _rows_table(df: pl.DataFrame, cols: Sequence[str], headers: Sequence[str] | None = None,
                *, code_cols: Sequence[str] = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in (headers or cols))
    body = []
    for row in df.select(cols).iter_rows(named=True):
        body.append("<tr>" + "".join(
            f"<td><code>{_e(row[c])}</code></td>" if c in code_cols and row[c] is not None
            else _cell(row[c]) for c in cols) + "</tr>")
    return (f'<div class="tablewrap"><table><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def state_table(states: pl.DataFrame) -> pl.DataFrame:
    """The state after each event of one run, with ``changed``: the state fields (step,
    phase, repeat count, side effects in flight, open approvals, terminal, resume count,
    fork safety, model failures) that this event changed, ``old→new``.

    >>> import polars as pl
    >>> s = pl.DataFrame({"sequence": [0, 1], "event_type": ["run.created", "model.requested"],
    ...                   "step": [0, 1], "phase": ["created", "running"]})
    >>> state_table(s)["changed"].to_list()
    ['', 'step 0→1, phase created→running']
    """
    s = states.sort("sequence")
    present = [c for c in _CHANGE_COLUMNS if c in s.columns]
    parts = [pl.when(pl.col(c).ne_missing(pl.col(c).shift(1)) & (pl.int_range(pl.len()) > 0))
             .then(pl.format("{} {}→{}", pl.lit(c), pl.col(c).shift(1).cast(pl.Utf8)
                             .fill_null("∅"), pl.col(c).cast(pl.Utf8).fill_null("∅")))
             for c in present]
    changed = (pl.concat_str(parts, separator=", ", ignore_nulls=True).fill_null("")
               if parts else pl.lit(""))
    return s.with_columns(changed.alias("changed"))


def _state_section(states: pl.DataFrame | None, cap: int) -> str:
    if states is None or states.height == 0:
        return '<p class="muted">No replayed state for this run.</p>'
    t = state_table(states)
    cols = ["sequence", "event_type", *[c for c in _TABLE_STATE if c in t.columns],
            "changed"]
    if "rejected" in t.columns:
        cols.insert(2, "rejected")
    note = ""
    if t.height > cap:
        note = (f'<p class="muted">Last {cap} of {t.height} events shown (cap); '
                "<code>states_df</code> has all of them.</p>")
        t = t.tail(cap)
    t = t.with_columns(pl.col("charged_wall_seconds").round(1)) if (
        "charged_wall_seconds" in t.columns) else t
    return note + _rows_table(t, cols, [c.replace("_", " ") for c in cols],
                              code_cols=("event_type", "rejected"))


def _tool_section(tc: pl.DataFrame | None, cap: int, redact: bool) -> str:
    if tc is None or tc.height == 0:
        return '<p class="muted">No tool calls.</p>'
    t = tc.sort(pl.coalesce("requested_sequence", "started_sequence", "completed_sequence"))
    ok = t.filter(pl.col("outcome") == "ok").height
    counts = t.group_by("outcome", maintain_order=True).len().sort("len", descending=True)
    head = (f'<p class="muted">{t.height} tool call(s): ' + ", ".join(
        f"{n} {_e(o)}" for o, n in counts.iter_rows()) + f" ({ok} ok).</p>")
    cols = [c for c in ("step", "requested_sequence", "completed_sequence", "name", "effect",
                        "outcome", "duration_seconds") if c in t.columns]
    if not redact:
        cols += [c for c in ("arguments_preview", "error") if c in t.columns]
    if "duration_seconds" in t.columns:
        t = t.with_columns(pl.col("duration_seconds").round(2))
    if t.height > cap:
        head += f'<p class="muted">First {cap} of {t.height} calls shown (cap).</p>'
        t = t.head(cap)
    return head + _rows_table(t, cols, [c.replace("_", " ") for c in cols],
                              code_cols=("name", "outcome"))


def _quarantine_section(q: pl.DataFrame | None, redact: bool) -> str:
    if q is None or q.height == 0:
        return '<p class="muted">No quarantined lines: every line of events.jsonl is an event.</p>'
    cols = ["line_no", "byte_offset", "byte_length", "reason"]
    t = q.sort("line_no")
    if not redact:
        cols += ["message"]
        t = t.with_columns(pl.col("raw").map_elements(
            lambda b: bytes(b[:160]).decode("utf-8", "backslashreplace"),
            return_dtype=pl.Utf8).alias("raw start")) if "raw" in t.columns else t
        cols += ["raw start"] if "raw start" in t.columns else []
    return _rows_table(t, cols, code_cols=("reason", "raw start"))


# --------------------------------------------------------------------------- one run
def run_page(tables: Mapping[str, pl.DataFrame | None], run_dir: str, *,
             sources: Sequence[str], redact: bool = False, key: str = "run",
             embedded: bool = False, per_run: Tables | None = None,
             label: str | None = None, width: int = 640,
             mark_sequence: int | None = None) -> RunPage:
    """The page of one run as a ``<section>`` and its charts (keys ``<key>-timeline``,
    ``<key>-burn`` in :attr:`RunPage.charts` are returned as ``timeline`` and ``burn`` when
    ``key`` is ``"run"``).

    Args:
        tables: the report's tables (:func:`rivumi_analysis.viz.report.load_tables`).
        run_dir: the run (its ``run_dir``).
        sources: the PATHs given (relative run dirs when redacting).
        redact: keep only the report's allowlist.
        key: prefix of the chart keys and the HTML anchor.
        embedded: inside the fleet report (smaller table caps, a link back to the table).
        per_run: the run's own tables when already split (:func:`run_tables`).
        label: the readable run label (default: :func:`charts.run_labels`).
        width: chart width in pixels.
        mark_sequence: a sequence to mark in the burn-down (a comparison's divergence).
    """
    t = per_run if per_run is not None else run_tables(tables, [run_dir])[run_dir]
    runs = t["runs"]
    if runs is None or runs.height == 0:
        raise KeyError(f"no run {run_dir!r} in the tables")
    run = runs.row(0, named=True)
    lab = label or C.run_labels(runs)["run"][0]
    outcome = C.outcomes(runs)["outcome"][0]
    q = t.get("quarantine")
    sfx = "" if key == "run" else f"{key}-"
    charts: dict[str, Any] = {}
    frames = {k: t.get(k) for k in ("model_calls", "tool_calls", "approvals", "verifications",
                                    "events")}
    if C.timeline_segments(runs=runs, **frames).height:
        charts[f"{sfx}timeline"] = C.step_timeline(runs=runs, **frames, max_runs=1,
                                                   width=width)
    states = t.get("states")
    if states is not None and states.height:
        charts[f"{sfx}burn"] = burn_chart(
            states, run, width=width - 80, mark_sequence=mark_sequence,
            max_points=PAGE_CAPS["burn_points_embedded" if embedded else "burn_points"])

    def chart_div(name: str, what: str) -> str:
        k = f"{sfx}{name}"
        if k in charts:
            return f'<div class="vega-chart" id="chart-{k}" data-chart="{k}"></div>'
        return f'<p class="muted">Nothing to draw: {what}.</p>'

    state_cap = PAGE_CAPS["state_rows_embedded" if embedded else "state_rows"]
    tool_cap = PAGE_CAPS["tool_rows_embedded" if embedded else "tool_rows"]
    back = ('<p><a href="#sec-audit">↑ audit table</a> · <a href="#sec-runs">run pages</a></p>'
            if embedded else "")
    h = "h3" if embedded else "h2"
    html = f"""<section id="{key}" class="runpage"><h2>Run: {_e(lab)}</h2>{back}
{_summary_html(run, sources, redact, outcome, q.height if q is not None else 0)}
<{h}>Timeline</{h}><p class="what">Model calls, tool calls (colour = effect), approval waits,
verification and resume gaps, in seconds since the run started (long resume gaps collapsed).</p>
{chart_div("timeline", "no timed model call, tool call, approval or verification")}
<{h} id="{key}-sec-transcript">Transcript</{h}><p class="what">What the agent did, in the log's
order: the conversation's system and user messages, each model step with its reply, finish
reason and tokens, each tool call with its arguments, approval, outcome, error and result
preview, final checks, resumes and continuations, and quarantined lines where they fall.
Click a segment of the timeline to land on its entry; click an entry's bar to see it outlined
on the timeline{"; texts are left out (redacted)" if redact else ""}.</p>
{transcript_html(transcript_entries(t, run_dir, redact=redact), key=key,
                 cap=TRANSCRIPT_CAPS["entries_embedded"] if embedded else None,
                 chart=f"chart-{sfx}timeline" if f"{sfx}timeline" in charts else None)}
<{h}>Budgets, repeat guard and events</{h}><p class="what">After every event: the share of each
budget used (red: 100 %), the repeat count against the trip threshold, and the event in its lane.</p>
{chart_div("burn", "no replayed state (no accepted event)")}
<{h}>State after each event</{h}><p class="what">The replayed state (<code>states_df</code>) after
every accepted event; <i>changed</i> lists the fields the event changed.</p>
{_state_section(t.get("states"), state_cap)}
<{h}>Tool calls</{h}>{_tool_section(t.get("tool_calls"), tool_cap, redact)}
<{h}>Quarantined lines</{h}>{_quarantine_section(q, redact)}
</section>"""
    return RunPage(run_dir=run_dir, anchor=key, label=lab, html=html, charts=charts)


def render_run_html(tables: Mapping[str, pl.DataFrame | None], run_dir: str, *,
                    sources: Sequence[str], redact: bool = False) -> tuple[str, int]:
    """A standalone page for one run; returns ``(html, number of charts)``."""
    p = run_page(tables, run_dir, sources=sources, redact=redact)
    head = f"one run from {', '.join(sources) if not redact else 'the given PATH'}"
    return _page(f"Rivumi run: {p.label}", head, p.html, p.charts, redact=redact), len(p.charts)


# --------------------------------------------------------------------------- comparison
@dataclass
class Divergence:
    """Where two runs part (see :func:`divergence`)."""

    relation: str           # "fork" (b forks a), "fork-reverse" (a forks b) or "sequence"
    sequence: int | None    # first differing sequence (of a), None when identical
    shared_events: int      # events both histories share
    a_event: str | None     # a's event type at the divergence
    b_event: str | None     # b's event type at the divergence
    message: str
    state_diff: pl.DataFrame  # field, a, b at the divergence (states after the shared part)
    final_diff: pl.DataFrame  # field, a, b for the final states


def _state_row(states: pl.DataFrame | None, sequence: int | None = None) -> dict[str, Any]:
    if states is None or states.height == 0:
        return {}
    s = states.sort("sequence")
    if sequence is not None:
        s = s.filter(pl.col("sequence") <= sequence)
        if s.height == 0:
            return {}
    row = s.row(s.height - 1, named=True)
    return {c: row.get(c) for c in STATE_COLUMNS if c in row}


def _diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> pl.DataFrame:
    rows = []
    for c in STATE_COLUMNS:
        if c not in a and c not in b:
            continue
        va, vb = a.get(c), b.get(c)
        if isinstance(va, float) or isinstance(vb, float):
            same = va is not None and vb is not None and abs(float(va) - float(vb)) < 1e-6
        else:
            same = va == vb
        rows.append({"field": c, "a": None if va is None else str(va),
                     "b": None if vb is None else str(vb), "differs": not same})
    return pl.DataFrame(rows, schema={"field": pl.Utf8, "a": pl.Utf8, "b": pl.Utf8,
                                      "differs": pl.Boolean})


def divergence(a: Tables, b: Tables) -> Divergence:
    """Where runs ``a`` and ``b`` (each its own tables, :func:`run_tables`) diverge.

    When one is a fork of the other (``forks_df`` link), the fork's history is the source's
    events up to the fork point: they diverge right after it, and the fork starts from the
    source's state there. Otherwise the events are aligned by sequence and the first one whose
    type or data differs is the divergence (timestamps and the envelope's run id are not
    compared: copies of the same history differ there).

    >>> import polars as pl
    >>> ev = lambda types: {"events": pl.DataFrame({"sequence": list(range(len(types))),
    ...     "event_type": types, "data": ["{}"] * len(types)}), "forks": None, "states": None,
    ...     "runs": pl.DataFrame({"run_dir": ["x"]})}
    >>> d = divergence(ev(["a", "b", "c"]), ev(["a", "b", "x", "y"]))
    >>> d.sequence, d.shared_events, d.a_event, d.b_event
    (2, 2, 'c', 'x')
    """
    ra, rb = a["runs"], b["runs"]
    rda = ra["run_dir"][0] if ra is not None and ra.height else None
    rdb = rb["run_dir"][0] if rb is not None and rb.height else None
    for forks, src, fork, rel in ((b.get("forks"), rda, b, "fork"),
                                  (a.get("forks"), rdb, a, "fork-reverse")):
        if forks is None or src is None or "source_run_dir" not in forks.columns:
            continue
        link = forks.filter((pl.col("row_kind") == "fork_link")
                            & (pl.col("source_run_dir") == src))
        if link.height == 0:
            continue
        fp = link["fork_point_sequence"][0]
        source = a if rel == "fork" else b
        sev = source.get("events")
        nxt = (sev.filter(pl.col("sequence") > fp).sort("sequence") if sev is not None
               else pl.DataFrame())
        next_type = nxt["event_type"][0] if nxt.height else None
        fev = fork.get("events")
        own = fev.sort("sequence")["event_type"].to_list() if fev is not None else []
        at_fork = _state_row(source.get("states"), fp)
        fork_last = _state_row(fork.get("states"))
        if fp is None:
            msg = "the fork link has no fork point sequence"
        else:
            msg = (f"{'b' if rel == 'fork' else 'a'} is a fork of "
                   f"{'a' if rel == 'fork' else 'b'} at sequence {fp} "
                   f"({link['fork_point_event_type'][0]}): both share the source's events "
                   f"0…{fp}; after it the source continued with "
                   f"{nxt.height} event(s) (next: {next_type or 'none'}) and the fork wrote "
                   f"{len(own)} event(s) of its own ({', '.join(own[:4]) or 'none'}"
                   f"{'…' if len(own) > 4 else ''}).")
        a_ev, b_ev = (next_type, own[0] if own else None) if rel == "fork" else (
            own[0] if own else None, next_type)
        final_src = _state_row(source.get("states"))
        fin = (_diff(final_src, fork_last) if rel == "fork" else _diff(fork_last, final_src))
        # the fork starts from the source's state at the fork point (its seed); the fork's
        # own states_df replays only its own log, so the state "at the divergence" is that one
        return Divergence(rel, None if fp is None else int(fp) + 1,
                          int(fp) + 1 if fp is not None else 0, a_ev, b_ev, msg,
                          _diff(at_fork, at_fork), fin)
    ea, eb = a.get("events"), b.get("events")

    def norm(e: pl.DataFrame | None) -> pl.DataFrame:
        if e is None or e.height == 0:
            return pl.DataFrame(schema={"sequence": pl.Int64, "event_type": pl.Utf8,
                                        "data": pl.Utf8})
        return e.select("sequence", "event_type",
                        C._col(e, "data", pl.Utf8)).unique("sequence", keep="first")

    j = norm(ea).join(norm(eb), on="sequence", how="full", coalesce=True, suffix="_b").sort(
        "sequence")
    diff = j.filter(pl.col("event_type").ne_missing(pl.col("event_type_b"))
                    | pl.col("data").ne_missing(pl.col("data_b")))
    sa, sb = a.get("states"), b.get("states")
    if diff.height == 0:
        return Divergence("sequence", None, j.height, None, None,
                          f"identical: the same {j.height} event(s) (type and data) in both",
                          _diff(_state_row(sa), _state_row(sb)),
                          _diff(_state_row(sa), _state_row(sb)))
    first = diff.row(0, named=True)
    seq = int(first["sequence"])
    shared = j.filter(pl.col("sequence") < seq).height
    what = ("a different event type" if first["event_type"] != first["event_type_b"]
            else "the same event type with different data")
    if first["event_type"] is None or first["event_type_b"] is None:
        what = f"an event only {'b' if first['event_type'] is None else 'a'} has"
    msg = (f"the first {shared} event(s) are the same; at sequence {seq} the runs have {what} "
           f"(a: {first['event_type'] or 'none'}, b: {first['event_type_b'] or 'none'}); "
           f"{diff.height} of {j.height} aligned sequence(s) differ.")
    return Divergence("sequence", seq, shared, first["event_type"], first["event_type_b"],
                      msg, _diff(_state_row(sa, seq), _state_row(sb, seq)),
                      _diff(_state_row(sa), _state_row(sb)))


def state_diff_rows(a: pl.DataFrame | None, b: pl.DataFrame | None,
                    start: int) -> pl.DataFrame:
    """Per sequence from ``start`` on (aligned by sequence): each run's event type and the
    state fields whose values differ, ``field a→b``.

    >>> import polars as pl
    >>> a = pl.DataFrame({"sequence": [0, 1], "event_type": ["x", "y"], "step": [0, 1]})
    >>> b = pl.DataFrame({"sequence": [0, 1], "event_type": ["x", "z"], "step": [0, 2]})
    >>> state_diff_rows(a, b, 0)["differs"].to_list()
    ['', 'step 1→2']
    """
    cols = [c for c in STATE_COLUMNS if (a is not None and c in a.columns)
            or (b is not None and c in b.columns)]

    def side(s: pl.DataFrame | None) -> pl.DataFrame:
        if s is None:
            return pl.DataFrame(schema={"sequence": pl.Int64, "event_type": pl.Utf8})
        return s.select("sequence", "event_type",
                        *[pl.col(c).cast(pl.Utf8) for c in cols if c in s.columns])

    j = side(a).join(side(b), on="sequence", how="full", coalesce=True, suffix="_b").filter(
        pl.col("sequence") >= start).sort("sequence")
    parts = []
    for c in cols:
        ca = pl.col(c) if c in j.columns else pl.lit(None, pl.Utf8)
        cb = pl.col(f"{c}_b") if f"{c}_b" in j.columns else pl.lit(None, pl.Utf8)
        parts.append(pl.when(ca.ne_missing(cb)).then(
            pl.format("{} {}→{}", pl.lit(c), ca.fill_null("∅"), cb.fill_null("∅"))))
    return j.select("sequence", pl.col("event_type").alias("a event"),
                    pl.col("event_type_b").alias("b event"),
                    pl.concat_str(parts, separator=", ", ignore_nulls=True).fill_null("")
                    .alias("differs"))


_SIDE_FIELDS = (("kind", "kind"), ("verdict", "verdict"), ("terminal_reason", "terminal reason"),
                ("started_at", "started"), ("events", "events"),
                ("quarantined_lines", "quarantined lines"), ("step", "steps"),
                ("max_steps", "max steps"), ("total_tokens", "tokens"),
                ("max_total_tokens", "token budget"),
                ("wall_time_used_seconds", "wall s used"),
                ("active_wall_time_seconds", "charged wall s"),
                ("wall_time_seconds", "wall-time budget s"))


def _side_by_side(ra: Mapping[str, Any], rb: Mapping[str, Any], oa: str, ob: str) -> str:
    rows = [("outcome", oa, ob)] + [(t, ra.get(c), rb.get(c)) for c, t in _SIDE_FIELDS]
    mark = ' class="differs"'
    body = "".join(
        f"<tr{mark if va != vb else ''}><th>{_e(t)}</th>{_cell(va)}{_cell(vb)}</tr>"
        for t, va, vb in rows)
    return ('<div class="tablewrap"><table><thead><tr><th></th><th>a</th><th>b</th></tr>'
            f"</thead><tbody>{body}</tbody></table></div>")


def compare_chart(a: Tables, b: Tables, d: Divergence, *, width: int = 640) -> Any:
    """Both runs on shared axes: their step timelines one above the other, then each
    budget's fraction used along the history (solid a, dashed b) with the divergence as a
    purple rule. A fork's own events are placed after the shared history (its sequence plus
    the number of shared events)."""
    cat = {}
    for name in ("runs", "model_calls", "tool_calls", "approvals", "verifications", "events"):
        parts = [t[name] for t in (a, b) if t.get(name) is not None]
        cat[name] = pl.concat(parts, how="diagonal_relaxed") if parts else None
    timeline = C.step_timeline(**cat, max_runs=2, width=width)
    parts = []
    for side, t in (("a", a), ("b", b)):
        st, runs = t.get("states"), t.get("runs")
        if st is None or st.height == 0 or runs is None or runs.height == 0:
            continue
        shift = d.shared_events if (d.relation == "fork" and side == "b") or (
            d.relation == "fork-reverse" and side == "a") else 0
        bd = burn_down_data(_thin(st.sort("sequence"), PAGE_CAPS["burn_points"]),
                            runs.row(0, named=True))
        parts.append(bd.with_columns(pl.lit(side).alias("run"),
                                     (pl.col("sequence") + shift).alias("position")))
    if not parts or sum(p.height for p in parts) == 0:
        return timeline
    bd = pl.concat(parts)
    x = alt.X("position:Q", title="position in the history (sequence)")
    lines = alt.Chart(C._values(bd)).mark_line(interpolate="step-after").encode(
        x=x, y=alt.Y("fraction:Q", title="budget used", axis=alt.Axis(format="%")),
        color=alt.Color("budget:N", scale=alt.Scale(domain=["steps", "wall time", "tokens"],
                                                    range=["#1f77b4", "#ff7f0e", "#2ca02c"]),
                        legend=C._legend("budget", orient="bottom")),
        strokeDash=alt.StrokeDash("run:N", scale=alt.Scale(domain=["a", "b"],
                                                           range=[[1, 0], [6, 3]]),
                                  legend=C._legend("run", orient="bottom")),
        detail="run:N",
        tooltip=["run:N", "sequence:Q", "event_type:N", "budget:N",
                 alt.Tooltip("fraction:Q", format=".1%")])
    layers = [lines]
    if d.sequence is not None:
        layers.append(alt.Chart(alt.Data(values=[{"position": d.sequence}]))
                      .mark_rule(color="#6a1b9a", strokeDash=[5, 3], size=2)
                      .encode(x=x, tooltip=[alt.Tooltip("position:Q", title="diverges at")]))
    burn = alt.layer(*layers).properties(
        width=width, height=160,
        title=alt.TitleParams("Budgets used along the history", anchor="start",
                              subtitle="solid: a, dashed: b; purple: where they diverge"))
    return alt.vconcat(timeline, burn).resolve_scale(color="independent")


def compare_page(tables: Mapping[str, pl.DataFrame | None], run_a: str, run_b: str, *,
                 sources: Sequence[str], redact: bool = False) -> tuple[str, dict[str, Any],
                                                                         Divergence]:
    """Two runs side by side: where they diverge (fork point or first differing event, the
    state fields that differ there and at the end), both runs on shared axes, then each
    run's page.

    Returns ``(html body, charts, divergence)``.
    """
    per = run_tables(tables, [run_a, run_b])
    for rd in (run_a, run_b):
        if per[rd]["runs"] is None or per[rd]["runs"].height == 0:  # type: ignore[union-attr]
            raise KeyError(f"no run {rd!r} in the tables")
    d = divergence(per[run_a], per[run_b])
    ra = per[run_a]["runs"].row(0, named=True)  # type: ignore[union-attr]
    rb = per[run_b]["runs"].row(0, named=True)  # type: ignore[union-attr]
    oa = C.outcomes(per[run_a]["runs"])["outcome"][0]  # type: ignore[arg-type]
    ob = C.outcomes(per[run_b]["runs"])["outcome"][0]  # type: ignore[arg-type]
    pa = run_page(tables, run_a, sources=sources, redact=redact, key="a", per_run=per[run_a],
                  embedded=True,
                  mark_sequence=d.sequence if d.relation != "fork-reverse" else None)
    pb = run_page(tables, run_b, sources=sources, redact=redact, key="b", per_run=per[run_b],
                  embedded=True,
                  mark_sequence=d.sequence if d.relation == "sequence" else None)
    charts = {"compare": compare_chart(per[run_a], per[run_b], d), **pa.charts, **pb.charts}
    rows_html = ""
    if d.relation == "sequence" and d.sequence is not None:
        rows = state_diff_rows(per[run_a]["states"], per[run_b]["states"], d.sequence)
        cap = PAGE_CAPS["diff_rows"]
        note = (f'<p class="muted">First {cap} of {rows.height} sequences from the divergence '
                "shown (cap).</p>" if rows.height > cap else "")
        rows_html = ("<h3>State differences from the divergence on</h3>" + note
                     + _rows_table(rows.head(cap), rows.columns,
                                   code_cols=("a event", "b event")))

    def diff_table(df: pl.DataFrame, one: bool = False) -> str:
        if df.height == 0:
            return '<p class="muted">No replayed state to compare.</p>'
        if one:
            return _rows_table(df, ["field", "a"], ["field", "state at the fork point"])
        return _rows_table(df.with_columns(
            pl.when(pl.col("differs")).then(pl.lit("differs")).otherwise(pl.lit(""))
            .alias("differs")), ["field", "a", "b", "differs"])

    fork = d.relation != "sequence"
    at = ("the source's replayed state after the fork point: the state the fork starts from "
          "(its fork seed)" if fork else "each run's state after the last shared event"
          if d.sequence is not None else "each run's final state")
    html = f"""<section id="sec-diverge"><h2>Where they diverge</h2>
<p><b>a</b>: <a href="#a">{_e(pa.label)}</a> (<code>{_e(ra.get("run_id"))}</code>) ·
<b>b</b>: <a href="#b">{_e(pb.label)}</a> (<code>{_e(rb.get("run_id"))}</code>)</p>
<p class="diverge">{_e(d.message)}</p>
<div class="two"><div><h3>The two runs</h3>{_side_by_side(ra, rb, oa, ob)}</div>
<div><h3>State at the divergence</h3><p class="muted">{_e(at)}</p>
{diff_table(d.state_diff, one=fork)}</div></div>
<h3>Both runs</h3>
<div class="vega-chart" id="chart-compare" data-chart="compare"></div>
<h3>Final state</h3><p class="muted">each run's state after its last event</p>
{diff_table(d.final_diff)}{rows_html}</section>
{pa.html}{pb.html}"""
    return html, charts, d


def render_compare_html(tables: Mapping[str, pl.DataFrame | None], run_a: str, run_b: str,
                        *, sources: Sequence[str], redact: bool = False
                        ) -> tuple[str, int, Divergence]:
    """A standalone comparison page; returns ``(html, number of charts, divergence)``."""
    body, charts, d = compare_page(tables, run_a, run_b, sources=sources, redact=redact)
    names = [os.path.basename(os.path.normpath(s)) for s in sources]
    return (_page("Rivumi runs compared", f"a: {names[0]} · b: {names[-1]}", body, charts,
                  redact=redact), len(charts), d)
