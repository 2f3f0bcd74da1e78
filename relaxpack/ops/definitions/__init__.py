"""The IR's operator definitions, one module per family.

Importing this package registers every op with :mod:`relaxpack.ops.registry`
(the registry imports it lazily on first use). ``common`` holds the helpers
the families share: broadcasting of symbolic shapes, axis normalization,
dtype checks and error messages.
"""

from . import (  # noqa: F401  (imported for their registrations)
    elementwise, index, intrinsics, linalg, manipulate, nn, normalization, reduce, shape,
)
from . import image, scatter  # noqa: F401
from . import algorithm  # noqa: F401
from . import fused  # noqa: F401
from . import fused_elementwise  # noqa: F401
from . import recurrent  # noqa: F401
from . import sampling  # noqa: F401
from . import signal  # noqa: F401
from . import fold  # noqa: F401
from . import strings  # noqa: F401  (string tensors)
from . import ml  # noqa: F401  (ai.onnx.ml)
from . import control  # noqa: F401
from . import sequence  # noqa: F401
from . import detection  # noqa: F401
from . import bitcast  # noqa: F401
from . import cumulative  # noqa: F401
from . import selection  # noqa: F401
from . import random  # noqa: F401
from . import training  # noqa: F401
from . import svm  # noqa: F401  (ai.onnx.ml SVMs)
from . import memory  # noqa: F401  (explicit allocations of a memory plan)
from . import squeeze_excite  # noqa: F401  (SE blocks in one call)
from . import ml_maps  # noqa: F401  (ai.onnx.ml ZipMap, CastMap, DictVectorizer: maps)
from . import dynamic  # noqa: F401  (the data-dependent dyn.* kernels call_packed calls)
from . import quantize  # noqa: F401  (DynamicQuantizeLinear's parameters)
from . import quantized_softmax  # noqa: F401  (com.microsoft QLinearSoftmax's exponentials and sums)
from . import attention  # noqa: F401  (attention's products and softmax in one call, by blocks of query rows)
