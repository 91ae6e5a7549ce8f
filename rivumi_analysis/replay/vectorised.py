"""Vectorised engine for ``states_df``: the reference reducer's state table, per run, from
polars expressions over one events frame.

The reference (:mod:`rivumi_analysis.replay.reducer`) folds immutable states event by event. Most of
its state is a prefix aggregate, so here it becomes window expressions partitioned by run:

* counters (model/tool calls, continuation/resume counts): ``cum_sum`` of indicators;
* step, phase, terminal, terminal reason, turn start step: forward fill of the last "setter";
* usage (§11.1): ``cum_sum`` of the per-event contributions (``provider_total_tokens`` is null
  until the first usage mapping, then the running sum of the computed ``total_tokens``);
* time (§10.3): ``cum_max`` of ``created_at`` (latest time), first time of each
  ``run.created``/``session.continued`` segment (start and turn start), differences in exact
  microseconds divided by 10**6 (bit-identical to ``timedelta.total_seconds``), float
  ``cum_sum`` of increments (same additions in the same order as the reducer);
* side effects in flight (tool calls by ``tool_call_id``, final checks by name): set
  membership per (run, reset segment, key): a start adds a key not already in the set, a
  completion removes a key that is; the count is the ``cum_sum`` of those deltas.

Two small parts stay sequential, over the few events that touch them only (not per row): the
repeat guard (§10.1: it needs the sha256 fingerprint of each requested call, the reducer's
:func:`~rivumi_analysis.replay.reducer.fingerprint`, and the calls a settle point finds still pending are
evaluated unlogged exactly as ``reducer._settle_pending`` does) and open approvals (request ids
and their waits). Their per-event results are then forward filled (or
summed) by polars.

A run whose log the vectorised path cannot express exactly falls back to the reference
reducer (``engine="auto"``), so the table always equals the reference. The reasons (see
:func:`fallback_reasons`):

* ``duplicate_sequence``: the reducer rejects the event and keeps the state (state-atomic);
* ``tool_calls_not_strings``: a ``model.completed.tool_calls`` entry that is not a string;
* ``overlapping_approvals``: an ``approval.requested`` while another one is still open (the
  open-wait sums would depend on the order of several entries);
* ``unhashable_verification_name``: the reference itself raises on such a log;
* ``time_span_beyond_float``: ``created_at`` values 2**53 microseconds (285 years) or more
  apart (a damaged timestamp), where a float64 time difference would round twice.

``fork_accepted`` (does replay accept the whole log, §9.6) is proved cheaply from what the
loader already established for a clean native log (see :func:`_replay_accepts_fast`); when the
proof does not go through, the exact :func:`rivumi_analysis.replay.runner.replay_verdict` decides.
"""

from __future__ import annotations

import bisect
import datetime
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ..read.decode import _without_lone_surrogates
from ..read.snapshot import RunData
from .proof import clean_replay_accepts, replay_accepts_fast
from .reducer import (
    REPEAT_TRIP,
    Limits,
    _is_omitted_stub,
    charge_waits_default,
    fingerprint,
    infer_generation,
)
from .runner import replay_verdict

__all__ = ["STATE_COLUMNS", "NotVectorizable", "fallback_reasons", "vector_states"]

UTC_US = pl.Datetime("us", "UTC")

# Column order and polars dtypes of states_df (the pandera model mirrors this).
STATE_COLUMNS: dict[str, pl.DataType] = {
    "run_dir": pl.Utf8(),
    "run_id": pl.Utf8(),
    "kind": pl.Utf8(),
    "line_no": pl.Int64(),
    "sequence": pl.Int64(),
    "event_type": pl.Utf8(),
    "created_at": UTC_US,
    "rejected": pl.Utf8(),
    "step": pl.Int64(),
    "model_requests": pl.Int64(),
    "model_completions": pl.Int64(),
    "model_failures": pl.Int64(),
    "tool_requests": pl.Int64(),
    "tool_starts": pl.Int64(),
    "tool_completions": pl.Int64(),
    "input_tokens": pl.Int64(),
    "output_tokens": pl.Int64(),
    "cached_input_tokens": pl.Int64(),
    "reasoning_tokens": pl.Int64(),
    "provider_total_tokens": pl.Int64(),
    "total_tokens": pl.Int64(),
    "primary_total_tokens": pl.Int64(),
    "reviewer_total_tokens": pl.Int64(),
    "last_action_fingerprint": pl.Utf8(),
    "repeat_count": pl.Int64(),
    "repeat_trip_distance": pl.Int64(),
    "fingerprint_unknown": pl.Boolean(),
    "unlogged_guard_calls": pl.Int64(),
    "side_effects_in_flight": pl.Int64(),
    "open_approvals": pl.Int64(),
    "phase": pl.Utf8(),
    "terminal": pl.Boolean(),
    "terminal_reason": pl.Utf8(),
    "continuation_index": pl.Int64(),
    "resume_count": pl.Int64(),
    "wall_elapsed_seconds": pl.Float64(),
    "approval_wait_seconds": pl.Float64(),
    "resume_downtime_seconds": pl.Float64(),
    "charged_wall_seconds": pl.Float64(),
    "steps_remaining": pl.Int64(),
    "wall_time_remaining_seconds": pl.Float64(),
    "tokens_remaining": pl.Int64(),
    "fork_safe": pl.Boolean(),
    "fork_accepted": pl.Boolean(),
    "runner_generation": pl.Utf8(),
    "charge_approval_waits": pl.Boolean(),
}

_UNKNOWN_TOOL_PREFIX = "Unknown tool"
_GEN_TYPES = ("approval.requested", "approval.resolved", "approval.reused",
              "verification.completed")  # what infer_generation reads
_TERMINAL = {"run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled"}
_SETTLE = frozenset({"model.requested", "loop.wind_down_started", *_TERMINAL})
_GUARD_TYPES = frozenset({"model.completed", "tool.requested", "tool.completed",
                          "session.resumed", "session.continued", *_SETTLE})
_APPROVAL_TYPES = frozenset({"approval.requested", "approval.resolved", "approval.abandoned",
                             "session.resumed", "session.continued"})
_PHASE = {"session.resumed": "running", "session.continued": "running",
          "model.requested": "running", "approval.requested": "waiting_approval",
          "approval.resolved": "running", **_TERMINAL}
_RUN_EVENT_KEYS = frozenset({"created_at", "data", "event_id", "event_type", "run_id",
                             "sequence", "task_id"})
_US = 1_000_000


