"""The local executor's slot pool (launch/_local.py): which devices are visible, how gangs are
placed and freed. The end-to-end placement tests are tests/experiment/test_placement.py."""

from __future__ import annotations

import pytest

from determined_lite.launch import _local
from determined_lite.launch._local import LocalExecutor, visible_devices


def _config(slots: int = 1, hosts=None) -> dict:
    return {"resources": {"slots_per_trial": slots, "distributed_backend": "torch", "hosts": hosts}}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"DET_LITE_DEVICES": "0,1,2,3"}, ("0", "1", "2", "3")),
        ({"DET_LITE_DEVICES": "", "CUDA_VISIBLE_DEVICES": "0,1"}, ()),  # ours wins: no GPU
        ({"CUDA_VISIBLE_DEVICES": "2, 5"}, ("2", "5")),
        ({"CUDA_VISIBLE_DEVICES": "1,-1,2"}, ("1",)),  # CUDA stops at the first invalid id
        ({"CUDA_VISIBLE_DEVICES": "GPU-a1b2,GPU-c3d4"}, ("GPU-a1b2", "GPU-c3d4")),
    ],
)
def test_visible_devices(monkeypatch, env, expected):
    for name in ("DET_LITE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert visible_devices() == expected


def test_without_any_setting_the_driver_list_is_read(monkeypatch, tmp_path):
    monkeypatch.delenv("DET_LITE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (tmp_path / bus).mkdir()
    monkeypatch.setattr(_local, "_NVIDIA_GPUS", str(tmp_path))
    assert visible_devices() == ("0", "1")
    monkeypatch.setattr(_local, "_NVIDIA_GPUS", str(tmp_path / "absent"))
    assert visible_devices() == ()


def test_gangs_get_disjoint_devices_and_freed_ones_are_reused(monkeypatch):
    monkeypatch.setenv("DET_LITE_DEVICES", "0,1,2,3")
    pool = LocalExecutor(_config(slots=2))
    assert pool.total() == 4 and pool.capacity() == 4
    a, b = pool._place(2), pool._place(2)
    assert (a.devices, b.devices) == (("0", "1"), ("2", "3"))
    assert pool.capacity() == 0
    with pytest.raises(RuntimeError, match="no room for 2 slots: 0 free"):
        pool._place(2)
    pool._release(a)
    pool._release(a)  # twice (wait after stop) frees once
    assert pool.capacity() == 2
    assert pool._place(2).devices == ("0", "1")
    pool._release(b)
    assert pool._place(1).devices == ("2",)  # lowest free first


def test_cpu_slots_count_cores(monkeypatch):
    monkeypatch.setenv("DET_LITE_DEVICES", "")
    monkeypatch.setenv("DET_LITE_SLOTS", "3")
    pool = LocalExecutor(_config(slots=1))
    assert pool.total() == 3
    placement = pool._place(1)
    assert placement.devices == () and pool.capacity() == 2
    assert placement.describe().endswith(" 1 cpu slot")


def test_a_trial_larger_than_the_machine_runs_alone_with_hosts(monkeypatch):
    monkeypatch.setenv("DET_LITE_SLOTS", "2")
    config = _config(slots=4, hosts=["a:2", "b:2"])
    assert LocalExecutor.problem(config) is None  # the hosts have the slots
    pool = LocalExecutor(config)
    assert pool.devices == ()  # the engine's launcher places workers on the hosts
    assert pool.capacity() == 4
    pool._place(4)
    assert pool.capacity() == 0  # nothing else starts until it ends


def test_too_many_slots_is_one_line_naming_both_numbers(monkeypatch):
    monkeypatch.setenv("DET_LITE_DEVICES", "0")
    assert LocalExecutor.problem(_config(slots=2)) == (
        "resources.slots_per_trial is 2 but this machine has 1 (GPUs 0; $DET_LITE_DEVICES to choose "
        "them) slots; lower slots_per_trial or list machines in resources.hosts"
    )
    assert LocalExecutor.problem(_config(slots=1)) is None
