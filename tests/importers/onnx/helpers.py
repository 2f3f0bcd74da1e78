"""Helpers the converter tests share: one-node models, checks against
onnxruntime or onnx's reference evaluator, and ONNX backend node tests with
shape-like graph inputs frozen into initializers."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import relaxpack
from relaxpack.errors import RelaxpackError
from relaxpack.runtime import VirtualMachine

from .backend_case import assert_close, node_cases

ort.set_default_logger_severity(3)
INT64_MAX, INT64_MIN = 2 ** 63 - 1, -2 ** 63


def rand(*shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------- helpers


def one_node(op, feeds, *, inputs=None, consts=None, attrs=None, opset=17, outputs=1, sym=None):
    """A one-node model: graph inputs like ``feeds`` (``sym`` overrides their
    shapes, e.g. ``{"x": ["batch", 3]}``), initializers ``consts``, node
    inputs ``inputs`` (default: the feeds, then the consts; "" omits one)."""
    consts = consts or {}
    names = list(inputs) if inputs is not None else [*feeds, *consts]
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                  (sym or {}).get(n, a.shape)) for n, a in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in consts.items()]
    outs = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    graph = helper.make_graph([node], "g", graph_inputs, [onnx.ValueInfoProto(name=o) for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def check(op, feeds, *, more=(), ref="ort", dims=None, **kwargs):
    """Build a one-node model (see :func:`one_node`), import and build it once, and
    compare its outputs with the reference at ``feeds`` and each of ``more``."""
    return check_model(one_node(op, feeds, **kwargs), feeds, *more, ref=ref, dims=dims)


def check_model(model, *feeds_list, ref="ort", dims=None):
    """Import and build ``model`` once; run it at each feeds against ``ref``:
    "ort", "onnx" (the reference evaluator) or a function feeds -> outputs."""
    mod = relaxpack.from_onnx(model, dims=dims)
    vm = VirtualMachine(relaxpack.build(mod))
    names = [o.name for o in model.graph.output]
    for feeds in feeds_list:
        got = vm.run(feeds)
        want = reference(model, feeds, ref)
        for name, expected in zip(names, want):
            assert_close(got[name], expected, 1e-6, 1e-7, name)
    return mod


def check_levels(model, feeds_list, levels=(0, 2), rtol=1e-5, atol=1e-5):
    """Import ``model`` once (no dims) and build it at each of ``levels``;
    compare every output (shape and values) with onnxruntime at each feeds
    of ``feeds_list``. Returns the IRModule."""
    mod = relaxpack.from_onnx(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    vms = [(level, VirtualMachine(relaxpack.build(mod, opt_level=level))) for level in levels]
    for feeds in feeds_list:
        want = session.run(None, feeds)
        for level, vm in vms:
            got = vm.run(feeds)
            for (name, value), expected in zip(got.items(), want):
                where = f"{name} at -O{level}, {[np.shape(a) for a in feeds.values()]}"
                assert_close(value, expected, rtol, atol, where)
    return mod


def reference(model, feeds, ref) -> list:
    if ref == "ort":
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    if ref == "onnx":
        return ReferenceEvaluator(model).run(None, feeds)
    return list(ref(feeds))


def run_backend(name: str, freeze=()) -> None:
    """Run ONNX's backend node test ``name``; the graph inputs in ``freeze``
    (shapes, axes, ...) become initializers with the data set's values,
    the way exported models carry them."""
    case = node_cases()[name]
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    graph_inputs = [i.name for i in model.graph.input]
    sets = [([_array(t) for t in inputs], [_array(t) for t in outputs]) for inputs, outputs in case.data_sets]
    for n in freeze:
        k = graph_inputs.index(n)
        assert all(np.array_equal(s[0][k], sets[0][0][k]) for s in sets), f"{name}: {n} varies"
        model.graph.initializer.append(numpy_helper.from_array(sets[0][0][k], n))
    keep = [i for i in model.graph.input if i.name not in freeze]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    for inputs, expected in sets:
        feeds = {n: a for n, a in zip(graph_inputs, inputs) if n not in freeze}
        got = vm.run(feeds)
        for out, want in zip(model.graph.output, expected):
            assert_close(got[out.name], want, case.rtol, case.atol, name)


def _array(t):
    return numpy_helper.to_array(t) if isinstance(t, onnx.TensorProto) else np.asarray(t)


def i64(*values):
    return np.array(values, np.int64)


def check_runtime(model, feeds_list, errors=(), ref="ort"):
    """Import and build ``model`` once (its shape-like operands are graph
    inputs, known only at run time); compare it with ``ref`` at each feeds of
    ``feeds_list`` (different values give different output shapes), then
    check that each ``(feeds, pattern)`` of ``errors`` (invalid values) is a
    RelaxpackError whose message matches ``pattern``. Returns the IRModule."""
    mod = relaxpack.from_onnx(model)
    assert "R.call_packed" in mod.script(), "the operand was expected to be read at run time"
    vm = VirtualMachine(relaxpack.build(mod))
    names = [o.name for o in model.graph.output]
    for feeds in feeds_list:
        got = vm.run(feeds)
        for name, expected in zip(names, reference(model, feeds, ref)):
            assert_close(got[name], expected, 1e-6, 1e-7, name)
    for feeds, pattern in errors:
        with pytest.raises(RelaxpackError, match=pattern):
            vm.run(feeds)
    return mod


def output_sinfo(mod, index=0):
    """The struct info of output ``index`` of ``mod``'s main function."""
    body = mod["main"].body.body
    return (body.fields[index] if hasattr(body, "fields") else body).struct_info
