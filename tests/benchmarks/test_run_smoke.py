"""``benchmarks/run.py`` works: a tiny run prints well-formed results. Never asserts timings.

The smoke run covers the in-process measures (single, checkpoint), one 2-worker job
(validation on torch.distributed: torchrun, the collective count, the metric cross-check)
and the CLI measure (which also checks that ``det-lite experiment list`` does not import
torch). The statistics helpers are checked on closed-form inputs.
"""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.timing import budget

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(REPO, "benchmarks", "run.py")
SMOKE_MEASURES = "single,horovod,ddp,validation,checkpoint,cli,memory"
KEYS = {"name", "det_lite_s", "baseline_s", "ratio", "goal"}


def _positive(value):
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def smoke_rows():
    proc = subprocess.run(
        [sys.executable, RUN, "--smoke", "--json", "--only", SMOKE_MEASURES],
        capture_output=True,
        text=True,
        timeout=budget(240),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_smoke_run_prints_one_row_per_case(smoke_rows):
    names = [r["name"] for r in smoke_rows]
    assert names == [
        "single_mlp_step",
        "horovod_mlp_2workers_step",
        "horovod_mlp_2workers_step_aggregation2",
        "ddp_mlp_2workers_step",
        "ddp_mlp_2workers_step_aggregation2",
        "validation_torch_2workers",
        "checkpoint_save_1M",
        "checkpoint_load_1M",
        "cli_experiment_list_50",
        "cli_experiment_list_all_50",
        "memory_mlp_peak_rss",
    ]


def test_every_row_has_the_required_keys_and_positive_numbers(smoke_rows):
    for row in smoke_rows:
        assert KEYS <= set(row), row
        if row["name"].startswith("memory_"):  # bytes, not seconds (test_memory_row_...)
            continue
        assert _positive(row["det_lite_s"]), row
        if row["name"].startswith("cli_"):  # absolute: goal in seconds, no baseline
            assert row["baseline_s"] is None and row["ratio"] is None, row
            assert row["goal"] == 0.3
        else:
            assert _positive(row["baseline_s"]) and _positive(row["ratio"]), row
            assert _positive(row["goal"]), row
        assert row["passed"] in (True, False), row


def test_memory_row_compares_peak_rss_in_bytes(smoke_rows):
    (row,) = [r for r in smoke_rows if r["name"] == "memory_mlp_peak_rss"]
    assert row["det_lite_s"] is None and row["baseline_s"] is None
    # Peak RSS of a process that imported torch and trained: tens of MiB at the very least.
    assert row["det_lite_bytes"] > 50 * 2**20 and row["baseline_bytes"] > 50 * 2**20
    assert row["ratio"] == pytest.approx(row["det_lite_bytes"] / row["baseline_bytes"])  # 1 repeat
    assert row["goal"] == 1.05 and row["passed"] in (True, False)


def test_validation_row_counts_collectives(smoke_rows):
    (row,) = [r for r in smoke_rows if r["name"] == "validation_torch_2workers"]
    # The job fails (no row) when det-lite's metrics differ from the hand-written gather's.
    assert isinstance(row["collectives"], int) and row["collectives"] >= 1
    assert row["collectives_goal"] == 1


def test_cli_rows_see_no_torch_import(smoke_rows):
    for row in smoke_rows:
        if row["name"].startswith("cli_"):
            assert row["torch_imported"] is False, row


def test_compile_rows_exist():
    """``--only compile`` (issue 14): compiled det-lite vs the hand-compiled and the eager plain
    loop, with the compile times apart (``--smoke`` compiles with aot_eager: no C++ build)."""
    proc = subprocess.run(
        [sys.executable, RUN, "--smoke", "--json", "--only", "compile"],
        capture_output=True,
        text=True,
        timeout=budget(240),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    assert [r["name"] for r in rows] == ["compile_mlp_step", "compile_mlp_vs_eager"]
    step, vs_eager = rows
    assert step["goal"] == 1.05 and vs_eager["goal"] in (1.0, None)
    for row in rows:
        assert KEYS <= set(row), row
        assert _positive(row["det_lite_s"]) and _positive(row["baseline_s"]) and _positive(row["ratio"])
        assert _positive(row["compile_s"]) and _positive(row["hand_compile_s"]), row
        assert _positive(row["hand_vs_eager"]) and row["backend"] == "aot_eager"


def test_checkpoint_code_rows_compare_a_big_context_with_a_1_file_one():
    """``--only checkpoint_code`` (issue 28, item 7): a checkpoint and its removal with a big
    context snapshot against a 1-file one (1,000 files with ``--smoke``)."""
    proc = subprocess.run(
        [sys.executable, RUN, "--smoke", "--json", "--only", "checkpoint_code"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    names = [r["name"] for r in rows]
    assert names == ["checkpoint_code_save_1000_files", "checkpoint_code_delete_1000_files"]
    assert [r["goal"] for r in rows] == [1.25, 1.5]
    for row in rows:
        assert KEYS <= set(row) and row["files"] == 1000, row
        assert _positive(row["det_lite_s"]) and _positive(row["baseline_s"]) and _positive(row["ratio"])
    assert _positive(rows[0]["seal_s"])


def test_unknown_measure_is_a_usage_error():
    proc = subprocess.run(
        [sys.executable, RUN, "--only", "single,nope"],
        capture_output=True,
        text=True,
        timeout=budget(60),
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert "unknown measure(s) nope" in proc.stderr


# --- statistics on closed-form inputs -------------------------------------------------------------


@pytest.fixture
def common(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(REPO, "benchmarks"))
    import _common

    return _common


def test_lockstep_row_pairs_batches_and_takes_medians(common):
    # Repeat 1: det-lite 10 % slower on every batch; repeat 2: 30 % slower; repeat 3: 20 %.
    results = [
        ([1.1, 2.2, 3.3], [1.0, 2.0, 3.0]),
        ([1.3, 1.3, 1.3], [1.0, 1.0, 1.0]),
        ([2.4, 1.2, 3.6], [2.0, 1.0, 3.0]),
    ]
    row = common.lockstep_row("x", results, 1.05)
    assert row["ratio"] == pytest.approx(1.2)  # median of the per-repeat ratios 1.1, 1.3, 1.2
    assert row["ratio_mean"] == pytest.approx(1.2)  # 6.6/6, 3.9/3, 7.2/6
    assert row["det_lite_s"] == pytest.approx(2.2)  # median of the per-repeat medians 2.2, 1.3, 2.4
    assert row["baseline_s"] == pytest.approx(2.0)  # ... of 2.0, 1.0, 2.0
    assert row["repeats"] == 3
    assert common.passed(row) is False
    assert common.passed(dict(row, goal=1.25)) is True


def test_alternate_runs_the_sides_in_abba_order(common):
    calls = []

    def side(tag):
        return lambda: calls.append(tag) or len(calls)

    ours, base = common.alternate(4, side("d"), side("b"))
    assert "".join(calls) == "dbbddbbd"
    assert ours == [1, 4, 5, 8] and base == [2, 3, 6, 7]


def test_absolute_rows_and_collective_goals(common):
    row = common.absolute_row("cli", [0.2, 0.4, 0.1], 0.3)
    assert (row["det_lite_s"], row["baseline_s"], row["ratio"]) == (0.2, None, None)
    assert common.passed(row) is True
    assert common.passed(common.absolute_row("startup", [3.0], None)) is None
    ratio = common.ratio_row("val", [1.0], [1.0], 1.1, collectives=2, collectives_goal=1)
    assert common.passed(ratio) is False  # the time is fine, the number of collectives is not


# --- peers (--peers: Lightning Trainer, Fabric, Accelerate) ----------------------------------------


def _peers_module(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(REPO, "benchmarks"))
    import _peers

    return _peers


PEER_CASES = [
    "single_mlp_step",
    "ddp_mlp_2workers_step",
    "ddp_mlp_2workers_step_aggregation2",
    "validation_torch_2workers",
]


@pytest.fixture(scope="module")
def peer_rows():
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        import _peers

        absent = _peers.missing(["single", "ddp", "validation"])
    finally:
        sys.path.remove(os.path.join(REPO, "benchmarks"))
    if absent:
        pytest.skip(f"the bench extra is not installed ({', '.join(absent)} missing)")
    proc = subprocess.run(
        [sys.executable, RUN, "--smoke", "--json", "--only", "single,ddp,validation", "--peers"],
        capture_output=True,
        text=True,
        timeout=budget(600),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_peers_run_every_case_beside_det_lite(peer_rows):
    by_name = {r["name"]: r for r in peer_rows}
    for case in PEER_CASES:
        assert by_name[case]["framework"] == "det-lite"
        for framework in ("lightning", "fabric", "accelerate"):
            row = by_name[f"{case}.{framework}"]
            assert (row["case"], row["framework"]) == (case, framework)
            assert row["det_lite_s"] is None and row["goal"] is None and row["passed"] is None
            assert _positive(row["peer_s"]) and _positive(row["baseline_s"]) and _positive(row["ratio"])
        assert set(by_name[case]["peer_ratios"]) == {"lightning", "fabric", "accelerate"}
    # The peers' validations agreed with the baseline (the job fails otherwise) and were counted.
    for framework in ("lightning", "fabric", "accelerate"):
        assert by_name[f"validation_torch_2workers.{framework}"]["collectives"] >= 1
    # The MLP's goal includes the lowest ratio of all frameworks: the row says whether it has it.
    assert isinstance(by_name["single_mlp_step"]["lowest_ratio"], bool)


def test_peers_without_the_extra_is_a_usage_error(monkeypatch, capsys):
    peers = _peers_module(monkeypatch)
    monkeypatch.setattr(peers.importlib.util, "find_spec", lambda name: None)
    assert peers.missing(["single", "cli"]) == ["accelerate", "lightning"]
    assert peers.missing(["search"]) == ["optuna", "ray"]  # the search measure's peers
    assert peers.missing() == ["accelerate", "lightning", "optuna", "ray"]
    import run

    monkeypatch.setattr(run, "missing", peers.missing)
    for only, needed in (("single", "accelerate, lightning"), ("search", "optuna, ray")):
        with pytest.raises(SystemExit) as exc:
            run.parse_args(["--only", only, "--peers"])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert f"--peers needs {needed}; install the bench extra: pip install" in err


def test_peer_rows_are_compared_with_det_lite(common):
    det = common.lockstep_row("single_mlp_step", [([0.8], [1.0])], 0.9, lead_peers=True)
    fabric = common.peer_row(common.lockstep_row("single_mlp_step", [([1.1], [1.0])], 0.9), "fabric")
    slow = common.peer_row(common.lockstep_row("single_mlp_step", [([1.7], [1.0])], 0.9), "lightning")
    assert (fabric["name"], fabric["case"], fabric["peer_s"], fabric["det_lite_s"]) == (
        "single_mlp_step.fabric",
        "single_mlp_step",
        1.1,
        None,
    )
    common.compare_peers([det, fabric, slow])
    assert det["peer_ratios"] == {"fabric": pytest.approx(1.1), "lightning": pytest.approx(1.7)}
    assert det["lowest_ratio"] is True and common.passed(det) is True
    assert common.passed(fabric) is None
    # A peer with a lower ratio fails det-lite's goal although 0.8 <= 0.9.
    fast = common.peer_row(common.lockstep_row("single_mlp_step", [([0.7], [1.0])], 0.9), "accelerate")
    common.compare_peers([det, fabric, fast])
    assert det["lowest_ratio"] is False and common.passed(det) is False
    table = common.format_peer_table([det, fabric, fast])
    frameworks = [line.split("|")[2].strip() for line in table.splitlines()[2:]]
    assert frameworks == ["accelerate", "det-lite", "fabric"]  # by ratio
