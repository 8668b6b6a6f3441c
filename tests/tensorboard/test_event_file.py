"""det-lite's light event file: TensorBoard's own reader reads it exactly, and writing it loads
neither ``torch.utils.tensorboard`` nor TensorBoard's TensorFlow stub (their memory is what the
light writer saves)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from determined_lite.tensorboard._event_file import EventFile, crc32c, frame, masked_crc32c


def test_crc32c_matches_the_castagnoli_check_values() -> None:
    # RFC 3720 (iSCSI) B.4 test vectors and the standard "123456789" check value of CRC-32C.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(bytes([0xFF] * 32)) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E


def test_masked_crc_and_frame_layout() -> None:
    data = b"abc"
    crc = crc32c(data)
    assert masked_crc32c(data) == ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)
    record = frame(data)
    assert len(record) == 8 + 4 + 3 + 4
    assert int.from_bytes(record[:8], "little") == 3
    assert record[12:15] == data


def test_tensorboard_reads_scalars_and_hparams_session(tmp_path: Path) -> None:
    with EventFile(str(tmp_path / "tb")) as events:
        events.add_hparams_session({"lr": 0.1, "layers": 2, "opt": "sgd", "nesterov": True})
        for step, value in [(1, 0.5), (2, 0.25), (4, 0.125)]:
            events.add_scalar("training/loss", value, step)
        events.add_scalar("validation/accuracy", 0.75, 4)
        path = events.path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    acc = EventAccumulator(path, size_guidance={"scalars": 0})
    acc.Reload()  # the reader checks every record's length and data checksums
    assert [(e.step, e.value) for e in acc.Scalars("training/loss")] == [(1, 0.5), (2, 0.25), (4, 0.125)]
    assert [(e.step, e.value) for e in acc.Scalars("validation/accuracy")] == [(4, 0.75)]
    content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    assert start.hparams["lr"].number_value == 0.1
    assert start.hparams["layers"].number_value == 2
    assert start.hparams["opt"].string_value == "sgd"
    assert start.hparams["nesterov"].bool_value is True


def test_harness_scalars_load_no_summary_writer(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        from determined_lite.tensorboard.metric_writers.pytorch import TorchWriter
        w = TorchWriter({str(tmp_path / "tb")!r})
        w.add_hparams_session({{"lr": 0.1}})
        w.add_scalar("training/loss", 0.5, 1)
        w.close()
        loaded = [m for m in ("torch.utils.tensorboard", "tensorboard.compat.tensorflow_stub")
                  if m in sys.modules]
        print(loaded)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr
