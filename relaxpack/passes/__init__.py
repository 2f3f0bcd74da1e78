"""Pass infrastructure and passes (optimize, lower, analyze)."""

from .core.context import PassContext, PassInstrument
from .core.infra import FunctionPass, ModulePass, Pass, PassInfo, Sequential, function_pass, module_pass
from .core.instruments import DumpIR, PassTiming, PrintAfter, WellFormedCheck

__all__ = ["PassContext", "PassInstrument", "FunctionPass", "ModulePass", "Pass", "PassInfo",
           "Sequential", "function_pass", "module_pass", "DumpIR", "PassTiming", "PrintAfter",
           "WellFormedCheck"]
