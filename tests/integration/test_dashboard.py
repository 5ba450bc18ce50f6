"""The dashboard served for real on a free loopback port over a real store: Host allow-list, login, HEAD, idle
and slow connection floods, a full worker pool, cached pages, 20,000 device ids, and a monitor that exits soon
after SIGTERM with a big store (real mosquitto). One PostgreSQL case for the paged queries."""

from __future__ import annotations

import base64
import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from edge.telemetry.schema import Telemetry, to_json
from fleet import SqliteStore, open_store
from fleet.dashboard import Dashboard, DashboardConfig
from fleet.dashboard_page import FUTURE_SKEW_S, View, fleet_data, render_fleet
from fleet.device_page import device_data
from fleet.httpd import BoundedHTTPServer, PreReadHandler, ServerLimits
from fleet.run import EXPORT_ROWS
from tests.unit.fleet_flood import flood
from testsupport.broker import Broker, free_port
from testsupport.postgres import Postgres, wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "0123456789abcdef0123"


def get(port: int, path: str = "/", method: str = "GET", **headers: str) -> tuple[int, dict, bytes]:
    """One request (Host defaults to 127.0.0.1:port); returns status, headers, body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, headers={"Host": f"127.0.0.1:{port}", **headers})
        reply = conn.getresponse()
        return reply.status, dict(reply.getheaders()), reply.read()
    finally:
        conn.close()


def raw(port: int, request: bytes, timeout: float = 10.0) -> bytes:
    """Send ``request`` as is and read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture()
def store(tmp_path: Path):
    with SqliteStore(tmp_path / "m.db") as s:
        s.handle("edge-deploy/pi-1/telemetry", to_json(Telemetry(device_id="pi-1", seq=1, timestamp=time.time(),
                                                                  latency_p50_ms=1, latency_p90_ms=2, fps=3)))  # fmt: skip
        yield s


def test_only_its_own_host_names_are_answered(store: SqliteStore) -> None:
    """DNS rebinding: a page on evil.example whose name now points at 127.0.0.1 sends Host: evil.example."""
    with Dashboard(store, DashboardConfig(port=0, hosts=("fleet.example",))).start() as board:
        for path in ("/", "/fleet.json"):
            status, _, body = get(board.port, path, Host=f"evil.example:{board.port}")
            assert (status, body) == (421, b"this dashboard does not answer to that Host name (see --web-host)\n")
        for host in (f"127.0.0.1:{board.port}", f"localhost:{board.port}", "fleet.example", f"[::1]:{board.port}"):
            assert get(board.port, "/fleet.json", Host=host)[0] == 200, host
        assert raw(board.port, b"GET / HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 400 ")  # no Host at all


def test_a_token_is_asked_for_and_checked(store: SqliteStore) -> None:
    with Dashboard(store, DashboardConfig(port=0, token=TOKEN.encode())).start() as board:
        status, headers, body = get(board.port)
        assert (status, body) == (401, b"login required\n")
        assert headers["WWW-Authenticate"] == 'Basic realm="edge-deploy fleet", charset="UTF-8"'
        assert get(board.port, "/fleet.json", Authorization=f"Bearer {TOKEN}")[0] == 200
        basic = base64.b64encode(f"me:{TOKEN}".encode()).decode()
        assert get(board.port, Authorization=f"Basic {basic}")[0] == 200
        assert get(board.port, Authorization=f"Bearer {TOKEN[:-1]}X")[0] == 401


def test_head_is_answered_like_get_without_a_body(store: SqliteStore) -> None:
    with Dashboard(store, DashboardConfig(port=0)).start() as board:
        status, headers, body = get(board.port)
        answer = raw(board.port, f"HEAD / HTTP/1.0\r\nHost: 127.0.0.1:{board.port}\r\n\r\n".encode())
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert status == 200 and head.startswith(b"HTTP/1.0 200 OK") and rest == b""
    assert f"Content-Length: {len(body)}".encode() in head
    assert headers["Content-Security-Policy"].startswith("default-src 'none'")


