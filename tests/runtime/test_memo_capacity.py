"""How many shapes a function's shape memo keeps (runtime/shape_memo.py, ``memo_capacity``): a
small function keeps more of them than a large one, in bounded memory, so a loop body whose
carried state grows every iteration (Mask R-CNN's mask paste: one shape per detection) finds
every iteration's shape again on the next run instead of starting afresh each time it passes
16, and a model called at a few input sizes in turn keeps them all."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import relaxpack
import relaxpack.runtime.compiled as compiled
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.shape_memo import MEMO_ENTRIES, MEMO_MAX_ENTRIES, MEMO_VALUES, Memo, memo_capacity


def _memos(*sizes):
    return [Memo(0, 0, 0, tuple(range(n))) for n in sizes]


def test_the_capacity_shrinks_with_the_function_between_its_bounds():
    assert memo_capacity([]) == MEMO_MAX_ENTRIES
    assert memo_capacity(_memos(1)) == MEMO_MAX_ENTRIES
    assert memo_capacity(_memos(60)) == min(MEMO_MAX_ENTRIES, MEMO_VALUES // 60)
    assert memo_capacity(_memos(300, 212)) == MEMO_VALUES // 512 == 128
    assert memo_capacity(_memos(MEMO_VALUES // 20)) == 20
    assert memo_capacity(_memos(10 * MEMO_VALUES)) == MEMO_ENTRIES      # never below


def growing_loop():
    """Loop(M): state (k, 3) -> concat(state, state's first row + i) along axis 0: a new state
    shape every iteration; y = the final state."""
    body = h.make_graph(
        [h.make_node("Identity", ["c"], ["c_out"]),
         h.make_node("Slice", ["s_in", "zero", "one", "zero"], ["first"]),
         h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
         h.make_node("Add", ["first", "fi"], ["row"]),
         h.make_node("Concat", ["s_in", "row"], ["s_out"], axis=0)],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
         h.make_tensor_value_info("s_in", T.FLOAT, ["k", 3])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("s_out", T.FLOAT, ["k1", 3])],
        [h.make_tensor("zero", T.INT64, [1], [0]), h.make_tensor("one", T.INT64, [1], [1])])
    loop = h.make_node("Loop", ["M", "", "s0"], ["y"], body=body)
    graph = h.make_graph([loop], "g", [h.make_tensor_value_info("M", T.INT64, []),
                                       h.make_tensor_value_info("s0", T.FLOAT, [1, 3])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["n", 3])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def reference(m: int, s0: np.ndarray) -> np.ndarray:
    state = s0
    for i in range(m):
        state = np.concatenate([state, state[:1] + np.float32(i)])
    return state


@pytest.fixture()
def fills(monkeypatch):
    """Counts the memo fills (a shape not found in a memo) of every compiled function."""
    count = collections.Counter()
    real = compiled.filler

    def counting(memo, resolved, store, *capacity):
        fill = real(memo, resolved, store, *capacity)

        def counted(heap, *extras):
            count[memo] += 1
            return fill(heap, *extras)
        return counted
    monkeypatch.setattr(compiled, "filler", counting)
    return count


@pytest.mark.parametrize("m", [MEMO_ENTRIES + 1, 3 * MEMO_ENTRIES])
def test_a_loop_whose_state_grows_every_iteration_finds_its_shapes_again(fills, m):
    exe = relaxpack.build(relaxpack.from_onnx(growing_loop()))
    vm, interpreted = VirtualMachine(exe), VirtualMachine(exe)
    interpreted.compiled = False
    feeds = {"M": np.array(m, np.int64), "s0": np.array([[1.0, 2.0, 3.0]], np.float32)}
    first = vm.run(feeds)["y"]
    assert sum(fills.values()) >= m          # one fill per iteration's new shape, at least
    fills.clear()
    again = vm.run(feeds)["y"]
    assert sum(fills.values()) == 0
    want = reference(m, feeds["s0"])
    for got in (first, again, interpreted.run(feeds)["y"]):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_a_small_memo_past_its_capacity_starts_afresh_and_stays_right(fills, monkeypatch):
    """With the capacity at its floor (MEMO_ENTRIES), a loop of more iterations than that fills
    its shapes again on every run: slower, the same results."""
    import relaxpack.runtime.shape_memo as shape_memo
    monkeypatch.setattr(shape_memo, "MEMO_VALUES", 0)
    exe = relaxpack.build(relaxpack.from_onnx(growing_loop()))
    vm = VirtualMachine(exe)
    m = 2 * MEMO_ENTRIES + 3
    feeds = {"M": np.array(m, np.int64), "s0": np.array([[0.5, -1.0, 2.0]], np.float32)}
    vm.run(feeds)
    fills.clear()
    got = vm.run(feeds)["y"]
    assert sum(fills.values()) >= m - MEMO_ENTRIES
    assert got.tobytes() == reference(m, feeds["s0"]).tobytes()
