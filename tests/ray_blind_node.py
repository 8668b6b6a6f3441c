"""A Ray node that shares nothing with the driver but the image (issue 41).

:class:`BlindNode` runs ``ray start --address=... --num-cpus=1 --block`` inside its own mount
namespace (``unshare -m --propagation private``, which needs root or user namespaces) after
mounting an empty tmpfs over each of ``hidden`` (the driver's ``$DET_LITE_HOME``, the
experiment's directory): its processes see the same image (Python, det-lite on PYTHONPATH),
loopback and /tmp, but none of the driver's files. It is stopped by the process group of the
PID it started (never ``ray stop``).

:data:`AUDIT_OPENS` is a ``sitecustomize`` that records, in ``$AUDIT_LOG``, every path under
``$AUDIT_FORBIDDEN_ROOT`` that a process of the node opens (``opened PATH``) and each trial
worker that ran there (``worker PID``): the check that also runs where mount namespaces do not.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from typing import Dict, Optional, Sequence

BLIND_RESOURCE = "blind_node"
START_TIMEOUT_S = 120.0
START_ATTEMPTS = 3  # a loaded machine (load 20 on 2 cores): Ray gives a raylet 30 s to register

AUDIT_OPENS = """
import os
import sys

_ROOT = os.environ.get("AUDIT_FORBIDDEN_ROOT")
_LOG = os.environ.get("AUDIT_LOG")
_said = []


def _note(line):
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


def _audit(event, args):
    if event != "open" or not args or not isinstance(args[0], (str, bytes)):
        return
    if os.environ.get("DET_LITE_TRIAL_SPEC") and not _said:
        _said.append(True)
        _note(f"worker {os.getpid()}")
    path = os.path.abspath(os.fsdecode(args[0]))
    if path == _ROOT or path.startswith(_ROOT + os.sep):
        _note(f"opened {path}")


if _ROOT and _LOG:
    _ROOT = os.path.abspath(_ROOT)
    sys.addaudithook(_audit)
"""


def write_audit(directory: str) -> str:
    """The audit's ``sitecustomize.py`` in ``directory`` (put it first on PYTHONPATH)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "sitecustomize.py"), "w") as f:
        f.write(AUDIT_OPENS)
    return directory


def audit_env(site: str, forbidden: str, log: str) -> Dict[str, str]:
    return {
        "PYTHONPATH": os.pathsep.join([site, os.environ.get("PYTHONPATH", "")]),
        "AUDIT_FORBIDDEN_ROOT": forbidden,
        "AUDIT_LOG": log,
    }


def read_audit(log: str) -> Dict[str, list]:
    """``{"worker": [pids], "opened": [paths]}`` from an audit log."""
    out: Dict[str, list] = {"worker": [], "opened": []}
    if os.path.exists(log):
        with open(log) as f:
            for line in f:
                kind, _, rest = line.rstrip("\n").partition(" ")
                out.setdefault(kind, []).append(rest)
    return out


def namespaces_unavailable() -> Optional[str]:
    """Why this machine cannot give a node its own mount namespace (None: it can)."""
    probe = "mount -t tmpfs det-lite-probe /mnt 2>&1 || mount -t tmpfs det-lite-probe /tmp 2>&1"
    try:
        proc = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", probe],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except FileNotFoundError:
        return "unshare(1) is not installed"
    if proc.returncode != 0:
        return f"cannot make a mount namespace with a tmpfs: {(proc.stdout + proc.stderr).strip()}"
    return None


class BlindNode:
    """A 1-CPU Ray node (with 1 of the custom resource ``blind_node``) in its own mount namespace."""

    def __init__(
        self, address: str, hidden: Sequence[str], env: Dict[str, str], object_store_bytes: int, log: str
    ) -> None:
        mounts = "".join(f"mount -t tmpfs -o mode=0700 det-lite-hidden {shlex.quote(p)}\n" for p in hidden)
        resources = json.dumps({BLIND_RESOURCE: 1})
        start = (
            f"exec ray start --address={shlex.quote(address)} --num-cpus=1 --block --disable-usage-stats "
            f"--object-store-memory={object_store_bytes} --resources={shlex.quote(resources)}"
        )
        self.log = log  # what ray start says (read when it fails)
        self.argv = ["unshare", "-m", "--propagation", "private", "sh", "-ec", mounts + start]
        self.env = {**os.environ, **env}
        for attempt in range(START_ATTEMPTS):  # a loaded machine: joining may time out once
            self._start()
            try:
                self.node_id = self._wait_for_node()
                return
            except AssertionError:
                self.stop()
                if attempt == START_ATTEMPTS - 1:
                    raise

    def _start(self) -> None:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _wait_for_node(self) -> str:
        import ray

        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                with open(self.log) as f:
                    raise AssertionError(f"ray start exited with {self.proc.returncode}: {f.read()[-2000:]}")
            for node in ray.nodes():
                if node.get("Alive") and BLIND_RESOURCE in (node.get("Resources") or {}):
                    return str(node["NodeID"])
            time.sleep(0.5)
        raise AssertionError(f"the blind node did not join in {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        """SIGTERM the process group this node was started in, SIGKILL what is left."""
        for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 20.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # what ``ray start`` left in its group (its raylet's workers)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
