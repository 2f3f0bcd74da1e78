"""Loop and Scan against onnxruntime: trip counts (0 included), cond-terminated
loops, state whose shape changes, outer-scope reads, scan directions and axes,
10,000 iterations; the IR round trip and the archive of a model with a Loop."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import relaxpack
from relaxpack.errors import UnsupportedOpError
from relaxpack.ir import parse
from relaxpack.ir.equality import assert_structural_equal
from relaxpack.ir.well_formed import well_formed_errors
from relaxpack.runtime import VirtualMachine, load

from .helpers import check_model


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=8)


def _accumulate_loop(limit=20.0):
    """x += y (y from the outer scope) while sum(x) < limit; scan out x * 2."""
    body = h.make_graph([
        h.make_node("Add", ["x_in", "y"], ["x_out"]),
        h.make_node("Mul", ["x_in", "two"], ["scan"]),
        h.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0),
        h.make_node("Less", ["s", "lim"], ["c_out"]),
    ], "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                h.make_tensor_value_info("x_in", T.FLOAT, ["n"])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, ["n"]),
         h.make_tensor_value_info("scan", T.FLOAT, ["n"])],
        [h.make_tensor("two", T.FLOAT, [], [2.0]), h.make_tensor("lim", T.FLOAT, [], [limit])])
    return _model([h.make_node("Loop", ["M", "cond", "x0"], ["xf", "scans"], body=body)],
                  [h.make_tensor_value_info("M", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
                   h.make_tensor_value_info("x0", T.FLOAT, ["n"]), h.make_tensor_value_info("y", T.FLOAT, ["n"])],
                  [h.make_tensor_value_info("xf", T.FLOAT, ["n"]),
                   h.make_tensor_value_info("scans", T.FLOAT, ["k", "n"])])


def _feeds(trips, cond=True, n=3):
    return {"M": np.array(trips, np.int64), "cond": np.array(cond), "x0": np.arange(n, dtype=np.float32),
            "y": np.ones(n, np.float32)}


def test_loop_trip_counts_condition_and_outer_scope():
    check_model(_accumulate_loop(), _feeds(10), _feeds(0), _feeds(3), _feeds(10, cond=False), _feeds(2, n=5))


def test_a_body_declaring_its_iteration_number_1d_gets_it_1d():
    """tf2onnx's CropAndResize loop declares the iteration number [1] (the spec says a scalar) and
    slices with it; onnxruntime hands the body what it declares: rows of shape (1, 3), stacked."""
    body = h.make_graph(
        [h.make_node("Add", ["i", "one"], ["e"]), h.make_node("Slice", ["d", "i", "e", "zero"], ["row"]),
         h.make_node("Identity", ["c_in"], ["c_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, [1]), h.make_tensor_value_info("c_in", T.BOOL, [])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("row", T.FLOAT, [1, 3])],
        [h.make_tensor("one", T.INT64, [1], [1]), h.make_tensor("zero", T.INT64, [1], [0])])
    model = _model([h.make_node("Loop", ["M", "cond"], ["rows"], body=body)],
                   [h.make_tensor_value_info("M", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
                    h.make_tensor_value_info("d", T.FLOAT, ["n", 3])],
                   [h.make_tensor_value_info("rows", T.FLOAT, ["k", 1, 3])])
    d = np.arange(15, dtype=np.float32).reshape(5, 3)
    check_model(model, {"M": np.array(3, np.int64), "cond": np.array(True), "d": d},
                {"M": np.array(5, np.int64), "cond": np.array(True), "d": d})


def test_loop_keeps_the_state_shape_when_the_body_does():
    mod = relaxpack.from_onnx(_accumulate_loop())
    assert mod["main"].ret_struct_info.fields[0].shape == mod["main"].params[2].struct_info.shape


def test_loop_state_that_grows_each_iteration():
    body = h.make_graph([
        h.make_node("Concat", ["x_in", "one"], ["x_out"], axis=0),
        h.make_node("Identity", ["c"], ["c_out"]),
    ], "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                h.make_tensor_value_info("x_in", T.FLOAT, ["m"])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, ["m"])],
        [h.make_tensor("one", T.FLOAT, [1], [1.0])])
    model = _model([h.make_node("Loop", ["M", "", "x0"], ["xf"], body=body)],
                   [h.make_tensor_value_info("M", T.INT64, []), h.make_tensor_value_info("x0", T.FLOAT, [2])],
                   [h.make_tensor_value_info("xf", T.FLOAT, ["k"])])
    x0 = np.array([3.0, 4.0], np.float32)
    check_model(model, *({"M": np.array(k, np.int64), "x0": x0} for k in (0, 1, 4)))


def test_loop_of_ten_thousand_iterations_runs_in_constant_stack():
    body = h.make_graph([
        h.make_node("Add", ["x_in", "one"], ["x_out"]),
        h.make_node("Identity", ["c"], ["c_out"]),
    ], "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                h.make_tensor_value_info("x_in", T.FLOAT, [])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, [])],
        [h.make_tensor("one", T.FLOAT, [], [1.0])])
    model = _model([h.make_node("Loop", ["M", "", "x0"], ["xf"], body=body)],
                   [h.make_tensor_value_info("M", T.INT64, []), h.make_tensor_value_info("x0", T.FLOAT, [])],
                   [h.make_tensor_value_info("xf", T.FLOAT, [])])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    out = vm.run({"M": np.array(10_000, np.int64), "x0": np.array(0.0, np.float32)})
    assert out["xf"] == 10_000.0


def _prefix_body(first, seq):
    """Body nodes appending x[:i+1] to the carried sequence ``seq`` (made from ``seq_in`` by ``first``)."""
    return [*first,
            h.make_node("Identity", ["c"], ["c_out"]),
            h.make_node("Add", ["i", "one"], ["end"]),
            h.make_node("Unsqueeze", ["end", "zero"], ["ends"]),
            h.make_node("Slice", ["x", "zeros", "ends"], ["prefix"]),
            h.make_node("SequenceInsert", [seq, "prefix"], ["seq_out"])]


def _prefix_loop(state_type, first, seq, opset, out_type=None):
    body = h.make_graph(
        _prefix_body(first, seq), "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
         h.make_value_info("seq_in", state_type)],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_value_info("seq_out", out_type or state_type)],
        [h.make_tensor("one", T.INT64, [], [1]), h.make_tensor("zero", T.INT64, [1], [0]),
         h.make_tensor("zeros", T.INT64, [1], [0])])
    seq_of_any = h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, None))
    return _model([h.make_node("Loop", ["M", "", "s0"], ["sf"], body=body)],
                  [h.make_tensor_value_info("M", T.INT64, []), h.make_tensor_value_info("x", T.FLOAT, ["n"]),
                   h.make_value_info("s0", state_type)],
                  [h.make_value_info("sf", seq_of_any)], opset=opset)


def _check_sequence_output(model, *feeds_list):
    """Run ``model`` (one sequence output) and onnxruntime at each feeds; compare element by element."""
    import onnxruntime as ort
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        got, = vm.run(feeds).values()
        want, = sess.run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def test_loop_sequence_state_whose_elements_change_rank():
    """The initial sequence declares 0-d elements; the body appends 1-d ones (ONNX's test_loop13_seq)."""
    scalars = h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, []))
    model = _prefix_loop(scalars, [], "seq_in", opset=13)
    x = np.arange(1, 6, dtype=np.float32) * 1.5
    feeds = [{"M": np.array(k, np.int64), "x": x, "s0": s0}
             for k, s0 in ((3, []), (0, []), (2, [np.array(7.0, np.float32)]))]
    _check_sequence_output(model, *feeds)


