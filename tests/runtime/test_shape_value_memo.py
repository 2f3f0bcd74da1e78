"""Shape-only values (a causal mask from ranges, a position table): codegen gives them memory
of their own and the shape memo computes them once per input shape; results stay the
interpreter's on alternating shapes (an empty sequence too), the kept arrays are read-only
and never reach a caller, and the memo stays bounded."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import relaxpack
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.bytecode import NO_DST
from relaxpack.runtime.compiled import Resolved, _structure
from relaxpack.runtime.shape_memo import MEMO_ENTRIES, _kept_allocs, memo_plans

NEG = -1e9


def mask_model():
    """scores = x @ x^T + where(j <= i, 0, NEG) (a causal mask from two ranges of the sequence
    length), y = softmax(scores); z = x * cos(concat(p, p)) with p the positions as a column;
    pos = the positions themselves, returned (a shape-only value that is an output)."""
    f = lambda name, *v: h.make_tensor(name, T.FLOAT, [], list(v))  # noqa: E731
    i64 = lambda name, *v: h.make_tensor(name, T.INT64, [len(v)], list(v))  # noqa: E731
    nodes = [
        h.make_node("Shape", ["x"], ["shp"]), h.make_node("Gather", ["shp", "one"], ["s"], axis=0),
        h.make_node("Range", ["zero", "s", "one"], ["r"]),
        h.make_node("Unsqueeze", ["r", "ax1"], ["col"]), h.make_node("Unsqueeze", ["r", "ax0"], ["row"]),
        h.make_node("LessOrEqual", ["row", "col"], ["keep"]),
        h.make_node("Where", ["keep", "fzero", "fneg"], ["mask"]),
        h.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]), h.make_node("MatMul", ["x", "xt"], ["xx"]),
        h.make_node("Add", ["xx", "mask"], ["scores"]), h.make_node("Softmax", ["scores"], ["y"], axis=-1),
        h.make_node("Cast", ["col"], ["colf"], to=T.FLOAT), h.make_node("Concat", ["colf", "colf"], ["cc"], axis=1),
        h.make_node("Cos", ["cc"], ["cs"]), h.make_node("Mul", ["x", "cs"], ["z"]),
        h.make_node("Cast", ["r"], ["pos"], to=T.FLOAT),
    ]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["b", "s", 2])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["b", "s", "s"]),
                      h.make_tensor_value_info("z", T.FLOAT, ["b", "s", 2]),
                      h.make_tensor_value_info("pos", T.FLOAT, ["s"])],
                     [h.make_tensor("zero", T.INT64, [], [0]), h.make_tensor("one", T.INT64, [], [1]),
                      i64("ax0", 0), i64("ax1", 1), f("fzero", 0.0), f("fneg", NEG)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def reference(x):
    s = x.shape[1]
    scores = x @ x.transpose(0, 2, 1) + np.where(np.arange(s)[None, :] <= np.arange(s)[:, None], 0, NEG)
    e = np.exp(scores - scores.max(-1, keepdims=True)) if s else scores
    y = e / e.sum(-1, keepdims=True) if s else e
    p = np.arange(s, dtype=np.float32)[:, None]
    return y, x * np.cos(np.concatenate([p, p], 1)), np.arange(s, dtype=np.float32)


@pytest.fixture(scope="module", params=[0, 2])
def exe(request):
    return relaxpack.build(relaxpack.from_onnx(mask_model()), opt_level=request.param)


def _memo_kernels(vm) -> list[str]:
    prepared = vm._prepared[0]
    instrs = prepared.func.instructions
    plans = memo_plans(instrs, _structure(instrs, 0, len(instrs)), prepared.resolved)
    return [prepared.resolved[pc].name for p in plans for pc in p.pcs if not prepared.resolved[pc].name.startswith("vm.")]


def test_the_mask_and_positions_are_memoized_kernels(exe):
    names = _memo_kernels(VirtualMachine(exe))
    assert {"range", "concat"} <= set(names) and any(n in names for n in ("less_equal", "fused_elementwise"))


def test_results_are_the_interpreters_on_alternating_shapes(exe):
    rng = np.random.default_rng(0)
    compiled, interpreted = VirtualMachine(exe), VirtualMachine(exe)
    interpreted.compiled = False
    for b, s in ((1, 3), (2, 1), (1, 5), (1, 3), (2, 0), (3, 8), (1, 3), (2, 1)):
        x = rng.standard_normal((b, s, 2)).astype(np.float32)
        got, want = compiled.run({"x": x}), interpreted.run({"x": x})
        for name, ref in zip(("y", "z", "pos"), reference(x)):
            np.testing.assert_array_equal(got[name], want[name])
            np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-6)


def test_a_returned_shape_only_value_is_fresh_and_writable(exe):
    vm = VirtualMachine(exe)
    x = np.ones((1, 4, 2), np.float32)
    first = vm.run({"x": x})
    assert first["pos"].flags.writeable and first["z"].flags.writeable
    first["pos"][:] = -7
    first["z"][:] = -7
    again = vm.run({"x": x})
    np.testing.assert_array_equal(again["pos"], np.arange(4, dtype=np.float32))
    np.testing.assert_allclose(again["z"], reference(x)[1], rtol=1e-6)


def test_kept_values_are_read_only_and_the_memo_stays_bounded(exe, monkeypatch):
    import relaxpack.runtime.shape_memo as shape_memo
    monkeypatch.setattr(shape_memo, "MEMO_VALUES", 0)     # the capacity at its floor, MEMO_ENTRIES
    vm = VirtualMachine(exe)
    for s in range(1, MEMO_ENTRIES + 6):
        vm.run({"x": np.ones((1, s, 2), np.float32)})
    memo = vm._prepared[0].compiled.memo
    assert 0 < len(memo) <= MEMO_ENTRIES
    arrays = [v for entry in memo.values() for v in entry if isinstance(v, np.ndarray)]
    kept = [v for v in arrays if not v.flags.writeable]
    # handed out as views of the kept arrays (kernels keep what they prepare for a view), read-only too
    assert kept and not any(v.base is None for v in arrays)
    assert all(v.base.base is None and not v.base.flags.writeable for v in kept)


def arena_operand_model():
    """y = -expand(exp(sum(x, 0)), (m, 6)) with m = x's nonzero count: after NonZero writes the
    heap, a memo holds the arena view of exp(...) and the (m, 6) allocation broadcast_to writes.
    The view is memoized, but its contents are what this run's kernels write there: broadcast_to
    must run every call, not once per shape (it broadcast last run's or uninitialized memory:
    timm's ViT-ResNet hybrid by the dynamo exporter answered 1.2 off)."""
    i64 = lambda name, *v: h.make_tensor(name, T.INT64, [len(v)], list(v))  # noqa: E731
    nodes = [h.make_node("NonZero", ["x"], ["nz"]), h.make_node("Shape", ["nz"], ["shp"]),
             h.make_node("Slice", ["shp", "one", "two"], ["m"]), h.make_node("Concat", ["m", "six"], ["target"], axis=0),
             h.make_node("ReduceSum", ["x", "zero"], ["s"], keepdims=1), h.make_node("Exp", ["s"], ["e"]),
             h.make_node("Expand", ["e", "target"], ["b"]), h.make_node("Neg", ["b"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", 6])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [i64("zero", 0), i64("one", 1), i64("two", 2), i64("six", 6)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("level", [0, 2])
def test_a_kernel_reading_an_arena_view_is_never_memoized(level):
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(arena_operand_model()), opt_level=level))
    assert "broadcast_to" not in _memo_kernels(vm)
    rng = np.random.default_rng(3)
    for n in (3, 3, 5, 3):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        want = -np.broadcast_to(np.exp(x.sum(0, keepdims=True)), (np.count_nonzero(x), 6))
        np.testing.assert_allclose(vm.run({"x": x})["y"], want, rtol=1e-6)


def _r(name, args=(), kwargs=(), dst=NO_DST):
    return Resolved(None, tuple(args), tuple(kwargs), dst, name)


def test_only_allocations_read_by_kernels_alone_are_kept():
    """An output written by one memoizable kernel and read as a kernel operand (through a view
    or a tuple) is kept; one returned in a tuple, passed to another builtin, written twice or
    written by a kernel outside the allowlist is not."""
    alloc = "vm.builtin.alloc_tensor"
    resolved = {pc: r for pc, r in enumerate([
        _r(alloc, dst=1), _r("range", kwargs=[("out", True, 1)]),                          # kept (read via view)
        _r("vm.builtin.reshape_view", [(True, 1), (False, (1, 3))], dst=2),
        _r("vm.builtin.make_tuple", [(True, 2), (True, 2)], dst=3), _r("concat", [(True, 3)], [("out", True, 9)]),
        _r(alloc, dst=4), _r("range", kwargs=[("out", True, 4)]),                          # returned in a tuple
        _r("vm.builtin.make_tuple", [(True, 4)], dst=5), _r("vm.builtin.identity", [(True, 5)], dst=6),
        _r(alloc, dst=7), _r("range", kwargs=[("out", True, 7)]), _r("add", [(True, 1)], [("out", True, 7)]),
        _r(alloc, dst=8), _r("random_uniform", kwargs=[("out", True, 8)]),
    ])}
    assert set(_kept_allocs(resolved)) == {1}


def test_the_memo_starts_afresh_past_its_byte_budget(exe, monkeypatch):
    """Kept masks are bounded in bytes too: past the budget the store holds the newest entry."""
    import relaxpack.runtime.shape_memo as shape_memo
    monkeypatch.setattr(shape_memo, "MEMO_BYTES", 1024)
    vm = VirtualMachine(exe)
    x_small, x_big = np.ones((1, 2, 2), np.float32), np.ones((1, 40, 2), np.float32)
    for x in (x_small, x_big, x_small):
        got = vm.run({"x": x})
        np.testing.assert_allclose(got["y"], reference(x)[0], rtol=1e-5)
    memo = vm._prepared[0].compiled.memo
    assert len(memo) == 1


def test_an_allocation_read_through_an_index_view_is_kept():
    """``index_view`` (a ``take`` of one constant index) is a view like ``reshape_view``: the
    array it views stays kept when a kernel reads the view; passing the view on to another
    builtin still drops it."""
    alloc, index = "vm.builtin.alloc_tensor", "vm.builtin.index_view"
    resolved = {pc: r for pc, r in enumerate([
        _r(alloc, dst=1), _r("astype", kwargs=[("out", True, 1)]),
        _r(index, [(True, 1), (False, 0)], dst=2), _r("cumsum", [(True, 2)], [("out", True, 9)]),
        _r(alloc, dst=3), _r("astype", kwargs=[("out", True, 3)]),
        _r(index, [(True, 3), (False, 0)], dst=4), _r("vm.builtin.identity", [(True, 4)], dst=5),
    ])}
    assert set(_kept_allocs(resolved)) == {1}


def position_model():
    """DETR's sine position embedding of a mask made from the input's shape alone: ones of
    (b, h, w), resized nearest to the feature map's (h2, w2) (a Resize of a shape-only value),
    cast to bool, row 0 taken, cast to float, cumsum over each axis, sin / cos, added to the
    features ``f = Resize(x)`` (a Resize of the data, which must run every call)."""
    nodes = [
        h.make_node("Shape", ["x"], ["shp"]),
        h.make_node("ConstantOfShape", ["shp"], ["ones"], value=h.make_tensor("v", T.FLOAT, [1], [1.0])),
        h.make_node("Resize", ["ones", "", "half"], ["small"], mode="nearest"),
        h.make_node("Resize", ["x", "", "half"], ["f"], mode="nearest"),
        h.make_node("Cast", ["small"], ["mask"], to=T.BOOL),
        h.make_node("Gather", ["mask", "zero"], ["m0"], axis=0),
        h.make_node("Cast", ["m0"], ["mf"], to=T.FLOAT),
        h.make_node("CumSum", ["mf", "axis0"], ["cy"]), h.make_node("CumSum", ["mf", "axis1"], ["cx"]),
        h.make_node("Sin", ["cy"], ["sy"]), h.make_node("Cos", ["cx"], ["sx"]),
        h.make_node("Add", ["sy", "sx"], ["pos"]), h.make_node("Add", ["f", "pos"], ["y"]),
    ]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["b", "h", "w"])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["b", None, None])],
                     [h.make_tensor("half", T.FLOAT, [3], [1.0, 0.5, 0.5]), h.make_tensor("zero", T.INT64, [], [0]),
                      h.make_tensor("axis0", T.INT64, [], [0]), h.make_tensor("axis1", T.INT64, [], [1])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def position_reference(x):
    idx = lambda n: np.floor(np.arange(n // 2) * 2.0).astype(int)  # noqa: E731 - nearest, asymmetric, floor
    f = x[:, idx(x.shape[1])][:, :, idx(x.shape[2])]
    m = np.ones(f.shape[1:], np.float32)
    return f + (np.sin(np.cumsum(m, 0, dtype=np.float32)) + np.cos(np.cumsum(m, 1, dtype=np.float32)))


@pytest.mark.parametrize("level", [0, 2])
def test_a_resized_shape_only_mask_is_memoized_and_the_resized_data_is_not(level):
    exe = relaxpack.build(relaxpack.from_onnx(position_model()), opt_level=level)
    compiled, interpreted = VirtualMachine(exe), VirtualMachine(exe)
    interpreted.compiled = False
    names = _memo_kernels(compiled)
    assert names.count("image.resize") == 1 and "cumsum" in names   # the mask's; never the data's
    rng = np.random.default_rng(1)
    for shape in ((3, 6, 8), (2, 4, 10), (3, 6, 8), (1, 1, 3), (3, 6, 8), (3, 6, 8)):
        x = rng.standard_normal(shape).astype(np.float32)
        got = compiled.run({"x": x})["y"]
        np.testing.assert_array_equal(got, interpreted.run({"x": x})["y"])
        np.testing.assert_allclose(got, position_reference(x), rtol=1e-6, atol=1e-6)
    memo = compiled._prepared[0].compiled.memo
    kept = [v for entry in memo.values() for v in entry if isinstance(v, np.ndarray) and not v.flags.writeable]
    assert len(memo) == 3 and kept and all(v.base is not None and not v.base.flags.writeable for v in kept)


def relative_model():
    """DeBERTa's disentangled attention in small: a table tiled to the batch by repeats from the
    input's shape (``x.repeat(b, 1, 1)`` over an axis of 2), relative positions ``i - j`` from two
    ranges, shifted and clipped, squeezed and expanded to the scores' shape, gathered from
    ``[x, x] @ tiled``. The tile, the positions and their expand are shape-only."""
    i64 = lambda name, *v: h.make_tensor(name, T.INT64, [len(v)], list(v))  # noqa: E731
    nodes = [
        h.make_node("Shape", ["x"], ["b"], start=0, end=1), h.make_node("Shape", ["x"], ["s"], start=1, end=2),
        h.make_node("Concat", ["b", "one", "one"], ["reps"], axis=0),
        h.make_node("Tile", ["table", "reps"], ["tiled"]),
        h.make_node("Concat", ["x", "x"], ["xx"], axis=0), h.make_node("MatMul", ["xx", "tiled"], ["c2p"]),
        h.make_node("Squeeze", ["s", "zero"], ["n"]),
        h.make_node("Range", ["zero_s", "n", "one_s"], ["r"]),
        h.make_node("Unsqueeze", ["r", "ax1"], ["col"]), h.make_node("Unsqueeze", ["r", "zero"], ["row"]),
        h.make_node("Sub", ["col", "row"], ["rel"]), h.make_node("Unsqueeze", ["rel", "ax01"], ["rel4"]),
        h.make_node("Add", ["rel4", "three"], ["shifted"]),
        h.make_node("Clip", ["shifted", "zero_s", "five"], ["idx4"]),
        h.make_node("Squeeze", ["idx4", "zero"], ["idx3"]),
        h.make_node("Shape", ["c2p"], ["bh"], start=0, end=1),
        h.make_node("Concat", ["bh", "s", "s"], ["ishape"], axis=0),
        h.make_node("Expand", ["idx3", "ishape"], ["idx"]),
        h.make_node("GatherElements", ["c2p", "idx"], ["y"], axis=2),
    ]
    rng = np.random.default_rng(3)
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["b", "s", 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [h.make_tensor("table", T.FLOAT, [2, 4, 6], rng.standard_normal(48).astype(np.float32).tolist()),
                      i64("one", 1), i64("zero", 0), i64("ax1", 1), i64("ax01", 0, 1),
                      h.make_tensor("zero_s", T.INT64, [], [0]), h.make_tensor("one_s", T.INT64, [], [1]),
                      h.make_tensor("three", T.INT64, [], [3]), h.make_tensor("five", T.INT64, [], [5])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def relative_reference(x, table):
    b, s = x.shape[:2]
    c2p = np.concatenate([x, x], 0) @ np.tile(table, (b, 1, 1))
    r = np.arange(s)
    idx = np.clip(r[:, None] - r[None, :] + 3, 0, 5)
    return np.take_along_axis(c2p, np.broadcast_to(idx, (2 * b, s, s)), axis=2)


@pytest.mark.parametrize("level", [0, 2])
def test_a_tile_by_the_batch_and_squeezed_positions_are_memoized(level):
    """The tile by dims is a shape-only broadcast (no packed ``dyn.tile`` whose ``match_cast`` ends
    the memo); a ``squeeze`` view of shape-only positions keeps their expand shape-only too."""
    model = relative_model()
    exe = relaxpack.build(relaxpack.from_onnx(model), opt_level=level)
    compiled, interpreted = VirtualMachine(exe), VirtualMachine(exe)
    interpreted.compiled = False
    names = _memo_kernels(compiled)
    assert names.count("broadcast_to") == 2 and "range" in names
    assert "gather_elements" not in names and "matmul" not in names
    table = np.array([t for t in model.graph.initializer if t.name == "table"][0].float_data,
                     np.float32).reshape(2, 4, 6)
    rng = np.random.default_rng(2)
    for b, s in ((1, 5), (3, 17), (2, 1), (1, 5), (2, 0), (0, 3), (1, 5)):
        x = rng.standard_normal((b, s, 4)).astype(np.float32)
        got = compiled.run({"x": x})["y"]
        np.testing.assert_array_equal(got, interpreted.run({"x": x})["y"])
        np.testing.assert_array_equal(got, relative_reference(x, table))


def relative_gather_model():
    """y = GatherElements(x, expand(s - 1 - range(s), (b, s, s)), axis=2), x of (b, s, w): DeBERTa's
    relative-position gathers in small, the index table a function of the sequence length alone."""
    i64 = lambda name, *v: h.make_tensor(name, T.INT64, [len(v)], list(v))  # noqa: E731
    nodes = [
        h.make_node("Shape", ["x"], ["shp"]), h.make_node("Gather", ["shp", "one"], ["s"], axis=0),
        h.make_node("Range", ["zero", "s", "one"], ["r"]), h.make_node("Sub", ["s", "one"], ["last"]),
        h.make_node("Sub", ["last", "r"], ["back"]), h.make_node("Unsqueeze", ["back", "ax01"], ["row"]),
        h.make_node("Slice", ["shp", "s0", "s2"], ["lead"]), h.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
        h.make_node("Concat", ["lead", "s1"], ["target"], axis=0), h.make_node("Expand", ["row", "target"], ["idx"]),
        h.make_node("GatherElements", ["x", "idx"], ["y"], axis=2),
    ]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["b", "s", "w"])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["b", "s", "s"])],
                     [h.make_tensor("zero", T.INT64, [], [0]), h.make_tensor("one", T.INT64, [], [1]),
                      i64("ax0", 0), i64("ax01", 0, 1), i64("s0", 0), i64("s2", 2)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("level", [0, 2])
def test_a_gather_by_a_memoized_table_reads_it_as_frozen(level, monkeypatch):
    """The expanded table is memoized, so the gather gets it frozen (.frozen) and takes kept
    positions: the interpreter's results on alternating shapes with new data every call."""
    import relaxpack.runtime.kernels.index as index
    seen = []
    monkeypatch.setattr(index, "is_frozen", lambda a: seen.append(_frozen(a)) or seen[-1])
    exe = relaxpack.build(relaxpack.from_onnx(relative_gather_model()), opt_level=level)
    compiled, interpreted = VirtualMachine(exe), VirtualMachine(exe)
    interpreted.compiled = False
    assert "broadcast_to" in _memo_kernels(compiled)
    rng = np.random.default_rng(5)
    for b, s, w in ((2, 70, 75), (2, 70, 75), (1, 3, 4), (2, 70, 75), (3, 9, 9), (1, 3, 4), (2, 70, 75)):
        x = rng.standard_normal((b, s, w)).astype(np.float32)
        got, want = compiled.run({"x": x})["y"], interpreted.run({"x": x})["y"]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, x[:, :, ::-1][:, :, w - s:])
    assert any(seen)


def _frozen(array) -> bool:
    from relaxpack.runtime.frozen import is_frozen
    return is_frozen(array)
