"""Converters, one module per op family; importing them registers them."""
from . import activation, elementwise, nn, reduce  # noqa: F401  (math ops)
from . import control, shape, tensor  # noqa: F401  (shapes and data movement, If)
from . import algorithm  # noqa: F401  (Einsum, TopK, CumSum, NonZero, OneHot, Trilu, Range, Tile)
from . import image, scatter  # noqa: F401  (Resize/Upsample/Pad, GatherND/ScatterND/ScatterElements)
from . import quantize  # noqa: F401  (quantization)
from . import composite, loss  # noqa: F401  (compositions)
from . import recurrent  # noqa: F401  (RNN, GRU, LSTM)
from . import microsoft  # noqa: F401  (com.microsoft contrib ops)
