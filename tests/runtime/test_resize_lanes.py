"""resize_lanes.py: a nearest upsample whose innermost axis repeats its cells into one machine
integer (a float32 2x's pairs as uint64) is one integer multiply, the repeated cells bit for bit
(NaN payloads, signed zeros), through the kernel and its per-instruction runner; other repeats
keep the gather."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import get_kernel, resize_lanes

KERNEL = get_kernel("image.resize").fn


def attrs_of(axes):
    return dict(axes=axes, scales=None, roi=None, method="nearest_neighbor", coordinate_transformation_mode="asymmetric",
                rounding_method="floor", cubic_alpha=-0.75, cubic_exclude=False, antialias=False,
                extrapolation_value=0.0)


def values(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype, endpoint=True)
    bits = rng.integers(0, 1 << (8 * dtype.itemsize), shape, np.uint64, endpoint=False)
    x = bits.astype(f"u{dtype.itemsize}").view(dtype)        # any bit pattern: NaN payloads, -0, inf
    x.flat[::5] = -0.0
    return x


def repeated(x, axes, factors):
    for a, k in zip(axes, factors):
        x = np.repeat(x, k, axis=a)
    return x


# (shape, axes, factors, whether the innermost axis repeats: lanes serve it where its k cells fit 2, 4 or 8 bytes)
CASES = [
    ((1, 3, 4, 5), (2, 3), (2, 2), True),          # the 2x upsample, channels first
    ((3, 2, 1, 5), (2, 3), (2, 2), True),          # YOLO's batch-3 map of one row
    ((2, 3, 5), (1, 2), (3, 2), True),             # another factor on the outer axis
    ((1, 2, 3, 4), (3,), (2,), True),              # the innermost axis alone
    ((1, 2, 3, 7), (2, 3), (1, 4), True),          # 4 lanes: cells of 16 bits or fewer
    ((1, 1, 1, 1), (2, 3), (2, 2), True),          # one cell
    ((1, 2, 3, 4), (2, 3), (2, 3), True),          # 3 lanes: never a machine integer
    ((1, 2, 3, 4), (2,), (2,), False),             # the innermost axis does not repeat
]
DTYPES = ["float32", "float16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axes, factors, innermost", CASES, ids=str)
def test_lanes_are_the_repeated_cells_bit_for_bit(shape, axes, factors, innermost, dtype, monkeypatch):
    made = []
    real = resize_lanes.runner
    monkeypatch.setattr(resize_lanes, "runner", lambda *a: made.append(real(*a)) or made[-1])
    rng = np.random.default_rng(3)
    x = values(rng, shape, dtype)
    sizes = tuple(shape[a] * k for a, k in zip(axes, factors))
    want = repeated(x, axes, factors)
    got = np.empty_like(want)
    KERNEL(x, sizes, out=got, **attrs_of(axes))                     # the kernel
    assert got.tobytes() == want.tobytes()
    call = KERNEL.specialize_attrs(attrs_of(axes), (False, False))  # the runner, call after call
    out = np.empty(want.size + 1, dtype)[1:].reshape(want.shape)   # a view (an arena's)
    for round_ in range(3):
        if round_:
            x = values(rng, shape, dtype)
        call(x, sizes, out=out)
        assert out.tobytes() == repeated(x, axes, factors).tobytes(), f"round {round_}"
    expected = innermost and factors[-1] * np.dtype(dtype).itemsize in (2, 4, 8)
    assert any(r is not None for r in made) == expected


def test_a_strided_input_and_an_empty_result():
    x = values(np.random.default_rng(4), (1, 2, 4, 12), "float32")[..., ::2]   # not contiguous
    out = np.empty((1, 2, 8, 12), np.float32)
    KERNEL(x, (8, 12), out=out, **attrs_of((2, 3)))
    assert out.tobytes() == repeated(x, (2, 3), (2, 2)).tobytes()
    empty = np.empty((0, 2, 8, 12), np.float32)
    KERNEL(x[:0], (8, 12), out=empty, **attrs_of((2, 3)))


def test_lanes_table():
    assert resize_lanes.lanes(4, 2) == (np.dtype("u4"), np.dtype("u8"), np.uint64(0x100000001))
    assert resize_lanes.lanes(2, 4) == (np.dtype("u2"), np.dtype("u8"), np.uint64(0x0001000100010001))
    assert resize_lanes.lanes(1, 2) == (np.dtype("u1"), np.dtype("u2"), np.uint16(0x0101))
    assert resize_lanes.lanes(1, 8)[2] == np.uint64(0x0101010101010101)
    for itemsize, k in ((4, 3), (8, 2), (4, 1), (2, 3), (4, 4), (1, 16)):
        assert resize_lanes.lanes(itemsize, k) is None
