"""The fleet monitor's store, table and exports, fed directly (no broker)."""

from __future__ import annotations

import csv
import socket
from pathlib import Path

import cv2
import numpy as np
import pytest

from edge.errors import TelemetryError
from edge.telemetry.plot import plot_telemetry, value_scale
from edge.telemetry.schema import DeviceState, Result, Status, Telemetry, to_json
from edge_deploy.cli import main
from fleet import CSV_COLUMNS, DeviceRow, MonitorStore, format_table
from fleet.run import TableView


def tele(device: str, seq: int, p50: float, ts: float, temp: float | None = 50.0) -> bytes:
    message = Telemetry(
        device_id=device, seq=seq, timestamp=ts, latency_p50_ms=p50, latency_p90_ms=p50 * 2, fps=20.0 + seq,
        temperature_c=temp,
    )  # fmt: skip
    return to_json(message).encode()


def status(device: str, state: DeviceState, ts: float, dropped: int = 0) -> bytes:
    return to_json(Status(device_id=device, timestamp=ts, state=state, dropped=dropped)).encode()


@pytest.fixture()
def store(tmp_path: Path):
    s = MonitorStore(tmp_path / "m.db")
    yield s
    s.close()


def test_duplicates_are_dropped_by_device_and_seq(store: MonitorStore) -> None:
    assert store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 1, 10.0, 100.0), received=1000.0) == "stored"
    assert store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 1, 10.0, 100.0), received=1001.0) == "duplicate"
    assert store.handle("edge-deploy/pi-2/telemetry", tele("pi-2", 1, 10.0, 100.0), received=1001.0) == "stored"
    result = to_json(Result(device_id="pi-1", seq=2, timestamp=101.0, task="face", data={}))
    assert store.handle("edge-deploy/pi-1/result", result) == "stored"
    assert (store.count(), store.count("pi-1"), store.seqs("pi-1"), store.duplicates) == (3, 2, [1, 2], 1)


@pytest.mark.parametrize(
    ("topic", "payload", "why"),
    [
        ("edge-deploy/pi-1/telemetry", b"{oops", "topic edge-deploy/pi-1/telemetry: not valid JSON"),
        (
            "edge-deploy/pi-2/telemetry",
            tele("pi-1", 1, 1.0, 1.0),
            "topic edge-deploy/pi-2/telemetry: carries a telemetry message from 'pi-1'; expected a telemetry "
            "message from 'pi-2'",
        ),
        (
            "edge-deploy/pi-1/result",
            tele("pi-1", 1, 1.0, 1.0),
            "topic edge-deploy/pi-1/result: carries a telemetry message from 'pi-1'; expected a result message "
            "from 'pi-1'",
        ),
        ("edge-deploy/pi-1/logs", b"{}", "topic 'edge-deploy/pi-1/logs'; expected edge-deploy/<device_id>/<kind>"),
    ],
)
def test_malformed_or_misaddressed_messages_are_rejected(store: MonitorStore, topic: str, payload, why: str) -> None:
    assert store.handle(topic, payload) == "rejected"
    assert store.last_rejection.startswith(why)
    assert (store.rejected, store.count()) == (1, 0)


def test_device_table_uses_newest_report_and_last_status(store: MonitorStore) -> None:
    store.handle("edge-deploy/pi-1/status", status("pi-1", DeviceState.ONLINE, 90.0), received=1000.0)
    store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 2, 12.0, 102.0), received=1001.0)
    store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 1, 11.0, 101.0, temp=None), received=1002.0)
    store.handle("edge-deploy/pi-1/status", status("pi-1", DeviceState.OFFLINE, 80.0, dropped=4), received=1003.0)
    # A retained status replayed on subscribe shows when it was made, not that the device is alive now.
    store.handle("edge-deploy/pi-2/status", status("pi-2", DeviceState.ONLINE, 500.0), received=1004.0, retained=True)
    assert store.devices() == [
        DeviceRow("pi-1", False, 12.0, 24.0, 22.0, 50.0, last_seen=1003.0, reports=2, dropped=4),
        DeviceRow("pi-2", True, None, None, None, None, last_seen=500.0, reports=0, dropped=0),
    ]
    assert format_table(store.devices(), now=1010.0) == (
        "DEVICE  STATE    P50 ms  P90 ms  FPS   TEMP C  LAST SEEN  REPORTS  DROPPED\n"
        "pi-1    offline  12.0    24.0    22.0  50.0    7s ago     2        4\n"
        "pi-2    online   -       -       -     -       510s ago   0        0"
    )


