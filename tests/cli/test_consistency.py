"""One CLI: one error prefix, checkpoints named by a unique uuid prefix, did-you-mean for
entrypoints, and `describe --metrics --csv|--outdir` (Determined's options)."""

from __future__ import annotations

import csv
import io
import os

import pytest

from determined_lite.launch.worker import import_entrypoint
from determined_lite.store import Store
from tests.cli_helpers import REPO, cli

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
CONST = os.path.join(LINEAR, "const.yaml")
UUIDS = [
    "abcd1111-0000-4000-8000-000000000001",
    "abcd2222-0000-4000-8000-000000000002",
    "ef019999-0000-4000-8000-000000000003",
]


@pytest.fixture
def store(_det_lite_home):
    s = Store()
    exp = s.experiments.create({"name": "e", "searcher": {"name": "single"}}, "/ctx", "/ctx/e.yaml")
    trial = s.trials.create(exp, 0, {"lr": 0.1, "layers": {"n": 2}}, 5)
    s.metrics.add_training(trial, 2, {"loss": 0.1 + 1e-12, "note": "text"})
    s.metrics.add_training(trial, 4, {"loss": 0.05})
    s.metrics.add_validation(trial, 4, {"accuracy": 0.875, "matrix": [[1, 0], [0, 1]]})
    for batches, uuid in zip([2, 4, 4], UUIDS):
        path = _det_lite_home / "checkpoints" / uuid
        path.mkdir(parents=True)
        (path / "metadata.json").write_text("{}")
        s.checkpoints.add(trial, uuid, str(path), batches, None)
    yield s
    s.close()


# --- one error prefix -----------------------------------------------------------------------

