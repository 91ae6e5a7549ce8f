"""A lone surrogate escape in a JSON document's run id never crashes a table or the audit.

``json.loads`` keeps ``"\\ud800"`` as a lone surrogate, which neither Arrow nor UTF-8 output
can hold: the run's display id shows U+FFFD instead (as event rows do), and the verdict is
still decided on the document as the runner reads it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rivumi_analysis as ra

EXAMPLE = next(p for p in (Path(__file__).parent / "fixtures" / "example").iterdir()
               if p.is_dir())
TABLES = ("runs_df", "events_df", "quarantine_df", "manifests_df", "tool_calls_df",
          "states_df", "drift_df", "forks_df", "messages_df")


def _fleet(tmp_path: Path, doc: str) -> Path:
    run = tmp_path / "fleet" / "r1"
    shutil.copytree(EXAMPLE, run)
    if doc == "checkpoint.json":  # the checkpoint's id is the display id only without both
        (run / "session.json").unlink()
        (run / "events.jsonl").unlink()
    (run / doc).write_bytes(b'{"run_id":"\\ud800"}')
    return run.parent


@pytest.mark.parametrize("doc", ["session.json", "checkpoint.json"])
def test_every_table_loads_and_shows_the_id_as_replacement_char(tmp_path: Path, doc: str) -> None:
    fleet = _fleet(tmp_path, doc)
    for name in TABLES:  # before the fix: UnicodeEncodeError from Arrow
        getattr(ra, name)(fleet, cache=False)
        getattr(ra, name)(fleet, store_dir=tmp_path / "store")
    assert ra.runs_df(fleet, cache=False)["run_id"].to_list() == ["\ufffd"]
    if doc == "session.json":
        assert ra.events_df(fleet, cache=False).height > 0


def test_audit_json_is_utf8_with_the_replacement_char(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, "session.json")
    proc = subprocess.run([sys.executable, "-m", "rivumi_analysis.cli", "audit", str(fleet),
                           "--no-cache", "--format", "json"],
                          capture_output=True, timeout=120)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    record = json.loads(proc.stdout.decode("utf-8"))["runs"][0]
    assert record["run_id"] == "\ufffd"
    assert record["verdict"] == "corrupt" and "manifest_schema" in record["reasons"]


def test_a_valid_manifest_with_a_lone_surrogate_value_loads_every_table(tmp_path: Path) -> None:
    run = tmp_path / "fleet" / "r1"
    shutil.copytree(EXAMPLE, run)
    doc = json.loads((run / "session.json").read_text())
    doc["provider_name"] = "\ud800"  # json.dumps writes the escape, json.loads keeps it
    (run / "session.json").write_text(json.dumps(doc))
    for name in TABLES:  # before the fix: UnicodeEncodeError from Arrow in runs/manifests
        getattr(ra, name)(run.parent, cache=False)
    assert ra.manifests_df(run.parent, cache=False)["provider_name"].to_list() == ["\ufffd"]
