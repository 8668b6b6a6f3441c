"""det-lite ui's defences, over real HTTP against a real ``det-lite ui`` process: no cookie (a
browser sends a host's cookies to every port), the token checked before a body is read, a
malformed request one stderr line, a non-loopback ``--host`` a warning naming who can reach it."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Iterator, Tuple

import pytest

from tests.cli_helpers import REPO

pytestmark = pytest.mark.timeout(120)


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "ui", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def _url(proc: subprocess.Popen) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    assert ready, "no URL printed"
    return proc.stdout.readline().split()[3]


def _stop(proc: subprocess.Popen) -> str:
    """Stop ``proc`` with Ctrl-C; its stderr."""
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    return proc.stderr.read()


@pytest.fixture
def ui(_det_lite_home) -> Iterator[Tuple[subprocess.Popen, str, int, str]]:
    proc = _start("--port", "0")
    try:
        url = _url(proc)
        port = int(url.split(":")[2].split("/")[0])
        yield proc, url, port, url.split("token=")[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _raw(port: int, request: bytes, timeout: float = 5) -> bytes:
    """Send ``request`` as is; what the server answers before it closes or ``timeout`` passes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        answer = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            answer += chunk
            if b"\r\n\r\n" in answer and b'"}' in answer:
                break
        return answer


def test_no_cookie_is_set_nor_accepted(ui):
    _, url, port, token = ui
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200 and response.headers.get("Set-Cookie") is None
    # The old cookie, as another local server's page would have received it, opens nothing.
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/experiments", headers={"Cookie": f"det_lite_ui_{port}={token}"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403


def test_the_token_is_checked_before_a_body_is_read(ui):
    _, _, port, token = ui
    # No token: refused at once although the announced 10 bytes never come (old: the server
    # waited for them, a thread held by anyone).
    answer = _raw(port, b"POST /api/experiments/1/kill HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
    assert answer.startswith(b"HTTP/1.0 403") or answer.startswith(b"HTTP/1.1 403"), answer
    answer = _raw(port, b"POST /api/experiments/1/kill HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
    assert b" 403 " in answer.split(b"\r\n")[0], answer
    # With the token, a bad Content-Length is a 400, not a read to the end of the stream.
    for length in (b"-1", b"abc", b"99999999999"):
        answer = _raw(
            port,
            b"POST /api/experiments/1/kill HTTP/1.1\r\nHost: x\r\nX-Det-Lite-Token: "
            + token.encode()
            + b"\r\nContent-Length: "
            + length
            + b"\r\n\r\n",
        )
        assert b" 400 " in answer.split(b"\r\n")[0], (length, answer)
        assert b"Content-Length must be a number of bytes up to 65536" in answer


def test_a_malformed_request_is_one_log_line(ui):
    proc, _, port, token = ui
    _raw(port, b"GARBAGE\r\n\r\n")
    huge = f"GET /api/trials/{10**30} HTTP/1.1\r\nX-Det-Lite-Token: {token}\r\n\r\n"
    assert b" 400 " in _raw(port, huge.encode())  # past SQLite's integers
    _raw(port, b"GET / HTTP/1.1\r\nContent-Length: zz\r\n\r\n")
    errors = _stop(proc)
    assert "Traceback" not in errors and token not in errors
    assert errors.splitlines() == ["det-lite ui: refused a malformed request from 127.0.0.1 (HTTP 400)"]


def test_the_page_and_its_files_need_no_token_the_api_does(ui):
    _, _, port, token = ui
    base = f"http://127.0.0.1:{port}"
    for path in ("/", "/static/app.js"):
        with urllib.request.urlopen(base + path, timeout=30) as response:
            assert response.status == 200
    for path in ("/api/experiments", "/api/experiments/1", "/api/trials/1/logs"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + path, timeout=30)
        assert refused.value.code == 403


def test_a_non_loopback_host_is_a_warning_naming_who_can_reach_it(_det_lite_home):
    proc = _start("--host", "0.0.0.0", "--port", "0")
    try:
        url = _url(proc)
        port = url.split(":")[2].split("/")[0]
    finally:
        errors = _stop(proc)
    assert errors.splitlines() == [
        "det-lite: warning: --host 0.0.0.0 serves the dashboard on every network interface of this "
        f"machine: anyone who can reach it on port {port} can open it with the token (and pause, "
        "activate or kill experiments); the traffic is not encrypted"
    ]
    quiet = _start("--host", "localhost", "--port", "0")
    _url(quiet)
    assert _stop(quiet) == ""


def test_the_port_is_stable_and_the_token_too(_det_lite_home):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = {**os.environ, "DET_LITE_UI_PORT": str(port)}
    urls = []
    for _ in range(2):
        proc = subprocess.Popen(
            [sys.executable, "-m", "determined_lite.cli", "ui"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )
        urls.append(_url(proc))
        _stop(proc)
    assert urls[0] == urls[1] and urls[0].startswith(f"http://127.0.0.1:{port}/?token=")
    token_file = _det_lite_home / "ui-token"
    assert token_file.read_text().strip() == urls[0].split("token=")[1]
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
