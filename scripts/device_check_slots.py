"""Device check for issue 23 part 2: the local executor gives trials their own GPUs.

On a machine with GPUs: two concurrent one-slot trials restricted to one GPU queue (the second
starts when the first ended, on the same GPU); with every GPU and at least two of them, they run
at the same time on disjoint GPUs, each worker seeing exactly one. Without a GPU it says so and
checks the CPU path instead (one CPU slot: they queue; two: they overlap, holding no device).
From the repository root:

    python3 scripts/device_check_slots.py
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from determined_lite.launch._local import visible_devices  # noqa: E402

LINEAR = os.path.join(REPO, "tests", "fixtures", "experiments", "linear")
Span = Tuple[Optional[str], int, float, float]  # CUDA_VISIBLE_DEVICES, GPUs seen, start, end
RECORDS: List[Dict[str, Any]] = []  # every rank's record of the last _run


def _run(
    name: str, env_changes: Dict[str, Optional[str]], resources: Optional[Dict[str, Any]] = None
) -> Tuple[List[Dict[str, Any]], List[Span]]:
    """A grid of two one-slot trials (max 2 at once; ``resources`` changes the config's) in a
    fresh home; its trials and what each rank 0 saw (every rank's record: ``RECORDS``)."""
    import yaml

    home = tempfile.mkdtemp(prefix=f"det-lite-slots-{name}-")
    seen_dir = os.path.join(home, "seen")
    os.makedirs(seen_dir)
    with open(os.path.join(LINEAR, "const.yaml")) as f:
        config = yaml.safe_load(f)
    config["searcher"] = {
        "name": "grid",
        "metric": "val_loss",
        "max_length": {"batches": 8},
        "max_concurrent_trials": 2,
    }
    config["resources"] = dict(config.get("resources") or {}, **(resources or {}))
    config["hyperparameters"].update(
        lr={"type": "categorical", "vals": [0.01, 0.02]}, sleep_s=0.5, devices_dir=seen_dir
    )
    path = os.path.join(home, "exp.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    env = dict(os.environ, DET_LITE_HOME=home, PYTHONPATH=REPO)
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    cli = [sys.executable, "-m", "determined_lite.cli"]
    created = subprocess.run(
        [*cli, "experiment", "create", path, LINEAR], env=env, capture_output=True, text=True
    )
    if created.returncode != 0:
        sys.exit(f"{name}: experiment create exited {created.returncode}:\n{created.stdout}{created.stderr}")
    from determined_lite.store import Store

    with Store(os.path.join(env["DET_LITE_HOME"], "det-lite.db")) as store:
        trials = store.experiments.describe(1, metrics=False)["trials"]
    by_trial = {}
    RECORDS.clear()
    for record in glob.glob(os.path.join(seen_dir, "*.json")):
        with open(record) as f:
            rec = json.load(f)
        RECORDS.append(rec)
        if rec["rank"] == 0:
            by_trial[rec["trial"]] = rec
    spans = [
        (by_trial[t["id"]]["cuda"], by_trial[t["id"]]["gpus"], by_trial[t["id"]]["at"], t["ended_at"])
        for t in trials
    ]
    print(f"{name}:")
    print(created.stdout.strip().splitlines()[-1])
    for t, (cuda, gpus, start, end) in zip(trials, spans):
        print(
            f"  trial {t['id']} {t['state']}: runs {t['runs']}, CUDA_VISIBLE_DEVICES={cuda}, "
            f"torch sees {gpus} GPU(s), ran {end - start:.1f} s"
        )
    return trials, spans


def _overlap(spans: List[Span]) -> bool:
    (_, _, s1, e1), (_, _, s2, e2) = sorted(spans, key=lambda s: s[2])
    return s2 < e1


def _check(ok: bool, what: str) -> None:
    print(f"  {'ok' if ok else 'FAILED'}: {what}")
    if not ok:
        sys.exit(1)


def main() -> None:
    devices = visible_devices()
    if not devices:
        print("no GPU visible: checking the CPU path (a slot is a core)")
        trials, spans = _run("one CPU slot", {"DET_LITE_SLOTS": "1", "DET_LITE_DEVICES": ""})
        _check(all(t["state"] == "COMPLETED" for t in trials), "both trials completed")
        _check(not _overlap(spans), "with one slot the second trial queued behind the first")
        _check(all(t["runs"][0]["devices"] == [] for t in trials), "no device held")
        trials, spans = _run("two CPU slots", {"DET_LITE_SLOTS": "2", "DET_LITE_DEVICES": ""})
        _check(_overlap(spans), "with two slots the trials ran at the same time")
        return
    print(f"GPUs visible: {', '.join(devices)}")
    trials, spans = _run("one GPU", {"DET_LITE_DEVICES": devices[0]})
    _check(all(t["state"] == "COMPLETED" for t in trials), "both trials completed")
    _check(not _overlap(spans), "on one GPU the second trial queued behind the first")
    _check(
        all(cuda == devices[0] and gpus == 1 for cuda, gpus, _, _ in spans), f"each saw only GPU {devices[0]}"
    )
    _ray_check(devices)
    if len(devices) < 2:
        print("one GPU only: the disjoint-GPUs check needs two")
        return
    trials, spans = _run("every GPU", {"DET_LITE_DEVICES": None})
    _check(all(t["state"] == "COMPLETED" for t in trials), "both trials completed")
    _check(_overlap(spans), "the trials ran at the same time")
    cudas = [cuda for cuda, _, _, _ in spans]
    _check(
        len(set(cudas)) == 2 and all(gpus == 1 for _, gpus, _, _ in spans),
        f"on disjoint GPUs {cudas}, one each",
    )


def _ray_check(devices: List[str]) -> None:
    """``resources.executor: ray`` with ``{GPU: 1}`` per slot on a local Ray cluster of this
    machine's GPUs (issue 41 part 3): one-slot trials each see one GPU, torch included; with two
    GPUs or more, both ranks of a 2-slot trial see the trial's two GPUs (local rank r uses device
    r)."""
    from ray.cluster_utils import Cluster

    os.environ["PYTHONPATH"] = REPO  # the cluster's workers import det-lite from here
    head = {"num_cpus": 4, "num_gpus": len(devices), "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        ray_env: Dict[str, Optional[str]] = {"RAY_ADDRESS": cluster.address}
        per_slot = {"executor": "ray", "ray": {"resources_per_slot": {"CPU": 1, "GPU": 1}}}
        trials, spans = _run("ray, one GPU per trial", ray_env, per_slot)
        _check(all(t["state"] == "COMPLETED" for t in trials), "both Ray trials completed")
        _check(all(gpus == 1 and cuda is not None for cuda, gpus, _, _ in spans), "each saw one GPU")
        if len(devices) < 2:
            return
        gang = dict(per_slot, slots_per_trial=2, distributed_backend="torch")
        trials, _ = _run("ray, 2-slot trials", ray_env, gang)
        _check(all(t["state"] == "COMPLETED" for t in trials), "both 2-slot Ray trials completed")
        for t in trials:
            ranks = sorted((r for r in RECORDS if r["trial"] == t["id"]), key=lambda r: r["rank"])
            cudas = {r["cuda"] for r in ranks}
            shared = len(cudas) == 1 and len(next(iter(cudas)).split(",")) == 2
            local = [r["local_rank"] for r in ranks] == [0, 1] and all(r["gpus"] == 2 for r in ranks)
            _check(shared and local, f"trial {t['id']}: both ranks see its two GPUs {cudas}")
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
