"""Crash cuts from real kills: run the writer in a child process and SIGKILL it at a cut point.

The child (``python -m rivumi_analysis.synth.crash_child ...``, kept in its own module so this one
never imports the scenarios that import it) runs a scenario script with a hook
on every protocol point of the writer. When the hook reaches the requested cut it writes one
line (``CUT <run_dir>``) to its stdout pipe and blocks reading stdin; the parent then sends
``SIGKILL``. The child never writes anything after signalling, so the cut is exact. If the
parent goes away, stdin reaches EOF and the child exits at once without writing more.

Cut specs are ``<point>[@<selector>]``:

* points: ``manifest_saved`` (after the session.json save of an emit, before its append),
  ``appended`` (after an event line was appended), ``waiting_approval`` (an approval prompt
  is open), ``temp_written:session.json`` (inside an atomic write: temp file written, not
  renamed), ``torn`` (fault injection: the first half of a line was written);
* selector: a sequence number (``@5``), or an event type with an optional 1-based
  occurrence (``@tool.started``, ``@tool.completed#2``); no selector means the first.

>>> CutSpec.parse("appended@tool.started#2")
CutSpec(point='appended', sequence=None, event_type='tool.started', occurrence=2)
"""

from __future__ import annotations

import argparse
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["CrashHarnessError", "CutResult", "CutSpec", "cut_run", "describe_run_files"]

# the folder holding the rivumi_analysis package (this file is rivumi_analysis/synth/crash.py)
_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass(frozen=True)
class CutSpec:
    """A parsed cut point.

    Attributes:
        point: hook point name.
        sequence: event sequence to stop at, or None.
        event_type: event type to stop at, or None.
        occurrence: which matching occurrence (1-based).
    """

    point: str
    sequence: int | None = None
    event_type: str | None = None
    occurrence: int = 1

    @classmethod
    def parse(cls, text: str) -> CutSpec:
        """Parse ``point[@selector]``."""
        point, _, sel = text.partition("@")
        if not sel:
            return cls(point)
        if sel.isdigit():
            return cls(point, sequence=int(sel))
        etype, _, occ = sel.partition("#")
        return cls(point, event_type=etype, occurrence=int(occ) if occ else 1)

    def matcher(self) -> Any:
        """``f(point, seq, event_type) -> bool``, true exactly once: at this cut (a writer
        hook calls it at every protocol point, in order)."""
        seen = 0

        def at_cut(point: str, seq: int | None, event_type: str | None) -> bool:
            nonlocal seen
            if point != self.point or (self.sequence is not None and seq != self.sequence) or (
                    self.event_type is not None and event_type != self.event_type):
                return False
            seen += 1
            return seen == self.occurrence

        return at_cut


@dataclass(frozen=True)
class CutResult:
    """Where a killed child left its run.

    Attributes:
        run_dir: the killed run's directory.
        returncode: the child's exit status (``-SIGKILL`` when killed at the cut).
    """

    run_dir: str
    returncode: int


class CrashHarnessError(RuntimeError):
    """The child did not reach its cut point in time (or ended without reaching it)."""


def describe_run_files(root: str) -> str:
    """A listing of every file under ``root`` with sizes and heads (for stalled tests)."""
    out = []
    for dirpath, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            p = os.path.join(dirpath, name)
            try:
                with open(p, "rb") as fh:
                    head = fh.read(300)
                size = os.path.getsize(p)
            except OSError as exc:
                out.append(f"{p}: <{exc}>")
                continue
            out.append(f"{p} ({size} bytes): {head!r}")
    return "\n".join(out) or f"(no files under {root})"


# --------------------------------------------------------------------------- parent side

def cut_run(scenario: str, seed: int, cut: str, out_root: str, *,
            timeout: float = 30.0) -> CutResult:
    """Run ``scenario`` in a child process and SIGKILL it at ``cut``.

    Args:
        scenario: catalog name (or ``example_m4``).
        seed: scenario seed.
        cut: cut spec (see module docstring).
        out_root: folder the run directory is created in.
        timeout: seconds to wait for the handshake (and again for the exit).

    Returns:
        The killed run's directory and the child's return code.

    Raises:
        CrashHarnessError: the child ended or stalled before the cut; the message lists the
            run's files and the child's stderr.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = _PKG_PARENT + (os.pathsep + env["PYTHONPATH"]
                                       if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "rivumi_analysis.synth.crash_child", "--scenario", scenario,
           "--seed", str(seed), "--out", out_root, "--cut", cut]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    buf = b""
    try:
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(timeout=left):
                raise CrashHarnessError(
                    f"child stalled before cut {cut!r} ({scenario} seed {seed}):\n"
                    + describe_run_files(out_root))
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
        line = buf.decode(errors="replace").strip()
        if not line.startswith("CUT "):
            proc.wait(timeout=timeout)
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise CrashHarnessError(
                f"child ended without reaching cut {cut!r} ({scenario} seed {seed}): {line!r}\n"
                f"stderr:\n{err}\nfiles:\n" + describe_run_files(out_root))
        os.kill(proc.pid, signal.SIGKILL)
        rc = proc.wait(timeout=timeout)
        return CutResult(run_dir=line[4:], returncode=rc)
    finally:
        sel.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=timeout)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def main(argv: list[str] | None = None) -> int:
    """CLI: ``cut`` (run one cut and print the run directory)."""
    ap = argparse.ArgumentParser(prog="python -m rivumi_analysis.synth.crash")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("cut")
    p.add_argument("--scenario", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--cut", required=True)
    args: Any = ap.parse_args(argv)
    res = cut_run(args.scenario, args.seed, args.cut, args.out)
    print(res.run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
