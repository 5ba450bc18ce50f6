"""The monitor's fast path through MQTT v5 frames: PUBLISH packets read in bulk, PUBACKs written in one go.

paho reads a packet in four ``recv`` calls (command, length bytes, body), parses its v5 properties into
objects, builds a message and takes three locks per message; a PUBACK is its own packet and its own
``send``. At thousands of messages a second that was most of the monitor's CPU. ``split_publishes`` parses
the QoS 0/1 PUBLISH frames at the head of a buffer peeked off paho's socket (properties are skipped: the
monitor uses none); anything else (another packet type, QoS 2, a topic alias, an incomplete frame) ends the
run and is left on the socket for paho. ``pubacks`` is the acknowledgement of many messages as one write.
"""

from __future__ import annotations

from typing import NamedTuple

#: An MQTT v5 PUBACK with reason Success and no properties: type 4, remaining length 2, then the packet id.
_PUBACK = b"\x40\x02"


class Publish(NamedTuple):
    """One received PUBLISH: what the monitor needs to store and acknowledge it."""

    topic: str
    payload: bytes
    retain: bool
    mid: int
    qos: int


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int] | None:
    """An MQTT variable byte integer at ``pos``: (value, position after it), or None if cut short or too long."""
    value, shift = 0, 0
    for i in range(pos, min(pos + 4, end)):
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1
        shift += 7
    return None


def split_publishes(buf: bytes, max_count: int) -> tuple[list[Publish], int]:
    """The complete QoS 0/1 MQTT v5 PUBLISH frames at the head of ``buf``, at most ``max_count`` of them.

    Args:
        buf: bytes as received from the broker, starting at a frame boundary.
        max_count: stop after this many.

    Returns:
        The publishes and the number of bytes they span (consume exactly that many off the socket). Parsing
        stops at the first frame that is incomplete, not a PUBLISH, QoS 2, without a topic (an alias) or not
        well formed: that frame and everything after it are paho's to read.
    """
    out: list[Publish] = []
    pos, end = 0, len(buf)
    while len(out) < max_count and pos < end:
        head = buf[pos]
        qos = (head >> 1) & 3
        if head >> 4 != 3 or qos == 3 or qos == 2:
            break
        if pos + 2 < end and buf[pos + 1] < 0x80:  # a remaining length of one byte
            size, body = buf[pos + 1], pos + 2
        elif pos + 3 < end and buf[pos + 2] < 0x80:  # of two bytes (up to 16 KiB), a telemetry report's
            size, body = (buf[pos + 1] & 0x7F) | buf[pos + 2] << 7, pos + 3
        else:
            length = _varint(buf, pos + 1, end)
            if length is None:
                break
            size, body = length
        stop = body + size
        if stop > end or body + 2 > stop:
            break
        topic_len = int.from_bytes(buf[body : body + 2], "big")
        at = body + 2 + topic_len
        mid = 0
        if qos:
            mid = int.from_bytes(buf[at : at + 2], "big")
            at += 2
        if at < stop and buf[at] < 0x80:  # properties of fewer than 128 bytes (none, usually)
            data = at + 1 + buf[at]
        else:
            props = _varint(buf, at, stop)
            if props is None:
                break
            data = props[1] + props[0]
        if topic_len == 0 or (qos and mid == 0) or data > stop:
            break
        try:
            topic = buf[body + 2 : body + 2 + topic_len].decode()
        except UnicodeDecodeError:
            break
        out.append(Publish(topic, buf[data:stop], bool(head & 1), mid, qos))
        pos = stop
    return out, pos


def pubacks(mids: list[int]) -> bytes:
    """The PUBACK packets (reason Success) for these packet ids, back to back: one write acknowledges them all."""
    return b"".join(_PUBACK + mid.to_bytes(2, "big") for mid in mids)
