"""``drift_df``: the replayed final state of each run against its ``session.json``.

One row per (run, field). ``replayed`` and ``manifest`` hold the two values as canonical JSON
text (so every field fits one column type), ``matches`` says whether they agree (wall time
within :data:`WALL_TIME_TOLERANCE_SECONDS`), and ``explanation`` names the spec rule that
reconciles the log with the manifest:

* on a **match**, the rule the reducer had to apply for the values to agree where a naive
  replay would not (``resume_resets_repeat_count``, ``continuation_resets_repeat_guard``,
  ``m4_charges_approval_waits``, ``resume_downtime_charged``, ``clock_running_at_crash``,
  ``guard_counts_unlogged_calls``); null when no rule was needed;
* on a **mismatch**, the rule that accounts for the difference (``manifest_ahead_by_one``,
  ``events_rejected``,
  ``usage_includes_unlogged_lanes``, ``usage_includes_budget_crossing_call``,
  ``fingerprint_unknown``, ``read_only_batch_lookahead``, ``phase_changes_unlogged``,
  ``terminal_event_unlogged``, ``log_lines_quarantined``); null with ``unexplained=True``
  when none does.

A clean run shows no unexplained drift. Runs without a manifest (external runs, missing or
invalid ``session.json``) have no such rows.

A run fact whose log value disagrees with ``session.json``, ``result.json`` or
``checkpoint.json`` (:mod:`rivumi_analysis.tables.facts`) adds a row with ``field``
``<fact>@<file>`` (``replayed``: the log's value, ``manifest``: the file's), ``matches``
false.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl

from ..read.snapshot import RunData
from ..replay.reducer import REPEAT_TRIP, fingerprint
from ._common import columns_frame, rows_frame, validate_table
from .facts import fact_drift_rows, run_facts
from .states import (
    ENGINES,
    ReplayChunk,
    RunReplay,
    check_strict,
    load_runs,
    replay_chunks,
    replay_run,
)

__all__ = ["DRIFT_FIELDS", "EXPLANATIONS", "WALL_TIME_TOLERANCE_SECONDS", "drift_df",
           "drift_rows"]

WALL_TIME_TOLERANCE_SECONDS = 2.0
"""Charged wall time may differ from ``active_wall_time_seconds`` by this much: the clock
starts at the writer claim (before ``run.created``) and stops after the last manifest save
(after the last event), and a resume adds process start-up time."""

_USAGE_KEYS = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens",
               "provider_total_tokens")
_USAGE_DEFAULTS = tuple((k, None if k == "provider_total_tokens" else 0) for k in _USAGE_KEYS)
DRIFT_FIELDS: tuple[str, ...] = (
    "step", "repeat_count", "last_action_fingerprint",
    *(f"usage.{k}" for k in _USAGE_KEYS),
    "last_event_sequence", "verification", "phase", "terminal", "active_wall_time_seconds",
)
EXPLANATIONS: Mapping[str, str] = {
    "resume_resets_repeat_count": "resume restores the fingerprint but not repeat_count (§8.1 step 11, §10.1)",
    "continuation_resets_repeat_guard": "a continuation resets fingerprint and repeat_count (§10.1, §11.6)",
    "m4_charges_approval_waits": "M4-era runners did not pause the wall clock during approvals (§10.3)",
    "resume_downtime_charged": "the whole outage before a resume is charged when the clock was running (§10.3)",
    "guard_counts_unlogged_calls": "the guard also counted calls the model made that never got a tool.requested (the tripping call, §10.1)",
    "events_rejected": "the reducer rejected events (duplicate sequences, §4.5 emit race), so the log cannot reproduce the manifest",
    "manifest_ahead_by_one": "session.json was saved for an event that was never appended (§3.4)",
    "usage_includes_unlogged_lanes": "manifest usage includes model calls with no usage event (wind-down lane, §10.2/§11.1)",
    "usage_includes_budget_crossing_call": "the primary call that crossed the token budget has no model.completed (§11.1)",
    "fingerprint_unknown": "the last fingerprint cannot be rebuilt (omitted arguments or unknown tool, §10.1)",
    "read_only_batch_lookahead": "read-only batch lookahead evaluates the guard for calls not yet logged (§10.1)",
    "clock_running_at_crash": "the run stopped with the clock running; the manifest base excludes the last segment (§10.3)",
    "phase_changes_unlogged": "the manifest phase moved (preparing/running) without an event (§6.1)",
    "terminal_event_unlogged": "the terminal checkpoint.json is written just before the run.* event; the process stopped between the two (§1.3)",
    "log_lines_quarantined": "the log has lines that are not accepted events (torn, invalid): a fact read from the log misses what they held",
}

_SCHEMA = {
    "run_dir": pl.Utf8, "run_id": pl.Utf8, "kind": pl.Utf8, "field": pl.Utf8,
    "replayed": pl.Utf8, "manifest": pl.Utf8, "matches": pl.Boolean,
    "explanation": pl.Utf8, "unexplained": pl.Boolean,
}
_NAMES = tuple(_SCHEMA)


# json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")), the encoder
# built once (json.dumps builds one per call for non-default options; same text).
_json_text = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode


def _parse_dt(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _naive_guard(rr: RunReplay) -> tuple[int, str | None]:
    """Repeat count and fingerprint as a replay without the resume/continuation rules sees them."""
    count, last = 0, None
    for t in rr.transitions:
        if t.rejected or t.event.event_type != "tool.requested":
            continue
        fp = fingerprint(t.event.data.get("name"), t.event.data.get("arguments", {}))
        count = count + 1 if fp == last else 1
        last = fp
    return count, last


@dataclass(frozen=True, slots=True)
class DriftFacts:
    """What a run's drift rows read of its replay: the final state's values, the log's last
    sequence, the event types seen, the naive guard. Built from a reference replay
    (:func:`facts_of_replay`, the oracle) or from the vectorised engine's output
    (:func:`chunk_rows`)."""

    step: int = 0
    repeat_count: int = 0
    last_fingerprint: str | None = None
    usage: tuple[Any, ...] = (0, 0, 0, 0, None)  # _USAGE_KEYS order
    last_sequence: int = -1
    verification: list[Any] = field(default_factory=list)
    phase: str = "created"
    terminal: bool = False
    charged_wall_seconds: float | None = None
    last_time: datetime | None = None
    terminal_reason: str | None = None
    fingerprint_unknown: bool = False
    unlogged_guard_calls: int = 0
    approval_wait_seconds: float = 0.0  # closed waits (RunState.approval_wait_seconds)
    resume_downtime_seconds: float = 0.0
    charge_approval_waits: bool = False
    rejected: bool = False
    types: frozenset[str] = frozenset()  # accepted event types (at least FACT_TYPES's)
    naive_count: int = 0
    naive_fp: str | None = None


def facts_of_replay(rr: RunReplay) -> DriftFacts:
    """:class:`DriftFacts` of a reference replay (the oracle)."""
    s = rr.final
    naive_count, naive_fp = _naive_guard(rr)
    return DriftFacts(
        step=s.step, repeat_count=s.repeat_count, last_fingerprint=s.last_fingerprint,
        usage=tuple(s.usage.as_dict()[k] for k in _USAGE_KEYS),
        last_sequence=rr.run.events[-1].sequence if rr.run.events else -1,
        verification=[list(v) for v in s.verification], phase=s.phase, terminal=s.terminal,
        charged_wall_seconds=s.charged_wall_seconds(rr.charge_approval_waits),
        last_time=s.last_time, terminal_reason=s.terminal_reason,
        fingerprint_unknown=s.fingerprint_unknown, unlogged_guard_calls=s.unlogged_guard_calls,
        approval_wait_seconds=s.approval_wait_seconds,
        resume_downtime_seconds=s.resume_downtime_seconds,
        charge_approval_waits=rr.charge_approval_waits,
        rejected=any(t.rejected for t in rr.transitions),
        types=frozenset(t.event.event_type for t in rr.transitions if not t.rejected),
        naive_count=naive_count, naive_fp=naive_fp)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def chunk_rows(chunk: ReplayChunk) -> list[tuple[Any, ...]]:
    """The drift rows of a :class:`~rivumi_analysis.tables.states.ReplayChunk` made with
    ``manifest_of=drift_manifest``: each run's final state from the engine's last row
    (``chunk.final``) and run facts, or from its reference replay (``chunk.replays``); a run
    with no events has the initial state's."""
    assert chunk.manifests is not None and chunk.final is not None
    facts = chunk.facts
    final: dict[int, DriftFacts] = {}
    for row in chunk.final.iter_rows():
        r = row[0]
        (step, rc, fp, i, o, c, rt, p, seq, phase, term, charged, treason, unk, unl, aw, down,
         charge, last_us) = row[1:]
        naive_count, naive_fp = facts.naive[r]
        final[r] = DriftFacts(
            step=step, repeat_count=rc, last_fingerprint=fp, usage=(i, o, c, rt, p),
            last_sequence=seq, verification=facts.verification[r], phase=phase, terminal=term,
            charged_wall_seconds=charged,
            last_time=None if last_us is None else _EPOCH + timedelta(microseconds=last_us),
            terminal_reason=treason, fingerprint_unknown=unk, unlogged_guard_calls=unl,
            approval_wait_seconds=aw, resume_downtime_seconds=down,
            charge_approval_waits=charge, rejected=False, types=facts.types[r],
            naive_count=naive_count, naive_fp=naive_fp)
    empty = DriftFacts()
    rows: list[dict[str, Any]] = []
    for k, (man, fact_rows) in enumerate(chunk.manifests):
        if man is not None:
            rr = chunk.replays.get(k)
            f = facts_of_replay(rr) if rr is not None else final.get(k, empty)
            rows.extend(rows_of(chunk.run_dirs[k], chunk.run_ids[k], chunk.kinds[k], man, f))
        rows.extend(fact_rows)
    return rows


