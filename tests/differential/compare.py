"""Compare the toolkit with the independent oracle on one run directory.

Checks (each a named "aspect"; a case agrees when every aspect agrees):

* ``verdict``: the audit record's verdict (public API ``audit_run``) equals the oracle's
  resume verdict, and is never ``error``;
* ``readers``: ``readers_disagree`` is reported exactly when resume's reading and replay's
  reading of ``events.jsonl`` disagree on whether the log is acceptable;
* ``replay``: ``rivumi-analysis replay RUN --json`` (in-process CLI) prints exactly the
  oracle's stdout, or refuses (exit 2) with exactly the oracle's ``error: <message>``, and
  stdout is always valid UTF-8;
* ``audit_replay``: the audit's ``replay_accepts``/``replay_error`` equal what the toolkit's
  own ``replay --json`` did on the same file;
* ``fork``: ``rivumi-analysis fork-seed RUN --sequence N`` equals the oracle's seed or refusal,
  for a few N (first, middle, last, one past the last).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import runner_oracle as oracle


@dataclass
class CaseResult:
    aspects: dict[str, bool] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(self.aspects.values())


def run_cli(argv: list[str]) -> tuple[int, bytes, str]:
    """Run the toolkit's CLI in-process: (exit code, stdout bytes, stderr text)."""
    from rivumi_analysis.cli import main

    out = io.BytesIO()
    err = io.BytesIO()
    fake_out = io.TextIOWrapper(out, encoding="utf-8", errors="strict", write_through=True)
    fake_err = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace",
                                write_through=True)
    with contextlib.redirect_stdout(fake_out), contextlib.redirect_stderr(fake_err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception as exc:  # a crash is a disagreement, never an error of the harness
            code = 99
            sys.stderr.write(f"CRASH {type(exc).__name__}: {exc}\n")
        fake_out.flush()
        fake_err.flush()
    return code, out.getvalue(), err.getvalue().decode("utf-8", "replace")


def _cli_outcome(argv: list[str]) -> tuple[bool, str, dict[str, Any]]:
    code, out, err = run_cli(argv)
    info = {"exit": code, "stderr": err[:300]}
    try:
        text = out.decode("utf-8")
    except UnicodeDecodeError:
        info["stdout_not_utf8"] = True
        return False, "<stdout is not UTF-8>", info
    if code == 0:
        return True, text, info
    if code == 2 and err.startswith("error: ") and not out:
        return False, err[len("error: "):].rstrip("\n"), info
    return False, f"<exit {code}> {err[:200]}", info


def fork_points(data: bytes) -> list[int]:
    seqs = []
    for raw in data.split(b"\n"):
        try:
            v = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(v, dict) and type(v.get("sequence")) is int and v["sequence"] >= 0:
            seqs.append(v["sequence"])
    if not seqs:
        return [0]
    s = sorted(set(seqs))
    return sorted({s[0], s[len(s) // 2], s[-1], s[-1] + 1})


TABLES = ("runs_df", "events_df", "quarantine_df", "manifests_df", "tool_calls_df",
          "approvals_df", "model_calls_df", "usage_df", "verifications_df", "states_df",
          "drift_df")


def tables_survive(run_dir: Path) -> tuple[bool, str | None]:
    """Every table loader reads the run without raising (bad input is normal input)."""
    import rivumi_analysis

    for name in TABLES:
        try:
            getattr(rivumi_analysis, name)(str(run_dir))
        except Exception as exc:  # noqa: BLE001 - any exception is the finding
            return False, f"{name}: {type(exc).__name__}: {exc}"[:300]
    return True, None


def compare_run(run_dir: Path, *, fork: bool = True, tables: bool = False) -> CaseResult:
    from rivumi_analysis.audit import audit_run

    res = CaseResult()
    d = res.details
    expected = oracle.resume_verdict(run_dir)
    rec = audit_run(str(run_dir))
    d["oracle_verdict"] = f"{expected.verdict} ({expected.reason})"
    d["toolkit_verdict"] = f"{rec['verdict']} {rec['reasons']}"
    res.aspects["verdict"] = rec["verdict"] == expected.verdict and rec["verdict"] != "error"
    if tables:
        ok, why = tables_survive(run_dir)
        res.aspects["tables"] = ok
        if why:
            d["tables"] = why

    events_file = run_dir / "events.jsonl"
    data = events_file.read_bytes() if events_file.exists() else None
    if data is not None:
        o_ok, o_text = oracle.replay_outcome(data)
        t_ok, t_text, info = _cli_outcome(["replay", str(run_dir), "--json"])
        res.aspects["replay"] = (o_ok, o_text) == (t_ok, t_text)
        if not res.aspects["replay"]:
            d["replay_oracle"] = (o_ok, o_text[:300])
            d["replay_toolkit"] = (t_ok, t_text[:300], info)
        audit_pair = (rec["replay_accepts"], rec["replay_error"])
        res.aspects["audit_replay"] = audit_pair == (t_ok, None if t_ok else t_text)
        if not res.aspects["audit_replay"]:
            d["audit_replay"] = audit_pair
            d["cli_replay"] = (t_ok, t_text[:300])
        if rec["kind"] != "external" and expected.log_accepts is not None:
            want = expected.log_accepts != o_ok
            got = "readers_disagree" in rec["warnings"]
            res.aspects["readers"] = want == got
            if want != got:
                d["readers"] = {"resume_log_accepts": expected.log_accepts,
                                "resume_log_error": expected.log_error,
                                "replay_accepts": o_ok, "toolkit_warns": got}
        if fork:
            fork_ok = True
            for n in fork_points(data):
                o = oracle.fork_outcome(data, n)
                t_ok2, t_text2, info2 = _cli_outcome(
                    ["fork-seed", str(run_dir), "--sequence", str(n)])
                if o != (t_ok2, t_text2):
                    fork_ok = False
                    d[f"fork@{n}"] = {"oracle": (o[0], o[1][:300]),
                                      "toolkit": (t_ok2, t_text2[:300], info2)}
            res.aspects["fork"] = fork_ok
    return res
