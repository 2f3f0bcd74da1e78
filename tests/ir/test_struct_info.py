import numpy as np
import pytest

from relaxpack.errors import IRError
from relaxpack.ir.dims import DimAnalyzer, sym
from relaxpack.ir.struct_info import (
    FuncStructInfo, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, TensorStructInfo,
    TupleStructInfo, dtype_name, erase_to_well_defined, is_base_of, unify_struct_info,
)

n, m = sym("n"), sym("m")


def test_tensor_struct_info_is_a_value():
    a = TensorStructInfo((n, 2 * n + n), "float32")
    b = TensorStructInfo((n, 3 * n), "float32")
    assert a == b and hash(a) == hash(b)
    assert a.ndim == 2 and not a.is_static
    assert TensorStructInfo((2, 3), "int64").is_static
    assert a != TensorStructInfo((n, 3 * n), "float16")
    assert a != TensorStructInfo((n, 3 * n), "float32", vdevice="fast")


def test_tensor_ndim_checks():
    assert TensorStructInfo(None, "float32", ndim=3).ndim == 3
    assert TensorStructInfo(None, "float32").ndim == -1
    with pytest.raises(IRError, match="ndim=2 contradicts"):
        TensorStructInfo((1, 2, 3), "float32", ndim=2)
    with pytest.raises(IRError, match="unknown dtype"):
        TensorStructInfo((1,), "float33")


def test_dim_vars():
    sinfo = TupleStructInfo((TensorStructInfo((n, 4), "float32"), ShapeStructInfo((m + 1,)),
                             PrimStructInfo("int64", sym("k"))))
    assert sinfo.dim_vars() == {"n", "m", "k"}


def test_is_base_of():
    exact = TensorStructInfo((n, 4), "float32")
    assert is_base_of(TensorStructInfo(None, "float32", ndim=2), exact)
    assert is_base_of(TensorStructInfo(), exact)
    assert is_base_of(ObjectStructInfo(), exact)
    assert not is_base_of(exact, TensorStructInfo(None, "float32", ndim=2))
    assert not is_base_of(TensorStructInfo((m, 4), "float32"), exact)
    assert not is_base_of(TensorStructInfo(None, "float32", ndim=3), exact)
    assert is_base_of(TupleStructInfo((TensorStructInfo(ndim=2),)), TupleStructInfo((exact,)))
    assert not is_base_of(ShapeStructInfo((n,)), TensorStructInfo((n,), "int64"))


def test_is_base_of_uses_ranges():
    analyzer = DimAnalyzer({"n": (4, 4)})
    assert is_base_of(TensorStructInfo((4,), "float32"), TensorStructInfo((n,), "float32"), analyzer)
    assert not is_base_of(TensorStructInfo((4,), "float32"), TensorStructInfo((n,), "float32"))


def test_func_struct_info_contravariant_params():
    narrow = FuncStructInfo((TensorStructInfo((n,), "float32"),), TensorStructInfo((n,), "float32"))
    wide = FuncStructInfo((TensorStructInfo(None, "float32", ndim=1),), TensorStructInfo((n,), "float32"))
    assert is_base_of(narrow, wide)
    assert not is_base_of(wide, narrow)


def test_unify_and_erase():
    a = TensorStructInfo((n, 4), "float32")
    b = TensorStructInfo((m, 4), "float32")
    assert unify_struct_info(a, a) == a
    assert unify_struct_info(a, b) == TensorStructInfo(None, "float32", ndim=2)
    assert unify_struct_info(a, TensorStructInfo((n, 4), "int32")) == TensorStructInfo((n, 4), None)
    assert unify_struct_info(a, ShapeStructInfo((1,))) == ObjectStructInfo()
    assert erase_to_well_defined(a, frozenset({"n"})) is a
    assert erase_to_well_defined(a, frozenset()) == TensorStructInfo(None, "float32", ndim=2)


def test_dtype_name():
    assert dtype_name(np.float32) == "float32"
    assert dtype_name(np.dtype("bool")) == "bool"
    assert dtype_name(np.dtype("<U3")) == "string"
