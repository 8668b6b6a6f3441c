"""The ``determined`` alias: det-lite's own objects under Determined's names, never over a real one.

Each check runs in a fresh interpreter so that this test process's ``sys.path`` and
``sys.modules`` stay untouched (the alias is meant for worker processes only).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.timing import budget

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(code: str, pythonpath: str = "", cwd: str = REPO) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, REPO) if p)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=budget(120),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_the_alias_re_exports_det_lite_objects_under_determineds_names():
    out = run_python(
        """
        import determined_lite, determined_lite.pytorch as lite
        from determined_lite.compat import install_alias, alias_installed
        assert not alias_installed()
        assert install_alias() is True and alias_installed() and install_alias() is True

        import determined as det
        from determined import pytorch
        from determined.pytorch import DataLoader, PyTorchTrial, PyTorchTrialContext, samplers
        import determined.pytorch.samplers
        from determined.tensorboard.metric_writers.pytorch import TorchWriter
        from determined_lite.tensorboard.metric_writers.pytorch import TorchWriter as LiteWriter

        assert det.InvalidHP is determined_lite.InvalidHP
        assert det.pytorch is pytorch and pytorch.Reducer is lite.Reducer
        assert (DataLoader, PyTorchTrial, PyTorchTrialContext) == (
            lite.DataLoader, lite.PyTorchTrial, lite.PyTorchTrialContext)
        assert det.TrialContext is lite.PyTorchTrialContext and TorchWriter is LiteWriter
        assert det.pytorch.LRScheduler.StepMode.STEP_EVERY_EPOCH is lite.LRScheduler.StepMode.STEP_EVERY_EPOCH
        missing = [n for n in lite.__all__ if n != "samplers" and getattr(pytorch, n) is not getattr(lite, n)]
        assert missing == [], missing
        assert sorted(samplers.__all__) == sorted(lite.samplers.__all__)
        assert all(getattr(samplers, n) is getattr(lite.samplers, n) for n in lite.samplers.__all__)
        assert determined.pytorch.samplers is samplers
        assert det.get_cluster_info() is None and det.__version__ == determined_lite.__version__
        import determined_lite.core as lite_core
        from determined import core

        assert det.core is core and core.init is lite_core.init
        assert all(getattr(core, n) is getattr(lite_core, n) for n in lite_core.__all__)
        try:
            det.keras
        except AttributeError as e:
            print("ERROR:", e)
        for statement in ("import determined.keras", "import determined.pytorch.deepspeed"):
            try:
                exec(statement)
            except ModuleNotFoundError as e:
                print("IMPORT:", e)
        import determined.tensorboard.metric_writers.pytorch  # what the alias has still imports
        print("FILE:", det.__file__)
        """
    )
    assert "IMPORT: cannot import 'determined.keras': det-lite's 'determined' alias provides" in out
    assert "IMPORT: cannot import 'determined.pytorch.deepspeed': det-lite's 'determined' alias" in out
    assert "ERROR: module 'determined' has no attribute 'keras': det-lite's 'determined' alias" in out
    assert "docs/migrating-from-determined.md" in out
    assert os.path.join("determined_lite", "_alias", "determined", "__init__.py") in out


def test_a_real_determined_package_always_wins(tmp_path):
    real = tmp_path / "site" / "determined"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = 'yes'\n")
    out = run_python(
        """
        import sys
        from determined_lite.compat import ALIAS_PATH, alias_installed, find_real_determined, install_alias
        print("FOUND:", find_real_determined())
        assert install_alias() is False and not alias_installed()
        assert ALIAS_PATH not in sys.path
        import determined
        print("REAL:", determined.REAL)
        assert install_alias() is False  # already imported: still the real one
        """,
        pythonpath=str(tmp_path / "site"),
    )
    assert f"FOUND: {real / '__init__.py'}" in out
    assert "REAL: yes" in out


@pytest.mark.slow
def test_a_directory_named_determined_without_init_is_not_an_installation(tmp_path):
    (tmp_path / "data" / "determined").mkdir(parents=True)
    out = run_python(
        """
        from determined_lite.compat import find_real_determined, install_alias
        assert find_real_determined() is None
        assert install_alias() is True
        import determined
        print("ALIAS:", determined.__det_lite_alias__)
        """,
        pythonpath=str(tmp_path / "data"),
    )
    assert "ALIAS: True" in out


def test_the_alias_goes_last_on_sys_path():
    out = run_python(
        """
        import sys
        from determined_lite.compat import ALIAS_PATH, install_alias
        install_alias()
        print(sys.path[-1] == ALIAS_PATH)
        """
    )
    assert out.strip() == "True"


@pytest.mark.slow
def test_a_finder_cached_for_the_alias_entry_does_not_hide_it():
    """``install_alias`` drops a finder cached for the alias's path entry (as left by an earlier
    path that held it) instead of invalidating every cached finder."""
    out = run_python(
        """
        import sys
        from determined_lite.compat import ALIAS_PATH, install_alias
        sys.path_importer_cache[ALIAS_PATH] = None  # "no finder for this entry", cached
        assert install_alias() is True
        import determined
        print(determined.__file__.startswith(ALIAS_PATH + "/"), ALIAS_PATH in sys.path_importer_cache)
        """
    )
    assert out.split() == ["True", "True"]
