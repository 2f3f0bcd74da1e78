"""Attention's blocks of scores after a redone one take the row formula (kernels/softmax_blocks.py).

The contract: a call's blocks run the plain softmax kernel until one is redone (a row shifted by
its own max, or a row not finite); the later blocks then run the row formula, which is what a
redone row computes, so a block the plain kernel redoes whole gets the same bits; every block is
within float32 rounding of the float64 softmax; the safe softmax zeroes a fully masked row in any
block; other dtypes and shared buffers keep the plain kernel.
"""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import attention as kernel_module
from relaxpack.runtime.kernels import normalization, softmax_blocks
from relaxpack.runtime.kernels.normalization import _softmax_into


def _softmax64(x):
    with np.errstate(all="ignore"):
        e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def _blocks(rng, spread, count=4, rows=40, keys=300):
    """Blocks of scores; ``spread`` scales them (a wide spread leaves rows far below the max)."""
    return [(rng.standard_normal((rows, keys)) * spread).astype(np.float32) for _ in range(count)]


def _counted(monkeypatch):
    calls = []
    real = softmax_blocks._rowwise_softmax
    monkeypatch.setattr(softmax_blocks, "_rowwise_softmax", lambda *a: (calls.append(1), real(*a))[1])
    return calls


def test_blocks_after_a_redone_one_take_the_row_formula(monkeypatch):
    calls = _counted(monkeypatch)
    soft = softmax_blocks.blocks_softmax(False)
    for scores in _blocks(np.random.default_rng(1), 12.0):
        got, plain = np.empty_like(scores), np.empty_like(scores)
        assert _softmax_into(scores, plain, -1) is normalization.REDONE      # the plain kernel redoes them
        soft(scores, got)
        np.testing.assert_array_equal(got, plain)           # redone whole: the row formula's bits
        np.testing.assert_allclose(got, _softmax64(scores), rtol=2e-6, atol=1e-9)
    assert len(calls) == 3                                  # every block after the first


def test_blocks_that_are_never_redone_keep_the_plain_kernel(monkeypatch):
    calls = _counted(monkeypatch)
    soft = softmax_blocks.blocks_softmax(False)
    for scores in _blocks(np.random.default_rng(2), 1.0):
        got, plain = np.empty_like(scores), np.empty_like(scores)
        soft(scores, got)
        assert _softmax_into(scores, plain, -1) is normalization.DONE
        np.testing.assert_array_equal(got, plain)
    assert not calls


@pytest.mark.parametrize("safe", [False, True])
def test_a_fully_masked_row_after_a_redone_block(safe):
    rng = np.random.default_rng(3)
    first, second = _blocks(rng, 12.0, count=2)
    second[5] = -np.inf
    soft = softmax_blocks.blocks_softmax(safe)
    out = np.empty_like(first)
    soft(first, out)
    soft(second, out)
    assert (out[5] == 0).all() if safe else np.isnan(out[5]).all()
    rest = np.delete(np.arange(len(second)), 5)
    np.testing.assert_allclose(out[rest], _softmax64(second[rest]), rtol=2e-6, atol=1e-9)


def test_other_dtypes_and_shared_buffers_keep_the_plain_kernel(monkeypatch):
    calls = _counted(monkeypatch)
    rng = np.random.default_rng(4)
    soft = softmax_blocks.blocks_softmax(False)
    first, second = _blocks(rng, 12.0, count=2)
    soft(first, np.empty_like(first))
    half = second.astype(np.float16)
    out16 = np.empty_like(half)
    soft(half, out16)
    plain = np.empty_like(half)
    _softmax_into(half, plain, -1)
    np.testing.assert_array_equal(out16, plain)
    shared = second.copy()
    soft(shared, shared)
    np.testing.assert_allclose(shared, _softmax64(second), rtol=2e-6, atol=1e-9)
    assert not calls


@pytest.mark.parametrize("kind", ["softmax", "safe_softmax"])
def test_blocked_attention_with_widely_spread_scores(kind, monkeypatch):
    """Scores whose rows lie far apart (every block redone): the blocked kernel against float64."""
    monkeypatch.setattr(kernel_module, "BLOCK_BYTES", 40 * 300 * 4)
    calls = _counted(monkeypatch)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 160, 16)).astype(np.float32) * 3
    k = rng.standard_normal((2, 16, 300)).astype(np.float32)
    v = rng.standard_normal((2, 300, 8)).astype(np.float32)
    out = np.empty((2, 160, 8), np.float32)
    kernel_module.attention(q, k, v, out=out, lhs_axes=None, rhs_axes=None, v_axes=None, out_axes=None, steps=(),
                            softmax=kind)
    want = _softmax64(q.astype(np.float64) @ k.astype(np.float64)) @ v.astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert calls                                            # later blocks by the row formula
