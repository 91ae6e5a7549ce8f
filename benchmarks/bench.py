"""Fleet-scale benchmark: the runner's own validation vs the toolkit vs the I/O floors.

One command (see benchmarks/README.md)::

    .venv/bin/python benchmarks/bench.py --sizes 2000 --reps 3

For every corpus it measures, each in a fresh child process (so peak RSS is per measurement,
summed over the child's whole process tree, workers included):

(a) ``baseline``   the runner's validation per run (§8.1 steps 3-5, read as §8.2 says): pydantic
                   v2 models written here from the spec, lax mode, garbage collector on;
(b) ``wc_l`` / ``read_all``   ``wc -l`` over every file / reading every byte in Python;
(c) ``cli_cold_cache`` / ``cli_no_cache``   ``rivumi-analysis audit --format json`` end to end
                   (empty cache dir / ``--no-cache``);
(d) ``api_cold`` / ``api_warm``   ``audit()`` in-process with an empty / a filled cache;
(e) ``events_df``; (f) ``states_df`` (end to end, and ``states_reduce``: on runs already
                   loaded, the replay reduction alone);
(g) ``stat_floor``  ``lstat`` of every file plus a listing of every run folder;
(h) the two reference points for loading (issue 10): ``msgspec_envelope`` (each
                   ``events.jsonl`` decoded as one JSON array of envelope Structs, ``data`` as
                   ``msgspec.Raw``, one process) and ``polars_scan`` (``pl.scan_ndjson`` of
                   the envelope columns over every ``events.jsonl``, polars' own threads);
(i) ``table:<name>`` every public ``*_df`` loader, each in its own process (so a table
                   that is quadratic in the fleet cannot hide behind the others);
(j) ``audit_floor``  what any audit written in Python must at least do, with no check at all:
                   per run, list the folder, read every file the audit record is made of, decode
                   the log's envelopes in one msgspec call (``data`` raw) and each JSON document
                   as plain objects; one process. ``baseline / (audit_floor / cores)`` is then
                   a ceiling for the cold audit's speed-up that no Python design can pass on
                   this machine (it ignores start-up, the pool and every check).

On the single large log only ``events_df`` and ``states_df`` are measured. Timed figures and
peak RSS are medians over ``--reps`` repetitions with the spread (min-max); every ratio a/b is
the ratio of the medians with ``[min(a)/max(b)-max(a)/min(b)]``. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
FIXTURE = ROOT / "tests" / "fixtures" / "example" / "a66038f97f204cb3aaa96339f195c37e"


# --- corpora -----------------------------------------------------------------------------------

def _have_generator() -> bool:
    return (ROOT / "rivumi_analysis" / "synth" / "corpus.py").exists()


def make_corpus(out: Path, runs: int, target_mb: int, single_log_mb: int | None = None) -> Path:
    """Generate (or reuse) a corpus with the sample-runs generator (fallback: fixture copies)."""
    stamp = out / ".bench-corpus.json"
    want = {"runs": runs, "target_mb": target_mb, "single_log_mb": single_log_mb,
            "generator": _have_generator()}
    if stamp.exists() and json.loads(stamp.read_text()) == want:
        return out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    if _have_generator():
        cmd = [PY, "-m", "rivumi_analysis.synth.corpus", "--out", str(out)]
        cmd += (["--single-log-mb", str(single_log_mb)] if single_log_mb
                else ["--runs", str(runs), "--target-mb", str(target_mb)])
        subprocess.run(cmd, check=True, cwd=ROOT)
    else:  # quick stand-in until the generator lands: the example run, renamed
        _copy_fixture(out, runs if not single_log_mb else 1, single_log_mb)
    stamp.write_text(json.dumps(want))
    return out


def _copy_fixture(out: Path, runs: int, single_log_mb: int | None) -> None:
    src = {p.name: p.read_bytes() for p in FIXTURE.iterdir() if p.is_file()}
    old = FIXTURE.name.encode()
    for i in range(runs):
        rid = uuid.UUID(int=i + 1).hex
        d = out / rid
        d.mkdir()
        for name, data in src.items():
            (d / name).write_bytes(data.replace(old, rid.encode()))
    if single_log_mb:  # one long log: repeat the events with renumbered sequences
        d = out / uuid.UUID(int=1).hex
        lines = (d / "events.jsonl").read_bytes().splitlines()
        objs = [json.loads(ln) for ln in lines]
        with open(d / "events.jsonl", "wb") as fh:
            seq, size = 0, 0
            while size < single_log_mb * 1024 * 1024:
                for o in objs:
                    o = dict(o, sequence=seq)
                    b = json.dumps(o, ensure_ascii=False).encode() + b"\n"
                    fh.write(b)
                    size += len(b)
                    seq += 1
        man = json.loads((d / "session.json").read_text())
        man["last_event_sequence"] = seq - 1
        (d / "session.json").write_text(json.dumps(man))


def corpus_stats(root: Path) -> dict[str, Any]:
    """Files and bytes of the corpus, and of its largest run (what bounds the audit's RSS).

    A run's bytes are every file below its top-level folder (the generator writes one folder
    per run directly under the root); ``largest_events_bytes`` is the biggest single
    ``events.jsonl``, wherever it lies.
    """
    files = nbytes = ebytes = big_events = 0
    per_run: dict[str, int] = {}
    for dp, _dn, fn in os.walk(root):
        rel = os.path.relpath(dp, root)
        run = rel.split(os.sep, 1)[0] if rel != "." else None
        for f in fn:
            if f.startswith(".bench"):
                continue
            files += 1
            size = os.lstat(os.path.join(dp, f)).st_size
            nbytes += size
            if f == "events.jsonl":
                ebytes += size
                big_events = max(big_events, size)
            if run is not None:
                per_run[run] = per_run.get(run, 0) + size
    return {"files": files, "bytes": nbytes, "events_bytes": ebytes, "runs": len(per_run),
            "largest_run_bytes": max(per_run.values(), default=0),
            "largest_events_bytes": big_events}


# --- measurements (each runs in a child: `bench.py _measure NAME CORPUS [CACHE]`) ---------------

def _run_dirs(root: str) -> list[str]:
    from rivumi_analysis.read.discovery import discover

    return [loc.run_dir for loc in discover(root).runs]


def _cpu() -> float:
    """CPU seconds of this process and of its waited-for children (pool workers)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ru.ru_utime + ru.ru_stime


