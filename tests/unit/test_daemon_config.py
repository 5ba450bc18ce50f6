"""The daemon config: defaults for a minimal file, and the exact text of every kind of mistake."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import pytest

from edge.daemon.config import _SCHEMA, EXAMPLE_CONFIG, SYSTEMD_UNIT, LogLevel, SourceKind, load_config
from edge.errors import InputError
from edge.face.track import VIDEO_DETECT_EVERY

MINIMAL = '[face]\nmodels = "face"\n[source]\npath = "incoming"\n'


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "face").mkdir()
    (tmp_path / "incoming").mkdir()
    return tmp_path


def write(folder: Path, text: str) -> Path:
    path = folder / "edge-deploy.toml"
    path.write_text(text, encoding="utf-8")
    return path


def error(folder: Path, text: str) -> str:
    path = write(folder, text)
    with pytest.raises(InputError) as info:
        load_config(path)
    return str(info.value).replace(str(path), "CFG").replace(str(folder), "DIR")


def test_a_minimal_config_gets_working_defaults(folder: Path) -> None:
    c = load_config(write(folder, MINIMAL))
    assert c.face.models == folder / "face"
    assert c.source.kind is SourceKind.FOLDER and c.source.path == folder / "incoming"
    assert c.state_dir == folder / "state"
    assert c.face.gallery == folder / "state" / "gallery.npz"
    assert c.telemetry.outbox == folder / "state" / "outbox.sqlite"
    assert c.state_db == folder / "state" / "state.sqlite"
    assert c.broker is None  # no broker: telemetry waits in the outbox
    assert c.commands.secret_file is None  # no secret: every command is rejected
    assert c.text.model_dir is None
    assert c.log_level is LogLevel.INFO
    assert c.telemetry.prefix == "edge-deploy" and c.telemetry.interval_s == 30.0
    assert c.face.threshold is None  # None: the models folder's (dlib's 0.6)
    assert c.face.detector is None and c.face.min_score is None  # None: the folder's detector, and its cut-off
    assert c.face.detect_every == 1  # a folder: every image detected
    assert c.face.keep_descriptor_within == 10.0  # a followed face's descriptor kept while its chip holds
    assert c.device_id  # the host name, as a valid topic level


def test_detect_every_defaults_by_source_kind_and_an_explicit_value_wins_for_video_and_camera(folder: Path) -> None:
    """Issue 46: a video or a camera follows faces between detector frames unless the config says otherwise; a
    folder's images are stills, each detected (whatever face.detect_every says)."""
    (folder / "clip.avi").write_bytes(b"")
    video = '[face]\nmodels = "face"\n[source]\nkind = "video"\npath = "clip.avi"\n'
    camera = '[face]\nmodels = "face"\n[source]\nkind = "camera"\n'
    assert VIDEO_DETECT_EVERY > 1
    assert load_config(write(folder, video)).face.detect_every == VIDEO_DETECT_EVERY
    assert load_config(write(folder, camera)).face.detect_every == VIDEO_DETECT_EVERY
    assert load_config(write(folder, MINIMAL)).face.detect_every == 1
    assert f"# detect_every = {VIDEO_DETECT_EVERY}\n" in EXAMPLE_CONFIG.read_text(encoding="utf-8")
    for every in (1, 2, 7):
        explicit = f'detect_every = {every}\n[source]'
        assert load_config(write(folder, video.replace("[source]", explicit))).face.detect_every == every
        assert load_config(write(folder, camera.replace("[source]", explicit))).face.detect_every == every
        assert load_config(write(folder, MINIMAL.replace("[source]", explicit))).face.detect_every == 1


def test_broker_table_with_password_file(folder: Path) -> None:
    (folder / "pw").write_text("s3cret\n")
    (folder / "pw").chmod(0o600)
    c = load_config(write(folder, MINIMAL + '[broker]\nhost = "10.0.0.2"\nusername = "pi"\npassword_file = "pw"\ntls = true\n'))
    assert (c.broker.host, c.broker.port, c.broker.username, c.broker.password) == ("10.0.0.2", 1883, "pi", "s3cret")
    assert not c.broker_insecure


