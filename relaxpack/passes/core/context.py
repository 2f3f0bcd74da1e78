"""PassContext: the settings and instruments a pipeline runs under.

>>> with PassContext(opt_level=2, instruments=[PassTiming()]) as ctx:   # doctest: +SKIP
...     mod = pipeline(mod)
...     print(ctx.instruments[0].render())
"""

from __future__ import annotations

import threading
from typing import Sequence

_LOCAL = threading.local()


class PassContext:
    """Settings for running passes: opt level, instruments, debug checks.

    ``check_well_formed=True`` runs the well-formedness checker after every
    pass. ``history`` lists the passes that ran, in order, so an error can
    name them.
    """

    def __init__(self, opt_level: int = 2, instruments: Sequence["PassInstrument"] = (),
                 check_well_formed: bool = False, disabled_passes: Sequence[str] = (),
                 config: dict | None = None):
        self.opt_level = opt_level
        self.instruments = list(instruments)
        if check_well_formed:
            from .instruments import WellFormedCheck
            self.instruments.append(WellFormedCheck())
        self.disabled_passes = frozenset(disabled_passes)
        self.config = dict(config or {})
        self.history: list[str] = []
        #: pass -> the functions it last returned unchanged: given the very same
        #: functions again (a pipeline runs Canonicalize four times), it is not rerun
        self.unchanged: dict[int, dict] = {}
        self._depth = 0

    @staticmethod
    def current() -> "PassContext":
        stack = getattr(_LOCAL, "stack", None)
        if not stack:
            _LOCAL.stack = stack = [PassContext()]
        return stack[-1]

    def __enter__(self) -> "PassContext":
        if not hasattr(_LOCAL, "stack"):
            _LOCAL.stack = [PassContext()]
        _LOCAL.stack.append(self)
        for inst in self.instruments:
            inst.enter_pass_ctx(self)
        return self

    def __exit__(self, *exc) -> None:
        for inst in self.instruments:
            inst.exit_pass_ctx(self)
        _LOCAL.stack.pop()


class PassInstrument:
    """Hooks called around every pass run under a :class:`PassContext`."""

    def enter_pass_ctx(self, ctx: PassContext) -> None:
        pass

    def exit_pass_ctx(self, ctx: PassContext) -> None:
        pass

    def should_run(self, mod, info) -> bool:
        return True

    def run_before_pass(self, mod, info) -> None:
        pass

    def run_after_pass(self, mod, info) -> None:
        pass
