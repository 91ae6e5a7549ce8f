"""``manifests_df``: one row per run whose ``session.json`` parses as JSON, with ``schema_valid`` and the first schema error."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from ..read.discovery import DEFAULT_MAX_DEPTH
from ..read.snapshot import RunData
from ._common import _bool, _float, _int, _str, frame, load_rows, parse_ts, usage_columns


def manifests_frame(runs: Iterable[RunData]) -> pl.DataFrame:
    """The manifests table of ``runs`` (read in full), validated."""
    return frame(manifests_rows(runs), "ManifestsSchema")


def manifests_rows(runs: Iterable[RunData]) -> list[dict[str, Any]]:
    """One row per run whose ``session.json`` parses as JSON, in run order (no polars: safe
    in a forked worker)."""
    from pydantic import ValidationError

    from ..read.models import SessionManifest, first_error
    rows = []
    for run in runs:
        m = run.manifest
        if m is None:
            continue
        if run.manifest_model is not None:
            # the msgspec twin accepted these bytes (the audit's reading): pydantic provably
            # accepts them too (``read.fast_models``; a decline is never an answer)
            valid, err = True, None
        else:
            try:
                SessionManifest.model_validate(m)
                valid, err = True, None
            except ValidationError as exc:
                valid, err = False, first_error(exc)
        pending = m.get("pending_action") if isinstance(m.get("pending_action"), dict) else {}
        ver = m.get("verification")
        ver_ok = (all(isinstance(v, dict) and v.get("ok") is True for v in ver)
                  if isinstance(ver, list) and ver else None)
        usage = usage_columns(m.get("usage"))
        usage.pop("total_tokens")
        ge = m.get("granted_effects")
        rows.append({
            "run_dir": run.run_dir, "run_id": run.run_id, "schema_valid": valid,
            "schema_error": err,
            **{k: _str(m.get(k)) for k in ("task_id", "provider_name", "model_id", "protocol",
                                           "prompt_version", "base_sha", "phase",
                                           "last_action_fingerprint", "active_writer_token")},
            "terminal": _bool(m.get("terminal")), "step": _int(m.get("step")),
            "repeat_count": _int(m.get("repeat_count")),
            "last_event_sequence": _int(m.get("last_event_sequence")),
            **usage,
            "active_wall_time_seconds": _float(m.get("active_wall_time_seconds")),
            "active_started_at": parse_ts(m.get("active_started_at")),
            "updated_at": parse_ts(m.get("updated_at")),
            "message_count": len(m["messages"]) if isinstance(m.get("messages"), list) else None,
            "model_usage_count": len(m["model_usage"]) if isinstance(
                m.get("model_usage"), list) else None,
            "approval_history_count": len(m["approval_history"]) if isinstance(
                m.get("approval_history"), list) else None,
            "granted_effects": sorted(x for x in ge if isinstance(x, str)) if isinstance(
                ge, list) else [],
            "pending_request_id": _str(pending.get("request_id")),
            "pending_action_id": _str(pending.get("action_id")),
            "verification_ok": ver_ok,
        })
    return rows


def manifests_df(source: Any = None, *, strict: bool = False,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> pl.DataFrame:
    """One row per run whose ``session.json`` parses as JSON, with ``schema_valid`` and the first schema error.

    The in-memory loader behind the public one (``store/loaders.py``, which documents
    ``source``, ``strict`` and ``max_depth``); validated by
    :class:`~rivumi_analysis.schemas.ManifestsSchema`.

    >>> df = manifests_df("tests/fixtures/example")
    >>> df["step"].to_list()
    [7]
    """
    return load_rows(source, strict=strict, max_depth=max_depth, rows=manifests_rows,
                     model="ManifestsSchema")
