"""Skimming a run's JSON documents for the few keys the events tables read.

``events_df`` needs of ``session.json`` and ``checkpoint.json`` only what decides a run's kind
and run id (``snapshot._kind``, ``snapshot._run_id``): ``run_id``, ``provider_name``,
``backend_name`` and ``resumable`` at the top level. Decoding the whole documents into Python
objects (about as many bytes as the logs themselves) cost ~0.25 CPU-s per 100 MB of logs; a
typed msgspec decode of just these keys skips the rest in C (~10x cheaper).

:func:`skim_doc` gives exactly ``snapshot._parse_json_doc`` reduced to those keys. The skim
is used only where it provably agrees; otherwise the full parse decides:

- msgspec skips an unknown value after checking its JSON syntax, but not its UTF-8 or the
  magnitude of its numbers: the skim runs only on valid UTF-8, and a number too large for
  msgspec (``1e999``) is one Python's ``json`` reads (``_parse_json_doc`` falls back to it),
  so the document is an object either way;
- long integer literals and deep nesting (the runner's explicit limits) take the full parse,
  under the same tests ``_parse_json_doc`` uses;
- the skimmed values are decoded as ``Any`` by msgspec (a value msgspec refuses, e.g. a lone
  surrogate, fails the skim: the full parse decides); a repeated key keeps its last value and
  an escaped key (``"run\\u005fid"``) is matched after unescaping, as in a ``dict``.

``tests/test_docskim.py`` proves it equal on every sample document and on mutations.

>>> from rivumi_analysis.read.io import FileRead
>>> from rivumi_analysis.read.snapshot import _parse_json_doc as full
>>> skim_doc(FileRead("ok", b'{"z":[1,{"run_id":"no"}],"run_id":"r","resumable":false}'), full)
({'resumable': False, 'run_id': 'r'}, None)
>>> skim_doc(FileRead("ok", b'[1]'), full)  # not an object: as the full parse says
([1], None)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import msgspec

from . import runner_json as _runner_json
from .io import FileRead

SKIM_KEYS = ("backend_name", "provider_name", "resumable", "run_id")
"""The top-level keys ``snapshot._kind`` and ``snapshot._run_id`` read."""


class _Skim(msgspec.Struct):
    backend_name: Any = msgspec.UNSET
    provider_name: Any = msgspec.UNSET
    resumable: Any = msgspec.UNSET
    run_id: Any = msgspec.UNSET


_SKIM = msgspec.json.Decoder(_Skim)
_STRIDE = 64
_LONG_RUN = b"0" * ((_runner_json._MIN_ENV_DIGITS + 1) // _STRIDE)
_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)


def skim_doc(fr: FileRead, full: Callable[[FileRead], tuple[Any, str | None]]
             ) -> tuple[Any, str | None]:
    """``full(fr)`` (``snapshot._parse_json_doc``) with an object reduced to the keys in
    :data:`SKIM_KEYS`; ``full`` runs only when the skim cannot prove the same answer."""
    data = fr.data
    if fr.status == "ok" and data is not None and _skimmable(data):
        try:
            s = _SKIM.decode(data)
        except (msgspec.DecodeError, RecursionError):
            pass  # not an object, not JSON, or a skimmed value msgspec refuses: parse fully
        else:
            return {k: v for k in SKIM_KEYS if (v := getattr(s, k)) is not msgspec.UNSET}, None
    doc, error = full(fr)
    if isinstance(doc, dict):
        return {k: doc[k] for k in SKIM_KEYS if k in doc}, error
    return doc, error


def _brackets(data: bytes) -> int:
    """How many ``[`` and ``{`` bytes ``data`` holds (as ``_parse_json_doc`` counts them)."""
    np = sys.modules.get("numpy")
    if np is None:  # the tables have numpy loaded (through pandera); the audit has not
        # (one pass deleting them is ~30 % cheaper than two counts: '{' is frequent)
        return len(data) - len(data.translate(None, b"[{"))
    # one vectorised pass instead of two: 0x5B '[' | 0x20 == 0x7B '{', and no other byte
    return int(np.count_nonzero((np.frombuffer(data, np.uint8) | 0x20) == 0x7B))


def _skimmable(data: bytes) -> bool:
    """Valid UTF-8, shallow enough, no integer literal near the runner's digit limit."""
    if _brackets(data) > _runner_json.PYTHON_JSON_MAX_DEPTH:
        return False
    # a run of 641 digits holds 10 consecutive bytes of every 64th: a strided sample rules
    # most documents out in ~1/64 of the time of the full scan
    if _LONG_RUN in data[::_STRIDE].translate(_DIGITS_TO_ZERO) and (
            _runner_json.may_have_long_int(data)):
        return False
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True
