"""com.microsoft QGemm and the QLinear* ops of onnxruntime's QOperator models,
bit for bit: against onnxruntime where its kernel does not depend on the CPU,
and against the op's exact integer semantics (numpy int64) for QGemm, whose
u8 x s8 GEMM saturates in int16 pairs in onnxruntime on CPUs without VNNI
(compared with onnxruntime there only on inputs that cannot saturate).

Each op runs at -O0 and -O2 on random inputs, uint8 and int8, odd sizes, a
symbolic dim, and empty tensors where the op allows them.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import relaxpack
from relaxpack.errors import UnsupportedOpError
from relaxpack.runtime import VirtualMachine

from ...integer_semantics import pairs_cannot_saturate
from .test_convert_microsoft import ms_model, rand

LEVELS = (0, 2)


def run_levels(model, feeds_list, dims=None):
    """relaxpack's outputs at each level for each feeds: {level: [outputs dict, ...]}."""
    mod = relaxpack.from_onnx(model, dims=dims)
    runs = {}
    for level in LEVELS:
        vm = VirtualMachine(relaxpack.build(mod, opt_level=level))
        runs[level] = [vm.run(feeds) for feeds in feeds_list]
    return runs


def ort_outputs(model, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def check_exact(model, feeds_list, formula=None, against_ort=True, dims=None):
    """Every output equal (dtype, shape, values) to onnxruntime's and/or to ``formula(**feeds)``."""
    names = [o.name for o in model.graph.output]
    for level, outputs in run_levels(model, feeds_list, dims).items():
        for feeds, got in zip(feeds_list, outputs):
            wants = []
            if against_ort:
                wants.append(("onnxruntime", ort_outputs(model, feeds)))
            if formula is not None:
                wants.append(("formula", [formula(**feeds)]))
            for who, want in wants:
                for name, ref in zip(names, want):
                    ref = np.asarray(ref)
                    assert got[name].dtype == ref.dtype and got[name].shape == ref.shape, (level, who, name)
                    bad = np.flatnonzero(got[name] != ref)
                    assert bad.size == 0, (f"-O{level} vs {who}: {bad.size} of {ref.size} differ, first at "
                                           f"{bad[0]}: {got[name].flat[bad[0]]} vs {ref.flat[bad[0]]}")


def qparams(dtype, seed):
    """A per-tensor scale and a zero point of ``dtype``."""
    rng = np.random.default_rng(seed)
    zp = rng.integers(100, 156) if dtype == np.uint8 else rng.integers(-20, 20)
    return np.float32(rng.uniform(0.005, 0.08)), dtype(zp)


DTYPES = [np.uint8, np.int8]


# ---------------------------------------------------------------- QGemm


def qgemm_formula(a, b, sa, za, sb, zb, c=None, sy=None, zy=None, alpha=1.0, trans_a=0, trans_b=0):
    """QGemm's exact semantics: an int64 product (no saturation), float32 scaling in onnxruntime's order."""
    lhs = (a.T if trans_a else a).astype(np.int64) - np.int64(za)
    rhs = (b.T if trans_b else b).astype(np.int64) - np.asarray(zb).astype(np.int64)
    acc = lhs @ rhs
    if c is not None:
        acc = acc + c.astype(np.int64)
    factor = np.float32(alpha) * np.float32(sa) * np.asarray(sb, np.float32)
    if sy is not None:
        factor = factor / np.float32(sy)
    scaled = acc.astype(np.int32).astype(np.float32) * factor
    if zy is None:
        return scaled
    info = np.iinfo(np.asarray(zy).dtype)
    return np.clip(np.round(scaled) + np.float32(zy), info.min, info.max).astype(np.asarray(zy).dtype)


QGEMM_CASES = [
    # a dtype, b dtype, per column, with C, quantized output, alpha, transA, transB
    (np.uint8, np.int8, False, True, True, 1.0, 0, 1),
    (np.uint8, np.int8, True, True, True, 1.0, 0, 0),
    (np.uint8, np.uint8, False, False, True, 0.5, 1, 0),
    (np.int8, np.int8, True, False, True, 1.0, 1, 1),
    (np.uint8, np.int8, True, True, False, 2.0, 0, 1),     # float output (no y_zero_point)
]


@pytest.mark.parametrize("a_type, b_type, per_column, with_c, quantized, alpha, trans_a, trans_b", QGEMM_CASES)
def test_qgemm(a_type, b_type, per_column, with_c, quantized, alpha, trans_a, trans_b):
    k, n = 37, 11
    sa, za = qparams(a_type, 1)
    b = rand(*((n, k) if trans_b else (k, n)), dtype=b_type, seed=2)
    sb = (np.abs(rand(n, seed=3)) * 0.01 + 0.002).astype(np.float32) if per_column else np.float32(0.013)
    zb = (rand(n, dtype=b_type, seed=4, low=-3, high=3) if b_type == np.int8 else
          rand(n, dtype=b_type, seed=4, low=120, high=135)) if per_column else b_type(0 if b_type == np.int8 else 128)
    consts = {"sa": sa, "za": za, "b": b, "sb": sb, "zb": zb}
    names = ["a", "sa", "za", "b", "sb", "zb"]
    if with_c:
        consts["c"] = rand(n, dtype=np.int32, seed=5, low=-3000, high=3000)
    names.append("c" if with_c else "")
    if quantized:
        consts["sy"], consts["zy"] = np.float32(0.05 if a_type == np.uint8 else 0.08), a_type(7)
        names += ["sy", "zy"]
    a_shape = (k, "m") if trans_a else ("m", k)
    model = ms_model("QGemm", {"a": rand(*(5 if d == "m" else d for d in a_shape), dtype=a_type)}, consts,
                     inputs=names, attrs={"alpha": alpha, "transA": trans_a, "transB": trans_b},
                     sym={"a": list(a_shape)})

    def feeds(m, seed, **limits):
        shape = tuple(m if d == "m" else d for d in a_shape)
        return {"a": rand(*shape, dtype=a_type, seed=seed, **limits)}

    def formula(a):
        return qgemm_formula(a, b, sa, za, sb, zb, consts.get("c"), consts.get("sy"), consts.get("zy"), alpha,
                             trans_a, trans_b)
    # exact semantics at odd sizes and an empty batch; onnxruntime only where no int16 pair can saturate
    check_exact(model, [feeds(m, s) for s, m in enumerate((1, 13, 0))], formula, against_ort=False)
    safe = [feeds(m, s, low=0 if a_type == np.uint8 else -64, high=63) for s, m in enumerate((1, 13))]
    assert all(pairs_cannot_saturate(f["a"], b) for f in safe)
    check_exact(model, safe, formula)


def _gemms(model):
    """(op name, number of operands, dtype) of every product in the imported module's IR."""
    from relaxpack.ir.expr import Call
    from relaxpack.ir.visitor import ExprVisitor
    found = []

    class Products(ExprVisitor):
        def visit_call_(self, call: Call):
            if getattr(call.op, "name", None) in ("nn.gemm", "matmul"):
                found.append((call.op.name, len(call.args), call.struct_info.dtype))
            super().visit_call_(call)

    Products().visit_expr(relaxpack.from_onnx(model)["main"])
    return found


@pytest.mark.parametrize("bias_value, exact", [(1, True), (-1, True), (2, False)])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_qgemm_bound_switches_to_the_int32_product(bias_value, exact, trans_b):
    """A constant B and C whose sums bound the product within float32's exact integers make an exact
    float32 nn.gemm with the bias (``255 * 65793 + 1 = 2**24``); one past it, the int32 product.
    Both give the exact semantics at the largest ``|a - a_zero_point|`` (a scale that keeps the
    largest sum unsaturated), on random values and an empty batch."""
    k = 519
    w = np.full((k, 2), 127, np.int8)
    w[-1] = 7                               # each column: 518 * 127 + 7 = 65793
    w[:, 1] = -w[:, 1]
    consts = {"sa": np.float32(1.0), "za": np.uint8(0), "b": w.T.copy() if trans_b else w, "sb": np.float32(1.0),
              "zb": np.int8(0), "c": np.array([bias_value, -bias_value], np.int32), "sy": np.float32(70000.0),
              "zy": np.uint8(0)}
    names = ["a", "sa", "za", "b", "sb", "zb", "c", "sy", "zy"]
    model = ms_model("QGemm", {"a": rand(2, k, dtype=np.uint8)}, consts, inputs=names,
                     attrs={"transB": trans_b}, sym={"a": ["m", k]})
    assert _gemms(model) == ([("nn.gemm", 3, "float32")] if exact else [("matmul", 2, "int32")])

    def formula(a):
        return qgemm_formula(a, consts["b"], *(consts[n] for n in names[1:3]), *(consts[n] for n in names[4:6]),
                             consts["c"], consts["sy"], consts["zy"], trans_b=trans_b)
    feeds = [{"a": np.full((3, k), 255, np.uint8)}, {"a": np.zeros((1, k), np.uint8)},
             {"a": np.random.default_rng(4).integers(0, 256, (5, k)).astype(np.uint8)},
             {"a": np.zeros((0, k), np.uint8)}]
    assert formula(feeds[0]["a"]).max() == 240      # 2**24 / 70000: the largest sum, not saturated
    check_exact(model, feeds, formula, against_ort=False)


def test_qgemm_refuses_a_non_int32_bias():
    consts = {"sa": np.float32(0.1), "za": np.uint8(3), "b": rand(4, 3, dtype=np.int8), "sb": np.float32(0.1),
              "zb": np.int8(0), "c": rand(3, dtype=np.uint8), "sy": np.float32(0.2), "zy": np.uint8(1)}
    model = ms_model("QGemm", {"a": rand(2, 4, dtype=np.uint8)}, consts,
                     inputs=["a", "sa", "za", "b", "sb", "zb", "c", "sy", "zy"])
    with pytest.raises(relaxpack.RelaxpackError, match="QGemm node.*C must be int32.*got uint8"):
        relaxpack.from_onnx(model)


def test_per_channel_parameters_are_refused_by_name():
    """onnxruntime's QLinear* kernels take one scale and zero point per tensor; so does relaxpack."""
    model = ms_model("QLinearSigmoid", {"x": rand(2, 4, dtype=np.uint8)},
                     {"sx": np.float32([0.1, 0.2]), "zx": np.uint8(3), "sy": np.float32(1 / 256), "zy": np.uint8(0)},
                     inputs=["x", "sx", "zx", "sy", "zy"])
    with pytest.raises(UnsupportedOpError, match=r"QLinearSigmoid node \(domain com.microsoft, opset 1\): "
                                                 r"the scale must be a scalar"):
        relaxpack.from_onnx(model)


# ---------------------------------------------------------------- pools


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool(dtype, channels_last):
    (sx, zx), (sy, zy) = qparams(dtype, 1), qparams(dtype, 2)
    sym = ["n", "h", "w", 5] if channels_last else ["n", 5, "h", "w"]
    model = ms_model("QLinearGlobalAveragePool", {"x": rand(1, 5, 3, 3, dtype=dtype)},
                     {"sx": sx, "zx": zx, "sy": sy, "zy": zy}, inputs=["x", "sx", "zx", "sy", "zy"],
                     attrs={"channels_last": channels_last}, sym={"x": sym})

    def feeds(n, h, w, seed):
        shape = (n, h, w, 5) if channels_last else (n, 5, h, w)
        return {"x": rand(*shape, dtype=dtype, seed=seed)}
    check_exact(model, [feeds(1, 7, 9, 0), feeds(3, 1, 1, 1), feeds(2, 33, 31, 2), feeds(0, 4, 4, 3)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [1, 2], "count_include_pad": 1, "pads": [0, 1, 0, 1]},
    {"kernel_shape": [3, 2], "ceil_mode": 1, "strides": [2, 2]},
    {"kernel_shape": [3, 3], "channels_last": 1, "pads": [1, 0, 1, 2]},
    # ceil-mode windows past the input counted whole (divided by the kernel size, as onnxruntime's
    # kernel does; AveragePool divides them by their part inside): Funnel's 2x1 / 2 pool
    {"kernel_shape": [2, 1], "strides": [2, 1], "ceil_mode": 1, "count_include_pad": 1},
    {"kernel_shape": [3, 3], "strides": [3, 2], "ceil_mode": 1, "count_include_pad": 1, "pads": [1, 0, 0, 1]},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1, "channels_last": 1},
])
def test_qlinear_average_pool(dtype, attrs):
    (sx, zx), (sy, zy) = qparams(dtype, 3), qparams(dtype, 4)
    last = attrs.get("channels_last", 0)
    sym = ["n", "h", "w", 4] if last else ["n", 4, "h", "w"]
    model = ms_model("QLinearAveragePool", {"x": rand(1, 4, 8, 8, dtype=dtype)},
                     {"sx": sx, "zx": zx, "sy": sy, "zy": zy}, inputs=["x", "sx", "zx", "sy", "zy"],
                     attrs=attrs, sym={"x": sym})

    def feeds(n, h, w, seed):
        return {"x": rand(*((n, h, w, 4) if last else (n, 4, h, w)), dtype=dtype, seed=seed)}
    check_exact(model, [feeds(1, 9, 7, 0), feeds(2, 6, 11, 1)])


