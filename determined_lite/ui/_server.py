"""The dashboard's HTTP server: the standard library's ``ThreadingHTTPServer``, one token, JSON.

Every ``/api/`` request carries the token: the ``X-Det-Lite-Token`` header (what the page's
scripts send) or, for a GET, ``?token=`` (the printed URL, a download link). There is no cookie:
a browser sends a host's cookies to every port of that host, so any other local server the
browser visits would get them. The page and its files (``/``, ``/static/``: the package's own
code, no data) need no token; the page keeps the token of the printed URL in the origin's
``localStorage`` (per port). ``POST`` needs the header, checked before any body is read.
Requests are not logged (the token stays out of any log); a malformed one is one stderr line.
"""

from __future__ import annotations

import functools
import hmac
import http.server
import json
import mimetypes
import re
import secrets
import shutil
import socket
import sys
import threading
import urllib.parse
from http import HTTPStatus
from importlib import resources
from typing import Any, Callable, Dict, List, Optional, Tuple

from determined_lite.store import NotFoundError, Store, StoreError, json_safe
from determined_lite.ui._actions import (
    ActionRefused,
    TensorBoards,
    kill_trial,
    run_action,
    set_annotations,
)
from determined_lite.ui._download import checkpoint_archive
from determined_lite.ui._queries import Queries, QueryError

TOKEN_HEADER = "X-Det-Lite-Token"
MAX_BODY = 1 << 16  # a POST's body (notes are the longest) in bytes
STATIC = resources.files("determined_lite.ui") / "static"
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the token in the address bar goes nowhere
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
Params = Dict[str, str]
Route = Callable[[Queries, Tuple[int, ...], Params], Dict[str, Any]]


def _int(params: Params, key: str, default: Optional[int]) -> Optional[int]:
    text = params.get(key, "")
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise QueryError(f"{key} must be an integer") from None


def _curve_args(params: Params) -> Tuple[str, str, int]:
    return (
        params.get("kind", "validation"),
        params.get("metric", ""),
        _int(params, "points", 0) or 0,
    )


def _trial_ids(params: Params) -> List[int]:
    try:
        return [int(t) for t in params.get("trials", "").split(",") if t.strip()]
    except ValueError:
        raise QueryError("trials must be trial ids separated by commas") from None


_ROUTES: List[Tuple[re.Pattern, Route]] = [
    (re.compile(r"/api/experiments"), lambda q, _, p: q.experiments(p.get("state", ""), p.get("name", ""))),
    (re.compile(r"/api/experiments/(\d+)"), lambda q, ids, _: q.experiment(ids[0])),
    (
        re.compile(r"/api/experiments/(\d+)/curves"),
        lambda q, ids, p: q.experiment_curves(ids[0], *_curve_args(p)),
    ),
    (
        re.compile(r"/api/experiments/(\d+)/logs"),
        lambda q, ids, p: q.logs(("experiment_id", ids[0]), _int(p, "tail", None), p.get("q", "")),
    ),
    (re.compile(r"/api/trials/(\d+)"), lambda q, ids, _: q.trial(ids[0])),
    (re.compile(r"/api/trials/(\d+)/curves"), lambda q, ids, p: q.curves([ids[0]], *_curve_args(p))),
    (
        re.compile(r"/api/trials/(\d+)/logs"),
        lambda q, ids, p: q.logs(("trial_id", ids[0]), _int(p, "tail", None), p.get("q", "")),
    ),
    (re.compile(r"/api/curves"), lambda q, _, p: q.curves(_trial_ids(p), *_curve_args(p))),
    (re.compile(r"/api/compare"), lambda q, _, p: q.compare(_trial_ids(p))),
    (re.compile(r"/api/models"), lambda q, _, p: q.models()),
]
_ACTION = re.compile(r"/api/experiments/(\d+)/(pause|activate|kill)")
_ANNOTATE = re.compile(r"/api/experiments/(\d+)/annotations")
_TENSORBOARD = re.compile(r"/api/experiments/(\d+)/tensorboard")
_TRIAL_KILL = re.compile(r"/api/trials/(\d+)/kill")
_DOWNLOAD = re.compile(r"/api/checkpoints/([0-9a-fA-F-]{1,64})/download")


