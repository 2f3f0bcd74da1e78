"""Convolution and pooling over 1 to 3 (or more) spatial dims.

``data_layout="NCHW"`` (the default) is channels first; ``"NHWC"`` is
channels last, ``(N, *spatial, C)``, with conv weights ``(*kernel, C/groups,
O)`` (:mod:`.conv_nhwc`); pooling runs on the channels-first view of it.
A channels-first conv's ``out_layout="NHWC"`` writes its result channels
last (the engine's copy out transposes it, :mod:`.conv_direct`).

Window attributes take one int for every spatial dim or one value per dim;
``padding`` is an int, one value per dim, or ONNX's ``2n`` values (all
begins, then all ends). No kernel loops over output pixels in Python:

* ``nn.conv`` runs on :mod:`.conv_direct`: a padded, phase-split layout in
  which every kernel tap is a contiguous slice, then im2col and one batched
  matmul for all groups, or for depthwise convs a sum of per-tap products;
* ``nn.conv_transpose`` is one batched matmul into columns, then col2im:
  one strided scatter-add per kernel tap;
* pooling takes one strided view per kernel tap (``prod(pool_size)`` numpy
  ops over the whole output).

float16 and bfloat16 compute in float32 and round once.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from ...errors import ShapeError
from ..fpstate import quiet
from ._math import commit, is_low_float, pads, per_spatial, scalar_array, scratch, work_dtype
from ..dtypes import numpy_dtype
from ._workspace import scratch_nbytes
from . import avg_pool_flat, conv_integer, conv_nhwc, conv_pruned, conv_transpose_tiled, conv_winograd, max_pool_flat
from .conv_direct import COPIES_OUT, conv_plan, run_conv, scratch_layouts, writes_channels_last
from .conv_transpose_nhwc import run_conv_transpose_nhwc
from .reduce import spatial_mean_into, specialize_mean
from ._registry import register_kernel


def _check_out(name: str, out: np.ndarray, expected: tuple[int, ...]) -> None:
    if tuple(out.shape) != tuple(expected):
        raise ShapeError(f"{name}: output buffer has shape {tuple(out.shape)}, the attributes give "
                         f"{tuple(expected)}")


def _pad(x: np.ndarray, begins, ends, value=0) -> np.ndarray:
    """``x`` with its spatial dims padded by ``value``; ``x`` itself when no padding."""
    if not any(begins) and not any(ends):
        return x
    width = [(0, 0), (0, 0), *zip(begins, ends)]
    return np.pad(x, width, mode="constant", constant_values=value)


def _tap_slices(tap, strides, dilation, lengths) -> tuple[slice, ...]:
    """The strided slices of a padded input that kernel ``tap`` reads for an
    output of spatial ``lengths``."""
    return (slice(None), slice(None)) + tuple(
        slice(t * d, t * d + (n - 1) * s + 1, s) for t, s, d, n in zip(tap, strides, dilation, lengths))


# ---------------------------------------------------------------- conv


@register_kernel("nn.conv")
def conv(data, weight, *, out, strides, padding, dilation, groups, data_layout,
         out_layout, exact, workspace=None):
    """N-d convolution: data ``(N, C, *spatial)``, weight ``(O, C/groups, *kernel)``
    (NHWC: ``(N, *spatial, C)`` and ``(*kernel, C/groups, O)``); ``out_layout``
    (None: ``data_layout``) ``"NHWC"`` with NCHW data: ``out`` is ``(N,
    *spatial, O)``. Scratch from ``workspace`` when given (:func:`conv_workspace` bytes);
    ``exact``: sums of products only (a Winograd plan runs its direct fallback)."""
    conv_bias(data, weight, None, out=out, strides=strides, padding=padding, dilation=dilation,
              groups=groups, data_layout=data_layout, out_layout=out_layout, workspace=workspace, exact=exact)


def _specialize_conv(attrs: dict, constant: tuple):
    """Per instruction: the small-conv fast path (:mod:`.conv_small`) of ``nn.conv_bias_act`` without a
    bias, a constant integer weight declared one (``fused.declarer``)."""
    from .conv_small import specialize
    from .fused import conv_bias_act, declarer
    call = specialize(conv_bias_act, constant, activation=None, declare=declarer(constant), **attrs)
    return lambda data, weight, *, out, workspace=None: call(data, weight, None, out=out, workspace=workspace)


conv.specialize_attrs = _specialize_conv


def _writes_channels_last(data_layout: str, out_layout) -> bool:
    """Whether the result is channels last (``out_layout`` None: as the data);
    a channels-last conv writes channels last only."""
    if out_layout in (None, data_layout):
        return data_layout == "NHWC"
    if (data_layout, out_layout) != ("NCHW", "NHWC"):
        raise ShapeError(f"nn.conv: out_layout {out_layout!r} with data_layout {data_layout!r} is not "
                         f"supported (only NCHW data to an NHWC result)")
    return True


def _channels_first_shapes(data_shape, weight_shape, data_layout: str):
    """The data and weight shapes as NCHW / OIHW."""
    if data_layout == "NCHW":
        return tuple(data_shape), tuple(weight_shape)
    if data_layout != "NHWC":
        raise ShapeError(f"nn.conv: data_layout must be 'NCHW' or 'NHWC', got {data_layout!r}")
    return ((data_shape[0], data_shape[-1], *data_shape[1:-1]),
            (weight_shape[-1], weight_shape[-2], *weight_shape[:-2]))


def conv_bias(data, weight, bias, *, out, strides, padding, dilation, groups, data_layout, out_layout,
              workspace=None, epilogue=None, exact=False) -> None:
    """``nn.conv`` plus a per-output-channel ``bias`` when it is not None, with
    the results of the two ops (the bias is added in ``out``'s precision);
    then ``epilogue(view)`` (an elementwise activation, in place) on all of
    ``out``, a part at a time where the engine finishes it in blocks. ``exact``:
    a Winograd plan (whose weight transform has fractions) runs its direct fallback. A dilated,
    padded conv leaves out the taps that read padding alone (:mod:`.conv_pruned`)."""
    pruned = conv_pruned.pruned_operands(data, weight, strides, padding, dilation, data_layout == "NHWC")
    if pruned is not None:
        conv_bias(pruned[0], pruned[1], bias, out=out, strides=strides, padding=pruned[2], dilation=dilation,
                  groups=groups, data_layout=data_layout, out_layout=out_layout, workspace=workspace,
                  epilogue=epilogue, exact=exact)
        return
    try:
        plan, lengths, expected = _prepared_conv(data.shape, weight.shape, strides, padding, dilation, groups,
                                                 data_layout, out_layout)
    except TypeError:       # an attribute given as a list (unhashable): not cached
        plan, lengths, expected = _prepared_conv.__wrapped__(data.shape, weight.shape, strides, padding, dilation,
                                                             groups, data_layout, out_layout)
    _check_out("nn.conv", out, expected)
    channels_last = _writes_channels_last(data_layout, out_layout)
    out_channels = expected[-1] if channels_last else expected[1]
    if out.size == 0:
        return
    dtype = work_dtype(out.dtype)
    if out.dtype.kind == "i" and (bias is None or bias.shape == (out_channels,)) and conv_integer.run_exact(
            plan, data, weight, bias, out, groups, data_layout, channels_last, workspace, epilogue):
        return
    if bias is not None and (out.dtype != dtype or bias.shape != (out_channels,)):
        conv_bias(data, weight, None, out=out, strides=strides, padding=padding, dilation=dilation,
                  groups=groups, data_layout=data_layout, out_layout=out_layout, workspace=workspace, exact=exact)
        trailing = 0 if channels_last else len(lengths)
        np.add(out, bias.reshape(bias.shape + (1,) * trailing), out=out)
        if epilogue is not None:
            epilogue(out)
        return
    data, weight = data.astype(dtype, copy=False), weight.astype(dtype, copy=False)
    bias = None if bias is None else bias.astype(dtype, copy=False)
    if data_layout == "NCHW":
        run_conv(plan, data, weight, groups, out, bias, workspace, epilogue, channels_last)
        return
    if exact and plan.method == "winograd":
        plan = plan.fallback
    conv_nhwc.run_conv_nhwc(plan, data, weight, groups, out, bias, workspace)
    if epilogue is not None:
        epilogue(out)


@functools.lru_cache(maxsize=1024)
def _prepared_conv(data_shape, weight_shape, strides, padding, dilation, groups, data_layout, out_layout=None):
    """The plan, output lengths and output shape of a conv call, its operands
    checked (cached per shapes and attributes: a small conv's arithmetic
    costs less than working them out)."""
    channels_last = _writes_channels_last(data_layout, out_layout)
    data_cf, weight_cf = _channels_first_shapes(data_shape, weight_shape, data_layout)
    batch, channels = data_cf[:2]
    out_channels, per_group = weight_cf[:2]
    if channels != groups * per_group or out_channels % groups:
        raise ShapeError(f"nn.conv: data {data_shape} and weight {weight_shape} do not fit groups={groups}")
    plan, lengths = _conv_geometry(data_cf, weight_cf, strides, padding, dilation, groups, data_layout)
    expected = (batch, *lengths, out_channels) if channels_last else (batch, out_channels, *lengths)
    return plan, lengths, expected


def _conv_geometry(data_shape, weight_shape, strides, padding, dilation, groups, data_layout="NCHW"):
    """The conv plan (:func:`.conv_direct.conv_plan`, or :func:`.conv_nhwc.nhwc_plan`
    for NHWC) and the output's spatial lengths, from the NCHW / OIHW shapes;
    only ``data_shape[0]`` (the batch) is not read."""
    n = len(data_shape) - 2
    strides, dilation = per_spatial(strides, n, "strides"), per_spatial(dilation, n, "dilation")
    begins, ends = pads(padding, n)
    channels, *spatial = data_shape[1:]
    out_channels, per_group, *kernel = weight_shape
    lengths = [(x + b + e - d * (k - 1) - 1) // s + 1
               for x, k, s, d, b, e in zip(spatial, kernel, strides, dilation, begins, ends)]
    depthwise = per_group == 1 and groups == channels == out_channels
    if data_layout == "NHWC":
        winograd = conv_winograd.prefers_winograd(kernel, strides, dilation, groups, channels, lengths)
        by_panels = not winograd and conv_winograd.small_map_by_panels(kernel, strides, dilation, groups, channels,
                                                                       out_channels, lengths)
        return conv_nhwc.nhwc_plan(tuple(spatial), tuple(kernel), strides, dilation, begins, tuple(lengths),
                                   depthwise, conv_nhwc.prefers_taps(groups, math.prod(lengths)),
                                   winograd or by_panels, channels, by_panels, groups > 1 and not depthwise), lengths
    plan = conv_plan(tuple(spatial), tuple(kernel), strides, dilation, begins, ends, tuple(lengths),
                     depthwise, per_group, channels)
    return plan, lengths


def conv_workspace(data_shape, weight_shape, dtype, *, strides, padding, dilation, groups, data_layout,
                   out_layout, exact=False):
    """The workspace bytes ``nn.conv`` takes for these operands and output
    ``dtype`` (a name), or None when it needs none or a dim other than the
    batch is not an int. The batch may be symbolic (any value with ``+ * //``,
    e.g. the compiler's dims): the size is then an expression in it.

    >>> conv_workspace((1, 8, 16, 16), (8, 8, 3, 3), "float32", strides=1, padding=1, dilation=1, groups=1,
    ...                data_layout="NCHW", out_layout=None)
    103104
    """
    rest = (*data_shape[1:], *weight_shape)
    if not all(isinstance(d, int) for d in rest) or len(data_shape) != len(weight_shape) or len(data_shape) < 3:
        return None
    data_shape, weight_shape = _channels_first_shapes(data_shape, weight_shape, data_layout)
    plan, lengths = _conv_geometry(data_shape, weight_shape, strides, padding, dilation, groups, data_layout)
    if min(lengths) <= 0 or 0 in rest:
        return None
    work = work_dtype(numpy_dtype(dtype))
    if exact and data_layout == "NHWC" and plan.method == "winograd":
        plan = plan.fallback
    if data_layout == "NHWC":
        layouts = conv_nhwc.scratch_layouts(plan, data_shape[0], data_shape[1], weight_shape[0], work,
                                            direct=work == numpy_dtype(dtype))
        if plan.by_panels:
            # the machine decides at run time: room for either method (both layouts: with a symbolic
            # batch neither method's scratch bounds the other's at every batch)
            layouts = layouts + (conv_nhwc.scratch_layouts(plan.fallback, data_shape[0], data_shape[1],
                                                           weight_shape[0], work,
                                                           direct=work == numpy_dtype(dtype)) or [])
    else:
        layouts = scratch_layouts(plan, data_shape[0], data_shape[1], weight_shape[0], work,
                                  _writes_channels_last(data_layout, out_layout))
    return scratch_nbytes(layouts) if layouts else None


def copies_out(data_shape, weight_shape, *, strides, padding, dilation, groups) -> bool:
    """Whether the channels-first engine runs this conv (NCHW / OIHW shapes,
    all but the batch ints) by a method that ends in a copy out of its GEMM
    result (:data:`.conv_direct.COPIES_OUT`), or an ungrouped one by the strided
    method, whose GEMM then writes channels last (:func:`.conv_direct.writes_channels_last`),
    so it writes an ``out_layout="NHWC"`` result at about the channels-first cost
    or less; False when the shapes are not known.

    >>> copies_out((1, 32, 160, 160), (32, 32, 3, 3), strides=1, padding=1, dilation=1, groups=1)
    True
    """
    if not all(isinstance(d, int) for d in (*data_shape[1:], *weight_shape)) or len(data_shape) != len(weight_shape):
        return False
    plan, lengths = _conv_geometry(tuple(data_shape), tuple(weight_shape), strides, padding, dilation, groups)
    return min(lengths) > 0 and (plan.method in COPIES_OUT or (groups == 1 and writes_channels_last(plan)))


@register_kernel("nn.conv_transpose")
def conv_transpose(data, weight, *, out, strides, padding, output_padding, dilation, groups,
                   data_layout):
    """N-d transposed convolution: data ``(N, C, *spatial)``, weight
    ``(C, O/groups, *kernel)``; ``padding`` crops the full output and
    ``output_padding`` extends its end. ``data_layout="NHWC"``: data
    ``(N, *spatial, C)``, weight ``(C, *kernel, O/groups)``
    (:mod:`.conv_transpose_nhwc`)."""
    n = data.ndim - 2
    strides, dilation = per_spatial(strides, n, "strides"), per_spatial(dilation, n, "dilation")
    extra = per_spatial(output_padding, n, "output_padding")
    begins, ends = pads(padding, n)
    nhwc = data_layout == "NHWC"
    if not nhwc and data_layout != "NCHW":
        raise ShapeError(f"nn.conv_transpose: data_layout must be 'NCHW' or 'NHWC', got {data_layout!r}")
    if nhwc:    # the channels-first view of the shapes: (N, C, *spatial), (C, O/groups, *kernel)
        batch, *spatial, channels = data.shape
        in_channels, *kernel, per_group = weight.shape
    else:
        batch, channels, *spatial = data.shape
        in_channels, per_group, *kernel = weight.shape
    if channels != in_channels or channels % groups:
        raise ShapeError(f"nn.conv_transpose: data {data.shape} and weight {weight.shape} do not fit "
                         f"groups={groups}")
    full = [s * (x - 1) + d * (k - 1) + 1 + p
            for x, k, s, d, p in zip(spatial, kernel, strides, dilation, extra)]
    lengths = [f - b - e for f, b, e in zip(full, begins, ends)]
    expected = (batch, *lengths, per_group * groups) if nhwc else (batch, per_group * groups, *lengths)
    _check_out("nn.conv_transpose", out, expected)
    if out.size == 0:
        return
    if nhwc:
        run_conv_transpose_nhwc(data, weight, out, groups, strides, dilation, extra, begins, ends)
        return
    dtype = work_dtype(out.dtype)
    taps = math.prod(kernel)
    in_per_group = channels // groups
    # columns: for each input pixel, its contribution to every (out channel, tap)
    w = weight.astype(dtype, copy=False).reshape(groups, in_per_group, per_group * taps)
    x = data.astype(dtype, copy=False).reshape(batch, groups, in_per_group, math.prod(spatial))
    cols = np.matmul(w.transpose(0, 2, 1), x)                      # (N, G, O/G * taps, pixels)
    cols = cols.reshape(batch, groups * per_group, *kernel, *spatial)
    taps = itertools.product(*(range(k) for k in kernel))
    if not any(begins) and not any(ends) and not is_low_float(out.dtype):
        if list(kernel) == list(strides) and all(d == 1 for d in dilation) and not any(extra):
            # windows that tile the output (DB-det's 2x2 stride 2): each tap's values are copied to
            # their own positions, no zero fill and adds (24 -> 8 us at 16 -> 4 channels, 16x24)
            for tap in taps:
                np.copyto(out[_tap_slices(tap, strides, dilation, spatial)], cols[(slice(None), slice(None), *tap)])
            return
        acc = out
        acc.fill(0)
    else:
        acc = np.zeros((batch, groups * per_group, *full), dtype)
    for tap in taps:
        acc[_tap_slices(tap, strides, dilation, spatial)] += cols[(slice(None), slice(None), *tap)]
    if acc is not out:
        crop = (slice(None), slice(None)) + tuple(slice(b, b + m) for b, m in zip(begins, lengths))
        np.copyto(out, acc[crop], casting="unsafe")


conv_transpose.specialize_attrs = lambda attrs, constant: conv_transpose_tiled.specialize(
    conv_transpose, attrs, constant)


# ---------------------------------------------------------------- pooling


def _pool_geometry(name, data, out, pool_size, strides, dilation, padding, ceil_mode):
    """Expanded attributes, the output lengths, and the end padding that
    also covers ceil mode's partial last window."""
    n = data.ndim - 2
    pool = per_spatial(pool_size, n, "pool_size")
    strides, dilation = per_spatial(strides, n, "strides"), per_spatial(dilation, n, "dilation")
    begins, ends = pads(padding, n)
    lengths = []
    for x, k, s, d, b, e in zip(data.shape[2:], pool, strides, dilation, begins, ends):
        span = x + b + e - d * (k - 1) - 1
        if not ceil_mode:           # truncated toward zero: a short input has one partial window
            lengths.append((-(-span // s) if span < 0 else span // s) + 1)
            continue
        m = -(-span // s) + 1
        if (m - 1) * s >= x + b:        # the last window would start in the end padding
            m -= 1
        lengths.append(m)
    _check_short_input(name, data, out, lengths, pool, dilation)
    _check_out(name, out, (*data.shape[:2], *lengths))
    reach = [max(e, (m - 1) * s + d * (k - 1) + 1 - x - b)
             for x, k, s, d, b, e, m in zip(data.shape[2:], pool, strides, dilation, begins, ends, lengths)]
    return pool, strides, dilation, begins, ends, reach, lengths


def _check_short_input(name, data, out, lengths, pool, dilation) -> None:
    """A symbolic output length (the ONNX formula's floor) of 0 where
    onnxruntime pools one partial window: refused in words, not as a shape mismatch."""
    for axis, (m, k, d) in enumerate(zip(lengths, pool, dilation), start=2):
        if m == 1 and out.ndim == data.ndim and out.shape[axis] == 0:
            raise ShapeError(f"{name}: input dim {axis} is {data.shape[axis]}, shorter than the window "
                             f"({d * (k - 1) + 1}): onnxruntime pools one partial window here, the ONNX "
                             f"formula none; relaxpack supports inputs at least as long as the window")


def _lowest(dtype: np.dtype):
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def _channels_first_views(name: str, data: np.ndarray, out: np.ndarray, data_layout: str):
    """``data`` and ``out`` as channels-first arrays: themselves, or for NHWC
    transposed views (the pooling code indexes spatial dims from 2 on; its
    temporaries follow the data's memory order, see :func:`_empty_like_order`)."""
    if data_layout == "NCHW":
        return data, out
    if data_layout != "NHWC" or data.ndim < 3:
        raise ShapeError(f"{name}: data_layout must be 'NCHW' or 'NHWC' (rank >= 3), got {data_layout!r}")
    axes = (0, data.ndim - 1, *range(1, data.ndim - 1))
    if out.ndim != data.ndim:
        raise ShapeError(f"{name}: output buffer has rank {out.ndim}, data has rank {data.ndim}")
    return data.transpose(axes), out.transpose(axes)


def _empty_like_order(like: np.ndarray, shape: tuple, dtype) -> np.ndarray:
    """An empty array of ``shape`` whose axes lie in memory in the order of
    ``like``'s (a channels-first view of channels-last data stays channels last)."""
    order = sorted(range(like.ndim), key=lambda i: -like.strides[i])
    base = np.empty(tuple(shape[i] for i in order), dtype)
    return base.transpose(np.argsort(order))


@register_kernel("nn.max_pool")
def max_pool(data, *, out, pool_size, strides, padding, dilation, ceil_mode, data_layout):
    """N-d max pooling; padded cells never win."""
    for fn, args, kwargs in _max_pool_calls(data, out, pool_size, strides, padding, dilation, ceil_mode,
                                            data_layout):
        fn(*args, **kwargs)


def _max_pool_calls(data, out, pool_size, strides, padding, dilation, ceil_mode, data_layout) -> list:
    """The calls ``(fn, args, kwargs)`` of a max pool of ``data`` into ``out``."""
    given = data, out
    data, out = _channels_first_views("nn.max_pool", data, out, data_layout)
    pool, strides, dilation, begins, _, _, lengths = _pool_geometry(
        "nn.max_pool", data, out, pool_size, strides, dilation, padding, ceil_mode)
    if out.size == 0:
        return []
    whole = all(_whole_axis(data.shape[2 + i], k, s, d, b, m)
                for i, (k, s, d, b, m) in enumerate(zip(pool, strides, dilation, begins, lengths)))
    flat = None if whole else max_pool_flat.max_pool_calls(data, out, pool, strides, dilation, begins, lengths)
    if flat is None and not whole and data_layout == "NHWC":
        flat = max_pool_flat.max_pool_calls_channels_last(*given, pool, strides, dilation, begins, lengths)
    if flat is not None:        # short rows: passes over whole planes (max_pool_flat.py)
        return flat
    x = data
    calls = []
    if is_low_float(x.dtype):   # max is exact in float32 too; numpy's float16 maximum is ~7 ns a value
        x = np.empty(x.shape, np.float32)
        calls.append((np.copyto, (x, data), {}))
    buf = scratch(out) if x.dtype != out.dtype else out
    # a max over a box is a max over each dim in turn: sum(k - 1) passes, not
    # prod(k) - 1 (3x3: 4, not 8); the first dims go first, whose taps are
    # whole rows, so the strided inner reads happen on a smaller array.
    # (Plain allocations: the op declares no planned workspace.)
    cur = x
    if whole:       # every window holds the whole map (SPPF's 5x5 pools on a 2x3 map): its max
        top = np.empty(x.shape[:2] + (1,) * len(pool), x.dtype)
        calls += [(np.maximum.reduce, (x,), {"axis": tuple(range(2, x.ndim)), "keepdims": True, "out": top}),
                  (np.copyto, (buf, top), {})]
        return calls if buf is out else calls + [(commit, (buf, out), {})]
    for i, (k, s, d, b, m) in enumerate(zip(pool, strides, dilation, begins, lengths)):
        target = buf if i + 1 == len(pool) else _empty_like_order(
            cur, cur.shape[:2 + i] + (m,) + cur.shape[3 + i:], x.dtype)
        calls += _max_along(cur, target, 2 + i, k, s, d, b)
        cur = target
    return calls if buf is out else calls + [(commit, (buf, out), {})]


def _whole_axis(n: int, k: int, s: int, d: int, b: int, m: int) -> bool:
    """Whether every one of the ``m`` windows along an axis of ``n > 0`` cells (``k`` taps,
    stride ``s``, dilation 1, ``b`` cells of padding first) holds all ``n`` cells: the last
    window starts at or before cell 0 and the first ends at or after cell ``n - 1``."""
    return n > 0 and d == 1 and (m - 1) * s - b <= 0 and k - 1 - b >= n - 1


def _specialized_pool(make_calls):
    """``specialize_attrs`` of a pool whose ``make_calls(data, out, **attrs)`` lists its numpy calls:
    per instruction, the calls of the last call's ``data`` and ``out`` are kept while the next call
    passes the same arrays (arena views are the same objects run after run), with intermediate
    buffers of the instruction's own (an average pool's zero padding written once); any other call
    plans afresh, and calls on large data are not kept (their buffers would stay allocated). Small
    arrays that are new on every call (model outputs: FPN's last-level pool reads one and writes
    one) are, from the second such call, copied into and out of arrays of the instruction's own,
    which the kept calls read and write (planning costs ~20 us, the copies one)."""
    def specialize(attrs: dict, constant: tuple):
        state = [None, None, None, False]      # data, out, calls, whether data and out are its own

        def call(data, *, out):
            kept_data, kept_out, calls, own = state
            if own and _fits(data, kept_data) and _fits(out, kept_out):
                np.copyto(kept_data, data)
            elif data is not kept_data or out is not kept_out:
                if kept_data is not None and _fits(data, kept_data) and _fits(out, kept_out) \
                        and max(data.nbytes, out.nbytes) <= _POOL_OWN_MAX_BYTES:
                    kept_data, kept_out = np.empty(data.shape, data.dtype), np.empty(out.shape, out.dtype)
                    calls = make_calls(kept_data, kept_out, **attrs)
                    state[:] = (kept_data, kept_out, calls, True)
                    np.copyto(kept_data, data)
                    own = True
                else:
                    calls = make_calls(data, out, **attrs)
                    state[:] = (data, out, calls, False) if data.nbytes <= _POOL_PRIVATE_MAX_BYTES \
                        else (None, None, None, False)
                    own = False
            for fn, args, kwargs in calls:
                fn(*args, **kwargs)
            if own:
                np.copyto(out, kept_out)
        return call
    return specialize


def _fits(array: np.ndarray, kept: np.ndarray) -> bool:
    """Whether ``array`` has ``kept``'s shape and dtype (a copy either way needs nothing else)."""
    return array.shape == kept.shape and array.dtype == kept.dtype


#: arrays new on every call are copied into a pool's own ones up to this many bytes
_POOL_OWN_MAX_BYTES = 256 << 10


#: a specialized pool keeps its intermediates (each at most about the data's size, twice for a
#: float16 max pool's float32 copies) for data of at most this many bytes
_POOL_PRIVATE_MAX_BYTES = 4 << 20


def _max_along(x: np.ndarray, target: np.ndarray, axis: int, k: int, s: int, d: int, b: int) -> list:
    """The calls ``(fn, args, kwargs)`` setting ``target`` = the max of ``k`` taps along ``axis`` of ``x``
    (stride ``s``, dilation ``d``, ``b`` cells of padding first), each tap taken only over
    the outputs whose cell lies inside ``x``: padding never wins a max, so no
    padded copy is made (ResNet's stem pool, 64x112x112: 1.2x faster channels
    first, 1.15x channels last, measured). Outputs no tap reaches get the
    lowest value."""
    m, n = target.shape[axis], x.shape[axis]
    lead = (slice(None),) * axis
    full, partial = [], []
    for t in range(k):
        lo = max(0, -(-(b - t * d) // s))
        hi = min(m, (n - 1 - t * d + b) // s + 1)
        if hi <= lo:
            continue
        start = lo * s + t * d - b
        view = x[lead + (slice(start, start + (hi - lo - 1) * s + 1, s),)]
        (full if (lo, hi) == (0, m) else partial).append((lo, hi, view))
    if len(full) >= 2:      # the first two taps at once: one pass over target fewer than copy + maximum
        calls = [(np.maximum, (full[0][2], full[1][2]), {"out": target})]
        rest = full[2:] + partial
    elif full:
        calls = [(np.copyto, (target, full[0][2]), {})]
        rest = partial
    else:
        calls = [(np.copyto, (target, _lowest(target.dtype)), {})]
        rest = partial
    for lo, hi, view in rest:
        part = target[lead + (slice(lo, hi),)]
        calls.append((np.maximum, (part, view), {"out": part}))
    return calls


max_pool.specialize_attrs = _specialized_pool(_max_pool_calls)


def _window_counts(x, k, s, d, b, e, m, count_include_pad) -> np.ndarray:
    """For each of the ``m`` windows along one dim, how many taps it counts:
    taps inside the data, plus those in the explicit padding when
    ``count_include_pad``; taps past the end padding (ceil mode) never count."""
    lo, hi = (-b, x + e) if count_include_pad else (0, x)
    pos = np.arange(m)[:, None] * s + np.arange(k)[None, :] * d - b
    return ((pos >= lo) & (pos < hi)).sum(axis=1)


@register_kernel("nn.avg_pool")
def avg_pool(data, *, out, pool_size, strides, padding, dilation, ceil_mode,
             count_include_pad, data_layout):
    """N-d average pooling; the divisor counts the window's cells inside the
    data, and with ``count_include_pad`` those in the padding too."""
    for fn, args, kwargs in _avg_pool_calls(data, out, pool_size, strides, padding, dilation, ceil_mode,
                                            count_include_pad, data_layout):
        fn(*args, **kwargs)


def _avg_pool_calls(data, out, pool_size, strides, padding, dilation, ceil_mode, count_include_pad,
                    data_layout) -> list:
    """The calls ``(fn, args, kwargs)`` of an average pool of ``data`` into ``out``: the data
    (converted and) zero-padded into a buffer when it needs either, the taps summed, the sums divided
    by the window counts (one scalar when all windows count alike)."""
    data, out = _channels_first_views("nn.avg_pool", data, out, data_layout)
    pool, strides, dilation, begins, ends, reach, lengths = _pool_geometry(
        "nn.avg_pool", data, out, pool_size, strides, dilation, padding, ceil_mode)
    if out.size == 0:
        return []
    flat = avg_pool_flat.avg_pool_calls(data, out, pool, strides, dilation, begins, ends, lengths)
    if flat is not None:        # windows side by side: sums of flat shifts (avg_pool_flat.py)
        return flat
    dtype = np.dtype(np.float64) if out.dtype.kind in "iu" else work_dtype(out.dtype)
    calls, x = [], data
    if any(begins) or any(reach) or data.dtype != dtype:
        # in the data's memory order: a channels-last pool's taps then add channels-last arrays, whose
        # inner runs numpy joins (a channels-first buffer against a channels-last sum: ~1.6 ns a value,
        # Inception's 17x17x288 pool 1.17 ms)
        x = _empty_like_order(data, (*data.shape[:2], *(n + b + r for n, b, r in zip(data.shape[2:], begins, reach))),
                              dtype)
        x.fill(0)
        inner = x[(slice(None), slice(None)) + tuple(slice(b, b + n) for b, n in zip(begins, data.shape[2:]))]
        calls.append((np.copyto, (inner, data), {"casting": "unsafe"}))
    acc = out if out.dtype == dtype else np.empty(out.shape, dtype)
    taps = itertools.product(*(range(k) for k in pool))
    calls.append((np.copyto, (acc, x[_tap_slices(next(taps), strides, dilation, lengths)]), {}))
    for tap in taps:
        calls.append((np.add, (acc, x[_tap_slices(tap, strides, dilation, lengths)]), {"out": acc}))
    counts = np.ones((), dtype)
    for i, (x_len, k, s, d, b, e, m) in enumerate(
            zip(data.shape[2:], pool, strides, dilation, begins, ends, lengths)):
        c = _window_counts(x_len, k, s, d, b, e, m, count_include_pad)
        counts = np.multiply.outer(counts, c.astype(dtype))
    if counts.size and (counts == counts.flat[0]).all():
        counts = scalar_array(counts.flat[0], dtype)    # (the same quotients, no broadcast array; 0-d: ._constants)
    calls.append((np.divide, (acc, counts), {"out": acc}))
    if acc is not out:
        calls.append((np.copyto, (out, acc), {"casting": "unsafe"}))
    return calls


avg_pool.specialize_attrs = _specialized_pool(_avg_pool_calls)


@register_kernel("nn.global_avg_pool")
def global_avg_pool(data, *, out, data_layout):
    """Mean over all spatial dims of ``(N, C, *spatial)``, kept as 1s."""
    if data_layout in ("NCHW", "NHWC") and spatial_mean_into(data, out, data_layout == "NHWC"):
        return      # a product with ones (numpy's reduction of a channels-last view: 39 -> 2.6 us at 31x48x16)
    data, out = _channels_first_views("nn.global_avg_pool", data, out, data_layout)
    axes = tuple(range(2, data.ndim))
    count = math.prod(data.shape[2:])
    total = np.add.reduce(data, axis=axes, dtype=work_dtype(out.dtype), keepdims=True)
    with quiet():
        np.divide(total, count, out=out, casting="unsafe")


def _pool_mean_axes(data, attrs):
    """A global average pool's reduced axes (those of ``data_layout``; a layout the kernel does not
    take: none, so that the generic kernel runs and says what is wrong)."""
    layout = attrs["data_layout"]
    if layout == "NHWC" and data.ndim >= 3:
        return tuple(range(1, data.ndim - 1))
    return tuple(range(2, data.ndim)) if layout == "NCHW" else ()


global_avg_pool.mean_axes = _pool_mean_axes
global_avg_pool.specialize_attrs = specialize_mean(global_avg_pool)


@register_kernel("nn.global_max_pool")
def global_max_pool(data, *, out, data_layout):
    """Max over all spatial dims of ``(N, C, *spatial)``, kept as 1s (-inf if empty)."""
    data, out = _channels_first_views("nn.global_max_pool", data, out, data_layout)
    axes = tuple(range(2, data.ndim))
    x = data.astype(np.float32) if is_low_float(data.dtype) and data.dtype != np.float16 else data
    result = np.maximum.reduce(x, axis=axes, keepdims=True, initial=-np.inf)
    np.copyto(out, result, casting="unsafe")