def test_qlinear_average_pool_refuses_ceil_windows_onnxruntime_may_drop():
    """End pads above kernel - stride let a ceil-mode window start past the input, which
    onnxruntime drops: refused by name rather than guessed."""
    (sx, zx), (sy, zy) = qparams(np.uint8, 3), qparams(np.uint8, 4)
    model = ms_model("QLinearAveragePool", {"x": rand(1, 4, 8, 8, dtype=np.uint8)},
                     {"sx": sx, "zx": zx, "sy": sy, "zy": zy}, inputs=["x", "sx", "zx", "sy", "zy"],
                     attrs={"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1,
                            "pads": [0, 0, 1, 1]})
    with pytest.raises(UnsupportedOpError, match="QLinearAveragePool.*ceil_mode with count_include_pad"):
        relaxpack.from_onnx(model)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qlinear_average_pool_over_the_whole_image(dtype):
    """A window as large as the (static) image takes onnxruntime's global path."""
    (sx, zx), (sy, zy) = qparams(dtype, 5), qparams(dtype, 6)
    model = ms_model("QLinearAveragePool", {"x": rand(2, 3, 5, 7, dtype=dtype)},
                     {"sx": sx, "zx": zx, "sy": sy, "zy": zy}, inputs=["x", "sx", "zx", "sy", "zy"],
                     attrs={"kernel_shape": [5, 7]}, sym={"x": ["n", 3, 5, 7]})
    check_exact(model, [{"x": rand(n, 3, 5, 7, dtype=dtype, seed=n)} for n in (1, 4)])


