"""Softmax and normalization kernels against onnx's reference evaluator and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import get_kernel

from .test_kernels_registry import assert_close, rand, run_kernel, run_onnx

FLOATS = ["float16", "float32", "float64"]

# ONNX float attributes are float32: the references compute with epsilon
# rounded to float32, so the kernels get that value too (as from the importer).
EPS = float(np.float32(1e-3))


@pytest.mark.parametrize("shape, axis", [((3, 5, 7), -1), ((3, 5, 7), 0), ((3, 5, 7), 1), ((6,), 0),
                                         ((0, 4), -1), ((4, 0), 1)])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name, op", [("nn.softmax", "Softmax"), ("nn.log_softmax", "LogSoftmax")])
def test_softmax(name, op, dtype, shape, axis):
    rng = np.random.default_rng(0)
    x = rand(rng, shape, dtype) * 3
    # onnxruntime: onnx's reference evaluator computes float16 step by step in float16
    expected, = run_onnx(op, [x], {"axis": axis}, backend="ort")
    assert_close(run_kernel(name, x, axis=axis), expected)


@pytest.mark.parametrize("name, op", [("nn.softmax", "Softmax"), ("nn.log_softmax", "LogSoftmax")])
def test_softmax_is_stable_for_large_inputs(name, op):
    x = np.array([[1000.0, 999.0, -1000.0], [-1e4, -1e4, -1e4], [88.0, 89.0, 90.0]], np.float32)
    with np.errstate(over="raise", invalid="raise"):
        got = run_kernel(name, x, axis=-1)
    assert np.isfinite(got).all()
    expected, = run_onnx(op, [x], {"axis": -1}, backend="ort")
    assert_close(got, expected)


@pytest.mark.parametrize("batch", [2, 4, 8])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_softmax_last_axis_rows_far_apart_and_masked(dtype, batch):
    """The last-axis path shifts each row by its own max up to _ROWWISE_SIZE values (batch 2),
    above by the tensor's max, redoing rows whose own max is far below it (the whole tensor up to
    _WHOLE_REDO_SIZE values, batch 4; those rows only above, batch 8): rows 300 apart, a
    BERT-style -10000 mask, a causal finfo.min mask, odd sizes."""
    from relaxpack.runtime.kernels.normalization import _ROWWISE_SIZE, _WHOLE_REDO_SIZE
    rng = np.random.default_rng(3)
    x = rng.standard_normal((batch, 3, 9, 13)) * 4
    assert (x.size <= _ROWWISE_SIZE) == (batch == 2) and (x.size <= _WHOLE_REDO_SIZE) == (batch <= 4)
    x[0, 1] -= 300.0                                        # whole heads far below the max
    x[1, :, 2] += 60.0                                      # one row far above the others
    x[..., 10:] += -10000.0                                 # padding mask
    x[1, 2] = np.where(np.tril(np.ones((9, 13), bool)), x[1, 2], np.finfo(np.float32).min)
    with np.errstate(over="ignore"):                       # float16: the causal mask becomes -inf
        x = x.astype(np.float32).astype(dtype) if dtype == "bfloat16" else x.astype(dtype)
    if dtype == "bfloat16":
        expected, = run_onnx("Softmax", [x.astype(np.float32)], {"axis": -1}, backend="ort")
        np.testing.assert_allclose(run_kernel("nn.softmax", x, axis=-1).astype(np.float32), expected,
                                   rtol=1e-2, atol=1e-3)
        return
    expected, = run_onnx("Softmax", [x], {"axis": -1}, backend="ort")
    got = run_kernel("nn.softmax", x, axis=-1)
    assert_close(got, expected)
    if dtype != "float16":
        # outputs above 1e-30 agree to the last bits with a per-row shift
        ref = np.exp(x - x.max(axis=-1, keepdims=True))
        ref /= ref.sum(axis=-1, keepdims=True)
        big = ref > 1e-30
        np.testing.assert_allclose(got[big], ref[big], rtol=4 * np.finfo(dtype).eps)


def test_softmax_last_axis_in_place_inf_and_all_masked_rows():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((5, 7)) * 3).astype(np.float32)
    x[1] -= 500.0                                           # redone from x: out must not have overwritten it
    expected, = run_onnx("Softmax", [x], {"axis": -1}, backend="ort")
    same = x.copy()
    get_kernel("nn.softmax").fn(same, out=same, axis=-1)
    assert_close(same, expected)
    x[2] = -np.inf                                          # an all -inf row is NaN, the others unchanged
    got = run_kernel("nn.softmax", x, axis=-1)
    assert np.isnan(got[2]).all() and np.allclose(np.delete(got, 2, 0), np.delete(expected, 2, 0), rtol=1e-6)
    x[2] = 0.0
    x[3, 4] = np.inf                                        # inf takes the general path: NaN row as before
    got = run_kernel("nn.softmax", x, axis=-1)
    assert np.isnan(got[3]).any() and np.allclose(got[0], expected[0], rtol=1e-6)



def _blocked(monkeypatch, blocked_bytes: int, block_bytes: int) -> None:
    """Softmax tensors of ``blocked_bytes`` or more run by blocks of ``block_bytes`` of rows."""
    from relaxpack.runtime.kernels import normalization
    monkeypatch.setattr(normalization, "_BLOCKED_BYTES", blocked_bytes)
    monkeypatch.setattr(normalization, "_BLOCK_BYTES", block_bytes)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_softmax_by_blocks_of_rows(monkeypatch, dtype):
    """A large tensor runs by blocks of rows, each as a tensor of its own (shifted by its own
    max), the last block shorter: rows far below the max,
    a -10000 mask, an all -inf row (NaN), a block holding inf (the general path for that block);
    against onnxruntime, in place, and by the kept (specialized) calls of an arena view."""
    from relaxpack.runtime.kernels.normalization import _block_rows
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((2, 23, 37)) * 4).astype(dtype)
    x[0, 3] -= 300.0
    x[1, :, 30:] = -10000.0
    item = max(4, np.dtype(dtype).itemsize)                        # float16 computes in float32
    _blocked(monkeypatch, x.nbytes, 5 * 37 * item)                  # blocks of 5 rows of 46
    assert _block_rows(x.reshape(-1, 37).astype(np.promote_types(dtype, np.float32))) == 5
    from relaxpack.runtime.kernels import normalization
    block, sizes = normalization._softmax_block, []

    def spy(rows, dst, shared):
        sizes.append(len(rows))
        return block(rows, dst, shared)
    monkeypatch.setattr(normalization, "_softmax_block", spy)
    expected, = run_onnx("Softmax", [x], {"axis": -1}, backend="ort")
    got = run_kernel("nn.softmax", x, axis=-1)
    assert_close(got, expected)
    assert sizes == [5] * 9 + [1]
    same = x.copy()
    get_kernel("nn.softmax").fn(same, out=same, axis=-1)
    np.testing.assert_array_equal(same, got)
    arena = np.empty(2 * x.size, dtype)                             # views as the arena hands out
    view, dst = arena[:x.size].reshape(x.shape), arena[x.size:].reshape(x.shape)
    view[...] = x
    kept = get_kernel("nn.softmax").fn.specialize_attrs({"axis": -1}, ())
    for _ in range(2):
        kept(view, out=dst)
        np.testing.assert_array_equal(dst, got)
    if dtype == "float16":
        return
    x[1, 7] = -np.inf                                               # an all -inf row: NaN, its block only
    x[0, 20, 4] = np.inf                                            # inf: that block's general path
    with np.errstate(invalid="ignore"):
        got = run_kernel("nn.softmax", x, axis=-1)
        unblocked, = run_onnx("Softmax", [x], {"axis": -1}, backend="ort")
    assert np.isnan(got[1, 7]).all() and np.isnan(got[0, 20]).any()
    fine = ~np.isnan(unblocked)
    assert_close(got[fine], unblocked[fine])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(unblocked))
    safe = run_kernel("nn.safe_softmax", x, axis=-1)
    np.testing.assert_array_equal(safe, np.where(np.isnan(got), 0, got).astype(dtype))


def test_softmax_blocks_only_past_the_cache():
    """Blocks of 1 MiB of rows from 16 MiB on (below, one pass per step costs less); never one row
    split, nor a tensor of one block."""
    from relaxpack.runtime.kernels.normalization import _block_rows
    assert _block_rows(np.empty((4096, 1024), np.float32)) == 256
    assert _block_rows(np.empty((4095, 1024), np.float32)) is None
    assert _block_rows(np.empty((2, 1 << 22), np.float32)) == 1
    assert _block_rows(np.empty((1, 1 << 23), np.float32)) is None

def _guarded_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """The NaN-guarded softmax as torch.onnx writes it: Softmax, IsNaN, Where(nan, 0, softmax)."""
    probs = run_kernel("nn.softmax", x, axis=axis)
    return np.where(np.isnan(probs), np.zeros((), probs.dtype), probs)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, axis", [((3, 5, 7), -1), ((6, 50, 9), -1), ((3, 5, 7), 1), ((2, 6), 0), ((0, 4), -1),
                                         ((1, 1), -1)])
def test_safe_softmax_is_the_guarded_softmax(dtype, shape, axis):
    """Bit for bit the softmax followed by its NaN guard: plain rows, rows far below the max
    (redone), an all -inf row (zeros), NaN and inf inputs (the general path), other axes, empty."""
    rng = np.random.default_rng(9)
    x = rand(rng, shape, dtype) * 3
    np.testing.assert_array_equal(run_kernel("nn.safe_softmax", x, axis=axis), _guarded_softmax(x, axis))
    if x.ndim == 3 and x.size:
        x[0, 1] -= 300.0                                    # redone rows with finite values
        x[1, 2] = -np.inf                                   # an all -inf row: NaN -> 0
        got = run_kernel("nn.safe_softmax", x, axis=axis)
        np.testing.assert_array_equal(got, _guarded_softmax(x, axis))
        if axis == -1:
            assert not np.isnan(got).any() and (got[1, 2] == 0).all()
        x[2, 0, 3], x[2, 1, 4] = np.nan, np.inf             # non-finite max: the general path
        got = run_kernel("nn.safe_softmax", x, axis=axis)
        np.testing.assert_array_equal(got, _guarded_softmax(x, axis))
        assert not np.isnan(got).any()


def test_safe_softmax_in_place():
    x = (np.random.default_rng(10).standard_normal((4, 9)) * 3).astype(np.float32)
    x[1] = -np.inf
    want = _guarded_softmax(x, -1)
    same = x.copy()
    get_kernel("nn.safe_softmax").fn(same, out=same, axis=-1)
    np.testing.assert_array_equal(same, want)
    assert (same[1] == 0).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("d", [1, 7, 512, 769])
def test_layer_norm_rows_with_a_large_offset(dtype, d):
    """The last-axis path (row sums by BLAS) keeps rows whose mean is far
    larger than their spread as accurate as onnxruntime."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, 5, d)) + 300.0).astype(dtype)
    gamma, beta = rand(rng, (d,), dtype), rand(rng, (d,), dtype)
    expected, = run_onnx("LayerNormalization", [x, gamma, beta], {"axis": -1, "epsilon": EPS}, backend="ort")
    got = run_kernel("nn.layer_norm", x, gamma, beta, axes=(-1,), epsilon=EPS)
    assert_close(got, expected, **({"rtol": 2e-4, "atol": 2e-4} if dtype == "float32" else {"rtol": 1e-9, "atol": 1e-9}))


