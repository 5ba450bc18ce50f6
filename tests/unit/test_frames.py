"""fleet.frames: MQTT v5 PUBLISH frames split off a buffer as the broker sends them, PUBACKs for a batch, and
the paho internals the monitor's fast path reads and writes through."""

from __future__ import annotations

import paho.mqtt.client as mqtt

from fleet.frames import Publish, pubacks, split_publishes


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def publish(topic: str, payload: bytes, qos: int = 1, mid: int = 7, retain: bool = False, props: bytes = b"") -> bytes:
    """A PUBLISH frame built from the MQTT v5 spec (section 3.3)."""
    name = topic.encode()
    body = len(name).to_bytes(2, "big") + name + (mid.to_bytes(2, "big") if qos else b"")
    body += varint(len(props)) + props + payload
    return bytes([0x30 | qos << 1 | retain]) + varint(len(body)) + body


def test_split_publishes_reads_qos0_qos1_retain_properties_and_long_frames() -> None:
    expiry_and_user = b"\x02\x00\x00\x00\x3c" + b"\x26\x00\x01k\x00\x01v"  # message expiry 60 s, user property k=v
    report = b'{"seq":1,"pad":"' + b"r" * 400 + b'"}'  # a two-byte remaining length, as a telemetry report's
    big = b"x" * 20000  # a three-byte remaining length
    frames = [
        publish("edge-deploy/a/telemetry", report),
        publish("edge-deploy/a/status", b"online", qos=0, retain=True),
        publish("edge-deploy/é/telemetry", big, mid=65535, props=expiry_and_user),
    ]
    buf = b"".join(frames)
    got, used = split_publishes(buf, 10)
    assert got == [
        Publish("edge-deploy/a/telemetry", report, False, 7, 1),
        Publish("edge-deploy/a/status", b"online", True, 0, 0),
        Publish("edge-deploy/é/telemetry", big, False, 65535, 1),
    ]
    assert used == len(buf)
    assert split_publishes(buf, 2) == (got[:2], len(frames[0]) + len(frames[1]))


def test_split_publishes_stops_where_paho_must_read() -> None:
    one = publish("t/a", b"1")
    pingresp = b"\xd0\x00"
    for tail in (
        pingresp + one,  # another packet type
        publish("t/a", b"2", qos=2),  # QoS 2 needs paho's PUBREC/PUBREL state
        publish("", b"3", props=b"\x23\x00\x01"),  # a topic alias: the topic is paho's to resolve
        publish("t/a", b"4", mid=0),  # no packet id on QoS 1: malformed
        b"\x32\xff\xff\xff\xff\x01",  # a remaining length longer than four bytes
        bytes([0x32]) + varint(39) + b"\x00\x03t/\xff\x00\x01" + b"\x00" * 32,  # a topic that is not UTF-8
    ):
        assert split_publishes(one + tail, 10) == ([Publish("t/a", b"1", False, 7, 1)], len(one))
    for cut in range(1, len(one)):  # a frame not yet complete stays on the socket
        assert split_publishes(one + one[:cut], 10)[1] == len(one)
    assert split_publishes(b"", 10) == ([], 0)


def test_pubacks_are_v5_pubacks_back_to_back() -> None:
    assert pubacks([1, 258, 65535]) == b"\x40\x02\x00\x01" + b"\x40\x02\x01\x02" + b"\x40\x02\xff\xff"
    assert pubacks([]) == b""


def test_paho_internals_the_fast_path_uses() -> None:
    """The monitor peeks only when paho is between packets, keeps its keepalive clock, and queues the batch's
    PUBACKs behind whatever paho has yet to send: a paho that renamed these must fail here, not slow down."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    assert client._in_packet["command"] == 0
    assert isinstance(client._last_bytes_received, float)
    assert client._packet_queue.__code__.co_varnames[1:5] == ("command", "packet", "mid", "qos")
    assert mqtt.PUBACK == 0x40
