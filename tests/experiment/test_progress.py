"""What a foreground experiment shows: bars per running trial, the summary, one final line.

The end-to-end test runs an ASHA search of the closed-form linear trial in a pseudo-terminal
and reads the screen a user would see.
"""

from __future__ import annotations

import os
import re
import sys

import pytest

from determined_lite._terminal import format_number
from determined_lite.experiment._progress import compact_log_line, hparam_text, summary
from tests.cli_helpers import REPO, asha_overrides, describe
from tests.cli_helpers import write_config as _write_config
from tests.pty_helpers import run_in_pty

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")


def _ckpt(uuid: str, batches: int, loss: float) -> dict:
    return {"uuid": uuid, "total_batches": batches, "metrics": {"val_loss": loss}}


def _trial(tid: int, state: str, batches: int, best, lr: float, checkpoints) -> dict:
    hparams = {"lr": lr, "global_batch_size": 2, "opt": {"momentum": 0.9, "name": "sgd"}}
    return {
        "id": tid,
        "state": state,
        "total_batches": batches,
        "best_validation": best,
        "hparams": hparams,
        "checkpoints": checkpoints,
    }


DESCRIPTION = {
    "trials": [
        _trial(1, "COMPLETED", 2, 24.904512, 0.003, [_ckpt("aaaaaaaa-1111", 2, 24.904512)]),
        # best validation at batch 2, latest checkpoint at 4: the best one is shown
        _trial(
            2,
            "COMPLETED",
            4,
            1.35468,
            0.03,
            [_ckpt("bbbbbbbb-2222", 2, 1.35468), _ckpt("cccccccc-3333", 4, 5.33)],
        ),
        _trial(3, "COMPLETED", 8, 5.10849e-05, 0.01, [_ckpt("dddddddd-4444", 8, 5.10849e-05)]),
        _trial(4, "ERROR", 0, None, 0.02, []),
    ]
}


def test_summary_is_sorted_by_the_metric_with_best_checkpoints_and_varying_hparams():
    text = summary(
        DESCRIPTION, metric="val_loss", smaller_is_better=True, varying=[("lr",)], stopped_early={1, 2}
    )
    assert text.splitlines() == [
        "trial  state         batches  best val_loss  checkpoint     lr",
        "    3  COMPLETED           8      5.108e-05  dddddddd     0.01",
        "    2  ASHA-stopped        4          1.355  bbbbbbbb     0.03",
        "    1  ASHA-stopped        2           24.9  aaaaaaaa    0.003",
        "    4  ERROR               0                              0.02",
        "best trial: 3 (lr=0.01), val_loss = 5.108e-05",  # issue 29.11: as the table shows it
        "best checkpoint: dddddddd-4444 (batch 8)",
    ]


def _placed(trial: dict, *runs: tuple) -> dict:
    return {**trial, "runs": [{"host": h, "slots": len(d) or 1, "devices": list(d)} for h, d in runs]}


def test_summary_says_where_trials_ran_when_they_held_gpus_or_spanned_hosts():
    gpus = {
        "trials": [
            _placed(DESCRIPTION["trials"][0], ("box", ("0", "1")), ("box", ("2", "3"))),  # latest run
            _placed(DESCRIPTION["trials"][2], ("box", ("0", "1"))),
            _placed(DESCRIPTION["trials"][3]),  # never ran
        ]
    }
    assert summary(gpus, metric="val_loss", smaller_is_better=True).splitlines()[:4] == [
        "trial  state      where    batches  best val_loss  checkpoint",
        "    3  COMPLETED  gpu 0,1        8      5.108e-05  dddddddd",
        "    1  COMPLETED  gpu 2,3        2           24.9  aaaaaaaa",
        "    4  ERROR                     0",
    ]
    two = [_placed(DESCRIPTION["trials"][2], ("a", ())), _placed(DESCRIPTION["trials"][0], ("b", ()))]
    hosts = {"trials": two}
    lines = summary(hosts, metric="val_loss", smaller_is_better=True).splitlines()
    assert lines[0].split() == ["trial", "state", "where", "batches", "best", "val_loss", "checkpoint"]
    assert [line.split()[2] for line in lines[1:3]] == ["a", "b"]
    # One host, CPU slots only: nothing to say, no column.
    cpu = {"trials": [_placed(DESCRIPTION["trials"][2], ("box", ()))]}
    assert "where" not in summary(cpu, metric="val_loss", smaller_is_better=True)


