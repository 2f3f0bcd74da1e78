"""PlanMemory: explicit allocations in arena buffers, in-place reuse and kill
points in the lowered IR (Before/Expected, run twice), and the planned
program computes what the unplanned one does, under the loader's plan check."""

import numpy as np
import pytest

from relaxpack.ir import parse
from relaxpack.packager.codegen import codegen
from relaxpack.passes.plan_memory import POOLS, plan_memory
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.plan_check import check_plans

from .helpers import assert_rewrites, random_inputs

HEAD = '''
@I.ir_module
class Module:
    I.module_attrs({"stage": "%s"})

    @R.function
'''


def module(stage: str, text: str) -> str:
    return HEAD % stage + "\n".join("    " + line for line in text.strip("\n").splitlines()) + "\n"


def alloc(shape: str, dtype: str = "float32", storage=None, offset=None, pool: str = "global") -> str:
    return (f'R.memory.alloc_tensor(R.shape([{shape}]), dtype="{dtype}", offset={offset}, pool="{pool}", '
            f'storage={storage}, vdevice="global")')


def assert_plans(before: str, expected: str, dims_list=(), **config):
    """Before -> Expected (and again: nothing changes); both run alike, and the plan passes the loader's check."""
    mod, out = assert_rewrites(plan_memory, module("lower", before), module("plan", expected), stage="plan",
                               **config)
    exe = codegen(out, pools=config.get(POOLS))
    check_plans(exe.functions, exe.func_table)
    want_vm, got_vm = VirtualMachine(codegen(mod, plan_memory=False)), VirtualMachine(exe)
    for dims in dims_list:
        inputs = random_inputs(mod, dims)
        want, got = want_vm.run(inputs), got_vm.run(inputs)
        for name in want:
            np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]))
    return out, exe


T = 'R.Tensor((n, 256), "float32")'
CHAIN = f'''
def main(x: R.Tensor(("n", 256), "float32")) -> R.Tensor(("n", 256), "float32"):
    n = T.int64(lower=1, upper=4)
    a: {T} = R.call_tir("exp", (x,), kernel_attrs=None, out_sinfo={T})
    b: {T} = R.call_tir("abs", (a,), kernel_attrs=None, out_sinfo={T})
    c: {T} = R.call_tir("sigmoid", (x,), kernel_attrs=None, out_sinfo={T})
    d: {T} = R.call_tir("add", (b, c), kernel_attrs=None, out_sinfo={T})
    return d
'''
# b writes over a, which dies there (buffer 0 twice); c needs its own (at 4096 = 4 * 256 * 4 at n's
# bound); the result d is an allocation of its own; each planned tensor dies after its last reader
CHAIN_PLANNED = f'''
def main(x: R.Tensor(("n", 256), "float32")) -> R.Tensor(("n", 256), "float32"):
    n = T.int64(lower=1, upper=4)
    R.func_attr({{"memory_plan": {{"buffers": 2, "intermediates": 3, "planned_at": "bounds", "arena_bytes": 8192, "lower_bound_bytes": 8192, "naive_bytes": 12288, "workspaces": 0, "workspace_bytes": 0, "largest_workspace_bytes": 0, "pool_bytes": {{"global": 8192}}, "algorithm": "greedy_by_size"}}}})
    alloc: {T} = {alloc("n, 256", storage=0, offset=0)}
    a: {T} = R.call_tir("exp", (x,), alloc, kernel_attrs=None, out_sinfo={T})
    alloc_1: {T} = {alloc("n, 256", storage=0, offset=0)}
    b: {T} = R.call_tir("abs", (a,), alloc_1, kernel_attrs=None, out_sinfo={T})
    _: R.Tuple() = R.memory.kill_tensor(alloc)
    alloc_2: {T} = {alloc("n, 256", storage=1, offset=4096)}
    c: {T} = R.call_tir("sigmoid", (x,), alloc_2, kernel_attrs=None, out_sinfo={T})
    alloc_3: {T} = {alloc("n, 256")}
    d: {T} = R.call_tir("add", (b, c), alloc_3, kernel_attrs=None, out_sinfo={T})
    _1: R.Tuple() = R.memory.kill_tensor(alloc_1)
    _2: R.Tuple() = R.memory.kill_tensor(alloc_2)
    return d
'''