def m_baseline(root: str, cache: str | None) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).parent))
    from baseline_models import validate_run

    dirs = _run_dirs(root)
    gc.enable()
    c, t = _cpu(), time.perf_counter()
    ok = sum(validate_run(d) for d in dirs)
    return {"seconds": time.perf_counter() - t, "cpu_s": round(_cpu() - c, 3),
            "resumable": ok, "runs": len(dirs)}


def m_read_all(root: str, cache: str | None) -> dict[str, Any]:
    t = time.perf_counter()
    n = 0
    for dp, _dn, fn in os.walk(root):
        for f in fn:
            with open(os.path.join(dp, f), "rb") as fh:
                n += len(fh.read())
    return {"seconds": time.perf_counter() - t, "bytes": n}


def m_stat_floor(root: str, cache: str | None) -> dict[str, Any]:
    dirs = _run_dirs(root)
    c, t = _cpu(), time.perf_counter()
    n = 0
    for d in dirs:
        for name in os.listdir(d):
            os.lstat(os.path.join(d, name))
            n += 1
    return {"seconds": time.perf_counter() - t, "cpu_s": round(_cpu() - c, 3), "entries": n}


def m_api(root: str, cache: str | None) -> dict[str, Any]:
    from rivumi_analysis.fleet_audit import audit

    c, t = _cpu(), time.perf_counter()
    res = audit(root, cache_dir=cache) if cache else audit(root, cache=False)
    return {"seconds": time.perf_counter() - t, "cpu_s": round(_cpu() - c, 3),
            "runs": len(res.runs)}


def m_api_warm(root: str, cache: str | None) -> dict[str, Any]:
    from rivumi_analysis.fleet_audit import audit

    audit(root, cache_dir=cache)  # fill (no-op when already filled)
    c, t = _cpu(), time.perf_counter()
    res = audit(root, cache_dir=cache)
    return {"seconds": time.perf_counter() - t, "cpu_s": round(_cpu() - c, 3),
            "runs": len(res.runs)}


