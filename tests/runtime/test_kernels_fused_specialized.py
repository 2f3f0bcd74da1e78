"""fused_elementwise specialized per instruction (the VM's path): the generic kernel's results on
every recipe, whether the call reuses the last call's arrays, passes new ones, new shapes, an
``out`` that is an input, a planned workspace or none; its errors stay the generic kernel's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from relaxpack.errors import RelaxpackError, ShapeError
from relaxpack.runtime.kernels.fused_elementwise import fused_elementwise, workspace_bound
from relaxpack.runtime.kernels.fused_specialized import specialize

from .test_kernels_fused_elementwise import CASES, CHAIN, P, S, args_for, out_sinfo, step, unfused


def workspace_for(recipe, out, aliasable=()):
    return np.zeros(workspace_bound(recipe, out.size, list(aliasable)) + 64, np.uint8)


def fresh_out(recipe, args):
    sinfo = out_sinfo(recipe, args)
    return np.full(tuple(sinfo.shape), 7, sinfo.dtype)


@pytest.mark.parametrize("with_workspace", [True, False])
@pytest.mark.parametrize("name", CASES)
def test_repeated_calls_on_the_same_arrays_follow_their_values(name, with_workspace):
    recipe, args = args_for(name, np.random.default_rng(1), 5)
    call = specialize(recipe)
    out = fresh_out(recipe, args)
    ws = workspace_for(recipe, out) if with_workspace else None
    args = [a.copy() for a in args]
    for round_ in range(4):
        call(*args, out=out, workspace=ws)
        np.testing.assert_array_equal(out, unfused(recipe, args), err_msg=f"round {round_}")
        for a in args:                      # same objects, new values: the next call must see them
            if a.dtype.kind == "f" and a.size:
                a[...] = np.random.default_rng(round_).standard_normal(a.shape).astype(a.dtype)


@pytest.mark.parametrize("name", CASES)
def test_new_arrays_and_new_shapes_replan(name):
    call = specialize(args_for(name, np.random.default_rng(0), 2)[0])
    sizes = [3, 3, 6, 1, 6, 0, 3] if name != "CONV" else [3, 3, 6, 2, 6, 3]    # a conv needs a window
    for seed, n in enumerate(sizes):
        recipe, args = args_for(name, np.random.default_rng(seed), n)
        out = fresh_out(recipe, args)
        call(*args, out=out, workspace=workspace_for(recipe, out) if seed % 2 else None)
        np.testing.assert_array_equal(out, unfused(recipe, args), err_msg=f"n={n}")


@pytest.mark.parametrize("name", CASES)
def test_out_that_is_an_input_then_not(name):
    recipe, args = args_for(name, np.random.default_rng(7), 5)
    want = unfused(recipe, args)
    call = specialize(recipe)
    for i in [i for i, a in enumerate(args) if a.shape == want.shape and a.dtype == want.dtype]:
        ins = [a.copy() for a in args]
        ws = workspace_for(recipe, want, [i])
        for _ in range(2):
            ins[i][...] = args[i]
            call(*ins, out=ins[i], workspace=ws)
            np.testing.assert_array_equal(ins[i], want)
        out = np.empty_like(want)
        call(*ins[:i], args[i], *ins[i + 1:], out=out, workspace=ws)
        np.testing.assert_array_equal(out, want)


def test_partially_overlapping_input_and_strided_out():
    recipe = (step("exp", [P(0)]), step("add", [S(0), P(1)], inplace=[True, False]))
    call = specialize(recipe)
    for _ in range(2):
        buf = np.arange(12, dtype=np.float32) / 12
        x, y = buf[2:8], buf[:6]
        want = np.exp(x) + y
        call(x, y, out=buf[:6])
        np.testing.assert_allclose(buf[:6], want, rtol=1e-6)
    big = np.zeros((6, 8), np.float32)
    x = np.ones((6, 4), np.float32)
    call(x, np.float32(1), out=big[:, ::2])
    np.testing.assert_array_equal(big[:, ::2], np.exp(x) + 1)
    assert (big[:, 1::2] == 0).all()


def test_bare_ufunc_steps_still_quiet():
    """exp overflowing and log(0) inside a chain warn no more than the unfused kernels."""
    recipe = (step("exp", [P(0)]), step("log", [S(0)]), step("add", [S(1), P(0)], inplace=[True, True]))
    x = np.array([1000.0, -1000.0, 0.0], np.float32)
    out = np.empty_like(x)
    with np.errstate(all="raise"):
        specialize(recipe)(x, out=out)
    np.testing.assert_array_equal(out, [np.inf, -np.inf, 0.0])


@pytest.mark.parametrize("recipe, match", [
    ((), "1 to 1024 steps"),
    ((("exp", (("p", 0),), (), "float32", True),), "op, inputs, attrs"),
    ((step("no_such_op", [P(0)]),), "no_such_op"),
    ((step("exp", [P(3)]),), "reads 4 parameters"),
    ((step("exp", [P(0)], "float64"),), "computes float64"),
])
def test_errors_are_the_generic_kernels(recipe, match):
    x = np.ones((2, 3), np.float32)
    call = specialize(recipe)
    for _ in range(2):
        with pytest.raises(RelaxpackError, match=match):
            call(x, out=np.empty_like(x))
        with pytest.raises(RelaxpackError, match=match):
            fused_elementwise(x, out=np.empty_like(x), recipe=recipe)


def test_a_shape_error_after_a_fast_call():
    recipe = (step("add", [P(0), P(1)], inplace=[True, False]),)
    call = specialize(recipe)
    x, y, out = np.ones((2, 3), np.float32), np.ones(3, np.float32), np.empty((2, 3), np.float32)
    call(x, y, out=out)
    wrong = np.ones((4, 3), np.float32)
    with pytest.raises(ValueError, match="could not be broadcast"):
        fused_elementwise(wrong, y, out=out, recipe=recipe)
    with pytest.raises(ValueError, match="could not be broadcast"):
        call(wrong, y, out=out)
    with pytest.raises(ShapeError, match="out is float64"):
        call(x, y, out=np.empty((2, 3), np.float64))
    call(x, y, out=out)
    np.testing.assert_array_equal(out, 2)


# ---------------------------------------------------------------- new arrays of the kept shapes


def counting_slow(monkeypatch):
    """The number of calls that took the slow path (planning, or the generic kernel)."""
    from relaxpack.runtime.kernels import fused_specialized
    calls = []
    real = fused_specialized._slow

    def slow(*args):
        calls.append(1)
        return real(*args)
    monkeypatch.setattr(fused_specialized, "_slow", slow)
    return calls


@pytest.mark.parametrize("name", CASES)
def test_fresh_inputs_and_outs_of_the_kept_shapes_take_the_fast_path(name, monkeypatch):
    """A model input and a model output are new arrays on every run: the same results as the
    generic kernel, planned once (where the plan is the generated function's)."""
    slow = counting_slow(monkeypatch)
    recipe, args = args_for(name, np.random.default_rng(3), 4)
    call = specialize(recipe)
    ws = workspace_for(recipe, fresh_out(recipe, args))
    for seed in range(5):
        fresh = [a.copy() for a in args_for(name, np.random.default_rng(seed), 4)[1]]
        out = fresh_out(recipe, fresh)
        call(*fresh, out=out, workspace=ws)
        np.testing.assert_array_equal(out, unfused(recipe, fresh), err_msg=f"seed {seed}")
    if name not in ("CONV",):          # the conv's specialized callable keeps its own state
        assert len(slow) <= 1


@pytest.mark.parametrize("name", CASES)
def test_a_fresh_workspace_of_the_kept_size_takes_the_fast_path(name, monkeypatch):
    """A workspace sized by the data is a new array every run (``alloc_tensor``): one of the kept
    size and dtype serves the kept plan, garbage in it or not; another size, or a view of an arena,
    plans again. The generic kernel's results every time."""
    slow = counting_slow(monkeypatch)
    recipe, args = args_for(name, np.random.default_rng(3), 4)
    call = specialize(recipe)
    size = workspace_for(recipe, fresh_out(recipe, args)).size
    arena = np.zeros(size + 64, np.uint8)
    workspaces = [np.full(size, 0xCD, np.uint8) for _ in range(3)] + [np.zeros(size + 64, np.uint8), arena[64:]]
    for k, ws in enumerate(workspaces):
        fresh = [a.copy() for a in args_for(name, np.random.default_rng(k), 4)[1]]
        out = fresh_out(recipe, fresh)
        call(*fresh, out=out, workspace=ws)
        np.testing.assert_array_equal(out, unfused(recipe, fresh), err_msg=f"workspace {k}")
    if name not in ("CONV",):          # the conv's specialized callable keeps its own state
        assert len(slow) <= 3           # at most the first, the larger one and the arena's view


def test_a_new_input_that_overlaps_out_is_not_read_after_out_is_written():
    """Same shapes as the kept call, but the new operand is a view of ``out`` shifted by a row:
    the fast path must not run (its plan writes ``out`` before the last read of ``x``)."""
    recipe = (step("exp", [P(0)]), step("add", [S(0), P(0)]))
    call = specialize(recipe)
    x, out = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), np.empty((3, 4), np.float32)
    call(x, out=out)
    np.testing.assert_allclose(out, np.exp(x) + x, rtol=1e-6)
    buf = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    x2 = buf[1:].copy()
    call(buf[1:], out=buf[:3])                       # x overlaps out partially
    np.testing.assert_allclose(buf[:3], np.exp(x2) + x2, rtol=1e-6)
    y = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    want = np.exp(y) + y
    call(y, out=y)                                   # x is out itself: exp runs into out, then reads x
    np.testing.assert_allclose(y, want, rtol=1e-6)
    z = np.linspace(-2, 0, 12, dtype=np.float32).reshape(3, 4)
    out = np.empty_like(z)
    call(z, out=out)                                 # and back to separate arrays
    np.testing.assert_allclose(out, np.exp(z) + z, rtol=1e-6)


