"""The VM's budgets (issue 20, items 7 and 11): max_steps, timeout and max_memory
stop a call that goes past them with a BudgetError, inside loops too; a VM
without budgets runs as before. Every test that would run forever without
its budget has the budget."""

import time

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import relaxpack
from relaxpack.errors import BudgetError, ExecutionError, InputError
from relaxpack.runtime import VirtualMachine, load
from tests.runtime.hostile import endless_loop, save_unchecked, static_alloc
from tests.runtime.test_vm_dispatch import chain_module, chain_reference

X = {"x": np.ones(2, np.float32)}


@pytest.fixture
def endless(tmp_path):
    save_unchecked(endless_loop(), tmp_path / "loop.rpk")
    return load(tmp_path / "loop.rpk")


def test_a_loop_of_2_62_trips_stops_at_the_step_budget(endless):
    vm = VirtualMachine(endless, max_steps=10_000)
    with pytest.raises(BudgetError, match=r"stopped in body after 10001 instructions, over the step budget"):
        vm.run(X)
    assert issubclass(BudgetError, ExecutionError)


def test_a_loop_of_2_62_trips_stops_at_the_deadline(endless):
    vm = VirtualMachine(endless, timeout=0.3)
    t0 = time.perf_counter()
    with pytest.raises(BudgetError, match=r"after 0.3 s, the time budget"):
        vm.run(X)
    assert time.perf_counter() - t0 < 3


def test_scan_outputs_that_grow_stop_at_the_memory_budget(tmp_path):
    save_unchecked(endless_loop(scan=True), tmp_path / "scan.rpk")
    vm = VirtualMachine(load(tmp_path / "scan.rpk"), max_memory=4 << 20, timeout=60)
    with pytest.raises(BudgetError, match=r"over its memory budget \(max_memory=4194304\)"):
        vm.run(X)


def endless_onnx_loop():
    """ONNX Loop with M = 2**62 and a condition that stays true, scanning out a growing state."""
    body = h.make_graph([h.make_node("Identity", ["c"], ["c_out"]), h.make_node("Add", ["x_in", "one"], ["x_out"]),
                         h.make_node("Identity", ["x_out"], ["scan"])], "body",
                        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                         h.make_tensor_value_info("x_in", T.FLOAT, [256])],
                        [h.make_tensor_value_info("c_out", T.BOOL, []),
                         h.make_tensor_value_info("x_out", T.FLOAT, [256]),
                         h.make_tensor_value_info("scan", T.FLOAT, [256])],
                        [h.make_tensor("one", T.FLOAT, [], [1.0])])
    nodes = [h.make_node("Constant", [], ["M"], value=h.make_tensor("M", T.INT64, [], [2 ** 62])),
             h.make_node("Constant", [], ["cond"], value=h.make_tensor("cond", T.BOOL, [], [True])),
             h.make_node("Loop", ["M", "cond", "x"], ["xf", "scans"], body=body)]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [256])],
                         [h.make_tensor_value_info("xf", T.FLOAT, [256]),
                          h.make_tensor_value_info("scans", T.FLOAT, ["k", 256])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("budget, message", [({"max_memory": 8 << 20, "timeout": 60}, "memory budget"),
                                             ({"max_steps": 50_000}, "step budget"),
                                             ({"timeout": 0.5}, "time budget")])
def test_an_onnx_loop_without_end_stops_at_each_budget(budget, message):
    exe = relaxpack.build(relaxpack.from_onnx(endless_onnx_loop()))
    with pytest.raises(BudgetError, match=message):
        VirtualMachine(exe, **budget).run({"x": np.zeros(256, np.float32)})


def test_a_static_allocation_over_the_memory_budget_is_refused_when_the_vm_is_made(tmp_path):
    save_unchecked(static_alloc((10 ** 9,)), tmp_path / "big.rpk")     # 4 GB of float32 from 20 bytes of JSON
    exe = load(tmp_path / "big.rpk")
    with pytest.raises(BudgetError, match=r"needs 4000000000 bytes.*max_memory=1073741824"):
        VirtualMachine(exe, max_memory=1 << 30)


def test_an_input_dependent_allocation_over_the_memory_budget_is_refused_before_it_is_made():
    n = relaxpack.ir.sym("n")
    x = relaxpack.ir.Var("x", relaxpack.ir.TensorStructInfo((n,), "float32"))
    bb = relaxpack.ir.BlockBuilder()
    from relaxpack.ops import make_call
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(make_call("exp", x), "y"))
    vm = VirtualMachine(relaxpack.build(bb.get()), max_memory=1 << 20)
    assert vm.run({"x": np.zeros(1000, np.float32)})["y"].shape == (1000,)
    with pytest.raises(BudgetError, match="over its memory budget"):
        vm.run({"x": np.zeros(1 << 20, np.float32)})          # a 4 MiB output
    assert vm.run({"x": np.zeros(10, np.float32)})["y"].shape == (10,)   # the next call starts afresh


