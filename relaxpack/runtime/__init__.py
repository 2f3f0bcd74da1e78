"""The deployable runtime: VM, executables and numpy kernels.

It imports numpy and the standard library only (a test checks), so an
archive runs anywhere numpy does::

    from relaxpack.runtime import VirtualMachine
    vm = VirtualMachine(exe)
    outputs = vm.run({"x": x})
"""

from .archive import load
from .executable import Executable, FuncEntry
from .registry import register_func, registered_funcs, unregister_func
from .vm import VirtualMachine

__all__ = ["Executable", "FuncEntry", "VirtualMachine", "load", "register_func", "registered_funcs",
           "unregister_func"]
