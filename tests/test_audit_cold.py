"""The cold audit's reading shortcuts give the snapshot the plain reading gives."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rivumi_analysis.audit as A
import rivumi_analysis.read.incremental as C
import rivumi_analysis.read.snapshot as S
from rivumi_analysis.fleet_audit import audit
from tests.conftest import SAMPLE_RUNS, examples

EXAMPLE = Path(__file__).parent / "fixtures" / "example" / "a66038f97f204cb3aaa96339f195c37e"


def test_files_absent_from_the_listing_are_not_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    """``read_run(clean=True)`` opens only what the folder lists; every file status (and so
    every record) is the plain reading's, on every sample run."""
    opened: list[str] = []
    real = S.read_file

    def counting(path: str, *a: object, **k: object) -> S.FileRead:
        opened.append(os.path.basename(path))
        return real(path, *a, **k)  # type: ignore[arg-type]

    from rivumi_analysis.read.discovery import discover

    monkeypatch.setattr(S, "_LOCAL_IO", (counting, *S._LOCAL_IO[1:]))
    monkeypatch.setattr(S, "read_file", counting)
    runs = discover(str(SAMPLE_RUNS)).runs
    skipped = 0
    for loc in runs:
        plain = S.read_run(loc.run_dir, is_subagent=loc.is_subagent,
                           parent_run_dir=loc.parent_run_dir)
        opened.clear()
        clean = S.read_run(loc.run_dir, is_subagent=loc.is_subagent,
                           parent_run_dir=loc.parent_run_dir, clean=True)
        assert {k: v.status for k, v in clean.files.items()} == {
            k: v.status for k, v in plain.files.items()}
        assert clean.listing == plain.listing
        assert (clean.writer_lock_token, clean.writer_active) == (
            plain.writer_lock_token, plain.writer_active)
        listed = set(clean.listing)
        assert not [n for n in opened if n not in listed and n in S._RUN_FILES] or not listed
        skipped += len(S._RUN_FILES - listed) if listed else 0
    assert skipped > len(runs)  # backend-result.json at least, nearly everywhere


def test_held_locks_given_by_the_caller_are_used(tmp_path: Path) -> None:
    run = tmp_path / EXAMPLE.name
    shutil.copytree(EXAMPLE, run)
    (run / ".writer.lock").write_text("token=abc\n")
    st = os.lstat(run / ".writer.lock")
    key = S._lock_key(st.st_dev, st.st_ino)
    held = S.read_run(str(run), clean=True, held_locks=frozenset({key}))
    free = S.read_run(str(run), clean=True, held_locks=frozenset())
    assert held.writer_active and not free.writer_active
    assert held.writer_lock_token == free.writer_lock_token == "abc"


def test_proc_locks_read_once_per_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        shutil.copytree(EXAMPLE, tmp_path / f"r{i}")
    reads = []
    real = C.proc_locked_keys

    def counting() -> frozenset[str]:
        reads.append(1)
        return real()

    monkeypatch.setattr(C, "proc_locked_keys", counting)
    monkeypatch.setattr(A, "LOCKS_BATCH", 2)
    recs = audit(str(tmp_path), jobs=1, cache=False).runs
    assert len(recs) == 5 and len(reads) == 3  # runs 0-1, 2-3, 4


def _docs(name: str) -> list[bytes]:
    found = sorted(SAMPLE_RUNS.rglob(name))
    return [p.read_bytes() for p in found if p.is_file() and not p.is_symlink()]


