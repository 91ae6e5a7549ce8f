"""The relayflowd audit record (journal §8) and the top-level audit document.

>>> doc = relay_audit([])
>>> doc["schema_version"], doc["journals"], doc["skipped"]
(1, [], [])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .read import Diagnostic, Journal, iter_journals
from .rules import Fold, fold_journal

SCHEMA_VERSION = 1
VERDICTS = ("consistent", "violations", "unreadable")


def channel_rows(fold: Fold) -> list[dict[str, Any]]:
    """One row per (channel, consumer) with at least one applied delivery (sorted)."""
    appended: dict[str, int] = {}
    delivered: dict[tuple[str, str], list[int]] = {}
    acks: dict[tuple[str, str], int] = {}
    for o in fold.outcomes:
        if not o.applied:
            continue
        e = o.entry
        p = e.payload
        if e.entry_type == "channel.appended":
            appended[p["channel"]] = appended.get(p["channel"], 0) + 1
        elif e.entry_type == "channel.delivered":
            delivered.setdefault((p["channel"], p["consumer"]), []).append(p["offset"])
        elif e.entry_type == "channel.acknowledged":
            k = (p["channel"], p["consumer"])
            acks[k] = acks.get(k, 0) + 1
    rows = []
    for (ch, consumer), offsets in sorted(delivered.items()):
        acked = fold.state.acked_offset(ch, consumer)
        distinct = set(offsets)
        rows.append({
            "channel": ch, "consumer": consumer, "appended": appended.get(ch, 0),
            "delivered": len(offsets), "acknowledged": acks.get((ch, consumer), 0),
            "redeliveries": len(offsets) - len(distinct), "acked_offset": acked,
            "unacked_at_end": sum(1 for off in distinct if off > acked),
        })
    return rows


def journal_record(j: Journal, fold: Fold | None = None) -> dict[str, Any]:
    """The journal §8 record of one journal (exactly the spec's keys).

    ``violations`` carry ``rule``, ``seq`` and a human-readable ``message``.
    """
    if j.unreadable is not None:
        return {"path": j.path, "source_kind": j.source_kind, "run_id": None, "entries": 0,
                "quarantined": 0, "verdict": "unreadable", "violations": [], "channels": [],
                "dead_attempts_unexplained": 0, "effects_confirmed": 0}
    fold = fold if fold is not None else fold_journal(j)
    violations = [{"rule": v.rule, "seq": v.seq, "message": v.message}
                  for v in sorted(fold.violations, key=lambda v: (v.seq, v.rule))]
    return {
        "path": j.path, "source_kind": j.source_kind, "run_id": j.run_id,
        "entries": len(j.entries), "quarantined": len(j.quarantine),
        "verdict": "violations" if violations else "consistent",
        "violations": violations, "channels": channel_rows(fold),
        "dead_attempts_unexplained": len(fold.dead),
        "effects_confirmed": fold.effects_confirmed,
    }


def diagnostics(j: Journal) -> list[dict[str, Any]]:
    """Unreadable reason, warnings and quarantine reasons of one journal, as plain dicts."""
    out: list[dict[str, Any]] = []

    def add(kind: str, d: Diagnostic) -> None:
        out.append({"path": j.path, "kind": kind, "code": d.code, "message": d.message,
                    "where": d.where})

    if j.unreadable is not None:
        add("unreadable", j.unreadable)
    for w in j.warnings:
        add("warning", w)
    for q in j.quarantine:
        where = j.abspath
        if q.line_no is not None:
            where += f":{q.line_no}:{q.byte_offset}"
            if q.element is not None:
                where += f" (entries[{q.element}])"
        else:
            where += f" (row {q.position + 1})"
        out.append({"path": j.path, "kind": "quarantine", "code": q.reason,
                    "message": q.message, "where": where})
    return out


@dataclass(frozen=True, slots=True)
class AuditResult:
    """Everything ``relay audit`` prints: records, skipped paths, diagnostics."""

    journals: list[dict[str, Any]]
    skipped: list[dict[str, str]]
    diagnostics: list[dict[str, Any]]
    internal_errors: int = 0

    def to_json_obj(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "journals": self.journals,
                "skipped": self.skipped, "diagnostics": self.diagnostics}


def run_audit(paths: Sequence[str] | str, *, max_depth: int = 16) -> AuditResult:
    """Audit every journal under ``paths``; one journal's internal error never stops the rest."""
    it, skipped = iter_journals(paths, max_depth=max_depth)
    records: list[dict[str, Any]] = []
    diags: list[dict[str, Any]] = []
    errors = 0
    for j in it:
        try:
            rec = journal_record(j)
            diags.extend(diagnostics(j))
        except Exception as exc:  # noqa: BLE001 - reported, never fatal for the others
            errors += 1
            bad = Journal(j.path, j.abspath, j.source_kind, None,
                          unreadable=Diagnostic("internal_error", f"{type(exc).__name__}: {exc}",
                                                j.abspath))
            rec = journal_record(bad)
            diags.extend(diagnostics(bad))
        records.append(rec)
    records.sort(key=lambda r: r["path"])
    skip = [{"path": s.path, "reason": s.reason, "message": s.message} for s in
            sorted(skipped, key=lambda s: s.path)]
    return AuditResult(records, skip, diags, errors)


def relay_audit(paths: Sequence[str] | str, *, max_depth: int = 16) -> dict[str, Any]:
    """``{"schema_version": 1, "journals": [...], "skipped": [...], "diagnostics": [...]}``."""
    return run_audit(paths, max_depth=max_depth).to_json_obj()


def format_table(result: AuditResult) -> str:
    """A fixed-width text table of the records plus skipped paths and diagnostics."""
    heads = ("JOURNAL", "KIND", "RUN", "VERDICT", "ENTRIES", "QUAR", "RULES")
    rows = []
    for r in result.journals:
        rules = sorted({v["rule"] for v in r["violations"]})
        rows.append([_short(r["path"], 50), r["source_kind"], r["run_id"] or "-", r["verdict"],
                     str(r["entries"]), str(r["quarantined"]), ",".join(rules) or "-"])
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in rows]
    counts = {v: sum(1 for r in result.journals if r["verdict"] == v) for v in VERDICTS}
    summary = ", ".join(f"{v} {n}" for v, n in counts.items() if n) or "no journals"
    lines.append(f"\n{len(result.journals)} journal(s): {summary}")
    for d in result.diagnostics:
        lines.append(f"{d['kind']}: {d['code']}: {d['message']} ({d['where']})")
    for s in result.skipped:
        lines.append(f"skipped: {s['path']} ({s['reason']})")
    return "\n".join(lines) + "\n"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]



