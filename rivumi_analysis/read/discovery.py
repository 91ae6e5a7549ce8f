"""Find run directories below a source, read-only, never following a symlink."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

from ..errors import SourceError

RUN_MARKERS = ("session.json", "events.jsonl", "request.json", "checkpoint.json", "result.json")
"""A folder holding any of these (as any kind of entry) is a run directory."""

DEFAULT_MAX_DEPTH = 8

Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


@dataclass(frozen=True, slots=True)
class RunLocation:
    """A run directory found by discovery.

    Attributes:
        run_dir: absolute: the source path given, resolved (symlinks in it followed once,
            as a user's shell would), joined with the path below it (never resolved: below
            the source no symlink is followed). So the same run typed two ways
            (``runs/a``, ``./runs/a/``, an absolute path) has one ``run_dir``.
        is_subagent: found inside a parent's ``subagents/`` folder.
        parent_run_dir: the parent run's ``run_dir`` for subagents.
        source_root: the folder ``run_dir`` is relative to (the resolved source; its parent
            when the source is itself a run): ``run_path`` in the tables.
    """

    run_dir: str
    is_subagent: bool = False
    parent_run_dir: str | None = None
    source_root: str | None = None


@dataclass(frozen=True, slots=True)
class Skipped:
    """A path discovery did not enter, with a reason code from ``errors.SKIP_REASONS``."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class Discovery:
    runs: list[RunLocation] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    root_used: str | None = None


def default_run_root(environ: dict[str, str] | None = None) -> str | None:
    """First existing default run root, in the documented order, or None.

    Order: ``$RIVUMI_RUN_ROOT``, ``$LOOPLANE_RUN_ROOT``, ``$PCA_RUN_ROOT``, then under
    ``${XDG_STATE_HOME:-~/.local/state}``: ``looplane/runs``, ``rivumi/runs``,
    ``python-coding-agent/runs``.

    >>> default_run_root({"RIVUMI_RUN_ROOT": "/", "HOME": "/nonexistent"})
    '/'
    """
    env = os.environ if environ is None else environ
    candidates = [env.get(k) for k in ("RIVUMI_RUN_ROOT", "LOOPLANE_RUN_ROOT", "PCA_RUN_ROOT")]
    state = env.get("XDG_STATE_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".local", "state"
    )
    candidates += [
        os.path.join(state, "looplane", "runs"),
        os.path.join(state, "rivumi", "runs"),
        os.path.join(state, "python-coding-agent", "runs"),
    ]
    for cand in candidates:
        if cand and os.path.isdir(cand):
            return cand
    return None


def normalize_sources(source: Source | None) -> tuple[list[str], str | None]:
    """Turn a source argument into a list of path strings (and the default root used)."""
    if source is None:
        root = default_run_root()
        if root is None:
            raise SourceError(
                "no source given and no default run root exists",
                code="no_run_root",
                hint="pass a run directory or set $RIVUMI_RUN_ROOT / $LOOPLANE_RUN_ROOT",
            )
        return [root], root
    if isinstance(source, (str, os.PathLike)):
        return [_file_uri(expand_path(source))], None
    if not isinstance(source, (list, tuple)) or not all(
            isinstance(s, (str, os.PathLike)) for s in source):
        bad = source if not isinstance(source, (list, tuple)) else next(
            s for s in source if not isinstance(s, (str, os.PathLike)))
        raise TypeError(
            f"source must be a run directory or folder of runs (str or os.PathLike), a list "
            f"or tuple of them, None (the default run root), or runs read already (a Fleet "
            f"from load_fleet, a RunData or a list of them); got {type(bad).__name__}")
    return [_file_uri(expand_path(s)) for s in source], None


def _file_uri(path: str) -> str:
    """``file://`` sources are local paths (every local rule applies); other URIs stay."""
    if path.startswith("file://"):
        from .uri import file_uri_to_path

        return file_uri_to_path(path)
    return path


def expand_path(path: str | os.PathLike[str]) -> str:
    """A source path with ``~`` and ``$VARS`` expanded, as a shell would (also when quoted).

    >>> import os; os.environ["RA_DOC_ROOT"] = "/runs"
    >>> expand_path("$RA_DOC_ROOT/a"), expand_path("~/x") == os.path.expanduser("~/x")
    ('/runs/a', True)
    """
    return os.path.expandvars(os.path.expanduser(os.fspath(path)))


