"""A TensorBoard event file for the harness's own scalars, without ``torch.utils.tensorboard``.

Why: ``SummaryWriter`` imports TensorBoard's TensorFlow stub, which imports every optional
file-system client it finds (boto3, fsspec, absl): 6 MB of memory in a bare install, 15 MB
beside boto3, in every chief, for a handful of scalars. This writer uses only TensorBoard's
protobuf messages (``event_pb2``, ``summary_pb2``, the HParams plugin's ``plugin_data_pb2``)
and writes the TFRecord framing itself, so files are what ``SummaryWriter`` writes and
TensorBoard reads them as usual. Users who want the full ``SummaryWriter`` still get one
(``TorchWriter.writer``, ``context.get_tensorboard_writer()``), made on first use.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Any, Dict, List, Optional, Union

# At import, not per file: a process that forks trial workers can import them once for all its
# trials (imported in each worker, they cost it ~25 ms of CPU; issue 27).
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import plugin_data_pb2

from determined_lite.store._paths import make_private_dirs, open_private

# TFRecord framing: every record is <length u64><masked crc32c of length><data><masked crc32c of data>.
_CRC32C_POLY = 0x82F63B78  # Castagnoli, reflected
_MASK_DELTA = 0xA282EAD8


def _crc32c_table() -> List[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _CRC32C_POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``: the checksum TFRecord files carry."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC (rotated right by 15 bits, plus a constant)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord: ``data`` with its length and both checksums."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


# The HParams plugin's names (tensorboard.plugins.hparams.metadata, whose import loads the stub).
_HPARAMS_PLUGIN = "hparams"
_HPARAMS_DATA_VERSION = 0
_SESSION_START_TAG = "_hparams_/session_start_info"


class EventFile:
    """An ``events.out.tfevents.*`` file in ``log_dir`` (made private), opened at construction.

    Writes go to the OS at every :meth:`flush` (the harness flushes after each report).
    """

    def __init__(self, log_dir: str) -> None:
        make_private_dirs(log_dir)
        # SummaryWriter's naming: the first field after "tfevents" is the creation time, which
        # TensorBoard uses to order the files of one run.
        name = f"events.out.tfevents.{time.time():.6f}.{socket.gethostname()}.{os.getpid()}.lite"
        self.path = os.path.join(log_dir, name)
        self._file = os.fdopen(open_private(self.path), "ab")
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _write(self, event: Any) -> None:
        self._file.write(frame(event.SerializeToString()))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))]
        )
        self._write(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def add_hparams_session(self, hparams: Dict[str, Union[int, float, str, bool]]) -> None:
        """The HParams plugin's session-start record: this directory is one row of its table."""
        start = plugin_data_pb2.SessionStartInfo()
        for name, value in hparams.items():
            if isinstance(value, bool):
                start.hparams[name].bool_value = value
            elif isinstance(value, (int, float)):
                start.hparams[name].number_value = value
            else:
                start.hparams[name].string_value = str(value)
        content = plugin_data_pb2.HParamsPluginData(
            version=_HPARAMS_DATA_VERSION, session_start_info=start
        ).SerializeToString()
        metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(
                plugin_name=_HPARAMS_PLUGIN, content=content
            )
        )
        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=_SESSION_START_TAG, metadata=metadata)]
        )
        self._write(event_pb2.Event(wall_time=time.time(), summary=summary))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> "EventFile":
        return self

    def __exit__(self, *exc: Optional[object]) -> None:
        self.close()
