"""The dashboard's pure parts: exposure rules (login off loopback, Host names, tokens), pages bounded whatever
the store holds, bidirectional-text controls neutralised, the monitor's export bounded. SQLite store, no server
(tests/integration/test_dashboard.py serves them)."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import pytest

from edge.errors import InputError
from edge.telemetry.plot import MAX_DEVICES, plot_telemetry
from edge.telemetry.schema import Result, Telemetry, to_json
from edge_deploy.cli import main
from fleet import SqliteStore
from fleet.dashboard import DashboardConfig, host_name, is_loopback, login_ok, page_number, read_token
from fleet.dashboard_page import BIDI_CONTROLS, FUTURE_SKEW_S, MAX_POINTS, fleet_data, render_page
from tests.unit.fleet_flood import flood

TOKEN = b"0123456789abcdef0123"


def test_off_loopback_the_dashboard_needs_a_login() -> None:
    with pytest.raises(InputError) as info:
        DashboardConfig("0.0.0.0", 8080)
    assert str(info.value) == (
        "--web 0.0.0.0:8080 is not a loopback address: serving the fleet there needs a login; give --web-auth FILE "
        "(a mode-600 file whose first line is the token)"
    )
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert is_loopback(host) and DashboardConfig(host, 0).token is None
    assert not is_loopback("192.168.1.5") and not is_loopback("fleet.example")
    assert DashboardConfig("0.0.0.0", 8080, token=TOKEN).token == TOKEN
    assert "token" not in repr(DashboardConfig(token=TOKEN))  # never printed


def test_monitor_refuses_a_network_address_without_web_auth(tmp_path: Path, capsys) -> None:
    assert main(["monitor", "--store", str(tmp_path / "m.db"), "--web", "0.0.0.0:8080", "--duration", "0"]) == 3
    assert capsys.readouterr().err.strip() == (
        "Error: --web 0.0.0.0:8080 is not a loopback address: serving the fleet there needs a login; give "
        "--web-auth FILE (a mode-600 file whose first line is the token)"
    )


def test_the_token_file_is_private_and_long(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("0123456789abcdef0123\n")
    path.chmod(0o644)
    with pytest.raises(InputError) as info:
        read_token(path)
    assert str(info.value) == (
        f"--web-auth '{path}': mode 644 lets group or others read it; expected 600 (chmod 600 '{path}')"
    )
    path.chmod(0o600)
    assert read_token(path) == TOKEN
    path.write_text("short\n")
    with pytest.raises(InputError) as info:
        read_token(path)
    assert str(info.value) == (
        f"--web-auth '{path}': the token is 5 characters; expected at least 16 on the first line "
        "(e.g. openssl rand -hex 16)"
    )


def test_login_by_bearer_or_basic() -> None:
    basic = base64.b64encode(b"anyone:" + TOKEN).decode()
    assert login_ok(f"Bearer {TOKEN.decode()}", TOKEN) and login_ok(f"Basic {basic}", TOKEN)
    wrong = base64.b64encode(b"anyone:" + TOKEN[:-1]).decode()
    for header in (None, "", "Bearer", f"Bearer {TOKEN.decode()}x", f"Basic {wrong}", "Basic !!!", "Digest x"):
        assert not login_ok(header, TOKEN), header


def test_host_names_answered() -> None:
    assert [host_name(h) for h in ("127.0.0.1:8080", "[::1]:80", "LocalHost.", "fleet.example", "::1")] == [
        "127.0.0.1", "::1", "localhost", "fleet.example", "::1",
    ]  # fmt: skip
    assert DashboardConfig("127.0.0.1", 0).allowed_hosts == {"localhost", "127.0.0.1", "::1"}
    exposed = DashboardConfig("0.0.0.0", 0, token=TOKEN, hosts=("Fleet.Example",))
    assert exposed.allowed_hosts == {"localhost", "127.0.0.1", "::1", "fleet.example"}
    assert DashboardConfig("10.0.0.5", 0, token=TOKEN).allowed_hosts == {"localhost", "127.0.0.1", "::1", "10.0.0.5"}


def test_page_numbers() -> None:
    assert (page_number(""), page_number("page=7"), page_number("x=1&page=2")) == (1, 7, 2)
    for query in ("page=0", "page=-1", "page=abc", "page=1e9", "page=99999999999"):
        with pytest.raises(InputError) as info:
            page_number(query)
        assert str(info.value).endswith("; expected a whole number in 1..1000000"), query


def test_a_page_holds_at_most_per_page_devices(tmp_path: Path) -> None:
    now = 10_000.0
    with SqliteStore(tmp_path / "m.db") as store:
        flood(store, 250, 2, now)
        data = fleet_data(store, now=now, page=3, per_page=100)
        assert (data["page"], data["pages"], data["counts"]["devices"]) == (3, 3, 250)
        assert [d["device_id"] for d in data["devices"]] == [f"fake-{i:05d}" for i in range(200, 250)]
        assert set(data["running"]) == set(data["history"]) == {f"fake-{i:05d}" for i in range(200, 250)}
        assert data["models"] == {"m-0  (, )": 84, "m-1  (, )": 83, "m-2  (, )": 83}
        page = render_page(data)
        assert "devices 201&ndash;250 of 250 (page 3 of 3) " in page and 'href="?page=2"' in page
        assert fleet_data(store, now=now, page=99, per_page=100)["page"] == 3  # past the end: the last page


def test_the_window_leaves_out_reports_from_the_future(tmp_path: Path) -> None:
    now = 100_000.0
    with SqliteStore(tmp_path / "m.db") as store:
        flood(store, 1, 3, now, name="ok")
        flood(store, 1, 5, now + FUTURE_SKEW_S + 3600, name="ahead")  # a device whose clock runs an hour fast
        flood(store, 1, MAX_POINTS + 50, now, step_s=1.0, name="chatty")
        data = fleet_data(store, now=now)
    assert [p[0] for p in data["history"]["ok-00000"]] == [now - 10, now - 5, now]
    assert "ahead-00000" not in data["history"]
    assert len(data["history"]["chatty-00000"]) == MAX_POINTS  # the newest MAX_POINTS
    assert data["history"]["chatty-00000"][-1][0] == now


def test_bidi_controls_are_neutralised_in_every_string(tmp_path: Path) -> None:
    controls = "".join(chr(c) for c in sorted(BIDI_CONTROLS))
    with SqliteStore(tmp_path / "m.db") as store:
        body = Telemetry(device_id="pi-1", seq=1, timestamp=100.0, latency_p50_ms=1, latency_p90_ms=2, fps=3,
                         model=f"cat{controls}gpj.exe", model_version=f"1{controls}", model_sha256="ab" * 32,
                         runtime=f"ort{controls}", precision=f"int8{controls}", profile=f"rpi4{controls}")  # fmt: skip
        store.handle("edge-deploy/pi-1/telemetry", to_json(body), received=100.0)
        error = Result(device_id="pi-1", seq=2, timestamp=101.0, task="face.error", data={"error": f"x{controls}y"})
        store.handle("edge-deploy/pi-1/result", to_json(error), received=101.0)
        page = render_page(fleet_data(store, now=110.0))
    assert not [hex(c) for c in BIDI_CONTROLS if chr(c) in page]
    assert f"cat{chr(0xFFFD) * len(controls)}gpj.exe" in page
    assert len(BIDI_CONTROLS) == 12  # U+061C, U+200E/F, U+202A-E, U+2066-9


def test_the_plot_draws_a_bounded_number_of_devices_fast(tmp_path: Path) -> None:
    rows = [
        {"device_id": f"fake-{d:05d}", "timestamp": float(k), "latency_p50_ms": 1.0, "latency_p90_ms": 2.0,
         "fps": 3.0, "temperature_c": 40.0}
        for d in range(20_000) for k in range(1 + (d == 7))
    ]  # fmt: skip
    started = time.monotonic()
    assert plot_telemetry(rows, tmp_path / "t.png").stat().st_size > 0
    assert time.monotonic() - started < 10.0  # every device against every row: minutes
    assert MAX_DEVICES == 6


def test_the_export_and_table_are_bounded(tmp_path: Path, monkeypatch) -> None:
    import fleet.run as run

    monkeypatch.setattr(run, "TABLE_ROWS", 3)
    with SqliteStore(tmp_path / "m.db") as store:
        flood(store, 5, 4, 1000.0)
        assert store.export_csv(tmp_path / "t.csv", limit=7) == 7
        newest = store.telemetry(limit=7)
        assert len(newest) == 7 and [r["device_id"] for r in newest] == sorted(r["device_id"] for r in newest)
        table = run.fleet_table(store).splitlines()
    assert len(table) == 1 + 3 + 1
    assert table[-1] == "... and 2 more device(s): see the dashboard (--web) or telemetry.csv"


def test_monitor_says_how_the_dashboard_is_exposed(tmp_path: Path, capsys) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN.decode())
    token.chmod(0o600)
    db = str(tmp_path / "m.db")
    assert main(["monitor", "--store", db, "--web", "127.0.0.1:0", "--web-auth", str(token), "--duration", "0"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("fleet dashboard on http://127.0.0.1:") and out.endswith("/ (loopback only, login required)")
    assert main(["monitor", "--store", db, "--web-host", "fleet.example"]) == 3
    assert capsys.readouterr().err.strip() == "Error: --web-host needs --web HOST:PORT"
