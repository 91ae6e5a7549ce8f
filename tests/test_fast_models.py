"""The msgspec manifest/request twins equal the pydantic models (the oracle) where they answer.

``read.fast_models.manifest`` / ``.request`` either decline (``None``: the verdict asks
pydantic, which also words the error) or accept; an acceptance must be pydantic's, with the
values the verdict reads. Proven on every sample document (where the twins must also accept
what the runner wrote, or they would not be a fast path) and on generated mutations of rich
documents: wrong types, missing and extra keys, out-of-range values, NaN/Infinity, bools as
numbers, padded/blank/NUL strings, odd timestamps. End to end, the audit record of a run
with a mutated document is the same with and without the twins.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import uuid
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rivumi_analysis.read import fast_models as fm
from rivumi_analysis.read import models as pm
from rivumi_analysis.read.io import read_file
from rivumi_analysis.read.snapshot import _parse_json_doc
from tests.conftest import EXAMPLE_DIR, SAMPLE_RUNS, example_request

RICH_MANIFESTS = [  # pending action, model_usage records, all three conversation items
    SAMPLE_RUNS / "crashes" / "27707e7d35fc40c48e737711278f41a4" / "session.json",
    SAMPLE_RUNS / "subagents" / "ddb182ab8a3a4c12b27888983dbfd2dd" / "subagents" / "explorer-2"
    / "session.json",
    EXAMPLE_DIR / "session.json",
]


def _pydantic(model: Any, doc: Any) -> Any:
    try:
        return model.model_validate(doc)
    except Exception:
        return None


def _manifest_view(m: Any) -> tuple:
    """What the verdict reads from a validated manifest."""
    pend = m.pending_action
    return (m.run_id, m.task_id, m.base_sha, m.last_event_sequence, m.terminal,
            m.active_writer_token, m.active_wall_time_seconds, m.usage.model_dump(),
            [r.usage.model_dump() for r in m.model_usage],
            None if pend is None else (pend.request_id, pend.action_id))


def check_manifest(doc: Any) -> bool:
    """Assert the twin's answer is pydantic's; return whether the twin accepted."""
    fast = fm.manifest(doc) if isinstance(doc, dict) else None
    if fast is None:
        return False
    slow = _pydantic(pm.SessionManifest, doc)
    assert slow is not None, f"the twin accepts what pydantic refuses: {doc!r:.300}"
    assert _manifest_view(fast) == _manifest_view(slow)
    return True


def check_request(doc: Any) -> bool:
    fast = fm.request(doc) if isinstance(doc, dict) else None
    if fast is None:
        return False
    slow = _pydantic(pm.TaskContract, doc)
    assert slow is not None, f"the twin accepts what pydantic refuses: {doc!r:.300}"
    assert (fast.task_id, fast.base_sha, fast.limits.wall_time_seconds) == (
        slow.task_id, slow.base_sha, slow.limits.wall_time_seconds)
    return True


def _docs(name: str) -> list[Any]:
    out = []
    for root in (SAMPLE_RUNS, EXAMPLE_DIR.parent.parent):
        for path in sorted(root.rglob(name)):
            doc, _err = _parse_json_doc(read_file(str(path)))
            out.append(doc)
    return out


def test_every_sample_document() -> None:
    for name, check, model in (("session.json", check_manifest, pm.SessionManifest),
                               ("request.json", check_request, pm.TaskContract)):
        for doc in _docs(name):  # fixtures included: odd documents on purpose
            check(doc)
        # every document of the sample runs that pydantic accepts is on the fast path
        runner_written = [_parse_json_doc(read_file(str(path)))[0]
                          for path in sorted(SAMPLE_RUNS.rglob(name))]
        accepted = [d for d in runner_written if _pydantic(model, d) is not None]
        assert len(accepted) > 80
        assert all(check(d) for d in accepted), name


# --- generated mutations ------------------------------------------------------------------------

_VALUES: list[Any] = [
    None, True, False, 0, 1, -1, -2, 5.0, 0.5, -0.0, 2**63, 10**30, math.nan, math.inf,
    -math.inf, "", " ", "5", "x", " x", "x ", "x\n", "a\x00b", "é" * 129, [], {}, ["x"],
    {"k": 1}, "2026-08-20T21:02:26.451322Z", "2026-08-20T21:02:26Z", "2026-08-20T21:02:26",
    "2026-08-20T24:00:00Z", "2026-02-30T00:00:00Z", "2026-08-20T21:02:26.1234567Z",
    "2026-08-20T21:02:26+00:00", "0000-01-01T00:00:00Z", "2024-02-29T00:00:00Z",
    "474b69574c22b02f99805f9a91b53fde9a0cb068\n", "474B69574C22B02F99805F9A91B53FDE9A0CB068",
    "USD", "assistant", "user", "injected_context", "read", "final_verification", "deny",
]


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key/index path of ``obj`` (first two items of each list)."""
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:2]):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple, value: Any) -> Any:
    """``doc`` with the value at ``path`` replaced (or deleted); containers along the path are
    copied, the rest is shared (nothing validates by mutating)."""
    top = copy.copy(doc)
    target = top
    for p in path[:-1]:
        target[p] = copy.copy(target[p])
        target = target[p]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return top