# ---------------------------------------------------------------- lookup tables


def mlas_logistic(v: np.ndarray, fma: bool) -> np.ndarray:
    """MLAS's logistic in float32, with (its FMA3 kernel) or without (its SSE2 kernel) fused multiply-adds."""
    from relaxpack.importers.onnx.converters.microsoft_qlinear import _LOGISTIC_P, _LOGISTIC_Q
    f32 = np.float32

    def madd(a, b, c):
        if fma:
            return (a.astype(np.float64) * b.astype(np.float64) + np.float64(c)).astype(f32)
        return a * b + f32(c)
    v = np.clip(v.astype(f32), f32(-18), f32(18))
    x2 = v * v

    def poly(coefficients):
        acc = madd(x2, np.full_like(x2, coefficients[0]), coefficients[1])
        for c in coefficients[2:]:
            acc = madd(acc, x2, c)
        return acc
    return np.clip(poly(_LOGISTIC_P) * v / poly(_LOGISTIC_Q) + f32(0.5), f32(0), f32(1))


def quantize(v, scale, zp):
    info = np.iinfo(np.asarray(zp).dtype)
    return np.clip(np.round(v / np.float32(scale)) + np.float32(zp), info.min, info.max).astype(np.asarray(zp).dtype)


def every_value(dtype, rows=1):
    info = np.iinfo(dtype)
    values = np.arange(info.min, info.max + 1).astype(dtype)
    return np.tile(values, (rows, 1))


