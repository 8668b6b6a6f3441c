"""Workers a script starts itself (Determined's Core API tutorial, step 4: its own launcher
re-runs the script once per slot, each building ``det.core.DistributedContext(rank=..., ...)``).

While a det-lite worker runs a script alone (no launcher), it hosts a torch ``TCPStore`` on
the loopback address (``$DET_LITE_CORE_STORE``) that such workers join as one torch.distributed
group (Gloo bound to the loopback interface), and names a result file
(``$DET_LITE_SCRIPT_RESULT``). ``det.core.init()`` in a process the script started (no live
trial, ``det.get_cluster_info()`` set) adopts the trial: ``launch._script.adopt`` makes it a
:class:`ScriptTrial` of that process, whose chief reports to the store and, at exit, writes what
it reported to the result file; the det-lite worker returns that result when its own script
process reported nothing.
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Iterator, Optional

from determined_lite.launch._hosts import LOOPBACK, SOCKET_IFNAME_ENV, listening_store, loopback_interface
from determined_lite.runtime._cluster import CORE_STORE_ENV
from determined_lite.runtime._spec import WorkerResult, WorkerSpec

RESULT_ENV = "DET_LITE_SCRIPT_RESULT"


@contextlib.contextmanager
def hosting(spec: WorkerSpec, workers: int) -> Iterator[Callable[[], Optional[WorkerResult]]]:
    """Host the store and name the result file while the script runs alone (``workers`` = 1:
    a launcher's workers have their engine); yields a function that returns what the script's
    own workers reported (None when none did)."""
    from determined_lite._timeouts import dist_timeout

    if workers > 1:
        yield lambda: None
        return

    store, port = listening_store(LOOPBACK, 0, dist_timeout())
    path = os.path.join(os.path.dirname(spec.result_path), "script_workers_result.json")
    env = {CORE_STORE_ENV: f"{LOOPBACK}:{port}", RESULT_ENV: path}
    interface = loopback_interface()
    for name in SOCKET_IFNAME_ENV:
        if interface and not os.environ.get(name):
            env[name] = interface
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield lambda: WorkerResult.load(path) if os.path.exists(path) else None
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        del store
