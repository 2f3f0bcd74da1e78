"""The input-check cache (runtime/compiled.py: ``_input_check_plan``): a call whose arrays have
the shapes and dtypes of an earlier passing call takes that call's shape heap instead of
rerunning the input checks; every other call runs them and fails as the interpreter does."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import relaxpack
from relaxpack.errors import InputError, RelaxpackError
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime import shape_memo
from relaxpack.runtime.compiled import MEMO_ENTRIES


def _model(nodes, inputs, outputs, initializers=()):
    g = h.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def two_input_model():
    """z = x + y, both (n, 3): the second input's n must equal the first's."""
    return _model([h.make_node("Add", ["x", "y"], ["z"])],
                  [h.make_tensor_value_info("x", T.FLOAT, ["n", 3]), h.make_tensor_value_info("y", T.FLOAT, ["n", 3])],
                  [h.make_tensor_value_info("z", T.FLOAT, ["n", 3])])


def nonzero_model():
    """The positive elements' indices: a data-dependent shape, matched into the heap after the
    input checks (the heap the cache hands out must be a copy)."""
    return _model([h.make_node("Greater", ["x", "zero"], ["c"]), h.make_node("NonZero", ["c"], ["i"]),
                   h.make_node("Cast", ["i"], ["f"], to=T.FLOAT), h.make_node("ReduceSum", ["f"], ["s"], keepdims=0)],
                  [h.make_tensor_value_info("x", T.FLOAT, ["n"])],
                  [h.make_tensor_value_info("i", T.INT64, [1, "k"]), h.make_tensor_value_info("s", T.FLOAT, [])],
                  [h.make_tensor("zero", T.FLOAT, [], [0.0])])


def _pair(model, dims=None):
    exe = relaxpack.build(relaxpack.from_onnx(model, dims))
    compiled, interpreted = VirtualMachine(exe), VirtualMachine(exe)
    interpreted.compiled = False
    return compiled, interpreted


def _error(vm, inputs) -> tuple[type, str]:
    with pytest.raises(RelaxpackError) as err:
        vm.run(inputs)
    return type(err.value), str(err.value)


def test_the_cache_is_used_and_bounded(monkeypatch):
    """At the capacity's floor (a function so large its memo keeps MEMO_ENTRIES shapes)."""
    monkeypatch.setattr(shape_memo, "MEMO_VALUES", 0)
    vm, _ = _pair(two_input_model())
    compiled = vm._prepared[0].compiled
    for n in range(1, 3 * MEMO_ENTRIES):
        x = np.full((n, 3), 1.5, np.float32)
        np.testing.assert_array_equal(vm.run({"x": x, "y": x})["z"], x + x)
        assert 1 <= len(compiled.checked) <= MEMO_ENTRIES
    assert ((n, 3), np.dtype(np.float32), (n, 3), np.dtype(np.float32)) in compiled.checked


def test_a_small_function_keeps_the_checks_of_more_shapes():
    """A small function's memo keeps memo_capacity shapes (far more than MEMO_ENTRIES), its
    input checks as many: 3 * MEMO_ENTRIES sizes called in turn are all found again."""
    vm, _ = _pair(two_input_model())
    compiled = vm._prepared[0].compiled
    sizes = range(1, 3 * MEMO_ENTRIES)
    for _ in range(2):
        for n in sizes:
            x = np.full((n, 3), 1.5, np.float32)
            np.testing.assert_array_equal(vm.run({"x": x, "y": x})["z"], x + x)
    assert len(compiled.checked) == len(sizes)


@pytest.mark.parametrize("bad", [
    {"x": np.ones((2, 3), np.float64), "y": np.ones((2, 3), np.float32)},          # dtype
    {"x": np.ones((2, 3), np.dtype(">f4")), "y": np.ones((2, 3), np.float32)},     # byte order
    {"x": np.ones((2, 3), np.float32), "y": np.ones((3, 3), np.float32)},          # n differs
    {"x": np.ones((2, 4), np.float32), "y": np.ones((2, 4), np.float32)},          # a static dim
    {"x": np.ones((6,), np.float32), "y": np.ones((2, 3), np.float32)},            # rank
    {"x": [[1.0, 2.0, 3.0]], "y": np.ones((1, 3), np.float32)},                    # a list (float64)
])
def test_a_wrong_input_after_cached_calls_fails_as_the_interpreter_says(bad):
    vm, interpreted = _pair(two_input_model())
    good = np.ones((2, 3), np.float32)
    for _ in range(3):
        vm.run({"x": good, "y": good})
    assert vm._prepared[0].compiled.checked
    kind, message = _error(vm, bad)
    assert (kind, message) == _error(interpreted, bad)
    assert issubclass(kind, InputError) and "\n" not in message


def test_a_dim_outside_its_declared_range_fails_after_cached_calls():
    vm, interpreted = _pair(two_input_model(), {"n": (1, 4)})
    x = np.ones((4, 3), np.float32)
    vm.run({"x": x, "y": x})
    big = np.ones((5, 3), np.float32)
    assert _error(vm, {"x": big, "y": big}) == _error(interpreted, {"x": big, "y": big})


def test_positional_calls_check_what_is_not_an_array():
    vm, _ = _pair(two_input_model())
    x = np.ones((2, 3), np.float32)
    vm["main"](x, x)
    with pytest.raises(InputError, match="expected a tensor"):
        vm["main"]([[1.0, 2.0, 3.0]] * 2, x)


def test_an_array_subclass_runs_the_checks():
    class Tagged(np.ndarray):
        pass
    vm, _ = _pair(two_input_model())
    x = np.ones((2, 3), np.float32)
    vm.run({"x": x, "y": x})
    tagged = x.view(Tagged)
    np.testing.assert_array_equal(vm.run({"x": tagged, "y": x})["z"], x + x)
    with pytest.raises(InputError, match="dtype"):
        vm.run({"x": tagged.astype(np.float64), "y": x})


def test_a_heap_written_after_the_checks_never_changes_the_cached_one():
    vm, interpreted = _pair(nonzero_model())
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.uniform(-1, 1, 7).astype(np.float32)
        got, want = vm.run({"x": x}), interpreted.run({"x": x})
        np.testing.assert_array_equal(got["i"], want["i"])
        np.testing.assert_array_equal(got["i"], np.array([np.flatnonzero(x > 0)]))
        assert got["s"] == want["s"]
