"""launch/_exit.py: a worker's quick exit still does everything the user's code is owed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import atexit, sys, weakref
    import torch
    import torch._dynamo  # what a worker has loaded by its end (the first optimizer imports it)
    from determined_lite.launch import _exit

    class Owned:
        pass

    owned = Owned()
    out = sys.argv[1]
    atexit.register(lambda: open(out + ".atexit", "w").write("ran"))
    weakref.finalize(owned, lambda: open(out + ".finalizer", "w").write("ran"))
    torch_libraries = [
        f for f, info in weakref.finalize._registry.items() if info.func.__module__ == "torch.library"
    ]
    skipped = _exit.skip_process_local_finalizers()
    user = [f for f in weakref.finalize._registry if f not in torch_libraries]
    print(len(torch_libraries), skipped, sum(f.atexit for f in torch_libraries), sum(f.atexit for f in user))
    sys.stdout.write("unflushed tail")  # no newline: still in the buffer
    _exit.exit_now(3)
    """
)


@pytest.mark.slow  # a child that imports torch and torch._dynamo
def test_exit_now_skips_only_torchs_operator_libraries_and_runs_the_users_exit_work(tmp_path):
    out = str(tmp_path / "mark")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, out], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 3, proc.stderr
    counts, tail = proc.stdout.split("\n")
    libraries, skipped, torch_left, user_left = map(int, counts.split())
    assert libraries > 0 and skipped == libraries  # every torch operator library skipped
    assert torch_left == 0 and user_left == 1  # the user's finalizer still runs at exit
    assert tail == "unflushed tail"  # output flushed before the process ends
    with open(out + ".atexit") as f:
        assert f.read() == "ran"
    with open(out + ".finalizer") as f:
        assert f.read() == "ran"
