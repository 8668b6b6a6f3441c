"""scripts/check_structure.py's rule on private names: a planted reach into another module's
private names is flagged, line by line; a class's own members, namedtuple's API, libraries'
names and private submodules are not."""

from __future__ import annotations

import importlib.util
import os
import textwrap
from pathlib import Path

from tests.cli_helpers import REPO


def _checker():
    spec = importlib.util.spec_from_file_location(
        "check_structure", os.path.join(REPO, "scripts", "check_structure.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_a_planted_reach_into_another_modules_private_names_is_flagged(tmp_path):
    root = tmp_path / "pkg"
    _write(root, "__init__.py", "")
    _write(
        root,
        "sub/_owner.py",
        """
        import collections

        _TABLE = {}


        class Owner:
            def __init__(self):
                self._hidden = 1

            def _helper(self):
                return self._hidden

            def _replace(self):  # a name namedtuple's API has too
                return self

            @classmethod
            def _make_one(cls):
                return cls._TABLE_KEY


        def _free():
            return Owner()._helper()  # its own module's: fine
        """,
    )
    _write(root, "sub/__init__.py", "")
    _write(
        root,
        "user.py",
        """
        import os
        from collections import namedtuple

        from pkg.sub import _owner
        from pkg.sub._owner import Owner, _free
        from .sub._owner import _TABLE


        class User(Owner):
            def __init__(self):
                super().__init__()
                self._mine = self._hidden  # self: a class's own (its bases' included)

            def __repr__(self):
                return "User"


        def use(owner):
            point = namedtuple("Point", "x y")(1, 2)
            point = point._replace(x=3)._asdict()
            os._exit  # a library's name
            return owner._helper(), _owner._free(), Owner._make_one()
        """,
    )
    found = _checker().private_accesses(root)
    user = root / "user.py"
    assert found == [
        f"{user}:6: private name of another module: from pkg.sub._owner import _free",
        f"{user}:7: private name of another module: from .sub._owner import _TABLE",
        f"{user}:23: private name of another module: Owner._make_one",
        f"{user}:23: private name of another module: _owner._free",
        f"{user}:23: private name of another module: owner._helper",
    ]


def test_the_package_has_no_reach_into_another_modules_private_names():
    assert _checker().private_accesses(Path(REPO) / "determined_lite") == []
