"""The context directory: which files a trial gets, its snapshot, and its copies in checkpoints.

``read_context`` walks a context directory once and decides what belongs to it: ``.detignore``
(gitignore syntax, read with ``pathspec`` as Determined's CLI does) after det-lite's default
patterns, symbolic links kept as links when they stay inside the directory (one that leaves it
for a readable regular file brings that file's content, as Determined's CLI uploads it), and
Determined's size limit (95 MiB). ``snapshot_context`` copies the result into a directory that
``experiment create`` owns (``<home>/experiments/<id>/context/``), with a manifest at its root;
``copy_context`` copies a context: hard links to a snapshot's files (a copy where the filesystem
refuses links), or a filtered copy of a plain directory or file (a checkpoint's ``code/``:
``_code.py``). Standard library and ``pathspec`` only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import pathspec

from determined_lite._errors import is_disk_full

DETIGNORE = ".detignore"
SNAPSHOT_MANIFEST = ".det-lite-snapshot.json"
# Determined's CLI refuses contexts over 95 MiB (``constants.MAX_CONTEXT_SIZE``).
MAX_CONTEXT_BYTES = 95 * 2**20
MANIFEST_FORMAT = 1
# Patterns applied before the context's own .detignore (whose lines win, ``!`` re-includes):
# hidden files and folders (.git, .env, tokens, virtual environments), caches, build metadata.
DEFAULT_IGNORE: Tuple[str, ...] = (
    ".*",
    "__pycache__/",
    "*.py[co]",
    "*$py.class",
    "*.egg-info/",
    "venv/",
    "node_modules/",
)
_BIGGEST_SHOWN = 3
_NO_WRITE = ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


class ContextError(ValueError):
    """A context directory det-lite refuses: a link out of it, too many bytes, an unreadable file."""


@dataclasses.dataclass
class ContextFiles:
    """What a context directory contributes: paths relative to ``root`` (POSIX separators)."""

    root: str
    files: Dict[str, int] = dataclasses.field(default_factory=dict)  # path -> size in bytes
    dirs: List[str] = dataclasses.field(default_factory=list)
    links: Dict[str, str] = dataclasses.field(default_factory=dict)  # path -> relative target
    # Links to a regular file outside the context: path -> the file copied in its place.
    copied_links: Dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(self.files.values())

    def biggest(self, n: int = _BIGGEST_SHOWN) -> List[Tuple[str, int]]:
        """The ``n`` largest files, largest first."""
        return sorted(self.files.items(), key=lambda item: (-item[1], item[0]))[:n]


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _ignore_spec(root: str) -> pathspec.PathSpec:
    """det-lite's patterns, then the root's ``.detignore``, read as git reads ``.gitignore``: a
    UTF-8 byte-order mark at its start is skipped (editors on Windows write one)."""
    lines = list(DEFAULT_IGNORE)
    path = os.path.join(root, DETIGNORE)
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8-sig") as f:
                lines.extend(f.read().splitlines())
        except (OSError, UnicodeDecodeError) as e:
            raise ContextError(f"{path}: cannot read it: {e}") from None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def read_context(
    context_dir: str, *, exclude: Iterable[str] = (), limit: Optional[int] = MAX_CONTEXT_BYTES
) -> ContextFiles:
    """The files of ``context_dir`` a trial gets; ``ContextError`` for a link that leaves it, or for
    more than ``limit`` bytes (the biggest files named). Directories in ``exclude`` (det-lite's
    home, checkpoint roots) are skipped wherever they sit; links are never followed."""
    root = os.path.realpath(context_dir)
    if not os.path.isdir(root):
        raise ContextError(f"context directory {context_dir!r} does not exist or is not a directory")
    spec = _ignore_spec(root)
    skip = {os.path.realpath(p) for p in exclude}
    found = ContextFiles(root=root)

    def walk_error(e: OSError) -> None:
        raise ContextError(f"context directory {context_dir}: cannot read {e.filename}: {e.strerror}")

    for parent, dirs, files in os.walk(root, onerror=walk_error):
        rel_parent = os.path.relpath(parent, root)
        kept_dirs = []
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(parent, name)
            rel = name if rel_parent == "." else f"{rel_parent}/{name}".replace(os.sep, "/")
            is_dir = name in dirs and not os.path.islink(path)
            if name == DETIGNORE or spec.match_file(rel) or (is_dir and spec.match_file(rel + "/")):
                continue
            if os.path.islink(path):
                _add_link(found, context_dir, path, rel, parent, spec)
            elif is_dir:
                if path not in skip:
                    kept_dirs.append(name)
                    found.dirs.append(rel)
            else:
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode):  # sockets, fifos and devices are not code
                    found.files[rel] = st.st_size
        dirs[:] = kept_dirs
    if limit is not None and found.total_bytes > limit:
        biggest = ", ".join(f"{path} ({_mib(size)})" for path, size in found.biggest())
        raise ContextError(
            f"context directory {context_dir} holds {_mib(found.total_bytes)} of files, over the "
            f"{limit / 2**20:.0f} MiB limit; biggest: {biggest}; list what the trial does not need "
            f"in {os.path.join(context_dir, DETIGNORE)}"
        )
    return found


def _add_link(
    found: ContextFiles, shown: str, path: str, rel: str, parent: str, spec: pathspec.PathSpec
) -> None:
    """Keep a link that resolves inside the context (as a relative link); one that leaves it
    for a readable regular file is that file's content, as Determined's CLI uploads it; a link
    out of the context to anything else is refused."""
    target = os.readlink(path)
    resolved = os.path.realpath(path)
    if os.path.isdir(resolved) and spec.match_file(rel + "/"):
        return
    if _inside(resolved, found.root):
        found.links[rel] = os.path.relpath(resolved, parent)
        return
    problem = _unusable(resolved)
    if problem is not None:
        where = "" if resolved == target else f" (to {resolved})"
        raise ContextError(
            f"context directory {shown}: symbolic link {rel} -> {target} points outside it{where}, "
            f"to {problem}; remove it or list it in {DETIGNORE}"
        )
    found.files[rel] = os.stat(resolved).st_size
    found.copied_links[rel] = resolved


def _unusable(path: str) -> Optional[str]:
    """Why the file a link leads to cannot be copied in its place (None: it can)."""
    try:
        st = os.stat(path)
    except OSError:
        return "nothing (a dangling link)"
    if not stat.S_ISREG(st.st_mode):
        return "something that is not a regular file"
    if not os.access(path, os.R_OK):
        return "a file it cannot read"
    return None


def _copy_file(source: str, dest: str, hard_link: bool) -> None:
    if hard_link:
        try:
            os.link(source, dest)
            return
        except OSError:  # another filesystem, too many links, or links not supported: copy
            pass
    shutil.copy2(source, dest)


def materialize(found: ContextFiles, dest: str, hard_link: bool, read_only: bool) -> None:
    """Make ``dest`` (created) hold ``found``'s directories, files (hard links or copies) and links."""
    os.makedirs(dest)
    for rel in found.dirs:
        os.makedirs(os.path.join(dest, rel), exist_ok=True)
    for rel in found.files:
        source = found.copied_links.get(rel) or os.path.join(found.root, rel)
        target = os.path.join(dest, rel)
        try:
            _copy_file(source, target, hard_link)
        except FileNotFoundError:
            if hard_link:
                continue  # removed from a snapshot by the trial that runs in it: nothing to keep
            raise ContextError(f"context directory {found.root}: {rel} disappeared while copying") from None
        except OSError as e:
            if is_disk_full(e):
                raise  # the destination is full, not the context wrong: the caller says where
            raise ContextError(f"context directory {found.root}: cannot copy {rel}: {e.strerror}") from None
        if read_only:
            os.chmod(target, os.stat(target).st_mode & _NO_WRITE)
    for rel, target in found.links.items():
        os.symlink(target, os.path.join(dest, rel))