def _request_key(d: Mapping[str, Any], naive: bool) -> tuple[str, str | None, str | None]:
    """``(guard key, fingerprint, naive fingerprint)`` of a ``tool.requested`` event's data,
    for :func:`_guard_scan`, as the reducer computes them (:func:`reducer.fingerprint`).

    The guard key is ``fingerprint(name, arguments)`` (``{}`` for null or missing
    arguments), or ``"omitted:"`` + the fingerprint of ``{"sha256": ...}`` for an omitted stub,
    whose fingerprint is then None (unknown). The naive fingerprint (None unless ``naive``)
    is ``fingerprint(name, data.get("arguments", {}))``.

    >>> _request_key({"name": "a"}, True) == (fingerprint("a", {}),) * 3
    True
    """
    args = d.get("arguments")
    name = d.get("name")
    nfp = fingerprint(name, d.get("arguments", {})) if naive else None
    if _is_omitted_stub(args):
        return "omitted:" + fingerprint(name, {"sha256": args.get("sha256")}), None, nfp
    real = fingerprint(name, args if args is not None else {})
    return real, real, nfp


class NotVectorizable(ValueError):  # noqa: N818 (a refusal, not a failure of the toolkit)
    """``engine="vectorized"`` met a run that only the reference reducer can reduce."""


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --------------------------------------------------------------------------------------------
# fork_accepted: a cheap proof that replay accepts the log, else the exact verdict
# --------------------------------------------------------------------------------------------
def _fork_accepted(run: RunData, envelope_ok: bool) -> bool:
    if replay_accepts_fast(run, envelope_ok):
        return True
    return replay_verdict(run.events_bytes, run.events_status, run.run_dir)[0]


# --------------------------------------------------------------------------------------------
# Sequential kernels over the few events that touch the guard and approvals
# --------------------------------------------------------------------------------------------
def _guard_scan(ev: _Flat, idx: Sequence[int], cnt: list[Any], fp_set: list[Any], fp: list[Any], unk: list[Any],
                unl: list[Any], naive: list[Any] | None = None) -> str | None:
    """§10.1 over one run's guard-relevant events (in file order); fills the setter columns
    (``unl``: calls settled unlogged at the event, summed by the window expressions).

    ``naive``: when given, ``(count, fingerprint)`` of the naive guard is appended to it
    (``tables.drift._naive_guard``: the ``tool.requested`` events alone, no resume or
    continuation rule, each fingerprinted from ``data.get("arguments", {})`` as it stands);

    Returns a fallback reason for a ``model.completed`` whose ``tool_calls`` are not all
    strings.
    """
    naive_count, naive_last = 0, None
    last_key: str | None = None
    last_name: Any = None  # the reducer's last_call_name (any JSON value)
    count = 0
    pending: list[Any] = []
    types, datas = ev.types, ev.datas
    for i in idx:
        et = types[i]
        d = datas[i]
        if et == "tool.requested":
            key, real, nfp = _request_key(d, naive is not None)
            name = d.get("name")
            unknown = real is None
            if naive is not None:
                naive_count = naive_count + 1 if nfp == naive_last else 1
                naive_last = nfp
        elif et == "tool.completed":
            err = d.get("error")
            if not (isinstance(err, str) and err.startswith(_UNKNOWN_TOOL_PREFIX)):
                continue
            name = d.get("name")
            tcid = _str(d.get("tool_call_id")) or ""
            key = "unknown:" + fingerprint(name, {"tool_call_id": tcid})
            real, unknown = None, True
        elif et == "model.completed":
            calls = d.get("tool_calls")
            if isinstance(calls, list):
                if not all(type(n) is str for n in calls):
                    return "tool_calls_not_strings"
                pending = list(calls)
            continue
        elif et == "session.resumed":
            count = 0
            pending = []
            cnt[i] = 0
            continue
        elif et == "session.continued":
            count = 0
            last_key = last_name = None
            pending = []
            cnt[i] = 0
            fp_set[i] = True
            fp[i] = None
            unk[i] = False
            continue
        else:  # a settle point: the calls still pending were evaluated unlogged (§10.1)
            if pending:
                # reducer._settle_pending, call by call: a name like the last call repeats
                # it; any other gets a fresh "unlogged:" key and an unknown fingerprint
                seq = ev.seqs[i]
                for j, pname in enumerate(pending):
                    if last_key is not None and pname == last_name:
                        count += 1
                        continue
                    key = "unlogged:" + fingerprint(pname, {"sequence": seq, "index": j})
                    count = count + 1 if last_key is not None and key == last_key else 1
                    last_key, last_name = key, pname
                    fp_set[i], fp[i], unk[i] = True, None, True
                cnt[i] = count
                unl[i] = len(pending)
                pending = []
            continue
        count = count + 1 if last_key is not None and key == last_key else 1
        last_key, last_name = key, name
        if name in pending:
            pending.remove(name)
        cnt[i] = count
        fp_set[i] = True
        fp[i] = real
        unk[i] = unknown
    if naive is not None:
        naive.append((naive_count, naive_last))
    return None


def _approval_scan(ev: _Flat, idx: Sequence[int], t_us: Sequence[int | None],
                   last_prev: Mapping[int, int | None], a_open: list[Any], a_t: list[Any],
                   a_wait: list[Any], a_down: list[Any]) -> str | None:
    """Open approvals (at most one at a time) with their waits; fills the setter columns."""
    open_rid: str | None = None
    open_t: int | None = None
    is_open = False
    types, datas = ev.types, ev.datas
    for i in idx:
        et = types[i]
        if et == "approval.requested":
            if is_open:
                return "overlapping_approvals"
            open_rid = _str(datas[i].get("request_id")) or f"#{ev.seqs[i]}"
            open_t = t_us[i]
            is_open = True
            a_open[i] = 1
            a_t[i] = open_t
        elif et == "session.resumed" or et == "session.continued":
            if is_open and et == "session.resumed":
                lp = last_prev[i]
                waited = (lp - open_t) / _US if lp is not None and open_t is not None else None
                a_wait[i] = max(0.0, waited or 0.0)  # never negative, as in the reducer
                gap = (t_us[i] - lp) / _US if lp is not None and t_us[i] is not None else None
                a_down[i] = max(0.0, gap or 0.0)
            is_open = False
            a_open[i] = 0
        elif is_open and open_rid == datas[i].get("request_id"):  # resolved / abandoned
            when = t_us[i]
            waited = (when - open_t) / _US if when is not None and open_t is not None else None
            a_wait[i] = max(0.0, waited or 0.0)  # backwards timestamps: no wait (§10.3)
            is_open = False
            a_open[i] = 0
    return None


