"""Operator definitions: name, attribute schema, struct-info inference."""

from .registry import REQUIRED, OpDef, get_op_def, make_call, register_op, registered_ops

__all__ = ["REQUIRED", "OpDef", "get_op_def", "make_call", "register_op", "registered_ops"]
