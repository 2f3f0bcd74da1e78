"""Kernel workspace planned as one-instruction ("lifted") allocations of the arena."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.cli.inspect_cmd import archive_facts
from relaxpack.errors import ArchiveError
from relaxpack.runtime import VirtualMachine, load
from relaxpack.runtime.bytecode import IMM, REG, Call
from relaxpack.runtime.kernels import KERNELS
from relaxpack.runtime.kernels._registry import Kernel
from relaxpack.runtime.kernels._workspace import release_workspace, workspace_bytes
from relaxpack.runtime.shape_program import compile_program
from tests.packager.test_memory_plan import arena_state
from tests.runtime.test_archive import reseal

MODELS = Path(__file__).parents[1] / "models"
#: one 3x3 conv (pad 1) of 16 channels on a 7x7 plane: the strided method on
#: wide rows (runtime/kernels/conv_wide.py). Its scratch per batch item: the
#: padded copy (16, 9, 9) and one zero row below it, the columns (16 channels,
#: 9 taps, 61 wide columns: 6 rows of 9 and one of 7, rounded up to 64 for the
#: GEMM) and the wide result (16, 64), float32
PADDED, COLUMNS, RESULT = 16 * 10 * 9 * 4, 16 * 9 * 64 * 4, 16 * 64 * 4
#: a fused conv -> relu -> add(x) also needs one temporary of the output's
#: size: the memory plan may make ``out`` the input x, which the add reads last
OUT = 16 * 7 * 7 * 4


def one_conv(fused: bool = False, seed: int = 0) -> onnx.ModelProto:
    """A conv (pads 1) of x; ``fused``: then relu and + x (one fused kernel)."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y" if not fused else "c"], pads=[1, 1, 1, 1])]
    if fused:
        nodes += [helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])]
    graph = helper.make_graph(nodes, "one_conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16, 7, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16, 7, 7])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def build(model, batch=(1, 8)):
    return relaxpack.build(relaxpack.from_onnx(model, dims={"batch": batch}))


def workspaces(exe):
    """Per kernel call given a workspace: (call pc, kernel, arena buffer index), and main's plan spec."""
    main, table = exe.functions["main"], exe.func_table
    index_of, spec = {}, None
    for ins in main.instructions:
        if isinstance(ins, Call) and table[ins.func].name == "vm.builtin.arena_tensor":
            index_of[ins.dst] = ins.args[0][1]
        if isinstance(ins, Call) and table[ins.func].name == "vm.builtin.plan_arena":
            spec = ins.args[0][1]
    found = []
    for pc, ins in enumerate(main.instructions):
        for key, (kind, reg) in getattr(ins, "kwargs", ()):
            if key == "workspace":
                assert kind == REG and table[ins.func].kind == "kernel"
                found.append((pc, table[ins.func].name, index_of[reg]))
    return found, spec


def test_a_conv_plans_its_im2col_workspace_for_its_one_instruction():
    exe = build(one_conv())
    (pc, kernel, index), = workspaces(exe)[0]
    spec = workspaces(exe)[1]
    size, start, end, _ = spec[index]
    assert kernel == "nn.conv"
    assert start == end                       # live at one instruction: the kernel call
    # the spec's pcs precede the plan_arena instruction inserted at the entry
    assert exe.functions["main"].instructions[start + 1] is exe.functions["main"].instructions[pc]
    for batch in (2, 5):                      # the symbolic size, instantiated per batch
        assert compile_program(size, 1)([batch]) == batch * (PADDED + COLUMNS + RESULT)
    plan = exe.metadata["memory_plan"]            # at the bound batch = 8; the workspace is the only intermediate
    assert plan["workspaces"] == 1
    assert plan["workspace_bytes"] == plan["naive_bytes"] == plan["lower_bound_bytes"] == plan["arena_bytes"] \
        == 8 * (PADDED + COLUMNS + RESULT)


def test_the_runtime_instantiates_an_exact_workspace_per_batch_and_the_kernel_carves_from_the_arena(monkeypatch):
    model = one_conv(fused=True)
    exe = build(model)
    (_, kernel, index), = workspaces(exe)[0]
    assert kernel == "fused_elementwise"       # running nn.conv_bias_act, then add
    seen = []
    original = KERNELS[kernel]

    def spy(*args, workspace, **kwargs):
        seen.append(workspace)
        return original.fn(*args, workspace=workspace, **kwargs)
    monkeypatch.setitem(KERNELS, kernel, Kernel(kernel, spy, True, True))
    vm, session = VirtualMachine(exe), onnxruntime_session(model)
    state = arena_state(vm)
    release_workspace()
    for batch in (2, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 16, 7, 7)).astype(np.float32)
        diffs = compare_outputs(["y"], vm.run({"x": x}), session.run(None, {"x": x}), 1e-4, 1e-5)
        assert diffs[0].passed, diffs
        ws = seen[-1]
        assert ws.dtype == np.uint8 and ws.ndim == 1 and ws.nbytes == batch * (OUT + PADDED + COLUMNS + RESULT)
        assert np.shares_memory(ws, state.buffers[0])     # a view of the arena, not a fresh array
    assert workspace_bytes() == 0                          # no thread-local scratch was taken
    sizes = sorted(key[index] for key in state.cache)
    assert sizes == [2 * (OUT + PADDED + COLUMNS + RESULT), 5 * (OUT + PADDED + COLUMNS + RESULT)]