# --------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------
def _ffill_value(value: str, setter: str, part: str | list[str] = "_r") -> pl.Expr:
    """The value at the latest setter row of the partition (null values included)."""
    idx = pl.when(pl.col(setter)).then(pl.col("_i")).forward_fill().over(part)
    return pl.col(value).gather(idx)


def _in_flight(df: pl.DataFrame, key: str, kind: str) -> pl.Series:
    """Size of a set of keys after each row: ``kind`` +1 adds ``key``, -1 removes it, and
    every reset segment (``_rs``) starts empty (the reducer's frozenset semantics)."""
    touch = df.filter(pl.col(key).is_not_null()).select("_i", "_r", "_rs", key, kind)
    touch = touch.with_columns(
        pl.col(kind).shift(1).over(["_r", "_rs", key]).alias("_prev"))
    inside = pl.col("_prev").fill_null(-1) == 1
    touch = touch.select("_i", pl.when((pl.col(kind) == 1) & ~inside).then(1)
                         .when((pl.col(kind) == -1) & inside).then(-1)
                         .otherwise(0).alias("_delta"))
    out = df.select("_i", "_r", "_rs").join(touch, on="_i", how="left", maintain_order="left")
    return out.select(pl.col("_delta").fill_null(0).cum_sum().over(["_r", "_rs"]))
    # (a frame with one column; the caller takes it as a Series)


def fallback_reasons(runs: Sequence[RunData]) -> dict[str, str]:
    """``run_dir -> reason`` for the runs the vectorised path hands to the reference reducer.

    >>> from rivumi_analysis.read.snapshot import read_run
    >>> fallback_reasons([read_run("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e")])
    {}
    """
    _, reasons = _compute(list(runs), None, {})
    return {runs[k].run_dir: why for k, why in reasons.items()}


def vector_states(runs: Sequence[RunData], *,
                  charge_approval_waits: bool | None = None,
                  columns: Mapping[int, Any] | None = None,
                  ) -> tuple[pl.DataFrame, dict[int, str]]:
    """States of ``runs`` (non-external, in order) by the vectorised engine.

    ``columns`` maps the index of a run read for columns (``RunData.fast``, the columnar fast
    path) to its rows of :func:`rivumi_analysis.read.columnar.columns` (an Arrow table with
    ``line_no``, ``byte_offset``, ``byte_length``, ``sequence``, ``event_type``,
    ``event_run_id``, ``created_at``): such a run is reduced from those columns and the
    ``data`` objects the fast path already decoded, with no per-event snapshot object. Every
    other run is reduced from its ``events``.

    Returns:
        ``(frame, fallbacks)``: the unvalidated frame with ``STATE_COLUMNS`` plus ``_r`` (the
        index of the run in ``runs``) for the runs it could express, and ``{run index:
        reason}`` for the others.
    """
    return _compute(list(runs), charge_approval_waits, columns or {})


class _Ev:
    """What the sequential kernels read of an event on the columnar path."""

    __slots__ = ("data", "event_type", "sequence")

    def __init__(self, event_type: str, sequence: int, data: dict[str, Any]) -> None:
        self.event_type = event_type
        self.sequence = sequence
        self.data = data


_TS_US = pa.timestamp("us", tz="UTC")
_NUMPY = {"int8": "int8", "int64": "int64", "double": "float64"}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ONE_US = datetime.timedelta(microseconds=1)


