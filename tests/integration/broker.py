"""A real mosquitto for tests: own config, own data dir, a free loopback port; stop/restart/kill it.

Never touches the system broker on 127.0.0.1:1883. Variants: anonymous, password file, TLS with a
self-signed CA (optionally requiring client certificates). Persistence is on, so a persistent session
(the fleet monitor's) and its queued QoS 1 messages survive a broker restart, as on a real deployment.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

MOSQUITTO = "/usr/sbin/mosquitto"
MOSQUITTO_PASSWD = "/usr/bin/mosquitto_passwd"


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class TlsFiles:
    """A self-signed CA, a server certificate for 127.0.0.1 it signed, and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls_files(directory: Path) -> TlsFiles:
    """Create a CA and certificates with openssl (server cert has subjectAltName=IP:127.0.0.1)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=edge-deploy test CA",
        "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    for name, cn, ext in (
        ("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("client", "edge-client", "extendedKeyUsage=clientAuth\n"),
    ):
        (d / f"{name}.ext").write_text(ext)
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", f"{name}.key",
            "-out", f"{name}.csr")  # fmt: skip
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt")  # fmt: skip
    return TlsFiles(d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key")


class Broker:
    """One mosquitto process on a free loopback port, restartable on the same port.

    Args:
        directory: where config, data, log and password file go (created).
        users: {username: password}; if given, anonymous access is off.
        tls: serve TLS with these files instead of plain TCP.
        require_client_cert: with ``tls``, refuse clients without a certificate signed by the CA.
        extra_config: more mosquitto.conf lines for the listener (e.g. ``use_identity_as_username true``).
    """

    def __init__(
        self,
        directory: Path,
        users: dict[str, str] | None = None,
        tls: TlsFiles | None = None,
        require_client_cert: bool = False,
        extra_config: tuple[str, ...] = (),
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "data").mkdir(exist_ok=True)
        self.port = free_port()
        self.host = "127.0.0.1"
        self._proc: subprocess.Popen | None = None
        self.config_path = self.directory / "mosquitto.conf"
        self.log_path = self.directory / "mosquitto.log"
        lines = [
            f"listener {self.port} 127.0.0.1",
            "user root",  # stay the test's user: no need to chown the data dir to 'mosquitto'
            "persistence true",
            f"persistence_location {self.directory / 'data'}/",
            f"log_dest file {self.log_path}",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            "max_queued_messages 100000",
            "max_inflight_messages 100",
        ]
        if users:
            pw = self.directory / "passwd"
            pw.write_text("")
            for name, password in users.items():
                subprocess.run([MOSQUITTO_PASSWD, "-b", str(pw), name, password], check=True, timeout=30)
            lines += ["allow_anonymous false", f"password_file {pw}"]
        else:
            lines.append("allow_anonymous true")
        if tls is not None:
            lines += [f"cafile {tls.ca}", f"certfile {tls.server_cert}", f"keyfile {tls.server_key}"]
            lines.append(f"require_certificate {'true' if require_client_cert else 'false'}")
        lines += list(extra_config)
        self.config_path.write_text("\n".join(lines) + "\n")

    @property
    def running(self) -> bool:
        """Whether the mosquitto process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 10.0) -> Broker:
        """Start mosquitto and wait until its port accepts connections.

        Raises:
            RuntimeError: with the broker log if it exits or does not listen within ``timeout``.
        """
        if self.running:
            return self
        log = open(self.directory / "stdout.log", "ab")  # noqa: SIM115 - kept open for the child
        self._proc = subprocess.Popen([MOSQUITTO, "-c", str(self.config_path)], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self._proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"mosquitto did not listen on {self.host}:{self.port} in {timeout} s:\n{self.log()}")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop mosquitto cleanly (SIGTERM: it saves its persistence file), SIGKILL after ``timeout``."""
        if not self.running:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def reload(self) -> None:
        """Send SIGHUP: mosquitto re-reads its config, ACL, password file and CRL without dropping clients."""
        if self.running:
            self._proc.send_signal(signal.SIGHUP)

    def kill(self) -> None:
        """Kill mosquitto with SIGKILL (no persistence save)."""
        if self.running:
            os.kill(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)

    def restart(self, timeout: float = 10.0) -> None:
        """Stop, then start again on the same port."""
        self.stop(timeout)
        self.start(timeout)

    def log(self) -> str:
        """The broker's log so far (for failure messages)."""
        parts = [p.read_text(errors="replace") for p in (self.log_path, self.directory / "stdout.log") if p.exists()]
        return "\n".join(parts)

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
