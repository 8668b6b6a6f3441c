"""`experiment create` snapshots the context directory once: links out of it and oversized contexts
are refused (exit 2, nothing recorded), trials run from the snapshot, and checkpoints hard-link it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from determined_lite.storage import SNAPSHOT_MANIFEST, disk_usage
from tests.cli_helpers import activate, cli, describe, pause_foreground, wait_for_batches, write_config
from tests.experiment.test_experiment_e2e import LINEAR, REPO, assert_closed_form_validations, weight_after

pytestmark = pytest.mark.timeout(240)


def linear_context(tmp_path: Path) -> Path:
    ctx = tmp_path / "ctx"
    shutil.copytree(LINEAR, ctx, ignore=shutil.ignore_patterns("__pycache__"))
    return ctx


def assert_nothing_recorded(home: Path) -> None:
    assert json.loads(cli("experiment", "list", "--json", check=True).stdout) == []
    experiments = home / "experiments"
    assert not experiments.exists() or os.listdir(experiments) == []


def test_a_link_out_of_the_context_is_refused_at_create(tmp_path: Path, _det_lite_home: Path) -> None:
    ctx = linear_context(tmp_path)
    os.symlink("/etc", ctx / "etc")
    proc = cli("experiment", "create", str(ctx / "const.yaml"), str(ctx))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        f"det-lite: error: context directory {ctx}: symbolic link etc -> /etc points outside it, "
        "to something that is not a regular file; remove it or list it in .detignore"
    ]
    assert_nothing_recorded(_det_lite_home)

    # Listed in .detignore, the link is left out and the experiment runs.
    (ctx / ".detignore").write_text("etc\n")
    proc = cli("experiment", "create", str(ctx / "const.yaml"), str(ctx), "--test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (ckpt,) = describe(1)["trials"][0]["checkpoints"]
    assert sorted(os.listdir(Path(ckpt["path"]) / "code")) == [
        SNAPSHOT_MANIFEST,
        "__init__.py",
        "const.yaml",
        "model_def.py",
    ]


def test_a_link_out_of_the_context_to_a_file_runs_its_content(tmp_path: Path, _det_lite_home: Path) -> None:
    # As Determined's e2e mnist_pytorch fixture (links to the tutorial's files): the trial's
    # module is a link out of the context; its content is copied, with one line naming it.
    ctx = linear_context(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.replace(ctx / "model_def.py", shared / "model_def.py")
    os.symlink("../shared/model_def.py", ctx / "model_def.py")
    proc = cli("experiment", "create", str(ctx / "const.yaml"), str(ctx), "--test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = f"context: model_def.py links outside the context directory, to {shared / 'model_def.py'}"
    assert [x for x in proc.stdout.splitlines() if x.startswith("context: ")] == [
        f"{line}: its content is copied"
    ]
    snapshot = _det_lite_home / "experiments" / "1" / "context" / "model_def.py"
    assert not snapshot.is_symlink()
    assert snapshot.read_text() == (shared / "model_def.py").read_text()
    assert describe(1)["trials"][0]["state"] == "COMPLETED"


def test_an_oversized_context_is_refused_naming_the_biggest_files(
    tmp_path: Path, _det_lite_home: Path
) -> None:
    ctx = linear_context(tmp_path)
    with open(ctx / "big.bin", "wb") as f:
        f.truncate(96 * 2**20)  # sparse: the size counts, the disk stays empty
    (ctx / "data").mkdir()
    (ctx / "data" / "mid.bin").write_bytes(b"\0" * 2**20)
    proc = cli("experiment", "create", str(ctx / "const.yaml"), str(ctx))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line == (
        f"det-lite: error: context directory {ctx} holds 97.0 MiB of files, over the 95 MiB limit; "
        "biggest: big.bin (96.0 MiB), data/mid.bin (1.0 MiB), model_def.py (0.0 MiB); list what the "
        f"trial does not need in {ctx / '.detignore'}"
    )
    assert_nothing_recorded(_det_lite_home)

    (ctx / ".detignore").write_text("*.bin\n")
    proc = cli("experiment", "create", str(ctx / "const.yaml"), str(ctx), "--test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (_det_lite_home / "experiments" / "1" / "context" / "big.bin").exists()


def test_an_entrypoint_excluded_by_detignore_is_refused(tmp_path: Path, _det_lite_home: Path) -> None:
    ctx = linear_context(tmp_path)
    (ctx / ".detignore").write_text("model_def.py\n")
    proc = cli("experiment", "create", str(ctx / "const.yaml"), str(ctx))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"det-lite: error: {ctx / 'const.yaml'}: entrypoint 'model_def:LinearTrial': no module "
        f"'model_def' in context directory {ctx} (excluded by .detignore or det-lite's default patterns)"
    ]
    assert_nothing_recorded(_det_lite_home)


def test_activate_runs_the_code_of_create_not_the_edited_original(
    tmp_path: Path, _det_lite_home: Path
) -> None:
    ctx = linear_context(tmp_path)
    original = (ctx / "model_def.py").read_text()
    config = write_config(
        str(ctx / "const.yaml"),
        tmp_path,
        **{"hyperparameters.sleep_s": 0.1, "searcher.max_length": {"batches": 24}},
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", config, str(ctx)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    wait_for_batches(1, 4, proc)
    pause_foreground(1, proc)
    assert describe(1)["state"] == "PAUSED"

    (ctx / "model_def.py").write_text('raise RuntimeError("edited while the experiment was paused")\n')
    activate(1)
    exp = describe(1)
    assert exp["state"] == "COMPLETED" and exp["context_dir"] == str(ctx)
    (trial,) = exp["trials"]
    assert trial["total_batches"] == 24
    assert_closed_form_validations(trial)
    for ckpt in trial["checkpoints"]:
        assert (Path(ckpt["path"]) / "code" / "model_def.py").read_text() == original


def test_checkpoints_hard_link_the_snapshot_and_stay_loadable(tmp_path: Path, _det_lite_home: Path) -> None:
    ctx = linear_context(tmp_path)
    (ctx / "vocab.bin").write_bytes(os.urandom(8 * 2**20))
    (ctx / "data").mkdir()
    (ctx / "data" / "train.csv").write_text("1,2\n")
    (ctx / ".detignore").write_text("data/\n")
    config = write_config(
        str(ctx / "const.yaml"),
        tmp_path,
        **{
            "checkpoint_policy": "all",
            "min_checkpoint_period": {"batches": 2},
            "checkpoint_storage": {"save_trial_latest": 6, "save_trial_best": 0},
        },
    )
    proc = cli("experiment", "create", config, str(ctx))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    checkpoints = trial["checkpoints"]
    assert [c["total_batches"] for c in checkpoints] == [2, 4, 6, 8, 10, 12]

    snapshot = _det_lite_home / "experiments" / "1" / "context"
    assert not (snapshot / "data").exists()
    inode = os.stat(snapshot / "vocab.bin").st_ino
    for c in checkpoints:
        code = Path(c["path"]) / "code"
        assert os.stat(code / "vocab.bin").st_ino == inode
        assert not (code / "data").exists()
    # Linked once for all of them (issue 28, item 7: was once per checkpoint): the snapshot's
    # file and its sealed code's link.
    assert os.stat(snapshot / "vocab.bin").st_nlink == 2
    # Six checkpoints hold the 8 MiB file once (a copy each made 48 MiB).
    assert disk_usage([c["path"] for c in checkpoints]) < 9 * 2**20

    dest = tmp_path / "exported"
    cli("checkpoint", "export", checkpoints[-1]["uuid"], str(dest), check=True)
    assert os.stat(dest / "code" / "vocab.bin").st_nlink == 1  # an export is a copy of its own
    from determined_lite.pytorch import load_trial_from_checkpoint_path

    # The export's code/ is imported only when trusted (its own checkpoint, so it is).
    restored = load_trial_from_checkpoint_path(str(dest), trust=True)
    assert restored.model.weight.item() == pytest.approx(weight_after(12), rel=1e-12)
