"""Pass infrastructure and passes (optimize, lower, analyze)."""

from .context import PassContext, PassInstrument
from .infra import FunctionPass, ModulePass, Pass, PassInfo, Sequential, function_pass, module_pass
from .instruments import DumpIR, PassTiming, PrintAfter, WellFormedCheck

__all__ = ["PassContext", "PassInstrument", "FunctionPass", "ModulePass", "Pass", "PassInfo",
           "Sequential", "function_pass", "module_pass", "DumpIR", "PassTiming", "PrintAfter",
           "WellFormedCheck"]
