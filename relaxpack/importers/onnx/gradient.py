"""Reverse-mode automatic differentiation for ONNX's Gradient op
(ai.onnx.preview.training), done at import time.

``Gradient(xs=["a", "b"], y="d")`` outputs dd/da and dd/db: the gradient of
the sum of ``y``'s elements (a vector-Jacobian product seeded with ones)
with respect to each ``x``, through the forward nodes of the same graph
that compute ``y`` from the xs. The xs and zs are the independent
variables: differentiation stops at them, and every other value that does
not depend on an x is a constant.

The backward pass is written in ONNX's own vocabulary: each rule emits ONNX
nodes (at opset 18) that the ordinary converters turn into IR, in a scope of
their own that sees the forward values. So the gradients stay symbolic in
shape like everything else, and the forward values they read are the
importer's own, shared with the forward outputs. Undoing a broadcast (the
gradient of a broadcast operand is summed over the broadcast axes) is the
IR op ``collapse_sum_like``, decided at run time when the shapes are not
known at import::

    c = Add(a, b); d = Mul(c, a)        dd/dc = 1 * ones        (seed)
    Gradient(xs=[a, b], y=d)      ->    dd/da = c * seed + dd/dc * a ... summed to a's shape

An op on the path from the xs to ``y`` without a rule fails with an
UnsupportedOpError naming it.
"""

from __future__ import annotations

import itertools
from typing import Callable

import numpy as np
from onnx import helper

from ...errors import RelaxpackError, UnsupportedOpError
from ...ops.registry import make_call
from ...runtime.dtypes import numpy_dtype
from .value import Value

DOMAIN = "ai.onnx.preview.training"
#: the default-domain opset the backward nodes are spelled for (ReduceSum's axes are an input)
BACKWARD_OPSET = 18


class Backward:
    """Emits the backward nodes of one Gradient node and names their values."""

    def __init__(self, ctx, gradient_node, scope):
        self.ctx = ctx
        self.graphs = ctx.graphs
        self.scope = self.graphs.nested_scope(scope)
        self.prefix = gradient_node.name or "Gradient"
        self.counter = itertools.count()

    def fresh(self, hint: str) -> str:
        """A value name no forward value has."""
        while True:
            name = f"{self.prefix}/{hint}_{next(self.counter)}"
            if self.scope.lookup(name) is None:
                return name

    def value(self, name: str) -> Value:
        return self.scope.lookup(name)

    def node(self, op_type: str, *inputs: str, **attrs) -> str:
        """Convert one backward ONNX node; returns its output's name."""
        out = self.fresh(op_type.lower())
        node = helper.make_node(op_type, list(inputs), [out], name=out, **attrs)
        self.graphs.convert_node(node, self.scope)
        return out

    def const(self, array) -> str:
        name = self.fresh("const")
        self.scope[name] = self.ctx.const(np.asarray(array))
        return name

    def scalar(self, number: float, like: str) -> str:
        """A 0-d constant of ``like``'s dtype."""
        return self.const(np.array(number, dtype=numpy_dtype(self.value(like).dtype)))

    def filled(self, number: float, like: str) -> str:
        """A tensor of ``like``'s shape and dtype holding ``number`` everywhere."""
        return self.node("Expand", self.scalar(number, like), self.node("Shape", like))

    def collapse(self, grad: str, like: str) -> str:
        """``grad`` summed down to ``like``'s shape (the gradient of broadcasting ``like``)."""
        g, x = self.value(grad), self.value(like)
        if g.shape is not None and g.shape == x.shape:
            return grad
        name = self.fresh("collapse")
        self.scope[name] = self.ctx.emit(make_call("collapse_sum_like", self.ctx.expr(g), self.ctx.expr(x)),
                                         "grad")
        return name

    def add(self, a: str | None, b: str) -> str:
        return b if a is None else self.node("Add", a, b)


