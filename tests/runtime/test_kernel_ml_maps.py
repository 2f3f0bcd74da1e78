"""DictVectorizer's kernel (numbers by one ``fromiter``) against the plain formula, one array
of the values looked up in vocabulary order: the same dtype, values and bits for maps as
``as_map_input`` makes them (numpy scalars of the map's dtype) and as ``vm[name](...)`` may pass
them (Python numbers), missing keys, keys outside the vocabulary, empty maps and vocabularies,
values the output dtype rounds."""

import numpy as np
import pytest

from relaxpack.runtime.dtypes import numpy_dtype
from relaxpack.runtime.kernels.ml_maps import dict_vectorizer
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
