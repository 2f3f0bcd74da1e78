"""Kernels of the fused ops (``nn.gemm``, ``nn.conv_bias_act``).

Each runs the unfused kernels' own code in the same order, in place on
``out``: the product (``matmul`` / ``nn.conv``) is written into ``out``,
the bias is added into it, then the activation kernel transforms it in
place. The results are the unfused composition's, bit for bit, with one
kernel call instead of two or three.

``activation`` is None, a name, or ``(name, *params)`` as in the op
definition (an archive may hand the tuple back as a list).
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from .activation import gelu, gelu_in_place, hard_sigmoid, hard_swish, hard_swish6_in_place, leakyrelu, relu, silu
from .elementwise import clip, sigmoid
from .gelu_per_output import gelu_act
from . import gemm_panels, integer_exact
from .linalg import BLAS_DTYPES, fresh_out_views, matmul, one_matrix_views
from .nn import conv_bias
from ._registry import KERNELS, register_kernel
from .tiled_operand import ROW_TILE_MAX_SIZE, tiled


#: activation name -> fn(buf, params) applying it in place
_ACTIVATIONS = {
    "relu": lambda out: relu(out, out=out),
    "sigmoid": lambda out: sigmoid(out, out=out),
    "tanh": lambda out: KERNELS["tanh"].fn(out, out=out),
    "silu": lambda out: silu(out, out=out),
    "gelu": gelu_in_place,
    "gelu_tanh": lambda out: gelu(out, out=out, approximate="tanh"),
    "leakyrelu": lambda out, alpha: leakyrelu(out, out=out, alpha=alpha),
    "clip": lambda out, lo, hi: clip(out, out=out, min=lo, max=hi, saturate_nan=False),
    "hard_swish": lambda out: hard_swish(out, out=out),
    "hard_swish6": hard_swish6_in_place,
    "hard_sigmoid": lambda out, alpha, beta: hard_sigmoid(out, out=out, alpha=alpha, beta=beta),
}


def apply_activation(out: np.ndarray, activation) -> None:
    """Apply ``activation`` (None, a name or ``(name, *params)``) to ``out`` in place."""
    if activation is not None and out.size:
        name, params = _parse(activation)
        _lookup(name)(out, *params)


def activation_fn(activation):
    """``fn(out)`` applying ``activation`` in place (nothing to an empty ``out``), or None for none:
    made once per instruction, so a clip is the specialized one (its bounds read-only 0-d arrays
    per dtype, made once: ``elementwise._specialize_clip``; the generic kernel works them out and
    makes numpy scalars, ~2 us more on a small tensor), the same results."""
    if activation is None:
        return None
    name, params = _parse(activation)
    if name == "gelu":
        return gelu_act()       # bound to the instruction's out (the same calls, fewer look-ups)
    fn = _lookup(name)
    if name == "clip":
        clipping = clip.specialize_attrs({"min": params[0], "max": params[1], "saturate_nan": False}, ())
        fn, params = (lambda out: clipping(out, out=out)), ()

    def apply(out):
        if out.size:
            fn(out, *params)
    return apply


def _parse(activation) -> tuple:
    """``(name, params)`` of an activation given as a name or ``(name, *params)``."""
    return (activation, ()) if isinstance(activation, str) else (activation[0], tuple(activation[1:]))


def _lookup(name: str):
    fn = _ACTIVATIONS.get(name)
    if fn is None:
        raise UnsupportedOpError(f"fused kernel: unknown activation {name!r}; known: {sorted(_ACTIVATIONS)}")
    return fn


@register_kernel("nn.gemm")
def gemm(x, w, bias=None, *, out, activation):
    """``activation(x @ w + bias)``; ``bias`` broadcasts into the product."""
    matmul(x, w, out=out, out_dtype=None)
    if bias is not None:
        np.add(out, bias, out)
    apply_activation(out, activation)


def _specialize_gemm(attrs: dict, constant: tuple):
    """Per instruction: the activation looked up once; the product is the specialized matmul's
    (a constant float16 weight keeps its float32 copy, a constant integer weight is declared one:
    :func:`.linalg.matmul`'s ``specialize_attrs``); a float32/float64 product of one matrix by a
    constant weight keeps :func:`.linalg.one_matrix_views` (``np.dot``: the same bits, sooner), into
    a model output made each call :func:`.linalg.fresh_out_views` (a classifier's head); a
    constant bias is added as its tile of the product's shape (:func:`.tiled_operand.tiled`: a
    same-shape add, 0.22 against 0.77 us at (1, 5, 32), where numpy broadcasts a row per call). The
    activation is the conv epilogue's for ``out``'s dtype (:func:`.conv_small._activation`, kept per
    dtype: a float ReLU the relu kernel's clip without its calls around it, ~0.4 us less a call)."""
    if set(attrs) - {"activation"}:
        return lambda *args, out, workspace=None: gemm(*args, out=out, **attrs)
    from .conv_small import _activation as in_place
    activation = attrs["activation"]
    act = activation_fn(activation)
    acts: dict = {}             # out's dtype -> the in-place activation
    fixed = len(constant) > 1 and constant[1]
    add_bias = tiled(np.add, 1, True, ROW_TILE_MAX_SIZE) if len(constant) > 2 and constant[2] else np.add
    product = matmul.specialize_attrs({"out_dtype": None}, tuple(constant[:2]))

    views = [None] * 5          # one_matrix_views of the last call by a constant weight
    fresh = [None] * 5          # fresh_out_views of the last call by a constant weight into a new array
    panels = [None]             # (the weight, the panels' width, each matrix's packed panels and tail): gemm_panels

    def call(x, w, bias=None, *, out, workspace=None):
        if x is fresh[0] and w is fresh[1] and out.shape == fresh[3] and out.dtype is fresh[4] \
                and out.base is None and out.flags.c_contiguous:
            np.dot(fresh[2], w, out)
        elif x is views[0] and out is views[2] and w is views[1]:
            if views[4] is True:        # not one matrix, matmul's first branch: its one call
                np.matmul(x, w, out)
            elif views[3] is None:
                matmul(x, w, out=out, out_dtype=None)
            else:
                np.dot(views[3], w, views[4])
        elif fixed and w.dtype not in BLAS_DTYPES:
            product(x, w, out=out)
        elif fixed and x.dtype is w.dtype is out.dtype and gemm_panels.matmul_into(x, w, out, panels):
            views[:] = fresh[:] = (None,) * 5       # matmul's panels, from the weight's packed copy
        else:
            matmul(x, w, out=out, out_dtype=None)
            if fixed:
                views[:] = one_matrix_views(x, w, out) or (None,) * 5
                fresh[:] = fresh_out_views(x, w, out) or (None,) * 5
        if bias is not None:
            add_bias(out, bias, out)
        if act is not None:
            fn = acts.get(out.dtype)
            if fn is None:
                fn = acts[out.dtype] = in_place(activation, out.dtype)
            if out.size:
                fn(out)
    return call


gemm.specialize_attrs = _specialize_gemm


@register_kernel("nn.conv_bias_act")
def conv_bias_act(data, weight, bias=None, *, out, strides, padding, dilation, groups,
                  activation, data_layout, out_layout, exact, workspace=None):
    """``activation(nn.conv(data, weight) + bias)``, the bias per output
    channel (in either ``data_layout`` and ``out_layout``); scratch from
    ``workspace`` when given."""
    epilogue = None if activation is None else lambda part: apply_activation(part, activation)
    conv_bias(data, weight, bias, out=out, strides=strides, padding=padding, dilation=dilation,
              groups=groups, data_layout=data_layout, out_layout=out_layout, workspace=workspace,
              epilogue=epilogue, exact=exact)


def _specialize_conv_bias_act(attrs: dict, constant: tuple):
    """Per instruction: the small-conv fast path (:mod:`.conv_small`); a constant weight is
    declared one (:func:`.integer_exact.declare_constant`: an integer conv keeps its float copy)."""
    from .conv_small import specialize
    return specialize(conv_bias_act, constant, declare=declarer(constant), **attrs)


def declarer(constant: tuple):
    """``declare(weight, bias)``, declaring the integer ones of them constants where ``constant``
    says they are bound (operands 1, 2), or None: the conv's call runs it when it prepares for new
    operands (not on a call with the last call's objects: no layer of its own a call)."""
    fixed_weight, fixed_bias = len(constant) > 1 and constant[1], len(constant) > 2 and constant[2]
    if not (fixed_weight or fixed_bias):
        return None

    seen = [None, None]     # the last weight and bias looked at (once per object)

    def declare(weight, bias) -> None:
        if weight is seen[0] and bias is seen[1]:
            return
        if fixed_weight and weight.dtype.kind in "iu":
            integer_exact.declare_constant(weight)
        if fixed_bias and bias is not None and bias.dtype.kind in "iu":
            integer_exact.declare_constant(bias)
        seen[0], seen[1] = weight, bias
    return declare


conv_bias_act.specialize_attrs = _specialize_conv_bias_act