def _events_files(root: str) -> list[str]:
    files = [os.path.join(d, "events.jsonl") for d in _run_dirs(root)]
    return [f for f in files if os.path.isfile(f) and not os.path.islink(f)]


ENVELOPE = ("created_at", "event_id", "event_type", "run_id", "sequence", "task_id")


class Envelope(msgspec.Struct):
    """The RunEvent envelope as the msgspec reference point decodes it (``data`` untouched)."""

    created_at: str
    data: msgspec.Raw
    event_id: str
    event_type: str
    run_id: str
    sequence: int
    task_id: str | None = None


def _envelope_count(decoder: Any, data: bytes) -> int:
    """Events in ``data`` decoded as ONE JSON array of envelopes (its lines joined by commas);
    0 for a log that is not one clean array (a torn or odd log: the references skip it)."""
    try:
        return len(decoder.decode(b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]"))
    except msgspec.DecodeError:
        return 0


def m_msgspec_envelope(root: str, cache: str | None) -> dict[str, Any]:
    """Reference: every events.jsonl decoded as ONE JSON array of envelope Structs."""
    dec = msgspec.json.Decoder(list[Envelope])
    files = _events_files(root)
    t = time.perf_counter()
    n = nbytes = 0
    for f in files:
        with open(f, "rb") as fh:
            data = fh.read()
        nbytes += len(data)
        n += _envelope_count(dec, data)
    return {"seconds": time.perf_counter() - t, "rows": n, "events_bytes": nbytes}


def m_audit_floor(root: str, cache: str | None) -> dict[str, Any]:
    """Floor: list each run folder, read the files an audit record is made of (the log and
    every other file of ``read.snapshot._RUN_FILES``), decode the log's envelopes in one
    msgspec call and the documents as plain objects. No check, no rule, one process."""
    from rivumi_analysis.read.snapshot import _RUN_FILES

    others = sorted(_RUN_FILES - {"events.jsonl"})
    envelopes, document = msgspec.json.Decoder(list[Envelope]), msgspec.json.Decoder()
    dirs = _run_dirs(root)
    c, t = _cpu(), time.perf_counter()
    events = 0
    for d in dirs:
        names = set(os.listdir(d))
        if "events.jsonl" in names:
            with open(os.path.join(d, "events.jsonl"), "rb") as fh:
                data = fh.read()
            events += _envelope_count(envelopes, data)
        for name in others:
            if name in names:
                with open(os.path.join(d, name), "rb") as fh:
                    data = fh.read()
                if name.endswith(".json"):
                    try:
                        document.decode(data)
                    except msgspec.DecodeError:
                        pass
    return {"seconds": time.perf_counter() - t, "cpu_s": round(_cpu() - c, 3), "rows": events}


def m_polars_scan(root: str, cache: str | None) -> dict[str, Any]:
    """Reference: polars ``scan_ndjson`` of the envelope columns (polars' own threads)."""
    import polars as pl

    files = _events_files(root)
    schema = {"created_at": pl.String, "event_id": pl.String, "event_type": pl.String,
              "run_id": pl.String, "sequence": pl.Int64, "task_id": pl.String}

    def scan(paths: list[str]) -> pl.DataFrame:
        return pl.scan_ndjson(paths, schema=schema,
                              ignore_errors=True).select(list(ENVELOPE)).collect()

    # polars refuses a whole scan over one torn or odd file even with ignore_errors: like
    # the msgspec reference, the reference skips such files (found before the clock starts,
    # so the reference only gets faster: the ratio against it is conservative)
    skipped = []
    for i in range(0, len(files), 200):
        try:
            scan(files[i:i + 200])
        except Exception:
            for f in files[i:i + 200]:
                try:
                    scan([f])
                except Exception:
                    skipped.append(f)
    files = [f for f in files if f not in set(skipped)]
    t = time.perf_counter()
    rows = 0
    for i in range(0, len(files), 2000):  # bounded argument lists; same work
        try:
            df = scan(files[i:i + 2000])
        except Exception as exc:  # pragma: no cover - report, do not crash the bench
            return {"seconds": float("nan"), "error": str(exc)[:200]}
        rows += df.height
    return {"seconds": time.perf_counter() - t, "rows": rows, "files_skipped": len(skipped),
            "threads": pl.thread_pool_size()}


TABLES = ("runs_df", "events_df", "quarantine_df", "manifests_df", "tool_calls_df",
          "approvals_df", "model_calls_df", "usage_df", "verifications_df", "states_df",
          "drift_df", "forks_df", "messages_df")


def m_table(name: str, root: str) -> dict[str, Any]:
    import rivumi_analysis

    loader = getattr(rivumi_analysis, name)
    t = time.perf_counter()
    df = loader(root, cache=False)  # the in-memory load (the store has benchmarks/store_bench.py)
    return {"seconds": time.perf_counter() - t, "rows": df.height}


def m_events_df(root: str, cache: str | None) -> dict[str, Any]:
    from rivumi_analysis.tables.events import events_df

    t = time.perf_counter()
    df = events_df(root)
    return {"seconds": time.perf_counter() - t, "rows": df.height}


def m_states_df(root: str, cache: str | None) -> dict[str, Any]:
    from rivumi_analysis.tables.states import states_df

    t = time.perf_counter()
    df = states_df(root)
    return {"seconds": time.perf_counter() - t, "rows": df.height}


def m_states_reduce(root: str, cache: str | None) -> dict[str, Any]:
    """``states_df`` on runs already loaded: the replay reduction alone."""
    from rivumi_analysis.read.snapshot import load_fleet
    from rivumi_analysis.tables.states import states_df

    runs = load_fleet(root).runs
    # load_fleet reads with the collector paused, so the fleet's first full collection (0.5
    # CPU-s per 2,000 runs) is the load's cost, paid wherever it falls: here, untimed, shown.
    c = time.process_time()
    gc.collect()
    gc_s = time.process_time() - c
    t = time.perf_counter()
    df = states_df(runs)
    return {"seconds": time.perf_counter() - t, "rows": df.height,
            "gc_after_load_s": round(gc_s, 3)}


MEASURES = {"baseline": m_baseline, "read_all": m_read_all, "stat_floor": m_stat_floor,
            "api_cold": m_api, "api_no_cache": m_api, "api_warm": m_api_warm,
            "events_df": m_events_df, "states_df": m_states_df,
            "states_reduce": m_states_reduce, "msgspec_envelope": m_msgspec_envelope,
            "polars_scan": m_polars_scan, "audit_floor": m_audit_floor}


def _tree_rss(proc: Any) -> int:
    import psutil

    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def _children_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_child(cmd: list[str], *, env: dict[str, str] | None = None,
              cwd: str | Path = ROOT) -> tuple[float, int, str, float]:
    """Run ``cmd`` (in ``cwd``, with ``env``); return (wall s, peak RSS summed over its
    process tree, stdout, CPU s).

    CPU seconds (user + system of the child and every process it waited for, pool workers
    included) are reported next to wall time: they do not depend on what else the machine runs.
    """
    import psutil

    cpu0 = _children_cpu()
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env)
    pp = psutil.Process(p.pid)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss(pp))
            stop.wait(0.005)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = p.communicate()
    wall = time.perf_counter() - t
    stop.set()
    th.join()
    if p.returncode not in (0, 1, 3):
        raise RuntimeError(f"{cmd} failed ({p.returncode}): {err.decode()[-2000:]}")
    return wall, peak, out.decode(), _children_cpu() - cpu0


