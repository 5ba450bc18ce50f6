"""Serve a browser site (``edge-deploy build --target browser-wasm``) with the headers WebAssembly threads need.

onnxruntime-web runs multi-threaded only in a cross-origin-isolated page (``SharedArrayBuffer``), which takes
``Cross-Origin-Opener-Policy: same-origin`` and ``Cross-Origin-Embedder-Policy: require-corp`` on the page;
without them it silently falls back to one thread. ``.wasm`` must be served as ``application/wasm`` (for
streaming compilation) and ``.mjs`` as JavaScript (module scripts are refused otherwise). stdlib only: this
runs on a Raspberry Pi too.
"""

from __future__ import annotations

import functools
import logging
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from edge.errors import InputError

log = logging.getLogger(__name__)

#: Headers sent with every response.
ISOLATION_HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
}
#: MIME types the stdlib's table lacks or gets wrong on some systems.
MIME_TYPES = {
    ".wasm": "application/wasm",
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".json": "application/json",
    ".onnx": "application/octet-stream",
    ".bin": "application/octet-stream",
    ".css": "text/css",
    ".html": "text/html",
}


class IsolatedHandler(SimpleHTTPRequestHandler):
    """Static files with cross-origin isolation headers and fixed MIME types; logs to ``logging``."""

    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, **MIME_TYPES}

    def end_headers(self) -> None:
        for key, value in ISOLATION_HEADERS.items():
            self.send_header(key, value)
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)


class WebServer:
    """A static site server in a background thread. Use as a context manager or call ``close()``.

    Args:
        site: the folder to serve (must hold ``index.html``).
        host: address to bind; 127.0.0.1 keeps it local.
        port: TCP port; 0 picks a free one (see ``port``).

    Raises:
        InputError: the folder does not exist or has no index.html; the port cannot be bound.
    """

    def __init__(self, site: str | Path, host: str = "127.0.0.1", port: int = 8080) -> None:
        self.site = Path(site)
        if not (self.site / "index.html").is_file():
            raise InputError(
                f"{self.site}: no index.html; expected a site written by 'edge-deploy build --target browser-wasm'"
            )
        handler = functools.partial(IsolatedHandler, directory=str(self.site))
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port} ({exc.strerror}); choose another --port") from exc
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """The site's address, e.g. ``http://127.0.0.1:8080/``."""
        host = self._server.server_address[0]
        if isinstance(host, bytes):  # only for AF_UNIX; ours is an AF_INET server, but the type allows it
            host = host.decode()
        return f"http://{host}:{self.port}/"

    def start(self) -> WebServer:
        """Serve in a daemon thread and return self."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="webserve", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until ``close()`` from another thread (or KeyboardInterrupt)."""
        self._server.serve_forever()

    def close(self) -> None:
        """Stop serving and release the port. Safe to call twice."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> WebServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