@pytest.mark.parametrize("shape, first_axis", [((3, 5, 7), -1), ((3, 5, 7), 1), ((4, 6), 0), ((2, 0, 4), 2)])
@pytest.mark.parametrize("with_beta", [True, False])
@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm(dtype, with_beta, shape, first_axis):
    rng = np.random.default_rng(1)
    x = rand(rng, shape, dtype) * 2 + 1
    axis = first_axis % len(shape)
    gamma, beta = rand(rng, shape[axis:], dtype), rand(rng, shape[axis:], dtype)
    # onnxruntime computes float16 in float32 (stash_type) like the kernel
    # and float64 in float64; onnx's reference evaluator rounds in between.
    expected = run_onnx("LayerNormalization", [x, gamma, beta if with_beta else None],
                        {"axis": first_axis, "epsilon": EPS}, backend="ort")[0]
    axes = tuple(range(axis, len(shape)))
    got = run_kernel("nn.layer_norm", x, gamma, *([beta] if with_beta else []), axes=axes, epsilon=EPS)
    assert_close(got, expected)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_norm_over_the_last_axis_in_place_and_with_row_params(dtype):
    # the row fast path, with out being x itself
    rng = np.random.default_rng(3)
    x = rand(rng, (2, 9, 64), dtype) * 3 + 2
    gamma, beta = rand(rng, (64,), dtype), rand(rng, (64,), dtype)
    x64 = x.astype(np.float64)
    centered = x64 - x64.mean(-1, keepdims=True)
    want = centered / np.sqrt((centered ** 2).mean(-1, keepdims=True) + EPS) * gamma + beta
    fn = get_kernel("nn.layer_norm").fn
    got = x.copy()
    fn(got, gamma, beta, out=got, axes=(2,), epsilon=EPS)
    tol = 2e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_array_equal(run_kernel("nn.layer_norm", x, gamma, beta, axes=(-1,), epsilon=EPS), got)


