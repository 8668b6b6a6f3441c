"""``checkpoint_storage: {type: gcs}`` and ``{type: azure}`` through the CLI against their
emulators on loopback (gcp-storage-emulator, Azurite; tests/cloud_storage.py): the issue's
"done when" for each cloud, as tests/experiment/test_s3_storage.py checks it for S3."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.cli_helpers import cli, describe
from tests.cloud_storage import (  # noqa: F401 (azurite, gcs_emulator: fixtures)
    AZURITE_KEY,
    LINEAR,
    assert_closed_form,
    azurite,
    gcs_emulator,
    linear_config,
    weight_after,
)

pytestmark = pytest.mark.timeout(240)
PREFIX = "team/runs"


def _one_experiment_in_the_cloud(tmp_path, home, config: dict, root: str, listing, secret="") -> None:
    """Closed-form weights; every checkpoint the store lists is under <root>/<uuid>/ (and only
    those: retention deleted the others); export brings one back from the cloud with its state.
    ``listing()``: the object names in the bucket / container, ``<root>/...``; ``secret``: in
    no output, not in the store's file."""
    path = linear_config(tmp_path, config, min_checkpoint_period={"batches": 4})
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert_closed_form(trial, 12)
    if secret:
        assert secret not in proc.stdout + proc.stderr
        with open(os.path.join(str(home), "det-lite.db"), "rb") as f:
            assert secret.encode() not in f.read()
    (ckpt,) = trial["checkpoints"]  # at 4, 8, 12: retention keeps the last (also the best)
    names = listing()
    assert {n[len(root) + 1 :].split("/")[0] for n in names} == {ckpt["uuid"]}, names
    assert f"{root}/{ckpt['uuid']}/metadata.json" in names
    assert any(n.startswith(f"{root}/{ckpt['uuid']}/code/") for n in names)

    shutil.rmtree(os.path.join(str(home), "checkpoints", ckpt["uuid"]))  # export reads the cloud
    dest = os.path.join(str(tmp_path), "exported")
    cli("checkpoint", "export", ckpt["uuid"], dest, check=True)
    from determined_lite.pytorch import load_trial_from_checkpoint_path

    restored = load_trial_from_checkpoint_path(dest, trust=True)
    assert restored.model.weight.item() == pytest.approx(weight_after(12), rel=1e-12)
    cli("experiment", "delete", "1", "--yes", check=True)
    assert listing() == []


def test_gcs_experiment_checkpoints_are_in_the_bucket(tmp_path, gcs_emulator, _det_lite_home):  # noqa: F811
    from gcsfs.core import GCSFileSystem

    fs = GCSFileSystem(endpoint_url=gcs_emulator, token="anon", skip_instance_cache=True)
    fs.mkdir("ckpts")
    config = {"type": "gcs", "bucket": "ckpts", "prefix": PREFIX}
    root = f"ckpts/{PREFIX}"
    _one_experiment_in_the_cloud(tmp_path, _det_lite_home, config, root, lambda: sorted(fs.find("ckpts")))


def test_azure_experiment_checkpoints_are_in_the_container(tmp_path, azurite, _det_lite_home):  # noqa: F811
    from azure.storage.blob import BlobServiceClient

    container = BlobServiceClient.from_connection_string(azurite).create_container("ckpts")
    config = {"type": "azure", "container": "ckpts", "connection_string": azurite}  # no prefix field

    def listing() -> list:
        return sorted(f"ckpts/{b.name}" for b in container.list_blobs())

    _one_experiment_in_the_cloud(tmp_path, _det_lite_home, config, "ckpts", listing, AZURITE_KEY)
