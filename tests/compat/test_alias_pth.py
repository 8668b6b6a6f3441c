"""``import determined`` in any process of an environment with det-lite installed and no real
Determined: ``determined_lite_alias.pth`` (``setup.py`` installs it at the root of
site-packages) registers ``_determined_lite_alias.AliasFinder`` at interpreter start.

The runtime checks put the repository's .pth in a user site-packages of their own
(``PYTHONUSERBASE``), which Python reads at start as it reads the environment's, and run
``python3 local.py`` as a Determined user would; the build check reads the wheels setuptools
makes (regular and editable) for the .pth.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from typing import Dict

import pytest

from tests.cli.test_run import SCRIPT
from tests.compat.test_determined_trial import weights
from tests.timing import budget

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "determined_scripts")
PTH = "determined_lite_alias.pth"

pytestmark = pytest.mark.skipif(not site.ENABLE_USER_SITE, reason="needs Python's user site-packages")


def env_with_pth(tmp_path) -> Dict[str, str]:
    """An environment whose interpreters read the repository's .pth at start."""
    base = tmp_path / "userbase"
    code = "import site, sys; print(site.getusersitepackages())"
    env = dict(os.environ, PYTHONUSERBASE=str(base), PYTHONPATH=REPO, DET_LITE_PROGRESS="0")
    user_site = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    os.makedirs(user_site)
    shutil.copy(os.path.join(REPO, PTH), user_site)
    return env


def python3(args, tmp_path, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=budget(120),
    )


@pytest.mark.slow
def test_plain_python3_runs_a_determined_local_mode_script(tmp_path):
    """``python3 local.py`` (Determined's local mode, no det-lite in the script): it runs as
    under ``det-lite run`` (failed before: ``No module named 'determined'``)."""
    (tmp_path / "local.py").write_text(SCRIPT.format(fixtures=FIXTURES, ckpts=str(tmp_path)))
    proc = python3(["local.py", "3"], tmp_path, env_with_pth(tmp_path))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "argv: ['local.py', '3'] info: None" in proc.stdout
    assert f"weight: {weights(4, gamma=1.0)[-1]!r}" in proc.stdout


def test_a_real_determined_wins_and_the_finder_can_be_turned_off(tmp_path):
    """A real ``determined`` on the path is imported, never the alias; nothing imports det-lite
    at start; ``DET_LITE_NO_ALIAS=1`` leaves ``import determined`` to Python."""
    env = env_with_pth(tmp_path)
    check = (
        "import sys; assert 'determined_lite' not in sys.modules; import determined; print(determined.REAL)"
    )
    real = tmp_path / "site" / "determined"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = 'real'\n")
    proc = python3(
        ["-c", check], tmp_path, dict(env, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), REPO]))
    )
    assert proc.stdout.strip() == "real", proc.stdout + proc.stderr
    proc = python3(["-c", "import determined"], tmp_path, dict(env, DET_LITE_NO_ALIAS="1"))
    assert proc.returncode == 1 and "No module named 'determined'" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wheel", "editable"])
def test_the_wheels_install_the_pth(tmp_path, kind):
    """``pip install`` and ``pip install -e`` both put the .pth at the root of site-packages."""
    src = tmp_path / "src"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        if os.path.isfile(os.path.join(REPO, name)):
            os.makedirs(src / os.path.dirname(name), exist_ok=True)
            shutil.copy(os.path.join(REPO, name), src / name)
    code = textwrap.dedent(
        f"""
        from setuptools import build_meta
        print(build_meta.build_{kind}({str(tmp_path)!r}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=str(src), capture_output=True, text=True, timeout=budget(300)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheel = tmp_path / proc.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as z:
        assert z.read(PTH).decode() == open(os.path.join(REPO, PTH)).read()
        if kind == "wheel":
            assert "_determined_lite_alias.py" in z.namelist()


def test_a_pth_whose_module_is_gone_is_silent(tmp_path):
    """A checkout removed after ``pip install -e`` leaves the .pth behind: its line finds no
    ``_determined_lite_alias`` and Python starts with no traceback (site prints one for a .pth
    line that raises)."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    shutil.copy(os.path.join(REPO, PTH), site_dir)
    code = (
        "import sys, site\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        "sys.modules.pop('_determined_lite_alias', None)\n"
        f"site.addsitedir({str(site_dir)!r})\n"
        "print('_determined_lite_alias' in sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))  # the repository is not on the path
    proc = python3(["-c", code], tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.strip() == "False"
