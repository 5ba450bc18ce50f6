"""run_tool: every way an external tool ends badly becomes the caller's typed error, with one output tail."""

from __future__ import annotations

import re
import sys
import time

import pytest

from converters.tools import log_tail, run_tool, side_venv_program
from edge.errors import BundleError, ConversionError, InferenceError, MissingDependencyError


def test_a_tool_that_succeeds_returns_its_output():
    done = run_tool(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], 60, "x", BundleError
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "out\n", "err\n")


def test_a_failing_tool_quotes_the_end_of_its_stderr():
    script = (
        "import sys; print('progress'); print('\\n'.join(f'line {i}' for i in range(30)), file=sys.stderr); sys.exit(3)"
    )
    with pytest.raises(BundleError) as err:
        run_tool([sys.executable, "-c", script], 60, "pip (the wheelhouse)", BundleError)
    assert str(err.value) == "pip (the wheelhouse) exited with 3:\n" + "\n".join(f"    line {i}" for i in range(10, 30))


def test_a_failing_tool_without_stderr_quotes_its_stdout_and_check_false_returns_it():
    argv = ["sh", "-c", "echo only stdout; exit 2"]
    with pytest.raises(ConversionError) as err:
        run_tool(argv, 60, "the tool", ConversionError)
    assert str(err.value) == "the tool exited with 2:\n    only stdout"
    assert run_tool(argv, 60, "the tool", ConversionError, check=False).returncode == 2


def test_a_tool_killed_by_a_signal_says_which():
    with pytest.raises(InferenceError) as err:
        run_tool(["sh", "-c", "kill -SEGV $$"], 60, "run_model.py on emulated cortex-a72", InferenceError)
    assert str(err.value) == "run_model.py on emulated cortex-a72 died of SIGSEGV"


def test_a_missing_program_is_the_typed_error(tmp_path):
    with pytest.raises(ConversionError) as err:
        run_tool([tmp_path / "no-such-tool", "-v"], 60, "onnx2tf (m.onnx)", ConversionError)
    assert str(err.value) == f"onnx2tf (m.onnx): cannot start {tmp_path / 'no-such-tool'} (No such file or directory)"


def test_a_timeout_kills_the_tool_and_its_children(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pid_file}; echo started; wait"
    with pytest.raises(ConversionError) as err:
        run_tool(["sh", "-c", script], 2, "the converter", ConversionError)
    assert str(err.value) == "the converter did not finish within 2 s:\n    started"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10  # the killed child is reaped by init, not by us
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_log_gets_all_output_and_is_quoted(tmp_path):
    log = tmp_path / "tool.log"
    with pytest.raises(ConversionError) as err:
        run_tool(["sh", "-c", "echo one; echo two >&2; exit 1"], 60, "the export", ConversionError, log=log)
    assert str(err.value) == f"the export exited with 1; last lines of {log}:\n    one\n    two"
    assert log.read_text() == "one\ntwo\n"
    with pytest.raises(ConversionError) as err:
        run_tool(["sh", "-c", "exit 1"], 60, "the export", ConversionError, log=log)
    assert str(err.value) == f"the export exited with 1; {log} is empty"


def test_keep_stdout_returns_the_result_record_and_appends_it_to_the_log(tmp_path):
    log = tmp_path / "tool.log"
    done = run_tool(
        ["sh", "-c", "echo chatter >&2; echo '{\"ok\": 1}'"], 60, "x", ConversionError, log=log, keep_stdout=True
    )
    assert done.stdout == '{"ok": 1}\n'
    assert log.read_text() == 'chatter\n{"ok": 1}\n'


def test_log_tail_drops_colour_blank_and_noise_lines_and_cuts_long_ones():
    text = "\x1b[32mINFO\x1b[0m: ready\n\n  \nI1130 noise\n" + "x" * 400 + "\nlast\n"
    assert log_tail(text, noise=re.compile(r"^I\d{4} ")) == "    INFO: ready\n    " + "x" * 300 + "\n    last"
    assert log_tail(text, lines=1) == "    last"


def test_a_side_venv_is_ready_only_with_its_program_and_stamp(tmp_path):
    message = (
        f"{tmp_path}: no ready onnx2tf environment (missing bin/onnx2tf or .edge-deploy-setup); "
        "create it with: bash scripts/setup_onnx2tf.sh"
    )
    with pytest.raises(MissingDependencyError) as err:
        side_venv_program(tmp_path, "onnx2tf", "onnx2tf", "scripts/setup_onnx2tf.sh")
    assert str(err.value) == message
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "onnx2tf").write_text("")
    with pytest.raises(MissingDependencyError) as err:
        side_venv_program(tmp_path, "onnx2tf", "onnx2tf", "scripts/setup_onnx2tf.sh")
    assert str(err.value) == message
    (tmp_path / ".edge-deploy-setup").write_text("x")
    assert side_venv_program(tmp_path, "onnx2tf", "onnx2tf", "scripts/setup_onnx2tf.sh") == tmp_path / "bin" / "onnx2tf"
