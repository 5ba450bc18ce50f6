"""edge/progress.py: numbered step lines everywhere, a bar redrawn in place with an ETA on a terminal only."""

from __future__ import annotations

import io
import os
import re
import select
import time

from edge.progress import Rewritten, StepProgress, counting, tracked


def _read_all(fd: int) -> str:
    chunks = []
    while select.select([fd], [], [], 0.2)[0]:
        data = os.read(fd, 65536)
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode("utf-8")


def test_a_terminal_gets_a_bar_redrawn_with_carriage_returns_and_an_eta():
    main, child = os.openpty()
    stream = os.fdopen(child, "w", encoding="utf-8")
    try:
        progress = StepProgress(total=2, stream=stream, show_after=0)
        assert progress.tty
        progress("comparing the pipelines")
        for _ in tracked(progress, range(5), "pairs"):
            time.sleep(0.12)  # slower than the redraw interval: every item redraws
        progress("report written")
        out = _read_all(main)
    finally:
        stream.close()
        os.close(main)
    # the terminal turns "\n" into "\r\n"
    assert re.search(r"\[1/2 +\d+\.\ds\] comparing the pipelines\r\n", out)
    redraws = out.split("\r\x1b[K")
    assert len(redraws) >= 6  # the empty bar, then one redraw per item
    assert re.search(r"  pairs \[#+-+\] [1-4]/5 +\d+% \d+\.\d/s ETA \d+:\d\d$", redraws[2])
    assert "  pairs [------------------------] 0/5   0% 0.0/s ETA --:--" in out
    assert re.search(r"  pairs \[#{24}\] 5/5 100% \d+\.\d/s in \d+:\d\d\r\n", out)
    assert re.search(r"\[2/2 +\d+\.\ds\] report written\r\n$", out)


def test_a_step_line_printed_during_a_bar_clears_it_and_the_bar_comes_back():
    main, child = os.openpty()
    stream = os.fdopen(child, "w", encoding="utf-8")
    try:
        progress = StepProgress(stream=stream, show_after=0)
        with counting(progress, "windows", 3) as advance:
            advance(1)
            progress("a note in the middle")
            advance(2)
        out = _read_all(main)
    finally:
        stream.close()
        os.close(main)
    note = out.index("a note in the middle")
    assert re.search(r"\r\x1b\[K\[1 +\d+\.\ds\] $", out[:note])
    assert "  windows [########" in out[note:]


def test_a_quick_step_leaves_no_bar_on_the_terminal():
    main, child = os.openpty()
    stream = os.fdopen(child, "w", encoding="utf-8")
    try:
        progress = StepProgress(stream=stream, show_after=60)
        progress("a quick step")
        for _ in tracked(progress, range(50), "items"):
            pass
        progress("next")
        out = _read_all(main)
    finally:
        stream.close()
        os.close(main)
    assert re.fullmatch(r"\[1 +\d+\.\ds\] a quick step\r\n\[2 +\d+\.\ds\] next\r\n", out)


def test_a_log_gets_the_numbered_lines_only():
    log = io.StringIO()
    progress = StepProgress(total=2, stream=log)
    assert not progress.tty
    progress("proving the embedder")
    with counting(progress, "chips", 100) as advance:
        for _ in range(100):
            advance(1)
    progress("done")
    lines = log.getvalue().splitlines()
    assert [re.sub(r"\d+\.\ds", "T", line) for line in lines] == [
        "[1/2    T] proving the embedder",
        "[2/2    T] done",
    ]
    assert "\r" not in log.getvalue()


def test_a_plain_function_gets_step_lines_and_no_bar():
    lines: list[str] = []
    seen = list(tracked(lines.append, ["a", "b"], "items"))
    lines.append("after")
    assert seen == ["a", "b"] and lines == ["after"]


def test_a_rewritten_progress_renames_paths_and_keeps_the_bar(tmp_path):
    log = io.StringIO()
    inner = StepProgress(stream=log)
    say = Rewritten(inner, lambda line: line.replace("/x.partial", "/x"))
    say("report written: /tmp/x.partial/report.md")
    with counting(say, "images", 2) as advance:
        advance(2)
    assert log.getvalue().endswith("report written: /tmp/x/report.md\n")
    assert inner._bar is None  # the bar was made and ended on the wrapped progress


def test_silence_draws_nothing():
    progress = StepProgress(stream=None)
    progress("nothing")
    with counting(progress, "items", 3) as advance:
        advance(3)
    assert progress.step == 1