def test_export_csv(store: MonitorStore, tmp_path: Path) -> None:
    store.handle("edge-deploy/pi-2/telemetry", tele("pi-2", 1, 5.0, 100.0))
    store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 2, 7.0, 101.0, temp=None))
    store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 1, 6.0, 100.5))
    assert store.export_csv(tmp_path / "out" / "t.csv") == 3
    with open(tmp_path / "out" / "t.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows == [
        list(CSV_COLUMNS),
        ["pi-1", "1", "100.5", "6.0", "12.0", "21.0", "50.0", "0.0"],
        ["pi-1", "2", "101.0", "7.0", "14.0", "22.0", "", "0.0"],
        ["pi-2", "1", "100.0", "5.0", "10.0", "21.0", "50.0", "0.0"],
    ]
    with pytest.raises(TelemetryError) as info:
        store.export_csv(tmp_path)  # a directory
    assert str(info.value).startswith(f"cannot write CSV {tmp_path}: [Errno 21] Is a directory")


def test_png_plot_draws_each_device(tmp_path: Path) -> None:
    rows = [
        {"device_id": d, "seq": i, "timestamp": 100.0 + i, "latency_p50_ms": 10.0 + i % 3 + k,
         "latency_p90_ms": 20.0 + k, "fps": 25.0 - k, "temperature_c": None if i == 3 else 50.0 + i, "window_s": 1.0}
        for k, d in enumerate(("pi-1", "pi-2")) for i in range(10)
    ]  # fmt: skip
    path = plot_telemetry(rows, tmp_path / "p.png")
    img = cv2.imread(str(path))
    assert img.shape == (780, 1000, 3)
    blue = np.all(img == (180, 119, 31), axis=2).sum()  # first device's colour (BGR)
    orange = np.all(img == (14, 127, 255), axis=2).sum()
    assert blue > 500 and orange > 500
    empty = cv2.imread(str(plot_telemetry([], tmp_path / "empty.png")))
    assert np.all(empty == (180, 119, 31), axis=2).sum() == 0


# --- issue 17, defect 3: one message killed `monitor` (exit 8, no CSV/PNG), and the session redelivered it ---


def _telemetry_with(**raw: str) -> bytes:
    """A telemetry body with some fields given as raw JSON text (numbers json.dumps would never write)."""
    fields = {"type": '"telemetry"', "device_id": '"pi-1"', "seq": "1", "timestamp": "1.0", "schema_version": "1",
              "latency_p50_ms": "1.0", "latency_p90_ms": "2.0", "fps": "3.0", **raw}  # fmt: skip
    return ("{" + ",".join(f'"{k}":{v}' for k, v in fields.items()) + "}").encode()


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (
            _telemetry_with(seq=str(2**64)),
            "topic edge-deploy/pi-1/telemetry: integer 18446744073709551616 is out of range; expected at most "
            "±9007199254740991 (2^53 - 1)",
        ),
        (
            _telemetry_with(fps="7" * 400),
            "topic edge-deploy/pi-1/telemetry: integer 777777777777…(400 digits) is out of range; expected at most "
            "±9007199254740991 (2^53 - 1)",
        ),
        (
            b"[" * 100_000 + b"]" * 100_000,
            "topic edge-deploy/pi-1/telemetry: nested 100000 levels deep; expected at most 16",
        ),
        (_telemetry_with(fps="1e400"), "topic edge-deploy/pi-1/telemetry: number 1e400 is not a finite float"),
        (b"x" * (256 * 1024 + 1), "topic edge-deploy/pi-1/telemetry: 262145 bytes; expected at most 262144"),
    ],
)
def test_hostile_telemetry_is_rejected_and_counted(store: MonitorStore, payload: bytes, why: str) -> None:
    assert store.handle("edge-deploy/pi-1/telemetry", payload) == "rejected"
    assert store.last_rejection.startswith(why)
    assert store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 1, 10.0, 100.0)) == "stored"  # still alive
    assert (store.rejected, store.count()) == (1, 1)


