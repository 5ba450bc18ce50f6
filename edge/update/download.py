"""Fetch an update bundle over HTTP(S): bounded in size, total time and average speed, checked against its
sha256, cancellable from another thread.

The archive is written to ``<dest>.partial`` and renamed to ``dest`` only once its size and sha256 match;
a download that is cut, too large, too slow, cancelled or different from what the command named leaves
nothing at ``dest`` (a later command starts it again from the beginning).

A server that answers and then trickles (TUF's "slow retrieval attack") can't hold a download past its
bounds: the body is read with ``read1`` (at most one receive per call), the bounds are checked after every
receive, and before each one the socket's timeout is set to the moment the first bound would break if
nothing more came. A watchdog thread shuts the socket at that moment too, which also covers the request,
the headers and a chunked body's size lines (reads that take several receives).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.client
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.errors import BundleError

_BLOCK = 1 << 16
MAX_URL_CHARS = 2048
#: The average speed is checked from this many seconds after the request on (a connection's slow start).
SPEED_GRACE_S = 30.0
#: The watchdog's shortest sleep (a bound met exactly is not broken yet; it looks again this much later).
_MIN_WAIT_S = 0.01


@dataclass(frozen=True)
class DownloadLimits:
    """The bounds of one download (``[update]`` of the daemon's config).

    Attributes:
        max_bytes: refuse a larger archive (announced or received).
        timeout_s: the whole download, from the request to the last byte (``update.download_timeout_s``).
        min_bytes_per_s: least average speed since the request, from ``grace_s`` on; 0: not checked
            (``update.min_bytes_per_s``).
        grace_s: when the average speed starts to count.
    """

    max_bytes: int
    timeout_s: float
    min_bytes_per_s: float = 0.0
    grace_s: float = SPEED_GRACE_S


class _NoOtherSchemes(urllib.request.HTTPRedirectHandler):
    """Follow redirects only to http/https."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise BundleError(f"{req.full_url}: redirected to {newurl!r}; expected an http or https URL")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _Watched(http.client.HTTPConnection):
    """A connection that hands its socket to ``on_connect`` (so the download can bound and shut it)."""

    def __init__(self, *args: Any, on_connect: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_connect = on_connect

    def connect(self) -> None:
        super().connect()
        self._on_connect(self.sock)


class _WatchedHTTPS(_Watched, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, on_connect: Any) -> None:
        super().__init__()
        self._on_connect = on_connect

    def http_open(self, req: Any) -> Any:
        connection: Any = functools.partial(_Watched, on_connect=self._on_connect)
        return self.do_open(connection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    """HTTPS with the default TLS context (certificate and host name checked), as urllib's own handler."""

    def __init__(self, on_connect: Any) -> None:
        super().__init__()
        self._on_connect = on_connect

    def https_open(self, req: Any) -> Any:
        connection: Any = functools.partial(_WatchedHTTPS, on_connect=self._on_connect)
        return self.do_open(connection, req)


def check_url(url: object) -> str:
    """An update URL: http or https with a host, at most 2048 characters.

    Raises:
        BundleError: anything else (naming the value).
    """
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS:
        raise BundleError(
            f"update url = {str(url)[:80]!r}; expected an http(s) URL of at most {MAX_URL_CHARS} characters"
        )
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BundleError(f"update url = {url!r}; expected an http or https URL with a host")
    return url


class Download:
    """One download: ``run`` it on any thread; ``cancel`` it from another.

    Args:
        url: http or https URL of the bundle archive.
        dest: where the archive goes (its folder must exist).
        sha256: the archive's expected sha256 (64 lowercase hex digits, from the signed command).
        limits: size, time and speed bounds.

    Raises:
        BundleError: a bad URL.
    """

    def __init__(self, url: str, dest: Path, sha256: str, limits: DownloadLimits) -> None:
        self.url = check_url(url)
        self.dest = Path(dest)
        self.sha256 = sha256
        self.limits = limits
        self.received = 0
        self._started = 0.0
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._done = threading.Event()
        self._stop = threading.Event()
        self._stop_reason = ""
        self._broken_at: float | None = None  # when the watchdog found a bound broken

    # -- bounds -------------------------------------------------------------------------------------------

    def _bound_at(self) -> float:
        """The moment the first bound breaks if nothing more arrives."""
        lim = self.limits
        at = self._started + lim.timeout_s
        if lim.min_bytes_per_s > 0:
            at = min(at, self._started + max(lim.grace_s, self.received / lim.min_bytes_per_s))
        return at

    def _broken(self, now: float) -> str | None:
        """The error message of the bound broken at ``now``, or None."""
        lim, n = self.limits, self.received
        elapsed = now - self._started
        if elapsed >= lim.timeout_s:
            return (
                f"{self.url}: {n} bytes in {elapsed:.1f} s; expected the whole file within {lim.timeout_s:g} s "
                "(update.download_timeout_s)"
            )
        if lim.min_bytes_per_s > 0 and elapsed >= lim.grace_s and n < lim.min_bytes_per_s * elapsed:
            return (
                f"{self.url}: {n} bytes in {elapsed:.1f} s ({n / elapsed:.1f} bytes/s); expected at least "
                f"{lim.min_bytes_per_s:g} bytes/s on average after the first {lim.grace_s:g} s "
                "(update.min_bytes_per_s)"
            )
        return None

    def _check(self) -> None:
        """Raise if a bound is broken or the download was cancelled (after every receive)."""
        if self._stop.is_set():
            raise BundleError(self._stopped_message())
        message = self._broken(time.monotonic())
        if message:
            raise BundleError(message)

    def _stopped_message(self) -> str:
        elapsed = time.monotonic() - self._started
        return f"{self.url}: stopped after {self.received} bytes in {elapsed:.1f} s ({self._stop_reason})"

    # -- the socket ---------------------------------------------------------------------------------------

    def _on_connect(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self._stop.is_set() or self._broken_at is not None:
                _shut(sock)

    def _shut_socket(self) -> None:
        with self._lock:
            if self._sock is not None:
                _shut(self._sock)

    def _arm(self) -> None:
        """Bound the next receive: the socket gives up when the first bound breaks."""
        with self._lock:
            if self._sock is not None:
                self._sock.settimeout(max(self._bound_at() - time.monotonic(), _MIN_WAIT_S))

    def _watch(self) -> None:
        """Shut the socket once a bound is broken (covers reads that take several receives)."""
        while not self._done.wait(max(self._bound_at() - time.monotonic(), _MIN_WAIT_S)):
            now = time.monotonic()
            if self._broken(now):
                self._broken_at = now
                self._shut_socket()
                return

    def cancel(self, reason: str) -> None:
        """Stop the download from another thread: ``run`` raises ``BundleError`` naming ``reason`` at once."""
        self._stop_reason = reason
        self._stop.set()
        self._shut_socket()

    # -- the download -------------------------------------------------------------------------------------

    def run(self) -> int:
        """Download to ``dest`` and return its size.

        Raises:
            BundleError: an HTTP or network error, more than ``max_bytes``, a truncated body, the time or
                speed bound broken, cancelled, or a sha256 that differs (each naming the URL).
        """
        partial = self.dest.with_name(self.dest.name + ".partial")
        self._started = time.monotonic()
        watchdog = threading.Thread(target=self._watch, name="edge-download-watchdog", daemon=True)
        watchdog.start()
        digest = hashlib.sha256()
        try:
            length = self._fetch(partial, digest)
        except urllib.error.HTTPError as exc:
            raise BundleError(f"{self.url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
            raise BundleError(self._failure(getattr(exc, "reason", exc))) from None
        finally:
            self._done.set()
            if partial.exists() and (self.received == 0 or digest.hexdigest() != self.sha256):
                partial.unlink()
        if length is not None and self.received != length:
            raise BundleError(f"{self.url}: truncated: received {self.received} of {length} bytes")
        if digest.hexdigest() != self.sha256:
            raise BundleError(
                f"{self.url}: sha256 {digest.hexdigest()[:12]}… != the command's {self.sha256[:12]}… "
                "(a different or damaged file)"
            )
        os.replace(partial, self.dest)
        return self.received

    def _failure(self, reason: object) -> str:
        """Why a read failed: cancelled, a bound broken (the watchdog shut the socket, or a receive timed out
        at the bound it was given), else the network's ``reason``."""
        if self._stop.is_set():
            return self._stopped_message()
        now = time.monotonic()
        if self._broken_at is not None or isinstance(reason, TimeoutError):
            now = max(now, self._bound_at())
        return self._broken(now) or f"{self.url}: download failed after {self.received} bytes ({reason})"

    def _fetch(self, partial: Path, digest: Any) -> int | None:
        """Stream the body into ``partial``; return the announced length (None if not announced)."""
        lim = self.limits
        opener = urllib.request.build_opener(_NoOtherSchemes, _HTTPHandler(self._on_connect),
                                             _HTTPSHandler(self._on_connect))  # fmt: skip
        request = urllib.request.Request(self.url, headers={"User-Agent": "edge-deploy"})
        first = min(lim.timeout_s, lim.grace_s) if lim.min_bytes_per_s > 0 else lim.timeout_s
        with opener.open(request, timeout=first) as resp:
            announced = resp.headers.get("Content-Length")
            length = int(announced) if announced is not None and announced.isdigit() else None
            if length is not None and length > lim.max_bytes:
                raise BundleError(
                    f"{self.url}: {length} bytes announced; expected at most {lim.max_bytes} (update.max_bytes)"
                )
            with open(partial, "wb") as out:
                while True:
                    self._arm()
                    block = resp.read1(_BLOCK)
                    self._check()
                    if not block:
                        break
                    self.received += len(block)
                    if self.received > lim.max_bytes:
                        raise BundleError(
                            f"{self.url}: more than {lim.max_bytes} bytes; expected at most that (update.max_bytes)"
                        )
                    digest.update(block)
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
        return length


def _shut(sock: socket.socket) -> None:
    """Shut a socket down (a receive blocked on it in another thread returns at once)."""
    with contextlib.suppress(OSError):  # already closed
        # socket.socket's own shutdown: an SSLSocket's would drop its TLS state under the reading thread
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def download(url: str, dest: Path, sha256: str, limits: DownloadLimits) -> int:
    """Download ``url`` to ``dest`` and return its size (``Download(...).run()``).

    Raises:
        BundleError: as ``Download.run``.
    """
    return Download(url, dest, sha256, limits).run()
