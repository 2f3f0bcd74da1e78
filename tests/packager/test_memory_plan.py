"""Memory planning on the bytecode: arenas, lifetimes, per-shape plans."""

import numpy as np
import onnx
import pytest

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.examples.onnx_models import small_cnn, transformer_block_onnx
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.bytecode import Call

LIGHT = onnx.__path__[0] + "/backend/test/data/light"


def planned_exe(model, dims=None):
    return relaxpack.build(relaxpack.from_onnx(model, dims=dims))


def arena_state(vm: VirtualMachine):
    """The arena state behind main's plan_arena instruction."""
    prepared = vm._prepared[vm._index["main"]]
    for ins, step in zip(prepared.func.instructions, prepared.steps):
        if isinstance(ins, Call) and vm.exe.func_table[ins.func].name == "vm.builtin.plan_arena":
            return _state_of(step)
    raise AssertionError("no plan_arena instruction")


def _state_of(step):
    for cell in step.__closure__ or ():
        fn = cell.cell_contents
        if hasattr(fn, "state"):
            return fn.state
    raise AssertionError("plan_arena step without state")


def test_plan_at_bounds_is_near_the_lower_bound():
    exe = planned_exe(transformer_block_onnx(), dims={"batch": (1, 4), "seq": (1, 128)})
    plan = exe.metadata["memory_plan"]
    assert plan["planned_at"] == "bounds"
    assert plan["arena_bytes"] <= 1.05 * plan["lower_bound_bytes"], plan
    assert plan["arena_bytes"] < plan["naive_bytes"]


def test_cnn_plan_and_outputs_match_onnxruntime():
    model = small_cnn()
    exe = planned_exe(model, dims={"batch": (1, 8)})
    plan = exe.metadata["memory_plan"]
    assert plan["arena_bytes"] <= 1.05 * plan["lower_bound_bytes"], plan
    vm, session = VirtualMachine(exe), onnxruntime_session(model)
    for b in (1, 8):
        x = np.random.default_rng(b).standard_normal((b, 3, 32, 32)).astype(np.float32)
        diffs = compare_outputs(["logits"], vm.run({"input": x}), session.run(None, {"input": x}), 1e-4, 1e-5)
        assert diffs[0].passed, diffs


def test_outputs_are_not_in_the_arena():
    vm = VirtualMachine(planned_exe(transformer_block_onnx()))
    rng = np.random.default_rng(0)
    x1 = rng.standard_normal((2, 5, 32)).astype(np.float32)
    first = vm.run({"x": x1})["y"]
    kept = first.copy()
    vm.run({"x": rng.standard_normal((2, 5, 32)).astype(np.float32)})
    np.testing.assert_array_equal(first, kept)  # the second call did not write into the first's output


def test_each_shape_gets_its_own_exact_plan():
    model = transformer_block_onnx()
    vm = VirtualMachine(planned_exe(model, dims={"seq": (1, 512)}))
    session = onnxruntime_session(model)
    state = arena_state(vm)
    for seq in (7, 512, 7):
        x = np.random.default_rng(seq).standard_normal((1, seq, 32)).astype(np.float32)
        diffs = compare_outputs(["y"], vm.run({"x": x}), session.run(None, {"x": x}), 1e-4, 1e-5)
        assert diffs[0].passed, diffs
    assert len(state.cache) == 2  # seq=7 planned once and reused
    sizes = {key[0]: sum(entry[2]) for key, entry in state.cache.items()}  # entry: offsets, pools, pool bytes
    small, large = sorted(sizes.values())
    assert small < large / 10


@pytest.mark.parametrize("name", ["resnet50", "squeezenet", "inception_v1", "inception_v2", "densenet121",
                                  "shufflenet", "vgg19", "bvlc_alexnet", "zfnet512"])
def test_real_models_plan_within_5_percent_of_the_lower_bound(name):
    exe = planned_exe(f"{LIGHT}/light_{name}.onnx")
    plan = exe.metadata["memory_plan"]
    assert plan["arena_bytes"] is not None  # all dims static
    assert plan["arena_bytes"] <= 1.05 * plan["lower_bound_bytes"], plan


def test_memory_planning_can_be_turned_off():
    from relaxpack.packager.codegen import codegen
    from relaxpack.passes.legalize import legalize
    mod = legalize(relaxpack.from_onnx(small_cnn()))
    exe = codegen(mod, plan_memory=False)
    assert "memory_plan" not in exe.metadata
    assert "arena_tensor" not in exe.as_text()


def test_elementwise_chains_write_in_place():
    from relaxpack.ir import BlockBuilder, TensorStructInfo, Var, sym
    from relaxpack.ops import make_call
    n = sym("n")
    x = Var("x", TensorStructInfo((n, 16), "float32"))
    bb = BlockBuilder()
    bb.analyzer.set_range("n", 1, 64)
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(make_call("exp", x))
            b = bb.emit(make_call("negative", a))
            c = bb.emit(make_call("tanh", b))
            d = bb.emit(make_call("add", c, x))
            gv = bb.emit_output(make_call("sum", d, axis=(1,)), "y")
        bb.emit_func_output(gv)
    exe = relaxpack.build(bb.get(), opt_level=1)  # -O2 would fuse the chain into one kernel
    plan = exe.metadata["memory_plan"]
    assert plan["intermediates"] == 4 and plan["buffers"] == 1  # exp, negative, tanh, add share one slot
    assert plan["arena_bytes"] == plan["lower_bound_bytes"] == 64 * 16 * 4
    xs = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    np.testing.assert_allclose(VirtualMachine(exe).run({"x": xs})["y"], (np.tanh(-np.exp(xs)) + xs).sum(1),
                               rtol=1e-5, atol=1e-5)


def test_a_bounded_pool_takes_what_fits_and_the_rest_spills():
    model = small_cnn()
    free = planned_exe(model, dims={"batch": (1, 4)}).metadata["memory_plan"]
    cap = 64 * 1024
    exe = relaxpack.build(relaxpack.from_onnx(model, dims={"batch": (1, 4)}), pools={"fast": cap})
    plan = exe.metadata["memory_plan"]
    assert 0 < plan["pool_bytes"]["fast"] <= cap
    assert plan["pool_bytes"]["global"] > 0 and plan["arena_bytes"] >= free["arena_bytes"]
    vm, session = VirtualMachine(exe), onnxruntime_session(model)
    for b in (1, 4):
        x = np.random.default_rng(b).standard_normal((b, 3, 32, 32)).astype(np.float32)
        diffs = compare_outputs(["logits"], vm.run({"input": x}), session.run(None, {"input": x}), 1e-4, 1e-5)
        assert diffs[0].passed, diffs
