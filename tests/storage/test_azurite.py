"""``checkpoint_storage: {type: azure}`` against Azurite, Azure's blob emulator (npm), on
loopback: probe, upload, listing, download, delete, and a missing container as one permanent
error. The fixture (tests/cloud_storage.py) says where Azurite comes from."""

from __future__ import annotations

import pytest

from determined_lite.storage import StorageError, checkpoint_storage
from tests.cloud_storage import (  # noqa: F401 (a fixture)
    AZURITE_KEY,
    azurite,
    check_planted_name_refused,
    check_round_trip,
)

pytestmark = pytest.mark.slow

UUID = "0b5e1c9e-5d4c-4e0e-8a4e-3f1f3d6c2a10"


def test_azure_storage_against_azurite(azurite, tmp_path):  # noqa: F811 (the fixture)
    from azure.storage.blob import BlobServiceClient

    BlobServiceClient.from_connection_string(azurite).create_container("ckpts")
    storage = checkpoint_storage(
        {"checkpoint_storage": {"type": "azure", "container": "ckpts", "connection_string": azurite}}
    )
    check_round_trip(storage, tmp_path, UUID)

    missing = checkpoint_storage(
        {"checkpoint_storage": {"type": "azure", "container": "nope", "connection_string": azurite}}
    )
    missing.sleep = lambda s: pytest.fail("a missing container was retried")
    with pytest.raises(StorageError) as e:
        missing.probe()
    assert (
        str(e.value) == "checkpoint storage abfs://nope: writing a test object failed: "
        "The specified container does not exist."
    )
    assert AZURITE_KEY not in str(e.value)


def test_a_planted_absolute_name_is_refused(azurite, tmp_path):  # noqa: F811 (the fixture)
    """Azure's SDK cannot write a '..' name (its URL is normalised, so Azurite refuses the
    signature); an absolute one (``<uuid>//etc/evil``) it stores, and det-lite refuses it."""
    from azure.storage.blob import BlobServiceClient

    BlobServiceClient.from_connection_string(azurite).create_container("ckpts")
    config = {"type": "azure", "container": "ckpts", "prefix": "p", "connection_string": azurite}
    storage = checkpoint_storage({"checkpoint_storage": config})
    check_planted_name_refused(storage, tmp_path, UUID, "/etc/evil", "an absolute name")