def measure(name: str, root: Path, reps: int) -> dict[str, Any]:
    walls, peaks, inner, cpus = [], [], [], []
    for _ in range(reps):
        cache = tempfile.mkdtemp(prefix="rivumi-bench-cache-")
        file_list = None
        try:
            if name == "wc_l":
                files = [os.path.join(dp, f) for dp, _d, fn in os.walk(root) for f in fn]
                file_list = _nul_list(files)
                cmd = ["sh", "-c", 'cat "$0" | xargs -0 wc -l > /dev/null', file_list]
            elif name in ("cli_cold_cache", "cli_no_cache"):
                cmd = [PY, "-m", "rivumi_analysis.cli", "audit", "--format", "json", str(root)]
                cmd += ["--cache-dir", cache] if name == "cli_cold_cache" else ["--no-cache"]
            else:
                arg = cache if name in ("api_cold", "api_warm") else ""
                cmd = [PY, __file__, "_measure", name, str(root), arg]
            wall, peak, out, cpu = run_child(cmd)
            cpus.append(cpu)
            walls.append(wall)
            peaks.append(peak)
            if name not in ("cli_cold_cache", "cli_no_cache", "wc_l"):
                if not out.startswith("{"):
                    raise RuntimeError(f"{name}: the measurement printed no result "
                                       f"(stdout {out[-300:]!r})")
                inner.append(json.loads(out))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
            if file_list:
                os.unlink(file_list)
    secs = [i["seconds"] for i in inner] if inner else walls
    peaks_mb = [p / 2**20 for p in peaks]
    res = {"median_s": statistics.median(secs), "min_s": min(secs), "max_s": max(secs),
           "peak_rss_mb": statistics.median(peaks_mb), "peak_rss_min_mb": min(peaks_mb),
           "peak_rss_max_mb": max(peaks_mb), "wall_incl_startup_s": statistics.median(walls),
           "cpu_incl_startup_s": statistics.median(cpus)}
    if inner:
        res.update({k: v for k, v in inner[-1].items() if k != "seconds"})
    # every rep's figure, under the key of its median: the ratios print their spread from these
    res["reps"] = {"median_s": secs, "wall_incl_startup_s": walls,
                   "cpu_incl_startup_s": cpus, "peak_rss_mb": peaks_mb}
    if inner and all("cpu_s" in i for i in inner):
        cpu_s = [i["cpu_s"] for i in inner]
        res["cpu_s"] = round(statistics.median(cpu_s), 3)  # the median, not the last rep's
        res["reps"]["cpu_s"] = cpu_s
    return res