@pytest.mark.parametrize("extra_rows", [0, 1])
@pytest.mark.parametrize("d", [16, 64, 65])
def test_layer_norm_rows_on_either_side_of_the_outer_product_bound(extra_rows, d):
    """Up to _outer_max_size(d) values (_OUTER_MAX_SIZE; for short rows, d <= _SHORT_ROW, whose
    squares are summed by a product, _SHORT_OUTER_MAX_SIZE) the rows are scaled by ``scale x
    gamma`` at once, above it by two broadcasts: both within float32's rounding of the float64
    result, a constant row (variance 0) included, and the specialized call is the kernel's."""
    from relaxpack.runtime.kernels.layer_norm_rows import _outer_max_size
    from relaxpack.runtime.kernels.normalization import _specialize_layer_norm
    rng = np.random.default_rng(5)
    bound = _outer_max_size(d) // d
    x = rand(rng, (bound + extra_rows, d), "float32") * 3 + 1
    x[3] = 2.5
    gamma, beta = rand(rng, (d,), "float32"), rand(rng, (d,), "float32")
    x64 = x.astype(np.float64)
    centered = x64 - x64.mean(-1, keepdims=True)
    want = centered / np.sqrt((centered ** 2).mean(-1, keepdims=True) + EPS) * gamma + beta
    got = run_kernel("nn.layer_norm", x, gamma, beta, axes=(-1,), epsilon=EPS)
    assert (got.shape[0] <= bound) == (extra_rows == 0)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(got[3], beta)
    call = _specialize_layer_norm({"axes": (1,), "epsilon": EPS}, ())
    for _ in range(2):                                      # the second call takes the kept path
        out = np.empty_like(x)
        call(x, gamma, beta, out=out)
        np.testing.assert_array_equal(out, got)


