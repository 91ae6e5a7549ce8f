"""The one list of tables: what a row is, its key, its pandera model, how it is built and where
it goes.

Everything that lists tables reads :data:`TABLES`: the public ``*_df`` loaders and ``scan_*``
(``store.loaders``, ``__init__``), the store's chunk build (``store.build``), ``export``, the
CLI (``schema``, ``export --tables``), the report and run pages, and the data dictionary.
Adding a table is an entry here, a builder module and a pandera model in ``schemas.py``.

This module imports nothing but the standard library, and little of it (the CLI parser reads it
at start-up; a ``NamedTuple``, not a dataclass: ``dataclasses`` imports ``inspect``):
models, loaders and builders are named by their import paths and imported on first use, so
low layers never import high ones (``relay_*`` loaders live in ``relay/``, above the tables).

>>> TABLES["tool_calls"].key, TABLES["tool_calls"].loader
(('run_dir', 'line_no'), 'tool_calls_df')
>>> names(exported=True)[:4]
('runs', 'events', 'quarantine', 'manifests')
>>> names(source="relayflowd")[0]
'relay_entries'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

__all__ = ["TABLES", "TableSpec", "build_order", "names"]


def _resolve(path: str) -> Any:
    """The object at ``"package.module:name"``."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class TableSpec(NamedTuple):
    """One table of the toolkit.

    Attributes:
        name: the table's name (``tool_calls``); its public loader is ``<name>_df``.
        row: what one row is (the data dictionary's "one row per ...").
        key: the columns unique per row.
        schema: the pandera model's class name in :mod:`rivumi_analysis.schemas`.
        cold: ``"module:function"`` of the in-memory loader ``f(source, *, strict, max_depth,
            **options)`` (discover, read, build, validate; no store).
        build: ``"module:function"`` of the store's chunk builder ``f(runs, **needs)`` over
            runs read once for every table (``store.build.read_for_tables``): a frame, or a
            dict of frames for several tables built by one pass (``states``, ``drift`` and
            ``forks``); None for a table the store does not hold.
        needs: tables whose chunk frames ``build`` takes as keyword arguments.
        options: the cold loader's extra keyword arguments and their defaults; the store
            holds the defaults, any other value loads in memory.
        source: ``"rivumi"`` (run directories) or ``"relayflowd"`` (journals).
        stored: held by the Parquet store (``scan_<name>``, a store-backed ``<name>_df``).
        exported: written by ``export``.
        report: read by the HTML report and its run pages.
    """

    name: str
    row: str
    key: tuple[str, ...]
    schema: str
    cold: str
    build: str | None = None
    needs: tuple[str, ...] = ()
    options: Mapping[str, Any] = MappingProxyType({})
    source: str = "rivumi"
    stored: bool = True
    exported: bool = True
    report: bool = False

    @property
    def loader(self) -> str:
        """The public loader's name (``<name>_df``)."""
        return f"{self.name}_df"

    @property
    def model(self) -> Any:
        """The pandera model class (imports pandera and the models)."""
        return _resolve(f"rivumi_analysis.schemas:{self.schema}")

    def cold_loader(self) -> Callable[..., Any]:
        """The in-memory loader function (imports its module)."""
        return _resolve(self.cold)

    def builder(self) -> Callable[..., Any]:
        """The store's chunk builder (imports its module)."""
        if self.build is None:
            raise ValueError(f"the store does not build {self.name}")
        return _resolve(self.build)


def _run(name: str, row: str, key: tuple[str, ...], schema: str, *, module: str | None = None,
         build: str | None = None, **kw: Any) -> TableSpec:
    """A run-directory table whose module is ``tables/<module>.py`` (default: its name)."""
    mod = f"rivumi_analysis.tables.{module or name}"
    return TableSpec(name, row, key, schema, cold=f"{mod}:{name}_df",
                     build=build or f"{mod}:{name}_table", **kw)


def _relay(name: str, row: str, key: tuple[str, ...], schema: str) -> TableSpec:
    """A relayflowd journal table (``relay/tables.py``; not in the store or exports)."""
    return TableSpec(name, row, key, schema, cold=f"rivumi_analysis.relay.tables:{name}_df",
                     source="relayflowd", stored=False, exported=False)


_REPLAYED = "rivumi_analysis.tables.replayed:replay_chunk_tables"
_WAITS = {"charge_approval_waits": None}

