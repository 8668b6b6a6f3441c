"""Shared by the checkpoint-storage tests against real servers on loopback: the emulators'
fixtures (Azurite for Azure, gcp-storage-emulator for GCS, moto's server for S3) and the
closed-form linear experiment they run."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Iterator

import pytest

from tests.cli_helpers import write_config
from tests.fixtures.experiments.linear.model_def import closed_form, val_loss
from tests.timing import budget

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
# Azurite's published development account (not a secret: every Azurite has it).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
BUCKET = "det-lite-ckpts"  # moto's S3 server's (the ``s3`` fixture)
PREFIX = "team/runs"
AZURITE_INSTALLED = os.path.join(
    os.environ.get("AZURITE_PREFIX") or os.path.expanduser("~/.cache/det-lite/azurite"),
    "node_modules",
    ".bin",
    "azurite-blob",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: "subprocess.Popen[bytes]", what: str) -> None:
    deadline = time.monotonic() + budget(60)
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, f"{what} did not start"
            time.sleep(0.2)


def _azurite() -> str:
    for candidate in (os.environ.get("AZURITE_BLOB"), AZURITE_INSTALLED, shutil.which("azurite-blob")):
        if candidate and os.path.isfile(candidate):
            return candidate
    missing = "Azurite is not installed (bash scripts/install-azurite.sh, or set AZURITE_BLOB)"
    if os.environ.get("CI"):
        pytest.fail(missing)
    pytest.skip(missing)


@pytest.fixture
def azurite(tmp_path) -> Iterator[str]:
    """Azurite's blob service on loopback: its connection string. Azurite comes from
    ``scripts/install-azurite.sh``, or $AZURITE_BLOB, or ``azurite-blob`` on PATH; without it
    the test is skipped, saying why, except under CI (``CI`` set), where it fails."""
    pytest.importorskip("adlfs", reason="adlfs (pip install 'determined-lite[azure]')")
    port = free_port()
    argv = [_azurite(), "--blobHost", "127.0.0.1", "--blobPort", str(port)]
    argv += ["--location", str(tmp_path / "azurite"), "--silent", "--skipApiVersionCheck"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc, "Azurite")
        yield (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def gcs_emulator(tmp_path, monkeypatch) -> Iterator[str]:
    """gcp-storage-emulator (PyPI) in a process of its own on loopback, reached as Google's SDK
    reaches one: $STORAGE_EMULATOR_HOST (set here, for the CLI's processes too). Its URL."""
    pytest.importorskip("gcsfs", reason="gcsfs (pip install 'determined-lite[gcs]')")
    pytest.importorskip("gcp_storage_emulator", reason="gcp-storage-emulator (the test extra)")
    port = free_port()
    argv = [sys.executable, "-m", "gcp_storage_emulator", "--data-dir", str(tmp_path / "gcs")]
    argv += ["start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc, "gcp-storage-emulator")
        url = f"http://127.0.0.1:{port}"
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class S3Server:
    """moto's S3 server on 127.0.0.1 (a fixed port, so it can be stopped and started again with
    its buckets: moto keeps them in this process)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = None

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="k",
            aws_secret_access_key="s",
        )

    def keys(self, bucket: str = BUCKET) -> list:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def uuids(self) -> set:
        return {k[len(PREFIX) + 1 :].split("/")[0] for k in self.keys()}


@contextlib.contextmanager
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on loopback with the bucket ``BUCKET`` (the modules' ``s3`` fixture);
    the test is skipped without moto."""
    pytest.importorskip("boto3")
    pytest.importorskip("moto.server")
    server = S3Server()
    server.start()
    server.client().create_bucket(Bucket=BUCKET)
    try:
        yield server
    finally:
        if server.server is None:
            server.start()
        urllib.request.urlopen(urllib.request.Request(f"{server.url}/moto-api/reset", method="POST")).close()
        server.stop()


def check_round_trip(storage, tmp_path, checkpoint_uuid: str) -> None:
    """A :class:`CheckpointStorage` on a real server: probe, upload (every file under
    ``<root>/<uuid>/``), listing, metadata, download (the same bytes), delete (nothing left)."""
    storage.probe()
    assert storage.fs.find(storage.root) == []  # the probe's object is gone
    source = tmp_path / "written"
    (source / "code").mkdir(parents=True)
    (source / "metadata.json").write_text('{"total_batches": 4}')
    (source / "state_dict.pth").write_bytes(b"\x00weights\xff")
    (source / "code" / "model_def.py").write_text("X = 1\n")
    storage.upload(str(source), checkpoint_uuid)
    names = ["code/model_def.py", "metadata.json", "state_dict.pth"]
    key = f"{storage.root}/{checkpoint_uuid}"
    assert sorted(str(n).strip("/") for n in storage.fs.find(storage.root)) == [f"{key}/{n}" for n in names]
    assert storage.list_ids() == [checkpoint_uuid]
    assert storage.read_metadata(checkpoint_uuid) == {"total_batches": 4}
    dest = storage.download(checkpoint_uuid, str(tmp_path / "back"))
    assert sorted(os.listdir(dest)) == ["code", "metadata.json", "state_dict.pth"]
    assert (tmp_path / "back" / "state_dict.pth").read_bytes() == b"\x00weights\xff"
    assert (tmp_path / "back" / "code" / "model_def.py").read_text() == "X = 1\n"
    storage.delete(checkpoint_uuid)
    assert storage.list_ids() == [] and storage.fs.find(storage.root) == []


def check_planted_name_refused(storage, tmp_path, checkpoint_uuid: str, planted: str, why: str) -> None:
    """A :class:`CheckpointStorage` on a real server holding a checkpoint with the object
    ``<uuid>/<planted>`` (planted by whoever can write there): reading it is refused with one
    line naming that key, and nothing is written, neither the destination nor its parents."""
    from determined_lite.storage import UnsafeNameError

    key = f"{storage.root}/{checkpoint_uuid}"
    storage.fs.pipe_file(f"{key}/metadata.json", b"{}")
    storage.fs.pipe_file(f"{key}/{planted}", b"evil")
    work = tmp_path / "work"
    for read in (storage.download, storage.local_copy):
        with pytest.raises(UnsafeNameError) as e:
            read(checkpoint_uuid, str(work / "a" / "dest"))
        assert str(e.value) == (
            f"checkpoint storage {storage.url}: refused to read '{key}/{planted}' ({why}): a stored "
            "name must stay inside its destination; nothing was written"
        )
    assert not work.exists()


def weight_after(batches: int) -> float:
    return closed_form(0.01, batches, batch_size=2, n=8)[batches - 1]


def assert_closed_form(trial: dict, batches: int) -> None:
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == batches
    assert trial["validation_metrics"]
    for v in trial["validation_metrics"]:
        w = weight_after(v["total_batches"])
        assert v["metrics"]["weight"] == pytest.approx(w, rel=1e-12, abs=1e-12)
        assert v["metrics"]["val_loss"] == pytest.approx(val_loss(w, 4), rel=1e-9, abs=1e-15)


def linear_config(tmp_path, checkpoint_storage: dict, **changes) -> str:
    """The linear experiment's const.yaml with ``checkpoint_storage`` and ``changes``: its path."""
    changes["checkpoint_storage"] = checkpoint_storage
    return write_config(os.path.join(LINEAR, "const.yaml"), tmp_path, "exp.yaml", **changes)
