"""Read-only, bounded file access and physical-line splitting.

Nothing here writes, locks or follows a symlink. Files are opened with ``O_NOFOLLOW`` and
``O_NONBLOCK`` (so a FIFO can never block us) and checked with ``fstat`` before a byte is read.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

RUNNER_FILE_LIMIT = 16 * 1024 * 1024
"""The runner's 16 MiB limit on session.json, request.json and events.jsonl (§8.1)."""

DEFAULT_READ_LIMIT = 1024 * 1024 * 1024
"""The toolkit's own hard bound on one file (files over the runner's limit still load)."""

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_OPEN_FLAGS |= getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class FileRead:
    """Outcome of reading one file.

    Attributes:
        status: ``ok``, ``missing``, ``symlink``, ``not_regular``, ``unreadable``, ``too_large``
            or ``not_read`` (a table loader that needs no byte of the file skipped it).
        data: the bytes when ``status == "ok"``.
        size: size in bytes from ``lstat``/``fstat`` (None when missing).
        identity: ``(size, mtime_ns, inode, device)`` of the file read, for change detection.
        error: the OS error text for ``unreadable``.
    """

    status: str
    data: bytes | None = None
    size: int | None = None
    identity: tuple[int, int, int, int] | None = None
    error: str | None = None


def read_file(path: str, limit: int = DEFAULT_READ_LIMIT) -> FileRead:
    """Read a regular file without following symlinks or blocking on FIFOs.

    >>> read_file("/nonexistent/x").status
    'missing'
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return FileRead("missing")
    except NotADirectoryError:
        return FileRead("missing")
    except OSError as exc:
        return FileRead("unreadable", error=_os_error_text(exc))
    if stat.S_ISLNK(st.st_mode):
        return FileRead("symlink", size=st.st_size)
    if not stat.S_ISREG(st.st_mode):
        return FileRead("not_regular", size=st.st_size)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return FileRead("symlink")
        if exc.errno == errno.ENOENT:
            return FileRead("missing")
        return FileRead("unreadable", size=st.st_size, error=_os_error_text(exc))
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):  # swapped between lstat and open
            return FileRead("not_regular", size=fst.st_size)
        identity = (fst.st_size, fst.st_mtime_ns, fst.st_ino, fst.st_dev)
        if fst.st_size > limit:
            return FileRead("too_large", size=fst.st_size, identity=identity)
        chunks = []
        remaining = limit + 1
        # the first read asks for the size fstat gave (+1, to see growth at once): asking for
        # 8 MiB made every read allocate 8 MiB and shrink it (a small file's bytes copied
        # twice, fresh pages faulted in); later reads (a growing file) take 8 MiB steps
        want = fst.st_size + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, want))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
            want = 8 * 1024 * 1024
        data = b"".join(chunks) if len(chunks) != 1 else chunks[0]
        if len(data) > limit:
            return FileRead("too_large", size=len(data), identity=identity)
        return FileRead("ok", data=data, size=len(data), identity=identity)
    except OSError as exc:
        return FileRead("unreadable", size=st.st_size, error=_os_error_text(exc))
    finally:
        os.close(fd)


def lstat_identity(path: str) -> tuple[int, int, int, int] | None:
    """``(size, mtime_ns, inode, device)`` of ``path`` without following symlinks, or None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def _os_error_text(exc: OSError) -> str:
    return str(exc)


@dataclass(frozen=True, slots=True)
class PhysicalLine:
    """One physical line: a segment ending in ``\\n`` or a non-empty final segment.

    Attributes:
        line_no: 1-based, counting every physical line.
        byte_offset: offset of the first byte (a leading BOM belongs to line 1).
        raw: the bytes without the ``\\n``.
        has_newline: whether the segment ended in ``\\n``.
    """

    line_no: int
    byte_offset: int
    raw: bytes
    has_newline: bool


def split_physical_lines(data: bytes) -> list[PhysicalLine]:
    """Split bytes into physical lines with byte offsets.

    >>> [(ln.line_no, ln.byte_offset, ln.raw, ln.has_newline)
    ...  for ln in split_physical_lines(b"a\\n\\nbc")]
    [(1, 0, b'a', True), (2, 2, b'', True), (3, 3, b'bc', False)]
    """
    lines: list[PhysicalLine] = []
    start = 0
    n = len(data)
    line_no = 0
    find = data.find
    while start < n:
        end = find(b"\n", start)
        line_no += 1
        if end < 0:
            lines.append(PhysicalLine(line_no, start, data[start:], False))
            break
        lines.append(PhysicalLine(line_no, start, data[start:end], True))
        start = end + 1
    return lines
