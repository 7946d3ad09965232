"""Progress of long jobs: a bar on a terminal, a log line every so often elsewhere.

`Progress` draws one line in place on a terminal (bar, done/total, rate, time left),
else logs every `log_interval_s` seconds; `close` reports the time taken and mean rate.
"""

import sys
import time
from collections.abc import Callable
from typing import TextIO

from absl import logging

DEFAULT_LOG_INTERVAL_S = 30.0
"""Seconds between log lines when the stream is not a terminal."""
DRAW_INTERVAL_S = 0.25
"""Seconds between redraws of the terminal bar."""
_BAR_WIDTH = 30


def format_duration(seconds: float) -> str:
    """`seconds` as M:SS, or H:MM:SS from an hour on."""
    seconds = int(max(seconds, 0.0))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{seconds:02d}"
    return f"{minutes}:{seconds:02d}"


class Progress:
    """Reports how far a job of known size has come.

    Args:
        what: What is being done, the start of every line ("Converting").
        total: Units of work in all (0 for none); None: unknown (no fraction, no time left).
        unit: Name of the shown unit ("MB", "chars", "texts").
        scale: Units of work per shown unit (1e6 to count bytes and show MB).
        log_interval_s: Seconds between log lines when not on a terminal.
        enabled: False reports nothing at all.
        stream: Where the terminal bar goes; None for `sys.stderr`.
        terminal: Draw a bar (True) or log (False); None asks `stream.isatty()`.
        clock: Seconds from a fixed start (`time.monotonic`).

    Raises:
        ValueError: If `total` is negative or `log_interval_s` or `scale` is not positive.

    Example:
    >>> import itertools
    >>> from tf_mlstm.progress import Progress
    >>> clock = itertools.count(0.0, 2.0).__next__  # two seconds a reading
    >>> with Progress("Converting", 4e6, "MB", scale=1e6, terminal=False, clock=clock) as report:
    ...     report.update(2e6, records=12)
    ...     print(report.fraction(), report.status(now=4.0))
    0.5 Converting: 2.0/4.0 MB (50%), 0.5 MB/s, 0:04 left; 12 records
    """

    def __init__(
        self,
        what: str,
        total: float | None,
        unit: str,
        *,
        scale: float = 1.0,
        log_interval_s: float = DEFAULT_LOG_INTERVAL_S,
        enabled: bool = True,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if total is not None and total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        if log_interval_s <= 0 or scale <= 0:
            raise ValueError(
                f"log_interval_s and scale must be positive, got {log_interval_s}, {scale}"
            )
        self.what = what
        self.total = total
        self.unit = unit
        self.scale = scale
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.done = 0.0
        self.counts: dict[str, object] = {}
        self._clock = clock
        self._start = clock()
        self._interval = DRAW_INTERVAL_S if self.terminal else log_interval_s
        self._next = self._start + self._interval
        self._drawn = 0  # Characters of the bar line on screen, to blank when it shrinks.
        self._closed = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def update(self, done: float, **counts) -> None:
        """Sets the work done so far; reports if it is time to.

        Args:
            done: Units of work done since the start.
            **counts: Other counts to show after the figures (`records=12`: "12 records").
        """
        self.done = done
        if counts:
            self.counts = counts
        if not self.enabled or self._closed:
            return
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self._interval
        self._report(self.status(now))

    def advance(self, amount: float, **counts) -> None:
        """Adds `amount` units to the work done (see `update`)."""
        self.update(self.done + amount, **counts)

    def close(self) -> None:
        """Reports the final line (once); on a terminal, ends the bar's line."""
        if self._closed:
            return
        self._closed = True
        if self.enabled:
            self._report(self.status(self._clock(), final=True), final=True)

    def status(self, now: float, final: bool = False) -> str:
        """The text of a progress line at time `now` (the end's, if `final`)."""
        elapsed = max(now - self._start, 0.0)
        rate = self.done / elapsed if elapsed > 0 else 0.0
        parts = [self._amounts()]
        if final:
            parts.append(f"in {format_duration(elapsed)}")
        parts.append(f"{self._shown(rate)} {self.unit}/s")
        if not final and self.total is not None and rate > 0:
            left = max(self.total - self.done, 0) / rate
            parts.append(f"{format_duration(left)} left")
        text = f"{self.what}: {', '.join(parts)}"
        if self.counts:
            text += "; " + ", ".join(
                f"{_number(value)} {name}" for name, value in self.counts.items()
            )
        return text

    def fraction(self) -> float | None:
        """The share of the work done, in [0, 1]; None if the total is unknown."""
        if self.total is None:
            return None
        if self.total == 0:
            return 1.0
        return min(max(self.done / self.total, 0.0), 1.0)

    def _amounts(self) -> str:
        if self.total is None:
            return f"{self._shown(self.done)} {self.unit}"
        return (
            f"{self._shown(self.done)}/{self._shown(self.total)} {self.unit} "
            f"({100 * self.fraction():.0f}%)"
        )

    def _shown(self, amount: float) -> str:
        if self.scale == 1:
            return f"{amount:,.0f}"
        return f"{amount / self.scale:,.1f}"

    def _report(self, text: str, final: bool = False) -> None:
        if not self.terminal:
            logging.info("%s", text)
            return
        fraction = self.fraction()
        if fraction is not None:
            filled = int(_BAR_WIDTH * fraction)
            text = f"[{'=' * filled}{'.' * (_BAR_WIDTH - filled)}] {text}"
        padding = " " * max(self._drawn - len(text), 0)
        self._drawn = len(text)
        self.stream.write(f"\r{text}{padding}" + ("\n" if final else ""))
        self.stream.flush()


def byte_unit(total: float) -> tuple[str, float]:
    """The unit and scale to show `total` bytes in: MB, or kB below one MB."""
    return ("MB", 1e6) if total >= 1e6 else ("kB", 1e3)


def _number(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)
