"""Hand-made executables of the kinds a hostile or damaged archive holds (issue 20).

Shared by the tests and ``scripts/fuzz_archive.py``'s generators. They are
saved with :func:`save_unchecked`, which skips the writer's program checks
(the writer refuses what the loader refuses): that is what an archive made
by hand, not by relaxpack, looks like.
"""

from __future__ import annotations

import contextlib

from relaxpack.runtime import Executable, FuncEntry
from relaxpack.runtime import archive as archive_module
from relaxpack.runtime.bytecode import Call, ParamInfo, Ret, VMFunction

X = ParamInfo("x", "tensor", "float32", 1, (2,))


@contextlib.contextmanager
def writer_unchecked():
    """Inside, ``Executable.save`` writes what the loader's program checks would refuse."""
    saved = getattr(archive_module, "_check_program", None)
    if saved is None:          # a runtime without the program checks: nothing to skip
        yield
        return
    archive_module._check_program = lambda m: (None, None)
    try:
        yield
    finally:
        archive_module._check_program = saved


def save_unchecked(exe: Executable, path) -> None:
    with writer_unchecked():
        exe.save(path)


def call_dag(depth: int, fanout: int = 2) -> Executable:
    """``main`` calls ``f0``; each ``f{i}`` calls ``f{i+1}`` ``fanout`` times: fanout**depth calls."""
    table = [FuncEntry("vm", f"f{i}") for i in range(depth)] + [FuncEntry("builtin", "vm.builtin.identity")]
    fns = {"main": VMFunction("main", (X,), 2, (Call(1, 0, (("r", 0),)), Ret(1)), outputs=("y",))}
    for i in range(depth):
        callee = i + 1 if i < depth - 1 else depth
        calls = tuple(Call(1, callee, (("r", 0 if k == 0 else 1),)) for k in range(fanout if i < depth - 1 else 1))
        fns[f"f{i}"] = VMFunction(f"f{i}", (X,), 2, calls + (Ret(1),), outputs=("y",))
    return Executable(fns, table, [])


def call_cycle(length: int) -> Executable:
    """``f0`` -> ``f1`` -> ... -> ``f{length-1}`` -> ``f0``."""
    table = [FuncEntry("vm", f"f{i}") for i in range(length)]
    fns = {f"f{i}": VMFunction(f"f{i}", (X,), 2, (Call(1, (i + 1) % length, (("r", 0),)), Ret(1)), outputs=("y",))
           for i in range(length)}
    return Executable(fns, table, [])


def endless_loop(trips: int = 2 ** 62, scan: bool = False) -> Executable:
    """``vm.builtin.loop`` with an immediate trip count whose body keeps its condition true
    (and, with ``scan``, returns a fresh 1 KiB tensor per iteration as a scan output)."""
    table = [FuncEntry("builtin", "vm.builtin.loop"), FuncEntry("vm", "body"),
             FuncEntry("builtin", "vm.builtin.make_tuple"), FuncEntry("builtin", "vm.builtin.alloc_tensor")]
    i, c = ParamInfo("i", "tensor", "int64", 0, ()), ParamInfo("c", "tensor", "bool", 0, ())
    if scan:
        body = VMFunction("body", (i, c, X), 5, (Call(4, 3, (("i", "float32"), ("i", (256,)))),
                                               Call(3, 2, (("r", 1), ("r", 2), ("r", 4))), Ret(3)))
        scans = (("float32", (256,)),)
    else:
        body = VMFunction("body", (i, c, X), 4, (Call(3, 2, (("r", 1), ("r", 2))), Ret(3)))
        scans = ()
    main = VMFunction("main", (X,), 2, (Call(1, 0, (("i", 1), ("i", scans), ("f", 1), ("i", trips), ("i", True),
                                                    ("r", 0))), Ret(1)), outputs=("y",))
    return Executable({"main": main, "body": body}, table, [])


def huge_heap(slots: int = 400_000_000) -> Executable:
    table = [FuncEntry("builtin", "vm.builtin.alloc_shape_heap")]
    return Executable({"main": VMFunction("main", (X,), 2, (Call(1, 0, (("i", slots),)), Ret(0)),
                                          outputs=("y",))}, table, [])


def static_alloc(shape: tuple, dtype: str = "float32") -> Executable:
    table = [FuncEntry("builtin", "vm.builtin.alloc_tensor")]
    return Executable({"main": VMFunction("main", (X,), 2, (Call(1, 0, (("i", dtype), ("i", tuple(shape)))), Ret(1)),
                                          outputs=("y",))}, table, [])


__all__ = ["X", "call_cycle", "call_dag", "endless_loop", "huge_heap", "save_unchecked", "static_alloc",
           "writer_unchecked"]
