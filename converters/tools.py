"""Run an external tool (pip, onnx2tf, a side venv's python, qemu, a script) the one way the host side does.

``run_tool`` starts the tool in its own process group, waits with a timeout, and turns every way it can
end badly — it cannot start, it runs past its timeout (the whole group is killed: onnx2tf and qemu leave
children), it exits non-zero or dies of a signal — into the caller's typed error, whose one message names
the tool's job and quotes the end of its output (``log_tail``). No ``subprocess`` exception reaches the CLI.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from edge.errors import EdgeDeployError, MissingDependencyError

#: Lines of a tool's output quoted in an error.
TAIL_LINES = 20
#: Longest line quoted (a progress bar or a dumped array is cut).
TAIL_LINE_CHARS = 300
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def log_tail(text: str | Path, lines: int = TAIL_LINES, noise: re.Pattern[str] | None = None) -> str:
    """The last ``lines`` non-blank lines of a tool's output, indented, for an error message.

    Args:
        text: the output itself, or the log file it went to.
        lines: how many lines to keep.
        noise: lines matching this pattern are dropped first (a tool's routine chatter).

    Returns:
        The lines, each indented by four spaces, colour codes removed; ``"    (no log)"`` for an
        unreadable file; ``""`` when nothing is left.
    """
    if isinstance(text, Path):
        try:
            text = text.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "    (no log)"
    kept = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    kept = [line for line in kept if line.strip() and not (noise and noise.match(line))]
    return "\n".join("    " + line[:TAIL_LINE_CHARS] for line in kept[-lines:])


def _with_tail(message: str, tail: str, log: Path | None) -> str:
    if log is not None:
        return f"{message}; last lines of {log}:\n{tail}" if tail else f"{message}; {log} is empty"
    return f"{message}:\n{tail}" if tail else message


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"died of {signal.Signals(-returncode).name}"
        except ValueError:
            return f"died of signal {-returncode}"
    return f"exited with {returncode}"


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _wait(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait for ``proc``; False when it ran past ``timeout_s`` (its group is killed then, and on Ctrl-C)."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return False
    except BaseException:  # Ctrl-C: the tool runs in its own session, so nothing else stops it
        _kill_group(proc)
        raise
    return True


def _read(sink: IO[bytes]) -> str:
    sink.seek(0)
    return sink.read().decode("utf-8", errors="replace")


def run_tool(
    argv: Sequence[str | Path],
    timeout_s: float,
    what: str,
    error_type: type[EdgeDeployError],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    keep_stdout: bool = False,
    check: bool = True,
    noise: re.Pattern[str] | None = None,
) -> subprocess.CompletedProcess:
    """Run ``argv`` to its end within ``timeout_s``, and raise ``error_type`` for every way it fails.

    Args:
        argv: the program and its arguments.
        timeout_s: seconds it may run; past them its whole process group is killed.
        what: the job, the subject of the error message (``"onnx2tf on embedder.onnx"``).
        error_type: the typed error to raise (``ConversionError``, ``BundleError``, ...).
        cwd: working directory.
        env: the tool's whole environment (default: this process's).
        log: a file that receives the tool's output as it comes, quoted on failure; without it the
            output is kept in memory and returned.
        keep_stdout: with ``log``, keep stdout apart (returned, and appended to the log at the end): for a
            tool that prints its result on stdout.
        check: raise when the tool exits non-zero or dies of a signal (a timeout raises regardless).
        noise: output lines the quoted tail leaves out (a tool's routine chatter).

    Returns:
        The finished process: ``returncode`` and text ``stdout`` / ``stderr`` (what did not go to ``log``).

    Raises:
        error_type: the tool could not start, ran past ``timeout_s``, or (``check``) failed; the message
            names ``what`` and ends with the last lines of its output.
    """
    argv = [str(a) for a in argv]
    with contextlib.ExitStack() as stack:
        out: IO[bytes] = stack.enter_context(tempfile.TemporaryFile())
        err: IO[bytes] = stack.enter_context(open(log, "wb") if log is not None else tempfile.TemporaryFile())  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out if log is None or keep_stdout else err,
                stderr=err,
                start_new_session=True,
            )
        except OSError as exc:
            raise error_type(f"{what}: cannot start {argv[0]} ({exc.strerror or exc})") from None
        finished = _wait(proc, timeout_s)
        stdout = _read(out)
        stderr = _read(err) if log is None else ""
    if log is not None and stdout:
        with open(log, "a", encoding="utf-8") as sink:
            sink.write(stdout)
    tail = log_tail(log if log is not None else (stderr if stderr.strip() else stdout), noise=noise)
    if not finished:
        raise error_type(_with_tail(f"{what} did not finish within {timeout_s:g} s", tail, log))
    if check and proc.returncode != 0:
        raise error_type(_with_tail(f"{what} {_how_it_ended(proc.returncode)}", tail, log))
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


#: The file ``scripts/side_venv.sh`` writes into a side venv once its set-up has finished and checked.
SETUP_STAMP = ".edge-deploy-setup"


def side_venv_program(venv: Path, program: str, what: str, setup_script: str) -> Path:
    """A program of a ready side venv (onnx2tf's, litert-torch's), or the error that says how to make one.

    Args:
        venv: the venv folder.
        program: the file under ``bin/`` (``"python"``, ``"onnx2tf"``).
        what: the environment's name for the message (``"onnx2tf"``).
        setup_script: the repository script that creates it (``"scripts/setup_onnx2tf.sh"``).

    Returns:
        ``venv/bin/program``.

    Raises:
        MissingDependencyError: the program or the set-up stamp is missing (set-up never ran or failed).
    """
    exe = Path(venv) / "bin" / program
    if not exe.is_file() or not (Path(venv) / SETUP_STAMP).is_file():
        raise MissingDependencyError(
            f"{venv}: no ready {what} environment (missing bin/{program} or {SETUP_STAMP}); "
            f"create it with: bash {setup_script}"
        )
    return exe