def test_resnet_small_arena_is_the_lower_bound_with_workspace_and_matches_onnxruntime():
    model = onnx.load(str(MODELS / "resnet_small.onnx"))
    exe = build(model)
    plan = exe.metadata["memory_plan"]
    assert plan["workspaces"] >= 1 and plan["workspace_bytes"] > 0
    assert plan["arena_bytes"] == plan["lower_bound_bytes"]
    assert plan["naive_bytes"] > plan["workspace_bytes"] >= plan["largest_workspace_bytes"] > 0
    vm, session = VirtualMachine(exe), onnxruntime_session(model)
    release_workspace()
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        name = session.get_outputs()[0].name
        diffs = compare_outputs([name], vm.run({"input": x}), session.run(None, {"input": x}), 1e-4, 1e-4)
        assert diffs[0].passed, diffs
    assert workspace_bytes() == 0


def test_workspace_round_trips_through_the_archive_and_is_reported(tmp_path):
    exe = build(one_conv())
    a, b = tmp_path / "a.rpk", tmp_path / "b.rpk"
    exe.save(a)
    build(one_conv()).save(b)
    assert a.read_bytes() == b.read_bytes()                # the same model: byte-identical
    loaded = load(a)
    assert json.dumps(workspaces(loaded)) == json.dumps(workspaces(exe))   # lists and tuples alike
    x = np.random.default_rng(0).standard_normal((3, 16, 7, 7)).astype(np.float32)
    np.testing.assert_array_equal(VirtualMachine(loaded).run({"x": x})["y"], VirtualMachine(exe).run({"x": x})["y"])
    facts = archive_facts(loaded, a)
    assert facts["workspaces"] == 1 and facts["workspace_bytes"] == 8 * (PADDED + COLUMNS + RESULT)


def _edit_workspace_kwarg(fn):
    """An archive edit applying ``fn(kwarg, instruction, manifest)`` to main's workspace keyword."""
    def edit(m):
        for ins in m["functions"][0]["instructions"]:
            if ins[0] == "call":
                for kw in ins[4]:
                    if kw[0] == "workspace":
                        fn(kw, ins, m)
    return edit


def _to_immediate(kw, ins, m):
    kw[1] = [IMM, 0]


def _to_a_kernel_without_workspace(kw, ins, m):
    m["func_table"][ins[2]][1] = "exp"
    m["kernels"] = sorted({n for k, n in m["func_table"] if k in ("kernel", "packed")})


@pytest.mark.parametrize("edit, message", [
    (_to_immediate, "workspace must be a register"),
    (_to_a_kernel_without_workspace, "which in this runtime take none"),
])
def test_the_loader_checks_workspace_operands(tmp_path, edit, message):
    path = tmp_path / "m.rpk"
    build(one_conv()).save(path)
    reseal(path, _edit_workspace_kwarg(edit))
    with pytest.raises(ArchiveError, match=message):
        load(path)