#: (backward, forward node, gradient of its output, attributes) -> gradients of its inputs (None: none)
Rule = Callable[[Backward, object, str, dict], list]


def _attrs(node) -> dict:
    out = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        out[attr.name] = value.decode() if isinstance(value, bytes) else value
    return out


# ---------------------------------------------------------------- elementwise


def _identity(b, node, gy, attrs):
    return [gy]


def _add(b, node, gy, attrs):
    x, z = node.input
    return [b.collapse(gy, x), b.collapse(gy, z)]


def _sub(b, node, gy, attrs):
    x, z = node.input
    return [b.collapse(gy, x), b.collapse(b.node("Neg", gy), z)]


def _mul(b, node, gy, attrs):
    x, z = node.input
    return [b.collapse(b.node("Mul", gy, z), x), b.collapse(b.node("Mul", gy, x), z)]


def _div(b, node, gy, attrs):
    """d(x/z)/dz = -(x/z)/z: reuses the forward output."""
    x, z = node.input
    y = node.output[0]
    return [b.collapse(b.node("Div", gy, z), x),
            b.collapse(b.node("Neg", b.node("Div", b.node("Mul", gy, y), z)), z)]


def _neg(b, node, gy, attrs):
    return [b.node("Neg", gy)]


def _relu(b, node, gy, attrs):
    x = node.input[0]
    return [b.node("Where", b.node("Greater", x, b.scalar(0, x)), gy, b.scalar(0, gy))]


def _sigmoid(b, node, gy, attrs):
    y = node.output[0]
    return [b.node("Mul", gy, b.node("Mul", y, b.node("Sub", b.scalar(1, y), y)))]


def _tanh(b, node, gy, attrs):
    y = node.output[0]
    return [b.node("Mul", gy, b.node("Sub", b.scalar(1, y), b.node("Mul", y, y)))]


def _exp(b, node, gy, attrs):
    return [b.node("Mul", gy, node.output[0])]


def _log(b, node, gy, attrs):
    return [b.node("Div", gy, node.input[0])]


def _sqrt(b, node, gy, attrs):
    y = node.output[0]
    return [b.node("Div", b.node("Mul", gy, b.scalar(0.5, y)), y)]


def _abs(b, node, gy, attrs):
    return [b.node("Mul", gy, b.node("Sign", node.input[0]))]


def _sum(b, node, gy, attrs):
    return [b.collapse(gy, x) for x in node.input]


def _mean(b, node, gy, attrs):
    share = b.node("Div", gy, b.scalar(len(node.input), gy))
    return [b.collapse(share, x) for x in node.input]


# ---------------------------------------------------------------- shapes


def _reshape(b, node, gy, attrs):
    """Reshape, Flatten, Squeeze, Unsqueeze: the gradient takes the input's shape back."""
    return [b.node("Reshape", gy, b.node("Shape", node.input[0]))] + [None] * (len(node.input) - 1)


def _transpose(b, node, gy, attrs):
    perm = attrs.get("perm")
    if perm is None:
        return [b.node("Transpose", gy)]            # reversing the axes is its own inverse
    return [b.node("Transpose", gy, perm=[int(p) for p in np.argsort(perm)])]


# ---------------------------------------------------------------- reductions


def _reduced_axes(b, node, attrs):
    """The axes of a ReduceSum/ReduceMean: its second input (opset 13/18 on) or attribute."""
    if len(node.input) > 1 and node.input[1]:
        axes = b.value(node.input[1]).int_values()
        if axes is None:
            raise UnsupportedOpError(f"{node.op_type} node {node.name!r}: axes computed at run time")
        return list(axes)
    return list(attrs.get("axes") or [])