def _int64s(values: Any) -> pa.Array:
    """An int64 numpy array as an Arrow array (no copy, no pandas)."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _arrow(values: Sequence[Any], typ: pa.DataType) -> pa.Array:
    """``pa.array(values, typ)`` for the engine's column types (int8, int64, float64, bool,
    large_string, timestamp[us, UTC]), built from buffers: ``pa.array`` makes pyarrow import
    pandas (~0.15 CPU-s in a fresh process or a spawned store worker), this does not.

    >>> _arrow([3, None, -1], pa.int64()).to_pylist(), _arrow(["é", None], pa.string()).to_pylist()
    ([3, None, -1], ['é', None])
    """
    import numpy as np

    values = values if isinstance(values, list) else list(values)
    n = len(values)
    nulls = values.count(None) if n else 0
    if nulls == n and n:
        return pa.nulls(n, typ)
    validity = None
    if nulls:
        cells = np.empty(n, object)
        cells[:] = values
        valid = np.not_equal(cells, None)  # (one C loop; None equals only None here)
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        values = cells[valid].tolist()
    if typ == pa.large_string() or typ == pa.string():
        if len(values) > 64 and not nulls:  # (event types: few distinct values, many rows)
            distinct = dict.fromkeys(values)
            if len(distinct) * 4 < len(values):
                code = {v: k for k, v in enumerate(distinct)}
                at = np.fromiter(map(code.__getitem__, values), np.int64, len(values))
                return _arrow(list(distinct), typ).take(_int64s(at))
        # (str.encode raises UnicodeEncodeError for a lone surrogate, as pa.array does)
        encoded = [v.encode("utf-8") for v in values]
        ends = np.zeros(len(encoded) + 1, np.int64 if typ == pa.large_string() else np.int32)
        np.cumsum(np.fromiter(map(len, encoded), ends.dtype, len(encoded)), out=ends[1:])
        if nulls:  # a null takes no bytes: its end is the previous end
            ends = ends[np.concatenate(([0], np.cumsum(valid)))]
        return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(ends),
                                              pa.py_buffer(b"".join(encoded))], nulls)
    if typ == pa.bool_():
        bits = np.array(values, np.bool_)
        data = bits if not nulls else np.zeros(n, np.bool_)
        if nulls:
            data[valid] = bits
        return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(
            np.packbits(data, bitorder="little"))], nulls)
    if typ == _TS_US:
        try:
            values = [(v - _EPOCH) // _ONE_US for v in values]
        except TypeError:  # a naive datetime: pyarrow takes it as UTC
            values = [((v if v.tzinfo is not None else v.replace(tzinfo=datetime.UTC))
                       - _EPOCH) // _ONE_US for v in values]
        dtype: Any = np.int64
    else:
        dtype = _NUMPY[str(typ)]
    dense = np.array(values, dtype)
    if nulls:
        full = np.zeros(n, dtype)
        full[valid] = dense
        dense = full
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(dense)], nulls)


class _Flat:
    """The per-event inputs of the sequential kernels, as parallel lists in file order (no
    object per event): event types, sequences and ``data`` objects."""

    __slots__ = ("datas", "seqs", "types")

    def __init__(self, types: list[str], seqs: list[int], datas: list[Any]) -> None:
        self.types, self.seqs, self.datas = types, seqs, datas


_COLS = ("line_no", "sequence", "event_type", "created_at")


def _arrow_inputs(runs: list[RunData], columns: Mapping[int, Any]) -> tuple[
        list[Any], list[Any], list[int], list[pa.Array]]:
    """``(datas, run_ids, lengths, [line_no, sequence, event_type, created_at])``: every
    event's ``data`` object, each run's ``run_id`` values, and the envelope columns of all
    runs as single Arrow arrays, from a run's columnar rows (``columns``) or its events.

    Consecutive runs read as events become one array each (a flat pass, not one Arrow
    conversion per run)."""
    datas: list[Any] = []
    rids: list[Any] = []
    lengths: list[int] = []
    parts: list[list[pa.Array]] = [[], [], [], []]  # per column, concatenated once
    lines: list[int] = []
    seqs: list[int] = []
    types: list[str] = []
    stamps: list[Any] = []

    def flush() -> None:
        if lines:
            for part, arr in zip(parts, (
                    _arrow(lines, pa.int64()), _arrow(seqs, pa.int64()),
                    _arrow(types, pa.large_string()), _arrow(stamps, _TS_US)),
                    strict=True):
                part.append(arr)
            for held in (lines, seqs, types, stamps):
                held.clear()

    for k, run in enumerate(runs):
        tab = columns.get(k)
        if tab is None:
            events = run.events
            lines += [e.line_no for e in events]
            seqs += [e.sequence for e in events]
            types += [e.event_type for e in events]
            stamps += [e.created_at for e in events]
            datas += [e.data for e in events]
            rids.append([e.run_id for e in events])
            lengths.append(len(events))
            continue
        flush()
        fast = run.fast
        datas += fast.objects
        rids.append({e.run_id for e in fast.envelopes})  # strings (the fast path's checks)
        lengths.append(tab.num_rows)
        for part, name in zip(parts, _COLS, strict=True):
            part.extend(tab.column(name).chunks)  # slices of one batch: no copy until the end
    flush()
    typs = (pa.int64(), pa.int64(), pa.large_string(), _TS_US)
    cols = [pa.concat_arrays([a if a.type == typ else a.cast(typ) for a in part])
            if part else _arrow([], typ) for part, typ in zip(parts, typs, strict=True)]
    return datas, rids, lengths, cols


_PLAIN_RE = re.compile(r"[!-~]+")


def _envelope_ok(ids: Any, types: list[str], columnar: bool) -> bool:
    """One ``run_id`` (a string) and printable ASCII ids and types (the envelope part of
    :func:`~rivumi_analysis.replay.proof.envelopes_ok`; sequences are checked apart). The
    columnar fast path already proved every such string printable."""
    if columnar:
        return len(ids) == 1
    if not ids or set(map(type, ids)) != {str}:
        return False
    distinct = set(ids)
    return (len(distinct) == 1 and _PLAIN_RE.fullmatch(ids[0]) is not None
            and all(_PLAIN_RE.fullmatch(t) for t in set(types)))


def _prev_latest(t_us: Sequence[int | None], lo: int, hi: int,
                 wanted: set[int]) -> dict[int, int | None]:
    """For each row in ``wanted``: the latest time of the run's rows before it (the
    reducer's ``last_time`` before the event), over rows ``lo:hi``."""
    out: dict[int, int | None] = {}
    last: int | None = None
    for i in range(lo, hi):
        if i in wanted:
            out[i] = last
        ti = t_us[i]
        if ti is not None and (last is None or ti > last):
            last = ti
    return out


_BY_TYPE = ("model.requested", "model.completed", "role_lane.completed", "tool.started",
            "tool.completed", "approval.requested", "verification.started",
            "verification.completed", "verification.reused", "run.completed", "run.failed",
            "run.cancelled")

# The per-event "setter" columns the sequential part hands to the window expressions.
_SETTERS: dict[str, tuple[pl.DataType, pa.DataType]] = {
    "_step_v": (pl.Int64(), pa.int64()),
    "_u_add": (pl.Boolean(), pa.bool_()),
    "_u_lane": (pl.Int8(), pa.int8()),
    "_u_in": (pl.Int64(), pa.int64()),
    "_u_out": (pl.Int64(), pa.int64()),
    "_u_cached": (pl.Int64(), pa.int64()),
    "_u_reason": (pl.Int64(), pa.int64()),
    "_u_rt": (pl.Int64(), pa.int64()),
    "_tkey": (pl.Utf8(), pa.large_string()),
    "_tkind": (pl.Int8(), pa.int8()),
    "_vkey": (pl.Utf8(), pa.large_string()),
    "_vkind": (pl.Int8(), pa.int8()),
    "_term_reason": (pl.Utf8(), pa.large_string()),
    "_g_cnt": (pl.Int64(), pa.int64()),
    "_g_fp_set": (pl.Boolean(), pa.bool_()),
    "_g_fp": (pl.Utf8(), pa.large_string()),
    "_g_unk": (pl.Boolean(), pa.bool_()),
    "_g_unl": (pl.Int64(), pa.int64()),
    "_a_open": (pl.Int64(), pa.int64()),
    "_a_t": (pl.Int64(), pa.int64()),
    "_a_wait": (pl.Float64(), pa.float64()),
    "_a_down": (pl.Float64(), pa.float64()),
}
# The per-run constants.
_PER_RUN: dict[str, tuple[pl.DataType, pa.DataType]] = {
    "run_dir": (pl.Utf8(), pa.large_string()),
    "run_id": (pl.Utf8(), pa.large_string()),
    "kind": (pl.Utf8(), pa.large_string()),
    "fork_accepted": (pl.Boolean(), pa.bool_()),
    "runner_generation": (pl.Utf8(), pa.large_string()),
    "charge_approval_waits": (pl.Boolean(), pa.bool_()),
    "_max_steps": (pl.Int64(), pa.int64()),
    "_wall": (pl.Float64(), pa.float64()),
    "_max_tok": (pl.Int64(), pa.int64()),
}


