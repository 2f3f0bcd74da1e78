"""The loop builtin's fast path (runtime/loop.py, runtime/func_ref.py): the body's compiled code
called directly, shared read-only trip counters and condition. Each case is compared bit for
bit with the interpreter (``vm.compiled = False``: the body called through the VM as any call)
at trip counts 0, 1 and more: bodies that keep the counter or the condition (returned as state,
scanned), state that changes shape, loops ended by the condition, counters past the shared
ones, errors raised inside the body at a later iteration."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import relaxpack
from relaxpack.errors import RelaxpackError
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime import loop as loop_module
from relaxpack.runtime.compiled import Compiled
from relaxpack.runtime.func_ref import FunctionRef


def _model(body_nodes, state_in, state_out, scans=(), inits=(), outer=(), cond_input=""):
    """Loop(M, cond, state...) over ``body_nodes``; ``state_in``/``state_out`` value infos."""
    body = h.make_graph(
        body_nodes, "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []), *state_in],
        [h.make_tensor_value_info("c_out", T.BOOL, []), *state_out, *scans], list(inits))
    names = [v.name for v in state_in]
    finals = [f"f_{n}" for n in names] + [f"scan{k}" for k in range(len(scans))]
    inputs = [h.make_tensor_value_info("M", T.INT64, [])]
    if cond_input:
        inputs.append(h.make_tensor_value_info(cond_input, T.BOOL, []))
    for n, v in zip(names, state_in):
        outer_value = h.make_value_info(f"{n}0", v.type)
        inputs.append(outer_value)
    inputs += list(outer)
    node = h.make_node("Loop", ["M", cond_input, *(f"{n}0" for n in names)], finals, body=body)
    outputs = [h.make_tensor_value_info(f, T.UNDEFINED, None) for f in finals]
    graph = h.make_graph([node], "g", inputs, outputs)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def _runs(model, feeds_list):
    """The outputs of the compiled VM and of the interpreter, for each feeds."""
    exe = relaxpack.build(relaxpack.from_onnx(model))
    fast, slow = VirtualMachine(exe), VirtualMachine(exe)
    slow.compiled = False
    return [(fast.run(f), slow.run(f)) for f in feeds_list]


def _same(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert x.tobytes() == y.tobytes(), k


def _tensor(name, dtype, shape):
    return h.make_tensor_value_info(name, dtype, shape)


def test_body_that_keeps_the_counter_and_the_condition_as_state_and_scans():
    """The shared counters and True are read-only and never change: kept, they stay right; the
    final state the caller gets is its own writable copy."""
    nodes = [h.make_node("Identity", ["c"], ["c_out"]), h.make_node("Identity", ["i"], ["k_out"]),
             h.make_node("Identity", ["c"], ["b_out"]), h.make_node("Identity", ["i"], ["scan_i"]),
             h.make_node("Add", ["x_in", "i"], ["x_out"])]
    model = _model(nodes, [_tensor("k_in", T.INT64, []), _tensor("b_in", T.BOOL, []), _tensor("x_in", T.INT64, [])],
                   [_tensor("k_out", T.INT64, []), _tensor("b_out", T.BOOL, []), _tensor("x_out", T.INT64, [])],
                   scans=[_tensor("scan_i", T.INT64, [])])
    feeds = [{"M": np.array(m, np.int64), "k_in0": np.array(-1, np.int64), "b_in0": np.array(False),
              "x_in0": np.array(0, np.int64)} for m in (0, 1, 7)]
    for (fast, slow), f in zip(_runs(model, feeds), feeds):
        _same(fast, slow)
        m = int(f["M"])
        assert fast["f_k_in"] == (m - 1 if m else -1) and fast["f_b_in"] == (m > 0)
        np.testing.assert_array_equal(fast["scan0"], np.arange(m))
        assert fast["f_x_in"] == sum(range(m))
        for v in fast.values():
            assert v.flags.writeable
            v[...] = 0     # the caller's own: the next call is unchanged
    again = _runs(model, feeds[2:])[0][0]
    assert again["f_k_in"] == 6 and again["f_b_in"]


def test_counters_past_the_shared_ones(monkeypatch):
    monkeypatch.setattr(loop_module, "COUNTERS", 5)
    monkeypatch.setattr(loop_module, "_COUNTERS", ())
    nodes = [h.make_node("Identity", ["c"], ["c_out"]), h.make_node("Identity", ["i"], ["scan_i"]),
             h.make_node("Identity", ["i"], ["k_out"])]
    model = _model(nodes, [_tensor("k_in", T.INT64, [])], [_tensor("k_out", T.INT64, [])],
                   scans=[_tensor("scan_i", T.INT64, [])])
    feeds = [{"M": np.array(m, np.int64), "k_in0": np.array(-1, np.int64)} for m in (3, 9, 200)]
    for (fast, slow), f in zip(_runs(model, feeds), feeds):
        _same(fast, slow)
        np.testing.assert_array_equal(fast["scan0"], np.arange(int(f["M"])))
    assert [int(c) for c in loop_module._COUNTERS] == list(range(5))
    assert all(not c.flags.writeable and c.dtype == np.int64 and c.shape == () for c in loop_module._COUNTERS)


def test_state_that_grows_and_a_loop_ended_by_the_condition():
    """x grows by one element a trip; the loop stops once sum(x) reaches the limit (or at M)."""
    nodes = [h.make_node("Concat", ["x_in", "one"], ["x_out"], axis=0),
             h.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0),
             h.make_node("Less", ["s", "lim"], ["c_out"])]
    model = _model(nodes, [_tensor("x_in", T.FLOAT, ["n"])], [_tensor("x_out", T.FLOAT, ["m"])],
                   inits=[h.make_tensor("one", T.FLOAT, [1], [1.5]), h.make_tensor("lim", T.FLOAT, [], [7.0])],
                   cond_input="go")
    feeds = [{"M": np.array(m, np.int64), "go": np.array(go), "x_in0": np.arange(n, dtype=np.float32)}
             for m, go, n in ((0, True, 2), (10, False, 2), (10, True, 0), (10, True, 3), (2, True, 1))]
    results = _runs(model, feeds)
    for fast, slow in results:
        _same(fast, slow)
    assert results[2][0]["f_x_in"].shape == (5,)      # 1.5 * 5 = 7.5 >= 7: ended by the condition


def test_a_body_failing_at_a_later_iteration_raises_as_the_interpreter_does():
    """Reshape to (i - 2) fails at the trip where the count goes negative: the same error."""
    nodes = [h.make_node("Identity", ["c"], ["c_out"]), h.make_node("Sub", ["i", "two"], ["d"]),
             h.make_node("Unsqueeze", ["d", "zero"], ["shape"]),
             h.make_node("Reshape", ["x_in", "shape"], ["r"]),
             h.make_node("Identity", ["x_in"], ["x_out"])]
    model = _model(nodes, [_tensor("x_in", T.FLOAT, [2])], [_tensor("x_out", T.FLOAT, [2])],
                   inits=[h.make_tensor("two", T.INT64, [], [0]), h.make_tensor("zero", T.INT64, [1], [0])])
    exe = relaxpack.build(relaxpack.from_onnx(model))
    fast, slow = VirtualMachine(exe), VirtualMachine(exe)
    slow.compiled = False
    feeds = {"M": np.array(3, np.int64), "x_in0": np.ones(2, np.float32)}
    with pytest.raises(RelaxpackError) as want:
        slow.run(feeds)
    with pytest.raises(RelaxpackError) as got:
        fast.run(feeds)
    assert type(got.value) is type(want.value) and str(got.value) == str(want.value)


def test_the_body_operand_is_a_function_ref_with_a_direct_path_only_when_compiled():
    nodes = [h.make_node("Identity", ["c"], ["c_out"]), h.make_node("Identity", ["x_in"], ["x_out"])]
    model = _model(nodes, [_tensor("x_in", T.FLOAT, [2])], [_tensor("x_out", T.FLOAT, [2])])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    refs = [v for p in vm._prepared for r in p.resolved.values() for is_reg, v in r.args
            if not is_reg and isinstance(v, FunctionRef)]
    assert len(refs) == 1
    ref = refs[0]
    assert ref.direct(3) is not None and ref.direct(2) is None      # (i, cond, x_in)
    vm.compiled = False
    assert ref.direct(3) is None


def _steady(model):
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    body = next(p for p in vm._prepared if p.func.name != "main")
    return body.compiled.steady


def test_state_whose_shape_alternates_or_settles_after_a_trip():
    """Transpose flips (2, 3) and (3, 2) every trip (never steady: checked each trip); ReduceSum
    to (1,) settles after the first trip (steady: an immediate alloc), from a longer start."""
    flip = [h.make_node("Identity", ["c"], ["c_out"]), h.make_node("Transpose", ["x_in"], ["t"], perm=[1, 0]),
            h.make_node("Add", ["t", "one"], ["x_out"])]
    flipped = _model(flip, [_tensor("x_in", T.FLOAT, ["a", "b"])], [_tensor("x_out", T.FLOAT, ["b", "a"])],
                     inits=[h.make_tensor("one", T.FLOAT, [], [1.0])])
    settle = [h.make_node("Identity", ["c"], ["c_out"]), h.make_node("ReduceSum", ["x_in"], ["s"], keepdims=1),
              h.make_node("Add", ["s", "one"], ["x_out"]), h.make_node("Identity", ["y_in"], ["y_out"])]
    settled = _model(settle, [_tensor("x_in", T.FLOAT, ["n"]), _tensor("y_in", T.FLOAT, [2])],
                     [_tensor("x_out", T.FLOAT, [1]), _tensor("y_out", T.FLOAT, [2])],
                     inits=[h.make_tensor("one", T.FLOAT, [], [1.0])])
    assert _steady(flipped) == (True, False)
    assert _steady(settled) == (True, True, True)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for model, feeds in ((flipped, [{"M": np.array(m, np.int64), "x_in0": x} for m in (0, 1, 2, 5, 6)]),
                         (settled, [{"M": np.array(m, np.int64), "x_in0": np.arange(n, dtype=np.float32) + 0.5,
                                     "y_in0": np.ones(2, np.float32)} for m, n in ((0, 4), (1, 4), (2, 1), (6, 4))])):
        for fast, slow in _runs(model, feeds):
            _same(fast, slow)


def test_the_warm_body_runs_from_the_third_trip_and_gives_the_cold_bits():
    """A 6-op body on (2, 4): the warm variant is made and taken; every trip's result as with
    the warm variant switched off (make_warm None) and as the interpreter's."""
    from benchmarks.control_flow import loop_model
    exe = relaxpack.build(relaxpack.from_onnx(loop_model(6)), opt_level=0)
    warm, cold, slow = VirtualMachine(exe), VirtualMachine(exe), VirtualMachine(exe)
    slow.compiled = False
    for p in cold._prepared:
        if p.compiled is not None:
            p.compiled.make_warm = None
    body = next(p for p in warm._prepared if p.func.name != "main").compiled
    calls: list = []
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    for m in (0, 1, 2, 33):
        feeds = {"M": np.array(m, np.int64), "x": x}
        got = warm.run(feeds)
        if m == 2:         # made on the loop's first call of more than one trip
            run = body.warm.run
            body.warm.run = lambda *a: calls.append(1) or run(*a)
        _same(got, cold.run(feeds))
        _same(got, slow.run(feeds))
    assert body.steady == (True, True) and len(calls) == 31      # all trips of 33 but the first two