def run_cli(paths: Sequence[str], fmt: str, fail_on: set[str], *, max_depth: int = 16) -> int:
    """``relay audit`` after argument checks: print, return 0, 1 (``--fail-on`` matched) or 3
    (internal error on at least one journal, after printing everything else)."""
    import json
    import sys

    result = run_audit(paths, max_depth=max_depth)
    out = sys.stdout
    if fmt == "json":
        out.write(json.dumps(result.to_json_obj(), ensure_ascii=False, indent=1) + "\n")
    elif fmt == "jsonl":
        for rec in result.journals:
            out.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
        for d in result.diagnostics:
            print(f"{d['kind']}: {d['code']}: {d['message']} ({d['where']})", file=sys.stderr)
        for s in result.skipped:
            print(f"skipped: {s['path']} ({s['reason']})", file=sys.stderr)
    else:
        out.write(format_table(result))
    out.flush()
    if not result.journals:
        print(f"rivumi-analysis relay audit: no journals found below {', '.join(paths)}",
              file=sys.stderr)
    if result.internal_errors:
        return 3
    matched = [r for r in result.journals if r["verdict"] in fail_on]
    if matched:
        print(f"rivumi-analysis relay audit: --fail-on matched {len(matched)} journal(s):",
              file=sys.stderr)
        for r in matched:
            print(f"  {r['path']} ({r['verdict']})", file=sys.stderr)
        return 1
    return 0
