"""Runs whose every text field holds hostile strings, written by the synthetic writer
(``rivumi_analysis.synth``: the runner's write protocol).

Each payload, if it ever ran, would set an attribute on ``<html>`` (``data-pwned``), so a
test can look for it in the live DOM. The strings: script elements, event handlers,
``</script>`` and ``-->`` breakouts, ``javascript:`` and remote URLs, bidi overrides, a
line of 60,000 characters and a lone surrogate. The writer encodes text as raw UTF-8, which
cannot hold a lone surrogate; the runner's JSON escapes one as ``\\ud800``, so the helper
writes a placeholder and turns it into that escape afterwards (the files stay valid JSON).
"""

from __future__ import annotations

from pathlib import Path

from rivumi_analysis.synth.scenarios import Build, run_script

SET = "document.documentElement.setAttribute('data-pwned','{}')"
PAYLOADS = (
    f"<script>{SET.format('script')}</script>",
    f"<img src=x onerror=\"{SET.format('img')}\">",
    f"</script><script>{SET.format('close')}</script>",
    f"--><svg onload=\"{SET.format('svg')}\"></svg><!--",
    f"<a href=\"javascript:{SET.format('href')}\">click me</a> javascript:{SET.format('url')}",
    "https://evil.example/steal?c=1 <iframe src=\"https://evil.example/\"></iframe>",
    "\"' onmouseover=\"" + SET.format("attr") + "\" x='",
    "bidi: \u202eevil\u202c and \u2066isolate\u2069 end",
    "lone @@LONE@@ surrogate",
)
HOSTILE = " | ".join(PAYLOADS)
"""One string holding every payload (what each text field gets)."""
LONG = "L" * 60_000
LONE = "@@LONE@@"
VISIBLE_PARTS = ("<script>document.documentElement.setAttribute('data-pwned','script')",
                 "<img src=x onerror=", "</script><script>", "--><svg onload=",
                 "javascript:document.documentElement", "https://evil.example/steal")
"""Pieces of :data:`HOSTILE` that must appear on a page as text."""


def hostile_script(seed: int = 0, *, continued: bool = True) -> dict:
    """A native run: a resume, tool calls (ok, failed, denied), a final check, a wind-down,
    a run error event, and (``continued``) a second turn, with :data:`HOSTILE` in every
    text field the runner writes."""
    b = Build("hostile", seed)
    b.request["instruction"] = HOSTILE
    b.request["verification"][0]["name"] = HOSTILE
    b.check_name = HOSTILE
    b.ops[1] = {"op": "conversation", "system": HOSTILE, "user": HOSTILE + "\n" + LONG}
    [c] = b.model([("read_file", {"path": HOSTILE})], content=HOSTILE)
    b.tool(c, content=HOSTILE + "\n" + LONG)
    [c] = b.model([("shell", {"command": HOSTILE})], content=HOSTILE)
    b.tool(c, ok=False, content=HOSTILE, error=HOSTILE)
    b.add("crash")
    b.add("resume", downtime=42.0)
    [c] = b.model([("replace_text", {"path": HOSTILE, "old_text": HOSTILE,
                                     "new_text": HOSTILE})], content=HOSTILE)
    b.tool(c, decision="deny")
    [c] = b.model([("replace_text", {"path": HOSTILE, "old_text": HOSTILE,
                                     "new_text": HOSTILE})], content=HOSTILE)
    b.tool(c, content=HOSTILE)
    b.changed = True
    b.add("event", event_type="run.error", data={"error_type": HOSTILE, "error": HOSTILE})
    b.add("event", event_type="hook.denied", data={"hook_event": HOSTILE, "decision": "deny",
                                                   "reason": HOSTILE, "hook": HOSTILE})
    b.final(HOSTILE)
    b.verify(True, output=HOSTILE)
    b.finish("completed", "verified")
    if continued:
        b.add("continue", instruction=HOSTILE, idle=120.0)
        [c] = b.model([("read_file", {"path": HOSTILE})], content=HOSTILE)
        b.tool(c, content=HOSTILE)
        b.final(HOSTILE)
        b.verify(False, output=HOSTILE)
        b.finish("failed", "verification_failed", error=HOSTILE)
    b.close()
    return b.script()


def write_hostile_runs(out: Path) -> list[Path]:
    """Write the hostile runs into ``out`` (created); returns their run directories. The
    first run also gets a last line that is not JSON (a quarantined line holding the
    payloads)."""
    out.mkdir(parents=True, exist_ok=True)
    runs = [Path(run_script(hostile_script(0), str(out))),
            Path(run_script(hostile_script(1, continued=False), str(out)))]
    for run in runs:
        for f in run.iterdir():
            if f.is_file() and f.suffix in (".json", ".jsonl"):
                f.write_bytes(f.read_bytes().replace(LONE.encode(), b"\\ud800"))
    with open(runs[0] / "events.jsonl", "ab") as fh:
        fh.write(("not json: " + HOSTILE.replace(LONE, "\udc80") + "\n")
                 .encode("utf-8", "surrogateescape"))
    return runs