def drift_rows(rr: RunReplay) -> list[dict[str, Any]]:
    """The drift rows of one reduced run (empty without a manifest)."""
    return [dict(zip(_SCHEMA, row, strict=True)) for row in _replay_rows(rr)]


def _replay_rows(rr: RunReplay) -> list[tuple[Any, ...]]:
    """:func:`drift_rows` as positional rows (``_SCHEMA`` order)."""
    run = rr.run
    return (rows_of(run.run_dir, run.run_id, run.kind, run.manifest, facts_of_replay(rr))
            + _fact_rows(run))


def _fact_rows(run: RunData, checked: bool = False) -> list[tuple[Any, ...]]:
    """The drift rows of ``run``'s fact disagreements (:func:`~.facts.fact_drift_rows`)."""
    return fact_drift_rows(run.run_dir, run.run_id, run.kind,
                           run_facts(run, checked=checked)["fact_disagreements"])


def rows_of(run_dir: str, run_id: str | None, kind: str, man: Any,
            f: DriftFacts) -> list[tuple[Any, ...]]:
    """The drift rows of one run from its manifest and :class:`DriftFacts` (empty without a
    manifest), positional in ``_SCHEMA`` order."""
    if not isinstance(man, Mapping):
        return []
    types = f.types
    last_seq = f.last_sequence
    man_last = man.get("last_event_sequence", -1)
    ahead = isinstance(man_last, int) and man_last == last_seq + 1
    man_usage = man.get("usage") if isinstance(man.get("usage"), Mapping) else {}

    # both sides in DRIFT_FIELDS order (tuples: no per-run dict with formatted keys)
    replayed = (f.step, f.repeat_count, f.last_fingerprint, *f.usage, last_seq, f.verification,
                f.phase, f.terminal, f.charged_wall_seconds)
    man_verif = man.get("verification", [])
    manifest = (
        man.get("step", 0), man.get("repeat_count", 0), man.get("last_action_fingerprint"),
        *[man_usage.get(k, d) for k, d in _USAGE_DEFAULTS],
        man_last,
        [[v.get("name"), v.get("ok"), v.get("exit_code")]
         for v in man_verif if isinstance(v, Mapping)]
        if isinstance(man_verif, list) else man_verif,
        man.get("phase", "created"), man.get("terminal", False),
        man.get("active_wall_time_seconds", 0.0))
    # A crashed run's manifest base excludes the running segment: extend it to the last event.
    wall_man = manifest[-1]
    started = _parse_dt(man.get("active_started_at"))
    crash_extended = False
    if started is not None and f.last_time is not None and isinstance(wall_man, int | float):
        wall_man = float(wall_man) + max(0.0, (f.last_time - started).total_seconds())
        crash_extended = True

    wind_down = "loop.wind_down_started" in types or _model_usage_has(man, "wind_down")
    rows = []
    for name, rv, mv in zip(DRIFT_FIELDS, replayed, manifest, strict=True):
        if name == "active_wall_time_seconds":
            ok = (isinstance(rv, float) and isinstance(wall_man, int | float)
                  and math.isfinite(float(wall_man))
                  and abs(rv - float(wall_man)) <= WALL_TIME_TOLERANCE_SECONDS)
        else:
            ok = rv == mv and type(rv) is type(mv)
        explanation = _explain(name, ok, f, ahead, wind_down, mv, crash_extended)
        rows.append((run_dir, run_id, kind, name, _json_text(rv), _json_text(mv), ok, explanation,
                     (not ok) and explanation is None))
    return rows


