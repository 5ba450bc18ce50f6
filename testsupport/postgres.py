"""A real PostgreSQL for tests: its own cluster (initdb) in a temp dir, on a free loopback port; stop/restart.

Never touches the system server on 127.0.0.1:5432. Debian's postgresql package provides the binaries
(scripts/setup.sh installs it). PostgreSQL refuses to run as root: as root, the cluster directory is given
to the ``postgres`` system user (the package creates it) and the binaries run through ``runuser``.
Authentication is ``trust`` on loopback only; the database is ``fleet``, the user ``edge``.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from testsupport.broker import free_port


def pg_bindir() -> Path | None:
    """The newest installed ``/usr/lib/postgresql/<version>/bin`` with initdb, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def postgres_missing() -> str | None:
    """Why a test cluster cannot be made here, or None."""
    if pg_bindir() is None:
        return "PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb) are missing: run scripts/setup.sh"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root needs runuser (util-linux) to start PostgreSQL as the postgres user"
    return None


class Postgres:
    """One PostgreSQL cluster on a free loopback port, restartable on the same port; ``close()`` removes it.

    The cluster, its socket and log go into a fresh directory under the system temp dir (pytest's own
    temp dirs are private to root, where the ``postgres`` user can't reach them).
    """

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="edge-pg-"))
        self.data = self.directory / "data"
        self.log_path = self.directory / "postgres.log"
        self.port = free_port()
        self.bindir = pg_bindir()
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "edge", "-A", "trust", "-E", "UTF8", "--no-sync", timeout=120)
        opts = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.directory}'",
            "max_connections": "50",
            "shared_buffers": "64MB",
        }
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as fh:
            fh.writelines(f"{k} = {v}\n" for k, v in opts.items())

    @property
    def url(self) -> str:
        """The libpq URL of the test database."""
        return f"postgresql://edge@127.0.0.1:{self.port}/fleet"

    def _run(self, tool: str, *args: str, timeout: float = 60) -> str:
        cmd = [str(self.bindir / tool), *args]
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.directory)
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}\n{self.log()}")
        return proc.stdout

    def start(self) -> Postgres:
        """Start the server and wait until it accepts connections (creates the database the first time)."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log_path), "-w", "-t", "60", "start", timeout=90)
        if "fleet" not in self._run("psql", *self._psql_args("postgres"), "-Atc", "SELECT datname FROM pg_database"):
            self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "edge", "fleet")
        return self

    def _psql_args(self, db: str) -> list[str]:
        return ["-h", "127.0.0.1", "-p", str(self.port), "-U", "edge", "-d", db]

    def psql(self, sql: str) -> str:
        """Run SQL in the test database with psql; returns unaligned tuples-only output."""
        return self._run("psql", *self._psql_args("fleet"), "-v", "ON_ERROR_STOP=1", "-Atc", sql)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: roll back open transactions; ``immediate``: like a crash)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", timeout=90)

    def restart(self, mode: str = "fast") -> None:
        """Stop (``mode``) and start again on the same port."""
        self.stop(mode)
        self.start()

    def log(self) -> str:
        """The server log so far (for failure messages)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def close(self) -> None:
        """Stop the server if it runs (``immediate``: nothing to keep) and remove the cluster."""
        status = [str(self.bindir / "pg_ctl"), "-D", str(self.data), "status"]
        if self._as_root:
            status = ["runuser", "-u", "postgres", "--", *status]
        if subprocess.run(status, capture_output=True, timeout=30).returncode == 0:
            self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)


def wait_until(check, timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``check()`` until true; fail the test naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
