"""``det-lite experiment create``'s notice of which ``determined`` a trial imports, and the
entrypoint check on Determined trials."""

from __future__ import annotations

import os

import pytest

from determined_lite.compat import determined_notice, imports_determined
from determined_lite.experiment import check_entrypoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(REPO, "tests", "fixtures", "determined_trial")


@pytest.mark.parametrize(
    "source, imports",
    [
        ("import determined as det\n", True),
        ("import determined\n", True),
        ("from determined import pytorch\n", True),
        ("from determined.pytorch import DataLoader\n", True),
        ("if True:\n    import determined.pytorch.samplers as s\n", True),
        ("import os, determined\n", True),
        ("def f():\n    from determined import pytorch\n", True),
        ("from . import determined\n", False),  # a module of the trial's own package
        ("import determined_lite\n", False),
        ("from determined_lite.pytorch import DataLoader\n", False),
        ("# import determined\nx = 'import determined'\n", False),
        ("import determined as det\ndef broken(:\n", False),  # unparsable: skipped
    ],
)
def test_imports_determined_scans_python_files(tmp_path, source, imports):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.py").write_text(source)
    (tmp_path / "notes.txt").write_text("import determined\n")
    assert imports_determined(str(tmp_path)) is imports


def test_no_notice_when_the_trial_does_not_import_determined():
    linear = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
    assert determined_notice(linear) is None


def test_notice_names_the_alias_when_no_determined_is_installed():
    assert determined_notice(FIXTURE) == (
        "trial code imports 'determined': no Determined installation found, so it gets "
        "det-lite's compatibility alias (determined.pytorch -> determined_lite.pytorch)"
    )


def test_notice_warns_about_a_real_determined_on_the_configs_pythonpath(tmp_path):
    (tmp_path / "determined").mkdir()
    (tmp_path / "determined" / "__init__.py").write_text("")
    notice = determined_notice(FIXTURE, pythonpath=[str(tmp_path)])
    assert notice == (
        "warning: trial code imports 'determined' and a real Determined is installed at "
        f"{tmp_path / 'determined' / '__init__.py'}: the trial gets that package, not det-lite's "
        "alias, and det-lite can only run trials built on its own classes (uninstall determined, "
        "or take it off PYTHONPATH, to use the alias)"
    )


def test_entrypoint_check_accepts_trials_built_on_determined_pytorch():
    assert check_entrypoint("model_def:Trial", FIXTURE) is None
    assert check_entrypoint("model_def:NewStyleTrial", FIXTURE) is None
    problem = check_entrypoint("model_def:NoSuchTrial", FIXTURE)
    assert problem is not None and "defines no 'NoSuchTrial'" in problem


def test_the_fixture_uses_only_determined_names():
    with open(os.path.join(FIXTURE, "model_def.py")) as f:
        source = f.read()
    assert "determined_lite" not in source and "det_lite" not in source
    assert "from determined.pytorch import DataLoader, PyTorchTrial, PyTorchTrialContext, samplers" in source


def test_only_the_entrypoints_own_modules_count(tmp_path):
    # Files beside the trial that it never imports (tests, fixtures) do not make it a Determined
    # trial; a module it imports, directly or through a package, does.
    (tmp_path / "model_def.py").write_text("from lib import layers\nfrom . import nothing_here\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("")
    (tmp_path / "lib" / "layers.py").write_text("from .blocks import Block\n")
    (tmp_path / "lib" / "blocks.py").write_text("import torch\nclass Block: pass\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_old.py").write_text("import determined.pytorch\n")
    assert imports_determined(str(tmp_path)) is True  # the whole directory: the old rule
    assert imports_determined(str(tmp_path), "model_def") is False
    assert determined_notice(str(tmp_path), module="model_def") is None
    (tmp_path / "lib" / "blocks.py").write_text("from determined.pytorch import PyTorchTrial\n")
    assert imports_determined(str(tmp_path), "model_def") is True


@pytest.mark.slow
def test_the_flagship_run_from_the_repo_root_prints_no_determined_notice():
    # The repo root holds Determined-style test fixtures; the flagship's trial imports none.
    assert imports_determined(REPO) is True
    assert determined_notice(REPO, module="examples.digits.model_def") is None
