"""Pass instruments: timing, IR dumps, well-formedness checks after each pass."""

from __future__ import annotations

import re
import time
from pathlib import Path

from ...errors import PassError
from ...runtime.safe_write import write_file
from .context import PassContext, PassInstrument


class PassTiming(PassInstrument):
    """Records the wall time of every pass run (in order, with repeats)."""

    def __init__(self):
        self.timings: list[tuple[str, float]] = []
        self._start: list[float] = []

    def run_before_pass(self, mod, info):
        self._start.append(time.perf_counter())

    def run_after_pass(self, mod, info):
        self.timings.append((info.name, time.perf_counter() - self._start.pop()))

    def render(self) -> str:
        total = sum(t for _, t in self.timings)
        width = max((len(n) for n, _ in self.timings), default=4)
        lines = [f"{name:<{width}}  {seconds * 1e3:9.3f} ms" for name, seconds in self.timings]
        lines.append(f"{'total':<{width}}  {total * 1e3:9.3f} ms")
        return "\n".join(lines)


class DumpIR(PassInstrument):
    """Writes the module's text after every pass: ``NNN_<PassName>.py`` in ``folder``.

    The first file, ``000_input.py``, is the module before the first pass.
    """

    def __init__(self, folder: str | Path, show_meta: bool = False):
        self.folder = Path(folder)
        self.show_meta = show_meta
        self.count = 0

    def enter_pass_ctx(self, ctx):
        self.folder.mkdir(parents=True, exist_ok=True)

    def run_before_pass(self, mod, info):
        if self.count == 0:
            self._write(mod, "input")

    def run_after_pass(self, mod, info):
        self._write(mod, info.name)

    def _write(self, mod, name: str) -> None:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        path = self.folder / f"{self.count:03d}_{safe}.py"
        write_file(path, [mod.script(show_meta=self.show_meta).encode()])
        self.count += 1


class PrintAfter(PassInstrument):
    """Collects the module's text after each pass whose name is in ``names``."""

    def __init__(self, names, sink=None):
        self.names = set(names)
        self.texts: list[tuple[str, str]] = []
        self.sink = sink

    def run_after_pass(self, mod, info):
        if info.name in self.names:
            text = mod.script(show_meta=False)
            self.texts.append((info.name, text))
            if self.sink is not None:
                self.sink(info.name, text)


def _same_functions(a, b) -> bool:
    """The modules hold the very same function objects (their attributes may differ)."""
    fa, fb = a.functions, b.functions
    return a is b or (fa.keys() == fb.keys() and all(fa[k] is fb[k] for k in fa))


class WellFormedCheck(PassInstrument):
    """Checks the module after every pass; an error names the passes that ran.
    Inferences of calls that a pass left alone carry over to the next check,
    and a pass that returns the very functions it was given (most passes, on
    most models) is not checked again: they are the functions checked last."""

    def __init__(self):
        self.memo: dict = {}
        self.last = None

    def run_after_pass(self, mod, info):
        from ...ir.well_formed import well_formed_errors
        if self.last is not None and _same_functions(mod, self.last):
            return
        errors = well_formed_errors(mod, self.memo)
        if errors:
            ran = ", ".join(PassContext.current().history) or "(none)"
            raise PassError(f"module is not well formed after pass {info.name} "
                            f"(passes run: {ran}):\n  " + "\n  ".join(errors))
        self.last = mod