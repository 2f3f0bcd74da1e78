"""The ONNX importer: ``from_onnx`` and the converter registry."""

from .importer import from_onnx
from .registry import find_converter, register_converter, registered_converters

__all__ = ["from_onnx", "find_converter", "register_converter", "registered_converters"]
