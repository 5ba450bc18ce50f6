"""Staged rollout (issue 16): ``edge-deploy fleet rollout`` against three real daemons, a real mosquitto, a
monitor's SQLite store and a loopback HTTP server.

r-1 and r-2 carry the tag ``beta``, r-3 carries ``prod``. A correctly signed bundle with a wrong model goes to
``beta`` with a 50 % canary and ``--abort-after 1``: r-1 rolls back, the rollout aborts, r-2 never hears of it.
Then a good bundle goes to ``beta``: r-1 (canary), then r-2, both accepted; r-3 is never sent anything.

Without daemons, on a broker that requires the fleet's certificates and applies its ACL: forged, malformed and
unproven outcomes never make a rollout succeed (issue 44).
"""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from edge.daemon.commands import write_secret
from edge.digest import file_sha256
from edge.signing import generate_keypair
from edge.telemetry.link import BrokerConfig
from edge.telemetry.schema import Result, Telemetry, to_json
from edge_deploy.cli import main
from fleet import Monitor, MonitorConfig
from fleet.rollout import group_members
from tests.integration.broker import Broker, TlsFiles, make_tls_files
from tests.integration.test_credentials import Client
from tests.integration.test_daemon import DaemonProcess, wait_until
from tests.integration.test_update import _break_embedder, _build, _copy_models, _reseal, _serve

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
                    # no periodic telemetry during the test: only the one sent right after an accepted update
                    # can prove it (the rollout counts a device once its telemetry names the new bundle)
                    "[telemetry]\ninterval_s = 3600\n"
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


_SEQ = itertools.count(100)


def _result(device: str, seq: int, task: str, data: dict) -> bytes:
    return to_json(Result(device_id=device, seq=seq, timestamp=time.time(), task=task, data=data)).encode()


def _telemetry(device: str, seq: int, bundle_id: str) -> bytes:
    body = Telemetry(device_id=device, seq=seq, timestamp=time.time(), latency_p50_ms=1.0, latency_p90_ms=2.0,
                     fps=3.0, temperature_c=None, window_s=1.0, bundle_id=bundle_id)  # fmt: skip
    return to_json(body).encode()


def _answer_updates(device: Client, name: str, replies, stop: threading.Event) -> None:
    """Answer every update command ``device`` reads on its own cmd topic with ``replies(nonce)``."""
    while not stop.is_set():
        for _topic, payload in device.received(0.2):
            for body in replies(json.loads(payload)["nonce"]):
                seq = next(_SEQ)
                kind = "telemetry" if "bundle_id" in body else "result"
                maker = _telemetry if kind == "telemetry" else _result
                device.client.publish(f"edge-deploy/{name}/{kind}", maker(name, seq, **body), qos=1)


def test_forged_malformed_and_unproven_outcomes_never_make_a_rollout_succeed(tmp_path: Path, capsys) -> None:
    ca, certs = tmp_path / "ca", tmp_path / "certs"
    for identity, role in (("pi-a", "device"), ("pi-c", "device"), ("monitor-1", "monitor"), ("ops", "operator")):
        assert main(["fleet", "provision", identity, "--ca", str(ca), "-o", str(certs), "--role", role]) == 0
    server = make_tls_files(tmp_path / "server")
    tls = TlsFiles(ca / "ca.crt", server.server_cert, server.server_key, server.client_cert, server.client_key)
    extra = ("use_identity_as_username true", f"crlfile {ca / 'crl.pem'}", f"acl_file {ca / 'acl'}")
    secret = write_secret(tmp_path / "command.key")
    with Broker(tmp_path / "broker", tls=tls, require_client_cert=True, extra_config=extra) as broker:
        cert = {n: (certs / f"{n}.crt", certs / f"{n}.key") for n in ("pi-a", "pi-c", "monitor-1", "ops")}
        monitor = Monitor(MonitorConfig(BrokerConfig("127.0.0.1", broker.port, tls_ca=server.ca,
                          tls_cert=cert["monitor-1"][0], tls_key=cert["monitor-1"][1]), tmp_path / "monitor.db"))  # fmt: skip
        assert monitor.start(timeout=10)
        a, c = Client(broker, server.ca, *cert["pi-a"], "pi-a"), Client(broker, server.ca, *cert["pi-c"], "pi-c")
        try:
            assert a.publish("edge-deploy/pi-a/result", _result("pi-a", 1, "device.announce", {"tags": ["beta"]}))
            for ghost in ("ghost-1", "ghost-2", "ghost-3"):  # pi-a cannot announce (or answer) for anyone else
                body = _result(ghost, 1, "device.announce", {"tags": ["beta"]})
                assert a.publish(f"edge-deploy/{ghost}/result", body) == "Not authorized"
            assert c.publish("edge-deploy/pi-c/result", _result("pi-c", 1, "device.announce", {"tags": 5}))
            assert c.publish("edge-deploy/pi-c/result", _result("pi-c", 2, "update.failed", {"nonce": [1]}))
            wait_until(lambda: monitor.store.count() == 3, 20, "the three stored results")
            assert a.subscribe("edge-deploy/pi-a/cmd") == "Granted QoS 1"
            argv = ["fleet", "rollout", "http://127.0.0.1:9/b.tar.gz", "--sha256", "0" * 64, "--group", "beta",
                    "--timeout", "6", "--store", str(monitor.store.path), "--secret-file", str(secret),
                    "--broker", f"127.0.0.1:{broker.port}", "--tls-ca", str(server.ca),
                    "--tls-cert", str(cert["ops"][0]), "--tls-key", str(cert["ops"][1])]  # fmt: skip
            accepted = {"task": "update.accepted", "data": {"from": "old", "to": "new"}}

            def rollout(replies) -> tuple[int, str]:
                stop = threading.Event()
                answering = threading.Thread(target=_answer_updates, args=(a, "pi-a", replies, stop))
                answering.start()
                try:
                    code = main(argv)
                finally:
                    stop.set()
                    answering.join(10)
                return code, capsys.readouterr().out

            # a bare update.accepted (what anyone who read the nonce could send) is no proof: timeout, exit 5
            code, out = rollout(lambda n: [{**accepted, "data": {**accepted["data"], "nonce": n}}])
            assert code == 5 and "update.accepted reported, but no telemetry naming bundle new within 6 s" in out
            assert "pi-c device.announce seq 1: data.tags = '5'; expected list" in out
            assert "pi-c update.failed seq 2: data.nonce = '[1]'; expected str" in out
            assert out.splitlines()[-1] == "rollout to group beta: done with failures; 1 of 1 failed"
            # the device's own telemetry naming the new bundle is the proof
            code, out = rollout(
                lambda n: [{**accepted, "data": {**accepted["data"], "nonce": n}}, {"bundle_id": "new"}]
            )
            assert (code, out.splitlines()[-1]) == (0, "rollout to group beta: done; 0 of 1 failed"), out
        finally:
            a.close()
            c.close()
            monitor.close()
