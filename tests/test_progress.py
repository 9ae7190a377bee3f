"""A run's progress: a bar redrawn in place on a terminal, plain lines in a log, an ETA in both."""

import io

import pytest

from verify import gate, progress
from verify.verdict import Verdict


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


def passed(k=0):
    return Verdict("s", f"s-{k}", True, 0.0, 0.0, 1.0, 0.0)


def failed(k=0):
    return gate.failed("s", f"s-{k}", "out: 3 elements not written")


def test_a_log_gets_a_line_every_five_percent_and_after_thirty_quiet_seconds():
    clock, log = Clock(), io.StringIO()
    shown = progress.Progress(100, log, clock=clock)
    assert not shown.live and log.getvalue() == ""
    for k in range(4):
        clock.now += 1.0
        shown.add(failed(k) if k == 1 else passed(k))
    assert log.getvalue() == ""
    clock.now += 1.0
    shown.add(passed())
    assert log.getvalue() == "  5/100 cases (5%), 1 failed, 5.0s, ETA 1m35s\n"
    clock.now += 30.0
    shown.tick()  # no verdict for 30 s: a line all the same
    assert log.getvalue().splitlines()[-1] == "  5/100 cases (5%), 1 failed, 35.0s, ETA 11m05s"
    clock.now += 1.0
    shown.add(passed())
    assert len(log.getvalue().splitlines()) == 2
    for k in range(94):
        shown.add(passed(k))
    shown.close()
    shown.close()
    lines = log.getvalue().splitlines()
    assert lines[-1] == "  100/100 cases (100%), 1 failed, 36.0s"
    assert len(lines) == 21  # every 5 cases, and the 30 s line
    assert "\r" not in log.getvalue()


def test_a_terminal_gets_one_bar_redrawn_at_most_four_times_a_second():
    clock, screen = Clock(), Terminal()
    shown = progress.Progress(8, screen, clock=clock)
    assert shown.live and screen.getvalue().startswith("\r[....................]  0/8 cases  0 failed")
    for k in range(4):
        clock.now += 0.1  # too soon for a redraw
        shown.add(failed(k) if k == 0 else passed(k))
    assert screen.getvalue().count("\r") == 2  # the first draw, and one after 0.25 s
    clock.now += 0.3
    shown.add(passed())
    last = screen.getvalue().split("\r")[-1]
    assert last.startswith("[############........]  5/8 cases  1 failed  0.7s  ETA 0s") and last.endswith("\x1b[K")
    for k in range(3):
        clock.now += 10.0
        shown.add(passed(k))
    shown.close()
    assert screen.getvalue().endswith("[####################]  8/8 cases  1 failed  30.7s\x1b[K\n")
    assert screen.getvalue().count("\n") == 1


def test_skipped_cases_are_no_failures_and_durations_read_well():
    log = io.StringIO()
    shown = progress.Progress(1, log)
    shown.add(gate.skipped("s", "s-1", "torch supports path in ('auto',)"))
    shown.close()
    assert "1/1 cases (100%), 0 failed" in log.getvalue()
    assert [progress.duration(s) for s in (4.4, 65, 3599, 7620)] == ["4s", "1m05s", "59m59s", "2h07m"]
    with pytest.raises(ValueError, match="total: expected an integer >= 0, got -1"):
        progress.Progress(-1, log)
