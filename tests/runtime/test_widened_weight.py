"""A float16 or bfloat16 weight kept only as panels (kernels/widened_weight.py, gemm_panels.kept_into).

The contract: a bound low-float weight's product is the generic kernel's bits at every call; its
float32 copy is dropped once the panels hold it, made again by the first call the panels do not
take and kept from then on; the mapped weight's pages are given back once widened. The panels are
forced on here, so the contract is checked on any CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import gemm_panels, get_kernel, widened_weight
from relaxpack.runtime.kernels.linalg import _specialize_matmul


@pytest.fixture
def panels_on(monkeypatch):
    monkeypatch.setattr(gemm_panels, "available", lambda: True)
    monkeypatch.setattr(gemm_panels, "get_blas_threads", lambda: 1)


def _generic(lhs, rhs, out_dtype=None):
    out = np.empty(np.broadcast_shapes(lhs.shape[:-2], rhs.shape[:-2]) + lhs.shape[-2:-1] + rhs.shape[-1:],
                   lhs.dtype)
    get_kernel("matmul").fn(lhs, rhs, out=out, out_dtype=out_dtype)
    return out


def _specialized(rhs):
    """The specialized call of a product by the bound ``rhs``, and its WidenedWeight once made."""
    call = _specialize_matmul({"out_dtype": None}, (False, True))
    cells = dict(zip(call.__code__.co_freevars, call.__closure__))
    return call, lambda: cells["kept"].cell_contents[1]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("rhs_shape,lhs_shapes", [
    ((768, 389), [(16, 768), (2, 9, 768), (1, 768), (16, 768)]),
    ((3, 1, 256, 640), [(1, 17, 256), (1, 1, 256), (1, 17, 256)]),     # MergeProjections' stack
])
def test_the_copy_is_dropped_once_packed_and_kept_once_a_call_needs_it(panels_on, monkeypatch, dtype, rhs_shape,
                                                                        lhs_shapes):
    from relaxpack.runtime.dtypes import numpy_dtype
    low = numpy_dtype(dtype)
    packs = []
    real = gemm_panels.packed
    monkeypatch.setattr(gemm_panels, "packed", lambda rhs, width: (packs.append(width), real(rhs, width))[1])
    rng = np.random.default_rng(3)
    rhs = rng.standard_normal(rhs_shape).astype(np.float32).astype(low)
    call, weight = _specialized(rhs)
    needed = False
    for shape in lhs_shapes:
        lhs = rng.standard_normal(shape).astype(np.float32).astype(low)
        expected = _generic(lhs, rhs)
        out = np.empty_like(expected)
        call(lhs, rhs, out=out)
        np.testing.assert_array_equal(out, expected)
        needed = needed or shape[-2] == 1        # one row: a GEMV, not the panels
        assert (weight().wide is not None) == needed and weight().needed == needed
    assert len(packs) == int(np.prod(rhs_shape[:-2]))                 # packed once


def test_a_weight_the_panels_never_take_keeps_its_copy(panels_on):
    rng = np.random.default_rng(4)
    rhs = rng.standard_normal((768, 389)).astype(np.float16)
    call, weight = _specialized(rhs)
    lhs = rng.standard_normal((1, 768)).astype(np.float16)
    for _ in range(2):
        out = np.empty((1, 389), np.float16)
        call(lhs, rhs, out=out)
        np.testing.assert_array_equal(out, _generic(lhs, rhs))
    assert weight().wide is not None and weight().needed


def test_widening_gives_back_the_mapped_pages(panels_on, monkeypatch):
    released = []
    monkeypatch.setattr(widened_weight, "release", lambda a: released.append(a))
    rng = np.random.default_rng(5)
    rhs = rng.standard_normal((768, 389)).astype(np.float16)
    weight = widened_weight.WidenedWeight(rhs)
    assert weight.widened().dtype == np.float32 and released == [rhs]
    weight.widened()
    assert released == [rhs]                                            # widened once


def test_kept_into_reads_only_its_own_panels(panels_on):
    rng = np.random.default_rng(6)
    rhs = rng.standard_normal((768, 389)).astype(np.float32)
    kept, key = [None], object()
    lhs = rng.standard_normal((16, 768)).astype(np.float32)
    out = np.empty((16, 389), np.float32)
    assert not gemm_panels.kept_into(lhs, out, kept, key, rhs.shape)            # nothing packed yet
    assert gemm_panels.matmul_into(lhs, rhs, out, kept, key=key)
    expected = out.copy()
    out[...] = 0
    assert gemm_panels.kept_into(lhs, out, kept, key, rhs.shape)
    np.testing.assert_array_equal(out, expected)
    assert not gemm_panels.kept_into(lhs, out, kept, object(), rhs.shape)       # another owner
    assert not gemm_panels.kept_into(lhs, out, kept, key, (768, 390))            # another shape
    assert not gemm_panels.kept_into(lhs, np.empty((16, 388), np.float32), kept, key, rhs.shape)
    assert not gemm_panels.kept_into(lhs[:1], out[:1], kept, key, rhs.shape)     # one row: no plan


def test_float16_rows_by_a_float32_weight_copy_nothing(panels_on, monkeypatch):
    """A float16 model's products whose weights were widened at import (WidenFloat16Regions) take
    the low-float branch for their float16 rows: the float32 weight is read as it is, never copied."""
    released = []
    monkeypatch.setattr(widened_weight, "release", lambda a: released.append(a))
    rng = np.random.default_rng(8)
    rhs = rng.standard_normal((768, 389)).astype(np.float32)
    call, weight = _specialized(rhs)
    for shape in [(1, 768), (16, 768), (1, 768)]:
        lhs = rng.standard_normal(shape).astype(np.float16)
        expected = _generic(lhs, rhs)
        out = np.empty_like(expected)
        call(lhs, rhs, out=out)
        np.testing.assert_array_equal(out, expected)
        assert weight().wide is rhs
    assert not released