def test_layer_norm_over_inner_axes_with_broadcast_params():
    # axes need not be trailing; gamma/beta broadcast to the normalized dims
    # (in the order of axes). The reference normalizes a transposed copy.
    rng = np.random.default_rng(2)
    x = rand(rng, (3, 4, 5, 2), "float32")
    gamma, beta = rand(rng, (5, 1), "float32"), rand(rng, (4,), "float32")
    got = run_kernel("nn.layer_norm", x, gamma, beta, axes=(2, 1), epsilon=1e-5)
    moved = np.ascontiguousarray(x.transpose(0, 3, 2, 1))          # normalized dims last, in axes order
    expected = run_onnx("LayerNormalization", [moved, np.broadcast_to(gamma, (5, 4)).copy(),
                                               np.broadcast_to(beta, (5, 4)).copy()],
                        {"axis": 2, "epsilon": 1e-5})[0].transpose(0, 3, 2, 1)
    assert_close(got, expected)


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5), (1, 3, 2, 3, 4), (0, 3, 4)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_batch_norm(dtype, shape):
    rng = np.random.default_rng(3)
    c = shape[1]
    x = rand(rng, shape, dtype)
    gamma, beta, mean = rand(rng, (c,), dtype), rand(rng, (c,), dtype), rand(rng, (c,), dtype)
    var = rand(rng, (c,), dtype, 0.5, 2)
    expected, = run_onnx("BatchNormalization", [x, gamma, beta, mean, var], {"epsilon": EPS}, backend="ort")
    assert_close(run_kernel("nn.batch_norm", x, gamma, beta, mean, var, axis=1, epsilon=EPS), expected)