class _Sparse(dict[int, Any]):
    """A setter column as the rows that set it (row -> value); every other row holds
    ``default``. Most rows set nothing, so this is far cheaper than a full Python list."""

    __slots__ = ("default",)

    def __init__(self, default: Any = None) -> None:
        super().__init__()
        self.default = default

    def dense(self, n: int, typ: pa.DataType) -> pa.Array:
        """The full column of ``n`` rows (one Arrow ``take``, no per-row Python)."""
        import numpy as np

        rows = np.fromiter(self, np.int64, len(self))
        given = list(self.values())
        if self.default is None and given.count(None) == 0:
            # every unset row is null: a null index (take gives null), no null to convert
            pos = np.zeros(n, np.int64)
            pos[rows] = np.arange(len(given))
            valid = np.zeros(n, np.bool_)
            valid[rows] = True
            index = pa.Array.from_buffers(pa.int64(), n, [pa.py_buffer(np.packbits(
                valid, bitorder="little")), pa.py_buffer(pos)], n - len(given))
            return _arrow(given, typ).take(index)
        values = _arrow([self.default, *given], typ)
        pos = np.zeros(n, np.int64)
        pos[rows] = np.arange(1, len(rows) + 1)
        return values.take(_int64s(pos))


def _setters(ev: _Flat, starts: list[int], by_type: Mapping[str, list[int]],
             guard_idx: list[int], appr_idx: list[int], t_list: Sequence[int | None],
             reasons: dict[int, str],
             naive: dict[int, Any] | None = None) -> dict[str, _Sparse]:
    """The setter columns from the events that need them (adds fallback reasons; fills
    ``naive`` with each scanned run's naive guard, see :func:`_guard_scan`)."""
    datas, seqs = ev.datas, ev.seqs
    col = _Sparse

    step_v = col()
    for i in by_type["model.requested"]:
        v = datas[i].get("step")
        step_v[i] = v if type(v) is int else None
    # usage: (input, output, cached, reasoning, right total) per add; lane 0 primary 1 reviewer
    u_add, u_lane = col(False), col()
    u_in, u_out, u_cached, u_reason, u_rt = col(0), col(0), col(0), col(0), col(0)
    for lane, name in ((0, "model.completed"), (1, "role_lane.completed")):
        for i in by_type[name]:
            u = datas[i].get("usage")
            if not isinstance(u, Mapping):
                continue
            inp, out = _int(u.get("input_tokens")), _int(u.get("output_tokens"))
            ptt = u.get("provider_total_tokens")
            u_add[i], u_lane[i] = True, lane
            u_in[i], u_out[i] = inp, out
            u_cached[i] = _int(u.get("cached_input_tokens"))
            u_reason[i] = _int(u.get("reasoning_tokens"))
            u_rt[i] = ptt if isinstance(ptt, int) and not isinstance(ptt, bool) else inp + out
    # side effects: tool keys and verification keys, +1 start / -1 completion
    tkey, tkind, vkey, vkind = col(), col(), col(), col()
    for i in by_type["tool.started"]:
        tkey[i], tkind[i] = _str(datas[i].get("tool_call_id")) or f"#{seqs[i]}", 1
    for i in by_type["tool.completed"]:
        tkey[i], tkind[i] = _str(datas[i].get("tool_call_id")) or "", -1
    for i in by_type["verification.started"]:
        name = datas[i].get("name")
        vkey[i], vkind[i] = name if isinstance(name, str) else f"#{seqs[i]}", 1
    for i in by_type["verification.completed"] + by_type["verification.reused"]:
        name = datas[i].get("name")
        if isinstance(name, str):
            vkey[i], vkind[i] = name, -1
        elif isinstance(name, list | dict):
            reasons.setdefault(_run_of(starts, i), "unhashable_verification_name")
    term_reason = col()
    for name in _TERMINAL:
        for i in by_type[name]:
            term_reason[i] = _str(datas[i].get("terminal_reason"))
    # repeat guard and approvals, run by run over their few events
    g_cnt, g_fp_set, g_fp, g_unk, g_unl = col(), col(False), col(), col(), col(0)
    a_open, a_t, a_wait, a_down = col(), col(), col(0.0), col(0.0)
    todo: list[tuple[int, list[int], list[int]]] = []
    gi = ai = 0
    for k in range(len(starts) - 1):
        lo, hi = starts[k], starts[k + 1]
        g_run: list[int] = []
        while gi < len(guard_idx) and guard_idx[gi] < hi:
            g_run.append(guard_idx[gi])
            gi += 1
        a_run: list[int] = []
        while ai < len(appr_idx) and appr_idx[ai] < hi:
            a_run.append(appr_idx[ai])
            ai += 1
        if k not in reasons and lo != hi:
            todo.append((k, g_run, a_run))
    for k, g_run, a_run in todo:
        lo, hi = starts[k], starts[k + 1]
        box: list[Any] | None = [] if naive is not None else None
        why = _guard_scan(ev, g_run, g_cnt, g_fp_set, g_fp, g_unk, g_unl, box)
        if box:
            naive[k] = box[0]  # type: ignore[index]
        if not why and a_run:
            resumed = {i for i in a_run if ev.types[i] == "session.resumed"}
            last_prev = _prev_latest(t_list, lo, hi, resumed) if resumed else {}
            why = _approval_scan(ev, a_run, t_list, last_prev, a_open, a_t, a_wait, a_down)
        if why:
            reasons[k] = why
    return {"_step_v": step_v, "_u_add": u_add, "_u_lane": u_lane, "_u_in": u_in,
            "_u_out": u_out, "_u_cached": u_cached, "_u_reason": u_reason, "_u_rt": u_rt,
            "_tkey": tkey, "_tkind": tkind, "_vkey": vkey, "_vkind": vkind,
            "_term_reason": term_reason, "_g_cnt": g_cnt, "_g_fp_set": g_fp_set, "_g_fp": g_fp,
            "_g_unk": g_unk, "_g_unl": g_unl, "_a_open": a_open, "_a_t": a_t, "_a_wait": a_wait,
            "_a_down": a_down}