def _explain(name: str, ok: bool, s: DriftFacts, ahead: bool, wind_down: bool,
             manifest_value: Any, crash_extended: bool) -> str | None:
    types = s.types
    if ok:
        if name in ("repeat_count", "last_action_fingerprint") and s.unlogged_guard_calls:
            return "guard_counts_unlogged_calls"
        if name == "repeat_count" and s.naive_count != s.repeat_count:
            if "session.continued" in types:
                return "continuation_resets_repeat_guard"
            return "resume_resets_repeat_count"
        if name == "last_action_fingerprint" and s.naive_fp != s.last_fingerprint:
            return "continuation_resets_repeat_guard"
        if name == "active_wall_time_seconds":
            if crash_extended:
                return "clock_running_at_crash"
            if s.charge_approval_waits and s.approval_wait_seconds > WALL_TIME_TOLERANCE_SECONDS:
                return "m4_charges_approval_waits"
            if s.resume_downtime_seconds > WALL_TIME_TOLERANCE_SECONDS:
                return "resume_downtime_charged"
        return None
    if ahead:
        return "manifest_ahead_by_one"
    if s.rejected:
        return "events_rejected"
    if name.startswith("usage."):
        if wind_down:
            return "usage_includes_unlogged_lanes"
        if s.terminal_reason == "token_budget_exceeded":
            return "usage_includes_budget_crossing_call"
    if name in ("repeat_count", "last_action_fingerprint"):
        if s.fingerprint_unknown:
            return "fingerprint_unknown"
        if "tool.batch_started" in types and name == "repeat_count" and isinstance(
                manifest_value, int) and 0 < manifest_value - s.repeat_count < REPEAT_TRIP:
            return "read_only_batch_lookahead"
    if name == "phase" and s.phase in ("created", "running") and manifest_value in (
            "preparing", "running"):
        return "phase_changes_unlogged"
    return None