def test_a_chain_gets_arena_buffers_in_place_reuse_and_kill_points():
    _, exe = assert_plans(CHAIN, CHAIN_PLANNED, [{"n": 1}, {"n": 3}])
    assert exe.metadata["memory_plan"]["arena_bytes"] == 8192
    spec = next(ins.args[0][1] for ins in exe.function("main").instructions
                if getattr(ins, "func", None) is not None and exe.func_table[ins.func].name == "vm.builtin.plan_arena")
    # in pcs without the plan_arena call: a from its allocation, b (in place) to d; c to d
    assert [(start, end) for _, start, end, _ in spec] == [(4, 11), (8, 11)]


E = 'R.Tensor((2, 8), "float32")'
BRANCHY = f'''
def main(x: {E}) -> {E}:
    s: R.Tensor((), "float32") = R.call_tir("sum", (x,), kernel_attrs=(("axis", None), ("keepdims", False)), out_sinfo=R.Tensor((), "float32"))
    c: R.Tensor((), "bool") = R.call_tir("greater", (s, R.const(0.0, "float32")), kernel_attrs=None, out_sinfo=R.Tensor((), "bool"))
    e: {E} = R.call_tir("exp", (x,), kernel_attrs=None, out_sinfo={E})
    if c:
        t: {E} = R.call_tir("abs", (e,), kernel_attrs=None, out_sinfo={E})
        r: {E} = t
    else:
        f: {E} = R.call_tir("negative", (x,), kernel_attrs=None, out_sinfo={E})
        r: {E} = f
    y: {E} = R.call_tir("add", (r, e), kernel_attrs=None, out_sinfo={E})
    return y
'''
# the condition's buffer dies where the If reads it: at the head of the true branch; what a branch
# allocates and returns is an allocation of its own (a kill after the If could not name it)
BRANCHY_PLANNED = f'''
def main(x: {E}) -> {E}:
    R.func_attr({{"memory_plan": {{"buffers": 3, "intermediates": 3, "planned_at": "bounds", "arena_bytes": 128, "lower_bound_bytes": 128, "naive_bytes": 192, "workspaces": 0, "workspace_bytes": 0, "largest_workspace_bytes": 0, "pool_bytes": {{"global": 128}}, "algorithm": "greedy_by_size"}}}})
    alloc: R.Tensor((), "float32") = {alloc("", storage=0, offset=64)}
    s: R.Tensor((), "float32") = R.call_tir("sum", (x,), alloc, kernel_attrs=(("axis", None), ("keepdims", False)), out_sinfo=R.Tensor((), "float32"))
    alloc_1: R.Tensor((), "bool") = {alloc("", "bool", storage=1, offset=0)}
    c: R.Tensor((), "bool") = R.call_tir("greater", (s, R.const(0.0, "float32")), alloc_1, kernel_attrs=None, out_sinfo=R.Tensor((), "bool"))
    _: R.Tuple() = R.memory.kill_tensor(alloc)
    alloc_2: {E} = {alloc("2, 8", storage=2, offset=64)}
    e: {E} = R.call_tir("exp", (x,), alloc_2, kernel_attrs=None, out_sinfo={E})
    if c:
        _1: R.Tuple() = R.memory.kill_tensor(alloc_1)
        alloc_3: {E} = {alloc("2, 8")}
        t: {E} = R.call_tir("abs", (e,), alloc_3, kernel_attrs=None, out_sinfo={E})
        r: {E} = t
    else:
        alloc_4: {E} = {alloc("2, 8")}
        f: {E} = R.call_tir("negative", (x,), alloc_4, kernel_attrs=None, out_sinfo={E})
        r: {E} = f
    alloc_5: {E} = {alloc("2, 8")}
    y: {E} = R.call_tir("add", (r, e), alloc_5, kernel_attrs=None, out_sinfo={E})
    _2: R.Tuple() = R.memory.kill_tensor(alloc_2)
    return y
'''


def test_kill_points_around_an_if():
    assert_plans(BRANCHY, BRANCHY_PLANNED, [{}])


