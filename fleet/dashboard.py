"""The fleet dashboard's web server: ``/`` (the fleet page), ``/device/<id>`` (one device, ``?window=1h``),
each also as JSON (``/fleet.json``, ``/device/<id>.json``), and ``/app.js`` (the pages' live updates).

Exposure rules (docs/fleet.md, "Exposing the dashboard"):

- On a loopback address no login is asked. On any other address a token is required
  (``DashboardConfig.token``, from ``--web-auth FILE``): ``Authorization: Bearer <token>``, or HTTP Basic
  with any user name and the token as password (what a browser asks for). Compared in constant time.
- Only requests whose ``Host`` header names this server are answered (loopback names, the bound address,
  ``hosts``); others get 421, so a web page whose DNS name was rebound to this machine can't read the fleet.
- Connections are served by a bounded pool with time limits (``fleet.httpd``); each page is rebuilt at most
  once per ``refresh_s`` however many clients ask, and holds at most ``per_page`` devices (``?page=N``).
- HEAD is answered as GET without the body.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from urllib.parse import parse_qs, unquote

from edge.errors import EdgeDeployError, InputError
from fleet.alerts import AlertRules
from fleet.dashboard_page import SCRIPT, View, fleet_data, render_fleet
from fleet.dashboard_page import page_number as _page_number
from fleet.device_page import WINDOWS, device_data, render_device
from fleet.httpd import BoundedHTTPServer, PreReadHandler, ServerLimits
from fleet.store import FleetStore

log = logging.getLogger(__name__)

#: Shortest login token accepted: nothing slows down guessing it, so it must be long.
MIN_TOKEN_CHARS = 16
#: Host names every dashboard answers to (a loopback client may use any of them).
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; "
    "img-src data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_TEXT, _HTML, _JSON = "text/plain; charset=utf-8", "text/html; charset=utf-8", "application/json"
_JS = "text/javascript; charset=utf-8"


@dataclass(frozen=True)
class DashboardConfig:
    """Where and how the dashboard is served.

    Attributes:
        host: address to bind; a loopback address (127.0.0.1, ::1, localhost) needs no login.
        port: TCP port; 0 picks a free one.
        token: the login token (``read_token``); required off loopback.
        hosts: more ``Host`` names to answer to (e.g. the machine's DNS name when bound to 0.0.0.0).
        refresh_s: seconds between the pages' live updates, and the longest a built page is served again.
        per_page: devices per page.
        window_s: seconds of history in the fleet page's plots.
        limits: the HTTP server's bounds.
        rules: alert rules shown on the pages (the monitor's ``[alerts]``).

    Raises:
        InputError: a non-loopback ``host`` without a token, or a value out of range.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    token: bytes | None = field(default=None, repr=False)
    hosts: tuple[str, ...] = ()
    refresh_s: int = 5
    per_page: int = 100
    window_s: float = 900.0
    limits: ServerLimits = ServerLimits()
    rules: AlertRules = AlertRules()

    def __post_init__(self) -> None:
        if self.token is None and not is_loopback(self.host):
            raise InputError(
                f"--web {self.host}:{self.port} is not a loopback address: serving the fleet there needs a login; "
                "give --web-auth FILE (a mode-600 file whose first line is the token)"
            )
        for name, value, low, high in (("refresh_s", self.refresh_s, 1, 3600), ("per_page", self.per_page, 1, 1000)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InputError(f"dashboard {name} = {value!r}; expected a whole number in {low}..{high}")

    @property
    def allowed_hosts(self) -> frozenset[str]:
        """``Host`` names answered: loopback names, the bound address (unless a wildcard) and ``hosts``."""
        bound = {} if self.host in ("0.0.0.0", "::", "") else {self.host}
        return frozenset(h.lower().rstrip(".") for h in (*LOOPBACK_NAMES, *bound, *self.hosts))


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only reaches this machine."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(path: Path) -> bytes:
    """The login token: the first line of ``path``, a file only its owner may read.

    Raises:
        InputError: naming ``--web-auth`` and the file: group/others may read it, it can't be read, or the
            token is shorter than ``MIN_TOKEN_CHARS``.
    """
    from edge.filemode import check_private_mode

    label = f"--web-auth '{path}'"
    check_private_mode(path, label)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{label}: cannot read the token ({exc})") from exc
    token = lines[0].strip() if lines else ""
    if len(token) < MIN_TOKEN_CHARS:
        raise InputError(
            f"{label}: the token is {len(token)} characters; expected at least {MIN_TOKEN_CHARS} on the first line "
            "(e.g. openssl rand -hex 16)"
        )
    return token.encode()


def host_name(header: str) -> str:
    """The name of a ``Host`` header without its port, lower case: ``[::1]:80`` -> ``::1``."""
    text = header.strip().lower()
    if text.startswith("["):
        return text[1 : text.find("]")] if "]" in text else text
    return text.rsplit(":", 1)[0].rstrip(".") if text.count(":") == 1 else text.rstrip(".")


def login_ok(header: str | None, token: bytes) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (Bearer, or Basic with it as password)."""
    scheme, _, value = (header or "").strip().partition(" ")
    if scheme.lower() == "bearer":
        given = value.strip().encode("utf-8", "replace")
    elif scheme.lower() == "basic":
        try:
            given = base64.b64decode(value.strip(), validate=True).partition(b":")[2]
        except (binascii.Error, ValueError):
            return False
    else:
        return False
    return hmac.compare_digest(given, token)


def page_number(query: str) -> int:
    """``?page=N`` (default 1).

    Raises:
        InputError: N is not a whole number in 1..1000000.
    """
    return _page_number(parse_qs(query))


def _route(path: str, query: dict[str, list[str]]) -> tuple | None:
    """The cache key of a page: ("fleet", json, View) or ("device", json, id, window); None: no such page.

    Raises:
        InputError: a bad query value (sort key, page, window).
    """
    if path in ("/", "/fleet.json"):
        return ("fleet", path == "/fleet.json", View.parse(query))
    if not path.startswith("/device/"):
        return None
    name, as_json = unquote(path[len("/device/") :]), path.endswith(".json")
    name = name[:-5] if as_json else name
    window = query.get("window", ["1h"])[-1]
    if window not in WINDOWS:
        raise InputError(f"window={window[:20]!r}; expected one of {', '.join(WINDOWS)}")
    return ("device", as_json, name, window) if name and "/" not in name else None


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: status, content type, body, extra headers."""

    code: int
    kind: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


def _text(code: int, text: str, *headers: tuple[str, str]) -> Reply:
    return Reply(code, _TEXT, f"{text}\n".encode(), headers)


class _PageCache:
    """Built replies by key, each served again for ``ttl_s``; one build at a time, at most ``size`` kept."""

    def __init__(self, ttl_s: float, size: int = 32) -> None:
        self.ttl_s, self.size = ttl_s, size
        self._entries: OrderedDict[tuple, tuple[float, Reply]] = OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0

    def get(self, key: tuple, build: Callable[[], Reply]) -> Reply:
        with self._lock:  # the clients asking while a page is built wait for that build, not their own
            hit = self._entries.get(key)
            if hit is not None and time.monotonic() - hit[0] < self.ttl_s:
                return hit[1]
            reply = build()
            self.builds += 1
            self._entries[key] = (time.monotonic(), reply)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
            return reply


class Dashboard:
    """The dashboard's HTTP server in a background thread. Use ``with`` or call ``close()``.

    Args:
        store: the store to read (shared with the monitor; both backends are thread-safe).
        config: address, login and bounds.

    Raises:
        InputError: the address can't be bound.
    """

    def __init__(self, store: FleetStore, config: DashboardConfig | None = None) -> None:
        self.store = store
        self.config = config or DashboardConfig()
        self._hosts = self.config.allowed_hosts
        self._cache = _PageCache(self.config.refresh_s)
        handler = type("Handler", (_Handler,), {"board": self})
        self._server = BoundedHTTPServer((self.config.host, self.config.port), handler, self.config.limits)
        self._thread = threading.Thread(target=self._server.serve_forever, name="dashboard", daemon=True)

    @property
    def port(self) -> int:
        """The port actually bound."""
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """``http://host:port/``."""
        host = self._server.server_address[0]
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"

    @property
    def builds(self) -> int:
        """Pages and JSON documents built so far (the rest were served from the cache)."""
        return self._cache.builds

    def respond(self, target: str, headers: Message) -> Reply:
        """The answer to a GET of ``target`` (path and query) with these request headers."""
        hosts = headers.get_all("Host") or []
        if len(hosts) != 1:
            return _text(400, "expected one Host header")
        if host_name(hosts[0]) not in self._hosts:
            return _text(421, "this dashboard does not answer to that Host name (see --web-host)")
        if self.config.token is not None and not login_ok(headers.get("Authorization"), self.config.token):
            return _text(
                401, "login required", ("WWW-Authenticate", 'Basic realm="edge-deploy fleet", charset="UTF-8"')
            )
        path, _, query = target.partition("?")
        if path == "/app.js":
            return Reply(200, _JS, SCRIPT.encode())
        try:
            key = _route(path, parse_qs(query))
        except InputError as exc:
            return _text(400, str(exc))
        if key is None:
            return _text(404, "not found")
        return self._cache.get(key, lambda: self._build(key))

    def _build(self, key: tuple) -> Reply:
        config, now = self.config, time.time()
        try:
            if key[0] == "fleet":
                data: dict | None = fleet_data(self.store, config.window_s, now, key[2], config.per_page, config.rules)
            else:
                data = device_data(self.store, key[2], WINDOWS[key[3]], now, config.rules)
        except EdgeDeployError as exc:  # e.g. the database is restarting: say so, the page retries
            return _text(503, f"fleet store unavailable: {exc}", ("Retry-After", str(config.refresh_s)))
        if data is None:
            return _text(404, f"no device {key[2]!r} in the fleet store")
        if key[1]:
            return Reply(200, _JSON, json.dumps(data).encode())
        if key[0] == "fleet":
            return Reply(200, _HTML, render_fleet(data, config.refresh_s).encode())
        return Reply(200, _HTML, render_device(data, key[3], config.refresh_s).encode())

    def start(self) -> Dashboard:
        """Serve in the background."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and free the port (busy requests get a few seconds to end)."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Dashboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler(PreReadHandler):
    board: Dashboard

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib name
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        reply = self.board.respond(self.path, self.headers)
        self.send_response(reply.code)
        self.send_header("Content-Type", reply.kind)
        self.send_header("Content-Length", str(len(reply.body)))
        for key, value in (*_HEADERS.items(), *reply.headers):
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(reply.body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)
