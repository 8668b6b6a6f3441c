"""The Horovod engine and its launcher: what is specific to Horovod.

Unit tests cover the horovodrun command (hosts → ``-H``, timeouts, errors), the wrapper's
output and failure handling, and the engine's helpers. Multi-process tests start real
``horovodrun`` jobs on this host: one runs :func:`_engine_checks` on two ranks (object
collectives, initial-state broadcast, ``DistributedOptimizer`` with bpps × k), one trains the
closed-form linear trial with ``hosts=["localhost:2"]``. Failures (a worker raising or
killed) are covered for every engine by tests/distributed/test_training.py.

This module is also the workers' code: ``python test_horovod_backend.py OUTDIR`` runs the
engine checks on each rank.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, List

import pytest
import torch

from determined_lite.config import TrainingSettings
from determined_lite.config._plugins import ENGINES
from determined_lite.launch import WorkerSpec, run_trial, worker_command
from determined_lite.launch import _horovodrun as hr
from determined_lite.runtime._failures import (
    FAILURE_PREFIX_ENV,
    WorkerFailure,
    read_worker_failures,
    worker_failure_file,
)
from tests.fixtures.linear import expected_weights
from tests.timing import budget

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _has_horovod() -> bool:
    try:
        import horovod.torch as hvd

        return bool(hvd.gloo_built() or hvd.mpi_built())
    except ImportError:
        return False


needs_horovod = pytest.mark.skipif(
    not _has_horovod(), reason="Horovod is not installed (scripts/install-horovod.sh)"
)


def _spec(tmp_path, **overrides: Any) -> WorkerSpec:
    fields: Dict[str, Any] = dict(
        entrypoint="tests.fixtures.linear:LinearTrial",
        context_dir=REPO,
        exp_conf={},
        hparams={"lr": 0.01, "global_batch_size": 4, "dataset_size": 16, "w0": 0.5},
        result_path=str(tmp_path / "result.json"),
        max_length={"batches": 4},
        trial_seed=3,
        checkpoint_root=str(tmp_path / "checkpoints"),
        backend="horovod",
        slots=2,
    )
    fields.update(overrides)
    fields.setdefault("settings", TrainingSettings.from_config(fields["exp_conf"]).to_json())
    return WorkerSpec(**fields)


def _worker_env() -> Dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": REPO + (os.pathsep + path if path else "")}


# --- hosts → -H ---------------------------------------------------------------------------------


def test_hosts_map_to_horovodrun_host_list():
    assert hr.parse_hosts(["host-a:2", "host-b.example.com:3", "10.0.0.7:1"], 6) == [
        ("host-a", 2),
        ("host-b.example.com", 3),
        ("10.0.0.7", 1),
    ]


@pytest.mark.parametrize(
    "hosts, message",
    [
        (["host-a:2", "host-b:1"], "has 3 slots in all but resources.slots_per_trial is 4"),
        (["host-a"], "entry 'host-a' must look like 'host:slots'"),
        (["host-a:0", "host-b:4"], "entry 'host-a:0' must look like 'host:slots'"),
        (["host a:4"], "entry 'host a:4' must look like 'host:slots'"),
        (["host-a:two"], "entry 'host-a:two' must look like 'host:slots'"),
        (["host-a:2", "host-a:2"], "lists host 'host-a' twice"),
        ([], "must be a non-empty list"),
        ("host-a:4", "must be a non-empty list"),
    ],
)
def test_bad_hosts_are_rejected_with_the_field_named(hosts, message):
    with pytest.raises(ValueError) as err:
        hr.parse_hosts(hosts, 4)
    assert message in str(err.value)
    assert "resources.hosts" in str(err.value)


@needs_horovod
def test_local_command_runs_horovodrun_with_gloo_timeouts_and_loopback(tmp_path, monkeypatch):
    monkeypatch.setenv("DET_LITE_DIST_TIMEOUT", "12.5")
    monkeypatch.delenv(hr.CONTROLLER_ENV, raising=False)
    spec = _spec(tmp_path)
    argv, env = hr.horovodrun_command(spec, "/x/spec.json", None)
    assert argv[:6] == [sys.executable, "-u", "-m", hr.WRAPPER_MODULE, "--result", spec.result_path]
    assert argv[6:9] == ["--listen-address", "127.0.0.1", "--"]  # horovodrun's servers: loopback only
    opts = argv[9 : -len(worker_command("/x/spec.json"))]
    assert argv[-len(worker_command("/x/spec.json")) :] == worker_command("/x/spec.json")
    assert opts[:5] == ["-np", "2", "-H", "localhost:2", "--gloo"]
    assert opts[opts.index("--start-timeout") + 1] == "13"
    assert opts[opts.index("--gloo-timeout-seconds") + 1] == "13"
    assert opts[opts.index("--network-interfaces") + 1] == hr.loopback_interface() == "lo"
    assert "--disable-cache" in opts
    assert env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "13"


@needs_horovod
def test_remote_hosts_go_to_dash_h_without_loopback(tmp_path, monkeypatch):
    monkeypatch.delenv(hr.CONTROLLER_ENV, raising=False)
    argv, _ = hr.horovodrun_command(_spec(tmp_path, slots=4), "/x/spec.json", ["host-a:2", "host-b:2"])
    assert argv[argv.index("-np") + 1] == "4"
    assert argv[argv.index("-H") + 1] == "host-a:2,host-b:2"
    assert "--network-interfaces" not in argv and "--listen-address" not in argv
    assert "--disable-cache" not in argv


@needs_horovod
def test_slot_mismatch_fails_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match="slot counts must add up to slots_per_trial"):
        hr.horovodrun_command(_spec(tmp_path, slots=2), "/x/spec.json", ["localhost:1"])


@needs_horovod
def test_controller_choice(tmp_path, monkeypatch):
    import horovod.torch as hvd

    monkeypatch.setenv(hr.CONTROLLER_ENV, "ucx")
    with pytest.raises(ValueError, match=r"DET_LITE_HOROVOD_CONTROLLER must be one of \('gloo', 'mpi'\)"):
        hr.horovodrun_command(_spec(tmp_path), "/x/spec.json", None)
    monkeypatch.setenv(hr.CONTROLLER_ENV, "mpi")
    if hvd.mpi_built():
        argv, _ = hr.horovodrun_command(_spec(tmp_path), "/x/spec.json", None)
        assert "--mpi" in argv and "--gloo" not in argv
    else:
        with pytest.raises(ValueError, match="built without MPI"):
            hr.horovodrun_command(_spec(tmp_path), "/x/spec.json", None)


# --- the wrapper: output and failures -------------------------------------------------------


def test_horovodrun_tags_give_way_to_the_workers_rank_prefix():
    out = io.StringIO()
    stream = hr._UntaggedStream(out)
    stream.write("[1]<stdout>:[rank 1] loss=0.5\n")
    stream.write("[0]<stderr>:[rank 0] Traceback (most recent call last):\n")
    stream.write("[12,3]<stdout>:[rank 3] from mpirun\n")
    stream.write("Mon Jan  5 10:00:01 2026[2]<stdout>:[rank 2] with a timestamp\n")
    stream.write("[0]<stderr>:Terminated\n")  # printed before (or without) the worker's prefix
    stream.write("[1]<stdout>:[1]<stdout>: printed by the trial\n")
    print("Process 1 exit with status code 1.", file=stream)  # print() writes in two pieces
    print("Terminating remaining workers after failure of Process 1.", file=stream)
    print("Process 0 exit with status code 143.", file=stream)
    print("det-lite: worker rank 1 failed", file=stream)
    stream.write("no newline yet")
    stream.flush()
    assert out.getvalue().splitlines() == [
        "[rank 1] loss=0.5",
        "[rank 0] Traceback (most recent call last):",
        "[rank 3] from mpirun",
        "[rank 2] with a timestamp",
        "[rank 0] Terminated",
        "[rank 1] [1]<stdout>: printed by the trial",
        "det-lite: worker rank 1 failed",
        "no newline yet",
    ]
    assert stream.exits == [("1", 1), ("0", 143)]


def test_one_worker_lines_get_no_rank_prefix():
    out = io.StringIO()
    hr._UntaggedStream(out, prefix_ranks=False).write("[0]<stdout>:hello\n")
    assert out.getvalue() == "hello\n"


HOROVODRUN_ERROR = (
    "Horovod detected that one or more processes exited with non-zero status, thus causing the job "
    "to be terminated. The first process to do so was:\nProcess name: {rank}\nExit code: {code}\n"
)


def test_primary_failure_prefers_the_earliest_recorded_error():
    records = [
        WorkerFailure(rank=0, error="KeyError: 'x'", timestamp=20.0),
        WorkerFailure(rank=1, error="ValueError: boom", timestamp=10.0),
    ]
    failure = hr.first_failure(records, [("0", 1), ("1", 1)], HOROVODRUN_ERROR.format(rank=0, code=1))
    assert failure.describe() == "rank 1: ValueError: boom"
    assert (
        failure.summary()
        == "det-lite: worker rank 1 failed; its error is above; stopped the other workers"
    )


@pytest.mark.parametrize(
    "code, text, summary",
    [
        (
            137,
            "rank 1: killed by SIGKILL",
            "det-lite: worker rank 1 was killed by SIGKILL; stopped the other workers",
        ),
        (
            -9,
            "rank 1: killed by SIGKILL",
            "det-lite: worker rank 1 was killed by SIGKILL; stopped the other workers",
        ),
        (
            3,
            "rank 1: exited with code 3",
            "det-lite: worker rank 1 exited with code 3; stopped the other workers",
        ),
    ],
)
def test_without_a_recorded_error_the_first_exit_is_named(code, text, summary):
    failure = hr.first_failure([], [], HOROVODRUN_ERROR.format(rank=1, code=code))
    assert (failure.describe(), failure.summary()) == (text, summary)


def test_a_killed_worker_outranks_peers_that_exited_first_because_of_it():
    # Rank 1 was SIGKILLed; rank 0 noticed, failed with status 1 and happened to be seen first;
    # rank 2 was stopped by horovodrun.
    exits = [("0", 1), ("2", 143), ("1", 137)]
    failure = hr.first_failure([], exits, HOROVODRUN_ERROR.format(rank=0, code=1))
    assert failure.describe() == "rank 1: killed by SIGKILL"
    assert hr.first_failure([], [("2", 143), ("0", 1)], "").describe() == "rank 0: exited with code 1"


def test_workers_stopped_on_request_are_not_a_failure():
    failure = hr.first_failure([], [("1", 143), ("0", 143)], HOROVODRUN_ERROR.format(rank=1, code=143))
    assert (failure.error, failure.signal) == (None, "SIGTERM")
    assert failure.signal in ENGINES["horovod"].stop_signals  # its record's stop-signal policy


@needs_horovod
@pytest.mark.skipif(shutil.which("ssh") is None, reason="horovodrun checks remote hosts with ssh")
def test_horovodrun_failing_to_start_is_one_line_and_the_result(tmp_path):
    result = tmp_path / "result.json"
    argv = [sys.executable, "-m", hr.WRAPPER_MODULE, "--result", str(result), "--", "-np", "2"]
    argv += ["-H", "det-lite-test.invalid:2", "--gloo", "--start-timeout", "10", "true"]
    env = {**os.environ, **_worker_env()}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=budget(120))
    assert proc.returncode == 1
    assert (
        proc.stderr.splitlines()[-1]
        == "det-lite: horovodrun: RuntimeError: could not connect to some hosts via ssh"
    )
    error = "horovodrun: RuntimeError: could not connect to some hosts via ssh"
    assert (json.loads(result.read_text())["status"], json.loads(result.read_text())["error"]) == (
        "error",
        error,
    )


@needs_horovod
def test_only_original_errors_are_recorded(tmp_path, monkeypatch):
    from horovod.common.exceptions import HorovodInternalError

    from determined_lite.distributed import _horovod

    monkeypatch.setenv(FAILURE_PREFIX_ENV, str(tmp_path / "f"))
    assert FAILURE_PREFIX_ENV == hr.FAILURE_PREFIX_ENV
    try:
        try:
            raise HorovodInternalError("Horovod has been shut down")
        except HorovodInternalError as inner:
            raise RuntimeError("wrapped by user code") from inner
    except RuntimeError as e:
        assert _horovod.is_peer_failure(e)
    assert not _horovod.is_peer_failure(ValueError("boom"))
    _horovod.record_failure(ValueError("boom\nsecond line"), rank=3)
    with open(worker_failure_file(str(tmp_path / "f"), 3)) as f:
        record = json.load(f)
    assert (record["rank"], record["error"]) == (3, "ValueError: boom")
    assert [r.to_json() for r in read_worker_failures(str(tmp_path / "f"))] == [record]


# --- engine helpers ------------------------------------------------------------------------------


@needs_horovod
def test_every_optimizer_parameter_gets_a_stable_unique_name():
    from determined_lite.distributed._horovod import named_parameters

    a = torch.nn.Linear(2, 2)
    b = torch.nn.Linear(2, 1, bias=False)
    extra = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([{"params": list(a.parameters())}, {"params": [b.weight, extra]}], lr=0.1)
    named = named_parameters(opt, [a, b])
    assert [n for n, _ in named] == ["model0.weight", "model0.bias", "model1.weight", "group1.1"]
    assert [p for _, p in named] == [a.weight, a.bias, b.weight, extra]


@needs_horovod
def test_tensor_trees_split_and_rebuild():
    from determined_lite.distributed import _horovod

    tree = {
        "state": {0: {"step": torch.tensor(2.0), "buf": torch.arange(6.0).reshape(2, 3)}},
        "g": [1, (2, "x")],
    }
    tensors: List[torch.Tensor] = []
    skeleton = _horovod._strip_tensors(tree, tensors)
    assert [(s.index, s.shape) for s in _horovod._slots(skeleton)] == [(0, ()), (1, (2, 3))]
    rebuilt = _horovod._fill_tensors(skeleton, tensors)
    assert rebuilt["g"] == [1, (2, "x")]
    assert rebuilt["state"][0]["buf"] is tensors[1]


# --- on two ranks: engine checks --------------------------------------------------------------


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(1, 1, bias=False)
        self.norm = torch.nn.BatchNorm1d(1)


def _engine_checks(outdir: str) -> int:
    """Run on every rank of a 2-rank horovodrun job; writes ``rank<N>.json`` for the test."""
    from determined_lite.distributed import initialize
    from determined_lite.pytorch import PyTorchTrialContext

    dist = initialize("horovod")
    r = dist.rank
    out: Dict[str, Any] = {
        "ranks": [dist.rank, dist.size, dist.local_rank, dist.local_size, dist.cross_rank, dist.cross_size]
    }
    # Object collectives: different types per rank, ordered by rank, any root.
    out["allgather"] = dist.allgather({"rank": r} if r == 0 else [r, "one"])
    out["broadcast_from_1"] = dist.broadcast(("from", r) if r == 1 else None, root=1)
    try:
        dist.broadcast(1, root=2)
    except ValueError as e:
        out["bad_root"] = str(e)
    dist.barrier()

    # Initial state: ranks start different; rank 0's parameters, buffers and optimizer
    # state win, including "no state yet".
    def start(fresh_on: int, lr: float) -> tuple:
        net = _Net()
        with torch.no_grad():
            net.lin.weight.fill_(r + 1.0)
            net.norm.running_mean.fill_(10.0 * (r + 1))
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        if r != fresh_on:
            net.lin.weight.grad = torch.full_like(net.lin.weight, r + 2.0)
            opt.step()
        dist.broadcast_initial_state([net], [opt])
        state = opt.state_dict()
        return net, {
            "weight": net.lin.weight.item(),
            "running_mean": net.norm.running_mean.item(),
            "lr": state["param_groups"][0]["lr"],
            "state": {
                str(k): {n: v.tolist() for n, v in s.items()} for k, s in sorted(state["state"].items())
            },
        }

    out["rank0_has_state"] = start(fresh_on=1, lr=0.1 * (r + 1))[1]
    out["rank0_fresh"] = start(fresh_on=0, lr=0.1 * (r + 1))[1]

    # Gradients: bpps × k passes per all-reduce, averaged over ranks; the context divides by k.
    ctx = PyTorchTrialContext(distributed=dist, aggregation_frequency=2, device=torch.device("cpu"))
    model = ctx.wrap_model(torch.nn.Linear(1, 1, bias=False))
    with torch.no_grad():
        model.weight.fill_(1.0)
    opt = ctx.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1), backward_passes_per_step=3)
    out["optimizer"] = [
        type(opt).__mro__[1].__name__,
        opt.backward_passes_per_step,
        model.weight.grad is None,
    ]
    weights = []
    for window in range(2):
        for batch in range(2):  # k = 2 batches ...
            ctx.harness.state.batch_idx = 2 * window + batch
            for p in range(3):  # ... of bpps = 3 backward passes
                x = torch.tensor([[(r + 1.0) * (batch + 1) * (p + 1) * (window + 1)]])
                ctx.backward(model(x).sum())
            ctx.step_optimizer(opt)
        weights.append(model.weight.item())
    out["weights"] = weights
    with open(os.path.join(outdir, f"rank{r}.json"), "w") as f:
        json.dump(out, f)
    dist.close()
    return 0


def _grad_sum(window: int, size: int = 2) -> float:
    """Sum over the k=2 batches and 3 passes of d(w·x)/dw = x, averaged over ranks."""
    per_rank = [
        sum((r + 1.0) * (b + 1) * (p + 1) * (window + 1) for b in range(2) for p in range(3))
        for r in range(size)
    ]
    return sum(per_rank) / size


@needs_horovod
def test_engine_on_two_ranks(tmp_path):
    spec = _spec(tmp_path)
    argv, env = hr.horovodrun_command(spec, "/unused", None)
    argv = argv[: -len(worker_command("/unused"))] + [sys.executable, "-u", __file__, str(tmp_path)]
    proc = subprocess.run(
        argv,
        env={**os.environ, **env, **_worker_env()},
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=budget(240),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = {}
    for r in range(2):
        with open(tmp_path / f"rank{r}.json") as f:
            ranks[r] = json.load(f)
    assert [ranks[r]["ranks"] for r in range(2)] == [[0, 2, 0, 2, 0, 1], [1, 2, 1, 2, 0, 1]]
    for r in range(2):
        out = ranks[r]
        assert out["allgather"] == [{"rank": 0}, [1, "one"]]
        assert out["broadcast_from_1"] == ["from", 1]
        assert out["bad_root"] == "broadcast root must be a rank in [0, 2), got 2"

        # Rank 0 stepped Adam once with gradient 2 from weight 1: weight 1 - lr = 0.9.
        has = out["rank0_has_state"]
        assert (has["weight"], has["running_mean"], has["lr"]) == (pytest.approx(0.9), 10.0, 0.1)
        assert has["state"]["0"]["step"] == 1.0
        assert has["state"]["0"]["exp_avg"] == [[pytest.approx(0.1 * 2.0)]]
        assert has["state"]["0"]["exp_avg_sq"] == [[pytest.approx(0.001 * 4.0)]]
        fresh = out["rank0_fresh"]
        assert (fresh["weight"], fresh["running_mean"], fresh["lr"], fresh["state"]) == (1.0, 10.0, 0.1, {})

        mro_base, bpps, grad_none = out["optimizer"]
        assert (mro_base, bpps, grad_none) == ("SGD", 6, True)
        w1 = 1.0 - 0.1 * _grad_sum(0) / 2
        w2 = w1 - 0.1 * _grad_sum(1) / 2
        assert out["weights"] == [pytest.approx(w1, rel=1e-6), pytest.approx(w2, rel=1e-6)]


# --- on two ranks: a trial ---------------------------------------------------------------------


def _final_weight(checkpoint_path: str) -> float:
    state = torch.load(
        os.path.join(checkpoint_path, "state_dict.pth"), map_location="cpu", weights_only=False
    )
    return state["context"]["models_state_dict"][0]["weight"].item()


@needs_horovod
def test_localhost_run_matches_the_closed_form_with_aggregation(tmp_path):
    spec = _spec(
        tmp_path, exp_conf={"optimizations": {"aggregation_frequency": 2}}, max_length={"batches": 6}
    )
    lines: List[str] = []
    code, result = run_trial(
        spec,
        str(tmp_path / "spec.json"),
        hosts=["localhost:2"],
        env=_worker_env(),
        on_output=lines.append,
        timeout=240,
    )
    assert code == 0, "\n".join(lines)
    assert result.status == "completed" and result.total_batches == 6
    xs = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [1, 2, 3, 4], [5, 6, 7, 8]]
    expected = expected_weights(0.5, 0.01, xs, aggregation=2)[-1]
    assert _final_weight(result.checkpoints[-1]["path"]) == pytest.approx(expected, rel=1e-12)
    # Every worker line carries the worker's rank prefix, never horovodrun's tag as well.
    assert any(line.startswith("[rank 0] ") for line in lines)
    assert not [line for line in lines if "<stdout>:" in line or "<stderr>:" in line]


if __name__ == "__main__":
    sys.exit(_engine_checks(sys.argv[1]))
