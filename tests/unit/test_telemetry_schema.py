"""The telemetry wire format: round trips and the exact errors for malformed messages."""

from __future__ import annotations

import json

import pytest

from edge.errors import TelemetryError
from edge.telemetry.schema import (
    RUNNING_FIELDS,
    SCHEMA_VERSION,
    BenchReport,
    DeviceState,
    MessageKind,
    Result,
    Status,
    Telemetry,
    check_name,
    from_json,
    parse_topic,
    to_json,
    topic_for,
)

TELEMETRY = Telemetry(
    device_id="pi-1", seq=7, timestamp=1_700_000_000.25, latency_p50_ms=12.5, latency_p90_ms=20.0, fps=31.0
)


def body(**changes: object) -> str:
    data = json.loads(to_json(TELEMETRY))
    for key, value in changes.items():
        if value is ...:
            del data[key]
        else:
            data[key] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    "message",
    [
        TELEMETRY,
        Telemetry(
            device_id="pi-1", seq=1, timestamp=1.0, latency_p50_ms=1, latency_p90_ms=2, fps=3, temperature_c=48.3
        ),
        Status(device_id="pi-1", timestamp=2.0, state=DeviceState.OFFLINE, last_seq=9, dropped=1, pending=3),
        BenchReport(
            device_id="pi-1",
            seq=2,
            timestamp=3.0,
            model="sface",
            backend="onnxruntime",
            runs=50,
            first_ms=80.0,
            p50_ms=60.5,
            p90_ms=66.0,
            profile="rpi4",
        ),  # fmt: skip
        Result(device_id="pi-1", seq=3, timestamp=4.0, task="face.identify", data={"names": ["ada"], "n": 1}),
    ],
)
def test_round_trip_keeps_every_field(message) -> None:
    text = to_json(message)
    assert from_json(text) == message
    assert json.loads(text)["schema_version"] == SCHEMA_VERSION


def test_wire_form_is_flat_json_with_type() -> None:
    assert json.loads(to_json(TELEMETRY)) == {
        "type": "telemetry", "device_id": "pi-1", "seq": 7, "timestamp": 1_700_000_000.25, "schema_version": 3,
        "latency_p50_ms": 12.5, "latency_p90_ms": 20.0, "fps": 31.0, "temperature_c": None, "window_s": 0.0,
        "model": "", "model_version": "", "model_sha256": "", "bundle_id": "", "profile": "", "runtime": "",
        "precision": "", "int8_kernels": "",
    }  # fmt: skip


def test_integers_are_accepted_for_floats_and_become_floats() -> None:
    message = from_json(body(fps=30))
    assert message.fps == 30.0
    assert isinstance(message.fps, float)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{", "t: not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
        ("[1]", "t: expected a JSON object, got list"),
        (body(type="metrics"), "t: field 'type' = 'metrics'; expected one of status, telemetry, bench, result"),
        (
            body(schema_version=4),
            "t: field 'schema_version' = 4; expected one of 1, 2, 3 (sender and reader run different edge-deploy "
            "schema versions)",
        ),
        (
            body(schema_version=...),
            "t: field 'schema_version' = None; expected one of 1, 2, 3 (sender and reader run different "
            "edge-deploy schema versions)",
        ),  # fmt: skip
        (body(seq="7"), "t: field 'seq' = '7'; expected an integer >= 0"),
        (body(seq=-1), "t: field 'seq' = -1; expected an integer >= 0"),
        (body(seq=True), "t: field 'seq' = True; expected an integer >= 0"),
        (body(fps="30"), "t: field 'fps' = '30'; expected a finite number"),
        (body(temperature_c="hot"), "t: field 'temperature_c' = 'hot'; expected a finite number or null"),
        (body(latency_p50_ms=...), "t: field 'latency_p50_ms' is missing from a telemetry message"),
        (body(seq=...), "t: field 'seq' is missing from a telemetry message"),
        (body(gpu=1), "t: unknown field 'gpu' in a telemetry message"),
        (body(fps=float("nan")).replace("NaN", "NaN"), "t: NaN is not allowed; expected a finite number"),
        (
            body(model="m" * 256),
            "t: field 'model' = 'mmmmmmmmmmmmmmmmmmmmmmmm'... (256 characters); expected at most 255",
        ),
        (
            body(runtime="r" * 65),
            "t: field 'runtime' = 'rrrrrrrrrrrrrrrrrrrrrrrr'... (65 characters); expected at most 64",
        ),
        (
            body(precision="p" * 33),
            "t: field 'precision' = 'pppppppppppppppppppppppp'... (33 characters); expected at most 32",
        ),
        (
            body(model="a\u0000b"),
            "t: field 'model' = 'a\\x00b' holds control character U+0000; expected printable text",
        ),
        (
            body(profile="\u009b31m"),
            "t: field 'profile' = '\\x9b31m' holds control character U+009B; expected printable text",
        ),
        (
            body(device_id="a/b"),
            "t: field 'device_id' = 'a/b'; expected 1-64 characters of letters, digits, '_', '.', ':' or '-' "
            "(it becomes one MQTT topic level)",
        ),
    ],
)
def test_malformed_messages_name_the_field(text: str, error: str) -> None:
    with pytest.raises(TelemetryError) as info:
        from_json(text, source="t")
    assert str(info.value) == error


