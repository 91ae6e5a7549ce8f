"""``compare_groups``: outcome rates (Wilson intervals), tokens, cost, wall time and steps per
group of runs, with counts, in one call (issue 29). Every number is a run fact of ``runs_df``
(:mod:`rivumi_analysis.tables.facts`) or a sum of ``usage_df`` cost."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from ..errors import OUTCOMES
from .facts import TERMINAL_OUTCOMES

__all__ = ["GROUP_ALIASES", "compare_groups", "wilson_interval"]

GROUP_ALIASES = {"model": "model_id", "provider": "provider_name"}
"""Short names ``by`` accepts for ``runs_df`` columns."""

Z_95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95 % interval."""


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float | None, float | None]:
    """The Wilson score interval of a proportion ``successes / n`` (closed form; ``(None,
    None)`` when ``n`` is 0).

    >>> [round(x, 4) for x in wilson_interval(8, 10)]
    [0.4902, 0.9433]
    >>> wilson_interval(0, 0)
    (None, None)
    """
    if n <= 0:
        return None, None
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def _wilson_columns(frame: pl.DataFrame, name: str, hits: str, total: str,
                    z: float) -> pl.DataFrame:
    """``frame`` with ``<name>``, ``<name>_low``, ``<name>_high``: ``hits / total`` and its
    Wilson interval."""
    rows = [(None if t == 0 else h / t, *wilson_interval(h, t, z))
            for h, t in zip(frame[hits].to_list(), frame[total].to_list(), strict=True)]
    return frame.with_columns(
        pl.Series(name, [r[0] for r in rows], dtype=pl.Float64),
        pl.Series(f"{name}_low", [r[1] for r in rows], dtype=pl.Float64),
        pl.Series(f"{name}_high", [r[2] for r in rows], dtype=pl.Float64))


