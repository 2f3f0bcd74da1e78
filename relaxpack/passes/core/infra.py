"""Passes: module- and function-level transforms, and pipelines of them.

A pass maps an :class:`IRModule` to an :class:`IRModule`. It declares its
name, the opt level it belongs to, the stages it accepts and the stage it
leaves the module in; the pass manager checks them and calls the
instruments of the current :class:`PassContext` around every run.

>>> @function_pass(name="RemoveNothing", opt_level=0)          # doctest: +SKIP
... def remove_nothing(func, mod, ctx):
...     return func
>>> mod = Sequential([remove_nothing])(mod)                     # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ...errors import PassError
from ...ir.expr import Function
from ...ir.module import STAGES, IRModule
from .context import PassContext


@dataclass(frozen=True)
class PassInfo:
    name: str
    opt_level: int = 0
    requires: tuple[str, ...] = ()   # stages the pass accepts; () = any
    produces: str | None = None      # the stage the module is in afterwards

    def __post_init__(self):
        for stage in (*self.requires, *([self.produces] if self.produces else [])):
            if stage not in STAGES:
                raise PassError(f"pass {self.name}: unknown stage {stage!r}; stages are {STAGES}")


class Pass:
    """Base of all passes. Subclasses implement :meth:`transform`."""

    info: PassInfo

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return self.info.name

    def __call__(self, mod: IRModule) -> IRModule:
        ctx = PassContext.current()
        if not self._enabled(ctx) or not all(i.should_run(mod, self.info) for i in ctx.instruments):
            return mod
        if self.info.requires and mod.stage not in self.info.requires:
            raise PassError(f"pass {self.name} needs a module at stage {'/'.join(self.info.requires)}, "
                            f"this one is at stage {mod.stage!r}")
        for inst in ctx.instruments:
            inst.run_before_pass(mod, self.info)
        seen = ctx.unchanged.get(id(self))
        if seen is not None and _same_functions(seen, mod.functions):
            result = mod        # it left these very functions alone before (passes are deterministic)
        else:
            result = self.transform(mod, ctx)
        if not isinstance(result, IRModule):
            raise PassError(f"pass {self.name} returned a {type(result).__name__}, not an IRModule")
        if _same_functions(result.functions, mod.functions):
            ctx.unchanged[id(self)] = mod.functions
        else:
            ctx.unchanged.pop(id(self), None)
        if self.info.produces:
            result = result.with_attrs(stage=self.info.produces)
        ctx.history.append(self.name)
        for inst in ctx.instruments:
            inst.run_after_pass(result, self.info)
        return result

    def _enabled(self, ctx: PassContext) -> bool:
        return self.info.opt_level <= ctx.opt_level and self.name not in ctx.disabled_passes

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"


def _same_functions(a, b) -> bool:
    return a is b or (a.keys() == b.keys() and all(a[k] is b[k] for k in a))


class ModulePass(Pass):
    """A pass given by a function ``(mod, ctx) -> mod``."""

    def __init__(self, fn: Callable[[IRModule, PassContext], IRModule], info: PassInfo):
        self.fn, self.info = fn, info

    def transform(self, mod, ctx):
        return self.fn(mod, ctx)


class FunctionPass(Pass):
    """A pass applied to each function: ``(func, mod, ctx) -> func``.

    Functions marked ``Primitive`` (fused kernels) are skipped unless the
    pass asks for them with ``include_primitive=True``.
    """

    def __init__(self, fn: Callable[[Function, IRModule, PassContext], Function], info: PassInfo,
                 include_primitive: bool = False):
        self.fn, self.info, self.include_primitive = fn, info, include_primitive

    def transform(self, mod, ctx):
        updated = {}
        for name, func in mod.items():
            if func.attrs.get("Primitive") and not self.include_primitive:
                updated[name] = func
                continue
            new = self.fn(func, mod, ctx)
            if not isinstance(new, Function):
                raise PassError(f"pass {self.name} turned function {name!r} into a {type(new).__name__}")
            updated[name] = new
        return mod.with_functions(updated)


class Sequential(Pass):
    """Runs passes in order. Its own opt level gates the whole sequence."""

    def __init__(self, passes: Sequence[Pass], name: str = "Sequential", opt_level: int = 0):
        self.passes = list(passes)
        self.info = PassInfo(name, opt_level)

    def __call__(self, mod: IRModule) -> IRModule:
        if not self._enabled(PassContext.current()):
            return mod
        for p in self.passes:
            mod = p(mod)
        return mod

    def transform(self, mod, ctx):
        return self(mod)


def module_pass(name: str | None = None, opt_level: int = 0, requires: Sequence[str] = (),
                produces: str | None = None):
    """Decorator: turn ``fn(mod, ctx) -> mod`` into a :class:`ModulePass`."""
    def wrap(fn):
        return ModulePass(fn, PassInfo(name or fn.__name__, opt_level, tuple(requires), produces))
    return wrap


def function_pass(name: str | None = None, opt_level: int = 0, requires: Sequence[str] = (),
                  produces: str | None = None, include_primitive: bool = False):
    """Decorator: turn ``fn(func, mod, ctx) -> func`` into a :class:`FunctionPass`."""
    def wrap(fn):
        info = PassInfo(name or fn.__name__, opt_level, tuple(requires), produces)
        return FunctionPass(fn, info, include_primitive)
    return wrap
