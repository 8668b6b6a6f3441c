"""The same full-disk behaviour on a really full volume: a tiny tmpfs, mounted in a user and mount
namespace (``unshare -Urm``, no root needed). Skipped where such namespaces are not allowed;
``test_action_required.py`` covers the same paths by injection everywhere."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tests.cli_helpers import REPO, describe, write_config
from tests.experiment.test_experiment_e2e import LINEAR, assert_closed_form_validations
from tests.timing import budget

pytestmark = pytest.mark.timeout(240)

FILLER_TRIAL = '''"""LinearTrial that fills the volume of hparam fill_path at batch fill_at, once."""
import os

from model_def import LinearTrial


class FillerTrial(LinearTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        hp = self.context.get_hparams()
        done = os.path.join(hp["marker_dir"], "filled")
        if batch_idx == hp["fill_at"] and not os.path.exists(done):
            open(done, "w").close()
            try:
                with open(hp["fill_path"], "wb") as f:
                    while True:
                        f.write(b"\\0" * 65536)
            except OSError:
                pass
        return super().train_batch(batch, epoch_idx, batch_idx)
'''


def _namespaces_available(tmp: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp / "probe"
    probe.mkdir()
    command = ["unshare", "-Urm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {probe}"]
    try:
        return subprocess.run(command, capture_output=True, timeout=budget(30)).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


RunInNamespace = Callable[[str], subprocess.CompletedProcess]


@pytest.fixture
def in_namespace(tmp_path: Path) -> RunInNamespace:
    if not _namespaces_available(tmp_path):
        pytest.skip("user and mount namespaces (unshare -Urm) are not available here")

    def run(script: str) -> subprocess.CompletedProcess:
        prelude = f"set -u\ndet_lite() {{ {sys.executable} -m determined_lite.cli \"$@\"; }}\n"
        return subprocess.run(
            ["unshare", "-Urm", "bash", "-c", prelude + script],
            capture_output=True, text=True, timeout=budget(200), cwd=REPO,
        )

    return run


def test_full_checkpoint_volume_pauses_and_activate_resumes(
    tmp_path: Path, in_namespace: RunInNamespace
) -> None:
    context, ckpts, markers = tmp_path / "context", tmp_path / "ckpts", tmp_path / "markers"
    for d in (context, ckpts, markers):
        d.mkdir()
    shutil.copy(os.path.join(LINEAR, "model_def.py"), context / "model_def.py")
    (context / "filler.py").write_text(FILLER_TRIAL)
    config = write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        entrypoint="filler:FillerTrial",
        min_checkpoint_period={"batches": 2},
        checkpoint_storage={"host_path": str(ckpts)},
        **{
            "hyperparameters.fill_at": 5,
            "hyperparameters.fill_path": str(ckpts / ".ballast"),
            "hyperparameters.marker_dir": str(markers),
        },
    )
    out = tmp_path / "out"
    proc = in_namespace(
        f"mount -t tmpfs -o size=4m tmpfs {ckpts}\n"
        f"det_lite experiment create {config} {context} > {out}.create 2>&1; echo $? > {out}.create.rc\n"
        f"rm {ckpts}/.ballast\n"
        f"det_lite experiment activate 1 > {out}.activate 2>&1; echo $? > {out}.activate.rc\n"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    created = Path(f"{out}.create").read_text()
    assert Path(f"{out}.create.rc").read_text().strip() == "1", created
    assert created.count("no space left on") == 1, created
    # The volume fills at batch 5: the next checkpoint that needs more room than is left fails
    # (batch 6 or 8, depending on how much room the filler left: code/ is hard-linked, free).
    written = rf"no space left on {re.escape(str(ckpts))}: the checkpoint at batch [68] could not be written"
    assert re.search(written, created), created
    assert "Traceback" not in created and "restarting" not in created, created
    activated = Path(f"{out}.activate").read_text()
    assert Path(f"{out}.activate.rc").read_text().strip() == "0", activated
    (trial,) = describe(1)["trials"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0 and trial["total_batches"] == 12
    assert_closed_form_validations(trial)


def test_full_home_is_the_one_line_store_error(tmp_path: Path, in_namespace: RunInNamespace) -> None:
    home = tmp_path / "home"
    home.mkdir()
    proc = in_namespace(
        f"mount -t tmpfs -o size=2m tmpfs {home}\n"
        f"export DET_LITE_HOME={home}\n"
        "det_lite experiment list > /dev/null || exit 9\n"
        f"cat /dev/zero > {home}/ballast 2> /dev/null\n"
        f"det_lite experiment create {LINEAR}/const.yaml {LINEAR}\n"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    # The first thing `create` writes is the context snapshot (before the store's row).
    assert line == f"det-lite: error: no space left on {home}: cannot snapshot the context directory {LINEAR}"


def test_home_that_fills_during_a_run_is_one_line(tmp_path: Path, in_namespace: RunInNamespace) -> None:
    """Issue 28.8: a `$DET_LITE_HOME` that fills while a two-slot trial trains printed 4
    tracebacks (the launcher writing the trial's result) before the one-line store error."""
    context, home, markers = tmp_path / "context", tmp_path / "home", tmp_path / "markers"
    for d in (context, home, markers):
        d.mkdir()
    shutil.copy(os.path.join(LINEAR, "model_def.py"), context / "model_def.py")
    (context / "filler.py").write_text(FILLER_TRIAL)
    config = write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        entrypoint="filler:FillerTrial",
        min_checkpoint_period={"batches": 2},
        **{
            "resources.slots_per_trial": 2,
            "hyperparameters.fill_at": 5,
            "hyperparameters.fill_path": str(home / "ballast"),
            "hyperparameters.marker_dir": str(markers),
        },
    )
    proc = in_namespace(
        f"mount -t tmpfs -o size=8m tmpfs {home}\n"
        f"export DET_LITE_HOME={home}\n"
        f"det_lite experiment create {config} {context}\n"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "could not record" not in proc.stdout, proc.stdout
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"det-lite: error: no space left on {home}: the det-lite store"), line