def _per_run(runs: Sequence[RunData], starts: list[int], ev: _Flat, gen_idx: list[int],
             reasons: Mapping[int, str], envelope_ok: set[int], charge: bool | None,
             columns: Mapping[int, Any]) -> dict[str, list[Any]]:
    """The per-run constants (generation, charging rule, replay verdict, limits).

    ``gen_idx``: the events :func:`~rivumi_analysis.replay.reducer.infer_generation` reads.
    """
    gen, chg, accepted, max_steps, wall, max_tok = [], [], [], [], [], []
    gi = 0
    for k, run in enumerate(runs):
        hi = starts[k + 1]
        signals: list[_Ev] = []
        while gi < len(gen_idx) and gen_idx[gi] < hi:
            i = gen_idx[gi]
            signals.append(_Ev(ev.types[i], ev.seqs[i], ev.datas[i]))
            gi += 1
        if k in reasons:
            gen.append(None), chg.append(None), accepted.append(None)
            max_steps.append(None), wall.append(None), max_tok.append(None)
            continue
        g = infer_generation(signals, run.manifest)
        gen.append(g)
        chg.append(charge_waits_default(g) if charge is None else bool(charge))
        tab = columns.get(k)
        if tab is None:
            accepted.append(_fork_accepted(run, k in envelope_ok))
        else:  # a clean log: the same proof over its columns, else the exact verdict
            longest = pc.max(tab.column("byte_length")).as_py() or 0  # (no second split)
            accepted.append(clean_replay_accepts(run.fast, longest) or replay_verdict(
                run.events_bytes, run.events_status, run.run_dir)[0])
        lim = Limits.from_request(run.request)
        max_steps.append(lim.max_steps if lim else None)
        wall.append(lim.wall_time_seconds if lim else None)
        max_tok.append(lim.max_total_tokens if lim else None)
    return {"run_dir": [r.run_dir for r in runs], "run_id": [r.run_id for r in runs],
            "kind": [r.kind for r in runs], "fork_accepted": accepted,
            "runner_generation": gen, "charge_approval_waits": chg, "_max_steps": max_steps,
            "_wall": wall, "_max_tok": max_tok}


def _compute(runs: list[RunData], charge: bool | None,
             columns: Mapping[int, Any] | None = None) -> tuple[pl.DataFrame, dict[int, str]]:
    return finish_columnar(*_prepare(runs, charge, columns or {}))


class _Positions:
    """Positions of the rows of a string column holding given values, from one dictionary
    encoding of the column (numpy over the codes: no pass over the strings per question,
    and no pandas, which ``pc.equal`` with a Python scalar or ``to_numpy`` would import)."""

    __slots__ = ("arr", "codes", "names")

    def __init__(self, arr: pa.Array) -> None:
        import numpy as np

        self.arr = arr
        self.codes: Any = None
        if arr.null_count == 0 and len(arr):
            enc = arr.dictionary_encode()
            ix = enc.indices
            width = ix.type.bit_width // 8
            self.codes = np.frombuffer(ix.buffers()[1], f"i{width}", len(ix), ix.offset * width)
            self.names = {name: k for k, name in enumerate(enc.dictionary.to_pylist())}

    def __call__(self, values: Sequence[str]) -> list[int]:
        """Positions holding one of ``values``, ascending."""
        import numpy as np

        if self.codes is None:
            mask = pc.is_in(self.arr, value_set=_arrow(list(values), self.arr.type))
            return pc.indices_nonzero(mask).to_pylist()
        wanted = [self.names[v] for v in values if v in self.names]
        if not wanted:
            return []
        hit = (self.codes == wanted[0]) if len(wanted) == 1 else np.isin(self.codes, wanted)
        return np.flatnonzero(hit).tolist()


def _prepare(runs: list[RunData], charge: bool | None,
             columns: Mapping[int, Any]) -> tuple[Any, Any, dict[int, str]]:
    """The sequential part of the engine, without polars (so it can run in a forked worker):
    ``(events, per_run, reasons)`` as Arrow tables that :func:`finish_columnar` completes.

    ``columns`` maps the index of a run on the columnar fast path to its rows; every other
    run is prepared from its events. The Python work is per run or over the events of the
    types it concerns, never an object per event.
    """
    events, per_run, reasons, _ = _prepare_all(runs, charge, columns, False)
    return events, per_run, reasons


def prepare_with_facts(runs: list[RunData], charge: bool | None,
                       columns: Mapping[int, Any]) -> tuple[Any, Any, dict[int, str], RunFacts]:
    """:func:`prepare_columnar` plus the per-run :class:`RunFacts` that ``drift_df`` and
    ``forks_df`` need beyond the state columns (no polars either)."""
    events, per_run, reasons, facts = _prepare_all(runs, charge, columns, True)
    assert facts is not None
    return events, per_run, reasons, facts


class RunFacts:
    """What drift and forks read of each run besides its state rows, as lists indexed like
    ``runs`` (only meaningful for the runs not handed to the reference reducer):

    * ``naive``: ``(repeat_count, fingerprint)`` of the naive guard (see :func:`_guard_scan`);
    * ``verification``: the final ``RunState.verification`` as a list of ``[name, ok,
      exit_code]`` lists (the outcomes since the last ``model.requested`` before the last
      ``verification.completed``/``reused``);
    * ``types``: which of :data:`FACT_TYPES` occur in the run's log;
    * ``forked``: ``{run index: data}`` of the runs whose first event is ``run.forked``.
    """

    __slots__ = ("forked", "naive", "types", "verification")

    def __init__(self, n: int) -> None:
        self.naive: list[tuple[int, str | None]] = [(0, None)] * n
        self.verification: list[list[list[Any]]] = [[] for _ in range(n)]
        self.types: list[frozenset[str]] = [frozenset()] * n
        self.forked: dict[int, Any] = {}

    def __reduce__(self) -> Any:  # slots: pickled by state for the pool
        return (_facts_from_state, (self.naive, self.verification, self.types, self.forked))


def _facts_from_state(naive: Any, verification: Any, types: Any, forked: Any) -> RunFacts:
    f = RunFacts(0)
    f.naive, f.verification, f.types, f.forked = naive, verification, types, forked
    return f


FACT_TYPES = ("session.continued", "loop.wind_down_started", "tool.batch_started")
"""The event types whose presence drift's explanations read."""


def _final_verifications(ev: _Flat, starts: list[int], idx: list[int],
                         out: list[list[list[Any]]]) -> None:
    """``RunState.verification`` after each run (see :class:`RunFacts`), over the
    ``model.requested``/``verification.completed``/``verification.reused`` rows ``idx``."""
    types, datas = ev.types, ev.datas
    k, hi = 0, starts[1] if len(starts) > 1 else 0
    cur: list[list[Any]] = []
    is_open = False
    for i in idx:
        if i >= hi:
            out[k] = cur
            k = bisect.bisect_right(starts, i) - 1
            hi = starts[k + 1]
            cur, is_open = [], False
        if types[i] == "model.requested":
            is_open = False
            continue
        d = datas[i] if isinstance(datas[i], Mapping) else {}
        outcome = [d.get("name"), d.get("ok"), d.get("exit_code")]
        cur = [*cur, outcome] if is_open else [outcome]
        is_open = True
    if k < len(out):
        out[k] = cur


_EXACT_US = 2**53
"""Time differences below this many microseconds are exact as float64, so ``secs`` in
:func:`_finish` (cast, then one division) rounds like ``timedelta.total_seconds()``."""