def test_an_exact_alias_the_plan_allows_stays_fast(monkeypatch):
    """``out`` is the first input (the memory planner's in-place reuse) as new objects each call:
    the plan for that alias is the generated function's, so it runs without replanning."""
    slow = counting_slow(monkeypatch)
    recipe = CHAIN
    call = specialize(recipe)
    rng = np.random.default_rng(5)
    bias = rng.standard_normal(4).astype(np.float32)
    for _ in range(4):
        x = rng.standard_normal((3, 4)).astype(np.float32)
        want = unfused(recipe, [x, bias])
        buf = x.copy()
        call(buf.view(), bias, out=buf.view())      # new view objects of one memory
        np.testing.assert_array_equal(buf, want)
    assert len(slow) == 1


@pytest.mark.parametrize("op", ["maximum", "minimum", "add", "subtract", "multiply", "greater"])
def test_binary_ufunc_steps_warn_nothing(op):
    """numpy 2 warns when maximum/minimum get ``out`` positionally: those steps pass it by keyword."""
    import warnings
    result = "bool" if op == "greater" else "float32"
    recipe = (step("exp", [P(0)]), step(op, [S(0), P(1)], result, inplace=[result == "float32", False]))
    call = specialize(recipe)
    x, y = np.linspace(-1, 1, 8, dtype=np.float32), np.float32(1.0) + np.zeros(8, np.float32)
    out = np.empty(8, result)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            call(x, y, out=out)
    np.testing.assert_array_equal(out, getattr(np, op)(np.exp(x), y))