def test_summary_larger_is_better_and_nested_hparams():
    text = summary(
        DESCRIPTION,
        metric="val_loss",
        smaller_is_better=False,
        varying=[("opt", "name")],
        stopped_early=set(),
    )
    lines = text.splitlines()
    assert lines[0].split() == ["trial", "state", "batches", "best", "val_loss", "checkpoint", "opt.name"]
    assert [line.split()[0] for line in lines[1:5]] == ["1", "2", "3", "4"]
    assert lines[-2] == "best trial: 1 (opt.name=sgd), val_loss = 24.9"  # issue 29.11: the table's format
    assert (
        hparam_text(DESCRIPTION["trials"][0]["hparams"], [("lr",), ("opt", "momentum")])
        == "lr=0.003 opt.momentum=0.9"
    )


def test_summary_with_three_searched_hparams_fits_80_columns_without_cutting_a_value():
    """Issue 29.10: with 3 searched hyperparameters the summary's rows wrapped at 80 columns."""
    trials = []
    for tid in range(1, 11):
        hp = {"learning_rate": 0.001 * tid, "hidden_size": 64 * tid, "dropout_rate": 0.05 * tid}
        t = _trial(tid, "COMPLETED", 1000, 0.5 / tid, 0.0, [_ckpt(f"{tid:08d}-ffff", 1000, 0.5 / tid)])
        trials.append({**t, "hparams": hp, "stopped_early": tid < 5})
    varying = [("learning_rate",), ("hidden_size",), ("dropout_rate",)]
    wide = summary({"trials": trials}, metric="val_loss", smaller_is_better=True, varying=varying)
    assert max(len(line) for line in wide.splitlines()) > 80  # what wrapped before
    text = summary({"trials": trials}, metric="val_loss", smaller_is_better=True, varying=varying, width=80)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    assert lines[0].split() == [
        "trial",
        "state",
        "best",
        "val_loss",
        "learning_rate",
        "hidden_size",
        "dropout_rate",
    ]
    assert lines[11] == "(left out to fit 80 columns: checkpoint, batches)"
    # every value whole, as the wide table shows it; ASHA-stopped from the store's record
    for narrow_row, wide_row in zip(lines[1:11], wide.splitlines()[1:11]):
        cells = wide_row.split()
        assert narrow_row.split() == [cells[0], cells[1], cells[3], *cells[5:]]
    assert lines[10].split()[1] == "ASHA-stopped"
    assert (
        lines[12] == "best trial: 10 (learning_rate=0.01 hidden_size=640 …), val_loss = 0.05"
    )
    # Narrower: hyperparameter columns go from the last, the best line keeps whole items.
    narrow = summary(
        {"trials": trials}, metric="val_loss", smaller_is_better=True, varying=varying, width=60
    ).splitlines()
    assert all(len(line) <= 60 for line in narrow[:-1]), narrow
    assert narrow[0].split() == ["trial", "state", "best", "val_loss", "learning_rate"]
    assert narrow[-2] == "best trial: 10 (learning_rate=0.01 …), val_loss = 0.05"


def test_worker_log_lines_lose_their_time_and_logger_on_the_terminal():
    line = "[trial 1] [rank 0] 2026-11-25 02:28:02,603 INFO determined_lite: batch 23 training: loss=1.092"
    assert compact_log_line(line) == "[trial 1] [rank 0] batch 23 training: loss=1.092"
    warning = "[trial 1] 2026-11-25 02:28:02,603 WARNING determined_lite: careful"
    assert compact_log_line(warning) == warning


WIDTH = 90