def _json_body(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise QueryError("the body must be JSON (UTF-8)") from None


class Handler(http.server.BaseHTTPRequestHandler):
    """One request; the server (``DashboardServer``) holds the token and the queries."""

    server: "DashboardServer"
    server_version = "det-lite-ui"
    timeout = 60  # seconds a connection may stay silent (a slow sender does not hold a thread)
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Silent: request lines carry the token."""

    def handle(self) -> None:
        """Serve the connection's requests, then close this thread's store connection (each
        connection has a thread of its own; an open one per finished thread would pile up)."""
        try:
            super().handle()
        finally:
            self.server.queries.store.close()

    # --- auth ------------------------------------------------------------------------------------

    def _authorized(self, query: Params) -> bool:
        """The header's token, else (``query`` given: a GET) the URL's, is the server's."""
        given = self.headers.get(TOKEN_HEADER) or query.get("token")
        return bool(given) and hmac.compare_digest(str(given).encode(), self.server.token.encode())

    def _body_length(self) -> Optional[int]:
        """The request's ``Content-Length`` (0 when absent); None when it is not a number of
        bytes from 0 to ``MAX_BODY``."""
        text = (self.headers.get("Content-Length") or "0").strip()
        if not text.isdigit() or int(text) > MAX_BODY:
            return None
        return int(text)

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """One line for a request the base class refused (its request line, which may carry the
        token, is not repeated)."""
        if not args or not isinstance(args[0], int):
            return  # an idle connection timing out is not an error
        code = args[0]
        print(
            f"det-lite ui: refused a malformed request from {self.client_address[0]} (HTTP {code})",
            file=sys.stderr,
            flush=True,
        )

    # --- answers ---------------------------------------------------------------------------------

    def _send(
        self, status: int, body: bytes, content_type: str, headers: Optional[Dict[str, str]] = None
    ) -> None:
        self.send_response(status)
        for key, value in {**_SECURITY_HEADERS, **(headers or {})}.items():
            self.send_header(key, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        body = json.dumps(json_safe(value), separators=(",", ":")).encode()
        self._send(status, body, "application/json")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _split(self) -> Tuple[str, Params]:
        url = urllib.parse.urlsplit(self.path)
        return url.path.rstrip("/") or "/", dict(urllib.parse.parse_qsl(url.query))

    # --- GET -------------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        path, query = self._split()
        if self._body_length() != 0:  # a GET has no body; one left unread would be a request
            self.close_connection = True
        if path.startswith("/api/"):
            if not self._authorized(query):
                self._error(HTTPStatus.FORBIDDEN, "forbidden: this URL needs the token det-lite ui printed")
                return
            self._api(path, query)
        elif path == "/":
            self._send(HTTPStatus.OK, STATIC.joinpath("index.html").read_bytes(), "text/html; charset=utf-8")
        elif path.startswith("/static/"):
            self._static(path[len("/static/") :])
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no such page: {path}")

    do_HEAD = do_GET

    def _static(self, name: str) -> None:
        parts = name.split("/")
        if not name or any(p in ("", ".", "..") for p in parts):
            self._error(HTTPStatus.NOT_FOUND, "no such file")
            return
        node = STATIC.joinpath(*parts)
        if not node.is_file():
            self._error(HTTPStatus.NOT_FOUND, "no such file")
            return
        kind = mimetypes.guess_type(parts[-1])[0] or "application/octet-stream"
        if kind.startswith("text/") or kind.endswith("javascript"):
            kind += "; charset=utf-8"
        self._send(HTTPStatus.OK, node.read_bytes(), kind)

    def _api(self, path: str, query: Params) -> None:
        download = _DOWNLOAD.fullmatch(path)
        if download:
            self._download(download.group(1))
            return
        for pattern, route in _ROUTES:
            match = pattern.fullmatch(path)
            if match:
                ids = tuple(int(g) for g in match.groups())
                self._answer(functools.partial(route, self.server.queries, ids, query))
                return
        self._error(HTTPStatus.NOT_FOUND, f"no such API: {path}")

    def _download(self, uuid: str) -> None:
        """The checkpoint's files as ``<uuid>.tar.gz`` (``ui/_download.py``), streamed."""
        try:
            archive, size, name = checkpoint_archive(self.server.queries.store, uuid)
        except NotFoundError as e:
            self._error(HTTPStatus.NOT_FOUND, str(e))
            return
        with archive:
            self.send_response(HTTPStatus.OK)
            for key, value in _SECURITY_HEADERS.items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/gzip")
            self.send_header("Content-Disposition", f'attachment; filename="{name}"')
            self.send_header("Content-Length", str(size))
            self.end_headers()
            if self.command != "HEAD":
                shutil.copyfileobj(archive, self.wfile)

    def _answer(self, call: Callable[[], Dict[str, Any]]) -> None:
        try:
            value = call()
        except NotFoundError as e:
            self._error(HTTPStatus.NOT_FOUND, str(e))
        except ActionRefused as e:
            self._error(HTTPStatus.CONFLICT, str(e))
        except (QueryError, ValueError, OverflowError) as e:  # OverflowError: an id past SQLite's
            self._error(HTTPStatus.BAD_REQUEST, str(e))
        except StoreError as e:
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, str(e))
        else:
            self._json(HTTPStatus.OK, value)

    # --- POST ------------------------------------------------------------------------------------

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        path, _ = self._split()
        if not self._authorized({}):  # before the body: no token, no read
            self.close_connection = True  # the unread body must not be taken for a request
            self._error(HTTPStatus.FORBIDDEN, f"forbidden: POST needs the token in the {TOKEN_HEADER} header")
            return
        length = self._body_length()
        if length is None:
            self.close_connection = True
            self._error(HTTPStatus.BAD_REQUEST, f"Content-Length must be a number of bytes up to {MAX_BODY}")
            return
        body = self.rfile.read(length)
        annotate, match = _ANNOTATE.fullmatch(path), _ACTION.fullmatch(path)
        if annotate is not None:
            experiment_id = int(annotate.group(1))
            self._answer(lambda: set_annotations(experiment_id, _json_body(body)))
            return
        board = _TENSORBOARD.fullmatch(path)
        if board is not None:
            self._answer(lambda: self.server.tensorboards.open(int(board.group(1))))
            return
        trial = _TRIAL_KILL.fullmatch(path)
        if trial is not None:
            with self.server.action_lock:
                self._answer(lambda: kill_trial(int(trial.group(1))))
            return
        if match is None:
            self._error(HTTPStatus.NOT_FOUND, f"no such action: {path}")
            return
        experiment_id, action = int(match.group(1)), match.group(2)
        with self.server.action_lock:  # one button at a time, as one terminal would
            self._answer(lambda: run_action(experiment_id, action))


class DashboardServer(http.server.ThreadingHTTPServer):
    """``det-lite ui``'s server on ``(host, port)`` (port 0: any free one) over the store at the
    default path, read through a read-only connection."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, token: Optional[str] = None) -> None:
        self.token = token or secrets.token_hex(24)
        self.queries = Queries(Store(read_only=True))
        self.action_lock = threading.Lock()
        self.tensorboards = TensorBoards(host)
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One stderr line for a request that failed (the standard library prints a traceback);
        nothing when the browser went away (a closed tab, a cancelled download)."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            return
        print(
            f"det-lite ui: a request from {client_address[0]} failed: {type(error).__name__}",
            file=sys.stderr,
            flush=True,
        )

    def server_close(self) -> None:
        super().server_close()
        self.queries.curve_cache.close()

    def url(self) -> str:
        """The URL to open, token included."""
        host, port = str(self.server_address[0]), self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/?token={self.token}"


__all__ = ["DashboardServer", "Handler", "TOKEN_HEADER"]