def test_an_alias_with_another_plan_is_kept_for_the_same_arrays(monkeypatch):
    """``out`` is the residual, read after the product (llama's gate: matmul then multiply by an
    input that dies there): that plan differs from the recipe's, and is kept for calls on the
    same arrays instead of going to the generic kernel every time."""
    slow = counting_slow(monkeypatch)
    recipe = (step("matmul", [P(0), P(1)], inplace=[False, False], out_dtype=None),
              step("multiply", [S(0), P(2)]))
    call = specialize(recipe)
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((1, 5, 8)).astype(np.float32), rng.standard_normal((8, 6)).astype(np.float32)
    gate = rng.standard_normal((1, 5, 6)).astype(np.float32)
    ws = workspace_for(recipe, gate, [2])
    x, w, buf = x[...], w[...], gate.copy()[...]      # views, as the VM's arena tensors are
    for k in range(4):
        buf[...] = gate * (k + 1)
        call(x, w, buf, out=buf, workspace=ws)
        np.testing.assert_allclose(buf, (x @ w) * gate * (k + 1), rtol=1e-5)
    assert len(slow) == 1
    out = np.empty_like(gate)                # then apart again: the recipe's own plan
    call(x, w, gate, out=out, workspace=ws)
    np.testing.assert_allclose(out, (x @ w) * gate, rtol=1e-5)


