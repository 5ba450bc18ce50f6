"""A small HTTP server that floods of idle or slow connections can't starve (stdlib only).

One thread accepts connections and reads each request head without blocking, bounded in size
(``MAX_HEAD_BYTES``) and time (``head_timeout_s``). Only a complete head goes to the fixed pool of worker
threads, whose queue is bounded too: past it the request is answered 503 at once. Connections still
sending their head are capped (``max_waiting``); past the cap the oldest is closed, so a flood of idle
sockets can't lock out a client that sends its request right away. A worker's writes end after
``io_timeout_s``. One request per connection (HTTP/1.0: the server closes it after answering).

Handlers subclass ``PreReadHandler`` (a ``BaseHTTPRequestHandler`` that reads the head already received).
"""

from __future__ import annotations

import contextlib
import io
import logging
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from edge.errors import InputError

log = logging.getLogger(__name__)

#: Largest request head (request line and headers) read; a longer one is answered 431.
MAX_HEAD_BYTES = 16384


@dataclass(frozen=True)
class ServerLimits:
    """How much one server takes on at once.

    Attributes:
        workers: threads answering requests.
        queue: complete requests waiting for a worker; more are answered 503 at once.
        max_waiting: connections still sending their request head; past it the oldest is closed.
        head_timeout_s: seconds a connection has to send its whole request head.
        io_timeout_s: seconds a worker may spend sending one response.
    """

    workers: int = 4
    queue: int = 32
    max_waiting: int = 512
    head_timeout_s: float = 10.0
    io_timeout_s: float = 10.0


class PreReadHandler(BaseHTTPRequestHandler):
    """A request handler fed the request head the server already read (``request`` is (socket, head))."""

    def setup(self) -> None:  # noqa: D102 - replaces StreamRequestHandler's
        self.connection, head = self.request
        self.rfile = io.BytesIO(head)
        self.wfile = _SendAll(self.connection)

    def finish(self) -> None:  # noqa: D102 - nothing buffered to flush
        pass


class _SendAll(io.RawIOBase):
    """The connection as a writable file whose ``write`` sends everything (within the socket's timeout)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        self._sock.sendall(data)
        return len(data)


class _Waiting:
    """A connection still sending its request head."""

    __slots__ = ("addr", "head", "since")

    def __init__(self, addr: tuple, since: float) -> None:
        self.addr, self.head, self.since = addr, b"", since


class BoundedHTTPServer:
    """Serve ``handler`` on ``address`` with bounded threads, queue and waits (see the module docstring).

    Args:
        address: (host, port); port 0 picks a free one.
        handler: a ``PreReadHandler`` subclass.
        limits: the bounds.

    Raises:
        InputError: the address can't be bound.
    """

    def __init__(self, address: tuple[str, int], handler: type[PreReadHandler], limits: ServerLimits) -> None:
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self.socket = socket.create_server((host, port), family=family, backlog=128)
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port} ({exc.strerror}); choose another --web address") from exc
        self.socket.setblocking(False)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self.handler, self.limits = handler, limits
        self._pool = ThreadPoolExecutor(limits.workers, thread_name_prefix="dashboard")
        self._selector = selectors.DefaultSelector()
        self._waiting: dict[socket.socket, _Waiting] = {}  # oldest first
        self._busy: set[socket.socket] = set()  # handed to the pool (queued or being answered)
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._stopped = threading.Event()

    def serve_forever(self) -> None:
        """Accept and read request heads until ``shutdown``."""
        self._selector.register(self.socket, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                for key, _ in self._selector.select(0.2):
                    if key.fileobj is self.socket:
                        self._accept()
                    else:
                        self._read(key.fileobj)  # type: ignore[arg-type]
                self._expire(time.monotonic())
        finally:
            self._stopped.set()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop the accept loop (waiting at most ``timeout`` seconds for it)."""
        self._stop.set()
        self._stopped.wait(timeout)

    def server_close(self, timeout: float = 5.0) -> None:
        """Close every connection and the listening socket; wait at most ``timeout`` s for busy workers."""
        for conn in list(self._waiting):
            self._drop(conn)
        with self._lock:
            for conn in self._busy:  # unblock workers sending to slow readers
                _quiet(conn.shutdown, socket.SHUT_RDWR)
            self._lock.wait_for(lambda: not self._busy, timeout)
            for conn in self._busy:  # still queued after the wait: never answered
                conn.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._selector.close()
        self.socket.close()

    # -- accept loop -----------------------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(64):  # a burst at a time, so reads and expiry keep their turn
            try:
                conn, addr = self.socket.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # e.g. out of file descriptors: make room by closing the oldest waiting
                log.warning("dashboard: accept failed (%s)", exc)
                if self._waiting:
                    self._drop(next(iter(self._waiting)))
                return
            if len(self._waiting) >= self.limits.max_waiting:
                self._drop(next(iter(self._waiting)))
            conn.setblocking(False)
            self._waiting[conn] = _Waiting(addr, time.monotonic())
            self._selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        waiting = self._waiting.get(conn)
        if not data or waiting is None:  # closed by the client, or dropped earlier in this round
            self._drop(conn)
            return
        waiting.head += data
        if b"\r\n\r\n" in waiting.head or b"\n\n" in waiting.head:
            self._selector.unregister(conn)
            del self._waiting[conn]
            self._dispatch(conn, waiting)
        elif len(waiting.head) > MAX_HEAD_BYTES:
            self._drop(conn, 431, "request head too large")

    def _dispatch(self, conn: socket.socket, waiting: _Waiting) -> None:
        with self._lock:
            full = len(self._busy) >= self.limits.workers + self.limits.queue
            if not full:
                self._busy.add(conn)
        if full:
            _reply_now(conn, 503, "busy, try again")
            return
        self._pool.submit(self._work, conn, waiting)

    def _expire(self, now: float) -> None:
        while self._waiting:
            conn, waiting = next(iter(self._waiting.items()))
            if now - waiting.since < self.limits.head_timeout_s:
                return
            self._drop(conn, 408, "request head not received in time")

    def _drop(self, conn: socket.socket, code: int = 0, text: str = "") -> None:
        self._waiting.pop(conn, None)
        _quiet(self._selector.unregister, conn)
        if code:
            _reply_now(conn, code, text)
        else:
            conn.close()

    # -- workers ---------------------------------------------------------------------------------------

    def _work(self, conn: socket.socket, waiting: _Waiting) -> None:
        try:
            conn.setblocking(True)
            conn.settimeout(self.limits.io_timeout_s)
            self.handler((conn, waiting.head), waiting.addr, self)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - one client's failure (reset, timeout) must not end the server
            log.debug("dashboard: request from %s failed: %s", waiting.addr, exc)
        finally:
            _quiet(conn.shutdown, socket.SHUT_WR)
            conn.close()
            with self._lock:
                self._busy.discard(conn)
                self._lock.notify_all()


def _reply_now(conn: socket.socket, code: int, text: str) -> None:
    """Answer from the accept thread without blocking (a short response fits the socket's send buffer)."""
    body = f"{text}\n".encode()
    lines = [f"HTTP/1.0 {code} {text}", "Content-Type: text/plain; charset=utf-8", f"Content-Length: {len(body)}"]
    lines += ["Connection: close", *(["Retry-After: 1"] if code == 503 else []), "", ""]
    conn.setblocking(False)
    _quiet(conn.send, "\r\n".join(lines).encode() + body)
    conn.close()


def _quiet(call, *args) -> None:
    """Call, ignoring the OSError of a connection the client already closed."""
    with contextlib.suppress(OSError, KeyError, ValueError):
        call(*args)
