"""``det-lite experiment create|activate --detach``: the runner, in a process of its own.

The parent took the experiment's runner lock and hands it over as an inherited descriptor
(``--lock-fd``); this process holds it until it exits.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from determined_lite.store._paths import experiment_dir, restrict_umask


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m determined_lite.experiment._background")
    parser.add_argument("experiment_id", type=int)
    parser.add_argument("--test", action="store_true")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--lock-fd", type=int, required=True, help="the runner lock, taken by the parent")
    args = parser.parse_args()
    restrict_umask()
    logging.basicConfig(level=logging.INFO)
    from determined_lite.experiment._create import run_experiment
    from determined_lite.experiment._lock import LOCK_FILE, RunnerLock

    lock = RunnerLock.adopt(args.lock_fd, os.path.join(experiment_dir(args.experiment_id), LOCK_FILE))
    try:
        return run_experiment(
            args.experiment_id, test=args.test, resume=args.resume, out=sys.stdout, lock=lock
        )
    finally:
        lock.release()


if __name__ == "__main__":
    sys.exit(main())