def test_another_plan_takes_new_arrays_apart_from_out_and_replans_for_the_alias(monkeypatch):
    """Attention's scores over the dying mask (T5: ``q @ k^T + bias`` written over the bias):
    ``q`` and ``k`` are views made anew each run. A new array that does not overlap ``out``, in
    place of one that did not either, keeps that plan (the same results, no replanning); a new
    aliased input, a new ``out`` or a new array that overlaps ``out`` plans again."""
    slow = counting_slow(monkeypatch)
    recipe = (step("matmul", [P(0), P(1)], inplace=[False, False], out_dtype=None),
              step("add", [S(0), P(2)]))
    call = specialize(recipe)
    rng = np.random.default_rng(12)
    q, k = rng.standard_normal((2, 5, 4)).astype(np.float32), rng.standard_normal((2, 4, 5)).astype(np.float32)
    bias = rng.standard_normal((2, 5, 5)).astype(np.float32)
    ws = workspace_for(recipe, bias, [2])
    buf = bias.copy()[...]
    for j in range(4):
        buf[...] = bias + j
        qj, kj = (q + j)[...], k[...]                    # new view objects every call
        call(qj, kj, buf, out=buf, workspace=ws)
        np.testing.assert_array_equal(buf, unfused(recipe, [qj, kj, bias + j]))
    assert len(slow) == 1
    other = bias.copy()                                   # a new aliased input (and out): replanned
    call(q, k, other, out=other, workspace=ws)
    np.testing.assert_array_equal(other, unfused(recipe, [q, k, bias]))
    assert len(slow) == 2
    view = other.reshape(-1)[:40].reshape(2, 5, 4)        # a new q inside the same out: replanned
    q2 = view.copy()
    want = unfused(recipe, [q2, k, other])
    call(view, k, other, out=other, workspace=ws)
    np.testing.assert_array_equal(other, want)
    assert len(slow) == 3


def test_arrays_that_own_their_memory_are_not_kept_past_the_call():
    """A model input or output (an array owning its memory, new every run) is not held by the
    kernel after the call: its memory goes back for the next run's allocation."""
    import gc
    import weakref
    call = specialize(CHAIN)
    bias = np.ones(4, np.float32)
    refs = []
    for _ in range(3):
        x, out = np.ones((3, 4), np.float32), np.empty((3, 4), np.float32)
        call(x, bias, out=out)
        np.testing.assert_array_equal(out, np.tanh(np.exp(x) + bias))
        refs += [weakref.ref(x), weakref.ref(out)]
        del x, out
    gc.collect()
    assert all(r() is None for r in refs)


# ---------------------------------------------------------------- a float divide step calls np.divide


def quantize_recipe(dtype):
    return (step("divide", [P(0), P(1)], dtype, inplace=[True, False]), step("round", [S(0)], dtype),
            step("clip", [S(1)], dtype, min=-128.0, max=127.0, saturate_nan=True))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_a_float_divide_step_is_np_divide_quietly(dtype):
    """A fused float divide (a quantizer's ``x / scale``) calls np.divide itself (``float_ufunc``),
    not the kernel with its ``quiet`` per call: the kernel's results bit for bit, division by zero,
    0 / 0, infinities and signed zeros included, with no warning."""
    from relaxpack.runtime.kernels.fused_elementwise import compile_recipe
    from relaxpack.runtime.kernels.fused_specialized import _direct_ufunc
    recipe = quantize_recipe(dtype)
    assert _direct_ufunc(compile_recipe(recipe)[0][0]) == (np.divide, True)
    x = np.array([[1.5, -0.0, 0.0, np.inf, -3.0, 2.5e4, np.nan, 7.0]], dtype)
    for scale in (np.array(0.5, dtype), np.array(0.0, dtype), np.array(-0.0, dtype), np.array(np.inf, dtype)):
        call = specialize(recipe)
        out = np.empty(x.shape, dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            call(x, scale, out=out)
        want = unfused(recipe, (x, scale))
        np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_an_integer_divide_step_keeps_the_kernels_truncation(dtype):
    from relaxpack.runtime.kernels.fused_elementwise import compile_recipe
    from relaxpack.runtime.kernels.fused_specialized import _direct_ufunc
    recipe = (step("divide", [P(0), P(1)], dtype, inplace=[True, False]),)
    assert _direct_ufunc(compile_recipe(recipe)[0][0]) is None
    x = np.array([-7, 7, -1, 0, 5, 9], dtype) if dtype != "uint8" else np.array([7, 9, 0, 255, 5, 1], dtype)
    d = np.array([2, -2, 3, 5, 0, 4], dtype) if dtype != "uint8" else np.array([2, 4, 5, 0, 0, 3], dtype)
    call = specialize(recipe)
    out = np.empty(x.shape, dtype)
    call(x, d, out=out)
    np.testing.assert_array_equal(out, unfused(recipe, (x, d)))
    if dtype != "uint8":
        assert out[0] == -3 and out[1] == -3      # toward zero (floor division would give -4)