def test_status_state_must_be_known() -> None:
    text = to_json(Status(device_id="pi-1", timestamp=1.0, state=DeviceState.ONLINE)).replace("online", "asleep")
    with pytest.raises(TelemetryError) as info:
        from_json(text, source="edge-deploy/pi-1/status")
    assert str(info.value) == "edge-deploy/pi-1/status: field 'state' = 'asleep'; expected one of online, offline"


def test_to_json_refuses_what_a_reader_would_reject() -> None:
    with pytest.raises(TelemetryError) as info:
        to_json(Telemetry(device_id="pi-1", seq=1, timestamp=1.0, latency_p50_ms=float("inf"), latency_p90_ms=1, fps=1))
    assert str(info.value) == ("telemetry message from 'pi-1': field 'latency_p50_ms' = inf; expected a finite number")
    with pytest.raises(TelemetryError) as info:
        to_json(Telemetry(device_id="pi-1", seq=1, timestamp=1.0, latency_p50_ms="12", latency_p90_ms=1, fps=1))
    assert str(info.value) == "telemetry message to send: field 'latency_p50_ms' = '12'; expected a finite number"


def test_topics() -> None:
    assert topic_for("edge-deploy", "pi-1", MessageKind.BENCH) == "edge-deploy/pi-1/bench"
    assert topic_for("lab/fleet", "pi-1", MessageKind.STATUS) == "lab/fleet/pi-1/status"
    assert parse_topic("lab/fleet", "lab/fleet/pi-1/result") == ("pi-1", MessageKind.RESULT)
    with pytest.raises(TelemetryError) as info:
        parse_topic("edge-deploy", "edge-deploy/pi-1/logs")
    assert str(info.value) == (
        "topic 'edge-deploy/pi-1/logs'; expected edge-deploy/<device_id>/<kind> with kind one of status, "
        "telemetry, bench, result"
    )
    with pytest.raises(TelemetryError) as info:
        topic_for("edge-deploy/#", "pi-1", MessageKind.STATUS)
    assert str(info.value) == (
        "prefix = 'edge-deploy/#'; expected topic levels of letters, digits, '_', '.', ':' or '-' separated by "
        "'/', without wildcards or a leading/trailing '/'"
    )


def test_version_1_reports_are_still_read_without_what_runs() -> None:
    newer = {*RUNNING_FIELDS, "int8_kernels"}
    old = {k: v for k, v in json.loads(body()).items() if k not in newer} | {"schema_version": 1}
    message = from_json(json.dumps(old), source="t")
    assert (message.fps, message.model, message.model_sha256) == (31.0, "", "")
    with pytest.raises(TelemetryError) as info:
        from_json(json.dumps(old | {"model": "m"}), source="t")
    assert str(info.value) == "t: unknown field 'model' in a telemetry message"


def test_version_2_reports_are_read_without_the_int8_kernels_and_may_not_carry_them() -> None:
    v2 = {k: v for k, v in json.loads(body()).items() if k != "int8_kernels"} | {"schema_version": 2}
    assert from_json(json.dumps(v2 | {"model": "m"}), source="t").int8_kernels == ""
    with pytest.raises(TelemetryError) as info:
        from_json(json.dumps(v2 | {"int8_kernels": "x86-avx2"}), source="t")
    assert str(info.value) == "t: unknown field 'int8_kernels' in a telemetry message"
    assert from_json(body(int8_kernels="x86-avx2"), source="t").int8_kernels == "x86-avx2"


def test_every_string_field_is_bounded_on_both_sides() -> None:
    """A reader refuses what is too long or holds a control character; a writer never produces it."""
    wide = Telemetry(device_id="pi-1", latency_p50_ms=1.0, latency_p90_ms=1.0, fps=1.0, model="é" * 255,
                     precision="😀" * 32, runtime="onnxruntime \u202e", bundle_id="b" * 64)  # fmt: skip
    assert from_json(to_json(wide)) == wide
    bench = BenchReport(device_id="pi-1", model="m" * 320, backend="ort", runs=1, first_ms=1.0, p50_ms=1.0, p90_ms=1.0)
    assert from_json(to_json(bench)) == bench
    with pytest.raises(TelemetryError) as info:
        to_json(Result(device_id="pi-1", task="t" * 65))
    assert str(info.value) == (
        "result message to send: field 'task' = 'tttttttttttttttttttttttt'... (65 characters); expected at most 64"
    )
    with pytest.raises(TelemetryError) as info:
        to_json(Telemetry(device_id="pi-1", latency_p50_ms=1.0, latency_p90_ms=1.0, fps=1.0, model="a\nb"))
    assert str(info.value) == (
        "telemetry message to send: field 'model' = 'a\\nb' holds control character U+000A; expected printable text"
    )


def test_a_device_id_ending_in_a_newline_is_refused() -> None:
    """``$`` matched before a final newline, so "pi-1\\n" passed as a device id (one MQTT topic level)."""
    with pytest.raises(TelemetryError):
        check_name("device_id", "pi-1\n")
    with pytest.raises(TelemetryError) as info:
        from_json(
            json.dumps(
                {
                    **json.loads(to_json(Telemetry(device_id="pi-1", latency_p50_ms=1, latency_p90_ms=1, fps=1.0))),
                    "device_id": "pi-1\n",
                }
            ),
            source="t",
        )
    assert str(info.value).startswith("t: field 'device_id' = 'pi-1\\n'; expected 1-64 characters")