def test_batch_norm_along_the_last_axis():
    rng = np.random.default_rng(4)
    x = rand(rng, (2, 5, 3), "float32")
    params = [rand(rng, (3,), "float32") for _ in range(3)] + [rand(rng, (3,), "float32", 0.5, 2)]
    expected, = run_onnx("BatchNormalization", [np.ascontiguousarray(np.moveaxis(x, -1, 1)), *params])
    got = run_kernel("nn.batch_norm", x, *params, axis=-1)
    assert_close(got, np.moveaxis(expected, 1, -1))


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 3), (0, 3, 4), (1, 1, 1)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_instance_norm(dtype, shape):
    rng = np.random.default_rng(5)
    x = rand(rng, shape, dtype) * 3 + 2
    gamma, beta = rand(rng, shape[1:2], dtype), rand(rng, shape[1:2], dtype)
    eps = float(np.float32(1e-4))
    # onnxruntime has no float64 InstanceNormalization
    expected, = run_onnx("InstanceNormalization", [x, gamma, beta], {"epsilon": eps},
                         backend="ref" if dtype == "float64" else "ort")
    assert_close(run_kernel("nn.instance_norm", x, gamma, beta, epsilon=eps), expected)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_instance_norm_rows_against_float64_in_place_constant_rows_and_fallbacks(dtype):
    """float32/float64 contiguous instance norm takes layer norm's row arithmetic (each sample and
    channel a row): within float32's rounding of the float64 result (a constant row gives beta), in
    place too; a strided input takes the generic path, with the same tolerance."""
    from relaxpack.runtime.kernels import channel_norms
    rng = np.random.default_rng(14)
    kernel = get_kernel("nn.instance_norm").fn
    for shape in [(1, 32, 64), (1, 3, 65), (3, 5, 1), (2, 4, 2, 4), (2, 4, 3, 5)]:
        x = rand(rng, shape, dtype) * 3 + 2
        x[0, 0] = 1.5
        gamma, beta = rand(rng, shape[1:2], dtype), rand(rng, shape[1:2], dtype)
        x64, axes = x.astype(np.float64), tuple(range(2, x.ndim))
        centered = x64 - x64.mean(axes, keepdims=True)
        per = (1, -1) + (1,) * (x.ndim - 2)
        want = centered / np.sqrt((centered ** 2).mean(axes, keepdims=True) + EPS) * gamma.reshape(per) \
            + beta.reshape(per)
        assert channel_norms._instance_rows(x, gamma, beta, x)
        got = np.empty_like(x)
        kernel(x, gamma, beta, out=got, epsilon=EPS)
        tol = 2e-6 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        d = x[0, 0].size
        if d & (d - 1) == 0:            # 1 / d exact: the constant row's mean is its value, its result beta
            np.testing.assert_array_equal(got[0, 0], np.full(shape[2:], beta[0]))
        same = x.copy()
        kernel(same, gamma, beta, out=same, epsilon=EPS)                      # in place
        np.testing.assert_array_equal(same, got)
        strided = np.repeat(x, 2, axis=-1)[..., ::2]
        assert not channel_norms._instance_rows(strided, gamma, beta, got)
        kernel(strided, gamma, beta, out=got, epsilon=EPS)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def lrn_spec(x, size, alpha, beta, bias):
    """ONNX LRN as the spec writes it, in float64, one channel at a time."""
    x64, channels = x.astype(np.float64), x.shape[1]
    square_sum = np.zeros_like(x64)
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + -(-(size - 1) // 2))
        square_sum[:, c] = np.sum(x64[:, lo:hi + 1] ** 2, axis=1)
    return (x64 / (bias + alpha / size * square_sum) ** beta).astype(x.dtype)


LRN_ATTRS = {"alpha": float(np.float32(0.01)), "beta": float(np.float32(0.6)), "bias": 1.5}


@pytest.mark.parametrize("size", [1, 3, 5, 9])
@pytest.mark.parametrize("shape", [(2, 7, 3, 4), (0, 3, 2, 2), (1, 2, 1, 1)])
def test_lrn_against_onnxruntime(shape, size):
    # onnxruntime's LRN takes 4-D float32 data and odd sizes only
    rng = np.random.default_rng(6)
    x = rand(rng, shape, "float32") * 4
    expected, = run_onnx("LRN", [x], {"size": size, **LRN_ATTRS}, backend="ort")
    assert_close(run_kernel("nn.lrn", x, size=size, **LRN_ATTRS), expected)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 9])