_MANIFEST_KEYS = ("step", "repeat_count", "last_action_fingerprint", "usage",
                  "last_event_sequence", "verification", "phase", "terminal",
                  "active_wall_time_seconds", "active_started_at")


def drift_manifest(run: RunData) -> tuple[dict[str, Any] | None, list[tuple[Any, ...]]]:
    """What a run's drift rows read, so a worker process sends back little: the part of its
    parsed ``session.json`` (:func:`manifest_part`) and the rows of its fact disagreements
    (a chunk's run still read for columns passed its batch checks: ``states._with_columns``)."""
    return manifest_part(run.manifest), _fact_rows(run, checked=True)


def manifest_part(manifest: Any) -> dict[str, Any] | None:
    """The part of a parsed ``session.json`` the drift rows read (None: no manifest): the
    compared keys, and ``model_usage`` cut to one ``wind_down`` record when it has one.

    >>> manifest_part({"step": 2, "messages": ["..."], "model_usage": [{"lane": "primary"}]})
    {'step': 2, 'model_usage': []}
    """
    if not isinstance(manifest, Mapping):
        return None
    out = {k: manifest[k] for k in _MANIFEST_KEYS if k in manifest}
    records = manifest.get("model_usage")
    if isinstance(records, list):
        out["model_usage"] = [{"lane": "wind_down"}] if _model_usage_has(
            manifest, "wind_down") else []
    elif "model_usage" in manifest:
        out["model_usage"] = None  # not a list: no lane either way
    return out