def test_loop_optional_sequence_state_returned_as_a_sequence():
    """An optional sequence state that the body returns bare, holding 0-d and 1-d tensors
    (ONNX's test_loop16_seq_none, whose runner cannot compare a 0-d element)."""
    scalars = h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, []))
    optional = h.make_optional_type_proto(scalars)
    then = h.make_graph([h.make_node("Constant", [], ["zero_f"], value_float=0.0),
                         h.make_node("SequenceConstruct", ["zero_f"], ["fresh"])], "then", [],
                        [h.make_value_info("fresh", scalars)])
    orelse = h.make_graph([h.make_node("OptionalGetElement", ["seq_in"], ["got"])], "else", [],
                          [h.make_value_info("got", scalars)])
    first = [h.make_node("OptionalHasElement", ["seq_in"], ["has"]), h.make_node("Not", ["has"], ["none"]),
             h.make_node("If", ["none"], ["seq"], then_branch=then, else_branch=orelse)]
    model = _prefix_loop(optional, first, "seq", opset=16, out_type=scalars)
    x = np.arange(1, 6, dtype=np.float32) - 2.5
    feeds = [{"M": np.array(k, np.int64), "x": x, "s0": s0}
             for k, s0 in ((4, [np.array(3.0, np.float32)]), (1, []), (0, [np.array(1.0, np.float32)]))]
    _check_sequence_output(model, *feeds)


