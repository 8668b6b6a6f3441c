"""The search measure's other sides, one per process: ``python _search_peers.py SIDE JOB.json``.

``SIDE`` is ``limit`` (det-lite's runs back to back in this warm process: the seconds of training
and validation, imports and data set-up excluded), ``ray_tune`` (Ray Tune running the same
hyperparameters, one CPU per trial, as many at a time as cores, actors reused, its ``ASHAScheduler`` for an
ASHA search) or ``optuna`` (an in-process study over the same hyperparameters, ``n_jobs`` = cores,
its ``SuccessiveHalvingPruner`` for an ASHA search). ``JOB.json``: ``data_path``, ``cores``,
``runs`` (``[hparams, validation points]`` per trial), ``points`` (the rungs of an ASHA search)
and ``divisor``. Prints ``{"seconds": ...}``; the peers' seconds are measured by the caller
(process start to end, as det-lite's command is).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def limit(job: Dict[str, Any]) -> float:
    from _search_model import time_plain

    runs = [(hp, points) for hp, points in job["runs"]]
    time_plain(runs[:1], job["data_path"])  # warm: the limit is training, not first-use costs
    return time_plain(runs, job["data_path"])


def ray_tune(job: Dict[str, Any]) -> float:
    import ray
    from _search_model import PlainRun
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    runs: List[Any] = job["runs"]
    points: List[int] = job["points"]
    data_path = job["data_path"]

    def trainable(config: Dict[str, Any]) -> None:
        run = PlainRun(runs[config["i"]][0], data_path)
        for n in points:
            tune.report({"validation_loss": run.train_to(n)})

    # address="local": a cluster of its own, never one another program started on this machine
    ray.init(
        address="local",
        num_cpus=job["cores"],
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
    )
    scheduler = None
    if len(points) > 1:
        scheduler = ASHAScheduler(max_t=len(points), grace_period=1, reduction_factor=job["divisor"])
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as storage:
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": 1}),
            param_space={"i": tune.grid_search(list(range(len(runs))))},
            tune_config=tune.TuneConfig(
                metric="validation_loss",
                mode="min",
                scheduler=scheduler,
                max_concurrent_trials=job["cores"],
                reuse_actors=True,  # Ray Tune at its fastest: a trial runs in the last one's process
            ),
            run_config=tune.RunConfig(storage_path=storage, verbose=0),
        )
        results = tuner.fit()
        if results.errors:
            raise RuntimeError(f"Ray Tune: {results.errors[0]}")
    ray.shutdown()
    return 0.0


def optuna_study(job: Dict[str, Any]) -> float:
    import optuna
    import torch
    from _search_model import PlainRun

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    runs: List[Any] = job["runs"]
    points: List[int] = job["points"]
    asha = len(points) > 1
    pruner = (
        optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=job["divisor"])
        if asha
        else optuna.pruners.NopPruner()
    )
    study = optuna.create_study(direction="minimize", pruner=pruner)
    for i in range(len(runs)):
        study.enqueue_trial({"i": i})

    def objective(trial: Any) -> float:
        run = PlainRun(runs[trial.suggest_int("i", 0, len(runs) - 1)][0], job["data_path"])
        loss = float("inf")
        for k, n in enumerate(points, 1):
            loss = run.train_to(n)
            trial.report(loss, k)
            if asha and trial.should_prune():
                raise optuna.TrialPruned()
        return loss

    study.optimize(objective, n_trials=len(runs), n_jobs=job["cores"])
    return 0.0


SIDES = {"limit": limit, "ray_tune": ray_tune, "optuna": optuna_study}

if __name__ == "__main__":
    with open(sys.argv[2]) as f:
        job = json.load(f)
    start = time.perf_counter()
    seconds = SIDES[sys.argv[1]](job) or time.perf_counter() - start
    print(json.dumps({"seconds": seconds}))
