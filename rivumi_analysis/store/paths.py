"""Where stores live and what marks a folder as one (shared by the store and its housekeeping).

Every source gets its own store folder ``<root>/<name>-<hash>`` (:func:`store_key`) under
:func:`default_store_root`. A folder is a store when it holds :data:`MANIFEST`;
:data:`LOCK` is taken by a refresh; :data:`LAST_USED` is touched by each open.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from typing import Any

import msgspec

from ..read.incremental import default_cache_dir

MANIFEST = "_store.msgpack"
LOCK = ".lock"
LAST_USED = ".last-used"
ENV_DIR = "RIVUMI_ANALYSIS_STORE_DIR"


def default_store_root(environ: dict[str, str] | None = None) -> str:
    """Where stores live: ``$RIVUMI_ANALYSIS_STORE_DIR`` or ``<cache dir>/store``.

    >>> default_store_root({"RIVUMI_ANALYSIS_STORE_DIR": "/s", "HOME": "/h"})
    '/s'
    >>> default_store_root({"XDG_CACHE_HOME": "/c", "HOME": "/h"})
    '/c/rivumi-analysis/store'
    """
    env = os.environ if environ is None else environ
    if env.get(ENV_DIR):
        return env[ENV_DIR]
    return os.path.join(default_cache_dir(env), "store")


def store_key(tops: Sequence[str], max_depth: int) -> str:
    """The folder name of the store of some sources (as given and as resolved)."""
    h = hashlib.blake2b(digest_size=10)
    for t in tops:
        h.update(f"{t}\0{os.path.realpath(t)}\0".encode("utf-8", "surrogateescape"))
    h.update(str(max_depth).encode())
    name = os.path.basename(os.path.normpath(tops[0])) if tops else "fleet"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40] or "fleet"
    return f"{safe}-{h.hexdigest()}"



def manifest_doc(blob: bytes) -> dict[str, Any] | None:
    """The manifest file's document when its checksum holds (any format or code version),
    else None. The file is a 16-byte BLAKE2b of the body, then the msgpack body."""
    digest, body = blob[:16], blob[16:]
    if len(blob) < 17 or hashlib.blake2b(body, digest_size=16).digest() != digest:
        return None
    try:
        d = msgspec.msgpack.decode(body)
    except msgspec.DecodeError:
        return None
    return d if isinstance(d, dict) else None


def touch(directory: str) -> None:
    """Record that the store in ``directory`` was used now (best effort: a read-only store
    is still served)."""
    path = os.path.join(directory, LAST_USED)
    try:
        os.utime(path)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    except OSError:
        pass
