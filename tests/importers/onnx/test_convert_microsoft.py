"""com.microsoft ops against onnxruntime (which implements them) on random
inputs, with a symbolic batch where the op allows it.

Tolerances: onnxruntime's contrib kernels vectorize their reductions and use
their own erf/tanh approximations, so float results agree to a few ulp of
the result's magnitude (rtol/atol 1e-5), not bit for bit; the quantized
results are integers and must agree exactly. The integer GEMMs
(MatMulIntegerToFloat, DynamicQuantizeMatMul) are judged by their exact
semantics, and against onnxruntime only on inputs whose u8 x s8 products
cannot saturate in int16 pairs (``tests/integer_semantics.py``).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import relaxpack
from relaxpack.errors import ShapeError, UnsupportedOpError
from relaxpack.runtime import VirtualMachine

from ...integer_semantics import exact_matmul_integer, pairs_cannot_saturate
from .backend_case import assert_close

MS = "com.microsoft"
FLOAT_TOL = (1e-5, 1e-5)


def rand(*shape, dtype=np.float32, seed=0, low=None, high=None):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min if low is None else low, (info.max if high is None else high) + 1,
                            shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def ms_model(op, feeds, consts=None, inputs=None, attrs=None, outputs=1, domain=MS, opset=17, sym=None):
    """One node of ``domain``; graph inputs ``feeds`` (``sym``: symbolic shapes), initializers ``consts``."""
    consts = consts or {}
    names = list(inputs) if inputs is not None else [*feeds, *consts]
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                  (sym or {}).get(n, a.shape)) for n, a in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in consts.items()]
    outs = [f"y{i}" if isinstance(outputs, int) else o for i, o in
            enumerate(range(outputs) if isinstance(outputs, int) else outputs)]
    node = helper.make_node(op, names, outs, domain=domain, **(attrs or {}))
    graph = helper.make_graph([node], "g", graph_inputs, [onnx.ValueInfoProto(name=o) for o in outs if o], inits)
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(MS, 1)] if domain == MS else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def check(model, *feeds_list, tol=FLOAT_TOL, dims=None):
    """Import and build once, then match onnxruntime at every feeds."""
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model, dims=dims)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    for feeds in feeds_list:
        got = vm.run(feeds)
        for name, want in zip(names, sess.run(None, feeds)):
            assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
            assert_close(got[name], want, *tol, name)


def batches(make, *sizes):
    return [make(b, seed) for seed, b in enumerate(sizes)]


# ---------------------------------------------------------------- activations


@pytest.mark.parametrize("op, attrs", [("Gelu", {}), ("FastGelu", {}), ("QuickGelu", {}),
                                       ("QuickGelu", {"alpha": 1.5})])
def test_activations(op, attrs):
    model = ms_model(op, {"x": rand(2, 5, 8)}, attrs=attrs, sym={"x": ["b", 5, 8]})
    check(model, *batches(lambda b, s: {"x": 3 * rand(b, 5, 8, seed=s)}, 1, 3))


@pytest.mark.parametrize("op", ["BiasGelu", "FastGelu"])
def test_activations_with_bias(op):
    model = ms_model(op, {"x": rand(2, 5, 8)}, {"bias": rand(8, seed=9)}, sym={"x": ["b", 5, 8]})
    check(model, *batches(lambda b, s: {"x": 3 * rand(b, 5, 8, seed=s)}, 1, 3))


# ---------------------------------------------------------------- FusedMatMul


@pytest.mark.parametrize("trans_a, trans_b, alpha", [(0, 0, 1.0), (1, 0, 0.5), (0, 1, 2.0), (1, 1, -0.25)])
def test_fused_matmul(trans_a, trans_b, alpha):
    a_shape, b_shape = (2, 3, 4) if not trans_a else (2, 4, 3), (4, 5) if not trans_b else (5, 4)
    model = ms_model("FusedMatMul", {"a": rand(*a_shape)}, {"b": rand(*b_shape, seed=1)},
                     attrs={"transA": trans_a, "transB": trans_b, "alpha": alpha},
                     sym={"a": ["n", *a_shape[1:]]})
    check(model, *batches(lambda n, s: {"a": rand(n, *a_shape[1:], seed=s)}, 1, 4))


#: (A's shape, B's shape, transA, transB, transBatchA, transBatchB): A[m, b, k] and B[k, b, n] read as
#: [b, m, k] and [b, k, n] (the Transpose (1, 0, 2) / (1, 2, 0, 3) onnxruntime folds in), combined
#: with the last-two swap, rank 4 with two batch dims
BATCH_TRANSPOSES = [
    ((3, 2, 4), (2, 4, 5), 0, 0, 1, 0),
    ((3, 2, 4), (4, 2, 5), 0, 0, 1, 1),
    ((4, 2, 3), (5, 2, 4), 1, 1, 1, 1),
    ((5, 2, 3, 4), (2, 3, 4, 6), 0, 0, 1, 0),
    ((2, 3, 5, 4), (6, 2, 3, 4), 0, 1, 0, 1),
    ((2, 4, 5), (4, 2, 3), 1, 0, 0, 1),
]


@pytest.mark.parametrize("a_shape, b_shape, trans_a, trans_b, batch_a, batch_b", BATCH_TRANSPOSES)
def test_fused_matmul_batch_transposes(a_shape, b_shape, trans_a, trans_b, batch_a, batch_b):
    """Batch-transposed operands (onnxruntime's saved optimized WavLM has them), on odd sizes."""
    model = ms_model("FusedMatMul", {"a": rand(*a_shape), "b": rand(*b_shape, seed=1)},
                     attrs={"transA": trans_a, "transB": trans_b, "transBatchA": batch_a, "transBatchB": batch_b,
                            "alpha": 0.5})
    check(model, {"a": rand(*a_shape, seed=2), "b": rand(*b_shape, seed=3)})


@pytest.mark.parametrize("a_shape, b_shape", [((3, 2, 4), (4, 5)), ((4, 5), (5, 3)), ((3, 2, 4), (1, 2, 4, 5))])
def test_fused_matmul_batch_transposes_need_one_rank_of_3_or_more(a_shape, b_shape):
    """onnxruntime refuses these at run time; relaxpack at conversion, by name."""
    model = ms_model("FusedMatMul", {"a": rand(*a_shape)}, {"b": rand(*b_shape)}, attrs={"transBatchA": 1})
    with pytest.raises(ShapeError, match=r"FusedMatMul.*transBatchA/transBatchB need A and B of one rank, 3 or more"):
        relaxpack.from_onnx(model)


def test_fused_matmul_batch_transpose_with_symbolic_leading_dim():
    """A's leading dim (the rows once moved) symbolic: one build, two sizes."""
    model = ms_model("FusedMatMul", {"a": rand(3, 2, 4)}, {"b": rand(2, 4, 5, seed=1)},
                     attrs={"transBatchA": 1}, sym={"a": ["m", 2, 4]})
    check(model, *batches(lambda m, s: {"a": rand(m, 2, 4, seed=s)}, 1, 7))


@pytest.mark.parametrize("activation, extra", [("Relu", {}), ("Tanh", {}), ("Sigmoid", {}),
                                               ("LeakyRelu", {"activation_alpha": 0.2})])
def test_fused_gemm(activation, extra):
    model = ms_model("FusedGemm", {"a": rand(3, 4)}, {"b": rand(5, 4, seed=1), "c": rand(5, seed=2)},
                     attrs={"transB": 1, "alpha": 0.5, "beta": 2.0, "activation": activation, **extra},
                     sym={"a": ["n", 4]})
    check(model, *batches(lambda n, s: {"a": rand(n, 4, seed=s)}, 1, 6))


@pytest.mark.parametrize("activation, params, with_z", [
    ("Relu", None, False), ("Relu", None, True), ("Tanh", None, False), ("Sigmoid", None, True),
    ("LeakyRelu", [0.2], False), ("Clip", [-0.5, 0.75], True), ("HardSigmoid", [0.3, 0.4], False)])
def test_fused_conv(activation, params, with_z):
    """What onnxruntime's optimizer writes for Conv (+ Add) + activation, at odd sizes."""
    attrs = {"activation": activation, "pads": [1, 0, 1, 2], "strides": [2, 1], "group": 1}
    if params is not None:
        attrs["activation_params"] = params
    consts = {"w": rand(6, 3, 3, 2, seed=1) * 0.3, "b": rand(6, seed=2)}
    feeds = {"x": rand(2, 3, 9, 7)}
    inputs = ["x", "w", "b"]
    sym = {"x": ["n", 3, "h", "w"]}
    if with_z:   # Z has the conv output's shape: (n, 6, (h + 2 - 3) // 2 + 1, w + 2 - 2 + 1)
        feeds["z"] = rand(2, 6, 5, 8, seed=3)
        inputs.append("z")
        sym["z"] = ["n", 6, "oh", "ow"]
    model = ms_model("FusedConv", feeds, consts, inputs=inputs, attrs=attrs, sym=sym)

    def make(n, s):
        h, w = 9 + 2 * s, 7 + s
        out = {"x": rand(n, 3, h, w, seed=s)}
        if with_z:
            out["z"] = rand(n, 6, (h - 1) // 2 + 1, w + 1, seed=s + 7)
        return out
    check(model, *batches(make, 1, 3))


def test_fused_conv_unknown_activation():
    model = ms_model("FusedConv", {"x": rand(1, 3, 5, 5)}, {"w": rand(4, 3, 3, 3, seed=1)},
                     attrs={"activation": "Softplus"})
    with pytest.raises(UnsupportedOpError, match="FusedConv.*activation 'Softplus'"):
        relaxpack.from_onnx(model)


# ---------------------------------------------------------------- layer norms


@pytest.mark.parametrize("with_beta, with_bias", [(True, True), (True, False), (False, False)])
def test_skip_layer_norm(with_beta, with_bias):
    consts = {"gamma": rand(16, seed=2)}
    inputs = ["x", "skip", "gamma", "beta" if with_beta else "", "bias" if with_bias else ""]
    if with_beta:
        consts["beta"] = rand(16, seed=3)
    if with_bias:
        consts["bias"] = rand(16, seed=4)
    model = ms_model("SkipLayerNormalization", {"x": rand(2, 3, 16), "skip": rand(2, 3, 16)}, consts,
                     inputs=inputs, attrs={"epsilon": 1e-5}, outputs=["out", "", "", "sum"],
                     sym={"x": ["b", "s", 16], "skip": ["b", "s", 16]})
    check(model, *batches(lambda b, s: {"x": rand(b, 7, 16, seed=s), "skip": rand(b, 7, 16, seed=s + 5)}, 1, 3))


def test_skip_simplified_layer_norm():
    model = ms_model("SkipSimplifiedLayerNormalization", {"x": rand(2, 3, 16), "skip": rand(2, 3, 16)},
                     {"gamma": rand(16, seed=2), "bias": rand(16, seed=4)}, inputs=["x", "skip", "gamma", "bias"],
                     attrs={"epsilon": 1e-6}, outputs=["out", "", "", "sum"], sym={"x": ["b", 3, 16], "skip": ["b", 3, 16]})
    check(model, {"x": rand(2, 3, 16), "skip": rand(2, 3, 16, seed=1)})


def test_simplified_layer_norm_in_the_default_domain():
    model = ms_model("SimplifiedLayerNormalization", {"x": rand(2, 3, 16)}, {"scale": rand(16, seed=2)},
                     attrs={"epsilon": 1e-6}, domain="", opset=13, sym={"x": ["b", 3, 16]})
    check(model, *batches(lambda b, s: {"x": rand(b, 3, 16, seed=s)}, 1, 2))


def test_contrib_layer_norm_before_opset_17():
    model = ms_model("LayerNormalization", {"x": rand(2, 3, 16)}, {"scale": rand(16, seed=2), "b": rand(16, seed=3)},
                     attrs={"epsilon": 1e-5}, domain="", opset=13, sym={"x": ["b", 3, 16]})
    check(model, *batches(lambda b, s: {"x": rand(b, 3, 16, seed=s)}, 1, 2))


@pytest.mark.parametrize("segments, mask, position_ids", [(True, True, False), (False, True, False),
                                                          (True, False, False), (True, True, True)])
def test_embed_layer_norm(segments, mask, position_ids):
    vocab, max_pos, hidden, batch, seq = 30, 12, 16, 3, 5
    consts = {"word": rand(vocab, hidden, seed=1), "pos": rand(max_pos, hidden, seed=2),
              "gamma": rand(hidden, seed=4), "beta": rand(hidden, seed=5)}
    feeds = {"ids": rand(batch, seq, dtype=np.int32, low=0, high=vocab - 1)}
    if segments:
        consts["seg_emb"] = rand(2, hidden, seed=3)
        feeds["seg"] = rand(batch, seq, dtype=np.int32, low=0, high=1, seed=6)
    if mask:
        m = np.ones((batch, seq), np.int32)
        m[1, 3:] = 0
        m[2, 1] = 0      # not only right padding: the index counts the entries equal to 1
        m[0, 2], m[0, 4] = 2, -1    # onnxruntime counts only 1s (a random mask from `relaxpack check`)
        feeds["mask"] = m
    if position_ids:
        feeds["posids"] = rand(batch, seq, dtype=np.int32, low=0, high=max_pos - 1, seed=7)
    inputs = ["ids", "seg" if segments else "", "word", "pos", "seg_emb" if segments else "", "gamma", "beta",
              "mask" if mask else "", "posids" if position_ids else ""]
    while inputs[-1] == "":
        inputs.pop()
    outputs = ["out", "mask_index", "sum"] if mask or segments else ["out", "", "sum"]
    model = ms_model("EmbedLayerNormalization", feeds, consts, inputs=inputs, attrs={"epsilon": 1e-5},
                     outputs=outputs, sym={k: ["b", "s"] for k in feeds})
    check(model, feeds)


@pytest.mark.parametrize("dtype, segments, mask", [(np.uint8, True, True), (np.int8, False, True),
                                                   (np.uint8, True, False)])
def test_quantized_embed_layer_norm(dtype, segments, mask):
    """QEmbedLayerNormalization (onnxruntime's dynamic quantization of the fused BERT embedding):
    against onnxruntime's, and against its float EmbedLayerNormalization of the dequantized tables."""
    vocab, max_pos, hidden, batch, seq = 30, 12, 16, 3, 5
    zero = {np.uint8: 128, np.int8: 0}[dtype]
    tables = {"word": (vocab, hidden), "pos": (max_pos, hidden), "seg_emb": (2, hidden), "gamma": (hidden,),
              "beta": (hidden,)}
    if not segments:
        del tables["seg_emb"]
    consts, floats = {}, {}
    for i, (name, shape) in enumerate(tables.items()):
        consts[name] = rand(*shape, dtype=dtype, seed=i)
        consts[name + "_scale"] = np.float32(0.01 * (i + 1))
        consts[name + "_zp"] = dtype(zero + i)
        floats[name] = (consts[name].astype(np.float32) - np.float32(zero + i)) * consts[name + "_scale"]
    feeds = {"ids": rand(batch, seq, dtype=np.int32, low=0, high=vocab - 1)}
    if segments:
        feeds["seg"] = rand(batch, seq, dtype=np.int32, low=0, high=1, seed=6)
    if mask:
        feeds["mask"] = np.ones((batch, seq), np.int32)
        feeds["mask"][1, 3:] = 0
    seg = "seg_emb" if segments else ""
    quantized = ["ids", "seg" if segments else "", "word", "pos", seg, "gamma", "beta", "mask" if mask else "",
                 *(f"{t}_scale" if t else "" for t in ("word", "pos", seg, "gamma", "beta")),
                 *(f"{t}_zp" if t else "" for t in ("word", "pos", seg, "gamma", "beta"))]
    sym = {k: ["b", "s"] for k in feeds}
    model = ms_model("QEmbedLayerNormalization", feeds, consts, inputs=quantized, attrs={"epsilon": 1e-5},
                     outputs=["out", "mask_index"], sym=sym)
    check(model, feeds)
    dequantized = ms_model("EmbedLayerNormalization", feeds, floats, inputs=quantized[:8],
                           attrs={"epsilon": 1e-5}, outputs=["out", "mask_index"], sym=sym)
    want = ort.InferenceSession(dequantized.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model))).run(feeds)
    assert_close(got["out"], want[0], *FLOAT_TOL, "out")
    np.testing.assert_array_equal(got["mask_index"], want[1])