def _wide_time_spans(a_ts: pa.Array, t_list: Sequence[int | None], starts: list[int],
                     reasons: dict[int, str]) -> None:
    """Hand to the reference reducer every run whose ``created_at`` values span 2**53 us
    (285 years: a damaged timestamp) or more, where a float64 difference would round twice."""
    span = pc.min_max(a_ts.cast(pa.int64()))
    lo, hi = span["min"].as_py(), span["max"].as_py()
    if lo is None or hi - lo < _EXACT_US:
        return  # no run can span more than the whole batch
    for k in range(len(starts) - 1):
        ts = [t for t in t_list[starts[k]:starts[k + 1]] if t is not None]
        if ts and max(ts) - min(ts) >= _EXACT_US:
            reasons.setdefault(k, "time_span_beyond_float")


def _prepare_all(runs: list[RunData], charge: bool | None, columns: Mapping[int, Any],
                 want_facts: bool) -> tuple[Any, Any, dict[int, str], RunFacts | None]:
    datas, rids, lengths, (a_line, a_seq, a_type, a_ts) = _arrow_inputs(runs, columns)
    starts = list(itertools.accumulate(lengths, initial=0))
    ev = _Flat(a_type.to_pylist(), a_seq.to_pylist(), datas)
    t_list = a_ts.cast(pa.int64()).to_pylist()
    reasons: dict[int, str] = {}
    envelope_ok: set[int] = set()
    for k in range(len(runs)):
        lo, hi = starts[k], starts[k + 1]
        if len(set(ev.seqs[lo:hi])) != hi - lo:
            reasons[k] = "duplicate_sequence"
        elif _envelope_ok(rids[k], ev.types[lo:hi], k in columns):
            envelope_ok.add(k)
    _wide_time_spans(a_ts, t_list, starts, reasons)
    positions = _Positions(a_type)
    by_type = {name: positions([name]) for name in _BY_TYPE}
    guard_idx = positions(sorted(_GUARD_TYPES))
    appr_idx = positions(sorted(_APPROVAL_TYPES))
    gen_idx = positions(_GEN_TYPES)
    facts = RunFacts(len(runs)) if want_facts else None
    naive: dict[int, Any] | None = {} if facts is not None else None
    setters = _setters(ev, starts, by_type, guard_idx, appr_idx, t_list, reasons, naive)
    per = _per_run(runs, starts, ev, gen_idx, reasons, envelope_ok, charge, columns)
    if facts is not None:
        assert naive is not None
        for k, value in naive.items():
            facts.naive[k] = value
        _final_verifications(ev, starts, sorted(
            by_type["model.requested"] + by_type["verification.completed"]
            + by_type["verification.reused"]), facts.verification)
        seen: dict[int, set[str]] = {}
        for i in positions(FACT_TYPES):
            seen.setdefault(bisect.bisect_right(starts, i) - 1, set()).add(ev.types[i])
        for k, present in seen.items():
            facts.types[k] = frozenset(present)
        for k in range(len(runs)):
            if lengths[k] and ev.types[starts[k]] == "run.forked":
                facts.forked[k] = datas[starts[k]]
    import numpy as np

    run_ord = _int64s(np.repeat(np.arange(len(lengths), dtype=np.int64), lengths))
    events = pa.table({"_r": run_ord, "line_no": a_line, "sequence": a_seq,
                       "event_type": a_type, "created_at": a_ts,
                       **{name: setters[name].dense(len(ev.types), at)
                          for name, (_, at) in _SETTERS.items()}})
    per_run = pa.table({"_r": _int64s(np.arange(len(runs), dtype=np.int64)),
                        **{name: _per_run_array(per[name], at)
                           for name, (_, at) in _PER_RUN.items()}})
    return events, per_run, reasons, facts


def _per_run_array(values: list[Any], typ: Any) -> Any:
    """One per-run column; a run folder name that is not UTF-8 (lone surrogates, which Arrow
    refuses) shows U+FFFD, as ``runs_df`` shows it."""
    try:
        return _arrow(values, typ)
    except UnicodeEncodeError:
        return _arrow(_without_lone_surrogates(values), typ)


prepare_columnar = _prepare


def finish_columnar(events: Any, per_run: Any, reasons: dict[int, str],
                    keep: Sequence[str] = ()) -> tuple[pl.DataFrame, dict[int, str]]:
    """The window expressions over what :func:`prepare_columnar` prepared (in this process).

    ``keep``: internal columns to keep after the state columns (``"_aw"``: the approval
    waits closed so far, the reducer's ``approval_wait_seconds`` without the open ones).
    """
    ev = pl.from_arrow(events)
    assert isinstance(ev, pl.DataFrame)
    ev = ev.with_columns(*[pl.col(name).cast(dt) for name, (dt, _) in _SETTERS.items()],
                         pl.col("event_type").cast(pl.Utf8))
    pr = pl.from_arrow(per_run)
    assert isinstance(pr, pl.DataFrame)
    pr = pr.with_columns(*[pl.col(name).cast(dt) for name, (dt, _) in _PER_RUN.items()])
    return _finish(ev, pr, reasons, keep)


