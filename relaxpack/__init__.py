"""relaxpack: ONNX models to self-contained, numpy-only deployment archives.

The heavy parts (onnx, the pass pipeline) load lazily on first use, so
``import relaxpack`` and ``import relaxpack.runtime`` stay cheap.
"""

from importlib import import_module

from .errors import RelaxpackError

__version__ = "0.1.0"

_LAZY = {
    "ir": "relaxpack.ir",
    "ops": "relaxpack.ops",
    "passes": "relaxpack.passes",
    "runtime": "relaxpack.runtime",
    "IRModule": "relaxpack.ir.module",
    "BlockBuilder": "relaxpack.ir.block_builder",
    "build": "relaxpack.build",
}


def __getattr__(name):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'relaxpack' has no attribute {name!r}")
    module = import_module(target)
    value = module if target.rsplit(".", 1)[-1] == name else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["RelaxpackError", "__version__", *_LAZY]
