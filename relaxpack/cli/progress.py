"""Progress of long commands on the terminal: a status line rewritten in place
and lines that stay (a finished stage, a checked sample, a timed round).

Shown only when both stdout and stderr are terminals: piped or redirected
output (scripts, CI logs, tests) gets nothing from here. Written to stderr,
so the command's own output on stdout stays as it is. Standard library only.

>>> with Progress() as progress:              # doctest: +SKIP
...     progress.status("optimize: FoldConstant")
...     progress.line("optimize  424 ms")
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

_CLEAR = "\r\x1b[K"   # back to the line's start, erase to its end


def terminal_output() -> bool:
    """Whether stdout and stderr are both terminals."""
    return _is_tty(sys.stdout) and _is_tty(sys.stderr)


def _is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):   # replaced by an object without isatty, or closed
        return False


class Progress:
    """A status line and finished lines on ``stream`` (stderr), or nothing when not on a terminal."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = terminal_output() if enabled is None else enabled
        self._shown = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.clear()

    def status(self, text: str) -> None:
        """Replace the status line with ``text`` (cut to the terminal's width)."""
        if not self.enabled:
            return
        width = max(shutil.get_terminal_size((80, 24)).columns - 1, 10)
        self.stream.write(_CLEAR + text[:width])
        self.stream.flush()
        self._shown = True

    def line(self, text: str) -> None:
        """A line that stays above the status line."""
        if not self.enabled:
            return
        self.stream.write(_CLEAR + text + "\n")
        self.stream.flush()
        self._shown = False

    def clear(self) -> None:
        if self.enabled and self._shown:
            self.stream.write(_CLEAR)
            self.stream.flush()
            self._shown = False


class Stages:
    """Times named stages one after another, showing each as it runs and as it ends:
    ``with stages("import"): ...`` prints ``import        125 ms`` when it is done."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.seconds: dict[str, float] = {}
        self.current = ""      # the stage running

    def __call__(self, name: str) -> "_Stage":
        return _Stage(self, name)


class _Stage:
    def __init__(self, stages: Stages, name: str):
        self.stages, self.name = stages, name

    def __enter__(self):
        self.stages.current = self.name
        self.stages.progress.status(f"{self.name} ...")
        self.start = time.perf_counter()
        return self

    def __exit__(self, exc_type, *exc):
        seconds = time.perf_counter() - self.start
        self.stages.seconds[self.name] = self.stages.seconds.get(self.name, 0.0) + seconds
        if exc_type is None:
            self.stages.progress.line(f"  {self.name:<14} {seconds * 1e3:8.0f} ms")


__all__ = ["Progress", "Stages", "terminal_output"]
