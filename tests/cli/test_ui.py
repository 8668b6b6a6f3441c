"""`det-lite ui` (and its alias `dashboard`): loopback by default, the URL printed once bound,
Ctrl-C and SIGTERM stop it, also when started with SIGINT ignored (a background job)."""

from __future__ import annotations

import json
import select
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from tests.cli_helpers import REPO, cli


def _start(*args: str, ignore_sigint: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None,
    )


def _url(proc: subprocess.Popen) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    assert ready, "no URL printed"
    line = proc.stdout.readline()
    assert line.startswith("det-lite dashboard at http://127.0.0.1:") and line.endswith("(Ctrl-C to stop)\n")
    return line.split()[3]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "command, stop, ignore_sigint",
    [("ui", signal.SIGINT, False), ("dashboard", signal.SIGINT, True), ("ui", signal.SIGTERM, True)],
)
def test_serves_on_loopback_and_stops(command, stop, ignore_sigint):
    proc = _start(command, "--port", "0", ignore_sigint=ignore_sigint)
    try:
        url = _url(proc)
        with urllib.request.urlopen(url.replace("/?", "/api/experiments?"), timeout=30) as response:
            assert json.loads(response.read()) == {"experiments": []}
        proc.send_signal(stop)
        assert proc.wait(timeout=30) == 0
        assert url.split("token=")[1] not in proc.stderr.read()  # the token is printed once, never logged
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_taken_port_is_one_error_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = cli("ui", "--port", str(port), timeout=60)
    assert result.returncode == 1
    assert result.stderr == (
        f"det-lite: error: cannot serve on 127.0.0.1:{port}: the port is taken (another det-lite ui?); "
        "choose one with --port N or $DET_LITE_UI_PORT (0: any free port)\n"
    )
