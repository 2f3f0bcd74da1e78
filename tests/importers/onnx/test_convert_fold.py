"""MaxPool's Indices output, MaxUnpool and Col2Im (converters/nn.py,
converters/fold.py) against onnxruntime, or onnx's reference where the two
read the spec differently (MaxUnpool with a larger output_shape: the
reference and ONNX's backend test pad the unpooled tensor at the end,
onnxruntime reads the indices as positions in output_shape)."""

from __future__ import annotations

import numpy as np
import pytest

from .helpers import check, i64, one_node, rand


# ---------------------------------------------------------------- MaxPool Indices


@pytest.mark.parametrize("attrs,shape", [
    ({"kernel_shape": [3, 2], "strides": [2, 1]}, (2, 3, 7, 6)),
    ({"kernel_shape": [3, 3], "pads": [1, 0, 2, 1], "strides": [2, 2]}, (1, 2, 9, 8)),
    ({"kernel_shape": [2, 2], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]}, (2, 1, 8, 7)),
    ({"kernel_shape": [2, 2], "storage_order": 1, "pads": [1, 1, 0, 0]}, (2, 3, 5, 4)),
    ({"kernel_shape": [3], "strides": [2]}, (2, 3, 11)),
    ({"kernel_shape": [2, 2, 2], "strides": [1, 2, 2]}, (1, 2, 4, 5, 6)),
])
def test_max_pool_indices(attrs, shape):
    sym = {"x": ["n", *shape[1:]]}
    check("MaxPool", {"x": rand(*shape)}, attrs=attrs, outputs=2, opset=12, sym=sym,
          more=[{"x": rand(1, *shape[1:], seed=1)}, {"x": rand(0, *shape[1:])}])


def test_max_pool_indices_ties_take_the_first_tap():
    x = np.zeros((1, 2, 4, 5), np.float32)
    x[0, 1, 1:3, 1:3] = 1
    check("MaxPool", {"x": x}, attrs={"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}, outputs=2, opset=12)
    check("MaxPool", {"x": rand(1, 2, 5, 5, dtype=np.int8)}, attrs={"kernel_shape": [2, 3]}, outputs=2, opset=12)


# ---------------------------------------------------------------- MaxUnpool


def _pooled(shape, kernel, strides, seed=0):
    """MaxPool's values and indices, the inputs MaxUnpool expects."""
    from .helpers import reference
    feeds = {"x": rand(*shape, seed=seed)}
    model = one_node("MaxPool", feeds, attrs={"kernel_shape": kernel, "strides": strides}, outputs=2, opset=12)
    values, indices = reference(model, feeds, "ort")
    return values, indices


@pytest.mark.parametrize("shape,kernel,strides", [
    ((2, 3, 6, 8), [2, 2], [2, 2]), ((1, 2, 9), [3], [2]), ((1, 1, 4, 6, 4), [2, 3, 2], [2, 3, 2]),
])
def test_max_unpool(shape, kernel, strides):
    values, indices = _pooled(shape, kernel, strides)
    check("MaxUnpool", {"x": values, "i": indices}, attrs={"kernel_shape": kernel, "strides": strides}, opset=11)


def test_max_unpool_output_shape_constant_and_fed():
    """A larger output_shape pads the unpooled (2, 3, 6, 6) at the end."""
    values, indices = _pooled((2, 3, 6, 6), [2, 2], [2, 2])
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    check("MaxUnpool", {"x": values, "i": indices}, consts={"s": i64(2, 3, 7, 9)}, attrs=attrs, opset=11,
          ref="onnx")
    feeds = {"x": values, "i": indices, "s": i64(2, 3, 8, 6)}
    check("MaxUnpool", feeds, attrs=attrs, opset=11, ref="onnx", more=[{**feeds, "s": i64(2, 3, 6, 6)}])


# ---------------------------------------------------------------- Col2Im


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 6], [2, 3], {}),
    ([7, 6], [3, 2], {"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]}),
    ([9], [3], {"strides": [2]}),
    ([3, 4, 5], [1, 2, 3], {"pads": [0, 1, 0, 0, 0, 1]}),
])
def test_col2im(image, block, attrs):
    n = len(image)
    strides, dilations = attrs.get("strides", [1] * n), attrs.get("dilations", [1] * n)
    pads = attrs.get("pads", [0] * (2 * n))
    blocks = [(x + pads[i] + pads[i + n] - dilations[i] * (k - 1) - 1) // strides[i] + 1
              for i, (x, k) in enumerate(zip(image, block))]
    x = rand(2, 3 * int(np.prod(block)), int(np.prod(blocks)))
    check("Col2Im", {"x": x}, consts={"image": i64(*image), "block": i64(*block)}, attrs=attrs, opset=18,
          sym={"x": ["n", x.shape[1], x.shape[2]]}, more=[{"x": rand(1, *x.shape[1:], seed=2)}])
    check("Col2Im", {"x": x, "image": i64(*image), "block": i64(*block)}, attrs=attrs, opset=18)