def test_device_pages_and_the_script_are_served(store: SqliteStore) -> None:
    with Dashboard(store, DashboardConfig(port=0)).start() as board:
        status, _, body = get(board.port, "/device/pi-1")
        assert status == 200 and b"<h1>pi-1</h1>" in body and b'<script src="/app.js">' in body
        data = json.loads(get(board.port, "/device/pi-1.json")[2])
        assert data["device"]["device_id"] == "pi-1" and [v for _, v in data["series"]["fps"]] == [3]
        assert get(board.port, "/device/nobody")[::2] == (404, b"no device 'nobody' in the fleet store\n")
        assert get(board.port, "/device/pi-1?window=2d")[::2] == (
            400,
            b"window='2d'; expected one of 15m, 1h, 6h, 24h, 7d\n",
        )
        assert get(board.port, "/?sort=nope")[0] == 400 and get(board.port, "/device/")[0] == 404
        status, headers, body = get(board.port, "/app.js")
        assert status == 200 and headers["Content-Type"] == "text/javascript; charset=utf-8" and b"#live" not in body
        assert b'getElementById("live")' in body
        assert "script-src 'self'; connect-src 'self'" in headers["Content-Security-Policy"]


def test_300_idle_connections_do_not_starve_it(store: SqliteStore) -> None:
    """Idle sockets are accepted at once and cost no thread; a real request is answered meanwhile and after
    they all close (before: one thread each, a listen backlog of 5, 48 s to open 300 here)."""
    with Dashboard(store, DashboardConfig(port=0)).start() as board:
        threads = threading.active_count()
        idle: list[socket.socket] = []
        deadline = time.monotonic() + 10
        try:
            while len(idle) < 300 and time.monotonic() < deadline:
                idle.append(socket.create_connection(("127.0.0.1", board.port), timeout=2))
            assert len(idle) == 300
            started = time.monotonic()
            assert get(board.port)[0] == 200
            assert time.monotonic() - started < 3.0
            assert threading.active_count() <= threads + DashboardConfig().limits.workers
        finally:
            for s in idle:
                s.close()
        started = time.monotonic()
        assert get(board.port)[0] == 200
        assert time.monotonic() - started < 3.0


def test_idle_and_slow_connections_are_closed_in_time(store: SqliteStore) -> None:
    limits = ServerLimits(head_timeout_s=1.0, max_waiting=20)
    with Dashboard(store, DashboardConfig(port=0, limits=limits)).start() as board:
        with socket.create_connection(("127.0.0.1", board.port), timeout=5) as idle:
            started = time.monotonic()
            assert idle.recv(1000).startswith(b"HTTP/1.0 408 ")
            assert 0.9 < time.monotonic() - started < 3.0
        with socket.create_connection(("127.0.0.1", board.port), timeout=5) as slow:  # a byte every 0.2 s
            started = time.monotonic()
            try:
                for byte in b"GET / HTTP/1.0\r\nX-Padding: " + b"x" * 100:
                    if time.monotonic() - started > 3.0:
                        break
                    slow.sendall(bytes([byte]))
                    time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError):  # closed by the server while bytes were coming
                pass
            try:
                answer = slow.recv(1000)
            except ConnectionResetError:
                answer = b"(reset)"
            assert answer.startswith(b"HTTP/1.0 408 ") or answer == b"(reset)", answer
            assert time.monotonic() - started < 3.0
        flood_ = [socket.create_connection(("127.0.0.1", board.port), timeout=5) for _ in range(60)]
        try:  # past max_waiting the oldest idle ones are closed, not the new request
            assert get(board.port)[0] == 200
        finally:
            for s in flood_:
                s.close()


class _Held(PreReadHandler):
    """Answers once ``release`` is set (a slow page build)."""

    release = threading.Event()

    def do_GET(self) -> None:  # noqa: N802
        self.release.wait(10)
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *args: object) -> None:
        pass