def _mutations(doc: bytes, keys: tuple[str, ...]) -> list[bytes]:
    """Documents that only just differ from ``doc``: encodings, numbers, nesting, repeats."""
    out = [doc, b" " + doc + b"\n", b"\xef\xbb\xbf" + doc, doc[:-1], doc + b"x", doc[:len(doc) // 2],
           b"", b"[]", b"[1]", b'"x"', b"1", b"null", b"{}", b"{", doc.replace(b"{", b"[", 1)]
    body = doc.rstrip()[1:-1] if doc.strip().startswith(b"{") else b""
    sep = b"," if body.strip() else b""
    extras = [b'"zz":"\xff"', b'"zz":"\xc3\xa9"', b'"zz":"\xed\xa0\x80"', b'"zz":"\\ud800"',
              b'"zz":NaN', b'"zz":Infinity', b'"zz":1e400', b'"zz":-1e400', b'"zz":' + b"9" * 5000,
              b'"zz":' + b"[" * 1000 + b"]" * 1000, b'"zz":' + b"[" * 900 + b"]" * 900,
              b'"zz":"a\x01"', b'"zz":"\\q"', b'"zz":01', b'"zz":tru', b'"zz":{"a":1,"a":2}',
              b'"zz":"\xe2\x80\xa8"', b'"zz":12345678901234567890123']
    for extra in extras:
        out.append(b"{" + body + sep + extra + b"}")
        out.append(b"{" + extra + sep + body + b"}")
    values = [b'"r1"', b"false", b"true", b"null", b"0", b"1.5", b"1e400", b"NaN", b'"\\ud800"',
              b'"\xc3\xa9"', b'"\xff"', b"[1,{}]", b'{"a":"b"}', b'"' + b"x" * 3 + b'"']
    for key in keys:
        for v in values:
            kv = b'"' + key.encode() + b'":' + v
            out.append(b"{" + body + sep + kv + b"}")  # a repeat of the key, last one wins
            out.append(b"{" + kv + sep + body + b"}")
            out.append(b"{" + kv + b"}")
    return out


@pytest.mark.parametrize("name", ["checkpoint.json", "result.json"])
def test_audit_doc_is_the_full_parse_reduced(name: str) -> None:
    """The typed partial decode equals the runner-faithful parse, reduced to the keys the
    audit reads, on every sample document and its near misses."""
    keys = S._AUDIT_DOCS[name][1]
    docs = _docs(name)
    assert len(docs) > 20
    typed = 0
    for doc in docs:
        for data in _mutations(doc, keys):
            fr = S.FileRead("ok", data=data, size=len(data))
            full, _err = S._parse_json_doc(fr)
            want = {k: full[k] for k in keys if k in full} if isinstance(full, dict) else full
            got = S.audit_doc(fr, name)
            # NaN != NaN: compare the JSON forms (both sides came from the same text)
            assert repr(got) == repr(want), (name, data[:200])
            typed += isinstance(want, dict)
    assert typed > len(docs) * 10
    decoder = S._AUDIT_DOCS[name][0]
    for doc in docs:  # every valid ASCII sample document takes the typed decode
        full, _err = S._parse_json_doc(S.FileRead("ok", data=doc, size=len(doc)))
        if isinstance(full, dict) and doc.isascii() and S._msgspec_may_read(doc):
            decoder.decode(doc)
    for status in ("missing", "symlink", "not_read"):
        assert S.audit_doc(S.FileRead(status), name) is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
    | st.text(alphabet=st.characters(codec="utf-8")),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(alphabet=st.characters(codec="utf-8"), max_size=6), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=examples(150), deadline=None)
@given(runs=st.lists(st.dictionaries(st.text(max_size=8), _JSON, max_size=5), max_size=3),
       path=st.text())
def test_json_text_is_json_dumps(runs: list, path: str) -> None:
    """``audit --format json`` is the text of ``json.dumps(..., indent=1)`` for every value
    a record can hold (no float), control characters, non-ASCII and lone surrogates."""
    import json

    from rivumi_analysis.audit import AuditResult

    res = AuditResult(runs=runs, skipped=[{"path": path, "reason": "symlink"}])
    assert res.to_json_text() == json.dumps(res.to_json_obj(), ensure_ascii=False, indent=1)


