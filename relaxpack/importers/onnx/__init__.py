"""The ONNX importer: ``from_onnx``, the converter registry, and the helper
that lets a converter call a function registered in the runtime."""

from .custom import call_registered
from .importer import from_onnx
from .registry import find_converter, register_converter, registered_converters

__all__ = ["call_registered", "from_onnx", "find_converter", "register_converter", "registered_converters"]
