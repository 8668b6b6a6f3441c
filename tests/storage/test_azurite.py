"""``checkpoint_storage: {type: azure}`` against Azurite, Azure's blob emulator (npm), on
loopback: probe, upload, listing, download, delete, and a missing container as one permanent
error. Azurite comes from ``scripts/install-azurite.sh`` (part of the README's test command), or
$AZURITE_BLOB names it, or ``azurite-blob`` is on PATH; without it the test is skipped, saying
why, except under CI (``CI`` set), where a missing emulator fails the test."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import pytest

from determined_lite.storage import StorageError, checkpoint_storage
from tests.timing import budget

pytest.importorskip("adlfs", reason="adlfs (pip install 'determined-lite[azure]')")
pytestmark = pytest.mark.slow

UUID = "0b5e1c9e-5d4c-4e0e-8a4e-3f1f3d6c2a10"
# Azurite's published development account (not a secret: every Azurite has it).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


INSTALLED = os.path.join(
    os.environ.get("AZURITE_PREFIX") or os.path.expanduser("~/.cache/det-lite/azurite"),
    "node_modules",
    ".bin",
    "azurite-blob",
)


def _azurite() -> str:
    for candidate in (os.environ.get("AZURITE_BLOB"), INSTALLED, shutil.which("azurite-blob")):
        if candidate and os.path.isfile(candidate):
            return candidate
    missing = "Azurite is not installed (bash scripts/install-azurite.sh, or set AZURITE_BLOB)"
    if os.environ.get("CI"):
        pytest.fail(missing)
    pytest.skip(missing)


@pytest.fixture
def azurite(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [_azurite(), "--blobHost", "127.0.0.1", "--blobPort", str(port)]
    argv += ["--location", str(tmp_path / "azurite"), "--silent", "--skipApiVersionCheck"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + budget(60)
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "Azurite did not start"
                time.sleep(0.2)
        yield (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint=http://127.0.0.1:{port}/{ACCOUNT};"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_azure_storage_against_azurite(azurite, tmp_path):
    from azure.storage.blob import BlobServiceClient

    BlobServiceClient.from_connection_string(azurite).create_container("ckpts")
    storage = checkpoint_storage(
        {"checkpoint_storage": {"type": "azure", "container": "ckpts", "connection_string": azurite}}
    )
    storage.probe()
    source = tmp_path / "written"
    (source / "code").mkdir(parents=True)
    (source / "metadata.json").write_text('{"total_batches": 4}')
    (source / "state_dict.pth").write_bytes(b"\x00weights\xff")
    (source / "code" / "model_def.py").write_text("X = 1\n")
    storage.upload(str(source), UUID)
    assert storage.list_ids() == [UUID] and storage.read_metadata(UUID) == {"total_batches": 4}
    dest = storage.download(UUID, str(tmp_path / "back"))
    assert sorted(os.listdir(dest)) == ["code", "metadata.json", "state_dict.pth"]
    assert (tmp_path / "back" / "state_dict.pth").read_bytes() == b"\x00weights\xff"
    storage.delete(UUID)
    assert storage.list_ids() == []

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
    assert KEY not in str(e.value)