def compare_groups(runs: Any, by: str = "model_id", *, usage: pl.DataFrame | None = None,
                   z: float = Z_95) -> pl.DataFrame:
    """One row per group of runs (the values of ``runs_df[by]``; null is its own group):
    outcome counts and rates with Wilson intervals, tokens, cost, wall time and steps.

    Args:
        runs: a ``runs_df`` frame, or a source (a run directory, a folder of runs, a list
            of them, a fleet from ``load_fleet``): then ``runs_df`` and ``usage_df`` of it
            are loaded (the fleet read once).
        by: a ``runs_df`` column (``model`` and ``provider`` name ``model_id`` and
            ``provider_name``).
        usage: ``usage_df`` of the same runs, for cost (None with a frame: no cost).
        z: the normal quantile of the intervals (default: 95 %).

    Returns:
        Sorted by ``runs`` (descending) then group: ``<by>``, ``runs``, one count column per
        outcome (``completed`` ... ``unreadable``), ``ended`` (completed + failed +
        cancelled); ``success_rate`` (completed / ended), ``failure_rate`` (failed / ended),
        ``cancel_rate`` (cancelled / ended), ``unfinished_rate`` ((crashed + interrupted) /
        runs), each with ``_low``/``_high`` (Wilson); ``tokens_known`` (runs with
        total_tokens), ``tokens_total``, ``tokens_median``; ``cost_known_runs`` (runs whose
        every usage row has a cost), ``cost_known_share``, ``cost_total`` (those runs' sum),
        ``cost_median``; ``wall_time_known``, ``wall_time_median``, ``wall_time_total``
        (wall_time_used_seconds); ``steps_known``, ``steps_median``, ``steps_total``.

    Raises:
        ValueError: ``by`` is not a column of ``runs_df``.

    >>> import polars as pl
    >>> r = pl.DataFrame({"run_dir": list("abcd"), "model_id": ["m1", "m1", "m1", "m2"],
    ...     "outcome": ["completed", "failed", "crashed", "completed"],
    ...     "total_tokens": [10, 20, None, 5], "wall_time_used_seconds": [1.0, 2.0, 3.0, 4.0],
    ...     "step": [1, 2, 3, 4]})
    >>> g = compare_groups(r, by="model")
    >>> g.select("model_id", "runs", "ended", "success_rate", "tokens_known").rows()
    [('m1', 3, 2, 0.5, 2), ('m2', 1, 1, 1.0, 1)]
    """
    if not isinstance(runs, pl.DataFrame):
        from ..read.snapshot import is_loaded, load_fleet
        from .runs import runs_df
        from .usage import usage_df

        # (a wrong source type raises a TypeError naming what is accepted)
        fleet = runs if is_loaded(runs) else load_fleet(runs)
        if usage is None:
            usage = usage_df(fleet)
        runs = runs_df(fleet)
    col = GROUP_ALIASES.get(by, by)
    if col not in runs.columns:
        raise ValueError(f"by must be a runs_df column (or one of {sorted(GROUP_ALIASES)}), "
                         f"not {by!r}")
    r = runs.select("run_dir", pl.col(col).alias("_group"),
                    pl.col("outcome") if "outcome" in runs.columns
                    else pl.lit(None, pl.Utf8).alias("outcome"),
                    *[(pl.col(c) if c in runs.columns else pl.lit(None, dt).alias(c)).cast(dt)
                      for c, dt in (("total_tokens", pl.Int64), ("step", pl.Int64),
                                    ("wall_time_used_seconds", pl.Float64))])
    if usage is not None and {"run_dir", "total_cost", "cost_known"} <= set(usage.columns):
        cost = usage.group_by("run_dir").agg(
            pl.col("total_cost").sum().alias("_cost"),
            pl.col("cost_known").all().alias("_cost_known"))
        r = r.join(cost, on="run_dir", how="left")
    else:
        r = r.with_columns(pl.lit(None, pl.Float64).alias("_cost"),
                           pl.lit(None, pl.Boolean).alias("_cost_known"))
    known = pl.col("_cost_known").fill_null(False)
    g = r.group_by("_group").agg(
        pl.len().alias("runs"),
        *[(pl.col("outcome") == o).sum().alias(o) for o in OUTCOMES],
        pl.col("outcome").is_in(list(TERMINAL_OUTCOMES)).sum().alias("ended"),
        pl.col("outcome").is_in(["crashed", "interrupted"]).sum().alias("_unfinished"),
        pl.col("total_tokens").count().alias("tokens_known"),
        pl.col("total_tokens").sum().alias("tokens_total"),
        pl.col("total_tokens").median().alias("tokens_median"),
        known.sum().alias("cost_known_runs"),
        pl.col("_cost").filter(known).sum().alias("cost_total"),
        pl.col("_cost").filter(known).median().alias("cost_median"),
        pl.col("wall_time_used_seconds").count().alias("wall_time_known"),
        pl.col("wall_time_used_seconds").median().alias("wall_time_median"),
        pl.col("wall_time_used_seconds").sum().alias("wall_time_total"),
        pl.col("step").count().alias("steps_known"),
        pl.col("step").median().alias("steps_median"),
        pl.col("step").sum().alias("steps_total"),
    ).with_columns((pl.col("cost_known_runs") / pl.col("runs")).alias("cost_known_share"))
    g = g.with_columns(pl.col(c).cast(pl.Int64) for c in (
        "runs", *OUTCOMES, "ended", "_unfinished", "tokens_known", "cost_known_runs",
        "wall_time_known", "steps_known"))
    g = g.sort(["runs", "_group"], descending=[True, False], nulls_last=True)
    for name, hits, total in (("success_rate", "completed", "ended"),
                              ("failure_rate", "failed", "ended"),
                              ("cancel_rate", "cancelled", "ended"),
                              ("unfinished_rate", "_unfinished", "runs")):
        g = _wilson_columns(g, name, hits, total, z)
    order = ["_group", "runs", *OUTCOMES, "ended",
             *[f"{n}{s}" for n in ("success_rate", "failure_rate", "cancel_rate",
                                   "unfinished_rate") for s in ("", "_low", "_high")],
             "tokens_known", "tokens_total", "tokens_median", "cost_known_runs",
             "cost_known_share", "cost_total", "cost_median", "wall_time_known",
             "wall_time_median", "wall_time_total", "steps_known", "steps_median",
             "steps_total"]
    return g.select(order).rename({"_group": col})