_DELETE = object()


def _mutations(doc: dict[str, Any]) -> list[Any]:
    out = []
    for path in _paths(doc):
        for value in (*_VALUES, _DELETE):
            if value is _DELETE and isinstance(path[-1], int):
                continue
            out.append(_set(doc, path, value))
    for path in [p for p in _paths(doc) if isinstance(_get(doc, p), dict)]:
        out.append(_set(doc, path, {**_get(doc, path), "unexpected_key": 1}))
    out.append({**doc, "unexpected_key": 1})
    return out


def _get(doc: Any, path: tuple) -> Any:
    for p in path:
        doc = doc[p]
    return doc


@pytest.mark.parametrize("path", RICH_MANIFESTS, ids=lambda p: p.parent.name)
def test_manifest_mutations(path: Path) -> None:
    doc = json.loads(path.read_text("utf-8"))
    assert check_manifest(doc)
    muts = _mutations(doc)
    taken = sum(check_manifest(m) for m in muts)
    assert len(muts) > 2000 and 0 < taken < len(muts)


def test_request_mutations() -> None:
    doc = example_request()
    doc["enabled_skills"] = ["lint", "py.test-2"]
    doc["attachments"] = [{"name": "a"}]
    doc["limits"]["max_total_tokens"] = 1000
    assert check_request(doc)
    muts = _mutations(doc)
    muts += [{**doc, "allowed_paths": p} for p in (
        ["a", "a"], ["a", " a"], ["/a"], ["a/../b"], ["a\\b"], [""], ["a\x00"], [])]
    muts += [{**doc, "enabled_skills": s} for s in (
        ["a", "a"], [" a"], ["-a"], ["a" * 64], ["a" * 65], ["a\n"])]
    taken = sum(check_request(m) for m in muts)
    assert 0 < taken < len(muts)


def test_timestamp_pattern_is_fromisoformat_on_the_runner_shape() -> None:
    """``_TS`` accepts exactly the real dates and times ``datetime.fromisoformat`` accepts."""

    def iso_ok(text: str) -> bool:
        try:
            datetime.fromisoformat(text)
        except ValueError:
            return False
        return True

    for year in ("0000", "0001", "0004", "0100", "0400", "1900", "2000", "2023", "2024",
                 "2100", "9999"):
        for month in range(14):
            for day in range(33):
                ts = f"{year}-{month:02d}-{day:02d}T12:00:00.5Z"
                assert (fm._TS.fullmatch(ts) is not None) == iso_ok(ts), ts
    for h in range(26):
        for m in (0, 59, 60):
            for s in (0, 59, 60, 61):
                ts = f"2026-08-20T{h:02d}:{m:02d}:{s:02d}Z"
                assert (fm._TS.fullmatch(ts) is not None) == iso_ok(ts), ts


@pytest.mark.differential  # a fleet of mutated runs audited twice
def test_records_equal_with_and_without_the_twins(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: verdict, reasons (codes) and messages are pydantic's."""
    from rivumi_analysis.audit import audit_run

    run = tmp_path / EXAMPLE_DIR.name
    shutil.copytree(EXAMPLE_DIR, run)
    (run / "request.json").write_text(json.dumps(example_request()))
    doc = json.loads((EXAMPLE_DIR / "session.json").read_text("utf-8"))
    req = example_request()
    # every mutation (4,705; until session 9 a sample of 278, 1/31 and 1/5)
    cases = [("session.json", m) for m in _mutations(doc)]
    cases += [("request.json", m) for m in _mutations(req)]
    assert len(cases) > 4500
    # a request without task_id gets pydantic's default, a fresh uuid4, on both sides (the
    # twin declines it): fixed, so the messages that quote it compare equal
    monkeypatch.setattr(pm, "uuid", SimpleNamespace(uuid4=lambda: uuid.UUID(int=0)))
    codes = set()
    for name, content in cases:
        (run / name).write_text(json.dumps(content))
        with_twins = audit_run(str(run))
        with monkeypatch.context() as mp:
            mp.setattr(fm, "manifest", lambda d: None)
            mp.setattr(fm, "request", lambda d: None)
            oracle = audit_run(str(run))
        assert with_twins == oracle
        codes.update(with_twins["reasons"])
        (run / name).write_text(json.dumps(doc if name == "session.json" else req))
    assert {"manifest_schema", "request_invalid", "terminal"} <= codes