def _reduce_sum(b, node, gy, attrs):
    """Each input element gets the gradient of the sum it went into: the
    gradient with the reduced axes put back as 1s, expanded to the input."""
    x = node.input[0]
    axes = _reduced_axes(b, node, attrs)
    if not axes and attrs.get("noop_with_empty_axes", 0):
        return [gy] + [None] * (len(node.input) - 1)
    g = gy
    if not attrs.get("keepdims", 1) and axes:
        g = b.node("Unsqueeze", gy, b.const(np.array(axes, np.int64)))
    return [b.node("Expand", g, b.node("Shape", x))] + [None] * (len(node.input) - 1)


def _reduce_mean(b, node, gy, attrs):
    """The sum's gradient times (output size / input size), the mean's 1 / count."""
    grads = _reduce_sum(b, node, gy, attrs)
    x, y = node.input[0], node.output[0]
    if grads[0] is gy:
        return grads
    to = helper.np_dtype_to_tensor_dtype(numpy_dtype(b.value(x).dtype))
    ratio = b.node("Div", b.node("Cast", b.node("Size", y), to=to), b.node("Cast", b.node("Size", x), to=to))
    return [b.node("Mul", grads[0], ratio)] + grads[1:]


# ---------------------------------------------------------------- products


def _swap_last(b, name: str) -> str:
    rank = b.value(name).ndim
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    return b.node("Transpose", name, perm=perm)


def _matmul(b, node, gy, attrs):
    """dA = dY @ B^T, dB = A^T @ dY, each summed over the batch axes it was
    broadcast along; a 1-D operand is made a matrix first (as MatMul does)."""
    x, z = node.input
    ranks = (b.value(x).ndim, b.value(z).ndim)
    if min(ranks) < 0:
        raise UnsupportedOpError(f"MatMul node {node.name!r}: the gradient needs the operands' ranks, "
                                 f"which are unknown")
    x2 = b.node("Unsqueeze", x, b.const(np.array([0], np.int64))) if ranks[0] == 1 else x
    z2 = b.node("Unsqueeze", z, b.const(np.array([1], np.int64))) if ranks[1] == 1 else z
    axes = ([-2] if ranks[0] == 1 else []) + ([-1] if ranks[1] == 1 else [])
    if ranks == (1, 1):
        axes = [0, 1]
    g = b.node("Unsqueeze", gy, b.const(np.array(axes, np.int64))) if axes else gy
    gx = b.collapse(b.node("MatMul", g, _swap_last(b, z2)), x2)
    gz = b.collapse(b.node("MatMul", _swap_last(b, x2), g), z2)
    if x2 != x:
        gx = b.node("Reshape", gx, b.node("Shape", x))
    if z2 != z:
        gz = b.node("Reshape", gz, b.node("Shape", z))
    return [gx, gz]


def _gemm(b, node, gy, attrs):
    """Y = alpha * A' @ B' + beta * C with A' = A or A^T (B' likewise)."""
    x, z = node.input[0], node.input[1]
    c = node.input[2] if len(node.input) > 2 and node.input[2] else None
    trans_a, trans_b = attrs.get("transA", 0), attrs.get("transB", 0)
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    g = gy if alpha == 1.0 else b.node("Mul", gy, b.scalar(alpha, gy))
    # dA' = g @ B'^T and dB' = A'^T @ g; a transposed operand takes the transposed gradient
    if not trans_a:
        gx = b.node("MatMul", g, z if trans_b else b.node("Transpose", z))
    else:
        gx = b.node("MatMul", b.node("Transpose", z) if trans_b else z, b.node("Transpose", g))
    if not trans_b:
        gz = b.node("MatMul", x if trans_a else b.node("Transpose", x), g)
    else:
        gz = b.node("MatMul", b.node("Transpose", g), b.node("Transpose", x) if trans_a else x)
    grads = [gx, gz]
    if c is not None:
        gc = gy if beta == 1.0 else b.node("Mul", gy, b.scalar(beta, gy))
        grads.append(b.collapse(gc, c))
    return grads


