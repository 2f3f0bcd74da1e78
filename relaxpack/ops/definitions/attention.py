"""``nn.attention``: scaled dot-product attention in one call, its scores never whole in memory.

``nn.attention(q, k, v, *operands, lhs_axes=, rhs_axes=, v_axes=, out_axes=, steps=, softmax=)``
is::

    s = permute_matmul(q, k, lhs_axes=lhs_axes, rhs_axes=rhs_axes)     # the scores
    s = step(s) for each of steps, in order:
        ("scale", c, False)   s * c          ("scale", c, True)   s / c       (c a float)
        ("add", i)            s + args[i]    (a mask or a bias, broadcast into the scores)
        ("where", i, j, True) where(args[i], s, args[j])   (False: where(args[i], args[j], s))
    p = softmax(s, axis=-1)                # or safe_softmax (softmax="safe_softmax")
    out = permute_matmul(p, v, rhs_axes=v_axes, out_axes=out_axes)

``i`` and ``j`` index the call's arguments (3 and on: the operands after q, k and v). No importer
emits it: FuseAttention makes it from those ops (``passes/fuse_attention.py``). The kernel
(``runtime/kernels/attention.py``) runs the steps as they are while the scores are small, and
by blocks of query rows when they are not, so a long sequence's scores (hundreds of MB: a
diffusion UNet's attention at 64x64 latents) are never held whole.

>>> make_call("nn.attention", q, k, v, mask, rhs_axes=(0, 1, 3, 2), steps=(("scale", 0.125, False), ("add", 3)))  # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dim_algebra import dim_min
from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import StructInfo, TensorStructInfo
from ..registry import register_op
from .common import attr_error, broadcast_sinfo, check_dtype_kind, same_dtype, shape_error, tensor_arg
from .linalg import _matmul_sinfo, _permuted

#: the score dtypes the kernel computes in (a float16 attention stays unfused)
DTYPES = frozenset({"float32", "float64"})
#: the softmax kinds: ONNX's and torch's _safe_softmax (a fully masked row gives zeros)
SOFTMAX_KINDS = ("softmax", "safe_softmax")


def _step_operands(call: Call, step, nargs: int) -> list[tuple[int, str]]:
    """``(argument index, role)`` of the operands a step reads; a malformed step is an error."""
    kind = step[0] if isinstance(step, tuple) and step else None
    if kind == "scale" and len(step) == 3 and isinstance(step[1], float) and isinstance(step[2], bool):
        return []
    if kind == "add" and len(step) == 2:
        roles = [(step[1], "addend")]
    elif kind == "where" and len(step) == 4 and isinstance(step[3], bool):
        roles = [(step[1], "condition"), (step[2], "fill")]
    else:
        raise attr_error(call, f"a step is ('scale', float, bool), ('add', i) or ('where', i, j, bool), got {step!r}")
    for index, role in roles:
        if not (isinstance(index, int) and not isinstance(index, bool) and 3 <= index < nargs):
            raise attr_error(call, f"step {step!r}: the {role} must be an argument after q, k and v (3..{nargs - 1})")
    return roles


def _infer_attention(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    """The scores' struct info (every step's operands broadcast into them), then the second
    product's."""
    q, k, v = (tensor_arg(call, i, what) for i, what in enumerate(("q", "k", "v")))
    dtype = same_dtype(call, (q, k, v), ("q", "k", "v"))
    check_dtype_kind(call, q, frozenset({"float"}), "q")
    if dtype is not None and dtype not in DTYPES:
        raise shape_error(call, f"computes in {' or '.join(sorted(DTYPES))}, got {dtype}")
    for sinfo, what in ((q, "q"), (k, "k"), (v, "v")):
        if 0 <= sinfo.ndim < 2:
            raise shape_error(call, f"{what} must have rank >= 2, got rank {sinfo.ndim}")
    if call.attrs["softmax"] not in SOFTMAX_KINDS:
        raise attr_error(call, f"softmax must be one of {SOFTMAX_KINDS}, got {call.attrs['softmax']!r}")
    product = call.replace(attrs={"out_dtype": None, "lhs_axes": call.attrs["lhs_axes"],
                                  "rhs_axes": call.attrs["rhs_axes"], "v_axes": call.attrs["v_axes"],
                                  "out_axes": call.attrs["out_axes"]})
    scores = _matmul_sinfo(product, _permuted(product, q, "lhs_axes"), _permuted(product, k, "rhs_axes"),
                           analyzer)
    steps = call.attrs["steps"]
    if not isinstance(steps, tuple):
        raise attr_error(call, f"steps must be a tuple of steps, got {steps!r}")
    for step in steps:
        for index, role in _step_operands(call, step, len(call.args)):
            operand = tensor_arg(call, index, role)
            if role == "condition":
                check_dtype_kind(call, operand, frozenset({"bool"}), role)
            else:
                same_dtype(call, (q, operand), ("q", role))
            scores = broadcast_sinfo(call, (scores, operand), analyzer, scores.dtype)
    out = _matmul_sinfo(product, scores, _permuted(product, v, "v_axes"), analyzer)
    return _permuted(product, out, "out_axes")


def scores_shape(out_shape: tuple, v_shape: tuple, attrs) -> tuple:
    """The shape of the scores the kernel computes, every operand broadcast to the result's batch
    dims: ``(*batch, queries, keys)`` (dims or ints)."""
    out_axes, v_axes = attrs["out_axes"], attrs["v_axes"]
    result = out_shape if out_axes is None else tuple(out_shape[out_axes.index(i)] for i in range(len(out_shape)))
    values = v_shape if v_axes is None else tuple(v_shape[a] for a in v_axes)
    return (*result[:-1], values[-2])


def attention_workspace(inputs: tuple, attrs, out: StructInfo):
    """Two arrays (the scores and their softmax) of the whole scores or of one block of query
    rows, whichever is smaller (``BLOCK_BYTES`` of the kernel); a block wider than that (one row of more
    keys) takes the thread's scratch."""
    from ...runtime.kernels.attention import BLOCK_BYTES     # loads the kernels: build time only
    v = inputs[2]
    if not (isinstance(out, TensorStructInfo) and out.shape is not None and isinstance(v, TensorStructInfo)
            and v.shape is not None and out.dtype in DTYPES):
        return None
    size = 4 if out.dtype == "float32" else 8
    for dim in scores_shape(tuple(out.shape), tuple(v.shape), attrs):
        size = size * dim
    part = dim_min(size, BLOCK_BYTES)
    return 2 * ((part + 63) // 64 * 64)


register_op("nn.attention", infer=_infer_attention,
            attrs={"lhs_axes": None, "rhs_axes": None, "v_axes": None, "out_axes": None, "steps": (),
                   "softmax": "softmax"},
            num_args=(3, None), workspace=attention_workspace,
            doc="permute_matmul(softmax(steps(permute_matmul(q, k))), v): attention in one call, its scores "
                "scaled, masked and selected by the steps "
                "(the chain FuseAttention recognises), by blocks of query rows when its scores are large.")
