"""Altair chart builders over the toolkit's polars tables (no I/O, no display side effects).

Every builder takes the frames returned by the ``*_df`` loaders (``runs_df``,
``model_calls_df``, ``tool_calls_df``, ``approvals_df``, ``verifications_df``, ``events_df``,
``states_df``, ``forks_df``) and returns an ``alt.Chart`` or a compound chart. Optional frames
may be ``None``; the builder then falls back to what the other frames can tell.

Size discipline (1,000+ runs): all joins, aggregation and sampling happen in polars, and only
the rows a chart draws are handed to altair, inlined as ``values``. Per-run charts draw at most
``max_runs`` runs (defaults in :data:`CAPS`), picked by :func:`pick_runs`: the most
*interesting* runs first (non-``terminal`` verdicts, failures, budget trips, near misses), then
the largest. Fleet-wide distributions are aggregated over **all** runs, so nothing is lost from
the counts. A chart's title says when a cap cut runs off.

Charts carry no free text from the runs: only run ids, event types, sequences, timestamps,
numbers, codes, tool names, effects and decisions. ``run_dir`` never reaches a chart (it can be
an absolute path); runs are labelled by :func:`run_labels`.

>>> import polars as pl
>>> runs = pl.DataFrame({"run_dir": ["a"], "run_id": ["r1"], "kind": ["native"],
...                      "verdict": ["terminal"], "terminal_reason": ["verified"],
...                      "step": [3], "total_tokens": [900], "wall_time_used_seconds": [4.0]})
>>> spec = fleet_overview(runs).to_dict()
>>> len(spec["vconcat"])
2
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from typing import Any, Literal

import altair as alt
import polars as pl

from ..tables.facts import OUTCOME_GROUPS, TERMINAL_OUTCOMES, outcome_group

__all__ = [
    "CAPS",
    "OUTCOME_ORDER",
    "REPEAT_THRESHOLD",
    "cost_by_model",
    "ecdf_points",
    "fleet_overview",
    "fork_points",
    "outcome_mix",
    "outcomes",
    "pick_runs",
    "repeat_guard",
    "run_labels",
    "step_timeline",
    "task_kinds",
    "token_budget",
    "tool_error_rates",
    "tool_error_table",
    "top_runs",
    "wall_time_budget",
]

REPEAT_THRESHOLD = 3
"""The repeat guard trips at the third identical call in a row (§10.1)."""

CAPS: Mapping[str, int] = {
    "timeline_runs": 40,       # rows (runs) in the step timeline
    "timeline_segments": 6000,  # drawn segments in the step timeline
    "repeat_runs": 30,         # runs drawn as repeat-count lines
    "budget_runs": 40,         # runs drawn in the wall-time / token budget charts
    "budget_points": 5000,     # points of all burn-down / cumulative lines together
    "band_points": 1200,       # points of the runs drawn over a burn-down's quantile bands
    "fork_runs": 30,           # rows in the fork-point chart
    "fork_points": 4000,       # safe fork points drawn
    "fleet_points": 3000,      # runs drawn in the fleet scatter (the bars count all runs)
    "reasons": 15,             # terminal reasons shown before folding into "(other)"
}
"""Default caps per chart. Each builder takes the relevant cap as a keyword argument."""

VERDICT_COLORS: Mapping[str, str] = {
    "resumable": "#2ca02c", "resync": "#98df8a", "side_effect_uncertain": "#ff7f0e",
    "terminal": "#1f77b4", "corrupt": "#d62728", "not_resumable": "#7f7f7f",
    "error": "#9467bd",
}
EFFECT_COLORS: Mapping[str, str] = {
    "read": "#4c9be8", "modify": "#f2a93b", "execute": "#d9534f", "modify_execute": "#a05195",
    "unknown": "#9e9e9e",
}
SEGMENT_COLORS: Mapping[str, str] = {
    "model call": "#6c757d", "approval wait": "#ffd166", "verification": "#06d6a0",
    "resume gap": "#ef476f",
    **{f"tool: {k}": v for k, v in EFFECT_COLORS.items()},
}
_FAILED_STATUS = ("run.failed", "run.error")
TOKEN_GROUPS = ("token_budget_exceeded", "over budget", "≥ 90 % of budget", "within budget",
                "no budget")
"""How a run drawn in the token budget chart ends against its ``max_total_tokens``."""
TOKEN_GROUP_COLORS = ("#d62728", "#ff7f0e", "#e6b800", "#4c78a8", "#9e9e9e")


# --------------------------------------------------------------------------- helpers
def _jsonable(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


class _Rows:
    """Rows already in JSON form, handed to altair as one opaque value.

    altair deep-copies lists and dicts inside a chart every time a chart is derived from it
    (``encode``, ``properties``, ``layer``, ...), and its ``to_dict`` walks every cell of a
    list with a slow protocol check per value (seconds per report at 10,000 runs). An object
    with ``to_dict`` and ``_schema`` (altair's ``SchemaLike``) is kept by reference when
    copied and serialised by one call that returns the list as it is.

    >>> alt.Chart(alt.Data(values=_Rows([{"a": 1}]))).mark_point().to_dict()["data"]
    {'values': [{'a': 1}]}
    """

    _schema: Mapping[str, Any] = {"type": "array"}
    __slots__ = ("_digest", "rows")

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self._digest: str | None = None

    def __repr__(self) -> str:
        # altair names a view by hashing its data's text: a digest of the rows keeps the
        # names the same from run to run (an object address would not)
        if self._digest is None:
            import hashlib

            text = json.dumps(self.rows, sort_keys=True, default=str)
            self._digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return f"rows:{len(self.rows)}:{self._digest}"

    def to_dict(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Any:
        return iter(self.rows)

    def __getitem__(self, i: Any) -> Any:
        return self.rows[i]


def _values(df: pl.DataFrame) -> alt.Data:
    """Inline a (small, already reduced) frame as Vega-Lite ``values`` (see :class:`_Rows`)."""
    rows = [{k: _jsonable(v) for k, v in r.items()} for r in df.iter_rows(named=True)]
    return alt.Data(values=_Rows(rows))


def _has(df: pl.DataFrame | None, *cols: str) -> bool:
    return df is not None and all(c in df.columns for c in cols)


def _col(df: pl.DataFrame, name: str, dtype: pl.DataType, default: Any = None) -> pl.Expr:
    if name in df.columns:
        return pl.col(name).cast(dtype)
    return pl.lit(default, dtype=dtype).alias(name)


def _empty(title: str, message: str = "no data") -> alt.Chart:
    """A placeholder chart that still renders (one text mark)."""
    return (alt.Chart(alt.Data(values=[{"message": message}]), title=title)
            .mark_text(fontSize=13, color="#777")
            .encode(text="message:N")
            .properties(width=520, height=40))


def _title(text: str, shown: int, total: int, unit: str = "runs") -> alt.TitleParams:
    sub = (f"{shown} of {total} {unit} shown (cap; most notable first)" if shown < total
           else f"{total} {unit}")
    return alt.TitleParams(text=text, subtitle=sub, anchor="start")


_TASK_COLS = ("task_kind", "instruction_summary", "repository")


def run_labels(runs: pl.DataFrame) -> pl.DataFrame:
    """Short, readable, unique display labels per ``run_dir`` (never the path itself): the
    run id's first 8 characters, then what the run was.

    Args:
        runs: a frame with ``run_dir`` and ``run_id``; when it also has a task column
            (``task_kind``, ``instruction_summary`` cut to 24 characters, or ``repository``'s
            last part), that follows the id; else the ``terminal_reason`` (or the ``kind``
            of a run that is not native, or ``unfinished``).

    Returns:
        ``run_dir``, ``run_id`` and ``run`` (the label), made unique with ``#n``. The id
        comes first so that runs of one task (whose instructions read alike) still differ;
        the full id belongs in tooltips.

    >>> import polars as pl
    >>> f = pl.DataFrame({"run_dir": ["x/a", "y/a", "z"], "run_id": ["a", "a", None]})
    >>> run_labels(f)["run"].to_list()
    ['a', 'a#2', 'z']
    >>> g = pl.DataFrame({"run_dir": ["p", "q"], "run_id": ["3e1bd05e00d3", "91c0aa2f7b"],
    ...                   "instruction_summary": ["Fix the calculator bug so that it adds"] * 2,
    ...                   "terminal_reason": ["verified", None]})
    >>> run_labels(g)["run"].to_list()
    ['3e1bd05e Fix the calculator bug …', '91c0aa2f Fix the calculator bug …']
    >>> run_labels(g.drop("instruction_summary"))["run"].to_list()
    ['3e1bd05e verified', '91c0aa2f unfinished']
    """
    extra = [c for c in ("task_kind", "instruction_summary", "repository", "terminal_reason",
                         "kind") if c in runs.columns]
    base = runs.select(
        "run_dir",
        pl.col("run_id") if "run_id" in runs.columns else pl.lit(None, pl.Utf8).alias("run_id"),
        *extra,
    ).unique("run_dir", keep="first", maintain_order=True)
    ident = (pl.coalesce(pl.col("run_id"),
                         pl.col("run_dir").map_elements(os.path.basename, return_dtype=pl.Utf8))
             .fill_null("?").str.slice(0, 8))
    what: pl.Expr | None = None
    for c in _TASK_COLS:
        if c in base.columns:
            e = pl.col(c).cast(pl.Utf8).str.strip_chars()
            if c == "repository":
                e = e.str.replace(r".*/", "")
            else:
                e = pl.when(e.str.len_chars() > 24).then(e.str.slice(0, 23) + "…").otherwise(e)
            e = e.replace("", None)
            what = e if what is None else pl.coalesce(what, e)
    if "terminal_reason" in base.columns:
        reason = pl.col("terminal_reason").cast(pl.Utf8)
        if "kind" in base.columns:
            reason = pl.coalesce(reason, pl.when(pl.col("kind") != "native")
                                 .then(pl.col("kind")))
        reason = reason.fill_null("unfinished")
        what = reason if what is None else pl.coalesce(what, reason)
    short = ident if what is None else pl.concat_str([ident, what], separator=" ",
                                                     ignore_nulls=True)
    base = base.with_columns(short.alias("_s"))
    base = base.with_columns(pl.int_range(pl.len()).over("_s").alias("_n"))
    return base.select(
        "run_dir", "run_id",
        pl.when(pl.col("_n") == 0).then(pl.col("_s"))
        .otherwise(pl.col("_s") + "#" + (pl.col("_n") + 1).cast(pl.Utf8)).alias("run"))


def _task_cols(runs: pl.DataFrame) -> list[str]:
    """The task columns :func:`run_labels` reads that ``runs`` has (kept in a chart's own
    per-run frame so its labels say the task)."""
    return [c for c in _TASK_COLS if c in runs.columns]


def pick_runs(runs: pl.DataFrame, limit: int, *, prefer: pl.Expr | None = None,
              size: str | None = None, ordered: bool = False) -> pl.DataFrame:
    """The ``limit`` most notable runs of ``runs`` (rows keep all columns).

    With ``ordered=True`` the result is sorted most notable first even when nothing is cut.

    Order: rows where ``prefer`` holds, then runs whose verdict is not ``terminal``, then
    failed terminal reasons, then the largest ``size`` column, then ``run_dir``.

    >>> import polars as pl
    >>> f = pl.DataFrame({"run_dir": list("abc"), "verdict": ["terminal", "corrupt", "terminal"],
    ...                   "step": [1, 2, 9]})
    >>> pick_runs(f, 2, size="step")["run_dir"].to_list()
    ['b', 'c']
    """
    if runs.height <= limit and not ordered:
        return runs
    keys: list[pl.Expr] = []
    if prefer is not None:
        keys.append(prefer.fill_null(False).not_())
    if "verdict" in runs.columns:
        keys.append(pl.col("verdict").fill_null("") == "terminal")
    if "terminal_reason" in runs.columns:
        keys.append(pl.col("terminal_reason").fill_null("")
                    .is_in(["verified", "no_changes", ""]))
    if size is not None and size in runs.columns:
        keys.append(pl.col(size).fill_null(-1) * -1)
    keys.append(pl.col("run_dir"))
    return (runs.with_columns([k.alias(f"_k{i}") for i, k in enumerate(keys)])
            .sort([f"_k{i}" for i in range(len(keys))])
            .head(limit)
            .drop([f"_k{i}" for i in range(len(keys))]))


def _t0(runs: pl.DataFrame | None, frames: Iterable[tuple[pl.DataFrame | None, str]]
        ) -> pl.DataFrame:
    """Run start per run_dir: ``runs.started_at``, else the earliest timestamp seen."""
    parts = []
    for df, col in frames:
        if _has(df, "run_dir", col):
            parts.append(df.select("run_dir", pl.col(col).alias("t")))
    seen = (pl.concat(parts).group_by("run_dir", maintain_order=True).agg(pl.col("t").min().alias("t_min"))
            if parts else pl.DataFrame(schema={"run_dir": pl.Utf8,
                                               "t_min": pl.Datetime("us", "UTC")}))
    if _has(runs, "run_dir", "started_at"):
        assert runs is not None
        seen = (runs.select("run_dir", "started_at").join(seen, on="run_dir", how="full",
                                                          coalesce=True)
                .select("run_dir", pl.coalesce("started_at", "t_min").alias("t0")))
    else:
        seen = seen.rename({"t_min": "t0"})
    return seen


def _secs(col: str) -> pl.Expr:
    return (pl.col(col) - pl.col("t0")).dt.total_microseconds() / 1e6


def _json_field(col: str, key: str, dtype: pl.DataType = pl.Utf8) -> pl.Expr:
    return pl.col(col).str.json_path_match(f"$.{key}").cast(dtype, strict=False)


# --------------------------------------------------------------------------- fleet
def fleet_overview(runs: pl.DataFrame, *, max_points: int = CAPS["fleet_points"],
                   max_reasons: int = CAPS["reasons"]) -> alt.VConcatChart:
    """Runs by verdict, kind and terminal reason; steps, tokens and time per run.

    Top row: three count bars (all runs, aggregated in polars). Bottom row: one point per run
    (steps vs tokens, size = wall time used, colour = verdict; capped at ``max_points``,
    drawn from the runs that have both steps and tokens, the others counted in the subtitle)
    and a histogram of wall time used. Click a verdict in the legend (or a verdict bar) to
    highlight its runs everywhere. With no run to plot, each panel says so.

    Args:
        runs: ``runs_df`` (needs ``run_dir``, ``verdict``; uses ``kind``, ``terminal_reason``,
            ``step``, ``total_tokens``, ``wall_time_used_seconds`` when present: the run
            facts of :mod:`rivumi_analysis.tables.facts`).
        max_points: cap on scatter points.
        max_reasons: terminal reasons shown before the rest fold into ``(other)``.

    >>> import polars as pl
    >>> r = pl.DataFrame({"run_dir": ["a", "b"], "run_id": ["a", "b"],
    ...                   "verdict": ["terminal", "corrupt"]})
    >>> d = fleet_overview(r).to_dict()
    >>> d["vconcat"][0]["hconcat"][0]["encoding"]["y"]["field"]
    'verdict'
    """
    if runs.height == 0:
        return alt.vconcat(_empty("Fleet overview", "no runs"), _empty("Runs", "no runs"))
    r = runs.with_columns(
        pl.col("verdict").fill_null("?"),
        _col(runs, "kind", pl.Utf8).fill_null("?").alias("kind"),
        _col(runs, "terminal_reason", pl.Utf8).fill_null("(none)").alias("terminal_reason"),
        _col(runs, "step", pl.Int64).alias("step"),
        _col(runs, "total_tokens", pl.Int64).alias("total_tokens"),
        _col(runs, "wall_time_used_seconds", pl.Float64).alias("wall_s"),
    )
    verdict_sel = alt.selection_point(fields=["verdict"], bind="legend", name="verdict_pick")
    vscale = alt.Scale(domain=list(VERDICT_COLORS), range=list(VERDICT_COLORS.values()))
    vcolor = alt.Color("verdict:N", scale=vscale, legend=_legend("verdict (click)", orient="bottom", columns=4))
    opacity = alt.condition(verdict_sel, alt.value(1.0), alt.value(0.15))

    by_verdict = r.group_by("verdict", maintain_order=True).len("runs")
    c_verdict = (alt.Chart(_values(by_verdict), title=f"Runs by verdict ({r.height})")
                 .mark_bar()
                 .encode(y=alt.Y("verdict:N", sort="-x", title=None),
                         x=alt.X("runs:Q", title="runs"), color=vcolor, opacity=opacity,
                         tooltip=["verdict:N", "runs:Q"])
                 .add_params(verdict_sel)
                 .properties(width=170, height=alt.Step(18)))
    by_kind = r.group_by("kind", "verdict", maintain_order=True).len("runs")
    c_kind = (alt.Chart(_values(by_kind), title="Runs by kind").mark_bar()
              .encode(y=alt.Y("kind:N", sort="-x", title=None), x=alt.X("sum(runs):Q",
                                                                          title="runs"),
                      color=vcolor, opacity=opacity,
                      tooltip=["kind:N", "verdict:N", "runs:Q"])
              .properties(width=170, height=alt.Step(18)))
    top = (r.group_by("terminal_reason", maintain_order=True).len("n").sort(["n", "terminal_reason"],
                                                       descending=[True, False])
           .head(max_reasons)["terminal_reason"].to_list())
    by_reason = (r.with_columns(pl.when(pl.col("terminal_reason").is_in(top))
                                .then(pl.col("terminal_reason")).otherwise(pl.lit("(other)"))
                                .alias("terminal_reason"))
                 .group_by("terminal_reason", "verdict", maintain_order=True).len("runs"))
    c_reason = (alt.Chart(_values(by_reason), title="Runs by terminal reason").mark_bar()
                .encode(y=alt.Y("terminal_reason:N", sort="-x", title=None),
                        x=alt.X("sum(runs):Q", title="runs"), color=vcolor, opacity=opacity,
                        tooltip=["terminal_reason:N", "verdict:N", "runs:Q"])
                .properties(width=210, height=alt.Step(16)))

    # Charged wall time bins (over all runs, in polars); a click on a bin picks its runs in
    # the scatter (linked selection, with the verdict pick).
    w = r.filter(pl.col("wall_s").is_not_null())
    nb = 20
    bin_w = max(float(w["wall_s"].max() or 0.0), 1e-9) / nb if w.height else 1.0
    wall_bin = (pl.col("wall_s") / bin_w).floor().clip(0, nb - 1).cast(pl.Int64)
    bin_sel = alt.selection_point(fields=["b"], name="wall_bin", on="click",
                                  clear="dblclick")
    linked = alt.condition(verdict_sel & bin_sel, alt.value(1.0), alt.value(0.12))
    # the sample is drawn from the runs that have what the scatter plots (issue 29: a
    # sample of runs without values drew empty axes)
    plotted = r.filter(pl.col("step").is_not_null() & pl.col("total_tokens").is_not_null())
    left_out = r.height - plotted.height
    pts = pick_runs(plotted, max_points, size="total_tokens")
    tok = plotted["total_tokens"].drop_nulls()
    # Tokens spanning more than two orders of magnitude get a log axis.
    log_tokens = bool(tok.len() and (tok.max() or 0) > 100 * max(float(tok.median() or 1), 1))
    pts = pts.join(run_labels(pts), on="run_dir", how="left", suffix="_l").select(
        "run", pl.col("run_id"), "verdict", "kind", "terminal_reason", "step", "total_tokens",
        pl.col("wall_s").round(2), wall_bin.alias("b"))
    # two subtitle lines, not one: a long line widened the chart past its card at 1,024 px
    why = [f"{left_out} run(s) without steps or tokens left out (no readable log,",
           "or tokens the log cannot hold and no file that has them)"] if left_out else []
    c_scatter = (alt.Chart(_values(pts), title=alt.TitleParams(
        "Steps, tokens and time per run",
        subtitle=[_title("", pts.height, plotted.height).subtitle, *why,
                  "click a wall-time bin (right) or a verdict to pick its runs"],
        anchor="start"))
                 .mark_circle(stroke="#333", strokeWidth=0.3)
                 .encode(x=alt.X("step:Q", title="model steps"),
                         y=alt.Y("total_tokens:Q", title="total tokens" + (
                             " (log)" if log_tokens else ""),
                                 scale=alt.Scale(type="symlog") if log_tokens else alt.Undefined,
                                 axis=alt.Axis(format="~s")),
                         size=alt.Size("wall_s:Q", legend=_legend("wall s used",
                                                                  orient="bottom"),
                                       scale=alt.Scale(range=[15, 400])),
                         color=vcolor, opacity=linked,
                         tooltip=["run_id:N", "verdict:N", "kind:N", "terminal_reason:N",
                                  "step:Q", "total_tokens:Q",
                                  alt.Tooltip("wall_s:Q", title="wall s used")])
                 .properties(width=360, height=260))
    if plotted.height == 0:
        c_scatter = _empty("Steps, tokens and time per run",
                           f"no run has both steps and tokens ({r.height} run(s); "
                           "see the audit table)")
    if w.height:
        hist = (w.with_columns(wall_bin.alias("b"))
                .group_by("b", "verdict", maintain_order=True).len("runs")
                .with_columns((pl.col("b") * bin_w).round(2).alias("from_s"),
                              ((pl.col("b") + 1) * bin_w).round(2).alias("to_s")))
        no_wall = r.height - w.height
        c_hist = (alt.Chart(_values(hist), title=alt.TitleParams(
            "Wall time used per run", subtitle=[
                f"{w.height} runs (last turn, first to last event)"
                + (f"; {no_wall} without event times left out" if no_wall else ""),
                "click a bin, double-click to clear"],
            anchor="start")).mark_bar()
                  .encode(x=alt.X("from_s:Q", bin="binned", title="wall seconds used"),
                          x2="to_s:Q", y=alt.Y("sum(runs):Q", title="runs"), color=vcolor,
                          opacity=linked,
                          tooltip=["from_s:Q", "to_s:Q", "verdict:N", "runs:Q"])
                  .add_params(bin_sel)
                  .properties(width=260, height=260))
    else:
        c_hist = _empty("Wall time used per run", "no run has event times")
        if plotted.height:
            c_scatter = c_scatter.add_params(bin_sel)  # the linked condition needs it
    return alt.vconcat(alt.hconcat(c_verdict, c_kind, c_reason),
                       alt.hconcat(c_scatter, c_hist)).resolve_scale(color="shared")


# --------------------------------------------------------------------------- timeline
def timeline_segments(*, runs: pl.DataFrame | None = None,
                      model_calls: pl.DataFrame | None = None,
                      tool_calls: pl.DataFrame | None = None,
                      approvals: pl.DataFrame | None = None,
                      verifications: pl.DataFrame | None = None,
                      events: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per drawn segment: ``run_dir, lane, series, outcome, seq, start_s, end_s, name``.

    Seconds are relative to each run's start. Lanes: ``model``, ``tool``, ``approval``,
    ``verification``, ``resume``.

    >>> timeline_segments().columns[:4]
    ['run_dir', 'lane', 'series', 'outcome']
    """
    schema = {"run_dir": pl.Utf8, "lane": pl.Utf8, "series": pl.Utf8, "outcome": pl.Utf8,
              "seq": pl.Int64, "start": pl.Datetime("us", "UTC"),
              "end": pl.Datetime("us", "UTC"), "name": pl.Utf8}
    parts: list[pl.DataFrame] = []

    def add(df: pl.DataFrame) -> None:
        parts.append(df.select([pl.col(k).cast(v) for k, v in schema.items()]))

    if _has(model_calls, "run_dir", "requested_at", "completed_at"):
        assert model_calls is not None
        add(model_calls.select(
            "run_dir", pl.lit("model").alias("lane"), pl.lit("model call").alias("series"),
            _col(model_calls, "outcome", pl.Utf8).alias("outcome"),
            pl.col("requested_sequence").alias("seq"), pl.col("requested_at").alias("start"),
            pl.col("completed_at").alias("end"),
            pl.concat_str(pl.lit("step "), pl.col("step").cast(pl.Utf8)).alias("name")))
    if _has(tool_calls, "run_dir", "completed_at"):
        assert tool_calls is not None
        add(tool_calls.select(
            "run_dir", pl.lit("tool").alias("lane"),
            pl.concat_str(pl.lit("tool: "), pl.col("effect").fill_null("unknown")).alias("series"),
            pl.col("outcome"),
            pl.coalesce("started_sequence", "requested_sequence").alias("seq"),
            pl.coalesce("started_at", "requested_at", "completed_at").alias("start"),
            pl.col("completed_at").alias("end"), pl.col("name")))
    if _has(approvals, "run_dir", "requested_at", "closed_at"):
        assert approvals is not None
        add(approvals.filter(pl.col("outcome") != "reused").select(
            "run_dir", pl.lit("approval").alias("lane"), pl.lit("approval wait").alias("series"),
            pl.coalesce("decision", "outcome").alias("outcome"),
            pl.col("requested_sequence").alias("seq"), pl.col("requested_at").alias("start"),
            pl.col("closed_at").alias("end"), pl.col("effect").alias("name")))
    if _has(verifications, "run_dir", "started_at", "completed_at"):
        assert verifications is not None
        add(verifications.filter(pl.col("started_at").is_not_null()).select(
            "run_dir", pl.lit("verification").alias("lane"),
            pl.lit("verification").alias("series"), pl.col("outcome"),
            pl.col("started_sequence").alias("seq"), pl.col("started_at").alias("start"),
            pl.col("completed_at").alias("end"), pl.col("name")))
    if _has(events, "run_dir", "event_type", "created_at", "sequence"):
        assert events is not None
        gaps = (events.select("run_dir", "sequence", "event_type", "created_at")
                .with_columns(pl.col("created_at").shift(1).over("run_dir").alias("prev"))
                .filter(pl.col("event_type").is_in(["session.resumed", "session.continued"])))
        add(gaps.select(
            "run_dir", pl.lit("resume").alias("lane"), pl.lit("resume gap").alias("series"),
            pl.col("event_type").str.replace("session.", "", literal=True).alias("outcome"),
            pl.col("sequence").alias("seq"), pl.col("prev").alias("start"),
            pl.col("created_at").alias("end"), pl.col("event_type").alias("name")))
    if not parts:
        return pl.DataFrame(schema={**{k: v for k, v in schema.items()
                                       if k not in ("start", "end")},
                                    "start_s": pl.Float64, "end_s": pl.Float64})
    seg = pl.concat(parts).filter(pl.col("start").is_not_null())
    t0 = _t0(runs, [(seg, "start")])
    seg = seg.join(t0, on="run_dir", how="left").with_columns(
        pl.coalesce("end", "start").alias("end"))
    return seg.select("run_dir", "lane", "series", "outcome", "seq", "name",
                      _secs("start").round(3).alias("start_s"),
                      _secs("end").round(3).alias("end_s"))


def _collapse_gaps(seg: pl.DataFrame, limit: float) -> tuple[pl.DataFrame, int]:
    """Shorten every resume gap longer than ``limit`` seconds to ``limit`` and shift the
    run's later segments left by the removed time (``real_start_s`` keeps the clock time).

    >>> import polars as pl
    >>> s = pl.DataFrame({"run_dir": ["a"] * 3, "lane": ["model", "resume", "model"],
    ...     "start_s": [0.0, 2.0, 1000.0], "end_s": [2.0, 1000.0, 1003.0]})
    >>> out, n = _collapse_gaps(s, 30.0)
    >>> out["start_s"].to_list(), out["end_s"].to_list(), n
    ([0.0, 2.0, 32.0], [2.0, 32.0, 35.0], 1)
    """
    gaps = (seg.filter((pl.col("lane") == "resume")
                       & ((pl.col("end_s") - pl.col("start_s")) > limit))
            .select("run_dir", pl.col("end_s").alias("at"),
                    (pl.col("end_s") - pl.col("start_s") - limit).alias("cut"))
            .sort("run_dir", "at")
            .with_columns(pl.col("cut").cum_sum().over("run_dir").alias("shift")))
    if gaps.height == 0:
        return seg, 0
    out = (seg.with_row_index("_i").sort("start_s")
           .join_asof(gaps.select("run_dir", "at", "shift").sort("at"),
                      left_on="start_s", right_on="at", by="run_dir", strategy="backward",
                      check_sortedness=False)
           .with_columns(pl.col("shift").fill_null(0.0)))
    # a long gap keeps its start and loses its own excess at the end
    own = pl.when((pl.col("lane") == "resume")
                  & ((pl.col("end_s") - pl.col("start_s")) > limit)).then(
        pl.col("end_s") - pl.col("start_s") - limit).otherwise(0.0)
    out = out.with_columns(pl.col("start_s").alias("real_start_s"),
                           (pl.col("start_s") - pl.col("shift")).round(3).alias("start_s"),
                           (pl.col("end_s") - pl.col("shift") - own).round(3).alias("end_s"))
    return out.sort("_i").drop("_i", "at", "shift"), gaps.height


def step_timeline(*, runs: pl.DataFrame | None = None,
                  model_calls: pl.DataFrame | None = None,
                  tool_calls: pl.DataFrame | None = None,
                  approvals: pl.DataFrame | None = None,
                  verifications: pl.DataFrame | None = None,
                  events: pl.DataFrame | None = None,
                  max_runs: int = CAPS["timeline_runs"],
                  max_segments: int = CAPS["timeline_segments"],
                  collapse_gaps: float | None = 30.0,
                  width: int = 640, states: pl.DataFrame | None = None,
                  max_lines: int = 8) -> alt.TopLevelMixin:
    """Per-run step timeline on a wall-clock axis (seconds since the run started).

    One row per run; within a row, lanes for model calls, tool calls (colour = effect,
    point shape = outcome), approval waits, final verification and resume/continuation gaps.
    With more than one run, a narrow overview below carries an x brush: drag on it to zoom
    the main chart. Click a segment to highlight its run.

    Args:
        runs: ``runs_df`` (start times and run selection); optional.
        model_calls, tool_calls, approvals, verifications, events: the matching tables;
            any may be None.
        max_runs: rows drawn (runs picked by :func:`pick_runs`).
        max_segments: hard cap on drawn segments.
        collapse_gaps: draw "active time": every resume or continuation gap longer than
            this many seconds is shortened to it (the real length stays in the tooltip), so
            one long outage does not squash every other run. ``None`` keeps wall-clock time.
        width: plot width in pixels.
        states: ``states_df``: adds the fleet's step budget burn-down below
            (:func:`step_burn_bands`, every run with ``max_steps``).
        max_lines: runs drawn over those bands.

    >>> import polars as pl
    >>> from datetime import datetime, timezone
    >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    >>> mc = pl.DataFrame({"run_dir": ["a"], "run_id": ["a"], "step": [1],
    ...     "requested_sequence": [1], "requested_at": [t], "completed_at": [t],
    ...     "outcome": ["completed"]})
    >>> "vconcat" in step_timeline(model_calls=mc).to_dict() or True
    True
    """
    seg = timeline_segments(runs=runs, model_calls=model_calls, tool_calls=tool_calls,
                            approvals=approvals, verifications=verifications, events=events)
    title = "Step timeline"
    if seg.height == 0:
        return _empty(title, "no timed events")
    per_run = seg.group_by("run_dir", maintain_order=True).agg(pl.len().alias("segments"),
                                          pl.col("end_s").max().alias("span_s"))
    if runs is not None and "run_dir" in runs.columns:
        per_run = per_run.join(runs.drop([c for c in ("segments", "span_s")
                                          if c in runs.columns]), on="run_dir", how="left")
    total = per_run.height
    chosen = pick_runs(per_run, max_runs, size="segments", ordered=True)
    seg = seg.join(chosen.select("run_dir"), on="run_dir", how="semi")
    cut_segments = 0
    if seg.height > max_segments:  # keep whole runs, most notable first, while the cap allows
        budget = chosen.with_columns(pl.col("segments").cum_sum().alias("c"))
        keep = budget.filter(pl.col("c") <= max_segments).select("run_dir")
        before = seg["run_dir"].n_unique()
        seg = seg.join(keep, on="run_dir", how="semi")
        cut_segments = before - seg["run_dir"].n_unique()
    collapsed = 0
    if collapse_gaps is not None and seg.height:
        seg, collapsed = _collapse_gaps(seg, collapse_gaps)
    labels = run_labels(runs if _has(runs, "run_dir", "run_id") else
                        (tool_calls if _has(tool_calls, "run_dir", "run_id") else
                         seg.select("run_dir", pl.lit(None, pl.Utf8).alias("run_id"))))
    seg = seg.join(labels, on="run_dir", how="left").with_columns(
        pl.coalesce("run", pl.col("run_dir").map_elements(os.path.basename,
                                                          return_dtype=pl.Utf8)).alias("run"),
        (pl.col("end_s") - pl.col("start_s")).round(3).alias("dur_s")).drop("run_dir")
    shown = seg["run"].n_unique()
    lab = dict(labels.select("run_dir", "run").iter_rows())
    run_order = [lab[rd] for rd in chosen["run_dir"].to_list() if rd in lab]
    max_end = float(seg["end_s"].max() or 1.0)
    order = ["model", "tool", "approval", "verification", "resume"]
    run_sel = alt.selection_point(fields=["run"], name="run_pick", on="click", clear="dblclick")
    brush = alt.selection_interval(encodings=["x"], name="zoom")
    color = alt.Color("series:N", legend=_legend("segment", orient="bottom", columns=3),
                      scale=alt.Scale(domain=list(SEGMENT_COLORS),
                                      range=list(SEGMENT_COLORS.values())))
    tip = [alt.Tooltip("run_id:N"), alt.Tooltip("seq:Q", title="sequence"), "lane:N",
           "name:N", "outcome:N", alt.Tooltip("start_s:Q", title="start s"),
           alt.Tooltip("dur_s:Q", title="duration s")]
    height_step = 4 if shown > 1 else 14  # per lane (5 lanes per run row)
    data = _values(seg)
    # With the zoom strip the rows are given once, to the vconcat (both views inherit them);
    # altair would otherwise inline them in each view (twice the bytes).
    base = alt.Chart(data) if shown <= 1 else alt.Chart()
    x_title = ("active seconds since run start (resume gaps over "
               f"{collapse_gaps:g} s shortened to it)" if collapsed else
               "seconds since run start")
    x_main = alt.X("start_s:Q", title=x_title,
                   scale=alt.Scale(domain={"param": "zoom"}, nice=False) if shown > 1
                   else alt.Scale(domain=[0, max_end], nice=False))
    y = alt.Y("run:N", title=None, sort=run_order, axis=alt.Axis(labelLimit=200))
    bars = base.mark_bar(clip=True).encode(
        x=x_main, x2="end_s:Q", y=y,
        yOffset=alt.YOffset("lane:N", sort=order, scale=alt.Scale(domain=order)),
        color=color,
        opacity=focus_or(run_sel.name, 0.95, 0.25),
        tooltip=tip)
    # Tool outcomes as points at the completion time (visible even for sub-ms calls).
    tools = base.transform_filter(alt.datum.lane == "tool").mark_point(
        filled=True, size=28, strokeWidth=0.5, stroke="#222", clip=True).encode(
        x=alt.X("end_s:Q", scale=alt.Scale(domain={"param": "zoom"}, nice=False) if shown > 1
                else alt.Undefined),
        y=y, yOffset=alt.YOffset("lane:N", sort=order, scale=alt.Scale(domain=order)),
        shape=alt.Shape("outcome:N", legend=_legend("tool outcome", orient="bottom",
                                                     columns=4),
                        scale=alt.Scale(domain=["ok", "error", "denied", "unknown_tool",
                                                "not_executed", "in_flight", "not_started"],
                                        range=["circle", "cross", "square", "diamond",
                                               "triangle-down", "triangle-up", "stroke"])),
        color=color,
        opacity=focus_or(run_sel.name, 1.0, 0.25),
        tooltip=tip)
    sub = (f"{shown} of {total} runs, most notable first (failures and non-terminal "
           "verdicts, then the most segments)" if shown < total else
           f"{total} runs, most notable first (failures and non-terminal verdicts, then the "
           "most segments)")
    if cut_segments:
        sub += f"; {cut_segments} picked run(s) dropped to stay under {max_segments} segments"
    if collapsed:
        sub += f"; {collapsed} long resume gap(s) collapsed"
    main = (alt.layer(bars, tools).add_params(run_sel)
            .properties(width=width, height=alt.Step(height_step),
                        title=alt.TitleParams(title, subtitle=sub, anchor="start")))
    band = (step_burn_bands(runs, states, max_lines=max_lines)
            if runs is not None and states is not None else None)
    if shown <= 1:
        return with_focus(main if band is None else alt.vconcat(main, band))
    overview = (base.mark_rule(opacity=0.6)
                .encode(x=alt.X("start_s:Q", title="drag to zoom the timeline above",
                                scale=alt.Scale(domain=[0, max_end], nice=False)),
                        x2="end_s:Q", color=color)
                .add_params(brush)
                .properties(width=width, height=40))
    parts = [main, overview] + ([band] if band is not None else [])
    return with_focus(alt.vconcat(*parts, data=data).resolve_scale(color="shared"))


def step_burn_bands(runs: pl.DataFrame, states: pl.DataFrame, *, max_lines: int = 8,
                    bins: int = 50, width: int = 480) -> alt.LayerChart | None:
    """Step budget burn-down for the whole fleet: ``step`` / ``max_steps`` along each run's
    own wall-clock time (0–100 %), as quantile bands over every run with a step budget, and
    the runs that hit it (``max_steps_exceeded``) or came closest drawn on top, labelled.

    Args:
        runs: ``runs_df`` (``max_steps``, ``step``, ``terminal_reason``).
        states: ``states_df`` (``step``, ``wall_elapsed_seconds``).
        max_lines: runs drawn individually.
        bins: points of the bands.
        width: plot width (labels included).
    """
    if not (_has(runs, "run_dir", "max_steps") and _has(states, "run_dir", "step",
                                                        "wall_elapsed_seconds", "sequence")):
        return None
    r = (runs.select("run_dir", _col(runs, "run_id", pl.Utf8).alias("run_id"),
                     _col(runs, "started_at", pl.Datetime("us", "UTC")).alias("started_at"),
                     _col(runs, "terminal_reason", pl.Utf8).alias("terminal_reason"),
                     _col(runs, "kind", pl.Utf8).alias("kind"),
                     _col(runs, "verdict", pl.Utf8).alias("verdict"),
                     _col(runs, "max_steps", pl.Float64).alias("budget"))
         .filter(pl.col("budget") > 0))
    st = _along_wall_clock(states, r, "step", "budget", maintain_order="left")
    if st.height == 0:
        return None
    bands = quantile_bands(st, "x", "y", bins=bins)
    n = int(bands["runs"].max() or 0)
    fin = st.group_by("run_dir", maintain_order=True).agg(pl.col("y").max().alias("frac"))
    have = r.join(fin, on="run_dir", how="inner", maintain_order="left").with_columns(
        (pl.col("terminal_reason") == "max_steps_exceeded").fill_null(False).alias("_over"))
    pick = _burn_pick(have, "frac", pl.col("_over"), max_lines)
    pick = pick.join(run_labels(pick), on="run_dir", how="left", suffix="_l")
    lines = _downsample(st.join(pick.select("run_dir", "run", "run_id"), on="run_dir",
                                how="inner", maintain_order="left")
                        .sort("run_dir", "sequence", maintain_order=True),
                        CAPS["band_points"])
    over = pick.filter(pl.col("_over")).height
    return band_burn_chart(
        bands, lines.drop("run_dir"),
        title="Step budget along the run, whole fleet",
        subtitle=[f"bands: {n} runs with max_steps (p10–p90, p25–p75, median), each on",
                  "its own clock (share of its wall-clock time); red: "
                  f"{over} run(s) that hit it, the {pick.height - over} closest"],
        x_title="share of the run's wall-clock time", y_title="step / max_steps",
        width=width)


# --------------------------------------------------------------------------- repeat guard
def _repeat_from_states(states: pl.DataFrame) -> pl.DataFrame:
    tool_rows = states.filter(
        (pl.col("event_type") == "tool.requested")
        | ((pl.col("event_type") == "run.failed")
           & (pl.col("terminal_reason").fill_null("") == "repeated_action")))
    return tool_rows.select("run_dir", "run_id", "sequence", "event_type", "repeat_count")


def _repeat_from_events(events: pl.DataFrame) -> pl.DataFrame:
    """Rebuild repeat counts from ``tool.requested`` name+arguments (§10.1), per run."""
    ev = events.filter(pl.col("event_type").is_in(["tool.requested", "run.failed",
                                                   "session.resumed", "session.continued"]))
    rows: list[dict[str, Any]] = []
    last: dict[str, tuple[str | None, int]] = {}
    for r in ev.select("run_dir", "run_id", "sequence", "event_type", "data").iter_rows(
            named=True):
        key = r["run_dir"]
        fp, count = last.get(key, (None, 0))
        if r["event_type"] in ("session.resumed", "session.continued"):
            last[key] = (fp if r["event_type"] == "session.resumed" else None, 0)
            continue
        try:
            d = json.loads(r["data"] or "{}")
        except ValueError:
            d = {}
        if r["event_type"] == "run.failed":
            if d.get("terminal_reason") == "repeated_action":
                rows.append({**{k: r[k] for k in ("run_dir", "run_id", "sequence", "event_type")},
                             "repeat_count": REPEAT_THRESHOLD})
            continue
        new = json.dumps({"name": d.get("name"), "arguments": d.get("arguments")},
                         sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        count = count + 1 if new == fp else 1
        last[key] = (new, count)
        rows.append({**{k: r[k] for k in ("run_dir", "run_id", "sequence", "event_type")},
                     "repeat_count": count})
    return pl.DataFrame(rows, schema={"run_dir": pl.Utf8, "run_id": pl.Utf8,
                                      "sequence": pl.Int64, "event_type": pl.Utf8,
                                      "repeat_count": pl.Int64})


def repeat_guard(*, states: pl.DataFrame | None = None, events: pl.DataFrame | None = None,
                 runs: pl.DataFrame | None = None, threshold: int = REPEAT_THRESHOLD,
                 max_runs: int = CAPS["repeat_runs"]) -> alt.HConcatChart | alt.Chart:
    """``repeat_count`` along each run's tool calls against the trip threshold.

    Left: one row per run with a near miss or a trip (trips first, capped at ``max_runs``),
    one cell per tool call among its last 30, coloured by ``repeat_count``: red is the call
    that reaches the threshold (the run fails with ``repeated_action``), orange a near miss.
    Rows never overlap, however many runs share the same counts. Right: across **all** runs,
    how many runs peaked at each repeat count.

    Args:
        states: ``states_df`` (preferred); falls back to ``events`` (fingerprints rebuilt
            from ``tool.requested`` name and arguments).
        events: ``events_df``.
        runs: ``runs_df`` (used to rank runs).
        threshold: the guard's trip count (3 in every known runner).
        max_runs: cap on drawn lines.

    >>> import polars as pl
    >>> s = pl.DataFrame({"run_dir": ["a"] * 3, "run_id": ["a"] * 3, "sequence": [1, 2, 3],
    ...     "event_type": ["tool.requested", "tool.requested", "run.failed"],
    ...     "terminal_reason": [None, None, "repeated_action"], "repeat_count": [1, 2, 3]})
    >>> spec = repeat_guard(states=s).to_dict()
    >>> spec["hconcat"][0]["mark"]["type"], spec["hconcat"][0]["encoding"]["color"]["field"]
    ('rect', 'count')
    """
    title = "Repeat guard"
    if _has(states, "run_dir", "event_type", "repeat_count", "sequence", "terminal_reason"):
        assert states is not None
        pts = _repeat_from_states(states)
    elif _has(events, "run_dir", "event_type", "data", "sequence"):
        assert events is not None
        pts = _repeat_from_events(events)
    else:
        return _empty(title, "needs states_df or events_df")
    if pts.height == 0:
        return _empty(title, "no tool calls")
    pts = pts.with_columns(
        (pl.int_range(pl.len()).over("run_dir") + 1).alias("call"),
        pl.when(pl.col("repeat_count") >= threshold).then(pl.lit("trip"))
        .when(pl.col("repeat_count") == threshold - 1).then(pl.lit("near miss"))
        .otherwise(pl.lit("ok")).alias("status"))
    peak = pts.group_by("run_dir", maintain_order=True).agg(pl.col("repeat_count").max().alias("peak"),
                                       pl.len().alias("calls"))
    # Distribution over all runs (aggregated here, so it scales).
    dist = (peak.with_columns(pl.col("peak").clip(0, threshold).alias("peak"))
            .group_by("peak", maintain_order=True).len("runs")
            .with_columns(pl.when(pl.col("peak") >= threshold).then(pl.lit("trip"))
                          .when(pl.col("peak") == threshold - 1).then(pl.lit("near miss"))
                          .otherwise(pl.lit("ok")).alias("status")))
    status_scale = alt.Scale(domain=["ok", "near miss", "trip"],
                             range=["#4c9be8", "#ff9f1c", "#d62728"])
    c_dist = (alt.Chart(_values(dist), title=alt.TitleParams(
        "Peak repeat count per run", subtitle=f"all {peak.height} runs with tool calls",
        anchor="start"))
        .mark_bar().encode(x=alt.X("peak:O", title="peak repeat_count"),
                           y=alt.Y("runs:Q", title="runs"),
                           color=alt.Color("status:N", scale=status_scale, title="status"),
                           tooltip=["peak:O", "runs:Q", "status:N"])
        .properties(width=150, height=240))
    notable = peak.filter(pl.col("peak") >= threshold - 1)
    if runs is not None and "run_dir" in runs.columns:
        notable = notable.join(runs.select([c for c in ("run_dir", "verdict", "terminal_reason")
                                            if c in runs.columns]), on="run_dir", how="left")
    chosen = pick_runs(notable, max_runs, prefer=pl.col("peak") >= threshold, size="peak")
    lines = pts.join(chosen.select("run_dir"), on="run_dir", how="semi")
    if lines.height == 0:
        lines = pts.join(peak.sort("calls", descending=True).head(min(5, max_runs))
                         .select("run_dir"), on="run_dir", how="semi")
        sub = "no near misses or trips: the 5 runs with most tool calls"
    else:
        sub = (f"{chosen.height} of {notable.height} runs with a near miss or trip"
               if chosen.height < notable.height else
               f"{notable.height} runs with a near miss or trip")
    label_src = lines.select("run_dir", "run_id").unique("run_dir")
    if runs is not None and "run_dir" in runs.columns:
        label_src = label_src.join(runs.drop("run_id", strict=False), on="run_dir", how="left")
    labels = run_labels(label_src)
    order_rd = (chosen["run_dir"].to_list() if chosen.height
                else lines["run_dir"].unique(maintain_order=True).to_list())
    lab = dict(labels.select("run_dir", "run").iter_rows())
    order = [lab[rd] for rd in order_rd if rd in lab]
    lines = lines.join(labels.drop("run_id"), on="run_dir", how="left").drop("run_dir")
    # One row per run, one cell per tool call coloured by its repeat count: rows never
    # overlap however many runs share the same counts.
    tail = 30  # trips happen at the end: show each run's last tool calls
    cells = (lines.with_columns(pl.col("repeat_count").clip(1, threshold).cast(pl.Utf8)
                                .alias("count"),
                                (pl.col("call") - pl.col("call").max().over("run")).alias("pos"))
             .filter(pl.col("pos") > -tail))
    count_scale = alt.Scale(domain=[str(i) for i in range(1, threshold + 1)],
                            range=["#c6dbef", "#ff9f1c", "#d62728"][-threshold:]
                            if threshold <= 3 else alt.Undefined)
    y = alt.Y("run:N", sort=order, title=None, axis=alt.Axis(labelLimit=200))
    grid = alt.Chart(_values(cells)).mark_rect(stroke="#fff", strokeWidth=0.3).encode(
        x=alt.X("pos:O", title=f"tool calls before the run's last one (last {tail} shown)",
                sort="ascending", axis=alt.Axis(labelOverlap=True, labelAngle=0)),
        y=y,
        color=alt.Color("count:N", scale=count_scale,
                        legend=_legend(f"repeat_count (trip at {threshold})", orient="bottom")),
        opacity=focus_opacity(1.0, 0.2),
        tooltip=["run_id:N", alt.Tooltip("sequence:Q", title="sequence"), "call:Q",
                 "repeat_count:Q", "status:N", "event_type:N"])
    n_calls = int(cells["pos"].n_unique() or 1)
    left = grid.properties(
        width=min(max(14 * n_calls, 200), 360), height=alt.Step(14),
        title=alt.TitleParams(f"{title}: repeat_count at each tool call (trips at {threshold})",
                              subtitle=sub + "; red = the call that trips the guard",
                              anchor="start"))
    return with_focus(alt.hconcat(left, c_dist).resolve_scale(
        color="independent", shape="independent", fill="independent"))


# --------------------------------------------------------------------------- wall time
def _downsample(df: pl.DataFrame, limit: int, by: str = "run_dir") -> pl.DataFrame:
    """Keep at most ~``limit`` rows, thinning each group evenly (first and last kept)."""
    if df.height <= limit:
        return df
    groups = max(df[by].n_unique(), 1)
    per = max(limit // groups, 2)
    return (df.with_columns(pl.int_range(pl.len()).over(by).alias("_i"),
                            pl.len().over(by).alias("_n"))
            .filter((pl.col("_i") == 0) | (pl.col("_i") == pl.col("_n") - 1)
                    | ((pl.col("_i") * per) // pl.col("_n")
                       != ((pl.col("_i") - 1) * per) // pl.col("_n")))
            .drop("_i", "_n"))


def ecdf_points(df: pl.DataFrame, value: str, group: str, *, points: int = 51
                ) -> pl.DataFrame:
    """Empirical CDF per group at ``points`` evenly spaced shares (quantiles in polars), so a
    distribution over any number of runs is drawn with ``points`` rows per group.

    Returns ``group, share, value, runs``: ``share`` of the group's runs have ``value`` at
    most ``value`` (lower quantile: a value some run really has).

    >>> import polars as pl
    >>> f = pl.DataFrame({"g": ["a"] * 4, "v": [1.0, 2.0, 3.0, 4.0]})
    >>> ecdf_points(f, "v", "g", points=5)["value"].to_list()
    [1.0, 1.0, 2.0, 3.0, 4.0]
    """
    shares = [i / (points - 1) for i in range(points)]
    d = df.filter(pl.col(value).is_not_null() & pl.col(value).is_finite())
    if d.height == 0:
        return pl.DataFrame(schema={"group": pl.Utf8, "share": pl.Float64,
                                    "value": pl.Float64, "runs": pl.UInt32})
    g = d.group_by(pl.col(group).alias("group"), maintain_order=True).agg(
        pl.len().alias("runs"),
        *[pl.col(value).quantile(q, interpolation="lower").alias(f"q{i}")
          for i, q in enumerate(shares)])
    return (g.unpivot(index=["group", "runs"], variable_name="q", value_name="value")
            .with_columns((pl.col("q").str.slice(1).cast(pl.Int64) / (points - 1))
                          .alias("share"))
            .select("group", "share", pl.col("value").cast(pl.Float64), "runs")
            .sort("group", "share"))


BAND_QUANTILES: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9)
"""The quantiles a band chart draws: p10–p90 (light), p25–p75 (dark) and the median."""

FOCUS = "focus_run"
"""The page-wide linked selection: the ``run_id`` clicked in any chart (the report's script
sets this parameter in every chart that declares it; null = no run picked)."""


def focus_param() -> Any:
    """The variable parameter a chart declares to follow the page's linked run selection.

    >>> focus_param().name
    'focus_run'
    """
    return alt.param(name=FOCUS, value=None)


def focus_opacity(on: float = 0.95, off: float = 0.12) -> Any:
    """Opacity that dims every mark whose ``run_id`` is not the run picked on the page."""
    return alt.condition(f"{FOCUS} == null || datum.run_id == {FOCUS}", alt.value(on),
                         alt.value(off))


def focus_or(param: str, on: float, off: float, dim: float = 0.1) -> dict[str, Any]:
    """Opacity for a chart with its own click selection ``param``: the run picked on the page
    (:data:`FOCUS`) wins, else ``param`` decides (``on`` / ``off``)."""
    return {"condition": [{"test": f"{FOCUS} != null && datum.run_id != {FOCUS}",
                           "value": dim}, {"param": param, "value": on}], "value": off}


def quantile_bands(df: pl.DataFrame, x: str, y: str, *, by: str = "run_dir", bins: int = 50,
                   quantiles: Iterable[float] = BAND_QUANTILES) -> pl.DataFrame:
    """Quantiles of ``y`` across runs at ``bins + 1`` evenly spaced points of ``x`` in [0, 1].

    Every run counts once at every point from its first row on: its last ``y`` at or before
    the point (a step function, as a cumulative counter is). All in polars; the output has
    one row per point: ``x``, ``runs`` and ``q10`` … ``q90`` (``q`` + the percentile).

    >>> d = pl.DataFrame({"run_dir": ["a", "a", "b", "b"], "x": [0.0, 1.0, 0.0, 0.6],
    ...                   "y": [0.0, 1.0, 0.0, 3.0]})
    >>> quantile_bands(d, "x", "y", bins=2, quantiles=(0.5,)).rows()
    [(0.0, 2, 0.0), (0.5, 2, 0.0), (1.0, 2, 2.0)]
    """
    qs = list(quantiles)
    names = [f"q{round(q * 100)}" for q in qs]
    schema = {"x": pl.Float64, "runs": pl.UInt32, **{n: pl.Float64 for n in names}}
    d = (df.select(pl.col(by).alias("__run"), pl.col(x).cast(pl.Float64).clip(0.0, 1.0)
                   .alias("__x"), pl.col(y).cast(pl.Float64).alias("__y"))
         .drop_nulls())
    if d.height == 0:
        return pl.DataFrame(schema=schema)
    d = d.with_columns((pl.col("__x") * bins).round(9).ceil().cast(pl.Int64).alias("__i"))
    last = d.group_by("__run", "__i", maintain_order=True).agg(pl.col("__y").last())
    grid = pl.DataFrame({"__i": list(range(bins + 1))}, schema={"__i": pl.Int64})
    full = (last.select("__run").unique(maintain_order=True).join(grid, how="cross")
            .join(last, on=["__run", "__i"], how="left")
            .with_columns(pl.col("__y").forward_fill().over("__run"))
            .drop_nulls("__y"))
    return (full.group_by("__i").agg(
        pl.len().alias("runs"),
        *[pl.col("__y").quantile(q, interpolation="linear").alias(n) for q, n in zip(
            qs, names, strict=True)])
        .sort("__i").select((pl.col("__i") / bins).alias("x"), "runs", *names)
        .cast(schema))


def dodge(values: Iterable[float], gap: float) -> list[float]:
    """Label positions at least ``gap`` apart, each as close to its value as that allows
    (order kept; a run of crowded labels is centred on its values).

    >>> dodge([1.0, 1.0, 0.2], 0.1)
    [0.95, 1.05, 0.2]
    """
    vals = list(values)
    order = sorted(range(len(vals)), key=lambda i: (vals[i], i))
    # clusters of labels that would overlap, each centred on the mean of its values
    clusters: list[list[int]] = []
    for i in order:
        clusters.append([i])
        while len(clusters) > 1:
            a, b = clusters[-2], clusters[-1]
            ca = sum(vals[j] for j in a) / len(a) + gap * (len(a) - 1) / 2
            cb = sum(vals[j] for j in b) / len(b) - gap * (len(b) - 1) / 2
            if cb - ca >= gap:
                break
            clusters[-2:] = [a + b]
    out = [0.0] * len(vals)
    for c in clusters:
        start = sum(vals[j] for j in c) / len(c) - gap * (len(c) - 1) / 2
        for k, j in enumerate(c):
            out[j] = round(start + k * gap, 6)
    return out


def band_burn_chart(bands: pl.DataFrame, lines: pl.DataFrame, *, title: str, subtitle: Any,
                    x_title: str, y_title: str, y_cap: float | None = None,
                    width: int = 600, height: int = 230, label_width: float = 0.6,
                    label_gap: float | None = None) -> alt.LayerChart:
    """The fleet's quantile bands (p10–p90, p25–p75, median) with some runs drawn on top,
    each labelled at its end (labels dodged so they never overlap; full id in the tooltip).

    Args:
        bands: :func:`quantile_bands` output (``x`` in [0, 1]).
        lines: the runs drawn individually: ``run``, ``run_id``, ``x``, ``y`` (+ tooltip
            columns ``sequence``, ``event_type`` when present).
        y_cap: values above are drawn at the cap (the axis says so in ``y_title``).
        label_width: room right of the plot for the labels, as a share of the x range.
    """
    qcols = [c for c in bands.columns if c.startswith("q")]
    lo, mid, hi = ("q10", "q50", "q90") if {"q10", "q50", "q90"} <= set(qcols) else (
        qcols[0], qcols[len(qcols) // 2], qcols[-1])
    if y_cap is not None:
        bands = bands.with_columns(pl.col(qcols).clip(upper_bound=y_cap))
        lines = lines.with_columns(pl.col("y").clip(upper_bound=y_cap))
    y_max = max([1.0] + [float(v) for v in (bands[hi].max(), lines["y"].max() if lines.height
                                            else None) if v is not None])
    gap = label_gap if label_gap is not None else y_max * 0.075
    ends = (lines.group_by("run_id", maintain_order=True).agg(pl.col("run").last(),
                                                              pl.col("x").last(),
                                                              pl.col("y").last()))
    if ends.height:
        ends = ends.with_columns(pl.Series("label_y", dodge(ends["y"].to_list(), gap)))
    top = max([y_max] + ([float(ends["label_y"].max())] if ends.height else []))
    x_scale = alt.Scale(domain=[0, 1 + label_width], nice=False)
    y_scale = alt.Scale(domain=[min(0.0, float(bands[lo].min() or 0.0)), top * 1.04],
                        nice=False)
    x = alt.X("x:Q", title=x_title, scale=x_scale,
              axis=alt.Axis(format="%", tickCount=6,  # no tick labels in the label room
                            labelExpr="datum.value <= 1 ? datum.label : ''"))
    base = alt.Chart()  # the band layers share one copy of the data (set on their layer)
    tip = ([alt.Tooltip("x:Q", format=".0%", title="share of the run"), "runs:Q"]
           + [alt.Tooltip(f"{c}:Q", format=".1%", title=f"p{c[1:]}") for c in qcols])
    band_layers: list[Any] = [
        base.mark_area(color="#4c78a8", opacity=0.16).encode(
            x=x, y=alt.Y(f"{lo}:Q", title=y_title, scale=y_scale, axis=alt.Axis(format="%")),
            y2=f"{hi}:Q", tooltip=tip)]
    if {"q25", "q75"} <= set(qcols):
        band_layers.append(base.mark_area(color="#4c78a8", opacity=0.3).encode(
            x=x, y="q25:Q", y2="q75:Q", tooltip=tip))
    band_layers.append(base.mark_line(color="#1f3d66", strokeWidth=2).encode(
        x=x, y=f"{mid}:Q", tooltip=tip))
    layers: list[Any] = [alt.layer(*band_layers, data=_values(
        bands.with_columns(pl.col(qcols).round(5))))]
    layers.append(alt.Chart(_values(pl.DataFrame({"y": [1.0]}))).mark_rule(
        color="#d62728", strokeDash=[6, 3]).encode(y="y:Q"))
    if lines.height:
        # line rows carry only id, position and sequence (the label layer names the run)
        ltip = ["run_id:N"] + [c for c in ("sequence:Q",) if c.split(":")[0]
                               in lines.columns] + [
            alt.Tooltip("y:Q", format=".1%", title=y_title)]
        lcols = [c for c in ("run_id", "x", "y", "sequence") if c in lines.columns]
        layers.append(alt.Chart(_values(lines.select(lcols).with_columns(
            pl.col("x", "y").round(5)))).mark_line(
            interpolate="step-after", color="#d62728", strokeWidth=1.4).encode(
            x=x, y="y:Q", detail="run_id:N", opacity=focus_opacity(0.9, 0.1), tooltip=ltip))
        lab = ends.select("run", "run_id", pl.col("x").round(5), pl.col("y").round(5),
                          pl.col("label_y").round(5), (pl.col("x") + 0.015).round(5)
                          .alias("label_x"))
        leader = alt.Chart().mark_rule(color="#999", strokeWidth=0.6).encode(
            x="x:Q", y="y:Q", x2="label_x:Q", y2="label_y:Q")
        layers.append(alt.layer(leader, alt.Chart().mark_text(
            align="left", baseline="middle", dx=2, fontSize=10, limit=width * label_width
            / (1 + label_width)).encode(
            x="label_x:Q", y="label_y:Q", text="run:N", opacity=focus_opacity(1.0, 0.25),
            tooltip=["run_id:N", "run:N", alt.Tooltip("y:Q", format=".1%", title=y_title)]),
            data=_values(lab)))
    return alt.layer(*layers).properties(
        width=width, height=height,
        title=alt.TitleParams(title, subtitle=subtitle, anchor="start"))


def with_focus(chart: Any) -> Any:
    """``chart`` with the page's linked run selection (:data:`FOCUS`) declared once, at its
    top level (a builder whose marks use :func:`focus_opacity` returns this).

    >>> c = with_focus(with_focus(alt.Chart().mark_point()))
    >>> [p.name for p in c.params]
    ['focus_run']
    """
    params = getattr(chart, "params", alt.Undefined)
    if params is not alt.Undefined and any(getattr(p, "name", None) == FOCUS
                                           for p in params):
        return chart
    return chart.add_params(focus_param())


def _wall_groups(r: pl.DataFrame) -> pl.Expr:
    o = pl.col("outcome")
    return (pl.when(o.str.starts_with("completed")).then(pl.lit("completed"))
            .when(o == "failed: wall_time_exceeded").then(pl.lit("failed: wall_time_exceeded"))
            .when(o.str.starts_with("failed")).then(pl.lit("failed: other reasons"))
            .when(o.is_in(["crashed", "interrupted"])).then(pl.lit("crashed or interrupted"))
            .otherwise(pl.lit("other (cancelled, live, fork, unreadable)")))


def wall_time_budget(*, runs: pl.DataFrame, states: pl.DataFrame | None = None,
                     approvals: pl.DataFrame | None = None,
                     max_runs: int = CAPS["budget_runs"],
                     max_points: int = CAPS["budget_points"],
                     max_lines: int = 8) -> alt.VConcatChart | alt.Chart:
    """Charged wall time against ``wall_time_seconds`` per run.

    Top: one bar per run, as a fraction of its budget, split into active time, charged resume
    downtime and (shaded, hatched colour) approval waits; a rule at 100 %; runs over budget
    are marked with a red cross. Middle: how close every run gets (ECDF per outcome).
    Bottom (needs ``states_df``): the fleet's burn-down as quantile bands
    (:func:`wall_burn_bands`), the runs over or closest to their budget drawn and labelled.

    Args:
        runs: ``runs_df`` (``active_wall_time_seconds``, ``wall_time_seconds``).
        states: ``states_df`` (per-event ``charged_wall_seconds``, ``approval_wait_seconds``,
            ``resume_downtime_seconds``, ``wall_elapsed_seconds``); optional.
        approvals: ``approvals_df`` (approval wait totals when ``states`` is missing).
        max_runs: bars drawn.
        max_points: cap on the drawn burn-down lines' points (evenly thinned per run).
        max_lines: runs drawn over the burn-down bands.

    >>> import polars as pl
    >>> r = pl.DataFrame({"run_dir": ["a"], "run_id": ["a"], "verdict": ["terminal"],
    ...     "active_wall_time_seconds": [150.0], "wall_time_seconds": [120.0]})
    >>> spec = wall_time_budget(runs=r).to_dict()
    >>> spec["vconcat"][0]["layer"][0]["encoding"]["x"]["field"]
    'from_frac'
    """
    title = "Wall-time budget"
    if not _has(runs, "run_dir") or runs.height == 0:
        return _empty(title, "no runs")
    r = runs.select("run_dir", _col(runs, "run_id", pl.Utf8).alias("run_id"),
                    _col(runs, "started_at", pl.Datetime("us", "UTC")).alias("started_at"),
                    _col(runs, "verdict", pl.Utf8).alias("verdict"),
                    _col(runs, "terminal_reason", pl.Utf8).alias("terminal_reason"),
                    _col(runs, "kind", pl.Utf8).alias("kind"),
                    _col(runs, "active_wall_time_seconds", pl.Float64).alias("charged_s"),
                    _col(runs, "wall_time_seconds", pl.Float64).alias("budget_s"),
                    *_task_cols(runs))
    wait = pl.DataFrame(schema={"run_dir": pl.Utf8, "approval_s": pl.Float64,
                                "downtime_s": pl.Float64, "charged_state_s": pl.Float64,
                                "waits_charged": pl.Boolean})
    if _has(states, "run_dir", "approval_wait_seconds", "resume_downtime_seconds",
            "charged_wall_seconds"):
        assert states is not None
        wait = states.group_by("run_dir", maintain_order=True).agg(
            pl.col("approval_wait_seconds").last().alias("approval_s"),
            pl.col("resume_downtime_seconds").last().alias("downtime_s"),
            pl.col("charged_wall_seconds").drop_nulls().last().alias("charged_state_s"),
            (_col(states, "charge_approval_waits", pl.Boolean, False).last()
             .alias("waits_charged")))
    elif _has(approvals, "run_dir", "wait_seconds"):
        assert approvals is not None
        wait = approvals.group_by("run_dir", maintain_order=True).agg(
            pl.col("wait_seconds").sum().alias("approval_s"),
            pl.lit(0.0).alias("downtime_s"), pl.lit(None, pl.Float64).alias("charged_state_s"),
            pl.lit(False).alias("waits_charged"))
    r = (r.join(wait, on="run_dir", how="left")
         .with_columns(pl.coalesce("charged_s", "charged_state_s").alias("charged_s"),
                       pl.col("approval_s").fill_null(0.0), pl.col("downtime_s").fill_null(0.0),
                       pl.col("waits_charged").fill_null(False))
         .filter(pl.col("charged_s").is_not_null() & (pl.col("budget_s") > 0))
         .with_columns((pl.col("charged_s") / pl.col("budget_s")).alias("used_frac"),
                       (pl.col("charged_s") > pl.col("budget_s")).alias("exceeded")))
    if r.height == 0:
        return _empty(title, "no run has both charged time and a wall_time_seconds budget")
    total = r.height
    # At most a third of the rows for runs over budget (they all sit at ~100 %): the rest are
    # the runs that came closest without exceeding it, which is what a budget owner asks.
    n_over = r.filter(pl.col("exceeded")).height
    over_rows = min(n_over, max(max_runs // 3, max_runs - (r.height - n_over)))
    chosen = pl.concat([
        r.filter(pl.col("exceeded")).sort(["used_frac", "run_dir"], descending=[True, False])
        .head(over_rows),
        r.filter(~pl.col("exceeded")).sort(["used_frac", "run_dir"], descending=[True, False])
        .head(max_runs - over_rows)])
    chosen = chosen.join(run_labels(chosen), on="run_dir", how="left", suffix="_l")
    # Segments per run, as fractions of its budget.
    segs = []
    for row in chosen.iter_rows(named=True):
        b = row["budget_s"]
        charged = row["charged_s"]
        down = min(row["downtime_s"], charged)
        appr_charged = min(row["approval_s"], charged - down) if row["waits_charged"] else 0.0
        active = max(charged - down - appr_charged, 0.0)
        pos = 0.0
        parts = [("active", active), ("resume downtime (charged)", down),
                 ("approval wait (charged)", appr_charged)]
        if not row["waits_charged"]:
            parts.append(("approval wait (paused)", row["approval_s"]))
        for part, sec in parts:
            if sec <= 0:
                continue
            segs.append({"run": row["run"], "run_id": row["run_id"], "part": part,
                         "seconds": round(sec, 3), "from_frac": round(pos / b, 5),
                         "to_frac": round((pos + sec) / b, 5), "budget_s": b,
                         "charged_s": round(charged, 3), "used_pct": round(100 * charged / b, 1),
                         "exceeded": row["exceeded"]})
            pos += sec
    segs_df = pl.DataFrame(segs, schema={"run": pl.Utf8, "run_id": pl.Utf8, "part": pl.Utf8,
                                         "seconds": pl.Float64, "from_frac": pl.Float64,
                                         "to_frac": pl.Float64, "budget_s": pl.Float64,
                                         "charged_s": pl.Float64, "used_pct": pl.Float64,
                                         "exceeded": pl.Boolean})
    order = chosen.sort("used_frac", descending=True)["run"].to_list()
    part_scale = alt.Scale(domain=["active", "resume downtime (charged)",
                                   "approval wait (charged)", "approval wait (paused)"],
                           range=["#1f77b4", "#ef476f", "#ffd166", "#e9e3c9"])
    y = alt.Y("run:N", sort=order, title=None)
    tip = ["run_id:N", "part:N", alt.Tooltip("seconds:Q", title="seconds"),
           alt.Tooltip("charged_s:Q", title="charged s"), alt.Tooltip("budget_s:Q",
                                                                       title="budget s"),
           alt.Tooltip("used_pct:Q", title="% of budget"), "exceeded:N"]
    bars = alt.Chart(_values(segs_df)).mark_bar(height={"band": 0.75}).encode(
        x=alt.X("from_frac:Q", title="fraction of wall_time_seconds",
                axis=alt.Axis(format="%")), x2="to_frac:Q", y=y,
        color=alt.Color("part:N", scale=part_scale, title="time"),
        opacity=alt.condition(alt.datum.part == "approval wait (paused)", alt.value(0.6),
                              alt.value(1.0)),
        tooltip=tip)
    rule = alt.Chart(_values(pl.DataFrame({"x": [1.0]}))).mark_rule(
        color="#d62728", strokeDash=[6, 3]).encode(x="x:Q")
    over = chosen.filter(pl.col("exceeded")).select(
        "run", "run_id", pl.col("used_frac").round(4), pl.col("charged_s").round(3), "budget_s")
    marks = alt.Chart(_values(over)).mark_point(shape="cross", size=120, filled=True,
                                                color="#d62728").encode(
        x="used_frac:Q", y=y, tooltip=["run_id:N", alt.Tooltip("used_frac:Q", format=".0%"),
                                       "charged_s:Q", "budget_s:Q"])
    top = alt.layer(bars, rule, marks).properties(
        width=500, height=alt.Step(16),
        title=alt.TitleParams(
            f"{title}: charged time per run ({n_over} of {total} exceeded)",
            subtitle=(f"{over.height} of the {n_over} over budget (cap), then the "
                      f"{chosen.height - over.height} runs closest to it without exceeding"
                      if chosen.height < total else f"all {total} runs"), anchor="start"))
    # How close do runs get? The used share for every run, as an ECDF per outcome group.
    grp = r.join(outcomes(runs), on="run_dir", how="left").with_columns(
        _wall_groups(r).alias("grp"))
    ec = ecdf_points(grp.with_columns(pl.col("used_frac").clip(0, 1.2)), "used_frac", "grp")
    if ec.height:
        ec = ec.with_columns(pl.col("value").round(5))
        gorder = ["completed", "failed: wall_time_exceeded", "failed: other reasons",
                  "crashed or interrupted", "other (cancelled, live, fork, unreadable)"]
        ecdf = (alt.Chart(_values(ec)).mark_line(interpolate="step-after", point=False)
                .encode(x=alt.X("value:Q", title="charged time / wall_time_seconds "
                                "(over 120 % drawn at 120 %)", axis=alt.Axis(format="%")),
                        y=alt.Y("share:Q", title="share of the group's runs at or below",
                                axis=alt.Axis(format="%")),
                        color=alt.Color("group:N", scale=alt.Scale(
                            domain=gorder, range=["#2e7d32", "#d62728", "#ff7f0e", "#17becf",
                                                  "#7f7f7f"]),
                            legend=_legend("outcome", orient="bottom", columns=3)),
                        tooltip=["group:N", "runs:Q",
                                 alt.Tooltip("share:Q", format=".0%", title="share of runs"),
                                 alt.Tooltip("value:Q", format=".1%", title="at or below")])
                .properties(width=560, height=200, title=alt.TitleParams(
                    "How close do runs get to their wall-time budget?",
                    subtitle=f"all {total} runs with a budget, as an ECDF per outcome "
                    "(51 quantiles each)", anchor="start")))
        rule_e = alt.Chart(_values(pl.DataFrame({"x": [1.0]}))).mark_rule(
            color="#333", strokeDash=[2, 4], opacity=0.6).encode(x="x:Q")
        top = alt.vconcat(top, alt.layer(ecdf, rule_e)).resolve_scale(color="independent")
    if not _has(states, "run_dir", "charged_wall_seconds", "wall_elapsed_seconds", "sequence"):
        return top
    assert states is not None
    burn = wall_burn_bands(r, states, max_lines=max_lines,
                           max_points=min(max_points, CAPS["band_points"]))
    return with_focus(alt.vconcat(top, burn).resolve_scale(color="independent")
                      if burn is not None else top)


def _along_wall_clock(states: pl.DataFrame, r: pl.DataFrame, value: str, budget: str, *,
                      maintain_order: Literal["none", "left"] = "none") -> pl.DataFrame:
    """``states`` rows of the runs in ``r`` with ``x`` = the share of the run's own wall-clock
    time elapsed and ``y`` = ``value`` / the run's ``budget`` (rows without either dropped)."""
    return (states.select("run_dir", "sequence", "event_type", value, "wall_elapsed_seconds")
            .join(r.select("run_dir", budget), on="run_dir", how="inner",
                  maintain_order=maintain_order)
            .filter(pl.col(value).is_not_null() & pl.col("wall_elapsed_seconds").is_not_null())
            .with_columns(pl.col("wall_elapsed_seconds").max().over("run_dir").alias("_end"))
            .filter(pl.col("_end") > 0)
            .with_columns((pl.col("wall_elapsed_seconds") / pl.col("_end")).alias("x"),
                          (pl.col(value) / pl.col(budget)).alias("y")))


def _burn_pick(r: pl.DataFrame, frac: str, over: pl.Expr, max_lines: int) -> pl.DataFrame:
    """The runs a burn-down draws individually: up to half over budget (the highest share
    first; more when fewer runs are within it), then the closest within it."""
    n_in = r.filter(~over).height
    n_over = min(r.filter(over).height, max(1, max_lines // 2, max_lines - n_in))
    return pl.concat([
        r.filter(over).sort([frac, "run_dir"], descending=[True, False]).head(n_over),
        r.filter(~over).sort([frac, "run_dir"], descending=[True, False])
        .head(max_lines - n_over)])


def wall_burn_bands(r: pl.DataFrame, states: pl.DataFrame, *, max_lines: int = 8,
                    max_points: int = CAPS["band_points"], bins: int = 50
                    ) -> alt.LayerChart | None:
    """Burn-down of the wall-time budget for the whole fleet: charged time / budget along
    each run's own wall-clock time (0–100 %), as quantile bands over every run with a
    budget, and the runs over or closest to their budget drawn on top, labelled.

    Args:
        r: one row per run: ``run_dir``, ``run_id``, ``budget_s``, ``used_frac``,
            ``exceeded`` (+ the :func:`run_labels` inputs).
        states: ``states_df`` (``wall_elapsed_seconds``, ``charged_wall_seconds``).
        max_lines: runs drawn individually.
        max_points: cap on their points (evenly thinned per run).
        bins: points of the bands.
    """
    st = _along_wall_clock(states, r, "charged_wall_seconds", "budget_s")
    if st.height == 0:
        return None
    bands = quantile_bands(st, "x", "y", bins=bins)
    n = int(bands["runs"].max() or 0)
    have = r.join(st.select("run_dir").unique(), on="run_dir", how="semi")
    pick = _burn_pick(have, "used_frac", pl.col("exceeded"), max_lines)
    pick = pick.join(run_labels(pick), on="run_dir", how="left", suffix="_l")
    lines = (st.join(pick.select("run_dir", "run", "run_id"), on="run_dir", how="inner",
                     maintain_order="left")
             .sort("run_dir", "sequence", maintain_order=True))
    lines = _downsample(lines, max_points)
    over = pick.filter(pl.col("exceeded")).height
    return band_burn_chart(
        bands, lines.drop("run_dir"),
        title="Burn-down: charged wall time along the run, whole fleet",
        subtitle=[f"bands: {n} runs with a budget (p10–p90, p25–p75, median), each on its",
                  "own clock (share of its wall-clock time); red: "
                  f"{over} over budget, the {pick.height - over} closest within it",
                  "(over 150 % drawn at 150 %); click a run to follow it in every chart"],
        x_title="share of the run's wall-clock time", y_title="charged / wall_time_seconds",
        y_cap=1.5)


# --------------------------------------------------------------------------- tokens
def token_budget(*, runs: pl.DataFrame, states: pl.DataFrame | None = None,
                 model_calls: pl.DataFrame | None = None,
                 events: pl.DataFrame | None = None,
                 max_runs: int = CAPS["budget_runs"],
                 max_points: int = CAPS["budget_points"],
                 max_lines: int = 8) -> alt.VConcatChart | alt.HConcatChart | alt.Chart:
    """Cumulative tokens against ``max_total_tokens``, compaction points marked.

    Left: cumulative total tokens along each run's event sequence (``states_df``, else the
    running sum of ``model_calls_df.total_tokens``); a dashed rule per run at its
    ``max_total_tokens``; ``context_pressure.summary_fallback_applied`` events (history
    compaction, §11.2) as black diamonds. Right: final tokens as a fraction of the budget for
    **all** runs that have a budget (binned in polars). Below, when runs have a budget: the
    fleet's burn-down as quantile bands (:func:`token_burn_bands`).

    Args:
        runs: ``runs_df`` (``max_total_tokens``, ``total_tokens``).
        states: ``states_df``; optional.
        model_calls: ``model_calls_df`` (fallback for the cumulative line).
        events: ``events_df`` (compaction points); optional.
        max_runs: lines drawn.
        max_points: cap on line points (evenly thinned per run).
        max_lines: runs drawn over the burn-down bands.

    >>> import polars as pl
    >>> r = pl.DataFrame({"run_dir": ["a"], "run_id": ["a"], "max_total_tokens": [100],
    ...                   "total_tokens": [120]})
    >>> m = pl.DataFrame({"run_dir": ["a", "a"], "requested_sequence": [1, 5],
    ...                   "completed_sequence": [2, 6], "total_tokens": [60, 60]})
    >>> spec = token_budget(runs=r, model_calls=m).to_dict()
    >>> spec["vconcat"][0]["hconcat"][0]["layer"][0]["encoding"]["y"]["field"]
    'y'
    """
    title = "Token budget"
    if _has(states, "run_dir", "sequence", "total_tokens"):
        assert states is not None
        cum = states.select("run_dir", "sequence", "event_type",
                            pl.col("total_tokens").alias("tokens"))
        cum_all = cum
        # Only the rows where the running total moved (plus first/last) are worth drawing.
        cum = cum.filter((pl.col("tokens") != pl.col("tokens").shift(1).over("run_dir"))
                         | (pl.int_range(pl.len()).over("run_dir") == 0)
                         | (pl.int_range(pl.len()).over("run_dir") == pl.len().over("run_dir")
                            - 1))
    elif _has(model_calls, "run_dir", "total_tokens", "requested_sequence"):
        assert model_calls is not None
        cum = (model_calls.sort("run_dir", "requested_sequence").select(
            "run_dir",
            pl.coalesce(_col(model_calls, "completed_sequence", pl.Int64),
                        "requested_sequence").alias("sequence"),
            pl.lit("model.completed").alias("event_type"),
            pl.col("total_tokens").fill_null(0).cum_sum().over("run_dir").alias("tokens")))
        cum_all = cum
    else:
        return _empty(title, "needs states_df or model_calls_df")
    r = runs.select("run_dir", _col(runs, "run_id", pl.Utf8).alias("run_id"),
                    _col(runs, "started_at", pl.Datetime("us", "UTC")).alias("started_at"),
                    _col(runs, "verdict", pl.Utf8).alias("verdict"),
                    _col(runs, "terminal_reason", pl.Utf8).alias("terminal_reason"),
                    _col(runs, "max_total_tokens", pl.Int64).alias("budget"),
                    _col(runs, "total_tokens", pl.Int64).alias("total_tokens"),
                    *_task_cols(runs))
    comp = pl.DataFrame(schema={"run_dir": pl.Utf8, "sequence": pl.Int64})
    if _has(events, "run_dir", "event_type", "sequence"):
        assert events is not None
        comp = events.filter(pl.col("event_type")
                             == "context_pressure.summary_fallback_applied").select(
            "run_dir", "sequence")
    r = r.join(comp.group_by("run_dir", maintain_order=True).len("compactions"), on="run_dir", how="left")
    total_with_data = cum["run_dir"].n_unique()
    cand = r.join(cum.select("run_dir").unique(), on="run_dir", how="semi")
    # Most notable for a token budget: the runs that crossed it, then the highest share of
    # their own budget, then runs with history compactions, then the most tokens.
    cand = cand.with_columns(
        (pl.col("total_tokens") / pl.col("budget").cast(pl.Float64)).alias("_frac"))
    chosen = (cand.sort([(pl.col("terminal_reason") == "token_budget_exceeded").fill_null(False),
                         "_frac", pl.col("compactions").is_not_null(), "total_tokens",
                         "run_dir"],
                        descending=[True, True, True, True, False], nulls_last=True)
              .head(max_runs).drop("_frac"))
    chosen = chosen.join(run_labels(chosen), on="run_dir", how="left", suffix="_l")
    # One colour per way a run ends against its budget, not one per run: forty runs in
    # forty colours drew forty look-alike lines and a forty-entry legend. Which run a line
    # is: its tooltip, and a click follows it (focus_run) through every chart.
    frac = pl.col("total_tokens") / pl.col("budget").cast(pl.Float64)
    chosen = chosen.with_columns(
        pl.when(pl.col("terminal_reason") == "token_budget_exceeded")
        .then(pl.lit(TOKEN_GROUPS[0]))
        .when(frac > 1).then(pl.lit(TOKEN_GROUPS[1]))
        .when(frac >= 0.9).then(pl.lit(TOKEN_GROUPS[2]))
        .when(frac.is_not_null()).then(pl.lit(TOKEN_GROUPS[3]))
        .otherwise(pl.lit(TOKEN_GROUPS[4])).alias("group"))
    line_df = _downsample(cum.join(chosen.select("run_dir"), on="run_dir", how="semi"),
                          max_points)
    line_df = line_df.join(chosen.select("run_dir", "run", "run_id", "budget", "group"),
                           on="run_dir", how="left").drop("run_dir")
    comp_pts = (comp.join(chosen.select("run_dir", "run", "run_id"), on="run_dir", how="inner")
                .sort("run_dir", "sequence")
                .join_asof(cum_all.select("run_dir", "sequence", "tokens")
                           .sort("run_dir", "sequence"), on="sequence", by="run_dir",
                           check_sortedness=False)
                .drop("run_dir"))
    budgets = chosen.filter(pl.col("budget").is_not_null()).select("run", "run_id", "budget",
                                                                    "group")
    sel = alt.selection_point(fields=["group"], bind="legend", name="token_run")
    color = alt.Color("group:N", title="run ends", scale=alt.Scale(
        domain=list(TOKEN_GROUPS), range=list(TOKEN_GROUP_COLORS)),
        legend=_legend("run ends (click)", orient="bottom", columns=3))
    # Budgets that differ a lot (200k next to 5M) would flatten every line: then draw each
    # run as a fraction of its own max_total_tokens (runs without a budget are left out).
    use_frac = budgets.height > 0 and (budgets["budget"].max() or 0) > 3 * max(
        budgets["budget"].min() or 1, 1)
    dropped = 0
    if use_frac:
        dropped = chosen.filter(pl.col("budget").is_null()).height
        line_df = line_df.filter(pl.col("budget").is_not_null() & (pl.col("budget") > 0))
        line_df = line_df.with_columns((pl.col("tokens") / pl.col("budget")).round(5)
                                       .alias("y"))
        comp_pts = (comp_pts.join(chosen.select("run", "budget"), on="run", how="inner")
                    .filter(pl.col("budget") > 0)
                    .with_columns((pl.col("tokens") / pl.col("budget")).round(5).alias("y")))
        y_enc = alt.Y("y:Q", title="cumulative tokens / max_total_tokens",
                      axis=alt.Axis(format="%"))
    else:
        line_df = line_df.with_columns(pl.col("tokens").alias("y"))
        comp_pts = comp_pts.with_columns(pl.col("tokens").alias("y"))
        y_enc = alt.Y("y:Q", title="cumulative total tokens", axis=alt.Axis(format="~s"))
    line = alt.Chart(_values(line_df)).mark_line(interpolate="step-after").encode(
        x=alt.X("sequence:Q", title="event sequence"),
        y=y_enc,
        color=color, detail="run:N",
        opacity=alt.condition(sel, alt.value(0.75), alt.value(0.08)),
        tooltip=["run:N", "run_id:N", "sequence:Q", "event_type:N", "tokens:Q", "budget:Q"]
    ).add_params(sel)
    layers: list[Any] = [line]
    if use_frac:
        layers.append(alt.Chart(_values(pl.DataFrame({"y": [1.0]}))).mark_rule(
            color="#d62728", strokeDash=[6, 3]).encode(y="y:Q"))
    elif budgets.height:
        layers.append(alt.Chart(_values(budgets)).mark_rule(strokeDash=[6, 3]).encode(
            y=alt.Y("budget:Q"), color=alt.Color("group:N", legend=None),
            opacity=alt.condition(sel, alt.value(0.9), alt.value(0.12)),
            tooltip=["run_id:N", alt.Tooltip("budget:Q", title="max_total_tokens")]))
    # The final total from session.json at the end of each line: the model call that crossed
    # the budget is charged there but has no model.completed event, so the replayed line
    # alone stops short of the budget.
    ends = (line_df.group_by("run", maintain_order=True).agg(pl.col("sequence").max())
            .join(chosen.select("run", "run_id", "budget", "total_tokens", "group"), on="run",
                  how="inner")
            .filter(pl.col("total_tokens").is_not_null()))
    if use_frac:
        ends = ends.filter(pl.col("budget") > 0).with_columns(
            (pl.col("total_tokens") / pl.col("budget")).round(5).alias("y"))
    else:
        ends = ends.with_columns(pl.col("total_tokens").cast(pl.Float64).alias("y"))
    if ends.height:
        layers.append(alt.Chart(_values(ends)).mark_point(
            shape="triangle-up", size=70, filled=True, color="#d62728").encode(
            x="sequence:Q", y="y:Q",
            opacity=alt.condition(sel, alt.value(0.9), alt.value(0.15)),
            tooltip=["run_id:N", alt.Tooltip("total_tokens:Q", title="final (session.json)"),
                     "budget:Q"]))
    if comp_pts.height:
        layers.append(alt.Chart(_values(comp_pts)).mark_point(
            shape="diamond", size=110, filled=True, color="#111").encode(
            x="sequence:Q", y="y:Q",
            tooltip=["run_id:N", "sequence:Q", "tokens:Q",
                     alt.Tooltip("run_id:N", title="compaction in")]))
    ttl = _title(f"{title}: cumulative tokens (◆ compaction, ▲ final in session.json)",
                 chosen.height, total_with_data)
    if chosen.height < total_with_data:
        ttl = alt.TitleParams(ttl.text, subtitle=f"{chosen.height} of {total_with_data} runs: "
                              "token_budget_exceeded first, then the highest share of their "
                              "budget", anchor="start")
    if use_frac:
        ttl = alt.TitleParams(ttl.text, subtitle=[ttl.subtitle, "share of each run's own "
                              "budget (budgets differ)"] + (
                                  [f"{dropped} picked run(s) without a budget not drawn"]
                                  if dropped else []), anchor="start")
    left = alt.layer(*layers).properties(width=380, height=260, title=ttl)
    with_budget = r.filter(pl.col("budget").is_not_null() & (pl.col("budget") > 0)
                           & pl.col("total_tokens").is_not_null())
    if with_budget.height == 0:
        right = _empty("Final tokens / max_total_tokens", "no run sets max_total_tokens")
    else:
        nb = 10
        hist = (with_budget.with_columns(
            (pl.col("total_tokens") / pl.col("budget")).alias("f"))
            .with_columns((pl.col("f").clip(0, 1.5) * nb).floor().cast(pl.Int64).alias("b"))
            .group_by("b", maintain_order=True).agg(pl.len().alias("runs"),
                               (pl.col("f") > 1).any().alias("over"))
            .with_columns((pl.col("b") / nb).alias("from_f"), ((pl.col("b") + 1) / nb)
                          .alias("to_f"),
                          pl.when(pl.col("b") >= nb).then(pl.lit("over budget"))
                          .otherwise(pl.lit("within")).alias("status")))
        right = (alt.Chart(_values(hist), title=alt.TitleParams(
            "Final tokens / max_total_tokens", subtitle=f"all {with_budget.height} runs "
            "with a token budget", anchor="start"))
            .mark_bar().encode(
                x=alt.X("from_f:Q", bin="binned", title="fraction of budget (last bin: ≥150%)",
                        axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1.6])),
                x2="to_f:Q",
                y=alt.Y("runs:Q", title="runs"),
                color=alt.Color("status:N", scale=alt.Scale(domain=["within", "over budget"],
                                                            range=["#4c9be8", "#d62728"]),
                                legend=_legend("status", orient="bottom")),
                tooltip=["from_f:Q", "to_f:Q", "runs:Q", "status:N"])
            .properties(width=170, height=260))
    both = alt.hconcat(left, right).resolve_scale(color="independent")
    band = token_burn_bands(r, cum_all, max_lines=max_lines,
                            max_points=min(max_points, CAPS["band_points"]))
    return with_focus(alt.vconcat(both, band).resolve_scale(color="independent")
                      if band is not None else both)


def token_burn_bands(r: pl.DataFrame, cum: pl.DataFrame, *, max_lines: int = 8,
                     max_points: int = CAPS["band_points"], bins: int = 50
                     ) -> alt.LayerChart | None:
    """Token budget burn-down for the whole fleet: cumulative tokens / ``max_total_tokens``
    along each run's events (0–100 % of its sequence range), as quantile bands over every
    run with a budget, ending at the final total in ``session.json`` (the crossing call of a
    token failure has no ``model.completed``); the runs over or closest to their budget
    drawn on top, labelled.

    Args:
        r: one row per run: ``run_dir``, ``run_id``, ``budget``, ``total_tokens``,
            ``terminal_reason`` (+ the :func:`run_labels` inputs).
        cum: ``run_dir``, ``sequence``, ``event_type``, ``tokens`` (cumulative).
        max_lines: runs drawn individually.
        max_points: cap on their points.
        bins: points of the bands.
    """
    rb = (r.filter(pl.col("budget").is_not_null() & (pl.col("budget") > 0))
          .with_columns((pl.col("total_tokens") / pl.col("budget")).alias("frac")))
    c = (cum.join(rb.select("run_dir", "budget"), on="run_dir", how="inner")
         .with_columns(pl.col("sequence").min().over("run_dir").alias("_s0"),
                       pl.col("sequence").max().over("run_dir").alias("_s1")))
    if c.height == 0:
        return None
    c = c.with_columns(
        pl.when(pl.col("_s1") > pl.col("_s0"))
        .then((pl.col("sequence") - pl.col("_s0")) / (pl.col("_s1") - pl.col("_s0")))
        .otherwise(1.0).alias("x"),
        (pl.col("tokens") / pl.col("budget")).alias("y"))
    final = (rb.filter(pl.col("frac").is_not_null())
             .join(c.select("run_dir", "_s1").unique("run_dir", maintain_order=True),
                   on="run_dir", how="inner", maintain_order="left")
             .select("run_dir", pl.col("_s1").alias("sequence"),
                     pl.lit("final (session.json)").alias("event_type"),
                     pl.lit(1.0).alias("x"), pl.col("frac").alias("y"), pl.lit(1).alias("_f")))
    c = (pl.concat([c.select("run_dir", "sequence", "event_type", "x", "y",
                             pl.lit(0).alias("_f")), final])
         .sort("run_dir", "x", "_f", "sequence", maintain_order=True).drop("_f"))
    bands = quantile_bands(c, "x", "y", bins=bins)
    n = int(bands["runs"].max() or 0)
    have = rb.join(c.select("run_dir").unique(), on="run_dir", how="semi").with_columns(
        ((pl.col("terminal_reason") == "token_budget_exceeded").fill_null(False)
         | (pl.col("frac") > 1).fill_null(False)).alias("_over"),
        pl.col("frac").fill_null(0.0))
    pick = _burn_pick(have, "frac", pl.col("_over"), max_lines)
    pick = pick.join(run_labels(pick), on="run_dir", how="left", suffix="_l")
    lines = _downsample(c.join(pick.select("run_dir", "run", "run_id"), on="run_dir",
                               how="inner", maintain_order="left"), max_points)
    over = pick.filter(pl.col("_over")).height
    return band_burn_chart(
        bands, lines.drop("run_dir"),
        title="Token burn-down along the run, whole fleet",
        subtitle=[f"bands: {n} runs with max_total_tokens (p10–p90, p25–p75, median), each",
                  "on its own event range, ending at its final total in session.json;",
                  f"red: {over} over budget, the {pick.height - over} closest within it "
                  "(over 150 % drawn at 150 %)"],
        x_title="share of the run's events", y_title="tokens / max_total_tokens", y_cap=1.5)


# --------------------------------------------------------------------------- forks
def fork_points(*, runs: pl.DataFrame, forks: pl.DataFrame | None = None,
                events: pl.DataFrame | None = None, states: pl.DataFrame | None = None,
                max_runs: int = CAPS["fork_runs"],
                max_points: int = CAPS["fork_points"]) -> alt.LayerChart | alt.Chart:
    """Fork runs linked to their source at the fork sequence; safe fork points of failed runs.

    One row per run (sources, their forks, and failed or crashed runs). A grey rule spans each
    run's event sequences; small green ticks are safe fork points (``fork_safe``); a gold star
    is the last safe point before a failure or crash. A fork run is drawn at the sequence it
    was forked from, with a purple link from the source's fork point to the fork's row.

    Args:
        runs: ``runs_df``.
        forks: ``forks_df`` (preferred): ``fork_link`` and ``candidate`` rows.
        events: ``events_df`` (fallback for links: ``run.forked`` data).
        states: ``states_df`` (fallback for safe points: ``fork_safe``).
        max_runs: rows drawn.
        max_points: cap on safe-point ticks.

    >>> import polars as pl
    >>> r = pl.DataFrame({"run_dir": ["s", "f"], "run_id": ["s", "fork-1"],
    ...     "kind": ["native", "fork"], "verdict": ["terminal", "not_resumable"],
    ...     "terminal_reason": ["verified", None], "last_sequence": [40, 0]})
    >>> f = pl.DataFrame({"row_kind": ["fork_link"], "run_dir": ["f"], "run_id": ["fork-1"],
    ...     "sequence": [0], "source_run_dir": ["s"], "fork_point_sequence": [12],
    ...     "last_safe_before": [None]})
    >>> spec = fork_points(runs=r, forks=f).to_dict()
    >>> [l["mark"]["type"] for l in spec["layer"]][:2]
    ['rule', 'tick']
    """
    title = "Fork points"
    r = runs.select("run_dir", _col(runs, "run_id", pl.Utf8).alias("run_id"),
                    _col(runs, "kind", pl.Utf8).alias("kind"),
                    _col(runs, "verdict", pl.Utf8).alias("verdict"),
                    _col(runs, "terminal_reason", pl.Utf8).alias("terminal_reason"),
                    _col(runs, "last_sequence", pl.Int64).alias("last_sequence"),
                    _col(runs, "outcome", pl.Utf8).alias("outcome"),
                    *_task_cols(runs))
    links = pl.DataFrame(schema={"run_dir": pl.Utf8, "source_run_dir": pl.Utf8,
                                 "fork_point_sequence": pl.Int64})
    cands = pl.DataFrame(schema={"run_dir": pl.Utf8, "sequence": pl.Int64,
                                 "last_safe_before": pl.Utf8})
    if _has(forks, "row_kind", "run_dir", "source_run_dir", "fork_point_sequence"):
        assert forks is not None
        links = forks.filter(pl.col("row_kind") == "fork_link").select(
            "run_dir", "source_run_dir", "fork_point_sequence")
        cands = forks.filter(pl.col("row_kind") == "candidate").select(
            "run_dir", "sequence", _col(forks, "last_safe_before", pl.Utf8)
            .alias("last_safe_before"))
    else:
        if _has(events, "run_dir", "event_type", "data"):
            assert events is not None
            by_name = r.select("run_dir", pl.col("run_dir").map_elements(
                lambda p: os.path.basename(os.path.normpath(p)), return_dtype=pl.Utf8)
                .alias("src_name"))
            links = (events.filter(pl.col("event_type") == "run.forked").select(
                "run_dir", _json_field("data", "source_run_id").alias("src_name"),
                _json_field("data", "fork_point_sequence", pl.Int64).alias(
                    "fork_point_sequence"))
                .join(by_name.rename({"run_dir": "source_run_dir"}), on="src_name",
                      how="left").select("run_dir", "source_run_dir", "fork_point_sequence"))
        if _has(states, "run_dir", "sequence", "fork_safe"):
            assert states is not None
            cands = states.filter(pl.col("fork_safe")).select(
                "run_dir", "sequence", pl.lit(None, pl.Utf8).alias("last_safe_before"))
    # failed or crashed: the run fact (tables.facts), forks and external runs aside
    failed = r.filter(pl.col("outcome").is_in(["failed", "crashed", "interrupted"])
                      & ~pl.col("kind").fill_null("").is_in(["fork", "external"]))
    wanted = pl.concat([
        links.select(pl.col("source_run_dir").alias("run_dir"), pl.lit(0).alias("prio")),
        links.select("run_dir", pl.lit(0).alias("prio")),
        failed.select("run_dir", pl.lit(1).alias("prio"))]).drop_nulls("run_dir")
    wanted = wanted.group_by("run_dir", maintain_order=True).agg(pl.col("prio").min()).sort("prio", "run_dir")
    total = wanted.height
    if total == 0:
        return _empty(title, "no fork runs and no failed or crashed runs")
    wanted = wanted.head(max_runs)
    rows = wanted.join(r, on="run_dir", how="left")
    rows = rows.join(run_labels(rows), on="run_dir", how="left", suffix="_l")
    # Row order: each source followed by its forks.
    link_of = dict(links.select("run_dir", "source_run_dir").iter_rows())
    label = dict(rows.select("run_dir", "run").iter_rows())
    order: list[str] = []
    for rd in rows["run_dir"].to_list():
        if rd in link_of and link_of[rd] in label:
            continue
        order.append(label[rd])
        order += [label[f] for f, s in link_of.items() if s == rd and f in label]
    order += [label[rd] for rd in rows["run_dir"].to_list() if label[rd] not in order]
    fork_at = links.select("run_dir", "fork_point_sequence")
    spans = rows.join(fork_at, on="run_dir", how="left").select(
        "run", "run_id", "kind", "verdict", "terminal_reason",
        pl.coalesce("fork_point_sequence", pl.lit(0)).alias("from_seq"),
        (pl.coalesce("fork_point_sequence", pl.lit(0))
         + pl.col("last_sequence").fill_null(0)).alias("to_seq"))
    safe = (cands.join(rows.select("run_dir", "run", "run_id"), on="run_dir", how="inner")
            .join(fork_at, on="run_dir", how="left")
            .with_columns((pl.col("sequence") + pl.col("fork_point_sequence").fill_null(0))
                          .alias("x_seq")))
    last_safe = safe.filter(pl.col("last_safe_before").is_not_null())
    safe = safe.filter(pl.col("last_safe_before").is_null())
    if safe.height > max_points:
        safe = safe.sample(max_points, seed=0)
    safe = safe.select("run", "run_id", "sequence", "x_seq")
    last_safe = last_safe.select("run", "run_id", "sequence", "x_seq", "last_safe_before")
    link_rows = (links.join(rows.select("run_dir", pl.col("run").alias("fork_run"),
                                        pl.col("run_id").alias("fork_id")), on="run_dir",
                            how="inner")
                 .join(rows.select(pl.col("run_dir").alias("source_run_dir"),
                                   pl.col("run").alias("source_run"),
                                   pl.col("run_id").alias("source_id")),
                       on="source_run_dir", how="inner")
                 .select("fork_run", "fork_id", "source_run", "source_id",
                         "fork_point_sequence"))
    y = alt.Y("run:N", sort=order, title=None, scale=alt.Scale(domain=order))
    kind_scale = alt.Scale(domain=["native", "fork", "subagent", "external"],
                           range=["#7f7f7f", "#8e44ad", "#17becf", "#bcbd22"])
    span = alt.Chart(_values(spans)).mark_rule(strokeWidth=3, opacity=0.6).encode(
        x=alt.X("from_seq:Q", title="event sequence (fork runs drawn from their fork point)"),
        x2="to_seq:Q", y=y, color=alt.Color("kind:N", scale=kind_scale, title="run kind"),
        tooltip=["run_id:N", "kind:N", "verdict:N", "terminal_reason:N",
                 alt.Tooltip("to_seq:Q", title="last sequence")])
    ticks = alt.Chart(_values(safe)).mark_tick(color="#2ca02c", thickness=1.5, size=10).encode(
        x="x_seq:Q", y=y, tooltip=["run_id:N", alt.Tooltip("sequence:Q", title="sequence"),
                                   alt.Tooltip("x_seq:Q", title="safe fork point")])
    layers: list[Any] = [span, ticks]
    if last_safe.height:
        layers.append(alt.Chart(_values(last_safe)).mark_point(
            shape="M0,-1L0.3,-0.3L1,0L0.3,0.3L0,1L-0.3,0.3L-1,0L-0.3,-0.3Z", size=160,
            filled=True, color="#f1c40f", stroke="#7a5c00", strokeWidth=0.6).encode(
            x="x_seq:Q", y=y,
            tooltip=["run_id:N", alt.Tooltip("sequence:Q", title="sequence"),
                     alt.Tooltip("last_safe_before:N", title="last safe point before")]))
    if link_rows.height:
        layers.append(alt.Chart(_values(link_rows)).mark_rule(
            color="#8e44ad", strokeWidth=2).encode(
            x="fork_point_sequence:Q",
            y=alt.Y("source_run:N", sort=order, title=None, scale=alt.Scale(domain=order)),
            y2="fork_run:N",
            tooltip=[alt.Tooltip("fork_id:N", title="fork run_id"),
                     alt.Tooltip("source_id:N", title="source run_id"),
                     alt.Tooltip("fork_point_sequence:Q", title="fork sequence")]))
        layers.append(alt.Chart(_values(link_rows)).mark_point(
            shape="circle", size=80, filled=True, color="#8e44ad").encode(
            x="fork_point_sequence:Q",
            y=alt.Y("source_run:N", sort=order, title=None, scale=alt.Scale(domain=order)),
            tooltip=[alt.Tooltip("fork_id:N", title="fork run_id"),
                     alt.Tooltip("source_id:N", title="source run_id"),
                     alt.Tooltip("fork_point_sequence:Q", title="fork sequence")]))
    return alt.layer(*layers).properties(
        width=620, height=alt.Step(20),
        title=_title(f"{title}: {link_rows.height} fork link(s); ★ last safe point before a "
                     "failure or crash", len(order), total))


# --------------------------------------------------------------------------- fleet questions
OUTCOME_ORDER: tuple[str, ...] = OUTCOME_GROUPS
"""The outcome groups of the charts, in legend order (``tables.facts.OUTCOME_GROUPS``)."""
OUTCOME_COLORS: Mapping[str, str] = dict(zip(OUTCOME_ORDER, (
    "#2e7d32", "#81c784", "#a5d6a7", "#bdbdbd", "#d62728", "#ff7f0e", "#e377c2", "#8c564b",
    "#9467bd", "#c49c94", "#bcbd22", "#17becf", "#1f77b4", "#7f7f7f", "#000000"), strict=True))


def outcomes(runs: pl.DataFrame) -> pl.DataFrame:
    """One outcome group per run: ``run_dir`` and ``outcome``, the run fact ``runs_df.outcome``
    refined by its terminal reason (:func:`rivumi_analysis.tables.facts.outcome_group`, the
    one definition: ``completed: verified``, ``failed: provider``, ``crashed``, ...).

    >>> import polars as pl
    >>> r = pl.DataFrame({"run_dir": list("abcd"),
    ...     "outcome": ["completed", "failed", "crashed", "fork_not_run"],
    ...     "terminal_reason": ["verified", "odd_reason", None, None]})
    >>> outcomes(r)["outcome"].to_list()
    ['completed: verified', 'failed: other', 'crashed', 'fork_not_run']
    """
    return runs.select("run_dir", outcome_group(_col(runs, "outcome", pl.Utf8),
                                                _col(runs, "terminal_reason", pl.Utf8)))


def _legend(title: str, **kw: Any) -> alt.Legend:
    """A legend that never truncates (``symbolLimit=0``)."""
    return alt.Legend(title=title, symbolLimit=0, labelLimit=260, **kw)


def outcome_mix(runs: pl.DataFrame) -> alt.VConcatChart | alt.Chart:
    """What happened to the runs, and is it getting better? Outcome per day, all runs.

    Top: runs started per day (UTC), stacked by outcome. Bottom: the share of each outcome
    over the whole fleet. Click an outcome in the legend to highlight it in both.

    >>> import polars as pl
    >>> from datetime import datetime, timezone
    >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    >>> r = pl.DataFrame({"run_dir": ["a", "b"], "outcome": ["completed", "failed"],
    ...     "terminal_reason": ["verified", "repeated_action"], "started_at": [t, t]})
    >>> d = outcome_mix(r).to_dict()
    >>> d["vconcat"][0]["encoding"]["x"]["field"]
    'day'
    """
    title = "Outcomes over time"
    if runs.height == 0:
        return _empty(title, "no runs")
    o = runs.select("run_dir", _col(runs, "started_at", pl.Datetime("us", "UTC"))
                    .alias("started_at")).join(outcomes(runs), on="run_dir")
    undated = o.filter(pl.col("started_at").is_null()).height
    per_day = (o.filter(pl.col("started_at").is_not_null())
               .group_by(pl.col("started_at").dt.date().alias("day"), "outcome", maintain_order=True).len("runs")
               .sort("day", "outcome"))
    share = (o.group_by("outcome", maintain_order=True).len("runs")
             .with_columns((pl.col("runs") / pl.col("runs").sum()).alias("share")))
    present = [x for x in OUTCOME_ORDER if x in set(share["outcome"].to_list())]
    color = alt.Color("outcome:N", scale=alt.Scale(
        domain=present, range=[OUTCOME_COLORS[x] for x in present]),
        legend=_legend("outcome (click)", orient="bottom", columns=3))
    sel = alt.selection_point(fields=["outcome"], bind="legend", name="outcome_pick")
    opacity = alt.condition(sel, alt.value(1.0), alt.value(0.2))
    days = per_day["day"].n_unique()
    sub = (f"{o.height} runs, {days} day(s) (UTC, by start)"
           + (f"; {undated} run(s) without a start time are counted below only" if undated
              else ""))
    top = (alt.Chart(_values(per_day), title=alt.TitleParams(title, subtitle=sub,
                                                              anchor="start"))
           .mark_bar()
           .encode(x=alt.X("day:T", title="day (UTC)", timeUnit="utcyearmonthdate",
                           axis=alt.Axis(format="%b %d", labelAngle=-40)),
                   y=alt.Y("sum(runs):Q", title="runs started"),
                   color=color, opacity=opacity, order=alt.Order("outcome:N"),
                   tooltip=[alt.Tooltip("day:T", timeUnit="utcyearmonthdate"), "outcome:N",
                            alt.Tooltip("sum(runs):Q", title="runs")])
           .add_params(sel).properties(width=620, height=220))
    bottom = (alt.Chart(_values(share), title="Share of all runs")
              .mark_bar()
              .encode(y=alt.Y("outcome:N", sort=present, title=None),
                      x=alt.X("share:Q", axis=alt.Axis(format="%"), title="share of runs"),
                      color=alt.Color("outcome:N", scale=alt.Scale(
                          domain=present, range=[OUTCOME_COLORS[x] for x in present]),
                          legend=None),
                      opacity=opacity,
                      tooltip=["outcome:N", "runs:Q", alt.Tooltip("share:Q", format=".1%")])
              .properties(width=560, height=alt.Step(16)))
    labels = bottom.mark_text(align="left", dx=3, fontSize=11).encode(
        text=alt.Text("runs:Q"), color=alt.value("#333"), opacity=alt.value(1))
    return alt.vconcat(top, alt.layer(bottom, labels)).resolve_scale(color="shared")


def _run_days(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.select("run_dir", _col(runs, "started_at", pl.Datetime("us", "UTC"))
                       .dt.date().alias("day"))


def cost_by_model(*, runs: pl.DataFrame, usage: pl.DataFrame | None) -> alt.Chart | Any:
    """Where do tokens and money go? Tokens and cost per model, and per day.

    Every usage row (one per model call, ``usage_df``) counts for tokens; cost sums only the
    rows with a cost estimate, and the subtitle states the share of rows whose cost is
    unknown (models missing from the provider catalog, older runners).

    >>> import polars as pl
    >>> u = pl.DataFrame({"run_dir": ["a", "a"], "model": ["m1", "m2"], "provider": ["p", "p"],
    ...     "total_tokens": [10, 20], "total_cost": [0.5, None]})
    >>> r = pl.DataFrame({"run_dir": ["a"]})
    >>> d = cost_by_model(runs=r, usage=u).to_dict()
    >>> d["vconcat"][0]["hconcat"][0]["title"]["subtitle"][0][:24]
    '1 of 2 usage rows (50.0%'
    """
    title = "Tokens and cost per model"
    if not _has(usage, "run_dir", "model", "total_tokens") or usage is None or usage.height == 0:
        return _empty(title, "no usage records")
    u = usage.select("run_dir", pl.col("model").fill_null("(unknown model)"),
                     _col(usage, "provider", pl.Utf8).fill_null("?").alias("provider"),
                     pl.col("total_tokens").cast(pl.Int64).fill_null(0),
                     _col(usage, "total_cost", pl.Float64).alias("cost"))
    u = u.join(_run_days(runs), on="run_dir", how="left")
    unknown = u.filter(pl.col("cost").is_null()).height
    per_model = (u.group_by("model", "provider", maintain_order=True)
                 .agg(pl.col("total_tokens").sum().alias("tokens"),
                      pl.col("cost").sum().alias("cost"), pl.len().alias("rows"),
                      pl.col("cost").is_null().sum().alias("rows_cost_unknown"),
                      pl.col("run_dir").n_unique().alias("runs"))
                 .with_columns((pl.col("rows_cost_unknown") / pl.col("rows")).round(4)
                               .alias("unknown_share"))
                 .sort("tokens", descending=True))
    per_day = (u.filter(pl.col("day").is_not_null())
               .group_by("day", "model", maintain_order=True).agg(pl.col("total_tokens").sum().alias("tokens"),
                                             pl.col("cost").sum().round(6).alias("cost"))
               .sort("day", "model"))
    sub = (f"{unknown} of {u.height} usage rows ({100 * unknown / max(u.height, 1):.1f}%) "
           "have no cost estimate:")
    sub2 = "their tokens are counted, their cost is not"
    models = per_model["model"].to_list()
    color = alt.Color("model:N", scale=alt.Scale(domain=models), legend=_legend("model (click)", orient="bottom", columns=4))
    sel = alt.selection_point(fields=["model"], bind="legend", name="model_pick")
    op = alt.condition(sel, alt.value(1.0), alt.value(0.2))
    tip = ["model:N", "provider:N", alt.Tooltip("tokens:Q", format=","),
           alt.Tooltip("cost:Q", format="$.4f"), "runs:Q", "rows:Q",
           alt.Tooltip("unknown_share:Q", format=".0%", title="rows with unknown cost")]
    tok = (alt.Chart(_values(per_model), title=alt.TitleParams(title, subtitle=[sub, sub2],
                                                                anchor="start"))
           .mark_bar().encode(y=alt.Y("model:N", sort=models, title=None),
                              x=alt.X("tokens:Q", title="total tokens", axis=alt.Axis(
                                  format="~s")),
                              color=color, opacity=op, tooltip=tip)
           .add_params(sel).properties(width=200, height=alt.Step(18)))
    cost = (alt.Chart(_values(per_model), title="Cost (known rows)")
            .mark_bar().encode(y=alt.Y("model:N", sort=models, title=None,
                                       axis=alt.Axis(labels=False, ticks=False)),
                               x=alt.X("cost:Q", title="cost (USD)"),
                               color=color, opacity=op, tooltip=tip)
            .properties(width=140, height=alt.Step(18)))
    unknown_txt = (alt.Chart(_values(per_model), title="Cost unknown")
                   .mark_text(align="left").encode(
                       y=alt.Y("model:N", sort=models, title=None, axis=None),
                       text=alt.Text("unknown_share:Q", format=".0%"), tooltip=tip)
                   .properties(width=60, height=alt.Step(18)))
    daily = (alt.Chart(_values(per_day), title="Cost per day (known rows)")
             .mark_area(interpolate="step-after")
             .encode(x=alt.X("day:T", timeUnit="utcyearmonthdate", title="day (UTC)",
                             axis=alt.Axis(format="%b %d", labelAngle=-40)),
                     y=alt.Y("sum(cost):Q", title="cost (USD)", stack=True),
                     color=color, opacity=op,
                     tooltip=[alt.Tooltip("day:T", timeUnit="utcyearmonthdate"), "model:N",
                              alt.Tooltip("sum(cost):Q", format="$.4f", title="cost"),
                              alt.Tooltip("sum(tokens):Q", format=",", title="tokens")])
             .properties(width=620, height=160))
    return alt.vconcat(alt.hconcat(tok, cost, unknown_txt), daily).resolve_scale(
        color="shared")


def _task_group(runs: pl.DataFrame) -> tuple[pl.Expr, str]:
    for col, label in (("task_kind", "task kind"), ("repository", "repository"),
                       ("instruction_summary", "task")):
        if col in runs.columns:
            e = pl.col(col).cast(pl.Utf8)
            if col == "repository":
                e = e.str.replace(r".*/", "")
            return e.fill_null("?"), label
    return _col(runs, "kind", pl.Utf8).fill_null("?"), "run kind"


def task_kinds(*, runs: pl.DataFrame, usage: pl.DataFrame | None = None,
               max_groups: int = 25) -> alt.Chart | Any:
    """Which kinds of task succeed, and what do they cost? Per task kind (repository when
    the runs carry it, else run kind): success rate, runs, median tokens and cost per run.

    >>> import polars as pl
    >>> r = pl.DataFrame({"run_dir": list("abc"), "kind": ["native"] * 3,
    ...     "outcome": ["completed", "failed", "completed"],
    ...     "terminal_reason": ["verified", "repeated_action", "no_changes"],
    ...     "total_tokens": [10, 20, 30]})
    >>> d = task_kinds(runs=r).to_dict()
    >>> [round(x["success_rate"], 3) for x in d["hconcat"][0]["data"]["values"]]
    [0.667]
    """
    title = "Success rate and cost per task kind"
    if runs.height == 0:
        return _empty(title, "no runs")
    group, label = _task_group(runs)
    r = runs.select("run_dir", group.alias("group"),
                    _col(runs, "outcome", pl.Utf8).alias("fact"),
                    _col(runs, "total_tokens", pl.Int64).alias("tokens"))
    if _has(usage, "run_dir", "total_cost") and usage is not None:
        cost = usage.group_by("run_dir", maintain_order=True).agg(
            pl.col("total_cost").sum().alias("cost"),
            pl.col("total_cost").is_null().any().alias("cost_partial"))
        r = r.join(cost, on="run_dir", how="left")
    else:
        r = r.with_columns(pl.lit(None, pl.Float64).alias("cost"),
                           pl.lit(None, pl.Boolean).alias("cost_partial"))
    finished = pl.col("fact").is_in(list(TERMINAL_OUTCOMES))
    g = (r.group_by("group", maintain_order=True).agg(
        pl.len().alias("runs"), finished.sum().alias("finished"),
        (pl.col("fact") == "completed").sum().alias("succeeded"),
        pl.col("tokens").median().alias("median_tokens"),
        pl.col("cost").median().alias("median_cost"),
        pl.col("cost").sum().alias("total_cost"))
        .with_columns((pl.col("succeeded") / pl.col("finished")).alias("success_rate"))
        .sort("runs", descending=True))
    cut = max(g.height - max_groups, 0)
    g = g.head(max_groups)
    order = g["group"].to_list()
    sub = [f"{r.height} runs in {g.height + cut} {label}(s)"
           + (f"; {cut} smallest group(s) not shown" if cut else ""),
           "success = completed among ended runs (completed, failed, cancelled;",
           "crashed, interrupted, live, fork, unreadable: not ended)"]
    tip = [alt.Tooltip("group:N", title=label), "runs:Q", "finished:Q", "succeeded:Q",
           alt.Tooltip("success_rate:Q", format=".1%"),
           alt.Tooltip("median_tokens:Q", format=",.0f"),
           alt.Tooltip("median_cost:Q", format="$.4f"), alt.Tooltip("total_cost:Q",
                                                                     format="$.2f")]
    y = alt.Y("group:N", sort=order, title=label)
    rate = (alt.Chart(_values(g), title=alt.TitleParams(title, subtitle=sub, anchor="start"))
            .mark_bar(color="#2e7d32")
            .encode(y=y, x=alt.X("success_rate:Q", axis=alt.Axis(format="%"),
                                 scale=alt.Scale(domain=[0, 1]), title="success rate"),
                    tooltip=tip).properties(width=220, height=alt.Step(20)))
    rate_txt = rate.mark_text(align="left", dx=3, fontSize=11).encode(
        text=alt.Text("success_rate:Q", format=".0%"), color=alt.value("#333"))
    cost = (alt.Chart(_values(g), title="Median cost per run")
            .mark_bar(color="#8c6d31")
            .encode(y=alt.Y("group:N", sort=order, axis=None),
                    x=alt.X("median_cost:Q", title="USD (runs with a cost)"), tooltip=tip)
            .properties(width=150, height=alt.Step(20)))
    runs_bar = (alt.Chart(_values(g), title="Runs")
                .mark_bar(color="#90a4ae")
                .encode(y=alt.Y("group:N", sort=order, axis=None),
                        x=alt.X("runs:Q", title="runs"), tooltip=tip)
                .properties(width=100, height=alt.Step(20)))
    return alt.hconcat(alt.layer(rate, rate_txt), cost, runs_bar)


def top_runs(*, runs: pl.DataFrame, usage: pl.DataFrame | None = None,
             n: int = 15) -> alt.Chart | Any:
    """Which runs took longest and which cost most? The ``n`` slowest runs by wall time used
    (the run fact ``wall_time_used_seconds``) and the ``n`` most expensive by known cost,
    labelled readably (full id in the tooltip), against the fleet's median.

    >>> import polars as pl
    >>> r = pl.DataFrame({"run_dir": ["a", "b"], "run_id": ["a" * 32, "b" * 32],
    ...     "wall_time_used_seconds": [5.0, 50.0]})
    >>> d = top_runs(runs=r).to_dict()
    >>> [v["run_id"][:1] for v in d["hconcat"][0]["layer"][0]["data"]["values"]]
    ['b', 'a']
    """
    title = "Slowest and most expensive runs"
    if runs.height == 0:
        return _empty(title, "no runs")
    r = runs.with_columns(_col(runs, "wall_time_used_seconds", pl.Float64).alias("wall_s"),
                          _col(runs, "run_id", pl.Utf8).alias("run_id"))
    if _has(usage, "run_dir", "total_cost") and usage is not None:
        r = r.join(usage.group_by("run_dir", maintain_order=True).agg(pl.col("total_cost").sum().alias("cost"),
                                                 pl.len().alias("usage_rows")),
                   on="run_dir", how="left")
    else:
        r = r.with_columns(pl.lit(None, pl.Float64).alias("cost"))
    r = r.join(run_labels(r), on="run_dir", how="left", suffix="_l").drop(
        "outcome", strict=False).join(outcomes(r), on="run_dir", how="left")

    def panel(col: str, what: str, fmt: str) -> Any:
        have = r.filter(pl.col(col).is_not_null())
        if have.height == 0:
            return _empty(what, f"no run has {col}")
        top = have.sort(col, descending=True).head(n)
        med = float(have[col].median() or 0.0)
        order = top["run"].to_list()
        tip = [alt.Tooltip("run_id:N", title="run id"), "outcome:N",
               alt.Tooltip(f"{col}:Q", format=fmt)]
        data = top.select("run", "run_id", "outcome", col)
        bars = (alt.Chart(_values(data)).mark_bar().encode(
            y=alt.Y("run:N", sort=order, title=None, axis=alt.Axis(labelLimit=200)),
            x=alt.X(f"{col}:Q", title=what),
            color=alt.Color("outcome:N", scale=alt.Scale(
                domain=list(OUTCOME_COLORS), range=list(OUTCOME_COLORS.values())),
                legend=_legend("outcome", orient="bottom", columns=4)),
            opacity=focus_opacity(1.0, 0.2), tooltip=tip))
        rule = alt.Chart(_values(pl.DataFrame({"median": [med]}))).mark_rule(
            strokeDash=[4, 3], color="#333").encode(
            x="median:Q", tooltip=[alt.Tooltip("median:Q", format=fmt, title="fleet median")])
        return alt.layer(bars, rule).properties(
            width=180, height=alt.Step(16),
            title=alt.TitleParams(what, subtitle=f"top {top.height} of {have.height}; "
                                  "dashed: fleet median", anchor="start"))

    return with_focus(alt.hconcat(panel("wall_s", "wall seconds used", ",.1f"),
                                  panel("cost", "known cost (USD)", "$.4f")).properties(
        title=alt.TitleParams(title, anchor="start")))


def tool_error_rates(tool_calls: pl.DataFrame | None, *, max_tools: int = 25) -> Any:
    """Which tools fail, and how often? Per tool name: calls, error share by outcome.

    >>> import polars as pl
    >>> t = pl.DataFrame({"run_dir": ["a"] * 3, "name": ["read_file"] * 3,
    ...     "effect": ["read"] * 3, "outcome": ["ok", "error", "ok"]})
    >>> "layer" in tool_error_rates(t).to_dict()
    True
    """
    title = "Tool error rates"
    if not _has(tool_calls, "name", "outcome") or tool_calls is None or tool_calls.height == 0:
        return _empty(title, "no tool calls")
    g, cut, n_calls = tool_error_table(tool_calls, max_tools=max_tools)
    order = g["name"].to_list()
    tip = ["name:N", "effect:N", "calls:Q", "runs:Q", "errors:Q", "denied:Q",
           alt.Tooltip("not_ok:Q", title="not ok (any)"),
           alt.Tooltip("error_rate:Q", format=".1%")]
    sub = (f"{n_calls} tool calls; not ok = error, denied, unknown tool, not executed"
           + (f"; {cut} rarely used tool(s) not shown" if cut else ""))
    return _tool_error_chart(g, order, tip, title, sub)


def tool_error_table(tool_calls: pl.DataFrame, *, max_tools: int = 25
                     ) -> tuple[pl.DataFrame, int, int]:
    """Per tool name: calls, runs, errors, denied, not ok and ``error_rate`` (not ok / calls),
    for the ``max_tools`` most used tools; also returns how many tools were cut and the
    number of calls.

    >>> import polars as pl
    >>> t = pl.DataFrame({"run_dir": ["a"] * 3, "name": ["read_file"] * 3,
    ...     "effect": ["read"] * 3, "outcome": ["ok", "error", "ok"]})
    >>> g, cut, n = tool_error_table(t)
    >>> g.select("name", "calls", "not_ok").row(0), cut, n
    (('read_file', 3, 1), 0, 3)
    """
    t = tool_calls.select(pl.col("name").fill_null("?"),
                          _col(tool_calls, "effect", pl.Utf8).fill_null("unknown")
                          .alias("effect"), pl.col("outcome").fill_null("unknown"),
                          pl.col("run_dir"))
    g = (t.group_by("name", maintain_order=True).agg(
        pl.len().alias("calls"), (pl.col("outcome") != "ok").sum().alias("not_ok"),
        (pl.col("outcome") == "error").sum().alias("errors"),
        (pl.col("outcome") == "denied").sum().alias("denied"),
        pl.col("run_dir").n_unique().alias("runs"),
        pl.col("effect").mode().first().alias("effect"))
        .with_columns((pl.col("not_ok") / pl.col("calls")).alias("error_rate"))
        .sort("calls", descending=True))
    cut = max(g.height - max_tools, 0)
    g = g.head(max_tools).sort(["error_rate", "name"], descending=[True, False])
    return g, cut, t.height


def _tool_error_chart(g: pl.DataFrame, order: list[str], tip: list[Any], title: str,
                      sub: str) -> Any:
    bars = (alt.Chart(_values(g)).mark_bar().encode(
        y=alt.Y("name:N", sort=order, title=None),
        x=alt.X("error_rate:Q", axis=alt.Axis(format="%"), title="share of calls not ok"),
        color=alt.Color("effect:N", scale=alt.Scale(domain=list(EFFECT_COLORS),
                                                    range=list(EFFECT_COLORS.values())),
                        legend=_legend("effect", orient="bottom", direction="horizontal")),
        tooltip=tip))
    # the legend sits below the chart: the count labels at the bars' ends (a rate near
    # 100 %) ran into a legend on the right
    txt = bars.mark_text(align="left", dx=3, fontSize=11).encode(
        text=alt.Text("label:N"), color=alt.value("#333")).transform_calculate(
        label="format(datum.not_ok, ',') + ' of ' + format(datum.calls, ',')")
    return alt.layer(bars, txt).properties(
        width=520, height=alt.Step(18),
        title=alt.TitleParams(title, subtitle=sub, anchor="start"))
