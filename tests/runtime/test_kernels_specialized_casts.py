"""The per-instruction ``astype`` and ``clip`` (their ``specialize_attrs``) against the kernels
they stand in for, bit for bit: every numeric pair of types of a quantized chain, NaN,
infinities, signed zeros, empty arrays, the quantizers' NaN-saturating clip, inside a VM run
(warnings off) and outside it, and the fallbacks (object arrays, mixed types, open bounds)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from relaxpack.runtime.fpstate import quiet
from relaxpack.runtime.kernels.elementwise import clip
from relaxpack.runtime.kernels.manipulate import astype

SPECIAL = np.array([0.0, -0.0, 1.5, -2.5, 254.6, 255.5, -128.5, 3e9, -3e9, np.inf, -np.inf, np.nan], np.float64)
TYPES = ["float32", "float64", "float16", "int32", "int64", "uint8", "int8", "bool"]


def _values(dtype):
    with np.errstate(all="ignore"):
        return np.concatenate([SPECIAL, np.linspace(-300, 300, 37)]).astype(dtype)


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def _call_without_warnings(call, x, got, in_run: bool) -> None:
    """``call(x, out=got)`` inside a run's silenced floating-point state or outside any run;
    either way no warning may escape (an escaped one fails the test)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if in_run:
            with quiet():
                call(x, out=got)
        else:
            call(x, out=got)


@pytest.mark.parametrize("source", TYPES)
@pytest.mark.parametrize("target", TYPES)
@pytest.mark.parametrize("in_run", [False, True])
def test_astype_matches_the_kernel(source, target, in_run):
    call = astype.specialize_attrs({"dtype": target}, (False,))
    for x in (_values(source), _values(source).reshape(7, 7)[:, ::2], np.zeros((0, 3), source)):
        want = np.empty(x.shape, target)
        with np.errstate(all="ignore"):
            astype(x, out=want, dtype=target)
        got = np.empty(x.shape, target)
        _call_without_warnings(call, x, got, in_run)
        _same(got, want)


def test_astype_falls_back_for_strings():
    call = astype.specialize_attrs({"dtype": "object"}, (False,))
    out = np.empty(3, object)
    call(np.array([1.5, -2.0, 3.0], np.float32), out=out)
    want = np.empty(3, object)
    astype(np.array([1.5, -2.0, 3.0], np.float32), out=want, dtype="object")
    assert out.tolist() == want.tolist()
    back = astype.specialize_attrs({"dtype": "float32"}, (False,))
    got = np.empty(3, np.float32)
    back(np.array(["1.5", "-2", "3"], object), out=got)
    assert got.tolist() == [1.5, -2.0, 3.0]


CLIPS = [dict(min=0.0, max=255.0, saturate_nan=True), dict(min=-128.0, max=127.0, saturate_nan=True),
         dict(min=0.0, max=6.0, saturate_nan=False), dict(min=None, max=1.0, saturate_nan=True),
         dict(min=-1.0, max=None, saturate_nan=False), dict(min=5.0, max=1.0, saturate_nan=False),
         dict(min=None, max=None, saturate_nan=True), dict(min=0.5, max=2.5, saturate_nan=True)]


@pytest.mark.parametrize("attrs", CLIPS, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "uint8"])
@pytest.mark.parametrize("in_run", [False, True])
def test_clip_matches_the_kernel(attrs, dtype, in_run):
    call = clip.specialize_attrs(dict(attrs), (False,))
    for x in (_values(dtype), np.zeros((0, 2), dtype), _values(dtype)[::3]):
        want = np.empty(x.shape, dtype)
        with np.errstate(all="ignore"):
            clip(x, out=want, **attrs)
        got = np.empty(x.shape, dtype)
        _call_without_warnings(call, x, got, in_run)
        _same(got, want)
        again = np.empty(x.shape, dtype)    # the bounds kept per dtype: a second call the same
        call(x, out=again)
        _same(again, want)


def test_clip_of_another_type_falls_back():
    call = clip.specialize_attrs(dict(min=0.0, max=255.0, saturate_nan=True), (False,))
    out = np.empty(3, np.float32)
    call(np.array([-1.0, np.nan, 300.0], np.float64), out=out)
    assert out.tolist() == [0.0, 0.0, 255.0]
    inplace = np.array([-1.0, np.nan, 3.0], np.float32)
    call(inplace, out=inplace)
    assert inplace.tolist() == [0.0, 0.0, 3.0]