def _nul_list(files: list[str]) -> str:
    fd, path = tempfile.mkstemp(prefix="rivumi-bench-files-")
    with os.fdopen(fd, "w") as fh:
        fh.write("\0".join(files))
    return path


FLEET_MEASURES = ("wc_l", "read_all", "stat_floor", "audit_floor", "msgspec_envelope",
                  "polars_scan",
                  "baseline", "cli_no_cache", "cli_cold_cache", "api_no_cache", "api_cold",
                  "api_warm", *(f"table:{t}" for t in TABLES), "states_reduce")


def bench_corpus(label: str, root: Path, reps: int, names: tuple[str, ...]) -> dict[str, Any]:
    stats = corpus_stats(root)
    print(f"\n== {label}: {root} ({stats['files']} files, {stats['bytes'] / 1e6:.1f} MB, "
          f"events.jsonl {stats['events_bytes'] / 1e6:.1f} MB; {stats['runs']} run folders, "
          f"largest run {stats['largest_run_bytes'] / 1e6:.2f} MB, largest events.jsonl "
          f"{stats['largest_events_bytes'] / 1e6:.2f} MB)", flush=True)
    print(f"   load average at start: {_loadavg()}", flush=True)
    out: dict[str, Any] = {"corpus": str(root), **stats, "results": {}}
    for name in names:
        r = measure(name, root, reps)
        out["results"][name] = r
        extra = {k: v for k, v in r.items() if k not in (
            "median_s", "min_s", "max_s", "peak_rss_mb", "peak_rss_min_mb", "peak_rss_max_mb",
            "wall_incl_startup_s", "cpu_incl_startup_s", "reps")}
        print(f"  {name:15s} {r['median_s']:8.3f} s  [{r['min_s']:.3f}-{r['max_s']:.3f}]"
              f"  process wall {r['wall_incl_startup_s']:7.3f} s cpu {r['cpu_incl_startup_s']:7.3f} s"
              f"  peak RSS {r['peak_rss_mb']:7.1f} MB [{r['peak_rss_min_mb']:.1f}-"
              f"{r['peak_rss_max_mb']:.1f}]"
              f"  {extra if extra else ''}", flush=True)
    print(f"   load average at end: {_loadavg()}", flush=True)
    out["loadavg_end"] = _loadavg()
    _ratios(out)
    return out


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "?"