@pytest.mark.parametrize("shape", [(2, 7, 3, 4), (1, 5, 6), (0, 3, 2, 2), (1, 3, 2, 2, 2)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_lrn_against_the_spec(dtype, shape, size):
    # onnx's reference LRN loops over the batch instead of the channels, so
    # other shapes, even sizes and dtypes are checked against the spec's formula
    rng = np.random.default_rng(7)
    x = rand(rng, shape, dtype) * 4
    assert_close(run_kernel("nn.lrn", x, size=size, **LRN_ATTRS), lrn_spec(x, size, **LRN_ATTRS))


@pytest.mark.parametrize("op, args, attrs", [("nn.softmax", 0, {"axis": -1}), ("nn.layer_norm", 1, {"axes": (-1,)})])
def test_a_last_axis_of_a_scalar_is_a_shape_error(op, args, attrs):
    """The fast last-axis paths take the axis as given: a scalar still has no axis -1."""
    from relaxpack.errors import ShapeError
    from .kernel_calls import call_kernel
    x = np.array(1.0, np.float32)
    with pytest.raises(ShapeError, match="out of range for a tensor of rank 0"):
        call_kernel(op, x, *[np.ones((), np.float32)] * args, out=np.empty((), np.float32), **attrs)


def test_layer_norm_per_instruction_is_the_generic_kernel():
    """The specialized layer norm keeps the row path's flattened parameters: bit for bit the
    generic kernel over a run of calls that change the rows, the parameters' values (same
    arrays), the parameter arrays, beta (None), the dtype (float16: the generic path), the axis
    (not last), an empty input and an in-place call."""
    rng = np.random.default_rng(11)
    kernel = get_kernel("nn.layer_norm").fn
    spec = kernel.specialize_attrs({"axes": (-1,), "epsilon": EPS}, (False, True, True))
    g32, b32 = rand(rng, (8,), "float32"), rand(rng, (8,), "float32")
    calls = [(rand(rng, (2, 3, 8), "float32"), g32, b32), (rand(rng, (1, 5, 8), "float32"), g32, b32),
             (rand(rng, (4, 1, 8), "float32"), g32, None), (rand(rng, (2, 2, 8), "float32"), g32.copy(), b32),
             (rand(rng, (2, 3, 8), "float16"), g32.astype(np.float16), b32.astype(np.float16)),
             (rand(rng, (0, 3, 8), "float32"), g32, b32), (rand(rng, (3, 8), "float32"), g32, b32),
             (rand(rng, (2, 3, 8), "float32"), g32, b32)]
    for x, g, b in calls:
        want = np.empty_like(x)
        kernel(x, g, b, out=want, axes=(-1,), epsilon=EPS)
        got = np.empty_like(x)
        spec(x, g, b, out=got)
        np.testing.assert_array_equal(got, want)
    g32 *= 2.0                                   # new values in the kept array show through
    x = rand(rng, (2, 3, 8), "float32")
    want = np.empty_like(x)
    kernel(x, g32, b32, out=want, axes=(-1,), epsilon=EPS)
    same = x.copy()
    spec(same, g32, b32, out=same)               # in place
    np.testing.assert_array_equal(same, want)
    spec_first = kernel.specialize_attrs({"axes": (0,), "epsilon": EPS}, (False, True, True))
    x = rand(rng, (8, 3), "float32")
    want, got = np.empty_like(x), np.empty_like(x)
    kernel(x, g32, b32, out=want, axes=(0,), epsilon=EPS)
    spec_first(x, g32, b32, out=got)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_norm_per_instruction_keeps_planes_of_a_constant_beta_only(dtype):
    """Up to _outer_max_size(d) values the specialized layer norm keeps, per shape, a buffer for the
    outer product of the row scales and gamma and, for a constant beta, beta repeated over the rows:
    bit for bit the generic kernel over calls that change the shape (both sides of the bound) and,
    where beta is not a constant, beta's values in the same array (they show through)."""
    from relaxpack.runtime.kernels.layer_norm_rows import _outer_max_size
    rng = np.random.default_rng(13)
    kernel = get_kernel("nn.layer_norm").fn
    d = 32
    for constant in ((False, True, True), (False, False, False)):
        g, b = rand(rng, (d,), dtype), rand(rng, (d,), dtype)
        spec = kernel.specialize_attrs({"axes": (-1,), "epsilon": EPS}, constant)
        for rows in (15, 15, 16, _outer_max_size(d) // d, _outer_max_size(d) // d + 1, 15):
            if not constant[2]:
                b[...] = rand(rng, (d,), dtype)
            x = rand(rng, (1, rows, d), dtype)
            for beta in (b, b, None, None, b):         # a repeated call takes the kept path
                want, got = np.empty_like(x), np.empty_like(x)
                kernel(x, g, beta, out=want, axes=(-1,), epsilon=EPS)
                spec(x, g, beta, out=got)
                np.testing.assert_array_equal(got, want)


def test_float16_layer_norm_per_instruction_keeps_float32_parameters_of_constants_only():
    """float16 rows: the specialized kernel keeps float32 copies of constant gamma and beta (bit
    for bit the generic kernel over calls of odd shapes, empty, in place, beta None); of operands
    that are not constants it keeps nothing (new values in the same arrays show through)."""
    rng = np.random.default_rng(12)
    kernel = get_kernel("nn.layer_norm").fn
    g, b = rand(rng, (9,), "float16"), rand(rng, (9,), "float16")
    for constant in ((False, True, True), (False, False, False)):
        spec = kernel.specialize_attrs({"axes": (-1,), "epsilon": EPS}, constant)
        for shape in ((2, 3, 9), (1, 9), (5, 1, 9), (0, 3, 9), (2, 3, 9)):
            x = rand(rng, shape, "float16")
            for beta in (b, None) if len(shape) == 2 else (b,):
                want, got = np.empty_like(x), np.empty_like(x)
                kernel(x, g, beta, out=want, axes=(-1,), epsilon=EPS)
                spec(x, g, beta, out=got)
                np.testing.assert_array_equal(got, want)
        x = rand(rng, (2, 3, 9), "float16")
        want = np.empty_like(x)
        kernel(x, g, b, out=want, axes=(-1,), epsilon=EPS)
        spec(x, g, b, out=x)                    # in place
        np.testing.assert_array_equal(x, want)
    spec = kernel.specialize_attrs({"axes": (-1,), "epsilon": EPS}, (False, False, False))
    x = rand(rng, (2, 3, 9), "float16")
    got = np.empty_like(x)
    spec(x, g, b, out=got)
    g *= np.float16(2.0)
    want = np.empty_like(x)
    kernel(x, g, b, out=want, axes=(-1,), epsilon=EPS)
    spec(x, g, b, out=got)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rows", [
    [[0.5, -2.0, 3.0]], [[-0.0, 0.0, -1.0]], [[0.0, -0.0]], [[-900.0, 0.0, 1.0]],
    [[1.0, 2.0], [-800.0, -801.0], [0.0, -0.0]], [[np.nan, 1.0, 2.0]], [[np.inf, 0.0, 1.0]],
    [[-np.inf, 0.0, 1.0]], [[-np.inf, -np.inf, -np.inf], [1.0, 2.0, 3.0]], [[1e38, 1e38, -1e38]],
    [[float(v) for v in range(17)]]], ids=lambda r: f"{len(r)}x{len(r[0])}")
def test_small_softmax_is_the_reductions_bit_for_bit(monkeypatch, dtype, rows):
    """A tensor of a few values takes Python's max and min (the tensor's max, the least row
    sum): the reductions' bits, NaN, infinities, signed zeros, rows redone included."""
    from relaxpack.runtime.kernels import normalization
    x = np.array(rows, dtype)
    with np.errstate(all="ignore"):
        got = run_kernel("nn.softmax", x, axis=-1)
        monkeypatch.setattr(normalization, "_FEW", 0)
        want = run_kernel("nn.softmax", x, axis=-1)
    bits = np.uint32 if dtype == "float32" else np.uint64
    np.testing.assert_array_equal(got.view(bits), want.view(bits))


def _rms_chain(x: np.ndarray, scale: np.ndarray, epsilon: float) -> np.ndarray:
    """The unfused chain nn.rms_norm replaces, kernel by kernel (as -O0 runs it)."""
    dt = x.dtype
    squares = run_kernel("power", x, np.array(2.0, dt))
    mean = run_kernel("mean", squares, axis=(-1,), keepdims=True)
    root = run_kernel("sqrt", run_kernel("add", mean, np.array(epsilon, dt)))
    return run_kernel("multiply", scale, run_kernel("multiply", x, run_kernel("reciprocal", root)))


RMS_SHAPES = [(3, 5, 7), (1, 1), (6,), (2, 3, 1), (2, 9, 64), (1, 3, 769), (0, 4), (4, 0)]


@pytest.mark.parametrize("shape", RMS_SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rms_norm_is_the_unfused_chain_bit_for_bit(dtype, shape):
    """FuseRMSNorm's contract: the kernel runs the chain's steps with the same roundings (numpy's
    pairwise row sums, a division by the count, 1 / sqrt), so its results are the chain's exactly
    (an empty row gives NaN, as the mean of nothing does)."""
    rng = np.random.default_rng(4)
    x = rand(rng, shape, dtype) * 3
    scale = rand(rng, shape[-1:], dtype)
    got = run_kernel("nn.rms_norm", x, scale, epsilon=EPS)
    np.testing.assert_array_equal(got, _rms_chain(x, scale, EPS))


@pytest.mark.parametrize("epsilon", [1e-6, 1e-45, 0.0, 1 / 3])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rms_norm_scalars_are_the_chains_at_any_epsilon(dtype, epsilon):
    """The kernel's count, epsilon and 1 are 0-d arrays of the data's dtype (``rms_constants``): the
    values the chain's ufuncs convert the Python numbers to, epsilons that round in float32 (a
    subnormal one, zero: a zero row is then 1 / 0) included."""
    rng = np.random.default_rng(8)
    x = rand(rng, (2, 9, 64), dtype)
    x[1, 3] = 0.0
    scale = rand(rng, (64,), dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = _rms_chain(x, scale, epsilon)
    np.testing.assert_array_equal(run_kernel("nn.rms_norm", x, scale, epsilon=epsilon), want)


@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 1, 64), (1, 1), (0, 4)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm_against_onnxruntime(dtype, shape):
    """Against onnxruntime's RMSNormalization (opset 23), which computes float16 in float32
    (stash_type) and rounds once, as the kernel does (it refuses rows of length 0, which the
    chain test above covers)."""
    rng = np.random.default_rng(6)
    x, scale = rand(rng, shape, dtype) * 2, rand(rng, shape[-1:], dtype)
    expected, = run_onnx("RMSNormalization", [x, scale], {"axis": -1, "epsilon": EPS}, backend="ort", opset=23)
    assert_close(run_kernel("nn.rms_norm", x, scale, epsilon=EPS), expected)


def test_rms_norm_in_place_on_a_strided_view_with_a_full_scale():
    """``out`` may be ``x``; ``x`` may be a strided view; a scale of the data's shape broadcasts
    trivially: each the chain's bits, and the specialized call the generic one's."""
    rng = np.random.default_rng(8)
    base = rand(rng, (6, 4, 8), "float32")
    x = base.transpose(1, 0, 2)[:, ::2]                         # (4, 3, 8), not contiguous
    scale = rand(rng, x.shape, "float32")
    want = _rms_chain(np.ascontiguousarray(x), scale, EPS)
    kernel = get_kernel("nn.rms_norm").fn
    got = np.empty(x.shape, np.float32)
    kernel(x, scale, out=got, epsilon=EPS)
    np.testing.assert_array_equal(got, want)
    inplace = np.ascontiguousarray(x)
    kernel.specialize_attrs({"epsilon": EPS}, (False, True))(inplace, scale, out=inplace)
    np.testing.assert_array_equal(inplace, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("d", [1, 5, 16, 32, 33, 48, 64, 65, 128, 129])
@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_tiny_layer_norm_on_either_side_of_its_bound(dtype, d):
    """A few short rows (norm._tiny: rows x d x d up to _TINY_PRODUCTS for d <= 32, one row up to
    128 values) take their means and mean squares as
    products with a (d, d) matrix of 1 / d: within float32's rounding of the float64 formula on
    both sides of the bound, a large offset, a constant row (0 before gamma), inf and NaN rows
    (NaN, as the row path gives), beta None; the specialized kernel on kept arrays (tiles of
    constant parameters, a changing gamma read through) is the generic kernel's bits."""
    from relaxpack.runtime.kernels import layer_norm_rows as norm
    rng = np.random.default_rng(31)
    kernel = get_kernel("nn.layer_norm").fn
    bound = norm._TINY_PRODUCTS // (d * d) if d <= norm._TINY_D else 1
    for rows in sorted({1, max(bound, 1), bound + 1}):
        tiny = rows * d * d <= norm._TINY_PRODUCTS if d <= 32 else rows == 1 and d <= 128
        x = rand(rng, (rows, d), dtype) * 3 + 40
        if rows > 2:
            x[1] = 2.5                          # variance 0
            x[2, 0], x[2, -1] = np.inf, 1.0      # NaN row
        gamma, beta = rand(rng, (d,), dtype), rand(rng, (d,), dtype)
        x64 = x.astype(np.float64)
        with np.errstate(invalid="ignore"):
            centered = x64 - x64.mean(-1, keepdims=True)
            normed = centered / np.sqrt((centered ** 2).mean(-1, keepdims=True) + EPS) * gamma
        tol = 2e-5 if dtype == "float32" else 1e-12
        for b in (beta, None):
            want = normed + (b if b is not None else 0)
            got = run_kernel("nn.layer_norm", x, gamma, *([] if b is None else [b]), axes=(-1,), epsilon=EPS)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
            if rows > 2 and d > 1:
                np.testing.assert_array_equal(got[1], 0 if b is None else b)
                assert np.isnan(got[2]).all()
            for constant in ((False, True, True), (False, False, False)):
                spec = kernel.specialize_attrs({"axes": (-1,), "epsilon": EPS}, constant[:2 if b is None else 3])
                arena = np.empty((2, rows, d), dtype)
                a, out = arena[0], arena[1]
                g = gamma.copy()
                for step in range(4):
                    a[...] = x
                    if step == 3 and not constant[1]:
                        g *= 2                  # new values in a gamma that is not a constant show through
                    want_bits = np.empty_like(a)
                    kernel(a, g, *([] if b is None else [b]), out=want_bits, axes=(-1,), epsilon=EPS)
                    spec(a, g, *([] if b is None else [b]), out=out if step % 2 else a)
                    np.testing.assert_array_equal(out if step % 2 else a, want_bits)
        assert norm._tiny(rows, d) == tiny


@pytest.mark.parametrize("rows", [64, 65])
@pytest.mark.parametrize("d", [16, 64, 65])
def test_short_rows_sum_their_squares_by_a_product(rows, d):
    """Past _SHORT_ROWS_MIN rows of at most _SHORT_ROW values the squares are summed by a product
    with ones instead of vecdot: either way within float32's rounding of the float64 formula, and
    the specialized kernel (its planes' buffer) is the generic kernel's bits."""
    from relaxpack.runtime.kernels import layer_norm_rows as norm
    rng = np.random.default_rng(32)
    assert norm._short_rows(rows, d) == (rows > 64 and d <= 64)
    x = rand(rng, (2, rows, d), "float32") * 3 + 5
    gamma, beta = rand(rng, (d,), "float32"), rand(rng, (d,), "float32")
    x64 = x[0].astype(np.float64)
    centered = x64 - x64.mean(-1, keepdims=True)
    want = centered / np.sqrt((centered ** 2).mean(-1, keepdims=True) + EPS) * gamma + beta
    got = run_kernel("nn.layer_norm", x[0], gamma, beta, axes=(-1,), epsilon=EPS)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    spec = get_kernel("nn.layer_norm").fn.specialize_attrs({"axes": (-1,), "epsilon": EPS}, (False, True, True))
    for _ in range(3):
        spec(x[0], gamma, beta, out=x[1])
        np.testing.assert_array_equal(x[1], got)
