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


# ---------------------------------------------------------------- random ones, for the fuzzer
INTERESTING_SIZES = (0, 1, 2, 7, 64, 4096, 1 << 20, 1 << 31, 1 << 40, 10 ** 9, 2 ** 62, 2 ** 63 - 1, -1)


def random_call_graph(rng) -> tuple[str, Executable]:
    """A call DAG of random depth and fan-out, or (one time in ten) a cycle."""
    if rng.random() < 0.1:
        n = rng.randint(1, 6)
        return f"call cycle of {n}", call_cycle(n)
    depth, fanout = rng.randint(1, 90), rng.choice([1, 1, 2, 2, 3, 4])
    return f"call DAG {depth} deep, fan-out {fanout}", call_dag(depth, fanout)


def random_loop(rng) -> tuple[str, Executable]:
    """``vm.builtin.loop`` with an immediate trip count, maybe growing a scan output."""
    trips, scan = rng.choice(INTERESTING_SIZES), rng.random() < 0.5
    return f"loop of {trips} trips{' with a scan output' if scan else ''}", endless_loop(trips, scan)


def random_allocation(rng) -> tuple[str, Executable]:
    """A shape heap or a static tensor of a random (often absurd) size."""
    if rng.random() < 0.3:
        slots = rng.choice(INTERESTING_SIZES)
        return f"shape heap of {slots} slots", huge_heap(slots)
    shape = tuple(rng.choice(INTERESTING_SIZES) for _ in range(rng.randint(0, 4)))
    dtype = rng.choice(["float32", "float64", "int8", "bool", "string", "float33"])
    return f"alloc_tensor {dtype}{list(shape)}", static_alloc(shape, dtype)


def random_dim_text(rng) -> str:
    """A dim expression, often with powers and large numbers."""
    atoms = ["n", "m", "seq", "2", "7", "64", str(rng.choice(INTERESTING_SIZES)), "(n + 1)", "(n + m + seq + 1)"]

    def expr(depth: int) -> str:
        if depth == 0 or rng.random() < 0.3:
            return rng.choice(atoms)
        op = rng.choice([" + ", " * ", " // ", " % ", " ** ", " ** ", " - "])
        right = str(rng.choice([2, 3, 64, 65, 300000000, -1])) if op == " ** " and rng.random() < 0.7 \
            else expr(depth - 1)
        return f"({expr(depth - 1)}{op}{right})"
    if rng.random() < 0.1:
        return "n" + " + n" * rng.choice([10, 1000, 20000])
    return expr(rng.randint(1, 6))


__all__ = ["X", "call_cycle", "call_dag", "endless_loop", "huge_heap", "random_allocation", "random_call_graph",
           "random_dim_text", "random_loop", "save_unchecked", "static_alloc", "writer_unchecked"]
