"""Call a kernel as the bytecode does: with every attribute of its op.

Kernels take their op's attributes as required keywords (the op record holds
the defaults; docs/design-notes.md, Layers): a test that leaves attributes
out gets the op's defaults here.

>>> call_kernel("dyn.topk", x, k, axis=0)                # doctest: +SKIP
"""

from relaxpack.ir.op import get_op_def
from relaxpack.runtime.kernels import KERNELS


def op_attrs(name: str, **attrs) -> dict:
    """Every attribute of op ``name``: ``attrs`` and the op's defaults for the rest (for the
    kernels' internal drivers, such as ``conv_bias``, which take them as the kernel does)."""
    opdef = get_op_def(name)
    opdef.check_attrs(attrs)
    return opdef.full_attrs(attrs)


def call_kernel(name: str, *inputs, **attrs):
    """``KERNELS[name].fn(*inputs, **attrs)`` with the op's defaults for the attributes not given."""
    opdef = get_op_def(name)
    plumbing = {k: attrs.pop(k) for k in ("out", "workspace") if k in attrs}
    opdef.check_attrs(attrs)
    return KERNELS[name].fn(*inputs, **opdef.full_attrs(attrs), **plumbing)
