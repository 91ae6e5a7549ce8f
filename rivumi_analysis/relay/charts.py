"""Altair charts of relayflowd durable channels; builders take the ``relay_*_df`` tables.

No I/O and no free text from the journals beyond ids, channel and step names, offsets, seqs,
times and codes. Every builder accepts tables of several journals; pass ``journal=PATH`` (the
``path`` column) to draw one, else each series is labelled with its journal.

>>> import polars as pl
>>> from rivumi_analysis.schemas import RelayChannelAcksSchema
>>> from rivumi_analysis.tables._common import frame
>>> ack_latency(frame([], RelayChannelAcksSchema)).to_dict()["title"]
'Acknowledgement latency (no acknowledgements)'
"""

from __future__ import annotations

import os
from typing import Any

import altair as alt
import polars as pl

__all__ = ["ack_latency", "consumer_lag", "delivery_swimlanes", "redeliveries_per_message"]

WIDTH = 640


def _pick(df: pl.DataFrame | None, journal: str | None) -> pl.DataFrame | None:
    if df is None:
        return None
    return df.filter(pl.col("path") == journal) if journal is not None else df


def _label(df: pl.DataFrame, *parts: str) -> pl.DataFrame:
    """A ``series`` column: the parts joined, prefixed by the journal when there are several."""
    expr = pl.concat_str([pl.col(p).cast(pl.Utf8) for p in parts], separator=" / ")
    if df["path"].n_unique() > 1:
        short = pl.col("path").map_elements(lambda p: os.path.basename(os.path.dirname(p))
                                            or os.path.basename(p), return_dtype=pl.Utf8)
        expr = pl.concat_str([short, expr], separator=" · ")
    return df.with_columns(expr.alias("series"))


def _values(df: pl.DataFrame) -> alt.Data:
    return alt.Data(values=df.to_dicts())


def _empty(title: str) -> alt.Chart:
    return alt.Chart(alt.Data(values=[{}])).mark_text().encode(
        text=alt.value("no data")).properties(title=title, width=WIDTH, height=60)


def consumer_lag(cursor: pl.DataFrame, attempts: pl.DataFrame | None = None, *,
                 journal: str | None = None) -> alt.LayerChart | alt.Chart:
    """Lag (appended − acknowledged) of each (channel, consumer) over seq, with the crash and
    resume points: a rule at each ``crashed``/``lease_expired`` completion (the resume) and a
    dashed rule at each attempt still live at the tail."""
    cur = _pick(cursor, journal)
    if cur is None or cur.height == 0:
        return _empty("Consumer lag (no consumer has received)")
    cur = _label(cur, "channel", "consumer")
    lines = alt.Chart(_values(cur.select("series", "seq", "lag", "acked_offset", "head",
                                         "in_flight", "entry_type"))).mark_line(
        interpolate="step-after", point=True).encode(
        x=alt.X("seq:Q", title="journal seq"), y=alt.Y("lag:Q", title="lag (messages)"),
        color=alt.Color("series:N", title="channel / consumer"),
        tooltip=["series:N", "seq:Q", "entry_type:N", "head:Q", "acked_offset:Q", "lag:Q",
                 "in_flight:Q"])
    layers: list[Any] = [lines]
    att = _pick(attempts, journal)
    if att is not None and att.height:
        paths = set(cur["path"].to_list())
        att = att.filter(pl.col("path").is_in(list(paths)))
        marks = pl.concat([
            att.filter(pl.col("completion_reason").is_in(["crashed", "lease_expired"]))
               .select(pl.col("end_seq").alias("seq"), "step_id", "attempt",
                       pl.lit("resume: attempt completed as crashed").alias("event")),
            att.filter(pl.col("status") == "live")
               .select(pl.col("start_seq").alias("seq"), "step_id", "attempt",
                       pl.lit("live at the tail (killed or running)").alias("event")),
        ])
        if marks.height:
            layers.append(alt.Chart(_values(marks)).mark_rule(strokeDash=[4, 3]).encode(
                x="seq:Q", color=alt.value("#b91c1c"),
                tooltip=["event:N", "step_id:N", "attempt:Q", "seq:Q"]))
    return alt.layer(*layers).properties(
        title="Consumer lag over seq (red rules: crash/resume points)", width=WIDTH, height=260)


