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
from fleet.dashboard_page import (
    BIDI_CONTROLS,
    FUTURE_SKEW_S,
    MAX_POINTS,
    View,
    fleet_data,
    render_fleet,
)
from fleet.device_page import device_data, render_device
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
        data = fleet_data(store, now=now, view=View(page=3), per_page=100)
        assert (data["view"]["page"], data["pages"], data["counts"]["devices"]) == (3, 3, 250)
        assert [d["device_id"] for d in data["devices"]] == [f"fake-{i:05d}" for i in range(200, 250)]
        assert {d["model"] for d in data["devices"]} == {"m-0", "m-1", "m-2"}
        assert data["models"] == {"m-0  (, )": 84, "m-1  (, )": 83, "m-2  (, )": 83}
        page = render_fleet(data)
        assert "page 3 of 3 " in page and 'href="?sort=device&amp;order=asc&amp;page=2"' in page
        assert fleet_data(store, now=now, view=View(page=99), per_page=100)["view"]["page"] == 3  # past the end


def test_the_table_sorts_and_filters_over_the_whole_fleet(tmp_path: Path) -> None:
    now = 10_000.0
    with SqliteStore(tmp_path / "m.db") as store:
        flood(store, 30, 3, now)  # latency p90 20, 21, 22 by seq; models m-0..m-2 by device
        body = Telemetry(device_id="hot-1", seq=1, timestamp=now, latency_p50_ms=400, latency_p90_ms=900, fps=1,
                         temperature_c=91.0, model="m-9")  # fmt: skip
        store.handle("edge-deploy/hot-1/telemetry", to_json(body), received=now)
        by_p90 = fleet_data(store, now=now, view=View(sort="p90", order="desc"), per_page=5)
        assert [d["device_id"] for d in by_p90["devices"]][:1] == ["hot-1"] and by_p90["pages"] == 7
        by_temp = fleet_data(store, now=now, view=View(sort="temp", order="asc"), per_page=100)["devices"]
        assert by_temp[-1]["device_id"] == "hot-1"
        m2 = fleet_data(store, now=now, view=View(q="M-2"), per_page=100)
        assert m2["matching"] == 10 and {d["model"] for d in m2["devices"]} == {"m-2"}
        assert fleet_data(store, now=now, view=View(state="online"))["matching"] == 0


def test_view_query_values_are_checked() -> None:
    assert View.parse({"sort": ["p90"], "order": ["desc"], "q": ["pi"], "page": ["2"]}) == View(
        "p90", "desc", "pi", "", 2
    )
    for query, text in (({"sort": ["x"]}, "sort='x'; expected one of device, state"),
                        ({"state": ["up"]}, "state='up'; expected one of online, offline, unknown, alerting"),
                        ({"page": ["0"]}, "page='0'; expected a whole number in 1..1000000")):  # fmt: skip
        with pytest.raises(InputError) as info:
            View.parse(query)
        assert str(info.value).startswith(text)


def test_the_window_leaves_out_reports_from_the_future(tmp_path: Path) -> None:
    now = 100_000.0
    with SqliteStore(tmp_path / "m.db") as store:
        flood(store, 1, 3, now, name="ok")
        flood(store, 1, 5, now + FUTURE_SKEW_S + 3600, name="ahead")  # a device whose clock runs an hour fast
        flood(store, 1, MAX_POINTS + 50, now, step_s=1.0, name="chatty")
        ok, ahead = device_data(store, "ok-00000", 900, now), device_data(store, "ahead-00000", 900, now)
        chatty = device_data(store, "chatty-00000", 900, now)
        assert device_data(store, "nobody", 900, now) is None
    assert ok is not None and ahead is not None and chatty is not None
    assert [p[0] for p in ok["series"]["latency_p90_ms"]] == [now - 10, now - 5, now]
    assert ahead["series"]["latency_p90_ms"] == []
    assert len(chatty["series"]["latency_p90_ms"]) == MAX_POINTS  # the newest MAX_POINTS
    assert "no data" in render_device(ahead, "1h") and "no data" not in render_device(ok, "1h")


def test_bidi_controls_are_neutralised_in_every_string(tmp_path: Path) -> None:
    controls = "".join(chr(c) for c in sorted(BIDI_CONTROLS))
    with SqliteStore(tmp_path / "m.db") as store:
        body = Telemetry(device_id="pi-1", seq=1, timestamp=100.0, latency_p50_ms=1, latency_p90_ms=2, fps=3,
                         model=f"cat{controls}gpj.exe", model_version=f"1{controls}", model_sha256="ab" * 32,
                         runtime=f"ort{controls}", precision=f"int8{controls}", profile=f"rpi4{controls}")  # fmt: skip
        store.handle("edge-deploy/pi-1/telemetry", to_json(body), received=100.0)
        error = Result(device_id="pi-1", seq=2, timestamp=101.0, task="face.error", data={"error": f"x{controls}y"})
        store.handle("edge-deploy/pi-1/result", to_json(error), received=101.0)
        faces = Result(device_id="pi-1", seq=3, timestamp=102.0, task="face.identify",
                       data={"faces": [{"name": f"ann{controls}", "distance": 0.31}]})  # fmt: skip
        store.handle("edge-deploy/pi-1/result", to_json(faces), received=102.0)
        pages = render_fleet(fleet_data(store, now=110.0)) + render_device(device_data(store, "pi-1", 900, 110.0), "1h")
    assert not [hex(c) for c in BIDI_CONTROLS if chr(c) in pages]
    assert f"cat{chr(0xFFFD) * len(controls)}gpj.exe" in pages and f"ann{chr(0xFFFD) * len(controls)} 0.310" in pages
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
