"""Python's ``json.loads`` as the runner calls it, with every limit explicit (§9.6, §8.2).

The runner parses replay lines and its JSON documents (``session.json``, ``request.json``) with
``json.loads``. Two of its limits are not properties of the input alone:

* nesting: the C parser overflows Python's recursion limit, which is 1000 *minus the caller's
  stack* (measured on CPython 3.11: 996 levels from an empty stack, 975 with 20 frames; the
  runner calls it from roughly 10 to 40 frames deep), and the runner does not catch the
  ``RecursionError``;
* integers: a literal of more than 4300 digits raises a ``ValueError`` that is not a
  ``JSONDecodeError`` (Python's integer-string limit, changeable by the environment), which
  the runner does not catch either.

The toolkit makes both one named constant, so an answer never depends on where it is computed
(the audit's ``replay_accepts`` equals ``replay --json`` at any depth) nor on
``PYTHONINTMAXSTRDIGITS``. These are documented decisions (README, "Documented decisions").

>>> loads(b'{"a":[1,2]}')
{'a': [1, 2]}
>>> loads("[" * 961 + "]" * 961)
Traceback (most recent call last):
...
rivumi_analysis.read.runner_json.TooDeep: JSON nested 961 levels deep (limit 960)
"""

from __future__ import annotations

import decimal
import json
import re
import threading
from typing import Any

PYTHON_JSON_MAX_DEPTH = 960
"""Deepest container nesting the toolkit parses like ``json.loads`` (top-level value = 1).
Deeper text is treated as the runner's uncaught ``RecursionError``."""
INT_MAX_DIGITS = 4300
"""Python's default integer-string limit: longer integer literals make ``json.loads`` fail."""

_MIN_ENV_DIGITS = 640  # the lowest limit Python lets the environment set
_THREAD_DEPTH = 150  # parse deeper text on a fresh thread (its stack is empty)


class TooDeep(ValueError):
    """The text nests containers deeper than :data:`PYTHON_JSON_MAX_DEPTH`."""

    def __init__(self, depth: int) -> None:
        super().__init__(f"JSON nested {depth} levels deep (limit {PYTHON_JSON_MAX_DEPTH})")
        self.depth = depth


class IntTooLong(ValueError):
    """An integer literal has more than :data:`INT_MAX_DIGITS` digits."""

    def __init__(self, digits: int) -> None:
        super().__init__(f"integer literal of {digits} digits (limit {INT_MAX_DIGITS})")
        self.digits = digits


def container_depth(text: str | bytes) -> int:
    """Deepest nesting of ``[``/``{`` outside JSON strings (the top-level container is 1).

    >>> container_depth('{"a":"[[[","b":[[1]]}'), container_depth(b"[]"), container_depth("1")
    (3, 1, 0)
    """
    if isinstance(text, bytes):
        text = text.decode("latin-1")  # only ASCII structure matters; each byte one char
    depth = best = 0
    pos = 0
    n = len(text)
    find_special = _SPECIAL.search
    while True:
        m = find_special(text, pos)
        if m is None:
            return best
        ch = m.group(0)
        pos = m.end()
        if ch == '"':
            s = _STRING_TAIL.match(text, pos)
            pos = s.end() if s is not None else n
        elif ch in "[{":
            depth += 1
            if depth > best:
                best = depth
        else:
            depth -= 1


_SPECIAL = re.compile(r'["\[\]{}]')
_STRING_TAIL = re.compile(r'(?:[^"\\]|\\.)*"', re.S)


def _to_int(literal: str) -> int:
    digits = len(literal) - (literal[0] == "-")
    if digits > INT_MAX_DIGITS:
        raise IntTooLong(digits)
    try:
        return int(literal)
    except ValueError:  # the environment lowered Python's own limit
        return int(decimal.Decimal(literal))


def _decode_bytes(doc: bytes) -> str:
    # exactly what json.loads does with bytes: sniff UTF-8/16/32 (a UTF-8 BOM is skipped)
    return doc.decode(json.detect_encoding(doc), "surrogatepass")


def loads(doc: str | bytes, **hooks: Any) -> Any:
    """``json.loads(doc)`` with explicit limits (see the module docstring).

    Raises:
        UnicodeDecodeError: ``doc`` is bytes that do not decode (before any parsing, as
            ``json.loads`` decodes first).
        TooDeep: nesting deeper than :data:`PYTHON_JSON_MAX_DEPTH`.
        IntTooLong: an integer literal of more than :data:`INT_MAX_DIGITS` digits (raised in
            document order, like ``json.loads`` raises its errors).
        json.JSONDecodeError: anything else ``json.loads`` refuses.
    """
    text = _decode_bytes(doc) if isinstance(doc, (bytes, bytearray)) else doc
    # The bracket count bounds the depth; the exact depth is needed only past the limit.
    brackets = text.count("[") + text.count("{")
    if brackets > PYTHON_JSON_MAX_DEPTH:
        depth = container_depth(text)
        if depth > PYTHON_JSON_MAX_DEPTH:
            raise TooDeep(depth)
    if "parse_int" not in hooks and len(text) > _MIN_ENV_DIGITS and has_digit_run(
            doc if isinstance(doc, bytes) else text.encode("utf-8", "surrogatepass"),
            _MIN_ENV_DIGITS + 1):
        hooks["parse_int"] = _to_int
    if brackets > _THREAD_DEPTH:
        return _on_fresh_stack(text, hooks)
    try:
        return json.loads(text, **hooks)
    except RecursionError:  # only a caller already deep in its own stack gets here
        return _on_fresh_stack(text, hooks)


def _on_fresh_stack(text: str, hooks: dict[str, Any]) -> Any:
    """Parse on a new thread: its Python stack is empty, so 960 levels always fit."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = json.loads(text, **hooks)
        except BaseException as exc:  # re-raised in the caller
            box["error"] = exc

    t = threading.Thread(target=work, name="rivumi-deep-json")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def may_have_long_int(data: bytes) -> bool:
    """Cheap test: could ``data`` hold an integer literal the limits above care about?

    >>> may_have_long_int(b'{"a":12}'), may_have_long_int(b"[" + b"7" * 700 + b"]")
    (False, True)
    """
    return len(data) > _MIN_ENV_DIGITS and has_digit_run(data, _MIN_ENV_DIGITS + 1)


_ALL_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)


def has_digit_run(data: bytes, n: int) -> bool:
    """Whether ``data`` holds ``n`` consecutive ASCII digits (30x faster than a regex).

    >>> has_digit_run(b"a12345b", 5), has_digit_run(b"a1234b5", 5)
    (True, False)
    """
    return b"0" * n in data.translate(_ALL_DIGITS_TO_ZERO)