# ---------------------------------------------------------------- quantized


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_binary(op, dtype):
    zp = {np.uint8: (128, 120, 131), np.int8: (3, -5, 1)}[dtype]
    consts = {"sa": np.float32(0.05), "za": dtype(zp[0]), "sb": np.float32(0.03), "zb": dtype(zp[1]),
              "sc": np.float32(0.07 if op == "QLinearAdd" else 0.2), "zc": dtype(zp[2])}
    # many elements, so that the rounding ties where the order of operations shows come up
    model = ms_model(op, {"a": rand(2, 300, 8, dtype=dtype), "b": rand(8, dtype=dtype, seed=1)}, consts,
                     inputs=["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], sym={"a": ["n", 300, 8]})
    check(model, *batches(lambda n, s: {"a": rand(n, 300, 8, dtype=dtype, seed=s),
                                        "b": rand(8, dtype=dtype, seed=s + 3)}, 2, 5), tol=(0, 0))


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary_broadcasts_unrelated_symbolic_dims_at_run_time(op):
    """Two symbolic dims only the run relates (an attention mask's ``(b, 1, 1, s)`` from an Expand
    against the scores' ``(b, heads, s, s)`` in a QOperator SEW): either may be 1, either way."""
    consts = {"sa": np.float32(0.05), "za": np.uint8(128), "sb": np.float32(0.03), "zb": np.uint8(120),
              "sc": np.float32(0.07 if op == "QLinearAdd" else 0.2), "zc": np.uint8(131)}
    model = ms_model(op, {"a": rand(2, 3, 5, dtype=np.uint8), "b": rand(2, 1, 5, dtype=np.uint8)}, consts,
                     inputs=["a", "sa", "za", "b", "sb", "zb", "sc", "zc"],
                     sym={"a": ["n", "h", 5], "b": ["n", "g", 5]})
    check(model, {"a": rand(2, 3, 5, dtype=np.uint8, seed=2), "b": rand(2, 1, 5, dtype=np.uint8, seed=3)},
          {"a": rand(1, 1, 5, dtype=np.uint8, seed=4), "b": rand(1, 4, 5, dtype=np.uint8, seed=5)},
          {"a": rand(3, 2, 5, dtype=np.uint8, seed=6), "b": rand(3, 2, 5, dtype=np.uint8, seed=7)}, tol=(0, 0))


def integer_to_float(a, b, sa, sb, za, zb, bias=None):
    """MatMulIntegerToFloat's exact semantics: the int32 product, then float32 scaling."""
    y = exact_matmul_integer(a, b, za, zb).astype(np.float32) * (np.float32(sa) * np.asarray(sb, np.float32))
    return y if bias is None else y + bias


def dynamic_quantize(a):
    """onnx's reference DynamicQuantizeLinear of ``a``: (uint8 values, scale, zero point)."""
    graph = helper.make_graph([helper.make_node("DynamicQuantizeLinear", ["a"], ["q", "s", "z"])], "g",
                              [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, None)],
                              [onnx.ValueInfoProto(name=n) for n in "qsz"])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=8)
    return ReferenceEvaluator(model).run(None, {"a": a})