# --- safe defaults (issue 16) -------------------------------------------------------------------------------


def test_a_remote_broker_without_tls_is_refused_unless_allow_insecure(folder: Path) -> None:
    """Issue 16: host 192.0.2.1 without TLS or password passed `serve --check`."""
    assert error(folder, MINIMAL + '[broker]\nhost = "192.0.2.1"\n') == (
        "CFG: broker.host = '192.0.2.1' without TLS; expected tls = true (or tls_ca) for a broker off this machine "
        "(the password, commands and results would cross the network in clear), or broker.allow_insecure = true "
        "to accept that"
    )
    assert "broker.host = 'mqtt.example.org' without TLS" in error(folder, MINIMAL + '[broker]\nhost = "mqtt.example.org"\n')
    c = load_config(write(folder, MINIMAL + '[broker]\nhost = "192.0.2.1"\nallow_insecure = true\n'))
    assert c.broker_insecure
    for host in ("127.0.0.1", "127.3.2.1", "localhost", "::1", "[::1]"):
        c = load_config(write(folder, MINIMAL + f'[broker]\nhost = "{host}"\n'))
        assert not c.broker_insecure, host


def test_tags_are_topic_levels_kept_once_in_order(folder: Path) -> None:
    assert load_config(write(folder, 'tags = ["beta", "kitchen", "beta"]\n' + MINIMAL)).tags == ("beta", "kitchen")
    assert error(folder, 'tags = ["beta", "a b"]\n' + MINIMAL) == (
        "CFG: tags[1] = 'a b'; expected 1-64 characters of letters, digits, '_', '.', ':' or '-' (it becomes one "
        "MQTT topic level)"
    )


def test_password_and_key_files_readable_by_others_are_refused(folder: Path) -> None:
    """Issue 16: broker.password_file was read at mode 644."""
    (folder / "pw").write_text("s3cret\n")
    (folder / "pw").chmod(0o644)
    base = MINIMAL + '[broker]\nhost = "127.0.0.1"\n'
    assert error(folder, base + 'username = "pi"\npassword_file = "pw"\n') == (
        "CFG: broker.password_file = 'DIR/pw': mode 644 lets group or others read it; expected 600 (chmod 600 'DIR/pw')"
    )
    (folder / "pw").chmod(0o600)
    assert load_config(write(folder, base + 'username = "pi"\npassword_file = "pw"\n')).broker.password == "s3cret"
    for name in ("c.crt", "c.key"):
        (folder / name).write_text("PEM")
    (folder / "c.key").chmod(0o640)
    assert error(folder, base + 'tls_ca = "c.crt"\ntls_cert = "c.crt"\ntls_key = "c.key"\n') == (
        "CFG: broker.tls_key = 'DIR/c.key': mode 640 lets group or others read it; expected 600 (chmod 600 'DIR/c.key')"
    )