@pytest.mark.timeout(300)
def test_asha_experiment_on_a_terminal(tmp_path, _det_lite_home):
    path = _write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        **asha_overrides(),
    )
    run = run_in_pty(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", path, LINEAR],
        width=WIDTH,
        cwd=REPO,
    )
    screen = run.screen
    assert run.returncode == 0, "\n".join(screen)
    trials = describe(1)["trials"]

    # Bars: labelled by trial id and the one hyperparameter that varies, with the measured
    # throughput, the latest loss and the searcher metric; never wider than the terminal.
    bars = [line for line in re.split(r"[\r\n]", run.raw) if re.match(r"trial \d+ lr=[0-9.]+: +\d+%", line)]
    assert bars and any("%|" in b for b in bars), run.raw
    assert all(len(b.rstrip()) < WIDTH for b in bars)
    assert all("global_batch_size" not in b and "dataset_size" not in b for b in bars)
    assert any(
        re.search(r"\[\d\d:\d\d<\d\d:\d\d, \d[\d.e+]* (batch/s|s/batch), loss=[^,]+, val_loss=", b)
        for b in bars
    )
    # Each run leaves its bar's last state on the screen.
    for t in trials:
        n = t["total_batches"]
        assert any(
            re.match(
                rf"trial {t['id']} lr={t['hparams']['lr']}: 100%(\|.*\|)? {n}/{n} ",
                line,
            )
            for line in screen
        )

    # The summary, best first, with each trial's best (not latest) checkpoint.
    start = screen.index(next(line for line in screen if line.startswith("trial  state")))
    table = screen[start : start + 1 + len(trials)]
    assert table[0].split() == ["trial", "state", "batches", "best", "val_loss", "checkpoint", "lr"]
    ranked = sorted(trials, key=lambda t: t["best_validation"])
    best_shown_not_latest = 0
    for line, t in zip(table[1:], ranked):
        cells = line.split()
        assert int(cells[0]) == t["id"]
        assert cells[1] == ("COMPLETED" if t["total_batches"] == 8 else "ASHA-stopped")
        best = min(t["checkpoints"], key=lambda c: c["metrics"]["val_loss"])
        latest = max(t["checkpoints"], key=lambda c: c["total_batches"])
        assert cells[4] == best["uuid"][:8]
        best_shown_not_latest += best["uuid"] != latest["uuid"]
        assert float(cells[3]) == pytest.approx(t["best_validation"], rel=1e-3)
        assert float(cells[5]) == t["hparams"]["lr"]
    # lr=0.03 is best at batch 2 and worse at 4 (its rung): that trial shows its batch-2 checkpoint.
    assert best_shown_not_latest >= 1
    winner = ranked[0]
    lr, value = winner["hparams"]["lr"], winner["best_validation"]
    # issue 29.11: the best line shows the metric as the table does
    assert (
        screen[start + 1 + len(trials)]
        == f"best trial: {winner['id']} (lr={lr}), val_loss = {format_number(value)}"
    )
    best_ckpt = min(winner["checkpoints"], key=lambda c: c["metrics"]["val_loss"])
    assert (
        screen[start + 2 + len(trials)]
        == f"best checkpoint: {best_ckpt['uuid']} (batch {best_ckpt['total_batches']})"
    )
    # One final line, last; no line of the summary is broken.
    assert screen[-1] == "experiment 1 COMPLETED"
    assert sum("COMPLETED" in line and line.startswith("experiment") for line in screen) == 1
    assert all(len(line) < WIDTH for line in screen[start:])
    # Metric lines above the bars carry no timestamp or logger name.
    assert any(
        re.fullmatch(r"\[trial \d+\] batch 2 validation: val_loss=\S+ weight=\S+", line) for line in screen
    )


# torch itself imports tqdm (torch.hub) where it is installed: the probe checks that det-lite
# never loaded its bar class (``_terminal._tqdm``) in a worker, i.e. drew nothing there.
PROBE = '''

from determined_lite import _terminal


class TqdmProbeTrial(LinearTrial):
    """Fails a batch when det-lite loaded its tqdm bars in this (worker) process."""

    def train_batch(self, batch, epoch_idx, batch_idx):
        if _terminal._tqdm.cache_info().currsize:
            raise RuntimeError("det-lite loaded tqdm bars in a trial worker")
        return super().train_batch(batch, epoch_idx, batch_idx)
'''


@pytest.mark.timeout(300)
def test_bars_are_drawn_by_the_cli_and_tqdm_stays_out_of_the_workers(tmp_path, _det_lite_home):
    context = tmp_path / "ctx"
    context.mkdir()
    with open(os.path.join(LINEAR, "model_def.py")) as f:
        (context / "model_def.py").write_text(f.read() + PROBE)
    path = _write_config(
        os.path.join(LINEAR, "const.yaml"),
        tmp_path,
        entrypoint="model_def:TqdmProbeTrial",
        **{"searcher.max_length": {"batches": 4}},
    )
    run = run_in_pty(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", path, str(context)],
        width=WIDTH,
        cwd=REPO,
    )
    assert run.returncode == 0, "\n".join(run.screen)
    assert "trial 1: 100%|" in run.raw  # the CLI drew the bar (with tqdm)
    assert run.screen[-1] == "experiment 1 COMPLETED"