def test_state_that_keeps_its_shape_for_some_trips_then_changes():
    """x is big[:1 + i // 3] (one shape for three trips, then the next), z = x_in * 2: the warm
    body runs while they keep their shapes, and the checks run again on the trip they change."""
    nodes = [h.make_node("Identity", ["c"], ["c_out"]), h.make_node("Div", ["i", "three"], ["q"]),
             h.make_node("Add", ["q", "one"], ["end"]), h.make_node("Unsqueeze", ["end", "zero"], ["ends"]),
             h.make_node("Slice", ["big", "zero", "ends"], ["x_out"]),
             h.make_node("Mul", ["x_in", "two"], ["z_out"]), h.make_node("Identity", ["w_in"], ["w_out"])]
    model = _model(nodes, [_tensor("x_in", T.FLOAT, ["n"]), _tensor("z_in", T.FLOAT, ["m"]),
                           _tensor("w_in", T.FLOAT, [3])],
                   [_tensor("x_out", T.FLOAT, ["k"]), _tensor("z_out", T.FLOAT, ["n"]), _tensor("w_out", T.FLOAT, [3])],
                   inits=[h.make_tensor("three", T.INT64, [], [3]), h.make_tensor("one", T.INT64, [], [1]),
                          h.make_tensor("zero", T.INT64, [1], [0]), h.make_tensor("two", T.FLOAT, [], [2.0])],
                   outer=[_tensor("big", T.FLOAT, [10])])
    assert _steady(model) == (True, False, False, True)
    big = np.arange(10, dtype=np.float32) + 0.25
    feeds = [{"M": np.array(m, np.int64), "x_in0": big[:1], "z_in0": big[:2], "w_in0": big[:3], "big": big}
             for m in (0, 1, 3, 4, 10, 25)]
    for fast, slow in _runs(model, feeds):
        _same(fast, slow)