SIGMOID_PARAMS = {np.uint8: [(0.05, 128, 1 / 256, 0), (0.11, 90, 1 / 250, 3)],
                  np.int8: [(0.04, 0, 1 / 256, -128), (0.09, -17, 1 / 240, -120)]}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", [0, 1])
def test_qlinear_sigmoid_every_value(dtype, which):
    sx, zx, sy, zy = SIGMOID_PARAMS[dtype][which]
    consts = {"sx": np.float32(sx), "zx": dtype(zx), "sy": np.float32(sy), "zy": dtype(zy)}
    x = every_value(dtype, rows=3)
    # CPU-independent: the FMA3 and the SSE2 kernels of MLAS give the same table at these parameters
    real = np.float32(sx) * (x[0].astype(np.int32) - np.int32(zx)).astype(np.float32)
    assert np.array_equal(quantize(mlas_logistic(real, True), sy, consts["zy"]),
                          quantize(mlas_logistic(real, False), sy, consts["zy"]))
    model = ms_model("QLinearSigmoid", {"x": x}, consts, inputs=["x", "sx", "zx", "sy", "zy"],
                     sym={"x": ["n", x.shape[1]]})
    check_exact(model, [{"x": x}, {"x": x[:1, ::-1].copy()}, {"x": x[:0]}],
                formula=lambda x: quantize(mlas_logistic(
                    np.float32(sx) * (x.astype(np.int32) - np.int32(zx)).astype(np.float32), True), sy, consts["zy"]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alpha", [0.01, 0.3])
def test_qlinear_leaky_relu_every_value(dtype, alpha):
    (sx, zx), (sy, zy) = qparams(dtype, 7), qparams(dtype, 8)
    x = every_value(dtype, rows=2)
    model = ms_model("QLinearLeakyRelu", {"x": x}, {"sx": sx, "zx": zx, "sy": sy, "zy": zy},
                     inputs=["x", "sx", "zx", "sy", "zy"], attrs={"alpha": alpha}, sym={"x": ["n", 256]})
    check_exact(model, [{"x": x}, {"x": x[:1, ::-1].copy()}])


@pytest.mark.parametrize("dtype", DTYPES)
def test_qlinear_concat(dtype):
    (sy, zy), (s0, z0), (s2, z2) = qparams(dtype, 9), qparams(dtype, 10), qparams(dtype, 11)
    consts = {"sy": sy, "zy": zy, "s0": s0, "z0": z0, "s2": s2, "z2": z2}
    # the second input shares the output's parameters (onnxruntime copies it)
    model = ms_model("QLinearConcat", {"a": rand(2, 3, 4, dtype=dtype), "b": rand(2, 5, 4, dtype=dtype),
                                       "c": rand(2, 1, 4, dtype=dtype)}, consts,
                     inputs=["sy", "zy", "a", "s0", "z0", "b", "sy", "zy", "c", "s2", "z2"], attrs={"axis": 1},
                     sym={"a": ["n", 3, "w"], "b": ["n", "k", "w"], "c": ["n", 1, "w"]})

    def feeds(n, k, w, seed):
        return {"a": rand(n, 3, w, dtype=dtype, seed=seed), "b": rand(n, k, w, dtype=dtype, seed=seed + 1),
                "c": rand(n, 1, w, dtype=dtype, seed=seed + 2)}
    check_exact(model, [feeds(2, 5, 4, 0), feeds(1, 0, 7, 3), feeds(3, 9, 1, 6)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_qlinear_where(dtype):
    (sx, zx), (sy, zy), (sz, zz) = qparams(dtype, 12), qparams(dtype, 13), qparams(dtype, 14)
    model = ms_model("QLinearWhere", {"cond": np.zeros((2, 1, 4), bool), "x": rand(2, 3, 4, dtype=dtype),
                                      "y": rand(4, dtype=dtype)},
                     {"sx": sx, "zx": zx, "sy": sy, "zy": zy, "sz": sz, "zz": zz},
                     inputs=["cond", "x", "sx", "zx", "y", "sy", "zy", "sz", "zz"],
                     sym={"cond": ["n", 1, 4], "x": ["n", 3, 4]})
    rng = np.random.default_rng(0)
    check_exact(model, [{"cond": rng.random((n, 1, 4)) < 0.5, "x": rand(n, 3, 4, dtype=dtype, seed=n),
                         "y": rand(4, dtype=dtype, seed=n + 1)} for n in (1, 5)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_qlinear_where_broadcasts_unrelated_symbolic_dims_at_run_time(dtype):
    (sx, zx), (sy, zy), (sz, zz) = qparams(dtype, 12), qparams(dtype, 13), qparams(dtype, 14)
    model = ms_model("QLinearWhere", {"cond": np.zeros((2, 1, 4), bool), "x": rand(2, 3, 4, dtype=dtype),
                                      "y": rand(2, 1, 4, dtype=dtype)},
                     {"sx": sx, "zx": zx, "sy": sy, "zy": zy, "sz": sz, "zz": zz},
                     inputs=["cond", "x", "sx", "zx", "y", "sy", "zy", "sz", "zz"],
                     sym={"cond": ["n", "k", 4], "x": ["n", "h", 4], "y": ["n", "g", 4]})
    rng = np.random.default_rng(0)
    check_exact(model, [{"cond": rng.random((2, k, 4)) < 0.5, "x": rand(2, h, 4, dtype=dtype, seed=k),
                         "y": rand(2, g, 4, dtype=dtype, seed=h)} for k, h, g in [(1, 3, 1), (3, 1, 1), (1, 1, 2)]])


# ---------------------------------------------------------------- softmax


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opset, axis", [(13, -1), (13, 1), (12, 1), (12, 2), (12, None), (13, None)])
def test_qlinear_softmax(dtype, opset, axis):
    sx, zx = qparams(dtype, 15)
    sy, zy = np.float32(1 / 256), dtype(0 if dtype == np.uint8 else -128)
    attrs = {"opset": opset} if axis is None else {"opset": opset, "axis": axis}
    model = ms_model("QLinearSoftmax", {"x": rand(2, 3, 5, dtype=dtype)}, {"sx": sx, "zx": zx, "sy": sy, "zy": zy},
                     inputs=["x", "sx", "zx", "sy", "zy"], attrs=attrs, sym={"x": ["n", "s", "s2"]})
    feeds = [{"x": rand(n, s, s2, dtype=dtype, seed=n + s)} for n, s, s2 in ((2, 3, 5), (1, 7, 31), (3, 1, 1))]
    # one dominant value per row: 128 + zero point saturates at int8's 127
    peaked = np.full((1, 2, 6), np.iinfo(dtype).min, dtype)
    peaked[..., 0] = np.iinfo(dtype).max
    check_exact(model, [*feeds, {"x": peaked}])
    # onnxruntime returns no output at all for an empty input (it never allocates one)
    check_exact(model, [{"x": rand(0, 3, 5, dtype=dtype)}], formula=lambda x: np.zeros(x.shape, dtype),
                against_ort=False)


@pytest.mark.parametrize("sx", [0.5, 0.01])
def test_qlinear_softmax_static_length(sx):
    """A static length lets onnxruntime build its table once at load: the same numbers."""
    dtype = np.uint8
    model = ms_model("QLinearSoftmax", {"x": rand(4, 40, dtype=dtype)},
                     {"sx": np.float32(sx), "zx": dtype(3), "sy": np.float32(1 / 256), "zy": dtype(0)},
                     inputs=["x", "sx", "zx", "sy", "zy"], attrs={"opset": 13})
    check_exact(model, [{"x": rand(4, 40, dtype=dtype, seed=s)} for s in range(3)])


# ---------------------------------------------------------------- QuantizeLinear / DequantizeLinear


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("per_axis", [False, True])
def test_ms_quantize_dequantize(dtype, per_axis):
    scale = (np.abs(rand(3, seed=1)) * 0.05 + 0.01).astype(np.float32) if per_axis else np.float32(0.02)
    zp = rand(3, dtype=dtype, seed=2) if per_axis else dtype(5)
    model = ms_model("QuantizeLinear", {"x": rand(2, 3, 4)}, {"s": scale, "z": zp}, inputs=["x", "s", "z"],
                     attrs={"axis": 1}, sym={"x": ["n", 3, "w"]})
    check_exact(model, [{"x": 4 * rand(n, 3, w, seed=n)} for n, w in ((2, 4), (1, 9), (0, 2))])
    model = ms_model("DequantizeLinear", {"x": rand(2, 3, 4, dtype=dtype)}, {"s": scale, "z": zp},
                     inputs=["x", "s", "z"], attrs={"axis": 1}, sym={"x": ["n", 3, "w"]})
    check_exact(model, [{"x": rand(n, 3, w, dtype=dtype, seed=n)} for n, w in ((2, 4), (1, 9), (0, 2))])


# ---------------------------------------------------------------- QLinearReduceMean


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axes, keepdims", [([2, 3], 1), ([1], 0), ([-1], 1)])
def test_qlinear_reduce_mean(dtype, axes, keepdims):
    """onnxruntime has no CPU kernel for it (its NNAPI provider runs it): judged by the
    contrib schema's meaning, dequantize, float32 mean, quantize."""
    (sx, zx), (sy, zy) = qparams(dtype, 16), qparams(dtype, 17)
    model = ms_model("QLinearReduceMean", {"x": rand(2, 3, 4, 5, dtype=dtype)},
                     {"sx": sx, "zx": zx, "sy": sy, "zy": zy}, inputs=["x", "sx", "zx", "sy", "zy"],
                     attrs={"axes": axes, "keepdims": keepdims}, sym={"x": ["n", 3, "h", "w"]})

    def formula(x):
        real = sx * (x.astype(np.int32) - np.int32(zx)).astype(np.float32)
        return quantize(real.mean(axis=tuple(axes), keepdims=bool(keepdims), dtype=np.float32), sy, zy)
    feeds = [{"x": rand(n, 3, h, w, dtype=dtype, seed=n)} for n, h, w in ((2, 4, 5), (1, 7, 3), (3, 1, 1))]
    check_exact(model, feeds, formula, against_ort=False)
