"""``InferenceSession``: onnxruntime's session API over an archive, numpy only.

Code written for onnxruntime switches with one import::

    import relaxpack.runtime as ort               # was: import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession("model.rpk", options, providers=["CPUExecutionProvider"])
    [x] = session.get_inputs()                    # x.name, x.shape (["batch", 3, 224, 224]), x.type
    probs, = session.run(None, {x.name: image})   # outputs in order; or name the ones wanted

What it reports comes from the archive's signature: inputs as the model
declared them (a dim bound at convert time is an int), outputs as inferred
at convert time, symbolic dims by name and dim expressions as compact text
(``"2*seq"``), where onnxruntime repeats what the ONNX file declares (and
``None`` where it declares nothing). ``intra_op_num_threads`` sets the
BLAS threads around each ``run`` (:mod:`.blas`); the other options
onnxruntime has are accepted where they have a meaning here (see
:class:`SessionOptions`). ``run`` may be called from several threads: each
call takes a VM of its own over the one loaded archive.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import InputError, RelaxpackError
from .archive import load, load_bytes
from .blas import blas_threads
from .bytecode import ParamInfo
from .executable import Executable
from .vm import VirtualMachine

log = logging.getLogger(__name__)

PROVIDERS = ["CPUExecutionProvider"]

#: onnxruntime's element type names where they differ from numpy's
_ORT_TYPES = {"float32": "float", "float64": "double"}


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's optimization levels, accepted for compatibility: an archive was optimized when built."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """onnxruntime's execution modes, accepted for compatibility: relaxpack runs its bytecode in order."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """Options of an :class:`InferenceSession`, named as onnxruntime names them.

    ``intra_op_num_threads``: BLAS threads while this session runs (0, the
    default, leaves them as they are). ``inter_op_num_threads``,
    ``graph_optimization_level`` (the archive was optimized when it was
    built), ``execution_mode``, ``log_severity_level`` and ``enable_profiling``
    are accepted for compatibility and have no effect.

    relaxpack's own: ``max_steps``, ``timeout`` (seconds) and ``max_memory``
    (bytes) bound every ``run`` (the VM's budgets, :mod:`.budget`; None: no
    limit), and ``use_mmap=False`` reads the archive's constants into private
    memory instead of mapping the file (:func:`~relaxpack.runtime.load`).
    """

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.log_severity_level = -1
        self.enable_profiling = False
        self.max_steps: int | None = None
        self.timeout: float | None = None
        self.max_memory: int | None = None
        self.use_mmap = True


class RunOptions:
    """Per-call options, named as onnxruntime's; accepted and, for now, without effect here."""

    def __init__(self):
        self.log_severity_level = 2
        self.run_tag = ""
        self.terminate = False


@dataclass(frozen=True)
class NodeArg:
    """An input or output: ``name``, ``type`` (``"tensor(float)"``, ``"seq(tensor(int64))"``) and
    ``shape`` (ints for static dims, names or expressions as strings for symbolic ones; ``[]`` when
    the rank is unknown, as onnxruntime says)."""

    name: str
    type: str | None
    shape: list

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


@dataclass(frozen=True)
class ModelMetadata:
    """What onnxruntime's ``get_modelmeta()`` reports, from the ONNX model the archive was built from."""

    producer_name: str = ""
    graph_name: str = ""
    domain: str = ""
    description: str = ""
    graph_description: str = ""
    version: int = 2 ** 63 - 1
    custom_metadata_map: dict = field(default_factory=dict)


