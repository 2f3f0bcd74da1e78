"""``nn.conv`` / ``nn.conv_bias_act`` specialized per instruction, for the engine's small convs.

On a small image (the zoo's CNNs at 61x96 and below) a conv's Python costs
as much as its arithmetic: the call works out its plan, its scratch and
half a dozen views every time. The VM asks, once per instruction, for
:func:`specialize` of its attributes; the callable it gets keeps, for the
last call's weight, bias and workspace (the same objects from run to run)
and input and output shapes, the views the engine's ``strided`` method
(:mod:`.conv_strided`) needs, and then makes only its numpy calls: zero the
padded copy (a small one is the instruction's own, zeroed once) and copy the
input in, one strided copy into the columns (a stem strided along its rows:
copies from the input's column phases, :mod:`.conv_column_phases`, the same
columns), one GEMM into ``out``, the bias, the activation. A pointwise (1x1) conv of
any size runs its one GEMM the same way. A channels-last conv gets
:mod:`.conv_small_nhwc`'s runner (its pointwise, gemm and depthwise
methods). Any other call (another method, dtype or layout; a changed
operand) goes to the generic kernel, whose results these are, bit for bit
(the same calls in the same order). A call with the same input and output
views (an arena's: the same objects run after run), weight, bias and
workspace as the last one runs its runner without the checks.
"""

from __future__ import annotations

import math

import numpy as np

from . import conv_column_phases, conv_depthwise_banded, conv_pruned, conv_small_integer, conv_small_nhwc, conv_strided, conv_wide
from .gemm_blocks import block_calls, column_blocks
from ._math import CLIP, pads, scalar_array
from ._workspace import same_workspace, scratch_nbytes
from .negated_activation import negatable, negated, of_negated
from . import conv_small_cl     # (its own line: small convs channels last inside, kernels/conv_small_cl.py)
from . import conv_flat_rows    # (exact stride-1 convs on rows of the output's width)

#: the marker of an activation that reads its input negated: ``(NEGATED, "silu")``
NEGATED = object()

_as_strided = np.lib.stride_tricks.as_strided

#: without a planned workspace (a conv on symbolic spatial dims) the instruction keeps scratch of
#: its own up to this size (the strided method's convs are small: 2^16 column values per image)
PRIVATE_MAX_BYTES = 4 << 20


def specialize(generic, constant: tuple, *, strides, padding, dilation, groups, activation,
               data_layout, out_layout, exact=False, declare=None):
    """``call(data, weight, bias=None, *, out, workspace=None)`` for one instruction of ``generic``
    (``nn.conv_bias_act``'s kernel) with these attributes; a float16 weight's float32 copy is kept
    only when ``constant[1]`` says the weight is a bound value. ``declare(weight, bias)``, if
    given, runs first on any call but one on the last call's objects. A dilated, padded conv
    leaves out the taps that read padding alone at the input's size (:mod:`.conv_pruned`)."""
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups, activation=activation,
                 data_layout=data_layout, out_layout=out_layout, exact=exact)
    call = _specialize_taps(generic, constant, declare=declare, **attrs)
    rank = len(dilation) if isinstance(dilation, (tuple, list)) else None
    try:
        prunable = rank is not None and conv_pruned.may_prune(rank, padding, dilation)
    except Exception:   # noqa: BLE001 - a list or malformed attribute: the kernel's calls say what is wrong
        prunable = False
    if not prunable:
        return call
    return conv_pruned.wrap(call, lambda pruned: _specialize_taps(generic, constant, declare=declare, **pruned),
                            attrs, rank, bool(len(constant) > 1 and constant[1]))


