"""Vectorised (polars) forms of reducer outputs, proven equal to the reference reducer by tests.

The reducer (:mod:`.rules`) decides which entries are *applied*; once that is known, the journal §8
channel summary is a plain aggregation over the applied channel tables, which polars does for
a whole fleet of journals at once.

>>> channel_summary([]).columns[:3]
['path', 'channel', 'consumer']
"""

from __future__ import annotations

import polars as pl

from .tables import (
    Source,
    relay_channel_acks_df,
    relay_channel_deliveries_df,
    relay_channel_messages_df,
)

_SCHEMA = {"path": pl.Utf8, "channel": pl.Utf8, "consumer": pl.Utf8, "appended": pl.Int64,
           "delivered": pl.Int64, "acknowledged": pl.Int64, "redeliveries": pl.Int64,
           "acked_offset": pl.Int64, "unacked_at_end": pl.Int64}


def channel_summary(source: Source, *, strict: bool = False, max_depth: int = 16
                    ) -> pl.DataFrame:
    """The journal §8 ``channels`` rows of every journal, one DataFrame (sorted by path, channel,
    consumer); equal to the audit record's rows (tests prove it on the catalog and on
    mutated journals)."""
    from .read import load_journals

    journals, _ = load_journals(source, max_depth=max_depth)  # type: ignore[arg-type]
    d = relay_channel_deliveries_df(journals, strict=strict)
    if d.height == 0:
        return pl.DataFrame(schema=_SCHEMA)
    a = relay_channel_acks_df(journals)
    m = relay_channel_messages_df(journals)
    appended = m.group_by("path", "channel").agg(pl.len().cast(pl.Int64).alias("appended"))
    acks = a.group_by("path", "channel", "consumer").agg(
        pl.len().cast(pl.Int64).alias("acknowledged"),
        pl.col("offset").max().cast(pl.Int64).alias("acked_offset"))  # acks advance by one
    per = d.group_by("path", "channel", "consumer").agg(
        pl.len().cast(pl.Int64).alias("delivered"),
        (pl.len() - pl.col("offset").n_unique()).cast(pl.Int64).alias("redeliveries"),
        pl.col("offset").unique().alias("offsets"))
    out = (per.join(appended, on=["path", "channel"], how="left")
           .join(acks, on=["path", "channel", "consumer"], how="left")
           .with_columns(pl.col("appended", "acknowledged", "acked_offset").fill_null(0)))
    unacked = (out.select("path", "channel", "consumer", "acked_offset", "offsets")
               .explode("offsets")
               .group_by("path", "channel", "consumer")
               .agg((pl.col("offsets") > pl.col("acked_offset")).sum().cast(pl.Int64)
                    .alias("unacked_at_end")))
    return (out.join(unacked, on=["path", "channel", "consumer"])
            .select(list(_SCHEMA)).sort("path", "channel", "consumer"))
