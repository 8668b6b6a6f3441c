"""Nothing read from checkpoint storage lands outside its destination.

A stored checkpoint is a set of names under ``<root>/<uuid>/``: object keys in a bucket, paths
and symbolic links in a shared file system. Whoever can write there chooses them, so every
reader (download, local copies, exports) checks all of a checkpoint's names here before it
writes anything: a name is relative, its segments are neither empty nor ``.`` nor ``..``, no
name is both an object and a folder of another, and the path it gives stays inside the
destination. A symbolic link copied as a link is relative and resolves inside the tree it is
copied from, resolved from the tree's top (never by way of a ``..`` above it). Anything else
is an :class:`UnsafeNameError` (a :class:`StorageError`) naming it, in one line; nothing has
been written then. Uploads build their keys with the same check.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, List, Optional, Tuple

from determined_lite._errors import ActionRequired

_MAX_HOPS = 40  # links followed to resolve one (Linux's limit)


class StorageError(ActionRequired, OSError):
    """Checkpoint storage failed for good (permission, missing bucket) or past its retries."""


class UnsafeNameError(StorageError):
    """A name in a stored checkpoint that would be written outside its destination."""


def name_problem(rel: str) -> Optional[str]:
    """Why ``rel`` (``/``-separated, relative to a checkpoint) cannot be written inside a
    destination directory; None when it can."""
    if "\0" in rel:
        return "a NUL character in its name"
    if rel.startswith("/"):
        return "an absolute name"
    segments = rel.split("/")
    for segment, what in (("..", "a '..'"), (".", "a '.'"), ("", "an empty")):
        if segment in segments:
            return f"{what} segment in its name"
    return None


def stored_names(prefix: str, names: Iterable[str], shown: str) -> List[Tuple[str, str]]:
    """``(name, relative name)`` for each of ``names`` (a listing of ``prefix``), each checked
    (:class:`UnsafeNameError` naming the first that cannot be written inside a destination).
    A name ending in ``/`` is a folder (a cloud console's folder marker). ``shown``: the
    storage's URL, for the message."""
    top = prefix.strip("/") + "/"
    out: List[Tuple[str, str]] = []
    for name in names:
        full = str(name).lstrip("/")  # memory:// and the local filesystem add a leading "/"
        rel = full[len(top) :] if full.startswith(top) else None
        if rel == "":
            continue  # the checkpoint's own folder marker
        problem = "not under the checkpoint's prefix" if rel is None else name_problem(rel.rstrip("/"))
        if problem is not None or rel is None:
            raise _refused(shown, full, problem)
        out.append((str(name), rel))
    files = {rel for _, rel in out if not rel.endswith("/")}
    for rel in sorted(rel for _, rel in out):
        parts = rel.rstrip("/").split("/")
        for i in range(1, len(parts) + rel.endswith("/")):  # a folder marker: its own name too
            if "/".join(parts[:i]) in files:
                raise _refused(shown, top + rel, f"{'/'.join(parts[:i])!r} is an object, not a folder")
    return out


def _refused(shown: str, name: str, problem: object) -> UnsafeNameError:
    return UnsafeNameError(
        f"checkpoint storage {shown}: refused to read {name!r} ({problem}): a stored name must stay "
        "inside its destination; nothing was written"
    )


def inside(dest: str, rel: str) -> str:
    """``dest``'s path for the checked relative name ``rel``; :class:`UnsafeNameError` if it
    resolves outside ``dest`` all the same (a link in ``dest``, another system's separators)."""
    problem = name_problem(rel.rstrip("/"))
    target = os.path.join(dest, *rel.rstrip("/").split("/"))
    real_dest = os.path.realpath(dest)
    if problem is None and os.path.commonpath([real_dest, os.path.realpath(target)]) != real_dest:
        problem = "its path resolves elsewhere"
    if problem is not None:
        raise UnsafeNameError(
            f"refused to write {rel!r} ({problem}): it would be outside {dest}; nothing was written"
        )
    return target


def link_problem(root: str, link: str, skip: Callable[[str], bool] = lambda path: False) -> Optional[str]:
    """Why the symbolic link ``link`` (in the tree ``root``) would point outside a copy of the
    tree (links copied as links); None when it resolves inside. Resolved as the kernel resolves
    it, links within the tree followed, but from the tree's top: a ``..`` above it is outside
    even when it comes back in by the tree's own name, which a copy does not have."""
    resolved: List[str] = os.path.relpath(os.path.dirname(link), root).split(os.sep)
    resolved = [] if resolved == ["."] else resolved
    todo = os.readlink(link).split("/")
    if todo[0] == "":
        return f"to the absolute path {os.readlink(link)}"
    hops = 0
    while todo:
        segment = todo.pop(0)
        if segment in ("", "."):
            continue
        if segment == "..":
            if not resolved:
                return f"to {os.readlink(link)}, outside the checkpoint"
            resolved.pop()
            continue
        resolved.append(segment)
        path = os.path.join(root, *resolved)
        if os.path.islink(path) and not skip(path):
            hops += 1
            target = os.readlink(path)
            if hops > _MAX_HOPS or target.startswith("/"):
                return f"to {os.readlink(link)}, through {os.path.join(*resolved)} -> {target}"
            resolved.pop()
            todo = target.split("/") + todo
    return None


def check_links(root: str, shown: str, skip: Callable[[str], bool] = lambda path: False) -> None:
    """:class:`UnsafeNameError` for the first symbolic link under ``root`` (links not followed)
    that would point outside a copy of it; ``skip(path)``: a link the caller copies otherwise
    (a checkpoint's ``code`` link to its experiment's code)."""
    for parent, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = os.path.join(parent, name)
            if not os.path.islink(path) or skip(path):
                continue
            problem = link_problem(root, path, skip)
            if problem is not None:
                rel = os.path.relpath(path, root)
                raise UnsafeNameError(
                    f"checkpoint {shown}: refused to copy the symbolic link {rel} ({problem}): a "
                    "copied link must stay inside the checkpoint; nothing was written"
                )