def _finish(events: pl.DataFrame, per_run: pl.DataFrame, reasons: dict[int, str],
            keep: Sequence[str] = ()) -> tuple[pl.DataFrame, dict[int, str]]:
    """The window expressions: the state columns of the runs not in ``reasons``."""
    et = pl.col("event_type")
    t = pl.col("created_at").cast(pl.Int64)
    cont = et == "session.continued"
    resumed = et == "session.resumed"
    created = et.is_in(["run.created", "run.forked"]) & t.is_not_null()
    df = events.with_columns(
        t.alias("_t"),
        t.cum_max().forward_fill().over("_r").alias("_last"),
        created.cum_sum().over("_r").alias("_sseg"),
        (created | cont).cum_sum().over("_r").alias("_tseg"),
        cont.cum_sum().over("_r").alias("continuation_index"),
        resumed.cum_sum().over("_r").alias("resume_count"),
        (resumed | cont).cum_sum().over("_r").alias("_rs"),
        (et == "approval.requested").alias("_a_set"),
    ).with_columns(pl.col("_last").shift(1).over("_r").alias("_last_prev"))
    if reasons:
        df = df.filter(~pl.col("_r").is_in(list(reasons)))
    df = df.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("_i"))
    df = df.join(per_run, on="_r", how="left", maintain_order="left")
    # A materialised column (a literal or pl.repeat would be folded into "* 1e-6" again).
    df = df.with_columns(pl.Series("_1e6", [float(_US)], dtype=pl.Float64)
                         .extend_constant(float(_US), max(df.height - 1, 0))
                         .head(df.height))

    # ---- side effects in flight
    tools = _in_flight(df, "_tkey", "_tkind").to_series()
    checks = _in_flight(df, "_vkey", "_vkind").to_series()
    df = df.with_columns((tools + checks).alias("side_effects_in_flight"))

    # ---- the window expressions
    def cnt(t: str) -> pl.Expr:
        return (et == t).cum_sum().over("_r").cast(pl.Int64)

    def usage_sum(c: str, lane: int | None = None) -> pl.Expr:
        keep = pl.col("_u_add") if lane is None else pl.col("_u_add") & (pl.col("_u_lane") == lane)
        return pl.when(keep).then(pl.col(c)).otherwise(0).cum_sum().over("_r")

    def lane_total(lane: int | None) -> pl.Expr:
        keep = pl.col("_u_add") if lane is None else pl.col("_u_add") & (pl.col("_u_lane") == lane)
        added = keep.cum_sum().over("_r") > 0
        return pl.when(added).then(usage_sum("_u_rt", lane))

    def secs(end: pl.Expr, start: pl.Expr) -> pl.Expr:
        # Divide by a column, not a scalar: polars turns "/ scalar" into "* (1 / scalar)",
        # which is off by an ulp from timedelta.total_seconds() (int / 10**6, exact rounding).
        return (end - start).cast(pl.Float64) / pl.col("_1e6")

    def first_time(seg: str) -> pl.Expr:
        has = pl.col("_t").is_not_null()
        first = has & (has.cum_sum().over(["_r", seg]) == 1)
        return pl.when(first).then(pl.col("_t")).forward_fill().over(["_r", seg])

    phase_v = et.replace_strict(_PHASE, default=None, return_dtype=pl.Utf8)
    term_set = et.is_in(list(_TERMINAL))
    df = df.with_columns(
        pl.col("_step_v").forward_fill().over("_r").fill_null(0).alias("step"),
        cnt("model.requested").alias("model_requests"),
        cnt("model.completed").alias("model_completions"),
        cnt("model.failed").alias("model_failures"),
        cnt("tool.requested").alias("tool_requests"),
        cnt("tool.started").alias("tool_starts"),
        cnt("tool.completed").alias("tool_completions"),
        usage_sum("_u_in").alias("input_tokens"),
        usage_sum("_u_out").alias("output_tokens"),
        usage_sum("_u_cached").alias("cached_input_tokens"),
        usage_sum("_u_reason").alias("reasoning_tokens"),
        lane_total(None).alias("provider_total_tokens"),
        lane_total(0).fill_null(0).alias("primary_total_tokens"),
        lane_total(1).fill_null(0).alias("reviewer_total_tokens"),
        pl.col("_g_cnt").forward_fill().over("_r").fill_null(0).alias("repeat_count"),
        pl.col("_g_unk").forward_fill().over("_r").fill_null(False).alias("fingerprint_unknown"),
        pl.col("_g_unl").cum_sum().over("_r").alias("unlogged_guard_calls"),
        pl.col("_a_open").forward_fill().over("_r").fill_null(0).alias("open_approvals"),
        _ffill_value("_a_t", "_a_set").alias("_open_t"),
        phase_v.forward_fill().over("_r").fill_null("created").alias("phase"),
        pl.when(term_set).then(True).when(cont).then(False).forward_fill().over("_r")
        .fill_null(False).alias("terminal"),
        term_set.alias("_term_set"),
        first_time("_sseg").alias("_started"),
        first_time("_tseg").alias("_turn_started"),
        pl.col("_a_wait").cum_sum().over("_r").alias("_aw"),
        pl.col("_a_wait").cum_sum().over(["_r", "continuation_index"]).alias("_awt"),
        pl.col("_a_down").cum_sum().over(["_r", "continuation_index"]).alias("_dit"),
        pl.when(resumed).then(pl.max_horizontal(
            secs(pl.col("_t"), pl.col("_last_prev")).fill_null(0.0), pl.lit(0.0)))
        .otherwise(0.0).cum_sum().over("_r").alias("resume_downtime_seconds"),
    )
    df = df.with_columns(
        _ffill_value("_g_fp", "_g_fp_set").alias("last_action_fingerprint"),
        _ffill_value("_term_reason", "_term_set").alias("terminal_reason"),
        pl.when(cont).then(pl.col("step").shift(1).over("_r").fill_null(0))
        .forward_fill().over("_r").fill_null(0).alias("_turn_start_step"),
        pl.when(pl.col("provider_total_tokens").is_not_null())
        .then(pl.col("provider_total_tokens"))
        .otherwise(pl.col("input_tokens") + pl.col("output_tokens")).alias("total_tokens"),
        pl.when(pl.col("open_approvals") > 0)
        .then(secs(pl.col("_last"), pl.col("_open_t")).fill_null(0.0))
        .otherwise(0.0).alias("_open_secs"),
        secs(pl.col("_last"), pl.col("_started")).alias("wall_elapsed_seconds"),
        secs(pl.col("_last"), pl.col("_turn_started")).alias("_elapsed"),
    )
    elapsed = pl.when(pl.col("charge_approval_waits")).then(pl.col("_elapsed")).otherwise(
        pl.col("_elapsed") - ((pl.col("_awt") + pl.col("_open_secs")) + pl.col("_dit")))
    df = df.with_columns(
        (pl.col("_aw") + pl.col("_open_secs")).alias("approval_wait_seconds"),
        pl.when(elapsed > 0.0).then(elapsed).when(elapsed.is_not_null()).then(0.0)
        .alias("charged_wall_seconds"),
        pl.max_horizontal(pl.lit(REPEAT_TRIP) - pl.col("repeat_count"), pl.lit(0))
        .cast(pl.Int64).alias("repeat_trip_distance"),
        ((pl.col("side_effects_in_flight") == 0) & (pl.col("open_approvals") == 0))
        .alias("fork_safe"),
        (pl.col("_max_steps") - (pl.col("step") - pl.col("_turn_start_step")))
        .alias("steps_remaining"),
        (pl.col("_max_tok") - pl.col("total_tokens")).alias("tokens_remaining"),
        pl.lit(None, dtype=pl.Utf8).alias("rejected"),
    ).with_columns(
        (pl.col("_wall") - pl.col("charged_wall_seconds")).alias("wall_time_remaining_seconds"),
    )
    out = df.select("_r", *[pl.col(c).cast(dt) for c, dt in STATE_COLUMNS.items()], *keep)
    return out, reasons


def _run_of(starts: list[int], i: int) -> int:
    import bisect

    return bisect.bisect_right(starts, i) - 1
