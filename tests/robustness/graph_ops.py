"""The ops the graph generator grows graphs with: one emitter per family.

An emitter takes the :class:`~.strategies.GraphBuilder`, picks a value it
applies to, adds the node(s) and returns True, or returns False when the
pool holds nothing it fits (the builder then tries another family).
Emitters only make nodes that are valid for the dims of every run.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import helper

from .strategies import (AVOID, BOOL, ELEM, F16, F32, FLOATS, I32, I64, INTS, Dim, GraphBuilder, Val, broadcast,
                         derive, product)

INT64_MAX, INT64_MIN = 2 ** 63 - 1, -2 ** 63


# ---------------------------------------------------------------- onnxruntime's kernels
#: input shapes for probing ops that want more than [2, 2] inputs
PROBE_SHAPES = {
    "Conv": [[1, 1, 3, 3], [1, 1, 1, 1]], "MaxPool": [[1, 1, 3, 3]], "AveragePool": [[1, 1, 3, 3]],
    "GlobalAveragePool": [[1, 1, 3, 3]], "GlobalMaxPool": [[1, 1, 3, 3]], "TopK": [[2, 2], [1]],
    "BatchNormalization": [[1, 2, 2, 2], [2], [2], [2], [2]], "InstanceNormalization": [[1, 2, 2, 2], [2], [2]],
    "CumSum": [[2, 2], []], "LayerNormalization": [[2, 2], [2]],
}


@functools.lru_cache(maxsize=None)
def ort_supports(op: str, dtypes: tuple[str, ...], opset: int, attrs: tuple = ()) -> bool:
    """Whether ONNX defines ``op`` at ``opset`` for these input dtypes and
    onnxruntime's CPU provider has a kernel for it.

    Asked once per combination with a one-node model, so the generator does
    not make graphs onnxruntime cannot run (its gaps are not relaxpack's)."""
    import onnxruntime as ort
    shapes = PROBE_SHAPES.get(op, [[2, 2]] * len(dtypes))
    inputs = [helper.make_tensor_value_info(f"x{i}", ELEM[np.dtype(t)], shape)
              for i, (t, shape) in enumerate(zip(dtypes, shapes))]
    n_out = 2 if op == "TopK" else 1
    node = helper.make_node(op, [f"x{i}" for i in range(len(dtypes))], [f"y{i}" for i in range(n_out)],
                            **dict(attrs))
    graph = helper.make_graph([node], "probe", inputs, [onnx.ValueInfoProto(name=f"y{i}") for i in range(n_out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    try:   # the op exists at this opset for these types
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        for out, typed in zip(model.graph.output, inferred.graph.output):
            out.CopyFrom(typed)
        onnx.checker.check_model(model, full_check=True)
    except Exception:
        return False
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return True
    except Exception as err:
        return "NOT_IMPLEMENTED" not in str(err) and "Could not find an implementation" not in str(err)


def supported(b: GraphBuilder, op: str, *dtypes, **attrs) -> bool:
    return ort_supports(op, tuple(np.dtype(t).name for t in dtypes), b.opset, tuple(sorted(attrs.items())))


# ---------------------------------------------------------------- elementwise
#: op -> (kinds it takes, "keep" exactness / "disc" needs exact input / "inexact", may make NaN or Inf)
UNARY = {
    "Relu": ("fi", "keep", False), "Abs": ("fi", "keep", False), "Neg": ("fi", "keep", False),
    "Sign": ("fi", "disc", False), "Floor": ("f", "disc", False), "Ceil": ("f", "disc", False),
    "Round": ("f", "disc", False), "IsNaN": ("f", "disc", False), "IsInf": ("f", "disc", False),
    "Sigmoid": ("f", "inexact", False), "Tanh": ("f", "inexact", False), "Erf": ("f", "inexact", False),
    "Sin": ("f", "inexact", False), "Cos": ("f", "inexact", False), "Atan": ("f", "inexact", False),
    "Softsign": ("f", "inexact", False), "Exp": ("f", "inexact", True), "Log": ("f", "inexact", True),
    "Sqrt": ("f", "inexact", True), "Reciprocal": ("f", "inexact", True), "Softplus": ("f", "inexact", True),
    "LeakyRelu": ("f", "inexact", False), "Elu": ("f", "inexact", False), "Selu": ("f", "inexact", False),
    "HardSigmoid": ("f", "inexact", False), "HardSwish": ("f", "inexact", False), "Not": ("b", "keep", False),
}
BOOL_OUT = {"IsNaN", "IsInf", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}


def unary(b: GraphBuilder) -> bool:
    op = b.draw.choice(list(UNARY))
    kinds, rule, makes_special = UNARY[op]
    periodic = op in ("Sin", "Cos")   # in fp16 a rounding difference in a large argument changes the result
    scalar_bug = op in ("Selu", "Elu", "Softplus", "HardSwish") and "activation_of_scalar" in AVOID
    v = b.pick(lambda v: v.kind in kinds and (rule != "disc" or v.exact) and supported(b, op, v.dtype)
               and not (scalar_bug and v.rank == 0)
               and not (op == "Sign" and v.special)
               and not (periodic and v.dtype == F16 and not v.exact))   # Sign(NaN): NaN in numpy, 0 in onnxruntime; ONNX is silent
    if v is None:
        return False
    attrs = {}
    if op == "LeakyRelu":
        attrs["alpha"] = b.draw.choice((0.01, 0.5, 2.0))
    out = BOOL if op in BOOL_OUT else v.dtype
    exact = v.exact and rule != "inexact"
    b.emit(op, [v.name], out, v.dims, exact, (v.special or makes_special) and out != BOOL, **attrs)
    return True


BINARY = {  # op -> (kinds, output is bool, exact when the inputs are, may make NaN/Inf)
    "Add": ("fi", False, True, False), "Sub": ("fi", False, True, False), "Mul": ("fi", False, True, False),
    "Div": ("fi", False, True, True), "Pow": ("fi", False, False, True), "Mod": ("fi", False, False, True),
    "Max": ("fi", False, True, False), "Min": ("fi", False, True, False),
    "Equal": ("fib", True, True, False), "Less": ("fi", True, True, False), "Greater": ("fi", True, True, False),
    "LessOrEqual": ("fi", True, True, False), "GreaterOrEqual": ("fi", True, True, False),
    "And": ("b", False, True, False), "Or": ("b", False, True, False), "Xor": ("b", False, True, False),
    "BitwiseAnd": ("i", False, True, False), "BitwiseOr": ("i", False, True, False),
    "BitwiseXor": ("i", False, True, False), "PRelu": ("f", False, False, False),
}


def binary(b: GraphBuilder) -> bool:
    op = b.draw.choice(list(BINARY))
    kinds, to_bool, keeps_exact, makes_special = BINARY[op]
    if op.startswith("Bitwise") and b.opset < 18:
        return False
    v = b.pick(lambda v: v.kind in kinds and supported(b, op, v.dtype, v.dtype)
               and (not to_bool or v.kind != "f" or v.exact))
    if v is None:
        return False
    attrs = {}
    data = "normal"
    if op in ("Div", "Mod", "Pow") and v.kind == "i":
        data = "nonzero" if op != "Pow" else "small"
    if op == "Mod":
        attrs["fmod"] = 1 if v.kind == "f" else b.draw.choice((0, 1))
    if op == "PRelu":   # the slope broadcasts to X (one-directional)
        dims = [d if b.declarable(d) and b.draw.chance(0.5) else Dim.of(1) for d in v.dims]
        w = b.tensor(dims[b.draw.integer(0, len(dims)):], v.dtype)
    else:
        w = b.partner(v, data=data)
    if w is None or (to_bool and w.kind == "f" and not w.exact):
        return False
    if op == "Pow" and (v.special or w.special):
        return False   # Pow(-inf, 0.5): inf (IEEE, numpy) here, NaN in onnxruntime
    if data != "normal" and w.name.startswith("v"):
        return False
    args = [v, w]
    if op not in ("PRelu",) and b.draw.chance(0.5):
        args.reverse()
    if data != "normal" and args[1] is not w:
        args.reverse()
    dims = broadcast(args[0].dims, args[1].dims)
    exact = keeps_exact and all(a.exact for a in args) and (v.kind != "f" or v.dtype == F32)
    special = any(a.special for a in args) or (makes_special and v.kind == "f")
    b.emit(op, [a.name for a in args], BOOL if to_bool else v.dtype, dims, exact, special and not to_bool,
           **attrs)
    return True


def variadic(b: GraphBuilder) -> bool:
    op = b.draw.choice(("Sum", "Mean", "Max", "Min"))
    v = b.pick(lambda v: (v.kind == "f" or (v.kind == "i" and op in ("Max", "Min")))
               and supported(b, op, v.dtype, v.dtype, v.dtype))
    if v is None:
        return False
    args = [v] + [b.partner(v) for _ in range(b.draw.integer(1, 2))]
    if any(a is None for a in args):
        return False
    dims = args[0].dims
    for a in args[1:]:
        dims = broadcast(dims, a.dims)
        if dims is None:
            return False
    exact = op in ("Max", "Min") and all(a.exact for a in args)
    b.emit(op, [a.name for a in args], v.dtype, dims, exact, any(a.special for a in args))
    return True


def where(b: GraphBuilder) -> bool:
    v = b.pick()
    if v is None:
        return False
    w = b.partner(v)
    if w is None:
        return False
    cond = b.pick(lambda c: c.dtype == BOOL and broadcast(broadcast(v.dims, w.dims) or (), c.dims) is not None)
    if cond is None:
        dims = broadcast(v.dims, w.dims)
        cond = b.tensor([d if b.declarable(d) else Dim.of(1) for d in dims], BOOL)
        if cond is None:
            return False
    dims = broadcast(broadcast(v.dims, w.dims), cond.dims)
    if dims is None or not supported(b, "Where", BOOL, v.dtype, v.dtype):
        return False
    b.emit("Where", [cond.name, v.name, w.name], v.dtype, dims, v.exact and w.exact, v.special or w.special)
    return True


def cast(b: GraphBuilder) -> bool:
    v = b.pick()
    if v is None:
        return False
    to = np.dtype(b.draw.choice((F32, F16, I32, I64, BOOL)))
    if v.kind == "f" and to.kind in "iu" and (not v.exact or v.special):
        return False   # float -> int of NaN, Inf or out of range values is undefined
    if v.kind == "f" and to == BOOL and not v.exact:
        return False
    exact = v.exact and not (v.kind == "f" and to.kind == "f" and to.itemsize < v.dtype.itemsize)
    if b.opset >= 15 and b.draw.chance(0.3):
        like = b.tensor([Dim.of(1)], to)
        if like is None:
            return False
        b.emit("CastLike", [v.name, like.name], to, v.dims, exact, v.special and to.kind == "f")
    else:
        b.emit("Cast", [v.name], to, v.dims, exact, v.special and to.kind == "f", to=ELEM[to])
    return True


def clip(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.kind in "fi" and supported(b, "Clip", v.dtype))
    if v is None:
        return False
    lo, hi = sorted(b.random_array([2], v.dtype))
    args = [v.name]
    if v.special and "clip_default_bounds_keep_inf" in AVOID:
        args += [b.const(np.array(lo, v.dtype)), b.const(np.array(hi, v.dtype))]
    elif b.draw.chance(0.8):
        args.append(b.const(np.array(lo, v.dtype)) if b.draw.chance(0.8) else "")
        if b.draw.chance(0.7):
            args.append(b.const(np.array(hi, v.dtype)))
    while args and args[-1] == "":
        args.pop()
    b.emit("Clip", args, v.dtype, v.dims, v.exact, v.special)
    return True


def softmax(b: GraphBuilder) -> bool:
    op = b.draw.choice(("Softmax", "LogSoftmax"))
    v = b.pick(lambda v: v.kind == "f" and v.rank >= 1 and supported(b, op, v.dtype))
    if v is None:
        return False
    axis = b.draw.integer(-v.rank, v.rank - 1)
    b.emit(op, [v.name], v.dtype, v.dims, False, True, axis=axis)
    return True


# ---------------------------------------------------------------- linear algebra
def matmul(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.kind in "fi" and v.rank >= 1
               and supported(b, "MatMul", v.dtype, v.dtype))
    if v is None:
        return False
    k = v.dims[-1]
    if not b.declarable(k):
        return False
    n = b.new_dim()
    if b.draw.chance(0.25):
        w_dims = [k]
    else:
        batch = []
        if b.draw.chance(0.3) and v.rank >= 3:
            batch = [d if b.declarable(d) and b.draw.chance(0.5) else Dim.of(1) for d in v.dims[-3:-2]]
        w_dims = batch + [k, n]
    w = b.tensor(w_dims, v.dtype)
    if w is None:
        return False
    a_dims, w_dims = list(v.dims), list(w.dims)
    a_vec, w_vec = len(a_dims) == 1, len(w_dims) == 1
    if (a_vec or w_vec) and v.has_zero():
        return False   # onnxruntime: "left operand cannot broadcast" for an empty batch times a vector
    a_full = [Dim.of(1)] + a_dims if a_vec else a_dims
    w_full = w_dims + [Dim.of(1)] if w_vec else w_dims
    batch = broadcast(a_full[:-2], w_full[:-2])
    if batch is None:
        return False
    dims = list(batch) + ([] if a_vec else [a_full[-2]]) + ([] if w_vec else [w_full[-1]])
    b.emit("MatMul", [v.name, w.name], v.dtype, dims, v.kind == "i", v.special or v.kind == "f")
    return True


def gemm(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.kind == "f" and v.rank == 2
               and supported(b, "Gemm", v.dtype, v.dtype))
    if v is None:
        return False
    trans_a, trans_b = b.draw.chance(0.3), b.draw.chance(0.3)
    m, k = (v.dims[1], v.dims[0]) if trans_a else v.dims
    if not b.declarable(k) or k.lo == 0:   # onnxruntime drops beta when K is 0
        return False
    n = b.new_dim()
    w = b.tensor([n, k] if trans_b else [k, n], v.dtype)
    if w is None:
        return False
    args = [v.name, w.name]
    if b.draw.chance(0.6):
        shape = b.draw.choice(([], [n], [Dim.of(1), n], [m, Dim.of(1)], [m, n]))
        if all(b.declarable(d) for d in shape):
            c = b.tensor(shape, v.dtype)
            if c is not None:
                args.append(c.name)
    attrs = dict(alpha=b.draw.choice((1.0, 0.5, -2.0)), beta=b.draw.choice((1.0, 0.25)),
                 transA=int(trans_a), transB=int(trans_b))
    b.emit("Gemm", args, v.dtype, (m, n), False, True, **attrs)
    return True


# ---------------------------------------------------------------- convolution and pooling
def conv(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.kind == "f" and v.rank in (3, 4) and v.dims[1].static and v.dims[1].label >= 1
               and supported(b, "Conv", v.dtype, v.dtype))
    if v is None:
        return False
    c = v.dims[1].label
    group = b.draw.choice([g for g in (1, 2, 3) if c % g == 0])
    m = group * b.draw.integer(1, 2)
    nsp = v.rank - 2
    ks = [b.draw.integer(1, 3) for _ in range(nsp)]
    strides = [b.draw.integer(1, 2) for _ in range(nsp)]
    dil = [b.draw.choice((1, 1, 2)) for _ in range(nsp)]
    pads = [b.draw.integer(0, k - 1) for k in ks] + [b.draw.integer(0, k - 1) for k in ks]  # begins, ends
    auto = b.draw.choice(("NOTSET",) * 4 + ("SAME_UPPER", "SAME_LOWER", "VALID"))
    if auto.startswith("SAME"):
        dil = [1] * nsp   # onnxruntime: "Dilation not supported for AutoPadType::SAME_UPPER"
    out_dims = []
    for i, h in enumerate(v.dims[2:]):
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            if h.lo == 0:
                return False
            out_dims.append(derive(f"cdiv{strides[i]}", (h,), lambda x, s: -(-x // s), strides[i]))
            continue
        p = (0, 0) if auto == "VALID" else (pads[i], pads[i + nsp])
        span = (dil[i] * (ks[i] - 1) + 1, strides[i], p[0] + p[1])
        if h.lo + span[2] < span[0]:
            return False
        out_dims.append(derive(f"conv{span}", (h,), lambda x, kk, s, pp: (x + pp - kk) // s + 1, *span))
    w = b.tensor([Dim.of(m), Dim.of(c // group)] + [Dim.of(k) for k in ks], v.dtype)
    if w is None:
        return False
    args = [v.name, w.name]
    if b.draw.chance(0.5):
        args.append(b.tensor([Dim.of(m)], v.dtype).name)
    attrs = dict(kernel_shape=ks, strides=strides, dilations=dil, group=group)
    if auto == "NOTSET":
        attrs["pads"] = pads
    else:
        attrs["auto_pad"] = auto
    b.emit("Conv", args, v.dtype, [v.dims[0], Dim.of(m)] + out_dims, False, v.special, **attrs)
    return True


def pool(b: GraphBuilder) -> bool:
    op = b.draw.choice(("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"))
    probe = {} if op.startswith("Global") else {"kernel_shape": (1, 1)}
    # onnxruntime's pools fail on zero-sized inputs, whatever the axis
    v = b.pick(lambda v: v.kind == "f" and v.rank in (3, 4) and not v.has_zero()
               and not (v.special and "Max" in op)   # NaN in a window: ONNX is silent, the two differ
               and supported(b, op, v.dtype, **probe))
    if v is None:
        return False
    if op.startswith("Global"):
        if any(h.lo == 0 for h in v.dims[2:]):
            return False
        b.emit(op, [v.name], v.dtype, list(v.dims[:2]) + [Dim.of(1)] * (v.rank - 2), op == "GlobalMaxPool" and
               v.exact, v.special)
        return True
    nsp = v.rank - 2
    ks = [b.draw.integer(1, 3) for _ in range(nsp)]
    strides = [b.draw.integer(1, 2) for _ in range(nsp)]
    pads = [b.draw.integer(0, k - 1) for k in ks] + [b.draw.integer(0, k - 1) for k in ks]  # begins, ends
    auto = b.draw.choice(("NOTSET",) * 3 + ("SAME_UPPER", "SAME_LOWER"))
    # a window smaller than the stride pads negatively: onnxruntime's pools refuse that (mostly)
    if auto != "NOTSET" and any(k < s for k, s in zip(ks, strides)):
        auto = "NOTSET"
    ceil = auto == "NOTSET" and b.opset >= 10 and b.draw.chance(0.3)
    out_dims = []
    for i, h in enumerate(v.dims[2:]):
        if auto != "NOTSET":
            out_dims.append(derive(f"cdiv{strides[i]}", (h,), lambda x, s: -(-x // s), strides[i]))
            continue
        p = pads[i] + pads[i + nsp]
        if h.lo + p < ks[i] or h.lo == 0:
            return False
        if ceil and any(_ceil_pool(x, ks[i], strides[i], pads[i], p) != _ceil_pool_torch(x, ks[i], strides[i],
                                                                                      pads[i], p)
                        for x in h.values):
            ceil = False   # ONNX's shape inference and onnxruntime disagree on a last window in the padding
        if ceil:
            out_dims.append(derive(f"pool_ceil{(ks[i], strides[i], pads[i], p)}", (h,), _ceil_pool,
                                   ks[i], strides[i], pads[i], p))
        else:
            out_dims.append(derive(f"pool{(ks[i], strides[i], p)}", (h,),
                                   lambda x, k, s, pp: (x + pp - k) // s + 1, ks[i], strides[i], p))
    attrs = dict(kernel_shape=ks, strides=strides, ceil_mode=int(ceil))
    if auto == "NOTSET":
        attrs["pads"] = pads
    else:
        attrs["auto_pad"] = auto
    if op == "AveragePool":
        attrs["count_include_pad"] = b.draw.choice((0, 1))
    b.emit(op, [v.name], v.dtype, list(v.dims[:2]) + out_dims, op == "MaxPool" and v.exact, v.special, **attrs)
    return True


def _ceil_pool_torch(x, k, s, pad_begin, pads):
    out = _ceil_pool(x, k, s, pad_begin, pads)
    return out - 1 if (out - 1) * s >= x + pad_begin else out


def _ceil_pool(x, k, s, pad_begin, pads):
    """ONNX's ceil_mode output size (its shape inference does not drop a last window that starts in
    the end padding, as PyTorch does)."""
    return -(-(x + pads - k) // s) + 1


# ---------------------------------------------------------------- normalization and friends
def normalization(b: GraphBuilder) -> bool:
    op = b.draw.choice(("BatchNormalization", "InstanceNormalization", "LayerNormalization", "LpNormalization"))
    if op == "LayerNormalization" and b.opset < 17:
        return False
    v = b.pick(lambda v: v.kind == "f" and v.rank >= (1 if op in ("LayerNormalization", "LpNormalization") else 3)
               and (op in ("LayerNormalization", "LpNormalization") or v.dims[1].static)
               and not (v.special and op in ("BatchNormalization", "InstanceNormalization"))
               and supported(b, op, *([v.dtype] * {"BatchNormalization": 5, "InstanceNormalization": 3,
                                                    "LayerNormalization": 2}.get(op, 1))))
    if v is None:
        return False
    attrs, args = {}, [v.name]
    if op == "BatchNormalization":
        c = [v.dims[1]]   # Inf in mean or var: NaN in onnxruntime, +-inf here; ONNX is silent
        args += [b.tensor(c, v.dtype, "plain").name, b.tensor(c, v.dtype, "plain").name,
                 b.tensor(c, v.dtype, "plain").name, b.tensor(c, v.dtype, "positive").name]
        attrs["epsilon"] = b.draw.choice((1e-5, 0.1))
    elif op == "InstanceNormalization":
        if any(d.lo == 0 for d in v.dims[2:]):
            return False
        c = [v.dims[1]]   # Inf in scale: onnxruntime folds mean * scale / std into the bias, NaN = inf - inf
        args += [b.tensor(c, v.dtype, "plain").name, b.tensor(c, v.dtype, "plain").name]
    elif op == "LayerNormalization":
        axis = b.draw.integer(-v.rank, v.rank - 1)
        norm = v.dims[axis:] if axis >= 0 else v.dims[v.rank + axis:]
        if not all(d.static for d in norm) or any(d.label == 0 for d in norm):
            return False
        args.append(b.tensor(norm, v.dtype).name)
        if b.draw.chance(0.5):
            args.append(b.tensor(norm, v.dtype).name)
        attrs["axis"] = axis
    else:
        attrs = {"axis": b.draw.integer(-v.rank, v.rank - 1), "p": b.draw.choice((1, 2))}
    b.emit(op, args, v.dtype, v.dims, False, True, **attrs)
    return True


def cumsum(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.kind in "fi" and v.rank >= 1 and supported(b, "CumSum", v.dtype, I64))
    if v is None:
        return False
    axis = b.const(np.array(b.draw.integer(-v.rank, v.rank - 1), b.draw.choice((I64, I32))))
    attrs = {"exclusive": b.draw.choice((0, 1)), "reverse": b.draw.choice((0, 1))}
    b.emit("CumSum", [v.name, axis], v.dtype, v.dims, v.kind == "i", v.special or v.kind == "f", **attrs)
    return True


def trilu(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.rank >= 2 and v.kind in "fi" and supported(b, "Trilu", v.dtype))
    if v is None or b.opset < 14:
        return False
    args = [v.name]
    if b.draw.chance(0.6):
        args.append(b.const(np.array(b.draw.integer(-3, 3), np.int64)))
    b.emit("Trilu", args, v.dtype, v.dims, v.exact, v.special, upper=b.draw.choice((0, 1)))
    return True


def topk(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.kind == "f" and v.rank >= 1 and v.exact and not v.special and not v.has_zero()
               and supported(b, "TopK", v.dtype, I64))
    if v is None:
        return False
    axis = b.draw.integer(-v.rank, v.rank - 1)
    d = v.dims[axis]
    k = b.draw.integer(0, d.lo)
    vals, idx = b.node("TopK", [v.name, b.const(np.array([k], np.int64))], n_out=2, axis=axis,
                       largest=b.draw.choice((1, 0)), sorted=1)
    dims = list(v.dims)
    dims[axis] = Dim.of(k)
    b.values.append(Val(vals, v.dtype, tuple(dims), True, False))
    if v.rank == 1 or b.draw.chance(0.5):   # ties between equal values may order indices either way
        b.values.append(Val(idx, I64, tuple(dims), True, False))
    return True


def gather_elements(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.rank >= 1 and all(b.declarable(d) for d in v.dims))
    if v is None:
        return False
    axis = b.draw.integer(-v.rank, v.rank - 1)
    a = axis % v.rank
    lo = v.dims[a].lo
    if lo == 0 or not all(d.static for i, d in enumerate(v.dims) if i != a):
        return False
    dims = [Dim.of(b.draw.integer(0 if i == a else 1, 3)) if i == a else d for i, d in enumerate(v.dims)]
    if not all(d.static for d in dims):
        return False
    idx = b.root.rng.integers(-lo, lo, [d.label for d in dims]).astype(np.int64)
    b.emit("GatherElements", [v.name, b.const(idx)], v.dtype, dims, v.exact, v.special, axis=axis)
    return True


def nonzero(b: GraphBuilder) -> bool:
    """A data-dependent output shape: only its count of rows is known (the rank)."""
    v = b.pick(lambda v: v.kind in "ib" and v.rank >= 1 and supported(b, "NonZero", v.dtype))
    if v is None:
        return False
    (out,) = b.node("NonZero", [v.name])
    # onnxruntime's and numpy's nonzero agree on order (row-major); the count is data: keep it
    # out of the pool (its dims are unknown to the generator) but make it a graph output.
    b.extra_outputs.append(Val(out, I64, (Dim.of(v.rank), Dim("nonzero", (-1,) * len(v.dims[0].values)))))
    return True


def einsum(b: GraphBuilder) -> bool:
    # onnxruntime's Einsum dies of SIGFPE on an empty contraction ("ij,kj->ik" with j = 0)
    v = b.pick(lambda v: v.kind == "f" and v.rank == 2 and not v.has_zero()
               and supported(b, "Einsum", v.dtype, v.dtype, equation="ij,jk->ik"))
    if v is None or not b.declarable(v.dims[1]):
        return False
    eq, n = b.draw.choice((("ij,jk->ik", True), ("ij,kj->ik", True), ("ij->ji", False), ("ij->i", False),
                           ("ij,ij->ij", None)))
    if n is None:
        w = b.same_shape(v)
        dims = v.dims
    elif n:
        k = b.new_dim(allow_zero=False)
        w = b.tensor([v.dims[1], k] if eq.startswith("ij,jk") else [k, v.dims[1]], v.dtype)
        dims = (v.dims[0], k)
    else:
        w = None
        dims = v.dims[::-1] if eq == "ij->ji" else v.dims[:1]
    if n is not False and w is None:
        return False
    args = [v.name] + ([w.name] if w is not None else [])
    b.emit("Einsum", args, v.dtype, dims, eq in ("ij->ji",), True, equation=eq)
    return True
