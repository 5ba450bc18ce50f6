"""``edge-deploy serve --check``: everything ``serve`` would refuse at start, found without starting it.

``load_config`` checks the config file itself (keys, types, ranges); this checks the files it names: the
command secret (mode 600, long enough), the models folder (``models.json`` with every face role, each file
present and matching its sha256), the gallery (a valid gallery file), the bundle (its manifest), and that
``state_dir`` can be written. Each error names the config file and key.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from edge.daemon.config import DaemonConfig
from edge.errors import EdgeDeployError, InputError


def _state_dir_writable(where: str, state_dir: Path) -> None:
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=state_dir, prefix=".edge-deploy-check-"):
            pass
    except OSError as exc:
        raise InputError(
            f"{where}: state_dir = '{state_dir}': cannot write there ({exc.strerror}); expected a writable folder "
            "(the outbox, the gallery and the command nonces live there)"
        ) from None


def _named(where: str, key: str, exc: EdgeDeployError) -> InputError:
    text = str(exc)
    return InputError(f"{where}: {text}" if text.startswith(key) else f"{where}: {key}: {text}")


def _trusted_keys(where: str, config: DaemonConfig) -> tuple:
    from edge.signing import load_trusted_keys

    try:
        return load_trusted_keys(config.trusted_keys)
    except InputError as exc:
        raise _named(where, "trusted_keys", exc) from None


def preflight(config: DaemonConfig) -> list[str]:
    """Check every file the config names as ``serve`` will use it.

    Returns:
        One line per thing checked, for ``--check`` to print.

    Raises:
        InputError: naming the config file, the key and what is wrong (the first problem found).
        BundleError: the configured bundle does not match its manifest.
    """
    from edge.daemon.commands import load_secret
    from edge.face.gallery import Gallery
    from edge.face.models import FACE_ROLES, read_models_folder
    from edge.face.types import DLIB_DESCRIPTOR_SIZE

    where = str(config.source_file)
    done = []
    if config.commands.secret_file is not None:
        try:
            load_secret(config.commands.secret_file)
        except InputError as exc:
            raise _named(where, "commands.secret_file", exc) from None
        done.append(f"commands.secret_file: {config.commands.secret_file} (mode 600)")
    try:
        face = read_models_folder(config.face.models)
        for role in FACE_ROLES:
            face.model_path(role)
    except InputError as exc:
        raise _named(where, "face.models", exc) from None
    done.append(f"face.models: {config.face.models} ({len(FACE_ROLES)} models)")
    try:  # the detector serve will run: face.detector, else the folder's; a BlazeFace one needs its model
        detector = config.face.detector or face.detector
        file = face.detector_file(detector)
    except InputError as exc:
        raise _named(where, "face.detector", exc) from None
    done.append(f"face.detector: {detector.value}" + (f" ({file.name})" if file else ""))
    if config.face.gallery.is_file():
        try:
            recognition = face.recognition or {}
            size = int(recognition.get("descriptor_size", DLIB_DESCRIPTOR_SIZE))
            people = len(Gallery.load(config.face.gallery, size))
        except InputError as exc:
            raise _named(where, "face.gallery", exc) from None
        done.append(f"face.gallery: {config.face.gallery} ({people} people)")
    if config.broker_insecure and config.broker is not None:
        done.append(f"WARNING: broker {config.broker.address} without TLS (broker.allow_insecure = true)")
    trusted = _trusted_keys(where, config)
    if trusted:
        done.append(f"trusted_keys: {', '.join(k.key_id for k in trusted)}")
    if config.bundle is not None:
        from edge.bundle import verify_bundle

        report = verify_bundle(config.bundle, trusted)
        signed = f", signed by {report.signed_by}" if report.signed_by else ""
        done.append(f"bundle: {config.bundle} ({report.files} files match{signed})")
    _state_dir_writable(where, config.state_dir)
    done.append(f"state_dir: {config.state_dir} (writable)")
    for path in (config.telemetry.outbox, config.state_db):
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise InputError(f"{where}: {path}: not readable and writable; expected the daemon's own file")
    return done
