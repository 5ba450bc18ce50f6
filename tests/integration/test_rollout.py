"""Staged rollout (issue 16): ``edge-deploy fleet rollout`` against three real daemons, a real mosquitto, a
monitor's SQLite store and a loopback HTTP server.

r-1 and r-2 carry the tag ``beta``, r-3 carries ``prod``. A correctly signed bundle with a wrong model goes to
``beta`` with a 50 % canary and ``--abort-after 1``: r-1 rolls back, the rollout aborts, r-2 never hears of it.
Then a good bundle goes to ``beta``: r-1 (canary), then r-2, both accepted; r-3 is never sent anything.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from edge.daemon.commands import write_secret
from edge.digest import file_sha256
from edge.signing import generate_keypair
from edge.telemetry.link import BrokerConfig
from edge_deploy.cli import main
from fleet import Monitor, MonitorConfig
from fleet.rollout import group_members
from tests.integration.test_daemon import DaemonProcess, wait_until
from tests.integration.test_update import _break_embedder, _build, _copy_models, _reseal, _serve
from testsupport.broker import Broker

pytestmark = pytest.mark.integration
DEVICES = {"r-1": "beta", "r-2": "beta", "r-3": "prod"}


@pytest.fixture(scope="module")
def rollout(tmp_path_factory, face_fp32_models: Path) -> dict:
    root = tmp_path_factory.mktemp("rollout")
    release = generate_keypair(root / "release.key")
    good = _build(_copy_models(face_fp32_models, root / "m1", "rollout-good"), root / "good", release.private_path)
    wrong_models = _copy_models(face_fp32_models, root / "m2", "rollout-wrong")
    _break_embedder(wrong_models)
    wrong = _build(wrong_models, root / "wrong", release.private_path, golden=False)
    shutil.copytree(good.folder / "golden", wrong.folder / "golden")
    www = root / "www"
    www.mkdir()
    shutil.copyfile(good.archive, www / "good.tar.gz")
    shutil.copyfile(_reseal(wrong.folder, release.private_path), www / "wrong.tar.gz")
    secret = write_secret(root / "command.key")
    server, url = _serve(www)
    out: dict = {"root": root}
    with Broker(root / "broker") as broker:
        monitor = Monitor(MonitorConfig(BrokerConfig("127.0.0.1", broker.port), root / "monitor.db"))
        assert monitor.start(timeout=10)
        daemons: dict[str, DaemonProcess] = {}
        try:
            for device, tag in DEVICES.items():
                (root / device / "incoming").mkdir(parents=True)
                config = root / device / "edge-deploy.toml"
                config.write_text(
                    f'device_id = "{device}"\nstate_dir = "state"\ntags = ["{tag}"]\n'
                    f'trusted_keys = ["{release.public_path}"]\n[face]\nmodels = "{face_fp32_models}"\n'
                    f'[source]\npath = "incoming"\n[broker]\nhost = "127.0.0.1"\nport = {broker.port}\n'
                    f'[commands]\nsecret_file = "{secret}"\n[update]\nmax_latency_ms = 60000\nbench_runs = 2\n'
                )
                daemons[device] = DaemonProcess(config, root / f"{device}.log")
            for daemon in daemons.values():
                daemon.wait_log("listening for commands on", 180)
            wait_until(lambda: len(group_members(monitor.store, "beta")) == 2, 60, "the beta devices' announcements")
            common = ["--group", "beta", "--canary", "50%", "--abort-after", "1", "--timeout", "240",
                      "--store", str(monitor.store.path), "--secret-file", str(secret),
                      "--broker", f"127.0.0.1:{broker.port}"]  # fmt: skip
            for name in ("wrong", "good"):
                sha = file_sha256(www / f"{name}.tar.gz")
                out[f"{name}_exit"] = main(["fleet", "rollout", f"{url}/{name}.tar.gz", "--sha256", sha, *common])
                out[f"{name}_logs"] = {d: p.log() for d, p in daemons.items()}
            for daemon in daemons.values():
                assert daemon.stop(signal.SIGTERM) == 0
        finally:
            for daemon in daemons.values():
                if daemon.proc.poll() is None:
                    daemon.proc.kill()
            monitor.close()
            server.shutdown()
    return out


def test_a_failed_canary_aborts_the_rollout(rollout: dict, capsys) -> None:
    assert rollout["wrong_exit"] == 5
    logs = rollout["wrong_logs"]
    assert "acceptance check failed" in logs["r-1"]
    assert "command update" not in logs["r-2"]  # the second wave was never sent
    assert "command update" not in logs["r-3"]


def test_a_good_rollout_reaches_the_group_and_only_the_group(rollout: dict) -> None:
    assert rollout["good_exit"] == 0
    logs = rollout["good_logs"]
    assert logs["r-1"].count("command update") == 2  # the wrong bundle, then this one
    assert logs["r-2"].count("command update") == 1
    assert "command update" not in logs["r-3"]
