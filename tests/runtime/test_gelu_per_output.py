"""A fused kernel's GELU bound to its output (``gelu_per_output.gelu_act``, ``_gelu_quad32.gelu_quad32_bound``):
bit for bit the kernel's GELU (``activation.gelu_in_place``) on every kind of ``out``, call after call,
and per thread when one instruction runs in several; ``nn.gelu`` specialized per instruction
(``gelu_per_output.specialize_gelu``), standalone and as a fused chain's step: the kernel's bits."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from relaxpack.runtime.kernels import gelu_per_output
from relaxpack.runtime.kernels._gelu_quad32 import CHUNK
from relaxpack.runtime.kernels.activation import gelu, gelu_in_place
from relaxpack.runtime.kernels.fused_elementwise import fused_elementwise
from relaxpack.runtime.kernels.fused_specialized import specialize

from .test_kernels_fastpaths import gelu_sweep, run_in_threads


def arena_view(shape, dtype="float32") -> np.ndarray:
    """A C-contiguous view into a larger buffer, as the arena hands out."""
    size = int(np.prod(shape))
    return np.empty(size + 3, dtype)[3:].reshape(shape)


def kernel_gelu(values: np.ndarray) -> np.ndarray:
    want = values.copy()
    gelu_in_place(want)
    return want


@pytest.mark.parametrize("shape, dtype", [
    ((32, 30), "float32"),                      # Whisper's first conv: bound
    ((1, 15, 32), "float32"),
    ((6144,), "float32"),                       # the float64 table's old bound: bound either side
    ((6145,), "float32"),
    ((CHUNK,), "float32"),                      # the bound's edge: one chunk
    ((CHUNK + 1,), "float32"),                  # past it: two chunks (not bound)
    ((1,), "float32"),
    ((4, 5), "float64"), ((4, 5), "float16"),   # other dtypes: the kernel's path
])
def test_a_bound_gelu_is_the_kernels_bit_for_bit_call_after_call(shape, dtype):
    act = gelu_per_output.gelu_act()
    sweep = gelu_sweep()
    out = arena_view(shape, dtype)
    rng = np.random.default_rng(1)
    for round_ in range(4):         # the same view with new values each call
        values = np.resize(sweep[rng.permutation(sweep.size)], shape).astype(dtype)
        out[...] = values
        act(out)
        np.testing.assert_array_equal(out, kernel_gelu(values), err_msg=f"round {round_}")
        assert np.array_equal(np.signbit(out), np.signbit(kernel_gelu(values)))


def test_new_arrays_empty_and_strided_outputs_take_the_kernel():
    act = gelu_per_output.gelu_act()
    values = gelu_sweep()[:600].reshape(20, 30)
    fresh = values.copy()                       # owns its memory: not held
    act(fresh)
    np.testing.assert_array_equal(fresh, kernel_gelu(values))
    strided = np.repeat(values, 2, axis=1)[:, ::2]
    act(strided)
    np.testing.assert_array_equal(strided, kernel_gelu(values))
    act(arena_view((0, 5)))                     # nothing to do
    view = arena_view((20, 30))                 # a bound view, then another array, then the view again
    for target in (view, fresh, view):
        target[...] = values
        act(target)
        np.testing.assert_array_equal(target, kernel_gelu(values))


def test_special_values_through_a_bound_gelu():
    edge = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 15.0, -15.0, 1e30, -1e30, 1e-45, -1e-45], np.float32)
    out = arena_view(edge.shape)
    out[...] = edge
    gelu_per_output.gelu_act()(out)
    np.testing.assert_array_equal(out, kernel_gelu(edge))
    assert np.signbit(out[4]) and not np.signbit(out[3])


def test_one_instruction_in_several_threads_uses_each_threads_buffers():
    """A VM's instructions may be bound in one thread and run in others (a pool warmed up in the
    main thread): two views of one size, bound here, run at once in two threads, each its values."""
    acts = [gelu_per_output.gelu_act() for _ in range(2)]
    outs = [arena_view((48, 20)) for _ in range(2)]
    sweep = gelu_sweep()
    for act, out in zip(acts, outs):
        out[...] = 1.0
        act(out)                                # bound in this thread
    values = [np.resize(sweep[k::2], (48, 20)) for k in range(2)]
    failures = []

    def worker(k):
        for _ in range(2000):
            outs[k][...] = values[k]
            acts[k](outs[k])
            if not np.array_equal(outs[k], kernel_gelu(values[k])):
                failures.append(k)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)                 # switch threads often: a shared buffer would show
    try:
        run_in_threads(worker, [0, 1])
    finally:
        sys.setswitchinterval(interval)
    assert not failures


def kernel_of(values: np.ndarray, approximate: str, dtype) -> np.ndarray:
    want = np.empty(values.shape, dtype)
    with np.errstate(all="ignore"):
        gelu(values, out=want, approximate=approximate)
    return want


SPECIAL = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 15.0, -15.0, 1e30, -1e30, 1e-45, -1e-45, 50.0])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape, dtype", [
    ((5, 64), "float32"), ((1, 17, 37), "float32"), ((1,), "float32"), ((), "float32"),
    ((CHUNK,), "float32"), ((CHUNK + 1,), "float32"),            # the exact form's bound: one chunk
    ((4, 5), "float64"), ((4, 5), "float16"), ((0, 3), "float32"),
], ids=str)
def test_specialized_gelu_is_the_kernels_bit_for_bit(approximate, shape, dtype):
    """Arena views call after call (new values in the same arrays), in place, arrays owning their
    memory, another pair and back, special values; dtypes and sizes the specializations leave to
    the kernel (float16, past one chunk, 0-d, empty) too."""
    call = gelu.specialize_attrs({"approximate": approximate}, (False,))
    sweep = np.concatenate([SPECIAL.astype(np.float32), gelu_sweep()])
    rng = np.random.default_rng(3)
    x, out = arena_view(shape, dtype), arena_view(shape, dtype)
    other = arena_view(shape, dtype)
    for round_ in range(3):
        values = np.resize(sweep[rng.permutation(sweep.size)], shape).astype(dtype)
        want = kernel_of(values, approximate, dtype)
        with np.errstate(all="ignore"):
            for a, b in ((x, out), (x, out), (values.copy(), np.empty(shape, dtype)), (x, other), (x, out), (x, x)):
                if a is x:
                    x[...] = values
                call(a, out=b)
                assert b.tobytes() == want.tobytes(), (round_, a is x, b is out)


def test_specialized_gelu_of_mixed_dtypes_and_other_attributes_is_the_kernels():
    values = (gelu_sweep()[:60] * 2).reshape(6, 10)
    for approximate in ("none", "tanh"):
        call = gelu.specialize_attrs({"approximate": approximate}, (False,))
        got = np.empty((6, 10), np.float64)
        call(values, out=got)
        assert got.tobytes() == kernel_of(values, approximate, np.float64).tobytes()
        strided = np.empty((6, 20), np.float32)[:, ::2]
        call(values, out=strided)
        assert np.ascontiguousarray(strided).tobytes() == kernel_of(values, approximate, np.float32).tobytes()
    with pytest.raises(Exception, match="approximate"):
        gelu.specialize_attrs({"approximate": "cubic"}, (False,))(values, out=np.empty_like(values))


def test_a_fused_chains_gelu_step_is_the_generic_kernels():
    """A dynamically quantized MLP's ``gemm * scale -> gelu`` (the GELU a step of the chain, its
    scale a register): the specialized chain calls nn.gelu's specialization; the generic kernel's bits."""
    recipe = (("nn.gemm", (("p", 0), ("p", 1)), (("activation", None),), "float32", True, (False, False)),
              ("multiply", (("s", 0), ("p", 2)), (), "float32", True, (True, False)),
              ("nn.gelu", (("s", 1),), (("approximate", "none"),), "float32", True, (True,)))
    rng = np.random.default_rng(4)
    call = specialize(recipe)
    out = arena_view((5, 64))
    q = arena_view((5, 32))
    w = np.round(rng.standard_normal((32, 64)) * 40).astype(np.float32)
    scale = arena_view(())
    for round_ in range(4):
        q[...] = np.round(rng.standard_normal((5, 32)) * 60)
        scale[...] = 10.0 ** rng.uniform(-5, -3)
        call(q, w, scale, out=out)
        want = np.empty((5, 64), np.float32)
        fused_elementwise(q, w, scale, out=want, recipe=recipe)
        assert out.tobytes() == want.tobytes(), round_