def test_past_the_workers_and_queue_requests_get_503_at_once() -> None:
    server = BoundedHTTPServer(("127.0.0.1", 0), _Held, ServerLimits(workers=1, queue=1))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        results: list[bytes] = []
        held = [threading.Thread(target=lambda: results.append(raw(port, b"GET / HTTP/1.0\r\n\r\n"))) for _ in range(2)]
        for t in held:
            t.start()
            time.sleep(0.3)  # the first is being answered, the second queued
        started = time.monotonic()
        assert raw(port, b"GET / HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 503 busy, try again\r\n")
        assert time.monotonic() - started < 1.0
        _Held.release.set()
        for t in held:
            t.join(10)
        assert [r.split(b"\r\n", 1)[0] for r in results] == [b"HTTP/1.0 200 OK"] * 2
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_is_built_once_per_refresh_however_many_ask(store: SqliteStore) -> None:
    with Dashboard(store, DashboardConfig(port=0, refresh_s=30)).start() as board:
        answers = [json.loads(get(board.port, "/fleet.json")[2])["now"] for _ in range(20)]
        assert len(set(answers)) == 1 and board.builds == 1
        get(board.port, "/")
        get(board.port, "/?page=1")
        assert board.builds == 2


def test_20000_device_ids_give_a_bounded_page(tmp_path: Path) -> None:
    """Before: one 12 MB page of every device, rebuilt for every request."""
    with SqliteStore(tmp_path / "m.db") as store:
        flood(store, 20_000, 1, time.time())
        with Dashboard(store, DashboardConfig(port=0)).start() as board:
            status, _, page = get(board.port)  # the store's query times are benchmarks/fleet_store's, not a test's
            assert status == 200 and len(page) < 100_000
            assert b"page 1 of 200 " in page and page.count(b"<tr data-device=") == 100
            data = json.loads(get(board.port, "/fleet.json?page=200")[2])
            assert [d["device_id"] for d in data["devices"]][-1] == "fake-19999" and len(data["devices"]) == 100
            assert get(board.port, "/?page=abc")[:2][0] == 400


def test_paged_reads_and_the_window_on_postgresql(pg: Postgres) -> None:
    name = f"t_{uuid.uuid4().hex[:12]}"
    pg.psql(f"CREATE DATABASE {name}")
    now = 1_000_000.0
    with open_store(pg.url.rsplit("/", 1)[0] + f"/{name}") as store:
        flood(store, 120, 3, now)
        flood(store, 1, 4, now + FUTURE_SKEW_S + 3600, name="later")
        data = fleet_data(store, now=now, view=View(page=2), per_page=100)
        assert (data["counts"]["devices"], data["pages"], len(data["devices"])) == (121, 2, 21)
        assert data["devices"][-1]["device_id"] == "later-00000"
        assert [v for _, v in data["fleet"]["fps_total"]] == [120 * 25.0]  # one 15 s bucket; not the later ones
        assert [p[0] for p in device_data(store, "fake-00100", 900, now)["series"]["latency_p90_ms"]] == [
            now - 10,
            now - 5,
            now,
        ]
        assert device_data(store, "later-00000", 900, now)["series"]["latency_p90_ms"] == []
        assert data["devices"][0]["model"] == "m-1"  # fake-00100 runs m-1
        assert data["models"] == {"m-0  (, )": 41, "m-1  (, )": 40, "m-2  (, )": 40}
        assert "fake-00119" in render_fleet(data)


def test_a_monitor_with_a_big_store_exits_soon_after_sigterm(tmp_path: Path) -> None:
    """60,000 reports of 20,000 devices: before, the PNG export alone ran for minutes after SIGTERM."""
    db = tmp_path / "fleet.db"
    with SqliteStore(db) as store:
        flood(store, 20_000, 3, time.time())
    out, port = tmp_path / "out", free_port()
    with Broker(tmp_path / "broker") as broker:
        args = [sys.executable, "-m", "edge_deploy", "monitor", "--broker", f"127.0.0.1:{broker.port}", "--store",
                str(db), "-o", str(out), "--json", "--web", f"127.0.0.1:{port}"]  # fmt: skip
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: _answers(port), 60, "the monitor's dashboard")
            proc.send_signal(signal.SIGTERM)
            started = time.monotonic()
            stdout, stderr = proc.communicate(timeout=60)
            took = time.monotonic() - started
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    assert took < 20.0, f"{took:.1f} s from SIGTERM to exit"
    summary = json.loads(stdout)
    assert (summary["devices"], summary["reports"]) == (20_000, 60_000)
    assert len((out / "telemetry.csv").read_text().splitlines()) == EXPORT_ROWS + 1
    assert (out / "telemetry.png").stat().st_size > 0


def _answers(port: int) -> bool:
    try:
        return get(port, "/fleet.json")[0] == 200
    except OSError:
        return False
