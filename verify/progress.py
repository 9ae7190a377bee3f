"""Progress of a run on its error stream: a live bar on a terminal, plain lines in a log.

On a terminal (the stream's `isatty()`) one line is redrawn in place, at most
every LIVE_SECONDS:

    [##########..........]  142/284 cases  3 failed  71.0s  ETA 1m11s

Elsewhere (a CI log, a pipe, a file) a line is printed each time another
STEP_FRACTION of the cases is done, or LINE_SECONDS have passed since the
last line, whichever comes first:

      142/284 cases (50%), 3 failed, 71.0s, ETA 1m11s

Both end with one line for the whole run. The ETA is the cases left times
the wall seconds per case so far (workers included), so it holds for a run
whose cases cost about the same on average from start to end.
"""

import shutil
import sys
import time

LIVE_SECONDS = 0.25  # a terminal's bar is redrawn at most this often
LINE_SECONDS = 30.0  # a log gets a line at least this often while cases come
STEP_FRACTION = 0.05  # ... and one each time this share of the cases is done
BAR_CELLS = 20


def duration(seconds: float) -> str:
    """`42s`, `3m05s` or `2h07m`."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """Counts verdicts as they come (`add`) out of `total`, and shows it on `stream`; `close` writes
    the last line. `live`: redraw a bar in place (default: whether `stream` is a terminal).
    `clock`: seconds, monotonic (time.monotonic by default)."""

    def __init__(self, total: int, stream=sys.stderr, *, live: bool | None = None, clock=time.monotonic):
        if not isinstance(total, int) or total < 0:
            raise ValueError(f"total: expected an integer >= 0, got {total!r}")
        self.total, self.stream, self.clock = total, stream, clock
        self.live = _is_terminal(stream) if live is None else live
        self.done = self.failed = 0
        self.started = self.shown = clock()
        self.next_step = self._step()
        self.closed = False
        if self.live:
            self._draw(self.started)

    def _step(self) -> int:
        """The count at which a log gets its next line."""
        return min(self.total, self.done + max(1, int(self.total * STEP_FRACTION)))

    def add(self, verdict) -> None:
        """One more case judged (`verdict.passed`, `verdict.skipped` count its failure)."""
        self.done += 1
        self.failed += not verdict.passed and not getattr(verdict, "skipped", False)
        now = self.clock()
        if self.live:
            if now - self.shown >= LIVE_SECONDS:
                self._draw(now)
        elif self.done >= self.next_step or now - self.shown >= LINE_SECONDS:
            if self.done < self.total:
                self._line(now)
            self.next_step = self._step()

    def tick(self) -> None:
        """Time passed with no verdict: a terminal's clock moves on (every second), a log gets its
        line every LINE_SECONDS all the same, so a long case does not look like a hang."""
        now = self.clock()
        if self.live and now - self.shown >= 1.0:
            self._draw(now)
        elif not self.live and now - self.shown >= LINE_SECONDS:
            self._line(now)

    def close(self) -> None:
        """The last line: every case counted, the run's wall time (once; later calls do nothing)."""
        if self.closed:
            return
        self.closed = True
        now = self.clock()
        if self.live:
            self._draw(now, end="\n")
        else:
            self._line(now)

    def _eta(self, now: float) -> str:
        if self.done == 0 or self.done >= self.total:
            return ""
        return f"ETA {duration((now - self.started) / self.done * (self.total - self.done))}"

    def _line(self, now: float) -> None:
        share = f" ({100 * self.done // self.total}%)" if self.total else ""
        eta = self._eta(now)
        print(f"  {self.done}/{self.total} cases{share}, {self.failed} failed, {now - self.started:.1f}s"
              + (f", {eta}" if eta else ""), file=self.stream, flush=True)
        self.shown = now

    def _draw(self, now: float, end: str = "") -> None:
        filled = BAR_CELLS * self.done // self.total if self.total else BAR_CELLS
        text = (f"[{'#' * filled}{'.' * (BAR_CELLS - filled)}]  {self.done}/{self.total} cases  "
                f"{self.failed} failed  {now - self.started:.1f}s  {self._eta(now)}").rstrip()
        width = shutil.get_terminal_size((80, 24)).columns - 1
        self.stream.write("\r" + text[:width] + "\x1b[K" + end)
        self.stream.flush()
        self.shown = now


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
