"""One MQTT connection kept alive by a background thread: connect, back off with jitter, reconnect.

Both the device's ``TelemetryClient`` and the fleet ``Monitor`` sit on a ``Link``. The link owns a fresh
paho client per connection attempt (so no stale paho state, such as its in-memory resend queue, survives
a reconnect: durability is the outbox's job), runs paho's network loop itself and calls the owner's hooks
from its one thread. Refusals that retrying can't fix (bad credentials, a rejected client id, a TLS
certificate that does not verify) stop the link with a ``TelemetryError`` instead of retrying forever.
"""

from __future__ import annotations

import ipaddress
import random
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edge.errors import TelemetryError, require

if TYPE_CHECKING:  # paho is imported lazily (the device extra); its types serve the checker only
    from paho.mqtt.client import Client as MqttClient
else:
    MqttClient = object

#: Refusals that a retry cannot fix, by paho reason-code name -> what to tell the user.
_FATAL_REFUSALS = {
    "Not authorized": "not authorised (check username/password)",
    "Bad user name or password": "bad username or password (check username/password)",
    "Client identifier not valid": "client identifier rejected (check device_id / client id)",
    "Unsupported protocol version": "unsupported protocol version (the broker needs MQTT 3.1.1)",
}


@dataclass(frozen=True)
class BrokerConfig:
    """Where and how to reach an MQTT broker.

    Attributes:
        host: broker host name or IP address.
        port: TCP port (1883 plain, 8883 TLS by convention).
        username: user name, or None for anonymous access.
        password: password for ``username``.
        tls: use TLS; implied by ``tls_ca``. Without ``tls_ca`` the system's CA store is used.
        tls_ca: CA certificate file (PEM) that signed the broker's certificate.
        tls_cert: client certificate file (PEM), for brokers that require one.
        tls_key: the client certificate's private key (PEM).
        keepalive_s: MQTT keepalive; a dead connection is noticed within 1.5x this.
        connect_timeout_s: bound on TCP connect, TLS handshake and waiting for CONNACK.
        reconnect_min_s: first reconnect delay; doubles per failed attempt.
        reconnect_max_s: cap of the reconnect delay (before jitter).
    """

    host: str
    port: int = 1883
    username: str | None = None
    password: str | None = None
    tls: bool = False
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    keepalive_s: int = 30
    connect_timeout_s: float = 10.0
    reconnect_min_s: float = 1.0
    reconnect_max_s: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise TelemetryError(f"broker host = {self.host!r}; expected a host name or IP address")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 1 <= self.port <= 65535:
            raise TelemetryError(f"broker port = {self.port!r}; expected an integer in 1..65535")
        if self.password is not None and self.username is None:
            raise TelemetryError("broker password is set but username is not; expected both or neither")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise TelemetryError(
                f"broker tls_cert = {self.tls_cert!r}, tls_key = {self.tls_key!r}; expected both or neither"
            )
        for key in ("tls_ca", "tls_cert", "tls_key"):
            value = getattr(self, key)
            if value is not None and not Path(value).is_file():
                raise TelemetryError(f"broker {key} = '{value}'; expected an existing PEM file")
        for key in ("keepalive_s", "connect_timeout_s", "reconnect_min_s", "reconnect_max_s"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise TelemetryError(f"broker {key} = {value!r}; expected a number > 0")
        if self.reconnect_max_s < self.reconnect_min_s:
            raise TelemetryError(
                f"broker reconnect_max_s = {self.reconnect_max_s!r}; expected >= reconnect_min_s "
                f"({self.reconnect_min_s!r})"
            )

    @property
    def address(self) -> str:
        """``host:port``, as used in messages."""
        return f"{self.host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        """Whether the host is this machine: ``localhost`` or a loopback address (names are not resolved)."""
        if self.host.lower() == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False

    @property
    def uses_tls(self) -> bool:
        """Whether connections are made over TLS."""
        return self.tls or self.tls_ca is not None


def backoff_delay(attempt: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Delay before reconnect attempt ``attempt`` (0-based): exponential backoff with "equal jitter".

    The nominal delay ``min(cap, base * 2**attempt)`` is halved and a uniform random part of the other
    half added, so a fleet that lost its broker at the same moment does not come back in lockstep.

    Returns:
        Seconds to wait, in ``[nominal / 2, nominal]``.
    """
    nominal = min(cap_s, base_s * 2 ** min(attempt, 30))
    return nominal / 2 + rng.uniform(0, nominal / 2)


def refusal_message(address: str, reason_name: str) -> tuple[str, bool]:
    """Describe a CONNACK refusal.

    Args:
        address: ``host:port`` of the broker.
        reason_name: paho's reason-code name, e.g. ``"Not authorized"``.

    Returns:
        (message, fatal): fatal is True when retrying cannot help.
    """
    detail = _FATAL_REFUSALS.get(reason_name)
    if detail is not None:
        return f"broker {address} refused the connection: {detail}", True
    return f"broker {address} refused the connection: {reason_name.lower()} (will retry)", False


class LinkHooks:
    """What a link's owner does at each event; every hook runs on the link's thread."""

    def configure(self, client: MqttClient) -> None:
        """Set will, callbacks and limits on a new paho client (before it connects)."""

    def on_connected(self, client: MqttClient) -> None:
        """Called once per successful connection (CONNACK accepted)."""

    def tick(self, client: MqttClient) -> bool:
        """Called after every network-loop step while connected; return False to force a reconnect."""
        return True

    def on_lost(self) -> None:
        """Called when a connection ends (lost, refused after connecting, or stopped)."""

    def on_stopping(self, client: MqttClient) -> None:
        """Called while still connected when the link is asked to stop, before DISCONNECT."""


class Link:
    """A background thread keeping one MQTT connection alive.

    Args:
        broker: where to connect.
        client_id: MQTT client id.
        hooks: the owner's callbacks.
        clean_session: False to keep a broker-side session (subscriptions, queued QoS 1 messages).
        name: thread name.
        mqtt5: speak MQTT v5 (a persistent v5 session never expires) instead of 3.1.1.
        receive_maximum: with ``mqtt5``, let the broker have at most this many QoS 1 messages to us
            unacknowledged (v5's Receive Maximum). None: the broker's own ``max_inflight_messages``.
    """

    def __init__(
        self,
        broker: BrokerConfig,
        client_id: str,
        hooks: LinkHooks,
        clean_session: bool,
        name: str,
        mqtt5: bool = False,
        receive_maximum: int | None = None,
    ) -> None:
        self._mqtt = require("paho.mqtt.client", "device", "MQTT telemetry")
        self.broker = broker
        self.client_id = client_id
        self.hooks = hooks
        self.clean_session = clean_session
        self.mqtt5 = mqtt5
        self.receive_maximum = receive_maximum
        self.connected = threading.Event()
        self.fatal: TelemetryError | None = None
        self.last_error: str | None = None
        self.attempts = 0
        self._hold_attempt = 0
        self._connack: object | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._rng = random.Random()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the background thread (idempotent)."""
        if not self._thread.is_alive() and not self._done.is_set():
            self._thread.start()

    @property
    def running(self) -> bool:
        """Whether the thread is still trying or serving."""
        return self._thread.is_alive()

    def wait_connected(self, timeout: float) -> bool:
        """Wait until connected, the link failed for good, or ``timeout`` seconds passed.

        Returns:
            True if connected.

        Raises:
            TelemetryError: the link's fatal error (e.g. bad credentials), if it stopped on one.
        """
        deadline = time.monotonic() + timeout
        while not self.connected.is_set() and not self._done.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self.connected.wait(min(remaining, 0.05))
        if self.fatal is not None:
            raise self.fatal
        return self.connected.is_set()

    def hold_off(self, attempt: int) -> None:
        """Before the next reconnect, wait as after ``attempt`` failed attempts (call from a hook).

        For an owner that ends a working connection on purpose and wants to retry gently, e.g. a device whose
        reports no subscriber took: without it every such reconnect would come after ``reconnect_min_s``.
        """
        self._hold_attempt = max(int(attempt), 0)

    def stop(self, timeout: float) -> bool:
        """Ask the thread to disconnect and end; wait at most ``timeout`` seconds.

        Returns:
            True if the thread ended in time.
        """
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(max(timeout, 0.0))
        return not self._thread.is_alive()

    def _run(self) -> None:
        attempt = 0
        try:
            while not self._stop.is_set():
                client = self._new_client()
                if self._connect(client):
                    attempt = 0
                    self._serve(client)
                    attempt, self._hold_attempt = self._hold_attempt, 0
                if self._stop.is_set():
                    break
                self._stop.wait(
                    backoff_delay(attempt, self.broker.reconnect_min_s, self.broker.reconnect_max_s, self._rng)
                )
                attempt += 1
        except TelemetryError as exc:
            self.fatal = exc
        except Exception as exc:  # surfaced to the owner through `fatal`, never swallowed
            self.fatal = TelemetryError(f"MQTT link to broker {self.broker.address} stopped: {exc!r}")
        finally:
            self.connected.clear()
            self._done.set()

    def _new_client(self) -> MqttClient:
        mqtt = self._mqtt
        if not self.mqtt5:
            client = mqtt.Client(
                mqtt.CallbackAPIVersion.VERSION2,
                client_id=self.client_id,
                clean_session=self.clean_session,
                protocol=mqtt.MQTTv311,
            )
        else:
            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=mqtt.MQTTv5)
        client.connect_timeout = self.broker.connect_timeout_s
        if self.broker.username is not None:
            client.username_pw_set(self.broker.username, self.broker.password)
        if self.broker.uses_tls:
            self._set_tls(client)
        client.on_connect = self._on_connect
        self.hooks.configure(client)
        return client

    def _set_tls(self, client: MqttClient) -> None:
        b = self.broker
        try:
            client.tls_set(
                ca_certs=str(b.tls_ca) if b.tls_ca else None,
                certfile=str(b.tls_cert) if b.tls_cert else None,
                keyfile=str(b.tls_key) if b.tls_key else None,
                cert_reqs=ssl.CERT_REQUIRED,
                tls_version=ssl.PROTOCOL_TLS_CLIENT,
            )
        except (OSError, ValueError) as exc:
            raise TelemetryError(
                f"broker {b.address}: cannot load TLS files tls_ca = '{b.tls_ca}', tls_cert = '{b.tls_cert}', "
                f"tls_key = '{b.tls_key}' ({exc}); expected PEM certificates and key"
            ) from exc

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        self._connack = reason_code

    def _connect(self, client: MqttClient) -> bool:
        """One connection attempt: True when the broker accepted us; raises on a fatal refusal."""
        b = self.broker
        self.attempts += 1
        self._connack = None
        try:
            client.connect(b.host, b.port, keepalive=int(b.keepalive_s), **self._v5_connect_options())
        except ssl.SSLCertVerificationError as exc:
            raise TelemetryError(
                f"broker {b.address}: TLS certificate check failed ({exc.verify_message}); check tls_ca and "
                f"that the broker's certificate names {b.host}"
            ) from exc
        except (OSError, ValueError) as exc:
            self.last_error = f"cannot connect to broker {b.address}: {exc}"
            return False
        deadline = time.monotonic() + b.connect_timeout_s
        while self._connack is None and not self._stop.is_set() and time.monotonic() < deadline:
            if client.loop(0.05) != self._mqtt.MQTT_ERR_SUCCESS and self._connack is None:
                self.last_error = f"broker {b.address} closed the connection before CONNACK"
                break
        if self._connack is None:
            self.last_error = self.last_error or f"no CONNACK from broker {b.address} in {b.connect_timeout_s} s"
            _close_socket(client)
            return False
        if self._connack.is_failure:
            message, fatal = refusal_message(b.address, self._connack.getName())
            _close_socket(client)
            if fatal:
                raise TelemetryError(message)
            self.last_error = message
            return False
        return True

    def _v5_connect_options(self) -> dict:
        """MQTT v5 CONNECT options: clean start or a session that never expires, and the Receive Maximum."""
        if not self.mqtt5:
            return {}
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        props = Properties(PacketTypes.CONNECT)
        if self.receive_maximum is not None:
            props.ReceiveMaximum = self.receive_maximum
        if not self.clean_session:
            props.SessionExpiryInterval = 0xFFFFFFFF  # the v5 way of "persistent": never expires
        return {"clean_start": self.clean_session, "properties": props}

    def _serve(self, client: MqttClient) -> None:
        """Run the network loop until the connection drops, a hook asks to reconnect, or stop()."""
        ok = self._mqtt.MQTT_ERR_SUCCESS
        self.last_error = None
        self.connected.set()
        try:
            self.hooks.on_connected(client)
            while not self._stop.is_set():
                rc = client.loop(0.05)
                if rc != ok:
                    self.last_error = f"connection to broker {self.broker.address} lost ({rc.name})"
                    return
                if not self.hooks.tick(client):
                    return
            self.hooks.on_stopping(client)
            client.disconnect()
            client.loop(0.05)
        finally:
            self.connected.clear()
            _close_socket(client)
            self.hooks.on_lost()


def _close_socket(client: MqttClient) -> None:
    sock = client.socket()
    if sock is not None:
        sock.close()
