"""The nn.attention kernel against attention computed step by step in numpy: whole and by blocks
of query rows, its specialized callable run after run, broadcast operands and masks, masked rows,
odd sizes, empty dims and both dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import attention as kernel_module
from relaxpack.runtime.kernels import get_kernel

ATTRS = dict(lhs_axes=None, rhs_axes=None, v_axes=None, out_axes=None, steps=(), softmax="softmax")


def _permute(x, axes):
    return x if axes is None else x.transpose(axes)


def reference(q, k, v, *operands, lhs_axes, rhs_axes, v_axes, out_axes, steps, softmax):
    """The unfused steps in float64 (ONNX's softmax: a row of -inf only is NaN; the safe one 0)."""
    scores = _permute(q, lhs_axes).astype(np.float64) @ _permute(k, rhs_axes).astype(np.float64)
    args = (q, k, v, *operands)
    for step in steps:
        if step[0] == "scale":
            scores = scores / step[1] if step[2] else scores * step[1]
        elif step[0] == "add":
            scores = scores + args[step[1]]
        else:
            cond, fill = args[step[1]], args[step[2]]
            scores = np.where(cond, scores, fill) if step[3] else np.where(cond, fill, scores)
    with np.errstate(all="ignore"):
        shifted = np.exp(scores - scores.max(axis=-1, keepdims=True, initial=-np.inf))
        probs = shifted / shifted.sum(axis=-1, keepdims=True)
    if softmax == "safe_softmax":
        probs = np.where(np.isnan(probs), 0.0, probs)
    return _permute(probs @ _permute(v, v_axes).astype(np.float64), out_axes)


def _check(q, k, v, *operands, dtype=np.float32, rtol=2e-5, **changes):
    """The kernel, and its specialized callable with and without a workspace, against
    :func:`reference`; a mask given as one operand is added when no steps are given."""
    attrs = dict(ATTRS, **changes)
    if operands and "steps" not in changes:
        attrs["steps"] = (("add", 3),)
    q, k, v = (x.astype(dtype) for x in (q, k, v))
    operands = tuple(x if x.dtype == bool else x.astype(dtype) for x in operands)
    want = reference(q, k, v, *operands, **attrs)
    plain = np.full(want.shape, np.nan, dtype)
    get_kernel("nn.attention").fn(q, k, v, *operands, out=plain, **attrs)
    np.testing.assert_allclose(plain, want, rtol=rtol, atol=rtol)
    # the specialized callable, with and without a workspace, twice (the second run on kept views)
    call = kernel_module.attention.specialize_attrs(attrs, (False,) * (3 + len(operands)))
    workspace = np.empty(2 * kernel_module.BLOCK_BYTES + 128, np.uint8)
    out = np.full_like(plain, np.nan)
    view = out[...]
    for _ in range(2):
        call(q, k, v, *operands, out=view, workspace=workspace)
        np.testing.assert_array_equal(view, plain)
    call(q, k, v, *operands, out=out)
    np.testing.assert_array_equal(out, plain)
    return plain


def _rng(seed=0):
    return np.random.default_rng(seed)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("blocks", [None, 96, 4096], ids=["whole", "rows", "heads"])
def test_head_split_operands_scale_and_mask(dtype, blocks, monkeypatch):
    """BERT's layout (b, s, heads, d), a (b, 1, 1, s) padding mask, at odd sizes; ``blocks`` bytes
    make part-of-a-row-group blocks or blocks of several heads' whole rows."""
    if blocks is not None:
        monkeypatch.setattr(kernel_module, "BLOCK_BYTES", blocks)
    rng = _rng(1)
    for b, s, heads, d in [(1, 1, 1, 1), (2, 7, 3, 5), (3, 13, 2, 8)]:
        q, k, v = (rng.standard_normal((b, s, heads, d)) for _ in range(3))
        mask = np.where(rng.random((b, 1, 1, s)) < 0.3, -1e4, 0.0)
        _check(q, k, v, mask, dtype=dtype, lhs_axes=(0, 2, 1, 3), rhs_axes=(0, 2, 3, 1), v_axes=(0, 2, 1, 3),
               out_axes=(0, 2, 1, 3), steps=(("scale", 0.35, False), ("add", 3)),
               rtol=2e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("blocks", [None, 64])
def test_broadcast_operands_and_a_mask_that_adds_rows(blocks, monkeypatch):
    """k and v shared by every batch entry, a mask of one head; one query row whose mask has
    five (the scores broadcast to five rows), divided by the scale."""
    if blocks is not None:
        monkeypatch.setattr(kernel_module, "BLOCK_BYTES", blocks)
    rng = _rng(2)
    q, k, v = rng.standard_normal((4, 2, 6, 3)), rng.standard_normal((1, 2, 3, 9)), rng.standard_normal((2, 9, 4))
    _check(q, k, v, rng.standard_normal((4, 1, 6, 9)), steps=(("scale", 2.0, True), ("add", 3)))
    q1 = rng.standard_normal((2, 1, 3))
    _check(q1, rng.standard_normal((2, 3, 7)), rng.standard_normal((2, 7, 4)), rng.standard_normal((2, 5, 7)))


@pytest.mark.parametrize("blocks", [None, 32])
def test_rank_two_operands(blocks, monkeypatch):
    if blocks is not None:
        monkeypatch.setattr(kernel_module, "BLOCK_BYTES", blocks)
    rng = _rng(3)
    _check(rng.standard_normal((11, 4)), rng.standard_normal((4, 6)), rng.standard_normal((6, 3)))


@pytest.mark.parametrize("blocks", [None, 48])
@pytest.mark.parametrize("kind", ["softmax", "safe_softmax"])
def test_fully_masked_rows(kind, blocks, monkeypatch):
    """A row whose every score is -inf: NaN from ONNX's softmax, 0 from torch's safe one."""
    if blocks is not None:
        monkeypatch.setattr(kernel_module, "BLOCK_BYTES", blocks)
    rng = _rng(4)
    q, k, v = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 4, 6)), rng.standard_normal((2, 6, 3))
    mask = np.zeros((2, 5, 6))
    mask[1, 2] = -np.inf
    got = _check(q, k, v, mask, softmax=kind)
    causal = np.tril(np.ones((5, 6), bool))
    causal[3] = False
    selected = _check(q, k, v, causal, np.float32(-np.inf), softmax=kind, steps=(("where", 3, 4, True),))
    assert (np.isnan(selected[:, 3]).all() if kind == "softmax" else (selected[:, 3] == 0).all())
    row = got[1, 2]
    assert (np.isnan(row).all() if kind == "softmax" else (row == 0).all())
    assert np.isfinite(np.delete(got.reshape(10, 3), 7, axis=0)).all()


