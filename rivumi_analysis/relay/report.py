"""The relayflowd section of the HTML report: present only when journals are found.

:func:`relay_section` returns the section's HTML and its charts (keys prefixed ``relay_``);
the report embeds both with its own chart renderer. Rivumi run logs (``events.jsonl``) are not
looked at, so a large run root costs one directory walk.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .audit import journal_record
from .read import Journal, iter_journals
from .rules import fold_journal


@dataclass(frozen=True)
class RelaySection:
    """HTML of the section and its charts ``{key: altair chart}``."""

    html: str
    charts: dict[str, Any] = field(default_factory=dict)
    journals: int = 0


def _journals(paths: Sequence[str], max_depth: int) -> list[Journal]:
    it, _ = iter_journals(paths, max_depth=max_depth, exclude_names=frozenset({"events.jsonl"}))
    return list(it)


def relay_section(paths: Sequence[str], *, redact: bool = False, max_depth: int = 16
                  ) -> RelaySection | None:
    """The section for the journals under ``paths``, or None when there are none.

    >>> relay_section(["/nonexistent-relay-dir"]) is None
    True
    """
    journals = _journals(paths, max_depth)
    if not journals:
        return None
    from . import charts as C
    from . import tables as T

    folds = {j.path: fold_journal(j) for j in journals if j.unreadable is None}
    records = [journal_record(j, folds.get(j.path)) for j in journals]
    cursor = T.relay_channel_cursor_df(journals)
    deliveries = T.relay_channel_deliveries_df(journals)
    acks = T.relay_channel_acks_df(journals)
    charts: dict[str, Any] = {}
    if cursor.height:
        busiest = (cursor.group_by("path").len().sort(["len", "path"], descending=[True, False])
                   ["path"][0])
        charts = {
            "relay_lag": C.consumer_lag(cursor, T.relay_attempts_df(journals), journal=busiest),
            "relay_redeliveries": C.redeliveries_per_message(deliveries, journal=busiest),
            "relay_swimlanes": C.delivery_swimlanes(deliveries, acks, journal=busiest),
            "relay_ack_latency": C.ack_latency(acks, journal=busiest),
        }
        shown = html.escape(os.path.basename(busiest) if redact else busiest)
        chart_note = f"Charts show the journal with the most channel activity: <code>{shown}</code>."
    else:
        chart_note = "No journal has channel deliveries, so there are no channel charts."
    rows = []
    for r in records:
        rules = sorted({v["rule"] for v in r["violations"]})
        chans = ", ".join(f"{c['channel']}/{c['consumer']} {c['acknowledged']}/{c['delivered']}"
                          for c in r["channels"]) or "-"
        path = os.path.basename(r["path"]) if redact else r["path"]
        cells = [path, r["source_kind"], r["run_id"] or "-", r["verdict"], r["entries"],
                 r["quarantined"], ", ".join(rules) or "-", chans,
                 r["dead_attempts_unexplained"], r["effects_confirmed"]]
        rows.append("<tr>" + "".join(
            f'<td class="num">{c}</td>' if isinstance(c, int) else f"<td>{html.escape(c)}</td>"
            for c in cells) + "</tr>")
    head = "".join(f'<th data-col="{i}">{h}</th>' for i, h in enumerate(
        ("journal", "kind", "run", "verdict", "entries", "quarantined", "rules",
         "channels (acked/delivered)", "dead attempts", "effects")))
    counts: dict[str, int] = {}
    for r in records:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    summary = ", ".join(f"{v} {n}" for v, n in sorted(counts.items()))
    divs = "".join(f'<div class="vega-chart" id="chart-{k}" data-chart="{k}"></div>'
                   for k in charts)
    body = (f'<section id="sec-relay"><h2>relayflowd journals</h2><p class="what">'
            f"{len(records)} relayflowd run journal(s) ({html.escape(summary)}), audited "
            "against the durable-channel rules (C1–C13, D1–D4, J1–J6, F, DEAD) like "
            "<code>rivumi-analysis relay audit</code>. " + chart_note + "</p>"
            f'<div class="tablewrap"><table id="relay-table"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>{divs}</section>')
    return RelaySection(body, charts, len(records))
