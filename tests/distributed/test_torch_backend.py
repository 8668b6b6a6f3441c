"""The torch.distributed engine itself: DDP wrapping and options, collectives, initial-state
broadcast, failure reports, the torchrun command lines, and a multi-host rendezvous on localhost."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shlex
import sys
import traceback
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import torch
import torch.distributed as dist

from determined_lite.config import TrainingSettings
from determined_lite.distributed._torch import (
    ForwardingDDP,
    PeerFailure,
    TorchDistributedContext,
    check_ddp_options,
    is_peer_failure,
)
from determined_lite.launch import WorkerSpec
from determined_lite.launch._torchrun import (
    first_failure,
    parse_hosts,
    remote_command,
    torchrun_command,
)
from determined_lite.pytorch._harness import unwrap as _unwrap
from determined_lite.runtime._failures import WorkerFailure
from tests.cloud_storage import free_port
from tests.distributed._helpers import describe, global_batches, run, weights
from tests.fixtures.linear import expected_weights
from tests.timing import budget

# Module fixtures start several runs inside the first test that needs them; each run has its
# own hang timeout (tests/distributed/_helpers.py).
pytestmark = pytest.mark.timeout(600)

# --- options and command lines (no processes) ---------------------------------------------------


def test_check_ddp_options_accepts_the_documented_options() -> None:
    options = {
        "find_unused_parameters": True,
        "broadcast_buffers": False,
        "gradient_as_bucket_view": True,
        "bucket_cap_mb": 12.5,
        "static_graph": False,
    }
    assert check_ddp_options(options) == options
    assert check_ddp_options(None) == {}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"find_unused": True}, "resources.ddp_options: unknown option 'find_unused'"),
        ({"static_graph": "yes"}, "resources.ddp_options.static_graph must be true or false, got 'yes'"),
        ({"bucket_cap_mb": 0}, "resources.ddp_options.bucket_cap_mb must be a positive number, got 0"),
        ({"bucket_cap_mb": True}, "resources.ddp_options.bucket_cap_mb must be a positive number, got True"),
        (["find_unused_parameters"], "resources.ddp_options must be a mapping"),
    ],
)
def test_check_ddp_options_errors_name_the_field(options: Any, message: str) -> None:
    with pytest.raises(ValueError) as e:
        check_ddp_options(options)
    assert str(e.value).startswith(message)


def _spec(tmp_path: Path, slots: int = 2, ddp_options: Any = None) -> WorkerSpec:
    exp_conf = {"resources": {"ddp_options": ddp_options}} if ddp_options is not None else {}
    return WorkerSpec(
        entrypoint="m:T",
        context_dir=str(tmp_path),
        exp_conf=exp_conf,
        hparams={},
        result_path=str(tmp_path / "result.json"),
        max_length={"batches": 1},
        trial_seed=0,
        settings=TrainingSettings.from_config(exp_conf).to_json(),
        backend="torch",
        slots=slots,
    )


def test_single_host_command_is_torchrun_on_loopback(tmp_path: Path) -> None:
    argv, env = torchrun_command(_spec(tmp_path, 3, {"bucket_cap_mb": 4}), str(tmp_path / "spec.json"), None)
    assert argv[:4] == [sys.executable, "-u", "-m", "determined_lite.launch._torchrun"]
    rest = argv[argv.index("--") + 1 :]
    assert rest[rest.index("--nproc-per-node") + 1] == "3"
    assert rest[rest.index("--max-restarts") + 1] == "0"
    # One node, static rendezvous on 127.0.0.1; the agent binds its store there (port 0: any).
    assert [rest[rest.index(flag) + 1] for flag in ("--nnodes", "--rdzv-backend", "--master-addr")] == [
        "1",
        "static",
        "127.0.0.1",
    ]
    assert (rest[rest.index("--master-port") + 1], rest[rest.index("--local-addr") + 1]) == ("0", "127.0.0.1")
    assert argv[argv.index("--listen-address") + 1] == "127.0.0.1"
    assert rest[-3:] == ["--module", "determined_lite.launch.worker", str(tmp_path / "spec.json")]
    assert argv[argv.index("--result") + 1] == str(tmp_path / "result.json")
    assert json.loads(env["DET_LITE_DDP_OPTIONS"]) == {"bucket_cap_mb": 4}


def test_bad_ddp_options_fail_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="resources.ddp_options: unknown option 'bucket_cap'"):
        torchrun_command(_spec(tmp_path, 2, {"bucket_cap": 4}), str(tmp_path / "spec.json"), None)


def test_multi_host_command_runs_one_agent_per_host(tmp_path: Path) -> None:
    argv, _ = torchrun_command(_spec(tmp_path, 3), str(tmp_path / "spec.json"), ["localhost:1", "node-b:2"])
    assert argv[:4] == [sys.executable, "-u", "-m", "determined_lite.launch._multinode"]
    plan = json.loads(argv[4])
    agents = plan["agents"]
    assert [(a["host"], a["local"]) for a in agents] == [("localhost", True), ("node-b", False)]
    ports = set()
    for i, agent in enumerate(agents):
        rest = agent["argv"][agent["argv"].index("--") + 1 :]
        assert rest[rest.index("--node-rank") + 1] == str(i)
        assert rest[rest.index("--nnodes") + 1] == "2"
        assert rest[rest.index("--nproc-per-node") + 1] == ["1", "2"][i]
        assert rest[rest.index("--master-addr") + 1] == "localhost"
        ports.add(rest[rest.index("--master-port") + 1])
    assert len(ports) == 1  # every agent meets at the same rendezvous
    assert plan["result"] == str(tmp_path / "result.json")


@pytest.mark.parametrize(
    "hosts, message",
    [
        (
            ["a:1", "b:2"],
            "resources.hosts ['a:1', 'b:2'] has 3 slots in all but resources.slots_per_trial is 2",
        ),
        (["a", "b:1"], "resources.hosts[0]: entry 'a' must look like 'host:slots'"),
        (["a:0", "b:2"], "resources.hosts[0]: entry 'a:0' must look like 'host:slots'"),
        ("a:2", "resources.hosts must be a non-empty list"),
    ],
)
def test_parse_hosts_errors(hosts: Any, message: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_hosts(hosts, 2)
    assert str(e.value).startswith(message)


def test_parse_hosts() -> None:
    assert parse_hosts(["host-a:2", "10.0.0.2:1"], 3) == [("host-a", 2), ("10.0.0.2", 1)]


def test_remote_command_carries_cwd_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_LITE_SSH", "ssh -p 2222")
    env = {"DET_LITE_DDP_OPTIONS": '{"a": 1}', "PYTHONPATH": "/x y", "HOME": "/root", "OMP_NUM_THREADS": "2"}
    cmd = remote_command("node-b", ["/usr/bin/python3", "-m", "mod", "a b"], "/work dir", env)
    assert cmd[:5] == ["ssh", "-p", "2222", "-o", "BatchMode=yes"]
    assert cmd[5] == "node-b"
    words = shlex.split(cmd[6])
    assert words[:5] == ["cd", "/work dir", "&&", "exec", "env"]
    assert 'DET_LITE_DDP_OPTIONS={"a": 1}' in words and "PYTHONPATH=/x y" in words
    assert "OMP_NUM_THREADS=2" in words and "HOME=/root" not in words
    assert words[-4:] == ["/usr/bin/python3", "-m", "mod", "a b"]


def test_primary_failure_prefers_the_original_error() -> None:
    peer = WorkerFailure(rank=0, exit_code=1, signal=None, error=None, timestamp=5)
    killed = WorkerFailure(rank=1, exit_code=-9, signal="SIGKILL", error=None, timestamp=6)
    stopped = WorkerFailure(rank=2, exit_code=-15, signal="SIGTERM", error=None, timestamp=4)
    raised = WorkerFailure(rank=3, exit_code=1, signal=None, error="ValueError: x", timestamp=7)
    assert first_failure([peer, killed, stopped, raised]) is raised
    assert first_failure([peer, killed, stopped]) is killed
    assert first_failure([peer, stopped]) is stopped
    assert first_failure([]) is None
    assert raised.describe() == "rank 3: ValueError: x"
    assert killed.describe() == "rank 1: killed by SIGKILL"
    assert peer.describe() == "rank 0: exited with code 1"


def test_is_peer_failure() -> None:
    assert is_peer_failure(PeerFailure("x"))
    assert is_peer_failure(
        RuntimeError("[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [::1]:1")
    )
    assert not is_peer_failure(RuntimeError("CUDA out of memory"))
    assert not is_peer_failure(ValueError("Connection closed by peer"))


# --- one rank in this process -------------------------------------------------------------------


@pytest.fixture
def one_rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[TorchDistributedContext]:
    for key, value in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DET_LITE_DDP_OPTIONS", json.dumps({"bucket_cap_mb": 2, "broadcast_buffers": True}))
    ctx = TorchDistributedContext.from_environment(timeout=20, collective_timeout=77)
    try:
        yield ctx
    finally:
        ctx.close()
    assert not dist.is_initialized()


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 1)
        self.bn = torch.nn.BatchNorm1d(2)
        self.tag = "net"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.bn(x))

    def double_it(self, v: int) -> int:
        return 2 * v


def test_context_from_the_environment(one_rank: TorchDistributedContext) -> None:
    ctx = one_rank
    assert (ctx.rank, ctx.size, ctx.local_rank, ctx.local_size, ctx.cross_rank, ctx.cross_size) == (
        0,
        1,
        0,
        1,
        0,
        1,
    )
    assert ctx.backend == "torch" and dist.get_backend() == "gloo"
    # Joining is bounded by `timeout`; collectives by the (longer) `collective_timeout`.
    gloo = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    assert gloo.options._timeout.total_seconds() == 77
    assert ctx.allgather({"a": 1}) == [{"a": 1}]
    assert ctx.broadcast([1, 2]) == [1, 2]
    ctx.barrier()
    with pytest.raises(ValueError, match=r"broadcast root must be a rank in \[0, 1\), got 1"):
        ctx.broadcast(1, root=1)


def test_wrapped_model_forwards_the_module_attributes(one_rank: TorchDistributedContext) -> None:
    net = Net()
    wrapped = one_rank.wrap_model(net, torch.device("cpu"))
    assert isinstance(wrapped, ForwardingDDP) and wrapped.module is net
    assert wrapped.lin is net.lin and wrapped.lin.weight is net.lin.weight
    assert wrapped.tag == "net" and wrapped.double_it(4) == 8
    assert wrapped.bucket_bytes_cap == 2 * 1024 * 1024  # ddp_options from $DET_LITE_DDP_OPTIONS
    with pytest.raises(AttributeError, match="no_such_thing"):
        wrapped.no_such_thing  # noqa: B018
    # The checkpointed state has the module's own keys.
    assert _unwrap(wrapped) is net and set(_unwrap(wrapped).state_dict()) == set(net.state_dict())


def test_forward_without_autograd_skips_ddp_collectives(
    one_rank: TorchDistributedContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapped = one_rank.wrap_model(Net(), torch.device("cpu"))
    syncs: List[int] = []
    real_sync = wrapped._sync_buffers
    monkeypatch.setattr(wrapped, "_sync_buffers", lambda: (syncs.append(1), real_sync())[1], raising=False)
    x = torch.randn(4, 2)
    wrapped(x).sum().backward()
    assert syncs == [1]  # a training forward syncs buffers from rank 0
    with torch.no_grad():
        wrapped.eval()
        expected = wrapped.module(x)
        assert torch.equal(wrapped(x), expected)
    # Validation ranks may run different numbers of batches: no collective there.
    assert syncs == [1]


def test_models_without_trainable_parameters_are_not_wrapped(one_rank: TorchDistributedContext) -> None:
    frozen = torch.nn.Linear(2, 2).requires_grad_(False)
    assert one_rank.wrap_model(frozen, torch.device("cpu")) is frozen
    assert isinstance(one_rank.no_sync([frozen]), contextlib.nullcontext)


# --- two ranks in two processes -----------------------------------------------------------------


def _two_rank_worker(rank: int, port: int, out_dir: str) -> None:
    """One rank of the two-process engine check; writes what it saw to ``out_dir/rank<N>.json``."""
    out: Dict[str, Any] = {}
    os.environ.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "TORCHELASTIC_ERROR_FILE": os.path.join(out_dir, f"error{rank}.json"),
        }
    )
    try:
        ctx = TorchDistributedContext.from_environment(timeout=60)
        out["gathered"] = ctx.allgather({"rank": rank, "t": torch.tensor([rank, 10 * rank])})
        out["gathered"] = [{"rank": g["rank"], "t": g["t"].tolist()} for g in out["gathered"]]
        out["broadcast"] = ctx.broadcast(f"from rank {rank}", root=1)

        # Two models with different initial weights per rank; DDP sends rank 0's at construction.
        torch.manual_seed(100 + rank)
        a = ctx.wrap_model(torch.nn.Linear(3, 1, bias=False), torch.device("cpu"))
        b = ctx.wrap_model(torch.nn.Linear(3, 1, bias=False), torch.device("cpu"))
        out["a_after_wrap"] = a.weight.detach().flatten().tolist()
        with torch.no_grad():  # a trial that changes weights after wrapping, differently per rank
            b.weight.fill_(float(rank + 1))
        opt = torch.optim.Adam(list(a.parameters()) + list(b.parameters()), lr=0.1)
        for step in range(rank + 1):  # different optimizer state per rank
            for p in opt.param_groups[0]["params"]:
                p.grad = torch.full_like(p, float(rank + step + 1))
            opt.step()
        with torch.no_grad():
            b.weight.fill_(float(rank + 1))
        b.module.register_buffer("mask", torch.tensor([rank == 0, rank == 1]))  # gloo has no bool
        ctx.broadcast_initial_state([a, b], [opt])
        out["b_after_broadcast"] = b.weight.detach().flatten().tolist()
        out["mask_after_broadcast"] = b.mask.tolist()
        state = opt.state_dict()["state"]
        out["adam_step"] = [float(state[i]["step"]) for i in sorted(state)]
        out["adam_exp_avg"] = [state[i]["exp_avg"].flatten().tolist() for i in sorted(state)]

        # Gradients: a no_sync batch keeps them local; the next batch averages the sum.
        opt.zero_grad()
        x1 = torch.full((1, 3), float(rank + 1))
        with ctx.no_sync([a, b]):
            (a(x1).sum() + b(x1).sum()).backward()
        out["grad_local"] = [a.weight.grad.flatten().tolist(), b.weight.grad.flatten().tolist()]
        x2 = torch.full((1, 3), 10.0 * (rank + 1))
        (a(x2).sum() + b(x2).sum()).backward()
        out["grad_synced"] = [a.weight.grad.flatten().tolist(), b.weight.grad.flatten().tolist()]

        # Two backward passes per batch: DDP never reduces; synchronize() averages once. b is
        # used on rank 1 only (outside DDP, whose forward passes every rank must make), ``unused``
        # nowhere; the buffer ``stat`` differs per rank until a step batch starts.
        unused = torch.nn.Parameter(torch.zeros(2))
        opt2 = torch.optim.SGD(list(a.parameters()) + list(b.parameters()) + [unused], lr=0.1)
        ctx.wrap_optimizer(opt2, [a, b], 2, 1)
        a.module.register_buffer("stat", torch.tensor(float(rank + 1)))
        opt2.zero_grad(set_to_none=True)
        with ctx.batch_context([a, b], step_batch=True):
            out["stat_in_step_batch"] = a.stat.item()
            a(x1).sum().backward()
            (a(2 * x1).sum() + (b.module(x1).sum() if rank == 1 else 0)).backward()
        out["two_pass_local"] = [a.weight.grad.flatten().tolist(), b.weight.grad is None]
        ctx.synchronize(opt2)
        out["two_pass_synced"] = [a.weight.grad.flatten().tolist(), b.weight.grad.flatten().tolist()]
        out["unused_grad"] = unused.grad

        # Failure: rank 1 raises; rank 0's next collective fails as a peer failure.
        if rank == 1:
            _write(out_dir, rank, out)
            try:
                raise ValueError("boom on rank 1")
            except ValueError:
                ctx.abort()
            return
        try:
            ctx.allgather("never answered")
        except PeerFailure as e:
            out["peer_failure"] = str(e)
            ctx.abort()
        _write(out_dir, rank, out)
    except BaseException:  # noqa: BLE001 -- reported to the test
        out["crash"] = traceback.format_exc()
        _write(out_dir, rank, out)


def _write(out_dir: str, rank: int, out: Dict[str, Any]) -> None:
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Dict[Any, Any]:
    out_dir = str(tmp_path_factory.mktemp("two_ranks"))
    mp = multiprocessing.get_context("spawn")
    port = free_port()
    procs = [mp.Process(target=_two_rank_worker, args=(r, port, out_dir)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=budget(120))
        if p.is_alive():
            p.kill()
            pytest.fail("a rank of the two-process check hung")
    results: Dict[Any, Any] = {}
    for r in range(2):
        with open(os.path.join(out_dir, f"rank{r}.json")) as f:
            results[r] = json.load(f)
        assert "crash" not in results[r], results[r]["crash"]
        path = os.path.join(out_dir, f"error{r}.json")
        results[f"error{r}"] = json.load(open(path)) if os.path.exists(path) else None
    return results


def test_object_collectives_across_processes(two_ranks: Dict[Any, Any]) -> None:
    for r in range(2):
        assert two_ranks[r]["gathered"] == [{"rank": 0, "t": [0, 0]}, {"rank": 1, "t": [1, 10]}]
        assert two_ranks[r]["broadcast"] == "from rank 1"


def test_initial_state_comes_from_rank_0(two_ranks: Dict[Any, Any]) -> None:
    r0, r1 = two_ranks[0], two_ranks[1]
    assert r0["a_after_wrap"] == r1["a_after_wrap"]
    assert r0["b_after_broadcast"] == r1["b_after_broadcast"] == [1.0, 1.0, 1.0]
    assert r0["mask_after_broadcast"] == r1["mask_after_broadcast"] == [True, False]
    # Rank 0 stepped Adam once, rank 1 twice with other gradients: rank 1 now holds rank 0's state.
    assert r0["adam_step"] == r1["adam_step"] == [1.0, 1.0]
    assert r0["adam_exp_avg"] == r1["adam_exp_avg"]
    assert r0["adam_exp_avg"][0] == pytest.approx([0.1, 0.1, 0.1])  # (1 - 0.9) · grad 1


def test_no_sync_keeps_gradients_local_then_one_step_averages_them(two_ranks: Dict[Any, Any]) -> None:
    # dL/dW = x for L = sum(W·x): rank r's local gradient is r + 1 for both models.
    for r in range(2):
        assert two_ranks[r]["grad_local"] == [[float(r + 1)] * 3] * 2
        # Then mean over ranks of (local sum): ((1 + 10) + (2 + 20)) / 2 = 16.5.
        assert two_ranks[r]["grad_synced"] == [[16.5] * 3] * 2


def test_several_backward_passes_are_averaged_once_by_synchronize(two_ranks: Dict[Any, Any]) -> None:
    for r in range(2):
        assert two_ranks[r]["stat_in_step_batch"] == 1.0  # rank 0's buffer, as DDP broadcasts it
        # dL/dW = x + 2x = 3(r + 1) stays local through both passes (DDP did not reduce) ...
        assert two_ranks[r]["two_pass_local"] == [[3.0 * (r + 1)] * 3, r == 0]
        # ... then one mean over ranks: (3 + 6) / 2; b: rank 1's x = 2 and rank 0's zeros.
        assert two_ranks[r]["two_pass_synced"] == [[4.5] * 3, [1.0] * 3]
        assert two_ranks[r]["unused_grad"] is None


def test_failure_is_recorded_by_the_failing_rank_only(two_ranks: Dict[Any, Any]) -> None:
    assert "another worker failed or exited" in two_ranks[0]["peer_failure"]
    assert two_ranks["error0"] is None  # a peer failure is not the story
    assert two_ranks["error1"]["message"]["message"] == "ValueError: boom on rank 1"
    assert "raise ValueError" in two_ranks["error1"]["message"]["extraInfo"]["py_callstack"]


def test_rendezvous_without_the_other_rank_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(Exception, match="(?i)time"):  # torch's timeout error, whatever its class
        TorchDistributedContext.from_environment(timeout=1.5)
    assert not dist.is_initialized()


# --- a multi-host rendezvous on localhost -------------------------------------------------------

DDP_OPTIONS = {
    "find_unused_parameters": True,
    "gradient_as_bucket_view": True,
    "bucket_cap_mb": 1,
    "broadcast_buffers": False,
}
HP = {"lr": 0.005, "w0": 0.5, "global_batch_size": 4, "dataset_size": 12, "val_size": 5, "shuffle": True}


def test_two_hosts_on_localhost_train_with_the_ddp_options(tmp_path: Path) -> None:
    exp_conf = {"resources": {"ddp_options": DDP_OPTIONS}, "min_validation_period": {"batches": 4}}
    r = run(
        "torch",
        2,
        "dist_trials:DistLinearTrial",
        HP,
        exp_conf,
        6,
        tmp_path,
        hosts=["localhost:1", "localhost:1"],
    )
    assert r.code == 0 and r.result.status == "completed", describe(r)
    for rank in range(2):
        (init,) = r.of_kind("init", rank)
        # One worker per "host": node rank = cross rank, local rank 0 on each.
        assert (
            init["size"],
            init["local_rank"],
            init["local_size"],
            init["cross_rank"],
            init["cross_size"],
        ) == (
            2,
            0,
            1,
            rank,
            2,
        )
        assert init["model_type"] == "ForwardingDDP" and init["weight_via_wrapper"] == HP["w0"]
        assert init["find_unused_parameters"] is True and init["gradient_as_bucket_view"] is True
        assert init["bucket_bytes_cap"] == 1024 * 1024 and init["forward_sync_buffers"] is False
    batches = global_batches(r, 2)
    assert weights(r, 0) == weights(r, 1)
    assert weights(r, 0) == pytest.approx(expected_weights(HP["w0"], HP["lr"], batches), rel=1e-12)
    # The chief (on the first host) wrote the result and the checkpoints: after the validation
    # at batch 4 (no searcher metric: policy "best" acts as "all") and at the end.
    assert [c["total_batches"] for c in r.result.checkpoints] == [4, 6]
    assert sorted(os.listdir(r.checkpoint_root)) == sorted(c["uuid"] for c in r.result.checkpoints)
