"""DictVectorizer's kernel (numbers by one ``fromiter``) against the plain formula, one array
of the values looked up in vocabulary order: the same dtype, values and bits for maps as
``as_map_input`` makes them (numpy scalars of the map's dtype) and as ``vm[name](...)`` may pass
them (Python numbers), missing keys, keys outside the vocabulary, empty maps and vocabularies,
values the output dtype rounds. ZipMap's rows by a dict display against ``dict(zip(...))``."""

import numpy as np
import pytest

from relaxpack.errors import ShapeError
from relaxpack.runtime.dtypes import numpy_dtype
from relaxpack.runtime.kernels.ml_maps import DISPLAY_MAX_LABELS, dict_vectorizer, zip_map
from relaxpack.runtime.maps import as_map_input


def _plain(m, vocabulary, dtype):
    empty = "" if dtype == "string" else 0
    return np.array([[m.get(k, empty) for k in vocabulary]], dtype=numpy_dtype(dtype)).reshape(1, len(vocabulary))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "string"])
@pytest.mark.parametrize("map_dtype", ["float32", "float64", "int64"])
def test_dict_vectorizer_as_the_plain_formula(dtype, map_dtype):
    rng = np.random.default_rng(0)
    vocabulary = tuple(f"f{i}" for i in range(7))
    for present in (0, 1, 4, 7):
        values = rng.integers(-2 ** 40, 2 ** 40, present) if map_dtype == "int64" else \
            rng.standard_normal(present) * 1e5
        raw = {f"f{i}": v.item() for i, v in zip(rng.permutation(9)[:present], values)} | {"zz": 1.0}
        for m in (raw, as_map_input(raw, "m", "map", "string", map_dtype)):
            if dtype == "string":
                m = {k: str(v) for k, v in m.items()}
            for vocab in (vocabulary, ()):
                got, want = dict_vectorizer(m, vocabulary=vocab, dtype=dtype), _plain(m, vocab, dtype)
                assert got.dtype == want.dtype and got.shape == want.shape == (1, len(vocab))
                if dtype == "string":
                    assert got.tolist() == want.tolist()
                else:
                    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize("width", [0, 1, 2, 3, DISPLAY_MAX_LABELS, DISPLAY_MAX_LABELS + 1])
@pytest.mark.parametrize("kind", ["int", "str", "repeated"])
def test_zip_map_rows_as_dict_of_zip(width, kind):
    """ZipMap's rows (a dict display up to DISPLAY_MAX_LABELS labels, dict(zip) beyond) are
    dict(zip(labels, row)): the same keys in the same order, a repeated label's last value at its
    first place, Python floats; 0, 1 and 7 rows, and a 1-D input as one row."""
    labels = tuple(range(width)) if kind == "int" else tuple(f"c{i}" for i in range(width))
    if kind == "repeated" and width > 1:
        labels = labels[:-1] + labels[:1]
    rng = np.random.default_rng(width)
    for rows in (0, 1, 7):
        x = rng.standard_normal((rows, width)).astype(np.float32)
        got = zip_map(x, labels=labels)
        want = [dict(zip(labels, row)) for row in x.tolist()]
        assert [list(d.items()) for d in got] == [list(d.items()) for d in want]
        assert all(type(v) is float for d in got for v in d.values())
    one = rng.standard_normal(width).astype(np.float32)
    assert [list(d.items()) for d in zip_map(one, labels=labels)] == [list(dict(zip(labels, one.tolist())).items())]


class _Sub(np.ndarray):
    """An ndarray subclass (not the exact type the fast path takes)."""


@pytest.mark.parametrize("width", [1, 3, DISPLAY_MAX_LABELS, DISPLAY_MAX_LABELS + 1])
def test_zip_map_per_instruction_as_the_plain_call(width):
    """The specialized ZipMap (a 2-D ndarray of as many columns as labels straight to the row
    dicts) gives zip_map's dicts, in PlainMaps, at 0, 1 and 7 rows, float32/float64 rows, repeated
    labels; a 1-D input, a float subclass array and a wrong column count take zip_map (the same
    error)."""
    for labels in (tuple(range(width)), tuple(f"c{i}" for i in range(width - 1)) + ("c0",)):
        call = zip_map.specialize_attrs({"labels": labels}, (False,))
        rng = np.random.default_rng(width)
        for rows in (0, 1, 7):
            for dtype in (np.float32, np.float64):
                x = rng.standard_normal((rows, width)).astype(dtype)
                got, want = call(x), zip_map(x, labels=labels)
                assert type(got) is type(want)
                assert [list(d.items()) for d in got] == [list(d.items()) for d in want]
                assert all(type(v) is float for d in got for v in d.values())
        one = rng.standard_normal(width).astype(np.float32)
        assert [list(d.items()) for d in call(one)] == [list(d.items()) for d in zip_map(one, labels=labels)]
        sub = rng.standard_normal((2, width)).view(_Sub)
        assert [list(d.items()) for d in call(sub)] == [list(d.items()) for d in zip_map(sub, labels=labels)]
        with pytest.raises(ShapeError, match="columns for"):
            call(np.zeros((1, width + 1), np.float32))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "string"])
def test_dict_vectorizer_per_instruction_as_the_plain_call(dtype):
    """The specialized DictVectorizer (dtype and length found once) gives dict_vectorizer's array,
    bit for bit: canonical and plain maps, missing and unknown keys, empty maps and vocabularies."""
    rng = np.random.default_rng(1)
    for size in (0, 1, 7):
        vocabulary = tuple(f"f{i}" for i in range(size))
        call = dict_vectorizer.specialize_attrs({"vocabulary": vocabulary, "dtype": dtype}, (False,))
        for present in (0, 1, 5):
            raw = {f"f{i}": v.item() for i, v in zip(rng.permutation(9)[:present], rng.standard_normal(present) * 1e5)}
            for m in (raw | {"zz": 1.0}, as_map_input(raw, "m", "map", "string", "float32")):
                got, want = call(m), dict_vectorizer(m, vocabulary=vocabulary, dtype=dtype)
                assert got.dtype == want.dtype and got.shape == want.shape == (1, size)
                if dtype == "string":
                    assert got.tolist() == want.tolist()
                else:
                    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