def check_sources(paths: list[str]) -> None:
    """Raise :class:`SourceError` for a missing path or a regular file (usage errors)."""
    for p in paths:
        if "://" in p:  # object storage: checked when it is listed (``uri``)
            continue
        try:
            st = os.stat(p)  # the given path itself may be a symlink: used as given
        except OSError:
            raise SourceError(
                f"source does not exist: {p}", code="source_missing", where=p,
                hint="check the path; a source is a run directory or a folder of runs",
            ) from None
        if not stat.S_ISDIR(st.st_mode):
            raise SourceError(
                f"source is not a directory: {p}", code="source_not_directory", where=p,
                hint="pass the run directory that holds events.jsonl, not the file itself",
            )


_NAME = attrgetter("name")


def _entries(path: str) -> list[os.DirEntry[str]] | None:
    try:
        with os.scandir(path) as it:
            return sorted(it, key=_NAME)
    except OSError:
        return None


def _names(path: str) -> list[str] | None:
    """Sorted entry names (``listdir``: no entry object; the order of :func:`_entries`)."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


_MARKERS = frozenset(RUN_MARKERS)


def _is_run_dir(names: list[str]) -> bool:
    return not _MARKERS.isdisjoint(names)


def discover(source: Source | None, *, max_depth: int = DEFAULT_MAX_DEPTH,
             listings: dict[str, list[str]] | None = None,
             folders: list[str] | None = None) -> Discovery:
    """Find every run directory below ``source``.

    A source path that is itself a run is used as given (even when it is a symlink). Below
    it, dot-names are skipped silently and symlinks are listed under ``skipped``.

    ``listings``, when given, receives the sorted entry names of every local run folder as
    discovery listed them (the audit cache fingerprints a run from them instead of listing
    the folder a second time).

    ``folders``, when given, receives every other local path discovery listed or probed
    (folders of runs, ``subagents`` folders, folders it could not list): with the run
    folders, everything the result depends on below the sources (the store re-uses a
    discovery while none of them changed, see ``store.core``).

    Warns:
        EmptySourceWarning: no run was found below the sources.

    Raises:
        SourceError: a missing source, a regular file, or no default root.
        TypeError: ``source`` is not a path, a list of paths or None.
    """
    paths, root_used = normalize_sources(source)
    check_sources(paths)
    runs: list[RunLocation] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for top in paths:
        if "://" not in top:
            root = os.path.realpath(top)
            _walk(root, 0, max_depth, runs, skipped, seen, is_top=True, source_root=root,
                  listings=listings, folders=folders)
    uris = [p for p in paths if "://" in p]
    if uris:
        from .uri import discover_uris

        discover_uris(uris, max_depth=max_depth, run_markers=RUN_MARKERS,
                      add_run=lambda d, sub, par, root: runs.append(
                          RunLocation(d, sub, par, root)),
                      add_skipped=lambda p, r: skipped.append(Skipped(p, r)), seen=seen)
    if not runs:
        _warn_empty(paths, skipped)
    return Discovery(runs=runs, skipped=skipped, root_used=root_used)


def _warn_empty(paths: list[str], skipped: list[Skipped]) -> None:
    """An empty source is a warning, never a silently empty table (issue 29)."""
    import warnings

    from ..errors import EmptySourceWarning

    where = ", ".join(paths) if paths else "(no path given)"
    extra = (f"; {len(skipped)} path(s) skipped ("
             + ", ".join(sorted({s.reason for s in skipped})) + ")") if skipped else ""
    warnings.warn(f"no run directory found below {where}{extra}", EmptySourceWarning,
                  stacklevel=3)


def discover_listing(listing: str) -> Discovery:
    """The runs named in a listing file (Parquet or CSV with a ``path`` column, local or a
    URI; see :func:`rivumi_analysis.read.uri.read_listing`), used as given: nothing is walked
    or checked here, so millions of runs cost no per-run call."""
    from .uri import read_listing

    return Discovery(runs=[RunLocation(d, sub, par) for d, sub, par in read_listing(listing)])


def _walk(path: str, depth: int, max_depth: int, runs: list[RunLocation],
          skipped: list[Skipped], seen: set[str], *, is_top: bool, source_root: str,
          listings: dict[str, list[str]] | None = None,
          folders: list[str] | None = None) -> None:
    # names first (a run folder needs no entry kinds: a fleet's listing is mostly runs)
    listed = _names(path)
    if listed is None:
        skipped.append(Skipped(path, "unreadable"))
        if folders is not None:
            folders.append(path)
        return
    if _is_run_dir(listed):
        if path not in seen:
            seen.add(path)
            # a source that is itself a run: its path is relative to the folder holding it
            root = os.path.dirname(path) if is_top else source_root
            runs.append(RunLocation(path, source_root=root))
            if listings is not None:
                listings[path] = listed
            if "subagents" in listed:
                _walk_subagents(path, runs, skipped, seen, depth=0,
                                max_depth=max_depth, source_root=root, listings=listings,
                                folders=folders)
        return
    if folders is not None:
        folders.append(path)
    entries = _entries(path)  # a folder of runs: the kinds of its entries
    if entries is None:
        skipped.append(Skipped(path, "unreadable"))
        return
    for e in entries:
        if e.name.startswith("."):
            continue
        child = os.path.join(path, e.name)
        kind = _entry_kind(e)
        if kind == "symlink":
            skipped.append(Skipped(child, "symlink"))
        elif kind == "dir":
            if depth + 1 > max_depth:
                skipped.append(Skipped(child, "depth_limit"))
            else:
                _walk(child, depth + 1, max_depth, runs, skipped, seen, is_top=False,
                      source_root=source_root, listings=listings, folders=folders)
        elif kind == "other":
            skipped.append(Skipped(child, "not_regular"))
        # regular files in a non-run folder are simply not runs


def _walk_subagents(run_dir: str, runs: list[RunLocation],
                    skipped: list[Skipped], seen: set[str], *, depth: int,
                    max_depth: int, source_root: str | None = None,
                    listings: dict[str, list[str]] | None = None,
                    folders: list[str] | None = None) -> None:
    sub_path = os.path.join(run_dir, "subagents")
    if folders is not None:
        folders.append(sub_path)
    kind = _path_kind(sub_path)
    if kind == "unreadable":
        skipped.append(Skipped(sub_path, "unreadable"))
        return
    if kind == "symlink":
        skipped.append(Skipped(sub_path, "symlink"))
        return
    if kind != "dir":
        return
    children = _entries(sub_path)
    if children is None:
        skipped.append(Skipped(sub_path, "unreadable"))
        return
    for e in children:
        if e.name.startswith("."):
            continue
        child = os.path.join(sub_path, e.name)
        ck = _entry_kind(e)
        if ck == "symlink":
            skipped.append(Skipped(child, "symlink"))
            continue
        if ck != "dir":
            if ck == "other":
                skipped.append(Skipped(child, "not_regular"))
            continue
        if depth + 1 > max_depth:
            skipped.append(Skipped(child, "depth_limit"))
            continue
        grand = _names(child)
        if grand is None:
            skipped.append(Skipped(child, "unreadable"))
            if folders is not None:
                folders.append(child)
            continue
        if child in seen:
            continue
        seen.add(child)
        runs.append(RunLocation(child, is_subagent=True, parent_run_dir=run_dir,
                                source_root=source_root))
        if listings is not None:
            listings[child] = grand
        if "subagents" in grand:
            _walk_subagents(child, runs, skipped, seen, depth=depth + 1, max_depth=max_depth,
                            source_root=source_root, listings=listings, folders=folders)


def _path_kind(path: str) -> str:
    """:func:`_entry_kind` of a path (``lstat``, never following a symlink); ``missing`` when
    it is gone, ``unreadable`` when it cannot be stat-ed (what listing it would say)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unreadable"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def _entry_kind(e: os.DirEntry[str]) -> str:
    try:
        if e.is_symlink():
            return "symlink"
        if e.is_dir(follow_symlinks=False):
            return "dir"
        if e.is_file(follow_symlinks=False):
            return "file"
        return "other"
    except OSError:
        return "other"


def relative_run_dir(run_dir: str, top: str) -> str:
    """``run_dir`` relative to the source path it was found under (for redaction)."""
    try:
        rel = os.path.relpath(run_dir, os.path.realpath(top))
    except ValueError:
        return Path(run_dir).name
    return "." if rel == "." else rel
