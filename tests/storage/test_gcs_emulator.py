"""``checkpoint_storage: {type: gcs}`` against gcp-storage-emulator (PyPI) on loopback, reached
through $STORAGE_EMULATOR_HOST as Google's SDK reaches an emulator: probe, upload, listing,
download, delete, and a missing bucket as one permanent error."""

from __future__ import annotations

import pytest

from determined_lite.storage import StorageError, checkpoint_storage
from tests.cloud_storage import (  # noqa: F401 (a fixture)
    check_planted_name_refused,
    check_round_trip,
    gcs_emulator,
)

pytestmark = pytest.mark.slow

UUID = "6a1f2e3d-4c5b-4a69-8e7f-0a1b2c3d4e5f"


def test_gcs_storage_against_the_emulator(gcs_emulator, tmp_path):  # noqa: F811
    storage = checkpoint_storage({"checkpoint_storage": {"type": "gcs", "bucket": "ckpts", "prefix": "a/b"}})
    storage.fs.mkdir("ckpts")
    check_round_trip(storage, tmp_path, UUID)

    missing = checkpoint_storage({"checkpoint_storage": {"type": "gcs", "bucket": "nope"}})
    missing.sleep = lambda s: pytest.fail("a missing bucket was retried")
    with pytest.raises(StorageError) as e:
        missing.probe()
    assert str(e.value).startswith("checkpoint storage gcs://nope: writing a test object failed: ")
    assert "/b/nope/" in str(e.value)


def test_a_planted_absolute_name_is_refused(gcs_emulator, tmp_path):  # noqa: F811
    """The emulator refuses '..' in names itself (its own check); an absolute one
    (``<uuid>//etc/evil``) it stores, and det-lite refuses to read it."""
    storage = checkpoint_storage({"checkpoint_storage": {"type": "gcs", "bucket": "ckpts", "prefix": "a/b"}})
    storage.fs.mkdir("ckpts")
    check_planted_name_refused(storage, tmp_path, UUID, "/etc/evil", "an absolute name")
