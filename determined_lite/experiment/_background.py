"""``det-lite experiment create --detach``: the runner, in a process of its own."""

from __future__ import annotations

import argparse
import logging
import sys

from determined_lite.store._paths import restrict_umask


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m determined_lite.experiment._background")
    parser.add_argument("experiment_id", type=int)
    parser.add_argument("--test", action="store_true")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    restrict_umask()
    logging.basicConfig(level=logging.INFO)
    from determined_lite.experiment import _run

    return _run(args.experiment_id, test=args.test, resume=args.resume, out=sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
