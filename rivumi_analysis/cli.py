"""``rivumi-analysis`` command line: thin argument parsing over the public API.

Exit codes: 0 the command ran; 1 ``--fail-on`` matched; 2 usage error (checked before any
output); 3 an internal error on at least one run (after printing everything else).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from ._version import __version__
from .errors import VERDICTS, SourceError
from .tables.registry import TABLES, names

EXIT_OK, EXIT_FAIL_ON, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
# every table of the registry (stdlib only: the parser imports nothing heavy)
TABLE_NAMES = tuple(TABLES)

class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 2 (argparse's default too)
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rivumi-analysis",
                description="Audit, replay and chart Rivumi / Looplane run directories.")
    p.add_argument("--version", action="version", version=f"rivumi-analysis {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    a = sub.add_parser("audit", help="per-run resume verdict, reasons and line accounting")
    a.add_argument("paths", nargs="*", metavar="PATH",
                   help="run directories or folders of runs (default: the run root)")
    a.add_argument("--format", choices=("table", "json", "jsonl"), default=None,
                   help="table when stdout is a terminal, else json")
    a.add_argument("--fail-on", default="", metavar="VERDICT,...",
                   help="exit 1 when any run has one of these verdicts")
    a.add_argument("--max-depth", type=int, default=8, help="folder depth limit (default 8)")
    a.add_argument("--no-cache", action="store_true",
                   help="do not read or write the incremental cache (the store)")
    a.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="cache directory: the store lives in DIR/store/ (default: the "
                        "loaders' store, $RIVUMI_ANALYSIS_STORE_DIR or "
                        "~/.cache/rivumi-analysis/store); never inside a run directory")
    a.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="worker processes (default: one per core; 1: no pool)")
    a.add_argument("--engine", choices=("process", "ray"), default="process",
                   help="process: local process pool (default); ray: Ray Data tasks on the "
                        "cluster in $RAY_ADDRESS or a local one (extra rivumi-analysis[ray]; "
                        "no cache)")
    a.add_argument("--runs-per-task", type=int, default=256, metavar="N",
                   help="runs per Ray task (--engine ray; default 256)")
    a.add_argument("--runs-from", default=None, metavar="FILE",
                   help="audit the runs named in a listing (Parquet or CSV with a 'path' "
                        "column; a local path or s3://, gs:// URI) instead of walking PATHs")
    a.set_defaults(handler=cmd_audit)

    s = sub.add_parser("schema", help="print a table's data dictionary (what each column "
                                      "means, unit, source) or the audit record's JSON Schema")
    s.add_argument("name", choices=("audit-record", *TABLE_NAMES), metavar="NAME",
                   help="a table (" + ", ".join(TABLE_NAMES) + ") or audit-record")
    s.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default) or json; audit-record is always a JSON Schema")
    s.set_defaults(handler=cmd_schema)

    q = sub.add_parser("search", help="regex over event text, tool arguments and messages")
    q.add_argument("pattern", metavar="PATTERN",
                   help="a regular expression (Python re syntax; look-around and "
                        "backreferences work, row by row)")
    q.add_argument("paths", nargs="*", metavar="PATH",
                   help="run directories or folders of runs (default: the run root)")
    q.add_argument("--tables", default="events,tool_calls,messages,runs", metavar="T,...",
                   help="which of events, tool_calls, messages, runs to search (default: all)")
    q.add_argument("-i", "--ignore-case", action="store_true", help="case-insensitive")
    q.add_argument("--format", choices=("table", "json", "jsonl"), default=None,
                   help="table when stdout is a terminal, else jsonl")
    q.add_argument("--max-depth", type=int, default=8, help="folder depth limit (default 8)")
    q.set_defaults(handler=cmd_search)

    c = sub.add_parser("codes", help="list every reason, warning, quarantine and skip code")
    c.set_defaults(handler=cmd_codes)

    r = sub.add_parser("replay",
                       help="replay a run's events.jsonl like the runner's sessions --replay-json")
    r.add_argument("run_dir", metavar="RUN_DIR", help="path to one run directory")
    r.add_argument("--json", action="store_true",
                   help="print the runner's canonical JSON byte for byte")
    r.set_defaults(handler=_lazy("replay_view", "cmd_replay"))

    f = sub.add_parser("fork-seed",
                       help="print the runner's seed-only fork seed at a sequence (creates nothing)")
    f.add_argument("run_dir", metavar="RUN_DIR", help="path to one run directory")
    # a non-integer is a usage error; a negative one reaches rule 16's message (§9.6)
    f.add_argument("--sequence", type=int, required=True, metavar="N",
                   help="fork point sequence (a non-negative integer)")
    f.set_defaults(handler=_lazy("replay_view", "cmd_fork_seed"))

    rp = sub.add_parser("report", help="write one self-contained, offline HTML audit report")
    rp.add_argument("paths", nargs="*", metavar="PATH",
                    help="run directories or folders of runs (default: the run root); one "
                         "run directory gives that run's page")
    rp.add_argument("--compare", nargs=2, default=None, metavar=("A", "B"),
                    help="two run directories side by side (e.g. a fork and its source): "
                         "where they diverge, state differences, both runs' pages")
    rp.add_argument("--out", default="report.html", metavar="FILE",
                    help="HTML file to write (default: report.html)")
    rp.add_argument("--png", default=None, metavar="DIR",
                    help="also save every chart as PNG and SVG in DIR")
    rp.add_argument("--redact", action="store_true",
                    help="keep only ids, types, sequences, times, numbers, codes, tool names, "
                         "effects, decisions and relative run dirs")
    rp.add_argument("--max-depth", type=int, default=8, help="folder depth limit (default 8)")
    rp.add_argument("--group-by", default=None, metavar="COLUMN",
                    help="compare the groups of a runs_df column (e.g. model, provider, kind, "
                         "repository): outcome rates with 95 %% Wilson intervals, tokens, cost "
                         "(known share), wall time and steps per group, with counts")
    rs = rp.add_mutually_exclusive_group()
    rs.add_argument("--store", default=None, metavar="DIR",
                    help="read a fleet's tables through the Parquet store in DIR (built or "
                         "refreshed first; default: $RIVUMI_ANALYSIS_STORE_DIR or "
                         "~/.cache/rivumi-analysis/store/<name>-<hash>, as `store`)")
    rs.add_argument("--no-store", action="store_true",
                    help="load the runs in memory without the store (as "
                         "$RIVUMI_ANALYSIS_STORE=0)")
    rp.set_defaults(handler=cmd_report)

    rl = sub.add_parser("relay", help="relayflowd run journals (durable-channel audit)")
    rl_sub = rl.add_subparsers(dest="relay_command", metavar="SUBCOMMAND", parser_class=_Parser)
    rl.set_defaults(handler=lambda _args: (rl.print_help(sys.stderr), EXIT_USAGE)[1])
    ra = rl_sub.add_parser("audit", help="audit relayflowd journals (.sqlite3 with -wal, JSONL)")
    ra.add_argument("paths", nargs="+", metavar="PATH", help="journal files or folders")
    ra.add_argument("--format", choices=("table", "json", "jsonl"), default=None,
                    help="table when stdout is a terminal, else json: {schema_version, "
                         "journals, skipped, diagnostics} (docs/relayflowd-journal.md "
                         "journal §8); jsonl: one journal record per line, skipped and "
                         "diagnostics on stderr")
    ra.add_argument("--fail-on", default="", metavar="VERDICT,...",
                    help="exit 1 when any journal has one of these verdicts "
                         "(violations, unreadable)")
    ra.add_argument("--max-depth", type=int, default=16, help="folder depth limit (default 16)")
    ra.set_defaults(handler=cmd_relay_audit)

    e = sub.add_parser("export", help="write every table as a Parquet dataset")
    e.add_argument("paths", nargs="*", metavar="PATH",
                   help="run directories or folders of runs (default: the run root)")
    e.add_argument("--out", required=True, metavar="DIR", help="output folder")
    e.add_argument("--redact", action="store_true",
                   help="keep only ids, codes, numbers and timestamps (no content)")
    e.add_argument("--max-depth", type=int, default=8, help="folder depth limit (default 8)")
    e.add_argument("--engine", choices=("process", "ray"), default="process",
                   help="process: this machine (default); ray: one Ray task per chunk of "
                        "runs on the cluster in $RAY_ADDRESS or a local one (extra "
                        "rivumi-analysis[ray]); --out must be a folder every node sees, or "
                        "an s3:// or gs:// prefix")
    e.add_argument("--runs-per-task", type=int, default=256, metavar="N",
                   help="runs per Ray task (--engine ray; default 256)")
    e.add_argument("--tables", default=None, metavar="T,...",
                   help="write only these tables (default: all: "
                        + ", ".join(names(exported=True)) + "; --engine process and a local "
                        "--out)")
    e.set_defaults(handler=cmd_export)

    st = sub.add_parser("store", help="build or refresh the Parquet store of every table and "
                                      "print where it is; `store ls` lists the stores, "
                                      "`store gc` removes old or surplus ones",
                        epilog="store ls [--root DIR] [--format table|json]: every store "
                               "(source, runs, size, last used). store gc [--older-than AGE] "
                               "[--max-size SIZE] [--dry-run]: remove stores unused for AGE "
                               "(e.g. 30d), then the least recently used until the rest fit "
                               "in SIZE (e.g. 5G). A store being refreshed is skipped. "
                               "(A source folder named ls or gc: write ./ls.)")
    st.add_argument("paths", nargs="*", metavar="PATH",
                    help="run directories or folders of runs (default: the run root), or "
                         "`ls` / `gc`")
    st.add_argument("--root", default=None, metavar="DIR",
                    help="ls/gc: the folder of stores (default: $RIVUMI_ANALYSIS_STORE_DIR or "
                         "~/.cache/rivumi-analysis/store)")
    st.add_argument("--older-than", default=None, metavar="AGE",
                    help="gc: remove stores last used longer ago (e.g. 30d, 12h)")
    st.add_argument("--max-size", default=None, metavar="SIZE",
                    help="gc: then remove the least recently used until the rest fit "
                         "(e.g. 500M, 10G)")
    st.add_argument("--dry-run", action="store_true", help="gc: only say what would go")
    st.add_argument("--format", choices=("table", "json"), default="table",
                    help="ls/gc output (default table)")
    st.add_argument("--store", default=None, metavar="DIR",
                    help="store folder (default: $RIVUMI_ANALYSIS_STORE_DIR or "
                         "~/.cache/rivumi-analysis/store/<name>-<hash>); never inside a source")
    st.add_argument("--verify", action="store_true",
                    help="also check every part file's checksum (not only size and mtime)")
    st.add_argument("--compact", action="store_true",
                    help="rewrite parts holding superseded rows, so the files hold exactly the "
                         "live rows (before reading them with DuckDB or Spark)")
    st.add_argument("--max-depth", type=int, default=8, help="folder depth limit (default 8)")
    st.add_argument("--engine", choices=("process", "ray"), default="process",
                    help="process: local worker processes (default); ray: the runs to re-read "
                         "are read in Ray tasks on the cluster in $RAY_ADDRESS or a local one "
                         "(extra rivumi-analysis[ray]); the store folder must be at the same "
                         "path on every node")
    st.set_defaults(handler=cmd_store)

    ot = sub.add_parser("otel", help="export runs as OpenTelemetry GenAI traces (OTLP/JSON "
                                     "file or OTLP/HTTP; extra rivumi-analysis[otel])")
    ot.add_argument("paths", nargs="*", metavar="PATH",
                    help="run directories or folders of runs (default: the run root)")
    dest = ot.add_mutually_exclusive_group(required=True)
    dest.add_argument("--out", default=None, metavar="FILE",
                      help="write OTLP/JSON: one ExportTraceServiceRequest per line, one line "
                           "per run")
    dest.add_argument("--endpoint", default=None, metavar="URL",
                      help="send OTLP/HTTP (protobuf) to a receiver, e.g. "
                           "http://127.0.0.1:4318 (/v1/traces is added when URL has no path)")
    ot.add_argument("--changed-only", action="store_true",
                    help="send only runs changed since the last export to the same "
                         "destination (state in the cache directory)")
    ot.add_argument("--since", default=None, metavar="STATE",
                    help="like --changed-only, with the state in the file STATE")
    ot.add_argument("--redact", action="store_true",
                    help="leave out message content, tool arguments and results, previews "
                         "and error texts")
    ot.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                    help="seconds per OTLP/HTTP request (default 30)")
    ot.add_argument("--max-depth", type=int, default=8, help="folder depth limit (default 8)")
    ot.set_defaults(handler=cmd_otel)

    w = sub.add_parser("watch", help="live view of running sessions: step, last event, "
                                     "repeat guard, budgets, resume verdict, alerts")
    w.add_argument("paths", nargs="*", metavar="PATH",
                   help="run directories or folders of runs (default: the run root)")
    w.add_argument("--format", choices=("text", "jsonl"), default=None,
                   help="default: a redrawn screen on a terminal, one line per change "
                        "otherwise; jsonl: one JSON object per change")
    w.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                   help="seconds between refreshes (default 2)")
    w.add_argument("--stall", type=float, default=60.0, metavar="SECONDS",
                   help="alert when a live run has no new event for this long (default 60)")
    w.add_argument("--iterations", type=int, default=None, metavar="N",
                   help="stop after N refreshes (default: until interrupted)")
    w.add_argument("--max-depth", type=int, default=8, help="folder depth limit (default 8)")
    w.set_defaults(handler=cmd_watch)
    return p


def _resolve_paths(paths: list[str]) -> tuple[list[str] | None, str | None]:
    """Validate PATH arguments before any output. Returns (paths, error message)."""
    from .read.discovery import check_sources, default_run_root

    if not paths:
        root = default_run_root()
        if root is None:
            return None, ("no PATH given and no run root found ($RIVUMI_RUN_ROOT, "
                          "$LOOPLANE_RUN_ROOT, $PCA_RUN_ROOT, ~/.local/state/{looplane,rivumi,"
                          "python-coding-agent}/runs)")
        print(f"rivumi-analysis: using run root {root}", file=sys.stderr)
        return [root], None
    try:
        check_sources(paths)
    except SourceError as exc:
        return None, exc.message + (f" (hint: {exc.hint})" if exc.hint else "")
    return paths, None


def cmd_audit(args: argparse.Namespace) -> int:
    fail_on = {v.strip() for v in args.fail_on.split(",") if v.strip()}
    unknown = sorted(fail_on - set(VERDICTS))
    if unknown:
        print(f"rivumi-analysis audit: error: unknown verdict(s) {', '.join(unknown)}; "
              f"choose from {', '.join(VERDICTS)}", file=sys.stderr)
        return EXIT_USAGE
    if args.runs_from is not None and args.paths:
        print("rivumi-analysis audit: error: give PATHs or --runs-from, not both",
              file=sys.stderr)
        return EXIT_USAGE
    paths, err = ([args.runs_from], None) if args.runs_from else _resolve_paths(args.paths)
    if err:
        print(f"rivumi-analysis audit: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    fmt = args.format or ("table" if sys.stdout.isatty() else "json")
    if args.jobs is not None and args.jobs < 1:
        print("rivumi-analysis audit: error: --jobs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    if args.runs_per_task < 1:
        print("rivumi-analysis audit: error: --runs-per-task must be at least 1",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.engine == "ray" or args.runs_from:
            result = _run_ray_audit(paths, args.max_depth, args.runs_per_task,
                                    engine=args.engine, runs_from=args.runs_from,
                                    jobs=args.jobs)
            if result is None:
                return EXIT_USAGE
        else:
            result = _run_audit(paths, args.max_depth, cache=not args.no_cache,
                                cache_dir=args.cache_dir, jobs=args.jobs)
    except SourceError as exc:  # object-storage sources are checked when listed
        print(f"rivumi-analysis audit: error: {exc.message}"
              + (f" (hint: {exc.hint})" if exc.hint else ""), file=sys.stderr)
        return EXIT_USAGE
    if not result.runs:
        print(f"rivumi-analysis audit: error: no runs found below {', '.join(paths)} (hint: "
              "a run directory holds events.jsonl, session.json, request.json, "
              "checkpoint.json or result.json; check the PATH and --max-depth)",
              file=sys.stderr)
    out = sys.stdout
    if fmt == "json":
        out.write(result.to_json_text() + "\n")
    elif fmt == "jsonl":
        for rec in result.runs:
            out.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
        for s in result.skipped:
            print(f"skipped: {s['path']} ({s['reason']})", file=sys.stderr)
    else:
        from .audit import format_table

        out.write(format_table(result.runs, result.skipped))
    out.flush()
    if not result.runs:  # an empty source: the same exit code as every command
        return EXIT_USAGE
    if any(r["verdict"] == "error" for r in result.runs):
        return EXIT_INTERNAL
    matched = [r for r in result.runs if r["verdict"] in fail_on]
    if matched:
        print(f"rivumi-analysis audit: --fail-on matched {len(matched)} run(s):",
              file=sys.stderr)
        for r in matched:
            print(f"  {r['run_dir']}  {r['verdict']}  {','.join(r['reasons']) or '-'}",
                  file=sys.stderr)
        return EXIT_FAIL_ON
    return EXIT_OK


def _run_audit(paths: list[str], max_depth: int, *, cache: bool = False,
               cache_dir: str | None = None, jobs: int | None = None) -> Any:
    from .fleet_audit import audit

    progress = None
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(unit="run", desc="auditing", file=sys.stderr, leave=False)
        progress = bar.update
    try:
        return audit(paths, max_depth=max_depth, progress=progress, jobs=jobs, cache=cache,
                     cache_dir=cache_dir)
    finally:
        if bar is not None:
            bar.close()


def _run_ray_audit(paths: list[str], max_depth: int, runs_per_task: int, *,
                   engine: str = "ray", runs_from: str | None = None,
                   jobs: int | None = None) -> Any:
    """The audit through ``distributed`` (``--engine ray`` or ``--runs-from``); a Ray engine
    summary goes to stderr."""
    if engine == "ray":
        try:
            from .distributed import _ray

            _ray.require_ray()
        except ImportError as exc:
            print(f"rivumi-analysis audit: error: {exc}", file=sys.stderr)
            return None
    from .distributed import ChunkBar, audit

    bar = ChunkBar(file=sys.stderr) if sys.stderr.isatty() and engine == "ray" else None
    try:
        result = audit(None if runs_from else paths, engine=engine, max_depth=max_depth,
                       runs_per_task=runs_per_task, on_chunk=bar, runs_from=runs_from,
                       jobs=jobs)
    finally:
        if bar is not None:
            bar.close()
    if getattr(result, "summary", None) is not None:
        print(f"rivumi-analysis: {result.summary.text()}", file=sys.stderr)
    return result


def _lazy(module: str, name: str) -> Any:
    """A handler imported on first use, so ``audit`` never pays for altair or polars."""

    def handler(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(f"rivumi_analysis.{module}"), name)(args)

    return handler


class _Progress:
    """Phases and run counts on stderr: a tqdm bar on a terminal, else a few plain lines."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.tty = sys.stderr.isatty()
        self.phase: str | None = None
        self.bar: Any = None
        self.next_line = 0

    def __call__(self, phase: str, done: int, total: int) -> None:
        if phase != self.phase:
            self.close()
            self.phase = phase
            self.next_line = 0
            if phase == "reading runs":
                print(f"rivumi-analysis {self.command}: found {total} run(s)", file=sys.stderr)
            if self.tty and phase == "reading runs" and total > 1:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="run", desc=phase, file=sys.stderr,
                                leave=False)
            else:
                print(f"rivumi-analysis {self.command}: {phase}…", file=sys.stderr)
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
        elif phase == "reading runs" and total and done >= self.next_line:
            # Without a terminal: a line at 0 %, every quarter and at the end.
            if done:
                print(f"rivumi-analysis {self.command}: read {done}/{total} runs",
                      file=sys.stderr)
            self.next_line = min(total, done + max(1, total // 4))
        sys.stderr.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _check_out_file(path: str) -> str | None:
    """Why ``path`` cannot be written as a file (None when it can); changes nothing."""
    if os.path.isdir(path):
        return f"--out {path} is a directory; give a file name, e.g. {os.path.join(path, 'report.html')}"
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"--out {path}: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--out {path}: {parent} is not writable"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"--out {path} exists and is not writable"
    return None


def _check_out_dir(path: str, flag: str) -> str | None:
    """Why ``path`` cannot be used (or created) as an output folder."""
    if os.path.lexists(path):
        if not os.path.isdir(path):
            return f"{flag} {path} exists and is not a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else f"{flag} {path} is not writable"
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{flag} {path}: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{flag} {path}: {parent} is not writable"
    return None


def _source_message(exc: SourceError) -> str:
    return exc.message + (f" (hint: {exc.hint})" if exc.hint else "")


def _report_usage_error(args: argparse.Namespace, err: str | None) -> str | None:
    """The first usage error of ``report`` (``err``, then ``--out``, then ``--png``), printed."""
    err = err or _check_out_file(args.out)
    if not err and args.png:
        err = _check_out_dir(args.png, "--png")
    if err:
        print(f"rivumi-analysis report: error: {err}", file=sys.stderr)
    return err


def _with_report_progress(build: Callable[[_Progress], Any]) -> Any:
    """``build(progress)`` with progress on stderr; None (after printing why) on a SourceError."""
    progress = _Progress("report")
    try:
        return build(progress)
    except SourceError as exc:
        print(f"rivumi-analysis report: error: {_source_message(exc)}", file=sys.stderr)
        return None
    finally:
        progress.close()


def cmd_report(args: argparse.Namespace) -> int:
    if getattr(args, "compare", None):
        return _cmd_compare(args)
    paths, err = _resolve_paths(args.paths)
    store_dir = getattr(args, "store", None)
    if not err and store_dir is not None:
        from .errors import StoreError
        from .store.core import resolve_store_dir

        try:
            resolve_store_dir(paths, store_dir, args.max_depth)
        except StoreError as exc:
            err = f"--store {store_dir}: {exc.message}"
    group_by = getattr(args, "group_by", None)
    if not err and group_by is not None:
        from .viz.report import group_by_error

        err = group_by_error(group_by, args.redact)
    if _report_usage_error(args, err):
        return EXIT_USAGE
    from .viz.report import write_report

    res = _with_report_progress(lambda progress: write_report(
        paths, args.out, png_dir=args.png, redact=args.redact, max_depth=args.max_depth,
        progress=progress, store=False if getattr(args, "no_store", False) else None,
        store_dir=store_dir, group_by=group_by))
    if res is None:  # no runs found: nothing was written
        return EXIT_USAGE
    if res.store is not None:
        print(f"rivumi-analysis report: tables from the store {res.store} "
              f"({res.store_read} of {res.runs} runs new or changed)", file=sys.stderr)
    print(f"rivumi-analysis: wrote {os.path.abspath(res.path)} "
          f"({res.bytes / 1e6:.2f} MB, {res.runs} runs, {res.charts} charts, "
          f"{res.seconds:.1f} s)")
    if res.images:
        print(f"rivumi-analysis: saved {len(res.images)} images to {os.path.abspath(args.png)}")
    return EXIT_OK


def _cmd_compare(args: argparse.Namespace) -> int:
    err = None
    if args.paths:
        err = "give either PATH... or --compare A B, not both"
    from .viz.report import is_run_dir

    for p in args.compare:
        if not err and not is_run_dir(p):
            err = (f"--compare {p} is not a run directory (it holds no events.jsonl, "
                   "session.json, request.json, checkpoint.json or result.json)")
    if _report_usage_error(args, err):
        return EXIT_USAGE
    from .viz.report import write_compare

    done = _with_report_progress(lambda progress: write_compare(
        args.compare[0], args.compare[1], args.out, png_dir=args.png, redact=args.redact,
        progress=progress))
    if done is None:
        return EXIT_USAGE
    res, div = done
    print(f"rivumi-analysis: {div.message}")
    print(f"rivumi-analysis: wrote {os.path.abspath(res.path)} "
          f"({res.bytes / 1e6:.2f} MB, 2 runs compared, {res.charts} charts, "
          f"{res.seconds:.1f} s)")
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from .export import SCHEMA_VERSION, ExportError, check_out, check_tables, export

    paths, err = _resolve_paths(args.paths)
    if not err and args.runs_per_task < 1:
        err = "--runs-per-task must be at least 1"
    to_uri = "://" in args.out
    tables = None
    if not err and args.tables is not None:
        if args.engine != "process" or to_uri:
            err = "--tables needs --engine process and a local --out"
        else:
            try:
                tables = check_tables([t.strip() for t in args.tables.split(",") if t.strip()])
            except ExportError as exc:
                err = str(exc)
    if not err:
        try:
            if to_uri:  # an object-store prefix: the parts are uploaded by the tasks
                from .distributed._dest import check_out as check_uri_out

                check_uri_out(args.out)
            else:
                check_out(args.out)
        except ExportError as exc:
            err = str(exc)
    if not err and args.engine == "ray":
        try:
            from .distributed import _ray

            _ray.require_ray()
        except ImportError as exc:
            err = str(exc)
    if err:
        print(f"rivumi-analysis export: error: {err}", file=sys.stderr)
        return EXIT_USAGE

    summary = None
    progress = _Progress("export") if args.engine == "process" and not to_uri else None
    bar = None
    try:
        if progress is not None:
            manifest = export(paths, args.out, redact_output=args.redact,
                              max_depth=args.max_depth, progress=progress, tables=tables)
        else:
            from .distributed import ChunkBar
            from .distributed import export as engine_export

            bar = ChunkBar(file=sys.stderr, desc="exporting (ray)") if sys.stderr.isatty() \
                else None
            res = engine_export(paths, args.out, engine=args.engine,
                                redact_output=args.redact, max_depth=args.max_depth,
                                runs_per_task=args.runs_per_task, on_chunk=bar)
            manifest, summary = res.manifest, res.summary
    except ExportError as exc:
        print(f"rivumi-analysis export: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SourceError as exc:  # no runs found: --out was not touched
        print(f"rivumi-analysis export: error: {_source_message(exc)}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if progress is not None:
            progress.close()
        if bar is not None:
            bar.close()
    if summary is not None:
        print(f"rivumi-analysis: {summary.text()}", file=sys.stderr)
        if summary.failures:
            print(f"rivumi-analysis export: error: {len(summary.failures)} chunk(s) failed; "
                  f"{args.out if to_uri else os.path.abspath(args.out)} is incomplete "
                  "(no _dataset.json)",
                  file=sys.stderr)
            return EXIT_INTERNAL
    rows = ", ".join(f"{t} {v['rows']}" for t, v in manifest["tables"].items())
    print(f"rivumi-analysis: wrote {args.out if to_uri else os.path.abspath(args.out)} "
          f"(schema version {SCHEMA_VERSION}): {rows}")
    return EXIT_OK


def cmd_relay_audit(args: argparse.Namespace) -> int:
    from .relay.audit import VERDICTS as RELAY_VERDICTS
    from .relay.audit import run_cli

    fail_on = {v.strip() for v in args.fail_on.split(",") if v.strip()}
    unknown = sorted(fail_on - set(RELAY_VERDICTS))
    missing = [p for p in args.paths if not os.path.lexists(p)]
    err = (f"unknown verdict(s) {', '.join(unknown)}; choose from {', '.join(RELAY_VERDICTS)}"
           if unknown else f"path does not exist: {missing[0]}" if missing else None)
    if err:
        print(f"rivumi-analysis relay audit: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    fmt = args.format or ("table" if sys.stdout.isatty() else "json")
    return run_cli(args.paths, fmt, fail_on, max_depth=args.max_depth)


def _store_housekeeping(args: argparse.Namespace) -> int:
    from .store import housekeeping as hk

    action, rest = args.paths[0], args.paths[1:]
    try:
        if rest:
            raise ValueError(f"store {action} takes no path (the stores' folder: --root DIR)")
        older = hk.parse_age(args.older_than) if args.older_than else None
        size = hk.parse_size(args.max_size) if args.max_size else None
        if action == "gc" and older is None and size is None:
            raise ValueError("store gc needs --older-than AGE and/or --max-size SIZE")
    except ValueError as exc:
        print(f"rivumi-analysis store: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if action == "ls":
        stores = hk.list_stores(args.root)
    else:
        stores = hk.gc_stores(args.root, older_than=older, max_bytes=size,
                              dry_run=args.dry_run)
    if args.format == "json":
        json.dump([{"directory": s.directory, "sources": list(s.sources), "runs": s.runs,
                    "bytes": s.bytes, "last_used": s.last_used} for s in stores],
                  sys.stdout, indent=1)
        print()
        return EXIT_OK
    import time

    verb = "" if action == "ls" else ("would remove " if args.dry_run else "removed ")
    for s in stores:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.last_used))
        print(f"{verb}{s.directory}\t{', '.join(s.sources) or '?'}\t{s.runs} runs\t"
              f"{s.bytes / 1e6:.1f} MB\tlast used {used}")
    total = sum(s.bytes for s in stores)
    print(f"rivumi-analysis: {len(stores)} store(s), {total / 1e6:.1f} MB"
          + ("" if action == "ls" else (" would be freed" if args.dry_run else " freed")),
          file=sys.stderr)
    return EXIT_OK


def cmd_store(args: argparse.Namespace) -> int:
    from .errors import StoreError
    from .store.core import open_store

    if args.paths and args.paths[0] in ("ls", "gc"):
        return _store_housekeeping(args)
    paths, err = _resolve_paths(args.paths)
    if err:
        print(f"rivumi-analysis store: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    if args.engine == "ray":
        try:
            from .distributed import _ray

            _ray.require_ray()
        except ImportError as exc:
            print(f"rivumi-analysis store: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    summary = None
    try:
        if args.engine == "ray":
            from .distributed import ChunkBar, ChunkFailedError
            from .distributed import store as engine_store

            bar = ChunkBar(file=sys.stderr, desc="store (ray)") if sys.stderr.isatty() \
                else None
            try:
                res = engine_store(paths, engine="ray", store_dir=args.store,
                                   max_depth=args.max_depth, verify=args.verify,
                                   compact=args.compact, on_chunk=bar)
            except ChunkFailedError as exc:
                print(f"rivumi-analysis store: error: nothing was published, a chunk kept "
                      f"failing:\n{exc}", file=sys.stderr)
                return EXIT_INTERNAL
            finally:
                if bar is not None:
                    bar.close()
            opened, summary = res.opened, res.summary
        else:
            opened = open_store(paths, store_dir=args.store, max_depth=args.max_depth,
                                verify=args.verify, compact=args.compact)
    except StoreError as exc:
        print(f"rivumi-analysis store: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if summary is not None:
        print(f"rivumi-analysis: {summary.text()}", file=sys.stderr)
    s = opened.store.last_stats
    m = opened.manifest
    size = sum(f["bytes"] for p in m.parts.values() for f in p["files"])
    assert s is not None
    print(f"rivumi-analysis: store {opened.store.directory}: {s.runs} runs, {s.reread} read, "
          f"{s.removed} removed, {len(m.parts)} parts, {size / 1e6:.1f} MB "
          f"({s.seconds:.2f} s)")
    return EXIT_OK


def cmd_otel(args: argparse.Namespace) -> int:
    paths, err = _resolve_paths(args.paths)
    if not err and args.out is not None:
        err = _check_out_file(args.out)
    if not err:
        try:  # the extra is optional: say how to get it rather than a traceback
            import opentelemetry.exporter.otlp.proto.http  # noqa: F401
            import opentelemetry.sdk.trace  # noqa: F401
        except ImportError:
            err = "the otel extra is not installed: pip install 'rivumi-analysis[otel]'"
    if not err:
        from .otel import OtelExportError, _http_url

        try:
            if args.endpoint is not None:
                _http_url(args.endpoint)
        except OtelExportError as exc:
            err = str(exc)
    if err:
        print(f"rivumi-analysis otel: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    from .otel import export_otel

    try:
        res = export_otel(paths, out=args.out, endpoint=args.endpoint, redact=args.redact,
                          changed_only=args.changed_only, state=args.since,
                          max_depth=args.max_depth, timeout=args.timeout)
    except SourceError as exc:
        print(f"rivumi-analysis otel: error: {_source_message(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except OtelExportError as exc:
        print(f"rivumi-analysis otel: error: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    for s in res.skipped:
        print(f"rivumi-analysis otel: skipped {s['run_dir']}: {s['reason']}", file=sys.stderr)
    which = f"{res.sent} of {res.runs} runs (changed since the last export)" \
        if res.incremental else f"{res.sent} runs"
    print(f"rivumi-analysis: exported {which}, {res.spans} spans to {res.destination} "
          f"({res.seconds:.1f} s)")
    return EXIT_OK


def cmd_watch(args: argparse.Namespace) -> int:
    from .store.watch import watch

    paths, err = _resolve_paths(args.paths)
    if err:
        print(f"rivumi-analysis watch: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    return watch(paths, fmt=args.format or "auto", interval=args.interval,
                 stall_seconds=args.stall, max_depth=args.max_depth, iterations=args.iterations)


def cmd_schema(args: argparse.Namespace) -> int:
    if args.name in TABLE_NAMES:
        from .dictionary import dictionary, render_text

        if args.format == "json":
            print(json.dumps(dictionary(args.name), ensure_ascii=False, indent=1))
        else:
            sys.stdout.write(render_text(args.name))
        return EXIT_OK
    from importlib import resources

    text = resources.files("rivumi_analysis").joinpath("data", f"{args.name}.schema.json")
    sys.stdout.write(text.read_text(encoding="utf-8"))
    if not text.read_text(encoding="utf-8").endswith("\n"):
        sys.stdout.write("\n")
    return EXIT_OK


def cmd_search(args: argparse.Namespace) -> int:
    paths, err = _resolve_paths(args.paths)
    if err:
        print(f"rivumi-analysis search: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    from .text_search import search

    tables = [t.strip() for t in args.tables.split(",") if t.strip()]
    try:
        hits = search(paths, args.pattern, tables=tables, ignore_case=args.ignore_case,
                      max_depth=args.max_depth)
    except ValueError as exc:
        print(f"rivumi-analysis search: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    fmt = args.format or ("table" if sys.stdout.isatty() else "jsonl")
    rows = hits.to_dicts()
    if fmt == "json":
        print(json.dumps(rows, ensure_ascii=False, indent=1))
    elif fmt == "jsonl":
        for r in rows:
            print(json.dumps(r, ensure_ascii=False, separators=(",", ":")))
    else:
        for r in rows:
            where = f"seq {r['sequence']}" if r["sequence"] is not None else "session.json"
            print(f"{r['run_dir']}  {r['table']}.{r['column']}  {where}  "
                  f"{r['snippet']}")
        print(f"\n{len(rows)} match(es)", file=sys.stderr)
    return EXIT_OK


def cmd_codes(args: argparse.Namespace) -> int:
    from .errors import ALL_CODES

    for family, codes in ALL_CODES.items():
        print(f"# {family}")
        for code, text in codes.items():
            print(f"{code}\t{text}")
    return EXIT_OK


# every argument that names a path (``~`` and ``$VARS`` are expanded in each)
_PATH_ARGS = ("paths", "run_dir", "out", "png", "cache_dir", "path", "store", "runs_from", "root",
              "since")


def expand_path(path: str) -> str:
    """``~`` and environment variables expanded, as a shell would (quoted or not).

    >>> import os; os.environ["RA_DOC_X"] = "/x"
    >>> expand_path("$RA_DOC_X/runs"), expand_path("~") == os.path.expanduser("~")
    ('/x/runs', True)
    """
    return os.path.expandvars(os.path.expanduser(path))


def _expand_args(args: argparse.Namespace) -> None:
    for name in _PATH_ARGS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            setattr(args, name, expand_path(value))
        elif isinstance(value, list):
            setattr(args, name, [expand_path(v) if isinstance(v, str) else v for v in value])


# the commands that read runs below PATHs: a source with no run exits 2 (issue 29); watch
# is left out (it waits for runs to appear)
_EMPTY_SOURCE_COMMANDS = frozenset({"audit", "report", "export", "search", "store"})


def _empty_source_is_usage_error(args: argparse.Namespace) -> int:
    """``args.handler(args)``; exit 2 (after its output) when discovery found no run below
    the sources (``EmptySourceWarning``; the command's own message, else one here)."""
    import warnings

    from .errors import EmptySourceWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", EmptySourceWarning)
        rc = int(args.handler(args))
    empty = None
    for w in caught:
        if issubclass(w.category, EmptySourceWarning):
            empty = empty or str(w.message)
        else:  # every other warning is shown as it would have been
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if empty is not None and rc == EXIT_OK:
        print(f"rivumi-analysis {args.command}: error: {empty} (hint: a run directory "
              "holds events.jsonl, session.json, request.json, checkpoint.json or "
              "result.json; check the PATH and --max-depth)", file=sys.stderr)
        return EXIT_USAGE
    return rc


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rivumi-analysis`` console script; returns the exit code."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    _expand_args(args)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from . import progress

    if args.command in _OWN_PROGRESS:
        progress.set_enabled(False)  # the command draws its own (one bar, not two)
    try:
        if args.command in _EMPTY_SOURCE_COMMANDS:
            return _empty_source_is_usage_error(args)
        return int(args.handler(args))
    except BrokenPipeError:  # e.g. piped into `head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    finally:
        progress.set_enabled(None)


_OWN_PROGRESS = frozenset({"audit", "report", "export"})
"""Commands that draw their own progress lines; the library's bars are off for them."""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
