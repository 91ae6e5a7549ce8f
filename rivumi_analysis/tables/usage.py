"""``usage_df``: one row per model-usage lane record with cost (``model_usage`` in newer manifests, else derived from ``model.completed``/``role_lane.completed`` events)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ..read.snapshot import RunData
from ._common import (
    Builders,
    _float,
    _str,
    derived_frame,
    frame,
    load_columnar,
    usage_columns,
    usage_values,
    wanted_lines,
)

WANTS = (frozenset({"run.created", "session.resumed", "session.continued", "model.requested",
                   "model.fallback", "model.completed", "role_lane.completed"}), ())
"""The event types this table reads (names, prefixes); its builders read no other."""


def usage_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    return frame(usage_rows(runs), "UsageSchema")


def usage_rows(runs: Iterable[RunData]) -> list[dict[str, Any]]:
    """The rows of ``runs`` (no polars: safe in a forked worker); events of other types than
    :data:`WANTS` are never read."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        m = run.manifest or {}
        records = m.get("model_usage")
        if isinstance(records, list) and records:
            for i, r in enumerate(records):
                if not isinstance(r, dict):
                    continue
                rows.append(_usage_row(run, i, "manifest.model_usage", _str(r.get("lane")) or "?",
                                       _str(r.get("provider")), _str(r.get("model")),
                                       r.get("usage"), r.get("cost")))
            continue
        provider = model = call_provider = call_model = None
        index = 0  # this run's row count (was a scan of every earlier row: quadratic)
        for e in run.events:
            if e.event_type in ("run.created", "session.resumed", "session.continued"):
                provider, model = _str(e.data.get("provider")), _str(e.data.get("model"))
            elif e.event_type == "model.requested":
                call_provider, call_model = provider, model  # each call starts on the run's
            elif e.event_type == "model.fallback":
                call_provider = _str(e.data.get("to_provider"))
                call_model = _str(e.data.get("to_model"))
            elif e.event_type == "model.completed":
                rows.append(_usage_row(run, index, "events", "primary", call_provider,
                                       call_model, e.data.get("usage"), None))
                index += 1
            elif e.event_type == "role_lane.completed":
                rows.append(_usage_row(run, index, "events", "reviewer",
                                       _str(e.data.get("provider")), _str(e.data.get("model")),
                                       e.data.get("usage"), e.data.get("cost")))
                index += 1
    return rows


def _usage_row(run: RunData, i: int, source: str, lane: str, provider: str | None,
               model: str | None, usage: Any, cost: Any) -> dict[str, Any]:
    u = usage_columns(usage if isinstance(usage, dict) else {})
    for k in ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens"):
        u[k] = u[k] or 0
    if u["total_tokens"] is None:
        u["total_tokens"] = u["input_tokens"] + u["output_tokens"]
    cost = cost if isinstance(cost, dict) else {}
    costs = {k: _float(cost.get(k)) for k in ("input_cost", "cached_input_cost", "output_cost")}
    total_cost = _float(cost.get("total_cost"))
    if total_cost is None and cost and all(v is not None for v in costs.values()):
        total_cost = sum(v for v in costs.values() if v is not None)
    return {"run_dir": run.run_dir, "run_id": run.run_id, "index": i, "source": source,
            "lane": lane, "provider": provider, "model": model, **u,
            "currency": _str(cost.get("currency")), "cost_source": _str(cost.get("source")),
            **costs, "total_cost": total_cost, "cost_known": total_cost is not None}


def usage_table(runs: Sequence[RunData]) -> pl.DataFrame:
    """The table of ``runs``: clean logs handed over as columns (``fast``, the store's chunk)
    by :func:`_fast_rows`, every other run by :func:`usage_rows` (the oracle)."""
    return derived_frame(runs, BUILDERS, _model())


_COLUMNS = ("run_dir", "run_id", "index", "source", "lane", "provider", "model", "input_tokens",
            "output_tokens", "cached_input_tokens", "reasoning_tokens", "provider_total_tokens",
            "total_tokens", "currency", "cost_source", "input_cost", "cached_input_cost",
            "output_cost", "total_cost", "cost_known")
_SETTINGS = frozenset({"run.created", "session.resumed", "session.continued"})