RULES: dict[str, Rule] = {
    "Identity": _identity, "Add": _add, "Sub": _sub, "Mul": _mul, "Div": _div, "Neg": _neg,
    "Relu": _relu, "Sigmoid": _sigmoid, "Tanh": _tanh, "Exp": _exp, "Log": _log, "Sqrt": _sqrt, "Abs": _abs,
    "Sum": _sum, "Mean": _mean,
    "Reshape": _reshape, "Flatten": _reshape, "Squeeze": _reshape, "Unsqueeze": _reshape,
    "Transpose": _transpose,
    "ReduceSum": _reduce_sum, "ReduceMean": _reduce_mean,
    "MatMul": _matmul, "Gemm": _gemm,
}


# ---------------------------------------------------------------- the pass over the graph


def _path(nodes, gradient_node, xs: list[str], leaves: set[str]) -> tuple[list, set[str]]:
    """The forward nodes before ``gradient_node`` that read a value
    depending on an x, in order, and the names of those values. A node
    computing an x or z is not on it: those are independent variables."""
    active = set(xs)
    path = []
    for node in nodes:
        if node is gradient_node:
            break
        if any(name in active for name in node.input) and not any(o in leaves for o in node.output):
            path.append(node)
            active.update(o for o in node.output if o and o not in leaves)
    return path, active


def _rule(ctx, node, gradient_label: str) -> Rule:
    rule = RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if rule is None:
        label = f"{node.op_type} node {node.name!r}" if node.name else f"{node.op_type} node"
        raise UnsupportedOpError(f"{gradient_label}: no derivative for {label} (domain {node.domain or 'ai.onnx'}) "
                                 f"on the path from xs to y; relaxpack differentiates {', '.join(sorted(RULES))}")
    return rule


def _check_float(value: Value | None, name: str, gradient_label: str) -> None:
    if value is None:
        raise RelaxpackError(f"{gradient_label}: {name!r} is not a value of this graph (Gradient differentiates "
                             f"the nodes of its own graph)")
    if value.dtype is None or not numpy_dtype(value.dtype).kind == "f":
        raise UnsupportedOpError(f"{gradient_label}: {name!r} is {value.dtype or 'of unknown type'}; gradients "
                                 f"are taken of and with respect to float tensors")


def differentiate(ctx, gradient_node, xs: list[str], zs: list[str], y: str) -> list[Value]:
    """The gradients of sum(y) with respect to each of ``xs`` (see the module docstring)."""
    label = ctx.node_label() + f" (domain {DOMAIN}, opset {ctx.opsets.get(DOMAIN, 1)})"
    scope = ctx.scope
    for name in (y, *xs):
        _check_float(scope.lookup(name), name, label)
    path, active = _path(ctx.graphs.node_lists[-1], gradient_node, xs, set(xs) | set(zs))
    saved = ctx.opsets
    ctx.opsets = {**saved, "": BACKWARD_OPSET}
    b = Backward(ctx, gradient_node, scope)
    try:
        grads: dict[str, str] = {}
        if y in active:
            grads[y] = b.filled(1, y)
        for node in reversed(path):
            gy = grads.get(node.output[0]) if node.output else None
            if any(grads.get(o) for o in node.output[1:]):
                raise UnsupportedOpError(f"{label}: no derivative for the second and later outputs of "
                                         f"{node.op_type} node {node.name!r}")
            if gy is None:
                continue
            for name, g in zip(node.input, _rule(ctx, node, label)(b, node, gy, _attrs(node))):
                if g is not None and name and name in active:
                    grads[name] = b.add(grads.get(name), g)
        results = [grads[x] if x in grads else b.filled(0, x) for x in xs]
        return [b.value(name) for name in results]
    except RelaxpackError as err:
        if str(err).startswith(label):
            raise
        raise type(err)(f"{label}, differentiating: {err}") from err
    finally:
        ctx.opsets = saved
        ctx.node, ctx.scope = gradient_node, scope


__all__ = ["BACKWARD_OPSET", "RULES", "differentiate"]