def test_loop_sequence_state_starting_empty_takes_the_rank_the_body_inserts():
    """TorchScript's ``repeat_interleave`` by a tensor (FastSpeech2's length regulator): a Loop
    appends 2-D tensors to a SequenceEmpty (elements of unknown rank) and a ConcatFromSequence
    joins them. The carried sequence kept the unknown rank and the concat was refused."""
    body = h.make_graph([
        h.make_node("Gather", ["x", "i"], ["row"], axis=0),
        h.make_node("Unsqueeze", ["row", "zero"], ["row2"]),
        h.make_node("Tile", ["row2", "reps"], ["rep"]),
        h.make_node("SequenceInsert", ["seq_in", "rep"], ["seq_out"]),
        h.make_node("Identity", ["c"], ["c_out"]),
    ], "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                h.make_tensor_sequence_value_info("seq_in", T.FLOAT, None)],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_sequence_value_info("seq_out", T.FLOAT, None)],
        [h.make_tensor("zero", T.INT64, [1], [0]), h.make_tensor("reps", T.INT64, [2], [2, 1])])
    model = _model([h.make_node("Shape", ["x"], ["shape"], end=1), h.make_node("Squeeze", ["shape"], ["n"]),
                    h.make_node("SequenceEmpty", [], ["empty"], dtype=T.FLOAT),
                    h.make_node("Loop", ["n", "", "empty"], ["seq"], body=body),
                    h.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)],
                   [h.make_tensor_value_info("x", T.FLOAT, ["n", 4])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    rng = np.random.default_rng(0)
    check_model(model, *({"x": rng.standard_normal((n, 4)).astype(np.float32)} for n in (3, 1, 6)))


def test_loop_tensor_state_that_changes_rank_is_unsupported():
    body = h.make_graph([
        h.make_node("Unsqueeze", ["x_in", "zero"], ["x_out"]),
        h.make_node("Identity", ["c"], ["c_out"]),
    ], "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                h.make_tensor_value_info("x_in", T.FLOAT, None)],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, None)],
        [h.make_tensor("zero", T.INT64, [1], [0])])
    model = _model([h.make_node("Loop", ["M", "", "x0"], ["xf"], body=body)],
                   [h.make_tensor_value_info("M", T.INT64, []), h.make_tensor_value_info("x0", T.FLOAT, [2])],
                   [h.make_tensor_value_info("xf", T.FLOAT, None)])
    with pytest.raises(UnsupportedOpError, match="Loop.*loop-carried value 0 changes .*rank or dtype"):
        relaxpack.from_onnx(model)


def _scan_model(in_axis, in_dir, out_axis, out_dir):
    """state += x_t (a row); scan out state * 1."""
    body = h.make_graph([
        h.make_node("Add", ["s_in", "x_t"], ["s_out"]),
        h.make_node("Identity", ["s_out"], ["y_t"]),
    ], "body", [h.make_tensor_value_info("s_in", T.FLOAT, [2]), h.make_tensor_value_info("x_t", T.FLOAT, [2])],
        [h.make_tensor_value_info("s_out", T.FLOAT, [2]), h.make_tensor_value_info("y_t", T.FLOAT, [2])])
    node = h.make_node("Scan", ["s0", "x"], ["sf", "ys"], body=body, num_scan_inputs=1,
                       scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                       scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    x_shape = ["t", 2] if in_axis == 0 else [2, "t"]
    return _model([node], [h.make_tensor_value_info("s0", T.FLOAT, [2]),
                           h.make_tensor_value_info("x", T.FLOAT, x_shape)],
                  [h.make_tensor_value_info("sf", T.FLOAT, [2]), h.make_tensor_value_info("ys", T.FLOAT, None)])


@pytest.mark.parametrize("in_axis,in_dir,out_axis,out_dir", [(0, 0, 0, 0), (0, 1, 0, 0), (1, 0, 1, 1),
                                                              (1, 1, 0, 1), (0, 0, -1, 0)])
def test_scan_directions_and_axes(in_axis, in_dir, out_axis, out_dir):
    rng = np.random.default_rng(0)
    feeds = []
    for t in (4, 1):
        x = rng.standard_normal((t, 2) if in_axis == 0 else (2, t)).astype(np.float32)
        feeds.append({"s0": np.zeros(2, np.float32), "x": x})
    check_model(_scan_model(in_axis, in_dir, out_axis, out_dir), *feeds)


def test_loop_module_round_trips_through_the_text_form():
    mod = relaxpack.from_onnx(_accumulate_loop())
    text = mod.script()
    assert "R.loop(cls.loop_body" in text
    back = parse(text)
    assert_structural_equal(back, mod)
    assert well_formed_errors(back) == []


def test_archive_of_a_loop_model_loads_and_runs(tmp_path):
    exe = relaxpack.build(relaxpack.from_onnx(_accumulate_loop()))
    path = tmp_path / "loop.rpk"
    exe.save(path)
    vm = VirtualMachine(load(path))
    out = vm.run(_feeds(10))
    want = VirtualMachine(exe).run(_feeds(10))
    for name in want:
        np.testing.assert_array_equal(out[name], want[name])
    assert out["scans"].shape == (6, 3)


def _scan8_model(directions, with_lens):
    """Opset 8: s += a_t * b_t (one state); scan out s and a_t - b_t. Symbolic batch and time."""
    body = h.make_graph([
        h.make_node("Mul", ["a_t", "b_t"], ["ab"]),
        h.make_node("Add", ["s_in", "ab"], ["s_out"]),
        h.make_node("Identity", ["s_out"], ["y_t"]),
        h.make_node("Sub", ["a_t", "b_t"], ["d_t"]),
    ], "body", [h.make_tensor_value_info(n, T.FLOAT, [2]) for n in ("s_in", "a_t", "b_t")],
        [h.make_tensor_value_info(n, T.FLOAT, [2]) for n in ("s_out", "y_t", "d_t")])
    node = h.make_node("Scan", ["lens" if with_lens else "", "s0", "a", "b"], ["sf", "ys", "ds"], body=body,
                       num_scan_inputs=2, directions=directions)
    inputs = [h.make_tensor_value_info("s0", T.FLOAT, ["batch", 2]),
              h.make_tensor_value_info("a", T.FLOAT, ["batch", "time", 2]),
              h.make_tensor_value_info("b", T.FLOAT, ["batch", "time", 2])]
    if with_lens:
        inputs.insert(0, h.make_tensor_value_info("lens", T.INT64, ["batch"]))
    outputs = [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("sf", "ys", "ds")]
    return _model([node], inputs, outputs, opset=8)


@pytest.mark.parametrize("directions", [[0, 0], [1, 0], [1, 1]])
@pytest.mark.parametrize("with_lens", [False, True])
def test_scan_opset8_batches_lengths_and_directions(directions, with_lens):
    rng = np.random.default_rng(1)
    feeds = []
    for batch, time, lens in ((3, 4, [4, 1, 2]), (1, 1, [1]), (2, 5, [3, 5])):
        f = {"s0": rng.standard_normal((batch, 2)).astype(np.float32),
             "a": rng.standard_normal((batch, time, 2)).astype(np.float32),
             "b": rng.standard_normal((batch, time, 2)).astype(np.float32)}
        if with_lens:
            f["lens"] = np.array(lens, np.int64)
        feeds.append(f)
    check_model(_scan8_model(directions, with_lens), *feeds)


def _scan8_spec(directions):
    """The spec's pseudo-code for :func:`_scan8_model`, padding scan outputs with zeros."""
    def run(feeds):
        s0, a, b = feeds["s0"], feeds["a"], feeds["b"]
        batch, time = a.shape[:2]
        lens = feeds.get("lens", np.full(batch, time))
        sf, ys, ds = s0.copy(), np.zeros_like(a), np.zeros_like(a)
        for e in range(batch):
            n = int(lens[e])
            for t in range(n):
                a_t = a[e, n - 1 - t if directions[0] else t]
                b_t = b[e, n - 1 - t if directions[1] else t]
                sf[e] = sf[e] + a_t * b_t
                ys[e, t], ds[e, t] = sf[e], a_t - b_t
        return sf, ys, ds
    return run


def test_scan_opset8_sequence_of_length_zero_keeps_the_initial_state():
    """onnxruntime refuses a length 0 (the spec allows any length up to the time axis)."""
    rng = np.random.default_rng(2)
    feeds = {"lens": np.array([0, 3], np.int64), "s0": rng.standard_normal((2, 2)).astype(np.float32),
             "a": rng.standard_normal((2, 3, 2)).astype(np.float32),
             "b": rng.standard_normal((2, 3, 2)).astype(np.float32)}
    check_model(_scan8_model([1, 0], True), feeds, ref=_scan8_spec([1, 0]))
