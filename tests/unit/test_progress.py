"""edge/progress.py: numbered step lines everywhere, a bar redrawn in place with an ETA on a terminal only."""

from __future__ import annotations

import io
import json
import os
import re
import select
import time

from edge.progress import Clock, Rewritten, StepProgress, counting, last_step_time, record_step_time, timed, tracked


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
    assert inner._live == []  # the bar was made and ended on the wrapped progress


def test_silence_draws_nothing():
    progress = StepProgress(stream=None)
    progress("nothing")
    with counting(progress, "items", 3) as advance:
        advance(3)
    assert progress.step == 1


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_timed_step_shows_elapsed_the_first_time_and_an_eta_from_the_last_run(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = FakeTerminal()
    with timed(StepProgress(stream=first, show_after=0), "exporting MTCNN", "export mtcnn rpi4"):
        pass
    assert re.fullmatch(
        r"\[1 +\d+\.\ds\] exporting MTCNN\n\r\x1b\[K  0:00 elapsed \(no ETA: first run here\)\r\x1b\[K",
        first.getvalue(),
    )
    times = json.loads((tmp_path / "edge-deploy" / "step-times.json").read_text())
    assert list(times) == ["export mtcnn rpi4"] and times["export mtcnn rpi4"] >= 0
    record_step_time("export mtcnn rpi4", 30)  # as if it had taken 30 s
    second = FakeTerminal()
    with timed(StepProgress(stream=second, show_after=0), "exporting MTCNN", "export mtcnn rpi4"):
        pass
    assert re.search(r"\r\x1b\[K  \[-{24}\] 0:00 of ~0:30, ETA 0:(30|29)\r\x1b\[K$", second.getvalue())
    clock = Clock(None, 30)
    assert clock.line(clock.start + 40).endswith("] 0:40, longer than last time (0:30)")
    assert clock.line(clock.start + 30.4).endswith("] 0:30 of ~0:30, ETA 0:00")  # over by less than a second


def test_a_timed_step_on_a_terminal_is_redrawn_by_its_clock_and_a_bar_inside_hides_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    term = FakeTerminal()
    progress = StepProgress(stream=term, show_after=0)
    with timed(progress, "quantizing", "quantize"):
        while term.getvalue().count("elapsed") < 2:  # the clock's thread redraws it
            time.sleep(0.05)
        with counting(progress, "images", 1) as advance:
            advance(1)
        after_bar = term.getvalue().rsplit("\n", 1)[1]
    assert re.search(r"  images \[#{24}\] 1/1 100% .*\n", term.getvalue())
    assert re.match(r"\r\x1b\[K  \d:\d\d elapsed", after_bar)  # the bar ended: its clock is back
    assert progress._live == []


def test_a_timed_step_in_a_log_prints_its_step_line_only_and_records_its_time(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    log = io.StringIO()
    with timed(StepProgress(stream=log, show_after=0), "exporting", "export"):
        time.sleep(0.01)
    assert re.fullmatch(r"\[1 +\d+\.\ds\] exporting\n", log.getvalue())
    assert last_step_time("export") is not None
    lines: list[str] = []
    with timed(lines.append, "a plain function", "plain"):
        pass
    assert lines == ["a plain function"] and last_step_time("plain") is None


def test_a_failed_step_records_nothing_and_an_unwritable_cache_is_let_be(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    progress = StepProgress(stream=FakeTerminal(), show_after=0)
    try:
        with timed(progress, "failing", "fails"):
            raise ValueError("boom")
    except ValueError:
        pass
    assert last_step_time("fails") is None and progress._live == []
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    with timed(progress, "exporting", "export"):
        pass
    assert last_step_time("export") is None
    (tmp_path / "edge-deploy").mkdir()
    (tmp_path / "edge-deploy" / "step-times.json").write_text("{not json")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert last_step_time("export") is None
    record_step_time("export", 3)
    assert last_step_time("export") == 3
