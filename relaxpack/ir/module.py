"""IRModule: the unit every pass maps, a set of named functions."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Iterator, Mapping

from ..errors import IRError
from .expr import Function, GlobalVar, frozen_attrs

#: Stages a module moves through, in order; recorded in ``attrs["stage"]``.
#: Each is produced by the importer (or the parser) or by some pass
#: (``PassInfo.produces``); memory planning and packaging work on the
#: bytecode (packager/), after the IR's last stage.
STAGES = ("import", "optimize", "lower", "plan")


class IRModule:
    """An immutable mapping from function name to :class:`Function`.

    ``attrs`` records module facts such as the pipeline ``stage``.

    >>> mod = IRModule({"main": func})          # doctest: +SKIP
    >>> print(mod.script(show_meta=False))       # doctest: +SKIP
    """

    __slots__ = ("_functions", "_attrs", "_global_vars")

    def __init__(self, functions: Mapping[str, Function] | None = None,
                 attrs: Mapping[str, Any] | None = None):
        functions = dict(functions or {})
        for name, func in functions.items():
            if not isinstance(func, Function):
                raise IRError(f"module entry {name!r} is a {type(func).__name__}, not a Function")
        self._functions = MappingProxyType(dict(sorted(functions.items())))
        self._attrs = frozen_attrs(attrs)
        self._global_vars = {name: GlobalVar(name, struct_info=f.struct_info) for name, f in self._functions.items()}

    @staticmethod
    def from_function(func: Function, name: str = "main") -> "IRModule":
        return IRModule({name: func})

    # mapping-like access
    @property
    def functions(self) -> Mapping[str, Function]:
        return self._functions

    @property
    def attrs(self) -> Mapping[str, Any]:
        return self._attrs

    @property
    def stage(self) -> str:
        return self._attrs.get("stage", "import")

    def __getitem__(self, name: str) -> Function:
        try:
            return self._functions[name]
        except KeyError:
            raise IRError(f"module has no function {name!r}; it has {sorted(self._functions)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._functions

    def __iter__(self) -> Iterator[str]:
        return iter(self._functions)

    def __len__(self) -> int:
        return len(self._functions)

    def items(self):
        return self._functions.items()

    def get_global_var(self, name: str) -> GlobalVar:
        if name not in self._global_vars:
            raise IRError(f"module has no function {name!r}")
        return self._global_vars[name]

    # functional updates
    def with_function(self, name: str, func: Function) -> "IRModule":
        if self._functions.get(name) is func:
            return self
        return IRModule({**self._functions, name: func}, self._attrs)

    def without_function(self, name: str) -> "IRModule":
        return IRModule({k: f for k, f in self._functions.items() if k != name}, self._attrs)

    def with_attrs(self, **attrs) -> "IRModule":
        if all(self._attrs.get(k, object()) == v for k, v in attrs.items()):
            return self
        return IRModule(self._functions, {**self._attrs, **attrs})

    def with_functions(self, functions: Mapping[str, Function]) -> "IRModule":
        if functions.keys() == self._functions.keys() and all(
                functions[k] is f for k, f in self._functions.items()):
            return self
        return IRModule(functions, self._attrs)

    # text
    def script(self, show_meta: bool = True) -> str:
        """The module in the text format; ``show_meta=False`` leaves out the
        data of large constants (the text then only reads back with them)."""
        from .printer import print_module
        return print_module(self, show_meta=show_meta)

    def __str__(self):
        return self.script(show_meta=False)

    def __repr__(self):
        return f"IRModule({list(self._functions)}, stage={self.stage!r})"