def redeliveries_per_message(deliveries: pl.DataFrame, *, journal: str | None = None
                             ) -> alt.Chart:
    """Deliveries per (channel, offset) and consumer: one bar segment per delivery, split into
    first deliveries and redeliveries (within the same attempt or across attempts)."""
    d = _pick(deliveries, journal)
    if d is None or d.height == 0:
        return _empty("Redeliveries per message (no deliveries)")
    d = _label(d, "channel", "offset")
    kind = (pl.when(~pl.col("redelivery")).then(pl.lit("first delivery"))
            .when(pl.col("redelivery_across_attempts")).then(pl.lit("redelivery, next attempt"))
            .otherwise(pl.lit("redelivery, same attempt")))
    agg = (d.with_columns(kind.alias("kind"))
           .group_by("series", "consumer", "kind").len().rename({"len": "deliveries"}))
    return alt.Chart(_values(agg)).mark_bar().encode(
        x=alt.X("deliveries:Q", title="deliveries"),
        y=alt.Y("series:N", title="channel / offset"),
        yOffset="consumer:N",
        color=alt.Color("kind:N", title="delivery",
                        scale=alt.Scale(domain=["first delivery", "redelivery, same attempt",
                                                "redelivery, next attempt"],
                                        range=["#94a3b8", "#f59e0b", "#dc2626"])),
        tooltip=["series:N", "consumer:N", "kind:N", "deliveries:Q"],
    ).properties(title="Deliveries per message (redeliveries coloured)", width=WIDTH)


def delivery_swimlanes(deliveries: pl.DataFrame, acks: pl.DataFrame, *,
                       journal: str | None = None) -> alt.Chart | alt.LayerChart:
    """One lane per (channel, consumer): deliveries (circles, red when redelivered) and
    acknowledgements (diamonds) along seq, labelled with offset and attempt."""
    d = _pick(deliveries, journal)
    a = _pick(acks, journal)
    if d is None or d.height == 0:
        return _empty("Delivery / acknowledgement swimlanes (no deliveries)")
    rows = [d.select("path", "channel", "consumer", "seq", "offset", "attempt",
                     pl.when(pl.col("redelivery")).then(pl.lit("redelivery"))
                     .otherwise(pl.lit("delivery")).alias("event"))]
    if a is not None and a.height:
        rows.append(a.select("path", "channel", "consumer", "seq", "offset", "attempt",
                             pl.lit("acknowledgement").alias("event")))
    lanes = _label(pl.concat(rows), "channel", "consumer")
    return alt.Chart(_values(lanes.drop("path"))).mark_point(filled=True, size=90).encode(
        x=alt.X("seq:Q", title="journal seq"), y=alt.Y("series:N", title="channel / consumer"),
        shape=alt.Shape("event:N", scale=alt.Scale(
            domain=["delivery", "redelivery", "acknowledgement"],
            range=["circle", "circle", "diamond"])),
        color=alt.Color("event:N", scale=alt.Scale(
            domain=["delivery", "redelivery", "acknowledgement"],
            range=["#2563eb", "#dc2626", "#16a34a"])),
        tooltip=["series:N", "event:N", "seq:Q", "offset:Q", "attempt:Q"],
    ).properties(title="Deliveries and acknowledgements per consumer", width=WIDTH)


def ack_latency(acks: pl.DataFrame, *, journal: str | None = None) -> alt.Chart:
    """Acknowledgement latency per message: from the acknowledged delivery and from the first
    delivery of the offset (the difference is time lost to redeliveries). at_ms differences
    are clamped at 0 (at_ms is not monotone)."""
    a = _pick(acks, journal)
    if a is None or a.height == 0:
        return _empty("Acknowledgement latency (no acknowledgements)")
    a = _label(a, "channel", "consumer")
    long = pl.concat([
        a.select("series", "offset", "seq", pl.col("latency_ms").alias("ms"),
                 pl.lit("from acknowledged delivery").alias("measured")),
        a.select("series", "offset", "seq", pl.col("first_delivery_latency_ms").alias("ms"),
                 pl.lit("from first delivery").alias("measured")),
    ])
    return alt.Chart(_values(long)).mark_bar().encode(
        x=alt.X("ms:Q", title="latency (ms)"),
        y=alt.Y("offset:O", title="offset"), yOffset="measured:N",
        color=alt.Color("measured:N", title=None),
        row=alt.Row("series:N", title=None),
        tooltip=["series:N", "offset:Q", "seq:Q", "measured:N", "ms:Q"],
    ).properties(title="Acknowledgement latency", width=WIDTH - 100)