def snapshot_context(found: ContextFiles, dest: str, source: Optional[str] = None) -> None:
    """Copy ``found`` to ``dest`` (created) with a manifest at its root; files become read-only,
    since checkpoints share them through hard links."""
    materialize(found, dest, hard_link=False, read_only=True)
    manifest = {
        "format": MANIFEST_FORMAT,
        "source": source or found.root,
        "created": time.time(),
        "bytes": found.total_bytes,
        "files": sorted(found.files),
        "dirs": found.dirs,
        "links": found.links,
    }
    path = os.path.join(dest, SNAPSHOT_MANIFEST)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    os.chmod(path, os.stat(path).st_mode & _NO_WRITE)


def read_snapshot(directory: str) -> Optional[ContextFiles]:
    """The files of a snapshot made by ``snapshot_context`` (its manifest), or None when
    ``directory`` is not one."""
    path = os.path.join(directory, SNAPSHOT_MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ContextError(f"{path}: unreadable snapshot manifest: {e}") from None
    files = {rel: 0 for rel in manifest["files"]}
    files[SNAPSHOT_MANIFEST] = 0
    return ContextFiles(
        root=os.path.realpath(directory), files=files, dirs=manifest["dirs"], links=manifest["links"]
    )


def copy_context(
    source: str, dest: str, *, exclude: Sequence[str] = (), limit: Optional[int] = MAX_CONTEXT_BYTES
) -> None:
    """Put the context ``source`` into ``dest`` (created), e.g. a checkpoint's ``code/``.

    A snapshot's files are hard-linked (one copy on disk however many checkpoints hold them);
    a plain directory is read with :func:`read_context` and copied; a single file (a trial's
    module, for runs from plain Python) is copied alone.
    """
    if os.path.isfile(source):
        os.makedirs(dest)
        shutil.copy2(source, dest)
        return
    snapshot = read_snapshot(source)
    if snapshot is not None:
        materialize(snapshot, dest, hard_link=True, read_only=False)
        return
    materialize(read_context(source, exclude=exclude, limit=limit), dest, hard_link=False, read_only=False)
