"""Generator emitters for the patterns -O2's optimizations rewrite.

The plain families make small, generic graphs: convs of a few channels,
softmax of unit-range values, no recurrent ops. The rewrites and kernels
that pay off only on model-like shapes (Winograd convs of >= 64 channels,
channels-last regions entered at >= 16 channels, attention's head
transposes around a matmul, UNet's resize + 1x1 conv, packed recurrent
weights) are never reached by them. Each family here makes one such
pattern with random shapes and attributes; they are switched on by name
(:data:`strategies.PATTERNS`, the campaign's ``--patterns``), so the default
campaign's cases stay what they were.

>>> strategies.PATTERNS.update(PATTERN_FAMILIES)            # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from .graph_ops import _ceil_pool, _ceil_pool_torch, supported
from .strategies import F16, F32, I32, Dim, GraphBuilder, Val, derive

SQRT2 = float(np.sqrt(2.0))


# ---------------------------------------------------------------- helpers
def _symbol(b: GraphBuilder, name: str, sizes) -> Dim:
    """A named symbolic dim of the graph (its sizes per run drawn once)."""
    root = b.root
    if name not in root.symbols:
        root.symbols[name] = tuple(b.draw.choice(sizes) for _ in range(len(Dim.of(1).values)))
    return Dim(name, root.symbols[name])


def _spatial(b: GraphBuilder, lo: int, hi: int, symbol: str) -> Dim:
    if b.draw.chance(0.2):
        return _symbol(b, symbol, tuple(range(lo, hi + 1)))
    return Dim.of(b.draw.integer(lo, hi))


def _batch(b: GraphBuilder) -> Dim:
    return b.draw.choice((Dim.of(1), Dim.of(1), Dim.of(2), _symbol(b, "n", (1, 2, 3))))


def _float(b: GraphBuilder) -> np.dtype:
    return F16 if b.draw.chance(0.15) else F32


def _const(b: GraphBuilder, array, dtype) -> Val:
    array = np.asarray(array).astype(dtype)
    return Val(b.const(array), np.dtype(dtype), tuple(Dim.of(s) for s in array.shape))


def _image(b: GraphBuilder, channels, lo: int, hi: int, reuse=0.4, dtype=None) -> Val | None:
    """A 4-d float value with a channel count in ``channels``: one from the pool, or a new input."""
    if b.draw.chance(reuse):
        v = b.pick(lambda v: v.kind == "f" and v.rank == 4 and (dtype is None or v.dtype == dtype) and v.dims[1].static and v.dims[1].label in channels
                   and all(d.lo >= 1 for d in v.dims))
        if v is not None:
            return v
    dims = (_batch(b), Dim.of(b.draw.choice(list(channels))), _spatial(b, lo, hi, "h"), _spatial(b, lo, hi, "w"))
    return b.root.new_input(dims, dtype or _float(b))


def _conv_node(b: GraphBuilder, v: Val, m: int, ks, strides, dil, pads, group: int, bias: bool,
               scale: float = 1.0) -> Val | None:
    """A Conv with constant weights (what ConvertLayout moves channels last) over v."""
    out = []
    for i, h in enumerate(v.dims[2:]):
        span = (dil[i] * (ks[i] - 1) + 1, strides[i], pads[i] + pads[i + 2])
        if h.lo + span[2] < span[0]:
            return None
        out.append(derive(f"conv{span}", (h,), lambda x, kk, s, pp: (x + pp - kk) // s + 1, *span))
    c = v.dims[1].label
    w = b.root.rng.standard_normal((m, c // group, *ks)) * scale
    args = [v.name, b.const(w.astype(v.dtype))]
    if bias:
        args.append(b.const(b.root.rng.standard_normal(m).astype(v.dtype)))
    return b.emit("Conv", args, v.dtype, [v.dims[0], Dim.of(m), *out], False, v.special, kernel_shape=list(ks),
                  strides=list(strides), dilations=list(dil), pads=list(pads), group=group)


def _epilogue(b: GraphBuilder, v: Val) -> Val:
    """What follows a conv in a model: nothing, an activation, SiLU, or a residual add."""
    kind = b.draw.choice(("none", "Relu", "silu", "Sigmoid", "Clip", "add"))
    if kind == "none":
        return v
    if kind == "silu":
        return _silu_of(b, v)
    if kind == "Clip":
        return b.emit("Clip", [v.name, b.const(np.array(0, v.dtype)), b.const(np.array(6, v.dtype))], v.dtype,
                      v.dims, False, v.special)
    if kind == "add":
        w = b.same_shape(v)
        if w is None:
            return v
        return b.emit("Add", [v.name, w.name], v.dtype, v.dims, False, v.special or w.special)
    return b.emit(kind, [v.name], v.dtype, v.dims, False, v.special)


# ---------------------------------------------------------------- convolution and pooling
def winograd_conv(b: GraphBuilder) -> bool:
    """3x3 stride-1 convs of 64-80 channels on planes of about 16+ 2x2 tiles (F(2x2, 3x3)), one to
    three in a row with activations between: ConvertLayout moves a region channels last only when
    its gains (each Winograd conv) pay for its transposes in and out, which one conv alone does not."""
    v = _image(b, range(64, 81), 3, 14)
    if v is None or not supported(b, "Conv", v.dtype, v.dtype):
        return False
    n = b.draw.choice((1, 2, 2, 3))
    for i in range(n):
        pads = [b.draw.integer(0, 2) for _ in range(4)]
        if b.draw.chance(0.5):
            pads = [1, 1, 1, 1]
        m = b.draw.integer(64, 80) if i + 1 < n else b.draw.choice((1, 5, 16, 64, 72))
        dil = [1, 1] if b.draw.chance(0.85) else [b.draw.choice((1, 2)), b.draw.choice((1, 2))]
        out = _conv_node(b, v, m, (3, 3), (1, 1), dil, pads, 1, b.draw.chance(0.6), scale=1 / 24)
        if out is None:
            return i > 0
        v = _epilogue(b, out)
    return True


def depthwise_conv(b: GraphBuilder) -> bool:
    """Depthwise convs (group = channels, multiplier 1 or 2), strides 1-3, dilation 1-2, one to three
    in a row (a region channels last needs as many gaining convs as transposes), sometimes after a
    pointwise conv as in MobileNet."""
    v = _image(b, (1, 3, 8, 16, 17, 24, 32), 3, 20)
    if v is None or not supported(b, "Conv", v.dtype, v.dtype):
        return False
    if v.dims[1].label >= 16 and b.draw.chance(0.3):
        pw = _conv_node(b, v, b.draw.choice((16, 24)), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, True, scale=0.25)
        v = _epilogue(b, pw)
    for i in range(b.draw.choice((1, 2, 2, 3))):
        c = v.dims[1].label
        k = [b.draw.choice((1, 3, 3, 5)) for _ in range(2)]
        strides = [b.draw.integer(1, 3) for _ in range(2)]
        if b.draw.chance(0.6):
            strides = [strides[0]] * 2
        dil = [b.draw.choice((1, 1, 2)) for _ in range(2)]
        pads = [b.draw.integer(0, k[j % 2] - 1) for j in range(4)]
        out = _conv_node(b, v, c * b.draw.choice((1, 1, 1, 2)), k, strides, dil, pads, c, b.draw.chance(0.6))
        if out is None:
            return i > 0
        v = _epilogue(b, out)
        if v.has_zero():
            break
    return True


def max_pool(b: GraphBuilder) -> bool:
    """MaxPool with padding, ceil_mode, dilations and strides, after a channels-last conv or not."""
    v = _image(b, (1, 3, 16, 20), 2, 13, reuse=0.6)
    if v is None or v.special or v.has_zero():
        return False
    if v.dims[1].label >= 16 and b.draw.chance(0.5):   # a depthwise conv first: the pool runs channels last
        c = v.dims[1].label
        conv = _conv_node(b, v, c, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), c, True)
        if conv is not None and not conv.has_zero():
            v = conv
    ks = [b.draw.integer(1, 4) for _ in range(2)]
    strides = [b.draw.integer(1, 3) for _ in range(2)]
    dil = [b.draw.choice((1, 1, 2)) for _ in range(2)] if b.opset >= 10 else [1, 1]
    pads = [b.draw.integer(0, k - 1) for k in ks] * 2
    if b.draw.chance(0.5):
        pads = [b.draw.integer(0, k - 1) for k in ks + ks]
    ceil = b.draw.chance(0.5)
    out = []
    for i, h in enumerate(v.dims[2:]):
        k = dil[i] * (ks[i] - 1) + 1
        p = pads[i] + pads[i + 2]
        if h.lo + p < k or any(_padding_only_window(x, ks[i], strides[i], dil[i], pads[i], p, ceil) for x in h.values):
            return False
        if ceil and any(_ceil_pool(x, k, strides[i], pads[i], p) != _ceil_pool_torch(x, k, strides[i], pads[i], p)
                        for x in h.values):
            ceil = False   # ONNX's shape inference and onnxruntime disagree on a last window in the padding
    for i, h in enumerate(v.dims[2:]):
        k = dil[i] * (ks[i] - 1) + 1
        p = pads[i] + pads[i + 2]
        if ceil:
            out.append(derive(f"pool_ceil{(k, strides[i], pads[i], p)}", (h,), _ceil_pool, k, strides[i], pads[i], p))
        else:
            out.append(derive(f"pool{(k, strides[i], p)}", (h,), lambda x, kk, s, pp: (x + pp - kk) // s + 1, k,
                              strides[i], p))
    if not supported(b, "MaxPool", v.dtype, kernel_shape=(1, 1)):
        return False
    b.emit("MaxPool", [v.name], v.dtype, [*v.dims[:2], *out], v.exact, v.special, kernel_shape=ks,
           strides=strides, pads=pads, ceil_mode=int(ceil), dilations=dil)
    return True


def _padding_only_window(n: int, k: int, s: int, d: int, begin: int, pads: int, ceil: bool) -> bool:
    """Whether a window of the pool has all its taps in the padding: ONNX is silent, onnxruntime gives
    the lowest float32 (-3.4e38) but -inf in float16, relaxpack -inf, the reference evaluator 0."""
    span = d * (k - 1) + 1
    m = (_ceil_pool(n, span, s, begin, pads) if ceil else (n + pads - span) // s + 1)
    return any(all(not 0 <= o * s + t * d - begin < n for t in range(k)) for o in range(m))


def resize_conv(b: GraphBuilder) -> bool:
    """Resize (nearest or linear, spatial scales) followed by a 1x1 conv (SinkResize)."""
    if b.opset < 13:
        return False
    v = _image(b, (2, 4, 8, 16), 2, 7, dtype=F32)   # onnxruntime's CPU Resize has no float16 kernel
    if v is None or v.has_zero():
        return False
    c = v.dims[1].label
    scales = [b.draw.choice((2.0, 2.0, 1.5, 0.5, 3.0)) for _ in range(2)]
    if b.draw.chance(0.5):
        scales = [scales[0]] * 2
    # NaN or Inf next to a source coordinate of weight 0: onnxruntime multiplies it by 0 (NaN), the
    # reference and relaxpack skip it; ONNX is silent
    mode = "nearest" if v.special else b.draw.choice(("nearest", "linear"))
    coords = b.draw.choice(("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners"))
    if coords in ("align_corners", "pytorch_half_pixel") and any(
            x * s != int(x * s) for s, h in zip(scales, v.dims[2:]) for x in h.values):
        # the spec's length_resized: onnxruntime takes the rounded output length, the reference evaluator
        # (and relaxpack) the unrounded one; they agree when the scale gives a whole length
        coords = "half_pixel"
    attrs = {"mode": mode, "coordinate_transformation_mode": coords}
    if mode == "nearest":
        attrs["nearest_mode"] = b.draw.choice(("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"))
    dims = [v.dims[0], v.dims[1]]
    for s, h in zip(scales, v.dims[2:]):
        if any(int(x * s) == 0 for x in h.values):
            return False
        dims.append(derive(f"resize{s}", (h,), lambda x, ss: int(np.floor(x * ss)), s))
    args = [v.name, "", b.const(np.array([1.0, 1.0, *scales], np.float32))]
    r = b.emit("Resize", args, v.dtype, dims, mode == "nearest" and v.exact, v.special, **attrs)
    m = b.draw.integer(1, c)
    out = _conv_node(b, r, m, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, b.draw.chance(0.6))
    if out is None:
        return False
    if b.draw.chance(0.3):
        _epilogue(b, out)
    return True


# ---------------------------------------------------------------- transposes and matmul
def _perm(b: GraphBuilder, n: int) -> list[int]:
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = b.draw.integer(0, i)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def _transpose(b: GraphBuilder, v: Val, perm) -> Val:
    return b.emit("Transpose", [v.name], v.dtype, [v.dims[p] for p in perm], v.exact, v.special, perm=list(perm))


def permute_reshape_permute(b: GraphBuilder) -> bool:
    """Transpose -> Reshape (split a dim or merge two adjacent ones) -> Transpose."""
    v = b.pick(lambda v: 2 <= v.rank <= 4 and not v.has_zero() and sum(not d.static for d in v.dims) <= 1)
    if v is None or b.draw.chance(0.4):
        dims = [Dim.of(b.draw.choice((2, 3, 4, 6, 8))) for _ in range(b.draw.integer(2, 4))]
        if b.draw.chance(0.3):
            dims[b.draw.integer(0, len(dims) - 1)] = _symbol(b, "n", (1, 2, 3))
        v = b.root.new_input(dims, b.draw.choice((F32, F32, F16, np.dtype("int64"))))
    t = _transpose(b, v, _perm(b, v.rank))
    dims = list(t.dims)
    splittable = [i for i, d in enumerate(dims) if d.static and d.label in (4, 6, 8)]
    if splittable and (b.draw.chance(0.5) or len(dims) < 2 or len(dims) == 2):
        i = b.draw.choice(splittable)
        f = 2 if dims[i].label != 6 or b.draw.chance(0.5) else 3
        new = dims[:i] + [Dim.of(f), Dim.of(dims[i].label // f)] + dims[i + 1:]
    elif len(dims) >= 2:
        i = b.draw.integer(0, len(dims) - 2)
        merged = Dim.of(dims[i].label * dims[i + 1].label) if dims[i].static and dims[i + 1].static else \
            derive("mul", (dims[i], dims[i + 1]), lambda a, c: a * c)
        new = dims[:i] + [merged] + dims[i + 2:]
    else:
        return False
    if sum(not d.static for d in new) > 1:
        return False
    target = [d.label if d.static else -1 for d in new]
    r = b.emit("Reshape", [t.name, b.shape_array(target)], t.dtype, new, t.exact, t.special)
    _transpose(b, r, _perm(b, r.rank))
    return True


def permute_matmul(b: GraphBuilder) -> bool:
    """MatMul of transposed operands (attention's head split), its result transposed back."""
    dtype = _float(b)
    if not supported(b, "MatMul", dtype, dtype):
        return False
    nb = b.draw.integer(0, 2)
    batch = [b.draw.choice((Dim.of(1), Dim.of(2), Dim.of(3), _symbol(b, "n", (1, 2, 3)))) for _ in range(nb)]
    mdim = b.draw.choice((Dim.of(1), Dim.of(4), Dim.of(5), _symbol(b, "s", (1, 3, 6))))
    k = Dim.of(b.draw.choice((1, 3, 8, 16)))
    n = b.draw.choice((Dim.of(2), Dim.of(7), mdim))

    def operand(logical) -> Val:
        perm = _perm(b, len(logical)) if b.draw.chance(0.7) else list(range(len(logical)))
        stored = [None] * len(logical)
        for i, p in enumerate(perm):
            stored[p] = logical[i]
        x = b.tensor(stored, dtype) if all(d.static for d in stored) else b.root.new_input(stored, dtype)
        return _transpose(b, x, perm) if perm != list(range(len(logical))) else x

    a = operand(batch + [mdim, k])
    rhs_batch = batch[b.draw.integer(0, nb):] if b.draw.chance(0.3) else batch
    w = operand(rhs_batch + [k, n])
    y = b.emit("MatMul", [a.name, w.name], dtype, batch + [mdim, n], False, True)
    if b.draw.chance(0.7):
        y = _transpose(b, y, _perm(b, y.rank))
    if y.rank >= 3 and b.draw.chance(0.3) and all(d.static for d in y.dims[-2:]):
        merged = Dim.of(y.dims[-2].label * y.dims[-1].label)
        target = [0] * (y.rank - 2) + [merged.label]
        b.emit("Reshape", [y.name, b.shape_array(target)], dtype, [*y.dims[:-2], merged], False, True)
    return True


# ---------------------------------------------------------------- activations and normalization
def _silu_of(b: GraphBuilder, v: Val) -> Val:
    s = b.emit("Sigmoid", [v.name], v.dtype, v.dims, False, v.special)
    args = [v.name, s.name] if b.draw.chance(0.5) else [s.name, v.name]
    return b.emit("Mul", args, v.dtype, v.dims, False, v.special)


def silu(b: GraphBuilder) -> bool:
    """x * Sigmoid(x), either operand order (compose_silu)."""
    v = b.pick(lambda v: v.kind == "f")
    if v is None:
        return False
    _silu_of(b, v)
    return True


def _rows(b: GraphBuilder) -> Val:
    """A new float input of rank 2-4 with a few rows of 1-40 columns."""
    dims = [_batch(b)] if b.draw.chance(0.5) else []
    dims += [Dim.of(b.draw.integer(1, 3)) for _ in range(b.draw.integer(0, 1))]
    dims += [Dim.of(b.draw.integer(1, 6)), Dim.of(b.draw.choice((1, 2, 5, 16, 33, 40)))]
    return b.root.new_input(dims, _float(b))


def _row_scaled(b: GraphBuilder, v: Val, scales, offsets) -> Val:
    """v with each row (axis -2) scaled and shifted by its own constants."""
    rows = v.dims[-2].label
    scale = np.array([b.draw.choice(scales) for _ in range(rows)]).reshape(rows, 1)
    offset = np.array([b.draw.choice(offsets) for _ in range(rows)]).reshape(rows, 1) * scale
    if v.dtype == F16:
        # onnxruntime computes float16 Mul/Add chains in float32 (it drops the casts between them): far
        # offsets would compare float16 rounding with float32 rounding, amplified by the normalization
        scale, offset = np.ones_like(scale), np.clip(offset, -3, 3)
    x = b.emit("Mul", [v.name, _const(b, scale, v.dtype).name], v.dtype, v.dims, False, v.special)
    return b.emit("Add", [x.name, _const(b, offset, v.dtype).name], v.dtype, v.dims, False, v.special)


def softmax_ranges(b: GraphBuilder) -> bool:
    """Softmax over rows of very different ranges, with -inf / huge negative masks."""
    v = _rows(b)
    if not supported(b, "Softmax", v.dtype):
        return False
    x = _row_scaled(b, v, (1e-3, 0.1, 1.0, 10.0, 100.0, 1e4), (0.0, 0.0, -30.0, 80.0, -1e3))
    if b.draw.chance(0.7):
        lo = np.finfo(v.dtype).min
        fill = b.draw.choice((-np.inf, -1e9 if v.dtype == F32 else -6e4, lo, -1e4))
        cols = v.dims[-1].label
        shape = (v.dims[-2].label, cols) if b.draw.chance(0.5) else (1, cols)
        mask = np.where(b.root.rng.random(shape) < b.draw.choice((0.3, 0.7, 1.0)), fill, 0.0)
        x = b.emit("Add", [x.name, _const(b, mask, v.dtype).name], v.dtype, x.dims, False, True)
    op = "Softmax" if b.draw.chance(0.8) else "LogSoftmax"
    axis = -1 if b.draw.chance(0.8) else b.draw.integer(-x.rank, x.rank - 1)
    b.emit(op, [x.name], v.dtype, x.dims, False, True, axis=axis)
    return True


def layer_norm_offset(b: GraphBuilder) -> bool:
    """LayerNormalization of rows shifted far from 0 (mean / std up to 30) at several magnitudes."""
    if b.opset < 17:
        return False
    v = _rows(b)
    if not supported(b, "LayerNormalization", v.dtype, v.dtype):
        return False
    x = _row_scaled(b, v, (1e-3, 1.0, 1.0, 1e3), (0.0, 3.0, -10.0, 30.0))
    axis = -1 if b.draw.chance(0.8) else -2
    norm = [d.label for d in x.dims[axis:]]
    args = [x.name, _const(b, b.root.rng.standard_normal(norm), v.dtype).name]
    if b.draw.chance(0.6):
        args.append(_const(b, b.root.rng.standard_normal(norm), v.dtype).name)
    b.emit("LayerNormalization", args, v.dtype, x.dims, False, True, axis=axis,
           epsilon=b.draw.choice((1e-5, 1e-12, 1e-3)))
    return True


def gelu(b: GraphBuilder) -> bool:
    """GELU (the op at opset 20+, or its Erf form as exporters write it) on values up to +-1000."""
    v = b.pick(lambda v: v.kind == "f") if b.draw.chance(0.3) else None
    if v is None:
        v = b.root.new_input([Dim.of(b.draw.integer(1, 4)), Dim.of(b.draw.choice((7, 64, 300)))], _float(b))
    scale = b.draw.choice((1.0, 3.0, 8.0, 100.0 if v.dtype == F16 else 1000.0))
    x = b.emit("Mul", [v.name, _const(b, np.array(scale), v.dtype).name], v.dtype, v.dims, False, v.special)
    if b.opset >= 20 and b.draw.chance(0.4):
        b.emit("Gelu", [x.name], v.dtype, x.dims, False, x.special,
               approximate=b.draw.choice(("none", "none", "tanh")))
        return True

    def c(value):
        return _const(b, np.array(value), v.dtype).name

    scaled = b.emit("Div", [x.name, c(SQRT2)], v.dtype, x.dims, False, x.special) if b.draw.chance(0.5) else \
        b.emit("Mul", [x.name, c(1 / SQRT2)], v.dtype, x.dims, False, x.special)
    e = b.emit("Erf", [scaled.name], v.dtype, x.dims, False, x.special)
    one = b.emit("Add", [e.name, c(1.0)], v.dtype, x.dims, False, x.special)
    if b.draw.chance(0.5):   # (x * (1 + erf)) * 0.5
        p = b.emit("Mul", [x.name, one.name], v.dtype, x.dims, False, x.special)
        b.emit("Mul", [p.name, c(0.5)], v.dtype, x.dims, False, x.special)
    else:                    # (x * 0.5) * (1 + erf)
        h = b.emit("Mul", [x.name, c(0.5)], v.dtype, x.dims, False, x.special)
        b.emit("Mul", [h.name, one.name], v.dtype, x.dims, False, x.special)
    return True


# ---------------------------------------------------------------- recurrent
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def recurrent(b: GraphBuilder) -> bool:
    """LSTM / GRU / RNN with constant weights: directions, layouts, initial states, sequence lengths."""
    op = b.draw.choice(("LSTM", "GRU", "RNN"))
    dtype = F32
    rng = b.root.rng
    # onnxruntime runs layout 0 only ("Batchwise recurrent operations (layout == 1) are not supported")
    layout = 0
    direction = b.draw.choice(("forward", "reverse", "bidirectional"))
    nd = 2 if direction == "bidirectional" else 1
    hidden = b.draw.choice((1, 3, 8, 16))
    size = b.draw.choice((1, 4, 10))
    seq = b.draw.choice((Dim.of(1), Dim.of(3), Dim.of(5), _symbol(b, "s", (1, 3, 6))))
    batch = b.draw.choice((Dim.of(1), Dim.of(2), _symbol(b, "n", (1, 2, 3))))
    g = GATES[op]
    x_dims = [batch, seq, Dim.of(size)] if layout else [seq, batch, Dim.of(size)]
    # no NaN or Inf: onnxruntime's gate activations (MLAS) clamp with min/max, which turn NaN finite
    x = b.root.new_input(x_dims, dtype, data="plain")
    w = (rng.standard_normal((nd, g * hidden, size)) / np.sqrt(size)).astype(dtype)
    r = (rng.standard_normal((nd, g * hidden, hidden)) / np.sqrt(hidden)).astype(dtype)
    args = [x.name, b.const(w), b.const(r)]
    if b.draw.chance(0.7):
        args.append(b.const(rng.standard_normal((nd, 2 * g * hidden)).astype(dtype)))
    else:
        args.append("")
    if batch.static and b.draw.chance(0.3) and seq.static:
        lens = rng.integers(1, seq.label + 1, batch.label).astype(np.int32)
        args.append(b.const(lens))
    else:
        args.append("")
    state = [batch, Dim.of(nd), Dim.of(hidden)] if layout else [Dim.of(nd), batch, Dim.of(hidden)]
    if b.draw.chance(0.4) and batch.static:
        args.append(b.const(rng.standard_normal([d.label for d in state]).astype(dtype)))
    else:
        args.append("")
    if op == "LSTM":
        args.append(b.const(rng.standard_normal([d.label for d in state]).astype(dtype))
                    if batch.static and b.draw.chance(0.4) else "")
        if b.draw.chance(0.2):
            args.append(b.const(rng.standard_normal((nd, 3 * hidden)).astype(dtype)))
    while args[-1] == "":
        args.pop()
    attrs = {"hidden_size": hidden, "direction": direction}
    if b.opset >= 14:
        attrs["layout"] = layout
    if op == "GRU":
        attrs["linear_before_reset"] = b.draw.choice((0, 1))
    if op == "RNN" and b.draw.chance(0.3):
        attrs["activations"] = [b.draw.choice(("Relu", "Tanh", "Sigmoid"))] * nd
    if b.draw.chance(0.15):
        attrs["clip"] = 2.0
    n_out = 3 if op == "LSTM" else 2
    outs = b.node(op, args, n_out=n_out, **attrs)
    y_dims = [batch, seq, Dim.of(nd), Dim.of(hidden)] if layout else [seq, Dim.of(nd), batch, Dim.of(hidden)]
    b.values.append(Val(outs[0], dtype, tuple(y_dims), False, False))
    for name in outs[1:]:
        if b.draw.chance(0.5):
            b.values.append(Val(name, dtype, tuple(state), False, False))
    return True


#: name -> emitter; ``--patterns`` names a subset (or ``all``)
PATTERN_FAMILIES = {
    "winograd": winograd_conv, "depthwise": depthwise_conv, "max_pool": max_pool, "resize_conv": resize_conv,
    "permute_reshape": permute_reshape_permute, "permute_matmul": permute_matmul, "silu": silu,
    "softmax": softmax_ranges, "layer_norm": layer_norm_offset, "gelu": gelu, "recurrent": recurrent,
}

__all__ = ["PATTERN_FAMILIES", *(f.__name__ for f in PATTERN_FAMILIES.values())]