def _fast_rows(runs: list[RunData]) -> list[tuple[Any, ...]]:
    """:func:`usage_rows` of clean logs, from their columns (``fast``: envelopes and parsed
    ``data``) and manifest, as positional rows: no ``Event``, no row dict."""
    rows: list[tuple[Any, ...]] = []
    for run in runs:
        m = run.manifest or {}
        records = m.get("model_usage")
        if isinstance(records, list) and records:
            for i, r in enumerate(records):
                if not isinstance(r, dict):
                    continue
                rows.append(_fast_row(run, i, "manifest.model_usage", _str(r.get("lane")) or "?",
                                      _str(r.get("provider")), _str(r.get("model")),
                                      r.get("usage"), r.get("cost")))
            continue
        dec = run.fast
        envelopes, objects = dec.envelopes, dec.objects
        provider = model = call_provider = call_model = None
        index = 0
        for j in wanted_lines(dec, WANTS):
            et = envelopes[j].event_type
            if et == "model.requested":
                call_provider, call_model = provider, model
            elif et == "model.completed":
                rows.append(_fast_row(run, index, "events", "primary", call_provider, call_model,
                                      objects[j].get("usage"), None))
                index += 1
            elif et in _SETTINGS:
                d = objects[j]
                provider, model = _str(d.get("provider")), _str(d.get("model"))
            elif et == "model.fallback":
                d = objects[j]
                call_provider, call_model = _str(d.get("to_provider")), _str(d.get("to_model"))
            else:  # role_lane.completed
                d = objects[j]
                rows.append(_fast_row(run, index, "events", "reviewer", _str(d.get("provider")),
                                      _str(d.get("model")), d.get("usage"), d.get("cost")))
                index += 1
    return rows


BUILDERS = Builders(
    _fast_rows,
    usage_rows,
    _COLUMNS)
"""How the loader and the store build this table (``tables._common.Builders``)."""


def _fast_row(run: RunData, i: int, source: str, lane: str, provider: str | None,
              model: str | None, usage: Any, cost: Any) -> tuple[Any, ...]:
    """:func:`_usage_row` as a positional row."""
    inp, out, cached, reasoning, ptt, total = usage_values(usage)
    inp, out = inp or 0, out or 0
    if total is None:
        total = inp + out
    if type(cost) is not dict or not cost:
        return (run.run_dir, run.run_id, i, source, lane, provider, model, inp, out,
                cached or 0, reasoning or 0, ptt, total, None, None, None, None, None, None,
                False)
    ic, cc, oc = (_float(cost.get("input_cost")), _float(cost.get("cached_input_cost")),
                  _float(cost.get("output_cost")))
    total_cost = _float(cost.get("total_cost"))
    if total_cost is None and ic is not None and cc is not None and oc is not None:
        total_cost = sum((ic, cc, oc))  # as _usage_row: 0 + ... (-0.0 sums to 0.0)
    return (run.run_dir, run.run_id, i, source, lane, provider, model, inp, out,
            cached or 0, reasoning or 0, ptt, total, _str(cost.get("currency")),
            _str(cost.get("source")), ic, cc, oc, total_cost, total_cost is not None)


def usage_df(source: Any = None, *, strict: bool = False,
             max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per model-usage lane record with cost (``model_usage`` in newer manifests, else derived from ``model.completed``/``role_lane.completed`` events).

    The in-memory loader behind the public one (``store/loaders.py``, which documents
    ``source``, ``strict`` and ``max_depth``); validated by
    :class:`~rivumi_analysis.schemas.UsageSchema`.

    >>> df = usage_df("tests/fixtures/example")
    >>> df["lane"].unique().to_list()
    ['primary']
    """
    return load_columnar(source, strict=strict, max_depth=max_depth, model=_model(),
                         builders=BUILDERS)


def cost_by_model(usage: pl.DataFrame, *, by: tuple[str, ...] = ("provider", "model")
                  ) -> pl.DataFrame:
    """Tokens and cost per model from a ``usage_df`` frame, with the unknown-cost share.

    ``known_cost`` sums only the calls whose cost is known (null when none is); ``unknown_cost_calls`` and
    ``unknown_cost_token_share`` say how much it leaves out. Emits a
    :class:`~rivumi_analysis.errors.CostUnknownWarning` when any summed row has no cost.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     df = cost_by_model(usage_df("tests/fixtures/example"))
    >>> df.select("model", "calls", "unknown_cost_calls").row(0), len(w)
    (('openai/gpt-oss-120b', 7, 7), 1)
    """
    import warnings

    from ..errors import CostUnknownWarning

    unknown = usage.filter(~pl.col("cost_known"))
    if unknown.height:
        share = unknown["total_tokens"].sum() / max(1, usage["total_tokens"].sum())
        warnings.warn(
            f"cost is unknown for {unknown.height} of {usage.height} model calls "
            f"({share:.1%} of tokens): known_cost undercounts; see unknown_cost_calls",
            CostUnknownWarning, stacklevel=2)
    return (usage.group_by(list(by)).agg(
        pl.len().alias("calls"),
        pl.col("total_tokens").sum().alias("total_tokens"),
        # null, not 0, when no call of the group has a known cost
        pl.when(pl.col("cost_known").any()).then(pl.col("total_cost").sum())
        .otherwise(None).alias("known_cost"),
        pl.col("currency").drop_nulls().first().alias("currency"),
        (~pl.col("cost_known")).sum().alias("unknown_cost_calls"),
        (pl.col("total_tokens").filter(~pl.col("cost_known")).sum()
         / pl.col("total_tokens").sum()).fill_nan(0.0).alias("unknown_cost_token_share"),
    ).sort("total_tokens", descending=True))


def _model() -> Any:
    return "UsageSchema"  # by name: pandera only for a failing frame
