"""Run an experiment yaml (default: the repo-root ``experiment.yaml``) with the Python Trainer API.

    python3 examples/digits/train.py [experiment.yaml]

The same trial as ``det-lite experiment create experiment.yaml .``, from plain Python: the
directory holding the yaml is the context directory, so ``entrypoint: module:Class`` is
imported relative to it. Checkpoints and TensorBoard files go under ``$DET_LITE_HOME``
(default ``~/.det-lite``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import torch

from determined_lite import config, pytorch, searcher
from determined_lite.config import length_from_config
from determined_lite.launch.worker import import_entrypoint

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CONFIG = os.path.join(REPO_ROOT, "experiment.yaml")


def load_config(path: str) -> Dict[str, Any]:
    """The validated experiment config with Determined's defaults (a ConfigError names the field)."""
    return searcher.load_config(path).to_dict()


def load_trial_class(entrypoint: str, context_dir: str) -> type:
    """Import ``module:Class`` from ``context_dir``, as det-lite's workers do."""
    trial_class = import_entrypoint(entrypoint, context_dir)
    if not (isinstance(trial_class, type) and issubclass(trial_class, pytorch.PyTorchTrial)):
        raise TypeError(f"entrypoint {entrypoint!r} is not a PyTorchTrial subclass")
    return trial_class


class _Recorder(pytorch.PyTorchCallback):
    """Keeps the reduced metrics of every validation and the checkpoints written."""

    def __init__(self) -> None:
        self.validations: List[Dict[str, Any]] = []
        self.checkpoint_dirs: List[str] = []

    def on_validation_end(self, metrics: Dict[str, Any]) -> None:
        self.validations.append(dict(metrics))

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        self.checkpoint_dirs.append(checkpoint_dir)


class RunResult:
    def __init__(self, validations: List[Dict[str, Any]], checkpoint_dirs: List[str]) -> None:
        self.validations = validations  # reduced metrics of every validation, in order
        self.checkpoint_dirs = checkpoint_dirs  # where each checkpoint was written, in order

    @property
    def final_metrics(self) -> Dict[str, Any]:
        return self.validations[-1]


def run(config_path: str, context_dir: Optional[str] = None) -> RunResult:
    """Train the experiment's single trial for ``searcher.max_length``."""
    conf = load_config(config_path)
    if context_dir is None:
        context_dir = os.path.dirname(os.path.abspath(config_path))
    trial_class = load_trial_class(conf["entrypoint"], context_dir)

    max_length = length_from_config(conf["searcher"]["max_length"], "searcher.max_length")
    periods = {}
    for kwarg, field in (
        ("validation_period", "min_validation_period"),
        ("checkpoint_period", "min_checkpoint_period"),
    ):
        if conf.get(field):
            periods[kwarg] = length_from_config(conf[field], field)

    recorder = _Recorder()
    with recorder:  # registered as a global callback for this block
        with pytorch.init(
            hparams=config.constant_values(conf["hyperparameters"]),
            exp_conf=conf,
            # checkpoints copy the context directory into code/, as the CLI will
            trial_info=pytorch.TrialInfo(context_dir=context_dir),
        ) as ctx:
            trial = trial_class(ctx)
            trainer = pytorch.Trainer(trial, ctx)
            trainer.fit(max_length=max_length, **periods)
    if not recorder.validations:
        raise RuntimeError("training finished without a single validation; set min_validation_period")
    return RunResult(recorder.validations, recorder.checkpoint_dirs)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=DEFAULT_CONFIG, help="experiment yaml")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if "OMP_NUM_THREADS" not in os.environ:
        # Small models gain nothing from intra-op threads, and on a busy 2-core machine the
        # spinning threads made this run 2-5x slower. OMP_NUM_THREADS, when set, wins.
        torch.set_num_threads(1)

    start = time.perf_counter()
    result = run(args.config)
    elapsed = time.perf_counter() - start

    final = dict(result.final_metrics)
    matrix = final.pop("confusion_matrix", None)
    print(
        f"done in {elapsed:.1f} s: {len(result.validations)} validations, "
        f"{len(result.checkpoint_dirs)} checkpoints"
    )
    print("final validation metrics:", json.dumps(final, sort_keys=True))
    if matrix is not None:
        print("confusion matrix (rows: true class, columns: predicted):")
        for row in matrix:
            print("  " + " ".join(f"{n:4d}" for n in row))
    if result.checkpoint_dirs:
        print("latest checkpoint:", result.checkpoint_dirs[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
