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


def _run(name: str, env_changes: Dict[str, Optional[str]]) -> Tuple[List[Dict[str, Any]], List[Span]]:
    """A grid of two one-slot trials (max 2 at once) in a fresh home; its trials and what each
    worker saw."""
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
    for record in glob.glob(os.path.join(seen_dir, "*.json")):
        with open(record) as f:
            rec = json.load(f)
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


if __name__ == "__main__":
    main()
