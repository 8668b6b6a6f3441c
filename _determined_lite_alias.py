"""``import determined`` in any Python process of an environment where det-lite is installed
and Determined is not: det-lite's alias, as ``det-lite run`` gives it (so a Determined
local-mode script runs with plain ``python3 train.py``).

``determined_lite_alias.pth`` (installed at the root of site-packages by ``setup.py``) calls
:func:`register` at interpreter start: it only appends a finder to ``sys.meta_path`` (stdlib
only; det-lite is imported when ``determined`` is). Being last, the finder is asked only when
no other finder found ``determined``, so a real Determined installation always wins.
``DET_LITE_NO_ALIAS=1`` turns it off.
"""

from __future__ import annotations

import os
import sys  # both imported by every interpreter already: registering costs nothing more


class AliasFinder:
    """Finds ``determined`` as det-lite's alias when nothing else did."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> object:
        if name != "determined" or os.environ.get("DET_LITE_NO_ALIAS") == "1":
            return None
        import importlib.machinery

        from determined_lite.compat import ALIAS_PATH, install_alias

        if not install_alias():
            return None
        return importlib.machinery.PathFinder.find_spec(name, [ALIAS_PATH])


def register() -> None:
    """Append :class:`AliasFinder` to ``sys.meta_path`` (once)."""
    if AliasFinder not in sys.meta_path:
        sys.meta_path.append(AliasFinder)  # type: ignore[arg-type]