def _ratios(out: dict[str, Any]) -> None:
    """Ratios between measurements of the same run (the goals of issues 6 and 10).

    Each ratio a/b is printed as the ratio of the medians and its spread over the reps,
    ``[min(a)/max(b)-max(a)/min(b)]``: the worst and best pairing of any two reps.
    """
    r = out["results"]

    def rec(name: str) -> dict[str, Any] | None:
        # a table is measured as `table:<name>`, or under its own name with --only / single
        return r.get(f"table:{name}") or r.get(name)

    def reps(name: str, key: str = "median_s") -> list[float] | None:
        got = rec(name)
        vals = [v for v in ((got or {}).get("reps") or {}).get(key) or [] if v == v and v]
        return vals or None  # None: not measured, failed (NaN) or zero

    def ratio(label: str, a: list[float], b: list[float], note: str = "") -> str:
        med = statistics.median(a) / statistics.median(b)
        return (f"{label:33s} = {med:6.2f}x  [{min(a) / max(b):.2f}-{max(a) / min(b):.2f}]"
                f"{'  ' + note if note else ''}")

    lines = ["(each ratio: of the medians, then [min(a)/max(b)-max(a)/min(b)] over the reps)"]
    mb = out["bytes"] / 2**20
    base, cli, wc = reps("baseline"), reps("cli_no_cache", "wall_incl_startup_s"), reps("wc_l")
    if base and cli:
        lines.append(ratio("baseline / cli audit (--no-cache)", base, cli, "(goal >= 4x)"))
    floor = reps("audit_floor")
    if base and floor:
        cores = os.cpu_count() or 1
        lines.append(ratio(f"ceiling: baseline / (audit floor / {cores} cores)", base,
                           [f / cores for f in floor],
                           "(no Python audit passes this: it ignores start-up, pool, checks)"))
    if cli and wc:
        lines.append(ratio("cli audit (--no-cache) / wc -l", cli, wc))
    bcpu, ccpu = reps("baseline", "cpu_incl_startup_s"), reps("cli_no_cache", "cpu_incl_startup_s")
    if bcpu and ccpu:
        lines.append(ratio("baseline / cli audit, CPU seconds", bcpu, ccpu,
                           "(process CPU incl. start-up; insensitive to other load)"))
    b_cpu, a_cpu = reps("baseline", "cpu_s"), reps("api_no_cache", "cpu_s")
    if b_cpu and a_cpu:
        lines.append(ratio("baseline / api audit (no cache), CPU of the timed sections",
                           b_cpu, a_cpu))
    w_cpu, f_cpu = reps("api_warm", "cpu_s"), reps("stat_floor", "cpu_s")
    if w_cpu and f_cpu:
        lines.append(ratio("api warm / stat floor, CPU of the timed sections", w_cpu, f_cpu,
                           "(goal <= 2x; load-insensitive)"))
    cold, warm, sf = reps("api_cold"), reps("api_warm"), reps("stat_floor")
    if cold and warm:
        lines.append(ratio("api cold / api warm", cold, warm))
    if warm and sf:
        lines.append(ratio("api warm / stat floor", warm, sf, "(goal <= 2x)"))
    ms, ps, ev = reps("msgspec_envelope"), reps("polars_scan"), reps("events_df")
    if ev and ps:
        lines.append(ratio("events_df / polars scan_ndjson", ev, ps, "(goal <= 2x)"))
    if ev and ms:
        lines.append(ratio("events_df / msgspec envelope", ev, ms))
    if ms and ps:
        lines.append(ratio("polars scan / msgspec envelope", ps, ms))
    if base and ms:
        lines.append(ratio("baseline / msgspec envelope", base, ms,
                           "(what decoding alone costs next to the runner's validation)"))
    for name, label, goal in (("states_df", "states_df events/s", "300,000"),
                              ("states_reduce", "states_df events/s, loaded runs", "1,000,000")):
        secs, rows = reps(name), (rec(name) or {}).get("rows")
        if secs and rows:  # events/s: rows / time, so the slowest rep gives the low end
            lines.append(f"{label:33s} = {rows / statistics.median(secs):,.0f}  "
                         f"[{rows / max(secs):,.0f}-{rows / min(secs):,.0f}]  (goal >= {goal})")
    ev_rss = reps("events_df", "peak_rss_mb")
    if ev_rss:
        lines.append(f"{'events_df peak RSS / corpus bytes':33s} = "
                     f"{statistics.median(ev_rss) / mb:6.2f}x  "
                     f"[{min(ev_rss) / mb:.2f}-{max(ev_rss) / mb:.2f}]  (goal <= 1.2x)")
    au_rss = reps("cli_no_cache", "peak_rss_mb")
    if au_rss:
        lines.append(f"{'cli audit (--no-cache) peak RSS':33s} = "
                     f"{statistics.median(au_rss):.1f} MB  [{min(au_rss):.1f}-{max(au_rss):.1f}]"
                     f"; largest run {out['largest_run_bytes'] / 2**20:.2f} MB, largest "
                     f"events.jsonl {out['largest_events_bytes'] / 2**20:.2f} MB, corpus "
                     f"{mb:.1f} MB (all in MB of 2**20 bytes, as RSS)  (goal: bounded by the "
                     "largest run; compare fleet sizes below)")
    tables = {k.split(":", 1)[1]: v for k, v in r.items() if k.startswith("table:")}
    if tables and ev:
        slowest = max(tables.items(), key=lambda kv: kv[1]["median_s"])[0]
        sl = reps(slowest)
        if sl:
            lines.append(ratio(f"slowest table: {slowest} {statistics.median(sl):.2f} s / "
                               "events_df", sl, ev))
    out["ratios"] = lines
    for ln in lines:
        print("  " + ln)