def test_serve_check_and_every_start_warn_about_allow_insecure(folder: Path, caplog) -> None:
    from edge.daemon.preflight import preflight
    from edge.daemon.service import Daemon
    from edge.errors import BundleError

    _models_folder(folder)
    config = load_config(write(folder, MINIMAL + '[broker]\nhost = "192.0.2.1"\nallow_insecure = true\n'))
    assert "WARNING: broker 192.0.2.1:1883 without TLS (broker.allow_insecure = true)" in preflight(config)
    # Every start warns; a missing bundle then stops it at once (before any connection attempt).
    config = load_config(write(folder, 'bundle = "none"\n' + MINIMAL + '[broker]\nhost = "192.0.2.1"\nallow_insecure = true\n'))
    for _ in range(2):
        with pytest.raises(BundleError, match="none: not found"):
            Daemon(config).run()
    warnings = [r.getMessage() for r in caplog.records if "WITHOUT TLS" in r.getMessage()]
    assert warnings == [
        "broker 192.0.2.1:1883 is off this machine and reached WITHOUT TLS (broker.allow_insecure = true): the "
        "password, commands and results cross the network in clear; set broker.tls = true or tls_ca"
    ] * 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            'colour = "red"\n',
            "CFG: unknown key colour; expected one of bundle, device_id, log_level, state_dir, tags, target, trusted_keys",
        ),
        (
            "[sources]\nx = 1\n",
            "CFG: unknown table [sources]; expected one of [broker], [commands], [face], [source], [telemetry], [text], [update]",
        ),
        (
            "[telemetry]\ninterval = 5\n",
            "CFG: unknown key telemetry.interval; expected one of commit_interval_s, flush_timeout_s, interval_s, outbox, "
            "outbox_capacity, prefix, require_subscriber",
        ),
        ("[telemetry]\ninterval_s = 0\n", "CFG: telemetry.interval_s = 0.0; expected a number in (0, 86400]"),
        ('[telemetry]\ninterval_s = "5"\n', "CFG: telemetry.interval_s = '5'; expected a number"),
        (
            '[telemetry]\nprefix = "a/#"\n',
            "CFG: telemetry.prefix = 'a/#'; expected topic levels of letters, digits, "
            "'_', '.', ':' or '-' separated by '/', without wildcards or a leading/trailing '/'",
        ),  # fmt: skip
        ("[broker]\nport = 1883\n", "CFG: missing key broker.host"),
        ('[broker]\nhost = "h"\nport = 70000\n', "CFG: broker.port = 70000; expected a whole number in 1..65535"),
        ('[broker]\nhost = "h"\ntls = "yes"\n', "CFG: broker.tls = 'yes'; expected true or false"),
        (
            '[broker]\nhost = "h"\npassword_file = "pw"\n',
            "CFG: broker.password_file is set but broker.username is not; expected both",
        ),
        (
            "[commands]\nbench_runs = 2000\n",
            "CFG: commands.bench_runs = 2000; expected at most commands.max_bench_runs (1000)",
        ),  # fmt: skip
        ("[text]\nmax_new_tokens = 0\n", "CFG: text.max_new_tokens = 0; expected a whole number in 1..8192"),
        (
            '[text]\nmodel_dir = "nowhere"\n',
            "CFG: text.model_dir = 'DIR/nowhere'; expected a converted language-model folder",
        ),  # fmt: skip
    ],
)
def test_mistakes_name_file_key_and_what_is_allowed(folder: Path, extra: str, message: str) -> None:
    text = (MINIMAL + extra) if extra.startswith("[") else (extra + MINIMAL)  # top-level keys go first
    assert error(folder, text) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[source]\npath = "incoming"\n', "CFG: missing table [face]"),
        ('[face]\nmodels = "face"\n', "CFG: missing table [source]"),
        ('[face]\n[source]\npath = "incoming"\n', "CFG: missing key face.models"),
        (
            '[face]\nmodels = "nope"\n[source]\npath = "incoming"\n',
            "CFG: face.models = 'DIR/nope'; expected a folder written by 'edge-deploy convert face'",
        ),
        (
            '[face]\nmodels = "face"\n[source]\nstride = 2\n',
            "CFG: missing key source.path (source.kind = 'folder' needs it)",
        ),  # fmt: skip
        (
            '[face]\nmodels = "face"\n[source]\npath = "gone"\n',
            "CFG: source.path = 'DIR/gone'; expected an existing folder to watch",
        ),
        (
            '[face]\nmodels = "face"\n[source]\nkind = "video"\npath = "incoming"\n',
            "CFG: source.path = 'DIR/incoming'; expected an existing video file",
        ),
        (
            '[face]\nmodels = "face"\n[source]\nkind = "camera"\npath = "incoming"\n',
            "CFG: source.path = 'DIR/incoming' with source.kind = 'camera'; a camera takes camera_index",
        ),
        (
            '[face]\nmodels = "face"\n[source]\nkind = "webcam"\n',
            "CFG: source.kind = 'webcam'; expected one of folder, video, camera",
        ),  # fmt: skip
        (
            '[face]\nmodels = "face"\n[source]\npath = "incoming"\nstride = 0\n',
            "CFG: source.stride = 0; expected a whole number in 1..100000",
        ),  # fmt: skip
        (
            '[face]\nmodels = "face"\n[source]\npath = "incoming"\nstride = 1.5\n',
            "CFG: source.stride = 1.5; expected a whole number",
        ),  # fmt: skip
        (
            '[face]\nmodels = "face"\nmin_score = 1.5\n[source]\npath = "incoming"\n',
            "CFG: face.min_score = 1.5; expected a number in [0, 1]",
        ),  # fmt: skip
        (
            '[face]\nmodels = "face"\ndetector = "hog"\n[source]\npath = "incoming"\n',
            "CFG: face.detector = 'hog'; expected one of mtcnn, blazeface, blazeface-full, blazeface-full-tiled",
        ),  # fmt: skip
        (
            '[face]\nmodels = "face"\nthreshold = 0\n[source]\npath = "incoming"\n',
            "CFG: face.threshold = 0.0; expected a number in (0, 2]",
        ),  # fmt: skip
        ('[face]\nmodels = 7\n[source]\npath = "incoming"\n', "CFG: face.models = 7; expected a path (string)"),
        (
            'device_id = "pi kitchen"\n' + MINIMAL,
            "CFG: device_id = 'pi kitchen'; expected 1-64 characters of "
            "letters, digits, '_', '.', ':' or '-' (it becomes one MQTT topic level)",
        ),  # fmt: skip
        ('log_level = "loud"\n' + MINIMAL, "CFG: log_level = 'loud'; expected one of debug, info, warning, error"),
        ("[face\n", "CFG: not valid TOML (Expected ']' at the end of a table declaration (at line 1, column 6))"),
    ],
)
def test_structural_mistakes(folder: Path, text: str, message: str) -> None:
    assert error(folder, text) == message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        load_config(tmp_path / "none.toml")
    assert str(info.value) == f"{tmp_path / 'none.toml'}: cannot read the daemon config (No such file or directory)"


