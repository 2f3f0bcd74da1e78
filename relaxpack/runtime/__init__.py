"""The deployable runtime: VM, executables, numpy kernels, and an onnxruntime-shaped session.

It imports numpy and the standard library only (a test checks), so an
archive runs anywhere numpy does::

    from relaxpack.runtime import InferenceSession     # onnxruntime's API
    session = InferenceSession("model.rpk")
    outputs = session.run(None, {"x": x})

    from relaxpack.runtime import VirtualMachine, load  # relaxpack's own
    vm = VirtualMachine(load("model.rpk"))
    outputs = vm.run({"x": x})
"""

from .numpy_version import check_numpy

check_numpy()           # first: nothing below is imported on a numpy its kernels do not support

from .archive import load, load_bytes
from .blas import blas_threads, get_blas_threads, set_blas_threads, set_weight_panels
from .executable import Executable, FuncEntry
from .registry import register_func, registered_funcs, unregister_func
from .session import (
    ExecutionMode, GraphOptimizationLevel, InferenceSession, ModelMetadata, NodeArg, RunOptions, SessionOptions,
    get_available_providers, get_device,
)
from .vm import VirtualMachine

__all__ = ["ExecutionMode", "Executable", "FuncEntry", "GraphOptimizationLevel", "InferenceSession", "ModelMetadata", "NodeArg", "RunOptions", "SessionOptions",
           "VirtualMachine", "blas_threads", "get_available_providers", "get_blas_threads", "get_device", "load",
           "load_bytes", "register_func", "registered_funcs", "set_blas_threads", "set_weight_panels",
           "unregister_func"]