def test_json_text_of_a_fleet_audit() -> None:
    import json

    from rivumi_analysis.audit import AuditResult

    res = audit(str(SAMPLE_RUNS), jobs=1, cache=False)
    assert res.to_json_text() == json.dumps(res.to_json_obj(), ensure_ascii=False, indent=1)
    odd = AuditResult(skipped=[{"path": "/r/\udcff\x00\u2028", "reason": "symlink"}])
    assert odd.to_json_text() == json.dumps(odd.to_json_obj(), ensure_ascii=False, indent=1)


_MANIFEST_KEYS = S._ManifestKeys.__struct_fields__


def _check_audit_manifest(data: bytes) -> bool:
    """``audit_manifest`` equals the parse and the twin of the parsed document; returns
    whether it took the straight decode."""
    from rivumi_analysis.read import fast_models as fm

    fr = S.FileRead("ok", data=data, size=len(data))
    model, doc, err = S.audit_manifest(fr)
    full, full_err = S._parse_json_doc(fr)
    if model is None:
        assert repr(doc) == repr(full) and err == full_err
        return False
    assert isinstance(full, dict), data[:200]
    assert model == fm.manifest(full), data[:200]
    assert doc == {k: full[k] for k in _MANIFEST_KEYS if k in full}
    assert err is None
    return True


def test_audit_manifest_on_every_sample_manifest_and_near_misses() -> None:
    docs = _docs("session.json")
    assert len(docs) > 80
    straight = 0
    for doc in docs:
        straight += _check_audit_manifest(doc)
    assert straight > 80  # the runner's manifests take the straight decode
    nested = 0
    for doc in docs[::6]:
        for data in _mutations(doc, _MANIFEST_KEYS):
            _check_audit_manifest(data)
        # values the twin types as Any: nesting past the runner's json.loads, long digits
        if b'"provider_metadata":{}' in doc:
            nested += 1
            for value in (b"[" * 970 + b"]" * 970, b"[" * 100 + b"]" * 100, b"7" * 4400,
                          b"9" * 5000, b"1e400", b'"\\ud800"', b'"\xff"'):
                _check_audit_manifest(doc.replace(b'"provider_metadata":{}',
                                                  b'"provider_metadata":{"x":' + value + b"}", 1))
    assert nested > 3


@pytest.mark.differential
@pytest.mark.parametrize("index", [0, 1, 2])
def test_audit_manifest_on_generated_mutations(index: int) -> None:
    """The twin's mutation set (types, missing/extra keys at every level, ranges, NaN and
    infinities, padded strings, timestamps), each written as JSON text."""
    import json

    from tests.test_fast_models import RICH_MANIFESTS
    from tests.test_fast_models import _mutations as doc_mutations

    doc = json.loads(RICH_MANIFESTS[index].read_text("utf-8"))
    muts = doc_mutations(doc)
    taken = 0
    for i, m in enumerate(muts):
        compact = (",", ":") if i % 2 else None  # the runner's layout, and json's default
        taken += _check_audit_manifest(
            json.dumps(m, ensure_ascii=bool(i % 3), separators=compact).encode("utf-8"))
    assert len(muts) > 2000 and 0 < taken < len(muts)


def _check_whole_manifest(data: bytes) -> bool:
    """``whole_manifest`` (one parse) gives the parse and the twin the store read apart
    before (the straight decode, ``_twin``) wherever that twin accepts the bytes; its twin is
    ``fast_models.manifest`` of the document msgspec decoded (what ``resume`` asks when a run
    has none), and None for a document msgspec refuses. Returns whether there is a twin."""
    from rivumi_analysis.read import fast_models as fm

    fr = S.FileRead("ok", data=data, size=len(data))
    model, doc, err = S.whole_manifest(fr)
    want_doc, want_err = S._parse_json_doc(fr)
    assert repr(doc) == repr(want_doc) and err == want_err, data[:200]  # (NaN != NaN)
    straight = S._twin(fr)
    if straight is not None:
        assert model == straight and type(model) is type(straight), data[:200]
    try:
        by_msgspec = S._msgspec_may_read(data) and S._DOC_DECODER.decode(data) is not None
    except Exception:
        by_msgspec = False
    want = fm.manifest(want_doc) if by_msgspec and isinstance(want_doc, dict) else None
    assert model == want, data[:200]
    return model is not None