@pytest.mark.parametrize("blocks", [None, 64])
def test_steps_in_order_with_shared_operands(blocks, monkeypatch):
    """A causal select (the scores in either branch), a bias and a mask added and a scale, in the
    order given; one operand read by two steps."""
    if blocks is not None:
        monkeypatch.setattr(kernel_module, "BLOCK_BYTES", blocks)
    rng = _rng(8)
    q, k, v = rng.standard_normal((2, 3, 7, 4)), rng.standard_normal((2, 3, 4, 7)), rng.standard_normal((2, 3, 7, 5))
    causal, fill = np.tril(np.ones((1, 1, 7, 7), bool)), np.array(-1e9)
    bias, mask = rng.standard_normal((1, 3, 7, 7)), np.where(rng.random((2, 1, 1, 7)) < 0.2, -1e4, 0.0)
    _check(q, k, v, causal, fill, bias, mask,
           steps=(("where", 3, 4, True), ("add", 5), ("scale", 0.5, False), ("add", 6), ("add", 5)))
    _check(q, k, v, causal, bias, steps=(("where", 3, 4, False), ("scale", 3.0, True)), softmax="safe_softmax")


def test_a_result_permuted_so_blas_cannot_write_it():
    """out_axes putting both matrix dims apart from the unit stride: the product goes through a
    compact array, as permute_matmul's does."""
    rng = _rng(5)
    q, k, v = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((2, 3, 4, 6)), rng.standard_normal((2, 3, 6, 7))
    for blocks in (None, 64):
        with pytest.MonkeyPatch.context() as mp:
            if blocks is not None:
                mp.setattr(kernel_module, "BLOCK_BYTES", blocks)
            _check(q, k, v, out_axes=(2, 3, 0, 1))


@pytest.mark.parametrize("shapes", [((2, 0, 4), (2, 4, 3), (2, 3, 5)),      # no queries
                                    ((2, 3, 4), (2, 4, 0), (2, 0, 5)),      # no keys: zeros
                                    ((2, 3, 0), (2, 0, 6), (2, 6, 5)),      # no head dim: uniform
                                    ((0, 3, 4), (0, 4, 6), (0, 6, 5))],     # no batch
                         ids=["queries", "keys", "depth", "batch"])