def check_exact(model, formula, feeds_list):
    """relaxpack at -O0 and -O2 against ``formula(**feeds)``, the op's exact semantics
    (onnxruntime's u8 x s8 GEMM saturates in int16 pairs on CPUs without VNNI)."""
    mod = relaxpack.from_onnx(model)
    for level in (0, 2):
        vm = VirtualMachine(relaxpack.build(mod, opt_level=level))
        for feeds in feeds_list:
            got, want = vm.run(feeds)["y0"], formula(**feeds)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert_close(got, want, *FLOAT_TOL, "y0")


@pytest.mark.parametrize("per_column, with_bias", [(False, False), (True, True)])
def test_matmul_integer_to_float(per_column, with_bias):
    consts = {"b": rand(8, 6, dtype=np.int8, seed=1), "sa": np.float32(0.02),
              "sb": (np.abs(rand(6, seed=2)) * 0.01 + 0.001) if per_column else np.float32(0.03),
              "za": np.uint8(130), "zb": np.zeros(6, np.int8) if per_column else np.int8(0)}
    if with_bias:
        consts["bias"] = rand(6, seed=3)
    names = ["a", "b", "sa", "sb", "za", "zb"] + (["bias"] if with_bias else [])
    model = ms_model("MatMulIntegerToFloat", {"a": rand(2, 4, 8, dtype=np.uint8)}, consts, inputs=names,
                     sym={"a": ["n", 4, 8]})
    check_exact(model, lambda a: integer_to_float(a, **consts),
                batches(lambda n, s: {"a": rand(n, 4, 8, dtype=np.uint8, seed=s)}, 1, 3))
    # against onnxruntime too, with rows below 128: no pair of u8 x s8 products leaves int16
    low = batches(lambda n, s: {"a": rand(n, 4, 8, dtype=np.uint8, seed=s, high=127)}, 1, 3)
    assert all(pairs_cannot_saturate(f["a"], consts["b"]) for f in low)
    check(model, *low)