class InferenceSession:
    """Runs an archive (a path, its bytes, or an :class:`Executable` loaded already) with
    onnxruntime's ``InferenceSession`` API.

    >>> session = InferenceSession("model.rpk")                    # doctest: +SKIP
    >>> session.run(None, {"x": x})                                # doctest: +SKIP
    [array(...)]
    """

    def __init__(self, path_or_bytes, sess_options: SessionOptions | None = None,
                 providers: Sequence | None = None, provider_options: Sequence | None = None, **kwargs):
        self._options = sess_options if sess_options is not None else SessionOptions()
        _check_providers(providers)
        self._exe = _load(path_or_bytes, bool(getattr(self._options, "use_mmap", True)))
        self._main = self._exe.function("main")
        self._inputs = [_node_arg(p) for p in self._main.params]
        self._outputs = [_node_arg(r) for r in self._main.output_info()]
        self._idle: list[VirtualMachine] = [self._new_vm()]   # prepared now: errors show at load time
        self._lock = threading.Lock()

    # ------------------------------------------------------------ what the model is
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        return []   # the archive's constants are part of its program

    def get_modelmeta(self) -> ModelMetadata:
        meta = dict(self._exe.metadata.get("model_metadata") or {})
        meta.setdefault("graph_name", self._exe.metadata.get("source", ""))
        known = ModelMetadata.__dataclass_fields__
        return ModelMetadata(**{k: v for k, v in meta.items() if k in known})

    def get_providers(self) -> list[str]:
        return list(PROVIDERS)

    def get_provider_options(self) -> dict:
        return {name: {} for name in PROVIDERS}

    def get_session_options(self) -> SessionOptions:
        return self._options

    # ------------------------------------------------------------ running
    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: RunOptions | None = None) -> list:
        """The outputs named in ``output_names`` (all of them for ``None``), in that order."""
        names = self._output_names(output_names)
        vm = self._take_vm()
        try:
            with blas_threads(self._options.intra_op_num_threads or None):
                outputs = vm.run(dict(input_feed))
        finally:
            self._give_back(vm)
        return [outputs[name] for name in names]

    def _output_names(self, output_names) -> list[str]:
        every = [o.name for o in self._outputs]
        if output_names is None or len(output_names) == 0:
            return every
        if isinstance(output_names, str):
            raise InputError(f"output_names must be a list of names or None, got the string {output_names!r}")
        unknown = [n for n in output_names if n not in every]
        if unknown:
            raise InputError(f"unknown output(s) {unknown}; the model's outputs are {every}")
        return list(output_names)

    def _new_vm(self) -> VirtualMachine:
        """A VM over the session's archive (the place where session options reach the VM)."""
        o = self._options
        return VirtualMachine(self._exe, max_steps=getattr(o, "max_steps", None), timeout=getattr(o, "timeout", None),
                              max_memory=getattr(o, "max_memory", None))

    def _take_vm(self) -> VirtualMachine:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._new_vm()   # another thread is running: it gets a VM of its own

    def _give_back(self, vm: VirtualMachine) -> None:
        with self._lock:
            self._idle.append(vm)


def get_available_providers() -> list[str]:
    """The execution providers there are: the CPU, as onnxruntime names it."""
    return list(PROVIDERS)


def get_device() -> str:
    return "CPU"


def _load(path_or_bytes, use_mmap: bool = True) -> Executable:
    if isinstance(path_or_bytes, Executable):
        return path_or_bytes   # loaded already (a server reads its signature first)
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return load_bytes(path_or_bytes)
    if isinstance(path_or_bytes, (str, os.PathLike)):
        return load(path_or_bytes, mmap=use_mmap)
    raise RelaxpackError(f"InferenceSession takes an archive's path or bytes (or an Executable), "
                         f"got {type(path_or_bytes).__name__}")


def _check_providers(providers) -> None:
    """CPU is what there is; another provider is named in a warning, as onnxruntime warns of one it lacks."""
    for provider in providers or ():
        name = provider[0] if isinstance(provider, (tuple, list)) else provider
        if name not in PROVIDERS:
            log.warning("provider %r is not available; relaxpack runs on %s", name, PROVIDERS[0])


def _node_arg(info: ParamInfo) -> NodeArg:
    return NodeArg(info.name, _type_text(info), _shape(info))


def _type_text(info: ParamInfo) -> str | None:
    if info.dtype is None:
        return None      # a format 1 archive does not record its outputs' dtypes
    tensor = f"tensor({_ORT_TYPES.get(info.dtype, info.dtype)})"
    if info.kind in ("map", "sequence_map"):     # onnxruntime: "seq(map(int64,tensor(float)))"
        mapping = f"map({_ORT_TYPES.get(info.key_dtype, info.key_dtype)},{tensor})"
        return mapping if info.kind == "map" else f"seq({mapping})"
    return {"tensor": tensor, "sequence": f"seq({tensor})", "optional": f"optional({tensor})",
            "optional_sequence": f"optional(seq({tensor}))"}.get(info.kind, info.kind)


def _shape(info: ParamInfo) -> list:
    if info.kind != "tensor" or info.shape is None:
        return []
    return [d if isinstance(d, int) else d.replace(" ", "") for d in info.shape]


__all__ = ["ExecutionMode", "GraphOptimizationLevel", "InferenceSession", "ModelMetadata", "NodeArg", "RunOptions",
           "SessionOptions", "get_available_providers", "get_device"]