def test_arenas_count_against_the_memory_budget():
    from relaxpack.examples.onnx_models import small_cnn
    exe = relaxpack.build(relaxpack.from_onnx(small_cnn(), dims={"batch": (1, 1)}))
    arena = exe.metadata["memory_plan"]["arena_bytes"]
    feeds = {"input": np.ones((1, 3, 32, 32), np.float32)}
    with pytest.raises(BudgetError, match="more arena bytes"):
        VirtualMachine(exe, max_memory=arena // 2).run(feeds)
    out = VirtualMachine(exe, max_memory=4 * arena).run(feeds)
    np.testing.assert_array_equal(out["logits"], VirtualMachine(exe).run(feeds)["logits"])


def test_budgets_leave_results_unchanged_and_reset_per_call():
    exe = relaxpack.build(chain_module(300), opt_level=0)
    x = np.linspace(-2, 2, 4).astype(np.float32)
    vm = VirtualMachine(exe, max_steps=2000, timeout=60, max_memory=1 << 20)
    for _ in range(5):                    # each call may use the whole budget again
        np.testing.assert_array_equal(vm.run({"x": x})["y"], chain_reference(x, 300))
    with pytest.raises(BudgetError, match="step budget"):
        VirtualMachine(exe, max_steps=100).run({"x": x})


@pytest.mark.parametrize("kwargs", [{"max_steps": 0}, {"max_steps": 1.5}, {"timeout": -1}, {"timeout": float("nan")},
                                    {"max_memory": True}])
def test_budgets_must_be_positive(kwargs):
    exe = relaxpack.build(chain_module(2), opt_level=0)
    with pytest.raises(InputError, match="must be a positive"):
        VirtualMachine(exe, **kwargs)


def test_relaxpack_run_stops_at_its_timeout(tmp_path):
    from tests.cli_helpers import invoke
    save_unchecked(endless_loop(), tmp_path / "loop.rpk")
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    t0 = time.perf_counter()
    result = invoke("run", tmp_path / "loop.rpk", "--input", f"x={tmp_path / 'x.npy'}", "--timeout", "0.5")
    assert time.perf_counter() - t0 < 10
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: stopped in body after 0.5 s"), result.output


def test_inference_session_options_carry_the_budgets_and_mmap(tmp_path):
    from relaxpack.runtime import InferenceSession, SessionOptions
    save_unchecked(endless_loop(), tmp_path / "loop.rpk")
    options = SessionOptions()
    options.max_steps, options.use_mmap = 5000, False
    session = InferenceSession(str(tmp_path / "loop.rpk"), options)
    assert session._exe.archive["mmap"] is False
    with pytest.raises(BudgetError, match=r"max_steps=5000"):
        session.run(None, X)


def test_a_pickled_vm_keeps_its_budgets(tmp_path):
    import pickle
    save_unchecked(endless_loop(), tmp_path / "loop.rpk")
    vm = pickle.loads(pickle.dumps(VirtualMachine(load(tmp_path / "loop.rpk"), max_steps=3000)))
    with pytest.raises(BudgetError, match=r"max_steps=3000"):
        vm.run(X)


def test_a_served_model_runs_with_the_options_budgets(tmp_path):
    from relaxpack.runtime import SessionOptions
    from relaxpack.serve.model import ServedModel
    relaxpack.build(relaxpack.from_onnx(endless_onnx_loop())).save(tmp_path / "loop.rpk")
    options = SessionOptions()
    options.timeout, options.use_mmap = 0.3, False
    model = ServedModel("loop", tmp_path / "loop.rpk", options=options)
    assert model.exe.archive["mmap"] is False
    with pytest.raises(BudgetError, match="time budget"):
        model.session.run(None, {"x": np.zeros(256, np.float32)})
