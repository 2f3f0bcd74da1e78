"""relaxpack as an ONNX backend (``onnx.backend.base.Backend``), like
``onnxruntime.backend``: ``prepare`` converts and builds once; the returned
rep runs with positional inputs.

>>> rep = relaxpack.backend.prepare(model)                 # doctest: +SKIP
>>> outputs = rep.run([x])                                  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .vm_build import build
from .errors import InputError
from .importers.onnx import from_onnx
from .runtime import VirtualMachine


class RelaxpackRep(BackendRep):
    """A prepared model: a built executable and its VM."""

    def __init__(self, vm: VirtualMachine, input_names: Sequence[str]):
        self.vm = vm
        self.input_names = list(input_names)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            named = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(self.input_names):
                raise InputError(f"got {len(inputs)} inputs, the model takes {len(self.input_names)} "
                                 f"({', '.join(self.input_names)})")
            named = dict(zip(self.input_names, inputs))
        outputs = self.vm.run(named)
        return tuple(outputs.values())


class RelaxpackBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> RelaxpackRep:
        if not cls.supports_device(device):
            raise InputError(f"relaxpack runs on the CPU only, not on {device!r}")
        mod = from_onnx(model, dims=kwargs.get("dims"))
        exe = build(mod, opt_level=kwargs.get("opt_level", 2))
        return RelaxpackRep(VirtualMachine(exe), exe.input_names())

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        raise NotImplementedError("relaxpack runs whole models; wrap the node in a model")

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")


prepare = RelaxpackBackend.prepare
run_model = RelaxpackBackend.run_model
run_node = RelaxpackBackend.run_node
supports_device = RelaxpackBackend.supports_device
is_compatible = RelaxpackBackend.is_compatible
