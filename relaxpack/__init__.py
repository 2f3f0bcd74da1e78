"""relaxpack: ONNX models to self-contained, numpy-only deployment archives.

The heavy parts (onnx, the pass pipeline) load lazily on first use, so
``import relaxpack`` and ``import relaxpack.runtime`` stay cheap.
"""

from importlib import import_module

from .errors import RelaxpackError

__version__ = "0.1.0"

#: the op libraries the IR imports on its first op look-up (relaxpack.ir.op):
#: the IR names none itself, this root composes the layers
OP_LIBRARIES = ["relaxpack.ops.definitions"]

#: public name -> (module, attribute in it; None for the module itself)
_LAZY = {
    "ir": ("relaxpack.ir", None),
    "ops": ("relaxpack.ops", None),
    "passes": ("relaxpack.passes", None),
    "runtime": ("relaxpack.runtime", None),
    "IRModule": ("relaxpack.ir.module", "IRModule"),
    "BlockBuilder": ("relaxpack.ir.block_builder", "BlockBuilder"),
    "build": ("relaxpack.vm_build", "build"),
    "from_onnx": ("relaxpack.importers.onnx", "from_onnx"),
    "register_converter": ("relaxpack.importers.onnx", "register_converter"),
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'relaxpack' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["RelaxpackError", "__version__", *_LAZY]
