"""``import_from_path`` (Determined's ``det.import_from_path``): import a checkpoint's code from
its own directory, and leave ``sys.path`` and ``sys.modules`` as they were.

While the context is open, ``path`` is first on ``sys.path``; modules already imported under a
name the directory provides (the caller's own ``model_def``, say) are set aside so the import
finds the directory's file, and no bytecode is written into it. On exit every module whose file
lies in the directory is forgotten, the set-aside modules come back and ``sys.path`` is restored:
two checkpoints whose code has the same module names each import their own.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Dict, Iterator, Set, Union

_lock = threading.Lock()


def _provided_names(root: str) -> Set[str]:
    """The top-level module names ``root`` provides (``x.py``, packages ``x/``)."""
    names = set()
    for entry in os.listdir(root):
        full = os.path.join(root, entry)
        if entry.endswith(".py"):
            names.add(entry[:-3])
        elif os.path.isfile(os.path.join(full, "__init__.py")):
            names.add(entry)
    return names


def _under(module: object, root: str) -> bool:
    file = getattr(module, "__file__", None)
    return isinstance(file, str) and os.path.abspath(file).startswith(root + os.sep)


@contextlib.contextmanager
def import_from_path(path: Union[str, "os.PathLike[str]"]) -> Iterator[None]:
    """Import from ``path`` inside the ``with`` block; see the module docstring."""
    if not _lock.acquire(blocking=False):
        raise RuntimeError("import_from_path does not nest and is not for several threads at once")
    root = os.path.realpath(os.fspath(path))
    saved_path = list(sys.path)
    saved_bytecode = sys.dont_write_bytecode
    names = _provided_names(root) if os.path.isdir(root) else set()
    set_aside: Dict[str, object] = {
        key: module
        for key, module in list(sys.modules.items())
        if key.partition(".")[0] in names and not _under(module, root)
    }
    for key in set_aside:
        del sys.modules[key]
    sys.path.insert(0, root)
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        for key, module in list(sys.modules.items()):
            if key.partition(".")[0] in names or _under(module, root):
                del sys.modules[key]
        sys.modules.update(set_aside)  # type: ignore[arg-type]
        sys.path[:] = saved_path
        sys.dont_write_bytecode = saved_bytecode
        _lock.release()


__all__ = ["import_from_path"]
