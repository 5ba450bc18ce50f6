"""The daemon's loop: frames -> face service -> Result reports in the durable outbox; telemetry; commands.

One thread does all the work (frames, commands, text requests, telemetry) so every report is ordered.
Crash safety: a frame's result goes into the outbox with the frame's receipt in the same transaction, and
a frame counts as done only if its receipt is there (``edge.daemon.sources.receipt_key``), so a crash
neither loses a frame nor reports it twice. The loop never waits for the disk: the outbox's writer thread
group-commits results. Background threads only move bytes: the outbox writer, the telemetry link that
drains the outbox, the inbound link that queues commands and requests, an update's download. SIGTERM/SIGINT
set a flag: the loop finishes the frame in hand, stops reading, cancels a download, reports a last
telemetry window, and closes the telemetry client, which commits the outbox and waits up to
``telemetry.flush_timeout_s`` for the broker (what is left is sent after the next start).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge.board import detect_board, read_soc_state
from edge.cpu import int8_kernels
from edge.daemon.commands import Command, CommandRejected, load_secret, verify_command
from edge.daemon.config import DaemonConfig, SourceKind
from edge.daemon.face_service import FaceService
from edge.daemon.listener import Listener, command_topic, text_request_topic
from edge.daemon.sources import Frame, open_source, receipt_key
from edge.daemon.state import StateStore
from edge.daemon.text_service import TextService
from edge.daemon.updater import Finished, Updater
from edge.errors import EdgeDeployError, InputError, TelemetryError
from edge.face.models import read_models_folder
from edge.imageio import DEFAULT_MAX_PIXELS
from edge.telemetry.mqtt import TelemetryClient, TelemetryConfig
from edge.telemetry.schema import BenchReport, Message, Result, Telemetry

log = logging.getLogger("edge.daemon")

TASK_FACES = "face.identify"
TASK_FRAME_ERROR = "face.error"
TASK_REJECTED = "command.rejected"
TASK_DONE = "command.done"
TASK_FAILED = "command.failed"
TASK_ANNOUNCE = "device.announce"
#: Logged at every start while ``broker.allow_insecure = true`` lets a remote broker go without TLS.
INSECURE_WARNING = (
    "broker %s is off this machine and reached WITHOUT TLS (broker.allow_insecure = true): the password, "
    "commands and results cross the network in clear; set broker.tls = true or tls_ca"
)
#: At most this many rejection reports per minute; the rest are logged and counted only.
REJECTIONS_PER_MINUTE = 20
_IDLE_WAIT_S = 0.05
#: How often the loop retries reports held while the disk refused them.
_HELD_WAIT_S = 0.5
#: models.json formats a runtime backend runs (others, e.g. the npz shape predictor, are not benchmarked).
RUNTIME_FORMATS = ("onnx", "ort", "tflite")
#: Dynamic dimensions are benchmarked at batch 1 and this many pixels (MTCNN's P-net takes any image size).
BENCH_DYNAMIC_SIDE = 96


def _bench_shape(shape: tuple) -> tuple[int, ...]:
    """A concrete shape for a model input: dynamic batch -> 1, other dynamic dims -> BENCH_DYNAMIC_SIDE."""
    return tuple(
        d if isinstance(d, int) and d > 0 else (1 if i == 0 else BENCH_DYNAMIC_SIDE) for i, d in enumerate(shape)
    )


@dataclass
class Window:
    """Latencies of the current telemetry window."""

    started: float = field(default_factory=time.monotonic)
    latencies_ms: list[float] = field(default_factory=list)

    def telemetry(self, temperature_c: float | None, running: dict[str, str] | None = None) -> Telemetry:
        """The window as a Telemetry report (latencies 0 when no frame was analysed in it).

        Args:
            temperature_c: SoC temperature, None where unknown.
            running: what runs (``edge.face.models.ModelsFolder.running``), so every heartbeat names it.
        """
        span = max(time.monotonic() - self.started, 1e-6)
        lat = np.asarray(self.latencies_ms or [0.0])
        p50, p90 = (float(v) for v in np.percentile(lat, [50, 90]))
        return Telemetry(
            latency_p50_ms=round(p50, 3),
            latency_p90_ms=round(p90, 3),
            fps=round(len(self.latencies_ms) / span, 3),
            temperature_c=temperature_c,
            window_s=round(span, 3),
            int8_kernels=int8_kernels().kind,
            **(running or {}),
        )


@dataclass
class RunSummary:
    """What one ``Daemon.run`` did (logged at exit, printed by ``edge-deploy serve --json``)."""

    frames: int = 0
    faces: int = 0
    frame_errors: int = 0
    commands: int = 0
    rejected: int = 0
    text_requests: int = 0
    outbox_left: int = 0
    stopped_by: str = ""
    start_s: float = 0.0  # from run() to the first look at the source: bundle check, models, gallery, telemetry
    serve_s: float = 0.0  # the serving loop's wall time (frames, commands, telemetry, idle waits)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view, with ``frames_per_s`` (frames / ``serve_s``; with ``--once`` on a video or a folder
        the loop ends with the source, so this is the daemon's throughput on it)."""
        data = dict(self.__dict__)
        data["start_s"], data["serve_s"] = round(self.start_s, 3), round(self.serve_s, 3)
        data["frames_per_s"] = self.frames_per_s
        return data

    @property
    def frames_per_s(self) -> float | None:
        """frames / ``serve_s`` (3 decimals); None before the loop has run."""
        return round(self.frames / self.serve_s, 3) if self.serve_s > 0 else None