@pytest.mark.parametrize("with_bias", [False, True])
def test_dynamic_quantize_matmul(with_bias):
    consts = {"b": rand(8, 6, dtype=np.int8, seed=1), "sb": np.float32(0.03), "zb": np.int8(0)}
    if with_bias:
        consts["bias"] = rand(6, seed=3)
    model = ms_model("DynamicQuantizeMatMul", {"a": rand(2, 4, 8)}, consts,
                     inputs=["a", "b", "sb", "zb"] + (["bias"] if with_bias else []), sym={"a": ["n", 4, 8]})

    def formula(a):
        qa, sa, za = dynamic_quantize(a)
        return integer_to_float(qa, consts["b"], sa, consts["sb"], za, consts["zb"], consts.get("bias"))
    feeds = batches(lambda n, s: {"a": rand(n, 4, 8, seed=s)}, 1, 3)
    check_exact(model, formula, feeds)
    # against onnxruntime too, with weights in [-64, 63]: a's uint8 values reach 255, and
    # 2 * 255 * 64 stays within int16
    consts["b"] = rand(8, 6, dtype=np.int8, seed=1, low=-64, high=63)
    model = ms_model("DynamicQuantizeMatMul", {"a": rand(2, 4, 8)}, consts,
                     inputs=["a", "b", "sb", "zb"] + (["bias"] if with_bias else []), sym={"a": ["n", 4, 8]})
    assert pairs_cannot_saturate(np.uint8(255), consts["b"])
    check(model, *feeds)


# ---------------------------------------------------------------- CDist


@pytest.mark.parametrize("metric", ["sqeuclidean", "euclidean"])
@pytest.mark.parametrize("k", [1, 5, 8, 33])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cdist(metric, k, dtype):
    """skl2onnx's optim="cdist" (KNN, Gaussian processes, kernel PCA): A's rows against B's, at
    symbolic row counts (none, one and several rows of A); a row of B equal to one of A is a
    rounding residue apart, as in onnxruntime (its product-and-norms expansion)."""
    b = rand(6, k, dtype=dtype, seed=1)
    model = ms_model("CDist", {"a": rand(3, k, dtype=dtype)}, consts={"b": b}, attrs={"metric": metric},
                     sym={"a": ["m", k]})
    check(model, *({"a": np.concatenate([rand(m, k, dtype=dtype, seed=m), b[:1]])[:m]} for m in (0, 1, 7)))


def test_cdist_metrics_onnxruntime_lacks_are_refused():
    model = ms_model("CDist", {"a": rand(3, 4)}, consts={"b": rand(2, 4)}, attrs={"metric": "cityblock"})
    with pytest.raises(UnsupportedOpError, match="metric 'cityblock'"):
        relaxpack.from_onnx(model)
