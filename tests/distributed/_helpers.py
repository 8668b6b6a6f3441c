"""Run a fixture trial through the real launcher (``determined_lite.launch.run_trial``).

Every run gets its own directory: spec, result, checkpoints, TensorBoard files, the trial's
per-rank records (hparam ``record_dir``) and ``$DET_LITE_HOME``. A run that hangs fails its
test after ``RUN_TIMEOUT_S`` stretched by the machine's load (the launcher stops the workers).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from determined_lite.config import TrainingSettings
from determined_lite.launch import WorkerResult, WorkerSpec, run_trial
from tests.fixtures.dist_trials import read_records
from tests.timing import budget

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
RUN_TIMEOUT_S = 180.0
TRIAL_SEED = 11

BACKENDS = ["torch", "horovod"]

# The tiny trial the distributed tests train (a one-weight linear model, tests/fixtures/linear.py):
# 12 records, global batch 4 (2 per slot on SLOTS), MAX_BATCHES batches; modules add their own
# hyperparameters to TINY_HP.
SLOTS = 2
MAX_BATCHES = 8
TINY_HP: Dict[str, Any] = {"lr": 0.005, "w0": 0.5, "global_batch_size": 4, "dataset_size": 12}


@dataclasses.dataclass
class Run:
    """What one launched trial did."""

    code: int
    result: WorkerResult
    lines: List[str]
    records: Dict[int, List[Dict[str, Any]]]
    returned_at: float  # time.monotonic() when the launcher returned
    spec_path: str
    checkpoint_root: str

    def of_kind(self, kind: str, rank: int) -> List[Dict[str, Any]]:
        return [r for r in self.records.get(rank, []) if r["kind"] == kind]


def run(
    backend: str,
    slots: int,
    entrypoint: str,
    hparams: Dict[str, Any],
    exp_conf: Dict[str, Any],
    max_length: int,
    tmp_path: Path,
    *,
    latest_checkpoint: Optional[str] = None,
    hosts: Optional[Sequence[str]] = None,
    timeout: float = RUN_TIMEOUT_S,
) -> Run:
    """Launch ``entrypoint`` (``module:Class`` in tests/fixtures) for ``max_length`` batches."""
    tmp_path = Path(tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)
    record_dir = tmp_path / "records"
    hp = {"record_dir": str(record_dir), **hparams}
    spec = WorkerSpec(
        entrypoint=entrypoint,
        context_dir=str(FIXTURES),
        exp_conf=exp_conf,
        hparams=hp,
        result_path=str(tmp_path / "result.json"),
        max_length={"batches": max_length},
        trial_seed=TRIAL_SEED,
        settings=TrainingSettings.from_config(exp_conf).to_json(),
        latest_checkpoint=latest_checkpoint,
        checkpoint_root=str(tmp_path / "checkpoints"),
        tensorboard_path=str(tmp_path / "tensorboard"),
        backend=backend,
        slots=slots,
    )
    spec_path = str(tmp_path / "spec.json")
    lines: List[str] = []
    lock = threading.Lock()

    def on_output(line: str) -> None:
        with lock:
            lines.append(line)

    env = {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env["DET_LITE_HOME"] = str(tmp_path / "home")
    code, result = run_trial(
        spec, spec_path, hosts=hosts, on_output=on_output, env=env, timeout=budget(timeout)
    )
    returned_at = time.monotonic()
    records = read_records(str(record_dir)) if record_dir.exists() else {}
    return Run(code, result, lines, records, returned_at, spec_path, spec.checkpoint_root or "")


def processes_mentioning(text: str) -> List[str]:
    """Command lines of live (non-zombie) processes whose command line contains ``text``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def global_batches(run_: Run, slots: int) -> List[List[float]]:
    """The records of every global batch, rank 0's part first (as one slot would see them)."""
    per_rank = [{r["batch_idx"]: r for r in run_.of_kind("batch", rank)} for rank in range(slots)]
    out = []
    for idx in sorted(per_rank[0]):
        out.append([x for rank in range(slots) for x in per_rank[rank][idx]["xs"]])
    return out


def weights(run_: Run, rank: int = 0) -> List[float]:
    """The weight after every batch on ``rank``, in batch order."""
    return [r["w"] for r in sorted(run_.of_kind("batch", rank), key=lambda r: r["batch_idx"])]


def describe(run_: Run) -> str:
    """The run's output, for assertion messages."""
    return "\n".join(run_.lines[-80:])