ERRORS = [
    (["experiment", "describe", "99"], 2, "experiment 99 not found"),
    (["experiment", "describe"], 2, "Missing argument 'EXPERIMENT_IDS'."),
    (["experment", "list"], 2, "No such command 'experment'. Did you mean 'experiment'?"),
    (["experiment", "logs", "1", "--tail", "-3"], 2, "Invalid value for '--tail'"),
    (
        ["experiment", "describe", "1", "--json", "--csv"],
        2,
        "--json cannot be combined with --csv or --outdir",
    ),
    (["checkpoint", "export", "abcd", "/tmp/x"], 2, "checkpoint prefix abcd is ambiguous"),
    (["experiment", "create", CONST, "/no/such/dir"], 2, "Invalid value for 'CONTEXT_DIR'"),
    (
        ["experiment", "create", CONST, LINEAR, "--config", "entrypoint=model_def:LinearTrail"],
        2,
        "did you mean",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("args, code, message", ERRORS)
def test_every_error_is_one_det_lite_error_line(store, args, code, message):
    proc = cli(*args)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code, proc.stderr
    assert lines[-1].startswith("det-lite: error: ") and message in lines[-1], proc.stderr
    assert not any(line.startswith(("Error", "error", "Warning")) for line in lines), proc.stderr
    assert sum(line.startswith("det-lite: error: ") for line in lines) == 1
    assert "Traceback" not in proc.stderr


# --- checkpoint uuid prefixes -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ef01", "EF019", UUIDS[2], "abcd1"])
def test_a_unique_prefix_names_a_checkpoint(store, tmp_path, name):
    proc = cli("checkpoint", "export", name, str(tmp_path / "out"), check=True)
    expected = UUIDS[0] if name == "abcd1" else UUIDS[2]
    assert proc.stdout.startswith(f"Exported checkpoint {expected} (trial 1, batch ")
    assert (tmp_path / "out" / "metadata.json").is_file()


@pytest.mark.slow
def test_ambiguous_and_short_prefixes_are_refused_with_the_candidates(store, tmp_path):
    ambiguous = cli("checkpoint", "export", "abcd", str(tmp_path / "out"))
    assert ambiguous.returncode == 2
    assert ambiguous.stderr.strip() == (
        "det-lite: error: checkpoint prefix abcd is ambiguous: 2 checkpoints match: "
        f"{UUIDS[0]} (experiment 1, trial 1, batch 2); {UUIDS[1]} (experiment 1, trial 1, batch 4)"
    )
    short = cli("checkpoint", "export", "ef0", str(tmp_path / "out"))
    assert (short.returncode, short.stderr.strip()) == (
        2,
        "det-lite: error: checkpoint ef0 not found (a uuid prefix needs at least 4 characters)",
    )
    assert cli("checkpoint", "export", "ab%d", str(tmp_path / "out")).returncode == 2  # no LIKE wildcards
    assert not (tmp_path / "out").exists()


# --- did-you-mean for entrypoints -------------------------------------------------------------


@pytest.mark.slow
def test_entrypoint_typos_get_a_suggestion(tmp_path, _det_lite_home):
    cls = cli("experiment", "create", CONST, LINEAR, "--config", "entrypoint=model_def:LinearTrail")
    assert cls.returncode == 2
    assert cls.stderr.strip().endswith("defines no 'LinearTrail'; did you mean 'LinearTrial'?")
    module = cli("experiment", "create", CONST, LINEAR, "--config", "entrypoint=model_deff:LinearTrial")
    assert module.returncode == 2
    assert module.stderr.strip().endswith(
        f"no module 'model_deff' in context directory {LINEAR}; did you mean 'model_def'?"
    )
    far = cli("experiment", "create", CONST, LINEAR, "--config", "entrypoint=model_def:Zebra")
    assert far.stderr.strip().endswith("defines no 'Zebra' (its trial classes: LinearTrial)")
    assert Store().experiments.list() == []  # nothing recorded
    with pytest.raises(ImportError, match=r"has no attribute 'LinearTrail'; did you mean 'LinearTrial'\?"):
        import_entrypoint("model_def:LinearTrail", LINEAR)


# --- describe --metrics --csv -----------------------------------------------------------------


def _sections(text: str) -> dict:
    """``Title:`` lines followed by CSV, as {title: [rows]}."""
    sections, title, lines = {}, None, []
    for line in text.splitlines() + [""]:
        if line.endswith(":") and "," not in line:
            title, lines = line[:-1], []
        elif line == "" and title is not None:
            sections[title] = list(csv.reader(io.StringIO("\n".join(lines))))
            title = None
        elif title is not None:
            lines.append(line)
    return sections


@pytest.mark.slow
def test_describe_metrics_csv_has_one_column_per_scalar_metric(store):
    out = cli("experiment", "describe", "1", "--metrics", "--csv", check=True).stdout
    sections = _sections(out)
    assert list(sections) == ["Experiment", "Trials", "Workloads"]
    assert sections["Experiment"][0] == [
        "ID",
        "Name",
        "State",
        "Searcher",
        "Start Time",
        "End Time",
        "Context Directory",
    ]
    trials = sections["Trials"]
    assert trials[1][:3] == ["1", "ACTIVE", '{"layers": {"n": 2}, "lr": 0.1}']
    header, *rows = sections["Workloads"]
    assert header == [
        "Trial ID",
        "# of Batches",
        "Training Metric: loss",
        "Validation Metric: accuracy",
        "Checkpoint",
    ]
    assert rows == [
        ["1", "2", repr(0.1 + 1e-12), "", UUIDS[0]],  # full precision; the string metric has no column
        ["1", "4", "0.05", "0.875", f"{UUIDS[1]} {UUIDS[2]}"],
    ]
    same = cli("trial", "describe", "1", "--metrics", "--csv", check=True).stdout
    assert _sections(same)["Workloads"] == sections["Workloads"]


def test_describe_outdir_writes_three_csv_files(store, tmp_path):
    proc = cli("experiment", "describe", "1", "--metrics", "--outdir", str(tmp_path / "out"), check=True)
    assert sorted(os.listdir(tmp_path / "out")) == ["experiments.csv", "trials.csv", "workloads.csv"]
    assert proc.stdout.splitlines() == [
        f"Wrote {tmp_path / 'out' / name}" for name in ("experiments.csv", "trials.csv", "workloads.csv")
    ]
    with open(tmp_path / "out" / "workloads.csv", newline="") as f:
        assert list(csv.DictReader(f))[1]["Validation Metric: accuracy"] == "0.875"


def test_describe_without_metrics_keeps_the_summary_columns(store):
    out = cli("experiment", "describe", "1", check=True).stdout
    workloads = out.split("Workloads:\n", 1)[1].splitlines()
    assert [c.strip() for c in workloads[0].split("|")] == [
        "Trial ID",
        "# of Batches",
        "Training Metrics",
        "Validation Metrics",
        "Checkpoint",
    ]
    assert [c.strip() for c in workloads[2].split("|")][:3] == ["1", "2", "loss=0.1 note=text"]


# --- timeouts given in the environment ----------------------------------------------------------


def test_a_bad_timeout_in_the_environment_is_one_line_before_anything_is_recorded(tmp_path, _det_lite_home):
    """Before: the worker raised at start-up (a traceback in the trial's log, the trial ERROR);
    $DET_LITE_DIST_TIMEOUT even raised at import."""
    for name in ("DET_LITE_SETUP_TIMEOUT", "DET_LITE_STALL_TIMEOUT", "DET_LITE_DIST_TIMEOUT"):
        proc = cli("experiment", "create", CONST, LINEAR, env={**os.environ, name: "soon"})
        assert proc.returncode == 2, proc.stderr
        assert (
            proc.stderr
            == f"det-lite: error: shell environment: ${name} must be a number of seconds >= 0, got 'soon'\n"
        )
    in_config = cli(
        "experiment",
        "create",
        CONST,
        LINEAR,
        "--config",
        'environment.environment_variables=["DET_LITE_COLLECTIVE_TIMEOUT=-1"]',
    )
    assert in_config.returncode == 2
    assert in_config.stderr.strip().endswith(
        "environment.environment_variables[0]: "
        "$DET_LITE_COLLECTIVE_TIMEOUT must be a number of seconds >= 0, got '-1'"
    )
    assert Store().experiments.list() == []  # nothing recorded
    resumed = cli("experiment", "activate", "1", env={**os.environ, "DET_LITE_ACTIVATE_WAIT": "x"})
    assert resumed.returncode == 2
    assert "$DET_LITE_ACTIVATE_WAIT must be a number of seconds >= 0, got 'x'" in resumed.stderr