def test_the_example_config_documents_every_key() -> None:
    data = tomllib.loads(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    text = EXAMPLE_CONFIG.read_text(encoding="utf-8")
    for table, spec in _SCHEMA.items():
        for key in spec:
            shown = key in (data if not table else data.get(table, {}))
            commented = f"# {key} = " in text
            assert shown or commented, f"{table}.{key} is not in {EXAMPLE_CONFIG.name}"


def test_the_systemd_unit_is_hardened() -> None:
    lines = set(SYSTEMD_UNIT.read_text(encoding="utf-8").splitlines())
    for option in (
        "User=edge-deploy",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        "ReadWritePaths=/var/lib/edge-deploy",
        "Restart=on-failure",
        "KillSignal=SIGTERM",
        "CapabilityBoundingSet=",
        "PrivateMounts=yes",
        "UMask=0077",
    ):
        assert option in lines, option


def test_systemd_analyze_security_scores_the_unit_at_most_1_6(tmp_path: Path) -> None:
    """docs/daemon.md records 1.8 before issue 16 and 1.6 after (systemd 252, --offline)."""
    import re
    import shutil
    import subprocess

    assert shutil.which("systemd-analyze"), "systemd-analyze is missing: run bash scripts/setup.sh (Debian's systemd)"
    unit = tmp_path / "edge-deploy.service"
    unit.write_bytes(SYSTEMD_UNIT.read_bytes())
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    found = re.search(r"Overall exposure level for edge-deploy.service: ([0-9.]+)", done.stdout)
    assert found, done.stdout + done.stderr
    assert float(found.group(1)) <= 1.6


def test_the_daemon_refuses_to_start_on_a_bundle_that_fails_verification(folder: Path) -> None:

    from edge.daemon.service import Daemon
    from edge.errors import BundleError

    bundle = folder / "bundle"
    (bundle / "models").mkdir(parents=True)
    (bundle / "models" / "m.onnx").write_bytes(b"real bytes")
    manifest = {
        "schema_version": 1,
        "files": [{"path": "models/m.onnx", "size": 10, "sha256": "0" * 64}],
    }
    (bundle / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    config = load_config(write(folder, 'bundle = "bundle"\n' + MINIMAL))
    assert config.bundle == bundle
    with pytest.raises(BundleError) as info:
        Daemon(config, once=True).run()
    assert str(info.value) == f"{bundle / 'manifest.json'}: missing key 'format'"
    assert not (folder / "state" / "state.sqlite").exists()  # refused before touching any state


# --- issue 17, defect 4: NaN/inf and out-of-range numbers passed validation ---------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # a validly signed command 10^6 s old executed with this
        ("[commands]\nmax_skew_s = nan\n", "CFG: commands.max_skew_s = nan; expected a finite number"),
        ("[telemetry]\ninterval_s = nan\n", "CFG: telemetry.interval_s = nan; expected a finite number"),
        ("[telemetry]\ninterval_s = inf\n", "CFG: telemetry.interval_s = inf; expected a finite number"),
        ("[face]\nthreshold = -inf\n", "CFG: face.threshold = -inf; expected a finite number"),
        # an integer beyond float's range (math.isfinite raised OverflowError; found by test_fuzz)
        ("[face]\nthreshold = 1" + "0" * 400 + "\n", "CFG: face.threshold = 1" + "0" * 400 + "; expected a finite number"),
        (
            "[telemetry]\ncommit_interval_s = 1000\n",
            "CFG: telemetry.commit_interval_s = 1000.0; expected a number in [0, 10]",
        ),
        (
            '[broker]\nhost = "h"\nkeepalive_s = 100000\n',
            "CFG: broker.keepalive_s = 100000; expected a whole number in 1..65535",
        ),
        ("[face]\nthreads = 100000\n", "CFG: face.threads = 100000; expected a whole number in 0..256"),
        ("[face]\ndetect_every = 0\n", "CFG: face.detect_every = 0; expected a whole number in 1..1000"),
        (
            "[face]\nkeep_descriptor_within = 300\n",
            "CFG: face.keep_descriptor_within = 300.0; expected a number in [0, 255]",
        ),
    ],
)
def test_non_finite_and_out_of_range_numbers_are_refused(folder: Path, extra: str, message: str) -> None:
    if extra.startswith("[face]"):  # a second [face] table would be a TOML error: add the key to the first
        text = MINIMAL.replace('models = "face"\n', 'models = "face"\n' + extra.split("\n", 1)[1])
    else:
        text = MINIMAL + extra
    assert error(folder, text) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('state_dir = "a\\u0000b"\n' + MINIMAL, "CFG: state_dir = 'a\\x00b'; expected text without control characters (found '\\x00')"),
        (
            'state_dir = "' + "x" * 10_000 + '"\n' + MINIMAL,
            "CFG: state_dir = '" + "x" * 60 + "…(10000 characters)'; expected a path of at most 4096 bytes with names of "
            "at most 255",
        ),
        ("a = " + "[" * 100_000 + "]" * 100_000 + "\n", "CFG: not valid TOML (nested too deeply to read); expected a flat config"),
    ],
)
def test_hostile_paths_and_nesting_are_one_line_errors(folder: Path, text: str, message: str) -> None:
    assert error(folder, text) == message