def _specialize_taps(generic, constant: tuple, *, strides, padding, dilation, groups, activation,
                     data_layout, out_layout, exact=False, declare=None):
    """:func:`specialize`'s call of every tap."""
    fixed_weight = len(constant) > 1 and constant[1]
    fixed_bias = len(constant) > 2 and constant[2]
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups, activation=activation,
                 data_layout=data_layout, out_layout=out_layout, exact=exact)
    state = [None, None]            # the key of the prepared call, its runner
    # data (a view) or None, out, weight, bias, workspace, runner, data's shape and dtype
    last = [None, None, None, None, None, None, None, None]

    def call(data, weight, bias=None, *, out, workspace=None):
        # the same arena views and operands as the last call (run after run): its runner, unchecked;
        # a new input array (a model input) of the last one's shape and dtype: only those checked
        if out is last[1] and weight is last[2] and bias is last[3] and workspace is last[4] \
                and (data is last[0] or (data.shape == last[6] and data.dtype == last[7])):
            last[5](data, out)
            return
        if declare is not None:
            declare(weight, bias)
        key = state[0]
        if (key is not None and weight is key[1] and bias is key[2] and same_workspace(workspace, key[3])
                and data.shape == key[0] and data.dtype == key[4] and out.shape == key[5] and out.dtype == key[6]
                and out.flags.c_contiguous):
            runner = state[1]
        else:
            runner = _prepare(data, weight, bias, out, workspace, attrs, fixed_weight, fixed_bias, generic)
            state[0] = (data.shape, weight, bias, workspace, data.dtype, out.shape, out.dtype)
            state[1] = runner
        if runner is None:          # not the strided method's: the generic kernel, without asking again
            generic(data, weight, bias, out=out, workspace=workspace, **attrs)
            return
        if out.base is not None:    # a view (an arena's), whose shape never changes
            # (an input owning its memory, a model input, is not held past the call: its shape is)
            last[:] = data if data.base is not None else None, out, weight, bias, workspace, runner, \
                data.shape, data.dtype
        runner(data, out)           # (an output of a data-dependent shape is a new array each call)
    return call


def _checked(data, weight, bias, out, attrs, layout: str, dtypes: tuple):
    """``(plan, activation)`` of a call whose operands all have ``out``'s dtype (one of ``dtypes``),
    the bias one value per output channel, ``out`` C-contiguous, non-empty and of the attributes'
    shape; None otherwise (the generic kernel runs it, and says what is wrong)."""
    from .nn import _prepared_conv
    dtype = out.dtype
    out_channels = weight.shape[0] if layout == "NCHW" else weight.shape[-1]
    if dtype not in dtypes or data.dtype != dtype or weight.dtype != dtype \
            or (bias is not None and (bias.dtype != dtype or bias.shape != (out_channels,))) \
            or not out.flags.c_contiguous:
        return None
    try:
        plan, _, expected = _prepared_conv(data.shape, weight.shape, attrs["strides"], attrs["padding"],
                                           attrs["dilation"], attrs["groups"], layout, attrs["out_layout"])
        act = _activation(attrs["activation"], dtype)
    except Exception:   # noqa: BLE001 - an unhashable attribute, a bad one: the generic kernel says so
        return None
    if tuple(out.shape) != tuple(expected) or out.size == 0:
        return None
    return plan, act