class Daemon:
    """``edge-deploy serve``: run the configured source through the face service until stopped.

    Args:
        config: the validated daemon config.
        once: stop when the source is exhausted (a folder: the files present at start).
    """

    def __init__(self, config: DaemonConfig, once: bool = False) -> None:
        self.config = config
        self._last_read = False  # whether the frame before was read (a video's next frame may follow its faces)
        self.once = once
        self.summary = RunSummary()
        self._stop = threading.Event()
        self._stop_reason = ""
        self._board = detect_board(override=config.target)
        profile_threads = self._board.profile.runtime.threads if self._board.profile else 0
        self._threads = config.face.threads or profile_threads or min(4, os.cpu_count() or 1)
        self._text_threads = config.text.threads or profile_threads or min(4, os.cpu_count() or 1)
        profile = self._board.profile
        self._max_pixels = profile.memory.max_image_pixels if profile else DEFAULT_MAX_PIXELS
        self._secret = load_secret(config.commands.secret_file) if config.commands.secret_file else None
        self._rejections: list[float] = []
        self._held: list[tuple[Message, str | None]] = []
        self._suppressed = 0
        self._announced = False
        #: An accepted update is proven by the next telemetry naming the new bundle (fleet rollout): send it now.
        self._telemetry_now = False

    # -- control --------------------------------------------------------------------------------------

    def request_stop(self, reason: str = "request") -> None:
        """Ask the loop to stop after the frame in hand (safe from a signal handler)."""
        self._stop_reason = self._stop_reason or reason
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the loop cleanly (call from the main thread)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: self.request_stop(signal.Signals(signum).name))

    # -- the run --------------------------------------------------------------------------------------

    def run(self) -> RunSummary:
        """Serve until stopped (or, with ``once``, until the source is exhausted).

        Returns:
            The run's summary.

        Raises:
            BundleError: ``bundle`` is set and its files do not match its manifest.
            InputError: a bad models folder, gallery, source or state file.
            TelemetryError: the outbox can't be written, or the broker refused us for good.
        """
        cfg = self.config
        started = time.monotonic()
        if cfg.broker_insecure and cfg.broker is not None:
            log.warning(INSECURE_WARNING, cfg.broker.address)
        if cfg.bundle is not None:
            from edge.bundle import verify_bundle
            from edge.signing import load_trusted_keys

            # BundleError names the file that does not match, or the bundle and key id of a bad signature
            report = verify_bundle(cfg.bundle, load_trusted_keys(cfg.trusted_keys))
            signed = f", signed by trusted key {report.signed_by}" if report.signed_by else ""
            log.info("bundle %s verified: %d files match manifest.json%s", cfg.bundle, report.files, signed)
        self._state = StateStore(cfg.state_db)
        stack: list[Any] = [self._state]
        try:
            self._client = self._open_telemetry()
            stack.append(self._client)
            self._updater = Updater(cfg, lambda task, data: self._report(Result(task=task, data=data)), self._threads)
            self._updater.on_start()  # finishes or undoes an update a killed run left
            face = dataclasses.replace(cfg.face, models=self._updater.active_models())
            self._face = FaceService(face, self._threads, self._max_pixels)
            stack.append(self._face)
            log.info("gallery: %s (%d people)", self._face.gallery_origin, len(self._face.gallery))
            log.info("face detector: %s (faces scoring < %g not reported)", self._face.detector, self._face.min_score)
            # Who this device is and what it runs: fleet rollouts pick their groups from it (docs/fleet.md).
            self._report(Result(task=TASK_ANNOUNCE, data={"tags": list(cfg.tags), **self._running()}))
            self._text = TextService(dataclasses.replace(cfg.text, model_dir=self._updater.active_text()),
                                     self._text_threads)  # fmt: skip
            stack.append(self._text)
            self._listener = self._open_listener()
            self._source = open_source(cfg.source, self._frame_done, self.once, self._max_pixels)
            stack.append(self._source)
            log.info("serving %s as device %s (%d threads)", self._source.name, cfg.device_id, self._threads)
            serving = time.monotonic()
            self.summary.start_s = serving - started
            try:
                self._loop()
            finally:
                self.summary.serve_s = time.monotonic() - serving
            done = self.summary
            log.info("%d frames in %.1f s of serving (%s frames/s)", done.frames, done.serve_s, done.frames_per_s)
            self._answer_update(self._updater.stop())  # a download under way is cancelled
            self._updater.on_clean_stop()
        finally:
            self._shutdown(stack)
        return self.summary

    def _open_telemetry(self) -> TelemetryClient:
        cfg = self.config
        client = TelemetryClient(
            TelemetryConfig(
                device_id=cfg.device_id,
                outbox_path=cfg.telemetry.outbox,
                broker=cfg.broker,
                prefix=cfg.telemetry.prefix,
                outbox_capacity=cfg.telemetry.outbox_capacity,
                commit_interval_s=cfg.telemetry.commit_interval_s,
                require_subscriber=cfg.telemetry.require_subscriber,
            )
        )
        if cfg.broker is None:
            log.info("no [broker] configured: reports wait in the outbox %s", cfg.telemetry.outbox)
        elif not client.connect(timeout=min(5.0, cfg.broker.connect_timeout_s)):
            log.warning("broker %s not reachable yet (%s); retrying in the background, reports wait in the "
                        "outbox", cfg.broker.address, client.health().last_error)  # fmt: skip
        return client

    def _open_listener(self) -> Listener | None:
        cfg = self.config
        if cfg.broker is None:
            return None
        topics = (
            command_topic(cfg.telemetry.prefix, cfg.device_id),
            text_request_topic(cfg.telemetry.prefix, cfg.device_id),
        )
        listener = Listener(cfg.broker, f"edge-deploy-{cfg.device_id}-inbound", topics)
        listener.start(timeout=0.0)  # connects in the background; "listening for commands" is logged then
        return listener

    def _frame_done(self, source: str, key: str) -> bool:
        return self._client.reported(receipt_key(source, key))

    def _loop(self) -> None:
        cfg = self.config
        window = Window()
        next_telemetry = time.monotonic() + cfg.telemetry.interval_s
        min_gap = 1.0 / cfg.source.max_fps if cfg.source.max_fps > 0 else 0.0
        next_frame_at = 0.0
        while not self._stop.is_set():
            self._client.check()
            self._answer_update(self._updater.tick())
            if self._held and not self._release_held():
                self._stop.wait(_HELD_WAIT_S)
                continue
            self._handle_inbound()
            now = time.monotonic()
            if now >= next_telemetry or self._telemetry_now:
                self._report(window.telemetry(read_soc_state().temperature_c, self._running()))
                window, next_telemetry, self._telemetry_now = Window(), now + cfg.telemetry.interval_s, False
            if cfg.source.max_frames and self.summary.frames >= cfg.source.max_frames:
                self._source.exhausted = True
            frame = None
            if now >= next_frame_at and not self._source.exhausted:
                frame = self._source.next_frame()
            if frame is None:
                if self._source.exhausted and self.once:
                    self.request_stop("source exhausted (--once)")
                    break
                self._stop.wait(_IDLE_WAIT_S)
                continue
            next_frame_at = now + min_gap
            window.latencies_ms.append(self._process(frame))
        self.summary.stopped_by = self._stop_reason
        if window.latencies_ms:
            self._report(window.telemetry(read_soc_state().temperature_c, self._running()))

    def _running(self) -> dict[str, str]:
        """What runs now (every heartbeat names it; an update changes it)."""
        return read_models_folder(self._face.settings.models).running()

    def _report(self, message: Message, key: str | None = None) -> Message:
        """Store a report; while the disk refuses (full, read-only) hold it in memory instead of failing.

        While anything is held the loop takes no new frame or message (so what is held stays small) and
        retries; a crash meanwhile loses nothing that was not already refused: a held frame has no receipt
        and is analysed again after the restart.
        """
        if not self._held:
            try:
                return self._client.report(message, key=key)
            except TelemetryError:
                error = self._client.storage_error
                if error is None:
                    raise
                log.error("%s; frames and messages wait until the disk takes reports again", error)
        self._held.append((message, key))
        return message

    def _release_held(self) -> bool:
        """Store what waited while the disk refused; True when nothing waits any more."""
        while self._held:
            if self._client.storage_error is not None:
                return False
            message, key = self._held[0]
            try:
                self._client.report(message, key=key)
            except TelemetryError:
                if self._client.storage_error is None:
                    raise
                return False
            self._held.pop(0)
        log.info("the outbox stores reports again; going on")
        return True

    def _process(self, frame: Frame) -> float:
        """Analyse one frame and store its result durably; return the latency in ms."""
        t0 = time.perf_counter()
        data: dict[str, Any] = {"frame_id": frame.frame_id, **frame.meta}
        task = TASK_FACES
        # A video's or a camera's frames follow one another (face.detect_every); a folder's images do not, and
        # after a frame that could not be read the next one is detected afresh.
        follow = self.config.source.kind is not SourceKind.FOLDER and self._last_read
        self._last_read = frame.rgb is not None
        if frame.rgb is None:
            task, data["error"] = TASK_FRAME_ERROR, frame.error
        else:
            try:
                faces = self._face.recognize(frame.rgb, follow=follow)
                data.update(faces=faces, width=int(frame.rgb.shape[1]), height=int(frame.rgb.shape[0]))
            except EdgeDeployError as exc:  # one bad frame must not stop the daemon
                task, data["error"] = TASK_FRAME_ERROR, str(exc)
                self._last_read = False
        if task == TASK_FACES:
            self.summary.faces += len(data["faces"])
        else:
            self.summary.frame_errors += 1
            log.warning("frame %s: %s", frame.frame_id, data["error"])
        latency_ms = (time.perf_counter() - t0) * 1000.0
        data["latency_ms"] = round(latency_ms, 3)
        # A durable source's frame is done once this result (with its receipt) is committed; a live camera
        # remembers nothing.
        key = None if frame.source is None else receipt_key(frame.source, frame.key)
        self._report(Result(task=task, data=data), key=key)
        self.summary.frames += 1
        log.debug("frame %s: %s", frame.frame_id, task)
        return latency_ms

    # -- inbound: commands and text requests ---------------------------------------------------------------

    def _handle_inbound(self) -> None:
        listener = self._listener
        if listener is None:
            return
        listener.check()
        if listener.subscribed and not self._announced:
            self._announced = True
            log.info("listening for commands on %s", ", ".join(listener.topics))
        for _ in range(10):  # bounded per turn: frames keep flowing during a flood
            msg = listener.get()
            if msg is None:
                return
            if msg.topic == listener.topics[0]:
                self._on_command(msg.payload)
            else:
                self.summary.text_requests += 1
                task, data = self._text.answer(msg.payload)
                if task != "text.reply":
                    log.warning("text request %s: %s", data.get("id"), data.get("error"))
                self._report(Result(task=task, data=data))

    def _on_command(self, payload: bytes) -> None:
        cfg = self.config.commands
        try:
            command = verify_command(
                payload,
                self._secret,
                self.config.device_id,
                cfg.max_skew_s,
                lambda nonce, ts: self._state.claim_nonce(nonce, ts, 2 * cfg.max_skew_s + 60),
            )
        except CommandRejected as exc:
            self._reject(exc)
            return
        except InputError as exc:  # the nonce could not be recorded (a full disk): refuse, never obey unrecorded
            self._reject(CommandRejected(f"cannot record the command's nonce: {exc}"))
            return
        self.summary.commands += 1
        log.info("command %s (nonce %s) accepted", command.name, command.nonce)
        try:
            data = self._execute(command)
        except EdgeDeployError as exc:
            self._answer(command.name, command.nonce, error=exc)
            return
        if data is not None:  # None: an update, answered when it ends (_answer_update)
            self._answer(command.name, command.nonce, data)

    def _answer(self, cmd: str, nonce: str, data: dict | None = None, error: EdgeDeployError | None = None) -> None:
        """Report how a command ended: ``command.done`` with ``data``, or ``command.failed`` with ``error``."""
        base = {"cmd": cmd, "nonce": nonce}
        if error is not None:
            log.error("command %s (nonce %s) failed: %s", cmd, nonce, error)
            self._report(Result(task=TASK_FAILED, data={**base, "error": str(error)}))
        else:
            self._report(Result(task=TASK_DONE, data={**base, **(data or {})}))

    def _answer_update(self, finished: Finished | None) -> None:
        if finished is not None:  # an update command ended (Updater.tick / stop)
            self._answer("update", finished.nonce, finished.data, finished.error)
            # The next telemetry names the new bundle at once: a rollout takes it as the proof of acceptance.
            if (finished.data or {}).get("outcome") == "accepted":
                self._telemetry_now = True

    def _reject(self, exc: CommandRejected) -> None:
        self.summary.rejected += 1
        log.warning("command rejected: %s", exc.reason)
        now = time.monotonic()
        self._rejections = [t for t in self._rejections if now - t < 60.0]
        if len(self._rejections) >= REJECTIONS_PER_MINUTE:
            self._suppressed += 1
            return
        self._rejections.append(now)
        data = {"reason": exc.reason, "cmd": exc.cmd, "nonce": exc.nonce, "suppressed_before": self._suppressed}
        self._suppressed = 0
        self._report(Result(task=TASK_REJECTED, data=data))

    def _execute(self, command: Command) -> dict[str, Any] | None:
        if command.name == "bench":
            return self._bench(command.args)
        if command.name == "reload":
            return self._face.reload()
        if command.name == "update":  # downloads in the background; the loop goes on
            self._updater.begin(command.args, command.nonce, self._face.use_models, self._text.use_model_dir)
            return None
        return self._face.enroll()

    def _bench(self, args: dict[str, Any]) -> dict[str, Any]:
        from edge.bench import make_inputs, run_bench
        from edge.runtime import open_model

        cfg = self.config.commands
        runs = args.get("runs", cfg.bench_runs)
        if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= cfg.max_bench_runs:
            raise InputError(f"bench: runs = {runs!r}; expected a whole number in 1..{cfg.max_bench_runs}")
        face = read_models_folder(self.config.face.models)
        role = args["role"] if "role" in args else face.embedder_role  # noqa: SIM401 - the one it runs, read only then
        entries = face.entries
        runnable = sorted(r for r, e in entries.items() if e.format in RUNTIME_FORMATS)
        if role not in runnable:
            raise InputError(f"bench: role = {role!r}; expected one of {', '.join(runnable)}")
        path = self.config.face.models / entries[role].file
        with open_model(path, threads=self._threads) as model:
            shapes = {s.name: _bench_shape(s.shape) for s in model.inputs}
            result = run_bench(model, make_inputs(model.inputs, shapes), count=runs, warmup=2, board=self._board)
        stored = self._report(
            BenchReport(
                model=f"{role}:{path.name}",
                backend=result.backend,
                runs=result.runs,
                first_ms=round(result.first_ms, 4),
                p50_ms=round(result.stats.p50, 4),
                p90_ms=round(result.stats.p90, 4),
                profile=self._board.profile.name if self._board.profile else "",
                int8_kernels=result.int8_kernels.kind if result.int8_kernels else "",
            )
        )
        return {"bench_seq": stored.seq, "p50_ms": round(result.stats.p50, 4)}

    # -- shutdown ---------------------------------------------------------------------------------------

    def _shutdown(self, stack: list[Any]) -> None:
        listener = getattr(self, "_listener", None)
        if listener is not None:
            listener.stop(2.0)
        for part in reversed(stack):
            if isinstance(part, TelemetryClient):
                self.summary.outbox_left = part.close(self.config.telemetry.flush_timeout_s)
                log.info("telemetry closed: %d reports left in the outbox", self.summary.outbox_left)
            else:
                part.close()