def test_a_nested_status_is_rejected(store: MonitorStore) -> None:
    payload = b'{"type":"status","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert store.handle("edge-deploy/x/status", payload, retained=True) == "rejected"
    assert store.last_rejection == "topic edge-deploy/x/status: nested 100001 levels deep; expected at most 16"
    assert store.devices() == []


# --- issue 44: a message the database refuses is isolated, rejected and counted; the rest is stored ---------


def test_messages_the_database_refuses_are_isolated_rejected_and_counted(store: MonitorStore, tmp_path: Path) -> None:
    import sqlite3

    from fleet.ingest import commit_messages

    with sqlite3.connect(tmp_path / "m.db") as db:  # an operator's rule the schema doesn't know
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.device_id = 'pi-bad' "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )
    mixed = [("pi-1", 1), ("pi-bad", 1), ("pi-1", 2), ("pi-2", 1), ("pi-bad", 2), ("pi-2", 2), ("pi-1", 3)]
    items = [(f"edge-deploy/{d}/telemetry", tele(d, s, 1.0, 100.0), 1000.0, False) for d, s in mixed]
    result = commit_messages(store, "edge-deploy", items)
    assert (result.stored, result.rejected, store.count(), store.rejected) == (5, 2, 5, 2)
    assert (store.seqs("pi-1"), store.seqs("pi-2"), store.seqs("pi-bad")) == ([1, 2, 3], [1, 2], [])
    why = f"topic edge-deploy/pi-bad/telemetry: monitor database {tmp_path / 'm.db'}: refuses the message (refused by the test)"
    assert store.last_rejection == why
    assert store.handle("edge-deploy/pi-bad/telemetry", tele("pi-bad", 3, 1.0, 100.0)) == "rejected"
    assert (store.rejected, store.last_rejection) == (3, why)


# --- issue 43: the terminal (a table redrawn in place, exit 8 without a broker, readable plots) -----------


def test_one_outlier_puts_the_panel_on_a_log_scale_and_no_rows_say_no_data() -> None:
    log, lo, hi, ticks = value_scale([10.0, 12.0, 11.0, 5000.0])
    assert (log, lo, hi) == (True, 10.0, 5000.0)
    assert ticks[0] == 10.0 and 1000.0 in ticks
    assert value_scale([10.0, 12.0, 150.0])[0] is False  # within LOG_RATIO: linear
    assert value_scale([-1.0, 5000.0])[0] is False  # a log scale can't show values <= 0
    assert value_scale([]) == (False, 0.0, 1.0, [])  # no value ticks; the panel says "no data"


def test_an_empty_plot_has_no_time_ticks(tmp_path: Path) -> None:
    """The empty export had "0s 0s 0s 1s" under each panel; now only the words "no data" are drawn in it."""
    empty = cv2.imread(str(plot_telemetry([], tmp_path / "empty.png")), cv2.IMREAD_GRAYSCALE)
    below_first_panel = empty[250 + 2 : 250 + 20, 60:]  # where the time ticks of the first panel went
    assert (below_first_panel < 128).sum() == 0
    inside = empty[50 + 90 : 50 + 110, 400:600]
    assert (inside < 128).sum() > 50  # "no data"


def test_the_table_is_redrawn_in_place_on_a_terminal_and_one_line_a_refresh_when_piped() -> None:
    out: list[str] = []
    tty = TableView(out.append, tty=True)
    tty.show("A\nB\nC", "summary")
    tty.show("A\nB", "summary")
    tty.message("note")
    tty.show("X", "summary")
    assert out == ["A\nB\nC", "\033[3F\033[JA\nB", "note", "X"]  # up over the last drawing, clear, draw
    out.clear()
    piped = TableView(out.append, tty=False)
    piped.show("A\nB\nC", "12:00:00 3 device(s)")
    piped.show("A\nB\nC", "12:00:02 3 device(s)")
    piped.final("A\nB\nC")
    assert out == ["12:00:00 3 device(s)", "12:00:02 3 device(s)", "A\nB\nC"]


def test_monitor_without_a_reachable_broker_exits_8(tmp_path: Path, capsys) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(["monitor", "--broker", f"127.0.0.1:{port}", "--duration", "3", "-o", str(tmp_path)])
    assert code == 8
    assert f"Error: monitor: broker 127.0.0.1:{port} was never reached" in capsys.readouterr().err
    assert (tmp_path / "telemetry.csv").is_file()