def _audit_rss_by_fleet(results: dict[str, Any]) -> None:
    """The CLI audit's peak RSS across the corpora of one invocation: growth with the fleet."""
    rows = sorted(((res["runs"], res["results"]["cli_no_cache"]) for res in results.values()
                   if "cli_no_cache" in res.get("results", {})), key=lambda row: row[0])
    if len(rows) < 2:
        return
    (n0, r0), (n1, r1) = rows[0], rows[-1]
    parts = ", ".join(f"{n} runs {r['peak_rss_mb']:.1f} MB [{r['peak_rss_min_mb']:.1f}-"
                      f"{r['peak_rss_max_mb']:.1f}]" for n, r in rows)
    print(f"\naudit peak RSS by fleet size (cli --no-cache, median [min-max]): {parts}; "
          f"{n1 / max(n0, 1):.1f}x the runs -> {r1['peak_rss_mb'] / r0['peak_rss_mb']:.2f}x "
          "the RSS (nothing asserted)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_measure":
        name, root, cache = argv[1], argv[2], (argv[3] if len(argv) > 3 else "") or None
        if name == "api_no_cache":
            cache = None
        if name.startswith("table:"):
            print(json.dumps(m_table(name.split(":", 1)[1], root)))
        else:
            print(json.dumps(MEASURES[name](root, cache)))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=None,
                    help="comma list of run counts: 2000 (~200 MB), 10000 (~1 GB), single")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "rivumi-bench"),
                    help="where corpora are generated and reused")
    ap.add_argument("--only", default="", help="comma list of measurements (default all)")
    ap.add_argument("--json", default="", help="also write the results here")
    ap.add_argument("--corpus", default="",
                    help="comma list of existing corpus folders to measure as they are "
                         "(e.g. /tmp/corpus10k from `python -m rivumi_analysis.synth.corpus`); "
                         "never regenerated or modified")
    args = ap.parse_args(argv)
    import platform

    import psutil

    print(f"machine: {platform.platform()}, {psutil.cpu_count()} cores, "
          f"{psutil.virtual_memory().total / 2**30:.1f} GiB RAM, Python {platform.python_version()}")
    print(f"corpus generator: {'rivumi_analysis.synth.corpus' if _have_generator() else 'fixture copies'}")
    only = tuple(x for x in args.only.split(",") if x)
    only = tuple(f"table:{x}" if x in TABLES else x for x in only)
    results = {}
    for path in [c.strip() for c in args.corpus.split(",") if c.strip()]:
        results[path] = bench_corpus(path, Path(path), args.reps, only or FLEET_MEASURES)
    sizes = args.sizes if args.sizes is not None else ("" if args.corpus else "2000")
    for size in [s.strip() for s in sizes.split(",") if s.strip()]:
        work = Path(args.work)
        if size == "single":
            root = make_corpus(work / "single-200mb", 1, 0, single_log_mb=200)
            names = only or ("events_df", "states_df", "states_reduce")
        else:
            n = int(size)
            root = make_corpus(work / f"runs-{n}", n, n // 10)
            names = only or FLEET_MEASURES
        results[size] = bench_corpus(size, root, args.reps, names)
    _audit_rss_by_fleet(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