TABLES: dict[str, TableSpec] = {t.name: t for t in (
    _run("runs", "run: the audit record, the run facts (outcome, steps, tokens by lane, "
         "provider, model, wall time, each with its source) plus manifest, request-limit and "
         "result fields",
         ("run_dir",), "RunsSchema", build="rivumi_analysis.tables.runs:runs_chunk_frame",
         needs=("events",), report=True),
    _run("events", "accepted event (a line of events.jsonl that reads as an event; the others "
         "are in quarantine_df): typed envelope, data as its exact JSON text",
         ("run_dir", "line_no"), "EventsSchema",
         build="rivumi_analysis.tables.events:events_frame", report=True),
    _run("quarantine", "events.jsonl line that is not an event", ("run_dir", "line_no"),
         "QuarantineSchema", build="rivumi_analysis.tables._common:quarantine_frame",
         report=True),
    _run("manifests", "run with a session.json that parses as JSON", ("run_dir",),
         "ManifestsSchema", build="rivumi_analysis.tables.manifests:manifests_frame"),
    _run("tool_calls", "tool call in the log, by occurrence (requested → started → "
         "completed; ids may repeat)", ("run_dir", "line_no"), "ToolCallsSchema", report=True),
    _run("approvals", "approval in the log, by occurrence (resolved / reused / abandoned / "
         "open; ids may repeat)", ("run_dir", "line_no"), "ApprovalsSchema", report=True),
    _run("model_calls", "model step (model.requested and what followed)",
         ("run_dir", "requested_line_no"), "ModelCallsSchema", report=True),
    _run("usage", "model-usage record (one model call, any lane)", ("run_dir", "index"),
         "UsageSchema", report=True),
    _run("verifications", "final-verification check",
         ("run_dir", "name", "started_sequence", "completed_sequence"), "VerificationsSchema",
         report=True),
    _run("states", "accepted event: the replayed state after it", ("run_dir", "line_no"),
         "StatesSchema", build=_REPLAYED, needs=("events",),
         options={**_WAITS, "engine": "auto"}, report=True),
    _run("drift", "(run, manifest field): replayed final state vs session.json",
         ("run_dir", "field"), "DriftSchema", build=_REPLAYED, needs=("events",),
         options=_WAITS),
    _run("forks", "fork link, or candidate fork point", ("row_kind", "run_dir", "sequence"),
         "ForksSchema", build=_REPLAYED, needs=("events",), report=True),
    _run("messages", "transcript message (session.json messages, and the log's model/tool "
         "exchanges)", ("run_dir", "source", "position", "line_no"), "MessagesSchema",
         report=True),
    # relayflowd journals (issue 14): rivumi_analysis.relay.tables
    _relay("relay_entries", "accepted relayflowd journal entry, with applied and the rules it "
           "broke", ("path", "seq", "position"), "RelayEntriesSchema"),
    _relay("relay_quarantine", "quarantined journal row/line/element, or unreadable journal",
           ("path", "level", "position"), "RelayQuarantineSchema"),
    _relay("relay_attempts", "applied step attempt start and its completion",
           ("path", "start_seq"), "RelayAttemptsSchema"),
    _relay("relay_channel_messages", "applied channel.appended", ("path", "channel", "offset"),
           "RelayChannelMessagesSchema"),
    _relay("relay_channel_deliveries", "applied channel.delivered", ("path", "seq"),
           "RelayChannelDeliveriesSchema"),
    _relay("relay_channel_acks", "applied channel.acknowledged", ("path", "seq"),
           "RelayChannelAcksSchema"),
    _relay("relay_channel_cursor", "change of a (channel, consumer) cursor",
           ("path", "channel", "consumer", "seq"), "RelayChannelCursorSchema"),
    _relay("relay_violations", "failed relayflowd rule", ("path", "seq", "rule"),
           "RelayViolationsSchema"),
)}
"""Every table, in the order the dictionary, the store and exports list them."""


def names(*, source: str | None = None, stored: bool | None = None,
          exported: bool | None = None, report: bool | None = None) -> tuple[str, ...]:
    """The names of the tables that match every given filter, in :data:`TABLES` order.

    >>> names(report=True)
    ('runs', 'events', 'quarantine', 'tool_calls', 'approvals', 'model_calls', 'usage', \
'verifications', 'states', 'forks', 'messages')
    """
    return tuple(t.name for t in TABLES.values()
                 if (source is None or t.source == source)
                 and (stored is None or t.stored == stored)
                 and (exported is None or t.exported == exported)
                 and (report is None or t.report == report))


def build_order() -> list[TableSpec]:
    """The stored tables in an order where every table comes after those it ``needs``
    (otherwise :data:`TABLES` order).

    >>> [t.name for t in build_order()][:3]
    ['events', 'runs', 'quarantine']
    """
    done: set[str] = set()
    out: list[TableSpec] = []
    pending = [TABLES[n] for n in names(stored=True)]
    while pending:
        ready = next(t for t in pending if done.issuperset(t.needs))
        pending.remove(ready)
        out.append(ready)
        done.add(ready.name)
    return out