Y = 'R.Tensor((n, 4, 8, 8), "float32")'
H = 'R.Tensor((n, 4, 4, 8), "float32")'
CONV_SPLIT = f'''
def main(x: R.Tensor(("n", 4, 8, 8), "float32"), w: R.Tensor((4, 4, 3, 3), "float32")) -> R.Tensor(("n", 4, 4, 8), "float32"):
    n = T.int64(lower=1, upper=2)
    y: {Y} = R.call_tir("nn.conv", (x, w), kernel_attrs=(("strides", 1), ("padding", (1, 1, 1, 1)), ("dilation", 1), ("groups", 1), ("exact", False), ("data_layout", "NCHW"), ("out_layout", None)), out_sinfo={Y})
    s: R.Tuple({H}, {H}) = R.call_tir("split", (y,), kernel_attrs=(("indices_or_sections", 2), ("axis", 2)), out_sinfo=R.Tuple({H}, {H}))
    a: {H} = s[0]
    b: {H} = s[1]
    z: {H} = R.call_tir("add", (a, b), kernel_attrs=None, out_sinfo={H})
    return z
'''
# the conv's workspace lives at its call alone; a tuple output is a buffer per field; the first pool
# named takes what fits at the bounds (the workspace spills to the default pool there)
CONV_SPLIT_PLANNED = f'''
def main(x: R.Tensor(("n", 4, 8, 8), "float32"), w: R.Tensor((4, 4, 3, 3), "float32")) -> R.Tensor(("n", 4, 4, 8), "float32"):
    n = T.int64(lower=1, upper=2)
    R.func_attr({{"memory_plan": {{"buffers": 4, "intermediates": 4, "planned_at": "bounds", "arena_bytes": 33216, "lower_bound_bytes": 31168, "naive_bytes": 33216, "workspaces": 1, "workspace_bytes": 29120, "largest_workspace_bytes": 29120, "pool_bytes": {{"fast": 4096, "global": 29120}}, "algorithm": "fast=greedy_by_size+spill,global=greedy_by_size"}}}})
    alloc: {Y} = {alloc("n, 4, 8, 8", storage=0, offset=2048, pool="fast")}
    workspace: R.Tensor((12800 * n + 64 * ((1760 * n + 63) // 64),), "uint8") = {alloc("12800 * n + 64 * ((1760 * n + 63) // 64)", "uint8", storage=1, offset=0, pool="fast")}
    y: {Y} = R.call_tir("nn.conv", (x, w), alloc, workspace, kernel_attrs=(("strides", 1), ("padding", (1, 1, 1, 1)), ("dilation", 1), ("groups", 1), ("exact", False), ("data_layout", "NCHW"), ("out_layout", None)), out_sinfo={Y})
    _: R.Tuple() = R.memory.kill_tensor(workspace)
    alloc_1: {H} = {alloc("n, 4, 4, 8", storage=2, offset=0, pool="fast")}
    alloc_2: {H} = {alloc("n, 4, 4, 8", storage=3, offset=1024, pool="fast")}
    alloc_3: R.Tuple({H}, {H}) = (alloc_1, alloc_2)
    s: R.Tuple({H}, {H}) = R.call_tir("split", (y,), alloc_3, kernel_attrs=(("indices_or_sections", 2), ("axis", 2)), out_sinfo=R.Tuple({H}, {H}))
    _1: R.Tuple() = R.memory.kill_tensor(alloc)
    a: {H} = s[0]
    b: {H} = s[1]
    alloc_4: {H} = {alloc("n, 4, 4, 8")}
    z: {H} = R.call_tir("add", (a, b), alloc_4, kernel_attrs=None, out_sinfo={H})
    _2: R.Tuple() = R.memory.kill_tensor(alloc_1)
    _3: R.Tuple() = R.memory.kill_tensor(alloc_2)
    return z
'''


def test_a_workspace_and_a_tuple_output_in_a_bounded_pool():
    _, exe = assert_plans(CONV_SPLIT, CONV_SPLIT_PLANNED, [{"n": 1}, {"n": 2}], **{POOLS: {"fast": 4096}})
    assert exe.metadata["memory_plan"]["pool_bytes"] == {"fast": 4096, "global": 29120}


def test_without_bounds_there_are_buffers_but_no_offsets():
    text = CHAIN.replace("T.int64(lower=1, upper=4)", "T.int64()")
    expected = (CHAIN_PLANNED.replace("T.int64(lower=1, upper=4)", "T.int64()")
                .replace("offset=0,", "offset=None,").replace("offset=4096,", "offset=None,"))
    start = expected.index("    R.func_attr(")
    expected = expected[:start] + '''    R.func_attr({"memory_plan": {"buffers": 2, "intermediates": 3, "planned_at": None, "arena_bytes": None, "lower_bound_bytes": None, "naive_bytes": None, "workspaces": 0, "workspace_bytes": None, "largest_workspace_bytes": None}})\n''' + expected[expected.index("\n", start) + 1:]
    assert_plans(text, expected, [{"n": 5}])


def test_a_function_planned_before_is_left_alone():
    planned = parse(module("plan", CHAIN_PLANNED))
    assert plan_memory(planned)["main"] is planned["main"]
    unplanned = parse(module("lower", CHAIN))
    with pytest.raises(Exception, match="needs a module at stage lower/plan"):
        plan_memory(unplanned.with_attrs(stage="optimize"))