def test_empty_dims(shapes):
    rng = _rng(6)
    q, k, v = (rng.standard_normal(s) for s in shapes)
    attrs = dict(ATTRS)
    want = reference(q, k, v, **attrs)
    got = np.full(want.shape, np.nan, np.float32)
    get_kernel("nn.attention").fn(*(x.astype(np.float32) for x in (q, k, v)), out=got, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_blocks_cover_every_row_once():
    """The block plan: every (batch, row) once, no block over the byte bound unless a row is,
    and small entries grouped (many windows of few tokens: few blocks)."""
    for batch, n, m in [((), 7, 5), ((3,), 10, 4), ((2, 3), 5, 64), ((2, 4), 3, 1), ((96, 3), 49, 49),
                        ((5, 7, 2), 300, 300), ((), 3000, 300)]:
        axis, group, rows = kernel_module._block_plan(batch, n, m, 4)
        seen, blocks = np.zeros((*batch, n), int), 0
        for rows_at, keys_at in kernel_module._blocks(batch, n, axis, group, rows):
            block = seen[rows_at]
            block += 1
            blocks += 1
            assert block.size * m * 4 <= max(kernel_module.BLOCK_BYTES, m * 4)
            assert rows_at[:-1] == keys_at
        assert (seen == 1).all()
        whole = seen.size * m * 4
        assert blocks <= max(1, 2 * -(-whole // kernel_module.BLOCK_BYTES)) or rows < n, (batch, blocks)


def test_large_scores_run_by_blocks_in_bounded_scratch():
    """Scores of 16 MiB: blocks of at most 1 MiB each (two of them), the result within float32
    rounding of the steps."""
    rng = _rng(7)
    q, k, v = rng.standard_normal((1, 4, 1024, 8)), rng.standard_normal((1, 4, 8, 1024)), rng.standard_normal((1, 4, 1024, 8))
    sizes = []
    blocked = kernel_module._blocked

    def spy(geo, *rest):
        axis, group, rows = kernel_module._block_plan(geo.batch, geo.queries, geo.keys, 4)
        sizes.append(rows * geo.keys * 4 * int(np.prod(geo.batch[axis + 1:])) * (group if axis >= 0 else 1))
        blocked(geo, *rest)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel_module, "_blocked", spy)
        _check(q, k, v, steps=(("scale", 0.3, False),))
    assert sizes and max(sizes) <= kernel_module.BLOCK_BYTES


def test_the_generated_call_reruns_only_what_it_kept():
    """The specialized call's generated fast path: the same arena views run the kept calls
    without the generic path; a new operand of the kept shape too; another shape, or an operand
    the steps do not read, goes the generic way, with the same results."""
    from relaxpack.runtime.kernels import attention_fast
    rng = _rng(9)
    arena = np.zeros(1 << 16, np.uint8)

    def view(shape, at):
        x = np.ndarray(shape, np.float32, arena, at)
        x[...] = rng.standard_normal(shape)
        return x
    q, k, v, mask = view((2, 5, 4), 0), view((2, 4, 5), 512), view((2, 5, 3), 1024), view((2, 5, 5), 1536)
    out, workspace = np.ndarray((2, 5, 3), np.float32, arena, 2048), np.ndarray((1024,), np.uint8, arena, 4096)
    attrs = dict(ATTRS, steps=(("scale", 0.5, False), ("add", 3)))
    slow_calls = []
    made = attention_fast.fast_call

    def spying(steps, first, soft, second, slow):
        return made(steps, first, soft, second, lambda *args: slow_calls.append(1) or slow(*args))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel_module, "fast_call", spying)
        call = kernel_module.attention.specialize_attrs(attrs, (False,) * 4)
    want = reference(q, k, v, mask, **attrs)
    for _ in range(3):
        call(q, k, v, mask, out=out, workspace=workspace)
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    assert len(slow_calls) == 1
    fresh = mask.copy()                         # a model input: its own memory, the kept shape
    call(q, k, v, fresh, out=out, workspace=workspace)
    assert len(slow_calls) == 1
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    call(q, k, v, mask, mask, out=out, workspace=workspace)      # an operand no step reads
    call(q, k, v, mask, mask, out=out, workspace=workspace)
    assert len(slow_calls) == 3
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    # a result and workspace allocated anew every run (a shape the plan cannot hold): the
    # instruction's own scores, the kept calls from the second run on, no result held after it
    import weakref
    for run in range(3):
        fresh_out = np.full((2, 5, 3), np.nan, np.float32)
        call(q, k, v, mask, out=fresh_out, workspace=np.empty(1024, np.uint8))
        np.testing.assert_allclose(fresh_out, want, rtol=2e-5, atol=2e-5)
        gone = weakref.ref(fresh_out)
        del fresh_out
        assert gone() is None
    assert len(slow_calls) == 4


@pytest.mark.parametrize("steps", [(("add", 3 + 8),), (("add", 3),) * 9])
def test_too_many_steps_or_operands_get_no_generated_call(steps):
    from relaxpack.runtime.kernels import attention_fast
    assert attention_fast.fast_call(attention_fast.parse_steps(steps), None, None, None, None) is None


@pytest.mark.parametrize("steps", [(("scale", 0.5),), (("where", 3, 4, 1),), (("add", True),), (("add", 2),),
                                   (("scale", 1, False),), (("mask", 3),), "add"])
def test_steps_of_another_form_are_refused(steps):
    """An archive's malformed steps: a one-line error when the instruction is prepared."""
    from relaxpack.runtime.kernels import attention_fast
    with pytest.raises(ValueError, match="nn.attention"):
        attention_fast.parse_steps(steps)
    with pytest.raises(ValueError, match="nn.attention"):
        kernel_module.attention.specialize_attrs(dict(ATTRS, steps=steps), (False,) * 4)