def _model_usage_has(manifest: Any, lane: str) -> bool:
    records = manifest.get("model_usage") if isinstance(manifest, Mapping) else None
    return isinstance(records, list) and any(
        isinstance(r, Mapping) and r.get("lane") == lane for r in records)


def drift_df(source: Any = None, *, strict: bool = False, max_depth: int = 8,
             charge_approval_waits: bool | None = None, engine: str = "auto") -> pl.DataFrame:
    """Replayed final state vs ``session.json``, one row per (run, field).

    Args:
        source: run directories or folders of runs (None: the default run root); a
            ``RunData`` or a list of them is also accepted.
        strict: raise ``QuarantineError`` if any line was quarantined.
        max_depth: discovery depth limit.
        charge_approval_waits: §10.3 rule (None infers it per run, see ``states_df``).
        engine: ``"auto"`` (default): final states from the vectorised engine, the runs it
            cannot express from the reference reducer (as ``states_df``); ``"reference"``:
            one reference replay per run (the oracle); both give the same table.

    Returns:
        Columns ``run_dir, run_id, kind, field, replayed, manifest, matches, explanation,
        unexplained`` (validated by ``schemas.DriftSchema``).

    >>> df = drift_df("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e")
    >>> df.filter(pl.col("unexplained")).height
    0
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    if engine == "reference":
        runs = load_runs(source, max_depth=max_depth)
        check_strict(runs, strict)
        return drift_frame(replay_run(run, charge_approval_waits=charge_approval_waits)
                           for run in runs if run.kind != "external")
    chunks, quarantined = replay_chunks(source, max_depth=max_depth,
                                        charge_approval_waits=charge_approval_waits,
                                        engine=engine, manifest_of=drift_manifest,
                                        keep_states=False)
    check_strict(quarantined, strict)
    return drift_of_rows(row for chunk in chunks for row in chunk_rows(chunk))


def drift_frame(replays: Iterable[RunReplay], *, validate: bool = True) -> pl.DataFrame:
    """The drift table of already replayed (non-external) runs, validated unless
    ``validate=False``."""
    rows: list[tuple[Any, ...]] = []
    for rr in replays:
        rows.extend(_replay_rows(rr))
    return drift_of_rows(rows, validate=validate)


def drift_of_rows(rows: Iterable[dict[str, Any] | tuple[Any, ...]], *,
                  validate: bool = True) -> pl.DataFrame:
    """The drift table of some rows (:func:`rows_of`'s positional rows, or dicts), validated
    unless ``validate=False``."""
    rows = list(rows)
    if rows and isinstance(rows[0], dict):
        df = rows_frame(rows, _SCHEMA)
    else:  # a column per field: no row dict, no per-row conversion in polars
        df = columns_frame(rows, _NAMES, _SCHEMA)
    if not validate:
        return df
    return validate_table(df, "DriftSchema", "drift_df")