def _models_folder(folder: Path) -> None:

    from edge.face.models import FACE_ROLES

    models = []
    for i, role in enumerate(FACE_ROLES):
        data = f"model {i}".encode()
        (folder / "face" / f"m{i}.onnx").write_bytes(data)
        models.append({"role": role, "file": f"m{i}.onnx", "format": "onnx", "precision": "fp32",
                       "sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "source": {}})  # fmt: skip
    (folder / "face" / "models.json").write_text(json.dumps({"schema_version": 1, "models": models}))


def _check(folder: Path, text: str) -> str:
    from edge.daemon.preflight import preflight

    with pytest.raises(InputError) as info:
        preflight(load_config(write(folder, text)))
    return str(info.value).replace(str(folder / "edge-deploy.toml"), "CFG").replace(str(folder), "DIR")


def test_check_finds_what_serve_would_refuse(folder: Path) -> None:
    """`serve --check` said ok to all of these; only `serve` found them."""
    from edge.daemon.preflight import preflight

    assert _check(folder, MINIMAL) == (
        "CFG: face.models: DIR/face/models.json: not found; expected a models folder written by 'edge-deploy "
        "convert face' (with models.json)"
    )
    _models_folder(folder)
    assert any("5 models" in line for line in preflight(load_config(write(folder, MINIMAL))))
    secret = folder / "key"
    with_secret = MINIMAL + '[commands]\nsecret_file = "key"\n'
    assert _check(folder, with_secret) == (
        "CFG: commands.secret_file = 'DIR/key': cannot read (No such file or directory)"
    )
    secret.write_text("0123456789abcdef0123\n")
    secret.chmod(0o644)
    assert "mode 644 lets group or others read it" in _check(folder, with_secret)
    secret.write_text("short\n")
    secret.chmod(0o600)
    assert "5 bytes; expected at least 16" in _check(folder, with_secret)
    (folder / "state").mkdir(exist_ok=True)
    (folder / "state" / "gallery.npz").write_bytes(b"garbage")
    assert _check(folder, MINIMAL).startswith("CFG: face.gallery: DIR/state/gallery.npz: not a gallery file")
    (folder / "blocker").write_text("a file, not a folder")
    assert _check(folder, 'state_dir = "blocker/state"\n' + MINIMAL) == (
        "CFG: state_dir = 'DIR/blocker/state': cannot write there (Not a directory); expected a writable folder "
        "(the outbox, the gallery and the command nonces live there)"
    )


def test_check_names_the_detector_serve_would_run(folder: Path) -> None:
    """face.detector (else models.json's detector, else MTCNN); a BlazeFace detector whose model the folder
    lacks, or a models.json detector that is not one, is refused as serve would refuse it."""
    from edge.daemon.preflight import preflight

    _models_folder(folder)
    assert "face.detector: mtcnn" in preflight(load_config(write(folder, MINIMAL)))
    tiled = MINIMAL.replace('models = "face"', 'models = "face"\ndetector = "blazeface-full-tiled"')
    assert _check(folder, tiled) == (
        "CFG: face.detector: DIR/face/models.json: no model with role 'detector.blazeface_full' for detector "
        "'blazeface-full-tiled'; add it with 'edge-deploy convert blazeface MODELS --range full' "
        "(converters.face.blazeface.add_blazeface), or pass detector_model"
    )
    path = folder / "face" / "models.json"
    data = json.loads(path.read_text())
    (folder / "face" / "bf.onnx").write_bytes(b"bf")
    data["models"].append({"role": "detector.blazeface_full", "file": "bf.onnx", "format": "onnx",
                           "precision": "fp32", "sha256": hashlib.sha256(b"bf").hexdigest(), "size": 2, "source": {}})  # fmt: skip
    path.write_text(json.dumps({**data, "detector": "blazeface-full"}))
    assert "face.detector: blazeface-full (bf.onnx)" in preflight(load_config(write(folder, MINIMAL)))
    assert "face.detector: blazeface-full-tiled (bf.onnx)" in preflight(load_config(write(folder, tiled)))
    path.write_text(json.dumps({**data, "detector": "haar"}))
    assert _check(folder, MINIMAL) == (
        "CFG: face.detector: DIR/face/models.json: detector = 'haar'; expected one of 'mtcnn', 'blazeface', "
        "'blazeface-full', 'blazeface-full-tiled'"
    )


def test_check_runs_from_the_cli(folder: Path, capsys) -> None:
    from edge_deploy.cli import main

    path = write(folder, MINIMAL)
    assert main(["serve", "--config", str(path), "--check"]) == 3
    assert "face.models" in capsys.readouterr().err
    _models_folder(folder)
    assert main(["serve", "--config", str(path), "--check"]) == 0
    assert capsys.readouterr().out.endswith(f"{path}: ok (device {load_config(path).device_id}, source folder)\n")