def test_empty_loop_scan_output_whose_element_shape_the_body_fixes():
    """The body's state has a symbolic shape, its scan output a static (1,): a loop of no trips
    stacks it as (0, 1), as onnxruntime does (codegen reads the element dims off the body)."""
    nodes = [h.make_node("Concat", ["x_in", "one"], ["x_out"], axis=0), h.make_node("Identity", ["c"], ["c_out"]),
             h.make_node("ReduceSum", ["x_in"], ["scan_s"], keepdims=1)]
    model = _model(nodes, [_tensor("x_in", T.FLOAT, ["n"])], [_tensor("x_out", T.FLOAT, ["m"])],
                   scans=[_tensor("scan_s", T.FLOAT, [1])], inits=[h.make_tensor("one", T.FLOAT, [1], [1.5])])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    out = vm.run({"M": np.array(0, np.int64), "x_in0": np.arange(2, dtype=np.float32)})
    assert out["scan0"].shape == (0, 1)


def test_state_that_grows_every_trip_stops_taking_warm_states(monkeypatch):
    """x grows by one element a trip: a warm state taken on one trip never serves the next, so a
    loop call takes WARM_TRIES + 1 of them (then none), whatever its length; a state that settles
    after growing a few trips gets one that serves the rest."""
    grow = [h.make_node("Identity", ["c"], ["c_out"]), h.make_node("Concat", ["x_in", "one"], ["x_out"], axis=0)]
    model = _model(grow, [_tensor("x_in", T.FLOAT, ["n"])], [_tensor("x_out", T.FLOAT, ["m"])],
                   inits=[h.make_tensor("one", T.FLOAT, [1], [1.5])])
    exe = relaxpack.build(relaxpack.from_onnx(model))
    fast, slow = VirtualMachine(exe), VirtualMachine(exe)
    slow.compiled = False
    taken: list = []
    take = Compiled.warm_state
    monkeypatch.setattr(Compiled, "warm_state", lambda self, args: taken.append(1) or take(self, args))
    for m in (2, 3, 9, 30):
        taken.clear()
        feeds = {"M": np.array(m, np.int64), "x_in0": np.zeros(1, np.float32)}
        _same(fast.run(feeds), slow.run(feeds))
        assert len(taken) == min(m - 2, loop_module.WARM_TRIES + 1)
