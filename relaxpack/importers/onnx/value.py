"""Values flowing through the importer.

Each ONNX value name maps to a :class:`Value`: its IR expression and struct
info, plus what the importer knows of its contents, so that shape
computations stay symbolic: a ``Shape`` output is a 1-D int64 value whose
``sym`` holds the dims (``(batch, seq, 64)``), and ``Gather``/``Concat``/
arithmetic on it compute new ``sym`` contents at import time. The IR tensor
is only made (``ctx.expr``) if a real op consumes the value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.dims import Dim
from ...ir.expr import Expr
from ...ir.struct_info import StructInfo, TensorStructInfo


@dataclass
class Value:
    """An imported value. At least one of ``expr``, ``const``, ``sym``, ``float_of`` is set."""

    sinfo: StructInfo
    expr: Expr | None = None
    const: np.ndarray | None = None      # known contents
    sym: tuple[Dim, ...] | None = None   # known symbolic contents of a 0-d/1-d int tensor
    length: int | None = None            # a sequence's number of elements, when known at import time
    shadow: tuple[Dim, ...] | None = None  # contents as dim variables bound only when lifted (lift.py)
    float_of: tuple[Dim, ...] | None = None  # a float tensor's contents are these ints rounded (a Cast of a shape)

    @property
    def shape(self):
        return self.sinfo.shape if isinstance(self.sinfo, TensorStructInfo) else None

    @property
    def ndim(self) -> int:
        return self.sinfo.ndim if isinstance(self.sinfo, TensorStructInfo) else -1

    @property
    def dtype(self) -> str | None:
        return self.sinfo.dtype if isinstance(self.sinfo, TensorStructInfo) else None

    @property
    def is_const(self) -> bool:
        return self.const is not None

    def int_values(self) -> tuple[Dim, ...] | None:
        """The contents as dims when known (constant ints or symbolic), flattened."""
        if self.sym is not None:
            return self.sym
        if self.const is not None and self.const.dtype.kind in "iub":
            return tuple(int(v) for v in self.const.reshape(-1))
        return None
