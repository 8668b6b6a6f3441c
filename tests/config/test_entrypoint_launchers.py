"""Determined's ``entrypoint`` forms: a class or a script, plus the backend a launcher implies.

``python3 -m determined.launch.torch_distributed --trial model_def:Trial`` is what Determined's docs
recommend for distributed PyTorchTrial; det-lite stores ``entrypoint: model_def:Trial`` with
``resources.distributed_backend: torch`` (``horovod`` for ``determined.launch.horovod``), so the
runner, the entrypoint check and the workers only ever see the class. Scripts (``python3
train.py ARGS``, alone or after a launcher) are stored as their own command. Forms det-lite
cannot run (DeepSpeed, launcher overrides, unknown options) are one-line errors at ``entrypoint``.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Dict, Optional

import pytest
import yaml

from determined_lite.config import ConfigError
from determined_lite.searcher import validate_config
from tests.compat.test_determined_trial import FIXTURE, batch_losses, cli, describe, weights

BASE: Dict[str, Any] = {
    "hyperparameters": {"global_batch_size": 4},
    "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": 10}},
    "reproducibility": {"experiment_seed": 1},
}
TD = "python3 -m determined.launch.torch_distributed"
HVD = "python3 -m determined.launch.horovod"
TORCH = f"{TD} --trial model_def:Trial"
HOROVOD = f"{HVD} --autohorovod --trial model_def:Trial"
CLASS = "model_def:Trial"
SUPPORTED = "expected 'package.module:TrialClass', a script ('python3 train.py [ARGS]'"


def config(entrypoint: Any, resources: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    raw = dict(BASE, entrypoint=entrypoint)
    if resources is not None:
        raw["resources"] = resources
    return raw


# --- accepted forms ------------------------------------------------------------------------------

ACCEPTED = [
    # (entrypoint, resources, normalised entrypoint, backend)
    (TORCH, None, CLASS, "torch"),
    (f"{TD} -- --trial model_def:Trial", None, CLASS, "torch"),
    (f"{TD} --trial=pkg.models:Net", None, "pkg.models:Net", "torch"),
    (HOROVOD, None, CLASS, "horovod"),
    (f"{HVD} --trial model_def:Trial --autohorovod", None, CLASS, "horovod"),
    (f"{HVD} -- --trial model_def:Trial", None, CLASS, "horovod"),
    (f"  {TD.replace('python3', 'python')}  --trial model_def:Trial ", None, CLASS, "torch"),
    (f"/usr/bin/{HVD.replace('python3', 'python3.11')} --trial model_def:Trial", None, CLASS, "horovod"),
    (TORCH.split(), None, CLASS, "torch"),
    (HVD.split() + ["--autohorovod", "--trial", "m:T"], None, "m:T", "horovod"),
    ([CLASS], None, CLASS, "horovod"),
    # an explicit backend that agrees is kept; other resources fields are untouched
    (TORCH, {"distributed_backend": "torch", "slots_per_trial": 2}, CLASS, "torch"),
    (HOROVOD, {"distributed_backend": "horovod", "slots_per_trial": 2}, CLASS, "horovod"),
    (TORCH, {"slots_per_trial": 2, "distributed_backend": None}, CLASS, "torch"),
    # scripts (Determined's Trainer-API and Core-API form), stored as their own command
    ("python3 train.py --epochs 3", None, "python3 train.py --epochs 3", "horovod"),
    (["python3", "train.py", "a b"], None, "python3 train.py 'a b'", "horovod"),
    ("python train.py", None, "python3 train.py", "horovod"),
    ("python3 -u train.py", None, "python3 train.py", "horovod"),
    ("train.py", None, "python3 train.py", "horovod"),
    ("python3 -m pkg.train --x 1", None, "python3 -m pkg.train --x 1", "horovod"),
    (f"{TD} python3 train.py --epochs 3", None, "python3 train.py --epochs 3", "torch"),
    (f"{TD} -- python3 train.py", None, "python3 train.py", "torch"),
    (TD.split() + ["python3", "-m", "pkg.train"], None, "python3 -m pkg.train", "torch"),
    (f"{HVD} --autohorovod python3 train.py", None, "python3 train.py", "horovod"),
    (f"{HVD} train.py", {"slots_per_trial": 2}, "python3 train.py", "horovod"),
    # the legacy class form is unchanged: default horovod (Determined's own default), or as given
    (CLASS, None, CLASS, "horovod"),
    (CLASS, {"distributed_backend": "torch"}, CLASS, "torch"),
]


@pytest.mark.parametrize("entrypoint, resources, trial, backend", ACCEPTED)
def test_launcher_forms_are_read_as_trial_class_and_backend(entrypoint, resources, trial, backend):
    conf = validate_config(config(entrypoint, resources), "const.yaml").to_dict()
    assert conf["entrypoint"] == trial
    assert conf["resources"]["distributed_backend"] == backend
    slots = (resources or {}).get("slots_per_trial", 1)
    assert conf["resources"]["slots_per_trial"] == slots
    assert validate_config(conf).to_dict() == conf  # the stored form is a fixed point


def test_the_input_mapping_is_not_modified():
    raw = config(TORCH, {"slots_per_trial": 2})
    validate_config(raw)
    assert raw["entrypoint"] == TORCH and raw["resources"] == {"slots_per_trial": 2}


@pytest.mark.parametrize(
    "entrypoint, explicit, launcher, implied",
    [
        (TORCH, "horovod", "determined.launch.torch_distributed", "torch"),
        (HOROVOD, "torch", "determined.launch.horovod", "horovod"),
    ],
)
def test_launcher_and_explicit_backend_that_disagree_name_both_fields(
    entrypoint, explicit, launcher, implied
):
    with pytest.raises(ConfigError) as e:
        validate_config(config(entrypoint, {"distributed_backend": explicit}), "const.yaml")
    assert e.value.path == "entrypoint"
    assert str(e.value) == (
        f"const.yaml: entrypoint: {launcher} runs the {implied!r} backend, but "
        f"resources.distributed_backend is {explicit!r}; make resources.distributed_backend "
        f"{implied!r} or remove it (or use the other launcher)"
    )


def test_an_invalid_explicit_backend_is_reported_at_its_own_field():
    with pytest.raises(ConfigError) as e:
        validate_config(config(TORCH, {"distributed_backend": "nccl"}), "const.yaml")
    assert e.value.path == "resources.distributed_backend"
    assert "expected 'horovod' or 'torch', got 'nccl'" in e.value.message


# --- rejected forms ------------------------------------------------------------------------------

REJECTED = [
    # (entrypoint, path, words in the message)
    (
        "python3 -m determined.launch.deepspeed --trial model_def:Trial",
        "entrypoint",
        "determined.launch.deepspeed launches DeepSpeed trials, which det-lite does not run; " + SUPPORTED,
    ),
    (
        ["python3", "-m", "determined.launch.autodeepspeed", "model_def:Trial"],
        "entrypoint",
        "determined.launch.autodeepspeed launches DeepSpeed trials",
    ),
    (
        "python3 -m determined.launch.tensorflow --trial model_def:Trial",
        "entrypoint",
        "launches TensorFlow/Keras trials",
    ),
    ("python3 -m determined.launch.wrap_rank RANK -- x", "entrypoint", "determined.launch.wrap_rank is not"),
    (
        "python3 -m determined.launch.torch_distributed torchrun train.py",
        "entrypoint",
        "determined.launch.torch_distributed runs 'torchrun train.py', which det-lite cannot run: "
        "expected a Python script",
    ),
    ("torchrun --nproc_per_node 2 train.py", "entrypoint", "is not a trial det-lite can run; " + SUPPORTED),
    ("python3 -X dev train.py", "entrypoint", "'python3 -X dev train.py' is not a trial det-lite can run"),
    ("python3 -m", "entrypoint", "'python -m' is not a Determined trial launcher"),
    ("python3 -m determined.launch.wrap_rank", "entrypoint", "launcher determined.launch.wrap_rank is not"),
    (
        "python3 -m determined.launch.torch_distributed --autohorovod --trial model_def:Trial",
        "entrypoint",
        "torch_distributed: unknown launcher option '--autohorovod' (det-lite accepts --trial)",
    ),
    (
        "python3 -m determined.launch.horovod --fusion-threshold-mb 32 --trial m:T",
        "entrypoint",
        "unknown launcher option '--fusion-threshold-mb' (det-lite accepts --autohorovod, --trial)",
    ),
    (
        "python3 -m determined.launch.torch_distributed --max_restarts 3 -- --trial model_def:Trial",
        "entrypoint",
        "'--max_restarts 3' before '--' overrides torchrun's arguments on a Determined cluster",
    ),
    ("python3 -m determined.launch.horovod -np 2 -- --trial m:T", "entrypoint", "overrides horovodrun's"),
    (f"{HVD} --trial m:T extra", "entrypoint", "horovod: extra arguments after --trial m:T: 'extra'"),
    (f"{HVD} --autohorovod", "entrypoint", "horovod needs --trial package.module:TrialClass"),
    (f"{HVD} --trial", "entrypoint", "horovod: --trial needs 'package.module:TrialClass'"),
    (
        "python3 -m determined.launch.torch_distributed --trial model_def.Trial",
        "entrypoint",
        "--trial expects 'package.module:TrialClass', got 'model_def.Trial'",
    ),
    ("python3 -m determined.launch.horovod --trial a:B --trial c:D", "entrypoint", "--trial is given twice"),
    ("python3 -m determined.launch.horovod --trial 'm:T", "entrypoint", "cannot read the command"),
    (["python3", "-m", 3], "entrypoint[2]", "expected a string, got 3"),
    ([], "entrypoint", SUPPORTED),
    ("model_def.Trial", "entrypoint", SUPPORTED),
    (7, "entrypoint", SUPPORTED),
]


@pytest.mark.parametrize("entrypoint, path, words", REJECTED, ids=[str(r[0])[:60] for r in REJECTED])
def test_forms_det_lite_cannot_run_are_one_line_errors(entrypoint, path, words):
    with pytest.raises(ConfigError) as e:
        validate_config(config(entrypoint), "const.yaml")
    assert e.value.path == path, str(e.value)
    assert words in e.value.message, str(e.value)
    assert str(e.value) == f"const.yaml: {path}: {e.value.message}"
    assert "\n" not in str(e.value)


def _write(tmp_path, raw: Dict[str, Any]) -> str:
    path = os.path.join(str(tmp_path), "const.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(raw, f)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    "entrypoint, words",
    [
        ("python3 -m determined.launch.deepspeed --trial model_def:Trial", "DeepSpeed trials"),
        ("torchrun --nproc_per_node 2 train.py", "is not a trial det-lite can run"),
    ],
)
def test_unsupported_entrypoint_exits_2_through_the_cli(tmp_path, entrypoint, words):
    path = _write(tmp_path, config(entrypoint))
    proc = cli("experiment", "create", path, FIXTURE)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ": entrypoint: " in ln]
    assert line.startswith("det-lite: error: "), line
    assert f"{path}: entrypoint: " in line and words in line and SUPPORTED in line
    assert "Traceback" not in proc.stderr and "Created experiment" not in proc.stdout
    listed = cli("experiment", "list", "--all", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []  # nothing was recorded


# --- typo of a Determined-only field --------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value, path, hint",
    [
        ("resources", {"resource_poool": "gpu"}, "resources.resource_poool", "resource_pool"),
        ("environment", {"imagee": "x"}, "environment.imagee", "image"),
        ("bind_mount", [], "bind_mount", "bind_mounts"),
        ("optimizations", {"mixed_precison": "O1"}, "optimizations.mixed_precison", "mixed_precision"),
        # det-lite's own fields still come first
        ("searcher", dict(BASE["searcher"], max_lenght=1), "searcher.max_lenght", "max_length"),
        ("resources", {"slot_per_trial": 2}, "resources.slot_per_trial", "slots_per_trial"),
    ],
)
def test_typo_of_a_determined_only_field_gets_a_hint(field, value, path, hint):
    with pytest.raises(ConfigError) as e:
        validate_config(dict(config("m:T"), **{field: value}), "const.yaml")
    assert str(e.value) == f"const.yaml: {path}: unknown field (did you mean {hint!r}?)"


def test_unknown_field_without_a_close_name_still_lists_the_section():
    with pytest.raises(ConfigError) as e:
        validate_config(dict(config("m:T"), resources={"zzz": 1}), "const.yaml")
    assert e.value.message == (
        "unknown field; resources fields are: slots_per_trial, distributed_backend, hosts, executor, "
        "ddp_options, ray, launcher"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "entrypoint, words",
    [
        ("python3 trian.py", "no script 'trian.py' in context directory"),
        ("python3 -m no_such_module", "no module 'no_such_module' in context directory"),
    ],
)
def test_a_missing_script_exits_2_through_the_cli(tmp_path, entrypoint, words):
    path = _write(tmp_path, config(entrypoint))
    proc = cli("experiment", "create", path, FIXTURE)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if "entrypoint " in ln]
    assert line.startswith(f"det-lite: error: {path}: entrypoint ") and words in line, line
    assert "Traceback" not in proc.stderr and "Created experiment" not in proc.stdout


@pytest.mark.slow
def test_typo_hint_through_the_cli(tmp_path):
    with open(os.path.join(FIXTURE, "const.yaml")) as f:
        raw = yaml.safe_load(f)
    raw["resources"]["resource_poool"] = raw["resources"].pop("resource_pool")
    path = _write(tmp_path, raw)
    proc = cli("experiment", "create", path, FIXTURE)
    assert proc.returncode == 2
    assert f"{path}: resources.resource_poool: unknown field (did you mean 'resource_pool'?)" in proc.stderr


# --- end to end: the Determined fixture with the torch_distributed launcher on 2 slots -----------


@pytest.mark.timeout(300)
def test_determined_trial_with_the_torch_distributed_launcher_on_two_slots(tmp_path):
    """The compat fixture, its entrypoint in launcher form, 2 slots: 2 torch (gloo) workers with
    per-slot batch 1 reach the 1-slot run's closed-form weights and metrics."""
    ctx = tmp_path / "ctx"
    shutil.copytree(FIXTURE, ctx)
    with open(ctx / "const.yaml") as f:
        raw = yaml.safe_load(f)
    raw["entrypoint"] = TORCH
    raw["resources"]["slots_per_trial"] = 2  # global_batch_size stays 2: per-slot batch 1
    with open(ctx / "const.yaml", "w") as f:
        yaml.safe_dump(raw, f)

    proc = cli("experiment", "create", str(ctx / "const.yaml"), str(ctx))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    assert exp["config"]["entrypoint"] == "model_def:Trial"  # stored normalised
    resources = exp["config"]["resources"]
    assert (resources["distributed_backend"], resources["slots_per_trial"]) == ("torch", 2)
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 12

    ws, losses = weights(12), batch_losses(12)
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [4, 8, 12]
    for v in trial["validation_metrics"]:
        w, m = ws[v["total_batches"] - 1], v["metrics"]
        e2 = (w - 2) ** 2
        assert m["weight"] == pytest.approx(w, rel=1e-12)
        assert m["val_loss"] == pytest.approx(11 * e2, rel=1e-9)  # mean over x = 1..5 of x^2 e2
        assert m["val_sum_sq_err"] == pytest.approx(55 * e2, rel=1e-9)
        assert m["val_records"] == 5  # each record once across the two workers
        # Per-slot batches of one record: Determined's mean of batch means is the record mean
        # (the 1-slot run's batches [1,2], [3,4], [5] give 40/3 e2 instead).
        assert m["val_loss_batch_avg"] == pytest.approx(11 * e2, rel=1e-9)
    assert [t["total_batches"] for t in trial["training_metrics"]] == [2, 4, 6, 8, 10, 12]
    for t in trial["training_metrics"]:
        b = t["total_batches"]
        assert t["metrics"]["weight"] == pytest.approx((ws[b - 2] + ws[b - 1]) / 2, rel=1e-12)
        assert t["metrics"]["loss"] == pytest.approx((losses[b - 2] + losses[b - 1]) / 2, rel=1e-12)

    logs = cli("trial", "logs", str(trial["id"])).stdout
    assert "[rank 0] " in logs and "[rank 1] " in logs  # two workers ran
