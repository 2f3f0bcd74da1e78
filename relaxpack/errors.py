"""The errors a user can cause.

Every one of them is a :class:`RelaxpackError`, so a caller (or the CLI) can
catch one type and print one line. Subclasses say which kind of thing is at
fault; the message names the thing.
"""


class RelaxpackError(Exception):
    """Base of every error a user of relaxpack can cause."""


class DimError(RelaxpackError):
    """A symbolic dimension expression is invalid or cannot be evaluated."""


class ShapeError(RelaxpackError):
    """Shapes or dtypes of an operation's operands do not fit together."""


class UnprovenDimsError(ShapeError):
    """An op needs two dims equal and the algebra can neither prove nor refute it.

    ``lhs`` and ``rhs`` are the two dims. A strict build (the passes) reports
    it as a ShapeError; the ONNX importer assumes the relation instead: it
    ``match_cast``s an operand to a representative dim, a check the runtime
    evaluates (ir/gradual.py)."""

    def __init__(self, message: str, lhs=None, rhs=None):
        super().__init__(message)
        self.lhs, self.rhs = lhs, rhs


class IRError(RelaxpackError):
    """An IR program is malformed (well-formedness, parsing, building)."""


class ParseError(IRError):
    """The text form of an IR program cannot be read."""


class UnsupportedOpError(RelaxpackError):
    """An operator (or an attribute value of one) is not supported."""


class PassError(RelaxpackError):
    """A pass failed or left the module malformed."""


class InputError(RelaxpackError):
    """A runtime input has a wrong name, dtype, rank or dimension."""


class ArchiveError(RelaxpackError):
    """A deployment archive is malformed or unsupported."""


class ExecutionError(RelaxpackError):
    """A kernel or VM builtin failed while running a program."""


class BudgetError(ExecutionError):
    """A run went past a budget its caller set (instructions, time or memory)."""


class MissingFunctionError(ArchiveError):
    """An archive calls functions that are not registered in this process."""


class ModelError(RelaxpackError):
    """An ONNX model is malformed: not a model at all, or missing what every model needs."""


class OutputError(RelaxpackError):
    """An output file cannot be written where asked: it is an input, or not a regular file."""


class NumpyTooOld(RelaxpackError, ImportError):
    """The installed numpy is older than the one the runtime needs (``import relaxpack.runtime`` raises it)."""