def test_whole_manifest_on_every_sample_manifest_and_near_misses() -> None:
    """The store's one parse of ``session.json`` (``read_run(whole_docs=True)``) gives what
    the twin's straight decode and the whole parse give, on every sample manifest, its near
    misses (encodings, NaN, lone surrogates, long digits, nesting, repeated keys) and values
    the twin types as Any."""
    docs = _docs("session.json")
    twins = sum(_check_whole_manifest(doc) for doc in docs)
    assert twins > 80
    for doc in docs[::6]:
        for data in _mutations(doc, _MANIFEST_KEYS + ("step", "usage", "messages")):
            _check_whole_manifest(data)
        if b'"provider_metadata":{}' in doc:
            for value in (b"[" * 970 + b"]" * 970, b"7" * 4400, b"9" * 5000, b"1e400",
                          b'"\\ud800"', b'"\xff"', b"12345678901234567890123"):
                _check_whole_manifest(doc.replace(b'"provider_metadata":{}',
                                                  b'"provider_metadata":{"x":' + value + b"}", 1))
    for status in ("missing", "symlink", "not_read", "too_large"):
        assert S.whole_manifest(S.FileRead(status)) == (None, None, None)


@pytest.mark.differential
@pytest.mark.parametrize("index", [0, 1, 2])
def test_whole_manifest_on_generated_mutations(index: int) -> None:
    """The twin's mutation set (types, missing and extra keys at every level, ranges, NaN
    and infinities, padded strings, timestamps) as JSON text: equal twin and document."""
    import json

    from tests.test_fast_models import RICH_MANIFESTS
    from tests.test_fast_models import _mutations as doc_mutations

    doc = json.loads(RICH_MANIFESTS[index].read_text("utf-8"))
    muts = doc_mutations(doc)
    taken = 0
    for i, m in enumerate(muts):
        compact = (",", ":") if i % 2 else None
        taken += _check_whole_manifest(
            json.dumps(m, ensure_ascii=bool(i % 3), separators=compact).encode("utf-8"))
    assert len(muts) > 2000 and 0 < taken < len(muts)


def test_msgspec_refuses_integers_past_the_toolkit_limit() -> None:
    """msgspec decodes an integer literal of up to ``INT_MAX_DIGITS`` digits to the value
    ``json.loads`` gives (or refuses it) and always refuses a longer one, whatever Python's
    own limit: so a document msgspec decodes whole needs no digit-run check first
    (``snapshot._msgspec_may_read``; a refusal goes to the explicit parser)."""
    import json
    import sys
    from typing import Any

    import msgspec

    from rivumi_analysis.read.runner_json import INT_MAX_DIGITS

    before = sys.get_int_max_str_digits()
    try:
        for limit in (0, 640, before):
            sys.set_int_max_str_digits(limit)
            for sign in (b"", b"-"):
                ok = sign + b"7" * INT_MAX_DIGITS
                too_long = sign + b"7" * (INT_MAX_DIGITS + 1)
                for typ in (Any, dict[str, Any]):
                    wrap = (lambda v: b"[" + v + b"]") if typ is Any else (
                        lambda v: b'{"a":' + v + b"}")
                    try:  # (msgspec counts a minus sign as a digit: a refusal, the parser)
                        got = msgspec.json.decode(wrap(ok), type=typ)
                    except msgspec.DecodeError:
                        assert sign or limit not in (0, before)
                    else:
                        assert got == json.loads(wrap(ok))
                    with pytest.raises(msgspec.DecodeError):
                        msgspec.json.decode(wrap(too_long), type=typ)
        sys.set_int_max_str_digits(before)
        # a long mantissa is a float, read alike (no integer limit applies)
        long_float = b"[0." + b"3" * 5000 + b"1e5]"
        assert msgspec.json.decode(long_float) == json.loads(long_float)
    finally:
        sys.set_int_max_str_digits(before)
