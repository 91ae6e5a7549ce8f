"""The m4 profile re-creates the spec's example run byte for byte from its scenario script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rivumi_analysis.synth.scenarios import example_script, run_script
from rivumi_analysis.synth.writer import action_fingerprint, dumps_compact

_ID = "a66038f97f204cb3aaa96339f195c37e"
# shared/ sits beside the clone (locally and in CI); the lead's fixture copy is the fallback.
EXAMPLE = Path(__file__).resolve().parents[2] / "shared/spec/examples" / _ID
if not EXAMPLE.is_dir():
    EXAMPLE = Path(__file__).resolve().parent / "fixtures/example" / _ID

pytestmark = pytest.mark.skipif(not EXAMPLE.is_dir(), reason="spec example run not available")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(run_script(example_script(), str(tmp_path_factory.mktemp("ex"))))


@pytest.mark.parametrize("name", ["events.jsonl", "session.json", "result.json", "changes.patch"])
def test_example_bytes_reproduced(written: Path, name: str) -> None:
    assert (written / name).read_bytes() == (EXAMPLE / name).read_bytes()


def test_example_reserialises_to_itself() -> None:
    raw = (EXAMPLE / "session.json").read_bytes()
    assert dumps_compact(json.loads(raw)).encode() == raw


def test_manifest_fields_come_from_writer_state(written: Path) -> None:
    m = json.loads((written / "session.json").read_text("utf-8"))
    last = m["messages"][-3]["tool_calls"][0]
    assert m["last_action_fingerprint"] == action_fingerprint(last["name"], last["arguments"])
    assert m["repeat_count"] == 1 and m["step"] == 7 and m["terminal"] is True
    assert "total_tokens" not in m["usage"]
    assert (written / ".writer.lock").read_text() == f"pid=4242 token={m['active_writer_token']}\n"
    ckpt = json.loads((written / "checkpoint.json").read_text("utf-8"))
    assert ckpt["usage"]["total_tokens"] == 7583
    assert ckpt["metadata"] == {"terminal_reason": "verified"}


def test_example_regenerates_identically(tmp_path: Path, written: Path) -> None:
    again = Path(run_script(example_script(), str(tmp_path)))
    for f in sorted(p.name for p in written.iterdir()):
        assert (again / f).read_bytes() == (written / f).read_bytes(), f
