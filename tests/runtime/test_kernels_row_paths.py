"""The softmax and layer norm row paths' fast paths at their edges: float16 rows widened by
assignment into float32 buffers (bit for bit the mixed-dtype formulas they replaced: the float16
ufunc loops, the keyword copyto), and a few rows shifted each by its own max (bit for bit the
per-row formula)."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import get_kernel
from relaxpack.runtime.kernels import half_cast
from relaxpack.runtime.kernels import layer_norm_rows as rows_path
from relaxpack.runtime.kernels import normalization as norm

from .test_kernels_registry import rand

EPS = float(np.float32(1e-3))


def _softmax_before(x: np.ndarray) -> np.ndarray:
    """The float16 softmax as the kernel computed it before: the row path on the float16 rows into a
    float32 buffer (its max over float16 values, the float32 subtract of mixed operands), rounded by
    copyto; the general path when the row path declines (inf / NaN max)."""
    out = np.empty_like(x)
    if x.size == 0:
        return out
    buf = np.empty(x.shape, np.float32)
    with np.errstate(all="ignore"):
        if norm._softmax_rows(x, buf) is not None:
            np.copyto(out, buf, casting="unsafe")
            return out
        buf[...] = x
        buf -= np.max(buf, axis=-1, keepdims=True)
        np.exp(buf, out=buf)
        buf /= np.sum(buf, axis=-1, keepdims=True)
    np.copyto(out, buf, casting="unsafe")
    return out


def _cases(rng):
    """Small tensors (a Python max: at most 16 values), a few hundred values, rows far below the
    tensor's max (redone whole up to _WHOLE_REDO_SIZE values, row by row past it), -inf and NaN
    rows, inf, an empty tensor."""
    yield rand(rng, (2, 3), "float16") * 4
    yield rand(rng, (4, 4), "float16") * 4                       # 16 values: the Python max's bound
    yield rand(rng, (1, 2, 17, 17), "float16") * 4
    far = rand(rng, (2, 3, 9, 13), "float16") * 4
    far[0, 1] -= np.float16(300.0)
    yield far
    big = rand(rng, (9, 3, 9, 13), "float16") * 4                # past _WHOLE_REDO_SIZE
    assert big.size > norm._WHOLE_REDO_SIZE
    big[1, 2, 3] -= np.float16(500.0)
    yield big
    masked = rand(rng, (3, 7), "float16")
    masked[1] = -np.inf                                          # an all -inf row: NaN
    masked[2, 4:] = np.float16(-65504.0)
    yield masked
    nan = rand(rng, (3, 7), "float16")
    nan[0, 2] = np.nan
    yield nan
    wide = rand(rng, (1, 4, 17, 160), "float16") * 4             # widened and rounded by half_cast
    assert wide.size >= max(half_cast.WIDEN_MIN_SIZE, half_cast.NARROW_MIN_SIZE)
    yield wide
    inf = rand(rng, (2, 5), "float16")
    inf[1, 3] = np.inf
    yield inf
    yield np.empty((0, 5), np.float16)


def test_float16_softmax_rows_are_the_mixed_dtype_formula_bit_for_bit():
    rng = np.random.default_rng(21)
    kernel = get_kernel("nn.softmax").fn
    for x in _cases(rng):
        got = np.empty_like(x)
        with np.errstate(all="ignore"):
            kernel(x, out=got, axis=-1)
        np.testing.assert_array_equal(got.view(np.uint16), _softmax_before(x).view(np.uint16))
        same = x.copy()                                         # in place: the rows are read widened first
        with np.errstate(all="ignore"):
            kernel(same, out=same, axis=-1)
        np.testing.assert_array_equal(same.view(np.uint16), got.view(np.uint16))


def test_float16_safe_softmax_zeroes_only_nan_rows():
    x = rand(np.random.default_rng(22), (3, 6), "float16")
    x[1] = -np.inf
    got = np.empty_like(x)
    get_kernel("nn.safe_softmax").fn(x, out=got, axis=-1)
    assert (got[1] == 0).all()
    np.testing.assert_array_equal(got[[0, 2]], _softmax_before(x)[[0, 2]])


def test_float16_layer_norm_per_instruction_across_the_planes_bound():
    """The specialized float16 layer norm widens its rows into a float32 buffer kept per shape with
    the row planes (up to _outer_max_size(d) values) and rounds by assignment; past the bound it takes
    the fresh-copy path: bit for bit the generic kernel on both sides, shapes changing back and
    forth, beta None, in place."""
    rng = np.random.default_rng(23)
    kernel = get_kernel("nn.layer_norm").fn
    d = 32
    g, b = rand(rng, (d,), "float16"), rand(rng, (d,), "float16")
    spec = kernel.specialize_attrs({"axes": (-1,), "epsilon": EPS}, (False, True, True))
    bound = rows_path._outer_max_size(d) // d
    for rows in (17, 17, 1, bound, bound + 1, bound + 1, 17, 3):
        x = rand(rng, (1, rows, d), "float16") * 3
        for beta in (b, b):
            want, got = np.empty_like(x), np.empty_like(x)
            kernel(x, g, beta, out=want, axes=(-1,), epsilon=EPS)
            spec(x, g, beta, out=got)
            np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
        spec(x, g, b, out=x)                                    # in place
        np.testing.assert_array_equal(x.view(np.uint16), want.view(np.uint16))
    spec_none = kernel.specialize_attrs({"axes": (-1,), "epsilon": EPS}, (False, True))
    for rows in (5, 5, 6):
        x = rand(rng, (rows, d), "float16")
        want, got = np.empty_like(x), np.empty_like(x)
        kernel(x, g, None, out=want, axes=(-1,), epsilon=EPS)
        spec_none(x, g, None, out=got)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("shape", [(1, 17, 32), (3, 5, 7), (1, 1), (0, 4)])
def test_float16_layer_norm_rows_are_the_float32_rows_rounded_once(shape):
    """The generic float16 row path: the float32 computation of the widened rows, rounded once."""
    rng = np.random.default_rng(24)
    x = rand(rng, shape, "float16") * 5
    g, b = rand(rng, shape[-1:], "float16"), rand(rng, shape[-1:], "float16")
    got = np.empty_like(x)
    get_kernel("nn.layer_norm").fn(x, g, b, out=got, axes=(-1,), epsilon=EPS)
    want = np.empty(shape, np.float32)
    get_kernel("nn.layer_norm").fn(x.astype(np.float32), g.astype(np.float32), b.astype(np.float32),
                                   out=want, axes=(-1,), epsilon=EPS)
    np.testing.assert_array_equal(got.view(np.uint16), want.astype(np.float16).view(np.uint16))


def _per_row(rows: np.ndarray, dtype) -> np.ndarray:
    """The per-row formula as the redo path computes it: each row minus its max (in ``dtype``),
    exp, row sums by a product with ones, a division."""
    from relaxpack.runtime.kernels.normalization import ones_vector
    n = rows.shape[-1]
    flat = rows.reshape(-1, n)
    e = np.subtract(flat, np.maximum.reduce(flat, 1, None, None, True), dtype=dtype)
    np.exp(e, e)
    np.divide(e, np.dot(e, ones_vector(n, np.dtype(dtype)))[:, None], e)
    return e.reshape(rows.shape)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_small_softmax_shifts_each_row_by_its_own_max(dtype):
    """Up to _ROWWISE_SIZE values each row is shifted by its own max: the per-row formula bit for
    bit (masked finfo.min rows included, which the tensor path redid with the same formula), in
    place too; one value past the bound the tensor path (within a few ulps of it); a row max that
    is not finite (an all -inf row, NaN, inf) gives the tensor path's bits (the test below)."""
    rng = np.random.default_rng(25)
    kernel = get_kernel("nn.softmax").fn
    big = norm._ROWWISE_SIZE
    for shape in [(1, 1), (2, 2, 1, 1), (1, 2, 5, 5), (big // 16, 16), (big // 16 + 1, 16)]:
        x = (rng.standard_normal(shape) * 4).astype(dtype)
        if x.shape[-2] > 2:
            x[..., 1, :] = np.finfo(dtype).min                  # a masked query row
        got = np.empty_like(x)
        kernel(x, out=got, axis=-1)
        want = _per_row(x, dtype)
        if x.size <= big:
            np.testing.assert_array_equal(got, want)
            same = x.copy()
            kernel(same, out=same, axis=-1)
            np.testing.assert_array_equal(same, want)
        else:
            np.testing.assert_allclose(got, want, rtol=8 * np.finfo(dtype).eps, atol=1e-30)
    x = (rng.standard_normal((4, 6)) * 4).astype(dtype)
    x[2] = -np.inf
    got = np.empty_like(x)
    with np.errstate(invalid="ignore"):
        kernel(x, out=got, axis=-1)
        want = _per_row(x, dtype)
    assert np.isnan(got[2]).all()
    np.testing.assert_array_equal(got[[0, 1, 3]], want[[0, 1, 3]])


def _arena(rng, shape, dtype, scale=4.0):
    """A view of ``shape`` into a larger buffer, as the arena hands a kernel its tensors."""
    buf = (rng.standard_normal((2,) + tuple(shape)) * scale).astype(dtype)
    return buf[0]


def _softmax_inputs(rng, shape, dtype):
    """Values for the same arrays call after call: plain, a masked row, a far row, an all -inf
    row (NaN), NaN, inf (the last three leave the row path)."""
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    yield x
    if x.ndim < 2 or x.shape[-2] < 3:
        return
    masked = x.copy()
    masked[..., 1, :] = np.finfo(dtype).min
    yield masked
    far = x.copy()
    far[..., 2, :] -= 300
    yield far
    for value in (-np.inf, np.nan, np.inf):
        odd = x.copy()
        odd[..., 1, :1] = value
        if value == -np.inf:
            odd[..., 1, :] = value
        yield odd


@pytest.mark.parametrize("op", ["nn.softmax", "nn.safe_softmax"])
@pytest.mark.parametrize("shape", [(1, 1), (2, 2, 1, 1), (1, 2, 5, 5), (3, 2, 17, 17), (1, 65, 16), (2, 0, 3),
                                   (16, 64), (1, 16, 65), (17, 3), (1, 2, 17, 17), (2, 2)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_specialized_softmax_on_kept_arrays_is_the_kernel(op, shape, dtype):
    """The specialized softmax keeps the row matrices of the last call's arena arrays and runs its
    row path on them with kept buffers (a few rows: each by its own max, up to 16 rows and 1024
    values; more: the tensor's shift, low rows redone whole up to 2048 values, picked out past it):
    the generic kernel's bits over new values in the same arrays (rows that leave the row path
    included), other (owning) arrays, the same arrays again, in place, and dtypes that never take
    the kept path; shapes on both sides of each bound."""
    rng = np.random.default_rng(26)
    kernel = get_kernel(op).fn
    spec = kernel.specialize_attrs({"axis": -1}, (False,))
    x, out = _arena(rng, shape, dtype), _arena(rng, shape, dtype)
    with np.errstate(all="ignore"):
        for values in list(_softmax_inputs(rng, shape, dtype)) * 2:
            for a, b in ((x, out), (x, out), (values.copy(), np.empty(shape, dtype)), (x, out), (x, out), (x, x),
                         (x, x)):
                if a is x:
                    x[...] = values
                want = np.empty(shape, dtype)
                kernel(a.copy(), out=want, axis=-1)
                spec(a, out=b)
                np.testing.assert_array_equal(b, want)


def _one_row_values(rng, shape, dtype):
    """Values for the same arrays call after call where a row of them decides the one-row path:
    plain, ties, signed zeros, subnormals, a row at the dtype's extremes whose Python sum
    overflows, and a row holding inf, -inf or NaN (the reduction's rows)."""
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    yield x
    if not x.size:
        return
    info = np.finfo(dtype)
    n = shape[-1]
    for row in ([1.5] * n, [-0.0] * n, [0.0, -0.0] * n, [info.smallest_subnormal] * n,
                [float(info.max)] * n, [float(info.max), float(-info.max)] * n):
        odd = x.copy()
        odd[...] = np.resize(np.array(row, dtype), shape)
        yield odd
    for value in (np.inf, -np.inf, np.nan):
        odd = x.copy()
        odd.reshape(-1, n)[0, :1] = value
        yield odd
    odd = x.copy()
    odd.reshape(-1, n)[0] = -np.inf
    yield odd


@pytest.mark.parametrize("op", ["nn.softmax", "nn.safe_softmax"])
@pytest.mark.parametrize("shape", [(1, 2), (1, 3), (1, 1, 7), (1, 16), (1, 1), (2, 3), (7, 3), (16, 3), (17, 3),
                                   (1, 1025), (1, 2100), (3, 2, 17, 17), (1, 0)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_specialized_softmax_of_kept_rows_into_new_outputs_is_the_kernel(op, shape, dtype):
    """A model's last softmax reads an arena view and writes the output, a new array every call:
    the specialized softmax keeps ``x``'s rows (never the output) and runs the row path into each
    new output's rows; one row of finite values takes its max by Python and the max and sum as
    0-d operands. The generic kernel's bits over new outputs, with an arena output between them
    (kept as before), a non-contiguous output, an output of another dtype, the input's own base
    as output is refused; values at the one-row path's edges (ties, signed zeros, subnormals, a
    sum that overflows, inf, -inf, NaN); shapes on both sides of the row and size bounds."""
    rng = np.random.default_rng(31)
    kernel = get_kernel(op).fn
    spec = kernel.specialize_attrs({"axis": -1}, (False,))
    x, arena_out = _arena(rng, shape, dtype), _arena(rng, shape, dtype)
    other = "float64" if dtype == "float32" else "float32"
    with np.errstate(all="ignore"):
        for values in list(_one_row_values(rng, shape, dtype)) * 2:
            x[...] = values
            for make in (lambda: np.empty(shape, dtype), lambda: np.empty(shape, dtype), lambda: arena_out,
                         lambda: np.empty(shape, dtype), lambda: np.empty(shape + (2,), dtype)[..., 0],
                         lambda: np.empty(shape, dtype), lambda: np.empty(shape, other),
                         lambda: np.empty(shape, dtype)):
                out, want = make(), make()
                if want is arena_out:
                    want = np.empty(shape, dtype)
                kernel(values.copy(), out=want, axis=-1)        # (the general path for a strided out)
                spec(x, out=out)
                assert out.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_layer_norm_of_kept_rows_into_new_outputs_is_the_kernel(dtype):
    """A model's last layer norm reads an arena view and writes the output, a new array every
    call: the specialized kernel keeps ``x``'s rows (never the output) and writes each new
    output through its reshape. The generic kernel's bits over new outputs, the same output twice,
    an arena output between them (kept as before), a new gamma, beta None, shapes across the
    planes bound and the few-row products' bound, a non-contiguous output."""
    import weakref
    rng = np.random.default_rng(28)
    kernel = get_kernel("nn.layer_norm").fn
    d = 32
    bound = rows_path._outer_max_size(d) // d
    for rows in (1, 5, 9, bound + 1):
        for constant in ((False, True, True), (False, False, False)):
            spec = kernel.specialize_attrs({"axes": (-1,), "epsilon": EPS}, constant)
            gammas = [rand(rng, (d,), dtype), rand(rng, (d,), dtype)]
            beta = rand(rng, (d,), dtype)
            x, arena_out = _arena(rng, (1, rows, d), dtype), _arena(rng, (1, rows, d), dtype)
            same = np.empty((1, rows, d), dtype)
            strided = np.empty((1, rows, 2 * d), dtype)[..., ::2]
            for g, b, o in ((gammas[0], beta, None), (gammas[0], beta, None), (gammas[0], beta, same),
                            (gammas[0], beta, same), (gammas[0], beta, arena_out), (gammas[0], beta, arena_out),
                            (gammas[0], beta, None), (gammas[1], beta, None), (gammas[1], beta, None),
                            (gammas[1], None, None), (gammas[1], None, None), (gammas[1], beta, strided),
                            (gammas[1], beta, None)):
                out = np.empty((1, rows, d), dtype) if o is None else o
                x[...] = rand(rng, x.shape, dtype) * 3
                # (a non-contiguous out takes the generic kernel's general path: compared with it)
                want = np.empty((1, rows, 2 * d), dtype)[..., ::2] if o is strided else np.empty(x.shape, dtype)
                kernel(x.copy(), g, b, out=want, axes=(-1,), epsilon=EPS)
                spec(x, g, b, out=out)
                np.testing.assert_array_equal(out, want)
            ref = weakref.ref(out)
            del out, o
            assert ref() is None                    # a new output is not held past its call


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_layer_norm_on_kept_arrays_is_the_kernel(dtype):
    """The specialized layer norm runs the last call's arena arrays on their kept row matrices: the
    generic kernel's bits over new values, a new gamma or beta array (planes made again), shapes
    across the planes bound, owning arrays, in place, beta None."""
    rng = np.random.default_rng(27)
    kernel = get_kernel("nn.layer_norm").fn
    d = 32
    for constant in ((False, True, True), (False, False, False)):
        spec = kernel.specialize_attrs({"axes": (-1,), "epsilon": EPS}, constant)
        gammas = [rand(rng, (d,), dtype), rand(rng, (d,), dtype)]
        betas = [rand(rng, (d,), dtype), rand(rng, (d,), dtype)]
        bound = rows_path._outer_max_size(d) // d
        for rows in (5, bound + 1, 5):
            x, out = _arena(rng, (1, rows, d), dtype), _arena(rng, (1, rows, d), dtype)
            for g, b in ((gammas[0], betas[0]),) * 3 + ((gammas[1], betas[0]), (gammas[1], betas[1]),
                                                         (gammas[1], betas[1])):
                for a, o in ((x, out), (x, out), (x.copy(), np.empty_like(out)), (x, x), (x, x), (x, out), (x, out)):
                    a[...] = rand(rng, a.shape, dtype) * 3
                    want = np.empty(a.shape, dtype)
                    kernel(a.copy(), g, b, out=want, axes=(-1,), epsilon=EPS)
                    spec(a, g, b, out=o)
                    np.testing.assert_array_equal(o, want)
        spec_none = kernel.specialize_attrs({"axes": (-1,), "epsilon": EPS}, constant[:2])
        x, out = _arena(rng, (7, d), dtype), _arena(rng, (7, d), dtype)
        for _ in range(3):
            x[...] = rand(rng, x.shape, dtype)
            want = np.empty(x.shape, dtype)
            kernel(x, gammas[0], None, out=want, axes=(-1,), epsilon=EPS)
            spec_none(x, gammas[0], None, out=out)
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("constant", [(False, True, True), (False, False, False)], ids=["bound", "registers"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("shape", [(1, 15, 32), (1, 3, 256), (1, 5, 64), (1, 127, 32), (1, 128, 32), (1, 600, 32)],
                         ids=str)
def test_layer_norm_of_a_kept_view_into_new_arrays_is_the_kernel(dtype, shape, constant):
    """A model's last layer norm reads an arena view and writes the model's output, a new array each
    run: the kept rows of ``x`` run into the new array's rows (tiny products, the row path's bound
    calls with its squares by a product or by ``vecdot``; float16 widened into the kept float32 rows
    and rounded into the new array, by assignment below half_cast's bar of 4096 values and by its
    casts from it); the kernel's bits for new values (gamma and
    beta bound, or registers whose values change), then the arena's own ``out``, in place, a new
    array not C-contiguous and one of another dtype between them (the kernel's checks)."""
    rng = np.random.default_rng(31)
    kernel = get_kernel("nn.layer_norm").fn
    g, b = rand(rng, shape[-1:], dtype), rand(rng, shape[-1:], dtype)
    spec = kernel.specialize_attrs({"axes": (-1,), "epsilon": EPS}, constant)
    x, out = _arena(rng, shape, dtype), _arena(rng, shape, dtype)
    fortran = np.empty(shape, dtype, order="F")
    assert fortran.base is None and not fortran.flags.c_contiguous
    for o in (np.empty(shape, dtype), np.empty(shape, dtype), out, np.empty(shape, dtype), x,
              fortran, np.empty(shape, dtype), np.empty(shape, "float32" if dtype == "float64" else "float64"),
              np.empty(shape, dtype)):
        x[...] = rand(rng, shape, dtype) * 3
        if not constant[1]:
            g[...], b[...] = rand(rng, shape[-1:], dtype), rand(rng, shape[-1:], dtype)
        want = np.empty_like(o)                 # (of o's layout: the kernel's path for it)
        kernel(x.copy(), g, b, out=want, axes=(-1,), epsilon=EPS)
        spec(x, g, b, out=o)
        np.testing.assert_array_equal(o, want)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_rms_norm_bound_scale_as_a_tile_is_the_kernel(dtype):
    """A bound RMS norm scale is multiplied as its tile of the output's shape: the generic kernel's
    bits at each shape (past the tile bar too), a scale of one value, a second scale array."""
    from relaxpack.runtime.kernels.tiled_operand import ROW_TILE_MAX_SIZE
    rng = np.random.default_rng(28)
    kernel = get_kernel("nn.rms_norm").fn
    spec = kernel.specialize_attrs({"epsilon": EPS}, (False, True))
    for scale_shape in ((16,), (1,), (1, 16)):
        for scale in (rand(rng, scale_shape, dtype), rand(rng, scale_shape, dtype)):
            for shape in ((1, 5, 16), (3, 16), (ROW_TILE_MAX_SIZE // 16 + 1, 16), (ROW_TILE_MAX_SIZE // 16, 16), (1, 5, 16), (0, 16)):
                x = rand(rng, shape, dtype) * 3
                want, got = np.empty(shape, dtype), np.empty(shape, dtype)
                kernel(x, scale, out=want, epsilon=EPS)
                spec(x, scale, out=got)
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_rms_norm_on_kept_arrays_is_the_kernel(dtype):
    """A bound-scale RMS norm on the same arena views as the last call runs its calls into kept
    buffers: the generic kernel's bits over new values in the same arrays (a zero row with epsilon
    0 too), owning arrays between them (not kept), in place, a new scale array, a strided x, shapes
    across the tile bar, one row, float16 (never kept)."""
    from relaxpack.runtime.kernels.tiled_operand import ROW_TILE_MAX_SIZE
    rng = np.random.default_rng(29)
    kernel = get_kernel("nn.rms_norm").fn
    for epsilon in (EPS, 0.0):
        spec = kernel.specialize_attrs({"epsilon": epsilon}, (False, True))
        scales = [rand(rng, (16,), dtype), rand(rng, (16,), dtype)]
        for shape in ((1, 5, 16), (1, 16), (ROW_TILE_MAX_SIZE // 16 + 1, 16), (3, 7, 16)):
            x, out = _arena(rng, shape, dtype), _arena(rng, shape, dtype)
            strided = _arena(rng, shape[:-1] + (32,), dtype)[..., ::2]
            for a, o, scale in ((x, out, scales[0]),) * 3 + ((x.copy(), np.empty(shape, dtype), scales[0]),
                                                              (x, out, scales[0]), (x, x, scales[0]), (x, x, scales[0]),
                                                              (x, out, scales[1]), (x, out, scales[1]),
                                                              (strided, out, scales[1]), (strided, out, scales[1]),
                                                              (x, out, scales[1])):
                a[...] = rand(rng, a.shape, dtype) * 3
                a[..., 0, :] = 0                # a zero row: 1 / 0 with epsilon 0
                want = np.empty(shape, dtype)
                with np.errstate(all="ignore"):
                    kernel(a.copy(), scale, out=want, epsilon=epsilon)
                spec(a, scale, out=o)
                np.testing.assert_array_equal(o, want)


@pytest.mark.parametrize("op", ["nn.softmax", "nn.safe_softmax"])
@pytest.mark.parametrize("shape", [(1, 1), (2, 2, 1, 1), (9, 1)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_softmax_of_one_value_rows_is_the_formula(op, shape, dtype):
    """Rows of one value (attention at sequence length 1) are ``exp(x - x)``: 1 for every finite
    value (the extremes and -0.0 included), NaN for inf, -inf and NaN, which the guarded softmax
    makes 0; the generic kernel and the specialized one on kept arrays, in place too, against
    the textbook formula in float64."""
    kernel = get_kernel(op).fn
    spec = kernel.specialize_attrs({"axis": -1}, (False,))
    info = np.finfo(dtype)
    specials = np.array([0.5, -0.0, 0.0, info.max, info.min, info.tiny, -3.0, np.inf, -np.inf, np.nan], dtype)
    x, out = _arena(np.random.default_rng(28), shape, dtype), _arena(np.random.default_rng(29), shape, dtype)
    for start in range(len(specials)):
        values = np.resize(np.roll(specials, start), shape).astype(dtype)
        with np.errstate(all="ignore"):
            wide = values.astype(np.float64)
            want = np.exp(wide - wide.max(-1, keepdims=True))
            want = (want / want.sum(-1, keepdims=True)).astype(dtype)
        if op == "nn.safe_softmax":
            want[np.isnan(want)] = 0
        for a, b in ((values.copy(), np.empty(shape, dtype)), (x, out), (x, out), (x, x), (x, x)):
            if a is x:
                x[...] = values
            with np.errstate(all="raise"):
                (kernel(a, out=b, axis=-1) if start % 2 else spec(a, out=b))
            np.testing.assert_array_equal(b, want)
            assert np.isnan(b).any() == (op == "nn.softmax" and not np.isfinite(values).all())


def _nonfinite_cases(rng, shape, dtype):
    """Row patterns whose row maxes are not all finite (each once, with finite rows beside)."""
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    rows = x.reshape(-1, shape[-1])
    last = rows.shape[0] - 1
    fills = [
        lambda r: r.fill(-np.inf),                                   # every row masked (all NaN)
        lambda r: r[0].fill(-np.inf),                                # one -inf row, the others finite
        lambda r: (r[0].fill(-np.inf), r[last].fill(np.finfo(dtype).min)),
        lambda r: r[last].__setitem__(0, np.nan),                    # NaN: the tensor max is NaN
        lambda r: r[0].__setitem__(-1, np.inf),                      # inf: the tensor max is inf
        lambda r: (r[0].fill(-np.inf), r[last].__setitem__(1 % shape[-1], np.inf)),
        lambda r: r[0].fill(np.inf),
    ]
    for fill in fills:
        case = x.copy()
        fill(case.reshape(rows.shape))
        yield case


def _general_formula(x: np.ndarray) -> np.ndarray:
    """The kernel's general path as it reads (a copy, reductions over the last axis)."""
    buf = x.copy()
    buf -= np.max(buf, axis=-1, keepdims=True)
    np.exp(buf, out=buf)
    buf /= np.sum(buf, axis=-1, keepdims=True)
    return buf


@pytest.mark.parametrize("op", ["nn.softmax", "nn.safe_softmax"])
@pytest.mark.parametrize("shape", [(1, 5), (1, 2, 5, 5), (3, 7), (2, 1, 17), (16, 64), (17, 5), (3, 2, 17, 17),
                                   (1, 2100), (33, 64)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rows_with_a_row_max_not_finite_are_the_tensor_paths_bits(monkeypatch, op, shape, dtype):
    """Rows whose row maxes are not all finite (a fully masked attention, NaN, inf) skip the
    checks and copies that led to the general path: where the tensor max is not finite, the
    general formula's bits (few rows or many); a few rows with -inf rows beside finite ones, the
    tensor path's per-row redo (its bits); generic and specialized, in place, and a mixed-dtype
    ``out`` (left to the paths before)."""
    rng = np.random.default_rng(28)
    kernel = get_kernel(op).fn
    cases = list(_nonfinite_cases(rng, shape, dtype))
    with np.errstate(all="ignore"):
        got = []
        for x in cases:
            plain, spec = np.empty_like(x), kernel.specialize_attrs({"axis": -1}, (False,))
            kernel(x, out=plain, axis=-1)
            arena, target = _arena(rng, shape, dtype), _arena(rng, shape, dtype)
            arena[...] = x
            spec(arena, out=target)
            spec(arena, out=target)                 # the kept matrices
            same = x.copy()
            kernel(same, out=same, axis=-1)
            wide = np.empty(shape, np.float64)
            kernel(x.astype(np.float32), out=wide, axis=-1)
            got.append((plain, target.copy(), same, wide))
        monkeypatch.setattr(norm, "_ROWWISE_SIZE", 0)       # the tensor path, as before
        for x, results in zip(cases, got):
            if np.isfinite(np.max(x)):
                want = np.empty_like(x)
                kernel(x, out=want, axis=-1)
            else:
                want = _general_formula(x)
                if op == "nn.safe_softmax":
                    want[np.isnan(want)] = 0
            wide = _general_formula(x.astype(np.float32).astype(np.float64))
            if op == "nn.safe_softmax":
                wide[np.isnan(wide)] = 0
            for result in results[:3]:
                assert result.tobytes() == want.tobytes()
            if np.isfinite(np.max(x)):
                wide = np.empty(shape, np.float64)
                kernel(x.astype(np.float32), out=wide, axis=-1)
            assert results[3].tobytes() == wide.tobytes()
            if op == "nn.softmax" and np.isneginf(x).all():
                assert np.isnan(want).all()


@pytest.mark.parametrize("constant", [(False, True, True), (False, False, False)], ids=["bound", "registers"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_instance_norm_per_instruction_is_the_kernel(dtype, constant):
    """The specialized instance norm runs the row path's calls on kept views of the same arena
    arrays (beta a tile when bound, up to BETA_TILE_MAX_SIZE values): the generic kernel's bits for new
    values (gamma and beta changing in place when they are registers), new arrays (a model input or
    output: not kept), in place, shapes changing, either side of the tile bound, a strided input
    and float16 (the generic path)."""
    from relaxpack.runtime.kernels.channel_norms import BETA_TILE_MAX_SIZE
    rng = np.random.default_rng(41)
    kernel = get_kernel("nn.instance_norm").fn
    spec = kernel.specialize_attrs({"epsilon": EPS}, constant)
    c = 16
    g, b = rand(rng, (c,), dtype), rand(rng, (c,), dtype)
    over = BETA_TILE_MAX_SIZE // c + 1
    for shape in ((1, c, 65), (1, c, 65), (2, c, 3, 5), (1, c, over), (1, c, over - 1), (1, c, 1), (1, c, 65)):
        x, out = _arena(rng, shape, dtype), _arena(rng, shape, dtype)
        for target in (out, out, np.empty(shape, dtype), out, x):
            x[...] = rand(rng, shape, dtype) * 3 + 1
            if not constant[1]:
                g[...], b[...] = rand(rng, (c,), dtype), rand(rng, (c,), dtype)
            want = np.empty(shape, dtype)
            kernel(x.copy(), g, b, out=want, epsilon=EPS)
            spec(x, g, b, out=target)
            np.testing.assert_array_equal(target, want)
    strided = np.repeat(_arena(rng, (1, c, 8), dtype), 2, axis=-1)[..., ::2]
    want, got = np.empty(strided.shape, dtype), np.empty(strided.shape, dtype)
    kernel(strided, g, b, out=want, epsilon=EPS)
    spec(strided, g, b, out=got)
    np.testing.assert_array_equal(got, want)
    half = _arena(rng, (1, c, 9), "float16")
    g16, b16 = g.astype(np.float16), b.astype(np.float16)
    want, got = np.empty(half.shape, np.float16), np.empty(half.shape, np.float16)
    kernel(half, g16, b16, out=want, epsilon=EPS)
    spec(half, g16, b16, out=got)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("safe", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_masked_query_rows_redo_the_tensor_whole_and_the_kept_path_goes_there_first(safe, dtype):
    """DeBERTa masks whole query rows with finfo.min: the tensor-shift path finds them under the
    row-sum floor and redoes every row by its own max when a quarter or more are (any, in a small
    tensor); else it redoes those rows alone. A specialized call whose last call redid every row
    checks the row maxes first and, where the redo is sure, makes it in one pass: bit for bit the
    generic kernel's results, call after call, as the masked share changes between calls, with
    all -inf rows (NaN; zeros for safe_softmax) too."""
    name = "nn.safe_softmax" if safe else "nn.softmax"
    fn = get_kernel(name).fn
    call = fn.specialize_attrs({"axis": -1}, (False,))
    rng = np.random.default_rng(17)
    shape = (1, 3, 40, 48)                          # past the small-tensor size
    assert np.prod(shape) > norm._WHOLE_REDO_SIZE
    arena = np.zeros(2 * int(np.prod(shape)), dtype)
    x, out = arena[:arena.size // 2].reshape(shape), arena[arena.size // 2:].reshape(shape)
    lowest = np.finfo(dtype).min
    for share in (0.5, 0.5, 0.5, 0.1, 0.5, 0.0, 0.3, 0.3, 1.0):
        x[...] = rand(rng, shape, dtype) * 4
        masked = rng.random(shape[2]) < share
        x[:, :, masked, :] = lowest
        if share == 0.3:
            x[:, 1, 0, :] = -np.inf                  # an all -inf row
        want = np.empty(shape, dtype)
        with np.errstate(all="ignore"):
            fn(x, out=want, axis=-1)
            call(x, out=out)
        np.testing.assert_array_equal(out, want)
        assert np.isfinite(out).all() or not safe
    rows = x.reshape(-1, shape[-1])
    quarter, one = np.ones(rows.shape[0]), np.ones(rows.shape[0])
    quarter[: rows.shape[0] // 4] = 0.0
    one[0] = 0.0
    assert norm.redoes_whole(rows, quarter) and not norm.redoes_whole(rows, one)
    assert norm.redoes_whole(rows[:10], one[:10])                       # a small tensor: any low row


@pytest.mark.parametrize("shape", [(31, 8), (511, 8), (512, 8), (448, 56), (64, 64), (64, 65), (2048, 3), (4096, 1)])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_row_maxes_by_columns_are_numpys_row_maxes(shape, dtype):
    """Many short rows reduced down columns give numpy's row maxes (a max is exact): masked rows
    of finfo.min, -inf values and all -inf rows, signed zeros (equal values), both sides of the
    size bars."""
    rng = np.random.default_rng(shape[0] * shape[1])
    rows = rand(rng, shape, dtype) * 4
    rows[::7] = np.finfo(dtype).min
    rows[1::5, ::2] = -np.inf
    rows[2] = -np.inf
    rows[3] = 0.0
    rows[3, ::2] = -0.0
    want = np.maximum.reduce(rows, 1, None, None, True)
    got = norm._row_maxes(rows)
    assert got.shape == want.shape == (shape[0], 1) and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
