"""Running the ``det-lite`` CLI from tests, and writing experiment configs from a fixture's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Dict, Optional

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(
    *args: str, check: bool = False, timeout: float = 240, env: Optional[Dict[str, str]] = None
) -> subprocess.CompletedProcess:
    """``det-lite ARGS`` in a subprocess (DET_LITE_HOME comes from the environment)."""
    proc = subprocess.run(
        [sys.executable, "-m", "determined_lite.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"det-lite {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def describe(exp_id: int) -> dict:
    """``det-lite experiment describe ID --json``, parsed."""
    return json.loads(cli("experiment", "describe", str(exp_id), "--json", check=True).stdout)


def write_config(source: str, tmp_path: object, name: str = "exp.yaml", **changes: object) -> str:
    """A copy of the YAML config ``source`` under ``tmp_path`` with dotted-key ``changes``."""
    with open(source) as f:
        config = yaml.safe_load(f)
    for key, value in changes.items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    path = os.path.join(str(tmp_path), name)
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path
