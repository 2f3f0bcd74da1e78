"""Two-operand einsums that are batched matrix products, run by np.matmul (kernels/einsum_matmul.py):
which equations have the form, and the kernel's values against float64 einsum for each kind of
label (batch, contracted, free on either side) in any order, units, and the cases left to numpy."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import einsum_matmul, get_kernel

from .test_kernels_registry import assert_close, rand, run_onnx, tolerance

EINSUM = get_kernel("einsum").fn


def test_maxvits_attention_products_have_the_matmul_form():
    q = (1, 4, 8, 49, 32)
    probs = (1, 4, 8, 49, 49)
    assert einsum_matmul.plan("BGHID,BGHJD->BGHIJ", q, q) == (
        (0, 1, 2, 3, 4), (32, 49, 32), (0, 1, 2, 4, 3), (32, 32, 49), (1, 4, 8, 49, 49), (0, 1, 2, 3, 4))
    assert einsum_matmul.plan("BGHIJ,BGHJD->BGHID", probs, q) is not None


@pytest.mark.parametrize("equation, lhs, rhs", [
    ("...ij,...jk->...ik", (2, 3, 4), (2, 4, 5)),       # an ellipsis
    ("ii,ij->j", (3, 3), (3, 4)),                        # a label repeated in an operand
    ("ij,jk->k", (3, 4), (4, 5)),                        # i summed in one operand only
    ("ij,jk->ik", (3, 4), (1, 5)),                       # j: 4 against 1 (numpy's rules)
    ("ij,jk", (3, 4), (4, 5)),                           # an implicit result
])
def test_equations_without_the_form_keep_numpys_einsum(equation, lhs, rhs):
    assert einsum_matmul.plan(equation, lhs, rhs) is None


CASES = [
    ("bij,bjk->bik", (3, 4, 5), (3, 5, 6)),
    ("BGHID,BGHJD->BGHIJ", (2, 3, 2, 7, 8), (2, 3, 2, 9, 8)),
    ("BGHIJ,BGHJD->BGHID", (2, 3, 2, 7, 9), (2, 3, 2, 9, 8)),
    ("bqhd,bkhd->bhqk", (2, 5, 3, 4), (2, 6, 3, 4)),      # batch labels not leading, the result permuted
    ("ij,kj->ki", (4, 6), (5, 6)),
    ("ab,ab->a", (4, 6), (4, 6)),                         # no free label: rows of dot products
    ("i,i->", (7,), (7,)),
    ("i,j->ij", (3,), (4,)),                              # nothing contracted: an outer product
    ("bij,jk->bki", (2, 3, 4), (4, 5)),
    ("xyz,zw->wyx", (2, 1, 3), (3, 1)),                   # unit dims
    ("bij,bjk->bik", (0, 4, 5), (0, 5, 6)),               # an empty batch
]


@pytest.mark.parametrize("equation, lhs, rhs", CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_form_against_float64_einsum(equation, lhs, rhs, dtype, monkeypatch):
    rng = np.random.default_rng(len(equation))
    a, b = rand(rng, lhs, dtype), rand(rng, rhs, dtype)
    want = np.einsum(equation, a.astype(np.float64), b.astype(np.float64))
    out = np.full(want.shape, np.nan, dtype)
    called = []
    monkeypatch.setattr(np, "einsum", lambda *args, **kwargs: called.append(1))
    EINSUM([a, b], out=out, equation=equation)
    monkeypatch.undo()
    assert not called                                   # numpy's einsum did not run
    assert_close(out, want.astype(dtype), **tolerance(dtype))


@pytest.mark.parametrize("dtype", ["float16", "int32"])
def test_other_dtypes_keep_numpys_einsum(dtype):
    rng = np.random.default_rng(1)
    a, b = rand(rng, (2, 3, 4), dtype), rand(rng, (2, 4, 5), dtype)
    out = np.empty((2, 3, 5), dtype)
    EINSUM([a, b], out=out, equation="bij,bjk->bik")
    want, = run_onnx("Einsum", [a, b], dict(equation="bij,bjk->bik"))
    assert_close(out, want, **(dict(rtol=5e-3, atol=5e-3) if dtype == "float16" else {}))


def test_an_out_that_is_an_operand():
    """The product is made before it is written: an ``out`` sharing an operand's memory is right."""
    rng = np.random.default_rng(2)
    a, b = rand(rng, (3, 4, 4), "float32"), rand(rng, (3, 4, 4), "float32")
    want = np.einsum("bij,bjk->bik", a, b)
    EINSUM([a, b], out=a, equation="bij,bjk->bik")
    assert_close(a, want, **tolerance(np.float32))
