"""Converters, one module per op family; importing them registers them."""
from . import activation, elementwise, nn, reduce  # noqa: F401  (math ops)
from . import control, shape, tensor  # noqa: F401  (shapes and data movement, If)
