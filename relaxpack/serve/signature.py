"""A served model's inputs and outputs in the protocol's terms, and whether it can batch.

From the archive's entry function: each tensor's name, datatype (``FP32``, ...)
and shape with ``-1`` for a symbolic dim (the metadata endpoint's answer). The
protocol carries tensors only: an archive with a sequence or optional input or
output, a dtype the protocol cannot name, or (format 1) outputs of unrecorded
dtype cannot be served, and says so when it is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InputError, RelaxpackError
from ..runtime.bytecode import ParamInfo
from ..runtime.executable import Executable
from .datatypes import datatype_of
from .errors import RequestError


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    dims: tuple            # ints, and names or expressions (str) for symbolic dims

    @property
    def shape(self) -> list[int]:
        """The shape as the protocol's metadata gives it: -1 for every symbolic dim."""
        return [d if isinstance(d, int) else -1 for d in self.dims]

    def metadata(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": self.shape}


@dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    #: each symbolic dim's allowed values, name -> (lo, hi or None)
    ranges: dict

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    def input(self, name: str) -> TensorSpec:
        return _find(self.inputs, name, "input")

    def output(self, name: str) -> TensorSpec:
        return _find(self.outputs, name, "output")

    def batch_dim(self) -> str | None:
        """The symbolic dim that leads every input and output, if there is one and it appears nowhere
        else in them: the dim along which requests can be batched and results split back."""
        tensors = self.inputs + self.outputs
        if not self.inputs or any(not t.dims for t in tensors):
            return None
        first = tensors[0].dims[0]
        if not isinstance(first, str) or not first.isidentifier():
            return None
        if any(t.dims[0] != first for t in tensors):
            return None
        if any(first in _names(d) for t in tensors for d in t.dims[1:]):
            return None
        return first


def signature_of(exe: Executable, model: str) -> Signature:
    """The protocol's view of ``exe``'s entry function; a RelaxpackError names what cannot be served."""
    main = exe.function("main")
    inputs = tuple(_spec(p, model, "input") for p in main.params)
    outputs = tuple(_spec(r, model, "output") for r in main.output_info())
    ranges = {name: (lo, hi) for name, lo, hi in main.dim_ranges}
    return Signature(inputs, outputs, ranges)


def _spec(info: ParamInfo, model: str, role: str) -> TensorSpec:
    where = f"model {model!r}: {role} {info.name!r}"
    if info.kind != "tensor":
        raise RelaxpackError(f"{where} is a {info.kind}; the Open Inference Protocol carries tensors only")
    if info.dtype is None or info.shape is None:
        raise RelaxpackError(f"{where} has no recorded dtype and shape (an archive of format 1); "
                             f"convert the model again to serve it")
    try:
        datatype = datatype_of(info.dtype)
    except InputError as err:
        raise RelaxpackError(f"{where}: {err}") from None
    return TensorSpec(info.name, datatype, tuple(info.shape))


def _find(specs, name: str, role: str) -> TensorSpec:
    for spec in specs:
        if spec.name == name:
            return spec
    raise RequestError(f"unknown {role} {name!r}; the model's {role}s are {[s.name for s in specs]}")


def _names(dim) -> set[str]:
    """The variable names in a symbolic dim's text (``"seq * 2"`` -> ``{"seq"}``)."""
    if not isinstance(dim, str):
        return set()
    return set(re.findall(r"[A-Za-z_]\w*", dim)) - {"min", "max"}


__all__ = ["Signature", "TensorSpec", "signature_of"]