def _prepare(data, weight, bias, out, workspace, attrs, fixed_weight: bool, fixed_bias: bool = False,
             generic=None):
    """The runner of the strided method or of a pointwise conv (channels last:
    :mod:`.conv_small_nhwc`'s; an integer conv: :mod:`.conv_small_integer`'s) for these
    operands, or None where the generic kernel runs."""
    if out.dtype.kind in "iu":
        return None if generic is None else conv_small_integer.prepare(
            data, weight, bias, out, workspace, attrs, fixed_weight, fixed_bias, _prepare, generic,
            PRIVATE_MAX_BYTES)
    if fixed_weight and (bias is None or fixed_bias) and negatable(attrs["activation"], weight, bias) \
            and out.dtype == weight.dtype and (bias is None or bias.dtype == out.dtype):
        # a SiLU or sigmoid of bound operands: the runner multiplies by their negations and the
        # activation reads -y, one pass less, the same bits (.negated_activation)
        weight, bias = negated(weight, bias)
        attrs = dict(attrs, activation=(NEGATED, attrs["activation"]))
    if attrs["data_layout"] == "NHWC" and attrs["out_layout"] in (None, "NHWC"):
        return _prepare_nhwc(data, weight, bias, out, workspace, attrs, fixed_weight, fixed_bias)
    if attrs["data_layout"] != "NCHW" or attrs["out_layout"] not in (None, "NCHW", "NHWC"):
        return None
    checked = _checked(data, weight, bias, out, attrs, "NCHW", (np.float16, np.float32, np.float64))
    if checked is None:
        return None
    plan, act = checked
    if attrs["out_layout"] == "NHWC":
        return _prepare_channels_last_out(plan, data, weight, bias, out, workspace, attrs, act, fixed_bias)
    if conv_small_cl.applies(plan, attrs["groups"], *data.shape[:2], weight.shape[0], out.dtype):
        # a small conv run channels last inside (the generic kernel takes the same method, the
        # same bits); a weight computed at run time: the generic kernel (the taps reordered per call)
        return conv_small_cl.prepare(plan, data, weight, bias, out, act, fixed_bias,
                                     bool(attrs.get("exact"))) if fixed_weight else None
    dtype = out.dtype
    work = np.dtype(np.float32) if dtype == np.float16 else dtype
    if _is_pointwise(plan) and attrs["groups"] == 1 and work == dtype:
        return _pointwise(data, weight, bias, act, plan.lengths, fixed_bias)
    if plan.method != "strided":
        return None
    if conv_column_phases.replaces_wide(plan, data.shape, work.itemsize):    # (as the generic kernel)
        plan = conv_column_phases.without_wide(plan)
    batch, channels = data.shape[:2]
    layouts = conv_strided.strided_layouts(plan, batch, channels, weight.shape[0], work)
    if attrs.get("exact") and fixed_weight and (bias is None or fixed_bias) and work == dtype \
            and conv_flat_rows.applies(plan, attrs["groups"], channels):
        # an exact conv's im2col on rows of the output's width (any summation order: the same integers)
        arrays = _scratch(conv_flat_rows.flat_layouts(plan, batch, channels, bias is not None, work), workspace)
        if arrays is not None:
            return conv_flat_rows.prepare(plan, weight, bias, act, arrays, conv_small_nhwc.OWN_PADDED_MAX_BYTES)
    if plan.strided.wide is not None:
        # an exact conv's bias as its GEMM's last term (conv_wide.bias_row_layouts)
        bias_row = None if not (attrs.get("exact") and fixed_weight and fixed_bias and bias is not None
                                and attrs["groups"] == 1 and work == dtype) else \
            conv_wide.bias_row_layouts(plan, layouts, channels, weight.shape[0])
        arrays = _scratch(layouts if bias_row is None else bias_row, workspace)
        relu = attrs["activation"] == "relu" and work == dtype
        return None if arrays is None else conv_wide.prepare(
            plan, weight, bias, attrs["groups"], out, arrays, None if relu else act, relu, fixed_weight, fixed_bias,
            bias_row is not None)
    if work != dtype:       # float16: the float32 input (unpadded) and the float32 result
        layouts = layouts[:-1] + [((batch, channels, *geometry_spatial(plan)), work)] * (len(layouts) == 1) \
            + layouts[-1:] + [(tuple(out.shape), work)]
    arrays = _scratch(layouts, workspace)
    if arrays is None:
        return None
    geometry = plan.strided
    result = arrays.pop() if work != dtype else None
    cols = arrays[-1]
    phases = conv_column_phases.column_filler(plan, data.shape, cols)     # (the im2col by column phases)
    padded, own, interior, interior_rows = _padded_input(arrays if phases is None else [], geometry,
                                                         data.shape[-1], work, work == dtype)
    converted = arrays[0] if work != dtype and padded is None and phases is None else None
    out_channels, taps = weight.shape[0], len(plan.taps)
    g = attrs["groups"]
    k = channels // g * taps
    pixels = math.prod(plan.lengths)
    w = weight.astype(work, copy=False).reshape(g, out_channels // g, k)   # float16: a float32 copy
    convert = work != dtype and not fixed_weight        # a weight computed at run time: converted per call
    columns = cols.reshape(batch, g, k, pixels)
    target_shape = (batch, g, out_channels // g, pixels)
    # an arena view comes back as the same object each run: its GEMM target is kept; a fresh
    # array (an output, a tensor of a data-dependent shape) is not held on to
    prepared_out = out if out.base is not None else None
    target = result.reshape(target_shape) if result is not None else \
        out.reshape(target_shape) if prepared_out is not None else None
    bias_b = _bias_operand(bias, tuple(out.shape), fixed_bias)
    copy, matmul, dot, add = np.copyto, np.matmul, np.dot, np.add
    # one image of an ungrouped conv: the GEMM as a 2-d np.dot, the same sgemm call as matmul's
    # 4-d broadcast (bit for bit) without its ~0.4 us of batch iteration (32 x 48 x 30: 2.0 -> 1.6 us;
    # a 2-d conv's 32 x 64 x 84 4.1 -> 3.7); true matrices only (a dim of 1 may take a vector routine)
    # a GEMM OpenBLAS runs faster in blocks of columns (.gemm_blocks) takes them, as conv_strided's
    blocks = column_blocks(out_channels // g, k, pixels)
    single = blocks is None and batch == 1 and g == 1 and min(out_channels, k, pixels) >= 2
    gemms = None if blocks is None or target is None else block_calls(w, columns, target)
    w2, cols2 = (w.reshape(out_channels, k), cols.reshape(k, pixels)) if single else (None, None)
    target2 = target.reshape(out_channels, pixels) if single and target is not None else None

    def window_of(source, kept: bool = True):
        view = _window(plan, source)
        dst = cols.reshape(view.shape)
        return as_runs(view, dst) if kept else (view, dst)
    source = padded if padded is not None else converted
    fixed = window_of(source) if source is not None else None
    copy_in = _interior_copier(interior, interior_rows, work)    # (float16, integers: converted)
    seen = [None, None]     # an unpadded conv: the last x that is a view (arena), its window
    # an unpadded conv of a new contiguous x every call (a model input: ViT's patch embedding):
    # x's shape and dtype, and its window's shape, dtype and strides over x's buffer (offset 0), dst
    form = [None] * 6

    def im2col(x):
        if padded is not None:
            if not own:
                padded.fill(0)
            copy_in(x)
        elif converted is not None:
            copy(converted, x)
        if fixed is not None:
            window, dst = fixed
        elif x is seen[0]:                      # (as_strided costs ~2 us: more than a small copy)
            window, dst = seen[1]
        elif x.shape == form[0] and x.dtype == form[1] and x.__class__ is np.ndarray and x.flags.c_contiguous:
            window, dst = np.ndarray(form[2], form[3], x, 0, form[4]), form[5]   # its window, one call
        else:
            kept = x.base is not None           # (an array owning its memory is not held past the call)
            window, dst = window_of(x, True)
            if kept:
                seen[0], seen[1] = x, (window, dst)
            elif x.__class__ is np.ndarray and x.flags.c_contiguous and x.size and window.ctypes.data == x.ctypes.data:
                form[:] = x.shape, x.dtype, window.shape, window.dtype, window.strides, dst   # (x not held)
        copy(dst, window)
    fill_columns = im2col if phases is None else phases

    def run(x, out):
        fill_columns(x)
        if convert:
            copy(w, weight.reshape(w.shape))
        kept = result is not None or out is prepared_out
        if single:
            dot(w2, cols2, target2 if kept else out.reshape(out_channels, pixels))
        elif blocks is not None:
            for a, b, c in gemms if kept else block_calls(w, columns, out.reshape(target_shape)):
                matmul(a, b, out=c)
        else:
            matmul(w, columns, out=target if kept else out.reshape(target_shape))
        if result is not None:
            copy(out, result, casting="unsafe")  # the conv rounds, then the bias: as the generic kernel
        if bias_b is not None:
            add(out, bias_b, out)           # (out positional: ~0.15 us less)
        if act is not None:
            act(out)
    return run


#: a constant bias is added as a ``(1, channels, *lengths)`` plane up to this many values per image,
#: and as a tile of the whole ``(batch, channels, *lengths)`` result up to this many in all
BIAS_PLANE_MAX_SIZE = 1 << 14


def _bias_operand(bias, out_shape: tuple, fixed: bool):
    """What the strided and pointwise runners add to their result of ``out_shape``: ``bias`` as a
    ``(1, channels, 1, ..)`` column of ``out``'s rank, or, for a constant bias of at most
    :data:`BIAS_PLANE_MAX_SIZE` values per image, that column repeated over the whole result (up to
    that many values in all) or over each image's plane (read-only, built once). A same-shape add,
    where a column's inner stride of 0 makes numpy's slower scalar-operand loop run per channel
    (0.95 -> 0.32 us at 32 x 30; 8 x 32 x 48 2.9 -> 1.3, 32 x 8 x 12 1.6 -> 0.6), and an operand of
    ``out``'s rank, where numpy's loop over a missing leading dim costs ~0.5 us more (0.93 -> 0.38 us
    at (1, 32, 30), 1.3 -> 0.47 at (3, 32, 30)). The same sums. Past the bar the plane is one more map
    through the cache (a 16 x 31 x 48 stem: no gain in the model)."""
    if bias is None:
        return None
    lengths = out_shape[2:]
    column = bias.reshape((1,) + bias.shape + (1,) * len(lengths))
    if fixed and bias.size * math.prod(lengths) <= BIAS_PLANE_MAX_SIZE:
        whole = out_shape if math.prod(out_shape) <= BIAS_PLANE_MAX_SIZE else (1,) + tuple(out_shape[1:])
        plane = np.ascontiguousarray(np.broadcast_to(column, whole))
        plane.flags.writeable = False
        return plane
    return column


def _activation(activation, dtype: np.dtype):
    """The in-place activation of ``out`` (a non-empty array of ``dtype``), or None: a float ReLU is
    the clip the relu kernel makes (without its four Python calls around it), a float32/float64
    clip the specialized clip kernel's one call; a float32/float64 SiLU, sigmoid, HardSwish(6) or
    HardSigmoid the kernel's own arithmetic (``silu_in_place``, ``sigmoid_in_place``,
    ``hard_swish_into``'s and ``hard_sigmoid_into``'s calls with their constants bound; a SiLU or
    sigmoid of negated operands :mod:`.negated_activation`'s) without the kernel's layers around
    it (0.3-0.9 us a call: a sixth of an SE block's 1-pixel conv); any other the fused kernels'
    :func:`~.fused.activation_fn`."""
    from .activation import hard_sigmoid_in_place_fn, hard_swish6_in_place_fn, hard_swish_in_place_fn, silu_in_place
    from .elementwise import sigmoid_in_place
    from .fused import activation_fn
    if isinstance(activation, tuple) and activation[0] is NEGATED:    # (float32/float64: see _prepare)
        return of_negated(activation[1], dtype)
    if activation == "relu" and dtype.kind == "f":
        zero, inf = scalar_array(0, dtype), scalar_array(np.inf, dtype)     # (0-d: see ._constants)
        return lambda out: CLIP(out, zero, inf, out)      # (out positional: ~0.07 us less)
    if dtype not in (np.float32, np.float64):
        return activation_fn(activation)
    if isinstance(activation, (tuple, list)) and len(activation) == 3 and activation[0] == "clip" \
            and tuple(activation[1:]) != (None, None):     # (ReLU6)
        low = scalar_array(-np.inf if activation[1] is None else activation[1], dtype)
        high = scalar_array(np.inf if activation[2] is None else activation[2], dtype)
        return lambda out: CLIP(out, low, high, out)
    if activation in ("silu", "sigmoid"):
        return silu_in_place if activation == "silu" else sigmoid_in_place
    if activation == "hard_swish":
        return hard_swish_in_place_fn(dtype)
    if activation == "hard_swish6":
        return hard_swish6_in_place_fn(dtype)
    if isinstance(activation, (tuple, list)) and len(activation) == 3 and activation[0] == "hard_sigmoid":
        return hard_sigmoid_in_place_fn(dtype, activation[1], activation[2])
    return activation_fn(activation)


def _is_pointwise(plan) -> bool:
    """A 1x1 conv that reads the input as it is (no stride, no padding): the GEMM alone."""
    return plan.method == "compact" and len(plan.taps) == 1 and plan.source_is_input and plan.q == plan.pixels


def _pointwise(data, weight, bias, act, lengths: tuple, fixed_bias: bool = False):
    """The runner of a pointwise conv: the engine's ``compact`` method's calls (one batched GEMM
    ``(1, O, C) @ (N, 1, C, pixels)`` straight into ``out``, the bias, the activation) without its plan,
    scratch and view making. The bias is a ``(1, O, 1, ..)`` view of ``out``'s rank (numpy loops over
    a missing leading dim: 0.79 -> 0.27 us at (1, 16, 1)). A result of one value (a one-channel head
    on one pixel) takes the bias into a two-value buffer and its activation there (:func:`_one_value`)."""
    batch, channels = data.shape[:2]
    out_channels = weight.shape[0]
    w = weight.reshape(1, out_channels, channels)
    bias_b = _bias_operand(bias, (batch, out_channels, *lengths), fixed_bias)
    matmul, dot, add, ascontiguous = np.matmul, np.dot, np.add, np.ascontiguousarray
    pixels = math.prod(data.shape[2:])
    # a GEMM OpenBLAS runs faster in column blocks takes them (.gemm_blocks), as the generic kernel's
    blocks = column_blocks(out_channels, channels, pixels)
    # one image: a 2-d np.dot (matmul's sgemm call, bit for bit, without its batch iteration)
    single = blocks is None and batch == 1 and min(out_channels, channels, pixels) >= 2
    w2 = w.reshape(out_channels, channels)
    one = _one_value(bias_b, act, (batch, out_channels) + (1,) * len(lengths), weight.dtype) \
        if batch * out_channels * pixels == 1 else None

    def run(x, out):
        if single:
            dot(w2, ascontiguous(x).reshape(channels, pixels), out.reshape(out_channels, pixels))
        elif blocks is not None:
            for a, b, c in block_calls(w, ascontiguous(x).reshape(batch, 1, channels, -1),
                                       out.reshape(batch, 1, out_channels, -1)):
                matmul(a, b, out=c)
        else:
            matmul(w, ascontiguous(x).reshape(batch, 1, channels, -1), out=out.reshape(batch, 1, out_channels, -1))
        if one is not None:
            one(out)
            return
        if bias_b is not None:
            add(out, bias_b, out)           # (out positional: ~0.15 us less)
        if act is not None:
            act(out)
    run.pointwise = True        # reads ``x`` as it is (an integer caller converts it first)
    return run


def _one_value(bias_b, act, shape: tuple, dtype):
    """``finish(out)`` for a result of one value of ``shape``: ``out + bias`` into the first value
    of a two-value buffer (the second reset to 0), the activation on both, the first copied back.
    numpy 2.4 runs an in-place ufunc call on a one-value array at ~0.8 us against ~0.28 between
    two arrays or in place on two values (a sigmoid head's bias and three calls: 3.4 -> 1.4 us);
    the same calls on the same value, bit for bit. None without bias and activation."""
    if bias_b is None and act is None:
        return None
    pair = np.zeros(2, dtype)
    head = pair[:1].reshape(shape)
    add, copy = np.add, np.copyto

    def finish(out):
        pair[1] = 0         # (the activation of 0 each call: no value drifting to inf or NaN)
        if bias_b is not None:
            add(out, bias_b, head)
        else:
            copy(head, out)
        if act is not None:
            act(pair)
        copy(out, head)
    return finish


def _scratch(layouts, workspace) -> list | None:
    """The scratch arrays of ``layouts``: in the planned ``workspace`` when it is large enough, else
    in memory of the instruction's own (kept while its shapes last) up to :data:`PRIVATE_MAX_BYTES`;
    None beyond."""
    nbytes = scratch_nbytes(layouts)
    if workspace is None or workspace.nbytes < nbytes:
        if nbytes > PRIVATE_MAX_BYTES:
            return None
        workspace = np.empty(nbytes, np.uint8)
    return _carve(layouts, workspace)


def _carve(layouts, workspace: np.ndarray) -> list:
    """The scratch arrays of ``layouts`` in ``workspace``, as Scratch carves them."""
    arrays, start = [], 0
    for shape, dt in layouts:
        arrays.append(np.ndarray(shape, dt, workspace, start))
        start += -(-math.prod(shape) * np.dtype(dt).itemsize // 64) * 64
    return arrays


def _prepare_nhwc(data, weight, bias, out, workspace, attrs, fixed_weight: bool, fixed_bias: bool):
    """The channels-last runner (:mod:`.conv_small_nhwc`) for these operands, or None."""
    checked = _checked(data, weight, bias, out, attrs, "NHWC", (np.float32, np.float64))
    if checked is None:
        return None
    plan, act = checked
    dtype = out.dtype
    layouts = conv_small_nhwc.layouts(plan, data.shape[0], data.shape[-1], attrs["groups"], dtype)
    if layouts is None:
        return None
    nbytes = scratch_nbytes(layouts)
    if nbytes and (workspace is None or workspace.nbytes < nbytes):
        if nbytes > PRIVATE_MAX_BYTES:
            return None
        workspace = np.empty(nbytes, np.uint8)      # the instruction's own, kept while its shapes last
    arrays = _carve(layouts, workspace) if nbytes else []
    direct = conv_small_nhwc.prepare(plan, data, weight, bias, arrays, act, fixed_weight, fixed_bias)
    padding = pads(attrs["padding"], data.ndim - 2)
    if fixed_weight and plan.method == "depthwise" and conv_depthwise_banded.applies(
            data.shape, weight.shape, dtype, attrs["strides"], padding[0] + padding[1], attrs["dilation"],
            attrs["groups"]):
        # a large kernel on a short plane: banded products per channel, the direct runner for
        # results that are not finite (.conv_depthwise_banded)
        finish = conv_small_nhwc._finisher(bias, act, fixed_bias, plan.lengths[-1])
        return conv_depthwise_banded.prepare(data.shape, weight, padding[0] + padding[1], finish, direct)
    return direct


def geometry_spatial(plan) -> tuple:
    return plan.strided.spatial


def _prepare_channels_last_out(plan, data, weight, bias, out, workspace, attrs, act, fixed_bias: bool):
    """The runner of an ungrouped float32/float64 conv of channels-first data writing its result
    channels last (``out_layout="NHWC"``) by the strided method without wide rows: the strided
    runner's padded copy (the instruction's own, zeroed once) and columns, then the GEMM
    ``cols^T @ W^T`` straight into ``out`` (:func:`.conv_strided.run_strided_channels_last`'s calls,
    bit for bit), the bias and activation as a channels-last conv's (a bound bias as a tile of the
    whole output); None for any other (the generic kernel runs it)."""
    if not conv_strided.transposes_in_gemm(plan) or attrs["groups"] != 1 or out.dtype not in (np.float32, np.float64):
        return None
    geometry = plan.strided
    batch, channels = data.shape[:2]
    layouts = conv_strided.strided_layouts(plan, batch, channels, weight.shape[0], out.dtype)
    arrays = _scratch(layouts, workspace)
    if arrays is None:
        return None
    cols = arrays[-1]
    phases = conv_column_phases.column_filler(plan, data.shape, cols)     # (the im2col by column phases)
    padded, own, interior, interior_rows = _padded_input(arrays if phases is None else [], geometry,
                                                         data.shape[-1], out.dtype, True)
    out_channels, k = weight.shape[0], channels * len(plan.taps)
    pixels = math.prod(plan.lengths)
    w_t = weight.reshape(1, out_channels, k).transpose(0, 2, 1)
    cols_t = cols.reshape(batch, 1, k, pixels).transpose(0, 1, 3, 2)
    # one image: np.dot of the two transposed matrices, matmul's sgemm call (bit for bit)
    single = batch == 1 and min(out_channels, k, pixels) >= 2
    cols2_t, w2_t = cols_t[0, 0], w_t[0]
    finish = conv_small_nhwc._finisher(bias, act, fixed_bias, plan.lengths[-1])
    dst = cols.reshape(cols.shape[:2] + geometry.kernel + plan.lengths)
    fixed = as_runs(_window(plan, padded), dst) if padded is not None else None
    copy, dot, matmul = np.copyto, np.dot, np.matmul
    copy_in = _interior_copier(interior, interior_rows, out.dtype)
    seen = [None, None, None, None]     # the last x and out that are views (arena), x's window, out's target

    def im2col(x):
        if padded is not None:
            if not own:
                padded.fill(0)
            copy_in(x)
        if fixed is not None:
            window, to = fixed
        elif x is seen[0]:
            window, to = seen[1]
        else:
            window, to = _window(plan, x), dst
            if x.base is not None:              # (an array owning its memory is not held past the call)
                window, to = as_runs(window, dst)
                seen[0], seen[1] = x, (window, to)
        copy(to, window)
    fill_columns = im2col if phases is None else phases

    def run(x, out):
        fill_columns(x)
        if out is seen[2]:
            target = seen[3]
        else:
            target = out.reshape(pixels, out_channels) if single else \
                out.reshape(batch, pixels, 1, out_channels).transpose(0, 2, 1, 3)
            if out.base is not None:
                seen[2], seen[3] = out, target
        if single:
            dot(cols2_t, w2_t, target)
        else:
            matmul(cols_t, w_t, out=target)
        finish(out)
    return run


def _padded_input(arrays: list, geometry, width: int, dtype, by_rows: bool) -> tuple:
    """The strided runners' zero-padded input: ``(padded, own, interior, interior_rows)``, all None
    (``own`` False) when the conv pads nothing. ``padded`` is the instruction's own array, its
    padding zeroed once (``own``), when it is at most ``OWN_PADDED_MAX_BYTES`` (as the wide
    runner's), else the workspace's (zeroed per call); ``interior`` the view the input is copied
    into, and ``interior_rows`` that view as rows of ``width`` values as void items, for the copy
    by rows where ``by_rows`` (no conversion made: the same bytes), else None."""
    padded = arrays[0] if len(arrays) > 1 and any(geometry.begins + geometry.ends) else None
    if padded is None:
        return None, False, None, None
    own = padded.nbytes <= conv_small_nhwc.OWN_PADDED_MAX_BYTES
    if own:
        padded = np.zeros(padded.shape, padded.dtype)
    interior = padded[(slice(None), slice(None)) + tuple(
        slice(b, b + n) for b, n in zip(geometry.begins, geometry.spatial))]
    rows = interior.view(np.dtype((np.void, width * np.dtype(dtype).itemsize))) if by_rows else None
    return padded, own, interior, rows


#: a new input array (a model input, not a view) is copied into the padded copy by rows as void
#: items only from this many rows: making its void view costs ~0.25 us a call (16 x 30 values 0.43 us
#: by the plain copy, 0.71 by rows; 80 x 30 0.86 / 0.84; 512 x 30 3.4 / 2.0)
ROWS_VIEW_MIN = 80


def _interior_copier(interior, interior_rows, dtype):
    """``copy_in(x)``: the input into the padded copy's ``interior``, by rows of void items
    (``interior_rows``, None where not made) for an ``x`` of ``dtype`` whose rows are contiguous; the
    void view of an ``x`` that is a view (an arena's: the same object run after run) is kept (0.38-0.46
    us against 0.66-0.76 made per call at 4-16 rows of 4-65 values), a new array's is made from
    :data:`ROWS_VIEW_MIN` rows on. The same bytes either way."""
    copy = np.copyto
    if interior_rows is None:
        return lambda x: copy(interior, x)
    row, item, rows = interior_rows.dtype, np.dtype(dtype).itemsize, interior_rows.size
    viewed = [None, None]       # the last x that is a view, its rows

    def copy_in(x):
        if x is viewed[0]:
            copy(interior_rows, viewed[1])
        elif x.dtype == dtype and x.strides[-1] == item and (x.base is not None or rows >= ROWS_VIEW_MIN):
            rows_of_x = x.view(row)
            if x.base is not None:      # (an array owning its memory is not held past the call)
                viewed[0], viewed[1] = x, rows_of_x
            copy(interior_rows, rows_of_x)
        else:
            copy(interior, x)           # (another dtype: converted as it is copied)
    return copy_in


def as_runs(window: np.ndarray, dst: np.ndarray) -> tuple:
    """``(window, dst)`` of the im2col copy, each output row's run (its last axis, when contiguous in
    the window: stride 1, longer than one value, and of the destination's dtype: an integer conv's
    copy converts) viewed as one void item: numpy's strided copy
    then loops over runs instead of values in its innermost loop (the same bytes). Measured on the
    copy alone: 2x16 planes of 2-wide rows 21 -> 2.0 us, 16x16x8 10.0 -> 4.6, 3x32x80 7.1 -> 4.3,
    16x16x40 at batch 3 38.8 -> 19.7, Conv1d rows of 30-300 values 0.56 -> 0.45 and 1.81 -> 1.65.
    Made for windows kept across calls only (the two views cost ~1 us)."""
    run = window.shape[-1]
    if (run < 2 or window.dtype != dst.dtype or window.strides[-1] != window.itemsize
            or not dst.flags.c_contiguous):
        return window, dst                      # (another dtype: the copy converts, value by value)
    item = np.dtype((np.void, run * window.itemsize))
    return window.view(item), dst.view(item)


def _window(plan, source: np.ndarray) -> np.ndarray:
    """The strided method's im2col view ``(N, C, *kernel, *lengths)`` of the (padded) input; of a
    C-contiguous one made by the ndarray constructor over its buffer, which checks the view's
    extent too (0.3 us where ``as_strided`` takes 2.4: an unpadded conv of a model input, a new
    array each call, makes it every call)."""
    geometry = plan.strided
    lead, spatial_strides = source.strides[:2], source.strides[2:]
    shape = source.shape[:2] + geometry.kernel + plan.lengths
    strides = lead + tuple(s * d for s, d in zip(spatial_strides, geometry.dilation)) \
        + tuple(s * t for s, t in zip(spatial_strides, geometry.strides))
    if source.flags.c_contiguous and source.size:
        return np.ndarray(shape, source.dtype, source, 0, strides)
    return _as_strided(source, shape, strides, writeable=False)
